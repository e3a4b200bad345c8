"""The on-disk run layouts, shared by every reader and writer: NeMo-RL's ``<log_dir>/exp_NNN`` and
``<checkpoint_dir>/step_N`` (``tmp_step_N`` being written and ``old_step_N`` being replaced never count), and where
nbtools points verl's dumps and TensorBoard inside ``log_dir`` (``VERL_*_DIR``: the verl trainer's overrides and
environment use them, the readers look there)."""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path

__all__ = ["EXP_RE", "STEP_RE", "TRAIN_RE", "VERL_ROLLOUT_DIR", "VERL_VALIDATION_DIR", "VERL_TENSORBOARD_DIR", "VERL_STEP_RE",
           "VERL_DUMP_RE", "exp_dirs", "step_dirs", "resumed_chain", "weights_dir", "finetuned_model_path"]

EXP_RE = re.compile(r"^exp_(\d+)$")
STEP_RE = re.compile(r"^step_(\d+)$")
TRAIN_RE = re.compile(r"^train_data_step(\d+)\.jsonl$")
# verl writes wherever its keys say; nbtools sets them under log_dir: trainer.rollout_data_dir,
# trainer.validation_data_dir and TENSORBOARD_DIR
VERL_ROLLOUT_DIR = "rollout_data"
VERL_VALIDATION_DIR = "validation_data"
VERL_TENSORBOARD_DIR = "tensorboard"
VERL_STEP_RE = re.compile(r"^global_step_(\d+)$")  # verl's checkpoint of step N (ray_trainer._save_checkpoint)
VERL_DUMP_RE = re.compile(r"^(\d+)\.jsonl$")  # verl's dump of step N (ray_trainer._dump_generations)


def _numbered(parent: str | os.PathLike, pattern: re.Pattern) -> list[tuple[int, Path]]:
    base = Path(parent).expanduser()
    if not base.is_dir():
        return []
    return sorted((int(m.group(1)), p) for p in base.iterdir() if (m := pattern.match(p.name)) and p.is_dir())


def exp_dirs(log_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(N, path)`` of every ``exp_NNN`` dir under a NeMo-RL log_dir, oldest first; [] when it does not exist."""
    return _numbered(log_dir, EXP_RE)


def step_dirs(checkpoint_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(N, path)`` of every complete ``step_N`` dir in a checkpoint_dir, lowest first; [] when it does not exist."""
    return _numbered(checkpoint_dir, STEP_RE)


def resumed_chain(exps: list, names_of) -> list:
    """The exp dirs that make up the latest run, oldest first: a resumed run writes a new ``exp_NNN`` whose first
    training dump is step s > 1 (it resumed from ``step_{s-1}``); the exp dir before it belongs to the same run
    when it starts earlier and reached step s-1. Exp dirs with no dumps between them (an attempt that died while
    starting) are skipped. A run that starts again at step 1 is a new run and ends the chain.

    Args:
        exps: ``(N, dir)`` pairs, oldest first (``dir`` a Path or a URL).
        names_of: ``dir -> iterable of file names`` in it (one listing per exp dir, read only while chaining).

    Example:
        >>> resumed_chain(exp_dirs(log_dir), lambda d: os.listdir(d))[-1] == exp_dirs(log_dir)[-1][1]
        True
    """
    if not exps:
        return []

    def steps(d) -> list[int]:
        return [int(m.group(1)) for n in names_of(d) if (m := TRAIN_RE.match(n))]

    chain = [exps[-1][1]]
    own = steps(exps[-1][1])
    first = min(own) if own else None
    for _, d in reversed(exps[:-1]):
        if first is None or first <= 1:
            break
        s = steps(d)
        if not s:
            continue
        if min(s) < first <= max(s) + 1:
            chain.insert(0, d)
            first = min(s)
        else:
            break
    return chain


def weights_dir(step_dir: str | os.PathLike) -> Path:
    """``step_N/policy/weights`` (also accepts that directory itself, or its ``model/`` subdirectory)."""
    p = Path(step_dir).expanduser()
    if (p / "policy" / "weights").is_dir():
        return p / "policy" / "weights"
    if p.name == "model" and p.parent.name == "weights":
        return p.parent
    return p


def finetuned_model_path(cfg) -> str:
    """Where notebook 06 puts the merged model, as the cluster sees it: ``merged_hf`` beside ``checkpoint_dir``
    (``<run_dir>/merged_hf`` locally; on the shared mount on a cluster)."""
    return posixpath.join(posixpath.dirname(str(cfg.checkpoint_dir).rstrip("/")), "merged_hf")


def step_ranges(steps) -> str:
    """Steps as people read them: ``1..200`` for a run of consecutive steps, ``0, 5..9, 12`` otherwise ("none")."""
    steps = sorted(set(int(s) for s in steps))
    if not steps:
        return "none"
    runs, start = [], steps[0]
    for prev, cur in zip(steps, [*steps[1:], None], strict=True):
        if cur != prev + 1 if cur is not None else True:
            runs.append(str(start) if start == prev else f"{start}..{prev}")
            start = cur
    return ", ".join(runs)
