"""Projected-columns cache: one Arrow IPC file + a JSON manifest of (size, mtime_ns) per source file.

Why: re-opening a 1 GB run should not re-parse it. Format measured on the 1 GB benchmark run (~85 MB of
columns): Parquet zstd 0.9–1.5 s, Parquet lz4 0.4–0.7 s, uncompressed Arrow IPC memory-mapped 0.01 s to a
DataFrame (zero copy; pandas' string columns are Arrow-backed), so Arrow IPC it is. Rows of files whose size and mtime are unchanged come from
the Parquet table; only new or changed files are parsed again. Problems found when a file was parsed are kept
in the manifest, so a cached read still reports them. Both files are written to temp names and renamed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.feather as feather

from nbtools import _atomic

__all__ = ["load_cache", "save_cache", "rows_for_steps"]

_VERSION = 1


def _paths(cache_dir: Path, kind: str, key: str) -> tuple[Path, Path]:
    return cache_dir / f"{kind}-{key}.arrow", cache_dir / f"{kind}-{key}.manifest.json"


def load_cache(cache_dir: Path | None, kind: str, key: str) -> tuple[dict, pa.Table | None]:
    """(manifest files dict, table) or ({}, None) when absent, unreadable or from another version."""
    if cache_dir is None:
        return {}, None
    data, man = _paths(cache_dir, kind, key)
    try:
        meta = json.loads(man.read_text())
        if meta.get("version") != _VERSION:
            return {}, None
        return meta["files"], feather.read_table(data, memory_map=True)
    except (OSError, ValueError, KeyError, pa.ArrowException):
        return {}, None


def cache_home(cache_dir: Path, sub: str = "") -> Path | None:
    """``cache_dir/sub``, created below a parent that must still exist (the exp dir), or None when it is gone.

    Why: a run dir deleted while it is read must stay deleted; creating the cache with ``parents=True`` brought it
    back as ``exp_001/.nbtools/index/*.idx``, a skeleton later readers took for the latest run.
    """
    d = cache_dir / sub if sub else cache_dir
    try:
        for p in (cache_dir, d):
            try:
                os.mkdir(p)  # never its parents
            except FileExistsError:
                pass
    except OSError:
        return None
    return d


def save_cache(cache_dir: Path | None, kind: str, key: str, files: dict, table: pa.Table) -> bool:
    """Write table + manifest atomically (table first: a manifest never points at a missing table)."""
    if cache_dir is None or cache_home(cache_dir) is None:
        return False
    data, man = _paths(cache_dir, kind, key)
    try:
        with _atomic.replace_file(data) as tmp:
            feather.write_feather(table, tmp, compression="uncompressed")
        _atomic.write_json(man, {"version": _VERSION, "files": files}, indent=None)
        return True
    except (OSError, pa.ArrowException):  # the temps are gone; an unwritable cache only costs speed
        return False


def rows_for_steps(table: pa.Table, steps: list[int]) -> pa.Table:
    if not steps:
        return table.slice(0, 0)
    return table.filter(pc.is_in(table["step"], value_set=pa.array(steps, type=pa.int64())))
