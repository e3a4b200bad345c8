"""The rehearsal GRPO run: 2 CPU ranks (gloo + FSDP2 ``fully_shard``), NeMo-RL's loop, stdout and artifacts.

``python -m nbtools.rehearsal --config experiments/local.yaml --runs-dir runs`` starts :func:`main`, which
validates the config and forks one process per rank on a free master port; each rank runs :func:`run_rank`.

Example:
    $ python -m nbtools.rehearsal --config experiments/local.yaml --runs-dir runs grpo.max_num_steps=50
"""

from __future__ import annotations

import copy
import functools
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from nbtools.config import Experiment
from nbtools.errors import ConfigError
from nbtools.rehearsal import _faults, _grpo, writers
from nbtools.rehearsal._sampling import Engine
from nbtools.rehearsal.model import build_model, build_tokenizer, save_hf
from nbtools.rehearsal.task import baseline_dir, make_split

__all__ = ["run_rank", "load_config", "preload", "PAUSE_ENV"]

PAUSE_ENV = writers.PAUSE_ENV
SFT_BATCH = 64


def load_config(config: str, overrides: list[str], runs_dir: str | None):
    """The experiment config as the job sees it: YAML + ``key=value`` overrides (values parsed as the config's own YAML
    reader parses them: ``1e-05``, as verl's Hydra command line writes a learning rate, is a number)."""
    from nbtools.config import load, load_yaml

    if runs_dir:
        os.environ["NBTOOLS_RUNS_DIR"] = str(Path(runs_dir).resolve())
    parsed: dict[str, Any] = {}
    for ov in overrides:
        if "=" not in ov:
            raise ConfigError(f"override {ov!r} is not `key=value`; fix: e.g. grpo.max_num_steps=50")
        k, v = ov.split("=", 1)
        parsed[k.strip()] = load_yaml(v, what=f"the override {k.strip()}")
    return load(config, backend="local", overrides=parsed)


def preload() -> None:
    """Import what every rank needs (no torch op runs, so forking afterwards is safe)."""
    import torch.distributed.checkpoint  # noqa: F401
    import torch.distributed.checkpoint.state_dict  # noqa: F401
    import torch.distributed.device_mesh  # noqa: F401
    import torch.distributed.fsdp  # noqa: F401
    import torch.utils.tensorboard  # noqa: F401
    import transformers.models.llama.modeling_llama  # noqa: F401
    import yaml  # noqa: F401
    from transformers import PreTrainedTokenizerFast  # noqa: F401

    import nbtools.rewards  # noqa: F401


def _die_with_parent() -> None:
    try:  # Linux: a killed launcher takes its ranks with it (no orphan holding the port or writing files)
        import ctypes

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def run_rank(rank: int, world: int, config: str, overrides: list[str], runs_dir: str | None, port: int) -> None:
    """One training rank (the target of ``torch.multiprocessing.start_processes``)."""
    _die_with_parent()
    import faulthandler
    import threading

    faulthandler.enable()  # a rank that dies in native code leaves its Python stack in the job log (as torchrun's do)
    threading.current_thread().name = f"rank {rank}"  # py-spy shows the thread name: which rank a stack belongs to
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        _Run(load_config(config, overrides, runs_dir), rank, world).train()
    finally:
        dist.destroy_process_group()


class _Run:
    """State of one rank's run; methods are the phases of NeMo-RL's grpo_train."""

    def __init__(self, cfg: Experiment, rank: int, world: int):
        from nbtools import rewards

        self.cfg, self.rank, self.world = cfg, rank, world
        g, r = cfg.grpo, cfg.rehearsal
        if g.num_prompts_per_step % world:
            raise ConfigError(
                f"grpo.num_prompts_per_step: {g.num_prompts_per_step} is not divisible by rehearsal.ranks {world}; "
                f"fix: use a multiple of {world}"
            )
        self.P, self.G, self.N = g.num_prompts_per_step, g.num_generations_per_prompt, g.max_num_steps
        self.max_new = g.max_new_tokens or r.max_new_tokens
        self.mix = rewards.combine(r.reward_functions)
        self.train_set, self.held_out = make_split(cfg)
        self.tok = build_tokenizer()
        self.out = writers.writer_for(cfg, rank=rank, world=world, say=self.say)  # the imitated trainer's files
        self.faults = _faults.Injector(r.faults, rank)  # rehearsal.faults: none unless a test asks
        self.cur = 0  # the step in progress (faults are keyed by it)
        self.t0 = time.perf_counter()

    def say(self, *lines: str) -> None:
        if self.rank == 0:
            print("\n".join(lines), flush=True)

    def _bcast(self, obj):
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    # -- setup ------------------------------------------------------------------------------------------------
    def setup(self) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        cfg, g, r = self.cfg, self.cfg.grpo, self.cfg.rehearsal
        ckpt = self._bcast(self.out.latest() if self.rank == 0 else None)
        self.out.begin(self._bcast)
        base = baseline_dir(cfg)
        if ckpt is not None and (base / "config.json").exists():
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
            self.say(f"Reference policy: warm-started baseline {base}")
        else:
            model = build_model(cfg, self.tok)
            t = time.perf_counter()
            loss = _grpo.warm_start(model, self.train_set, steps=r.warmup_steps, lr=r.warmup_lr, batch=SFT_BATCH, seed=g.seed,
                                     think=r.warmup_think, rank=self.rank, world=self.world)
            for p in model.parameters():  # identical on every rank by construction; make it exact
                dist.broadcast(p.data, src=0)
            if self.rank == 0:
                save_hf(model, self.tok, base)
            self.say(f"Warm start (SFT: format + {r.warmup_think} scratchpad, answers from the same prior for every "
                     f"problem; CPU kernels {torch.backends.cpu.get_cpu_capability()}): {r.warmup_steps} steps, "
                     f"loss {loss:.4f}, "
                     f"{time.perf_counter() - t:.1f}s; baseline policy saved to {base}")
        self.ref = copy.deepcopy(model).eval().requires_grad_(False)
        mesh = init_device_mesh("cpu", (self.world,))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        self.model = model
        self.out.model_config = model.config
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.engine = Engine(model.config)  # the generation worker; refitted from the policy before each rollout
        self.opt = torch.optim.AdamW(model.parameters(), lr=g.learning_rate, betas=tuple(r.adam_betas), weight_decay=0.0,
                                     fused=True)  # one kernel for all DTensor shards (foreach: 2x, per-tensor: 10x)
        # NeMo-RL's scheduler list (LinearLR warmup, then ConstantLR or CosineAnnealingLR) as one pure function of
        # the step, so a resumed run continues exactly where it stopped
        self.lr_at = functools.partial(_grpo.lr_factor, warmup=r.lr_warmup_steps, decay=r.lr_decay, total=self.N,
                                       min_ratio=r.lr_min_ratio, start=r.lr_warmup_start_factor)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, self.lr_at)
        self.refitted = False
        self.sampler = _grpo.PromptSampler(self.train_set, self.P, g.seed)
        self.state: dict[str, Any] = {"consumed_samples": 0, "current_step": 0, "current_epoch": 0, "total_steps": 0,
                                      "total_valid_tokens": 0, "val_reward": None, "sampler_name": None}
        if ckpt is not None:
            self.say(f"Resuming from checkpoint {ckpt} (auto-resume: the latest checkpoint in {cfg.checkpoint_dir})")
            if not self.out.resume(ckpt, model, self.opt, self.sched, self.sampler, self.state):
                self.say("WARNING: no optimizer state in the checkpoint; starting a fresh optimizer")
            done = int(self.state["total_steps"])  # the schedule continues where it stopped
            self.sched.last_epoch = done
            for group, base_lr in zip(self.opt.param_groups, self.sched.base_lrs, strict=True):
                group["lr"] = base_lr * self.lr_at(done)
        self.out.setup_done(time.perf_counter() - self.t0)

    # -- loop -------------------------------------------------------------------------------------------------
    def train(self) -> None:
        self.setup()
        g = self.cfg.grpo
        start = int(self.state["total_steps"])
        if start >= self.N:
            self.say(f"Nothing to do: checkpoint is at step {start} and grpo.max_num_steps is {self.N}.")
            return
        if g.val_at_start and start == 0:
            self.validate(0)
        for step in range(start + 1, self.N + 1):
            self.step(step)
        logs = self.out.close()
        dist.barrier()
        self.say(f"Training finished: {self.N - start} steps in {time.perf_counter() - self.t0:.1f}s. "
                 f"Logs: {logs}  Checkpoints: {self.cfg.checkpoint_dir}")

    def step(self, step: int) -> None:
        g, c = self.cfg.grpo, self.cfg.checkpointing
        timing: dict[str, float] = {}
        t_step = tic = time.perf_counter()

        def lap(name: str) -> None:
            nonlocal tic
            now = time.perf_counter()
            timing[name] = now - tic
            tic = now

        self.say(f"\n{'=' * 25} Step {step}/{self.N} {'=' * 25}")
        self.cur = step
        batch = self.sampler.next_batch()
        share = self.P // self.world
        local = batch[self.rank * share : (self.rank + 1) * share]
        gen = torch.Generator().manual_seed(g.seed * 1_000_003 + step * 7919 + self.rank)
        lap("data_processing")
        ro = self._rollout(local, self.G, gen, timing)
        tic = time.perf_counter()
        from nbtools.rewards import group_advantages

        adv_np = group_advantages(ro.rewards.reshape(-1, self.G), leave_one_out=g.use_leave_one_out_baseline,
                                  normalize=g.normalize_rewards).reshape(-1)
        adv = torch.tensor(adv_np, dtype=torch.float32)
        lap("advantage_calculation")
        with torch.no_grad():
            ref_lp = _grpo.token_logprobs(self.ref, ro.prompt_ids, ro.tokens, temperature=g.temperature)
        lap("policy_and_reference_logprobs")
        full, prev, sums, ntok, gn, lr = self._train(ro, adv, ref_lp)
        lap("policy_training")
        metrics = self._train_metrics(ro, adv_np, prev, sums, float(ntok), gn, lr)
        self.state.update(consumed_samples=self.state["consumed_samples"] + self.P, total_steps=step,
                          current_step=self.sampler.batch_idx, current_epoch=self.sampler.epoch,
                          total_valid_tokens=self.state["total_valid_tokens"] + int(metrics["global_valid_toks"]))
        val = None
        if g.val_period > 0 and (step % g.val_period == 0 or (step == self.N and self.out.validate_at_end)):
            val = self.validate(step)
        if c.enabled and (step % c.save_period == 0 or step == self.N):
            tic = time.perf_counter()
            self.save(step, metrics, val)
            lap("checkpointing")
        tic = time.perf_counter()
        self._write_train_jsonl(step, ro, adv_np, prev, full)
        lap("logging")
        timing["total_step_time"] = time.perf_counter() - t_step
        timing["valid_tokens_per_sec_per_gpu"] = metrics["global_valid_toks"] / timing["total_step_time"] / self.world
        self.out.step_done(step, metrics, timing, val, epoch=self.sampler.epoch)

    def _train(self, ro: _grpo.Rollout, adv: torch.Tensor, ref_lp: torch.Tensor):
        """The policy update (forward, backward, optimizer step) of NeMo-RL's ``policy.train``."""
        g, r = self.cfg.grpo, self.cfg.rehearsal
        ntok = torch.tensor([float(ro.mask.sum())])
        dist.all_reduce(ntok)
        self.faults.at(self.cur, "train")
        full = _grpo.token_logprobs(self.model, ro.prompt_ids, ro.tokens, temperature=g.temperature, full=True)
        curr = full[:, ro.prompt_ids.shape[1] - 1 :]
        prev = curr.detach()
        loss, sums = _grpo.grpo_loss(curr, prev, ref_lp, adv, ro.mask, clip=r.ratio_clip, kl_coef=g.kl_penalty,
                                     global_tokens=float(ntok), world_size=self.world)
        self.opt.zero_grad(set_to_none=True)
        lr = self.opt.param_groups[0]["lr"]
        loss.backward()
        gn = _grpo.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        self.sched.step()
        self.refitted = False
        return full, prev, sums, ntok, gn, lr

    def refit(self) -> None:
        """Policy weights → generation engine (NeMo-RL's refit before generation), once per policy update."""
        if not self.refitted:
            self.faults.at(self.cur, "refit")
            self.engine.refit(self.model)
            self.refitted = True

    def _rollout(self, problems, repeats, gen, timing) -> _grpo.Rollout:
        t = time.perf_counter()
        self.refit()
        refit_s = time.perf_counter() - t
        ro = self._generate(problems, repeats, gen)
        timing["generation"] = refit_s + ro.gen_seconds
        timing["reward_calculation"] = time.perf_counter() - t - timing["generation"]
        return ro

    def _generate(self, problems, repeats, gen) -> _grpo.Rollout:
        """Rollouts of the generation engine (NeMo-RL's ``generate``), rewards included."""
        self.faults.at(self.cur, "generation")
        return _grpo.rollout(self.engine, problems, repeats=repeats, mix=self.mix, max_new_tokens=self.max_new,
                             temperature=self.cfg.grpo.temperature, generator=gen,
                             answer_format=self.cfg.rehearsal.answer_format)

    def _train_metrics(self, ro: _grpo.Rollout, adv: np.ndarray, prev: torch.Tensor, sums: dict, ntok: float,
                       grad_norm: float, lr: float) -> dict[str, float]:
        """Global (all-reduced) ``train/*`` metrics with NeMo-RL's names."""
        m = ro.mask
        groups = ro.rewards.reshape(-1, self.G).mean(1)
        gen_x = (ro.gen_logprobs - prev) * m
        plen = ro.prompt_ids.shape[1]
        env_len = np.array([len(_grpo.encode(o)) for o in ro.observations])
        lens = ro.lengths.numpy()
        local = {
            "reward": ro.rewards.sum(), "n": len(ro.rewards), "gen_tokens": lens.sum(), "finished": float(ro.finished.sum()),
            "total_tokens": (plen + lens + env_len).sum(), "prompt_tokens": plen * len(lens), "adv_sum": adv.sum(),
            "pct_0": (groups == 0).sum(), "pct_1": (groups == 1).sum(), "groups": len(groups),
            "tok_err": float((torch.exp((ro.gen_logprobs - prev).abs()) * m).sum()),
            "gen_kl": float(((torch.exp(gen_x) - gen_x - 1) * m).sum()), **sums,
        }
        keys = list(local)
        vec = torch.tensor([float(local[k]) for k in keys], dtype=torch.float64)
        dist.all_reduce(vec)
        tot = dict(zip(keys, vec.tolist(), strict=True))
        ext = torch.tensor([adv.max(), -adv.min(), lens.max()], dtype=torch.float64)
        dist.all_reduce(ext, op=dist.ReduceOp.MAX)
        n, groups_n = tot["n"], tot["groups"]
        return {
            "loss": tot["loss"] / ntok, "grad_norm": grad_norm, "reward": tot["reward"] / n,
            "kl_penalty": tot["kl_penalty"] / ntok, "probs_ratio": tot["probs_ratio"] / ntok,
            "probs_ratio_clamped": tot["probs_ratio_clamped"] / ntok, "approx_entropy": tot["approx_entropy"] / ntok,
            "token_mult_prob_error": tot["tok_err"] / ntok, "gen_kl_error": tot["gen_kl"] / ntok,
            "lr": lr, "global_valid_seqs": n, "global_valid_toks": ntok,
            "num_valid_samples": n, "mean_prompt_length": tot["prompt_tokens"] / n,
            "total_num_tokens": tot["total_tokens"], "mean_total_tokens_per_sample": tot["total_tokens"] / n,
            "mean_gen_tokens_per_sample": tot["gen_tokens"] / n, "max_gen_tokens_per_sample": float(ext[2]),
            "natural_termination_rate": tot["finished"] / n, "truncation_rate": 1 - tot["finished"] / n,
            "total_turns": n, "avg_turns_per_sample": 1.0, "max_turns_per_sample": 1.0,
            "advantages/mean": tot["adv_sum"] / n, "advantages/max": float(ext[0]), "advantages/min": -float(ext[1]),
            "advantages/sum": tot["adv_sum"], "baseline_reward/pct_0": tot["pct_0"] / groups_n,
            "baseline_reward/pct_1": tot["pct_1"] / groups_n,
            "baseline_reward/pct_mixed": 1 - (tot["pct_0"] + tot["pct_1"]) / groups_n,
        }

    def _gather(self, obj, dst: int = 0):
        out = [None] * self.world if self.rank == dst else None
        dist.gather_object(obj, out, dst=dst)
        return out

    def _write_train_jsonl(self, step: int, ro: _grpo.Rollout, adv: np.ndarray, prev: torch.Tensor,
                           full: torch.Tensor) -> None:
        plen = ro.prompt_ids.shape[1]
        full_lp = torch.cat([torch.zeros(full.shape[0], 1), full.detach()], dim=1)
        n = len(ro.responses)
        mine = {
            "prompts": [p.prompt for p in ro.problems], "responses": ro.responses, "observations": ro.observations,
            "rewards": ro.rewards.tolist(), "prompt_ids": ro.prompt_ids.tolist(),
            "response_ids": [ro.response_ids(i) for i in range(n)],
            "env_ids": [_grpo.encode(o) for o in ro.observations], "advantages": adv.tolist(),
            "gts": [p.ground_truth for p in ro.problems], "correct": ro.correct.tolist(),
            "generation_logprobs": [ro.gen_logprobs[i, : int(ro.lengths[i])].tolist() for i in range(n)],
            "prev_logprobs": [full_lp[i, : plen + int(ro.lengths[i])].tolist() for i in range(n)],
        }
        parts = self._gather(mine, dst=self.out.dump_rank)
        if self.rank == self.out.dump_rank:
            self.out.train_samples(step, {k: [x for part in parts for x in part[k]] for k in mine})

    # -- validation -------------------------------------------------------------------------------------------
    def validate(self, step: int) -> dict[str, float]:
        """Sampled rollouts (NeMo-RL uses the training sampling settings) on the held-out split, 1 per prompt."""
        t = time.perf_counter()
        probs = self.held_out[: self.cfg.grpo.max_val_samples]
        per = -(-len(probs) // self.world)
        padded = probs + [probs[0]] * (per * self.world - len(probs))
        mine = padded[self.rank * per : (self.rank + 1) * per]
        keep = max(0, min(per, len(probs) - self.rank * per))
        gen = torch.Generator().manual_seed(self.cfg.grpo.seed * 1_000_003 + 17 + step * 7919 + self.rank)
        self.refit()
        ro = _grpo.rollout(self.engine, mine, repeats=1, mix=self.mix, max_new_tokens=self.max_new,
                           temperature=self.cfg.grpo.temperature, generator=gen,
                           answer_format=self.cfg.rehearsal.answer_format)
        part = {"prompts": [p.prompt for p in ro.problems][:keep], "responses": ro.responses[:keep],
                "observations": ro.observations[:keep], "rewards": ro.rewards.tolist()[:keep],
                "lengths": ro.lengths.tolist()[:keep], "gts": [p.ground_truth for p in ro.problems][:keep],
                "correct": ro.correct.tolist()[:keep]}
        parts = self._gather(part)
        metrics: dict[str, float] = {}
        if self.rank == 0:
            merged = {k: [x for p in parts for x in p[k]] for k in part}
            metrics = {"accuracy": float(np.mean(merged["rewards"])), "avg_length": float(np.mean(merged["lengths"]))}
            self.out.validation(step, merged, metrics, time.perf_counter() - t)
        return metrics

    # -- checkpointing ----------------------------------------------------------------------------------------
    def save(self, step: int, train_metrics: dict, val_metrics: dict | None) -> None:
        self.faults.at(step, "checkpoint")
        self.out.save(step, model=self.model, optimizer=self.opt, scheduler=self.sched, sampler=self.sampler,
                      tokenizer=self.tok, state=self.state, metrics=train_metrics, val=val_metrics)
