"""Read many step files into one Arrow table, on every core, reporting what could not be read.

Why: a run is hundreds of files of a few MB; one process parses ~2 files per 100 ms, so the files are split
into chunks handled by a process pool (fork: the parent's imports are reused, start-up is ~10 ms). Workers
return Arrow IPC buffers (no per-row pickling) plus each file's line index, problems and pending bytes.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from nbtools.rewards import split_think_answer  # imported here so forked workers inherit it
from nbtools.trajectories._index import FileIndex, edge_sum, inode, read_all, scan_starts
from nbtools.trajectories._parse import ARRAY_KEYS, COLUMNS, parse_lines

__all__ = ["ALL_COLUMNS", "FileResult", "ReadOptions", "read_file", "read_many", "schema_for"]

ALL_COLUMNS = (*COLUMNS, "think", "answer")
_TYPES = {
    "step": pa.int64(), "idx": pa.int64(), "prompt": pa.string(), "response": pa.string(),
    "env_observation": pa.string(), "reward": pa.float64(), "generation_length": pa.float64(),
    "input_length": pa.float64(), "advantage": pa.float64(), "think": pa.string(), "answer": pa.string(),
}
_PARALLEL_MIN_BYTES = 24 * 2**20  # below this, a pool costs more than it saves


@dataclass(frozen=True)
class ReadOptions:
    columns: tuple[str, ...] = ALL_COLUMNS
    arrays: bool = False
    think_tag: str = "think"
    answer_tag: str = "answer"


@dataclass
class FileResult:
    """One file's rows (tuples in COLUMNS order, dropped once tabled), index and problems."""

    path: str
    step: int
    size: int
    mtime_ns: int
    starts: np.ndarray
    rows: list[tuple] | None = None
    problems: list[tuple[int, str, str, str]] = field(default_factory=list)  # (line, kind, message, excerpt)
    skipped: int = 0
    arrays: dict[str, list] | None = None
    ino: int = 0
    sums: int = 0
    unreadable: bool = False

    @property
    def pending(self) -> int:
        return self.size - int(self.starts[-1])

    @property
    def n_rows(self) -> int:
        return self.starts.size - 1 - self.skipped

    def index(self) -> FileIndex:
        return FileIndex(Path(self.path), self.size, self.mtime_ns, self.starts, self.ino, self.sums)


def schema_for(columns: tuple[str, ...]) -> pa.Schema:
    return pa.schema([(c, _TYPES[c]) for c in columns])


def read_file(path: str, step: int, opts: ReadOptions) -> FileResult:
    """Parse one file's complete lines (snapshot of its size now); the partial tail stays pending.

    A file that cannot be read (gone, a dangling symlink, no permission) gives no rows and one ``unreadable``
    problem (line 0), so the other steps are still read.
    """
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            buf, size = read_all(f, st.st_size)  # a reused buffer: no 1 GB of fresh allocations per run
    except OSError as err:
        return unreadable(path, step, err, arrays=opts.arrays)
    starts = scan_starts(buf, 0, size)
    parsed = parse_lines(buf, starts, step=step, arrays=opts.arrays, advantage="advantage" in opts.columns)
    mtime = st.st_mtime_ns if size == st.st_size else 0  # changed meanwhile: re-read next time
    return FileResult(path, step, size, mtime, np.asarray(starts, dtype=np.int64), parsed.rows,
                      parsed.problems, parsed.skipped, parsed.arrays or None, inode(st),
                      edge_sum(lambda off, n: buf[off : off + n], starts))


def unreadable(path: str, step: int, err: OSError, *, arrays: bool = False) -> FileResult:
    """The result for a step file that cannot be opened: no rows, one problem saying why."""
    what = err.strerror or type(err).__name__
    try:
        if os.path.islink(path) and not os.path.exists(path):
            what = f"a dangling symlink to {os.readlink(path)}"
    except OSError:
        pass
    return FileResult(path, step, 0, 0, np.zeros(1, dtype=np.int64), [],
                      [(0, "unreadable", f"cannot read the file: {what}; the other steps were read", "")],
                      arrays={k: [] for k in ARRAY_KEYS} if arrays else None, unreadable=True)


def to_table(rows: list[tuple], opts: ReadOptions) -> pa.Table:
    """One Arrow table from projected row tuples (one transposition and one array per column)."""
    schema = schema_for(opts.columns)
    if not rows:
        return schema.empty_table()
    transposed = list(zip(*rows, strict=True))
    cols = {c: transposed[i] for i, c in enumerate(COLUMNS) if c in opts.columns}
    if "think" in opts.columns or "answer" in opts.columns:
        pairs = [split_think_answer(r, opts.think_tag, opts.answer_tag) if r is not None else (None, None)
                 for r in transposed[3]]
        if "think" in opts.columns:
            cols["think"] = [p[0] for p in pairs]
        if "answer" in opts.columns:
            cols["answer"] = [p[1] for p in pairs]
    return pa.table({c: pa.array(cols[c], type=_TYPES[c]) for c in opts.columns}, schema=schema)


def _tabled(results: list[FileResult], opts: ReadOptions) -> pa.Table:
    rows = [r for res in results for r in res.rows or ()]
    for res in results:
        res.rows = None
    return to_table(rows, opts)


def _read_chunk(tasks: list[tuple[str, int]], opts: ReadOptions) -> tuple[list[FileResult], bytes]:
    """Worker: parse a run of files, return their metadata and ONE Arrow IPC stream of their rows."""
    results = [read_file(p, s, opts) for p, s in tasks]
    table = _tabled(results, opts)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return results, sink.getvalue().to_pybytes()


def _context():
    if sys.platform.startswith("linux"):
        return mp.get_context("fork")  # reuses the parent's imports; workers touch no locks held elsewhere
    return mp.get_context("spawn")


def read_many(tasks: list[tuple[str, int, int]], opts: ReadOptions, *, workers: int | None = None,
              progress: bool | None = None) -> tuple[list[FileResult], pa.Table]:
    """Read (path, step, size) tasks, in parallel when it pays off: (per-file results, rows table), in order."""
    total = sum(t[2] for t in tasks)
    workers = workers if workers is not None else min(os.cpu_count() or 1, 8)
    bar = None
    if progress or (progress is None and total > 256 * 2**20):
        from nbtools._progress import tqdm

        bar = tqdm(total=total, unit="B", unit_scale=True, desc="reading trajectories", leave=False)
    try:
        if workers <= 1 or total < _PARALLEL_MIN_BYTES or len(tasks) < 2 or opts.arrays:
            out = []
            for p, s, n in tasks:
                out.append(read_file(p, s, opts))
                if bar is not None:
                    bar.update(n)
            return out, _tabled(out, opts)
        n_chunks = min(len(tasks), max(workers * 4, math.ceil(total / (32 * 2**20))))
        chunks: list[list[tuple[str, int]]] = [[] for _ in range(n_chunks)]
        sizes = [0] * n_chunks
        per = total / n_chunks  # contiguous chunks keep step order and balance bytes
        acc, ci = 0.0, 0
        for p, s, n in tasks:
            if acc >= per * (ci + 1) and ci < n_chunks - 1:
                ci += 1
            chunks[ci].append((p, s))
            sizes[ci] += n
            acc += n
        sizes = [n for c, n in zip(chunks, sizes, strict=True) if c]
        chunks = [c for c in chunks if c]
        results: list[FileResult] = []
        tables: list[pa.Table] = []
        ex = ProcessPoolExecutor(max_workers=min(workers, len(chunks)), mp_context=_context())
        try:
            for (res, ipc), n in zip(ex.map(_read_chunk, chunks, [opts] * len(chunks)), sizes, strict=True):
                results.extend(res)
                tables.append(pa.ipc.open_stream(ipc).read_all())
                if bar is not None:
                    bar.update(n)
        except BaseException:  # KeyboardInterrupt: drop queued chunks, nothing was written
            ex.shutdown(wait=True, cancel_futures=True)
            raise
        ex.shutdown(wait=True)
        return results, pa.concat_tables(tables)
    finally:
        if bar is not None:
            bar.close()


def arrays_frame_columns(results: list[FileResult]) -> dict[str, list]:
    """Concatenate the per-file array columns (only when read with ``arrays=True``)."""
    out: dict[str, list] = {k: [] for k in ARRAY_KEYS}
    for r in results:
        for k in ARRAY_KEYS:
            out[k].extend((r.arrays or {}).get(k, []))
    return out
