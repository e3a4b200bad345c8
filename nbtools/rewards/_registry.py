"""Name → reward function registry, the notebook-side twin of NeMo-RL's reward-name mapping."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from nbtools.errors import ConfigError, ConflictError, Fix, NotFoundError

__all__ = ["RewardFn", "register", "get", "available", "unregister", "reward_parameters"]

RewardFn = Callable[..., tuple[float, "bool | None"]]

_REGISTRY: dict[str, RewardFn] = {}
_BUILTIN: set[str] = set()


def _check_signature(name: str, fn: RewardFn) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins without a signature: trust the caller
        return
    try:
        sig.bind("ground_truth", "response")
    except TypeError as e:
        raise ConfigError(
            f"reward {name!r}: expected fn(ground_truth: str, response: str, **kwargs) -> (float, bool | None), "
            f"got {fn.__name__}{sig} ({e}); fix: accept the two strings first and give every other parameter a default"
        ) from None


def register(name: str, fn: RewardFn | None = None, *, replace: bool = False, _builtin: bool = False):
    """Register a reward under ``name`` so a NeMo-RL style spec ``{name, weight, kwargs}`` can use it.

    Why: users add rewards from a notebook cell instead of editing NeMo-RL's source. Re-running the cell that
    registers a user function replaces it; replacing a built-in needs ``replace=True``.

    Args:
        name: the name used in ``reward_functions`` specs.
        fn: the function; omit to use ``register`` as a decorator.
        replace: allow replacing a built-in of the same name.

    Returns:
        The function (so the decorator leaves it usable directly).

    Raises:
        ConflictError: ``name`` is a built-in and ``replace`` is False.
        ConfigError: the function does not accept ``(ground_truth, response)``.

    Example:
        >>> @register("no_swearing")
        ... def no_swearing(ground_truth, response):
        ...     return (0.0 if "damn" in response.lower() else 1.0), None
    """
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(
            f"reward name must be a non-empty string, got {name!r}",
            fix=Fix("use e.g. register('my_reward')", cli="name the reward, e.g. my_reward"),
        )

    def deco(f: RewardFn) -> RewardFn:
        if not callable(f):
            raise ConfigError(f"reward {name!r}: expected a callable, got {type(f).__name__}")
        if name in _BUILTIN and not (replace or _builtin):
            raise ConflictError(
                f"{name!r} is a built-in reward; expected a new name, got an existing one",
                fix=Fix(f"pick another name, or pass replace=True to shadow the built-in {name!r}",
                        cli=f"pick another name for your reward (the built-in {name!r} keeps its name)"),
            )
        _check_signature(name, f)
        _REGISTRY[name] = f
        if _builtin:
            _BUILTIN.add(name)
        return f

    return deco if fn is None else deco(fn)


def unregister(name: str) -> None:
    """Remove a user-registered reward (built-ins stay). Missing names are ignored.

    Example:
        >>> unregister("no_swearing")
    """
    if name not in _BUILTIN:
        _REGISTRY.pop(name, None)


def available() -> list[str]:
    """Sorted names usable in a reward spec (built-ins and user-registered).

    Example:
        >>> "format" in available()
        True
    """
    return sorted(_REGISTRY)


def get(name: str) -> RewardFn:
    """The reward function registered as ``name``.

    Raises:
        NotFoundError: unknown name; the message lists the known names.

    Example:
        >>> get("format")("", "<think>x</think><answer>1</answer>")
        (1.0, None)
    """
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise NotFoundError(
            f"no reward named {name!r}; known: {', '.join(available())}",
            fix=Fix("use one of the known names, or register yours with @nbtools.rewards.register('name')",
                    cli="use one of the known names, or register yours in a module the job imports (notebook 08)"),
        ) from None


def is_builtin(fn: RewardFn) -> bool:
    """True for the functions nbtools registers itself (their kwargs are validated by a dry call)."""
    return any(_REGISTRY.get(n) is fn for n in _BUILTIN)


def reward_parameters(fn: RewardFn) -> tuple[list[str], bool]:
    """(names of the keyword parameters after ground_truth/response, whether it takes **kwargs)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return [], True
    rest = params[2:]
    var_kw = any(p.kind is p.VAR_KEYWORD for p in rest)
    names = [p.name for p in rest if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return names, var_kw
