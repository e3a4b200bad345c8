"""Before the training job: the trainer's preparation jobs (verl: its dataset -> parquet script, the model into the
shared HF cache), submitted and followed to their end.

Why: verl's ``main_ppo`` reads the parquet files its command names at start, and ``submit`` refuses (lint rule
``verl-data``) while they are missing; one call in notebook 03 puts them there, the same on every trainer. A trainer
without preparation (NeMo-RL, the local rehearsal) gets an empty result saying so, and nothing is submitted. The
jobs are idempotent and their submission ids fixed by the config, so calling this again re-attaches to them.

Example:
    >>> prep = nbtools.launch.prepare(cfg)        # submit (or re-attach), wait; JobFailedError names a failed one
    >>> prep.ok, prep.data_files
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nbtools import trainers
from nbtools._escape import html as _h
from nbtools.config import Experiment

__all__ = ["Preparation", "PreparedJob", "prepare"]


@dataclass(frozen=True)
class PreparedJob:
    """One preparation job as it ended: its id, role (``prepare`` / ``stage-weights``) and final status."""

    submission_id: str
    role: str
    status: str
    reattached: bool = False


@dataclass(frozen=True)
class Preparation:
    """What ran before training: the jobs (none where the trainer needs none) and the data files they left."""

    trainer: str
    jobs: tuple[PreparedJob, ...] = ()
    data_files: dict[str, bool | None] = field(default_factory=dict)  # file -> present (None: not visible here)
    note: str = ""

    @property
    def ok(self) -> bool:
        """Every job SUCCEEDED and no data file the command names is known to be absent."""
        return all(j.status == "SUCCEEDED" for j in self.jobs) and all(v is not False for v in self.data_files.values())

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{_h(j.role)}</td><td><code>{_h(j.submission_id)}</code></td><td>{_h(j.status)}"
                       f"{' (re-attached)' if j.reattached else ''}</td></tr>" for j in self.jobs)
        rows += "".join(f"<tr><td>data</td><td><code>{_h(f)}</code></td><td>"
                        f"{'present' if v else 'absent' if v is False else 'not visible from here'}</td></tr>"
                        for f, v in self.data_files.items())
        note = f"<p>{_h(self.note)}</p>" if self.note else ""
        table = f"<table>{rows}</table>" if rows else ""
        return f"<b>{'OK' if self.ok else 'NOT OK'}</b> · {_h(self.trainer)}{table}{note}"

    def __str__(self) -> str:
        jobs = ", ".join(f"{j.submission_id} {j.status}" for j in self.jobs) or "none"
        return f"Preparation(ok={self.ok}, trainer={self.trainer}, jobs=[{jobs}]){' ' + self.note if self.note else ''}"

    __repr__ = __str__


def prepare(cfg: Experiment, *, timeout: float = 3600) -> Preparation:
    """Submit (or re-attach to) the trainer's preparation jobs and wait for each to end; a no-op without any.

    Args:
        cfg: the experiment (its cluster must be up: notebook 02).
        timeout: seconds to wait for each job.

    Raises:
        JobFailedError: a job ended FAILED or STOPPED (its log tail and the fix).
        NotReadyError: a job still runs at the timeout.
    """
    t = trainers.get(cfg)
    if t.prepare_command() is None:
        return Preparation(t.label, note="this trainer needs no preparation job: nothing submitted")
    from nbtools.launch._submit import send
    from nbtools.launch.verl_prepare import prepare_jobs
    from nbtools.trainers.verl.prepare import data_present

    specs = prepare_jobs(cfg)
    jobs = [send(spec, cfg) for spec in specs]  # all submitted (or re-attached) before the first wait
    done = []
    for spec, job in zip(specs, jobs, strict=True):
        status = job.wait(timeout)
        done.append(PreparedJob(job.id, spec.metadata.get("nbtools.role", ""), str(status.value), job.reattached))
    return Preparation(t.label, tuple(done), data_present(cfg))
