"""Provision GKE for a GRPO run: an ordered, idempotent plan of exact ``gcloud``/``kubectl``/``helm`` commands.

Each step carries its command (an argv list), a check that says whether it is already done, and its undo.
``plan.apply()`` is a dry run unless ``dry_run=False``; a real apply records progress under
``cfg.run_dir / "gke"`` and resumes at the failed step. ``destroy_plan`` runs the undos in reverse order and only
touches what the config names.

Example:
    >>> plan = nbtools.gke.plan(cfg)
    >>> plan.show()
    >>> print(plan.to_script())
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from nbtools.gke._flags import gcloud_flags, gcloud_path, validate_flags
from nbtools.gke._plan import Plan, Step, StepFailedError
from nbtools.gke._steps import PROJECT_NUMBER_LOOKUP, build_steps, context_name, wi_member

__all__ = [
    "plan", "destroy_plan", "validate", "Plan", "Step", "StepFailedError", "context_name", "wi_member",
    "gcloud_flags", "gcloud_path", "validate_flags",
]


def _state_dir(cfg):
    return cfg.run_dir / "gke"


def _variables(cfg) -> dict[str, tuple[str, ...]]:
    return {} if cfg.gcp.project_number or cfg.gcp.service_account else {"PROJECT_NUMBER": PROJECT_NUMBER_LOOKUP(cfg.gcp.project)}


def _ready(cfg) -> None:
    from nbtools.errors import ConfigError

    if not cfg.gcp.project:
        raise ConfigError(
            "gcp.project: empty, so no GKE command can be built; fix: set `gcp.project` in the experiment file "
            "(or load a gke example, e.g. ../experiments/gke-b200-gemma3-1b.yaml)", source=cfg.source,
        )


def plan(cfg, *, applicable: bool = True, note: str = "") -> Plan:
    """The provisioning plan for ``cfg`` (APIs, VPCs, cluster, GPU pool, NCCL, networks, bucket, identity, secrets).

    ``applicable=False`` builds it for reference only (the local backend shows what GKE would need).

    Example:
        >>> p = nbtools.gke.plan(cfg)
        >>> p.apply()                 # dry run: lists what would run
    """
    _ready(cfg)
    d = _state_dir(cfg)
    return Plan("provision", build_steps(cfg), d / "provision-state.json", _variables(cfg), invalidates=d / "destroy-state.json",
                applicable=applicable, note=note)


def destroy_plan(cfg) -> Plan:
    """The undo of every plan step that has one, in reverse order; each is skipped when already gone.

    APIs stay enabled; the bucket is deleted only when empty (``gcloud storage buckets delete`` refuses otherwise).

    Example:
        >>> nbtools.gke.destroy_plan(cfg).show()
    """
    _ready(cfg)
    steps = [
        dataclasses.replace(s, what=f"undo: {s.what}", command=s.undo, undo=None, stdin=None, make_stdin=None,
                            script=None, absent=True, expect=())
        for s in reversed(build_steps(cfg)) if s.undo
    ]
    d = _state_dir(cfg)
    return Plan("destroy", steps, d / "destroy-state.json", _variables(cfg), invalidates=d / "provision-state.json")


def validate(p: Plan) -> pd.DataFrame:
    """Every gcloud flag of every command, check and undo in ``p``: the installed gcloud's help, else the shipped table.

    Example:
        >>> flags = nbtools.gke.validate(nbtools.gke.plan(cfg))
        >>> flags.attrs["source"], flags.ok.all()
        ('gcloud 528.0.0 at /usr/bin/gcloud', True)
    """
    return p.validate()
