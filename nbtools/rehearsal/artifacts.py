"""NeMo-RL's log artifacts, written exactly: ``exp_NNN`` numbering, TensorBoard scalars, per-step JSONL dumps.

Everything downstream (monitor, trajectories, re-scoring) reads these files the same way it reads a real NeMo-RL
run, so names and schemas follow nemo-rl-facts.md §2–3 field by field.

Example:
    >>> exp = next_experiment_dir(cfg.log_dir)          # <log_dir>/exp_001
    >>> log = MetricsLogger(exp)
    >>> log.log_metrics({"reward": 0.3}, step=1, prefix="train")
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nbtools import _atomic
from nbtools._layout import EXP_RE, exp_dirs
from nbtools.config import Experiment
from nbtools.rewards.nemo_rl_env import ENV_NAME

__all__ = [
    "next_experiment_dir",
    "MetricsLogger",
    "write_jsonl",
    "train_records",
    "val_records",
    "flatten",
    "nemo_rl_config",
]



def next_experiment_dir(log_dir: str | os.PathLike) -> Path:
    """Create and return ``<log_dir>/exp_NNN`` with NNN = max existing + 1 (NeMo-RL's get_next_experiment_dir)."""
    base = Path(log_dir)
    base.mkdir(parents=True, exist_ok=True)
    ids = [n for n, _ in exp_dirs(base)]
    while True:  # exist_ok=False: two runs starting at once never share an exp dir
        nxt = base / f"exp_{(max(ids) + 1 if ids else 1):03d}"
        try:
            nxt.mkdir()
            return nxt
        except FileExistsError:
            ids.append(int(EXP_RE.match(nxt.name).group(1)))


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping → ``{"a.b": value}`` (scalars only), for TensorBoard hparams."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        elif isinstance(v, (int, float, str, bool)):
            out[key] = v
        elif v is None:
            out[key] = "null"
        else:
            out[key] = json.dumps(v, default=str)
    return out


class MetricsLogger:
    """TensorBoard backend of NeMo-RL's Logger: ``<exp>/tensorboard/``, tags ``f"{prefix}/{name}"``, scalars only."""

    def __init__(self, exp_dir: str | os.PathLike, *, enabled: bool = True, flush_secs: int = 5):
        self.exp_dir = Path(exp_dir)
        self.writer = None
        if enabled:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(self.exp_dir / "tensorboard"), flush_secs=flush_secs)

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str = "") -> None:
        """Write every scalar metric as ``prefix/name`` at ``step`` (lists/dicts are skipped, like NeMo-RL)."""
        if self.writer is None:
            return
        for name, value in metrics.items():
            if hasattr(value, "item") and getattr(value, "size", 1) == 1:
                value = value.item()
            if isinstance(value, bool):
                value = int(value)
            if not isinstance(value, (int, float)):
                continue
            self.writer.add_scalar(f"{prefix}/{name}" if prefix else name, value, step)

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """``SummaryWriter.add_hparams`` (creates ``tensorboard/<time>/`` like NeMo-RL's log_hyperparams)."""
        if self.writer is not None:
            self.writer.add_hparams(flatten(params), {})

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def write_jsonl(path: str | os.PathLike, records: Sequence[Mapping[str, Any]]) -> Path:
    """NeMo-RL's log_batched_dict_as_jsonl: one JSON line per sample with ``idx``; temp file + rename."""
    p = Path(path)
    with _atomic.open_atomic(p) as f:
        f.write("".join(json.dumps({**r, "idx": i}, default=str) + "\n" for i, r in enumerate(records)))
    return p


def _pad(rows: list[list], value, width: int) -> list[list]:
    return [r + [value] * (width - len(r)) for r in rows]


def train_records(
    *,
    prompts: list[str],
    responses: list[str],
    observations: list[str],
    rewards: Sequence[float],
    prompt_ids: list[list[int]],
    response_ids: list[list[int]],
    env_ids: list[list[int]],
    advantages: Sequence[float],
    generation_logprobs: list[list[float]],
    prev_logprobs: list[list[float]],
    pad_id: int,
) -> list[dict[str, Any]]:
    """``train_data_step{N}.jsonl`` records (HEAD schema): every field a one-element list, tokens right-padded.

    ``token_ids`` = prompt + response + environment observation; ``token_loss_mask`` is 1 on response tokens;
    ``advantages`` repeats the sample's advantage on every real token (0 on padding); logprobs are 0 where a
    token was not generated (generation) or has no prefix (prev: position 0 and the observation).
    """
    toks, mask, adv, glp, plp = [], [], [], [], []
    for i in range(len(prompts)):
        p, r, e = prompt_ids[i], response_ids[i], env_ids[i]
        toks.append(p + r + e)
        mask.append([0] * len(p) + [1] * len(r) + [0] * len(e))
        adv.append([float(advantages[i])] * (len(p) + len(r) + len(e)))
        glp.append([0.0] * len(p) + list(generation_logprobs[i]) + [0.0] * len(e))
        plp.append(list(prev_logprobs[i]) + [0.0] * (len(p) + len(r) + len(e) - len(prev_logprobs[i])))
    width = max(len(t) for t in toks)
    toks_p, mask_p = _pad(toks, pad_id, width), _pad(mask, 0, width)
    adv_p, glp_p, plp_p = _pad(adv, 0.0, width), _pad(glp, 0.0, width), _pad(plp, 0.0, width)
    return [
        {
            "content": [[prompts[i], responses[i], observations[i]]],
            "rewards": [float(rewards[i])],
            "input_lengths": [len(toks[i])],
            "token_ids": [toks_p[i]],
            "token_loss_mask": [mask_p[i]],
            "sample_loss_mask": [1.0],
            "advantages": [adv_p[i]],
            "generation_logprobs": [glp_p[i]],
            "prev_logprobs": [plp_p[i]],
        }
        for i in range(len(prompts))
    ]


def val_records(prompts: list[str], responses: list[str], observations: list[str], rewards: Sequence[float]) -> list[dict]:
    """``val_data_step{N}.jsonl`` records: ``content`` holds role/content message dicts (user, assistant, environment)."""
    return [
        {
            "content": [
                [
                    {"role": "user", "content": prompts[i]},
                    {"role": "assistant", "content": responses[i]},
                    {"role": "environment", "content": observations[i]},
                ]
            ],
            "rewards": [float(rewards[i])],
        }
        for i in range(len(prompts))
    ]


def nemo_rl_config(cfg: Experiment, exp_dir: str | os.PathLike, *, world_size: int) -> dict[str, Any]:
    """The resolved NeMo-RL-shaped master config saved as ``step_N/config.yaml`` (plus ``nbtools:`` provenance).

    ``policy.model_name`` points at the baseline HF directory, so ``AutoConfig.from_pretrained`` works on it the
    way it works on a hub id in a real NeMo-RL config.
    """
    from nbtools.config import to_dict
    from nbtools.rehearsal.task import baseline_dir

    g, c, r = cfg.grpo, cfg.checkpointing, cfg.rehearsal
    base = str(baseline_dir(cfg))
    batch = g.num_prompts_per_step * g.num_generations_per_prompt
    max_new = g.max_new_tokens or r.max_new_tokens
    return {
        "policy": {
            "model_name": base,
            "tokenizer": {"name": base, "chat_template_kwargs": None},
            "hf_config_overrides": {},
            "train_global_batch_size": batch,
            "train_micro_batch_size": batch // world_size,
            "generation_batch_size": batch // world_size,
            "max_total_sequence_length": cfg.model.max_total_sequence_length,
            "precision": "float32",
            "dtensor_cfg": {"_v2": c.dtensor_v2, "enabled": True, "cpu_offload": False, "sequence_parallel": False,
                            "activation_checkpointing": False, "tensor_parallel_size": 1, "context_parallel_size": 1},
            "megatron_cfg": {"enabled": False},
            "max_grad_norm": 1.0,
            "optimizer": {"name": "torch.optim.AdamW",
                          "kwargs": {"lr": g.learning_rate, "weight_decay": 0.0, "betas": [0.9, 0.99], "eps": 1e-8}},
            "generation": {"backend": "hf", "max_new_tokens": max_new, "temperature": g.temperature, "top_p": 1.0,
                           "top_k": None, "stop_token_ids": None, "stop_strings": None},
        },
        "loss_fn": {"reference_policy_kl_penalty": g.kl_penalty, "reference_policy_kl_type": "k3",
                    "kl_input_clamp_value": 20.0, "kl_output_clamp_value": 10.0, "ratio_clip_min": r.ratio_clip,
                    "ratio_clip_max": r.ratio_clip, "ratio_clip_c": None, "token_level_loss": True,
                    "use_on_policy_kl_approximation": False, "use_importance_sampling_correction": False},
        "grpo": {"num_prompts_per_step": g.num_prompts_per_step, "num_generations_per_prompt": g.num_generations_per_prompt,
                 "max_rollout_turns": 1, "max_num_epochs": None, "max_num_steps": g.max_num_steps,
                 "normalize_rewards": g.normalize_rewards, "use_leave_one_out_baseline": g.use_leave_one_out_baseline,
                 "val_period": g.val_period, "val_at_start": g.val_at_start, "val_at_end": False,
                 "max_val_samples": g.max_val_samples, "val_batch_size": g.max_val_samples,
                 "val_num_generations_per_prompt": 1, "seed": g.seed},
        "checkpointing": {"enabled": c.enabled, "checkpoint_dir": cfg.checkpoint_dir, "metric_name": c.metric_name,
                          "higher_is_better": c.higher_is_better, "keep_top_k": c.keep_top_k, "save_period": c.save_period,
                          "model_save_format": c.model_save_format, "save_consolidated": c.save_consolidated,
                          "save_optimizer": c.save_optimizer},
        "logger": {"log_dir": str(exp_dir), "num_val_samples_to_print": 0, "wandb_enabled": False,
                   "tensorboard_enabled": cfg.logging.tensorboard, "mlflow_enabled": False, "swanlab_enabled": False,
                   "monitor_gpus": False, "tensorboard": {}},
        "data": {"max_input_seq_length": cfg.model.max_total_sequence_length, "shuffle": True,
                 "train": {"dataset_name": cfg.data.dataset, "seed": g.seed}, "validation": None,
                 "default": {"prompt_file": None, "system_prompt_file": None, "processor": "max3", "env_name": ENV_NAME}},
        # NeMo-RL's math env has no reward list: a mix runs as nbtools' environment, wired as a launch wires it
        # (data.default.env_name + env.nbtools_reward, v0.7.0's keys; nbtools.rewards.reward_overrides)
        "env": {"math": {"num_workers": 1}, ENV_NAME: {"reward_functions": [dict(x) for x in r.reward_functions]}},
        "cluster": {"gpus_per_node": 0, "num_nodes": 1, "cpu_ranks": world_size},
        "nbtools": to_dict(cfg),
    }
