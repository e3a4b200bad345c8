"""Lint rules for verl runs: keys the release's Hydra config refuses, an image or Ray the release cannot run on, a KL
coefficient verl would ignore, and the verl source the job ``cd``s into.

Why: in verl, ``algorithm.kl_ctrl.kl_coef`` is only read when ``algorithm.use_kl_in_reward=True`` (ray_trainer.py;
off by default in ppo_trainer.yaml), and ``actor_rollout_ref.actor.kl_loss_coef`` only when ``use_kl_loss=True``; a
coefficient set without its switch trains with no KL at all and says nothing. And both ``main_ppo`` and the dataset
preparation run ``cd <mount>/verl``: without the source there the job dies at its first line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbtools.trainers.verl._command as verl
from nbtools.config import Experiment
from nbtools.errors import Fix
from nbtools.trainers import _tree
from nbtools.trainers._findings import Finding, LintReport
from nbtools.trainers._protocol import CodePresent
from nbtools.trainers.nemo_rl import hydra_value, parse_override
from nbtools.trainers.verl._releases import VERL
from nbtools.trainers.verl._tree import verl_tree
from nbtools.trainers.verl._validate import check_validation
from nbtools.trainers.verl.prepare import check_data, check_weights

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
    _keys(cfg, r)
    _fields(cfg, r)
    check_validation(cfg, r)
    _image(cfg, r)
    _kl(cfg, r)
    _source(cfg, r, code_present)
    check_data(cfg, r)  # the parquet files the command names (blocking only when known to be absent)
    check_weights(cfg, r)  # the model in the shared HF cache (a warning when known not staged)


def _keys(cfg: Experiment, r: LintReport) -> None:
    """Every override against the release's composed config, as Hydra's struct mode takes it (main_ppo exits 1)."""
    r.checked.append("verl-keys")
    ref = cfg.trainer.verl_ref
    tree = verl_tree(ref) if verl.known_release(cfg) else None
    if tree is None:
        r.findings.append(Finding(
            "warning", "verl-keys", "trainer.verl_ref",
            f"nbtools has no key table for verl {ref!r}, so no override was checked against its config (Hydra refuses "
            "an unknown `key=value` when the job starts)",
            f"pin a release nbtools knows ({', '.join(VERL)}), or add one: an entry in nbtools/trainers/verl/_releases.py and "
            "its verl/trainer/config/_generated_ppo_trainer.yaml under tests/assets/verl/<tag>/ (tools/gen_verl_keys.py)",
        ))
        return
    others = {v: verl_tree(v) or {} for v in VERL if v != ref}
    user = {text: i for i, text in enumerate(cfg.trainer.overrides)}
    for text in verl.overrides(cfg):
        prefix, key, _ = parse_override(text)
        where = f"trainer.overrides[{user[text]}]" if text in user else "trainer.verl_ref"
        exists = _tree.has_key(tree, key)
        if prefix == "" and not exists:
            near = _tree.closest_keys(tree, key)
            elsewhere = [v for v, t in others.items() if _tree.has_key(t, key)]
            r.findings.append(Finding(
                "blocking", "verl-keys", where,
                f"`{key}` is not a key of verl {ref}'s trainer config" + (f" (it is one in {', '.join(elsewhere)})"
                                                                          if elsewhere else "")
                + f"; main_ppo exits with Hydra's \"Could not override '{key}'\"",
                (f"did you mean `{near[0]}`? " if near else "") + (
                    f"write `+{text}` to add it" if text in user else
                    f"nbtools derives this key; pin `trainer.verl_ref: {elsewhere[-1] if elsewhere else list(VERL)[0]}`"),
            ))
        elif prefix == "+" and exists and _tree.get_value(tree, key) is not None:
            r.findings.append(Finding(
                "blocking", "verl-keys", where,
                f"`{key}` already exists in verl {ref}'s trainer config; Hydra refuses `+` for it "
                "(\"Could not append to config. An item is already at ...\")",
                f"write `{text[1:]}` (or `+{text}` to add-or-override)",
            ))
        elif prefix == "~" and not exists:
            r.findings.append(Finding(
                "blocking", "verl-keys", where,
                f"`{key}` does not exist in verl {ref}'s trainer config; Hydra refuses to delete it",
                f"remove `{text}`",
            ))


def _fields(cfg: Experiment, r: LintReport) -> None:
    """Experiment fields verl never reads (``verl.IGNORED``), each set to something else than its default: a warning
    naming what to set instead, so no setting is dropped in silence."""
    r.checked.append("verl-fields")
    for name, fix in verl.ignored(cfg):
        r.findings.append(Finding("warning", "verl-fields", name, f"`{name}` does not reach verl: nbtools has no verl "
                                  "key for it, so the run ignores it", fix))
    user = {parse_override(o)[1]: (i, o) for i, o in enumerate(cfg.trainer.overrides)}
    derived = {k: (v, field) for k, v, field in verl.fields(cfg)}
    for key, (i, text) in user.items():
        if key not in derived:
            continue
        value, field = derived[key]
        mine = f"{key}={hydra_value(value)}"
        if field not in verl.NBTOOLS_ONLY and text.lstrip("+") != mine:
            r.findings.append(Finding("warning", "verl-fields", field, f"`{field}` does not reach verl: "
                                      f"trainer.overrides[{i}] `{text}` replaces its `{mine}`",
                                      "remove one of the two (the override wins as it stands)"))


# verl's images are tagged by vLLM release: verlai/verl:vllm011.latest (docs/start/install.rst), vllm024.dev2
# (docker/Dockerfile.stable.vllm at v0.9.0: "Target: verlai/verl:vllm024.dev2", VLLM_VERSION=0.24.0)
_VERL_IMAGE = re.compile(r"(?:^|/)verlai/verl:vllm(\d)(\d{2})\b")


def _v(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def _image(cfg: Experiment, r: LintReport) -> None:
    """The image's vLLM and the cluster's Ray against what the release requires (setup.py), and the modules its
    default trainer imports that an older image lacks."""
    r.checked.append("verl-image")
    if not verl.known_release(cfg):
        return
    rel = verl.release(cfg)
    m = _VERL_IMAGE.search(cfg.images.image or "")
    if m:
        vllm = (int(m.group(1)), int(m.group(2)))
        low, high = _v(rel.vllm[0])[:2], _v(rel.vllm[1])[:2] if rel.vllm[1] else None
        if vllm < low or (high is not None and vllm > high):
            need = f">={rel.vllm[0]}" + (f",<={rel.vllm[1]}" if rel.vllm[1] else "")
            extra = (f"; its default trainer ({rel.trainer}) imports {', '.join(rel.imports)}, which images built "
                     "before that release do not install") if rel.imports else ""
            r.findings.append(Finding(
                "blocking", "verl-image", "images.image",
                f"{cfg.images.image} carries vLLM {vllm[0]}.{vllm[1]}, and verl {rel.version} requires vllm{need} "
                f"(its setup.py){extra}",
                f"use the release's image `images.image: {rel.image}` (and its Ray in images.ray_version), or pin the "
                f"verl release this image was built for (`trainer.verl_ref`)",
            ))
    ray = cfg.images.ray_version
    if ray and _v(ray) < _v(rel.ray):
        r.findings.append(Finding(
            "blocking", "verl-image", "images.ray_version",
            f"Ray {ray} is older than verl {rel.version} supports (setup.py ray[default]>={rel.ray})",
            f"set `images.ray_version` to the Ray of the image ({cfg.images.image}), {rel.ray} or newer",
        ))


def _kl(cfg: Experiment, r: LintReport) -> None:
    r.checked.append("verl-kl")
    eff = verl.effective(cfg)
    reward_coef = eff.get("algorithm.kl_ctrl.kl_coef")
    if reward_coef is not None and _num(reward_coef) > 0 and not _true(eff.get("algorithm.use_kl_in_reward")):
        # a warning, not a refusal: tutorial 002's own command sets it, and a tutorial's run must stay launchable as
        # written (the run simply trains without KL, as the blog's did)
        tag = cfg.trainer.verl_ref
        r.findings.append(Finding(
            "warning", "verl-kl", "trainer.overrides",
            f"algorithm.kl_ctrl.kl_coef={reward_coef} has no effect in verl {tag}: it is read only with "
            "algorithm.use_kl_in_reward=True (verl/trainer/ppo/ray_trainer.py builds and applies the in-reward KL "
            "controller only then; verl/trainer/config/_generated_ppo_trainer.yaml at that tag sets "
            "use_kl_in_reward: false), so this run trains with no KL penalty",
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
    plan_step = cfg.runs_on().provisions and cfg.storage.kind == "gcsfuse" and bool(cfg.storage.bucket) and (
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
