"""`nbtools diagnose` and the launch flags that survive preemption (`--supervise`, `--retry`).

Why: a script or a CI job needs the same answer a notebook gets — why a job ended, and whether a retry helps — as
one JSON document: ``{"cause", "retry", "evidence", "fix", ...}``; exit 0 when the diagnosis says a retry helps
(or the job succeeded), 1 when it does not.

Example:
    $ nbtools diagnose local-rehearsal-1a2b3c4d5e --experiment experiments/local.yaml --json
    $ nbtools diagnose --log job.log --json
    $ nbtools launch experiments/local.yaml --supervise --max-attempts 3
"""

from __future__ import annotations

from pathlib import Path

from nbtools.cli._load import load_cfg
from nbtools.cli._out import Out, _jsonable
from nbtools.config import Experiment

__all__ = ["register_diagnose", "add_launch_flags", "cmd_diagnose", "supervised_launch"]


def register_diagnose(sub) -> None:
    """Add the ``diagnose`` subcommand to the ``nbtools`` parser."""
    what = ("why a finished job ended: preempted | lost-node | oom | host-oom | nccl | user-error | stopped | unknown, whether "
            "a retry helps, the lines that decided it and the fix")
    p = sub.add_parser("diagnose", help=what, description=what + ". Exit 0 when a retry helps (or it succeeded), 1 not.")
    p.set_defaults(func=cmd_diagnose)
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else there")
    p.add_argument("submission_id", nargs="?", metavar="SUBMISSION_ID", help="the job (on the experiment's cluster)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="overrides of --experiment (e.g. ray.dashboard_port=8266)")
    p.add_argument("--log", metavar="FILE", help="diagnose a saved job log alone (no cluster needed)")
    p.add_argument("--experiment", metavar="EXPERIMENT.yaml", default=None,
                   help="the experiment whose cluster ran the job (default: experiments/local.yaml)")
    p.add_argument("--backend", choices=["local", "gke", "ray"], help="override the experiment's backend")
    p.add_argument("--status", default=None, type=str.upper,
                   choices=["FAILED", "SUCCEEDED", "STOPPED", "RUNNING", "PENDING"],
                   help="with --log: the job's Ray status (`nbtools jobs status`); without it the log must show why "
                        "the job failed, else the command asks for it")


def add_launch_flags(p) -> None:
    """``nbtools launch`` flags: follow-and-resubmit, one retry."""
    p.add_argument("--supervise", action="store_true",
                   help="follow and resubmit from the newest step_N on preemption / lost node / NCCL (never on OOM or a "
                        "user error); prints the attempts")
    p.add_argument("--max-attempts", type=int, default=3, help="with --supervise: submissions in all (default 3)")
    p.add_argument("--stop-when-unhealthy", action="store_true",
                   help="with --supervise: stop the run when `nbtools health` finds it unhealthy (checked every "
                        "--health-every s); the attempts record and `nbtools diagnose` say why")
    p.add_argument("--health-every", type=float, default=60.0,
                   help="with --stop-when-unhealthy: seconds between checks (1 or more; default 60)")
    p.add_argument("--health-warmup", type=int, default=None,
                   help="with --stop-when-unhealthy: training steps before a threshold finding may stop the run "
                        "(default nbtools.health.WARMUP_STEPS, 10); NaN/inf values stop it at once")
    p.add_argument("--stop-when-stalled", action="store_true",
                   help="with --supervise: stop the run when `nbtools stall` finds it stuck (checked every --stall-every "
                        "s; thresholds stall.k and stall.floor_s): the evidence bundle is written and the attempts "
                        "record says which rank, phase and cause")
    p.add_argument("--stall-every", type=float, default=60.0, help="with --stop-when-stalled: seconds between checks")
    p.add_argument("--retry", action="store_true",
                   help="submit the next attempt (own submission id) resuming from the newest complete step_N")
    p.add_argument("--force", action="store_true", help="with --retry: even when the last cause is OOM or a user error")


def _default_experiment() -> str:
    return str(Path(__file__).resolve().parents[2] / "experiments" / "local.yaml")


def cmd_diagnose(a) -> Out:
    from nbtools import launch
    from nbtools.errors import ConfigError, NotFoundError

    if a.log and a.submission_id and "=" in a.submission_id:  # --log FILE KEY=VALUE: an override, not an id
        a.overrides, a.submission_id = [a.submission_id, *a.overrides], None
    if a.log and a.submission_id:
        raise ConfigError("pass either SUBMISSION_ID or --log FILE, not both; fix: drop one of them")
    cfg = text = None
    if a.log:
        from nbtools.cli._kinds import resolve

        p = Path(a.log)
        if not p.is_file():
            raise NotFoundError(f"expected a job log at {p}, found {'a directory' if p.exists() else 'nothing'}",
                                fix="save it first: `nbtools jobs logs EXPERIMENT.yaml --id ID > job.log`")
        resolve(a.log, want="log file", flag="--log", command="diagnose")  # an experiment file is not a log
        text = p.read_text(errors="replace")
        d = launch.diagnose_log(text, status=a.status or "FAILED")
        if a.status is None and d.cause is launch.Cause.UNKNOWN:  # no failure in the log: it may well have succeeded
            raise NotFoundError(f"--log {a.log}: the log shows no failure (no traceback, OOM, NCCL, preemption or "
                                "lost-node line), so how the job ended cannot be told from it",
                                fix="pass the job's status, e.g. --status SUCCEEDED (`nbtools jobs status "
                                    "EXPERIMENT.yaml --id ID` shows it), or diagnose by id: `nbtools diagnose ID "
                                    "--experiment EXPERIMENT.yaml`")
        if a.experiment:
            cfg = load_cfg(a)
    elif a.submission_id:
        a.experiment = a.experiment or _default_experiment()
        cfg = load_cfg(a)
        d = launch.diagnose(cfg, a.submission_id)
        text = d.evidence
    else:
        raise ConfigError("nothing to diagnose; fix: pass SUBMISSION_ID (with --experiment EXPERIMENT.yaml) or --log FILE")
    ok = d.retry or d.cause is launch.Cause.SUCCEEDED
    doc, shown, fix = _jsonable(d.to_dict()), d.text(cli=True), d.cli_fix
    doc["fix"] = fix
    if d.cause is launch.Cause.OOM:  # the fit estimate names the term that overflowed and the smallest change that fits
        from nbtools.fit import postmortem

        pm = postmortem(text or "", cfg)
        if pm is not None:
            doc["postmortem"], shown = _jsonable(pm.to_dict()), f"{shown}\n{pm.summary()}"
            fix = f"pass the override \"{pm.fix.override}\" (`nbtools launch EXPERIMENT.yaml \"{pm.fix.override}\"`)" if pm.fix else fix
    return Out(doc, shown, code=0 if ok else 1, error=None if ok else f"{d.cause}: a retry does not fix it", fix=fix)


def supervised_launch(a, cfg: Experiment) -> Out | None:
    """``--retry`` / ``--supervise`` of ``nbtools launch``; None when neither was given."""
    from nbtools import launch

    if a.retry:
        job = launch.resubmit(cfg, force=a.force)
        rows = launch.attempts(cfg)
        data = {"submission_id": job.id, "status": _jsonable(job.status()), "attempts": _jsonable(rows.to_dict("records"))}
        last = rows.iloc[-1]
        return Out(data, f"submitted attempt {int(last.n)}: {job.id}, resuming from step "
                         f"{'scratch' if last.resumed_from is None or last.resumed_from != last.resumed_from else int(last.resumed_from)}")
    if a.supervise:
        run = launch.supervise(cfg, max_attempts=a.max_attempts, timeout=a.timeout,
                               stop_when_unhealthy=a.stop_when_unhealthy, health_every=a.health_every,
                               health_warmup=a.health_warmup, stop_when_stalled=a.stop_when_stalled,
                               stall_every=a.stall_every)
        fix = run.diagnosis.cli_fix if run.diagnosis else ""
        code = 0 if run.ok or run.status == "RUNNING" else 1
        return Out(_jsonable(run.to_dict()), str(run), code=code,
                   error=None if code == 0 else f"run ended {run.status}: {run.note}", fix=fix)
    return None
