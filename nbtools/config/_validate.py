"""Plain data → typed sections, collecting every problem (type errors, unknown keys); cross-field rules in _rules.

Why: a user fixing a config wants the whole list at once. Type problems are collected while building the
dataclass tree; a bad field then takes its default, and the cross-field rules run on that tree, skipping each rule
that reads a bad field (its verdict would be about the default, not about what the user wrote). Values under
``secrets`` and anything shaped like a token are never shown in a problem text.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from typing import Any, Literal

from nbtools.config._tokens import redact, token_kind


class Problems(list):
    """Problem texts, plus the dotted keys whose values were unusable (cross-field rules skip those)."""

    def __init__(self) -> None:
        super().__init__()
        self.bad: set[str] = set()

    def add(self, key: str, text: str) -> None:
        self.append(text)
        self.bad.add(key)

    def touches(self, deps: tuple[str, ...]) -> bool:
        """True when a rule reading ``deps`` would see a bad (defaulted) value."""
        return any(d == b or d.startswith(b + ".") or b.startswith(d + ".") for d in deps for b in self.bad)


def _secretish(key: str) -> bool:
    return key == "secrets" or key.startswith("secrets.")


def _has_token(value: Any, budget: list[int]) -> bool:
    """True when ``value`` or anything inside it (keys included) looks like a token; looks at most ~200 values."""
    budget[0] -= 1
    if budget[0] < 0:
        return True  # too big to vet: do not show it
    if isinstance(value, str):
        return bool(token_kind(value) or token_kind(value, names=False))
    if isinstance(value, dict):
        return any(_has_token(k, budget) or _has_token(v, budget) for k, v in value.items())
    if isinstance(value, (list, tuple, set)):
        return any(_has_token(v, budget) for v in value)
    return False


def _show(key: str, value: Any) -> str:
    """A value for a problem text: redacted under ``secrets`` or when it holds anything token-shaped, else a short repr."""
    if _secretish(key) or _has_token(value, [200]):
        return redact(value)
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _part(k: Any) -> str:
    """One component of a dotted key; a token-shaped key (a value pasted as a key) is redacted."""
    return redact(k) if token_kind(k) else str(k)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if dataclasses.is_dataclass(tp):
        return f"a mapping ({tp.__name__})"
    return getattr(tp, "__name__", str(tp))


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)  # resolving string annotations is most of the time a load takes


def _placeholder(tp: Any) -> Any:
    """A stand-in for a missing required field, so the rest of the tree can still be built and checked."""
    return {str: "", int: 0, float: 0.0, bool: False}.get(tp)


def _build(cls: type, data: Any, prefix: str, problems: Problems) -> Any:
    """Recursively convert plain data to dataclass ``cls``, recording every problem found."""
    where = prefix.rstrip(".") or "<top level>"
    if not isinstance(data, dict):
        problems.add(where, f"{where}: expected a mapping, got {_show(where, data)}; fix: write it as `key: value` lines")
        return None
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "source"}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            name = f"{prefix}{_part(key)}"
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"did you mean `{prefix}{close[0]}`?" if close else f"allowed keys: {', '.join(fields)}"
            problems.add(name, f"{name}: unknown key (value {_show(name, value)}); fix: {hint}")
            continue
        kwargs[key] = _convert(hints[key], value, f"{prefix}{key}", problems)
    for name, f in fields.items():
        if name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            section = "the top level of the file" if not prefix else f"the {where} section"
            problems.add(f"{prefix}{name}", f"{prefix}{name}: required key is missing; fix: add `{name}: ...` to {section}")
    for name, f in fields.items():  # required fields that are missing or bad: a placeholder, marked bad above
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and kwargs.get(name, _BAD) is _BAD:
            kwargs[name] = _placeholder(hints[name])
    try:
        return cls(**{k: v for k, v in kwargs.items() if v is not _BAD})
    except TypeError:
        return None


_BAD = object()


def _convert(tp: Any, value: Any, key: str, problems: Problems) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) == 1:
            return _convert(non_none[0], value, key, problems)
        for a in non_none:
            sub = Problems()
            out = _convert(a, value, key, sub)
            if not sub:
                return out
        problems.add(key, f"{key}: {_show(key, value)} is not one of {_type_name(tp)}; fix: use one of those")
        return _BAD
    if origin is Literal:
        try:
            if value in args:
                return value
        except TypeError:  # unhashable or incomparable: not one of the literals either
            pass
        close = difflib.get_close_matches(str(value), [str(a) for a in args], n=1) if isinstance(value, str) else []
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        problems.add(key, f"{key}: {_show(key, value)} is not allowed; allowed: {', '.join(repr(a) for a in args)}{hint}; "
                     f"fix: set `{key}` to one of them")
        return _BAD
    if dataclasses.is_dataclass(tp):
        if value is None:
            return tp()
        built = _build(tp, value, key + ".", problems)
        return built if built is not None else _BAD
    if origin is list:
        if not isinstance(value, list):
            problems.add(key, f"{key}: expected a list, got {_show(key, value)}; fix: write it as a YAML list (`- item`)")
            return _BAD
        if not args:
            return list(value)
        items = [_convert(args[0], v, f"{key}[{i}]", problems) for i, v in enumerate(value)]
        return _BAD if any(v is _BAD for v in items) else items
    if origin is dict:
        if not isinstance(value, dict):
            problems.add(key, f"{key}: expected a mapping, got {_show(key, value)}; fix: write it as `key: value` lines")
            return _BAD
        out: dict[Any, Any] = {}
        kt, vt = args if len(args) == 2 else (Any, Any)
        for k, v in value.items():
            name = f"{key}.{_part(k)}"
            if kt is str and not isinstance(k, str):
                if isinstance(k, (int, float)) and not isinstance(k, bool):
                    k = str(k)
                else:
                    problems.add(name, f"{name}: the key {_show(name, k)} is not a string; fix: quote it")
                    continue
            out[k] = _convert(vt, v, name, problems)
        return _BAD if any(v is _BAD for v in out.values()) else out
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        problems.add(key, f"{key}: expected true or false, got {_show(key, value)}; fix: write `{key.rsplit('.', 1)[-1]}: true` or `false` (no quotes)")
        return _BAD
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        problems.add(key, f"{key}: expected an integer, got {_show(key, value)}; fix: write a whole number")
        return _BAD
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        problems.add(key, f"{key}: expected a number, got {_show(key, value)}; fix: write a number such as 0.01 or 1e-6")
        return _BAD
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        problems.add(key, f"{key}: expected a string, got {_show(key, value)}; fix: quote the value")
        return _BAD
    return value
