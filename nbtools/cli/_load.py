"""The CLI's one way to load an experiment: the YAML, ``--backend`` and ``key=value`` overrides."""

from __future__ import annotations

__all__ = ["load_cfg"]


def load_cfg(a):
    """The experiment: YAML + ``--backend`` + ``key=value`` overrides (values parsed as YAML, like NeMo-RL)."""
    from nbtools import config
    from nbtools.config import load_yaml
    from nbtools.errors import ConfigError

    overrides, problems = {}, []
    for ov in a.overrides:  # main() already refused anything that is not KEY=VALUE (exit 2)
        key, _, value = ov.partition("=")
        try:
            overrides[key.strip()] = load_yaml(value, what="the value")
        except ConfigError as e:  # the value is never echoed: it may be a secret
            fix = "" if e.problem_fixes else f"; fix: write a plain value, or quote it as a string: {key.strip()}='…'"
            problems.append(f"{key.strip()}=…: {e.problems[0]}{fix}")
    if problems:
        raise ConfigError(problems)
    return config.load(a.experiment, backend=a.backend, overrides=overrides)
