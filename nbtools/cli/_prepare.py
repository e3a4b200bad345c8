"""``nbtools prepare EXPERIMENT.yaml``: show (or ``--apply``) the jobs that put a verl run's data and weights in place.

``--apply`` is the one flag every command that changes something takes (``up``, ``down``, ``prepare``; the
notebooks' ``APPLY``); ``--submit``, its earlier name here, still works and says so.

Example:
    $ nbtools prepare experiments/gke-b200-verl.yaml            # the two jobs and whether the parquet files exist
    $ nbtools prepare experiments/gke-b200-verl.yaml --apply    # submit them (or re-attach: idempotent)
"""

from __future__ import annotations

import sys

from nbtools.cli._load import load_cfg
from nbtools.cli._out import Out, _jsonable

__all__ = ["cmd_prepare", "add_prepare"]


def add_prepare(add) -> None:
    """Register the subcommand with the CLI's ``add`` helper."""
    p = add("prepare", cmd_prepare, "the verl data (dataset -> parquet) and weights-staging jobs; a dry run unless "
            "--apply", experiment=True)
    p.add_argument("--apply", action="store_true", help="submit the jobs (re-attaches to ones already submitted)")
    p.add_argument("--submit", action="store_true", help="deprecated spelling of --apply")


def cmd_prepare(a) -> Out:
    from nbtools import trainers
    from nbtools.launch import verl_prepare
    from nbtools.trainers.verl.prepare import data_present

    if a.submit:
        print("nbtools prepare: --submit is deprecated; use --apply (the flag of every command that changes "
              "something)", file=sys.stderr)
        a.apply = True
    cfg = load_cfg(a)
    t = trainers.get(cfg)
    if t.prepare_command() is None:  # the same decision as the notebook's nbtools.launch.prepare(cfg)
        note = f"{t.label}: this trainer needs no preparation job: nothing to submit"
        return Out({"experiment": cfg.name, "jobs": [], "data_files": {}, "submitted": False, "note": note}, note)
    specs = verl_prepare.prepare_jobs(cfg)
    present = data_present(cfg)
    jobs = [{"submission_id": s.submission_id, "role": s.metadata.get("nbtools.role"), "command": s.command}
            for s in specs]
    lines = [f"{j['role']}: {j['submission_id']}\n    {j['command']}" for j in jobs]
    lines += [f"{f}: {'present' if ok else 'absent' if ok is False else 'not visible from here'}"
              for f, ok in present.items()]
    if a.apply:
        submitted = verl_prepare.submit_prepare_jobs(cfg)
        for j, job in zip(jobs, submitted, strict=True):
            j["status"], j["reattached"] = _jsonable(job.status()), job.reattached
        lines.append("submitted: " + ", ".join(f"{j['submission_id']} ({j['status']})" for j in jobs))
    else:
        lines.append("dry run: add --apply to run them (each is idempotent)")
    return Out({"experiment": cfg.name, "jobs": jobs, "data_files": present, "submitted": bool(a.apply)},
               "\n".join(lines))
