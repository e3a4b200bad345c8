"""#41: no evidence is not health (nbtools/health/_evidence.py, the one place the rules live).

NaN/inf in what a check reads is unhealthy, never dropped; a run with no data is "unknown" (the CLI exits 3); as a
stop condition a threshold finding waits out a warm-up, a NaN does not. TensorBoard files are written by
tensorboard's own ``tensorboard.summary.Writer``; NeMo-RL records by ``json.dumps`` (NeMo-RL's writer, which writes
NaN as ``NaN``); verl dumps by the rehearsal's verl writer (``dump_generations``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from nbtools import health
from nbtools.cli import main
from nbtools.errors import ConfigError

CHECKED = ("zero-reward", "kl-runaway", "reward-stalled")


def _tb(root: Path, values, tags=("train/reward", "train/kl_penalty")) -> Path:
    from tensorboard.summary import DirectoryOutput, Writer

    w = Writer(DirectoryOutput(str(root / "exp_001" / "tensorboard")))
    for step, v in enumerate(values, start=1):
        for tag in tags:
            w.add_scalar(tag, v, step)
    w.close()
    return root


def _cli(capfd, *args) -> tuple[int, dict]:
    rc = main(["health", *map(str, args), "--json"])
    out = capfd.readouterr()
    _cli.err = out.err
    return rc, json.loads(out.out)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_run_non_finite_from_step_1_is_unhealthy_not_no_steps_yet(tmp_path, capfd, bad):
    run = _tb(tmp_path, [bad] * 12)
    rc, doc = _cli(capfd, run)
    assert rc == 1 and doc["status"] == "unhealthy" and doc["steps"] == [1, 12], doc
    by = {c["check"]: c for c in doc["checks"]}
    for name in CHECKED:
        assert by[name]["status"] == "unhealthy" and by[name]["first_step"] == 1, by[name]
        assert "NaN/inf" in by[name]["message"] and "learning rate" in by[name]["fix"]


def test_a_run_that_goes_nan_at_step_8_is_judged_on_it_not_on_steps_1_to_7(tmp_path, capfd):
    run = _tb(tmp_path, [0.3 + s / 100 if s < 8 else math.nan for s in range(1, 13)])
    rc, doc = _cli(capfd, run)
    assert rc == 1 and doc["steps"] == [1, 12]
    kl = next(c for c in doc["checks"] if c["check"] == "kl-runaway")
    assert kl["status"] == "unhealthy" and kl["first_step"] == 8 and "5 of its last 5" in kl["message"], kl


def test_nan_before_finite_steps_is_at_least_a_warning(tmp_path):
    run = _tb(tmp_path, [0.1, math.nan, math.nan] + [0.1] * 9)
    kl = health.check(run)["kl-runaway"]
    assert kl.status == "warning" and "finite since" in kl.message and kl.first_step == 2, kl


def test_an_exp_dir_with_no_data_is_unknown_exit_3_not_healthy(tmp_path, capfd):
    (tmp_path / "exp_001").mkdir()
    rc, doc = _cli(capfd, tmp_path)
    assert rc == 3 and doc["status"] == "unknown" and {c["status"] for c in doc["checks"]} == {"unknown"}, doc
    assert f"none of the {len(health.CHECKS)} checks found data" in _cli.err, _cli.err
    report = health.check(tmp_path)
    assert report.status == "unknown" and f"0 of {len(health.CHECKS)} checks judged" in report.summary()


def _nemo_rl(exp: Path, rewards_per_step: list[list]) -> Path:
    """NeMo-RL ``train_data_step{N}.jsonl`` records as ``json.dumps`` writes them (NaN as ``NaN``)."""
    exp.mkdir(parents=True, exist_ok=True)
    for step, rewards in enumerate(rewards_per_step, start=1):
        lines = [json.dumps({"content": [["<|im_start|>user\nWhat is 2+2?<|im_end|>", f"<answer>{i}</answer>",
                                          "Environment: ok"]], "rewards": [r], "idx": i, "input_lengths": [9],
                             "token_ids": [[1, 2, 3]]}) for i, r in enumerate(rewards)]
        (exp / f"train_data_step{step}.jsonl").write_text("\n".join(lines) + "\n")
    return exp


def test_records_whose_rewards_are_all_nan_are_unhealthy_not_a_type_error(tmp_path, capfd):
    exp = _nemo_rl(tmp_path / "exp_001", [[math.nan] * 4] * 3)
    report = health.check(exp)
    zero = report["zero-reward"]
    assert zero.status == "unhealthy" and zero.first_step == 1 and "the records' reward" in zero.message, zero
    assert report["no-signal-groups"].status == "unhealthy"
    rc, doc = _cli(capfd, exp)
    assert rc == 1 and doc["status"] == "unhealthy"


def test_one_nan_reward_in_the_window_poisons_the_step(tmp_path):
    exp = _nemo_rl(tmp_path / "exp_001", [[1.0, 0.0, 1.0, 0.0]] * 3 + [[1.0, math.nan, 0.0, 1.0]])
    zero = health.check(exp)["zero-reward"]
    assert zero.status == "unhealthy" and zero.first_step == 4 and "1 of its last 4" in zero.message, zero


@pytest.mark.parametrize("score", [math.nan, "n/a"])
def test_a_verl_dump_whose_scores_are_nan_or_text_is_unhealthy(tmp_path, score):
    from nbtools.trainers.verl.files import dump_generations

    for step in (1, 2):
        dump_generations(tmp_path / "rollout_data", step, inputs=["q"] * 2, outputs=["#### 1", "#### 2"],
                         gts=["1", "1"], scores=[score, score])
    zero = health.check(tmp_path / "rollout_data")["zero-reward"]
    assert zero.status == "unhealthy" and zero.first_step == 1, zero


def test_warm_up_keeps_a_stop_condition_from_deciding_on_step_1(tmp_path):
    """A base model that writes no answer tag at step 1 and learns it by step 10 must not be stopped at step 2."""
    exp = tmp_path / "exp_001"
    exp.mkdir()
    for step in (1, 2):
        (exp / f"train_data_step{step}.jsonl").write_text("".join(json.dumps(
            {"content": [["<|im_start|>user\nq<|im_end|>", "no tag yet", "Environment: 0"]], "rewards": [0.0],
             "idx": i}) + "\n" for i in range(4)))
    seen = health.check(exp)
    assert seen["answer-format"].status == "unhealthy" and seen["zero-reward"].status == "unhealthy"
    gated = health.check(exp, warmup=health.WARMUP_STEPS)
    assert gated.status == "warning" and not gated.unhealthy, gated
    assert "warm-up: 2 of 10 steps" in gated["answer-format"].message
    nan = _nemo_rl(tmp_path / "nan" / "exp_001", [[math.nan] * 4])  # a NaN is not subject to the warm-up
    assert health.check(nan, warmup=health.WARMUP_STEPS)["zero-reward"].status == "unhealthy"
    with pytest.raises(ConfigError, match="warmup: expected 0 or more steps"):
        health.check(exp, warmup=-1)


@pytest.mark.parametrize("every", [0, -5, math.nan, math.inf])
def test_supervise_refuses_a_health_period_that_is_not_a_positive_number(every):
    from nbtools.launch._supervise import _health_args

    with pytest.raises(ConfigError, match="health_every: expected seconds between health checks, 1 or more"):
        _health_args(every, None)
    assert _health_args(60.0, None) == health.WARMUP_STEPS
    with pytest.raises(ConfigError, match="health_warmup"):
        _health_args(60.0, -1)


def test_a_relaunch_into_the_same_verl_log_dir_is_judged_on_the_new_run(tmp_path, capfd):
    """verl's TensorBoard adapter is torch's SummaryWriter on TENSORBOARD_DIR; a relaunch writes a second event file
    from step 1 and rewrites ``rollout_data/{step}.jsonl`` 1..k, leaving the first run's later dumps behind."""
    import os
    import time

    from torch.utils.tensorboard import SummaryWriter

    from nbtools.trainers.verl.files import dump_generations

    def launch(steps, good: bool):
        w = SummaryWriter(str(tmp_path / "tensorboard"))
        for s in steps:
            scores = [1.0, 0.0, 1.0, 0.0] if good else [0.0] * 4
            w.add_scalar("critic/score/mean", sum(scores) / 4, s)
            dump_generations(tmp_path / "rollout_data", s, inputs=["q1", "q1", "q2", "q2"],
                             outputs=["<answer>1</answer>"] * 4, gts=["1"] * 4, scores=scores)
        w.close()

    launch(range(1, 11), good=True)
    hour_ago = time.time() - 3600
    for f in [*(tmp_path / "rollout_data").iterdir(), *(tmp_path / "tensorboard").iterdir()]:
        os.utime(f, (hour_ago, hour_ago))
    launch(range(1, 4), good=False)  # the relaunch: every reward 0
    report = health.check(tmp_path)
    assert report.steps == (1, 3) and report["zero-reward"].status == "unhealthy", report
    rc, doc = _cli(capfd, tmp_path)
    assert rc == 1 and doc["status"] == "unhealthy"


@pytest.mark.parametrize("level", ["nan", "inf"])
def test_a_threshold_that_can_never_be_crossed_is_refused(tmp_path, capfd, level):
    run = _tb(tmp_path, [0.1] * 3)
    assert main(["health", str(run), "--threshold", f"kl-runaway={level}"]) != 0
    assert "expected finite numbers" in capfd.readouterr().err
    with pytest.raises(ConfigError, match="expected finite numbers"):
        health.check(run, thresholds={"kl-runaway": (0.1, float(level))})
