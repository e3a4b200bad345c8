"""verl GRPO (``verl.trainer.main_ppo`` with ``algorithm.adv_estimator=grpo``) and its GSM8K -> parquet step.

Why: verl treats GRPO as an advantage estimator inside its PPO trainer; tutorial 002 runs it from a verl checkout
on the shared mount, reading parquet files that a preprocessing script wrote there first. Both are Ray jobs here.

Example:
    >>> print(verl.command(cfg))
    cd /data/verl && python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_files=...
"""

from __future__ import annotations

from typing import Any

from nbtools import _layout
from nbtools._escape import sh
from nbtools.config import Experiment
from nbtools.trainers.nemo_rl import hydra_unquote, hydra_value, parse_override
from nbtools.trainers.verl._releases import VERL, VerlRelease

__all__ = ["code_dir", "data_dir", "rollout_dir", "validation_dir", "tensorboard_dir", "overrides", "effective", "command",
           "fields", "ignored", "IGNORED", "NBTOOLS_ONLY", "REFUSED",
           "command_lines", "prepare_command", "KL_LOSS_TYPE", "release", "known_release"]

# verl's GRPO KL estimator (ppo_trainer.yaml `kl_loss_type: low_var_kl # for grpo`): k3, as NeMo-RL's default
KL_LOSS_TYPE = "low_var_kl"

# dataset name -> verl's preprocessing script (examples/data_preprocess/<x>.py in the verl checkout)
PREPROCESS = {"gsm8k": "examples/data_preprocess/gsm8k.py", "math": "examples/data_preprocess/math_dataset.py"}


def known_release(cfg: Experiment) -> bool:
    """Whether ``trainer.verl_ref`` is a release nbtools carries facts for (``trainers.verl.VERL``)."""
    return cfg.trainer.verl_ref in VERL


def release(cfg: Experiment) -> VerlRelease:
    """The release facts for ``trainer.verl_ref``; a tag without an entry runs with the newest entry's (the lint says so)."""
    return VERL.get(cfg.trainer.verl_ref) or VERL[list(VERL)[-1]]


def code_dir(cfg: Experiment) -> str:
    """The verl checkout on the pods (tutorial 002: ``<mount>/verl``)."""
    return cfg.trainer.code_dir or f"{cfg.storage.mount_path.rstrip('/')}/verl"


def data_dir(cfg: Experiment) -> str:
    """Where the parquet files live (``<mount>/gsm8k`` by default)."""
    return cfg.data.data_dir or f"{cfg.storage.mount_path.rstrip('/')}/{cfg.data.dataset.lower()}"


def _under_log_dir(cfg: Experiment, name: str) -> str:
    return f"{cfg.log_dir.rstrip('/')}/{name}"


def rollout_dir(cfg: Experiment) -> str:
    """``trainer.rollout_data_dir``: one ``{step}.jsonl`` of the training generations per step (``<log_dir>/rollout_data``)."""
    return _under_log_dir(cfg, _layout.VERL_ROLLOUT_DIR)


def validation_dir(cfg: Experiment) -> str:
    """``trainer.validation_data_dir``: the validation generations of each validated step."""
    return _under_log_dir(cfg, _layout.VERL_VALIDATION_DIR)


def tensorboard_dir(cfg: Experiment) -> str:
    """``TENSORBOARD_DIR`` (verl/utils/tracking.py reads it; without it verl writes under its working directory)."""
    return _under_log_dir(cfg, _layout.VERL_TENSORBOARD_DIR)


# How each experiment field reaches verl's GRPO, checked against the releases' trainer configs
# (verl/trainer/config/_generated_ppo_trainer.yaml at v0.7.0 and v0.9.x) and tests/trainers/test_verl_fields.py.
# A field verl has no key for is in IGNORED with what to set instead (the lint warns when it holds a non-default
# value); one only nbtools reads (cluster, storage, images, secrets, ...) is in NBTOOLS_ONLY.
IGNORED: dict[str, str] = {
    "grpo.use_leave_one_out_baseline": "verl's GRPO baseline is the whole group's mean (verl/trainer/ppo/core_algos.py "
        "compute_grpo_outcome_advantage); set `grpo.use_leave_one_out_baseline: false` to say what runs, or add "
        "`algorithm.adv_estimator=rloo` to trainer.overrides for a leave-one-out baseline without std normalisation",
    "checkpointing.metric_name": "verl keeps the latest trainer.max_actor_ckpt_to_keep checkpoints, not the best by a "
        "metric; set `checkpointing.metric_name: null`",
    "checkpointing.higher_is_better": "verl ranks no checkpoint by a metric; remove it",
    "checkpointing.dtensor_v2": "NeMo-RL's DTensor layout; verl writes its FSDP shards (global_step_N/actor); remove it",
    "checkpointing.model_save_format": "NeMo-RL's; verl saves FSDP shards, and HF weights with save_contents `hf_model` "
        "(`checkpointing.save_consolidated: true`); remove it",
    "model.max_total_sequence_length": "verl sizes prompt and response apart: set `data.max_prompt_length=N` and "
        "`data.max_response_length=N` in trainer.overrides (or `grpo.max_new_tokens` for the response)",
    "model.chat_template_kwargs": "NeMo-RL's tokenizer option; verl's data.apply_chat_template_kwargs goes in "
        "trainer.overrides (`+data.apply_chat_template_kwargs.KEY=VALUE`)",
    "data.validation": "verl validates on data.val_files (`<data_dir>/test.parquet`); set `data.data_dir` or override "
        "data.val_files",
    "data.prompt_file": "NeMo-RL's; verl's prompts come from the parquet files its preprocessing wrote; remove it",
    "trainer.recipe": "NeMo-RL's recipe YAML; verl's config is ppo_trainer.yaml plus trainer.overrides; remove it",
    "trainer.colocated": "verl colocates rollout and training in its hybrid engine; remove it",
    "trainer.generation_nodes": "NeMo-RL's non-colocated generation; remove it",
    "trainer.generation_gpus_per_node": "NeMo-RL's non-colocated generation; remove it",
    "trainer.vllm_cfg": "NeMo-RL's policy.generation.vllm_cfg; verl's are actor_rollout_ref.rollout.* keys in "
        "trainer.overrides",
    "trainer.vllm_kwargs": "NeMo-RL's; verl's are actor_rollout_ref.rollout.engine_kwargs.vllm.* in trainer.overrides",
}
# fields nbtools itself reads (where the cluster, storage and images are; the rehearsal; how jobs start)
NBTOOLS_ONLY: tuple[str, ...] = (
    "name", "backend", "source", "gcp", "cluster", "storage", "images", "secrets", "ray", "local", "rehearsal", "stall",
    "trainer.kind", "trainer.resume", "trainer.code_dir", "trainer.python", "trainer.env_vars", "trainer.verl_repo",
    "trainer.verl_ref", "trainer.overrides", "data.dataset", "data.data_dir",
    "logging.log_dir", "checkpointing.checkpoint_dir", "grpo.kl_penalty", "model.tensor_parallel_size",
)

# fields config.load refuses for a verl experiment (Verl.check; trainer.reward_module needs reward_functions)
REFUSED: tuple[str, ...] = ("trainer.reward_functions", "trainer.reward_module")


def _has(cfg: Experiment, key: str) -> bool:
    from nbtools.trainers._tree import has_key
    from nbtools.trainers.verl._tree import verl_tree

    tree = verl_tree(cfg.trainer.verl_ref) or verl_tree(list(VERL)[-1]) or {}
    return has_key(tree, key)


def _base(cfg: Experiment) -> list[tuple[str, Any]]:
    return [(k, v) for k, v, _ in fields(cfg)]


def fields(cfg: Experiment) -> list[tuple[str, Any, str]]:
    """(verl key, value, the experiment field it comes from) in command order; a field holding its default is left
    out where verl's own default is the better one (sampling seed, temperature, validation size, std scaling).

    Example:
        >>> [k for k, _, f in verl.fields(cfg) if f == "checkpointing.keep_top_k"]
        ['trainer.max_actor_ckpt_to_keep']
    """
    from nbtools.config import CheckpointingConfig, GrpoConfig

    g, c, d0 = cfg.grpo, cfg.checkpointing, GrpoConfig()
    loggers = ["console"] + (["tensorboard"] if cfg.logging.tensorboard else []) + (["wandb"] if cfg.logging.wandb else [])
    out: list[tuple[str, Any, str]] = [
        ("algorithm.adv_estimator", "grpo", "trainer.kind"),
        ("data.train_files", f"{data_dir(cfg)}/train.parquet", "data.data_dir"),
        ("data.val_files", f"{data_dir(cfg)}/test.parquet", "data.data_dir"),
        ("data.train_batch_size", g.num_prompts_per_step, "grpo.num_prompts_per_step"),
        ("actor_rollout_ref.model.path", cfg.model.name, "model.name"),
        ("actor_rollout_ref.actor.optim.lr", g.learning_rate, "grpo.learning_rate"),
        ("actor_rollout_ref.rollout.name", "vllm", "trainer.kind"),
        ("actor_rollout_ref.rollout.n", g.num_generations_per_prompt, "grpo.num_generations_per_prompt"),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", cfg.model.tensor_parallel_size,
         "model.tensor_parallel_size"),
        # GRPO's KL in verl is a loss term (docs algo/grpo.md; ppo_trainer.yaml "use_kl_loss: False # True for GRPO");
        # algorithm.kl_ctrl.kl_coef is read only with algorithm.use_kl_in_reward=True (ray_trainer.py), off by default.
        ("actor_rollout_ref.actor.use_kl_loss", g.kl_penalty > 0, "grpo.kl_penalty"),
        *([("actor_rollout_ref.actor.kl_loss_coef", g.kl_penalty, "grpo.kl_penalty"),
           ("actor_rollout_ref.actor.kl_loss_type", KL_LOSS_TYPE, "grpo.kl_penalty")] if g.kl_penalty > 0 else []),
    ]
    # sampling and advantages: set where the experiment says something (verl's defaults otherwise)
    if g.temperature != d0.temperature:
        out.append(("actor_rollout_ref.rollout.temperature", g.temperature, "grpo.temperature"))
    if g.max_new_tokens is not None:
        out.append(("data.max_response_length", g.max_new_tokens, "grpo.max_new_tokens"))
    if g.seed != d0.seed:  # the dataloader's shuffle (data.seed), the actor's mini-batch shuffle; 0.9.x: the sampler
        out += [(k, g.seed, "grpo.seed") for k in ("data.seed", "actor_rollout_ref.actor.data_loader_seed",
                                                   "actor_rollout_ref.rollout.seed") if _has(cfg, k)]
    if g.normalize_rewards != d0.normalize_rewards:
        out.append(("algorithm.norm_adv_by_std_in_grpo", g.normalize_rewards, "grpo.normalize_rewards"))
    if g.max_val_samples != d0.max_val_samples:
        out.append(("data.val_max_samples", g.max_val_samples, "grpo.max_val_samples"))
    out += [
        ("trainer.logger", loggers[0] if len(loggers) == 1 else loggers, "logging.tensorboard"),
        ("trainer.project_name", cfg.logging.wandb_project or "nbtools", "logging.wandb_project"),
        ("trainer.experiment_name", cfg.name, "name"),
        ("trainer.val_before_train", g.val_at_start, "grpo.val_at_start"),
        ("trainer.n_gpus_per_node", cfg.cluster.gpus_per_node, "cluster.gpus_per_node"),
        ("trainer.nnodes", cfg.cluster.worker_replicas, "cluster.worker_replicas"),
        # verl saves every save_freq steps, never with -1 (ray_trainer.py fit: `save_freq > 0 and ...`)
        ("trainer.save_freq", c.save_period if c.enabled else -1, "checkpointing.enabled"),
        ("trainer.test_freq", g.val_period, "grpo.val_period"),
        ("trainer.total_training_steps", g.max_num_steps, "grpo.max_num_steps"),
        ("trainer.default_local_dir", cfg.checkpoint_dir, "checkpointing.checkpoint_dir"),
        ("trainer.rollout_data_dir", rollout_dir(cfg), "logging.log_dir"),
        ("trainer.validation_data_dir", validation_dir(cfg), "logging.log_dir"),
    ]
    if c.enabled:  # verl's default (null) keeps every checkpoint (checkpoint_manager.py: max_ckpt_to_keep)
        out.append(("trainer.max_actor_ckpt_to_keep", c.keep_top_k, "checkpointing.keep_top_k"))
        d1 = CheckpointingConfig()
        if (c.save_optimizer, c.save_consolidated) != (d1.save_optimizer, d1.save_consolidated):
            contents = ["model"] + (["optimizer"] if c.save_optimizer else []) + ["extra"] + (
                ["hf_model"] if c.save_consolidated else [])
            out.append(("actor_rollout_ref.actor.checkpoint.save_contents", contents, "checkpointing.save_optimizer"))
    return out


def ignored(cfg: Experiment) -> list[tuple[str, str]]:
    """(field, what to set instead) for each experiment field holding a non-default value that verl never reads."""
    default = Experiment(name=cfg.name)
    out = []
    for name, fix in IGNORED.items():
        section, _, attr = name.partition(".")
        value, base = getattr(getattr(cfg, section), attr), getattr(getattr(default, section), attr)
        if name == "grpo.use_leave_one_out_baseline":
            if value:  # the NeMo-RL default True is a leave-one-out claim verl does not honour
                out.append((name, fix))
        elif name == "checkpointing.metric_name":
            if value is not None and cfg.checkpointing.enabled and value != base:
                out.append((name, fix))
        elif value != base:
            out.append((name, fix))
    return out


def overrides(cfg: Experiment) -> list[str]:
    """verl's ``key=value`` list: derived keys first, ``trainer.overrides`` replacing any derived key they repeat."""
    user = {parse_override(o)[1]: o for o in cfg.trainer.overrides}
    out = [f"{k}={hydra_value(v)}" for k, v in _base(cfg) if k not in user]
    return out + list(cfg.trainer.overrides)


def effective(cfg: Experiment) -> dict[str, str]:
    """Every key the verl command sets, as the job sees it (``trainer.overrides`` win), values as rendered.

    Example:
        >>> verl.effective(cfg)["actor_rollout_ref.actor.use_kl_loss"]
        'true'
    """
    out: dict[str, str] = {}
    for text in overrides(cfg):
        prefix, key, value = parse_override(text)
        if prefix == "~":
            out.pop(key, None)
        elif value is not None:
            out[key] = hydra_unquote(value)
    return out


def command_lines(cfg: Experiment) -> list[str]:
    """The training command as display lines (``cd <verl> && python3 -m <the release's entry point>``, then one per key)."""
    python = cfg.trainer.python or "python3"
    head = f"cd {sh(code_dir(cfg))} && {sh(python)} -m {release(cfg).module}"
    return [head] + [sh(o) for o in overrides(cfg)]


def command(cfg: Experiment) -> str:
    """The training command, run from the verl checkout like tutorial 002."""
    return " ".join(command_lines(cfg))


def prepare_command(cfg: Experiment) -> str:
    """The dataset -> parquet step (verl's own preprocessing script), writing to :func:`data_dir`."""
    python = cfg.trainer.python or "python3"
    script = PREPROCESS.get(cfg.data.dataset.lower())
    if script is None:
        from nbtools.errors import ConfigError

        raise ConfigError(
            f"data.dataset: {cfg.data.dataset!r} has no verl preprocessing script known to nbtools; "
            f"allowed: {', '.join(sorted(PREPROCESS))}; fix: use `dataset: gsm8k` or prepare the parquet files yourself "
            "and set `data.data_dir`"
        )
    return f"cd {sh(code_dir(cfg))} && {sh(python)} {script} --local_save_dir {sh(data_dir(cfg))}"
