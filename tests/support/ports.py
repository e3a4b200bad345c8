"""Free local TCP ports for tests: the library's own choice (outside the ephemeral range, never twice per process).

Why: a port found by binding port 0 is released before whoever it is for binds it, and any outgoing connection can
be handed it meanwhile; a Ray head whose GCS or dashboard port got taken refuses to start (seen in CI).
"""

from __future__ import annotations

from nbtools._ports import free_port

__all__ = ["free_port"]
