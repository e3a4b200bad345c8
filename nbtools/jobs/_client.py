"""One `JobSubmissionClient` per dashboard address, and Ray's generic errors turned into typed ones."""

from __future__ import annotations

import logging
import threading
from typing import Any

from nbtools.errors import Fix, NotFoundError, NotReadyError

__all__ = ["client_for", "address_of", "is_missing", "forget", "quiet_ray_sdk", "RAY_SDK_LOGGERS"]

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


# Ray's Jobs SDK logs each upload and each closed log stream at INFO on stderr ("Uploading package gcs://…",
# "WebSocket closed for job … with close code 1000"): noise in a notebook's outputs. Set to INFO by Ray itself at
# import (ray 2.x, dashboard/modules/dashboard_sdk.py, dashboard/modules/job/sdk.py); the job's own log is unaffected.
RAY_SDK_LOGGERS = ("ray.dashboard.modules.dashboard_sdk", "ray.dashboard.modules.job.sdk",
                   "ray._private.runtime_env.packaging")


def quiet_ray_sdk() -> None:
    """Raise Ray's Jobs SDK loggers from INFO to WARNING (a level a user set, e.g. DEBUG, is kept)."""
    for name in RAY_SDK_LOGGERS:
        log = logging.getLogger(name)
        if log.level in (logging.NOTSET, logging.INFO):
            log.setLevel(logging.WARNING)


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
    quiet_ray_sdk()
    try:
        client = JobSubmissionClient(address)
    except (ConnectionError, RuntimeError, OSError) as e:
        raise NotReadyError(
            f"no Ray Jobs API answers at {address}",
            reason=str(e).splitlines()[0] if str(e) else type(e).__name__,
            fix=Fix("start or re-attach the cluster first: notebook 02 (nbtools.backends.get(cfg).up()); for backend 'ray' "
                    "check `ray.address`; for gke check the dashboard port-forward",
                    cli="start or re-attach the cluster first (`nbtools up EXPERIMENT.yaml --apply`); for backend 'ray' check `ray.address`; "
                        "for gke check the dashboard port-forward"),
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
        fix=Fix("check the id (nbtools.jobs.list_jobs(address)), or submit it with nbtools.jobs.submit(...) / nbtools.launch.submit(cfg)",
                cli="check the id (`nbtools jobs list EXPERIMENT.yaml`), or submit it (`nbtools launch EXPERIMENT.yaml`)"),
    )
