"""Test double of nemo_rl.environments.utils: the registry and create_env, as NeMo-RL writes them (../../README.md)."""

import os

from hydra.utils import get_object

from nemo_rl.distributed.ray_actor_environment_registry import get_actor_python_env

ENV_REGISTRY = {
    "math": {"actor_class_fqn": "nemo_rl.environments.math_environment.MathEnvironment"},
}


def create_env(env_name: str, env_configs: dict):
    assert env_name in ENV_REGISTRY, (
        f"Env name {env_name} is not registered in ENV_REGISTRY. Please call register_env() to register the environment."
    )
    actor_class_fqn = ENV_REGISTRY[env_name]["actor_class_fqn"]
    actor_class = get_object(actor_class_fqn)
    env = actor_class.options(
        runtime_env={
            "py_executable": get_actor_python_env(actor_class_fqn),
            "env_vars": dict(os.environ),
        }
    ).remote(env_configs[env_name])
    return env


def register_env(env_name: str, actor_class_fqn: str) -> None:
    if env_name in ENV_REGISTRY:
        raise ValueError(f"Env name {env_name} already registered")
    ENV_REGISTRY[env_name] = {"actor_class_fqn": actor_class_fqn}
