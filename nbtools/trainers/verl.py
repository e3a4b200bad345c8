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
from nbtools.trainers.releases import VERL, VerlRelease

__all__ = ["code_dir", "data_dir", "rollout_dir", "validation_dir", "tensorboard_dir", "overrides", "effective", "command",
           "command_lines", "prepare_command", "KL_LOSS_TYPE", "release", "known_release"]

# verl's GRPO KL estimator (ppo_trainer.yaml `kl_loss_type: low_var_kl # for grpo`): k3, as NeMo-RL's default
KL_LOSS_TYPE = "low_var_kl"

# dataset name -> verl's preprocessing script (examples/data_preprocess/<x>.py in the verl checkout)
PREPROCESS = {"gsm8k": "examples/data_preprocess/gsm8k.py", "math": "examples/data_preprocess/math_dataset.py"}


def known_release(cfg: Experiment) -> bool:
    """Whether ``trainer.verl_ref`` is a release nbtools carries facts for (``trainers.releases.VERL``)."""
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


def _base(cfg: Experiment) -> list[tuple[str, Any]]:
    g = cfg.grpo
    loggers = ["console"] + (["tensorboard"] if cfg.logging.tensorboard else []) + (["wandb"] if cfg.logging.wandb else [])
    return [
        ("algorithm.adv_estimator", "grpo"),
        ("data.train_files", f"{data_dir(cfg)}/train.parquet"),
        ("data.val_files", f"{data_dir(cfg)}/test.parquet"),
        ("data.train_batch_size", g.num_prompts_per_step),
        ("actor_rollout_ref.model.path", cfg.model.name),
        ("actor_rollout_ref.actor.optim.lr", g.learning_rate),
        ("actor_rollout_ref.rollout.name", "vllm"),
        ("actor_rollout_ref.rollout.n", g.num_generations_per_prompt),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", cfg.model.tensor_parallel_size),
        # GRPO's KL in verl is a loss term (docs algo/grpo.md; ppo_trainer.yaml "use_kl_loss: False # True for GRPO");
        # algorithm.kl_ctrl.kl_coef is read only with algorithm.use_kl_in_reward=True (ray_trainer.py), off by default.
        ("actor_rollout_ref.actor.use_kl_loss", g.kl_penalty > 0),
        *([("actor_rollout_ref.actor.kl_loss_coef", g.kl_penalty), ("actor_rollout_ref.actor.kl_loss_type", KL_LOSS_TYPE)]
          if g.kl_penalty > 0 else []),
        ("trainer.logger", loggers[0] if len(loggers) == 1 else loggers),
        ("trainer.project_name", cfg.logging.wandb_project or "nbtools"),
        ("trainer.experiment_name", cfg.name),
        ("trainer.val_before_train", g.val_at_start),
        ("trainer.n_gpus_per_node", cfg.cluster.gpus_per_node),
        ("trainer.nnodes", cfg.cluster.worker_replicas),
        ("trainer.save_freq", cfg.checkpointing.save_period),
        ("trainer.test_freq", g.val_period),
        ("trainer.total_training_steps", g.max_num_steps),
        ("trainer.default_local_dir", cfg.checkpoint_dir),
        ("trainer.rollout_data_dir", rollout_dir(cfg)),
        ("trainer.validation_data_dir", validation_dir(cfg)),
    ]


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
