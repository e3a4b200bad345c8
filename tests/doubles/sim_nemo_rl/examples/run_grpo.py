"""TEST DOUBLE of NeMo-RL's ``examples/run_grpo.py`` (v0.7.0, v0.5.0), in the simulated GKE's NeMo-RL checkout.

NOT NeMo-RL (no vLLM, no GPUs here). It takes NeMo-RL's command line exactly: ``--config <recipe>`` plus Hydra
overrides, resolved and checked as NeMo-RL does (sim_nemo_rl_config.py), then trains nbtools' miniature GRPO (the
local backend's rehearsal) with what the resolved config says: batch sizes, steps, validation, seed, learning rate,
KL penalty, temperature, checkpointing (dir, period, top-k, metric, format) and logger dirs. The rehearsal writes
NeMo-RL's layout (``<logger.log_dir>/exp_NNN/`` with TensorBoard events and ``train_data_step{N}.jsonl``,
``<checkpointing.checkpoint_dir>/step_N/``) and prints NeMo-RL's ``Step k/N`` lines and result blocks.

``policy.model_name`` is the model NeMo-RL would download (the sim experiment keeps the Gemma-3 example's, so the fit
check and the launch look like the real run); this stand-in trains the rehearsal's tiny model instead and saves its
warm start at ``<experiment dir>/baseline_hf`` (beside ``checkpoint_dir``): the stand-in Hub's copy of that model,
which the ``run_eval.py`` double evaluates whenever it is asked for a model that is not a directory.

Per release (``nemo_rl_releases.py``, the facts with their tag and path): the environment is the one the release's
script builds (v0.5.0's ``run_grpo_math.py`` double ignores ``data.env_name`` and scores with math; ``run_grpo.py``
resolves the configured name in ``ENV_REGISTRY`` and fails as NeMo-RL does when it is not registered); an nbtools
reward environment trains the rehearsal with its mix, any other with the image's math reward. A release that writes
no validation dumps (v0.5.0) leaves none. ``NEMO_RL_SIM_ENV_ONLY=1`` stops after printing the environment as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nemo_rl_releases import facts  # noqa: E402
from sim_nemo_rl_config import (  # noqa: E402
    apply_hydra_overrides,
    environment,
    get,
    import_nbtools,
    load_config,
    lookup,
    release,
    sim,
)

# NeMo-RL config key -> nbtools experiment key of the rehearsal
TO_REHEARSAL = {
    "grpo.num_prompts_per_step": "grpo.num_prompts_per_step",
    "grpo.num_generations_per_prompt": "grpo.num_generations_per_prompt",
    "grpo.max_num_steps": "grpo.max_num_steps",
    "grpo.val_period": "grpo.val_period",
    "grpo.val_at_start": "grpo.val_at_start",
    "grpo.max_val_samples": "grpo.max_val_samples",
    "grpo.seed": "grpo.seed",
    "grpo.use_leave_one_out_baseline": "grpo.use_leave_one_out_baseline",
    "grpo.normalize_rewards": "grpo.normalize_rewards",
    "loss_fn.reference_policy_kl_penalty": "grpo.kl_penalty",
    "policy.optimizer.kwargs.lr": "grpo.learning_rate",
    "policy.generation.temperature": "grpo.temperature",
    "policy.max_total_sequence_length": "model.max_total_sequence_length",
    "policy.dtensor_cfg._v2": "checkpointing.dtensor_v2",
    "checkpointing.enabled": "checkpointing.enabled",
    "checkpointing.checkpoint_dir": "checkpointing.checkpoint_dir",
    "checkpointing.save_period": "checkpointing.save_period",
    "checkpointing.keep_top_k": "checkpointing.keep_top_k",
    "checkpointing.metric_name": "checkpointing.metric_name",
    "checkpointing.higher_is_better": "checkpointing.higher_is_better",
    "checkpointing.model_save_format": "checkpointing.model_save_format",
    "checkpointing.save_optimizer": "checkpointing.save_optimizer",
    "logger.log_dir": "logging.log_dir",
    "logger.tensorboard_enabled": "logging.tensorboard",
}


def rehearsal_args(cfg: dict) -> tuple[Path, list[str]]:
    """(runs dir, ``key=value`` overrides) that make the rehearsal train what ``cfg`` describes."""
    for key in ("logger.log_dir", "checkpointing.checkpoint_dir"):
        if not str(get(cfg, key)).startswith("/"):
            sys.exit(f"(NeMo-RL test double) {key}={get(cfg, key)} is relative: it would land in the checkout; "
                     "pass an absolute path on the shared mount")
    exp = Path(str(get(cfg, "checkpointing.checkpoint_dir"))).parent  # <mount>/nemo-rl/<experiment>
    out = [f"name={json.dumps(exp.name)}"]
    out += [f"{dst}={json.dumps(get(cfg, src))}" for src, dst in TO_REHEARSAL.items() if lookup(cfg, src)[0]]
    return exp.parent, out


def main(argv: list[str] | None = None, script: str = "examples/run_grpo.py") -> int:
    import importlib
    import os

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="examples/configs/grpo_math_1B.yaml")
    args, overrides = ap.parse_known_args(argv)
    cfg = apply_hydra_overrides(load_config(args.config), overrides)
    name, fqn, env_cfg = environment(cfg, script)
    print(f"(NeMo-RL test double) {release()} {script}: environment {name} ({fqn})", flush=True)
    if os.environ.get("NEMO_RL_SIM_ENV_ONLY") == "1":
        print("ENVIRONMENT=" + json.dumps({"name": name, "fqn": fqn, "config": env_cfg}), flush=True)
        return 0
    runs_dir, rehearsal_overrides = rehearsal_args(cfg)
    if fqn.startswith("nbtools.") and isinstance(env_cfg, dict) and env_cfg.get("reward_functions"):
        if env_cfg.get("module"):
            importlib.import_module(env_cfg["module"])  # the user's rewards, shipped in py_modules
        rehearsal_overrides.append(f"rehearsal.reward_functions={json.dumps(env_cfg['reward_functions'])}")
    print(f"(NeMo-RL test double) {args.config} + {len(overrides)} overrides -> nbtools rehearsal "
          f"({' '.join(rehearsal_overrides)})", flush=True)
    import_nbtools()
    from nbtools.rehearsal._launch import main as rehearse

    rc = rehearse(["--config", sim()["rehearsal_config"], "--runs-dir", str(runs_dir), *rehearsal_overrides])
    if not facts(release())["writes_val_dumps"]:  # the release logs train_data_step{N}.jsonl only
        for p in Path(str(get(cfg, "logger.log_dir"))).glob("exp_*/val_data_step*.jsonl"):
            p.unlink()
    return rc


if __name__ == "__main__":
    sys.exit(main())
