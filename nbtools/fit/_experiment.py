"""Fit inputs taken from an experiment: the model, the GPUs, and the trainer's own batch / parallelism keys.

Why: the numbers that decide whether a GRPO step fits live in three places (the experiment, the NeMo-RL recipe it
names, the overrides the launch adds); ``check(cfg)`` reads them exactly as the job will see them.

Example:
    >>> report = nbtools.fit.check(cfg)
    >>> report.verdict
    'fits'
"""

from __future__ import annotations

from typing import Any

from nbtools.config import Experiment
from nbtools.fit._arch import resolve_arch
from nbtools.fit._estimate import FitInputs, FitReport, evaluate
from nbtools.fit._gpus import GpuSpec, gpu_spec
from nbtools.fit._verdict import Verdict

__all__ = ["check", "inputs_from_experiment"]

_NEMO_KEYS = {
    "activation_checkpointing": "policy.dtensor_cfg.activation_checkpointing",
    "micro_batch": "policy.train_micro_batch_size",
    "logprob_batch": "policy.logprob_batch_size",
    "logprob_chunk_size": "policy.logprob_chunk_size",
    "seq_len": "model.max_total_sequence_length",
    "gpus": "cluster.worker_replicas",
    "expandable_segments": "trainer.env_vars: {PYTORCH_CUDA_ALLOC_CONF: 'expandable_segments:True'}",
    "gpu_memory_utilization": "trainer.vllm_cfg.gpu_memory_utilization",
    "vllm_tensor_parallel": "trainer.vllm_cfg.tensor_parallel_size",
    "max_model_len": "trainer.vllm_cfg.max_model_len",
}
_VERL_KEYS = {
    "activation_checkpointing": "actor_rollout_ref.model.enable_gradient_checkpointing",
    "micro_batch": "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "logprob_batch": "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    "seq_len": "data.max_response_length (with data.max_prompt_length)",
    "gpus": "cluster.worker_replicas",
    "expandable_segments": "trainer.env_vars: {PYTORCH_CUDA_ALLOC_CONF: 'expandable_segments:True'}",
    "gpu_memory_utilization": "actor_rollout_ref.rollout.gpu_memory_utilization",
    "vllm_tensor_parallel": "actor_rollout_ref.rollout.tensor_model_parallel_size",
    "max_model_len": "data.max_response_length",
}


def _bool(v: Any) -> bool:
    return v is True or str(v).strip().lower() in ("true", "1", "yes")


def _int(v: Any, default: int) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _float(v: Any, default: float) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return default


def _expandable(*envs: dict | None) -> bool:
    return any("expandable_segments:true" in str((e or {}).get("PYTORCH_CUDA_ALLOC_CONF", "")).lower() for e in envs)


def _training_gpus(cfg: Experiment, colocated: bool, gen_nodes: Any, gen_gpus: Any) -> int:
    nodes, per = cfg.cluster.worker_replicas, cfg.cluster.gpus_per_node
    if colocated:
        return nodes * per
    if gen_nodes not in (None, "null"):
        return max(1, (nodes - _int(gen_nodes, 0)) * per)
    if gen_gpus not in (None, "null"):
        return max(1, per - _int(gen_gpus, 0))
    return nodes * per


def _nemo_rl(cfg: Experiment, gpu: GpuSpec) -> tuple[dict[str, Any], list[str]]:
    from nbtools.trainers import config_tree, nemo_rl

    tree = nemo_rl.recipe_tree(cfg) or config_tree(cfg.images.nemo_rl_version, nemo_rl.DEFAULT_RECIPE) or {}

    def r(key: str, default: Any = None) -> Any:
        v = nemo_rl.resolved(cfg, tree, key)
        return default if v is None or v == "null" else v

    notes = []
    if _bool(r("policy.megatron_cfg.enabled", False)):
        notes.append("the recipe trains with Megatron-Core, which nbtools does not model; the estimate uses the DTensor "
                     "(FSDP2) policy's terms for the same batch")
    colocated = _bool(r("policy.generation.colocated.enabled", True))
    seq = _int(r("policy.max_total_sequence_length"), cfg.model.max_total_sequence_length)
    micro = _int(r("policy.train_micro_batch_size"), 1)
    foreach = r("policy.optimizer.kwargs.foreach")
    d = {
        "micro_batch": micro,
        "seq_len": seq,
        "logprob_batch": _int(r("policy.logprob_batch_size"), micro),
        "logprob_chunk_size": _int(r("policy.logprob_chunk_size"), 0) or None,
        "activation_checkpointing": _bool(r("policy.dtensor_cfg.activation_checkpointing", False)),
        "tensor_parallel": _int(r("policy.dtensor_cfg.tensor_parallel_size"), 1),
        "context_parallel": _int(r("policy.dtensor_cfg.context_parallel_size"), 1),
        "sequence_parallel": _bool(r("policy.dtensor_cfg.sequence_parallel", False)),
        "sequence_packing": _bool(r("policy.sequence_packing.enabled", False)),
        "cpu_offload": _bool(r("policy.dtensor_cfg.cpu_offload", False)),
        "optimizer_foreach": None if foreach is None else _bool(foreach),
        "expandable_segments": _expandable(cfg.trainer.env_vars, r("policy.dtensor_cfg.env_vars") or {}),
        "colocated": colocated,
        "generation_nodes": 0 if colocated else _int(r("policy.generation.colocated.resources.num_nodes"), 0),
        "gpus": _training_gpus(cfg, colocated, r("policy.generation.colocated.resources.num_nodes"),
                               r("policy.generation.colocated.resources.gpus_per_node")),
        "gpu_memory_utilization": _float(r("policy.generation.vllm_cfg.gpu_memory_utilization"), 0.6),
        "max_model_len": _int(r("policy.generation.vllm_cfg.max_model_len"), seq),
        "vllm_tensor_parallel": _int(r("policy.generation.vllm_cfg.tensor_parallel_size"), 1),
        "kv_cache_dtype": str(r("policy.generation.vllm_cfg.kv_cache_dtype", "auto")),
        "enforce_eager": _bool(r("policy.generation.vllm_cfg.enforce_eager", False)),
        "keys": dict(_NEMO_KEYS, gpus_per_node=str(cfg.cluster.gpus_per_node)),
    }
    return d, notes


def _verl(cfg: Experiment) -> tuple[dict[str, Any], list[str]]:
    from nbtools.trainers.nemo_rl import parse_override

    o: dict[str, str] = {}
    for text in cfg.trainer.overrides:
        _, key, value = parse_override(text)
        if value is not None:
            o[key] = value.strip("'\"")
    notes = []
    micro_key = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
    if micro_key not in o:
        notes.append(f"{micro_key} is not set; the estimate assumes 1")
    micro = _int(o.get(micro_key), 1)
    seq = _int(o.get("data.max_prompt_length"), 512) + _int(o.get("data.max_response_length"), 512)
    lp_batch = _int(o.get("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"), micro)
    keys = dict(_VERL_KEYS)
    # verl v0.7.0 defaults (verl/trainer/config/model/hf_model.yaml, actor/actor.yaml): use_remove_padding true,
    # use_dynamic_bsz false, ppo_max_token_len_per_gpu 16384 (log_prob_max_token_len_per_gpu follows it)
    rmpad = _bool(o.get("actor_rollout_ref.model.use_remove_padding", True))
    if _bool(o.get("actor_rollout_ref.actor.use_dynamic_bsz", False)):
        tokens = _int(o.get("actor_rollout_ref.actor.ppo_max_token_len_per_gpu"), 16384)
        lp_tokens = _int(o.get("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu"), tokens)
        notes.append(f"use_dynamic_bsz: micro-batches of up to {tokens} tokens (ppo_max_token_len_per_gpu), not "
                     f"{micro} padded sequences")
        micro, seq, lp_batch = 1, tokens, max(1, round(lp_tokens / tokens))
        keys["seq_len"] = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"
    d = {
        "framework": "verl",
        "micro_batch": micro,
        "seq_len": seq,
        "sequence_packing": rmpad,
        "logprob_batch": lp_batch,
        "activation_checkpointing": _bool(o.get("actor_rollout_ref.model.enable_gradient_checkpointing", True)),
        "cpu_offload": _bool(o.get("actor_rollout_ref.actor.fsdp_config.param_offload", False)),
        "reference_on_gpu": not _bool(o.get("actor_rollout_ref.ref.fsdp_config.param_offload", False)),
        "expandable_segments": _expandable(cfg.trainer.env_vars),
        "colocated": True,
        "gpus": cfg.cluster.worker_replicas * cfg.cluster.gpus_per_node,
        "gpu_memory_utilization": _float(o.get("actor_rollout_ref.rollout.gpu_memory_utilization"), 0.5),
        "max_model_len": seq,
        "vllm_tensor_parallel": _int(o.get("actor_rollout_ref.rollout.tensor_model_parallel_size"),
                                     cfg.model.tensor_parallel_size),
        "keys": dict(keys, gpus_per_node=str(cfg.cluster.gpus_per_node)),
    }
    return d, notes


def inputs_from_experiment(cfg: Experiment, *, gpu: str | GpuSpec | None = None) -> tuple[FitInputs, list[str]]:
    """The :class:`FitInputs` of ``cfg`` (NeMo-RL: the recipe's keys with the launch's overrides; verl: its overrides)."""
    spec = gpu_spec(gpu or cfg.cluster.gpu_type)
    if cfg.trainer.kind == "verl":
        d, notes = _verl(cfg)
    else:
        d, notes = _nemo_rl(cfg, spec)
    return FitInputs(arch=resolve_arch(cfg.model.name), gpu=spec, **d), notes


def check(cfg: Experiment, *, gpu: str | GpuSpec | None = None) -> FitReport:
    """Will ``cfg``'s GRPO step fit in GPU memory? Training and generation terms, a verdict, the smallest fixes.

    The local backend's rehearsal runs on CPU ranks, so there the verdict is ``not-applicable``.

    Args:
        cfg: the experiment.
        gpu: override ``cluster.gpu_type`` (``h100``, ``h200``, ``b200`` ... or a GKE accelerator name).

    Raises:
        NotFoundError: the model's config.json is neither shipped nor reachable (the message names the fix).

    Example:
        >>> nbtools.fit.check(cfg)        # in notebook 03, before the launch cell
    """
    from nbtools import trainers

    if trainers.get(cfg).miniature:
        return _not_applicable(cfg)
    inputs, notes = inputs_from_experiment(cfg, gpu=gpu)
    report = evaluate(inputs)
    report.notes = notes + report.notes
    return report


def _not_applicable(cfg: Experiment) -> FitReport:
    from nbtools.fit._arch import ModelArch

    arch = ModelArch(cfg.model.name, "rehearsal", 0, 0, 0, 1, 1, 0, 0, True)
    spec = GpuSpec("cpu", "CPU ranks (no GPU)", 0)
    inputs = FitInputs(arch=arch, gpu=spec, micro_batch=1, seq_len=cfg.model.max_total_sequence_length,
                       phase="none", gpus=cfg.rehearsal.ranks)
    return FitReport(inputs, 0.0, 0.0, None, None, None, Verdict.NOT_APPLICABLE, False, [],
                     ["not applicable (CPU rehearsal): the local backend trains a tiny model on CPU ranks; "
                      "run the check on a gke or ray experiment"])
