"""verl, one release at a time (``trainers.verl.VERL``), run from its source on the shared storage."""

from __future__ import annotations

import re
from typing import Any

import nbtools.trainers.verl._command as verl
from nbtools.config import Experiment
from nbtools.errors import Fix, NotFoundError
from nbtools.trainers._findings import LintReport
from nbtools.trainers._fit import ALLOC_KEY, FitProfile, as_bool, as_float, as_int, expandable
from nbtools.trainers._protocol import (
    AdvantageRule,
    CodeSource,
    Hardware,
    OutputDirs,
    TrainerJob,
    cluster_env,
    cluster_hardware,
    cluster_metadata,
)
from nbtools.trainers.verl._lint import check_verl
from nbtools.trainers.verl._releases import VERL, VerlRelease

__all__ = ["Verl"]

NAME = "verl"
# verl scores with its data source's rule (verl v0.7.0 verl/utils/reward_score/__init__.py default_compute_score):
# dataset -> the registered nbtools reward that is that rule
RULES: dict[str, str] = {"gsm8k": "verl_gsm8k"}


class Verl:
    """verl's PPO trainer with ``algorithm.adv_estimator=grpo`` at ``trainer.verl_ref``."""

    name = NAME
    label = "verl"
    evaluator = "nbtools.evals.flow:GENERATE_JOB"  # vLLM over the prepared test.parquet, scored with verl's rule
    # HybridFlow, the paper behind verl, as published at EuroSys 2025 (verl's README, v0.7.0: "accepted to EuroSys
    # 2025"; its BibTeX there is the arXiv preprint, kept here as the eprint)
    citation = ("verl", "@inproceedings{sheng2025hybridflow,\n  title         = {HybridFlow: A Flexible and Efficient RLHF Framework},\n"
                 "  author        = {Sheng, Guangming and Zhang, Chi and Ye, Zilingfeng and Wu, Xibin and Zhang, Wang and "
                 "Zhang, Ru and Peng, Yanghua and Lin, Haibin and Wu, Chuan},\n"
                 "  booktitle     = {Proceedings of the Twentieth European Conference on Computer Systems (EuroSys '25)},\n"
                 "  publisher     = {ACM},\n  year          = {2025},\n  eprint        = {2409.19256},\n"
                 "  archivePrefix = {arXiv}\n}")  # (name, BibTeX) a model card cites
    metric_family = "verl"
    layout = "verl"

    def __init__(self, cfg: Experiment):
        self.cfg = cfg  # the experiment it runs: its verbs read it, none takes it again
        self.release = cfg.trainer.verl_ref
        # a pinned tag nbtools has no entry for runs with the newest entry's facts (the lint warns: keys unchecked)
        self.spec: VerlRelease = verl.release(cfg)

    @classmethod
    def check(cls, cfg: Experiment) -> list[tuple[tuple[str, ...], str]]:
        """verl runs from a release of its repository, so ``trainer.verl_ref`` must pin one; it scores with its own
        reward functions, not an nbtools mix."""
        t, out = cfg.trainer, []
        if t.verl_ref in ("main", "master", "HEAD", "") or not re.match(r"^[A-Za-z0-9._/-]+$", t.verl_ref):
            out.append((("trainer.verl_ref",),
                        f"trainer.verl_ref: {t.verl_ref!r} does not pin verl (a branch moves under you); fix: a release "
                        f"tag of {t.verl_repo}, e.g. `verl_ref: {list(VERL)[-1]}`"))
        if t.reward_functions:
            out.append((("trainer.reward_functions",),
                        "trainer.reward_functions: only NeMo-RL runs score through the nbtools reward environment; fix: "
                        "remove it for verl (verl's custom_reward_function.path/name go in trainer.overrides)"))
        return out

    def fit_inputs(self) -> tuple[dict[str, Any], list[str]]:
        return _fit_inputs(self.cfg, self.name)

    def output_dirs(self) -> OutputDirs:
        return OutputDirs("verl", self.cfg.log_dir, self.cfg.checkpoint_dir, verl.tensorboard_dir(self.cfg),
                          rollout_dir=verl.rollout_dir(self.cfg), validation_dir=verl.validation_dir(self.cfg))

    def job(self) -> TrainerJob:
        lines = verl.command_lines(self.cfg)
        return TrainerJob(" ".join(lines), tuple(lines))

    def prepare_command(self) -> str | None:
        return verl.prepare_command(self.cfg)

    def job_env(self) -> dict[str, str]:
        env = {"PYTHONPATH": verl.code_dir(self.cfg)}
        if self.cfg.logging.tensorboard:
            env["TENSORBOARD_DIR"] = verl.tensorboard_dir(self.cfg)
        return cluster_env(self.cfg, env)

    def metadata(self) -> dict[str, str]:
        return cluster_metadata(self.cfg, {})

    def lint(self, report: LintReport, *, code_present: Any = None, cluster_checks: Any = None) -> None:
        if cluster_checks is not None:
            cluster_checks()
        check_verl(self.cfg, report, code_present)

    @classmethod
    def code_source(cls, cfg: Experiment) -> CodeSource | None:
        """The image has no checkout: the provisioning plan copies the release (``trainer.verl_ref``) to the storage."""
        t = cfg.trainer
        return CodeSource(NAME, t.verl_repo, t.verl_ref, verl.code_dir(cfg))

    def trained_task(self) -> str:
        return self.cfg.data.dataset

    def hardware(self) -> Hardware:
        return cluster_hardware(self.cfg)

    def ray_pinned_by(self) -> str:
        return "images.ray_version"

    def baseline_model(self) -> str:
        return self.cfg.model.name

    def rewards(self) -> tuple[list[dict[str, Any]], str]:
        return [{"name": f"verl's rule-based score for data source {self.cfg.data.dataset}", "weight": 1.0}], NAME

    def advantage_rule(self) -> AdvantageRule:
        """verl's GRPO: the whole group's mean, divided by its std unless ``algorithm.norm_adv_by_std_in_grpo=false``
        (``verl/trainer/ppo/core_algos.py`` ``compute_grpo_outcome_advantage`` at v0.7.0 and v0.9.1).

        Raises:
            NotFoundError: ``algorithm.adv_estimator`` overridden to another estimator (nbtools recomputes GRPO's only).
        """
        eff = verl.effective(self.cfg)
        estimator = eff.get("algorithm.adv_estimator", "grpo")
        if estimator != "grpo":
            raise NotFoundError(
                f"algorithm.adv_estimator={estimator}: nbtools recomputes only verl's GRPO advantages",
                fix=Fix("pass leave_one_out= and normalize= to nbtools.rewards.rescore to say how to recompute them",
                        cli="re-score in a notebook (08) with leave_one_out/normalize given"))
        return AdvantageRule("verl_group_mean", str(eff.get("algorithm.norm_adv_by_std_in_grpo", "true")).lower()
                             not in ("false", "0", "no"))

    def rescore_mix(self) -> list[dict[str, Any]]:
        rule = RULES.get(str(self.cfg.data.dataset).lower())
        if rule is None:
            raise NotFoundError(
                f"verl scored dataset {self.cfg.data.dataset!r} with a rule nbtools has no reward for (it has: "
                f"{', '.join(sorted(RULES))})",
                fix=Fix("register the rule with nbtools.rewards.register(NAME) and pass the mix to rescore yourself",
                        cli="re-score in a notebook (08) with the rule registered as a reward: nbtools has none for "
                            "this data source"))
        return [{"name": rule, "weight": 1.0}]

    def version(self) -> str:
        return self.release  # the tag copied to the bucket; the image holds only verl's dependencies

    def hub_tag(self) -> str:
        return NAME


_FIT_KEYS = {
    "activation_checkpointing": "actor_rollout_ref.model.enable_gradient_checkpointing",
    "micro_batch": "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "logprob_batch": "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    "seq_len": "data.max_response_length (with data.max_prompt_length)",
    "gpus": "cluster.worker_replicas",
    "expandable_segments": ALLOC_KEY,
    "gpu_memory_utilization": "actor_rollout_ref.rollout.gpu_memory_utilization",
    "vllm_tensor_parallel": "actor_rollout_ref.rollout.tensor_model_parallel_size",
    "max_model_len": "data.max_response_length",
}
_FIT_OVERRIDES = {**{k: v for k, v in _FIT_KEYS.items() if k not in ("seq_len", "max_model_len")},
                   "expandable_segments": "trainer.env_vars.PYTORCH_CUDA_ALLOC_CONF",
                   "logprob_chunk_size": None, "seq_len": None, "max_model_len": None}


# verl v0.7.0's dp_actor (verl/workers/actor/dp_actor.py): bf16 logits through flash-attn's cross-entropy, the
# log-prob pass computing the entropy too, HF gradient checkpointing of whole decoder layers, and a bf16 reference
# policy on the GPU unless actor_rollout_ref.ref.fsdp_config.param_offload
_FIT_NOTE = ("verl (v0.7.0's dp_actor): bf16 logits through flash-attn's cross-entropy, whole-layer gradient "
              "checkpointing; tokens per micro-batch as configured (ppo_max_token_len_per_gpu with use_dynamic_bsz, "
              "else every sequence at its maximum length - with use_remove_padding real sequences are shorter); "
              "verl's actor was not calibrated on a GPU")


def _fit_inputs(cfg: Experiment, name: str) -> tuple[dict[str, Any], list[str]]:
    """verl's fit inputs, read from its Hydra overrides over v0.7.0's defaults (``FitInputs`` fields, notes)."""
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
    micro = as_int(o.get(micro_key), 1)
    seq = as_int(o.get("data.max_prompt_length"), 512) + as_int(o.get("data.max_response_length"), 512)
    lp_batch = as_int(o.get("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"), micro)
    keys = dict(_FIT_KEYS)
    # verl v0.7.0 defaults (verl/trainer/config/model/hf_model.yaml, actor/actor.yaml): use_remove_padding true,
    # use_dynamic_bsz false, ppo_max_token_len_per_gpu 16384 (log_prob_max_token_len_per_gpu follows it)
    rmpad = as_bool(o.get("actor_rollout_ref.model.use_remove_padding", True))
    if as_bool(o.get("actor_rollout_ref.actor.use_dynamic_bsz", False)):
        tokens = as_int(o.get("actor_rollout_ref.actor.ppo_max_token_len_per_gpu"), 16384)
        lp_tokens = as_int(o.get("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu"), tokens)
        notes.append(f"use_dynamic_bsz: micro-batches of up to {tokens} tokens (ppo_max_token_len_per_gpu), not "
                     f"{micro} padded sequences")
        micro, seq, lp_batch = 1, tokens, max(1, round(lp_tokens / tokens))
        keys["seq_len"] = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"
    # verl removes padding (or packs tokens dynamically): its real micro-batches are usually shorter than the
    # worst case the estimate takes, so its verdict is never certain
    profile = FitProfile(trainer=name, calibrated=False, tokens_upper_bound=True, bf16_logits=True,
                         whole_layer_checkpointing=True, reference_on_gpu=True, note=_FIT_NOTE,
                         override_keys=_FIT_OVERRIDES)
    d = {
        "profile": profile,
        "micro_batch": micro,
        "seq_len": seq,
        "sequence_packing": rmpad,
        "logprob_batch": lp_batch,
        "activation_checkpointing": as_bool(o.get("actor_rollout_ref.model.enable_gradient_checkpointing", True)),
        "cpu_offload": as_bool(o.get("actor_rollout_ref.actor.fsdp_config.param_offload", False)),
        "reference_on_gpu": not as_bool(o.get("actor_rollout_ref.ref.fsdp_config.param_offload", False)),
        "expandable_segments": expandable(cfg.trainer.env_vars),
        "colocated": True,
        "gpus": cfg.cluster.worker_replicas * cfg.cluster.gpus_per_node,
        "gpu_memory_utilization": as_float(o.get("actor_rollout_ref.rollout.gpu_memory_utilization"), 0.5),
        "max_model_len": seq,
        "vllm_tensor_parallel": as_int(o.get("actor_rollout_ref.rollout.tensor_model_parallel_size"),
                                     cfg.model.tensor_parallel_size),
        "keys": dict(keys, gpus_per_node=str(cfg.cluster.gpus_per_node)),
    }
    return d, notes
