"""Reward functions with NeMo-RL's signature, weighted mixes, GRPO advantages and re-scoring of stored runs.

Every reward is ``fn(ground_truth: str, response: str, **kwargs) -> tuple[float, bool | None]``. ``format``,
``math_expr`` and ``exact_alnum`` are NeMo-RL's names (its VLM environment's ``reward_functions`` also has
``bbox_giou``: NVIDIA-NeMo/RL v0.5.0 and v0.7.0 ``nemo_rl/environments/vlm_environment.py``); ``exact_answer`` and
``length_penalty`` are nbtools' own names, which no NeMo-RL config knows; add your own with ``@nbtools.rewards.register("name")`` and mix them with NeMo-RL's YAML shape::

    mix = nbtools.rewards.combine([{"name": "format", "weight": 0.2}, {"name": "exact_alnum", "weight": 0.8}])
    result = nbtools.rewards.rescore(run.read(), mix, cfg=cfg)

To use the same mix in a NeMo-RL run on a cluster, set ``trainer.reward_module`` (the file that registers your
rewards) and ``trainer.reward_functions`` (the spec): the job carries the module (``reward_py_modules``) and NeMo-RL
scores with it through ``nbtools.rewards.nemo_rl_env`` (``reward_overrides``).

The plot of a re-scoring lives in the display module ``nbtools.rewards.display`` (loaded on first use).
"""

from __future__ import annotations

import importlib

from nbtools.rewards import _builtins
from nbtools.rewards._advantages import (
    AdvantageRule,
    group_advantages,
    group_baseline_std,
    verl_grpo_advantages,
)
from nbtools.rewards._builtins import (
    exact_alnum,
    exact_answer,
    format_reward,
    length_penalty,
    math_expr,
    verl_gsm8k,
)
from nbtools.rewards._mathverify import grade as math_verify_grade
from nbtools.rewards._mix import Component, RewardMix, combine
from nbtools.rewards._registry import RewardFn, available, get, register, unregister
from nbtools.rewards._rescore import RescoreResult, assign_groups, rescore
from nbtools.rewards._run import ground_truth, trained_with
from nbtools.rewards._ship import (
    ENTRY_MODULE,
    check_rewards,
    reward_env_config,
    reward_module_path,
    reward_overrides,
    reward_py_modules,
)
from nbtools.rewards._text import (
    Segment,
    extract_answer,
    gsm8k_answer,
    last_boxed,
    split_think_answer,
    tag_segments,
    tag_span,
)

__all__ = [
    "ENTRY_MODULE",
    "ground_truth",
    "trained_with",
    "RewardFn",
    "register",
    "unregister",
    "get",
    "available",
    "combine",
    "RewardMix",
    "Component",
    "AdvantageRule",
    "group_advantages",
    "verl_grpo_advantages",
    "group_baseline_std",
    "extract_answer",
    "gsm8k_answer",
    "split_think_answer",
    "tag_span",
    "Segment",
    "tag_segments",
    "last_boxed",
    "format_reward",
    "math_expr",
    "exact_answer",
    "verl_gsm8k",
    "exact_alnum",
    "length_penalty",
    "math_verify_grade",
    "rescore",
    "RescoreResult",
    "assign_groups",
    "reward_py_modules",
    "reward_overrides",
    "reward_env_config",
    "reward_module_path",
    "check_rewards",
]

del _builtins  # imported for its registrations


def __getattr__(name: str):
    if name == "display":  # display layer: imported on demand, never by the data code above
        return importlib.import_module("nbtools.rewards.display")
    raise AttributeError(f"module 'nbtools.rewards' has no attribute {name!r}")
