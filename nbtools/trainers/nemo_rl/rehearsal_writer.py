"""NeMo-RL's files as the CPU rehearsal writes them (``nbtools.rehearsal.writers.Writer``): ``exp_NNN`` with
``train_data_stepN.jsonl`` / ``val_data_stepN.jsonl`` and TensorBoard, ``tmp_step_N`` -> ``step_N`` checkpoints
(nemo-rl-facts.md §2-4, see ``nbtools.rehearsal.artifacts`` and ``checkpoint``). ``LAYOUT.rehearsal_writer`` names it.

Example:
    >>> from nbtools.rehearsal.writers import writer_for
    >>> type(writer_for(cfg, rank=0, world=2, say=print)).__name__
    'NemoRlWriter'
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import torch.distributed as dist

from nbtools.config import Experiment
from nbtools.rehearsal import artifacts, checkpoint
from nbtools.rehearsal.writers import PAD, rank_pause

__all__ = ["NemoRlWriter"]


class NemoRlWriter:
    """NeMo-RL's files (nemo-rl-facts.md §2–4): see ``artifacts`` and ``checkpoint``."""

    validate_at_end = False

    def __init__(self, cfg: Experiment, rank: int, world: int, say):
        self.cfg, self.rank, self.world, self.say = cfg, rank, world, say
        self.dump_rank = world - 1  # the last rank writes the dump while rank 0 writes TensorBoard and stdout
        c = cfg.checkpointing
        self.layout = checkpoint.layout_of(c.dtensor_v2, c.model_save_format)

    def latest(self):
        return checkpoint.latest_checkpoint(self.cfg.checkpoint_dir)

    def begin(self, bcast) -> None:
        self.exp_dir = Path(bcast(str(artifacts.next_experiment_dir(self.cfg.log_dir)) if self.rank == 0 else None))
        self.say(f"📊 Using log directory: {self.exp_dir}")

    def resume(self, ckpt, model, optimizer, scheduler, sampler, state: dict) -> bool:
        info = json.loads((ckpt / "training_info.json").read_text())
        state.update({k: info[k] for k in state if k in info})
        found = checkpoint.load_policy(model, optimizer, ckpt / "policy", layout=checkpoint.detect_layout(ckpt))
        sampler.load_state_dict(torch.load(ckpt / "train_dataloader.pt", weights_only=True))
        return found

    def setup_done(self, seconds: float) -> None:
        self.master_config = artifacts.nemo_rl_config(self.cfg, self.exp_dir, world_size=self.world)
        self.logger = artifacts.MetricsLogger(self.exp_dir, enabled=self.cfg.logging.tensorboard and self.rank == 0)
        if self.rank == 0:
            self.logger.log_hyperparams(self.master_config)
        self.logger.log_metrics({"total_setup_time_s": seconds}, 0, "timing/setup")

    def train_samples(self, step: int, merged: dict) -> None:
        keys = ("prompts", "responses", "observations", "rewards", "prompt_ids", "response_ids", "env_ids",
                "advantages", "generation_logprobs", "prev_logprobs")
        recs = artifacts.train_records(**{k: merged[k] for k in keys}, pad_id=PAD)
        artifacts.write_jsonl(self.exp_dir / f"train_data_step{step}.jsonl", recs)

    def validation(self, step: int, merged: dict, metrics: dict, seconds: float) -> None:
        artifacts.write_jsonl(self.exp_dir / f"val_data_step{step}.jsonl",
                              artifacts.val_records(merged["prompts"], merged["responses"], merged["observations"],
                                                    merged["rewards"]))
        self.logger.log_metrics(metrics, step, "validation")
        self.logger.log_metrics({"total_validation_time": seconds}, step, "timing/validation")
        self.say("📊 Validation Results:", f"    • Accuracy: {metrics['accuracy']:.4f}",
                 f"    • Average response length: {metrics['avg_length']:.1f} tokens",
                 f"    • Samples processed: {len(merged['rewards'])}")

    def step_done(self, step: int, metrics: dict, timing: dict, val: dict | None, epoch: int) -> None:
        self.logger.log_metrics(metrics, step, "train")
        self.logger.log_metrics(timing, step, "timing/train")
        self.say("📊 Training Results:", f"  • Loss: {metrics['loss']:.4f}",
                 f"  • Generation KL Error: {metrics['gen_kl_error']:.4f}", f"  • Avg Reward: {metrics['reward']:.4f}",
                 f"  • Mean Generation Length: {metrics['mean_gen_tokens_per_sample']:.4f}", "",
                 "⏱️  Timing:", f"  • Total step time: {timing['total_step_time']:.2f}s")

    def save(self, step: int, *, model, optimizer, scheduler, sampler, tokenizer, state: dict, metrics: dict,
             val: dict | None) -> None:
        c = self.cfg.checkpointing
        self.say(f"Saving checkpoint for step {step}...")
        tmp = Path(self.cfg.checkpoint_dir) / f"tmp_step_{step}"
        if self.rank == 0:
            info = checkpoint.training_info(state, step, c.metric_name, metrics, val)
            checkpoint.init_tmp_checkpoint(self.cfg.checkpoint_dir, step, training_info=info, config=self.master_config)
        dist.barrier()
        checkpoint.save_policy(model, optimizer, tmp / "policy", layout=self.layout, rank=self.rank,
                               save_optimizer=c.save_optimizer, scheduler=scheduler)
        if self.rank == 0:
            torch.save(sampler.state_dict(), tmp / "train_dataloader.pt")
            tokenizer.save_pretrained(str(tmp / "policy" / "tokenizer"))
            if pause := rank_pause(step):
                print(f"(test hook) pausing {pause}s inside {tmp}", flush=True)
                time.sleep(pause)
        dist.barrier()
        if self.rank == 0:
            checkpoint.finalize_checkpoint(tmp, step)
            checkpoint.remove_old_checkpoints(self.cfg.checkpoint_dir, keep_top_k=c.keep_top_k, metric_name=c.metric_name,
                                              higher_is_better=c.higher_is_better, save_period=c.save_period)

    def close(self) -> Path:
        self.logger.close()
        return self.exp_dir
