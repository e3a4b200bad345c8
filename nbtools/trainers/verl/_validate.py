"""verl's own start-up validation, run by the lint on the composed config before a cluster spends minutes starting.

Why: ``main_ppo`` refuses a batch layout only after Ray, the workers and vLLM are up. The rules, at v0.7.0 and v0.9.1
(FSDP actor, ``use_dynamic_bsz`` off; the same text at both tags unless noted):

- ``verl/utils/config.py`` ``validate_config``: ``data.train_batch_size * rollout.n`` divisible by the GPU count;
  ``log_prob_micro_batch_size`` / ``_per_gpu`` of the rollout (and of the reference policy when a KL term uses it):
  exactly one set;
- ``verl/workers/config/actor.py`` ``ActorConfig.__post_init__`` / ``validate``: one of ``ppo_micro_batch_size`` /
  ``ppo_micro_batch_size_per_gpu``; ``train_batch_size >= ppo_mini_batch_size`` (verl's default is 256);
- ``verl/workers/fsdp_workers.py`` (``ActorRolloutRefWorker.__init__``): ``ppo_mini_batch_size * rollout.n //
  (GPUs / ulysses_sequence_parallel_size)`` above 0 and divisible by ``ppo_micro_batch_size_per_gpu``;
- ``validate_config``: ``val_kwargs.do_sample`` needs ``rollout.temperature > 0``.

The oracle tests (``tests/oracle``) compose the same overrides into verl's own Hydra config and run its
``validate_config``: what it refuses, this refuses, naming the key.
"""

from __future__ import annotations

from typing import Any

import nbtools.trainers.verl._command as verl
from nbtools.config import Experiment
from nbtools.trainers import _tree
from nbtools.trainers._findings import Finding, LintReport
from nbtools.trainers.verl._releases import VERL
from nbtools.trainers.verl._tree import verl_tree

__all__ = ["check_validation", "composed"]

_A = "actor_rollout_ref.actor"
_R = "actor_rollout_ref.rollout"
_REF = "actor_rollout_ref.ref"


def composed(cfg: Experiment) -> dict[str, Any]:
    """``{key: value}`` of the keys the rules read: the command's overrides over the release's defaults."""
    tree = verl_tree(cfg.trainer.verl_ref) or verl_tree(list(VERL)[-1]) or {}
    eff = verl.effective(cfg)
    keys = ("data.train_batch_size", f"{_R}.n", "trainer.n_gpus_per_node", "trainer.nnodes", f"{_A}.use_dynamic_bsz",
            f"{_A}.strategy", f"{_A}.ppo_mini_batch_size", f"{_A}.ppo_micro_batch_size", f"{_A}.ppo_micro_batch_size_per_gpu",
            f"{_A}.ulysses_sequence_parallel_size", f"{_R}.log_prob_micro_batch_size",
            f"{_R}.log_prob_micro_batch_size_per_gpu", f"{_REF}.log_prob_micro_batch_size",
            f"{_REF}.log_prob_micro_batch_size_per_gpu", f"{_A}.use_kl_loss", "algorithm.use_kl_in_reward",
            f"{_R}.val_kwargs.do_sample", f"{_R}.temperature")
    return {k: _value(eff[k]) if k in eff else _tree.get_value(tree, k) for k in keys}


def _value(text: str) -> Any:
    t = text.strip().strip("'\"")
    if t.lower() in ("null", "none", "~"):
        return None
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    for cast in (int, float):
        try:
            return cast(t)
        except ValueError:
            pass
    return t


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _where(cfg: Experiment, key: str, derived: str) -> str:
    """The experiment field that sets ``key``: the trainer.overrides entry, else the field nbtools derives it from."""
    for i, text in enumerate(cfg.trainer.overrides):
        if text.lstrip("+~").split("=", 1)[0] == key:
            return f"trainer.overrides[{i}]"
    return derived


def check_validation(cfg: Experiment, r: LintReport) -> None:
    """Lint rule ``verl-validation``: what verl's start-up validation would refuse (blocking), each naming the key."""
    r.checked.append("verl-validation")
    c = composed(cfg)
    if c[f"{_A}.use_dynamic_bsz"] is True or c[f"{_A}.strategy"] not in ("fsdp", "fsdp2"):
        return  # token-budget micro-batches, or Megatron's own arithmetic: verl's other branch, not checked here

    def add(key: str, where: str, problem: str, fix: str) -> None:
        r.findings.append(Finding("blocking", "verl-validation", where, f"{problem}; verl refuses it at start "
                                  f"({key})", fix))

    train, n = _int(c["data.train_batch_size"]), _int(c[f"{_R}.n"]) or 1
    gpus = (_int(c["trainer.n_gpus_per_node"]) or 1) * (_int(c["trainer.nnodes"]) or 1)
    mini, micro = _int(c[f"{_A}.ppo_mini_batch_size"]), c[f"{_A}.ppo_micro_batch_size_per_gpu"]
    sp = _int(c[f"{_A}.ulysses_sequence_parallel_size"]) or 1
    mini_key = f"{_A}.ppo_mini_batch_size"
    if train is not None and (train * n) % gpus:
        add("verl/utils/config.py validate_config", "grpo.num_prompts_per_step",
            f"data.train_batch_size ({train}) x rollout.n ({n}) = {train * n} is not divisible by the {gpus} GPUs",
            "make grpo.num_prompts_per_step x grpo.num_generations_per_prompt a multiple of cluster.gpus_per_node x "
            "cluster.worker_replicas")
    if train is not None and mini is not None and train < mini:
        add("verl/workers/config/actor.py ActorConfig.validate", _where(cfg, mini_key, "grpo.num_prompts_per_step"),
            f"data.train_batch_size ({train}) is smaller than {mini_key} ({mini}"
            + (", verl's default)" if _where(cfg, mini_key, "") == "" else ")"),
            f"add `{mini_key}={train}` (or a divisor of {train}) to trainer.overrides, or raise grpo.num_prompts_per_step")
    elif mini is not None and gpus // sp > 0:
        norm = mini * n // (gpus // sp)
        if norm <= 0:
            add("verl/workers/fsdp_workers.py", _where(cfg, mini_key, "trainer.overrides"),
                f"{mini_key} ({mini}) x rollout.n ({n}) is below one sample per GPU ({gpus // sp} data-parallel ranks)",
                f"raise {mini_key} to at least {-(-(gpus // sp) // n)}")
        elif _int(micro) and norm % micro:
            add("verl/workers/fsdp_workers.py", _where(cfg, f"{_A}.ppo_micro_batch_size_per_gpu", "trainer.overrides"),
                f"the per-GPU mini-batch ({mini} x {n} // {gpus // sp} = {norm}) is not divisible by "
                f"{_A}.ppo_micro_batch_size_per_gpu ({micro})", f"set {_A}.ppo_micro_batch_size_per_gpu to a divisor of {norm}")
    pairs = [(_A, "ppo_micro_batch_size", "verl/workers/config/actor.py ActorConfig.__post_init__"),
             (_R, "log_prob_micro_batch_size", "verl/utils/config.py validate_config")]
    if c[f"{_A}.use_kl_loss"] is True or c["algorithm.use_kl_in_reward"] is True:  # the reference policy runs
        pairs.append((_REF, "log_prob_micro_batch_size", "verl/utils/config.py validate_config"))
    for section, param, source in pairs:
        old, per_gpu = c[f"{section}.{param}"], c[f"{section}.{param}_per_gpu"]
        if old is None and per_gpu is None:
            add(source, "trainer.overrides", f"neither {section}.{param} nor {section}.{param}_per_gpu is set",
                f"add `{section}.{param}_per_gpu=N` to trainer.overrides (e.g. 4)")
        elif old is not None and per_gpu is not None:
            add(source, _where(cfg, f"{section}.{param}", "trainer.overrides"),
                f"both {section}.{param} and {section}.{param}_per_gpu are set", f"remove `{section}.{param}` (deprecated)")
    temp = c[f"{_R}.temperature"]
    if c[f"{_R}.val_kwargs.do_sample"] is True and isinstance(temp, int | float) and temp <= 0:
        add("verl/utils/config.py validate_config", _where(cfg, f"{_R}.temperature", "grpo.temperature"),
            f"{_R}.val_kwargs.do_sample is on with rollout temperature {temp}", "set grpo.temperature above 0")
