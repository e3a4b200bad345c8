"""The rehearsal task: "max of 3 digits", generated in code, with a train split and a held-out split.

Why below the rehearsal (``nbtools.rehearsal.task`` re-exports it): the rewards grade its runs
(``rewards.ground_truth``), and the rehearsal trains on it; the task itself needs neither.

A rule (not a lookup table) a tiny model can learn, so held-out problems improve too. Prompts are chat-templated
exactly as NeMo-RL stores them in ``content[0][0]``; responses use ``<think> ... </think> <answer> X </answer>``.

Example:
    >>> train, held_out = make_split(cfg)
    >>> held_out[0].prompt, held_out[0].ground_truth
    ('<|user|> max 3 0 6 <|assistant|>', '6')
"""

from __future__ import annotations

import functools
import itertools
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nbtools.errors import ConfigError

if TYPE_CHECKING:
    from nbtools.config import Experiment

__all__ = [
    "Problem",
    "USER_TAG",
    "ASSISTANT_TAG",
    "NUM_DIGITS",
    "make_split",
    "held_out_problems",
    "ground_truth_for",
    "format_prompt",
    "format_response",
    "render_answer",
    "baseline_dir",
]

USER_TAG = "<|user|>"
ASSISTANT_TAG = "<|assistant|>"
NUM_DIGITS = 3
_ALL = [tuple(t) for t in itertools.product(range(10), repeat=NUM_DIGITS)]  # 1000 distinct problems
_PROMPT_RE = re.compile(r"max((?:\s+\d)+)")


@dataclass(frozen=True)
class Problem:
    """One verifiable problem; ``prompt`` is the chat-templated user prompt (NeMo-RL's ``content[0][0]``)."""

    id: str
    prompt: str
    ground_truth: str

    @property
    def digits(self) -> tuple[int, ...]:
        return _digits(self.prompt)


@functools.lru_cache(maxsize=4096)
def _digits(prompt: str) -> tuple[int, ...]:  # the warm start asks for them ~10k times
    return tuple(int(d) for d in _PROMPT_RE.search(prompt).group(1).split())


def format_prompt(digits: tuple[int, ...] | list[int]) -> str:
    """The chat-templated prompt for a digit tuple (same text the tokenizer's chat template renders)."""
    return f"{USER_TAG} max {' '.join(str(d) for d in digits)} {ASSISTANT_TAG}"


def format_response(think: str, answer: str) -> str:
    """A response in the rewarded format: ``<think> ... </think> <answer> X </answer>``."""
    return f"<think> {think} </think> <answer> {answer} </answer>"


def render_answer(response: str, answer_format: str = "tags") -> str:
    """The response text in the run's answer format: as generated (``tags``), or with the answer written as GSM8K's
    solutions end, ``#### X`` (``gsm8k``: the ``<answer>`` token reads ``####``, the ``</answer>`` token nothing).

    Why: a stand-in trainer that scores as verl does on GSM8K (the last ``#### N``) sees, stores and scores the same
    text; the tokens the policy generated and learns from are unchanged.

    Example:
        >>> render_answer("<think> 3 0 6 </think> <answer> 6 </answer>", "gsm8k")
        '<think> 3 0 6 </think> #### 6'
    """
    if answer_format == "tags":
        return response
    if answer_format != "gsm8k":
        raise ConfigError(f"rehearsal.answer_format: {answer_format!r} is not one of 'tags', 'gsm8k'; fix: use 'tags' "
                          "(<answer> X </answer>) or 'gsm8k' (#### X)")
    words = {"<answer>": "####", "</answer>": None}
    return " ".join(w for w in (words.get(t, t) for t in response.split()) if w is not None)


def ground_truth_for(prompt: str) -> str:
    """Derive the correct answer from a prompt (used to re-score stored trajectories).

    Example:
        >>> ground_truth_for("<|user|> max 3 0 6 <|assistant|>")
        '6'
    """
    m = _PROMPT_RE.search(prompt)
    if not m:
        raise ValueError(
            f"expected a rehearsal prompt like '{format_prompt((3, 0, 6))}', got {prompt[:80]!r}; "
            "fix: pass content[0][0] of a rehearsal trajectory (nbtools.rehearsal task 'max3')"
        )
    return str(max(int(d) for d in m.group(1).split()))


def _problem(digits: tuple[int, ...]) -> Problem:
    return Problem(id="max3-" + "".join(map(str, digits)), prompt=format_prompt(digits), ground_truth=str(max(digits)))


def make_split(cfg: Experiment) -> tuple[list[Problem], list[Problem]]:
    """Train and held-out problems, disjoint, from a seeded shuffle of all 1000 digit triples.

    Example:
        >>> train, held_out = make_split(cfg)
        >>> len(train), len(held_out)
        (800, 200)
    """
    r = cfg.rehearsal
    if r.num_train < 1 or r.num_test < 1 or r.num_train + r.num_test > len(_ALL):
        raise ConfigError(
            f"rehearsal.num_train + rehearsal.num_test: {r.num_train} + {r.num_test} must be >= 1 each and at most "
            f"{len(_ALL)} (distinct 3-digit triples); fix: e.g. num_train: 800, num_test: 200"
        )
    order = list(_ALL)
    random.Random(f"max3-split-{cfg.grpo.seed}").shuffle(order)
    held = [_problem(t) for t in order[: r.num_test]]
    train = [_problem(t) for t in order[r.num_test : r.num_test + r.num_train]]
    return train, held


def held_out_problems(cfg: Experiment) -> list[Problem]:
    """The held-out split (never trained on): what notebook 07 evaluates baseline and fine-tuned models on."""
    return make_split(cfg)[1]


def baseline_dir(cfg: Experiment) -> Path:
    """``<run_dir>/baseline_hf``: the warm-started policy (before any RL step) as a HuggingFace directory."""
    return cfg.run_dir / "baseline_hf"
