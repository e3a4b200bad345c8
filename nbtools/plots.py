"""The graphs people watch during GRPO: reward/accuracy, mean generation length, KL, timing and throughput.

Why: a thin matplotlib layer over ``nbtools.metrics`` frames — every function returns the Figure and saves a
PNG when asked, so notebooks and reports show the same picture.

Example:
    >>> df = nbtools.metrics.read_tensorboard(cfg.log_dir)
    >>> fig = nbtools.plots.training_curves(df, save=cfg.run_dir / "figures" / "training_curves.png")
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from nbtools import metrics as _metrics
from nbtools._labels import panel_title, run_label
from nbtools.metrics import ema

__all__ = ["ema", "training_curves", "timing", "watch", "watch_interactive", "save_figure", "run_label", "panel_title"]



def save_figure(fig, path: str | os.PathLike) -> Path:
    """Save a PNG atomically (temp file + rename); returns the path."""
    from nbtools import _figure

    return _figure.save(fig, path)


def _baseline_for(baseline, name: str):
    if isinstance(baseline, Mapping):
        return baseline.get(name)
    return baseline if name in ("reward", "accuracy") else None


def _panel(ax, df: pd.DataFrame, name: str, smoothing: float, baseline, colors: dict,
           experiment: str | None = None) -> bool:
    sel = _metrics.select(df, name)
    drew = False
    for run, g in sel.groupby("run", sort=False):
        g = g.sort_values("step")
        c = colors.setdefault(run, f"C{len(colors) % 10}")
        if len(g) > 2 and smoothing > 0:
            ax.plot(g["step"], g["value"], color=c, alpha=0.25, lw=1)
            ax.plot(g["step"], ema(g["value"].to_numpy(), smoothing), color=c, lw=1.8, label=run_label(run, experiment))
        else:
            ax.plot(g["step"], g["value"], color=c, lw=1.8, marker="o", ms=3, label=run_label(run, experiment))
        drew = True
    if name == "reward":  # validation accuracy on the same axes, dashed with markers
        for run, g in _metrics.select(df, "accuracy").groupby("run", sort=False):
            g = g.sort_values("step")
            c = colors.setdefault(run, f"C{len(colors) % 10}")
            ax.plot(g["step"], g["value"], color=c, ls="--", marker="o", ms=4, label=f"{run_label(run, experiment)} (val accuracy)")
            drew = True
    base = _baseline_for(baseline, name)
    if base is not None:
        ax.axhline(float(base), color="0.3", ls=":", lw=1.5, label=f"baseline {float(base):.3g}")
    ax.set_title(panel_title(df, name), fontsize=10)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    if drew:
        ax.legend(fontsize=7, loc="best")
    else:
        ax.text(0.5, 0.5, f"no {name} logged yet", ha="center", va="center", transform=ax.transAxes, color="0.5")
    return drew


def training_curves(df: pd.DataFrame, *, metrics: Sequence[str] = ("reward", "generation_length", "kl"),
                    smoothing: float = 0.6, baseline: float | Mapping[str, float] | None = None,
                    timing_panels: bool = False, title: str | None = None, save: str | os.PathLike | None = None,
                    experiment: str | None = None):
    """Reward (+ validation accuracy), mean generation length and KL, one line per run, EMA-smoothed.

    Args:
        df: a ``nbtools.metrics`` frame (one or several runs; NeMo-RL and verl names both work).
        metrics: friendly names (see ``nbtools.metrics.NAME_MAP``) or raw tags, one panel each.
        smoothing: EMA weight in [0, 1); the raw values are drawn faintly behind.
        baseline: a horizontal line on the reward panel (a float, e.g. the baseline model's accuracy) or a
            {metric: value} dict for any panel.
        timing_panels: add step time and throughput panels.
        title: figure title (default: the run names).
        save: PNG path (parent dirs created, written atomically).
        experiment: the experiment's name, shown in the legends with each run (``exp_NNN``).

    Returns:
        matplotlib Figure.

    Example:
        >>> fig = nbtools.plots.training_curves(df, baseline=0.42, save="figures/curves.png")
    """
    from nbtools import _figure

    names = list(metrics) + (["step_time", "throughput"] if timing_panels else [])
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = _figure.new(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    colors: dict = {}
    for ax, name in zip(axes.flat, names, strict=False):
        _panel(ax, df, name, smoothing, baseline, colors, experiment)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    runs = list(dict.fromkeys(df["run"])) if not df.empty else []
    fig.suptitle(title or (", ".join(map(str, runs[:4])) or "no metrics yet"), fontsize=11)
    fig.tight_layout()
    if save is not None:
        save_figure(fig, save)
    return fig


def timing(df: pd.DataFrame, *, smoothing: float = 0.6, save: str | os.PathLike | None = None,
           experiment: str | None = None):
    """Step time, generation time and throughput per step (where the time goes), EMA-smoothed over the faint raw
    values (single slow steps — a checkpoint save, a validation — would otherwise hide the trend).

    Example:
        >>> nbtools.plots.timing(df, save=cfg.run_dir / "figures" / "timing.png")
    """
    return training_curves(df, metrics=("step_time", "generation_time", "throughput"), smoothing=smoothing,
                           title="timing and throughput", save=save, experiment=experiment)


def watch(cfg, *, until_done: bool = True, interval: float = 15.0, timeout: float | None = None,
          smoothing: float = 0.6, baseline=None, save: str | os.PathLike | None = None):
    """Redraw the training curves of ``cfg``'s run until its Ray job finishes; returns the last matplotlib Figure.

    :func:`watch_interactive` is the same loop showing (and returning) ``nbtools.curves.figure``'s plotly Figure.

    Waits on the job (``Job.wait(timeout=interval)``), not on a sleep: it redraws every ``interval`` seconds
    while the job runs and returns as soon as it ends — at once when it has already finished, or when the job
    cannot be found (e.g. the cluster is gone: the curves are then drawn once from the files).

    Args:
        cfg: the experiment (``nbtools.config.load``): its ``log_dir``, ``dashboard_url``, ``submission_id``.
        until_done: False draws once and returns.
        interval: seconds between redraws while the job runs.
        timeout: stop watching after this many seconds (None: until the job ends).
        smoothing / baseline: as in :func:`training_curves`.
        save: PNG path (default ``cfg.run_dir / "figures" / "training_curves.png"``).

    Example:
        >>> fig = nbtools.plots.watch(cfg)          # returns when the job is done
    """
    return _watch(cfg, until_done=until_done, interval=interval, timeout=timeout, smoothing=smoothing,
                  baseline=baseline, save=save, interactive=False)


def watch_interactive(cfg, *, until_done: bool = True, interval: float = 15.0, timeout: float | None = None,
                      smoothing: float = 0.6, baseline=None, save: str | os.PathLike | None = None):
    """As :func:`watch`, showing ``nbtools.curves.figure`` (plotly: hover, zoom, a smoothing slider) redrawn in place
    in the same output; the PNG is still written. Returns the last plotly Figure.

    Example:
        >>> fig = nbtools.plots.watch_interactive(cfg, interval=30)
    """
    return _watch(cfg, until_done=until_done, interval=interval, timeout=timeout, smoothing=smoothing,
                  baseline=baseline, save=save, interactive=True)


def _watch(cfg, *, until_done: bool, interval: float, timeout: float | None, smoothing: float, baseline,
           save: str | os.PathLike | None, interactive: bool):
    import time

    save = save if save is not None else Path(cfg.run_dir) / "figures" / "training_curves.png"
    handle, fig, job = None, None, None
    if until_done:
        job = _find_job(cfg)
    deadline = None if timeout is None else time.monotonic() + timeout
    def draw(handle):
        df = _read(cfg, job)
        fig = training_curves(df, smoothing=smoothing, baseline=baseline, save=save, title=f"{cfg.name}",
                              experiment=cfg.name)
        if not interactive:
            return fig, _show(fig, handle)
        from nbtools import curves

        live = curves.figure(df, smoothing=smoothing, baseline=baseline, title=f"{cfg.name}", experiment=cfg.name)
        _replace(curves.bundle(live, Path(save).read_bytes()))
        return live, None

    while True:
        fig, handle = draw(handle)
        if job is None or (deadline is not None and time.monotonic() >= deadline):
            return fig
        wait = interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic()))
        if _job_done(job, wait):
            return draw(handle)[0]


def _read(cfg, job) -> pd.DataFrame:
    """The run's scalars from where it logs (a local path or gs://); empty only while its job has not logged yet."""
    from nbtools import storage
    from nbtools.errors import NotFoundError

    if storage.exists(cfg.logs_url):
        return _metrics.read_tensorboard(cfg.logs_url)
    if job is not None:  # the job runs but has not created its log_dir yet
        return pd.DataFrame(columns=_metrics.COLUMNS)
    raise NotFoundError(f"expected the run's TensorBoard logs at {cfg.logs_url}, found nothing there, and no running "
                        f"job {cfg.submission_id!r} that could write them",
                        fix="launch the run first (notebook 03), or check logging.log_dir / storage in the experiment")


def _find_job(cfg):
    """The run's Ray job while it runs; None when it ended, was never submitted here, or the cluster is gone
    (then the curves are drawn once from the files)."""
    from nbtools import jobs
    from nbtools.errors import NotFoundError, NotReadyError

    try:
        job = jobs.attach(cfg.dashboard_url, cfg.submission_id)
        return None if job.status().is_terminal() else job
    except (NotFoundError, NotReadyError):
        return None


def _job_done(job, seconds: float) -> bool:
    """True when the job ended — or can no longer be asked (the cluster went away): draw the final curves then."""
    from nbtools.errors import NbtoolsError

    try:
        job.wait(timeout=max(seconds, 0.1), raise_on_failure=False)
        return True
    except TimeoutError:
        try:
            return job.status().is_terminal()  # still running: keep watching
        except NbtoolsError:
            return True


def _replace(bundle: dict) -> None:
    """Show ``bundle`` as the cell's only output, replacing the previous one.

    Not ``update_display``: JupyterLab hands an updated output to the renderer already on screen, and the plotly
    renderer ignores a model once it has drawn a graph (``renderModel`` returns early), so the curves would freeze.
    ``clear_output(wait=True)`` makes JupyterLab build a new renderer for the next output, without a flicker.
    """
    try:
        from IPython import get_ipython
        from IPython.display import clear_output, display

        if get_ipython() is not None:
            clear_output(wait=True)
            display(bundle, raw=True)
    except ImportError:
        pass


def _show(fig, handle, raw: bool = False):
    try:
        from IPython import get_ipython
        from IPython.display import display

        if get_ipython() is None:
            return handle
        if handle is None:
            return display(fig, display_id=True, raw=raw)
        handle.update(fig, raw=raw)
    except ImportError:
        pass
    return handle


def attempts_timeline(run, df: pd.DataFrame | None = None, *, smoothing: float = 0.6,
                      save: str | os.PathLike | None = None):
    """The attempts of a supervised run over its reward curve: each attempt's span of steps, the steps redone after
    each loss (hatched) and where each attempt resumed.

    Args:
        run: ``nbtools.launch.supervise``'s result (or a list of ``nbtools.launch.Attempt``).
        df: a ``nbtools.metrics`` frame of the run (its reward is drawn; None draws the spans alone).
        smoothing: EMA weight of the reward line.
        save: PNG path (written atomically).

    Example:
        >>> run = nbtools.launch.supervise(cfg)
        >>> nbtools.plots.attempts_timeline(run, nbtools.metrics.read_tensorboard(cfg.logs_url))
    """
    import matplotlib as mpl

    from nbtools import _figure

    attempts = list(getattr(run, "attempts", run))
    fig, ax = _figure.new(figsize=(9, 3.6))
    if df is not None and not df.empty:
        r = _metrics.select(df, "reward")
        if not r.empty:
            ax.plot(r.step, r.value, color="0.75", lw=0.8)
            ax.plot(r.step, ema(r.value.to_numpy(), smoothing), color="black", lw=1.4, label="reward (train)")
    colors = mpl.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, a in enumerate(attempts):
        start = a.resumed_from or 0
        end = a.last_step if a.last_step is not None else start
        c = colors[i % len(colors)]
        ax.axvspan(start, max(end, start + 0.5), color=c, alpha=0.15,
                   label=f"attempt {a.n}: {a.cause or a.status}" + (f", resumed from step {start}" if start else ""))
        if start:
            ax.axvline(start, color=c, ls="--", lw=1)
        nxt = attempts[i + 1].resumed_from if i + 1 < len(attempts) else None
        if a.steps_redone and end > (nxt or 0):
            cost = f"{a.steps_redone} steps redone" + (f", {a.gpu_hours_lost:.2f} GPU-h" if a.gpu_hours_lost else "")
            ax.axvspan(nxt or 0, end, facecolor="none", edgecolor=c, hatch="///", lw=0, label=f"attempt {a.n}: {cost}")
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.set_title(f"attempts ({len(attempts)})", fontsize=11)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    if save is not None:
        save_figure(fig, save)
    return fig


__all__ += ["attempts_timeline", "overlay", "Overlay"]


class Overlay:
    """Several runs' curves as the notebook shows them (plotly, interactive in JupyterLab); ``fig`` and ``runs`` (the
    ``nbtools.overlay.read`` frame) stay reachable for more."""

    def __init__(self, fig, runs: pd.DataFrame):
        self.fig, self.runs = fig, runs

    def _repr_mimebundle_(self, **kwargs):
        from nbtools import curves

        return curves.bundle(self.fig)

    def __repr__(self) -> str:
        return f"Overlay({', '.join(self.fig.layout.meta['runs'])})"


def overlay(runs: pd.DataFrame, *, x: str = "step", title: str | None = None) -> Overlay:
    """Overlay several runs (a ``nbtools.overlay.read`` frame): raw and smoothed values in the hover, buttons for
    the step / relative / wall-time axis. A thin layer over ``nbtools.curves.overlay``.

    Example:
        >>> nbtools.plots.overlay(nbtools.overlay.read([cfg, "runs/other/logs"]))
    """
    from nbtools import curves

    return Overlay(curves.overlay(runs, x=x, title=title), runs)
