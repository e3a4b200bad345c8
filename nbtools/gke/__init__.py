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

import os
from dataclasses import dataclass

import pandas as pd

from nbtools import _paths
from nbtools._escape import html as _h
from nbtools.config import Experiment
from nbtools.errors import Fix
from nbtools.gke._destroy import destroy_steps
from nbtools.gke._flags import gcloud_flags, gcloud_path, validate_flags
from nbtools.gke._plan import Plan, PlanIncompleteError, StepFailedError
from nbtools.gke._step import Step
from nbtools.gke._steps import PROJECT_NUMBER_LOOKUP, build_steps, context_name, nccl_installer_url, wi_member

__all__ = [
    "plan", "destroy_plan", "validate", "Plan", "Step", "StepFailedError", "PlanIncompleteError", "context_name",
    "wi_member", "nccl_installer_url", "gcloud_flags", "gcloud_path", "validate_flags", "FlagReport", "flag_report",
    "ScriptPreview", "script_preview", "ApplyOutcome", "outcome",
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
            "only deletes what the config names", source=cfg.source,
            fix=Fix("pass delete_bucket=cfg.storage.bucket, or leave it out to keep the bucket's objects",
                    cli=f"pass --delete-bucket {cfg.storage.bucket}, or leave it out to keep the bucket's objects"),
        )
    steps = destroy_steps(cfg, build_steps(cfg), delete_bucket=delete_bucket is not None)
    d = _state_dir(cfg)
    keep = "" if delete_bucket else (f" The bucket's objects are kept; to delete them with the bucket: destroy_plan(cfg, "
                                     f"delete_bucket={cfg.storage.bucket!r})." if cfg.storage.bucket else "")
    cli_keep = "" if delete_bucket else (f" The bucket's objects are kept; to delete them with the bucket: `nbtools plan "
                                         f"EXPERIMENT.yaml --destroy --delete-bucket {cfg.storage.bucket}`."
                                         if cfg.storage.bucket else "")
    return Plan("destroy", steps, d / "destroy-state.json", _variables(cfg), invalidates=d / "provision-state.json",
                keep_going=True,
                fix=Fix("fix the failed steps' causes (their stderr is in the state file) and apply again: finished "
                        "steps are skipped; .remaining() lists what is still there." + keep,
                        cli="fix the failed steps' causes (their stderr is in the state file) and apply again: finished "
                            "steps are skipped; `nbtools plan EXPERIMENT.yaml --destroy` shows what is still there." + cli_keep))


def validate(p: Plan) -> pd.DataFrame:
    """Every gcloud flag of every command, check and undo in ``p``: the installed gcloud's help, else the shipped table.

    Example:
        >>> flags = nbtools.gke.validate(nbtools.gke.plan(cfg))
        >>> flags.attrs["source"], flags.ok.all()
        ('gcloud 528.0.0 at /usr/bin/gcloud', True)
    """
    return p.validate()


@_paths.tidy_reprs
@dataclass(frozen=True)
class FlagReport:
    """:func:`validate`'s frame read as a verdict: one line when every flag exists, else the flags that do not."""

    flags: pd.DataFrame

    @property
    def bad(self) -> pd.DataFrame:
        return self.flags[~self.flags.ok]

    @property
    def ok(self) -> bool:
        return bool(self.flags.ok.all())

    def __repr__(self) -> str:
        head = f"{len(self.flags)} gcloud flags checked against {self.flags.attrs.get('source', '?')}"
        if self.ok:
            return f"{head}: every flag exists"
        return f"{head}: {len(self.bad)} do not exist\n" + self.bad[["command", "flag", "message"]].to_string(index=False)

    def _repr_html_(self) -> str:
        head = _h(f"{len(self.flags)} gcloud flags checked against {self.flags.attrs.get('source', '?')}")
        if self.ok:
            return f"<b style='color:#2e7d32'>ok</b> {head}: every flag exists"
        return (f"<b style='color:#c62828'>{len(self.bad)} unknown</b> {head}:"
                + self.bad[["command", "flag", "message"]].to_html(index=False))


def flag_report(flags: pd.DataFrame) -> FlagReport:
    """A verdict over :func:`validate`'s frame (``flags`` keeps every row).

    Example:
        >>> nbtools.gke.flag_report(nbtools.gke.validate(plan))
        83 gcloud flags checked against gcloud 528.0.0: every flag exists
    """
    return FlagReport(flags)


@_paths.tidy_reprs
@dataclass(frozen=True)
class ScriptPreview:
    """The head of a plan's bash script, whole lines only, and where the full script is."""

    script: str
    path: str | None = None
    lines: int = 30

    def _head(self) -> tuple[str, int]:
        all_lines = self.script.splitlines()
        return "\n".join(all_lines[: self.lines]), max(0, len(all_lines) - self.lines)

    def __repr__(self) -> str:
        head, more = self._head()
        where = f" in {self.path}" if self.path else ""
        return head + (f"\n# … {more} more lines{where}" if more else "")

    def _repr_markdown_(self) -> str:
        head, more = self._head()
        where = f" — the whole script: `{self.path}`" if self.path else ""
        return f"```bash\n{head}\n```\n" + (f"*… {more} more lines*{where}" if more else where.lstrip(" —"))


def script_preview(p: Plan, path: str | os.PathLike | None = None, *, lines: int = 30) -> ScriptPreview:
    """The first ``lines`` lines of ``p.to_script()`` (never cut mid-line), naming the written script.

    Example:
        >>> nbtools.gke.script_preview(plan, plan.write_script(cfg.run_dir / "gke" / "provision.sh"))
    """
    return ScriptPreview(p.to_script(), str(path) if path is not None else None, lines)


@dataclass(frozen=True)
class ApplyOutcome:
    """What ``plan.apply(...)`` did, in one sentence: a check cell's answer to "did anything change?"."""

    dry_run: bool
    applicable: bool
    would_run: int = 0
    done_earlier: int = 0
    ran: int = 0
    steps: int = 0

    def __str__(self) -> str:
        if not self.applicable:
            return f"shown only: this backend has nothing to provision; none of the {self.steps} steps ran"
        if self.dry_run:
            return (f"dry run: nothing was changed; {self.would_run} of {self.steps} steps would run"
                    + (f" ({self.done_earlier} done earlier)" if self.done_earlier else "")
                    + " — set APPLY = True (CLI: --apply) to run them")
        return f"applied: {self.ran} of {self.steps} steps ran, the others were already done"

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        head, _, rest = str(self).partition(":")
        return f"**{head}**:{rest}"


def outcome(result: pd.DataFrame) -> ApplyOutcome:
    """Summarise the frame ``plan.apply`` returned: dry run or not, how many steps would run or ran.

    Example:
        >>> nbtools.gke.outcome(plan.apply(dry_run=not APPLY))
        dry run: nothing was changed; 14 of 14 steps would run — set APPLY = True (CLI: --apply) to run them
    """
    status = result["status"].astype(str) if "status" in result else pd.Series([], dtype=str)
    return ApplyOutcome(dry_run=bool(result.attrs.get("dry_run", True)), applicable=bool(result.attrs.get("applicable", True)),
                        would_run=int((status == "would run").sum()),
                        done_earlier=int(status.str.startswith("skipped").sum()),
                        ran=int(status.isin(["done", "updated"]).sum()), steps=len(result))
