"""NeMo-RL checkpoints with real DCP writers: ``tmp_step_N`` → ``step_N``, three weight layouts, keep_top_k, resume.

Layouts (nemo-rl-facts.md §4), chosen by ``checkpointing.dtensor_v2`` + ``model_save_format``:

* DTensor v1 (``dtensor_v2: false``): ``policy/weights/.metadata`` + ``__R_0.distcp``, keys ``model.<HF FQN>``;
* v2 ``torch_save``: ``policy/weights/model/`` standard DCP, flat HF FQNs, tied ``lm_head`` dropped;
* v2 ``safetensors`` (default): ``policy/weights/model/shard-{rank+1:05d}-model-00001-of-00001.safetensors`` per
  rank (DCP sharding info in the header) via torch's ``HuggingFaceStorageWriter``, plus
  ``policy/weights/model/.hf_metadata/{config.json, generation_config.json, fqn_to_file_index_mapping.json}``.

Example:
    >>> latest_checkpoint(cfg.checkpoint_dir)
    PosixPath('.../checkpoints/step_600')
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from nbtools import _atomic, _layout

__all__ = [
    "STEP_RE",
    "layout_of",
    "latest_checkpoint",
    "training_info",
    "init_tmp_checkpoint",
    "finalize_checkpoint",
    "remove_old_checkpoints",
    "save_policy",
    "load_policy",
    "read_full_state_dict",
    "detect_layout",
]

STEP_RE = _layout.STEP_RE


def layout_of(dtensor_v2: bool, model_save_format: str | None) -> str:
    """``"dtensor_v1" | "v2_torch_save" | "v2_safetensors"`` for the checkpointing settings."""
    if not dtensor_v2:
        return "dtensor_v1"
    return "v2_torch_save" if model_save_format == "torch_save" else "v2_safetensors"


_steps = _layout.step_dirs


def latest_checkpoint(checkpoint_dir: str | os.PathLike) -> Path | None:
    """The highest complete ``step_N`` (``tmp_step_*`` / ``old_step_*`` are never considered), or None."""
    steps = _steps(checkpoint_dir)
    return steps[-1][1] if steps else None


def training_info(state: dict, step: int, metric_name: str | None, train_metrics: dict,
                  val_metrics: dict | None) -> dict[str, Any]:
    """NeMo-RL's ``training_info.json``: the loop state, ``val_reward`` when validated, and ``metric_name``'s value.

    Example:
        >>> training_info({"total_steps": 5}, 5, "val:accuracy", {"reward": 0.5}, {"accuracy": 0.9})
        {'total_steps': 5, 'val_reward': 0.9, 'val:accuracy': 0.9}
    """
    from nbtools.errors import ConfigError

    info = dict(state)
    if val_metrics:
        info["val_reward"] = val_metrics["accuracy"]
    else:
        info.pop("val_reward", None)
    if metric_name:
        kind, key = metric_name.split(":", 1)
        source = val_metrics if kind == "val" else train_metrics
        if source and key in source:
            info[metric_name] = float(source[key])
        elif source:
            raise ConfigError(f"checkpointing.metric_name: {metric_name!r} is not among the {kind} metrics "
                              f"{sorted(source)}; fix: pick one of them, e.g. `val:accuracy`")
        else:
            print(f"WARNING: no {kind} metrics at step {step}; {metric_name!r} is not saved in training_info.json "
                  f"(align checkpointing.save_period with grpo.val_period)", flush=True)
    return info


def init_tmp_checkpoint(checkpoint_dir: str | os.PathLike, step: int, *, training_info: dict, config: dict) -> Path:
    """Create ``tmp_step_N`` (removing a stale one) with ``training_info.json`` and ``config.yaml``."""
    import yaml

    tmp = Path(checkpoint_dir) / f"tmp_step_{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / "training_info.json").write_text(json.dumps(training_info, indent=2))
    (tmp / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return tmp


def finalize_checkpoint(tmp: Path, step: int) -> Path:
    """Rename ``tmp_step_N`` → ``step_N``; an existing ``step_N`` is moved to ``old_step_N`` and deleted first."""
    final = tmp.parent / f"step_{step}"
    if final.exists():
        old = tmp.parent / f"old_step_{step}"
        shutil.rmtree(old, ignore_errors=True)
        _atomic.publish(final, old)
        shutil.rmtree(old, ignore_errors=True)
    _atomic.publish_dir(tmp, final)  # NeMo-RL's names: tmp_step_N is the temp, step_N the result
    return final


def remove_old_checkpoints(
    checkpoint_dir: str | os.PathLike, *, keep_top_k: int | None, metric_name: str | None, higher_is_better: bool,
    save_period: int,
) -> list[Path]:
    """NeMo-RL's keep_top_k: the latest is protected; periodic checkpoints compete by metric; others go. Returns removed."""
    steps = _steps(checkpoint_dir)
    if keep_top_k is None or not steps:
        return []
    latest = steps[-1][0]
    worst = -math.inf if higher_is_better else math.inf

    def score(p: Path) -> float:
        if metric_name is None:
            return 0.0
        try:
            v = json.loads((p / "training_info.json").read_text()).get(metric_name)
        except (OSError, ValueError):
            v = None
        return worst if v is None else float(v)

    periodic = [(s, p) for s, p in steps if save_period and s % save_period == 0]
    ranked = sorted(periodic, key=lambda sp: (score(sp[1]) if higher_is_better else -score(sp[1]), sp[0]), reverse=True)
    keep = {s for s, _ in ranked[:keep_top_k]} | {latest}
    removed = [p for s, p in steps if s not in keep]
    for p in removed:
        shutil.rmtree(p, ignore_errors=True)
    return removed


def _tied(model) -> bool:
    return bool(getattr(model.config, "tie_word_embeddings", False))


def _model_sd(model, layout: str) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    sd = get_model_state_dict(model)
    if layout != "dtensor_v1" and _tied(model):
        sd.pop("lm_head.weight", None)
    return sd


def save_policy(model, optimizer, policy_dir: Path, *, layout: str, rank: int, save_optimizer: bool = True,
                scheduler=None) -> None:
    """Collective: every rank writes its shards of ``policy/weights`` (+ ``policy/optimizer``) with torch DCP."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    for m in model.modules():  # FSDP2 roots stay unsharded after forward: reshard so state dicts are DTensors
        if hasattr(m, "reshard"):
            m.reshard()
    weights = policy_dir / "weights"
    sd = _model_sd(model, layout)
    if layout == "dtensor_v1":
        dcp.save({"model": sd}, checkpoint_id=str(weights))
    elif layout == "v2_torch_save":
        dcp.save(sd, checkpoint_id=str(weights / "model"))
    else:
        mapping = dict.fromkeys(sd, 1)
        writer = dcp.HuggingFaceStorageWriter(path=str(weights / "model"), fqn_to_index_mapping=mapping, save_distributed=True)
        dcp.save(sd, storage_writer=writer)
        if rank == 0:
            meta = weights / "model" / ".hf_metadata"
            meta.mkdir(parents=True, exist_ok=True)
            model.config.to_json_file(str(meta / "config.json"))
            model.generation_config.to_json_file(str(meta / "generation_config.json"))
            (meta / "fqn_to_file_index_mapping.json").write_text(json.dumps(mapping, indent=2))
    if save_optimizer:
        sched = scheduler.state_dict() if scheduler is not None else {}
        osd = {"optim": get_optimizer_state_dict(model, optimizer), "sched": sched}
        target = policy_dir / "optimizer" if layout == "dtensor_v1" else policy_dir / "optimizer" / "optim"
        dcp.save({"optim": osd}, checkpoint_id=str(target))


def load_policy(model, optimizer, policy_dir: Path, *, layout: str) -> bool:
    """Collective: load ``policy/weights`` (and ``policy/optimizer`` when present) into the sharded model in place.

    Returns whether optimizer state was found (NeMo-RL starts a fresh optimizer with a warning otherwise).
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    weights = policy_dir / "weights"
    sd = _model_sd(model, layout)
    if layout == "dtensor_v1":
        dcp.load({"model": sd}, checkpoint_id=str(weights))
    elif layout == "v2_torch_save":
        dcp.load(sd, checkpoint_id=str(weights / "model"))
    else:
        dcp.load(sd, storage_reader=dcp.HuggingFaceStorageReader(str(weights / "model")))
    set_model_state_dict(model, sd, options=StateDictOptions(strict=False))
    target = policy_dir / "optimizer" if layout == "dtensor_v1" else policy_dir / "optimizer" / "optim"
    if not (target / ".metadata").exists():
        return False
    osd = {"optim": get_optimizer_state_dict(model, optimizer), "sched": {}}
    dcp.load({"optim": osd}, checkpoint_id=str(target))
    set_optimizer_state_dict(model, optimizer, osd["optim"])
    return True


def read_full_state_dict(step_dir: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Single process: the full HF-keyed state dict of ``step_N/policy/weights`` (any of the three layouts).

    Used by the benchmark and tests; the real merge tool is ``nbtools.checkpoints.merge``.
    """
    from torch.distributed.checkpoint import FileSystemReader, HuggingFaceStorageReader
    from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    weights = Path(step_dir) / "policy" / "weights"
    if (weights / ".metadata").exists():
        reader, strip = FileSystemReader(str(weights)), "model."
    elif (weights / "model" / ".metadata").exists():
        reader, strip = FileSystemReader(str(weights / "model")), ""
    else:
        reader, strip = HuggingFaceStorageReader(str(weights / "model")), ""
    sd: dict[str, Any] = {}
    _load_state_dict(sd, storage_reader=reader, planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    if strip:
        sd = sd["model"] if "model" in sd and isinstance(sd["model"], dict) else {k[len(strip):]: v for k, v in sd.items()}
    return sd


def detect_layout(step_dir: str | os.PathLike) -> str:
    """Which of the three layouts a rehearsal ``step_N`` holds (so a resume works after a layout change)."""
    weights = Path(step_dir) / "policy" / "weights"
    if (weights / ".metadata").exists():
        return "dtensor_v1"
    if (weights / "model" / ".metadata").exists():
        return "v2_torch_save"
    return "v2_safetensors"
