"""What runs a GRPO job: one interface (:class:`Trainer`), one implementation per trainer and release, and this —
the one registry.

The local backend runs the miniature rehearsal on this machine's CPUs; ``gke`` and ``ray`` run the experiment's
``trainer.kind``: NeMo-RL at ``images.nemo_rl_version`` or verl at ``trainer.verl_ref`` (``releases``: one entry per
release). A trainer owns its command and runtime env, its lint rules and config rules, its metric names, how its runs
are evaluated, and the facts a model card states; no module outside this package asks which trainer it has.

Example:
    >>> trainer = nbtools.trainers.get(cfg)
    >>> trainer.job(cfg).command
    'cd /opt/nemo-rl && python -u examples/run_grpo.py --config ...'
"""

from __future__ import annotations

import difflib
import importlib

from nbtools import backends
from nbtools.config import Experiment
from nbtools.errors import ConfigError
from nbtools.trainers._findings import Finding, LintReport, Severity
from nbtools.trainers._fit import FitProfile
from nbtools.trainers._protocol import AdvantageRule, CodePresent, EvalPlan, Layout, OutputDirs, Trainer, TrainerJob
from nbtools.trainers._rehearsal import REHEARSAL_METRICS, Rehearsal
from nbtools.trainers._tree import config_tree, known_configs
from nbtools.trainers.releases import NEMO_RL, VERL

__all__ = [
    "REGISTRY", "AdvantageRule", "Trainer", "TrainerJob", "FitProfile", "EvalPlan", "Layout", "OutputDirs", "CodePresent", "Finding", "LintReport", "Severity", "METRIC_NAMES", "METRIC_PREFIXES", "CONSOLE_LOG_FAMILY", "CITATIONS", "get",
    "names", "checks", "REHEARSAL_METRICS", "describe", "trainer_class", "config_tree", "known_configs", "NEMO_RL", "VERL",
]

# The only place that maps a trainer's name to its implementation (imported on first use). Keys of the ones a
# file's `trainer.kind` may name; the rehearsal is what the local backend runs in their place.
REGISTRY: dict[str, str] = {
    "nemo-rl": "nbtools.trainers._nemo_rl_trainer:NemoRl",
    "verl": "nbtools.trainers._verl_trainer:Verl",
}

# friendly name -> candidate scalar tags per metric family, first present wins ("*" globs); checked against NeMo-RL
# (nemo-rl-facts.md §2) and verl's metric_utils / ray_trainer names.
METRIC_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "nemo_rl": {
        "reward": ("train/reward",),
        "accuracy": ("validation/accuracy",),
        "generation_length": ("train/mean_gen_tokens_per_sample",),
        "kl": ("train/kl_penalty", "train/gen_kl_error"),
        "loss": ("train/loss",),
        "grad_norm": ("train/grad_norm",),
        "entropy": ("train/approx_entropy",),
        "truncation": ("train/truncation_rate",),
        "val_length": ("validation/avg_length",),
        "step_time": ("timing/train/total_step_time",),
        "generation_time": ("timing/train/generation",),
        "training_time": ("timing/train/policy_training",),
        "throughput": ("performance/tokens_per_sec", "timing/train/valid_tokens_per_sec_per_gpu"),
        "no_signal": ("train/baseline_reward/pct_0",),
        "mfu": (),
        "memory": (),
    },
    "verl": {
        "reward": ("critic/score/mean", "critic/rewards/mean"),
        "accuracy": ("val-core/*/acc/mean@*", "val-core/*/reward/mean@*"),
        "generation_length": ("response_length/mean",),
        # v0.7.0 logs the in-reward KL as actor/reward_kl_penalty (ray_trainer.apply_kl_penalty); no critic/kl
        "kl": ("actor/kl_loss", "actor/ppo_kl", "actor/reward_kl_penalty"),
        "loss": ("actor/pg_loss",),
        "grad_norm": ("actor/grad_norm",),
        "entropy": ("actor/entropy",),
        # share of responses at the generation limit (verl/trainer/ppo/metric_utils.py compute_data_metrics)
        "truncation": ("response_length/clip_ratio",),
        "val_length": ("val-aux/*/response_length/mean@*",),
        "step_time": ("timing_s/step",),
        "generation_time": ("timing_s/gen",),
        "training_time": ("timing_s/update_actor",),
        "throughput": ("perf/throughput",),
        "no_signal": (),
        # verl v0.7.0 verl/workers/fsdp_workers.py update_actor: perf/mfu/actor, perf/max_memory_*_gb (GiB); 0.9.x's
        # V1 trainer prefixes the actor worker's metrics (verl/trainer/ppo/v1/trainer_base.py at v0.9.1:
        # rename_dict(output["metrics"], "actor/") over engine_workers.py's perf/max_memory_allocated_gb)
        "mfu": ("perf/mfu/actor",),
        "memory": ("perf/max_memory_allocated_gb", "actor/perf/max_memory_allocated_gb"),
    },
}
# the first path component of the tags only that family logs (how ``metrics.framework_of`` tells them apart)
METRIC_PREFIXES: dict[str, tuple[str, ...]] = {
    "nemo_rl": ("train", "validation", "timing", "performance"),
    "verl": ("critic", "actor", "timing_s", "response_length", "perf"),
}
# how a model card cites each trainer (by its label): (name, BibTeX)
CITATIONS: dict[str, tuple[str, str]] = {
    # HybridFlow, the paper behind verl, as published at EuroSys 2025 (verl's README, v0.7.0: "accepted to EuroSys
    # 2025"; its BibTeX there is the arXiv preprint, kept here as the eprint)
    "verl": ("verl", "@inproceedings{sheng2025hybridflow,\n  title         = {HybridFlow: A Flexible and Efficient RLHF Framework},\n"
             "  author        = {Sheng, Guangming and Zhang, Chi and Ye, Zilingfeng and Wu, Xibin and Zhang, Wang and "
             "Zhang, Ru and Peng, Yanghua and Lin, Haibin and Wu, Chuan},\n"
             "  booktitle     = {Proceedings of the Twentieth European Conference on Computer Systems (EuroSys '25)},\n"
             "  publisher     = {ACM},\n  year          = {2025},\n  eprint        = {2409.19256},\n"
             "  archivePrefix = {arXiv}\n}"),
    "NeMo-RL": ("NeMo-RL", "@misc{nemo-rl,\n  title        = {NeMo RL: A Scalable and Efficient Post-Training Library},\n"
                "  howpublished = {\\url{https://github.com/NVIDIA-NeMo/RL}},\n  year         = {2025},\n  note         = {GitHub repository}\n}"),
}
CONSOLE_LOG_FAMILY = "verl"  # the family whose runs print their scalars as console lines (metrics.read_verl_log)


def names() -> list[str]:
    """The trainer names an experiment's ``trainer.kind`` may hold."""
    return list(REGISTRY)


def _load(path: str) -> type:
    module, _, cls = path.partition(":")
    return getattr(importlib.import_module(module), cls)


def trainer_class(kind: str) -> type:
    """The implementation registered under ``kind``.

    Raises:
        ConfigError: ``kind`` is not registered (naming the allowed ones).
    """
    if kind not in REGISTRY:
        raise ConfigError(_not_allowed(kind))
    return _load(REGISTRY[kind])


def _not_allowed(kind: str) -> str:
    close = difflib.get_close_matches(str(kind), list(REGISTRY), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (f"trainer.kind: {kind!r} is not allowed; allowed: {', '.join(repr(k) for k in REGISTRY)}{hint}; "
            "fix: set `trainer.kind` to one of them")


def get(cfg: Experiment) -> Trainer:
    """The trainer this experiment's jobs run: the rehearsal where the backend runs it, else ``trainer.kind`` at
    its configured release.

    Example:
        >>> nbtools.trainers.get(cfg).label
        'NeMo-RL'
    """
    imitated = trainer_class(cfg.trainer.kind)(cfg)
    return Rehearsal(cfg, imitated) if _rehearses(cfg) else imitated


def checks(cfg: Experiment) -> list[tuple[tuple[str, ...], str]]:
    """Configuration problems of the trainer (part of ``config.load``'s report, through ``config.contribute``): the
    rehearsal's where the backend runs it, and ``trainer.kind``'s."""
    out = [(("backend", *deps), text) for deps, text in Rehearsal.check(cfg)] if _rehearses(cfg) else []
    if cfg.trainer.kind not in REGISTRY:
        return [*out, (("trainer.kind",), _not_allowed(cfg.trainer.kind))]
    return [*out, *((("trainer.kind", *deps), text) for deps, text in trainer_class(cfg.trainer.kind).check(cfg))]


def _rehearses(cfg: Experiment) -> bool:
    return cfg.backend in backends.REGISTRY and backends.backend_class(cfg.backend).runs_rehearsal


def describe(cfg: Experiment) -> list[tuple[str, str]]:
    """The trainer's row in the experiment's table (``label (release)``)."""
    t = get(cfg)
    return [("trainer", f"{t.name} ({t.release})" if t.release else t.name)]
