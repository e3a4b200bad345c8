"""One record as the reward saw it: tag spans from the reward functions' own parser, per-function rewards, tokens.

Why: "what did the format reward judge?" is answered by showing exactly the spans ``nbtools.rewards.tag_span``
finds (NeMo-RL's greedy ``<tag>([\\s\\S]*)</tag>``), so a malformed output shows its stray ``</think>`` where the
reward saw it, not where a lenient display would guess.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from nbtools.rewards import RewardMix, Segment, tag_segments

__all__ = ["Segment", "RecordView", "tag_segments", "record_view", "reward_breakdown", "token_table"]


def reward_breakdown(mix: RewardMix | None, ground_truth: str | None, response: str | None,
                     stored: float | None = None) -> pd.DataFrame:
    """One row per reward function: weight (renormalised), score, weighted score and correctness flag.

    Functions that compare with the ground truth score NaN when it is unknown (``ground_truth=None``).

    Example:
        >>> mix = nbtools.rewards.combine([{"name": "format", "weight": 0.2}, {"name": "exact_alnum", "weight": 0.8}])
        >>> reward_breakdown(mix, "7", "<think>a</think><answer>7</answer>")["weighted"].sum()
        1.0
    """
    cols = ["function", "weight", "score", "weighted", "correct"]
    if mix is None:
        return pd.DataFrame(columns=cols)
    rows = []
    for c, w in zip(mix.components, mix.weights, strict=True):
        needs_truth = c.name not in ("format", "length_penalty")
        if ground_truth is None and needs_truth:
            rows.append((c.name, float(w), np.nan, np.nan, None))
            continue
        score, correct = c("" if ground_truth is None else ground_truth, response or "")
        rows.append((c.name, float(w), score, float(w) * score, correct))
    df = pd.DataFrame(rows, columns=cols)
    df.attrs["total"] = float(df["weighted"].sum()) if df["weighted"].notna().all() else float("nan")
    df.attrs["stored"] = stored
    return df


def token_table(rec: dict, decode: Callable[[list[int]], list[str]] | None = None) -> pd.DataFrame | None:
    """Per-token view of a record (position, token_id, mask, generation/prev log-probs, advantage; ``text`` when
    ``decode`` turns ids into their text), or None when the record has no per-token arrays (NeMo-RL ≤ v0.5 or
    ``arrays=False``)."""
    ids = rec.get("token_ids")
    if ids is None:
        return None
    n = len(ids)
    cols = {"position": np.arange(n), "token_id": np.asarray(ids)}
    if decode is not None:
        cols["text"] = list(decode([int(i) for i in ids]))
    for key, name in (("token_loss_mask", "mask"), ("generation_logprobs", "logprob"),
                      ("prev_logprobs", "prev_logprob"), ("advantages", "advantage")):
        v = rec.get(key)
        cols[name] = np.asarray(v, dtype=float) if v is not None and len(v) == n else np.full(n, np.nan)
    return pd.DataFrame(cols)


@dataclass
class RecordView:
    """Everything the record panel shows for one sample (data only; rendering is ``_render.record_html``)."""

    step: int
    idx: int
    prompt: str | None
    response: str | None
    reward: float
    advantage: float
    generation_length: float
    env_observation: str | None
    think: str | None
    answer: str | None
    group: int | None = None
    baseline: float | None = None
    segments: list[Segment] = field(default_factory=list, repr=False)
    prompt_segments: list[Segment] = field(default_factory=list, repr=False)
    rewards: pd.DataFrame | None = field(default=None, repr=False)
    tokens: pd.DataFrame | None = field(default=None, repr=False)


def record_view(rec: dict, *, think_tag: str = "think", answer_tag: str = "answer", mix: RewardMix | None = None,
                ground_truth: Callable[[str], Any] | None = None, pattern: re.Pattern | None = None,
                group: int | None = None, baseline: float | None = None,
                decode: Callable[[list[int]], list[str]] | None = None) -> RecordView:
    """Build the record panel's data from a record dict (``Run.record(step, idx)``); ``decode`` (ids → texts) shows
    the token strip as text.

    Example:
        >>> view = record_view(run.record(5, 0), mix=nbtools.rewards.combine(nbtools.rewards.trained_with(cfg)))
        >>> view.rewards
    """
    from nbtools.rewards import split_think_answer

    prompt, response = rec.get("prompt"), rec.get("response")
    think, answer = split_think_answer(response, think_tag, answer_tag) if isinstance(response, str) else (None, None)
    truth = None
    if ground_truth is not None and isinstance(prompt, str):
        try:
            truth = str(ground_truth(prompt))
        except Exception:  # a prompt the function does not know: functions needing the truth show NaN
            truth = None
    return RecordView(
        step=int(rec["step"]), idx=int(rec["idx"]), prompt=prompt, response=response, reward=float(rec["reward"]),
        advantage=float(rec.get("advantage", np.nan)), generation_length=float(rec.get("generation_length", np.nan)),
        env_observation=rec.get("env_observation"), think=think, answer=answer, group=group, baseline=baseline,
        segments=tag_segments(response, think_tag=think_tag, answer_tag=answer_tag, pattern=pattern),
        prompt_segments=tag_segments(prompt, think_tag="", answer_tag="", pattern=pattern),
        rewards=reward_breakdown(mix, truth, response, float(rec["reward"])) if mix is not None else None,
        tokens=token_table(rec, decode),
    )


def columns_of(views: Sequence[RecordView]) -> pd.DataFrame:
    """The views as a small frame (for the side-by-side comparison's export)."""
    return pd.DataFrame([{k: getattr(v, k) for k in ("step", "idx", "reward", "advantage", "answer", "response")}
                         for v in views])
