"""The one table of trainers: each ``trainer.kind`` and the folder that holds everything of it.

Names only, imported on first use (fsspec's ``registry`` of dotted names), so that the readers below the trainers
(checkpoints, metrics, health, the card) can ask a run's :class:`nbtools.trainers.RunLayout` without importing the
trainers. A trainer's folder (a package: ``nbtools/trainers/<name>/``, or one of your own) exports ``TRAINER``, the
class (``nbtools.trainers.Trainer``), and ``LAYOUT``, the object that knows its runs' files and scalar names.

Example:
    >>> nbtools.trainers.register("toy", "my_project.toy_trainer")
    >>> sorted(layouts())
    ['nemo_rl', 'toy', 'verl']
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

__all__ = ["TRAINERS", "ENV", "register", "kinds", "folder", "layouts", "layout", "job_trainer", "checkpoint_step"]

# Trainers registered for this process and the jobs it starts (a rehearsal or merge runs in another process):
# ``kind=package[,kind=package]``, set by :func:`register` and read at every look-up.
ENV = "NBTOOLS_TRAINERS"

TRAINERS: dict[str, str] = {
    "nemo-rl": "nbtools.trainers.nemo_rl",
    "verl": "nbtools.trainers.verl",
}


def register(kind: str, package: str) -> None:
    """Add a trainer (``trainer.kind: <kind>``) whose folder is the importable package ``package``; re-registering a
    kind replaces it. Its folder is imported when first asked for."""
    if not kind or not package or "," in kind + package or "=" in kind + package:
        raise ValueError(f"register({kind!r}, {package!r}): expected a kind and an importable package name, e.g. "
                         "register('toy', 'my_project.toy_trainer')")
    TRAINERS[kind] = package
    mine = dict(_from_env())
    mine[kind] = package
    os.environ[ENV] = ",".join(f"{k}={v}" for k, v in mine.items())  # the jobs this process starts see it too


def _from_env() -> list[tuple[str, str]]:
    pairs = [item.partition("=") for item in os.environ.get(ENV, "").split(",") if item.strip()]
    return [(k.strip(), v.strip()) for k, sep, v in pairs if sep and k.strip() and v.strip()]


def kinds() -> dict[str, str]:
    """Every registered kind and its package: the built-in ones, then those registered (here or by the process
    that started this one, through ``NBTOOLS_TRAINERS``)."""
    for kind, package in _from_env():
        TRAINERS.setdefault(kind, package)
    return TRAINERS


def folder(kind: str) -> ModuleType:
    """The package registered under ``kind`` (a KeyError for an unknown kind: the registry names the allowed ones)."""
    return importlib.import_module(kinds()[kind])


def layouts() -> dict[str, Any]:
    """Every registered trainer's layout, by its name (the ``layout`` its trainer's runs leave)."""
    out: dict[str, Any] = {}
    for kind in list(kinds()):
        lay = folder(kind).LAYOUT
        out.setdefault(lay.name, lay)
    return out


def layout(name: str) -> Any:
    """The layout called ``name`` (``trainers.get(cfg).layout``); a KeyError naming the known ones otherwise."""
    found = layouts()
    if name not in found:
        raise KeyError(f"no trainer leaves the layout {name!r}; known: {', '.join(sorted(found))}")
    return found[name]


def job_trainer(cfg: Any) -> Any:
    """What ``cfg``'s jobs run (``nbtools.trainers.get``, which says more for an unknown kind): ``trainer.kind``'s
    class from its folder, as the experiment's backend runs it (``cfg.runs_on().job_trainer``), for the readers below
    the trainers (the rewards' re-scoring) that ask the run's trainer without importing the trainers."""
    return cfg.runs_on().job_trainer(folder(cfg.trainer.kind).TRAINER(cfg))


def checkpoint_step(name: str) -> int | None:
    """The step of a checkpoint directory called ``name`` in any registered trainer's layout (NeMo-RL's ``step_N``,
    verl's ``global_step_N``: ``RunLayout.checkpoint_step_re``), or None (``tmp_step_N`` never is one)."""
    for lay in layouts().values():
        if (m := lay.checkpoint_step_re.match(name)) is not None:
            return int(m.group(1))
    return None
