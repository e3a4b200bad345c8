"""verl (verl-project/verl), everything nbtools knows of it in one folder: the GRPO command and how each experiment
field reaches it (``_command``), the releases (``_releases``) and their key tables (``_tree``), the lint (``_lint``,
``_validate``), the preparation jobs' checks (``prepare``), the trainer (``_trainer``: eval plan, citation, fit inputs)
and the layout of its runs (``_layout``) with its readers (``_checkpoints``, ``_merge``, ``_trajectories``). ``TRAINER`` and ``LAYOUT`` are what the registry asks for.

Example:
    >>> print(nbtools.trainers.verl.command(cfg))
    cd /data/verl && python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_files=...
"""

from __future__ import annotations

from nbtools.trainers.verl._command import (
    IGNORED,
    KL_LOSS_TYPE,
    NBTOOLS_ONLY,
    PREPROCESS,
    REFUSED,
    code_dir,
    command,
    command_lines,
    data_dir,
    effective,
    fields,
    ignored,
    known_release,
    overrides,
    prepare_command,
    release,
    rollout_dir,
    tensorboard_dir,
    validation_dir,
)
from nbtools.trainers.verl._layout import LAYOUT, VerlLayout
from nbtools.trainers.verl._releases import VERL, VerlRelease
from nbtools.trainers.verl._trainer import Verl
from nbtools.trainers.verl.prepare import data_present, prepare_jobs

TRAINER = Verl

# verl's readers, imported on first use: the checkpoint listing (no torch), the merge that reads rank files with torch
# (the optional extra [merge]); the trajectory reader is what nbtools.trajectories.open_run reaches through LAYOUT.
_READERS = {"list_verl_checkpoints": "_steps", "is_verl_dir": "_steps", "latest_verl": "_steps",
            "best_verl": "_steps", "merge_verl": "_merge", "open_verl_run": "_trajectories",
            "VerlRun": "_trajectories"}


def __getattr__(name: str):
    """verl's readers (``_READERS``), imported when asked."""
    if name in _READERS:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_READERS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["TRAINER", "LAYOUT", "Verl", "VerlLayout", "VERL", "VerlRelease", "code_dir", "data_dir", "rollout_dir",
           "validation_dir", "tensorboard_dir", "overrides", "effective", "command", "fields", "ignored", "IGNORED",
           "NBTOOLS_ONLY", "REFUSED", "command_lines", "prepare_command", "KL_LOSS_TYPE", "release", "known_release", "PREPROCESS",
           "prepare_jobs", "data_present", *_READERS]
