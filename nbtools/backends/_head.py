"""The local backend's Ray head (see ``nbtools.backends.local``): start it on this machine (or re-attach), report
it, stop only what we started.

The head is the venv's own ``ray start --head --block`` in a new session, its temp dir under
``<runs_dir>/ray`` (not ``/tmp/ray``), its pid recorded in ``<runs_dir>/ray/head.json``. ``--block`` makes that one
process own every Ray process of the head (Ray kills them with it), so stopping by the recorded pid is exact and
never touches another Ray head on the machine, unlike ``ray stop``.

Example:
    >>> head = nbtools.backends.get(cfg).up()      # starts, or re-attaches on a re-run
    >>> nbtools.backends.get(cfg).down().stopped
    True
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbtools._ports import free_port, free_ports, port_in_use
from nbtools.backends._proc import (
    _CHILDREN,
    _alive,
    _dashboard_version,
    _fatal_lines,
    _kill_members,
    _log_tail,
    _members,
    _read_record,
    _retire,
    _session_info,
    _write_record,
    auth_headers,
)
from nbtools.backends._types import ClusterHandle
from nbtools.config import Experiment
from nbtools.errors import ConflictError, DependencyError, Fix, NbtoolsError, NotReadyError

__all__ = ["up", "down", "stop_head", "stop_all_under", "head_record", "temp_dir_for", "StopResult", "PID_FILE"]

PID_FILE = "head.json"
# Ray puts unix sockets at <temp>/session_<date>_<time>_<usec>_<pid>/sockets/plasma_store; Linux allows 107 bytes.
_SOCKET_SUFFIX = len("/session_2026-01-01_00-00-00_000000_") + 7 + len("/sockets/plasma_store") + 3
_MAX_SOCKET_PATH = 107


@dataclass
class StopResult:
    """What `down` / `stop_all_under` did: which head, which pids, and why (not) stopped."""

    stopped: bool
    pid_file: Path
    pid: int | None = None
    pids: list[int] = field(default_factory=list)
    message: str = ""

    def __str__(self) -> str:
        return self.message


def state_dir(runs_dir: str | os.PathLike) -> Path:
    """``<runs_dir>/ray``: pid file, `ray start` log and (normally) Ray's temp dir."""
    return Path(runs_dir) / "ray"


def temp_dir_for(runs_dir: str | os.PathLike) -> tuple[Path, str]:
    """Ray's ``--temp-dir`` for this runs dir, and a note when it had to fall back to a short dir under /tmp.

    Example:
        >>> temp_dir_for("runs/demo")[0].name
        'ray'
    """
    preferred = state_dir(Path(runs_dir).resolve())
    if len(str(preferred)) + _SOCKET_SUFFIX <= _MAX_SOCKET_PATH:
        return preferred, ""
    digest = hashlib.sha256(str(preferred).encode()).hexdigest()[:10]
    short = Path("/tmp") / f"nbtools-ray-{digest}"
    note = (
        f"{preferred} is too long for Ray's unix socket paths ({len(str(preferred))} + {_SOCKET_SUFFIX} > "
        f"{_MAX_SOCKET_PATH} chars), so Ray's temp dir is {short} (linked as {preferred / 'temp'})"
    )
    return short, note


def head_record(runs_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The recorded head under ``<runs_dir>/ray/head.json`` (pid, ports, temp dir), or None."""
    return _read_record(state_dir(runs_dir) / PID_FILE)


# -- start / attach ----------------------------------------------------------------------------------------


def up(cfg: Experiment, *, timeout: float = 120, extra_args: Sequence[str] = (), progress: bool = True) -> ClusterHandle:
    """Start the local Ray head, or re-attach to the one this runs dir already has (never a second one).

    Args:
        cfg: the experiment (uses ``runs_dir``, ``ray.port``, ``ray.dashboard_port``, ``ray.num_cpus``).
        timeout: seconds to wait for the head (dashboard, node and Jobs API) to answer.
        extra_args: more ``ray start`` flags, e.g. ``("--object-store-memory", "500000000")``.
        progress: show a tqdm bar while the head starts.

    Raises:
        DependencyError: Ray (with its dashboard) is not installed in this Python environment.
        ConflictError: a port is taken by something else, or our head runs on other ports than cfg asks.
        NotReadyError: the head died while starting (with its log tail) or was not ready in time.

    Example:
        >>> head = up(cfg)
        >>> head.dashboard_url
        'http://127.0.0.1:8265'
    """
    pf = state_dir(cfg.runs_dir) / PID_FILE
    with _start_lock(pf.parent, timeout=timeout + 60):  # one `up` at a time per runs dir: the second re-attaches
        return _up_locked(cfg, pf, timeout=timeout, extra_args=extra_args, progress=progress)


@contextlib.contextmanager
def _start_lock(d: Path, *, timeout: float):
    """An exclusive ``flock`` on ``<runs_dir>/ray/head.lock`` while one process reads ``head.json`` and starts the
    head: two `nbtools up` at once would otherwise both spawn one and both fail (GCS bind, Ray's session name).
    The kernel drops the lock when its holder exits, however it exits, so a killed `up` never blocks the next."""
    import fcntl

    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / "head.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline, pause = time.monotonic() + timeout, 0.05
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise NotReadyError(f"another process has been starting the Ray head of {d.parent} for over "
                                        f"{timeout:.0f} s (it holds {d / 'head.lock'})",
                                        fix="wait for it, or stop it (`nbtools down EXPERIMENT.yaml --apply`)") from None
                time.sleep(pause)  # a lock has no condition to wait on: back off to 1 s
                pause = min(pause * 2, 1.0)
        yield
    finally:
        os.close(fd)


def _up_locked(cfg: Experiment, pf: Path, *, timeout: float, extra_args: Sequence[str], progress: bool) -> ClusterHandle:
    url = f"http://127.0.0.1:{cfg.ray.dashboard_port}"
    rec = _read_record(pf)
    if rec is not None:
        proc = _alive(rec)
        if proc is not None:
            if (rec["dashboard_port"], rec["port"]) != (cfg.ray.dashboard_port, cfg.ray.port):
                raise ConflictError(
                    f"the Ray head recorded in {pf} (pid {rec['pid']}) runs on dashboard port {rec['dashboard_port']} "
                    f"and GCS port {rec['port']}, but the config asks for {cfg.ray.dashboard_port} / {cfg.ray.port}",
                    fix=f"stop it first (notebook 09, or `nbtools down EXPERIMENT.yaml --apply`), or set ray.dashboard_port: {rec['dashboard_port']} "
                    f"and ray.port: {rec['port']} back in {cfg.source}",
                )
            if rec.get("status") == "running" and _dashboard_version(rec["dashboard_url"]):
                return _handle(rec, pf, reattached=True)
            return _wait_ready(rec, pf, timeout=timeout, progress=progress, reattached=True)  # an interrupted start
        _retire(pf)
    _check_ray_installed()
    info = _dashboard_version(url)
    if info is not None and info.get("auth_required"):
        raise ConflictError(
            f"a Ray head with token authentication, not started from {cfg.runs_dir}, answers on {url}",
            fix="choose another `ray.dashboard_port` (and `ray.port`) for nbtools' own head, or export RAY_AUTH_MODE=token "
            "and RAY_AUTH_TOKEN_PATH=<its token file> before starting Jupyter to use that head",
        )
    if info is not None:
        return ClusterHandle(
            backend="local", dashboard_url=url, started_by_us=False,
            note=f"a Ray {info.get('ray_version', '?')} head not started from {cfg.runs_dir} answers on {url} "
            f"(session {info.get('session_name', '?')}); attached to it, and down() will leave it running",
        )
    for key, port in (("ray.dashboard_port", cfg.ray.dashboard_port), ("ray.port", cfg.ray.port)):
        if port_in_use(port):
            raise ConflictError(
                f"port {port} ({key}) is already in use by another process, which is not a Ray dashboard",
                fix=f"choose another `{key}` in {cfg.source} (e.g. {free_port()}), or stop the process listening on "
                f"{port} (find it with `ss -ltnp | grep :{port}`)",
            )
    return _start(cfg, pf, timeout=timeout, extra_args=extra_args, progress=progress)


def _start(cfg: Experiment, pf: Path, *, timeout: float, extra_args: Sequence[str], progress: bool) -> ClusterHandle:
    """Spawn the head and wait for it; when Ray's own fixed 30 s start-up waits expire on a busy machine (the head
    exits with "timed out during startup"), start it again while the deadline leaves room (at most 3 tries)."""
    deadline = time.monotonic() + timeout
    for attempt in range(3):
        try:
            return _spawn(cfg, pf, timeout=max(deadline - time.monotonic(), 1.0), extra_args=extra_args, progress=progress)
        except NotReadyError as e:
            text = str(e)
            # Ray's own fixed start-up waits (raylet for the agent's port file, `ray start` for the dashboard) expire
            # on a busy machine; the ports were checked free before, so a head that died starting is tried again.
            busy = "exited during start" in text and any(
                m in text for m in ("timed out during startup", "Timed out waiting for file", "dashboard.log", "timed out"))
            if not busy or attempt == 2 or deadline - time.monotonic() < 45:
                err = e
                break
    raise err


def _spawn(cfg: Experiment, pf: Path, *, timeout: float, extra_args: Sequence[str], progress: bool) -> ClusterHandle:
    temp, note = temp_dir_for(cfg.runs_dir)
    pf.parent.mkdir(parents=True, exist_ok=True)
    temp.mkdir(parents=True, exist_ok=True)
    if temp != pf.parent:
        link = pf.parent / "temp"
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(temp, target_is_directory=True)
    log = pf.parent / "head.log"
    num_cpus = cfg.ray.num_cpus or os.cpu_count() or 1
    client, listen, grpc, runtime_env, metrics = free_ports(5, exclude={cfg.ray.port, cfg.ray.dashboard_port})
    cmd = [
        *_ray_cli(), "start", "--head", "--block", "--port", str(cfg.ray.port),
        "--dashboard-host", "127.0.0.1", "--dashboard-port", str(cfg.ray.dashboard_port), "--include-dashboard", "true",
        "--temp-dir", str(temp), "--num-cpus", str(num_cpus),
        # Explicit ports: Ray's fixed defaults (10001, 52365) would collide with any other head on this machine,
        # and with port 0 the raylet waits for the agents to write port files, which times out on a busy machine.
        "--ray-client-server-port", str(client),
        "--dashboard-agent-listen-port", str(listen), "--dashboard-agent-grpc-port", str(grpc),
        "--runtime-env-agent-port", str(runtime_env), "--metrics-export-port", str(metrics),
        "--disable-usage-stats", *extra_args,
    ]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    # Stop fast (no drain wait), no usage stats, and give the raylet longer than its 15 s default to see the
    # dashboard agent's ports: on a busy 2-core machine the agent alone can take 15-30 s to start.
    env.update(RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0", RAY_USAGE_STATS_ENABLED="0", RAY_agent_register_timeout_ms="120000",
               RAY_raylet_start_wait_time_s="120")
    # No idle workers started ahead of use: the first driver to connect (the dashboard's job module, at the first job
    # submission) otherwise makes the raylet start one Python worker per CPU, ~0.5 CPU-s and ~100 MB each, kept idle
    # for the head's life; jobs run in workers of their own runtime env, which these never are.
    env.setdefault("RAY_prestart_worker_first_driver", "0")
    # Explicit auth mode: otherwise `ray start` silently turns token auth on whenever ~/.ray/auth_token happens to
    # exist, and every client without that token (notebooks, job drivers) gets 401s. The dashboard listens on
    # 127.0.0.1 only; a head for a shared network belongs to the gke/ray backends.
    env.setdefault("RAY_AUTH_MODE", "disabled")
    # py-spy dumps of the jobs' processes through the dashboard (`nbtools.launch.stall`): off by default since Ray
    # 2.50; this dashboard listens on 127.0.0.1 only
    env.setdefault("RAY_DASHBOARD_ENABLE_PROFILING", "1")
    # ... and the dashboard agent finds py-spy (installed with ray[default]) on PATH: this environment's bin first
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    # Taken before the spawn: the child may write its logs before this process runs again (a loaded machine), and
    # logs older than this belong to an earlier try (see _fatal_lines).
    started_at = time.time()
    with open(log, "wb") as out:
        out.write(f"$ {' '.join(cmd)}\n".encode())
        out.flush()
        popen = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env=env, cwd=str(pf.parent), close_fds=True,
        )
    _CHILDREN[popen.pid] = popen
    import psutil

    rec = {
        "pid": popen.pid, "create_time": psutil.Process(popen.pid).create_time(), "status": "starting",
        "dashboard_url": f"http://127.0.0.1:{cfg.ray.dashboard_port}", "dashboard_port": cfg.ray.dashboard_port,
        "port": cfg.ray.port, "num_cpus": num_cpus, "temp_dir": str(temp), "log_file": str(log), "note": note,
        "runs_dir": str(Path(cfg.runs_dir).resolve()), "command": cmd, "started_at": started_at,
    }
    _write_record(pf, rec)
    return _wait_ready(rec, pf, timeout=timeout, progress=progress, reattached=False)


def _wait_ready(rec: dict, pf: Path, *, timeout: float, progress: bool, reattached: bool) -> ClusterHandle:
    """Back off (0.1 s → 1 s) until dashboard, head node and Jobs API answer; raise with the log tail if it dies."""
    from nbtools._progress import tqdm

    stages = ["process", "dashboard", "head node", "jobs API"]
    deadline = time.monotonic() + timeout
    delay = 0.1
    with tqdm(total=len(stages) - 1, desc="Ray head", disable=not progress, leave=False) as bar:
        while True:
            stage, node_ip = _ready_stage(rec["dashboard_url"])
            # a raylet that failed a start-up check (e.g. its wait for the agent's port file, on a busy machine)
            # leaves `ray start --block` waiting forever: stop it now, so that _start can try again
            fatal = stage < 2 and bool(_fatal_lines(rec))
            head = _alive(rec)
            if fatal or head is None:
                tail = _log_tail(rec)
                if head is not None:
                    head.kill()
                _kill_members(rec)
                _retire(pf, keep=False)
                code = _CHILDREN.pop(rec["pid"]).wait() if rec["pid"] in _CHILDREN else "?"
                raise NotReadyError(
                    f"the Ray head (pid {rec['pid']}) exited during start "
                    + ("after its raylet stopped on a failed check" if fatal else f"with code {code}"),
                    reason=tail[-1] if tail else "no output", events=tail,
                    fix=Fix(f"read {rec['log_file']} and the session logs under {rec['temp_dir']}/session_latest/logs; "
                            "fix the cause (ports, memory, extra_args) and run cluster.up() again",
                            cli=f"read {rec['log_file']} and the session logs under {rec['temp_dir']}/session_latest/logs; "
                                "fix the cause (ports, memory, extra_args) and run `nbtools up EXPERIMENT.yaml --apply` again"),
                )
            bar.set_postfix_str(stages[stage])
            bar.update(stage - bar.n)
            if stage == len(stages) - 1:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NotReadyError(
                    f"the Ray head (pid {rec['pid']}) was not ready within {timeout:.0f} s: waiting for its {stages[stage + 1]}",
                    reason=f"last stage reached: {stages[stage]}", events=_log_tail(rec),
                    fix=Fix("it keeps starting in the background: run cluster.up(timeout=300) again to re-attach, "
                            f"or read {rec['log_file']}",
                            cli="it keeps starting in the background: run `nbtools up EXPERIMENT.yaml --apply --timeout 300` "
                                f"again to re-attach, or read {rec['log_file']}"),
                )
            time.sleep(min(delay, remaining))
            delay = min(delay * 1.5, 1.0)
    if rec.get("status") != "running":
        rec.update(status="running", gcs_address=f"{node_ip}:{rec['port']}", **_session_info(rec))
        _write_record(pf, rec)
    return _handle(rec, pf, reattached=reattached)


def _ready_stage(url: str) -> tuple[int, str]:
    """0 = only the process, 1 = dashboard answers, 2 = head node alive, 3 = Jobs API answers."""
    import requests

    if _dashboard_version(url, timeout=10) is None:
        return 0, ""
    try:
        from ray.util.state import list_nodes

        nodes = [n for n in list_nodes(address=url, timeout=10, raise_on_missing_output=False) if n.state == "ALIVE"]
    except Exception:
        return 1, ""
    if not nodes:
        return 1, ""
    try:
        ok = requests.get(f"{url}/api/jobs/", timeout=10, headers=auth_headers()).status_code == 200
    except requests.RequestException:
        ok = False
    return (3 if ok else 2), nodes[0].node_ip


def _handle(rec: dict, pf: Path, *, reattached: bool) -> ClusterHandle:
    return ClusterHandle(
        backend="local", dashboard_url=rec["dashboard_url"], started_by_us=True, pid=rec["pid"], pid_file=pf,
        temp_dir=Path(rec["temp_dir"]), log_file=Path(rec["log_file"]), gcs_address=rec.get("gcs_address"),
        reattached=reattached, note=rec.get("note", ""),
        extra={k: rec[k] for k in ("port", "dashboard_port", "session_dir", "raylet_pid", "gcs_pid") if rec.get(k)},
    )


# -- stop --------------------------------------------------------------------------------------------------


def down(cfg: Experiment, *, timeout: float = 30) -> StopResult:
    """Stop the head recorded under ``cfg.runs_dir`` (only if we started it), by pid; verify it is gone.

    Example:
        >>> down(cfg).stopped
        True
    """
    return stop_head(state_dir(cfg.runs_dir) / PID_FILE, timeout=timeout)


def stop_all_under(runs_dir: str | os.PathLike, *, timeout: float = 30) -> list[StopResult]:
    """Stop every local head whose pid file lives under ``runs_dir`` (the demo's cleanup).

    Example:
        >>> [str(r) for r in stop_all_under("runs/20260101-000000")]
    """
    root = Path(runs_dir)
    files = sorted(root.rglob(f"ray/{PID_FILE}")) if root.is_dir() else []
    return [stop_head(pf, timeout=timeout) for pf in files]


def stop_head(pf: Path, *, timeout: float = 30) -> StopResult:
    """Stop the head recorded in pid file ``pf``: SIGTERM to its `ray start --block`, then SIGKILL stragglers."""
    import psutil

    rec = _read_record(pf)
    if rec is None:
        return StopResult(False, pf, message=f"no Ray head recorded in {pf}; nothing to stop")
    proc = _alive(rec)
    if proc is None:
        _retire(pf, keep=False)
        return StopResult(False, pf, rec["pid"], message=f"the head recorded in {pf} (pid {rec['pid']}) was not running; removed the stale record")
    members = _members(rec)
    pids = sorted(p.pid for p in members)
    proc.send_signal(signal.SIGTERM)  # ray start --block stops every process it started, then exits
    _, alive = psutil.wait_procs(members, timeout=timeout)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(alive, timeout=10)
    _kill_members(rec)  # anything spawned into its session while we were stopping it
    popen = _CHILDREN.pop(rec["pid"], None)
    if popen is not None:
        popen.poll()
    if alive:
        left = ", ".join(str(p.pid) for p in alive)
        raise NbtoolsError(f"the Ray head (pid {rec['pid']}) did not stop: pids {left} are still alive", fix=f"kill -9 {left}")
    _retire(pf, keep=False)
    return StopResult(True, pf, rec["pid"], pids, message=f"stopped the Ray head pid {rec['pid']} ({len(pids)} processes) recorded in {pf}")


def _check_ray_installed() -> None:
    missing = [m for m in ("ray", "ray.dashboard", "aiohttp", "requests") if importlib.util.find_spec(m.split(".")[0]) is None
               or (m == "ray.dashboard" and importlib.util.find_spec(m) is None)]
    if missing:
        raise DependencyError(
            f"Ray with its dashboard is needed for a local head, but {', '.join(missing)} is not installed for {sys.executable}",
            fix=f"{sys.executable} -m pip install 'ray[default]'",
        )


def _ray_cli() -> list[str]:
    """The `ray` CLI of this Python's environment (never another Ray found on PATH)."""
    exe = Path(sys.executable).parent / "ray"
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "ray.scripts.scripts"]
