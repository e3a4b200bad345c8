"""Project NeMo-RL jsonl records onto the columns people read, without decoding the big per-token arrays.

Why: a record is ~38 KB, of which ~35 KB are five numeric arrays (token ids, loss mask, advantages, two
logprob arrays). Decoding them is what makes pandas/orjson/msgspec slow. Here each array's byte span is found
with ``bytes.find`` (a JSON key such as ``"token_loss_mask"`` followed by ``:`` can only be a key: inside a JSON
string every quote is escaped), the span is replaced by ``null``, and msgspec decodes the small remainder.
The generation length is ``bytes.count(b"1")`` over the mask span (values are 0/1), measured 30× faster than
decoding the mask as a list. Lines that do not fit this fast path are decoded whole; lines that are not JSON
are reported (file, line number, error), never dropped silently. Values of odd shapes are coerced in
``_coerce`` (the same rules on every path).

Which lines become rows is the same with and without the arrays: a line is a row when its small fields can be
read (the fast projection) or the whole line decodes. When only the arrays are damaged, ``arrays=True`` (and
``Run.record``) still give the row, with the arrays missing and an ``arrays`` problem listed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from nbtools.trajectories._coerce import (
    I64_MAX,
    I64_MIN,
    OutOfRange,
    array,
    decode_record,
    idx_of,
    num,
    texts,
)

__all__ = ["ARRAY_KEYS", "COLUMNS", "Parsed", "parse_lines", "parse_line", "record_dict", "decode_record",
           "project_record", "as_array", "is_blank"]

ARRAY_KEYS = ("token_ids", "token_loss_mask", "advantages", "generation_logprobs", "prev_logprobs")
_PATTERNS = tuple(f'"{k}"'.encode() for k in ARRAY_KEYS)
COLUMNS = (
    "step", "idx", "prompt", "response", "env_observation", "reward",
    "generation_length", "input_length", "advantage",
)
_NAN = math.nan


class _Head(msgspec.Struct):
    content: Any = None
    rewards: Any = None
    input_lengths: Any = None
    idx: Any = None


_HEAD = msgspec.json.Decoder(_Head)
_HEAD_ERRORS = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)
_BIG = 2.0**53


@dataclass
class Parsed:
    """Columns (lists) for the lines of one file, plus what went wrong where."""

    rows: list[tuple] = field(default_factory=list)  # one tuple per record, in COLUMNS order
    arrays: dict[str, list] = field(default_factory=dict)
    problems: list[tuple[int, str, str, str]] = field(default_factory=list)  # (line, kind, message, excerpt)
    skipped: int = 0  # lines that gave no row: malformed, blank, or an idx outside int64


def _spans(buf: bytes, s: int, e: int) -> list[tuple[int, int, int]]:
    """(key index, value start, value end) of every big array in buf[s:e], in line order."""
    out = []
    pos = s
    for ki, pat in enumerate(_PATTERNS):
        k = buf.find(pat, pos, e)
        if k < 0:
            k = buf.find(pat, s, e)  # keys written in another order
            if k < 0:
                continue
        v = buf.find(b"[", k + len(pat), e)
        # only ':' and spaces may sit between the key and its array
        if v < 0 or buf[k + len(pat) : v].strip(b" :") != b"":
            continue
        depth_end = buf.find(b"]", v, e)
        if depth_end < 0:
            return out
        # count the opening brackets to close a [[...]] (or [...]) value
        opens = 1
        while buf[v + opens : v + opens + 1] == b"[":
            opens += 1
        end = depth_end + 1
        for _ in range(opens - 1):
            end = buf.find(b"]", end, e) + 1
            if end <= 0:
                return out
        out.append((ki, v, end))
        pos = end
    out.sort(key=lambda t: t[1])
    return out


def _project(rec: Any) -> tuple:
    """(idx, prompt, response, env, reward, gen_len, input_len, advantage) of a decoded record; idx unchecked."""
    if type(rec) is not dict:
        raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
    prompt, response, env = texts(rec.get("content"))
    gen_len, advantage = _NAN, _NAN
    mask = array(rec.get("token_loss_mask"))
    if type(mask) is list:
        gen_len = float(sum(1 for m in mask if m))
        first = next((i for i, m in enumerate(mask) if m), None)
        adv = array(rec.get("advantages"))
        if type(adv) is list and first is not None and first < len(adv):
            advantage = num(adv[first])
    return (rec.get("idx"), prompt, response, env, num(rec.get("rewards")), gen_len, num(rec.get("input_lengths")),
            advantage)


def project_record(rec: Any) -> dict:
    """Columns of one fully decoded record (the slow, general path; also used by ``Run.record``).

    Raises:
        ValueError: ``rec`` is not a JSON object.
    """
    return dict(zip(COLUMNS[1:], _project(rec), strict=True))


def parse_line(buf, s: int, e: int, lineno: int, *, arrays: bool, advantage: bool = True,
               row: tuple | None = None) -> tuple[tuple | None, Any, list[tuple[int, str, str, str]]]:
    """The general path for one line: (row with a checked idx or None when skipped, decoded record, problems).

    ``row`` is the fast projection when one was made. With ``arrays`` the whole line is decoded (the arrays are
    needed); when that fails but the fast projection works, the row is kept without its arrays.
    """
    problems: list[tuple[int, str, str, str]] = []
    rec = None
    if row is None:
        try:
            rec, note = decode_record(buf[s:e])
            row = _project(rec)
            if note:
                problems.append((lineno, "non_utf8", note, _excerpt(buf, s, e)))
        except ValueError as err:
            rec = None
            row = _fast(buf, s, e, advantage) if arrays else None
            if row is None:
                problems.append((lineno, "malformed", str(err), _excerpt(buf, s, e)))
                return None, None, problems
            problems.append((lineno, "arrays", f"per-token arrays unreadable ({err}); the other columns were read",
                             _excerpt(buf, s, e)))
    try:
        idx = idx_of(row[0], lineno)
    except OutOfRange as err:
        problems.append((lineno, "malformed", f"{err}; record skipped", _excerpt(buf, s, e)))
        return None, None, problems
    return (idx, *row[1:]), rec, problems


def parse_lines(
    buf: bytes, starts: np.ndarray | list[int], *, step: int, first_line: int = 1, arrays: bool = False,
    advantage: bool = True,
) -> Parsed:
    """Parse the complete lines ``buf[starts[i]:starts[i+1]-1]`` (``starts`` ends with the end offset).

    ``buf`` is any bytes-like object with find/rfind (bytes, bytearray); lines are never copied whole.

    ``first_line`` is the 1-based line number of the first line (for problem reports).
    """
    p = Parsed()
    if arrays:
        p.arrays = {k: [] for k in ARRAY_KEYS}
    starts = starts.tolist() if isinstance(starts, np.ndarray) else starts
    rows = p.rows
    for i in range(len(starts) - 1):
        s, e = starts[i], starts[i + 1] - 1
        lineno = first_line + i
        if e > s and buf[e - 1 : e] == b"\r":
            e -= 1
        if is_blank(buf, s, e):
            p.problems.append((lineno, "empty", "blank line", ""))
            p.skipped += 1
            continue
        row = None
        if not arrays:
            row = _fast(buf, s, e, advantage)
            if row is not None and type(row[0]) is int and I64_MIN <= row[0] <= I64_MAX:
                rows.append((step, *row))
                continue
        row, rec, problems = parse_line(buf, s, e, lineno, arrays=arrays, advantage=advantage, row=row)
        if problems:
            p.problems.extend(problems)
        if row is None:
            p.skipped += 1
            continue
        rows.append((step, *row))
        if arrays:
            for k in ARRAY_KEYS:
                v = array(rec.get(k)) if rec is not None else None
                p.arrays[k].append(as_array(v))
    return p


def is_blank(buf, s: int, e: int) -> bool:
    """Nothing but whitespace in buf[s:e] (checked without copying every line)."""
    return e <= s or (buf[s] in b" \t\r" and not buf[s:e].strip())


def record_dict(line: bytes, step: int, lineno: int, *, arrays: bool) -> tuple[dict | None, list]:
    """One line (without its newline) as ``Run.record``'s dict, or None; plus the problems found.

    The row is the one ``parse_lines`` makes for this line (same coercions, same skip rules); the dict adds
    the record's other fields and, with ``arrays``, the per-token arrays as numpy.
    """
    e = len(line)
    if e and line[e - 1 : e] == b"\r":
        e -= 1
    if is_blank(line, 0, e):
        return None, [(lineno, "empty", "blank line", "")]
    row, rec, problems = parse_line(line, 0, e, lineno, arrays=True)
    if row is None:
        return None, problems
    out = {"step": step, **dict(zip(COLUMNS[1:], row, strict=True)), "line": lineno}
    for key, v in (rec.items() if rec is not None else ()):
        if key in ("content", "idx", "rewards", "input_lengths") or (key in ARRAY_KEYS and not arrays):
            continue
        out[key] = as_array(array(v)) if key in ARRAY_KEYS else (v[0] if type(v) is list and len(v) == 1 else v)
    if problems:
        out["problem"] = "; ".join(p[2] for p in problems)
    return out, problems


def as_array(v: Any) -> np.ndarray | None:
    """A numpy array of a per-token list; None when absent or not array-shaped (ragged)."""
    if type(v) is not list:
        return None
    try:
        return np.asarray(v)
    except (ValueError, TypeError, OverflowError, RecursionError):
        return None


def _fast(buf: bytes, s: int, e: int, advantage: bool) -> tuple | None:
    """The projection without decoding the arrays; None when the line needs the general path."""
    try:
        return _fast_unchecked(buf, s, e, advantage)
    except (IndexError, ValueError, TypeError, OverflowError, RecursionError):
        return None


def _fast_unchecked(buf: bytes, s: int, e: int, advantage: bool) -> tuple | None:
    """The projection of one line; reads only ``buf[s:e]``, so a line alone gives what it gives in its file.

    Fast path for NeMo-RL's key order (content, rewards, input_lengths before the arrays, idx last); any other
    order goes through ``_spans`` (order-free), anything else through a whole-line decode.
    """
    k0 = buf.find(b'"token_ids"', s, e)
    if k0 < 0:
        k0 = buf.find(b'"generation_logprobs"', s, e)  # v0.5: no token_ids / mask / advantages
        if k0 < 0:
            return None
    t = buf.rfind(b'"idx"', max(k0, e - 48), e)
    if t < 0:  # not NeMo-RL's layout (or a line cut short): the order-free path checks the whole line
        return _fast_any_order(buf, s, e, advantage)
    try:
        head = _HEAD.decode(buf[s:k0] + buf[t:e])
    except _HEAD_ERRORS:
        head = None
    if head is None or head.content is None or head.rewards is None:
        return _fast_any_order(buf, s, e, advantage)
    gen_len, adv = _NAN, _NAN
    # keys are found by hopping over arrays with memchr-fast "]" searches, then a short bounded key search
    tv = buf.find(b"]", k0, e)
    m = buf.find(b'"token_loss_mask"', tv, min(tv + 64, e)) if tv >= 0 else -1
    if m < 0:
        m = buf.find(b'"token_loss_mask"', s, e)
    if m >= 0:
        mv = buf.find(b"[", m + 17, e)
        if mv >= 0 and not buf[m + 17 : mv].strip(b" :"):  # the mask is an array (else: NaN, as decoded)
            mend = buf.find(b"]", mv, e)
            if mend < 0:
                return None
            inner = mv + 1
            while inner < mend and buf[inner] == 91:  # "["
                inner += 1
            gen_len, k = _ones(buf, inner, mend)
            if advantage and k >= 0:
                a = buf.find(b'"advantages"', mend, min(mend + 128, e))
                if a < 0:
                    a = buf.find(b'"advantages"', s, e)
                if a >= 0:
                    av = buf.find(b"[", a + 12, e)
                    if av >= 0 and not buf[a + 12 : av].strip(b" :"):
                        adv = _nth(buf, av, e, k)
    prompt, response, env = texts(head.content)
    r, n = head.rewards, head.input_lengths
    reward = r[0] if type(r) is list and len(r) == 1 and type(r[0]) is float else num(r)
    in_len = float(n[0]) if type(n) is list and len(n) == 1 and type(n[0]) is int and -_BIG < n[0] < _BIG else num(n)
    return (head.idx, prompt, response, env, reward, gen_len, in_len, adv)


def _ones(buf: bytes, v: int, end: int) -> tuple[float, int]:
    """(number of 1s, index of the first 1 or -1) in the flat 0/1 array buf[v:end] (no brackets)."""
    f = buf.find(b"1", v, end)
    if f < 0:
        return 0.0, -1
    last = buf.rfind(b"1", f, end)
    if last == f:
        n = 1
    else:
        w = buf.find(b"1", f + 1, end) - f  # element width + separator, e.g. 3 for "1, "
        if buf.find(b"0", f, last) < 0 and (last - f) % w == 0:
            n = (last - f) // w + 1  # one contiguous run of 1s: no need to count
        else:
            n = buf[v:end].count(b"1")
    # elements before the first 1 are zeros; with one-character zeros ("0, ") their count is the width / 3
    k = (f - v) // 3 if buf[v + 1 : v + 3] == b", " and (f - v) % 3 == 0 else buf[v:f].count(b",")
    return float(n), k


def _nth(buf: bytes, av: int, e: int, k: int) -> float:
    """Element k of the flat number array starting at buf[av] == "[" (nested brackets allowed)."""
    if av < 0:
        return _NAN
    ai = av + 1
    while ai < e and buf[ai] == 91:
        ai += 1
    close = buf.find(b"]", ai, e)
    if close < 0:
        return _NAN
    c1 = buf.find(b",", ai, close)
    try:
        if c1 < 0:  # a one-element array
            return float(buf[ai:close]) if k == 0 else _NAN
        a0 = buf[ai:c1].strip()
        if k == 0:
            return float(a0)
        sep = b", " if buf[c1 + 1 : c1 + 2] == b" " else b","
        rep = (a0 + sep) * k + a0
        if buf[ai : ai + len(rep)] == rep:  # NeMo-RL broadcasts the sample's advantage
            return float(a0)
        parts = buf[ai:close].split(b",", k + 1)
        return float(parts[k]) if k < len(parts) else _NAN
    except ValueError:
        return _NAN


def _fast_any_order(buf: bytes, s: int, e: int, advantage: bool) -> tuple | None:
    spans = _spans(buf, s, e)
    pieces, pos = [], s
    for _, v, end in spans:
        pieces.append(buf[pos:v])
        pieces.append(b"null")
        pos = end
    pieces.append(buf[pos:e])
    try:
        head = _HEAD.decode(b"".join(pieces))
    except _HEAD_ERRORS:
        return None  # malformed or non-UTF-8: the general path reports it precisely
    prompt, response, env = texts(head.content)
    gen_len, adv = _NAN, _NAN
    mask = next((t for t in spans if t[0] == 1), None)
    if mask is not None:
        _, v, end = mask
        inner = v + 1
        while inner < end and buf[inner] == 91:
            inner += 1
        gen_len, k = _ones(buf, inner, buf.find(b"]", inner, end))
        aspan = next((t for t in spans if t[0] == 2), None)
        if advantage and aspan is not None and k >= 0:
            adv = _nth(buf, aspan[1], aspan[2], k)
    return (head.idx, prompt, response, env, num(head.rewards), gen_len, num(head.input_lengths), adv)


def _excerpt(buf: bytes, s: int, e: int, n: int = 80) -> str:
    return buf[s : min(e, s + n)].decode("utf-8", errors="replace")
