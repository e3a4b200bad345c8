"""verl v0.7.0's files and names as the CPU rehearsal writes them (``nbtools.rehearsal.writers.Writer``):
``global_step_N/actor`` checkpoints, ``{step}.jsonl`` dumps, ``step:N - key:value`` console lines and TensorBoard
scalars under verl's names (``files`` writes each exactly). ``LAYOUT.rehearsal_writer`` names it.

Example:
    >>> from nbtools.rehearsal.writers import writer_for
    >>> type(writer_for(verl_cfg, rank=0, world=2, say=print)).__name__
    'VerlWriter'
"""

from __future__ import annotations

import os
import resource
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

import nbtools.trainers.verl.files as files
from nbtools.config import Experiment
from nbtools.trainers.verl._trainer import Verl

__all__ = ["VerlWriter"]


# verl's timing_raw names for the loop's phases (ray_trainer.py marked_timer calls)
_VERL_TIMING = {"generation": "gen", "reward_calculation": "reward", "policy_and_reference_logprobs": "ref",
                "advantage_calculation": "adv", "policy_training": "update_actor", "checkpointing": "save_checkpoint",
                "logging": "dump_rollout_generations", "total_step_time": "step"}
_CPU_FLOPS = 448e9  # verl/utils/flops_counter.py _DEVICE_FLOPS["CPU"]


def _stats(prefix: str, values) -> dict[str, float]:
    v = np.asarray(values, dtype=float)
    return {f"{prefix}/mean": float(v.mean()), f"{prefix}/max": float(v.max()), f"{prefix}/min": float(v.min())}


def _flops(config, seqlens) -> float:
    """verl's ``_estimate_qwen2_flops`` (Llama/Qwen2 dense): 6·N·tokens plus attention, forward and backward."""
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    q, kv = config.num_attention_heads * head, config.num_key_value_heads * head
    dense = ((config.hidden_size * config.intermediate_size * 3 + config.hidden_size * (q + 2 * kv + q))
             * config.num_hidden_layers + config.vocab_size * config.hidden_size * 2)
    attn = 12 * sum(s * s for s in seqlens) * head * config.num_attention_heads * config.num_hidden_layers
    return 6 * dense * sum(seqlens) + attn


class VerlWriter:
    """verl v0.7.0's files and names (``files``), at the imitated trainer's ``output_dirs``."""

    dump_rank = 0  # verl's driver decodes, dumps and logs everything
    validate_at_end = True  # ray_trainer.fit validates on the last step too

    def __init__(self, cfg: Experiment, rank: int, world: int, say):
        self.cfg, self.rank, self.world, self.say = cfg, rank, world, say
        self.dirs = Verl(cfg).output_dirs()  # the imitated trainer's directories
        self.data_source = cfg.data.dataset
        self.saved: list[int] = []  # this process's saves (verl's previous_saved_paths)
        self.writer = None
        self.model_config = None
        self._samples: dict[str, Any] = {}
        self._val: dict[str, float] = {}

    def latest(self):
        return files.latest_step(self.dirs.checkpoint_dir)

    def begin(self, bcast) -> None:
        if self.rank == 0 and self.cfg.logging.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            os.makedirs(self.dirs.tensorboard_dir, exist_ok=True)
            print(f"Saving tensorboard log to {self.dirs.tensorboard_dir}.", flush=True)
            self.writer = SummaryWriter(self.dirs.tensorboard_dir)
        dist.barrier()

    def resume(self, ckpt, model, optimizer, scheduler, sampler, state: dict) -> bool:
        step = int(ckpt)
        d = files.step_dir(self.dirs.checkpoint_dir, step)
        self.say(f"Load from checkpoint folder: {d}")
        found = files.load_actor(d / "actor", model, optimizer, rank=self.rank, world=self.world)
        sampler.load_state_dict(torch.load(d / "data.pt", weights_only=True))
        state.update(total_steps=step, consumed_samples=step * self.cfg.grpo.num_prompts_per_step)
        return found

    def setup_done(self, seconds: float) -> None:
        pass

    def _log(self, metrics: dict[str, float], step: int) -> None:
        if self.rank != 0:
            return
        print(files.console_line(metrics, step), flush=True)
        if self.writer is not None:
            for k, v in metrics.items():
                self.writer.add_scalar(k, v, step)
            self.writer.flush()

    def train_samples(self, step: int, merged: dict) -> None:
        t = time.perf_counter()
        files.dump_generations(self.dirs.rollout_dir, step, inputs=merged["prompts"], outputs=merged["responses"],
                                     gts=merged["gts"], scores=merged["rewards"],
                                     extra={"acc": [bool(c) for c in merged["correct"]]})
        self._samples = {"dump_s": time.perf_counter() - t, "rewards": merged["rewards"],
                         "advantages": merged["advantages"], "responses": [len(r) for r in merged["response_ids"]],
                         "prompts": [len(p) for p in merged["prompt_ids"]]}

    def validation(self, step: int, merged: dict, metrics: dict, seconds: float) -> None:
        acc = [bool(c) for c in merged["correct"]]
        files.dump_generations(self.dirs.validation_dir, step, inputs=merged["prompts"], outputs=merged["responses"],
                                     gts=merged["gts"], scores=merged["rewards"],
                                     extra={"reward": list(merged["rewards"]), "acc": acc})
        ds = self.data_source  # process_validation_metrics: the "acc" extra is the core variable, n=1 sample each
        val = {f"val-core/{ds}/acc/mean@1": float(np.mean(acc)),
               f"val-aux/{ds}/reward/mean@1": float(np.mean(merged["rewards"]))}
        if step == 0:  # before training, verl logs the validation metrics on their own
            self._log(val, 0)
        else:
            self._val = {**val, "timing_s/testing": seconds}

    def step_done(self, step: int, metrics: dict, timing: dict, val: dict | None, epoch: int) -> None:
        s, m, g = self._samples, metrics, self.cfg.grpo
        if self.rank != 0 or not s:
            return
        max_new = g.max_new_tokens or self.cfg.rehearsal.max_new_tokens
        resp, prompt = np.asarray(s["responses"], dtype=float), np.asarray(s["prompts"], dtype=float)
        adv = np.asarray(s["advantages"], dtype=float)
        token_adv = float((adv * resp).sum() / max(resp.sum(), 1.0))  # verl averages over response tokens
        seqlens = [int(a + b) for a, b in zip(s["prompts"], s["responses"], strict=True)]
        t = {v: timing[k] for k, v in _VERL_TIMING.items() if k in timing}
        t["dump_rollout_generations"] = s["dump_s"]
        kl = m.get("kl_penalty", 0.0)
        out: dict[str, float] = {
            "actor/entropy": m["approx_entropy"], "actor/kl_loss": kl, "actor/kl_coef": g.kl_penalty,
            "actor/pg_loss": m["loss"] - g.kl_penalty * kl,
            # one update per rollout on its own samples: the ratio is 1, nothing is clipped, the PPO KL is 0
            "actor/pg_clipfrac": 0.0, "actor/ppo_kl": 0.0, "actor/pg_clipfrac_lower": 0.0,
            "actor/grad_norm": m["grad_norm"],
            "perf/mfu/actor": _flops(self.model_config, seqlens) / max(t.get("update_actor", 0.0), 1e-9)
            / _CPU_FLOPS / self.world if self.model_config is not None else 0.0,
            # CPU ranks: the process's peak resident memory stands in for the CUDA allocator's peaks
            "perf/max_memory_allocated_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "perf/max_memory_reserved_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            **_used_gb(), "actor/lr": m["lr"], "training/global_step": step, "training/epoch": epoch,
            **_stats("critic/score", s["rewards"]), **_stats("critic/rewards", s["rewards"]),
            "critic/advantages/mean": token_adv, "critic/advantages/max": float(adv.max()),
            "critic/advantages/min": float(adv.min()),
            "critic/returns/mean": token_adv, "critic/returns/max": float(adv.max()), "critic/returns/min": float(adv.min()),
            **_stats("response_length", resp), "response_length/clip_ratio": float((resp >= max_new).mean()),
            **_stats("response_length_non_aborted", resp),
            "response_length_non_aborted/clip_ratio": float((resp >= max_new).mean()), "response/aborted_ratio": 0.0,
            **_stats("prompt_length", prompt),
            "prompt_length/clip_ratio": float((prompt >= self.cfg.model.max_total_sequence_length - max_new).mean()),
            **self._val,
            **{f"timing_s/{k}": v for k, v in t.items()},
            **{f"timing_per_token_ms/{k}": t[k] * 1000 / (resp.sum() if k == "gen" else sum(seqlens))
               for k in ("gen", "ref", "adv", "update_actor") if k in t},
            "perf/total_num_tokens": sum(seqlens), "perf/time_per_step": t.get("step", 0.0),
            "perf/throughput": sum(seqlens) / max(t.get("step", 0.0), 1e-9) / self.world,
        }
        self._val, self._samples = {}, {}
        self._log(out, step)

    def save(self, step: int, *, model, optimizer, scheduler, sampler, tokenizer, state: dict, metrics: dict,
             val: dict | None) -> None:
        run = self.dirs.checkpoint_dir
        keep = self.cfg.checkpointing.keep_top_k  # trainer.max_actor_ckpt_to_keep
        if self.rank == 0 and keep and len(self.saved) >= keep:
            for old in self.saved[: len(self.saved) - keep + 1]:
                files.remove_actor(run, old)
            self.saved = self.saved[len(self.saved) - keep + 1:]
        actor = files.step_dir(run, step) / "actor"
        self.say(f"local_global_step_folder: {actor.parent}")
        files.save_actor(actor, model, optimizer if self.cfg.checkpointing.save_optimizer else None,
                               rank=self.rank, world=self.world, lr_scheduler=scheduler, tokenizer=tokenizer)
        if self.rank == 0:
            files.finish_step(run, step, sampler.state_dict())
            self.saved.append(step)
        dist.barrier()

    def close(self) -> str:
        if self.writer is not None:
            self.writer.close()
        return self.dirs.log_dir


def _used_gb() -> dict[str, float]:
    try:
        import psutil
    except ImportError:  # not a dependency of nbtools: verl's key is left out rather than guessed
        return {}
    return {"perf/cpu_memory_used_gb": psutil.virtual_memory().used / 2**30}
