"""verl v0.7.0's run files, written exactly: FSDP checkpoints, generation dumps, console lines, scalar names.

The one writer of verl's layout in nbtools: the rehearsal writes it when the experiment's trainer is verl, and the
tests write their verl checkpoints with it; the readers (``trainers.verl._checkpoints``, ``trainers.verl._trajectories``,
``metrics.read_verl_log``) read what it writes the way they read a real verl run. Facts (verl, tag v0.7.0):

* ``verl/utils/checkpoint/fsdp_checkpoint_manager.py`` ``save_checkpoint``: every rank ``torch.save``s its FSDP
  ``model.state_dict()`` to ``model_world_size_{W}_rank_{R}.pt``, its optimizer state to ``optim_…`` and
  ``{"lr_scheduler", "rng"}`` to ``extra_state_…``; rank 0 writes ``huggingface/`` (config, generation config when
  the model has a source, tokenizer) and ``fsdp_config.json`` ``{"FSDP_version", "world_size"}`` (indent 4);
  ``max_ckpt_to_keep`` removes the ``actor/`` directories of this process's older saves
  (``checkpoint_manager.py`` ``remove_previous_save_local_path``);
* ``verl/trainer/ppo/ray_trainer.py`` ``_save_checkpoint``: ``global_step_{N}/actor``, then ``global_step_{N}/data.pt``
  (the dataloader state), then ``latest_checkpointed_iteration.txt`` holding N; ``_dump_generations``:
  ``{dump_path}/{global_step}.jsonl`` with ``input``, ``output``, ``gts``, ``score``, ``step`` and every reward-extra
  list of the batch's length, ``ensure_ascii=False``, lines joined by ``\\n`` plus a final one;
* ``verl/utils/logger/aggregate_logger.py`` ``concat_dict_to_str``: ``step:N - key:value - …`` (numbers only,
  ``pprint.pformat``); ``verl/utils/tracking.py``: TensorBoard ``add_scalar(key, value, step)`` in ``TENSORBOARD_DIR``.

Example:
    >>> save_actor(run / "global_step_5" / "actor", model, optim, rank=rank, world=2, tokenizer=tok)
    >>> finish_step(run, 5, sampler.state_dict())          # rank 0, after every rank saved
"""

from __future__ import annotations

import json
import os
import pprint
import random
import shutil
from collections.abc import Mapping, Sequence
from numbers import Number
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

__all__ = ["TRACKER", "step_dir", "rank_files", "save_actor", "finish_step", "remove_actor", "latest_step",
           "load_actor", "dump_generations", "console_line", "fsdp_version"]

TRACKER = "latest_checkpointed_iteration.txt"


def step_dir(run_dir: str | os.PathLike, step: int) -> Path:
    """``<default_local_dir>/global_step_{N}``."""
    return Path(run_dir) / f"global_step_{step}"


def rank_files(actor_dir: str | os.PathLike, rank: int, world: int) -> dict[str, Path]:
    """This rank's three files in ``actor/`` (model, optim, extra_state), named as verl names them."""
    a = Path(actor_dir)
    return {kind: a / f"{kind}_world_size_{world}_rank_{rank}.pt" for kind in ("model", "optim", "extra_state")}


def fsdp_version(model) -> int:
    """2 for a ``fully_shard`` (FSDP2) model, 1 for an ``FullyShardedDataParallel`` wrapper (verl's fsdp_version)."""
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

    if isinstance(model, FSDPModule):
        return 2
    return 1 if isinstance(model, FullyShardedDataParallel) else 0


def _rng_state() -> dict[str, Any]:
    return {"cpu": torch.get_rng_state(), "numpy": np.random.get_state(), "random": random.getstate()}


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def save_actor(actor_dir: str | os.PathLike, model, optimizer=None, *, rank: int, world: int, lr_scheduler=None,
               tokenizer=None) -> Path:
    """Collective: every rank writes its shard files into ``actor/``; rank 0 adds ``huggingface/`` and
    ``fsdp_config.json``. Returns ``actor_dir``.

    Args:
        model: the FSDP-sharded policy (its ``state_dict()`` holds DTensors); ``model.config`` goes to
            ``huggingface/``.
        optimizer: its optimizer (None: no ``optim_…`` file, like ``checkpoint.save`` without ``optimizer``).
        lr_scheduler: saved in ``extra_state_…`` (``None`` is saved as verl saves a missing scheduler).
        tokenizer: anything with ``save_pretrained`` (verl's processing class), or None.
    """
    actor = Path(actor_dir)
    actor.mkdir(parents=True, exist_ok=True)
    _barrier()
    for m in model.modules():  # FSDP2 roots stay unsharded after a forward: reshard so the state dict is DTensors
        if hasattr(m, "reshard"):
            m.reshard()
    files = rank_files(actor, rank, world)
    torch.save(model.state_dict(), files["model"])
    if optimizer is not None:
        torch.save(optimizer.state_dict(), files["optim"])
    torch.save({"lr_scheduler": lr_scheduler.state_dict() if lr_scheduler is not None else None, "rng": _rng_state()},
               files["extra_state"])
    if rank == 0:
        hf = actor / "huggingface"
        hf.mkdir(exist_ok=True)
        config = model.config
        source = getattr(config, "name_or_path", "")
        if source and model.can_generate():
            from transformers import GenerationConfig

            try:  # verl saves the source's generation config when it has one
                GenerationConfig.from_pretrained(source).save_pretrained(str(hf))
            except (OSError, ValueError):
                pass
        config.save_pretrained(str(hf))
        if tokenizer is not None:
            tokenizer.save_pretrained(str(hf))
        (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": fsdp_version(model), "world_size": world},
                                                           indent=4))
    _barrier()
    return actor


def finish_step(run_dir: str | os.PathLike, step: int, dataloader_state: Any) -> Path:
    """Rank 0, after every rank's ``save_actor``: ``global_step_N/data.pt``, then the tracker file naming N."""
    d = step_dir(run_dir, step)
    d.mkdir(parents=True, exist_ok=True)
    torch.save(dataloader_state, d / "data.pt")
    (Path(run_dir) / TRACKER).write_text(str(step))
    return d


def remove_actor(run_dir: str | os.PathLike, step: int) -> None:
    """What verl's ``max_actor_ckpt_to_keep`` removes of an older save: its ``actor/`` (``data.pt`` stays)."""
    shutil.rmtree(step_dir(run_dir, step) / "actor", ignore_errors=True)


def latest_step(run_dir: str | os.PathLike) -> int | None:
    """The step verl resumes from (``resume_mode: auto``): the tracker file's N when its ``actor/`` is there."""
    try:
        text = (Path(run_dir) / TRACKER).read_text().strip()
    except OSError:
        return None
    if not text.isdigit() or not (step_dir(run_dir, int(text)) / "actor").is_dir():
        return None
    return int(text)


def load_actor(actor_dir: str | os.PathLike, model, optimizer=None, *, rank: int, world: int,
               lr_scheduler=None) -> bool:
    """Collective: load this rank's shard files into the sharded model (and optimizer, scheduler) in place.

    Returns whether optimizer state was there. Raises ``FileNotFoundError`` naming a missing model file.
    """
    files = rank_files(actor_dir, rank, world)
    model.load_state_dict(torch.load(files["model"], weights_only=False))
    found = optimizer is not None and files["optim"].is_file()
    if found:
        optimizer.load_state_dict(torch.load(files["optim"], weights_only=False))
    if files["extra_state"].is_file():
        extra = torch.load(files["extra_state"], weights_only=False)
        if lr_scheduler is not None and extra.get("lr_scheduler") is not None:
            lr_scheduler.load_state_dict(extra["lr_scheduler"])
        rng = extra.get("rng") or {}
        if "cpu" in rng:
            torch.set_rng_state(rng["cpu"])
    _barrier()
    return found


def dump_generations(dump_dir: str | os.PathLike, step: int, *, inputs: Sequence[str], outputs: Sequence[str],
                     gts: Sequence[Any], scores: Sequence[float], extra: Mapping[str, Sequence[Any]] | None = None) -> Path:
    """``{dump_dir}/{step}.jsonl``: one object per sample with verl's fields, plus each ``extra`` list of length n."""
    d = Path(dump_dir)
    d.mkdir(parents=True, exist_ok=True)
    n = len(inputs)
    base: dict[str, Sequence[Any]] = {"input": inputs, "output": outputs, "gts": gts, "score": scores, "step": [step] * n}
    base.update({k: v for k, v in (extra or {}).items() if len(v) == n})
    lines = [json.dumps({k: v[i] for k, v in base.items()}, ensure_ascii=False) for i in range(n)]
    path = d / f"{step}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def console_line(metrics: Mapping[str, Any], step: int) -> str:
    """verl's console logger line: ``step:N - key:value - …`` (numbers only, as ``pprint.pformat`` shows them)."""
    parts = [f"step:{step}"] + [f"{k}:{pprint.pformat(v)}" for k, v in metrics.items() if isinstance(v, Number)]
    return " - ".join(parts)
