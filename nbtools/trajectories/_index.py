"""Byte-offset index of the complete lines of one jsonl file, cached beside the data, extended as it grows.

Why: opening record k of step N must cost one ``pread`` regardless of run size. The index is the start offset
of every complete line plus the end of the last one; bytes after that end (a line still being written) are
``pending``. It is keyed by (size, mtime_ns, inode) and remembers a checksum of its first line and of its last
line with the newline before it: a file that only grew (same inode, both lines unchanged where they were) is
scanned from the old end; anything else (a restart that re-wrote step N, longer or not, in place or as a new
file) is rescanned. Cache files are written to a temp name and renamed, so a crash leaves no half index.
"""

from __future__ import annotations

import os
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nbtools import _atomic
from nbtools.trajectories._cache import cache_home

__all__ = ["FileIndex", "scan_starts", "build_index", "load_index", "save_index", "read_all"]

_MAGIC = 0x4E42_4958  # "NBIX"
_VERSION = 2


def inode(st: os.stat_result) -> int:
    """st_ino as a signed int64 (inode numbers may use all 64 bits)."""
    return st.st_ino - 2**64 if st.st_ino >= 2**63 else st.st_ino


def edge_sum(read, starts) -> int:
    """Checksum of the first complete line and of the last one with the newline before it.

    An append leaves both where they were; a re-written file (new rollouts for step N) changes them. ``read``
    is ``(offset, n) -> bytes``; ``starts`` the index's line starts.
    """
    if len(starts) < 2:
        return 0
    a = max(int(starts[-2]) - 1, 0)
    return zlib.crc32(read(a, int(starts[-1]) - a), zlib.crc32(read(0, int(starts[1]))))


def _pread(f):
    return lambda off, n: os.pread(f.fileno(), n, off)


@dataclass
class FileIndex:
    """Line starts of a file's complete lines; ``starts[-1]`` is the end of the last complete line."""

    path: Path
    size: int
    mtime_ns: int
    starts: np.ndarray  # int64, len = complete lines + 1
    ino: int = 0
    sums: int = 0  # edge_sum of the file as indexed

    @property
    def n_lines(self) -> int:
        return len(self.starts) - 1

    @property
    def end(self) -> int:
        return int(self.starts[-1])

    @property
    def pending(self) -> int:
        """Bytes after the last newline: a line still being written (or a writer that stopped mid-line)."""
        return self.size - self.end

    def line_span(self, k: int) -> tuple[int, int]:
        """(offset, length without the newline) of line k (0-based)."""
        a, b = int(self.starts[k]), int(self.starts[k + 1])
        return a, b - a - 1

    def fresh(self, st: os.stat_result) -> bool:
        return st.st_size == self.size and st.st_mtime_ns == self.mtime_ns and inode(st) == self.ino

    def appended(self, path: Path, st: os.stat_result) -> bool:
        """True when the file now is this one plus appended bytes (so the old line starts still hold)."""
        if inode(st) != self.ino or st.st_size <= self.size:
            return False
        if self.end == 0:
            return True
        try:
            with open(path, "rb") as f:
                return edge_sum(_pread(f), self.starts) == self.sums
        except OSError:
            return False


def scan_starts(buf, begin: int = 0, end: int | None = None) -> list[int]:
    """Offsets just after every newline in buf[begin:end], preceded by ``begin`` (bytes-like)."""
    end = len(buf) if end is None else end
    out = [begin]
    find = buf.find
    p = begin
    while True:
        q = find(b"\n", p, end)
        if q < 0:
            return out
        p = q + 1
        out.append(p)


def build_index(path: Path, prev: FileIndex | None = None, st: os.stat_result | None = None) -> FileIndex:
    """Index ``path``; reuse ``prev`` when the file only grew (append-only writer), else scan it all.

    Raises:
        OSError: the file cannot be opened (gone, a dangling symlink, no permission).
    """
    st = st or os.stat(path)
    if prev is not None and prev.fresh(st):
        return prev
    grow = prev is not None and prev.appended(path, st)
    begin = prev.end if grow else 0
    new, size = _scan_file(path, begin)
    starts = np.concatenate([prev.starts[:-1], np.asarray(new, dtype=np.int64)]) if grow else np.asarray(new, dtype=np.int64)
    mtime = st.st_mtime_ns if size == st.st_size else os.stat(path).st_mtime_ns
    with open(path, "rb") as f:
        sums = edge_sum(_pread(f), starts)
    return FileIndex(path, size, mtime, starts, inode(st), sums)


_LOCAL = threading.local()
_CHUNK = 1 << 20  # cache-sized reads: indexing runs at the speed of `cat` (measured 0.7 s/GB vs cat 0.8 s/GB)


def _scan_file(path: Path, begin: int) -> tuple[list[int], int]:
    """Line starts from ``begin`` to the end of the file as it is now, read in 1 MiB chunks; (starts, size)."""
    chunk = getattr(_LOCAL, "chunk", None)
    if chunk is None:
        chunk = _LOCAL.chunk = bytearray(_CHUNK)
    view, find, out, base = memoryview(chunk), chunk.find, [begin], begin
    with open(path, "rb", buffering=0) as f:
        f.seek(begin)
        while n := f.readinto(view):
            p = 0
            while (q := find(b"\n", p, n)) >= 0:
                p = q + 1
                out.append(base + p)
            base += n
    return out, base


def read_all(f, size: int) -> tuple[bytearray, int]:
    """Read up to ``size`` bytes of ``f`` into this thread's reusable buffer; returns (buffer, bytes read).

    Why not mmap: it measured no faster (within 10%), and a file truncated while mapped (a step file
    rewritten after a restart) kills the process with SIGBUS; a read can only come up short.
    """
    buf = getattr(_LOCAL, "buf", None)
    if buf is None or len(buf) < size:
        buf = _LOCAL.buf = bytearray(max(size + size // 4, 1 << 22))
    n = f.readinto(memoryview(buf)[:size]) if size > 0 else 0
    return buf, n or 0


def _cache_file(cache_dir: Path, path: Path) -> Path:
    return cache_dir / "index" / (path.name + ".idx")


def load_index(cache_dir: Path | None, path: Path) -> FileIndex | None:
    """The cached index of ``path`` (maybe stale: check ``.fresh``), or None."""
    if cache_dir is None:
        return None
    try:
        raw = np.fromfile(_cache_file(cache_dir, path), dtype=np.int64)
    except OSError:
        return None
    if len(raw) < 7 or raw[0] != _MAGIC or raw[1] != _VERSION:
        return None
    return FileIndex(path, int(raw[2]), int(raw[3]), raw[6:].copy(), int(raw[4]), int(raw[5]))


def save_index(cache_dir: Path | None, idx: FileIndex) -> bool:
    """Write the index atomically; False (and nothing written) when the directory is not writable."""
    if cache_dir is None or cache_home(cache_dir, "index") is None:
        return False
    target = _cache_file(cache_dir, idx.path)
    try:
        header = np.array([_MAGIC, _VERSION, idx.size, idx.mtime_ns, idx.ino, idx.sums], dtype=np.int64)
        with _atomic.replace_file(target) as tmp:
            np.concatenate([header, idx.starts.astype(np.int64)]).tofile(tmp)
        return True
    except OSError:  # the temp is gone; an unwritable cache only costs speed
        return False
