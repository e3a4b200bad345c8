"""Tag extraction in linear time (NeMo-RL's greedy ``<tag>([\\s\\S]*)</tag>`` search, without regex backtracking)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["tag_span", "Segment", "tag_segments", "extract_answer", "split_think_answer", "last_boxed", "gsm8k_answer"]

_GSM8K_ANSWER = re.compile(r"#### (-?[0-9.,]+)")  # no nested quantifier: linear on any input


@lru_cache(maxsize=64)
def _tags(tag: str) -> tuple[str, str]:
    return f"<{tag}>", f"</{tag}>"


def tag_span(text: str, tag: str) -> tuple[int, int] | None:
    """Return the (start, end) of the content NeMo-RL's greedy regex ``<tag>([\\s\\S]*)</tag>`` would capture.

    The regex matches from the first ``<tag>`` that has a ``</tag>`` after it to the LAST ``</tag>``; if the first
    opening tag has no closing tag after it, no later one has either. Two ``find`` calls give the same answer in
    O(n) on adversarial input (``"<answer>" * 10**6`` makes the regex quadratic).
    """
    if not isinstance(text, str):
        return None
    open_tag, close_tag = _tags(tag)
    start = text.find(open_tag)
    if start < 0:
        return None
    start += len(open_tag)
    end = text.rfind(close_tag, start)
    if end < 0:
        return None
    return start, end


def _content(text: str, tag: str) -> str | None:
    span = tag_span(text, tag)
    return None if span is None else text[span[0] : span[1]]


def extract_answer(response: str, tag: str = "answer") -> str | None:
    """The stripped text between the first ``<tag>`` and the last ``</tag>``; without them, the number after the
    last ``#### `` (GSM8K's answer line, commas dropped); else None.

    Why: graders, the trajectory explorer and re-scoring must agree on what "the answer" is, for NeMo-RL's tagged
    responses and for the ``#### N`` answers a verl run on GSM8K is scored by.

    Example:
        >>> extract_answer("<think>4+4</think> <answer> 8 </answer>"), extract_answer("4+4 = 8. #### 8")
        ('8', '8')
    """
    content = _content(response, tag)
    if content is not None:
        return content.strip()
    if not isinstance(response, str):
        return None
    return gsm8k_answer(response)


def gsm8k_answer(text: str) -> str | None:
    """The number after the last ``#### `` in ``text``, commas dropped (verl v0.7.0 ``gsm8k.py``'s strict
    extraction); None when there is none.

    Example:
        >>> gsm8k_answer("48 + 24 = 72 clips. #### 1,072")
        '1072'
    """
    found = _GSM8K_ANSWER.findall(text)
    return found[-1].replace(",", "") if found else None


def split_think_answer(
    response: str, think_tag: str = "think", answer_tag: str = "answer"
) -> tuple[str | None, str | None]:
    """Split a response into its (think, answer) contents, each stripped, None where the tags are missing.

    Why: the trajectory table shows reasoning and answer as separate columns.

    Example:
        >>> split_think_answer("<think>compare</think> <answer>7</answer>")
        ('compare', '7')
    """
    think = _content(response, think_tag)
    return (None if think is None else think.strip()), extract_answer(response, answer_tag)


def last_boxed(text: str) -> str | None:
    r"""Content of the last ``\boxed{...}`` with balanced braces, or None (unbalanced or absent)."""
    if not isinstance(text, str):
        return None
    token = "\\boxed{"
    start = text.rfind(token)
    if start < 0:
        return None
    depth, begin = 1, start + len(token)
    for i in range(begin, len(text)):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[begin:i]
    return None


@dataclass(frozen=True)
class Segment:
    """A run of text and what it is: any of ``think``/``answer`` (tag content), ``tag`` (the tag itself),
    ``match`` (a search hit)."""

    text: str
    kinds: frozenset[str]


def tag_segments(text: str | None, *, think_tag: str = "think", answer_tag: str = "answer",
                 pattern: re.Pattern | None = None) -> list[Segment]:
    """Split ``text`` at the tag spans the reward functions see and at search matches.

    Example:
        >>> [(s.text, sorted(s.kinds)) for s in tag_segments("<answer>7</answer>")]
        [('<answer>', ['answer', 'tag']), ('7', ['answer']), ('</answer>', ['answer', 'tag'])]
    """
    if not isinstance(text, str) or not text:
        return []
    marks: list[tuple[int, int, str]] = []
    for tag, kind in ((think_tag, "think"), (answer_tag, "answer")):
        span = tag_span(text, tag) if tag else None
        if span is None:
            continue
        a, b = span
        opened, closed = a - len(f"<{tag}>"), b + len(f"</{tag}>")
        marks += [(opened, closed, kind), (opened, a, "tag"), (b, closed, "tag")]
    if pattern is not None:
        marks += [(m.start(), m.end(), "match") for m in pattern.finditer(text) if m.end() > m.start()]
    cuts = sorted({0, len(text), *(p for m in marks for p in m[:2])})
    out = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        kinds = frozenset(k for s, e, k in marks if s <= a and b <= e)
        if out and out[-1].kinds == kinds:
            out[-1] = Segment(out[-1].text + text[a:b], kinds)
        else:
            out.append(Segment(text[a:b], kinds))
    return out
