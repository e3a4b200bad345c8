"""Inside a NeMo-RL job: an environment that scores responses with an nbtools reward mix (the notebook's registry).

Why: NeMo-RL's math environment has no pluggable reward list (only the VLM environment reads ``reward_functions``),
and editing ``nemo_rl/environments/rewards.py`` on a cluster (tutorial 000) does not survive a pod. The entry
scripts that look the environment up by name are the hook: ``create_env(env_name, ...)`` takes the actor class named
by ``ENV_REGISTRY[env_name]["actor_class_fqn"]`` (``nemo_rl/environments/utils.py``, with ``register_env``) and its
``py_executable`` from ``ACTOR_ENVIRONMENT_REGISTRY`` (``nemo_rl/distributed/ray_actor_environment_registry.py``);
the data config picks the name (``data.env_name`` in v0.5.0, ``data.default.env_name`` in v0.7.0) and ``env.<name>``
is the actor's config. Not every script does: v0.5.0's ``examples/run_grpo_math.py`` builds ``MathEnvironment``
itself and never reads ``data.env_name``, so on v0.5.0 a reward mix launches ``examples/run_grpo.py``, which calls
``create_env`` (``nbtools.trainers.nemo_rl.entry_script``; NVIDIA-NeMo/RL v0.5.0, both files). ``python -m nbtools.rewards.nemo_rl_env <entry script> <args>`` registers this module's
environment in both registries, then runs the entry script unchanged. The user's reward module and nbtools travel
in the job's ``runtime_env`` ``py_modules``, which the environment actor inherits; importing the module runs its
``@nbtools.rewards.register`` decorators, so the mix is built from the same registry the local rehearsal uses.

Example (what the launch command becomes):
    cd /opt/nemo-rl && python -u -m nbtools.rewards.nemo_rl_env examples/run_grpo.py --config ... \\
        data.default.env_name=nbtools_reward '+env.nbtools_reward={module:my_rewards,reward_functions:[...]}'
"""

from __future__ import annotations

import importlib
import os
import runpy
import sys
from typing import Any, NamedTuple

# RewardMixEnvironment: built on first access by the module __getattr__ below
__all__ = ["ENV_NAME", "ENV_FQN", "EnvironmentReturn", "RewardMixEnv", "RewardMixEnvironment", "register", "main"]  # noqa: F822

ENV_NAME = "nbtools_reward"
ENV_FQN = "nbtools.rewards.nemo_rl_env.RewardMixEnvironment"


class EnvironmentReturn(NamedTuple):
    """Field for field NeMo-RL's ``nemo_rl.environments.interfaces.EnvironmentReturn`` (its rollouts unpack the six
    in this order), so this module imports nothing from NeMo-RL at class-definition time."""

    observations: list[dict[str, str]]
    metadata: list[Any]
    next_stop_strings: list[Any]
    rewards: Any  # torch.Tensor [B]
    terminateds: Any  # torch.Tensor [B]
    answers: list[str | None] | None = None


def _response(message_log: list[dict[str, Any]]) -> str:
    """All assistant turns of one sample, joined (NeMo-RL's math environment does the same)."""
    return "".join(str(m["content"]) for m in message_log if m.get("role") == "assistant")


class RewardMixEnv:
    """One NeMo-RL environment step: each response scored by ``combine(reward_functions)`` against its ground truth.

    Args:
        cfg: ``env.nbtools_reward``: ``{"reward_functions": [{name, weight, kwargs}], "module": "<import name>"}``.

    Example:
        >>> env = RewardMixEnv({"reward_functions": [{"name": "exact_alnum", "weight": 1.0}]})
        >>> env.step([[{"role": "assistant", "content": "<answer>7</answer>"}]], [{"ground_truth": "7"}]).rewards
        tensor([1.])
    """

    def __init__(self, cfg: dict[str, Any]):
        from nbtools.rewards._mix import combine

        module = cfg.get("module")
        if module:
            importlib.import_module(module)  # runs the user's @nbtools.rewards.register(...) decorators
        self.mix = combine(list(cfg["reward_functions"]))

    def step(self, message_log_batch: list[list[dict[str, Any]]], metadata: list[Any]) -> EnvironmentReturn:
        import torch

        scores = [self.mix(str((md or {}).get("ground_truth", "")), _response(log))
                  for log, md in zip(message_log_batch, metadata, strict=True)]
        ok = [c if c is not None else s > 0 for s, c in scores]
        n = len(scores)
        return EnvironmentReturn(
            observations=[{"role": "environment", "content": f"Environment: {'correct' if x else 'incorrect'}"} for x in ok],
            metadata=list(metadata),
            next_stop_strings=[None] * n,
            rewards=torch.tensor([s for s, _ in scores], dtype=torch.float32),
            terminateds=torch.ones(n, dtype=torch.float32),
            answers=[None] * n,
        )

    def global_post_process_and_metrics(self, batch: Any) -> tuple[Any, dict[str, float]]:
        rewards = batch["rewards"]
        return batch, {"accuracy": float(rewards.float().mean()) if len(rewards) else 0.0}

    def shutdown(self) -> None:
        return None


def _remote_class():
    try:
        import ray
    except ImportError:  # pragma: no cover - ray is a dependency of nbtools and of every NeMo-RL image
        return None
    return ray.remote(RewardMixEnv)


def __getattr__(name: str) -> Any:
    """``RewardMixEnvironment`` (what ENV_REGISTRY[ENV_NAME]["actor_class_fqn"] names), built on first access: importing
    ray costs about 2 s of CPU, which every ``nbtools`` command and kernel that imports this module would pay."""
    if name == "RewardMixEnvironment":
        cls = globals()["RewardMixEnvironment"] = _remote_class()
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register() -> None:
    """Make NeMo-RL's ``create_env(ENV_NAME, ...)`` build :class:`RewardMixEnvironment` (in this driver process)."""
    from nemo_rl.distributed import ray_actor_environment_registry as actors
    from nemo_rl.distributed.virtual_cluster import PY_EXECUTABLES
    from nemo_rl.environments import utils as envs

    if ENV_NAME not in envs.ENV_REGISTRY:
        envs.ENV_REGISTRY[ENV_NAME] = {"actor_class_fqn": ENV_FQN}
    # the actor runs in the driver's own interpreter (PY_EXECUTABLES.SYSTEM), like NeMo-RL's math environment
    actors.ACTOR_ENVIRONMENT_REGISTRY.setdefault(ENV_FQN, PY_EXECUTABLES.SYSTEM)


def main(argv: list[str] | None = None) -> None:
    """``python -m nbtools.rewards.nemo_rl_env <entry script> [args...]``: register, then run the script as __main__."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        sys.exit("usage: python -m nbtools.rewards.nemo_rl_env examples/run_grpo.py --config <yaml> [overrides...]")
    script, rest = args[0], args[1:]
    register()
    sys.argv = [script, *rest]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
