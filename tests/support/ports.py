"""Free local TCP ports for tests, never the same one twice in one test process.

Why: a port is released before whoever it is for binds it, so the OS can hand the same ephemeral port out again; a
Ray head whose GCS, dashboard or agents got the same port refuses to start (seen in CI).
"""

from __future__ import annotations

import socket

_given: set[int] = set()


def free_port() -> int:
    """A TCP port nothing listens on right now, and not handed out before by this process."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _given:
            _given.add(port)
            return port
