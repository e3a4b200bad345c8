"""Turn one decoded jsonl record, whatever its shape, into the reader's typed column values.

Why: one odd record (a VLM message whose ``content`` is a list of parts, a field wrapped twice, an ``idx`` past
int64, a ``NaN`` literal written by Python's ``json.dumps``) must not make a whole run unreadable. Every value is
coerced here, once, for every path (the fast projection, the whole-line decode, ``Run.record``):

- texts: a string stays; a list of OpenAI/VLM parts (``[{"type": "text", "text": …}, {"type": "image_url", …}]``)
  becomes its text parts joined with newlines, other parts as ``<image_url>``-style placeholders; a chat
  message becomes its ``content``; single-element lists are unwrapped; any other value becomes its JSON text.
- numbers: single-element lists are unwrapped (``[[0.5]]`` → 0.5); what is not a number is NaN.
- ``idx``: unwrapped; an integer outside int64 cannot be stored, so that record is skipped and reported.
- ``content``: ``[[prompt, response, env]]`` (NeMo-RL), ``[prompt, response, env]`` (unwrapped) and
  ``[[[…]]]`` (wrapped twice) all read alike; chat messages go to slots by role.

Example:
    >>> texts([[{"role": "user", "content": [{"type": "text", "text": "2+2?"}]}, {"role": "assistant", "content": "4"}]])
    ('2+2?', '4', None)
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import msgspec

__all__ = ["I64_MIN", "I64_MAX", "OutOfRange", "decode_record", "texts", "text", "num", "array", "idx_of", "unwrap"]

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
_NAN = math.nan
_DEPTH = 32  # how deep a value is unwrapped or searched for text; deeper parts become JSON text
_ANY = msgspec.json.Decoder()
_CONST = re.compile(rb"NaN|Infinity")
_DEEP = "JSON nested deeper than the decoder follows (Python's recursion limit)"
_ROLE_SLOT = {"system": 0, "user": 0, "assistant": 1, "environment": 2, "tool": 2}


class OutOfRange(ValueError):
    """A record's ``idx`` does not fit in int64 (the record is skipped and listed in ``run.problems``)."""


def decode_record(line: bytes | bytearray) -> tuple[Any, str | None]:
    """Decode one whole line; (record, note) where the note says that non-UTF-8 bytes were replaced.

    Strict msgspec first (fast); on failure the line is re-read with invalid UTF-8 replaced by U+FFFD and, when
    it holds ``NaN``/``Infinity`` literals, with Python's own json (what wrote them). Lone UTF-16 surrogate
    escapes (``"\\ud800"``) become U+FFFD too, so every string can be stored.

    Raises:
        ValueError: the line is not JSON even so (the message is msgspec's, with the byte offset).
    """
    try:
        return _ANY.decode(line), None
    except RecursionError:
        raise ValueError(_DEEP) from None
    except (msgspec.DecodeError, UnicodeDecodeError) as err:
        first = err
    note = None
    try:
        text = bytes(line).decode("utf-8")
    except UnicodeDecodeError as uerr:
        note = f"non-UTF-8 bytes at offset {uerr.start} replaced with U+FFFD"
        text = bytes(line).decode("utf-8", errors="replace")
        try:
            return _ANY.decode(text.encode("utf-8")), note
        except RecursionError:
            raise ValueError(_DEEP) from None
        except msgspec.DecodeError as err:
            first = err
    if _CONST.search(line) is None and "\\u" not in text and "out of range" not in str(first):
        raise ValueError(str(first))
    try:  # Python's json writes NaN / Infinity / -Infinity, reads 1e400 as inf and lone surrogate escapes
        rec = json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError(str(first)) from None
    return (_clean(rec) if "\\u" in text else rec), note


def _fix(s: str) -> str:
    return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _clean(rec: Any) -> Any:
    """Replace lone surrogates in every string and key of ``rec`` (iteratively: it may be deeply nested)."""
    if type(rec) is str:
        return _fix(rec)
    stack = [rec]
    while stack:
        node = stack.pop()
        if type(node) is dict:
            for k in [k for k in node if _fix(k) != k]:
                node[_fix(k)] = node.pop(k)
            pairs = list(node.items())
        elif type(node) is list:
            pairs = list(enumerate(node))
        else:
            continue
        for k, v in pairs:
            if type(v) is str:
                node[k] = _fix(v)
            elif type(v) in (list, dict):
                stack.append(v)
    return rec


def unwrap(v: Any) -> Any:
    """Element 0 of nested lists (NeMo-RL writes length-1 batch slices); None for an empty list."""
    for _ in range(_DEPTH):
        if type(v) is not list:
            return v
        if not v:
            return None
        v = v[0]
    return None


def num(v: Any) -> float:
    """A float from a number, a numeric string or a (nested) length-1 list; NaN for anything else."""
    v = unwrap(v)
    if type(v) is float:
        return v
    if v is None or isinstance(v, (list, dict)):
        return _NAN
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return _NAN


def array(v: Any) -> Any:
    """The first row of a per-token array: ``[[...]]`` → ``[...]``; ``[...]`` stays; a non-list stays."""
    for _ in range(_DEPTH):
        if type(v) is list and v and type(v[0]) is list:
            v = v[0]
        else:
            return v
    return None


def idx_of(v: Any, lineno: int) -> int:
    """The record's idx (unwrapped); its 0-based line number when it has none.

    Raises:
        OutOfRange: the idx is an integer outside int64 (it cannot be stored).
    """
    v = unwrap(v)
    if type(v) is float and v == v:
        if not math.isinf(v) and v.is_integer():
            v = int(v)
        else:
            return lineno - 1
    if type(v) is int:
        if I64_MIN <= v <= I64_MAX:
            return v
        digits = str(v) if abs(v) < 10**60 else f"{str(v)[:20]}… ({len(str(abs(v)))} digits)"
        raise OutOfRange(f"idx {digits} does not fit in int64")
    return lineno - 1


def text(v: Any, depth: int = 0) -> str | None:
    """One text from a string, a list of parts or strings, a chat message, or any other JSON value."""
    if v is None or type(v) is str:
        return v
    if depth >= _DEPTH:
        return _dump(v)
    if type(v) is list:
        parts = [t for t in (text(x, depth + 1) for x in v) if t is not None]
        return "\n".join(parts) if parts else None
    if type(v) is dict:
        if "text" in v:
            return text(v["text"], depth + 1)
        if "content" in v:
            return text(v["content"], depth + 1)
        kind = v.get("type")
        return f"<{kind}>" if type(kind) is str else _dump(v)
    if type(v) is bool:
        return "true" if v else "false"
    return str(v)


def _dump(v: Any) -> str:
    try:
        return msgspec.json.encode(v).decode("utf-8")
    except (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError):
        return "<unprintable value>"


def texts(content: Any) -> tuple[str | None, str | None, str | None]:
    """(prompt, response, env_observation) from train (strings) or v0.6 val (chat messages) content."""
    if type(content) is list and len(content) == 1:  # the common case, without per-item checks
        c = content[0]
        if type(c) is list and len(c) == 3 and type(c[0]) is str and type(c[1]) is str and type(c[2]) is str:
            return c[0], c[1], c[2]
    c = content
    for _ in range(_DEPTH):  # [[x, y, z]] and [[[x, y, z]]] -> [x, y, z]; [x, y, z] stays
        if type(c) is list and len(c) == 1 and type(c[0]) is list:
            c = c[0]
        else:
            break
    if type(c) is not list:
        return text(c), None, None
    if c and all(type(m) is dict and "role" not in m and "type" in m for m in c):
        return text(c), None, None  # one message's list of parts, not a list of messages
    out: list[str | None] = [None, None, None]
    for i, m in enumerate(c):
        if type(m) is not dict and i >= 3:
            break  # [prompt, response, env, ...]: the rest is not a message
        role = m.get("role") if type(m) is dict else None
        slot = _ROLE_SLOT.get(role, min(i, 2)) if type(role) is str else min(i, 2)
        t = text(m)
        if t is not None:
            out[slot] = t if out[slot] is None else f"{out[slot]}\n{t}"
    return out[0], out[1], out[2]
