"""What each NeMo-RL release does with a command line: the ONE table the NeMo-RL test doubles behave by.

TEST DATA, not nbtools: every fact names where it was read (NVIDIA-NeMo/RL at the tag, the path), so a stand-in
built on it ignores or rejects what the real release would, and a launch that relies on something the release does
not do fails in the tests as it would on the cluster. nbtools keeps its own tables (``nbtools/config/_tables.py``
and friends); tests compare the two, they never share one.

Tags: v0.5.0 = commit 6c7089300fded94abfa49bb9cbf9eb357d862461, v0.7.0 = commit 81aa43dda4765b0429cf31dab44441e4e4383911.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RELEASES", "MATH_ENV_FQN", "facts", "script_facts"]

MATH_ENV_FQN = "nemo_rl.environments.math_environment.MathEnvironment"
_V05_ENVS = {"math_default": MATH_ENV_FQN, "math": MATH_ENV_FQN,
             "code": "nemo_rl.environments.code_environment.CodeEnvironment",
             "reward_model": "nemo_rl.environments.reward_model_environment.RewardModelEnvironment",
             "code_jaccard": "nemo_rl.environments.code_jaccard_environment.CodeJaccardEnvironment"}

RELEASES: dict[str, dict[str, Any]] = {
    "v0.5.0": {
        "scripts": {
            # setup_data builds MathEnvironment.options(...).remote(env_configs["math"]) itself: data.env_name is
            # never read, create_env never called
            "examples/run_grpo_math.py": {
                "env_name_key": None, "fixed_env": "math",
                "source": ("v0.5.0", "examples/run_grpo_math.py"),
            },
            # setup_data: env_name = data_config["env_name"]; create_env(env_name=env_name, env_configs=env_configs)
            "examples/run_grpo.py": {
                "env_name_key": "data.env_name", "fixed_env": None,
                "source": ("v0.5.0", "examples/run_grpo.py"),
            },
        },
        # ENV_REGISTRY before any register_env: name -> actor_class_fqn (nemo_rl/environments/utils.py)
        "registered_envs": {**_V05_ENVS},
        "registry_source": ("v0.5.0", "nemo_rl/environments/utils.py"),
        # the data config is flat (dataset_name, prompt_file, env_name ...): no data.validation / data.train sections
        "data_sections": False,
        "data_source": ("v0.5.0", "examples/configs/grpo_math_1B.yaml"),
        # grpo.py calls log_batched_dict_as_jsonl only for train_data_step{N}.jsonl; no baseline_reward metrics
        "writes_val_dumps": False,
        "logs_baseline_reward": False,
        "artifacts_source": ("v0.5.0", "nemo_rl/algorithms/grpo.py"),
    },
    "v0.7.0": {
        "scripts": {
            # setup_response_data (nemo_rl/data/utils.py): data.default is merged into each data.train entry, then
            # create_env per extract_necessary_env_names(data_config) and task_to_env[...] = envs[cfg["env_name"]]
            "examples/run_grpo.py": {
                "env_name_key": "data.default.env_name", "fixed_env": None,
                "per_dataset_keys": ("data.train.env_name", "data.validation.env_name"),
                "source": ("v0.7.0", "examples/run_grpo.py + nemo_rl/data/utils.py"),
            },
        },
        # v0.7.0 adds math_multi_reward, vlm and nemo_gym (nemo_rl/environments/utils.py at commit 81aa43dd)
        "registered_envs": {**_V05_ENVS,
                            "math_multi_reward": "nemo_rl.environments.math_environment.MathMultiRewardEnvironment",
                            "vlm": "nemo_rl.environments.vlm_environment.VLMEnvironment",
                            "nemo_gym": "nemo_rl.environments.nemo_gym.NemoGym"},
        "registry_source": ("v0.7.0", "nemo_rl/environments/utils.py"),
        "data_sections": True,
        "data_source": ("v0.7.0", "examples/configs/grpo_math_1B.yaml"),
        # grpo.py:3280 logger.log_batched_dict_as_jsonl(val_log_data, f"val_data_step{step}.jsonl");
        # grpo.py:1981 "train/baseline_reward/histogram" and baseline_reward/pct_* metrics
        "writes_val_dumps": True,
        "logs_baseline_reward": True,
        "artifacts_source": ("v0.7.0", "nemo_rl/algorithms/grpo.py"),
    },
}


def facts(release: str) -> dict[str, Any]:
    """The row of ``release``; an unknown release is an error (the doubles only know what was read at a tag)."""
    if release not in RELEASES:
        raise KeyError(f"no facts for NeMo-RL {release!r}: add a row read from the release's source ({sorted(RELEASES)})")
    return RELEASES[release]


def script_facts(release: str, script: str) -> dict[str, Any] | None:
    """How ``script`` (``examples/run_grpo.py``) picks its environment on ``release``; None when the release lacks it."""
    return facts(release)["scripts"].get(script.removeprefix("./"))
