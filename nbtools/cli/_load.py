"""The CLI's one way to load an experiment: the YAML, ``--backend`` and ``key=value`` overrides."""

from __future__ import annotations

__all__ = ["load_cfg"]


def load_cfg(a):
    """The experiment: YAML + ``--backend`` + ``key=value`` overrides (values parsed as YAML, like NeMo-RL)."""
    from nbtools import config
    from nbtools.cli._kinds import EXPERIMENT, MISSING, kind_of
    from nbtools.config import load_yaml
    from nbtools.errors import ConfigError, NotFoundError, Problem

    kind = kind_of(a.experiment)  # a run dir, a logs dir or a job log where the experiment file belongs
    if kind not in (EXPERIMENT, MISSING) and not str(a.experiment).endswith((".yaml", ".yml")):
        article = "an" if kind[0] in "aeiou" else "a"
        raise NotFoundError(f"EXPERIMENT.yaml {a.experiment}: expected an experiment file, found {article} {kind}",
                            fix="pass the experiment's YAML, e.g. experiments/local.yaml (a merged model keeps a copy "
                                "beside it: merged_hf/experiment.yaml)")

    overrides, problems = {}, []
    for ov in a.overrides:  # main() already refused anything that is not KEY=VALUE (exit 2)
        key, _, value = ov.partition("=")
        try:
            overrides[key.strip()] = load_yaml(value, what="the value")
        except ConfigError as e:  # the value is never echoed: it may be a secret
            first = e.problems[0]
            problems.append(Problem(f"{key.strip()}=…", None, None,
                                    first.fix or f"write a plain value, or quote it as a string: {key.strip()}='…'",
                                    what=first.text))
    if problems:
        raise ConfigError(problems)
    return config.load(a.experiment, backend=a.backend, overrides=overrides)
