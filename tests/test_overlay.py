"""Several runs on one figure (issue 45 item 6): ``nbtools.overlay.read`` returns the numbers, ``curves.overlay`` draws
them with raw and smoothed values in the hover and step / relative / wall-time axes. Two real rehearsal runs of the
health corpus (tests/assets/health-corpus, SOURCE.md there) are the runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import nbtools

CORPUS = Path(__file__).parent / "assets" / "health-corpus"
A, B = CORPUS / "healthy-seed0" / "logs", CORPUS / "healthy-seed1" / "logs"


@pytest.fixture(scope="module")
def runs():
    return nbtools.overlay.read([A, str(B)], smoothing=0.6)


def test_read_returns_both_runs_with_smoothed_values_and_three_axes(runs):
    assert list(runs.columns) == nbtools.overlay.COLUMNS
    assert list(dict.fromkeys(runs.run)) == ["healthy-seed0/exp_001", "healthy-seed1/exp_001"]
    assert set(runs.metric) == {"reward", "generation_length", "kl"}
    for (run, metric), g in runs.groupby(["run", "metric"]):
        whole = nbtools.metrics.read_tensorboard(A if "seed0" in run else B)
        raw = nbtools.metrics.select(whole, metric)
        assert g.value.tolist() == raw.sort_values("step").value.tolist()  # the logged values, not a resample
        assert np.allclose(g.smoothed, nbtools.metrics.ema(g.value.to_numpy(), 0.6))
        assert g.relative.iloc[0] >= 0 and g.relative.is_monotonic_increasing
        assert np.allclose(g.relative * 3600, g.wall_time - whole.wall_time.min())
    same = nbtools.overlay.read([A, A])  # the same run twice stays two runs, told apart
    assert list(dict.fromkeys(same.run)) == ["healthy-seed0/exp_001", "healthy-seed0/exp_001#2"]


def test_read_refuses_bad_sources_and_smoothing():
    with pytest.raises(nbtools.errors.ConfigError, match="smoothing in \\[0, 1\\)"):
        nbtools.overlay.read(A, smoothing=1.0)
    with pytest.raises(nbtools.errors.ConfigError, match="pass cfg or a path"):
        nbtools.overlay.read([42])
    with pytest.raises(nbtools.errors.NotFoundError):
        nbtools.overlay.read(CORPUS / "no-such-run")


def test_figure_hover_names_raw_and_smoothed_and_buttons_switch_axes(runs):
    fig = nbtools.curves.overlay(runs)
    hover = [t for t in fig.data if t.hoverinfo != "skip"]
    assert len(hover) == 2 * 3  # two runs, three panels
    reward = [t for t in hover if " · reward " in t.hovertemplate]
    assert [t.name for t in reward] == ["healthy-seed0/exp_001", "healthy-seed1/exp_001"]
    for t in reward:
        g = runs[(runs.run == t.name) & (runs.metric == "reward")]
        assert "smoothed %{y" in t.hovertemplate and "raw %{customdata[0]" in t.hovertemplate
        assert list(t.y) == g.smoothed.tolist() and [c[0] for c in t.customdata] == g.value.tolist()
    (menu,) = fig.layout.updatemenus
    assert [b.label for b in menu.buttons] == list(nbtools.overlay.X_AXES)
    wall = menu.buttons[2].args[0]["x"]
    assert len(wall) == len(fig.data) and wall[1][0].startswith("20")  # every trace gets its wall-time x
    assert menu.buttons[1].args[0]["x"][1] == runs[(runs.run == reward[0].name) & (runs.metric == "reward")].relative.round(4).tolist()
    assert nbtools.curves.overlay(runs, x="relative").layout.xaxis.title.text.startswith("relative")
    bundle = nbtools.plots.overlay(runs)._repr_mimebundle_()
    assert bundle["application/vnd.plotly.v1+json"]["layout"]["meta"]["runs"] == list(dict.fromkeys(runs.run))
    latest = nbtools.overlay.latest(runs)
    assert len(latest) == 6 and set(latest.columns) == {"run", "metric", "step", "value", "smoothed"}
