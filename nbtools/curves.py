"""Interactive training curves (plotly): hover, zoom, a TensorBoard-style smoothing slider, live redraws.

Why: the curves people watch all day need what TensorBoard gives — hover for exact values, zoom into a window of
steps, a smoothing slider — inside the notebook, and they must keep redrawing while the job runs. Plotly's figure
is plain JSON rendered by JupyterLab's plotly extension, so the slider, hover and zoom also work in a saved
notebook without a kernel. Numbers come from ``nbtools.metrics`` frames and ``nbtools.metrics.ema``.

Example:
    >>> fig = nbtools.curves.figure(nbtools.metrics.read_tensorboard(cfg.logs_url))
    >>> fig                                    # or: nbtools.plots.watch_interactive(cfg)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from nbtools import metrics as _metrics
from nbtools._labels import panel_title, run_label

__all__ = ["figure", "bundle", "SMOOTHING_LEVELS", "point_count"]

SMOOTHING_LEVELS = (0.0, 0.3, 0.6, 0.8, 0.9, 0.95, 0.99)
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def _ema(values: np.ndarray, smoothing: float) -> list[float | None]:
    out = _metrics.ema(values, smoothing) if smoothing else np.asarray(values, dtype=float)
    return [None if np.isnan(v) else float(v) for v in out]


def figure(df: pd.DataFrame, *, metrics: Sequence[str] = ("reward", "generation_length", "kl"), smoothing: float = 0.6,
           baseline: float | Mapping[str, float] | None = None, title: str | None = None,
           experiment: str | None = None):
    """One panel per metric, one colour per run: raw values faint, the EMA bold, validation accuracy dashed.

    The slider under the figure sets the smoothing (TensorBoard's debiased EMA) in the browser; hovering shows
    every run's value at a step; drag to zoom, double-click to reset. Each live redraw is a new output (see ``nbtools.plots.watch``).

    Args:
        df: a ``nbtools.metrics`` frame (one or several runs).
        metrics: friendly names (``nbtools.metrics.NAME_MAP``) or raw tags, one panel each.
        smoothing: the slider's starting position (the nearest of ``SMOOTHING_LEVELS``).
        baseline: a dotted line on the reward panel (a float) or per panel ({metric: value}).
        title: the figure title (default: the run names).
        experiment: the experiment's name, shown in the legend and hover with each run (``exp_NNN``).

    Returns:
        ``plotly.graph_objects.Figure``.

    Example:
        >>> fig = nbtools.curves.figure(df, baseline=0.42)
    """
    from plotly.subplots import make_subplots

    names = list(metrics)
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=[panel_title(df, n) for n in names],
                        horizontal_spacing=0.06)
    start = min(range(len(SMOOTHING_LEVELS)), key=lambda i: abs(SMOOTHING_LEVELS[i] - smoothing))
    smoothed: list[tuple[int, np.ndarray]] = []  # (trace index, raw values) of the EMA traces
    colors: dict = {}
    for col, name in enumerate(names, start=1):
        sel = _metrics.select(df, name)
        for run, g in sel.groupby("run", sort=False):
            g = g.sort_values("step")
            c = colors.setdefault(run, _COLORS[len(colors) % len(_COLORS)])
            x, y = g["step"].tolist(), g["value"].to_numpy(float)
            first = col == 1
            label = run_label(run, experiment)
            fig.add_scatter(x=x, y=y.tolist(), mode="lines", line={"color": c, "width": 1}, opacity=0.3,
                            name=f"{label} raw", legendgroup=str(run), showlegend=False, hoverinfo="skip", row=1, col=col)
            fig.add_scatter(x=x, y=_ema(y, SMOOTHING_LEVELS[start]), mode="lines+markers" if len(x) < 40 else "lines",
                            marker={"size": 4}, line={"color": c, "width": 2}, name=label, legendgroup=str(run),
                            showlegend=first, hovertemplate=f"{label}: {name} %{{y:.4g}}<extra></extra>",
                            row=1, col=col)
            smoothed.append((len(fig.data) - 1, y))
        if name == "reward":
            for run, g in _metrics.select(df, "accuracy").groupby("run", sort=False):
                g = g.sort_values("step")
                c = colors.setdefault(run, _COLORS[len(colors) % len(_COLORS)])
                fig.add_scatter(x=g["step"].tolist(), y=g["value"].tolist(), mode="lines+markers",
                                line={"color": c, "dash": "dash"}, name=f"{run_label(run, experiment)} (val accuracy)",
                                legendgroup=str(run), hovertemplate="val accuracy %{y:.4g}<extra></extra>", row=1, col=col)
        base = baseline.get(name) if isinstance(baseline, Mapping) else (baseline if name == "reward" else None)
        if base is not None:
            fig.add_hline(y=float(base), line_dash="dot", line_color="#555", annotation_text=f"baseline {float(base):.3g}",
                          row=1, col=col)
        if sel.empty:
            fig.add_annotation(text=f"no {name} logged yet", showarrow=False, row=1, col=col, x=0.5, y=0.5,
                               xref=f"x{col if col > 1 else ''} domain", yref=f"y{col if col > 1 else ''} domain")
        fig.update_xaxes(title_text="step", row=1, col=col, matches="x", showspikes=True, spikemode="across",
                         spikesnap="cursor", spikethickness=1, spikedash="dot", spikecolor="#888")
    ids = [i for i, _ in smoothed]
    steps = [{"label": f"{s:g}", "method": "restyle",
              "args": [{"y": [_ema(raw, s) for _, raw in smoothed]}, ids]} for s in SMOOTHING_LEVELS]
    runs = list(dict.fromkeys(df["run"])) if not df.empty else []
    fig.update_layout(
        # one step axis for every panel (zoom one, all follow; the spike marks the step on each); the legend sits
        # under the panels, clear of their titles, and the smoothing slider under it
        height=480, margin={"t": 70, "b": 150, "l": 50, "r": 20}, hovermode="x unified", uirevision="keep",
        title={"text": title or (", ".join(map(str, runs[:4])) or "no metrics yet"), "font": {"size": 14}},
        legend={"orientation": "h", "y": -0.2, "yanchor": "top", "x": 0, "font": {"size": 12}},
        sliders=[{"active": start, "currentvalue": {"prefix": "smoothing "}, "pad": {"t": 0}, "steps": steps,
                  "len": 0.5, "y": -0.38, "yanchor": "top"}] if ids else [],
    )
    return fig


def bundle(fig, png: bytes | None = None) -> dict:
    """The figure as a display bundle: plotly's JSON (JupyterLab renders it interactively) plus, when given, the PNG
    as ``text/html`` for viewers without the plotly extension (not as ``image/png``: JupyterLab's plotly renderer
    shows a bundle's PNG instead of the interactive figure).

    Example:
        >>> IPython.display.display(nbtools.curves.bundle(fig), raw=True)
    """
    import base64

    import plotly.io as pio

    out = {"application/vnd.plotly.v1+json": json.loads(pio.to_json(fig, validate=False)),
           "text/plain": f"training curves: {point_count(fig)} points (interactive in JupyterLab)"}
    if png:
        out["text/html"] = (f"<img alt='training curves' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"
                            "<div>Static copy: open in JupyterLab for the interactive curves.</div>")
    return out


def point_count(fig) -> int:
    """Points drawn on the smoothed curves (what a live redraw adds to)."""
    return sum(len(t.x or ()) for t in fig.data if t.hoverinfo != "skip")
