"""nbtools.plots (figures from metrics frames, PNG saved, the watch loop) and nbtools.widgets (the explorer
driven programmatically: set the slider/filters, read the rendered HTML)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import matplotlib
import numpy as np
import pandas as pd
import pytest

from nbtools import metrics, plots, trajectories, widgets
from nbtools.errors import NotFoundError

matplotlib.use("Agg")

_GEN = Path(__file__).resolve().parent.parent / "benchmarks" / "gen_nemo_rl_run.py"
_spec = importlib.util.spec_from_file_location("gen_nemo_rl_run", _GEN)
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


def _frame(run: str, n: int = 20, tags=("train/reward", "train/mean_gen_tokens_per_sample", "train/kl_penalty")):
    rows = [(run, t, s, float(i + s * 0.1), 1.7e9 + s) for i, t in enumerate(tags) for s in range(1, n + 1)]
    return pd.DataFrame(rows, columns=["run", "tag", "step", "value", "wall_time"])


def test_ema_matches_tensorboard_debiased_smoothing():
    assert metrics.ema([0, 1, 1, 1], 0.5).round(3).tolist() == [0.0, 0.667, 0.857, 0.933]
    out = metrics.ema([1.0, np.nan, 3.0], 0.0)
    assert out[0] == 1.0 and np.isnan(out[1]) and out[2] == 3.0
    with pytest.raises(ValueError, match="smoothing"):
        metrics.ema([1.0], 1.0)


def test_training_curves_overlay_baseline_and_png(tmp_path):
    df = pd.concat([_frame("a"), _frame("b", tags=("critic/score/mean", "response_length/mean", "actor/kl_loss"))])
    out = tmp_path / "figs" / "curves.png"
    fig = plots.training_curves(df, baseline=0.5, save=out)
    assert out.is_file() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    reward_ax, len_ax, kl_ax = fig.axes[:3]
    labels = [line.get_label() for line in reward_ax.get_lines()]
    assert "a" in labels and "b" in labels and any(lab.startswith("baseline") for lab in labels)
    assert {"a", "b"} <= {line.get_label() for line in kl_ax.get_lines()}
    assert "generation length" in len_ax.get_title()
    t = plots.timing(_frame("a", tags=("timing/train/total_step_time",)), save=tmp_path / "t.png")
    assert (tmp_path / "t.png").is_file() and len(t.axes[0].get_lines()) == 2  # raw (faint) + EMA: spikes do not hide the trend
    assert len(plots.timing(_frame("a", tags=("timing/train/total_step_time",)), smoothing=0).axes[0].get_lines()) == 1


def test_watch_redraws_until_the_job_ends(tmp_path, monkeypatch):
    """The Ray job is a test double (a `wait` that times out once, then returns): the loop itself is real."""
    exp = tmp_path / "logs" / "exp_001"
    gen.generate(tmp_path / "logs", steps=2, records=4, seq_len=32, tensorboard=True)
    cfg = SimpleNamespace(name="demo", logs_url=str(tmp_path / "logs"), run_dir=tmp_path, dashboard_url="",
                          submission_id="x")

    class FakeJob:
        waits = 0

        def wait(self, timeout, raise_on_failure=True):
            FakeJob.waits += 1
            if FakeJob.waits == 1:
                raise TimeoutError("still running")
            return "SUCCEEDED"

        def status(self):
            return SimpleNamespace(is_terminal=lambda: False)

    draws = []
    real = plots.training_curves
    monkeypatch.setattr(plots, "training_curves", lambda *a, **k: draws.append(1) or real(*a, **k))
    monkeypatch.setattr(plots, "_find_job", lambda cfg: FakeJob())
    fig = plots.watch(cfg, interval=0.01)
    assert FakeJob.waits == 2 and len(draws) == 3 and (tmp_path / "figures" / "training_curves.png").is_file()
    assert exp.is_dir() and fig.axes[0].get_lines()
    monkeypatch.setattr(plots, "_find_job", lambda cfg: None)  # finished / unreachable job: draws once
    draws.clear()
    plots.watch(cfg)
    assert len(draws) == 1
    gone = SimpleNamespace(**{**vars(cfg), "logs_url": str(tmp_path / "no-logs")})
    with pytest.raises(NotFoundError, match="no running job"):  # nothing to draw: an error, never blank curves
        plots.watch(gone)


def test_explorer_driven_programmatically(tmp_path):
    """nbtools.widgets.explore is the explorer (tests/explorer/test_explorer.py covers it); the old entry point still works."""
    exp = gen.generate(tmp_path, steps=3, records=16, seq_len=64, group_size=4, skip_steps=(2,))
    run = trajectories.open_run(exp)
    ex = widgets.explore(run)
    assert ex.step.value == 3 and "steps 1…3 (2 dumps)" in ex.steps_label.value
    ex.step.value = 1
    df1 = run.read(1)
    assert "step 1" in ex.summary.value and "groups with no signal" in ex.summary.value
    assert "records <b>1–16</b> of <b>16</b> matching (16 in step 1)" in ex.table.value
    ex.filter.value = "correct"
    shown = ex.frame()
    assert len(shown) == df1["env_observation"].eq("Environment: correct").sum() == ex.page_data.total
    ex.filter.value = "all"
    ex.search.value = "zzz-not-there"
    assert ex.page_data.total == 0 and "no record matches" in ex.table.value
    ex.search.value = ""
    lo = int(df1.generation_length.median())
    ex.length.value = (lo, ex.length.max)
    assert len(ex.frame()) == (df1.generation_length >= lo).sum()
    ex.filter.value = "groups with no signal"
    groups = trajectories.group_table(df1)
    assert len(ex.frame()) == groups.loc[groups.no_signal, "size"].sum() - (
        (df1.generation_length < lo) & df1.prompt.isin(groups.loc[groups.no_signal, "prompt"])).sum()
    gen.generate(tmp_path, steps=5, records=16, seq_len=64, group_size=4)  # the run grows
    ex.refresh()
    assert "steps 1…5 (5 dumps)" in ex.steps_label.value
