"""``experiment.yaml`` beside the card: the experiment as it ran, without the sections its backend never read.

Why: a local rehearsal's config still carries the GKE defaults (B200 nodes, spot, 1800Gi); saved as they are, the
card's file would say the model was trained on hardware it never saw. A section the run did not use is left out when
it holds only defaults (reloading fills the same defaults, so the config hash stays), and kept under a comment saying
it was not used when someone set it (so the file still reloads to the same experiment).

Example:
    >>> text = experiment_yaml(cfg, redacted_dict)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

__all__ = ["unused_sections", "experiment_yaml"]

def unused_sections(cfg: Any) -> tuple[str, ...]:
    """The config sections this run's backend did not read (its ``unread_sections``)."""
    from nbtools import backends

    return backends.backend_class(cfg.backend).unread_sections


def _defaults(cfg: Any, name: str) -> dict[str, Any]:
    field = next(f for f in dataclasses.fields(cfg) if f.name == name)
    return dataclasses.asdict(field.default_factory())


def experiment_yaml(cfg: Any, data: dict[str, Any], header: str) -> str:
    """``header`` then the YAML of ``data`` (the redacted ``to_dict(cfg)``), the unused sections dropped or marked."""
    unused = [s for s in unused_sections(cfg) if s in data]
    set_by_user = [s for s in unused if data[s] != _defaults(cfg, s)]
    used = {k: v for k, v in data.items() if k not in unused}
    text = header + yaml.safe_dump(used, sort_keys=False)
    dropped = [s for s in unused if s not in set_by_user]
    if dropped:
        text += (f"# Not used by this run (backend {cfg.backend}), left out: {', '.join(dropped)} "
                 "(their defaults reload unchanged).\n")
    if set_by_user:
        text += (f"# Set in the experiment but NOT used by this run (backend {cfg.backend}); kept so the file reloads "
                 "to the same experiment:\n" + yaml.safe_dump({s: data[s] for s in set_by_user}, sort_keys=False))
    return text
