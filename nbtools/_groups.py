"""GRPO groups of dumped samples: which rows share one prompt's baseline, whatever order the trainer wrote them in.

Why: a dump's row order is not its groups. verl v0.7.0 reorders the batch before dumping it
(``verl/trainer/ppo/ray_trainer.py`` at v0.7.0: ``fit`` calls ``self._balance_batch(batch, ...)`` with the default
``trainer.balance_batch: true``, its comment "This usually changes the order of data in the `batch`", before
``_log_rollout_data``), so a prompt's ``rollout.n`` samples are scattered through ``{step}.jsonl``; verl 0.9.x's V1
trainer dumps ``uid`` = ``{sample}_{rollout}_{output}`` (``verl/trainer/ppo/v1/trainer_base.py`` at v0.9.1,
``_log_rollout_data``: "Sort by uid key ({sample}_{rollout}_{output})", ``key.rsplit("_", 2)``), one uid per sample, so
the group is the uid's sample part. verl's advantage groups by the batch's own ``uid`` (``core_algos.py``
``compute_grpo_outcome_advantage(index=uid)``), which v0.7.0 does not dump: there the prompt text (decoded, special
tokens skipped) within a step stands for it. Two identical prompts in one batch are then one group (verl gives them
two uids): the only case this cannot tell apart.

NeMo-RL writes each group's samples next to each other (``repeat_interleave``), where the prompt rule gives the same
groups as before.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["uid_sample", "group_numbers", "group_ids"]


def uid_sample(uid: object) -> str:
    """The sample part of a verl V1 uid (``"{sample}_{rollout}_{output}"`` -> ``sample``); any other uid whole.

    Example:
        >>> uid_sample("6f1c-2a_0_3")
        '6f1c-2a'
    """
    text = str(uid)
    parts = text.rsplit("_", 2)
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
        return parts[0]
    return text


def _keys(df: pd.DataFrame) -> pd.Series:
    """The group key of each row: the uid's sample part where every row has a uid, else the prompt text."""
    if "uid" in df and len(df) and df["uid"].notna().all():
        return df["uid"].map(uid_sample)
    if "prompt" not in df:
        return pd.Series(np.zeros(len(df), dtype=int), index=df.index)
    return df["prompt"].astype(object).where(df["prompt"].notna(), "\0none")


def group_ids(df: pd.DataFrame) -> np.ndarray:
    """A run-wide group id per row (ids in order of first appearance; a group never spans two steps).

    Example:
        >>> group_ids(pd.DataFrame({"step": [1, 1, 1, 1], "prompt": ["a", "b", "a", "b"]}))
        array([0, 1, 0, 1])
    """
    if not len(df):
        return np.zeros(0, dtype=int)
    steps = df["step"].to_numpy() if "step" in df else np.zeros(len(df), dtype=int)
    keys = _keys(df).to_numpy()
    codes, _ = pd.factorize(pd.MultiIndex.from_arrays([steps, keys]) if len(df) else keys, use_na_sentinel=False)
    return codes.astype(int)


def group_numbers(df: pd.DataFrame) -> np.ndarray:
    """The group number of each row within its step (0-based, in order of first appearance in the step)."""
    ids = group_ids(df)
    if not len(ids):
        return ids
    steps = df["step"].to_numpy() if "step" in df else np.zeros(len(df), dtype=int)
    ranks = pd.Series(ids).groupby(steps).rank(method="dense").to_numpy()
    return (ranks - 1).astype(int)
