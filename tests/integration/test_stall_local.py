"""Issue #44 on the real local Ray head: injected faults (``rehearsal.faults``) in real rehearsal jobs, read back through
Ray's dashboard (py-spy stacks of the job's processes), judged by ``nbtools.launch.stall``.

Each fault kind is named with its rank and phase within two minutes of the fault; a healthy run is never called
stalled; ``supervise(stop_when_stalled=True)`` stops a hang, writes the evidence bundle (free of secrets) and records
the cause. One shrunk rehearsal per case (a few steps of a tiny task, 5 warm-up steps), run one after the other on the
session's head.
"""

from __future__ import annotations

import json
import os
import tarfile
import time
from pathlib import Path

import pytest

import nbtools
from nbtools import storage
from nbtools.cli import main
from nbtools.launch._attempts import read_attempts

ROOT = Path(__file__).resolve().parents[2]
SHORT = {"rehearsal.num_train": 64, "rehearsal.num_test": 16, "rehearsal.warmup_steps": 5,
         "grpo.num_prompts_per_step": 4, "grpo.num_generations_per_prompt": 4, "grpo.max_val_samples": 8,
         "grpo.val_at_start": False, "grpo.max_num_steps": 6, "grpo.val_period": 6, "checkpointing.save_period": 2,
         "stall.floor_s": 15.0, "stall.k": 5.0}
SENTINEL = "hf_SentinelStallBundle0123456789abcdef"
WITHIN_S = 120


@pytest.fixture(scope="module")
def cfg_for(ray_cfg, tmp_path_factory):
    runs = tmp_path_factory.mktemp("stall")
    old = os.environ.get("NBTOOLS_RUNS_DIR")
    os.environ["NBTOOLS_RUNS_DIR"] = str(runs)
    base = ray_cfg(nbtools.config.load(ROOT / "experiments" / "local.yaml"))

    made = []

    def make(name: str, faults: list[dict], **extra):
        made.append(base.replace(**{**SHORT, "name": name, "rehearsal.faults": faults, **extra}))
        return made[-1]

    yield make
    for cfg in made:  # only this module's runs (and their attempts): the session's head is shared by the xdist workers
        nbtools.jobs.stop_jobs(cfg.dashboard_url, prefix=cfg.submission_id)
    if old is None:
        os.environ.pop("NBTOOLS_RUNS_DIR", None)
    else:
        os.environ["NBTOOLS_RUNS_DIR"] = old


def _fault_time(job, deadline: float) -> float:
    """When the job's log shows the injected fault (the test's clock for "within two minutes")."""
    while time.monotonic() < deadline:
        if "[rehearsal fault]" in job.logs():
            return time.monotonic()
        if job.status().is_terminal():
            return time.monotonic()
        time.sleep(0.5)
    pytest.fail(f"the fault never happened:\n{job.log_tail(40)}")


def _until(cfg, job, ok, t_fault: float):
    """Ask ``stall`` until ``ok(verdict)``; fail after WITHIN_S seconds from the fault."""
    v = None
    while time.monotonic() - t_fault < WITHIN_S:
        v = nbtools.launch.stall(cfg, job.id, bundle=False)
        if ok(v):
            return v, time.monotonic() - t_fault
        time.sleep(2)
    pytest.fail(f"not named within {WITHIN_S} s of the fault; last verdict:\n{v}\n{job.log_tail(30)}")


def _rank(v, n):
    return next(r for r in v.ranks if r.rank == n)


def test_healthy_run_is_never_called_stalled(cfg_for):
    cfg = cfg_for("stall-healthy", [])
    job = nbtools.launch.submit(cfg)
    seen = []
    deadline = time.monotonic() + 300
    while not job.status().is_terminal() and time.monotonic() < deadline:
        v = nbtools.launch.stall(cfg, job.id, bundle=False, samples=1)
        seen.append(v.status)
        assert v.status != "stalled", str(v)
        time.sleep(1)
    v = nbtools.launch.stall(cfg, job.id, bundle=False)
    assert (v.status, v.job_status, v.cause) == ("ended", "SUCCEEDED", "succeeded"), str(v)
    assert "running" in seen


def test_hang_is_stopped_by_supervise_with_rank_phase_cause_and_bundle(cfg_for, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SENTINEL)  # the secret of this machine: never in the bundle
    monkeypatch.setenv("RAY_SENTINEL_TOKEN", SENTINEL + "x")  # kept by the env filter, redacted by its name
    cfg = cfg_for("stall-hang", [{"kind": "hang", "rank": 1, "step": 3, "phase": "refit"}])
    t0 = time.monotonic()
    run = nbtools.launch.supervise(cfg, max_attempts=2, timeout=240, stop_when_stalled=True, stall_every=3)
    wall = time.monotonic() - t0
    last = read_attempts(cfg)[-1]
    assert run.status == "STOPPED" and len(run.attempts) == 1, str(run)  # stopped, and a hang is not retried
    assert last.cause == "hang" and not last.retry
    assert "rank 1 is in weight refit" in last.evidence, last.evidence
    assert "rank 0" in last.evidence and "wait in" in last.evidence
    assert "weight refit" in last.fix and "resumes from the newest complete step_N" in last.fix
    assert wall < 60 + WITHIN_S, wall  # start-up, two steps, the fault, the threshold, one check
    d = nbtools.launch.diagnose(cfg)
    assert d.cause == nbtools.launch.Cause.HANG and not d.retry
    bundles = storage.glob(storage.join(cfg.logs_url, "nbtools-diagnosis"), "*.tar.gz")
    assert len(bundles) == 1
    raw = storage.read_bytes(bundles[0])
    with tarfile.open(fileobj=__import__("io").BytesIO(raw)) as tar:
        names = tar.getnames()
        texts = {n: tar.extractfile(n).read().decode() for n in names if tar.getmember(n).isfile()}
    assert any("/stacks/sample1/" in n for n in names) and any(n.endswith("ray_status.txt") for n in names)
    for key in ("versions.json", "config.json", "env.json", "gpu_memory.json", "logs/driver.log", "verdict.json"):
        assert any(n.endswith(key) for n in names), key
    verdict = json.loads(next(t for n, t in texts.items() if n.endswith("verdict.json")))
    assert verdict["status"] == "stalled" and verdict["stragglers"] == [1] and verdict["cause"] == "hang"
    stacks = "".join(t for n, t in texts.items() if "/stacks/" in n)
    assert '"rank 1"' in stacks and "refit" in stacks  # real py-spy output, thread names included
    summary = storage.read_text(bundles[0].replace(".tar.gz", ".md"))
    assert "weight refit" in summary and "straggler" in summary
    for text in [*texts.values(), summary]:
        assert SENTINEL not in text


def test_exit_is_named_with_rank_and_phase(cfg_for):
    cfg = cfg_for("stall-exit", [{"kind": "exit", "rank": 1, "step": 2, "phase": "generation"}])
    job = nbtools.launch.submit(cfg)
    t = _fault_time(job, time.monotonic() + 240)
    v, took = _until(cfg, job, lambda v: v.status == "ended", t)
    assert v.stragglers == [1] and _rank(v, 1).phase == "generation", str(v)
    assert "Aborted" in _rank(v, 1).error and _rank(v, 1).source == "faulthandler"
    print(f"exit named in {took:.1f} s")


def test_oom_is_named_with_rank_phase_and_cause_also_by_the_cli(cfg_for, capfd):
    faults = [{"kind": "oom", "rank": 0, "step": 2, "phase": "train"}]
    cfg = cfg_for("stall-oom", faults)
    job = nbtools.launch.submit(cfg)
    t = _fault_time(job, time.monotonic() + 240)
    v, took = _until(cfg, job, lambda v: v.status == "ended", t)
    assert v.cause == "oom" and v.stragglers == [0] and _rank(v, 0).phase == "train fwd/bwd", str(v)
    assert "OutOfMemoryError" in _rank(v, 0).error
    print(f"oom named in {took:.1f} s")
    capfd.readouterr()
    rc = main(["stall", str(ROOT / "experiments" / "local.yaml"), f"ray.port={cfg.ray.port}",
               f"ray.dashboard_port={cfg.ray.dashboard_port}", "--id", job.id, "--json", "--no-bundle"])
    doc = json.loads(capfd.readouterr().out)
    assert rc == 1 and {"status", "stalled_for_s", "ranks", "stragglers", "cause", "fix", "bundle"} <= set(doc)
    assert (doc["status"], doc["cause"], doc["stragglers"]) == ("ended", "oom", [0]), doc
    assert doc["ranks"][0]["phase"] == "train fwd/bwd" and "_train" in doc["ranks"][0]["stack"]


def test_slow_rank_is_a_straggler_not_a_stall(cfg_for):
    cfg = cfg_for("stall-slow", [{"kind": "slow", "rank": 1, "step": 2, "phase": "checkpoint", "seconds": 8}],
                  **{"stall.floor_s": 120.0})
    job = nbtools.launch.submit(cfg)
    t = _fault_time(job, time.monotonic() + 240)
    v, took = _until(cfg, job, lambda v: v.stragglers == [1], t)
    assert v.status == "running" and _rank(v, 1).phase == "checkpoint save", str(v)
    assert _rank(v, 0).collective, str(v)  # rank 0 waits for it in a collective
    print(f"slow named in {took:.1f} s")
    nbtools.jobs.attach(cfg.dashboard_url, job.id).stop(wait=True)


def test_a_job_a_restarted_head_forgot_is_stalled_as_lost_node(cfg_for):
    """The record says RUNNING, the cluster does not know the job (its head restarted: kuberay#3860)."""
    from nbtools.launch._attempts import Attempt, save

    cfg = cfg_for("stall-ghost", [])
    save(cfg, [Attempt(1, "stall-ghost-0123456789", started=time.time() - 600, status="RUNNING", last_step=7)])
    v = nbtools.launch.stall(cfg)
    assert (v.status, v.cause, v.job_status, v.last_step) == ("stalled", "lost-node", "UNKNOWN", 7), str(v)
    assert "does not know it" in v.evidence and "resubmit" in v.fix
    assert v.bundle and storage.exists(v.bundle) and storage.exists(v.summary_url)
