"""Ship the user's reward module with the GRPO job: its ``py_modules`` entry and the NeMo-RL overrides that use it.

Why: a reward written in notebook 08 lives in a module next to the notebook; the NeMo-RL job on the cluster needs the
same code and the same mix. This composes with the job's own carrying of nbtools (``runtime_env["py_modules"]``):
``reward_py_modules(cfg)`` is the one extra entry, ``reward_overrides(cfg)`` the (key, value) pairs NeMo-RL needs, and
``nbtools.rewards.nemo_rl_env`` the wrapper the command runs (see its docstring for NeMo-RL's environment hook).

Example:
    >>> nbtools.rewards.reward_py_modules(cfg)          # [<run_dir>/py_modules/my_rewards] (a package)
    >>> nbtools.rewards.reward_overrides(cfg)[0]
    ('data.default.env_name', 'nbtools_reward')
"""

from __future__ import annotations

import importlib
import keyword
import sys
from pathlib import Path
from typing import Any

from nbtools import _atomic
from nbtools.config import Experiment
from nbtools.errors import ConfigError
from nbtools.rewards.nemo_rl_env import ENV_NAME

__all__ = ["reward_module_path", "reward_module_name", "reward_py_modules", "reward_env_config", "reward_overrides",
           "check_rewards", "ENTRY_MODULE"]

ENTRY_MODULE = "nbtools.rewards.nemo_rl_env"
# Where the data config names the environment: v0.5.0's flat data schema vs the nested one of v0.6+
# (tests/assets/nemo-rl/<tag>/examples/configs/grpo_math_1B.yaml: `data.env_name: "math"` / `data.default.env_name`).
ENV_NAME_KEY = {"v0.5.0": "data.env_name", "v0.7.0": "data.default.env_name"}


def reward_module_path(cfg: Experiment) -> Path | None:
    """``trainer.reward_module`` resolved against the experiment file: a ``.py`` file or a package directory."""
    spec = cfg.trainer.reward_module
    if not spec:
        return None
    p = Path(spec).expanduser()
    if not p.is_absolute():
        p = (Path(cfg.source).parent if cfg.source else Path.cwd()) / p
    p = p.resolve()
    if not (p.is_file() and p.suffix == ".py") and not (p.is_dir() and (p / "__init__.py").is_file()):
        raise ConfigError(
            f"trainer.reward_module: {spec!r} resolves to {p}, which is neither a .py file nor a package directory "
            "(with __init__.py); fix: point it at the module that registers your rewards, relative to the experiment file",
            source=cfg.source,
        )
    name = reward_module_name(p)
    if not name.isidentifier() or keyword.iskeyword(name) or name in sys.stdlib_module_names or name == "nbtools":
        raise ConfigError(f"trainer.reward_module: {p.name!r} cannot be imported as module {name!r} on the cluster; fix: "
                          "rename it to a plain identifier that is not a standard-library or nbtools name, e.g. my_rewards.py",
                          source=cfg.source)
    return p


def reward_module_name(path: Path) -> str:
    """The import name the module has on the cluster (``py_modules`` keeps the file or directory name)."""
    return path.stem if path.is_file() else path.name


def reward_py_modules(cfg: Experiment) -> list[str]:
    """The extra ``runtime_env["py_modules"]`` entry: the user's reward module as a package directory ([] when none).

    Ray's Jobs SDK uploads ``py_modules`` entries as directories (a single ``.py`` path is refused by
    ``JobSubmissionClient``), so a module file is staged as ``<run_dir>/py_modules/<name>/__init__.py``, refreshed
    from the file on every call; ``import <name>`` on the cluster then finds the same code.
    """
    p = reward_module_path(cfg) if cfg.trainer.reward_functions else None
    if p is None:
        return []
    if p.is_dir():
        return [str(p)]
    pkg = cfg.run_dir / "py_modules" / reward_module_name(p)
    pkg.mkdir(parents=True, exist_ok=True)
    _atomic.write_text(pkg / "__init__.py", f"# staged by nbtools from {p.name} (trainer.reward_module); edit that "
                       "file, not this one\n" + p.read_text())
    return [str(pkg)]


def reward_env_config(cfg: Experiment) -> dict[str, Any]:
    """``env.nbtools_reward``: the mix spec and the module to import before building it."""
    out: dict[str, Any] = {"reward_functions": [
        {"name": s["name"], "weight": s.get("weight", 1.0), "kwargs": dict(s.get("kwargs") or {})}
        for s in cfg.trainer.reward_functions
    ]}
    p = reward_module_path(cfg)
    if p is not None:
        out["module"] = reward_module_name(p)
    return out


def reward_overrides(cfg: Experiment) -> list[tuple[str, Any]]:
    """(key, value) pairs that route every sample's reward through the nbtools environment; [] without rewards."""
    if not cfg.trainer.reward_functions:
        return []
    return [(ENV_NAME_KEY[cfg.images.nemo_rl_version], ENV_NAME), (f"env.{ENV_NAME}", reward_env_config(cfg))]


def check_rewards(cfg: Experiment):
    """Build the mix here, as the job will (importing the module registers its rewards): unknown names and bad kwargs
    fail now, not minutes into the job. Returns the :class:`RewardMix`.

    Example:
        >>> nbtools.rewards.check_rewards(cfg).table()
    """
    from nbtools.rewards._mix import combine

    p = reward_module_path(cfg)
    if p is not None:
        parent = str(p.parent)
        added = parent not in sys.path
        if added:
            sys.path.insert(0, parent)
        try:
            module = importlib.import_module(reward_module_name(p))
            if Path(getattr(module, "__file__", "") or "").resolve().parent not in (p.parent, p):
                raise ConfigError(f"trainer.reward_module: importing {reward_module_name(p)!r} found "
                                  f"{module.__file__}, not {p}; fix: rename your module so it does not shadow another one")
        finally:
            if added:
                sys.path.remove(parent)
    return combine(list(reward_env_config(cfg)["reward_functions"]))
