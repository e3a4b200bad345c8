"""merge(): a NeMo-RL step_N -> a verified HuggingFace model directory, streamed, written atomically."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

from nbtools.checkpoints._crc import check_dcp_files
from nbtools.checkpoints._files import parse_size, reuse_existing, write_merged
from nbtools.checkpoints._listing import detect_layout, step_owner, weights_dir
from nbtools.checkpoints._outdir import check_not_overlapping
from nbtools.checkpoints._remote import megatron_convert_entrypoint
from nbtools.checkpoints._result import MergeResult
from nbtools.checkpoints._sources import _RESYNC as RESYNC
from nbtools.checkpoints._sources import read_sources
from nbtools.checkpoints._verify import (
    CHECKSUMS,
)
from nbtools.errors import CheckpointError, Fix

__all__ = ["merge", "parse_size"]

DCP_LAYOUTS = {"dtensor_v1": ".", "v2_torch_save": "model"}  # layout -> the .distcp directory under policy/weights


def _fingerprint(step: Path) -> str:
    w = weights_dir(step)
    items = sorted((str(p.relative_to(w)), p.stat().st_size, p.stat().st_mtime_ns) for p in w.rglob("*") if p.is_file()
                   and "optim" not in p.parts)
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()


def _resolve_config(step: Path, config):
    """(config, generation_config, where it came from): config= wins, then .hf_metadata, then config.yaml."""
    from transformers import AutoConfig, GenerationConfig, PretrainedConfig

    w = weights_dir(step)
    dirs = [w / "model" / ".hf_metadata", w / "model" / "consolidated"]
    try:
        if isinstance(config, PretrainedConfig):
            cfg, src = copy.deepcopy(config), "config= object"
        elif isinstance(config, Mapping):
            d = dict(config)
            cfg, src = AutoConfig.for_model(d.pop("model_type"), **d), "config= dict"
        elif config is not None:
            p = Path(config).expanduser()
            cfg, src = AutoConfig.from_pretrained(str(p)), str(p)
            dirs.insert(0, p if p.is_dir() else p.parent)
        elif found := next((d for d in dirs if (d / "config.json").is_file()), None):
            cfg, src = AutoConfig.from_pretrained(str(found)), str(found / "config.json")
        else:
            import yaml

            y = step / "config.yaml"
            name = ((yaml.safe_load(y.read_text()) or {}).get("policy") or {}).get("model_name") if y.is_file() else None
            if not name:
                raise CheckpointError(f"no config.json in {dirs[0]} and no policy.model_name in {y}",
                                      fix=Fix("pass config= (the base model's directory or config.json)",
                                              cli="pass --config PATH (the base model's directory or config.json)"))
            cfg, src = AutoConfig.from_pretrained(name), f"{y}: policy.model_name={name}"
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - hub/network/parse errors all mean the same to the user
        raise CheckpointError(f"cannot load the model config ({type(e).__name__}: {e})",
                              fix=Fix("pass config= with the base model's directory or config.json (no hub access needed)",
                                      cli="pass --config PATH with the base model's directory or config.json")) from None
    gen = None
    for d in dirs:
        if (d / "generation_config.json").is_file():
            gen = GenerationConfig.from_pretrained(str(d))
            break
    if gen is None:
        try:
            gen = GenerationConfig.from_model_config(cfg)
        except Exception:  # noqa: BLE001 - optional file
            gen = None
    return cfg, gen, src


def merge(step_dir: str | os.PathLike, out_dir: str | os.PathLike, *, config=None, overwrite: bool = False,
          progress: bool = True, max_shard_size: int | str = "2GB", workers: int = 2, band_mb: int = 16,
          checksum: str = "auto", durable: bool = True) -> MergeResult:
    """Merge a NeMo-RL (or verl ``global_step_N``) checkpoint into a HuggingFace model directory, verified, without
    holding the model in RAM.

    Reads chunk offsets from the checkpoint's own metadata (FSDP2 dim-0, TP dim-1, uneven, single rank),
    writes ``model-0000K-of-0000N.safetensors`` + index + config/generation config + tokenizer into a hidden
    sibling dir and renames it only after every check passed. Re-running with the same source returns the
    existing verified output.

    Args:
        step_dir: ``<checkpoint_dir>/step_N`` (or its ``policy/weights``).
        out_dir: the HF directory to create (must not exist unless ``overwrite``).
        config: the base model's config (directory, config.json path, dict or PretrainedConfig); default:
            ``.hf_metadata/config.json``, else ``config.yaml``'s ``policy.model_name``.
        overwrite: replace an existing ``out_dir``.
        progress: show a tqdm bar by bytes.
        max_shard_size: largest output file; files are balanced, and several files are written and hashed in
            parallel (``workers``), which is why the default is 2 GB rather than transformers' 50 GB.
        workers: output files written in parallel (above 512 MB the file count is a multiple of it).
        band_mb: rows assembled per write, per worker (bounds memory).
        checksum: ``"auto"`` (``"xxh3_128"``, ~10x cheaper than sha256, where the ``xxhash`` package is installed —
            a cluster image may lack it —, else ``"sha256"``), ``"xxh3_128"`` or ``"sha256"``, which also writes
            ``SHA256SUMS`` for ``sha256sum -c``. Recorded in ``checksums.json``; :func:`verify` uses it.
        durable: fsync every file and the directory before the rename, so that even after a power loss
            ``out_dir`` is either complete or absent. ``False`` skips the wait for the disk (the rename is still
            atomic for every other process; a crash may leave a damaged ``out_dir`` that :func:`verify` reports).

    Raises:
        CheckpointError: missing/truncated shard, wrong config, NaN/Inf, full disk (names the shard/key and fix).
        ConflictError: ``out_dir`` exists and is not this checkpoint's verified merge, or it is, contains or
            lies inside the checkpoint (even with ``overwrite``).

    Example:
        >>> step = nbtools.checkpoints.best(cfg.checkpoint_dir)
        >>> result = nbtools.checkpoints.merge(step, cfg.run_dir / "merged_hf")
    """
    check_not_overlapping(Path(step_dir).expanduser(), Path(out_dir).expanduser(), config=config)  # every layout
    if (owned := step_owner(step_dir)) is not None:  # a trainer's own checkpoint (verl's global_step_N/actor): its
        return owned[0].merge(step_dir, out_dir, config=config, overwrite=overwrite, progress=progress,  # reader,
                              max_shard_size=max_shard_size, workers=workers, band_mb=band_mb,  # our writer
                              checksum=checksum, durable=durable)
    if checksum == "auto":
        from nbtools.checkpoints._verify import default_checksum

        checksum = default_checksum()
    t0 = time.perf_counter()
    step = Path(step_dir).expanduser().resolve()
    out = Path(out_dir).expanduser().resolve()
    if step.name.startswith(("tmp_step_", "old_step_")):
        raise CheckpointError(f"{step.name} is a checkpoint NeMo-RL is still writing or deleting",
                              fix="use a finished step_N (nbtools.checkpoints.latest / best)")
    layout = detect_layout(step)
    if layout == "megatron":
        raise CheckpointError(f"{step} holds a Megatron (torch_dist) checkpoint, which nbtools does not merge",
                              fix="run NeMo-RL's converter (as a Ray job on the cluster): "
                                  + megatron_convert_entrypoint(step, out))
    if checksum not in CHECKSUMS:
        raise CheckpointError(f"checksum={checksum!r} is not supported", fix=f"use one of {list(CHECKSUMS)}")
    if (reused := reuse_existing(out, step, _fingerprint(step), overwrite, t0)) is not None:
        return reused
    sources = read_sources(step, layout)
    cfg, gen, cfg_src = _resolve_config(step, config)
    notes = [f"config from {cfg_src}"]
    if layout in DCP_LAYOUTS:  # "verified" covers every byte read, not only what was written
        notes.append(check_dcp_files(weights_dir(step) / DCP_LAYOUTS[layout], fix=RESYNC, workers=workers)[1])
    tok = step / "policy" / "tokenizer"
    return write_merged(sources, cfg, gen, step=step, out=out, layout=layout, fingerprint=_fingerprint(step),
                        extra_files=sorted(tok.iterdir()) if tok.is_dir() else [], notes=notes, overwrite=overwrite,
                        progress=progress, max_shard_size=max_shard_size, workers=workers, band_mb=band_mb,
                        checksum=checksum, durable=durable, t0=t0,
                        missing_hint="a shard file is missing: re-copy the step_N directory")
