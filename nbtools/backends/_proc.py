"""Process and pid-file helpers of the local Ray head (`nbtools.backends.local`): liveness by pid AND start time,
the head's process set, atomic pid-file writes, and the log tail shown when a head dies."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from nbtools import _atomic

__all__: list[str] = []

_CHILDREN: dict[int, subprocess.Popen] = {}  # heads this Python process spawned, reaped when stopped


def _members(rec: dict) -> list:
    """The head process, all its descendants, and anything else still in its session (same sid)."""
    import psutil

    proc = _alive(rec)
    if proc is None:
        return []
    found = {proc.pid: proc}
    try:
        found.update({c.pid: c for c in proc.children(recursive=True)})
    except psutil.Error:
        pass
    for p in psutil.process_iter():
        try:
            if p.pid not in found and os.getsid(p.pid) == rec["pid"]:
                found[p.pid] = p
        except (OSError, psutil.Error):
            continue
    return list(found.values())


def _kill_members(rec: dict) -> None:
    """SIGKILL whatever is left of a head that died while starting (Ray usually cleans up itself)."""
    import psutil

    procs = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == rec["pid"] and p.pid != rec["pid"]:
                p.kill()
                procs.append(p)
        except (OSError, psutil.Error):
            continue
    psutil.wait_procs(procs, timeout=5)


def _alive(rec: dict):
    """The recorded head process if it is still running (same pid AND same start time), else None."""
    import psutil

    try:
        p = psutil.Process(int(rec["pid"]))
        if abs(p.create_time() - float(rec.get("create_time", 0))) > 1.0:
            return None  # the pid was reused by another process
        if p.status() == psutil.STATUS_ZOMBIE:
            if p.pid in _CHILDREN:
                _CHILDREN[p.pid].poll()
            return None
        return p
    except (psutil.Error, KeyError, ValueError, TypeError):
        return None


def _dashboard_version(url: str, timeout: float = 5.0) -> dict | None:
    """The dashboard's /api/version answer when a Ray dashboard answers at `url`, else None."""
    import requests

    try:  # generous timeout: a dashboard on a busy 2-core machine can take seconds to answer
        r = requests.get(f"{url.rstrip('/')}/api/version", timeout=timeout, headers=auth_headers())
        if r.status_code == 401 and "token" in r.text.lower():
            return {"ray_version": "?", "auth_required": True}  # a Ray dashboard with token auth we hold no token for
        data = r.json() if r.status_code == 200 else None
    except (requests.RequestException, ValueError):
        return None
    return data if isinstance(data, dict) and "ray_version" in data else None


def auth_headers() -> dict:
    """Ray's token header when this process has Ray token auth enabled (RAY_AUTH_MODE=token), else {}."""
    try:
        from ray._private.authentication.http_token_authentication import get_auth_headers_if_auth_enabled

        return dict(get_auth_headers_if_auth_enabled({}) or {})
    except Exception:  # older/newer Ray without token auth: plain requests
        return {}


def _session_info(rec: dict) -> dict:
    import psutil

    info: dict[str, Any] = {}
    latest = Path(rec["temp_dir"]) / "session_latest"
    if latest.exists():
        info["session_dir"] = str(latest.resolve())
    proc = _alive(rec)
    if proc is not None:
        for c in proc.children(recursive=True):
            try:
                name = c.name()
            except psutil.Error:
                continue
            if name in ("raylet", "gcs_server"):
                info[f"{'gcs' if name == 'gcs_server' else name}_pid"] = c.pid
    return info


def _log_tail(rec: dict, n: int = 25) -> list[str]:
    """Last lines of `ray start`'s output plus fatal lines from the session's raylet/GCS logs."""
    lines: list[str] = []
    try:
        lines = Path(rec["log_file"]).read_text(errors="replace").splitlines()[-n:]
    except OSError:
        pass
    return lines + _fatal_lines(rec)


# File times come from the kernel's coarse clock, up to a tick behind time.time().
_MTIME_SLACK_S = 0.05


def _fatal_lines(rec: dict) -> list[str]:
    """The session's raylet/GCS fatal lines: a raylet that failed a check leaves `ray start --block` running.

    Only logs written since this head was spawned count: until the new session exists, ``session_latest`` is the
    previous try's."""
    lines: list[str] = []
    logs = Path(rec["temp_dir"]) / "session_latest" / "logs"
    for name in ("raylet.out", "gcs_server.out"):
        try:
            if (logs / name).stat().st_mtime < rec.get("started_at", 0) - _MTIME_SLACK_S:
                continue
            text = (logs / name).read_text(errors="replace").splitlines()
        except OSError:
            continue
        lines += [f"{name}: {line}" for line in text if "Check failed" in line or " F " in line[:40]][-3:]
    return lines


def _read_record(pf: Path) -> dict | None:
    try:
        data = json.loads(pf.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "pid" in data else None


def _write_record(pf: Path, rec: dict) -> None:
    """Temp file + rename: a reader never sees a half-written pid file."""
    _atomic.write_json(pf, rec, default=str)


def _retire(pf: Path, *, keep: bool = True) -> None:
    """Move a stale record aside (``head.json.stale``) or delete it."""
    try:
        if keep:
            _atomic.publish(pf, pf.with_name(pf.name + ".stale"))
        else:
            pf.unlink()
    except FileNotFoundError:
        pass
