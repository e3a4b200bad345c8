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
    raw: pd.DataFrame | None = None  # the scalars as logged (tag, step, value), non-finite values included
    read: set[str] = field(default_factory=set)  # what the running check read: tags, "reward" (nbtools.health._evidence)

    @property
    def reward(self) -> pd.Series:
        """The records' rewards (NaN where a record's reward is NaN, null or not a number: evidence, not a gap)."""
        self.read.add("reward")
        return self.meta["reward"]

    def logged(self, tag: str) -> pd.DataFrame:
        """Every value ``tag`` logged (``step``, ``value``; train steps only, except validation tags), finite or not."""
        if self.raw is None or not len(self.raw):
            return pd.DataFrame({"step": pd.Series(dtype="int64"), "value": pd.Series(dtype="float64")})
        rows = self.raw[self.raw["tag"] == tag]
        return rows[["step", "value"]] if tag.startswith("validation") else rows.loc[rows["step"] > 0, ["step", "value"]]

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
        if self.raw is not None and len(self.raw):
            s |= {int(x) for x in self.raw["step"].unique() if x > 0}
        return sorted(s)

    def scalar(self, *tags: str) -> pd.Series:
        """The first logged tag of ``tags`` as a per-step series of its finite values (train steps only; empty when
        none is logged). A tag logged only as NaN is still the one chosen: its values are evidence (``_evidence``).
        A tag with ``*`` is a pattern (``val-core/*/acc/mean@*``: verl names it by data source and sample count);
        its first logged match in sorted order is chosen."""
        import fnmatch

        logged = set(self.raw["tag"].unique()) if self.raw is not None and len(self.raw) else set(self.scalars.columns)
        for pattern in tags:
            t = next(iter(sorted(fnmatch.filter(logged, pattern))), None) if "*" in pattern else pattern
            if t in logged:
                self.read.add(t)
                if t not in self.scalars.columns:
                    return pd.Series(dtype="float64")
                s = self.scalars[t].dropna()
                return s[s.index > 0] if not t.startswith(("validation", "val-")) else s
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


def _latest_run(tb: pd.DataFrame) -> tuple[pd.DataFrame, float | None]:
    """The scalars of the newest run in the first run's directory (``exp``, ``exp#2``…: a relaunch that started over
    is a new run; its elder is another run's curve), and its start (wall time) when it is such a relaunch."""
    base = str(tb["run"].iloc[0]).split("#")[0]
    mine = tb[tb["run"].astype(str).str.split("#").str[0] == base]
    starts = mine.groupby("run")["wall_time"].min()
    newest = starts.idxmax() if starts.notna().any() else mine["run"].iloc[0]
    return mine[mine["run"] == newest], (float(starts[newest]) if "#" in str(newest) else None)


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
    traj = run if not isinstance(run, (str, os.PathLike)) and hasattr(run, "read") and hasattr(run, "steps") else None
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
    notes: list[str] = []
    if len(tb):
        tb, started = _latest_run(tb)
        if started is not None and hasattr(traj, "stale_steps") and len(records):
            stale = traj.stale_steps(started)  # a relaunch into the same dirs (verl's) leaves the first run's dumps
            if stale:
                records = records[~records["step"].isin(stale)].reset_index(drop=True)
                notes.append(f"left out the dumps of steps {stale[0]}..{stale[-1]}: written before the relaunch")
        finite = tb[np.isfinite(tb["value"].to_numpy(dtype="float64"))]  # non-finite ones stay in ``raw``: evidence
        scalars = finite.pivot_table(index="step", columns="tag", values="value", aggfunc="last")
        scalars = scalars if len(finite) else pd.DataFrame(index=pd.Index([], dtype="int64", name="step"))
    else:
        scalars = pd.DataFrame(index=pd.Index([], dtype="int64", name="step"))
    if traj is None and tb.empty:
        raise NotFoundError(f"expected trajectory dumps or TensorBoard scalars under {where}, found neither",
                            fix="pass the run's log_dir (the experiment's logs URL) or one exp_NNN dir inside it; a run "
                                "that just started writes its first step after its first rollout")
    limit = generation_limit(config) if config is not None else None
    return RunData(where, records, scalars, traj, limit, mix, answer_tag, think_tag, notes,
                   raw=tb[["tag", "step", "value"]].reset_index(drop=True))


def per_step(records: pd.DataFrame, values: np.ndarray | pd.Series) -> pd.Series:
    """Mean of ``values`` (aligned with ``records``) per step."""
    return pd.Series(np.asarray(values, dtype="float64"), index=records["step"].to_numpy()).groupby(level=0).mean()
