"""The ``Run`` object: one exp dir of trajectory dumps (see the package docstring for the columns and rules)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from nbtools import _paths, _table
from nbtools._escape import html as _h
from nbtools.errors import Fix, NotFoundError
from nbtools.trajectories._cache import load_cache, rows_for_steps, save_cache
from nbtools.trajectories._files import FILE_RE, StepFiles
from nbtools.trajectories._index import FileIndex, build_index, inode, load_index, save_index
from nbtools.trajectories._parse import record_dict
from nbtools.trajectories._read import (
    ALL_COLUMNS,
    ReadOptions,
    arrays_frame_columns,
    read_many,
    schema_for,
    unreadable,
)
from nbtools.trajectories._summary import step_summary

__all__ = ["Run", "FILE_RE"]

_PROBLEM_COLS = ["file", "line", "kind", "message", "excerpt"]


@_paths.tidy_reprs
class Run:
    """One experiment dir of dumps; every method re-checks the files, so a live run shows new steps.

    A remote run (``remote="gs://…/exp_001"``) is read through a local mirror (``nbtools.storage``): each step file
    is copied once per object generation and then read with the same code as a local one; ``record`` fetches one
    line by byte range when the file's index is known but its copy is not (``nbtools.storage.evict``).
    """

    def __init__(self, path: str | os.PathLike | None, *, think_tag: str = "think", answer_tag: str = "answer",
                 cache: bool = True, cache_dir: str | os.PathLike | None = None, remote: str | None = None,
                 earlier: list | tuple = ()):
        self._fs = StepFiles(path, remote=remote, earlier=earlier)
        self.remote, self.earlier, self.path = self._fs.remote, self._fs.earlier, self._fs.path
        self.think_tag, self.answer_tag = think_tag, answer_tag
        self.cache = cache
        if not cache:
            self.cache_dir = None
        elif cache_dir is not None:
            self.cache_dir = Path(cache_dir)
        else:
            self.cache_dir = self.path / ".nbtools" if os.access(self.path, os.W_OK) else None
        self._indexes: dict[Path, FileIndex] = {}
        self._info: dict[str, dict[str, dict]] = {"train": {}, "val": {}}  # per file: size, mtime, problems...
        self._mem: dict[str, tuple[dict, pa.Table]] = {}
        key = f"{think_tag}|{answer_tag}|{','.join(ALL_COLUMNS)}"
        self._key = hashlib.sha1(key.encode()).hexdigest()[:10]

    # ---- listing (nbtools.trajectories._files) ------------------------------------------------------------
    def files(self, kind: str = "train") -> dict[int, Path]:
        """{step: path} of the dumps of this kind ("train" or "val"), sorted by step (local copies' paths for a
        remote run: they exist once read)."""
        return self._fs.files(kind)

    @property
    def overlap(self) -> dict[str, list[int]]:
        """Steps of a resumed run written by more than one attempt (read from the newest), per kind.

        Example:
            >>> run.overlap["train"]       # attempt 1 got past its last checkpoint, attempt 2 wrote these again
            [21, 22, 23]
        """
        return self._fs.overlap

    @property
    def segments(self) -> list[str]:
        """The exp dirs this run reads, oldest first (one unless it was resumed in a new exp dir)."""
        return self._fs.segments

    @property
    def steps(self) -> list[int]:
        """Training steps with a dump (1-indexed, as NeMo-RL numbers them; gaps allowed)."""
        return list(self.files("train"))

    @property
    def val_steps(self) -> list[int]:
        """Steps with a validation dump (v0.6+; 0 = validation before training)."""
        return list(self.files("val"))

    @property
    def gaps(self) -> list[int]:
        """Step numbers missing between the first and the last training dump."""
        s = self.steps
        return sorted(set(range(s[0], s[-1] + 1)) - set(s)) if s else []

    # ---- index and single records --------------------------------------------------------------------------
    def index(self, step: int, *, kind: str = "train") -> FileIndex:
        """The line index of one step file (cached; extended when the file grew; rebuilt when rewritten).

        Raises:
            NotFoundError: no such step, or its file cannot be read (e.g. a dangling symlink).
        """
        path = self._fs.file(step, kind)
        self._fs.ensure([path])
        try:
            st = os.stat(path)
            cur = self._indexes.get(path) or load_index(self.cache_dir, path)
            if cur is not None and cur.fresh(st):
                self._indexes[path] = cur
                return cur
            new = build_index(path, cur, st)
        except OSError as err:
            why = unreadable(str(path), step, err).problems[0][2].split(";")[0]
            raise NotFoundError(f"expected a readable {path.name}, got: {why}",
                                fix="restore the file (or remove the broken link); the other steps read as usual"
                                ) from None
        self._indexes[path] = new
        save_index(self.cache_dir, new)
        self._fs.mark_version(self.cache_dir, path)
        return new

    def _known_index(self, path: Path) -> FileIndex | None:
        return self._indexes.get(path) or load_index(self.cache_dir, path)

    def record(self, step: int, idx: int, *, kind: str = "train", arrays: bool = True) -> dict:
        """One record as a dict: the table's columns plus (``arrays=True``) the per-token arrays as numpy.

        Why: the replacement for ``tail -n 1 train_data_stepN.jsonl | jq`` — one ``pread``, any run size.

        ``idx`` is the ``idx`` column of ``read()``: NeMo-RL's idx counts lines (0-based, one pread); a foreign dump
        whose idx field is 1-based or global is found by that field. A record whose arrays cannot be decoded comes
        without them and with a ``problem`` entry.

        Raises:
            NotFoundError: no such line, a line that ``read()`` skips too (malformed, blank, idx outside
                int64; see ``run.problems``), or a step file that cannot be read.

        Example:
            >>> rec = run.record(run.steps[-1], 0)
            >>> rec["generation_length"], rec["token_loss_mask"].sum()
        """
        if self.remote and (line := self._fs.ranged_line(path := self._fs.file(step, kind), idx, self.cache_dir,
                                                          self._known_index)) is not None:
            rec, problems = self._record_dict(step, idx, line, path, arrays, kind)
            if rec is None:
                raise NotFoundError(f"expected a record at {path.name} line {idx + 1}, got: {problems[0][2]}",
                                    fix="run.problems lists every skipped line; read another idx") from None
            return rec
        ix = self.index(step, kind=kind)
        rec = None
        if 0 <= idx < ix.n_lines:
            with contextlib.suppress(NotFoundError):  # a skipped line: the record may sit on another line
                rec = self._at_line(ix, step, idx, arrays, kind)
            if rec is not None and rec.get("idx") in (idx, None):  # NeMo-RL: the idx field counts lines (one pread)
                return rec
        # the idx column read() shows is the record's idx field (1-based or global in foreign dumps): find its line
        line = next((r["line"] - 1 for r in self.iter_records(step, kind=kind) if r.get("idx") == idx), None)
        if line is not None:
            return self._at_line(ix, step, line, arrays, kind)
        if not 0 <= idx < ix.n_lines:
            raise NotFoundError(f"expected idx in 0..{ix.n_lines - 1} for step {step}, got {idx}"
                                + (f" ({ix.pending} bytes of a line still being written)" if ix.pending else ""),
                                fix=Fix("pick an idx below the record count (len(run.read(step)))",
                                        cli="pick an idx below the step's record count (`nbtools trajectories RUN --step N`)"))
        return self._at_line(ix, step, idx, arrays, kind)

    def _at_line(self, ix, step: int, k: int, arrays: bool, kind: str) -> dict:
        off, n = ix.line_span(k)
        try:
            with open(ix.path, "rb") as f:
                line = os.pread(f.fileno(), n, off)
        except OSError as err:
            raise NotFoundError(f"expected a readable {ix.path.name}, got: {err.strerror or err}",
                                fix="restore the file; the other steps read as usual") from None
        rec, problems = self._record_dict(step, k, line, ix.path, arrays, kind)
        if rec is None:
            raise NotFoundError(f"expected a record at {ix.path.name} line {k + 1}, got: {problems[0][2]}",
                                fix="run.problems lists every skipped line; read another idx") from None
        return rec

    def _record_dict(self, step: int, k: int, line: bytes, path: Path, arrays: bool, kind: str):
        """(the record's dict or None when the line is skipped, its problems), noted in ``run.problems``."""
        out, problems = record_dict(line, step, k + 1, arrays=arrays)
        for p in problems:
            self._note(kind, path, *p[:3])
        if out is not None:
            from nbtools.rewards import split_think_answer

            r = out["response"]
            out["think"], out["answer"] = (split_think_answer(r, self.think_tag, self.answer_tag)
                                           if isinstance(r, str) else (None, None))
        return out, problems

    def iter_records(self, step: int, *, kind: str = "train", arrays: bool = False) -> Iterator[dict]:
        """Yield the records of one step file, including lines appended while iterating.

        Example:
            >>> for rec in run.iter_records(run.steps[-1]):
            ...     print(rec["reward"])
        """
        k = 0
        while True:
            ix = self.index(step, kind=kind)
            if k >= ix.n_lines:
                return
            try:
                f = open(ix.path, "rb")  # closed by the with below
            except OSError as err:
                raise NotFoundError(f"expected a readable {ix.path.name}, got: {err.strerror or err}",
                                    fix="restore the file; the other steps read as usual") from None
            with f:
                for j in range(k, ix.n_lines):
                    off, n = ix.line_span(j)
                    rec, _ = self._record_dict(step, j, os.pread(f.fileno(), n, off), ix.path, arrays, kind)
                    if rec is not None:
                        yield rec
            k = ix.n_lines

    # ---- tables --------------------------------------------------------------------------------------------
    def read(self, step: int | range | list[int] | None = None, *, arrays: bool = False, kind: str = "train",
             columns: list[str] | None = None, workers: int | None = None,
             progress: bool | None = None) -> pd.DataFrame:
        """Records of one step, several steps (range/list) or all (None) as a DataFrame.

        Why: the table behind the explorer, re-scoring and per-step summaries; a second read of unchanged
        files comes from the column cache (Arrow IPC beside the index), and only new or grown files are parsed
        again.

        Args:
            step: a step, a range/list of steps, or None for every step.
            arrays: add the per-token arrays (slower: every number is decoded).
            kind: "train" or "val".
            columns: keep only these columns (with ``cache=False`` only these are computed).
            workers: processes for large reads (default: all cores).
            progress: show a progress bar (default: only for reads over 256 MB).

        Returns:
            DataFrame; ``df.attrs`` holds ``pending_bytes``, ``skipped``, ``missing_steps`` and
            ``unreadable_steps`` (files that could not be opened; listed in ``run.problems``).

        Example:
            >>> df = run.read(range(1, 11))
            >>> df.groupby("step").reward.mean()
        """
        files = self.files(kind)
        if step is None:
            wanted = list(files)
        elif isinstance(step, int):
            self._fs.file(step, kind)
            wanted = [step]
        else:
            wanted = sorted(set(step))
        sel = [s for s in wanted if s in files]
        missing = [s for s in wanted if s not in files]
        cols = tuple(columns) if columns else ALL_COLUMNS
        bad = [c for c in cols if c not in ALL_COLUMNS]
        if bad:
            raise NotFoundError(f"expected columns from {list(ALL_COLUMNS)}, got {bad}", fix="drop the unknown names")
        self._fs.ensure([files[s] for s in sel])
        stats, broken = {}, []
        for s in sel:
            try:
                stats[s] = os.stat(files[s])
            except OSError as err:  # e.g. a dangling symlink: report it, read the other steps
                broken.append(unreadable(str(files[s]), s, err, arrays=arrays))
        sel = [s for s in sel if s in stats]
        if arrays or not self.cache:
            opts = ReadOptions(columns=ALL_COLUMNS if arrays else cols, arrays=arrays,
                               think_tag=self.think_tag, answer_tag=self.answer_tag)
            results, table = read_many([(str(files[s]), s, stats[s].st_size) for s in sel], opts, workers=workers,
                                       progress=progress)
            self._remember(kind, results)
            df = table.select(list(cols)).to_pandas()
            if arrays:
                for k, v in arrays_frame_columns(results).items():
                    df[k] = v
        else:
            df = self._read_cached(kind, files, sel, stats, workers, progress).select(list(cols)).to_pandas()
        if broken:  # after the cache: its manifest may still describe the file as it was
            self._remember(kind, broken)
        names = {files[s].name for s in wanted if s in files}
        info = [v for n, v in self._info[kind].items() if n in names]
        df.attrs.update(pending_bytes=sum(i["pending"] for i in info), skipped=sum(i["skipped"] for i in info),
                        missing_steps=missing, overlap_steps=sorted(set(self._fs.overlap_seen(kind)) & set(sel)),
                        unreadable_steps=sorted(i["step"] for i in info if any(p[1] == "unreadable"
                                                                               for p in i["problems"])))
        return df

    def _read_cached(self, kind, files, sel, stats, workers, progress) -> pa.Table:
        man, table = self._mem.get(kind) or load_cache(self.cache_dir, kind, self._key)
        edges = {s: _edge(files[s], stats[s].st_size) for s in sel}  # taken before reading: a change after is seen
        stale = [s for s in sel if (e := man.get(files[s].name)) is None
                 or (e["size"], e["mtime_ns"], e.get("ino"), e.get("edge")) != (
                     stats[s].st_size, stats[s].st_mtime_ns, inode(stats[s]), edges[s])]
        if table is None:
            table, man = schema_for(ALL_COLUMNS).empty_table(), {}
        self._info[kind].update(man)  # problems found when cached files were parsed are still reported
        if stale:
            opts = ReadOptions(think_tag=self.think_tag, answer_tag=self.answer_tag)
            results, new = read_many([(str(files[s]), s, stats[s].st_size) for s in stale], opts, workers=workers,
                                     progress=progress)
            self._remember(kind, results)
            live = {p.name for p in files.values()}
            keep = [s for s in {e["step"] for n, e in man.items() if n in live} if s not in stale]
            man = {n: e for n, e in man.items() if n in live and e["step"] in keep}
            man.update({Path(r.path).name: {**self._info[kind][Path(r.path).name], "edge": edges[r.step]}
                        for r in results if not r.unreadable})
            table = pa.concat_tables([rows_for_steps(table, keep), new])
            steps = table["step"]
            if len(table) > 1 and not pc.all(pc.greater_equal(steps[1:], steps[:-1])).as_py():
                table = table.take(pc.sort_indices(table, [("step", "ascending")]))  # stable: line order kept
            save_cache(self.cache_dir, kind, self._key, man, table)
        self._mem[kind] = (man, table)
        return table if set(sel) == {e["step"] for e in man.values()} else rows_for_steps(table, sel)

    def _remember(self, kind: str, results) -> None:
        new_skips, broken = [], []
        for r in results:
            name = Path(r.path).name
            self._info[kind][name] = {"step": r.step, "size": r.size, "mtime_ns": r.mtime_ns, "ino": r.ino,
                                      "pending": r.pending, "skipped": r.skipped, "rows": r.n_rows,
                                      "problems": [list(p) for p in r.problems]}
            if r.unreadable:
                self._indexes.pop(Path(r.path), None)
                broken.append(f"{name} ({r.problems[0][2].split(';')[0].removeprefix('cannot read the file: ')})")
                continue
            self._indexes[Path(r.path)] = r.index()
            save_index(self.cache_dir, r.index())
            self._fs.mark_version(self.cache_dir, Path(r.path))
            if r.skipped:
                new_skips.append(f"{name} ({r.skipped})")
        if new_skips:
            warnings.warn(f"malformed lines skipped in {', '.join(new_skips[:5])}"
                          f"{' …' if len(new_skips) > 5 else ''}; see run.problems for file, line and error",
                          stacklevel=3)
        if broken:
            warnings.warn(f"cannot read {', '.join(broken[:5])}{' …' if len(broken) > 5 else ''}; the other steps "
                          "were read; see run.problems", stacklevel=3)

    def _note(self, kind: str, path: Path, line: int, what: str, message: str) -> None:
        entry = self._info[kind].setdefault(path.name, {"step": -1, "size": 0, "mtime_ns": 0, "pending": 0,
                                                        "skipped": 0, "rows": 0, "problems": []})
        if not any(p[0] == line and p[1] == what for p in entry["problems"]):
            entry["problems"].append([line, what, message, ""])
            entry["skipped"] += what in ("malformed", "empty")

    # ---- what went wrong -----------------------------------------------------------------------------------
    @property
    def problems(self) -> pd.DataFrame:
        """Every problem seen so far: file, line (1-based; 0 = the whole file), kind, message, excerpt.

        Kinds: ``malformed`` and ``empty`` (the line was skipped), ``non_utf8`` (bytes replaced, row read),
        ``arrays`` (per-token arrays unreadable, the other columns read), ``unreadable`` (the file could not be
        opened, e.g. a dangling symlink).
        """
        rows = [(name, *p) for kind in self._info.values() for name, e in kind.items() for p in e["problems"]]
        return _table.table(pd.DataFrame(rows, columns=_PROBLEM_COLS),
                            when_empty="every line read so far was read whole: nothing skipped, no bytes replaced")

    @property
    def skipped(self) -> int:
        """Lines skipped by the reads so far: malformed, blank, idx outside int64 (each listed in ``problems``)."""
        return sum(e["skipped"] for kind in self._info.values() for e in kind.values())

    @property
    def pending(self) -> dict[str, int]:
        """{file: bytes after its last newline} for files read so far that end mid-line (still being written)."""
        return {n: e["pending"] for kind in self._info.values() for n, e in kind.items() if e["pending"]}

    def summary(self, step: int | range | list[int] | None = None) -> pd.DataFrame:
        """Per-step summary (see :func:`step_summary`) of the selected steps."""
        return step_summary(self.read(step))

    def __repr__(self) -> str:
        s = self.steps
        span = f"steps {s[0]}..{s[-1]} ({len(s)} files)" if s else "no steps yet"
        return f"Run({self.remote or str(self.path)!r}, {span}, val steps {len(self.val_steps)}, cache={self.cache_dir or 'memory'})"

    def _repr_html_(self) -> str:
        s = self.steps
        size = sum(self._fs.size(p) for p in self.files("train").values())
        gaps = self.gaps
        rows = [("exp dir", " + ".join(self.segments)), ("overlap", ", ".join(map(str, self._fs.overlap_seen("train"))) or "none"), ("train steps", f"{s[0]}…{s[-1]} ({len(s)} files, {size / 1e6:,.1f} MB)" if s else "none yet"),
                ("gaps", ", ".join(map(str, gaps[:20])) or "none"), ("val steps", ", ".join(map(str, self.val_steps[:20])) or "none"),
                ("cache", str(self.cache_dir or "memory")), ("problems", f"{len(self.problems)} (skipped {self.skipped})")]
        body = "".join(f"<tr><th style='text-align:left'>{k}</th><td style='text-align:left'>{_h(v)}</td></tr>"
                       for k, v in rows)
        return f"<table><caption>nbtools.trajectories.Run</caption>{body}</table>"


def _edge(path: Path, size: int, block: int = 4096) -> int | None:
    """crc32 of a file's first and last 4 KB: the cache's content key, for a rewrite that kept inode, size and
    mtime (a copy with ``cp -p``, a restored timestamp). None when unreadable (the read reports that)."""
    try:
        with open(path, "rb") as f:
            head = os.pread(f.fileno(), block, 0)
            tail = os.pread(f.fileno(), block, max(0, size - block)) if size > block else b""
    except OSError:
        return None
    return zlib.crc32(tail, zlib.crc32(head))
