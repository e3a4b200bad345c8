"""Lint rules for verl runs: a KL coefficient verl would ignore, and the verl source the job ``cd``s into.

Why: in verl, ``algorithm.kl_ctrl.kl_coef`` is only read when ``algorithm.use_kl_in_reward=True`` (ray_trainer.py;
off by default in ppo_trainer.yaml), and ``actor_rollout_ref.actor.kl_loss_coef`` only when ``use_kl_loss=True``; a
coefficient set without its switch trains with no KL at all and says nothing. And both ``main_ppo`` and the dataset
preparation run ``cd <mount>/verl``: without the source there the job dies at its first line.
"""

from __future__ import annotations

import json
from pathlib import Path

from nbtools import backends
from nbtools.config import Experiment
from nbtools.errors import Fix
from nbtools.trainers import verl
from nbtools.trainers._findings import Finding, LintReport
from nbtools.trainers._protocol import CodePresent
from nbtools.trainers.verl_prepare import check_data, check_weights

__all__ = ["check_verl"]


def _true(value: str | None) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


def _num(value: str | None) -> float:
    try:
        return float(value) if value is not None else 0.0
    except ValueError:
        return 0.0


def check_verl(cfg: Experiment, r: LintReport, code_present: CodePresent = None) -> None:
    """Run the verl rules on ``cfg``, appending to ``r``."""
    _kl(cfg, r)
    _source(cfg, r, code_present)
    check_data(cfg, r)  # the parquet files the command names (blocking only when known to be absent)
    check_weights(cfg, r)  # the model in the shared HF cache (a warning when known not staged)


def _kl(cfg: Experiment, r: LintReport) -> None:
    r.checked.append("verl-kl")
    eff = verl.effective(cfg)
    reward_coef = eff.get("algorithm.kl_ctrl.kl_coef")
    if reward_coef is not None and _num(reward_coef) > 0 and not _true(eff.get("algorithm.use_kl_in_reward")):
        r.findings.append(Finding(
            "blocking", "verl-kl", "trainer.overrides",
            f"algorithm.kl_ctrl.kl_coef={reward_coef} is ignored: verl reads it only with algorithm.use_kl_in_reward=True "
            "(in-reward KL, off by default), so this run would have no KL penalty",
            f"drop that override and set `grpo.kl_penalty: {reward_coef}` (-> actor_rollout_ref.actor.use_kl_loss=true, "
            f"kl_loss_coef={reward_coef}, kl_loss_type={verl.KL_LOSS_TYPE}: verl's GRPO KL), or add "
            "`algorithm.use_kl_in_reward=true` if an in-reward KL is what you mean",
        ))
    loss_coef = eff.get("actor_rollout_ref.actor.kl_loss_coef")
    if loss_coef is not None and _num(loss_coef) > 0 and not _true(eff.get("actor_rollout_ref.actor.use_kl_loss")):
        r.findings.append(Finding(
            "blocking", "verl-kl", "grpo.kl_penalty",
            f"actor_rollout_ref.actor.kl_loss_coef={loss_coef} is ignored because actor_rollout_ref.actor.use_kl_loss is "
            "false: no KL loss is computed",
            "remove the `actor_rollout_ref.actor.use_kl_loss=false` override, or set `grpo.kl_penalty: 0` to train "
            "without KL on purpose",
        ))


def _source(cfg: Experiment, r: LintReport, code_present: CodePresent) -> None:
    r.checked.append("verl-source")
    code = verl.code_dir(cfg)
    plan_step = backends.get(cfg).provisions and cfg.storage.kind == "gcsfuse" and bool(cfg.storage.bucket) and (
        code.startswith(cfg.storage.mount_path.rstrip("/") + "/"))
    how = ("the provisioning plan's steps verl-fetch + verl-source copy verl "
           f"{cfg.trainer.verl_ref} there (nbtools.gke.plan(cfg).apply(dry_run=False), notebook 01)" if plan_step else
           f"copy a verl release ({cfg.trainer.verl_repo} at {cfg.trainer.verl_ref}, without .git) to {code} on the "
           "shared storage")
    cli_how = (f"the provisioning plan's steps verl-fetch + verl-source copy verl {cfg.trainer.verl_ref} there (notebook 01, "
               "or the script `nbtools plan EXPERIMENT.yaml --script` prints)" if plan_step else how)
    if callable(code_present):
        present: bool | None = bool(code_present(code))
    elif code_present is not None:
        present = bool(code_present)
    elif Path(code).is_dir():
        present = (Path(code) / "verl" / "trainer" / "main_ppo.py").is_file()
    else:
        present = _provisioned(cfg) if plan_step else None
    if present is None:
        r.findings.append(Finding(
            "warning", "verl-source", "trainer.code_dir",
            f"the job runs `cd {code}` (verl.trainer.main_ppo and the dataset preparation), and whether verl is there "
            "was not checked from here",
            Fix(f"{how}; or pass code_present=<callable(path) -> bool> (e.g. an exec on the head)", cli=cli_how),
        ))
    elif not present:
        r.findings.append(Finding(
            "blocking", "verl-source", "trainer.code_dir",
            f"no verl source at {code}: the job's first command `cd {code}` fails (the image has no checkout there)",
            Fix(how, cli=cli_how),
        ))


def _provisioned(cfg: Experiment) -> bool | None:
    """True when this machine's provisioning state records verl-source done for the configured ref; else unknown."""
    try:
        state = json.loads((cfg.run_dir / "gke" / "provision-state.json").read_text())
    except (OSError, ValueError):
        return None
    return True if state.get("steps", {}).get("verl-source", {}).get("status") == "done" else None
