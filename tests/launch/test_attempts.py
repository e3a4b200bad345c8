"""The attempts record and ``launch.resubmit`` on the session's real Ray head (issue #16 item 2): which attempt gets
which id, what is recorded beside the logs, the cost of a loss from the trainer's own log lines, and the refusals
(nothing to retry, a cause a retry does not fix, a job the cluster no longer knows)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

import nbtools
import nbtools.cli
from nbtools.errors import ConflictError, NotFoundError
from nbtools.launch._attempts import RECORD_NAME, Attempt, save, steps_from_log

ROOT = Path(__file__).resolve().parents[2]
LOG = """📊 Using log directory: /runs/x/logs/exp_001
========================= Step 1/3 =========================
📊 Training Results:
  • Total step time: 0.50s
========================= Step 2/3 =========================
📊 Training Results:
  • Total step time: 0.75s
Saving checkpoint for step 2...
========================= Step 3/3 =========================
rehearsal rank exited abnormally: process 1 terminated with signal SIGKILL"""


@pytest.fixture
def cfg(ray_cfg, tmp_path, monkeypatch, request):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path))
    seed = 1000 + len(request.node.name)  # a submission id of its own per test
    c = ray_cfg(nbtools.config.load(ROOT / "experiments" / "local.yaml")).replace(
        **{"grpo.max_num_steps": 3, "grpo.seed": seed, "checkpointing.save_period": 1})
    yield c
    nbtools.jobs.stop_jobs(c.dashboard_url, prefix=c.submission_id)


def _fail(cfg, submission_id: str, text: str):
    script = f"import sys\nprint({text!r}, flush=True)\nsys.exit(1)\n"
    job = nbtools.jobs.submit(cfg.dashboard_url, entrypoint=f"{sys.executable} -c {shlex.quote(script)}",
                              submission_id=submission_id)
    job.wait(timeout=120, raise_on_failure=False)
    return job


def test_steps_from_the_trainer_log():
    assert steps_from_log(LOG) == (2, None, {1: 0.5, 2: 0.75})
    assert steps_from_log("Resuming from checkpoint /c/step_20 (auto-resume)\nStep 21/80\n")[1] == 20


def test_resubmit_gives_the_next_attempt_its_own_id_and_charges_the_loss(cfg):
    ckpts = Path(cfg.checkpoint_dir)
    (ckpts / "step_1").mkdir(parents=True)
    (ckpts / "tmp_step_2").mkdir()  # written when the rank died: never a resume point
    first = _fail(cfg, cfg.submission_id, LOG)
    assert nbtools.launch.attach(cfg).id == first.id  # nothing recorded yet: attempt 1's id
    job = nbtools.launch.resubmit(cfg)
    try:
        assert job.id == f"{cfg.submission_id}-attempt2" and job.id != first.id
        assert nbtools.launch.attach(cfg).id == job.id  # found again from the record: the latest attempt
        md = job.info().metadata
        assert md["nbtools.attempt"] == "2" and md["nbtools.resumed_from"] == "1" and md["nbtools.run"] == cfg.submission_id
    finally:
        job.stop()
    one, two = nbtools.launch.read_attempts(cfg)
    assert (one.n, one.status, one.cause, one.retry, one.last_step) == (1, "FAILED", "lost-node", True, 2)
    assert (one.steps_redone, one.lost_s, one.gpus, one.gpu_hours_lost) == (1, 0.75, None, None)  # step 2 is redone
    assert (two.n, two.submission_id, two.resumed_from) == (2, job.id, 1)
    record = json.loads((Path(cfg.log_dir) / RECORD_NAME).read_text())
    assert record["experiment"] == cfg.name and len(record["runs"][cfg.submission_id]) == 2
    table = nbtools.launch.attempts(cfg)
    assert list(table.n) == [1, 2] and "step_seconds" not in table


def test_resubmit_refuses_what_a_retry_does_not_fix(cfg, capfd):
    with pytest.raises(NotFoundError, match=r"launch it first: nbtools.launch.submit\(cfg\)"):
        nbtools.launch.resubmit(cfg)
    _fail(cfg, cfg.submission_id, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    with pytest.raises(ConflictError, match=r"(?s)cause 'oom'.*lower the memory per GPU.*force=True"):
        nbtools.launch.resubmit(cfg)
    assert [a.cause for a in nbtools.launch.read_attempts(cfg)] == ["oom"]
    assert f"{cfg.submission_id}-attempt2" not in set(nbtools.jobs.list_jobs(cfg.dashboard_url).submission_id)
    # the same diagnosis from a terminal, by submission id on the experiment's cluster
    code = nbtools.cli.main(["diagnose", cfg.submission_id, "--experiment", str(ROOT / "experiments" / "local.yaml"),
                     f"ray.dashboard_port={cfg.ray.dashboard_port}", f"ray.port={cfg.ray.port}", "--json"])
    data = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert code == 1 and (data["cause"], data["retry"], data["submission_id"]) == ("oom", False, cfg.submission_id)


def test_an_attempt_the_cluster_no_longer_knows_is_lost_and_counts(cfg):
    save(cfg, [Attempt(1, cfg.submission_id, status="RUNNING")])  # recorded before the head was restarted
    run = nbtools.launch.supervise(cfg, max_attempts=1, timeout=30)
    assert not run.ok and run.status == "LOST" and len(run.attempts) == 1, str(run)
    assert run.attempts[0].cause == "lost-node" and "no longer knows" in run.attempts[0].evidence
    assert "gave up after 1 attempt(s)" in run.note and "resubmit" in str(run)
    with pytest.raises(nbtools.errors.ConfigError, match="max_attempts=3"):
        nbtools.launch.supervise(cfg, max_attempts=0)


def test_cli_retry_says_what_to_run_first(cfg, capfd):
    ports = [f"ray.dashboard_port={cfg.ray.dashboard_port}", f"ray.port={cfg.ray.port}"]
    args = ["launch", ROOT / "experiments" / "local.yaml", "--retry", "--json", "grpo.max_num_steps=3",
            f"grpo.seed={cfg.grpo.seed}", "checkpointing.save_period=1", *ports]
    capfd.readouterr()
    code = nbtools.cli.main([str(a) for a in args])
    out, err = capfd.readouterr()
    data = json.loads(out)
    assert code == 1 and "expected a first attempt" in data["error"], data
    assert "`nbtools launch EXPERIMENT.yaml`" in data["fix"] and "--supervise" in data["fix"], data
