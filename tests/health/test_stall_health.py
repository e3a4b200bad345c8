"""Health checks decide by the run's own tags: verl's validation accuracy (``val-core/<source>/acc/mean@<n>``) is
judged as NeMo-RL's ``validation/accuracy`` is (issue #44: the check read NeMo-RL's tag only, so it never ran on verl)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbtools import health


def _tb(root: Path, train_tag: str, val_tag: str) -> Path:
    from tensorboard.summary import DirectoryOutput, Writer

    w = Writer(DirectoryOutput(str(root / "exp_001" / "tensorboard")))
    for step in range(0, 13):
        if step:
            w.add_scalar(train_tag, 0.2 + step * 0.05, step)  # training reward rises
        if step % 3 == 0:
            w.add_scalar(val_tag, [0.40, 0.55, 0.60, 0.45, 0.30][step // 3], step)  # validation falls after step 6
    w.close()
    return root


@pytest.mark.parametrize("train_tag, val_tag", [("train/reward", "validation/accuracy"),
                                                ("critic/score/mean", "val-core/openai/gsm8k/acc/mean@1")])
def test_validation_divergence_runs_on_each_trainers_tags(tmp_path, train_tag, val_tag):
    report = health.check(_tb(tmp_path, train_tag, val_tag), checks=["val-divergence"])
    [c] = [c for c in report.checks if c.check == "val-divergence"]
    assert c.status == "unhealthy" and "fell from 0.6 (step 6) to 0.3 (step 12)" in c.message, c


def test_a_solved_task_is_reported_solved_not_as_a_warning(tmp_path):
    from tensorboard.summary import DirectoryOutput, Writer

    w = Writer(DirectoryOutput(str(tmp_path / "exp_001" / "tensorboard")))
    for step in range(1, 13):
        w.add_scalar("train/reward", min(1.0, 0.5 + step * 0.05), step)
        w.add_scalar("train/baseline_reward/pct_0", 0.0, step)
        w.add_scalar("train/baseline_reward/pct_1", 0.97, step)  # every sample of almost every group is right
    w.close()
    report = health.check(tmp_path, checks=["no-signal-groups", "zero-reward"])
    c = report["no-signal-groups"]
    assert c.status == "solved" and "the task is solved" in c.message, c
    assert report.status == "solved" and not report.findings and not report.warnings
    assert "solved: no-signal-groups" in report.summary()
