"""What the checks read: the run's records (a few columns), its TensorBoard scalars, and what the config adds.

Why: every check works from the same two tables, read once through the existing readers (a local path or gs://),
so a health check costs about one read of the columns, however many checks run.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from nbtools import metrics as _metrics
from nbtools import storage, trajectories
from nbtools.errors import NotFoundError

__all__ = ["RunData", "load", "COLUMNS", "generation_limit"]

COLUMNS = ["step", "idx", "prompt", "response", "reward", "generation_length"]


@dataclass
class RunData:
    """The records (``COLUMNS``), the scalars pivoted to one row per step, and what the config says."""

    label: str
    records: pd.DataFrame
    scalars: pd.DataFrame  # index step, one column per tag (NaN where not logged)
    run: Any = None  # the trajectories Run (for sampling a few records' per-token arrays), None without dumps
    limit: int | None = None  # generation limit (max_new_tokens) from the config
    mix: list[dict[str, Any]] | None = None  # the reward functions from the config (None: what the run shows)
    answer_tag: str = "answer"
    think_tag: str = "think"
    notes: list[str] = field(default_factory=list)

    @property
    def meta(self) -> pd.DataFrame:
        """The records without their text columns (cheap to filter: no strings are copied)."""
        if "_meta" not in self.__dict__:
            self.__dict__["_meta"] = self.records[["step", "idx", "reward", "generation_length"]]
        return self.__dict__["_meta"]

    @property
    def steps(self) -> list[int]:
        """Training steps seen in the records or the train/* scalars (step 0 is validation before training)."""
        s = set(self.records["step"].unique().tolist()) if len(self.records) else set()
        if not self.scalars.empty:
            s |= {int(x) for x in self.scalars.index if x > 0}
        return sorted(s)

    def scalar(self, *tags: str) -> pd.Series:
        """The first logged tag of ``tags`` as a per-step series (train steps only; empty when none is logged)."""
        for t in tags:
            if t in self.scalars.columns:
                s = self.scalars[t].dropna()
                return s[s.index > 0] if not t.startswith("validation") else s
        return pd.Series(dtype="float64")


def generation_limit(cfg) -> int | None:
    """The run's generation limit (``max_new_tokens``) as the trainer resolves it from ``cfg``."""
    if cfg.grpo.max_new_tokens:
        return int(cfg.grpo.max_new_tokens)
    if cfg.data.dataset == cfg.rehearsal.task:  # the rehearsal's generated task: its own limit
        return int(cfg.rehearsal.max_new_tokens)
    return int(cfg.model.max_total_sequence_length)  # NeMo-RL: max_new_tokens: ${policy.max_total_sequence_length}


def _label(path) -> str:
    return path if isinstance(path, str) else os.fspath(path)


def load(run, *, config=None, cache: bool = True) -> RunData:
    """Read what the checks need from ``run``: an exp dir, a log_dir or a ``gs://`` URL of either, an ``Experiment``
    (its ``logs_url``) or an open ``trajectories.Run``.

    Raises:
        NotFoundError: the path holds neither trajectory dumps nor TensorBoard scalars.
    """
    answer_tag, think_tag = "answer", "think"
    if config is not None:
        from nbtools import rewards

        mix = rewards.trained_with(config)
        for item in mix:  # the tags the mix parses, so the answer column and the format check agree with it
            kw = item.get("kwargs") or {}
            answer_tag = kw.get("answer_tag", kw.get("tag", answer_tag))
            think_tag = kw.get("think_tag", think_tag)
    else:
        mix = None
    if hasattr(run, "logs_url") and not isinstance(run, (str, os.PathLike)):
        run = run.logs_url
    traj = run if isinstance(run, (trajectories.Run, trajectories.VerlRun)) else None
    where = (traj.remote or str(getattr(traj, "log_dir", None) or traj.path)) if traj is not None else _label(run)
    if traj is None:
        try:
            traj = trajectories.open_run(run, cache=cache, think_tag=think_tag, answer_tag=answer_tag)
        except NotFoundError:
            if not storage.exists(str(run)):
                raise
            traj = None
    records = pd.DataFrame({c: pd.Series(dtype=t) for c, t in
                            zip(COLUMNS, ["int64", "int64", "str", "str", "float64", "float64"], strict=True)})
    if traj is not None and traj.steps:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # skipped lines are the reader's report, not the health check's
            records = traj.read(columns=COLUMNS)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tb = _metrics.read_tensorboard(where)
    except NotFoundError:
        tb = pd.DataFrame(columns=_metrics.COLUMNS)
    if len(tb):
        first = tb["run"].iloc[0]  # one run: a second run found in the same dir ("#2") is another run's curve
        tb = tb[tb["run"] == first]
        scalars = tb.pivot_table(index="step", columns="tag", values="value", aggfunc="last")
    else:
        scalars = pd.DataFrame(index=pd.Index([], dtype="int64", name="step"))
    if traj is None and scalars.empty:
        raise NotFoundError(f"expected trajectory dumps or TensorBoard scalars under {where}, found neither",
                            fix="pass the run's log_dir (the experiment's logs URL) or one exp_NNN dir inside it; a run "
                                "that just started writes its first step after its first rollout")
    limit = generation_limit(config) if config is not None else None
    return RunData(where, records, scalars, traj, limit, mix, answer_tag, think_tag)


def per_step(records: pd.DataFrame, values: np.ndarray | pd.Series) -> pd.Series:
    """Mean of ``values`` (aligned with ``records``) per step."""
    return pd.Series(np.asarray(values, dtype="float64"), index=records["step"].to_numpy()).groupby(level=0).mean()
