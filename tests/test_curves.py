"""nbtools.curves (plotly training curves: smoothing slider, hover, zoom) and
nbtools.plots.watch_interactive redrawing them in place while the job runs."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from nbtools import curves, metrics, plots


def _frame(run: str, n: int = 20):
    tags = ("train/reward", "train/mean_gen_tokens_per_sample", "train/kl_penalty")
    rows = [(run, t, s, float(np.sin(s) + i), 1.7e9 + s) for i, t in enumerate(tags) for s in range(1, n + 1)]
    return pd.DataFrame(rows, columns=["run", "tag", "step", "value", "wall_time"])


def test_figure_has_a_smoothing_slider_that_restyles_the_ema_traces():
    df = pd.concat([_frame("a"), _frame("b")])
    fig = curves.figure(df, smoothing=0.6, baseline=0.5)
    smooth = [i for i, t in enumerate(fig.data) if t.hoverinfo != "skip"]
    assert len(smooth) == 6 and len(fig.data) == 12  # 3 panels x 2 runs, each with a faint raw trace
    slider = fig.layout.sliders[0]
    assert [s.label for s in slider.steps] == [f"{x:g}" for x in curves.SMOOTHING_LEVELS]
    assert curves.SMOOTHING_LEVELS[slider.active] == 0.6
    raw = _frame("a").query("tag == 'train/reward'")["value"].to_numpy()
    zero, six = slider.steps[0].args[0]["y"][0], slider.steps[2].args[0]["y"][0]
    assert zero == pytest.approx(raw.tolist()) and six == pytest.approx(metrics.ema(raw, 0.6).tolist())
    assert list(fig.data[smooth[0]].y) == pytest.approx(six)
    assert fig.layout.hovermode == "x unified" and fig.layout.uirevision == "keep"
    assert fig.layout.xaxis.title.text == "step" and "KL · train/kl_penalty" in [a.text for a in fig.layout.annotations]
    # one hover across the panels: plotly's hoversubplots="axis" spans the subplots that share the hovered axis, so
    # every panel is on the ONE step axis "x" (stacked, each with its own y axis); the legend sits under them
    assert fig.layout.hoversubplots == "axis" and {t.xaxis or "x" for t in fig.data} == {"x"}
    assert {t.yaxis or "y" for t in fig.data} == {"y", "y2", "y3"} and fig.layout.xaxis.anchor == "y3"
    domains = [fig.layout[f"yaxis{k}"].domain for k in ("", "2", "3")]
    assert all(hi <= lo2 or hi2 <= lo for i, (lo, hi) in enumerate(domains) for (lo2, hi2) in domains[i + 1:])  # apart
    assert fig.layout.legend.y < 0 and fig.layout.xaxis.unifiedhovertitle.text == "step %{x}"
    assert curves.point_count(fig) == 6 * 20
    b = curves.bundle(fig, png=b"\x89PNG")
    assert b["application/vnd.plotly.v1+json"]["data"][1]["x"][:3] == [1, 2, 3] and "data:image/png" in b["text/html"]
    assert "image/png" not in b  # jupyterlab-plotly would show that PNG instead of the interactive figure


def test_empty_frame_says_nothing_logged_yet():
    fig = curves.figure(pd.DataFrame(columns=["run", "tag", "step", "value", "wall_time"]))
    assert curves.point_count(fig) == 0 and "no reward logged yet" in [a.text for a in fig.layout.annotations]


def test_watch_interactive_redraws_in_place_with_more_points(tmp_path, monkeypatch):
    """The Ray job is a test double whose first wait logs two more steps (the same open event file, as a trainer
    writes it): each redraw shows more points, in the same output."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "logs" / "exp_001" / "tensorboard"))
    for s in (1, 2):
        writer.add_scalar("train/reward", 0.1 * s, s)
    writer.flush()
    cfg = SimpleNamespace(name="demo", logs_url=str(tmp_path / "logs"), run_dir=tmp_path, dashboard_url="",
                          submission_id="x")

    class GrowingJob:
        waits = 0

        def wait(self, timeout, raise_on_failure=True):
            GrowingJob.waits += 1
            if GrowingJob.waits == 1:
                for s in (3, 4):
                    writer.add_scalar("train/reward", 0.1 * s, s)
                writer.flush()
                raise TimeoutError("still running")
            return "SUCCEEDED"

        def status(self):
            return SimpleNamespace(is_terminal=lambda: False)

    shown = []
    monkeypatch.setattr(plots, "_find_job", lambda cfg: GrowingJob())
    monkeypatch.setattr(plots, "_replace", shown.append)
    fig = plots.watch_interactive(cfg, interval=0.01)
    writer.close()
    counts = [len(b["application/vnd.plotly.v1+json"]["data"][1]["x"]) for b in shown]
    assert counts == [2, 4, 4] and "text/html" in shown[0] and curves.point_count(fig) == 4
    assert type(fig).__module__.startswith("plotly")  # one verb, one type: plots.watch gives matplotlib's


def test_replace_clears_then_displays_a_new_output(monkeypatch):
    """The plotly renderer on screen ignores updated models, so each redraw must be a new output."""
    import IPython
    import IPython.display

    calls = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "clear_output", lambda wait=False: calls.append(("clear", wait)))
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: calls.append(("display", raw)))
    plots._replace({"text/plain": "x"})
    assert calls == [("clear", True), ("display", True)]
