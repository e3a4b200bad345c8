"""merge_verl(): a verl ``global_step_N/actor`` -> a verified HuggingFace directory, streamed, written atomically.

The same pipeline as the NeMo-RL merge (:mod:`nbtools.checkpoints._merge`): chunk byte spans (here from the rank
files, :func:`nbtools.trainers.verl._checkpoints.read_verl_sources`) are planned into balanced safetensors files, copied
without holding the model in memory, checked finite, hashed, read back, and renamed into place only when complete.

One deliberate difference from verl's own ``model_merger`` (v0.7.0, ``verl/model_merger/fsdp_model_merger.py``):
it casts every tensor to bfloat16; this merge keeps the dtype training saved (float32 for verl's FSDP actor), so
nothing is rounded twice. ``torch_dtype="bfloat16"`` in the merged ``config.json`` is left to the user's loader.
Cast the result to bfloat16 and it equals verl's output tensor for tensor (tests/checkpoints/test_verl.py).

Example:
    >>> step = nbtools.trainers.verl.latest_verl("checkpoints/verl_grpo/qwen32b")
    >>> nbtools.checkpoints.merge(step, "merged_hf")   # dispatches here for a verl checkpoint
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from nbtools.checkpoints.parts import (
    CHECKSUMS,
    MergeResult,
    check_not_overlapping,
    default_checksum,
    reuse_existing,
    write_merged,
)
from nbtools.errors import CheckpointError, Fix
from nbtools.trainers.verl._checkpoints import (
    TRACKER,
    VERL_LAYOUT,
    check_rank_crcs,
    read_verl_sources,
    verl_actor_dir,
)

__all__ = ["merge_verl"]

_SKIP = ("optim_world_size_", "extra_state_world_size_")


def _fingerprint(actor: Path) -> str:
    items = sorted((str(p.relative_to(actor)), p.stat().st_size, p.stat().st_mtime_ns) for p in actor.rglob("*")
                   if p.is_file() and not p.name.startswith(_SKIP))
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()


def _config(actor: Path, config):
    from transformers import AutoConfig, GenerationConfig, PretrainedConfig

    hf = actor / "huggingface"
    try:
        if isinstance(config, PretrainedConfig):
            cfg, src = config, "config= object"
        elif config is not None:
            p = Path(config).expanduser()
            cfg, src = AutoConfig.from_pretrained(str(p if p.is_dir() else p.parent)), str(p)
        elif (hf / "config.json").is_file():
            cfg, src = AutoConfig.from_pretrained(str(hf)), str(hf / "config.json")
        else:
            raise CheckpointError(f"no config.json in {hf} (verl's rank 0 writes it with every checkpoint)",
                                  fix=Fix("pass config= (the base model's directory or config.json)",
                                          cli="pass --config PATH (the base model's directory or config.json)"))
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - parse errors all mean the same to the user
        raise CheckpointError(f"cannot load the model config ({type(e).__name__}: {e})",
                              fix=Fix("pass config= with the base model's directory or config.json",
                                      cli="pass --config PATH with the base model's directory or config.json")) from None
    gen = None
    if (hf / "generation_config.json").is_file():
        gen = GenerationConfig.from_pretrained(str(hf))
    else:
        try:
            gen = GenerationConfig.from_model_config(cfg)
        except Exception:  # noqa: BLE001 - optional file
            gen = None
    return cfg, gen, src


def merge_verl(step_dir: str | os.PathLike, out_dir: str | os.PathLike, *, config=None, overwrite: bool = False,
               progress: bool = True, max_shard_size: int | str = "2GB", workers: int = 2, band_mb: int = 16,
               checksum: str = "auto", durable: bool = True) -> MergeResult:
    """Merge a verl FSDP checkpoint (``global_step_N`` or its ``actor/``) into a HuggingFace model directory.

    Arguments and guarantees as :func:`nbtools.checkpoints.merge`; the config and tokenizer come from
    ``actor/huggingface/`` (``config=`` overrides the config).

    Raises:
        CheckpointError: a rank file missing, truncated or crafted; config mismatch; NaN/Inf; full disk.
        ConflictError: ``out_dir`` exists and is not this checkpoint's verified merge, or overlaps the checkpoint.
    """
    checksum = default_checksum() if checksum == "auto" else checksum
    if checksum not in CHECKSUMS:
        raise CheckpointError(f"checksum={checksum!r} is not supported", fix=f"use one of {list(CHECKSUMS)}")
    t0 = time.perf_counter()
    actor = verl_actor_dir(step_dir).resolve()
    step = actor.parent
    check_not_overlapping(step, Path(out_dir).expanduser(), config=config)
    out = Path(out_dir).expanduser().resolve()
    tracker = step.parent / TRACKER
    if tracker.is_file() and tracker.read_text().strip().isdigit() and step.name.startswith("global_step_"):
        done = int(tracker.read_text().strip())
        if int(step.name.removeprefix("global_step_") or 0) > done:
            raise CheckpointError(f"{step.name} is newer than {TRACKER} ({done}): verl is still writing it, or the "
                                  f"save died", fix="merge a finished step (nbtools.trainers.verl.latest_verl)")
    if (reused := reuse_existing(out, step, _fingerprint(actor), overwrite, t0)) is not None:
        return reused
    _, crc_note = check_rank_crcs(actor, workers=workers)  # "verified" covers what was read, not only what was written
    sources = read_verl_sources(actor)
    cfg, gen, cfg_src = _config(actor, config)
    notes = [f"config from {cfg_src}", "dtype kept as saved (verl's model_merger casts to bfloat16)", crc_note]
    extra = [p for p in sorted((actor / "huggingface").glob("*"))  # tokenizer / processor files verl saved
             if not p.name.endswith((".safetensors", ".bin")) and p.name != "model.safetensors.index.json"]
    return write_merged(sources, cfg, gen, step=step, out=out, layout=VERL_LAYOUT, fingerprint=_fingerprint(actor),
                        extra_files=extra, notes=notes, overwrite=overwrite, progress=progress,
                        max_shard_size=max_shard_size, workers=workers, band_mb=band_mb, checksum=checksum,
                        durable=durable, t0=t0, missing_hint="a rank file is missing: re-copy the global_step_N directory")
