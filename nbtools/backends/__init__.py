"""Where the Ray cluster runs: one interface (:class:`Backend`), three implementations, and this — the one registry.

``local`` starts a Ray head on this machine and keeps the run's files under ``runs/``; ``gke`` applies a KubeRay
RayCluster, port-forwards its dashboard and keeps the run's files in a GCS bucket (``gs://…``); ``ray`` attaches
to any Ray address (a DGX Cloud Lepton RayCluster, an on-prem head) and reads the run where the user says it is.
Every verb returns the same type on every backend, so notebooks and the CLI never ask which one they have.

Example:
    >>> cluster = nbtools.backends.get(cfg)
    >>> head = cluster.up()               # start or re-attach; safe to re-run
    >>> cluster.storage.url(cluster.log_dir)
    >>> cluster.down()                    # stops only what nbtools started
"""

from __future__ import annotations

import importlib
from typing import Any

from nbtools.backends._env import SECRET_ENV_NAMES, gib_nccl_env, secrets_from_env
from nbtools.backends._protocol import Backend
from nbtools.backends._types import (
    ClusterHandle,
    ClusterResources,
    ClusterState,
    ClusterStatus,
    Preview,
    Teardown,
)
from nbtools.config import Experiment
from nbtools.errors import ConfigError

__all__ = [
    "REGISTRY", "Backend", "ClusterHandle", "ClusterResources", "ClusterState", "ClusterStatus", "Preview", "Teardown", "get", "names",
    "backend_class", "new", "checks", "rules", "describe", "gke_view", "SECRET_ENV_NAMES", "gib_nccl_env", "secrets_from_env",
]

# The only place that maps a backend's name to its implementation (imported on first use).
REGISTRY: dict[str, str] = {
    "local": "nbtools.backends.local:LocalBackend",
    "gke": "nbtools.backends.gke:GkeBackend",
    "ray": "nbtools.backends.ray:RayBackend",
}


def names() -> list[str]:
    """The backend names an experiment's ``backend:`` may hold."""
    return list(REGISTRY)


def backend_class(name: str) -> type:
    """The implementation registered under ``name``."""
    try:
        module, _, cls = REGISTRY[name].partition(":")
    except KeyError:
        raise ConfigError(f"backend: {name!r} is not allowed; allowed: {', '.join(REGISTRY)}; fix: set `backend` to "
                          "one of them (or pass BACKEND / --backend)") from None
    return getattr(importlib.import_module(module), cls)


def get(cfg: Experiment, **options: Any) -> Backend:
    """The backend of this experiment (``cfg.backend``), ready to use; building it does no I/O. Without options it is
    the one the experiment holds (``cfg.runs_on()``, built once: its derived paths ask the same object).

    Args:
        cfg: the experiment (``nbtools.config.load``).
        **options: backend options, e.g. ``kubeconfig=``/``context=`` for gke (a backend object of their own).

    Example:
        >>> cluster = nbtools.backends.get(cfg)
        >>> cluster.dashboard_url
        'http://127.0.0.1:8265'
    """
    return new(cfg, **options) if options else cfg.runs_on()


def new(cfg: Experiment, **options: Any) -> Backend:
    """A backend object of its own for ``cfg`` (what the experiment builds once, through the package's wiring)."""
    return backend_class(cfg.backend)(cfg, **options)


def checks(cfg: Experiment) -> list[str]:
    """The configuration problems this experiment's backend cares about (part of ``config.load``'s report)."""
    return [text for _, text in backend_class(cfg.backend).check(cfg)]


def rules(cfg: Experiment) -> list[tuple[tuple[str, ...], str]]:
    """:func:`checks` with the keys each reads (``config.load`` skips a rule whose keys failed their type check)."""
    if cfg.backend not in REGISTRY:
        return []  # the config's own type check reports the name
    return [(("backend", *deps), text) for deps, text in backend_class(cfg.backend).check(cfg)]


def describe(cfg: Experiment) -> list[tuple[str, str]]:
    """Rows that say where this experiment runs (the experiment's table)."""
    return get(cfg).describe()


def gke_view(cfg: Experiment) -> Any:
    """The experiment as the ``gke`` backend would run it: itself when it is a gke experiment, else a copy with
    ``backend: gke`` and placeholders for what only a GKE user knows (project, bucket).

    Why: notebook 01 and ``nbtools manifests`` show what a GKE run of *this* experiment needs, on any backend.
    """
    if cfg.backend == "gke":
        return cfg
    changes: dict[str, Any] = {"backend": "gke"}
    if not cfg.gcp.project:
        changes["gcp.project"] = "my-gcp-project"
    if cfg.storage.kind == "gcsfuse" and not cfg.storage.bucket:
        changes["storage.bucket"] = f"{cfg.name}-bucket"
    return cfg.replace(**changes)
