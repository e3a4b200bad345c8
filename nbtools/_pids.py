"""Processes nbtools started and recorded by pid (the port-forward, TensorBoard): is it still ours, does it answer.

Why one module: a pid file outlives its process, and the pid may be reused; both callers need the same two checks.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path


def runs(pid: int, marker: bytes) -> bool:
    """``pid`` is a live (not zombie) process whose command line contains ``marker`` (a reused pid is not ours).

    Without ``/proc`` (macOS) the pid file is trusted while the pid exists.
    """
    if not Path("/proc").is_dir():
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status and marker in cmdline


def port_answers(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """Something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
