"""Issue #16 on the simulated GKE (tests/sim_gke.py: Kubernetes API double + KubeRay stand-in, GCS emulator, a Ray
head behind the port-forward): a job whose worker pod is reclaimed (kubelet's graceful-node-shutdown events, the pod
deleted and replaced) is diagnosed as preempted from the pods' events; a later job that dies of CUDA OOM is
diagnosed as OOM (the earlier preemption lies outside its time window) and ``supervise`` does not retry it."""

from __future__ import annotations

import shlex
import sys
import time

import nbtools
from nbtools import storage
from nbtools.launch._attempts import record_url

SIM_GKE = {"steps": 5}
NODE_DIED = ("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
             "The actor died because its node has died. Node Id: 2e4f0c9a1b7d")
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.82 GiB. GPU 3 has a total capacity of "
       "178.35 GiB of which 5.12 GiB is free.")


def _job(cfg, submission_id: str, lines, *, wait_for=None):
    """A job that prints ``lines`` and exits 1 (after ``wait_for`` exists, when given)."""
    script = "import pathlib, sys, time\n"
    if wait_for is not None:
        script += f"while not pathlib.Path({str(wait_for)!r}).exists(): time.sleep(0.05)\n"
    script += "".join(f"print({line!r}, flush=True)\n" for line in lines) + "sys.exit(1)\n"
    return nbtools.jobs.submit(cfg.dashboard_url, entrypoint=f"{sys.executable} -c {shlex.quote(script)}",
                               submission_id=submission_id)


def _until(predicate, timeout: float, what: str):
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.05)


def test_a_reclaimed_pod_is_preemption_and_an_oom_is_not_retried(sim_gke, tmp_path):
    sim = sim_gke
    with sim.activated():
        cfg = sim.cfg()
        cluster = nbtools.backends.get(cfg)
        try:
            cluster.up(timeout=120, progress=False)
            flag = tmp_path / "node-gone"
            job = _job(cfg, cfg.submission_id, NODE_DIED, wait_for=flag)  # attempt 1 of the run, training
            _until(lambda: job.status().value == "RUNNING", 60, "the job to run")
            gone = sim.preempt(replace_after=0.3)["metadata"]["name"]
            preempted_at = time.time()
            flag.touch()
            job.wait(timeout=120, raise_on_failure=False)
            _until(lambda: gone not in sim.pods(), 30, "the reclaimed pod to be deleted")

            d = nbtools.launch.diagnose(cfg)  # no id: the run's latest attempt (none recorded yet: attempt 1)
            assert (d.submission_id, d.status, d.cause, d.retry) == (cfg.submission_id, "FAILED", "preempted", True)
            assert f"TerminationByKubelet: Pod/{gone}: Pod was terminated in response to imminent node shutdown." in d.evidence
            assert any("PreemptionNotice" in e for e in d.events)
            assert nbtools.launch.diagnose_log(job.logs()).cause == "lost-node"  # the log alone cannot tell why

            # a later run of another config dies of CUDA OOM: supervise re-attaches to it, diagnoses, and stops
            oom_cfg = cfg.replace(**{"grpo.max_num_steps": 4})
            _until(lambda: time.time() > preempted_at + 2.5, 5, "the preemption to lie before the next job")
            failed = _job(oom_cfg, oom_cfg.submission_id, ["Traceback (most recent call last):", OOM])
            failed.wait(timeout=120, raise_on_failure=False)
            run = nbtools.launch.supervise(oom_cfg, max_attempts=3, timeout=120)
            assert not run.ok and run.status == "FAILED" and len(run.attempts) == 1, str(run)
            assert run.diagnosis.cause == "oom" and run.attempts[0].cause == "oom" and run.attempts[0].retry is False
            assert "not retried" in run.note and "lower the memory per GPU" in str(run)
            ids = set(nbtools.jobs.list_jobs(cfg.dashboard_url).submission_id)
            assert f"{oom_cfg.submission_id}-attempt2" not in ids  # nothing was resubmitted
            assert record_url(oom_cfg).startswith("gs://") and storage.exists(record_url(oom_cfg))  # beside the logs
            assert nbtools.launch.read_attempts(oom_cfg)[0].cause == "oom"
        finally:
            cluster.down()
    assert not sim.kuberay.errors
