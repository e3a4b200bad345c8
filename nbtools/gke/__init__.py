"""Provision GKE for a GRPO run: an ordered, idempotent plan of exact ``gcloud``/``kubectl``/``helm`` commands.

Each step carries its command (an argv list), a check that says whether it is already done, and its undo.
``plan.apply()`` is a dry run unless ``dry_run=False``; a real apply records progress under
``cfg.run_dir / "gke"`` and resumes at the failed step. ``destroy_plan`` removes compute first and data last, goes on
past a failed step, reports what is still there, and only touches what the config names.

Example:
    >>> plan = nbtools.gke.plan(cfg)
    >>> plan.show()
    >>> print(plan.to_script())
"""

from __future__ import annotations

import pandas as pd

from nbtools.config import Experiment
from nbtools.gke._destroy import destroy_steps
from nbtools.gke._flags import gcloud_flags, gcloud_path, validate_flags
from nbtools.gke._plan import Plan, PlanIncompleteError, StepFailedError
from nbtools.gke._step import Step
from nbtools.gke._steps import PROJECT_NUMBER_LOOKUP, build_steps, context_name, nccl_installer_url, wi_member

__all__ = [
    "plan", "destroy_plan", "validate", "Plan", "Step", "StepFailedError", "PlanIncompleteError", "context_name",
    "wi_member", "nccl_installer_url", "gcloud_flags", "gcloud_path", "validate_flags",
]


def _state_dir(cfg: Experiment):
    return cfg.run_dir / "gke"


def _variables(cfg: Experiment) -> dict[str, tuple[str, ...]]:
    return {} if cfg.gcp.project_number or cfg.gcp.service_account else {"PROJECT_NUMBER": PROJECT_NUMBER_LOOKUP(cfg.gcp.project)}


def _ready(cfg: Experiment) -> None:
    from nbtools.errors import ConfigError

    if not cfg.gcp.project:
        raise ConfigError(
            "gcp.project: empty, so no GKE command can be built; fix: set `gcp.project` in the experiment file "
            "(or load a gke example, e.g. ../experiments/gke-b200-gemma3-1b.yaml)", source=cfg.source,
        )


def plan(cfg: Experiment, *, applicable: bool = True, note: str = "") -> Plan:
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


def destroy_plan(cfg: Experiment, *, delete_bucket: str | None = None) -> Plan:
    """The teardown: RayCluster, GPU pool and cluster first, then networks and IAM, the bucket last.

    A failed step does not stop the others (only the steps that need it are skipped: a subnet waits for the nodes
    that use it), and the apply ends with one ``list`` check per resource of what is still there, raising
    ``PlanIncompleteError`` when anything failed or remains. APIs stay enabled. The bucket is deleted only when empty
    (GCS refuses otherwise and the objects are kept); to delete it with its contents, name it: ``delete_bucket=
    "<bucket>"``.

    Args:
        cfg: the experiment.
        delete_bucket: the bucket's name, to delete it and every object in it; must equal ``storage.bucket``.

    Raises:
        ConfigError: ``delete_bucket`` names another bucket than the experiment's.

    Example:
        >>> nbtools.gke.destroy_plan(cfg).show()
        >>> nbtools.gke.destroy_plan(cfg).apply(dry_run=False)     # then: .remaining()
    """
    from nbtools.errors import ConfigError

    _ready(cfg)
    if delete_bucket is not None and delete_bucket.removeprefix("gs://") != (cfg.storage.bucket or ""):
        raise ConfigError(
            f"delete_bucket: {delete_bucket!r} is not this experiment's bucket ({cfg.storage.bucket!r}); the destroy plan "
            "only deletes what the config names; fix: pass delete_bucket=cfg.storage.bucket, or leave it out to keep "
            "the bucket's objects", source=cfg.source,
        )
    steps = destroy_steps(cfg, build_steps(cfg), delete_bucket=delete_bucket is not None)
    d = _state_dir(cfg)
    keep = "" if delete_bucket else (f" The bucket's objects are kept; to delete them with the bucket: destroy_plan(cfg, "
                                     f"delete_bucket={cfg.storage.bucket!r}) or `nbtools plan --destroy --delete-bucket "
                                     f"{cfg.storage.bucket}`." if cfg.storage.bucket else "")
    return Plan("destroy", steps, d / "destroy-state.json", _variables(cfg), invalidates=d / "provision-state.json",
                keep_going=True,
                fix="fix the failed steps' causes (their stderr is in the state file) and apply again: finished steps "
                    "are skipped; .remaining() lists what is still there." + keep)


def validate(p: Plan) -> pd.DataFrame:
    """Every gcloud flag of every command, check and undo in ``p``: the installed gcloud's help, else the shipped table.

    Example:
        >>> flags = nbtools.gke.validate(nbtools.gke.plan(cfg))
        >>> flags.attrs["source"], flags.ok.all()
        ('gcloud 528.0.0 at /usr/bin/gcloud', True)
    """
    return p.validate()
