"""What a trainer runs before its training job (verl: its dataset -> parquet script, the model into the shared HF
cache), as data: the trainer's folder says what (``prepare_jobs``), ``nbtools.launch`` submits it like any job."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["PrepareJob"]


@dataclass(frozen=True)
class PrepareJob:
    """One preparation job: idempotent, its submission id fixed by the config so that a re-run re-attaches.

    Attributes:
        role: the job's ``nbtools.role`` metadata (``prepare``, ``stage-weights``).
        submission_id: the Ray job's id.
        command: the shell command it runs on the head.
        env: environment variables it needs beside the experiment's job env (never secrets).
    """

    role: str
    submission_id: str
    command: str
    env: dict[str, str] = field(default_factory=dict)
