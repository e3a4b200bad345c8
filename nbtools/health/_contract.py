r"""The reward contract, checked before a launch: what the reward functions parse vs what the prompt asks for.

Why: the costliest GRPO failure is silent — the prompt asks for ``\boxed{}``, the reward parses ``<answer>`` tags,
every reward is 0 and the run bills its GPUs for nothing. Two checks catch it before a node is paid for: the formats
must meet (a reward that reads ``<answer>`` cannot score a ``\boxed{}`` answer), and a handful of responses written
the way the prompt asks — right and wrong answers — must not all score 0, nor all score the same (GRPO learns from
differences). Where a previous run's real responses and their answers are known, they are scored too.

Example:
    >>> asks = nbtools.health.format_asked_by(open("cot.txt").read())     # \boxed{}
    >>> nbtools.health.reward_contract([{"name": "math_expr", "weight": 1.0}], asks=asks).ok
    False
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, Literal

import numpy as np

__all__ = ["ResponseFormat", "ContractResult", "reward_contract", "format_asked_by", "parse_targets",
           "nemo_rl_prompt", "SAMPLE_PROBLEMS"]

# A handful of problems with known answers, to write responses in the format a math prompt asks for.
SAMPLE_PROBLEMS: tuple[tuple[str, str], ...] = (
    ("What is 2 + 3?", "5"), ("What is 12 times 3?", "36"), ("What is 100 - 58?", "42"),
    ("Simplify 6/8.", "\\frac{3}{4}"), ("What is 7 squared?", "49"), ("What is 81 divided by 9?", "9"),
)

# What each built-in reward reads (nbtools.rewards._builtins, NeMo-RL's environments/rewards.py semantics):
# (kind, kwarg holding the tag, default tag); "boxed" reads \boxed{}; length_penalty reads no answer at all.
_READS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "format": (("tag", "answer_tag", "answer"),),  # (+0.25 for a think tag: shaping, not an answer)
    "math_expr": (("tag", "tag", "answer"),),
    "exact_answer": (("tag", "tag", "answer"), ("boxed", "", "")),
    "exact_alnum": (("tag", "answer_tag", "answer"),),
    "length_penalty": (),
    "verl_gsm8k": (("gsm8k", "", ""),),  # verl v0.7.0 verl/utils/reward_score/gsm8k.py (strict): the last "#### N"
}


def target_label(kind: str, tag: str) -> str:
    """How a parse target reads in messages: ``<answer>``, ``\\boxed{}`` or ``#### N``."""
    return {"tag": f"<{tag}>", "boxed": "\\boxed{}", "gsm8k": "#### N"}[kind]


@dataclass(frozen=True)
class ResponseFormat:
    r"""The answer format a prompt asks for: ``<think>…</think> <answer>…</answer>`` tags, or ``\boxed{}``."""

    kind: Literal["tags", "boxed"]
    answer_tag: str = "answer"
    think_tag: str | None = "think"
    source: str = ""

    def render(self, think: str, answer: str) -> str:
        """A response in this format (the rehearsal's tag format is exactly ``task.format_response``)."""
        if self.kind == "boxed":
            return f"{think} So the final answer is \\boxed{{{answer}}}."
        head = f"<{self.think_tag}> {think} </{self.think_tag}> " if self.think_tag else f"{think} "
        return f"{head}<{self.answer_tag}> {answer} </{self.answer_tag}>"

    def label(self) -> str:
        return "\\boxed{}" if self.kind == "boxed" else f"<{self.answer_tag}>…</{self.answer_tag}>"


def format_asked_by(template: str, *, source: str = "") -> ResponseFormat | None:
    r"""What a prompt template asks the model to answer in (``\boxed{}`` or answer tags); None when it says neither.

    Example:
        >>> format_asked_by("Output your answer inside of \\boxed{{}} tags.:\n{}").kind
        'boxed'
    """
    if re.search(r"\\+boxed", template):
        return ResponseFormat("boxed", source=source)
    tags = re.findall(r"<([A-Za-z_][\w-]*)>", template)
    closed = [t for t in tags if f"</{t}>" in template]
    if not closed:
        return None
    answer = next((t for t in closed if "answer" in t.lower()), closed[-1])
    think = next((t for t in closed if t != answer and ("think" in t.lower() or "reason" in t.lower())), None)
    return ResponseFormat("tags", answer, think, source=source)


@lru_cache(maxsize=1)
def _prompts() -> dict[str, Any]:
    return json.loads((resources.files("nbtools") / "data" / "nemo_rl_prompts.json").read_text())


def nemo_rl_prompt(path: str) -> str | None:
    """The text of one of NeMo-RL's shipped prompt files (``examples/prompts/cot.txt``…), or None if not known.

    Source: ``nbtools/data/nemo_rl_prompts.json`` (NVIDIA-NeMo/RL v0.7.0 ``examples/prompts/``; cot.txt is the same
    in v0.5.0).
    """
    prompts = _prompts()["prompts"]
    key = path.removeprefix("/opt/nemo-rl/").removeprefix("./")
    return prompts.get(key)


def parse_targets(spec: Sequence[Mapping[str, Any]] | None) -> list[tuple[str, str]] | None:
    """[(kind, tag)] the reward functions read (``("tag", "answer")``, ``("boxed", "")``, ``("gsm8k", "")``); None
    when unknown.

    Rewards with weight 0 and ``length_penalty`` read no answer; a custom reward's format is not known here.
    """
    if not spec:
        return None
    out: list[tuple[str, str]] = []
    known = False
    for item in spec:
        if float(item.get("weight", 1.0) or 0.0) == 0.0:
            continue
        reads = _READS.get(str(item.get("name")))
        if reads is None:
            continue
        known = True
        kw = item.get("kwargs") or {}
        for kind, key, default in reads:
            t = (kind, str(kw.get(key, default)) if kind == "tag" else "")
            if t not in out:
                out.append(t)
    return out if known else None


@dataclass(frozen=True)
class ContractResult:
    """The reward contract: ``ok`` unless the formats miss each other or every score is 0 or the same."""

    ok: bool
    asks_for: str | None
    parses: list[str]
    scores: list[float]
    real_scores: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    fix: str = ""

    @property
    def message(self) -> str:
        return "; ".join(self.problems) if self.problems else (
            f"the rewards parse {' / '.join(self.parses) or 'their own format'}, the prompt asks for "
            f"{self.asks_for or 'an unknown format'}; scores on responses in that format: "
            f"{sorted(set(round(s, 3) for s in self.scores + self.real_scores))}")


def _wrong(truth: str) -> str:
    return str(int(truth) + 1) if truth.isdigit() else "0" if truth != "0" else "1"


def reward_contract(spec: Sequence[Mapping[str, Any]], *, asks: ResponseFormat | None,
                    problems: Sequence[tuple[str, str]] = SAMPLE_PROBLEMS,
                    real: Sequence[tuple[str, str]] = (), mix=None) -> ContractResult:
    """Check a reward mix against the format a prompt asks for, by reading both and by scoring responses.

    Args:
        spec: the reward functions, NeMo-RL's shape (``[{name, weight, kwargs}]``).
        asks: what the prompt asks the model to answer in (``format_asked_by``); None: not known (only real
            responses, if any, are scored).
        problems: (prompt, answer) pairs; for each, a right and a wrong response in the asked format are scored.
        real: (response, answer) pairs from a previous run or a baseline evaluation, scored as they are.
        mix: the built ``RewardMix`` (default: ``nbtools.rewards.combine(spec)``; pass it when a custom module had to
            be imported to build it).

    Example:
        >>> res = nbtools.health.reward_contract(cfg.rehearsal.reward_functions, asks=nbtools.health.ResponseFormat("tags"))
        >>> res.ok, res.scores[:2]
        (True, [1.0, 0.2])
    """
    from nbtools.rewards import combine

    mix = mix if mix is not None else combine(list(spec))
    targets = parse_targets(spec)
    parses = [target_label(k, a) for k, a in targets] if targets else []
    found: list[str] = []
    if asks is not None and targets:
        meets = [t for t in targets if (t[0] == "boxed" and asks.kind == "boxed")
                 or (t[0] == "tag" and asks.kind == "tags" and t[1] in (asks.answer_tag, asks.think_tag))]
        if not meets:
            found.append(f"the reward functions parse {' / '.join(parses)} but the prompt asks for {asks.label()}"
                         + (f" ({asks.source})" if asks.source else ""))
    scores: list[float] = []
    if asks is not None:
        for _prompt, truth in problems:
            for answer in (truth, _wrong(truth)):
                scores.append(float(mix(truth, asks.render("Let me work it out step by step.", answer))[0]))
    real_scores = [float(mix(truth, resp)[0]) for resp, truth in real]
    pooled = np.array(scores + real_scores, dtype=float)
    if len(pooled):
        if np.allclose(pooled, 0.0):
            found.append(f"every one of {len(pooled)} responses in the format the prompt asks for scores 0 "
                         "(right and wrong answers alike): the run would train on nothing")
        elif np.ptp(pooled) == 0:
            found.append(f"every one of {len(pooled)} responses scores {pooled[0]:g}, right and wrong answers alike: "
                         "GRPO's advantages would all be 0")
    fix = ""
    if found:
        want = asks.label() if asks is not None else "the prompt's format"
        fix = (f"use reward functions that parse {want} (e.g. `exact_answer` reads \\boxed{{}} and <answer> tags; "
               "`math_expr`/`exact_alnum` read <answer> only), or a prompt that asks for what they parse "
               "(`data.prompt_file`)")
    return ContractResult(not found, asks.label() if asks is not None else None, parses, scores, real_scores,
                          found, fix)
