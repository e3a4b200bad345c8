"""Several runs on one set of axes, TensorBoard's way: raw and smoothed values, by step, relative time or wall time.

Why: choosing between two learning rates or seeing whether a relaunch behaves like the first attempt means
overlaying runs of one or several experiments. This module returns the numbers (one tidy frame); ``nbtools.curves
.overlay`` draws them. Smoothing is TensorBoard's debiased EMA (``nbtools.metrics.ema``); ``relative`` is hours since
the run's first logged value (TensorBoard's "Relative" axis), ``wall`` the time it was logged.

Example:
    >>> runs = nbtools.overlay.read([cfg, "runs/lr-3e-6/logs"])
    >>> nbtools.curves.overlay(runs)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from nbtools import metrics as _metrics
from nbtools.errors import ConfigError, Fix

__all__ = ["read", "latest", "COLUMNS", "X_AXES"]

COLUMNS = ["run", "metric", "tag", "step", "value", "smoothed", "wall_time", "relative"]
X_AXES = ("step", "relative", "wall")


def _label(source, frame_run: str) -> str:
    """``<experiment>/exp_NNN`` for an experiment, ``<dir above logs>/exp_NNN`` for a path: never an absolute path."""
    name = getattr(source, "name", None)
    if name is not None and hasattr(source, "logs_url"):
        return f"{name}/{frame_run}"
    parts = [p for p in Path(str(source)).parts if p not in ("/", "logs", "tensorboard") and not p.startswith("exp_")]
    parts = [p for p in parts if not p.startswith("events.out")]
    return f"{parts[-1]}/{frame_run}" if parts else str(frame_run)


def _frame(source) -> tuple[pd.DataFrame, object]:
    if hasattr(source, "logs_url"):  # an Experiment (nbtools.config.load)
        return _metrics.read_tensorboard(source.logs_url), source
    if not isinstance(source, (str, os.PathLike)):
        raise ConfigError(f"expected an experiment (nbtools.config.load), a log dir, an exp_NNN dir or a verl log, "
                          f"got {type(source).__name__}",
                          fix=Fix("pass cfg or a path, e.g. nbtools.overlay.read([cfg, 'runs/other/logs'])",
                                  cli="pass EXPERIMENT.yaml files or log dirs"))
    text = os.fspath(source)
    if text.endswith((".yaml", ".yml")):
        from nbtools import config

        cfg = config.load(text)
        return _metrics.read_tensorboard(cfg.logs_url), cfg
    return _metrics.read_runs([text]), text


def read(sources: object | Sequence[object], *, metrics: Iterable[str] = ("reward", "generation_length", "kl"),
         smoothing: float = 0.6) -> pd.DataFrame:
    """The runs' curves in one frame, each value with its smoothed value and its three x coordinates.

    Args:
        sources: experiments (``cfg``), experiment files, log dirs (their latest run), ``exp_NNN`` dirs or verl logs;
            one or a list.
        metrics: friendly names (``nbtools.metrics.NAME_MAP``) or raw tags.
        smoothing: TensorBoard's EMA weight in [0, 1); 0 keeps the raw values.

    Returns:
        DataFrame[``COLUMNS``]: ``run`` is ``<experiment>/exp_NNN`` (a second run of the same name gets ``#2``),
        ``wall_time`` seconds since the epoch (NaN for verl logs), ``relative`` hours since the run's first value.

    Raises:
        ConfigError: a source of the wrong type. NotFoundError: a path that does not exist.

    Example:
        >>> runs = nbtools.overlay.read([cfg, "runs/lr-3e-6/logs"], smoothing=0.8)
        >>> runs.groupby(["run", "metric"]).smoothed.last()
    """
    if not 0 <= smoothing < 1:
        raise ConfigError(f"expected smoothing in [0, 1), got {smoothing}",
                          fix=Fix("pass smoothing=0.6 (TensorBoard's default) or 0 for the raw values",
                                  cli="use a smoothing of 0.6 (TensorBoard's default) or 0 for the raw values"))
    items = list(sources) if isinstance(sources, (list, tuple)) else [sources]
    parts, seen = [], {}
    for source in items:
        df, origin = _frame(source)
        for run, g in df.groupby("run", sort=False):
            label = _label(origin, str(run))
            seen[label] = seen.get(label, 0) + 1
            label = label if seen[label] == 1 else f"{label}#{seen[label]}"
            start = g["wall_time"].min()
            for name in metrics:
                sel = _metrics.select(g, name).sort_values("step")
                if sel.empty:
                    continue
                v = sel["value"].to_numpy(float)
                parts.append(pd.DataFrame({
                    "run": label, "metric": name, "tag": sel["tag"].to_numpy(), "step": sel["step"].to_numpy(),
                    "value": v, "smoothed": _metrics.ema(v, smoothing) if smoothing else v,
                    "wall_time": sel["wall_time"].to_numpy(float),
                    "relative": (sel["wall_time"].to_numpy(float) - start) / 3600.0}))
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)
    out.attrs["smoothing"] = smoothing
    return out[COLUMNS]


def latest(runs: pd.DataFrame) -> pd.DataFrame:
    """The last step of each (run, metric): raw and smoothed value side by side (what the hover shows at the end).

    Example:
        >>> nbtools.overlay.latest(nbtools.overlay.read([cfg, "runs/other/logs"]))
    """
    if runs.empty:
        return pd.DataFrame(columns=["run", "metric", "step", "value", "smoothed"])
    last = runs.groupby(["run", "metric"], sort=False).tail(1)  # read() keeps each run's steps in order
    return last[["run", "metric", "step", "value", "smoothed"]].round({"value": 4, "smoothed": 4}).reset_index(drop=True)


