"""`nbtools stall`: is a running job stuck, which rank holds it up, in which phase, why, what to do; the bundle.

Why: ``nbtools diagnose`` explains a job that ended; a job that hangs never ends. This sibling answers while it runs,
as text or one JSON document (``status``, ``stalled_for_s``, ``ranks`` [rank, phase, stack], ``stragglers``,
``cause``, ``fix``, ``bundle``); exit 1 when the job is stalled or ended in failure, 0 otherwise.

Example:
    $ nbtools stall experiments/local.yaml --json
    $ nbtools launch experiments/local.yaml --supervise --stop-when-stalled
"""

from __future__ import annotations

from nbtools.cli._load import load_cfg
from nbtools.cli._out import Out, _jsonable

__all__ = ["register_stall", "cmd_stall"]


def register_stall(add) -> None:
    """Add the ``stall`` subcommand through the parser's own ``add`` (its --json, EXPERIMENT, overrides, --backend)."""
    what = ("is a running job stuck: each rank's phase from its stack, the stragglers, the cause (hang | deadlock | "
            "diagnose's causes) and the fix; writes the evidence bundle to the run's storage")
    p = add("stall", cmd_stall, what, experiment=True)
    p.description = what + ". Exit 1 when stalled (or ended in failure), 0 otherwise."
    p.add_argument("--id", help="submission id (default: the latest attempt, else the experiment's own)")
    p.add_argument("--no-bundle", action="store_true", help="judge only; write no evidence bundle")
    p.add_argument("--samples", type=int, default=3, help="stack samples a straggler must appear in (default 3)")


def cmd_stall(a) -> Out:
    from nbtools import launch
    from nbtools.errors import ConfigError

    if a.samples < 1:
        raise ConfigError(f"--samples: expected 1 or more, got {a.samples}; fix: e.g. --samples 3")
    v = launch.stall(load_cfg(a), a.id, bundle=not a.no_bundle, samples=a.samples)
    bad = v.status == "stalled" or (v.status == "ended" and v.job_status != "SUCCEEDED")
    return Out(_jsonable(v.to_dict()), str(v), code=1 if bad else 0, exact=True,
               error=f"{v.status}: {v.cause}" if bad else None, fix=v.fix or None)
