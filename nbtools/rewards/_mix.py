"""Weighted reward mixes configured like NeMo-RL's ``reward_functions: [{name, weight, kwargs}]``."""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd

from nbtools.errors import ConfigError, NotFoundError
from nbtools.rewards._registry import RewardFn, available, get, is_builtin, reward_parameters

__all__ = ["Component", "RewardMix", "combine"]

_ITEM_KEYS = {"name", "weight", "kwargs"}


@dataclass(frozen=True)
class Component:
    """One reward in a mix: its name, function, the weight as configured and the kwargs bound to it."""

    name: str
    fn: RewardFn = field(repr=False)
    weight: float
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, ground_truth: str, response: str) -> tuple[float, bool | None]:
        out = self.fn(ground_truth, response, **self.kwargs)
        if isinstance(out, tuple) and len(out) == 2:
            score, correct = out
        else:  # a bare number: accept it, correctness unknown
            score, correct = out, None
        return float(score), (None if correct is None else bool(correct))


@dataclass(frozen=True)
class RewardMix:
    """A weighted sum of rewards; weights are renormalised to sum to 1 as NeMo-RL's ``combine_reward_functions``.

    ``mix(ground_truth, response) -> (reward, is_correct)`` where ``is_correct`` is the AND of the components'
    non-None flags, or None when every component returns None (NeMo-RL returns True there: ``all([])``).

    Example:
        >>> mix = combine([{"name": "format", "weight": 0.2}, {"name": "exact_alnum", "weight": 0.8}])
        >>> mix("7", "<think>max</think> <answer>7</answer>")
        (1.0, True)
    """

    components: tuple[Component, ...]

    @property
    def weights(self) -> np.ndarray:
        """Renormalised weights, in component order."""
        w = np.array([c.weight for c in self.components], dtype=float)
        return w / w.sum()

    @property
    def names(self) -> list[str]:
        """Component names, in order."""
        return [c.name for c in self.components]

    @property
    def labels(self) -> list[str]:
        """Unique column labels, in order: each name, and ``name#2``, ``name#3`` … where a name comes again (NeMo-RL
        takes the same reward twice, e.g. with other kwargs) or is ``reward``/``correct`` (the mix's own columns)."""
        out, seen = [], {"reward": 1, "correct": 1}
        for name in self.names:
            seen[name] = seen.get(name, 0) + 1
            out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
        return out

    def spec(self) -> list[dict[str, Any]]:
        """The NeMo-RL YAML spec this mix came from (weights as configured)."""
        return [{"name": c.name, "weight": c.weight, "kwargs": dict(c.kwargs)} for c in self.components]

    def __call__(self, ground_truth: str, response: str) -> tuple[float, bool | None]:
        parts = [c(ground_truth, response) for c in self.components]
        total = float(np.dot(self.weights, [p[0] for p in parts]))
        flags = [p[1] for p in parts if p[1] is not None]
        return total, (all(flags) if flags else None)

    def score_components(
        self, ground_truths: str | Sequence[str], responses: Sequence[str], *, progress: bool = False
    ) -> pd.DataFrame:
        """Per-component raw scores for many samples (one column per component, named by :attr:`labels`, plus
        ``reward`` and ``correct``).

        Identical (ground truth, response) pairs are graded once.

        Example:
            >>> mix.score_components(["7", "3"], ["<answer>7</answer>", "<answer>4</answer>"])["reward"].tolist()
            [0.95, 0.15]
        """
        responses = list(responses)
        gts = [ground_truths] * len(responses) if isinstance(ground_truths, str) else list(ground_truths)
        if len(gts) != len(responses):
            raise ConfigError(
                f"score: expected one ground truth per response, got {len(gts)} ground truths for "
                f"{len(responses)} responses; fix: pass a single string or a list of the same length"
            )
        memo: dict[tuple[str, str], list[tuple[float, bool | None]]] = {}
        rows = []
        pairs = zip(gts, responses, strict=True)
        if progress:
            from nbtools._progress import tqdm

            pairs = tqdm(pairs, total=len(responses), desc="scoring", unit="sample", delay=1.0)
        for gt, resp in pairs:
            key = (gt, resp)
            if key not in memo:
                memo[key] = [c(gt, resp) for c in self.components]
            rows.append(memo[key])
        scores = np.array([[p[0] for p in r] for r in rows], dtype=float).reshape(
            len(rows), len(self.components)
        )
        df = pd.DataFrame(scores, columns=self.labels)
        df["reward"] = scores @ self.weights
        correct = []
        for r in rows:
            flags = [p[1] for p in r if p[1] is not None]
            correct.append(all(flags) if flags else None)
        df["correct"] = pd.array(correct, dtype="boolean")
        return df

    def score(self, ground_truths: str | Sequence[str], responses: Sequence[str]) -> np.ndarray:
        """Mixed rewards for many samples as a float array (the trainer's fast path).

        Example:
            >>> mix.score("7", ["<answer>7</answer>", "no tags"])
            array([0.95, 0.  ])
        """
        return self.score_components(ground_truths, responses)["reward"].to_numpy(dtype=float)

    def table(self) -> pd.DataFrame:
        """The mix as a table: name, weight, normalised weight, kwargs."""
        return pd.DataFrame(
            {
                "name": self.names,
                "weight": [c.weight for c in self.components],
                "normalized": self.weights,
                "kwargs": [dict(c.kwargs) for c in self.components],
            }
        )

    def _repr_html_(self) -> str:
        return f"<b>RewardMix</b> ({len(self.components)} rewards){self.table().to_html(index=False)}"

    def __repr__(self) -> str:
        parts = ", ".join(f"{c.name}×{w:.3g}" for c, w in zip(self.components, self.weights, strict=True))
        return f"RewardMix({parts})"


def _check_kwargs(label: str, fn: RewardFn, kwargs: Mapping[str, Any]) -> list[str]:
    names, var_kw = reward_parameters(fn)
    if var_kw:
        return []
    unknown = sorted(set(kwargs) - set(names))
    if unknown:
        params = ", ".join(names) if names else "(none)"
        return [
            f"{label}: unknown kwargs {unknown}; {getattr(fn, '__name__', label)} accepts: {params}; "
            "fix: remove them or use one of those names"
        ]
    try:
        inspect.signature(fn).bind("", "", **kwargs)
    except (TypeError, ValueError) as e:
        return [f"{label}: kwargs {dict(kwargs)} do not fit {fn.__name__}{inspect.signature(fn)}: {e}"]
    return []


def _parse_item(i: int, item: Any, problems: list[str]) -> Component | None:
    if isinstance(item, RewardMix):
        problems.append(f"reward_functions[{i}]: nested RewardMix; fix: list the items of its spec instead")
        return None
    if not isinstance(item, Mapping):
        problems.append(f"reward_functions[{i}]: expected a mapping {{name, weight, kwargs}}, got {item!r}")
        return None
    extra = sorted(set(item) - _ITEM_KEYS)
    if extra:
        problems.append(f"reward_functions[{i}]: unknown keys {extra}; allowed: name, weight, kwargs")
    name, fn = item.get("name"), None
    if callable(name):
        fn, name = name, getattr(name, "__name__", f"reward_{i}")
    elif isinstance(name, str):
        try:
            fn = get(name)
        except NotFoundError:
            problems.append(
                f"reward_functions[{i}]: unknown reward {name!r}; known: {', '.join(available())}; "
                "fix: use a known name or register yours with the @nbtools.rewards.register decorator"
            )
    else:
        problems.append(f"reward_functions[{i}]: 'name' must be a registered name, got {name!r}")
    weight = item.get("weight")
    if (
        isinstance(weight, bool)
        or not isinstance(weight, (int, float))
        or not math.isfinite(weight)
        or weight < 0
    ):
        problems.append(
            f"reward_functions[{i}] ({name}): weight must be a finite number >= 0, got {weight!r}"
        )
        weight = None
    kwargs = item.get("kwargs") or {}
    if not isinstance(kwargs, Mapping):
        problems.append(f"reward_functions[{i}] ({name}): kwargs must be a mapping, got {kwargs!r}")
        kwargs = None
    if fn is not None and kwargs is not None:
        found = _check_kwargs(f"reward_functions[{i}] ({name})", fn, kwargs)
        problems.extend(found)
        if not found and is_builtin(fn):
            try:  # built-ins reject bad values (e.g. a negative max_length) now, not mid-training
                fn("", "", **kwargs)
            except ConfigError as e:
                problems.extend(f"reward_functions[{i}] ({name}): {p}" for p in e.problems)
    if fn is None or weight is None or kwargs is None:
        return None
    return Component(name=str(name), fn=fn, weight=float(weight), kwargs=MappingProxyType(dict(kwargs)))


def combine(spec: Sequence[Mapping[str, Any]] | RewardMix) -> RewardMix:
    """Build a validated :class:`RewardMix` from NeMo-RL's ``reward_functions`` list.

    Why: the same YAML block configures the rehearsal trainer, re-scoring and NeMo-RL's VLM environment; every
    problem (unknown name, bad weight, unknown kwarg) is reported at once.

    Args:
        spec: ``[{"name": str | callable, "weight": float >= 0, "kwargs": {...}}, ...]``; weights are
            renormalised to sum to 1.

    Returns:
        The mix.

    Raises:
        ConfigError: listing every problem; unknown names list the known ones.

    Example:
        >>> mix = nbtools.rewards.combine(cfg.rehearsal.reward_functions)
        >>> mix.score(["7"], ["<think>..</think><answer>7</answer>"])
    """
    if isinstance(spec, RewardMix):
        return spec
    if isinstance(spec, (str, bytes, Mapping)) or not isinstance(spec, Sequence) or not spec:
        raise ConfigError(
            f"reward_functions: expected a non-empty list of {{name, weight, kwargs}}, got {spec!r}; "
            "fix: e.g. [{'name': 'format', 'weight': 0.2}, {'name': 'exact_alnum', 'weight': 0.8}]"
        )
    problems: list[str] = []
    parts = [_parse_item(i, item, problems) for i, item in enumerate(spec)]
    if not problems and sum(p.weight for p in parts) <= 0:
        problems.append(
            "reward_functions: weights must sum to > 0, got all zeros; fix: give one reward a weight > 0"
        )
    if problems:
        raise ConfigError(problems)
    return RewardMix(components=tuple(parts))
