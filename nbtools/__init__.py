"""nbtools: GRPO post-training with NeMo-RL / verl on Ray, from a notebook.

Submodules load on first use (``nbtools.config``, ``nbtools.jobs``, ...), so ``import nbtools`` stays fast and a
missing optional dependency only matters where it is needed.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_SUBMODULES = {
    "config", "errors", "gke", "manifests", "backends", "kube", "storage", "tensorboard", "jobs", "launch",
    "rehearsal", "trajectories", "metrics", "checkpoints", "evals", "rewards", "plots", "widgets", "explorer", "curves", "demo", "cli", "fit",
    "card", "health",
}

__all__ = sorted(_SUBMODULES) + ["__version__"]


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"nbtools.{name}")
    raise AttributeError(f"module 'nbtools' has no attribute {name!r}; available: {', '.join(sorted(_SUBMODULES))}")
