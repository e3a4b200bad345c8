"""Free local TCP ports that the kernel will not hand to anyone else in the meantime.

Why: the usual trick, bind port 0 and read the number back, draws from the kernel's ephemeral range and releases
the port before its user binds it. Any outgoing connection on the machine (a Ray worker's gRPC client, a pip
download) may be given that very port in between, and a Ray head then refuses to start ("port … is already in use",
seen in CI). Ports outside the ephemeral range are never handed out implicitly, so choosing there leaves only
explicit binds to race with. Ray's worker range is avoided too: ``ray start`` gives those to its workers.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Iterable
from pathlib import Path

from nbtools.errors import ConflictError

__all__ = ["free_port", "free_ports", "port_in_use", "RAY_WORKER_PORTS"]

RAY_WORKER_PORTS = range(10002, 20000)  # `ray start`'s default --min-worker-port..--max-worker-port
_LOWEST = 20000  # above the worker range and the well-known services people run locally
_LINUX_DEFAULT_EPHEMERAL = (32768, 60999)
_MACOS_EPHEMERAL = (49152, 65535)
_given: set[int] = set()
_rng = random.SystemRandom()


def _ephemeral() -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return lo, hi
    except (OSError, ValueError):
        return _MACOS_EPHEMERAL if not Path("/proc").is_dir() else _LINUX_DEFAULT_EPHEMERAL


def _candidates() -> list[int]:
    lo, hi = _ephemeral()
    return [p for p in range(_LOWEST, 65536) if not lo <= p <= hi]


def port_in_use(port: int, host: str = "0.0.0.0") -> bool:
    """Whether binding ``port`` fails now (someone listens on it, or holds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def free_port(*, exclude: Iterable[int] = ()) -> int:
    """A TCP port nothing holds now, outside the ephemeral and Ray worker ranges, never given twice by this process."""
    skip = set(exclude) | _given
    pool = [p for p in _candidates() if p not in skip]
    _rng.shuffle(pool)
    for port in pool[:500]:
        if not port_in_use(port):
            _given.add(port)
            return port
    for _ in range(200):  # every non-ephemeral port held, or none exists (a widened ip_local_port_range): the old way
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        if port not in skip and port not in RAY_WORKER_PORTS:
            _given.add(port)
            return port
    lo, hi = _ephemeral()
    raise ConflictError(f"no free local TCP port found outside the ephemeral range {lo}-{hi} and Ray's worker range",
                        fix="free some local ports (`ss -ltn`), or narrow net.ipv4.ip_local_port_range")


def free_ports(n: int, *, exclude: Iterable[int] = ()) -> list[int]:
    """``n`` distinct free ports (see :func:`free_port`), none in ``exclude``."""
    out: list[int] = []
    for _ in range(n):
        out.append(free_port(exclude=[*exclude, *out]))
    return out
