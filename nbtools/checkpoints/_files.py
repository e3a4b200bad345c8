"""What the DCP and verl merges share: sizes, the progress bar, syncing and reading back what was written."""

from __future__ import annotations

import os
from pathlib import Path

from nbtools.checkpoints._sources import read_safetensors_header
from nbtools.errors import CheckpointError

__all__ = ["parse_size"]


def _size(n: int) -> str:
    """Bytes in the largest decimal unit that keeps a digit before the point (``12.3 MB``, never ``0.00 GB``)."""
    for unit, mult in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n >= mult:
            return f"{n / mult:.3g} {unit}" if n < 100 * mult else f"{n / mult:.0f} {unit}"
    return f"{n} bytes"


def parse_size(size: int | str) -> int:
    """``"5GB"`` / ``"500MB"`` / ``2**30`` -> bytes (decimal units, like transformers' max_shard_size)."""
    if isinstance(size, int):
        return size
    s = size.strip().upper()
    for unit, mult in (("GIB", 2**30), ("MIB", 2**20), ("KIB", 2**10), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3),
                       ("B", 1)):
        if s.endswith(unit):
            return int(float(s[: -len(unit)]) * mult)
    return int(s)


def _tqdm(total: int, desc: str, enabled: bool):
    from nbtools._progress import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, disable=not enabled)


def _fsync_small_files(tmp: Path, done: set[str]) -> None:
    """fsync the sidecar files (the weights were synced as they were written) and the directory itself."""
    for p in tmp.iterdir():
        if p.name not in done:
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_written(tmp: Path, files) -> None:
    """Headers read back from disk must describe exactly the planned tensors at the planned sizes."""
    for f in files:
        header, start = read_safetensors_header(tmp / f.name)
        header.pop("__metadata__", None)
        want = {t.name: list(t.shape) for t in f.tensors}
        if {k: v["shape"] for k, v in header.items()} != want or (tmp / f.name).stat().st_size != start + f.data_bytes:
            raise CheckpointError(f"{f.name} did not read back as written", fix="check the disk, then merge again")
