"""NeMo-RL, one release at a time (``trainers.nemo_rl.NEMO_RL``), run from its container on the cluster."""

from __future__ import annotations

from typing import Any

import nbtools.trainers.nemo_rl._command as nemo_rl
from nbtools.config import Experiment
from nbtools.trainers._findings import LintReport
from nbtools.trainers._fit import FitProfile, as_bool, as_float, as_int, expandable, training_gpus
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
from nbtools.trainers._tree import config_tree
from nbtools.trainers.nemo_rl._lint import check_nemo_rl
from nbtools.trainers.nemo_rl._releases import NEMO_RL, NemoRlRelease

__all__ = ["NemoRl"]

NAME = "nemo-rl"
# NeMo-RL's math environment scores with math-verify only: 1.0 when the answer verifies, else 0.0.
MATH_DEFAULT: list[dict[str, Any]] = [{"name": "math_expr", "weight": 1.0}]


class NemoRl:
    """NeMo-RL's GRPO (``examples/run_grpo*.py`` with Hydra overrides) at ``images.nemo_rl_version``."""

    name = NAME
    label = "NeMo-RL"
    evaluator = "nbtools.evals.flow:RUN_EVAL_JOB"  # NeMo-RL's run_eval.py as a Ray job on the cluster
    citation = ("NeMo-RL", "@misc{nemo-rl,\n  title        = {NeMo RL: A Scalable and Efficient Post-Training Library},\n"
                    "  howpublished = {\\url{https://github.com/NVIDIA-NeMo/RL}},\n  year         = {2025},\n  note         = {GitHub repository}\n}")  # (name, BibTeX) a model card cites
    metric_family = "nemo_rl"
    layout = "nemo_rl"

    def __init__(self, cfg: Experiment):
        self.cfg = cfg  # the experiment it runs: its verbs read it, none takes it again
        self.spec: NemoRlRelease = NEMO_RL[cfg.images.nemo_rl_version]
        self.release = self.spec.version

    @classmethod
    def check(cls, cfg: Experiment) -> list[tuple[tuple[str, ...], str]]:
        """Config rules only a NeMo-RL run has (none beyond the config's own yet)."""
        return []

    def fit_inputs(self) -> tuple[dict[str, Any], list[str]]:
        return _fit_inputs(self.cfg, self.name)

    def output_dirs(self) -> OutputDirs:
        return OutputDirs("nemo_rl", self.cfg.log_dir, self.cfg.checkpoint_dir, self.cfg.log_dir)

    def job(self) -> TrainerJob:
        lines = nemo_rl.command_lines(self.cfg)
        renv: dict[str, Any] = {}
        if self.cfg.trainer.reward_functions:  # nbtools (for the reward wrapper) + the user's reward module travel along
            from nbtools.jobs.carry import carry_env
            from nbtools.rewards import reward_py_modules

            carried = carry_env()
            renv = {"py_modules": [*carried["py_modules"], *reward_py_modules(self.cfg)], "excludes": carried["excludes"]}
        return TrainerJob(" ".join(lines), tuple(lines), nemo_rl.recipe_files(self.cfg), renv)

    def prepare_command(self) -> str | None:
        return None

    def job_env(self) -> dict[str, str]:
        # NeMo-RL's own `ray job submit` support: actor runtime envs override the job-level one.
        return cluster_env(self.cfg, {"RAY_OVERRIDE_JOB_RUNTIME_ENV": "1"})

    def metadata(self) -> dict[str, str]:
        return cluster_metadata(self.cfg, {"nbtools.nemo_rl_version": self.release})

    def lint(self, report: LintReport, *, code_present: Any = None, cluster_checks: Any = None) -> None:
        if cluster_checks is not None:
            cluster_checks()
        check_nemo_rl(self.cfg, report)

    @classmethod
    def code_source(cls, cfg: Experiment) -> CodeSource | None:
        return None  # the image holds the checkout (/opt/nemo-rl)

    def trained_task(self) -> str:
        return self.cfg.data.dataset

    def hardware(self) -> Hardware:
        return cluster_hardware(self.cfg)

    def ray_pinned_by(self) -> str:
        return f"NeMo-RL {self.release}'s uv.lock" if not self.cfg.images.ray_version else "images.ray_version"

    def baseline_model(self) -> str:
        return self.cfg.model.name

    def rewards(self) -> tuple[list[dict[str, Any]], str]:
        env = ((nemo_rl.recipe_tree(self.cfg) or {}).get("env") or {}).get("math") or {}
        impl = env.get("math_verify_impl", "hf_math_verify")
        for o in self.cfg.trainer.overrides:
            if o.lstrip("+").startswith("env.math.math_verify_impl="):
                impl = o.split("=", 1)[1]
        spec = env.get("reward_functions") or [{"name": f"math_verify ({impl}): 1 if the answer is right", "weight": 1.0}]
        return spec, "NeMo-RL math environment (env.math)"

    def advantage_rule(self) -> AdvantageRule:
        """NeMo-RL's GRPO (``calculate_baseline_and_std_per_prompt``): leave-one-out when configured."""
        return AdvantageRule("leave_one_out" if self.cfg.grpo.use_leave_one_out_baseline else "group_mean",
                             self.cfg.grpo.normalize_rewards)

    def rescore_mix(self) -> list[dict[str, Any]]:
        custom = self.cfg.trainer.reward_functions
        return [dict(x) for x in custom] if custom else [dict(x) for x in MATH_DEFAULT]

    def version(self) -> str:
        return self.release

    def hub_tag(self) -> str:
        return NAME


# fit inputs -> where each is set: shown in suggestions (``FitInputs.keys``) and, as a KEY=VALUE override,
# by the OOM post-mortem (``FitProfile.override_keys``); a key under policy./actor_rollout_ref./data. is a recipe
# key that travels in trainer.overrides, the others are the experiment's own keys
_FIT_KEYS = {
    "activation_checkpointing": "policy.dtensor_cfg.activation_checkpointing",
    "micro_batch": "policy.train_micro_batch_size",
    "logprob_batch": "policy.logprob_batch_size",
    "logprob_chunk_size": "policy.logprob_chunk_size",
    "seq_len": "model.max_total_sequence_length",
    "gpus": "cluster.worker_replicas",
    "expandable_segments": "trainer.overrides: ['++policy.dtensor_cfg.env_vars.PYTORCH_CUDA_ALLOC_CONF="
                           "expandable_segments:True'] (the training workers only; or drop PYTORCH_CUDA_ALLOC_CONF from "
                           "trainer.env_vars: nbtools sets it there by default)",
    "gpu_memory_utilization": "trainer.vllm_cfg.gpu_memory_utilization",
    "vllm_tensor_parallel": "trainer.vllm_cfg.tensor_parallel_size",
    "max_model_len": "trainer.vllm_cfg.max_model_len",
}
# expandable segments on the DTensor policy workers only (colocated vLLM asserts on them: nbtools.trainers.nemo_rl)
_FIT_OVERRIDES = {**_FIT_KEYS, "expandable_segments": "++" + nemo_rl.POLICY_ALLOC_KEY}


def _fit_inputs(cfg: Experiment, name: str) -> tuple[dict[str, Any], list[str]]:
    """NeMo-RL's fit inputs: the recipe's keys as the launch's overrides leave them (``FitInputs`` fields, notes)."""
    tree = nemo_rl.recipe_tree(cfg) or config_tree(cfg.images.nemo_rl_version, nemo_rl.DEFAULT_RECIPE) or {}

    def r(key: str, default: Any = None) -> Any:
        v = nemo_rl.resolved(cfg, tree, key)
        return default if v is None or v == "null" else v

    notes = []
    if as_bool(r("policy.megatron_cfg.enabled", False)):
        notes.append("the recipe trains with Megatron-Core, which nbtools does not model; the estimate uses the DTensor "
                     "(FSDP2) policy's terms for the same batch")
    colocated = as_bool(r("policy.generation.colocated.enabled", True))
    seq = as_int(r("policy.max_total_sequence_length"), cfg.model.max_total_sequence_length)
    micro = as_int(r("policy.train_micro_batch_size"), 1)
    foreach = r("policy.optimizer.kwargs.foreach")
    d = {
        "profile": FitProfile(trainer=name, override_keys=_FIT_OVERRIDES),
        "micro_batch": micro,
        "seq_len": seq,
        "logprob_batch": as_int(r("policy.logprob_batch_size"), micro),
        "logprob_chunk_size": as_int(r("policy.logprob_chunk_size"), 0) or None,
        "activation_checkpointing": as_bool(r("policy.dtensor_cfg.activation_checkpointing", False)),
        "tensor_parallel": as_int(r("policy.dtensor_cfg.tensor_parallel_size"), 1),
        "context_parallel": as_int(r("policy.dtensor_cfg.context_parallel_size"), 1),
        "sequence_parallel": as_bool(r("policy.dtensor_cfg.sequence_parallel", False)),
        "sequence_packing": as_bool(r("policy.sequence_packing.enabled", False)),
        "cpu_offload": as_bool(r("policy.dtensor_cfg.cpu_offload", False)),
        "optimizer_foreach": None if foreach is None else as_bool(foreach),
        "expandable_segments": expandable(cfg.trainer.env_vars, r("policy.dtensor_cfg.env_vars") or {}),
        "colocated": colocated,
        "generation_nodes": 0 if colocated else as_int(r("policy.generation.colocated.resources.num_nodes"), 0),
        "gpus": training_gpus(cfg, colocated, r("policy.generation.colocated.resources.num_nodes"),
                               r("policy.generation.colocated.resources.gpus_per_node")),
        "gpu_memory_utilization": as_float(r("policy.generation.vllm_cfg.gpu_memory_utilization"), 0.6),
        "max_model_len": as_int(r("policy.generation.vllm_cfg.max_model_len"), seq),
        "vllm_tensor_parallel": as_int(r("policy.generation.vllm_cfg.tensor_parallel_size"), 1),
        "kv_cache_dtype": str(r("policy.generation.vllm_cfg.kv_cache_dtype", "auto")),
        "enforce_eager": as_bool(r("policy.generation.vllm_cfg.enforce_eager", False)),
        "keys": dict(_FIT_KEYS, gpus_per_node=str(cfg.cluster.gpus_per_node)),
    }
    return d, notes
