"""TEST DOUBLE of verl's GSM8K rule, ``verl/utils/reward_score/gsm8k.py`` at verl v0.7.0, written anew (NOT verl's
code, and not nbtools' ``verl_gsm8k``: the stand-in must be able to disagree with nbtools' re-scoring).

Behaviour at v0.7.0: only the solution's last 300 characters are searched; ``strict`` takes the last ``#### `` followed
by digits, ``-``, ``.`` or ``,`` and drops commas (and ``$``); ``flexible`` takes the last such number anywhere, skipping
``""`` and ``"."``; no answer scores ``0``, a match equal to the ground truth (a string compare) scores ``score`` (1.0),
any other ``format_score`` (0.0).
"""

from __future__ import annotations

CLIP = 300
_NUMBER = set("0123456789.,")


def _numbers(text: str, after: str = "") -> list[str]:
    """Every maximal ``-?[0-9.,]+`` run, in order; with ``after``, only runs that directly follow it (scanned by hand,
    not by verl's regex)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if after:
            j = text.find(after, i)
            if j < 0:
                break
            start = j + len(after)
        else:
            start = i
            while start < n and not (text[start] in _NUMBER or (text[start] == "-" and start + 1 < n
                                                                 and text[start + 1] in _NUMBER)):
                start += 1
            if start >= n:
                break
        end = start + 1 if start < n and text[start] == "-" else start
        while end < n and text[end] in _NUMBER:
            end += 1
        if end > start and text[start:end] != "-":
            out.append(text[start:end])
        i = max(end, start + 1) if not after else max(end, j + 1)
    return out


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    assert method in ("strict", "flexible")
    text = solution_str[-CLIP:] if len(solution_str) > CLIP else solution_str
    if method == "strict":
        found = _numbers(text, after="#### ")
        return found[-1].replace(",", "").replace("$", "") if found else None
    for answer in reversed(_numbers(text)):
        if answer not in ("", "."):
            return answer
    return _numbers(text)[0] if _numbers(text) else None


def compute_score(solution_str: str, ground_truth: str, method: str = "strict", format_score: float = 0.0,
                  score: float = 1.0):
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return 0
    return score if answer == ground_truth else format_score
