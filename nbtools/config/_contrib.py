"""What the layers above the config add to it: their rules, their rows, and where a run's files are.

Why: the config is the floor (STYLE rule 17): it names no backend or trainer and imports nothing above it. The
registries (``nbtools.backends``, ``nbtools.trainers``) know what only they can check or derive; the ``nbtools``
package wires them in here once, when it is imported, so ``config.load`` reports their problems with its own and
``cfg.logs_url`` asks the backend, without the config importing either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Contributions", "contribute", "CONTRIBUTIONS"]

Rule = Callable[[Any], list[tuple[tuple[str, ...], str]]]  # cfg -> [(keys read, message naming key, value, fix)]
Rows = Callable[[Any], list[tuple[str, str]]]  # cfg -> rows for the experiment's table


@dataclass
class Contributions:
    """The rule, row and place functions the registries contributed, in the order they were added."""

    rules: dict[str, Rule] = field(default_factory=dict)
    rows: dict[str, Rows] = field(default_factory=dict)
    place: Callable[[Any], Any] | None = None  # cfg -> the object that knows log_dir, dashboard_url, storage.url
    validate: Callable[..., Any] | None = None  # config.from_dict, for Experiment.replace (set by nbtools.config)
    # ``images.nemo_rl_version`` -> that release's {image, ray, torch} (the trainer folder's release table)
    release_facts: Callable[[str], dict[str, str]] | None = None


CONTRIBUTIONS = Contributions()


def contribute(name: str, *, rules: Rule | None = None, rows: Rows | None = None,
               place: Callable[[Any], Any] | None = None,
               release_facts: Callable[[str], dict[str, str]] | None = None) -> None:
    """Add a registry's rules (part of ``load``'s report), table rows, (one registry) the run's places, and (the
    trainers) the image, Ray and torch of an ``images.nemo_rl_version``.

    Re-contributing under the same ``name`` replaces what that name gave before (safe to re-run).
    """
    if rules is not None:
        CONTRIBUTIONS.rules[name] = rules
    if rows is not None:
        CONTRIBUTIONS.rows[name] = rows
    if place is not None:
        CONTRIBUTIONS.place = place
    if release_facts is not None:
        CONTRIBUTIONS.release_facts = release_facts
