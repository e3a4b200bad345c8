"""The local backend's trainer: the miniature GRPO on this machine's CPU ranks (``nbtools.rehearsal``)."""

from __future__ import annotations

import difflib
from typing import Any

from nbtools.config import Experiment
from nbtools.trainers._findings import LintReport
from nbtools.trainers._protocol import AdvantageRule, CodeSource, Hardware, OutputDirs, Trainer, TrainerJob

__all__ = ["Rehearsal", "REHEARSAL_METRICS"]

# What the local rehearsal logs (nbtools.rehearsal.trainer): checkpointing.metric_name must name one of them.
REHEARSAL_METRICS: dict[str, tuple[str, ...]] = {
    "val": ("accuracy", "avg_length"),
    "train": (
        "loss", "grad_norm", "reward", "kl_penalty", "probs_ratio", "probs_ratio_clamped", "approx_entropy",
        "token_mult_prob_error", "gen_kl_error", "lr", "global_valid_seqs", "global_valid_toks", "num_valid_samples",
        "mean_prompt_length", "total_num_tokens", "mean_total_tokens_per_sample", "mean_gen_tokens_per_sample",
        "max_gen_tokens_per_sample", "natural_termination_rate", "truncation_rate", "total_turns",
        "avg_turns_per_sample", "max_turns_per_sample", "advantages/mean", "advantages/max", "advantages/min",
        "advantages/sum", "baseline_reward/pct_0", "baseline_reward/pct_1", "baseline_reward/pct_mixed",
    ),
}


class Rehearsal:
    """The CPU rehearsal: a tiny model, no GPUs, images or pods, writing the files of the trainer it stands in for
    (``imitates``: the experiment's ``trainer.kind``), under that trainer's names and layout."""

    name = "rehearsal"
    release = ""
    evaluator = "nbtools.evals.flow:HELD_OUT_HERE"  # on this machine, over the task's held-out split

    def __init__(self, cfg: Experiment, imitates: Trainer):
        self.cfg = cfg
        self.imitates = imitates
        self.label = f"nbtools rehearsal ({imitates.label} artifact layout)"
        self.metric_family = imitates.metric_family  # it logs that trainer's scalar names
        self.layout = imitates.layout

    def output_dirs(self) -> OutputDirs:
        """The imitated trainer's directories (the local backend places log_dir and checkpoint_dir under run_dir)."""
        return self.imitates.output_dirs()

    @classmethod
    def check(cls, cfg: Experiment) -> list[tuple[tuple[str, ...], str]]:
        """The rehearsal's own rules: its model shape, its ranks, and the metrics it logs (checked before the job
        starts, not at its first checkpoint)."""
        p: list[tuple[tuple[str, ...], str]] = []
        r, c = cfg.rehearsal, cfg.checkpointing
        if not 0.0 <= r.lr_min_ratio <= 1.0:
            p.append((("rehearsal.lr_min_ratio",), f"rehearsal.lr_min_ratio: {r.lr_min_ratio} must be within [0, 1] (the "
                      "cosine's floor as a fraction of grpo.learning_rate); fix: e.g. 0.1"))
        if r.num_heads and r.hidden_size % r.num_heads:
            p.append((("rehearsal.hidden_size", "rehearsal.num_heads"),
                      f"rehearsal.hidden_size: {r.hidden_size} is not divisible by num_heads {r.num_heads}; fix: e.g. 64 with 2 heads"))
        n = cfg.grpo.num_prompts_per_step
        if r.ranks >= 1 and n >= 1 and n % r.ranks:
            up = -(-n // r.ranks) * r.ranks
            p.append((("grpo.num_prompts_per_step", "rehearsal.ranks"),
                      f"grpo.num_prompts_per_step: {n} is not divisible by rehearsal.ranks {r.ranks} (each rank rolls out "
                      f"the same number of prompts); the job would stop at start-up; fix: e.g. `num_prompts_per_step: {up}`"))
        p += _fault_rules(cfg)
        mn = c.metric_name
        if mn is not None and c.enabled and mn.partition(":")[0] in REHEARSAL_METRICS:
            kind, _, name = mn.partition(":")
            if name not in REHEARSAL_METRICS[kind]:
                close = difflib.get_close_matches(name, REHEARSAL_METRICS[kind], n=1)
                p.append((("checkpointing.metric_name", "checkpointing.enabled"),
                          f"checkpointing.metric_name: {mn[:80]!r} is not a {kind} metric the local rehearsal logs "
                          f"(it logs {', '.join(f'{kind}:{m}' for m in REHEARSAL_METRICS[kind])}); the first checkpoint "
                          f"save would fail; fix: e.g. `metric_name: {kind}:{close[0] if close else REHEARSAL_METRICS[kind][0]}`"))
        return p

    def fit_inputs(self) -> None:
        """None: the rehearsal trains on CPU ranks, so there is no GPU memory to fit."""
        return None

    def job(self) -> TrainerJob:
        from nbtools import rehearsal

        return TrainerJob(rehearsal.entrypoint(self.cfg), secrets=False)

    def prepare_command(self) -> str | None:
        return None

    def job_env(self) -> dict[str, str]:
        return {}

    def metadata(self) -> dict[str, str]:
        return {}

    def lint(self, report: LintReport, *, code_present: Any = None, cluster_checks: Any = None) -> None:
        """Nothing of a cluster to check (``cluster_checks`` is not called): no GPUs, pods, images or NeMo-RL keys."""

    @classmethod
    def code_source(cls, cfg: Experiment) -> CodeSource | None:
        return None  # nbtools' own code, on this machine

    def trained_task(self) -> str:
        return self.cfg.rehearsal.task

    def hardware(self) -> Hardware:
        return Hardware("none (this machine's Python)", f"local: {self.cfg.rehearsal.ranks} CPU ranks (FSDP2, gloo)", None,
                        ("max 3 0 6", self.cfg.rehearsal.max_new_tokens), rehearsal=True)

    def ray_pinned_by(self) -> str:
        return "this environment"

    def baseline_model(self) -> str:
        from nbtools.rehearsal import task

        return str(task.baseline_dir(self.cfg))

    def rewards(self) -> tuple[list[dict[str, Any]], str]:
        return [dict(x) for x in self.cfg.rehearsal.reward_functions], "rehearsal.reward_functions"

    def advantage_rule(self) -> AdvantageRule:
        """NeMo-RL's rule with the experiment's settings (``rehearsal/trainer.py`` computes ``group_advantages``)."""
        return AdvantageRule("leave_one_out" if self.cfg.grpo.use_leave_one_out_baseline else "group_mean",
                             self.cfg.grpo.normalize_rewards)

    def rescore_mix(self) -> list[dict[str, Any]]:
        return [dict(x) for x in self.cfg.rehearsal.reward_functions]

    def version(self) -> str:
        import nbtools

        return f"nbtools {nbtools.__version__}"

    def hub_tag(self) -> str:
        return "nbtools-rehearsal"


def _fault_rules(cfg: Experiment) -> list[tuple[tuple[str, ...], str]]:
    """``rehearsal.faults``: each fault must be able to happen (a rank that exists, a step the run reaches, a
    checkpoint save at that step), else a test of stall detection would wait for a fault that never comes."""
    p: list[tuple[tuple[str, ...], str]] = []
    r, c, n = cfg.rehearsal, cfg.checkpointing, cfg.grpo.max_num_steps
    for i, f in enumerate(r.faults):
        key = f"rehearsal.faults[{i}]"
        if not 0 <= f.rank < r.ranks:
            p.append(((f"{key}.rank", "rehearsal.ranks"), f"{key}.rank: {f.rank} is not a rank of this run (rehearsal.ranks "
                      f"is {r.ranks}, ranks 0..{r.ranks - 1}); fix: e.g. `rank: {r.ranks - 1}`"))
        if not 1 <= f.step <= n:
            p.append(((f"{key}.step", "grpo.max_num_steps"), f"{key}.step: {f.step} is not a step the run reaches "
                      f"(grpo.max_num_steps is {n}); fix: a step within 1..{n}"))
        if f.kind == "slow" and f.seconds <= 0:
            p.append(((f"{key}.seconds",), f"{key}.seconds: {f.seconds} must be positive for a `slow` fault (the delay "
                      "per step); fix: e.g. `seconds: 20`"))
        saves = c.enabled and (f.step % max(c.save_period, 1) == 0 or f.step == n)
        if f.phase == "checkpoint" and 1 <= f.step <= n and not saves:
            p.append(((f"{key}.phase", f"{key}.step", "checkpointing.save_period", "checkpointing.enabled"),
                      f"{key}: phase 'checkpoint' at step {f.step}, but no checkpoint is saved at that step "
                      f"(checkpointing.enabled {c.enabled}, save_period {c.save_period}); fix: a step that saves, e.g. "
                      f"`step: {max(c.save_period, 1)}`, with checkpointing.enabled true"))
    return p
