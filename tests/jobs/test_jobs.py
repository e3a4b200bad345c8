"""`nbtools.jobs` against the REAL session Ray head (tests/conftest.py `ray_head`): every job here is a real
Ray job run by the head's job supervisor; nothing is mocked."""

from __future__ import annotations

import shlex
import socket
import sys
import uuid
from pathlib import Path

import pytest

import nbtools
from nbtools import jobs
from nbtools.errors import JobFailedError, NotFoundError, NotReadyError

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _py(code: str) -> str:
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


def _id(tag: str) -> str:
    return f"test-{tag}-{uuid.uuid4().hex[:8]}"


def _count_lines(n: int, delay: float = 0.0) -> str:
    return _py(f"import time\nfor i in range({n}):\n    print(f'line {{i}}', flush=True)\n    time.sleep({delay})")


def test_submit_and_follow_yields_every_line_in_order(ray_head):
    job = jobs.submit(ray_head.dashboard_url, entrypoint=_count_lines(5, 0.05), submission_id=_id("follow"))
    assert not job.reattached and job.id.startswith("test-follow-")
    lines = [line for line in job.follow(timeout=120) if line.startswith("line ")]
    assert lines == [f"line {i}" for i in range(5)]
    assert job.wait(timeout=30).value == "SUCCEEDED"
    assert "line 4" in job.logs() and "SUCCEEDED" in job._repr_html_()


def test_same_submission_id_reattaches_instead_of_submitting_twice(ray_head):
    sid = _id("reattach")
    first = jobs.submit(ray_head.dashboard_url, entrypoint=_py("print('first')"), submission_id=sid, metadata={"who": "test"})
    second = jobs.submit(ray_head.dashboard_url, entrypoint=_py("print('second')"), submission_id=sid)
    assert second.reattached and second.id == first.id and "first" in second.entrypoint
    table = jobs.list_jobs(ray_head.dashboard_url)
    assert (table["submission_id"] == sid).sum() == 1
    assert list(table.columns) == ["submission_id", "status", "entrypoint", "start_time", "end_time", "message"]
    assert jobs.attach(ray_head.dashboard_url, sid).info().metadata == {"who": "test"}
    second.wait(timeout=120)
    assert "first" in second.logs() and "second" not in second.logs()


def test_attach_unknown_id_lists_the_known_ones(ray_head):
    known = jobs.submit(ray_head.dashboard_url, entrypoint=_py("pass"), submission_id=_id("known"))
    with pytest.raises(NotFoundError, match=rf"(?s)no job with submission id 'nope-123'.*known ids: .*{known.id}.*fix: check the id"):
        jobs.attach(ray_head.dashboard_url, "nope-123")


def test_wait_and_follow_time_out_with_last_status_then_stop(ray_head):
    job = jobs.submit(ray_head.dashboard_url, entrypoint=_py("import time; print('started', flush=True); time.sleep(120)"),
                      submission_id=_id("slow"))
    with pytest.raises(NotReadyError, match=r"(?s)is still (PENDING|RUNNING) after 1 s.*fix: wait longer"):
        job.wait(timeout=1)
    with pytest.raises(NotReadyError, match=r"(?s)stopped following .* after 3 s.*fix: call job.follow\(\) again"):
        for _ in job.follow(timeout=3):
            pass
    assert not job.status().is_terminal()  # timing out a wait never touches the job
    assert job.stop(timeout=60).value == "STOPPED"
    with pytest.raises(JobFailedError, match="ended STOPPED") as err:
        job.wait(timeout=10)
    assert err.value.status == "STOPPED"


def test_failed_job_raises_with_status_message_and_log_tail(ray_head):
    code = "import sys\nfor i in range(60):\n    print(f'noise {i}')\nprint('boom-marker', flush=True)\nsys.exit(3)"
    job = jobs.submit(ray_head.dashboard_url, entrypoint=_py(code), submission_id=_id("fail"))
    with pytest.raises(JobFailedError, match=r"(?s)ended FAILED: .*exit code 3.*boom-marker.*fix: read the whole log with job.logs\(\)") as err:
        job.wait(timeout=120)
    e = err.value
    assert e.status == "FAILED" and "boom-marker" in e.log_tail
    assert "noise 59" in e.log_tail and "noise 0\n" not in e.log_tail  # a tail (~40 lines), not the whole log
    assert job.wait(timeout=5, raise_on_failure=False).value == "FAILED"


def test_follow_interrupted_then_resumed_has_no_duplicates_or_gaps(ray_head):
    job = jobs.submit(ray_head.dashboard_url, entrypoint=_count_lines(30, 0.1), submission_id=_id("resume"))
    first: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        for line in job.follow(timeout=120):
            first.append(line)
            if line == "line 5":
                raise KeyboardInterrupt  # what Jupyter's stop button does inside the loop body
    again = jobs.attach(ray_head.dashboard_url, job.id)  # a re-run cell gets the same Job back
    assert again is job
    rest = list(again.follow(timeout=120))
    assert first[-1] == "line 5" and rest[0] == "line 6"
    assert first + rest == job.logs().rstrip("\n").split("\n")
    assert job.status().value == "SUCCEEDED"
    assert list(job.follow()) == []  # the stream ended: nothing new, nothing repeated


def test_follow_with_progress_reads_nemo_rl_step_lines(ray_head, capsys):
    code = "import time\nfor k in range(1, 4):\n    print(f'========================= Step {k}/3 =========================', flush=True)\n    time.sleep(0.05)"
    job = jobs.submit(ray_head.dashboard_url, entrypoint=_py(code), submission_id=_id("steps"))
    status = jobs.follow_with_progress(job, total_steps=None, timeout=120)
    assert status.value == "SUCCEEDED" and job.last_step == (3, 3)
    assert "Step 1/3" not in capsys.readouterr().out  # echo=False prints no log lines


def test_ray_backend_uses_the_same_path_with_an_explicit_address(ray_head):
    cfg = nbtools.config.load(PROJECT_ROOT / "experiments" / "local.yaml", backend="ray",
                              overrides={"ray.address": ray_head.dashboard_url})
    assert cfg.dashboard_url == ray_head.dashboard_url
    handle = nbtools.backends.get(cfg).up()
    assert handle.backend == "ray" and not handle.started_by_us and handle.dashboard_url == ray_head.dashboard_url
    assert handle.resources().cpus == 4.0
    sid = _id("raybackend")
    job = jobs.submit(handle, entrypoint=_py("print('via ray backend')"), submission_id=sid)
    assert job.wait(timeout=120).value == "SUCCEEDED" and "via ray backend" in job.logs()
    assert jobs.submit(cfg.dashboard_url, entrypoint="true", submission_id=sid).reattached
    assert not nbtools.backends.get(cfg).down().stopped  # nbtools never stops a cluster it did not start


def test_unreachable_address_says_how_to_bring_the_cluster_up():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(NotReadyError, match=r"(?s)no Ray Jobs API answers at http://127.0.0.1:\d+.*fix: start or re-attach the cluster"):
        jobs.list_jobs(f"http://127.0.0.1:{port}")
    cfg = nbtools.config.load(PROJECT_ROOT / "experiments" / "local.yaml", backend="ray",
                              overrides={"ray.address": f"http://127.0.0.1:{port}"})
    with pytest.raises(NotReadyError, match=r"fix: check `ray.address`"):
        nbtools.backends.get(cfg).up()
