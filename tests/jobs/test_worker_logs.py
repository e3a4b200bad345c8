"""Per-worker log links (issue 45 item 6: "the Ray dashboard's per-worker logs linked from 02/04"): the links are
built from the dashboard address and open the worker's real stdout and stderr through Ray's own log endpoint. A job
on the session's real Ray head starts an actor that prints a marker to each stream; the links must serve them."""

from __future__ import annotations

import secrets
import sys
import textwrap

import pytest
import requests

import nbtools
from nbtools.worker_logs import links, log_url


def test_log_url_is_the_dashboards_log_endpoint():
    assert log_url("http://127.0.0.1:8265/", node_id="ab12", pid=42, suffix="err") == \
        "http://127.0.0.1:8265/api/v0/logs/file?node_id=ab12&pid=42&suffix=err&lines=1000"
    assert log_url("http://h:1", submission_id="grpo-1/x") == "http://h:1/api/jobs/grpo-1%2Fx/logs"
    with pytest.raises(ValueError, match="node_id and pid"):
        log_url("http://h:1", node_id="ab12")
    with pytest.raises(ValueError, match="suffix"):
        log_url("http://h:1", node_id="ab12", pid=1, suffix="log")


def test_links_open_each_workers_stdout_and_stderr(ray_head, tmp_path):
    marker = secrets.token_hex(6)
    script = tmp_path / "actor.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys, ray
        ray.init()
        @ray.remote(num_cpus=0)
        class Printer:
            def run(self):
                print("out-{marker}", flush=True)
                print("err-{marker}", file=sys.stderr, flush=True)
                return os.getpid()
        p = Printer.remote()
        print("actor pid", ray.get(p.run.remote()))
        print("driver-{marker}")
    """))
    sid = f"worker-logs-{marker}"
    job = nbtools.jobs.submit(ray_head.dashboard_url, entrypoint=f"{sys.executable} {script}", submission_id=sid)
    job.wait(timeout=180, raise_on_failure=True)
    pid = int(job.logs().split("actor pid ")[1].split()[0])
    logs = links(ray_head.dashboard_url, submission_id=sid)
    row = logs[logs.pid == pid]
    assert len(row) == 1 and row.kind.iloc[0] == "Printer", logs[["pid", "kind", "alive", "job_id"]]
    assert row.out.iloc[0].startswith(ray_head.dashboard_url.rstrip("/") + "/api/v0/logs/file?node_id=")
    assert f"out-{marker}" in requests.get(row.out.iloc[0], timeout=30).text
    assert f"err-{marker}" in requests.get(row.err.iloc[0], timeout=30).text
    assert f"driver-{marker}" in requests.get(logs.driver, timeout=30).text
    assert set(logs.job_id) == {row.job_id.iloc[0]}  # only this job's workers
    html = logs._repr_html_()
    assert f"href='{row.out.iloc[0].replace('&', '&amp;')}'" in html and "the job driver's log" in html


def test_an_empty_table_says_why():
    import pandas as pd

    from nbtools.worker_logs import COLUMNS, WorkerLogs

    empty = WorkerLogs(pd.DataFrame(columns=COLUMNS))
    empty.dashboard_url, empty.driver = "http://h:1", None
    assert "no actors yet" in repr(empty) and "no actors yet" in empty._repr_html_()
    empty.driver = log_url("http://h:1", submission_id="s")
    assert "started no Ray actors" in repr(empty) and "http://h:1/api/jobs/s/logs" in empty._repr_html_()


def test_a_dashboard_that_does_not_answer_names_the_fix():
    from ports import free_port

    with pytest.raises(nbtools.errors.NotReadyError, match="could not list Ray's workers") as e:
        links(f"http://127.0.0.1:{free_port()}", timeout=2)
    assert "bring the cluster up first" in str(e.value.fix)
