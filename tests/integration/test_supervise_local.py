"""Issue #16 end to end on the local backend: a real rehearsal job on the session's Ray head loses a training rank
(SIGKILL) after its first checkpoint, and ``launch.supervise`` diagnoses it, resubmits attempt 2 with its own
submission id, and the run finishes from the newest complete ``step_N``; the readers show every step once.

Short config (40 steps, a checkpoint every 10) so the whole test stays well under a minute on 2 cores. How well the policy
learns is not asserted here (``benchmarks/bench_rehearsal.py`` measures it, over ten seeds): these tests check what
was done and what the readers read back.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

import nbtools
from nbtools.launch._attempts import RECORD_NAME

ROOT = Path(__file__).resolve().parents[2]
STEPS, SAVE, KILL_AFTER = 40, 10, 12  # kill once step 12's dump exists: step_10 is the newest complete checkpoint


def _ranks(runs_dir: Path) -> list[psutil.Process]:
    """The rehearsal's rank processes for this runs dir (forked children of the launcher, same command line)."""
    mine = []
    for p in psutil.process_iter(["cmdline", "ppid"]):
        cmd = p.info["cmdline"] or []
        if "nbtools.rehearsal" in cmd and str(runs_dir) in cmd:
            mine.append(p)
    pids = {p.pid for p in mine}
    return [p for p in mine if p.info["ppid"] in pids]


def _killer(runs_dir: Path, seen: dict) -> None:
    """Wait for step KILL_AFTER's dump of attempt 1, then SIGKILL one training rank."""
    target = runs_dir / "local-rehearsal" / "logs" / "exp_001" / f"train_data_step{KILL_AFTER}.jsonl"
    deadline = time.monotonic() + 240
    while not target.exists():
        if time.monotonic() > deadline:
            seen["error"] = f"{target} never appeared"
            return
        time.sleep(0.05)
    ranks = _ranks(runs_dir)
    if not ranks:
        seen["error"] = "no rank process found"
        return
    ckpts = runs_dir / "local-rehearsal" / "checkpoints"
    seen["complete"] = sorted(int(p.name.split("_")[1]) for p in ckpts.iterdir() if p.name.startswith("step_"))
    os.kill(ranks[-1].pid, signal.SIGKILL)
    seen["killed"] = ranks[-1].pid
    (ckpts / f"tmp_step_{2 * SAVE}").mkdir(exist_ok=True)  # a half-written checkpoint is never resumed from


@pytest.fixture(scope="module")
def supervised(ray_cfg, tmp_path_factory):
    runs = tmp_path_factory.mktemp("supervise")
    old = os.environ.get("NBTOOLS_RUNS_DIR")
    os.environ["NBTOOLS_RUNS_DIR"] = str(runs)
    cfg = ray_cfg(nbtools.config.load(ROOT / "experiments" / "local.yaml")).replace(**{
        "grpo.max_num_steps": STEPS, "grpo.val_period": STEPS // 2, "checkpointing.save_period": SAVE})
    try:
        seen: dict = {}
        t = threading.Thread(target=_killer, args=(runs, seen), daemon=True)
        t.start()
        t0 = time.monotonic()
        result = nbtools.launch.supervise(cfg, max_attempts=3, timeout=400)
        seen["wall_s"] = time.monotonic() - t0
        print(f"supervise: {seen['wall_s']:.1f} s; attempts:", [(a.n, a.status, round((a.ended or 0) - (a.started or 0), 1))
                                                          for a in result.attempts], f"\n{result}")
        t.join(5)
        yield cfg, result, seen
    finally:
        # only this module's run (and its attempts): the session's Ray head is shared by every xdist worker, and a
        # bare "local-rehearsal-" prefix would stop another module's run mid-test
        nbtools.jobs.stop_jobs(cfg.dashboard_url, prefix=cfg.submission_id)
        if old is None:
            os.environ.pop("NBTOOLS_RUNS_DIR", None)
        else:
            os.environ["NBTOOLS_RUNS_DIR"] = old


def test_supervise_brings_a_killed_run_home(supervised):
    cfg, run, seen = supervised
    assert "error" not in seen, seen
    assert run.ok, str(run)
    first, second = run.attempts
    assert (first.submission_id, second.submission_id) == (cfg.submission_id, f"{cfg.submission_id}-attempt2")
    assert first.status == "FAILED" and first.cause == "lost-node" and first.retry, first
    assert "rank exited abnormally" in first.evidence and "SIGKILL" in first.evidence
    # the resume step is the newest complete checkpoint when the rank died (never the tmp_step_{2 * SAVE} left behind)
    assert seen["complete"][-1] == SAVE and second.resumed_from == SAVE
    log2 = nbtools.jobs.attach(cfg.dashboard_url, second.submission_id).logs()
    assert f"Resuming from checkpoint {Path(cfg.checkpoint_dir) / f'step_{SAVE}'}" in log2
    assert f"Step {SAVE + 1}/{STEPS}" in log2 and f"Step {SAVE}/{STEPS}" not in log2
    # the cost of the loss: at most save_period steps redone, and their wall time
    assert first.last_step >= KILL_AFTER and first.steps_redone == first.last_step - SAVE <= SAVE
    assert first.lost_s is not None and first.lost_s > 0 and first.gpu_hours_lost is None  # CPU ranks: no GPUs
    assert second.status == "SUCCEEDED" and second.last_step == STEPS and second.cause == "succeeded"
    info = json.loads((Path(cfg.checkpoint_dir) / f"step_{STEPS}" / "training_info.json").read_text())
    assert info["total_steps"] == STEPS
    # the record lives beside the logs, so a re-run of the notebook finds it
    record = json.loads((Path(cfg.log_dir) / RECORD_NAME).read_text())
    assert [a["submission_id"] for a in record["runs"][cfg.submission_id]] == [first.submission_id, second.submission_id]
    again = nbtools.launch.supervise(cfg, max_attempts=3, timeout=60)  # a re-run re-attaches, submits nothing
    assert again.ok and len(again.attempts) == 2
    text = str(run)
    assert f"lost {first.steps_redone} step(s)" in text


def test_readers_show_each_step_once_and_report_the_overlap(supervised):
    cfg, run, _ = supervised
    first = run.attempts[0]
    redone = list(range(SAVE + 1, first.last_step + 1))
    traj = nbtools.trajectories.open_run(cfg.logs_url)
    df = traj.read(columns=["step"])
    per_step = df.groupby("step").size()
    assert list(per_step.index) == list(range(1, STEPS + 1))
    assert set(per_step) == {cfg.grpo.num_prompts_per_step * cfg.grpo.num_generations_per_prompt}
    assert traj.overlap["train"] == redone and df.attrs["overlap_steps"] == redone
    assert [Path(s).name for s in traj.segments] == ["exp_001", "exp_002"]
    assert traj.files()[SAVE + 1].parent.name == "exp_002" and traj.files()[SAVE].parent.name == "exp_001"
    tb = nbtools.metrics.read_tensorboard(cfg.logs_url)
    reward = nbtools.metrics.select(tb, "reward")
    assert list(reward.step) == list(range(1, STEPS + 1))
    assert tb.attrs["overlap_steps"] == redone
    # validation (every val_period, and at step 0) reads back as the trainer saved it beside each checkpoint
    acc = nbtools.metrics.select(tb, "accuracy").set_index("step").value
    assert {0, STEPS // 2, STEPS} <= set(acc.index) and acc.between(0, 1).all(), acc.to_dict()
    for step in (STEPS // 2, STEPS):
        info = json.loads((Path(cfg.checkpoint_dir) / f"step_{step}" / "training_info.json").read_text())
        assert acc[step] == pytest.approx(info["val_reward"], abs=1e-6), (step, acc.to_dict(), info)


def test_attempts_timeline_figure(supervised, tmp_path):
    cfg, run, _ = supervised
    fig = nbtools.plots.attempts_timeline(run, nbtools.metrics.read_tensorboard(cfg.logs_url), save=tmp_path / "t.png")
    ax = fig.axes[0]
    assert (tmp_path / "t.png").stat().st_size > 0
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("attempt 1" in x and "lost-node" in x for x in labels) and any("attempt 2" in x for x in labels)
    assert any("redone" in x for x in labels)
