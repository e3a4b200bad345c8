"""The local backend's miniature, real GRPO run: tiny HF Llama, FSDP2 on 2 CPU ranks, the imitated trainer's files.

Submitted as a Ray job like any NeMo-RL or verl run; what it writes under ``cfg.log_dir`` / ``cfg.checkpoint_dir``
(NeMo-RL's layout, or verl's when the experiment's ``trainer.kind`` is verl: ``writers``) is read by the same code
that reads a GKE run. The warm-started policy is saved to ``<run_dir>/baseline_hf``.

Example:
    >>> cmd = nbtools.rehearsal.entrypoint(cfg)     # what launch.build(cfg) submits for backend "local"
    >>> nbtools.rehearsal.task.held_out_problems(cfg)[:2]
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from nbtools._escape import sh
from nbtools.errors import ConfigError, Fix
from nbtools.rehearsal import task
from nbtools.rehearsal.task import Problem, baseline_dir, ground_truth_for, held_out_problems, make_split

if TYPE_CHECKING:
    from nbtools.config import Experiment

__all__ = [
    "entrypoint",
    "overrides_for",
    "task",
    "Problem",
    "make_split",
    "held_out_problems",
    "ground_truth_for",
    "baseline_dir",
]


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix[:-1]: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def overrides_for(cfg: Experiment) -> list[str]:
    """``key=value`` overrides that turn ``cfg.source``'s YAML into ``cfg`` (e.g. after ``cfg.replace``)."""
    import json

    from nbtools.config import load, to_dict

    if not cfg.source:
        raise ConfigError("rehearsal entrypoint: the config has no source YAML file (built from a dict)",
                          fix=Fix("load it with nbtools.config.load('experiments/local.yaml') and use cfg.replace(...)",
                                  cli="pass an experiment YAML file (e.g. experiments/local.yaml) and KEY=VALUE overrides"))
    base = _flat(to_dict(load(cfg.source, backend="local")))
    mine = _flat(to_dict(cfg))
    mine.pop("backend", None)
    return [f"{k}={json.dumps(v)}" for k, v in mine.items() if k not in base or base[k] != v]


def entrypoint(cfg: Experiment) -> str:
    """The job command: ``<python> -m nbtools.rehearsal --config <yaml> --runs-dir <runs> [key=value ...]``.

    Example:
        >>> nbtools.rehearsal.entrypoint(cfg.replace(**{"grpo.max_num_steps": 50}))
        '/.../python -m nbtools.rehearsal --config /.../local.yaml --runs-dir /.../runs grpo.max_num_steps=50'
    """
    parts = [sys.executable, "-m", "nbtools.rehearsal", "--config", str(cfg.source), "--runs-dir", str(cfg.runs_dir)]
    return " ".join(sh(p) for p in parts + overrides_for(cfg))
