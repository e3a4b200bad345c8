"""One typed experiment config, loaded from YAML, validated all at once.

The YAML files in ``experiments/`` are the only place a user edits; everything else (manifests, commands,
the local rehearsal) is derived from the frozen dataclass tree defined here.

Example:
    >>> cfg = nbtools.config.load("experiments/local.yaml", backend="local")
    >>> cfg.cluster.machine_type
    'a4-highgpu-8g'
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import yaml

from nbtools._atomic import write_text as _write_text
from nbtools.config._contrib import CONTRIBUTIONS, contribute
from nbtools.config._rules import SECRET_ENV_VARS, _semantic_checks
from nbtools.config._sections import (
    GPU_TYPES,
    CheckpointingConfig,
    ClusterConfig,
    DataConfig,
    Experiment,
    FaultConfig,
    GcpConfig,
    GrpoConfig,
    ImagesConfig,
    LocalConfig,
    LoggingConfig,
    LustreConfig,
    ModelConfig,
    RayConfig,
    RehearsalConfig,
    Secret,
    SecretRef,
    SecretsConfig,
    StallConfig,
    StorageConfig,
    TrainerConfig,
    _set_dotted,
    to_dict,
)
from nbtools.config._settings import ENV_BACKEND, ENV_EXPERIMENT, SETTINGS_FILE, Settings, settings
from nbtools.config._tokens import redact, scrub_secrets, secret_leaks, secret_values, token_kind
from nbtools.config._validate import Problems, _build
from nbtools.config._yaml import load_yaml, size_problem
from nbtools.errors import ConfigError, Problem

__all__ = [
    "Experiment",
    "GcpConfig",
    "ClusterConfig",
    "StorageConfig",
    "LustreConfig",
    "ImagesConfig",
    "TrainerConfig",
    "ModelConfig",
    "DataConfig",
    "GrpoConfig",
    "CheckpointingConfig",
    "LoggingConfig",
    "SecretRef",
    "SecretsConfig",
    "RayConfig",
    "LocalConfig",
    "FaultConfig",
    "RehearsalConfig",
    "StallConfig",
    "Secret",
    "GPU_TYPES",
    "load",
    "from_dict",
    "to_dict",
    "dump",
    "ConfigError",
    "Problem",
    "SECRET_ENV_VARS",
    "contribute",
    "token_kind",
    "load_yaml",
    "redact",
    "settings",
    "Settings",
    "ENV_BACKEND",
    "ENV_EXPERIMENT",
    "SETTINGS_FILE",
]


def load(path: str | os.PathLike, *, backend: str | None = None, overrides: dict[str, Any] | None = None) -> Experiment:
    """Load and validate an experiment YAML; every problem is reported at once.

    Args:
        path: the experiment YAML (``experiments/local.yaml``); ``""`` takes the shared settings
            (:func:`settings`: ``$NBTOOLS_EXPERIMENT``, else ``settings.yaml`` beside the notebook).
        backend: overrides the file's ``backend`` (the notebooks' ``BACKEND`` parameter); ``""`` takes the shared
            settings (``$NBTOOLS_BACKEND``, else ``settings.yaml``, else the file's own).
        overrides: dotted keys to change, e.g. ``{"grpo.max_num_steps": 10}``.

    Raises:
        ConfigError: listing each key, the bad value, the allowed values and the fix.

    Example:
        >>> cfg = nbtools.config.load("../experiments/local.yaml", backend="local")
        >>> cfg.submission_id
        'local-rehearsal-3f2a9c1b0d'
    """
    if path in ("", None) or backend == "":  # a notebook's empty BACKEND / CONFIG: the shared settings
        shared = settings()
        path = shared.experiment if path in ("", None) else path
        backend = shared.backend if backend == "" else backend
    p = Path(path).expanduser()
    data = load_yaml(_read(p), source=str(p)) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p} must hold a mapping at the top level, got {type(data).__name__}; fix: write the "
                          "experiment as `key: value` lines (see experiments/local.yaml)", source=str(p))
    if backend is not None:
        data["backend"] = backend
    for key, value in (overrides or {}).items():
        _set_dotted(data, key, value)
    return from_dict(data, source=str(p.resolve()))


MAX_FILE_BYTES = 4 << 20  # an experiment YAML is a few KB


def _read(p: Path) -> str:
    """The file's text, or a ConfigError naming what is wrong with the path (never a raw OSError)."""
    if p.is_dir():
        inside = sorted(x.name for x in p.glob("*.yaml"))
        hint = f", e.g. {p / inside[0]}" if inside else ""
        raise ConfigError(f"{str(p)!r} is a directory, not an experiment file; fix: pass a YAML file{hint}",
                          source=str(p))
    if not p.is_file():
        hint = ""
        near = sorted(str(x) for x in p.parent.glob("*.yaml")) if p.parent.is_dir() else []
        if near:
            hint = f"; files next to it: {', '.join(near[:10])}"
        raise ConfigError(
            f"experiment file {str(p)!r} does not exist{hint}; fix: pass the path of an experiment YAML "
            "(e.g. experiments/local.yaml), relative to the current directory",
            source=str(p),
        )
    try:
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError(f"{p} is {size:,} bytes; an experiment YAML is a few KB; fix: pass the experiment file "
                              "(e.g. experiments/local.yaml)", source=str(p))
        return p.read_bytes().decode("utf-8")
    except PermissionError:
        raise ConfigError(f"cannot read {p}: permission denied; fix: make it readable (`chmod u+r {p}`) or copy it",
                          source=str(p)) from None
    except OSError as e:
        raise ConfigError(f"cannot read {p}: {e.strerror or e}; fix: check the path", source=str(p)) from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p} is not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}); fix: pass the "
                          "experiment YAML, saved as UTF-8", source=str(p)) from None


def from_dict(data: dict[str, Any], *, source: str | None = None) -> Experiment:
    """Build and validate an :class:`Experiment` from plain data (the parsed YAML); every problem at once.

    Raises:
        ConfigError: listing each problem; type errors and cross-field rules are reported together.

    Example:
        >>> from_dict({"name": "demo", "grpo": {"max_num_steps": 5}}).grpo.max_num_steps
        5
    """
    if not isinstance(data, dict):
        raise ConfigError(f"the config must be a mapping, got {type(data).__name__}; fix: pass a dict of sections",
                          source=source)
    size = size_problem(data)
    if size:
        raise ConfigError(size, source=source)
    secrets = secret_values(data)
    leaks = secret_leaks(data, secrets)  # a pasted token never reaches a manifest, plan, message or job
    if leaks:
        raise ConfigError(leaks, source=source)
    problems = Problems()
    data = dict(data)
    data.pop("source", None)
    obj = _build(Experiment, data, problems)
    if obj is not None:
        obj = dataclasses.replace(obj, source=source)
        problems.extend(_semantic_checks(obj, problems))
    if problems:
        raise ConfigError([_scrub(p, secrets) for p in problems], source=source)
    return obj


def _scrub(p: Problem, secrets: list[str]) -> Problem:
    """The problem with every secret value the config holds masked, in each of its texts."""
    return dataclasses.replace(p, **{f: scrub_secrets(getattr(p, f), secrets) for f in ("key", "value", "allowed", "fix", "what")
                                     if getattr(p, f)})


CONTRIBUTIONS.validate = from_dict  # Experiment.replace validates again with the loader


def dump(cfg: Experiment, path: str | os.PathLike | None = None) -> str:
    """The config as YAML text (written atomically to ``path`` when given)."""
    text = yaml.safe_dump(to_dict(cfg), sort_keys=False)
    if path is not None:
        _write_text(path, text)
    return text
