"""The local backend's Ray head, against REAL Ray heads (the session `ray_head` fixture plus one of its own).

Only "Ray missing" uses a stand-in: it hides the installed `ray` from `importlib.util.find_spec`, because
uninstalling Ray from the shared venv is not an option.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests
from ports import free_port

import nbtools
from nbtools.backends import _head as local
from nbtools.backends._types import fetch_resources
from nbtools.backends.local import stop_all_under
from nbtools.errors import ConflictError, DependencyError, NotReadyError

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _cfg(**overrides):
    return nbtools.config.load(PROJECT_ROOT / "experiments" / "local.yaml", backend="local", overrides=overrides)


def _session_cfg(head):
    return _cfg(**{"ray.port": head.extra["port"], "ray.dashboard_port": head.extra["dashboard_port"]})


def _gcs_servers(pid: int) -> list[psutil.Process]:
    return [c for c in psutil.Process(pid).children(recursive=True) if c.name() == "gcs_server"]


def test_up_records_pid_ports_and_temp_dir_under_runs_dir(ray_head, ray_head_runs_dir):
    rec = json.loads((ray_head_runs_dir / "ray" / "head.json").read_text())
    assert rec["pid"] == ray_head.pid and rec["status"] == "running"
    assert rec["dashboard_url"] == ray_head.dashboard_url
    assert ray_head.dashboard_url.startswith("http://127.0.0.1:")
    assert psutil.pid_exists(rec["pid"]) and len(_gcs_servers(rec["pid"])) == 1
    temp = Path(rec["temp_dir"])
    assert temp == ray_head.temp_dir and (temp / "session_latest" / "logs").is_dir()
    if not ray_head.note:  # pytest's tmp path is usually short enough for Ray's socket paths
        assert temp == ray_head_runs_dir.resolve() / "ray"
    assert requests.get(f"{ray_head.dashboard_url}/api/version", timeout=5).json()["ray_version"]


def test_up_again_reattaches_and_never_starts_a_second_head(ray_head, ray_head_runs_dir, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(ray_head_runs_dir))
    again = nbtools.backends.get(_session_cfg(ray_head)).up()
    assert again.reattached and again.started_by_us and again.pid == ray_head.pid
    assert len(_gcs_servers(ray_head.pid)) == 1


def test_resources_like_ray_status_with_head_memory(ray_head, ray_head_runs_dir, monkeypatch):
    res = ray_head.resources()
    assert res.nodes == 1 and res.cpus == 4.0 and res.gpus == 0.0  # ray.num_cpus = 4 reached `ray start`
    assert res.memory_bytes > 0 and res.object_store_bytes > 0
    assert res.head_rss_bytes > 50 * 2**20 and res.head_processes >= 3
    assert "Active: 1 node(s)" in res.summary() and "4.0 CPU" in res.summary()
    assert "head memory" in res._repr_html_()
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(ray_head_runs_dir))
    via_cfg = nbtools.backends.get(_session_cfg(ray_head)).resources()
    assert via_cfg.cpus == 4.0 and via_cfg.head_rss_bytes
    assert fetch_resources(ray_head.dashboard_url).head_rss_bytes is None  # a bare address: not ours


def test_head_not_started_by_us_is_attached_and_left_running(ray_head, tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path))
    cfg = _session_cfg(ray_head)
    other = nbtools.backends.get(cfg).up()
    assert not other.started_by_us and other.pid is None and "not started from" in other.note
    assert not (tmp_path / "ray" / "head.json").exists()
    result = nbtools.backends.get(cfg).down()
    assert not result.stopped and "nothing to stop" in result.message
    assert stop_all_under(tmp_path) == []
    assert psutil.pid_exists(ray_head.pid) and requests.get(f"{ray_head.dashboard_url}/api/version", timeout=5).ok


@pytest.mark.parametrize("key", ["ray.dashboard_port", "ray.port"])
def test_port_in_use_names_the_port_and_the_fix(key, tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cfg = _cfg(**{"ray.port": free_port(), "ray.dashboard_port": free_port(), key: port})
        with pytest.raises(ConflictError, match=rf"(?s)port {port} \({key}\) is already in use.*fix: choose another `{key}`"):
            nbtools.backends.get(cfg).up()
    assert not (tmp_path / "ray" / "head.json").exists()


def test_recorded_head_on_other_ports_is_a_conflict_not_a_second_head(ray_head, ray_head_runs_dir, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(ray_head_runs_dir))
    cfg = _cfg(**{"ray.port": ray_head.extra["port"], "ray.dashboard_port": free_port()})
    with pytest.raises(ConflictError, match=r"fix: stop it first \(notebook 09"):
        nbtools.backends.get(cfg).up()
    assert len(_gcs_servers(ray_head.pid)) == 1


def test_temp_dir_falls_back_to_short_tmp_dir_for_long_runs_dirs(tmp_path):
    short, note = local.temp_dir_for("/tmp/r")
    assert short == Path("/tmp/r/ray") and note == ""
    long_dir = tmp_path / ("x" * 90)
    temp, note = local.temp_dir_for(long_dir)
    assert temp.parent == Path("/tmp") and temp.name.startswith("nbtools-ray-")
    assert temp == local.temp_dir_for(long_dir)[0]  # stable: re-attaching finds the same dir
    assert temp != local.temp_dir_for(tmp_path / ("y" * 90))[0]
    assert "too long for Ray's unix socket paths" in note and str(temp) in note
    assert len(str(temp)) + local._SOCKET_SUFFIX <= 107


@pytest.mark.slow  # a real `ray start` that dies
def test_head_dying_during_start_raises_with_its_log_tail(tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path))
    cfg = _cfg(**{"ray.port": free_port(), "ray.dashboard_port": free_port()})
    with pytest.raises(NotReadyError, match=r"(?s)exited during start.*not a valid integer.*fix: read .*head.log") as err:
        local.up(cfg, extra_args=("--object-store-memory", "lots"), progress=False, timeout=60)
    assert any("lots" in e for e in err.value.events)
    assert not (tmp_path / "ray" / "head.json").exists()  # a dead head leaves no record to re-attach to


_STUCK_HEAD = """
import os, pathlib, sys, time
args = sys.argv[1:]
logs = pathlib.Path(args[args.index("--temp-dir") + 1]) / "session_latest" / "logs"
logs.mkdir(parents=True, exist_ok=True)
with open(os.environ["STARTS_FILE"], "a") as f:
    f.write(f"{os.getpid()}\\n")
(logs / "raylet.out").write_text("[2026-11-24 01:58:22,383 C 18848 18848] (raylet) node_manager.cc:3588: "
                                 "Check failed: Timed out waiting for file /tmp/x/dashboard_agent_listen_port_ab\\n")
time.sleep(600)  # what `ray start --block` does when its raylet died of a failed check: it keeps waiting
"""


def test_raylet_failed_check_is_retried_at_once_not_waited_out(tmp_path, monkeypatch):
    """A TEST DOUBLE for `ray start --block` (a script) reproduces what a real head did on a loaded 2-core machine:
    its raylet stopped on "Check failed: Timed out waiting for file …" while `ray start` kept running. up() must see
    the raylet's fatal line, stop that head, start again (3 tries) and then fail fast, not wait out its timeout.
    The parent pauses 1 s after each spawn, as a loaded machine deschedules it: the raylet's line is written before
    the parent runs again, and must still count as this try's (a 3.11 fresh-clone run under load waited 300 s)."""
    script = tmp_path / "stuck_ray.py"
    script.write_text(_STUCK_HEAD)

    class DescheduledAfterSpawn(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            time.sleep(1.0)

    monkeypatch.setattr(subprocess, "Popen", DescheduledAfterSpawn)
    starts = tmp_path / "starts"
    monkeypatch.setenv("STARTS_FILE", str(starts))
    monkeypatch.setattr(local, "_ray_cli", lambda: [sys.executable, str(script)])
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    cfg = _cfg(**{"ray.port": free_port(), "ray.dashboard_port": free_port()})
    t0 = time.monotonic()
    with pytest.raises(NotReadyError, match=r"(?s)exited during start after its raylet stopped on a failed check"
                                            r".*Timed out waiting for file"):
        local.up(cfg, progress=False, timeout=300)
    assert time.monotonic() - t0 < 60
    pids = [int(x) for x in starts.read_text().split()]
    assert len(pids) == 3  # every try was a fresh head
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
    assert not (tmp_path / "runs" / "ray" / "head.json").exists()


def test_ray_missing_is_a_dependency_error_with_the_pip_fix(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name.split(".")[0] == "ray" else real(name, *a))
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path))
    with pytest.raises(DependencyError, match=r"fix: .* -m pip install 'ray\[default\]'"):
        nbtools.backends.get(_cfg(**{"ray.port": free_port(), "ray.dashboard_port": free_port()})).up()


def test_stale_record_is_removed_not_killed(tmp_path, monkeypatch):
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    (tmp_path / "ray").mkdir()
    pf = tmp_path / "ray" / "head.json"
    pf.write_text(json.dumps({"pid": int(done.stdout), "create_time": 1.0, "dashboard_port": 1, "port": 2}))
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path))
    result = nbtools.backends.get(_cfg()).down()
    assert not result.stopped and "was not running; removed the stale record" in result.message
    assert not pf.exists()


def test_slow_start_times_out_then_stop_all_under_stops_only_that_head(ray_head, tmp_path, monkeypatch):
    """A second real head, interrupted by a short timeout while starting, then stopped by pid with every process
    it spawned; the session head is untouched (a fully started second head costs minutes on a busy 2-core box)."""
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path))
    cfg = _cfg(**{"ray.port": free_port(), "ray.dashboard_port": free_port(), "ray.num_cpus": 1})
    with pytest.raises(NotReadyError, match=r"(?s)was not ready within 2 s.*fix: it keeps starting in the background"):
        nbtools.backends.get(cfg).up(timeout=2, progress=False)
    rec = json.loads((tmp_path / "ray" / "head.json").read_text())
    assert rec["status"] == "starting" and rec["pid"] != ray_head.pid
    head = psutil.Process(rec["pid"])
    members = [head, *head.children(recursive=True)]
    results = stop_all_under(tmp_path)
    assert [r.stopped for r in results] == [True] and results[0].pid == rec["pid"]
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in members)
    assert not [p for p in psutil.process_iter() if _sid(p) == rec["pid"]]
    assert not (tmp_path / "ray" / "head.json").exists()
    assert "no Ray head recorded" in nbtools.backends.get(cfg).down().message
    assert psutil.pid_exists(ray_head.pid) and len(_gcs_servers(ray_head.pid)) == 1


def _sid(p: psutil.Process) -> int | None:
    try:
        return os.getsid(p.pid)
    except OSError:
        return None


def _a_job_leaves_no_idle_worker(head_pid: int, dashboard_port: str) -> None:
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(f"http://127.0.0.1:{dashboard_port}")
    sid = client.submit_job(entrypoint="true")
    deadline = time.monotonic() + 120
    while not client.get_job_status(sid).is_terminal() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert client.get_job_status(sid).value == "SUCCEEDED"

    def workers() -> list[str]:
        names = []
        for c in psutil.Process(head_pid).children(recursive=True):
            try:
                names.append((c.cmdline() or [c.name()])[0].strip())
            except psutil.Error:
                continue
        return [n for n in names if n.startswith("ray::")]

    while any(n != "ray::IDLE" and "Agent" not in n for n in workers()) and time.monotonic() < deadline:
        time.sleep(0.5)  # the job's supervisor actor exits with its job
    assert "ray::IDLE" not in workers(), workers()


_UP = """
import json, sys
import nbtools
from nbtools.backends import _head as local
cfg = nbtools.config.load(sys.argv[1], backend="local", overrides={"ray.port": int(sys.argv[2]),
                          "ray.dashboard_port": int(sys.argv[3]), "ray.num_cpus": 1})
h = local.up(cfg, timeout=240, progress=False)
print(json.dumps({"pid": local.head_record(cfg.runs_dir)["pid"], "ours": h.started_by_us}))
"""


def test_two_concurrent_ups_on_one_runs_dir_give_one_head(tmp_path):
    """#41: two `nbtools up --apply` at once on one runs dir both failed (GCS bind error, Ray's session-name
    assertion) and left no head; under the library's lock the second re-attaches to the head the first started.
    That head (this module's own, so no other test's workers are in it) then runs one job: no idle Ray worker may be
    left behind (the raylet started one per CPU, kept for the head's life, at the first job; ~0.5 CPU-s, ~100 MB each)."""
    env = {**os.environ, "NBTOOLS_RUNS_DIR": str(tmp_path / "runs")}
    env.pop("RAY_ADDRESS", None)
    ports = [str(free_port()), str(free_port())]
    cmd = [sys.executable, "-c", _UP, str(PROJECT_ROOT / "experiments" / "local.yaml"), *ports]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        outs = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
        got = [json.loads(o[0].strip().splitlines()[-1]) for o in outs]
        assert got[0]["pid"] == got[1]["pid"] and psutil.pid_exists(got[0]["pid"]), got
        assert len(_gcs_servers(got[0]["pid"])) == 1
        _a_job_leaves_no_idle_worker(got[0]["pid"], ports[1])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        stop_all_under(tmp_path / "runs")
