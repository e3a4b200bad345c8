"""What runs a GRPO job: one interface (:class:`Trainer`), one implementation per trainer and release, and this —
the one registry.

The local backend runs the miniature rehearsal on this machine's CPUs; ``gke`` and ``ray`` run the experiment's
``trainer.kind``: NeMo-RL at ``images.nemo_rl_version`` or verl at ``trainer.verl_ref`` (``releases``: one entry per
release). A trainer owns its command and runtime env, its lint rules and config rules, its metric names, how its runs
are evaluated, and the facts a model card states; no module outside this package asks which trainer it has.

Example:
    >>> trainer = nbtools.trainers.get(cfg)
    >>> trainer.job().command
    'cd /opt/nemo-rl && python -u examples/run_grpo.py --config ...'
"""

from __future__ import annotations

import difflib

from nbtools import _trainer_folders
from nbtools.config import Experiment
from nbtools.errors import ConfigError
from nbtools.trainers._findings import Finding, LintReport, Severity
from nbtools.trainers._fit import FitProfile
from nbtools.trainers._protocol import (
    AdvantageRule,
    CodePresent,
    CodeSource,
    Hardware,
    Layout,
    OutputDirs,
    RunLayout,
    Trainer,
    TrainerJob,
)
from nbtools.trainers._rehearsal import REHEARSAL_METRICS, Rehearsal
from nbtools.trainers._tree import config_tree, known_configs

__all__ = [
    "REGISTRY", "AdvantageRule", "Trainer", "TrainerJob", "FitProfile", "CodeSource", "Hardware", "Layout", "OutputDirs", "CodePresent", "Finding", "LintReport", "Severity", "METRIC_NAMES", "METRIC_PREFIXES", "CONSOLE_LOG_FAMILY", "CITATIONS", "get",
    "names", "checks", "REHEARSAL_METRICS", "describe", "trainer_class", "config_tree", "known_configs", "register",
    "layouts", "layout", "RunLayout", "Rehearsal",
]

# The registry: ``nbtools._trainer_folders.TRAINERS`` maps each ``trainer.kind`` to its folder (``nemo_rl/``, ``verl/``);
# ``register`` adds one. What readers below the trainers need (metric names and prefixes, citations) is derived
# from the folders on first use (module ``__getattr__``), never kept in parallel tables here.
REGISTRY = _trainer_folders.TRAINERS
register = _trainer_folders.register
layouts = _trainer_folders.layouts
layout = _trainer_folders.layout


def __getattr__(name: str):
    """``METRIC_NAMES`` / ``METRIC_PREFIXES`` (by layout name), ``CITATIONS`` (by label), ``CONSOLE_LOG_FAMILY``: read
    from the registered folders, so a trainer added with :func:`register` appears in them."""
    if name == "METRIC_NAMES":
        return {n: lay.metric_names for n, lay in layouts().items()}
    if name == "METRIC_PREFIXES":
        return {n: lay.metric_prefixes for n, lay in layouts().items()}
    if name == "CITATIONS":
        return {c.label: c.citation for c in map(trainer_class, _trainer_folders.kinds()) if getattr(c, "citation", None)}
    if name == "CONSOLE_LOG_FAMILY":
        return next((n for n, lay in layouts().items() if lay.console_log), None)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def names() -> list[str]:
    """The trainer names an experiment's ``trainer.kind`` may hold."""
    return list(_trainer_folders.kinds())


def trainer_class(kind: str) -> type:
    """The implementation registered under ``kind``.

    Raises:
        ConfigError: ``kind`` is not registered (naming the allowed ones).
    """
    if kind not in _trainer_folders.kinds():
        raise ConfigError(_not_allowed(kind))
    return _trainer_folders.folder(kind).TRAINER


def _not_allowed(kind: str) -> str:
    close = difflib.get_close_matches(str(kind), list(_trainer_folders.kinds()), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (f"trainer.kind: {kind!r} is not allowed; allowed: {', '.join(repr(k) for k in _trainer_folders.kinds())}{hint}; "
            "fix: set `trainer.kind` to one of them")


def get(cfg: Experiment, backend=None) -> Trainer:
    """The trainer this experiment's jobs run: ``trainer.kind`` at its configured release, as the backend runs it
    (``Backend.job_trainer``: the local backend's CPU rehearsal stands in for it).

    Args:
        backend: the experiment's backend where the caller has it (default: ``cfg.runs_on()``).

    Example:
        >>> nbtools.trainers.get(cfg).label
        'NeMo-RL'
    """
    trainer = trainer_class(cfg.trainer.kind)(cfg)
    return (backend if backend is not None else cfg.runs_on()).job_trainer(trainer)  # as _trainer_folders.job_trainer


def checks(cfg: Experiment) -> list[tuple[tuple[str, ...], str]]:
    """Configuration problems of ``trainer.kind`` (part of ``config.load``'s report, through ``config.contribute``);
    the rehearsal's are the local backend's (``backends.rules``)."""
    if cfg.trainer.kind not in _trainer_folders.kinds():
        return [(("trainer.kind",), _not_allowed(cfg.trainer.kind))]
    return [(("trainer.kind", *deps), text) for deps, text in trainer_class(cfg.trainer.kind).check(cfg)]


def describe(cfg: Experiment) -> list[tuple[str, str]]:
    """The trainer's row in the experiment's table (``label (release)``)."""
    t = get(cfg)
    return [("trainer", f"{t.name} ({t.release})" if t.release else t.name)]
