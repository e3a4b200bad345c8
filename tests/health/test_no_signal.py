"""no-signal-groups judges the flat groups against chance: groups of n samples at the run's own reward mix are
all-equal with probability sum_v q_v^n (binary: p^n + (1-p)^n), so a healthy run with 4 generations at an 8%
success rate has ~72% flat groups and no fault; identical samples within a group are a fault at any rate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from nbtools import health


def _run(exp: Path, rewards: np.ndarray) -> Path:
    """NeMo-RL ``train_data_step{N}.jsonl`` records: ``rewards[step, prompt, sample]``, one prompt text per group."""
    exp.mkdir(parents=True)
    for step, per_prompt in enumerate(rewards, start=1):
        lines = [json.dumps({"content": [[f"<|im_start|>user\nWhat is {p}+{step}?<|im_end|>", "<answer>1</answer>",
                                          "Environment: ok"]], "rewards": [float(r)], "idx": p * 100 + i,
                             "input_lengths": [9], "token_ids": [[1, 2, 3]]})
                 for p, samples in enumerate(per_prompt) for i, r in enumerate(samples)]
        (exp / f"train_data_step{step}.jsonl").write_text("\n".join(lines) + "\n")
    return exp


def test_chance_flat_groups_at_a_low_success_rate_are_not_a_warning(tmp_path):
    rewards = (np.random.default_rng(3).random((12, 16, 4)) < 0.08).astype(float)  # independent samples, p = 0.08
    c = health.check(_run(tmp_path / "exp_001", rewards), checks=["no-signal-groups"])["no-signal-groups"]
    assert c.value >= health.CHECKS["no-signal-groups"].warning  # the fixed 60% line alone warned (the old rule)
    assert c.status == "ok" and "expected by chance for groups of 4" in c.message, c


def test_identical_samples_within_groups_are_still_a_warning(tmp_path):
    rng = np.random.default_rng(4)
    rewards = (rng.random((12, 16, 4)) < 0.3).astype(float)
    copied = rng.random((12, 16)) < 0.8  # 80% of the groups: one sample repeated (temperature 0, a cached rollout)
    rewards[copied] = rewards[copied][:, :1]
    c = health.check(_run(tmp_path / "exp_001", rewards), checks=["no-signal-groups"])["no-signal-groups"]
    assert c.status == "warning" and c.first_step is not None, c
    assert "expected by chance" in c.message and "p=" in c.message, c


def test_no_signal_at_all_stays_unhealthy_whatever_the_chance(tmp_path):
    rewards = np.zeros((12, 8, 4))
    rewards[:, :1, :] = 1.0  # every group flat: nothing to learn, even if a reward rate near 0 explains it
    c = health.check(_run(tmp_path / "exp_001", rewards), checks=["no-signal-groups"])["no-signal-groups"]
    assert c.status == "unhealthy", c
