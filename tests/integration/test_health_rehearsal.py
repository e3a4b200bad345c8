"""Issue #29 on the real local rehearsal (``python -m nbtools.rehearsal``: 2 gloo ranks, real TensorBoard files and
NeMo-RL-shaped dumps; a Ray job on the session head for the supervisor): a reward mix the task's responses never
satisfy is refused before the launch; forced through, ``health`` flags it unhealthy from its first steps and
``supervise(stop_when_unhealthy=True)`` stops it; a generation limit set too low is flagged as truncation; a healthy
rehearsal raises no unhealthy finding; the same run gives the same findings on disk and from the GCS emulator.

Runs are short (6-12 steps). One seed of the healthy rehearsal here; ``benchmarks/bench_health.py --seeds 0 1 2``
runs three (too heavy for a test on a 2-core machine shared by several jobs).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import nbtools
from nbtools import health
from nbtools.errors import LintError
from nbtools.launch._attempts import RECORD_NAME

pytestmark = pytest.mark.slow  # every test reads a rehearsal run of its own (6-12 steps)
ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "experiments" / "local.yaml"
NEVER = [{"name": "exact_alnum", "weight": 1.0, "kwargs": {"answer_tag": "final"}}]  # the task writes <answer>
SHORT = ["grpo.val_period=4", "checkpointing.save_period=100"]


def rehearse(runs: Path, steps: int, *overrides: str, timeout: float = 600) -> Path:
    """Run the rehearsal to the end in its own runs dir; return its log_dir."""
    cmd = [sys.executable, "-m", "nbtools.rehearsal", "--config", str(CONFIG), "--runs-dir", str(runs),
           f"grpo.max_num_steps={steps}", *SHORT, *overrides]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"rehearsal timed out:\n{out[-3000:]}")
    assert proc.returncode == 0, out[-3000:]
    return runs / "local-rehearsal" / "logs"


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    return rehearse(tmp_path_factory.mktemp("healthy"), 12, "grpo.seed=0")


@pytest.fixture(scope="module")
def truncated(tmp_path_factory):
    return rehearse(tmp_path_factory.mktemp("truncated"), 6, "grpo.max_new_tokens=6")


def test_a_healthy_rehearsal_raises_no_unhealthy_finding(healthy):
    cfg = nbtools.config.load(CONFIG)
    for config in (None, cfg):
        report = health.check(healthy, config=config)
        assert report.status != "unhealthy" and not report.unhealthy, str(report)
        assert report.steps == (1, 12) and [c.check for c in report.checks] == list(health.CHECKS)
    # the checks ran on what the run wrote, not on nothing
    assert report["zero-reward"].value < 0.5 and report["answer-format"].value < 0.1
    assert report["logprob-mismatch"].value == pytest.approx(1.0, abs=0.01)
    assert report["truncation"].message.endswith("limit of 12 tokens") and report["length-collapse"].value > 0.5


def cli(*args: str) -> tuple[int, dict]:
    """``nbtools health ... --json`` as a real process: (exit status, the one JSON document on stdout)."""
    r = subprocess.run([sys.executable, "-m", "nbtools.cli", "health", *args, "--json"], capture_output=True,
                       text=True, timeout=300, cwd=ROOT)
    return r.returncode, json.loads(r.stdout)


def test_the_cli_prints_the_documented_shape_and_exits_0(healthy):
    code, doc = cli(str(healthy))
    assert code == 0, doc
    assert set(doc) == {"status", "steps", "checks"} and doc["status"] in ("healthy", "solved", "warning")
    assert doc["steps"] == [1, 12]
    for c in doc["checks"]:
        assert set(c) == {"check", "status", "first_step", "value", "threshold", "message", "fix", "examples"}
        assert c["status"] in ("ok", "solved", "warning", "unhealthy", "unknown") and c["fix"]  # unknown: no data to judge
        assert all(set(e) == {"step", "idx"} for e in c["examples"])


def test_a_generation_limit_set_too_low_is_flagged_as_truncation(truncated):
    cfg = nbtools.config.load(CONFIG, overrides={"grpo.max_new_tokens": 6})
    for config in (None, cfg):  # from train/truncation_rate alone, and with the limit the config gives
        t = health.check(truncated, config=config)["truncation"]
        assert t.status == "unhealthy" and t.first_step == 1 and t.value > 0.9, t
        assert "grpo.max_new_tokens" in t.fix and len(t.examples) == 5
    run = nbtools.trajectories.open_run(truncated)
    for e in t.examples:  # the examples are records that hit the limit
        assert run.record(e.step, e.idx)["generation_length"] >= 6
    code, doc = cli(str(truncated), "--config", str(CONFIG))
    assert code == 1 and doc["status"] == "unhealthy" and set(doc) == {"status", "steps", "checks"}
    assert {c["check"]: c["status"] for c in doc["checks"]}["truncation"] == "unhealthy"


def test_the_same_findings_on_disk_and_from_the_gcs_emulator(healthy, truncated, tmp_path, monkeypatch):
    from gcs_emulator import GcsEmulator

    monkeypatch.setenv("NBTOOLS_CACHE_DIR", str(tmp_path / "cache"))
    with GcsEmulator() as gcs:
        gcs.create_bucket("health")
        for name, logs in (("healthy", healthy), ("truncated", truncated)):
            gcs.fs.put(str(logs), f"health/{name}/logs", recursive=True)
            url = f"gs://health/{name}/logs"
            local = health.check(logs, cache=False).to_dict()
            remote = health.check(url).to_dict()
            assert remote == local, (name, remote, local)
            assert nbtools.trajectories.open_run(url).steps == nbtools.trajectories.open_run(logs).steps


@pytest.fixture(scope="module")
def stopped(ray_cfg, tmp_path_factory):
    """A rehearsal whose reward mix parses a tag the task never writes: refused by lint, forced through with the Jobs
    API, supervised with stop_when_unhealthy=True."""
    runs = tmp_path_factory.mktemp("unhealthy")
    old = os.environ.get("NBTOOLS_RUNS_DIR")
    os.environ["NBTOOLS_RUNS_DIR"] = str(runs)
    cfg = ray_cfg(nbtools.config.load(CONFIG)).replace(**{
        "grpo.max_num_steps": 200, "grpo.val_period": 100, "checkpointing.save_period": 100,
        "rehearsal.reward_functions": NEVER})
    try:
        with pytest.raises(LintError) as refused:
            nbtools.launch.submit(cfg)
        spec = nbtools.launch.build(cfg)  # forced through: straight to the Jobs API, as a user skipping lint would
        nbtools.jobs.submit(spec.address, entrypoint=spec.entrypoint, submission_id=spec.submission_id,
                            runtime_env=spec.runtime_env, metadata=spec.metadata)
        result = nbtools.launch.supervise(cfg, max_attempts=2, timeout=400, stop_when_unhealthy=True, health_every=2)
        yield cfg, refused.value, result
    finally:
        # only this run: the session's Ray head is shared by every xdist worker (a bare "local-rehearsal-" prefix
        # once stopped test_supervise_local's run on the other worker)
        nbtools.jobs.stop_jobs(cfg.dashboard_url, prefix=cfg.submission_id)
        if old is None:
            os.environ.pop("NBTOOLS_RUNS_DIR", None)
        else:
            os.environ["NBTOOLS_RUNS_DIR"] = old


def test_a_reward_mix_the_responses_never_satisfy_is_refused_before_the_launch(stopped):
    _, refused, _ = stopped
    text = str(refused)
    assert "rehearsal.reward_functions" in text and "parse <final>" in text and "scores 0" in text, text


def test_forced_through_it_is_flagged_within_5_steps_and_stopped(stopped):
    cfg, _, run = stopped
    assert not run.ok and run.status == "STOPPED" and len(run.attempts) == 1, str(run)  # never retried
    a = run.attempts[0]
    assert a.cause == "unhealthy" and a.retry is False and "zero-reward" in a.evidence, a
    assert a.last_step is not None and a.last_step < cfg.grpo.max_num_steps, a  # stopped, not finished
    report = health.check(cfg.logs_url, config=cfg)
    zero = report["zero-reward"]
    assert zero.status == "unhealthy" and zero.first_step <= 5 and zero.value == 1.0, zero
    record = json.loads((Path(cfg.log_dir) / RECORD_NAME).read_text())
    assert record["runs"][cfg.submission_id][0]["cause"] == "unhealthy"
    d = nbtools.launch.diagnose(cfg)
    assert d.cause == "unhealthy" and not d.retry and "zero-reward" in d.evidence and "reward" in d.fix, d


def test_the_explorer_jumps_to_a_findings_records_and_the_panel_shows_them(truncated, healthy, monkeypatch):
    run = nbtools.trajectories.open_run(truncated)
    report = health.check(run)
    ex = nbtools.explorer.explore(run, step=run.steps[0])
    ex.jump(report["truncation"], 2)
    want = report["truncation"].examples[2]
    assert (ex.view.step, ex.view.idx) == (want.step, want.idx) and ex.step.value == want.step
    ex.jump(report)  # the worst finding's first example
    first = report.findings[0].examples[0]
    assert report.findings[0].status == "unhealthy" and (ex.view.step, ex.view.idx) == (first.step, first.idx)
    calm = nbtools.explorer.explore(nbtools.trajectories.open_run(healthy), step=3)
    calm.jump(health.check(healthy, checks=["zero-reward", "truncation"]))  # nothing to open: it stays
    assert calm.step.value == 3 and "no finding" in calm.status.value
    with pytest.raises(nbtools.errors.NotFoundError, match="found none"):
        ex.show(run.steps[-1], 10_000)
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(truncated.parent.parent))
    cfg = nbtools.config.load(CONFIG, overrides={"grpo.max_new_tokens": 6})
    assert Path(cfg.logs_url) == truncated
    panel = health.display.panel(cfg, until_done=False)
    assert panel.report.status == "unhealthy" and "truncation" in panel.widget.value
