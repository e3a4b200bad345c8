"""Where a run's step files are: one exp dir or a resumed run's chain of them, on disk or behind a storage URL.

Why a module of its own: ``Run`` reads tables and records; this decides which file holds a step (the newest
attempt's, for a resumed run), keeps the local mirror of a remote run at each object's current generation, and
fetches a single line by byte range when only the index is known. Nothing here parses a record.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from nbtools import storage
from nbtools._layout import step_ranges
from nbtools.errors import Fix, NotFoundError

__all__ = ["FILE_RE", "StepFiles"]

FILE_RE = re.compile(r"^(train|val)_data_step(\d+)\.jsonl$")
_FRESH_S = 5.0  # a remote run's listing younger than this is trusted for a ranged read (no metadata request)


class StepFiles:
    """The dumps of one exp dir (plus the exp dirs of earlier attempts), listed again on every call.

    For a remote run (``remote="gs://…/exp_001"``) the paths returned are those of local copies under
    ``storage.cache_path``; they exist once :meth:`ensure` fetched them.

    Example:
        >>> fs = StepFiles("runs/x/logs/exp_002", earlier=["runs/x/logs/exp_001"])
        >>> fs.files("train")[22], fs.overlap["train"]      # step 22 from exp_002; both attempts wrote 21, 22
    """

    def __init__(self, path: str | os.PathLike | None, *, remote: str | None = None, earlier: list | tuple = ()):
        self.remote = remote.rstrip("/") if remote else None
        # oldest first; URLs for a remote run: their steps are shown where this exp dir has none, and a step both
        # wrote is read from the newest (``overlap`` lists them)
        self.earlier = [str(e).rstrip("/") for e in earlier] if self.remote else [Path(e) for e in earlier]
        self.entries: dict[str, storage.Entry] = {}  # remote: file name -> its listing entry (size, generation)
        self._src: dict[str, str] = {}  # remote: file name -> the exp URL it is read from (when not self.remote)
        self._overlap: dict[str, list[int]] = {"train": [], "val": []}
        self._listed_at = -1e9  # when the remote listing was last read (monotonic seconds)
        if self.remote:
            path = storage.cache_path(self.remote)
            Path(path).mkdir(parents=True, exist_ok=True)
        self.path = Path(path)

    # ---- listing -------------------------------------------------------------------------------------------
    def files(self, kind: str = "train") -> dict[int, Path]:
        """{step: path} of the dumps of this kind ("train" or "val"), sorted by step."""
        if self.earlier:
            return self._merged(kind)
        found = {}
        if self.remote:
            self.entries.update({e.name: e for e in storage.ls(self.remote) if not e.is_dir})
            self._listed_at = time.monotonic()
            for name in self.entries:
                m = FILE_RE.match(name)
                if m and m.group(1) == kind:
                    found[int(m.group(2))] = self.path / name
            return dict(sorted(found.items()))
        with os.scandir(self.path) as it:
            for e in it:
                m = FILE_RE.match(e.name)
                if m and m.group(1) == kind:
                    found[int(m.group(2))] = Path(e.path)
        return dict(sorted(found.items()))

    def _merged(self, kind: str) -> dict[int, Path]:
        """files() of a resumed run: every exp dir's dumps, oldest first, so the newest attempt's file wins."""
        found: dict[int, Path] = {}
        seen: dict[int, int] = {}
        if self.remote:
            self._listed_at = time.monotonic()
            for url in [*self.earlier, self.remote]:
                for e in storage.ls(url):
                    m = FILE_RE.match(e.name)
                    if e.is_dir or (url != self.remote and not m):
                        continue
                    self.entries[e.name] = e
                    if m:
                        self._src[e.name] = url
                    if m and m.group(1) == kind:
                        s = int(m.group(2))
                        found[s], seen[s] = self._local(e.name), seen.get(s, 0) + 1
        else:
            for d in [*self.earlier, self.path]:
                with os.scandir(d) as it:
                    for e in it:
                        m = FILE_RE.match(e.name)
                        if m and m.group(1) == kind:
                            s = int(m.group(2))
                            found[s], seen[s] = Path(e.path), seen.get(s, 0) + 1
        self._overlap[kind] = sorted(s for s, c in seen.items() if c > 1)
        return dict(sorted(found.items()))

    def _local(self, name: str) -> Path:
        """Remote run: where the local copy of ``name`` lives (the mirror of the exp dir it is read from)."""
        src = self._src.get(name, self.remote)
        return self.path / name if src == self.remote else storage.cache_path(src) / name

    @property
    def overlap(self) -> dict[str, list[int]]:
        """Steps of a resumed run written by more than one attempt (read from the newest), per kind."""
        if self.earlier:
            self.files("train"), self.files("val")
        return {k: list(v) for k, v in self._overlap.items()}

    def overlap_seen(self, kind: str) -> list[int]:
        """``overlap[kind]`` as of the last listing (no new listing)."""
        return list(self._overlap[kind])

    @property
    def segments(self) -> list[str]:
        """The exp dirs this run reads, oldest first (one unless it was resumed in a new exp dir)."""
        return [str(x) for x in [*self.earlier, self.remote or self.path]]

    def file(self, step: int, kind: str) -> Path:
        """The path of one step's dump, without a listing when the name is already known (O(1) in the steps)."""
        direct = self.path / f"{kind}_data_step{step}.jsonl"
        if (direct.name in self.entries) if self.remote else direct.is_file():
            return self._local(direct.name) if self.remote else direct
        files = self.files(kind)
        if step not in files:
            attr = "steps" if kind == "train" else "val_steps"
            raise NotFoundError(f"expected {kind}_data_step{step}.jsonl in {self.path}; the run has steps "
                                f"{step_ranges(files)}",
                                fix=Fix(f"use one of run.{attr} (a live run adds a file at the end of each step)",
                                        cli="pass --step with one of those steps (a live run adds one at the end of "
                                            "each step)"))
        return files[step]

    def size(self, path: Path) -> int:
        """Bytes of a listed dump (the object's size for a remote run; 0 for a local file that is gone)."""
        if self.remote:
            return self.entries[path.name].size
        return path.stat().st_size if path.exists() else 0

    # ---- remote runs ---------------------------------------------------------------------------------------
    def url(self, path: Path) -> str:
        return storage.join(self._src.get(path.name, self.remote), path.name)

    def ensure(self, paths: list[Path]) -> None:
        """Remote run: local copies of these files at their current generation (downloaded only when stale)."""
        if not self.remote:
            return
        if any(p.name not in self.entries for p in paths):
            self.files("train"), self.files("val")
        wanted = [p for p in paths if p.name in self.entries]
        got = storage.fetch_many([(self.url(p), self.entries[p.name]) for p in wanted], missing_ok=True)
        for p, local in zip(wanted, got, strict=True):
            if not local.is_file():  # deleted since the listing: read as a file that is gone (this step only)
                self.entries.pop(p.name, None)

    @staticmethod
    def _version_file(cache_dir: Path | None, path: Path) -> Path | None:
        return cache_dir / "index" / (path.name + ".version") if cache_dir else None

    def mark_version(self, cache_dir: Path | None, path: Path) -> None:
        """Remote run: remember which object generation the index saved in ``cache_dir`` describes."""
        vf = self._version_file(cache_dir, path)
        entry = self.entries.get(path.name)
        if self.remote and vf is not None and entry is not None:
            from nbtools._atomic import write_text

            write_text(vf, entry.version)

    def ranged_line(self, path: Path, idx: int, cache_dir: Path | None, index_of: Callable) -> bytes | None:
        """Remote run: line ``idx`` of ``path`` by one ranged GET when the index of the object's current generation
        is known (``index_of(path)``) and its local copy is not; None otherwise (the caller reads the local copy)."""
        entry = self.entries.get(path.name)
        if entry is None or time.monotonic() - self._listed_at > _FRESH_S:  # else the listing is seconds old
            entry = storage.info(self.url(path))
            if entry is None:
                return None
            self.entries[path.name] = entry
        vf = self._version_file(cache_dir, path)
        if storage.is_cached(self.url(path), entry) or vf is None or not vf.is_file() or vf.read_text() != entry.version:
            return None
        ix = index_of(path)
        if ix is None or not 0 <= idx < ix.n_lines:
            return None
        off, n = ix.line_span(idx)
        try:  # pinned to the generation the index describes: a rewritten object is re-listed and re-indexed
            return storage.read_bytes(self.url(path), off, off + n, version=entry.version)
        except storage.StaleVersion:
            now = storage.info(self.url(path))
            if now is None:
                self.entries.pop(path.name, None)
            else:
                self.entries[path.name] = now
            return None
