"""What the GPU memory fit (``nbtools.fit``) needs of a trainer: the profile of its actor (how it spends memory where
trainers differ, and where each input is set), and the readers each trainer's ``fit_inputs`` shares.

Why: the fit is one memory model; what differs by trainer is which keys hold the batch and parallelism, and a few
facts of the actor's implementation (logits dtype, checkpointing granularity, where the reference policy lives).
The trainer states them here, so the fit never asks which trainer it has.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nbtools.config import Experiment

__all__ = ["FitProfile", "ALLOC_KEY", "as_bool", "as_int", "as_float", "expandable", "training_gpus"]


@dataclass(frozen=True)
class FitProfile:
    """How a trainer's actor spends GPU memory where the estimate tells actors apart; the default is the calibrated
    FSDP2 (DTensor) policy with fp32 logits (``benchmarks/fit_calibrate.py``).

    Attributes:
        trainer: the trainer's name (shown in ``nbtools fit --json``; "" for an estimate of no experiment).
        calibrated: the training terms were measured on this actor (an over-capacity peak can then be certain).
        tokens_upper_bound: real micro-batches are usually shorter than the estimate's tokens (padding removed,
            dynamic batches), so a does-not-fit is never certain.
        bf16_logits: bf16 logits through flash-attn's cross-entropy, the log-prob pass also computing the entropy.
        whole_layer_checkpointing: activation checkpointing keeps each decoder layer's bf16 input (HF's).
        reference_on_gpu: the reference policy stays on the GPU by default.
        override_keys: fit input -> the trainer config key that sets it (the OOM post-mortem's override), None where
            the trainer has none.
        note: a line the estimate adds to its notes.
    """

    trainer: str = ""
    calibrated: bool = True
    tokens_upper_bound: bool = False
    bf16_logits: bool = False
    whole_layer_checkpointing: bool = False
    reference_on_gpu: bool = False
    override_keys: Mapping[str, str | None] = field(default_factory=dict)
    note: str = ""


def as_bool(v: Any) -> bool:
    return v is True or str(v).strip().lower() in ("true", "1", "yes")


def as_int(v: Any, default: int) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def as_float(v: Any, default: float) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return default


def expandable(*envs: dict | None) -> bool:
    return any("expandable_segments:true" in str((e or {}).get("PYTORCH_CUDA_ALLOC_CONF", "")).lower() for e in envs)


def training_gpus(cfg: Experiment, colocated: bool, gen_nodes: Any, gen_gpus: Any) -> int:
    nodes, per = cfg.cluster.worker_replicas, cfg.cluster.gpus_per_node
    if colocated:
        return nodes * per
    if gen_nodes not in (None, "null"):
        return max(1, (nodes - as_int(gen_nodes, 0)) * per)
    if gen_gpus not in (None, "null"):
        return max(1, per - as_int(gen_gpus, 0))
    return nodes * per


# how a suggestion names the allocator setting, the same key for every trainer
ALLOC_KEY = "trainer.env_vars: {PYTORCH_CUDA_ALLOC_CONF: 'expandable_segments:True'}"
