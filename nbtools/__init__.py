"""nbtools: GRPO post-training with NeMo-RL / verl on Ray, from a notebook.

Submodules load on first use (``nbtools.config``, ``nbtools.jobs``, ...), so ``import nbtools`` stays fast and a
missing optional dependency only matters where it is needed.
"""

from __future__ import annotations

import importlib
import pkgutil

from nbtools.config import contribute
from nbtools.errors import DependencyError

__version__ = "0.1.0"

# every public submodule (a module or package not named _x), found once in the package folder, not listed by hand
_SUBMODULES = {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}

__all__ = sorted(_SUBMODULES) + ["__version__"]


def _registry(name: str, function: str):
    """``nbtools.<name>.<function>``, imported on first call (so ``import nbtools`` stays light)."""
    return lambda cfg: getattr(importlib.import_module(f"nbtools.{name}"), function)(cfg)


# The composition root: the registries contribute their rules and rows to the config, and the backend says where a
# run's files are; the config (the floor, STYLE rule 17) imports neither of them.
contribute("backends", rules=_registry("backends", "rules"), rows=_registry("backends", "describe"),
           place=_registry("backends", "new"))  # built once per experiment
contribute("trainers", rules=_registry("trainers", "checks"), rows=_registry("trainers", "describe"))


def __getattr__(name: str):
    if name in _SUBMODULES:
        try:
            return importlib.import_module(f"nbtools.{name}")
        except ImportError as e:  # an optional extra not installed: say which (`pip install 'nbtools-grpo[merge]'`)
            missing = DependencyError.from_import(e, f"nbtools.{name}")
            if missing is None:
                raise
            raise missing from e
    raise AttributeError(f"module 'nbtools' has no attribute {name!r}; available: {', '.join(sorted(_SUBMODULES))}")
