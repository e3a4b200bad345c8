"""One `JobSubmissionClient` per dashboard address, and Ray's generic errors turned into typed ones."""

from __future__ import annotations

import threading
from typing import Any

from nbtools.errors import NotFoundError, NotReadyError

__all__ = ["client_for", "address_of", "is_missing", "forget"]

_CLIENTS: dict[str, Any] = {}
_LOCK = threading.Lock()


def address_of(target: Any) -> str:
    """A dashboard URL from a URL string, a ClusterHandle / Job (``.dashboard_url`` / ``.address``) or the config."""
    if isinstance(target, str):
        return target.rstrip("/")
    for attr in ("dashboard_url", "address"):
        value = getattr(target, attr, None)
        if isinstance(value, str):
            return value.rstrip("/")
    raise TypeError(f"expected a dashboard URL like 'http://127.0.0.1:8265', a ClusterHandle or the config; got {type(target).__name__}")


def client_for(address: str, *, timeout: float | None = None):
    """A cached client for ``address``; NotReadyError naming the fix when no Ray dashboard answers there."""
    with _LOCK:
        client = _CLIENTS.get(address)
    if client is not None:
        return client
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError:
        from nbtools.errors import DependencyError

        raise DependencyError(
            "the Ray Jobs SDK is not installed", fix="pip install 'ray[default]'"
        ) from None
    try:
        client = JobSubmissionClient(address)
    except (ConnectionError, RuntimeError, OSError) as e:
        raise NotReadyError(
            f"no Ray Jobs API answers at {address}",
            reason=str(e).splitlines()[0] if str(e) else type(e).__name__,
            fix="start or re-attach the cluster first: notebook 02 (nbtools.backends.get(cfg).up()); for backend 'ray' check "
            "`ray.address`; for gke check the dashboard port-forward",
        ) from None
    with _LOCK:
        _CLIENTS[address] = client
    return client


def forget(address: str) -> None:
    """Drop a cached client (the cluster went away; the next call reconnects)."""
    with _LOCK:
        _CLIENTS.pop(address, None)


def is_missing(err: Exception) -> bool:
    """True when Ray's RuntimeError means "no such job" (HTTP 404)."""
    text = str(err)
    return "404" in text or "does not exist" in text


def not_found(address: str, submission_id: str, known: list[str]) -> NotFoundError:
    shown = ", ".join(known[-20:]) if known else "none"
    return NotFoundError(
        f"no job with submission id {submission_id!r} on the cluster at {address}; known ids: {shown}",
        fix="check the id (nbtools.jobs.list_jobs(address)), or submit it with nbtools.jobs.submit(...) / nbtools.launch.submit(cfg)",
    )
