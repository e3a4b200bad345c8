"""Plain data → the typed sections through pydantic, every problem at once with its key; cross-field rules in _rules.

Why pydantic: its validator walks the dataclass tree, refuses unknown keys and reports every error with its path in
one pass (msgspec, already a dependency, stops at the first). The field types in ``_sections`` say how strict each
value is (``StrictInt``: ``"5"`` and ``true`` are no integer; a string field takes a number, ``head_cpu: 8``). What
stays here is the wording a user reads: each pydantic error becomes a :class:`~nbtools.errors.Problem` naming the
key, the value as shown, what is allowed and the fix.

After type problems, each bad key is dropped (it takes its default) and the tree is built again, so the cross-field
rules still run, skipping each rule that reads a bad key: its verdict would be about the default, not about what the
user wrote. Values under ``secrets`` and anything shaped like a token are never shown in a problem.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from typing import Any, Literal

from nbtools.config._tokens import redact, token_kind
from nbtools.errors import Problem


class Problems(list):
    """The :class:`Problem` list, plus the dotted keys whose values were unusable (cross-field rules skip those)."""

    def __init__(self) -> None:
        super().__init__()
        self.bad: set[str] = set()

    def add(self, problem: Problem, bad: str | None = None) -> None:
        self.append(problem)
        self.bad.add(bad or problem.key)

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


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)  # the plain types (Strict* read as int, bool, float)


@functools.cache
def _adapter(cls: type):
    from pydantic import TypeAdapter  # _sections imports pydantic's types already; the adapter is built once

    return TypeAdapter(cls)


def _section(tp: Any) -> type | None:
    """The dataclass behind ``tp`` (an optional section unwrapped), or None."""
    if dataclasses.is_dataclass(tp):
        return tp
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)]
        return inner[0] if inner else None
    return None


def _unwrap(tp: Any) -> Any:
    """``X | None`` → ``X``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        return rest[0] if len(rest) == 1 else tp
    return tp


@dataclasses.dataclass
class _Where:
    """Where a pydantic error's ``loc`` points: the dotted key, the field's type, its section, what to drop."""

    key: str = ""
    tp: Any = None
    section: type | None = None  # the dataclass holding the last field (for unknown or missing keys)
    prefix: str = ""  # the section's dotted prefix (``grpo.``)
    drop: tuple = ()  # the deepest field on the path: dropped so the rebuild takes its default
    drop_key: str = ""
    drop_fill: Any = None  # what a required field takes instead (None: it has a default)
    dict_key: bool = False  # the error is about a mapping's key, not its value


def _locate(cls: type, loc: tuple) -> _Where:
    w = _Where(tp=cls)
    for i, part in enumerate(loc):
        if part == "[key]":
            w.dict_key = True
            break
        section = _section(w.tp)
        if section is not None:
            w.section, w.prefix = section, (w.key + "." if w.key else "")
            w.key = f"{w.prefix}{_part(part)}"
            w.tp = _hints(section).get(part) if isinstance(part, str) else None
            w.drop, w.drop_key, w.drop_fill = loc[: i + 1], w.key, _fill(section, part, w.tp)
            continue
        origin, args = typing.get_origin(_unwrap(w.tp)), typing.get_args(_unwrap(w.tp))
        if origin is list:
            w.key, w.tp = f"{w.key}[{part}]", (args[0] if args else Any)
        else:  # a mapping's entry
            w.key, w.tp = f"{w.key}.{_part(part)}", (args[1] if len(args) == 2 else Any)
    return w


def _fill(section: type, name: Any, tp: Any) -> Any:
    """A required field's stand-in for the rebuild (its first allowed value, or an empty one); None with a default."""
    field = next((f for f in dataclasses.fields(section) if f.name == name), None)
    if field is None or field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING:
        return None
    tp = _unwrap(tp)
    return typing.get_args(tp)[0] if typing.get_origin(tp) is Literal else _PLACEHOLDER.get(tp)


_PLACEHOLDER = {str: "", int: 0, float: 0.0, bool: False}  # a required field's stand-in for the rebuild
_INTEGER = ("int_type", "int_parsing", "int_from_float")
_NUMBER = ("float_type", "float_parsing")
_MAPPING = ("dict_type", "dataclass_type", "dataclass_exact_type", "model_type")


def _problem(cls: type, err: dict) -> tuple[Problem, _Where]:
    """One pydantic error as a Problem in nbtools' words: key, value as shown, what is allowed, the fix."""
    w = _locate(cls, tuple(err["loc"]))
    kind, key, value = err["type"], w.key or "<top level>", err.get("input")
    shown = _show(key, value)
    name = key.rsplit(".", 1)[-1]
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        fields = [f.name for f in dataclasses.fields(w.section) if f.name != "source"] if w.section else []
        close = difflib.get_close_matches(str(err["loc"][-1]), fields, n=1)
        fix = f"did you mean `{w.prefix}{close[0]}`?" if close else f"allowed keys: {', '.join(fields)}"
        return Problem(key, shown, ", ".join(fields), fix, what=f"unknown key (value {shown})"), w
    if kind == "missing":
        section = f"the {w.prefix.rstrip('.')} section" if w.prefix else "the top level of the file"
        return Problem(key, None, None, f"add `{name}: ...` to {section}", what="required key is missing"), w
    if w.dict_key:
        return Problem(key, shown, "a string", "quote it", what=f"the key {shown} is not a string"), w
    if kind == "literal_error":
        args = typing.get_args(_unwrap(w.tp))
        allowed = ", ".join(repr(a) for a in args)
        close = difflib.get_close_matches(value, [str(a) for a in args], n=1) if isinstance(value, str) else []
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return Problem(key, shown, allowed, f"set `{key}` to one of them",
                       what=f"{shown} is not allowed; allowed: {allowed}{hint}"), w
    if kind in _MAPPING:
        return Problem(key, shown, "a mapping", "write it as `key: value` lines",
                       what=f"expected a mapping, got {shown}"), w
    if kind == "list_type":
        return Problem(key, shown, "a list", "write it as a YAML list (`- item`)", what=f"expected a list, got {shown}"), w
    if kind in ("bool_type", "bool_parsing"):
        return Problem(key, shown, "true | false", f"write `{name}: true` or `false` (no quotes)",
                       what=f"expected true or false, got {shown}"), w
    if kind in _INTEGER:
        return Problem(key, shown, "an integer", "write a whole number", what=f"expected an integer, got {shown}"), w
    if kind in _NUMBER:
        return Problem(key, shown, "a number", "write a number such as 0.01 or 1.0e-6 (no quotes)",
                       what=f"expected a number, got {shown}"), w
    if kind == "string_type":
        return Problem(key, shown, "a string", "quote the value", what=f"expected a string, got {shown}"), w
    return Problem(key, shown, None, f"write `{key}` as experiments/local.yaml does",
                   what=f"{err['msg'][0].lower()}{err['msg'][1:]}, got {shown}"), w


def _without(data: Any, drop: tuple, placeholder: Any = None) -> Any:
    """``data`` with the value at ``drop`` removed (or set to ``placeholder``), copied along that path only."""
    head, rest = drop[0], drop[1:]
    if isinstance(data, list) and isinstance(head, int) and 0 <= head < len(data) and rest:
        out = list(data)
        out[head] = _without(out[head], rest, placeholder)
        return out
    if not isinstance(data, dict):
        return data
    out = dict(data)
    if not rest:
        if placeholder is None:
            out.pop(head, None)
        else:
            out[head] = placeholder
    elif head in out:
        out[head] = _without(out[head], rest, placeholder)
    return out


def _build(cls: type, data: dict, problems: Problems) -> Any:
    """``cls`` built from plain data, every problem recorded; None when no tree can be built even without them."""
    from pydantic import ValidationError

    adapter = _adapter(cls)
    try:
        return adapter.validate_python(data)
    except ValidationError as e:
        errors = e.errors(include_url=False, include_context=False)
    for err in errors:
        problem, where = _problem(cls, err)
        problems.add(problem, where.drop_key)
        if where.drop:
            data = _without(data, where.drop, where.drop_fill)
    try:
        return adapter.validate_python(data)
    except ValidationError:
        return None

