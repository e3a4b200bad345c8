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
from nbtools._labels import TITLES, panel_title, run_label

__all__ = ["figure", "overlay", "bundle", "SMOOTHING_LEVELS", "point_count"]

SMOOTHING_LEVELS = (0.0, 0.3, 0.6, 0.8, 0.9, 0.95, 0.99)
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def _ema(values: np.ndarray, smoothing: float) -> list[float | None]:
    out = _metrics.ema(values, smoothing) if smoothing else np.asarray(values, dtype=float)
    return [None if np.isnan(v) else float(v) for v in out]


def figure(df: pd.DataFrame, *, metrics: Sequence[str] = ("reward", "generation_length", "kl"), smoothing: float = 0.6,
           baseline: float | Mapping[str, float] | None = None, title: str | None = None,
           experiment: str | None = None):
    """One panel per metric, stacked on one step axis; one colour per run: raw values faint, the EMA bold,
    validation accuracy dashed.

    The slider under the figure sets the smoothing (TensorBoard's debiased EMA) in the browser; hovering a step
    shows one line across every panel and one label with every run's value of every panel there (plotly's
    ``hoversubplots="axis"``); drag to zoom (all panels follow), double-click to reset. Each live redraw is a new output (see ``nbtools.plots.watch``).

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
    import plotly.graph_objects as go

    names = list(metrics)
    n, gap = len(names), 0.07
    height = (1 - gap * (n - 1)) / n
    fig = go.Figure()
    start = min(range(len(SMOOTHING_LEVELS)), key=lambda i: abs(SMOOTHING_LEVELS[i] - smoothing))
    smoothed: list[tuple[int, np.ndarray]] = []  # (trace index, raw values) of the EMA traces
    colors: dict = {}
    for row, name in enumerate(names, start=1):
        # the panels are stacked on ONE step axis ("x"), each with its own y axis: plotly's hoversubplots="axis"
        # then shows one hover line and one unified label over every panel at that step
        y = "y" if row == 1 else f"y{row}"
        top = 1 - (row - 1) * (height + gap)
        fig.update_layout({f"yaxis{'' if row == 1 else row}": {"domain": [max(top - height, 0.0), top], "anchor": "x"}})
        fig.add_annotation(text=panel_title(df, name), xref="paper", yref=f"{y} domain", x=0, y=1, xanchor="left",
                           yanchor="bottom", showarrow=False, font={"size": 12})
        sel = _metrics.select(df, name)
        for run, g in sel.groupby("run", sort=False):
            g = g.sort_values("step")
            c = colors.setdefault(run, _COLORS[len(colors) % len(_COLORS)])
            x, v = g["step"].tolist(), g["value"].to_numpy(float)
            label = run_label(run, experiment)
            fig.add_scatter(x=x, y=v.tolist(), mode="lines", line={"color": c, "width": 1}, opacity=0.3,
                            name=f"{label} raw", legendgroup=str(run), showlegend=False, hoverinfo="skip", yaxis=y)
            fig.add_scatter(x=x, y=_ema(v, SMOOTHING_LEVELS[start]), mode="lines+markers" if len(x) < 40 else "lines",
                            marker={"size": 4}, line={"color": c, "width": 2}, name=label, legendgroup=str(run),
                            showlegend=row == 1, hovertemplate=f"{label}: {name} %{{y:.4g}}<extra></extra>", yaxis=y)
            smoothed.append((len(fig.data) - 1, v))
        if name == "reward":
            for run, g in _metrics.select(df, "accuracy").groupby("run", sort=False):
                g = g.sort_values("step")
                c = colors.setdefault(run, _COLORS[len(colors) % len(_COLORS)])
                fig.add_scatter(x=g["step"].tolist(), y=g["value"].tolist(), mode="lines+markers",
                                line={"color": c, "dash": "dash"}, name=f"{run_label(run, experiment)} (val accuracy)",
                                legendgroup=str(run), hovertemplate="val accuracy %{y:.4g}<extra></extra>", yaxis=y)
        base = baseline.get(name) if isinstance(baseline, Mapping) else (baseline if name == "reward" else None)
        if base is not None:
            fig.add_shape(type="line", xref="x domain", x0=0, x1=1, yref=y, y0=float(base), y1=float(base),
                          line={"dash": "dot", "color": "#555", "width": 1})
            fig.add_annotation(text=f"baseline {float(base):.3g}", xref="x domain", x=1, xanchor="right", yref=y,
                               y=float(base), yanchor="bottom", showarrow=False, font={"size": 10, "color": "#555"})
        if sel.empty:
            fig.add_annotation(text=f"no {name} logged yet", showarrow=False, xref="x domain", yref=f"{y} domain",
                               x=0.5, y=0.5)
    fig.update_xaxes(title_text="step", anchor=f"y{n}" if n > 1 else "y", unifiedhovertitle={"text": "step %{x}"},
                     showspikes=True, spikemode="across",
                     spikesnap="cursor", spikethickness=1, spikedash="dot", spikecolor="#888")
    ids = [i for i, _ in smoothed]
    steps = [{"label": f"{s:g}", "method": "restyle",
              "args": [{"y": [_ema(raw, s) for _, raw in smoothed]}, ids]} for s in SMOOTHING_LEVELS]
    runs = list(dict.fromkeys(df["run"])) if not df.empty else []
    fig.update_layout(
        # one hover line and one label for every panel at a step; the legend sits under the panels, the smoothing
        # slider under it
        height=170 + 210 * n, margin={"t": 60, "b": 150, "l": 60, "r": 20}, hovermode="x unified",
        hoversubplots="axis", uirevision="keep",
        title={"text": title or (", ".join(map(str, runs[:4])) or "no metrics yet"), "font": {"size": 14}},
        legend={"orientation": "h", "y": -0.12 * 3 / n, "yanchor": "top", "x": 0, "font": {"size": 12}},
        sliders=[{"active": start, "currentvalue": {"prefix": "smoothing "}, "pad": {"t": 0}, "steps": steps,
                  "len": 0.5, "y": -0.22 * 3 / n, "yanchor": "top"}] if ids else [],
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


_X_TITLES = {"step": "step", "relative": "relative (hours since the run's first value)", "wall": "wall time"}


def overlay(runs: pd.DataFrame, *, x: str = "step", title: str | None = None):
    """Several runs on one figure (a ``nbtools.overlay.read`` frame): one panel per metric, one colour per run, the
    smoothed curve bold over its faint raw values; the hover names each run's raw and smoothed value; buttons switch
    the x axis between step, relative time and wall time (TensorBoard's three).

    Example:
        >>> nbtools.curves.overlay(nbtools.overlay.read([cfg, "runs/other/logs"]), x="relative")
    """
    import plotly.graph_objects as go

    from nbtools.overlay import X_AXES

    if x not in X_AXES:
        raise ValueError(f"expected x in {X_AXES}, got {x!r}")
    names = list(dict.fromkeys(runs["metric"])) if not runs.empty else []
    n, gap = max(len(names), 1), 0.08
    height = (1 - gap * (n - 1)) / n
    fig, colors = go.Figure(), {}
    xs: dict[str, list] = {a: [] for a in X_AXES}  # every trace's x on each axis, for the buttons
    smoothing = runs.attrs.get("smoothing", 0.6)
    for row, name in enumerate(names, start=1):
        y = "y" if row == 1 else f"y{row}"
        top = 1 - (row - 1) * (height + gap)
        fig.update_layout({f"yaxis{'' if row == 1 else row}": {"domain": [max(top - height, 0.0), top], "anchor": "x"}})
        fig.add_annotation(text=TITLES.get(name, name), xref="paper",
                           yref=f"{y} domain", x=0, y=1, xanchor="left", yanchor="bottom", showarrow=False,
                           font={"size": 12})
        for run, g in runs[runs["metric"] == name].groupby("run", sort=False):
            c = colors.setdefault(run, _COLORS[len(colors) % len(_COLORS)])
            axes = {"step": g["step"].tolist(), "relative": g["relative"].round(4).tolist(),
                    "wall": pd.to_datetime(g["wall_time"], unit="s").dt.strftime("%Y-%m-%d %H:%M:%S").tolist()}
            fig.add_scatter(x=axes[x], y=g["value"].tolist(), mode="lines", line={"color": c, "width": 1},
                            opacity=0.3, name=f"{run} raw", legendgroup=str(run), showlegend=False, hoverinfo="skip",
                            yaxis=y)
            fig.add_scatter(x=axes[x], y=g["smoothed"].tolist(), customdata=np.stack(
                                [g["value"].to_numpy(float), g["step"].to_numpy(float)], axis=-1).tolist(),
                            mode="lines", line={"color": c, "width": 2}, name=str(run), legendgroup=str(run),
                            showlegend=row == 1, yaxis=y,
                            hovertemplate=f"{run} · {name} (step %{{customdata[1]:.0f}}): smoothed %{{y:.4g}}, "
                                          "raw %{customdata[0]:.4g}<extra></extra>")
            for a in X_AXES:
                xs[a] += [axes[a], axes[a]]
    buttons = [{"label": a, "method": "update", "args": [{"x": xs[a]}, {"xaxis.title.text": _X_TITLES[a],
                                                                        "xaxis.type": "date" if a == "wall" else "linear"}]}
               for a in X_AXES]
    fig.update_xaxes(title_text=_X_TITLES[x], anchor=f"y{n}" if n > 1 else "y", showspikes=True, spikemode="across",
                     spikesnap="cursor", spikethickness=1, spikedash="dot", spikecolor="#888",
                     type="date" if x == "wall" else "linear")
    run_names = list(dict.fromkeys(runs["run"])) if not runs.empty else []
    fig.update_layout(
        height=170 + 210 * n, margin={"t": 80, "b": 90, "l": 60, "r": 20}, hovermode="x", hoversubplots="axis",
        uirevision="keep", meta={"nbtools": "overlay", "runs": run_names, "smoothing": smoothing},
        title={"text": title or f"{len(run_names)} runs overlaid (smoothing {smoothing:g}): " + ", ".join(run_names[:4]),
               "font": {"size": 14}},
        legend={"orientation": "h", "y": -0.1 * 3 / n, "yanchor": "top", "x": 0, "font": {"size": 12}},
        updatemenus=[{"type": "buttons", "direction": "right", "x": 1, "xanchor": "right", "y": 1.0,
                      "yanchor": "bottom", "pad": {"b": 24}, "showactive": True, "active": X_AXES.index(x),
                      "buttons": buttons}],
    )
    if not names:
        fig.add_annotation(text="no runs logged these metrics yet", showarrow=False, xref="paper", yref="paper",
                           x=0.5, y=0.5)
    return fig
