"""Where the rehearsal's run goes on disk: one writer per trainer layout, chosen by the trainer the rehearsal imitates.

The training loop (``trainer._Run``) computes the same things whatever it imitates; a writer (:class:`Writer`) turns
them into that trainer's files. Each writer lives in its trainer's folder (``nbtools/trainers/<name>/rehearsal_writer``)
and its layout names it (``RunLayout.rehearsal_writer``); ``nbtools.trainers.get(cfg).layout`` says which.

Example:
    >>> out = writer_for(cfg, rank=0, world=2, say=print)
    >>> type(out).__name__
    'NemoRlWriter'
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any, Protocol

from nbtools import _trainer_folders
from nbtools.config import Experiment
from nbtools.rehearsal._grpo import PAD  # the pad id the writers strip from token dumps

__all__ = ["Writer", "writer_for", "rank_pause", "PAUSE_ENV", "PAD"]

PAUSE_ENV = "NBTOOLS_REHEARSAL_CHECKPOINT_PAUSE"  # test hook: "[step:]seconds" to wait inside tmp_step_N before the rename


class Writer(Protocol):
    """What the loop calls; ``dump_rank`` is the rank that receives the gathered samples of a step."""

    dump_rank: int
    validate_at_end: bool

    def latest(self) -> Any: ...  # rank 0: the checkpoint to resume from, or None

    def begin(self, bcast) -> None: ...  # collective: create the log directories

    def resume(self, ckpt, model, optimizer, scheduler, sampler, state: dict) -> bool: ...  # collective

    def setup_done(self, seconds: float) -> None: ...

    def train_samples(self, step: int, merged: dict) -> None: ...  # on dump_rank

    def validation(self, step: int, merged: dict, metrics: dict, seconds: float) -> None: ...  # rank 0

    def step_done(self, step: int, metrics: dict, timing: dict, val: dict | None, epoch: int) -> None: ...

    def save(self, step: int, *, model, optimizer, scheduler, sampler, tokenizer, state: dict, metrics: dict,
             val: dict | None) -> None: ...  # collective

    def close(self) -> Path | str: ...  # where the logs went


def rank_pause(step: int) -> float:
    """Seconds the test hook (``PAUSE_ENV``) asks a writer to wait inside its checkpoint of ``step`` before finishing it."""
    at, _, secs = os.environ.get(PAUSE_ENV, "").rpartition(":")
    return float(secs or 0) if at in ("", str(step)) else 0.0


def writer_for(cfg: Experiment, *, rank: int, world: int, say) -> Writer:
    """The writer of the layout the experiment's trainer leaves: that layout's ``rehearsal_writer`` (a dotted
    ``module:Class``; ``nbtools.trainers.RunLayout``), for ``trainer.kind``'s layout."""
    module, _, name = _trainer_folders.layout(_trainer_folders.folder(cfg.trainer.kind).TRAINER.layout
                                              ).rehearsal_writer.partition(":")
    return getattr(importlib.import_module(module), name)(cfg, rank, world, say)
