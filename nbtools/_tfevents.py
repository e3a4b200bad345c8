"""TensorBoard event files read record by record, so damage is reported instead of silently ending a curve.

Why: tensorboard's ``EventFileLoader`` swallows ``DataLossError`` (a failed checksum, a cut record) and stops
reading the file there, so everything after one flipped byte vanishes without a word. Here every record's
TFRecord framing is checked with tensorboard's own ``masked_crc32c``; a record whose data checksum fails is
skipped, a damaged header is skipped up to the next intact record (both checksums hold there), and each damaged
stretch is reported as (file, offset, kind, message). A file that ends inside a record is ``truncated``, or
``pending`` when it was modified in the last minute (a writer mid-flush: the record completes on the next
read). Directories are walked following symlinks.

Example:
    >>> problems = []
    >>> n = sum(1 for _ in events(Path("exp_001/tensorboard/events.out.tfevents.1.host"), problems))
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["event_files", "events", "LIVE_SECONDS"]

LIVE_SECONDS = 60  # a file cut inside its last record and modified this recently is still being written


def event_files(path: Path) -> list[Path]:
    """Event files under ``path``, following symlinked directories (each real directory once: no loops)."""
    out, seen = [], set()
    for root, dirs, files in os.walk(path, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs.sort()
        out += [Path(root) / f for f in sorted(files) if f.startswith("events.out.tfevents.")]
    return out


_HEADER = struct.Struct("<QI")


def _records(path: Path, problems: list[dict]) -> Iterator[bytes]:
    """Payloads of the intact TFRecords of one event file; each damaged stretch is added to ``problems``."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    def problem(offset: int, kind: str, message: str) -> None:
        problems.append({"file": str(path), "offset": offset, "kind": kind, "message": message})

    try:
        data = path.read_bytes()
    except OSError as err:
        problem(0, "unreadable", f"cannot read the file: {err.strerror or err}")
        return
    n, pos = len(data), 0

    def cut(what: str) -> None:
        try:
            live = time.time() - path.stat().st_mtime < LIVE_SECONDS
        except OSError:
            live = False
        problem(pos, "pending" if live else "truncated", f"the file ends inside a record {what}: "
                + ("written moments ago, so probably still being written" if live else "the writer stopped there"))

    while pos < n:
        if n - pos < 12:
            cut(f"header ({n - pos} bytes)")
            return
        length, header_crc = _HEADER.unpack_from(data, pos)
        if masked_crc32c(data[pos : pos + 8]) != header_crc:
            nxt = _resync(data, pos + 1, masked_crc32c)
            lost = f"bytes {pos}..{nxt} skipped" if nxt is not None else f"the rest ({n - pos} bytes) is unreadable"
            problem(pos, "corrupt", f"record header checksum failed; {lost}")
            if nxt is None:
                return
            pos = nxt
            continue
        end = pos + 16 + length
        if end > n:
            cut(f"({n - pos} of {16 + length} bytes)")
            return
        payload = data[pos + 12 : end - 4]
        if masked_crc32c(payload) != struct.unpack_from("<I", data, end - 4)[0]:
            problem(pos, "corrupt", f"record data checksum failed; this record ({16 + length} bytes) skipped")
        else:
            yield payload
        pos = end


def _resync(data: bytes, start: int, crc) -> int | None:
    """Offset of the next intact record at or after ``start`` (header and data checksums hold), or None."""
    import numpy as np

    n = len(data)
    if n - start < 16:
        return None
    z = np.frombuffer(data, dtype=np.uint8) == 0  # a record length < 4 GiB has four zero high bytes
    cand = z[start + 4 : n - 11] & z[start + 5 : n - 10] & z[start + 6 : n - 9] & z[start + 7 : n - 8]
    for p in (np.flatnonzero(cand) + start).tolist():
        length, header_crc = _HEADER.unpack_from(data, p)
        end = p + 16 + length
        if end <= n and crc(data[p : p + 8]) == header_crc and \
                crc(data[p + 12 : end - 4]) == struct.unpack_from("<I", data, end - 4)[0]:
            return p
    return None


def events(path: Path, problems: list[dict], *, migrate: bool = True) -> Iterator:
    """Event protos of one file, through tensorboard's read-time compat layers (as its EventFileLoader).

    ``migrate=False`` skips them: ``_scalar`` reads legacy ``simple_value`` and v2 scalar tensors directly,
    and the migration (simple_value → tensor → numpy) was two thirds of the reading time.
    """
    from google.protobuf.message import DecodeError
    from tensorboard import data_compat, dataclass_compat
    from tensorboard.compat.proto import event_pb2

    initial: dict = {}
    for payload in _records(path, problems):
        try:
            event = event_pb2.Event.FromString(payload)
        except DecodeError as err:
            problems.append({"file": str(path), "offset": -1, "kind": "corrupt",
                             "message": f"a record with an intact checksum is not an Event ({err}); skipped"})
            continue
        if migrate:
            yield from dataclass_compat.migrate_event(data_compat.migrate_event(event), initial)
        else:
            yield event
