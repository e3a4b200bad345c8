"""A read path to a Ray cluster's own files through its Jobs API: an fsspec filesystem for ``ray+http://HEAD:8265/PATH``.

Why: on a Ray cluster someone else runs (DGX Cloud Lepton, tutorial 003's ``/nemo-workspace``, an on-prem head) the
run's files are on a disk only the cluster's nodes mount, and the dashboard address is often all the user has. Each
call here is one short Ray job on the cluster (``python -c`` with the operations, base64 in its argument) that lists,
stats or reads the paths there and prints the answer to its log, which this side reads and decodes; the job is
deleted afterwards. ``rm`` deletes there the same way (notebook 09's wipe). Calls that name many paths (``get``/``cat`` of a list, ``find``) are one job, not one per file.
Errors keep their kind (``FileNotFoundError``, ``PermissionError``, ...), so ``nbtools.storage`` treats this
filesystem like any other. It reads where a job's driver runs (the head, without ``entrypoint_num_gpus``): the shared
storage every node mounts. A ``storage.url`` this machine can read (``gs://``, ``s3://``, a local mount) stays the
fast path; this is the path when there is none.

Each job costs about a second (Ray starts a supervisor actor and the job's process), and a cell asks the same things
again and again (05's trajectory views list ``exp_001`` a dozen times in a row; each metrics read lists the logs dir).
So listings, a directory's stat and whole files up to 8 MiB are kept for ``cache_seconds`` (10 s; 0 turns it off),
as fsspec's listings caches keep theirs. A reader walks down a tree one call at a time (06: ``ls`` and ``info`` of the
checkpoint dir, ``info`` of each step's ``policy/weights``, ``ls`` of it and its ``model``, the step's
``training_info.json``), so a job that stats or lists a directory also reads ahead the listings five levels deep (at
most 64 directories, 2000 entries, breadth first) and the small files there (each up to 64 KiB, 1 MiB in all), kept
under the same rules; a ``find`` (``storage.mirror``) is put together from kept listings when they cover the tree,
and its job reads the tree's small files with it; a path that a kept listing of its nearest listed directory does
not lead to is missing (a job that misses a path lists the nearest directory there, for the next asks). A
file's stat (``storage.exists``, a pinned read's version check) is kept only as taken right after the job read or
wrote that file (a pinned read is one job, its check never older than its read); a byte range always asks the
cluster; what this filesystem wrote is what a read of it returns. Three limits keep a kept answer from being wrong
rather than a few seconds old: an error (a path not there yet) is never kept; this filesystem's own writes and
deletes drop every other answer; so does every job this process submits, or sees end, through ``nbtools.jobs``
(:func:`forget`), so what a job wrote is never hidden behind an answer from before it. A file the cluster changes on
its own (a running trainer's logs) is read at most ``cache_seconds`` late, sooner than TensorBoard's own 15-s reload.

Example:
    >>> storage.ls("ray+http://head:8265/nemo-workspace/nemo-rl/my-run/logs")   # one Ray job on the cluster
"""

from __future__ import annotations

import base64
import io
import json
import time
import uuid
import weakref
import zlib
from typing import Any

from fsspec import AbstractFileSystem

from nbtools._escape import sh
from nbtools._rayfs._script import SCRIPT as _SCRIPT

__all__ = ["RayJobsFileSystem", "PROTOCOLS", "root_url", "forget"]

PROTOCOLS = ("ray+http", "ray+https")
_BEGIN, _END = "NBTOOLS-RAYFS-BEGIN", "NBTOOLS-RAYFS-END"
_KEEP_BYTES = 8 << 20  # a file read is kept only up to this size (a step's rollout dump can be hundreds of MB)
_INSTANCES: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # id -> every live filesystem, for forget()
_ERRORS = {"FileNotFoundError": FileNotFoundError, "IsADirectoryError": IsADirectoryError,
           "NotADirectoryError": NotADirectoryError, "PermissionError": PermissionError}



def forget(address: str | None = None) -> None:
    """Drop the kept answers of the filesystem for the cluster at ``address`` (every cluster's when None): called by
    ``nbtools.jobs`` when a job is submitted or seen ending, since that job may change the files."""
    for fs in list(_INSTANCES.values()):
        if address is None or fs.address == address.rstrip("/"):
            fs.forget()


def root_url(dashboard_url: str) -> str:
    """The URL of the cluster's ``/`` as this filesystem reads it: ``http://head:8265`` -> ``ray+http://head:8265``."""
    return "ray+" + dashboard_url.rstrip("/")


class RayJobsFileSystem(AbstractFileSystem):
    """The files of the Ray cluster at ``address`` (its dashboard URL), read by short Ray jobs."""

    protocol = PROTOCOLS
    root_marker = "/"
    cachable = True

    def __init__(self, address: str, *, timeout: float = 300, cache_seconds: float = 10, **kwargs: Any):
        super().__init__(**kwargs)
        self.address = address.rstrip("/")
        self.timeout = timeout
        self.cache_seconds = cache_seconds
        self.jobs_run = 0  # how many read jobs this instance submitted (what a reader costs, for tests and benchmarks)
        self._kept: dict[tuple, tuple[float, Any]] = {}  # (op, path, options) -> (when read, answer)
        _INSTANCES[id(self)] = self  # (fsspec's hash needs the token it sets after __init__)

    def forget(self) -> None:
        """Drop every kept answer: the next read of anything asks the cluster again."""
        self._kept.clear()

    # -- addressing --------------------------------------------------------------------------------------------
    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        text = str(path)
        if "://" in text:
            text = text.split("://", 1)[1]
        if not text.startswith("/"):  # "head:8265/abs/path" (storage passes URLs without their scheme)
            text = "/" + text.split("/", 1)[1] if "/" in text else "/"
        return text.rstrip("/") or "/"

    @staticmethod
    def _get_kwargs_from_urls(path):
        proto, _, rest = str(path).partition("://")
        return {"address": f"{proto.split('+', 1)[1]}://{rest.split('/', 1)[0]}"} if rest else {}

    # -- the one round trip ----------------------------------------------------------------------------------
    def _run(self, ops: list[dict]) -> list[Any]:
        """Run ``ops`` in one Ray job on the cluster; each result, or its error raised as its kind."""
        from nbtools.errors import Fix, NotReadyError

        payload = base64.b64encode(zlib.compress(json.dumps(ops).encode())).decode()
        entrypoint = f'PY=$(command -v python3 || command -v python) && "$PY" -c {sh(_SCRIPT)} {payload}'
        client = self._client()
        sid = f"nbtools-read-{uuid.uuid4().hex[:12]}"
        client.submit_job(entrypoint=entrypoint, submission_id=sid, metadata={"nbtools": "read"})
        self.jobs_run += 1
        try:
            end, delay = time.monotonic() + self.timeout, 0.05
            while True:
                status = client.get_job_status(sid)
                if status.is_terminal():
                    break
                if time.monotonic() > end:
                    client.stop_job(sid)
                    raise NotReadyError(f"reading through the Ray cluster at {self.address} took over {self.timeout:g} s "
                                        f"(job {sid} is {status.value})",
                                        fix=Fix("check the cluster has a free CPU for a short job (`nbtools.backends.get(cfg)"
                                                ".resources()`), or set storage.url to where this machine reads the run",
                                                cli="check the cluster has a free CPU for a short job (the Ray dashboard's "
                                                    "Cluster page, or `ray status` on the head), or set storage.url to "
                                                    "where this machine reads the run"))
                time.sleep(delay)
                delay = min(delay * 1.5, 0.5)
            text = client.get_job_logs(sid)
        finally:
            try:
                client.delete_job(sid)
            except Exception:  # noqa: BLE001 - a job left in the list is harmless; the answer matters
                pass
        lines = text.splitlines()
        if _BEGIN not in lines or _END not in lines:  # whole lines: a log may also echo the command that prints them
            raise NotReadyError(f"the read job on the Ray cluster at {self.address} gave no answer ({status.value})",
                                reason=text.strip()[-800:],
                                fix="the cluster's jobs need `python3` (or `python`) on their PATH; check the job's log above")
        first = len(lines) - 1 - lines[::-1].index(_BEGIN)
        body = "".join(lines[first + 1:first + lines[first:].index(_END)])
        out = []
        results = json.loads(zlib.decompress(base64.b64decode(body)))
        if results and "ahead" in results[-1]:
            extra = results.pop()
            self._read_ahead(extra["ahead"], extra.get("files", {}), extra.get("stats", {}))
        for r in results:
            if "err" in r:
                raise _ERRORS.get(r["err"], OSError)(f"{r['err']}: {r['msg']} (on the Ray cluster at {self.address})")
            out.append(r["ok"])
        return out

    def _client(self):
        """Ray's Jobs SDK client for the address (made once; a dashboard that does not answer is NotReadyError)."""
        if getattr(self, "_jobs", None) is None:
            from ray.job_submission import JobSubmissionClient

            from nbtools.errors import NotReadyError

            try:
                self._jobs = JobSubmissionClient(self.address)
            except (ConnectionError, RuntimeError, OSError) as e:
                raise NotReadyError(f"no Ray Jobs API answers at {self.address}", reason=str(e).splitlines()[0] if str(e)
                                    else type(e).__name__, fix="check `ray.address` (the dashboard URL, usually port "
                                    "8265) and that this machine can reach it") from None
        return self._jobs

    def _one(self, op: str, path: str, **kw: Any) -> Any:
        item = {"op": op, "path": self._strip_protocol(path), **kw}
        if op in ("write", "rm"):
            self.forget()
            answer = self._run([item])[0]
            if op == "write":  # what this filesystem just wrote is what a read of it returns (until the next job)
                self._keep({"op": "cat", "path": item["path"]}, item["data"])
            return answer
        found = self._recall(item)
        if found is not None:
            return found[0]
        if self._absent(item):
            if op == "find":
                return []
            raise FileNotFoundError(f"FileNotFoundError: {item['path']} (on the Ray cluster at {self.address}; not in "
                                    "the listing of its directory read moments ago)")
        ask = {**item, "ahead": True} if op in ("ls", "info", "find") and self.cache_seconds > 0 else item
        answer = self._run([ask])[0]
        self._keep(item, answer)
        return answer

    def _read_ahead(self, listings: dict[str, list[dict]], files: dict[str, str], stats: dict[str, dict]) -> None:
        """Keep what a job read besides its answers: the listings below a stat or listing (bounded), the stat of every
        directory in them and their small files' bytes, since a reader that stats or lists a directory next lists or
        reads what is in it (05: ``logs``, then ``exp_001``, then its ``tensorboard``); and the stat each file read or
        written had right after (what the pinned read's version check asks next)."""
        if self.cache_seconds <= 0:
            return
        for path, items in listings.items():
            self._keep({"op": "ls", "path": path}, items)
            for d in items:
                self._keep({"op": "info", "path": d["name"]}, d)
        for path, data in files.items():
            self._keep({"op": "cat", "path": path}, data)
        for path, d in stats.items():
            self._keep({"op": "info", "path": path}, d, after_read=True)

    # -- kept answers (module docstring: at most cache_seconds old, never an error, none from before a write) ----
    @staticmethod
    def _key(item: dict) -> tuple:
        return tuple(sorted((k, str(v)) for k, v in item.items() if k != "ahead"))

    def _recall(self, item: dict) -> tuple[Any] | None:
        """``(answer,)`` when a fresh enough one is kept; a ``find`` is put together from kept listings when every
        directory of the tree has one."""
        if self.cache_seconds <= 0:
            return None
        now = time.monotonic()
        for key in [k for k, (when, _) in self._kept.items() if now - when > self.cache_seconds]:
            del self._kept[key]
        kept = self._kept.get(self._key(item))
        if kept is None and item["op"] == "find":
            tree = self._tree(item["path"], bool(item.get("withdirs")))
            return None if tree is None else (tree,)
        return None if kept is None else (kept[1],)

    def _listed(self, path: str) -> list[dict] | None:
        kept = self._kept.get(self._key({"op": "ls", "path": path}))
        return None if kept is None else kept[1]

    def _absent(self, item: dict) -> bool:
        """True when the kept listing of the path's nearest listed directory (as fresh as any kept answer) does not
        name the next step towards it: a miss lists that directory (``missing`` on the cluster), so 03's lint and
        attempt records asking for ``checkpoints``, ``logs`` and a file in it before the run made them cost one job."""
        path = item["path"]
        if path == "/" or item["op"] not in ("info", "ls", "cat", "find"):
            return False
        child = path
        while child not in ("", "/"):
            parent = child.rsplit("/", 1)[0] or "/"
            listed = self._listed(parent)
            if listed is not None:
                return all(d["name"] != child for d in listed)
            child = parent
        return False

    def _tree(self, path: str, withdirs: bool) -> list[dict] | None:
        """What the ``find`` job answers for ``path``, from kept listings only (None when one is missing): os.walk's
        order, symlinked directories named but not entered."""
        items = self._listed(path)
        if items is None:
            return None
        if len(items) == 1 and items[0]["name"] == path and items[0]["type"] != "directory":
            return items  # ls of a file is the file
        own = self._kept.get(self._key({"op": "info", "path": path}))
        if withdirs and own is None:
            return None
        out = [own[1]] if withdirs else []
        todo = [(path, items)]
        while todo:
            d, entries = todo.pop(0)
            dirs = [e for e in entries if e["type"] == "directory"]
            out += [e for e in entries if e["type"] != "directory" or withdirs]
            for e in dirs:
                if e.get("islink"):
                    continue
                below = self._listed(e["name"])
                if below is None:
                    return None
                todo.append((e["name"], below))
        return out

    def _keep(self, item: dict, answer: Any, *, after_read: bool = False) -> None:
        """The one rule of what is kept: listings, a directory's stat, whole files up to 8 MiB; a file's stat only
        as taken right after its bytes were read or written in the same job (``after_read``: a pinned read's version
        check then asks no job, and is never older than the read it checks); never a byte range (the trajectory
        readers' pinned reads) nor an error."""
        op = item["op"]
        if self.cache_seconds <= 0 or op in ("write", "rm") or (op == "cat" and ("start" in item or "end" in item)):
            return
        if op == "cat" and len(answer) > _KEEP_BYTES * 4 // 3:  # base64
            return
        if op == "info" and not after_read and (answer.get("type") != "directory" or answer.get("islink")):
            return
        self._kept[self._key(item)] = (time.monotonic(), answer)

    def invalidate_cache(self, path=None):
        """fsspec's hook, asked before a stat (``storage.info``) and a pinned read: forget the kept contents of ``path``
        (every kept answer when None), so the read asks the cluster. Its stat stays: a file's kept stat is only ever
        the one taken right after the last job that read or wrote it (:meth:`_keep`)."""
        if path is None:
            self.forget()
            return
        path = self._strip_protocol(path)
        for key in [k for k in self._kept if ("op", "cat") in k and ("path", path) in k]:
            del self._kept[key]

    # -- fsspec's verbs -----------------------------------------------------------------------------------------
    def ls(self, path, detail=True, **kwargs):
        items = self._one("ls", path)
        return items if detail else [d["name"] for d in items]

    def info(self, path, **kwargs):
        return self._one("info", path)

    def find(self, path, maxdepth=None, withdirs=False, detail=False, **kwargs):
        items = self._one("find", path, withdirs=bool(withdirs))
        if maxdepth is not None:
            base = self._strip_protocol(path).rstrip("/")
            items = [d for d in items if d["name"][len(base):].count("/") <= maxdepth]
        found = {d["name"]: d for d in items}
        return found if detail else sorted(found)

    def cat_file(self, path, start=None, end=None, **kwargs):
        span = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
        return base64.b64decode(self._one("cat", path, **span))

    def cat(self, path, recursive=False, on_error="raise", **kwargs):
        if not isinstance(path, list | tuple):
            return self.cat_file(path)
        items = [{"op": "cat", "path": self._strip_protocol(p)} for p in path]
        kept = [self._recall(item) for item in items]
        asked = [item for item, k in zip(items, kept, strict=True) if k is None]
        fresh = iter(self._run(asked) if asked else ())
        data = []
        for item, k in zip(items, kept, strict=True):
            if k is None:
                k = (next(fresh),)
                self._keep(item, k[0])
            data.append(k[0])
        return {p: base64.b64decode(d) for p, d in zip(path, data, strict=True)}

    def get(self, rpath, lpath, recursive=False, **kwargs):
        """Copy remote files to local paths: a list of files is read in one job."""
        rpaths = rpath if isinstance(rpath, list | tuple) else [rpath]
        lpaths = lpath if isinstance(lpath, list | tuple) else [lpath]
        for data, target in zip(self.cat(list(rpaths)).values(), lpaths, strict=True):
            with open(target, "wb") as f:
                f.write(data)

    def get_file(self, rpath, lpath, **kwargs):
        self.get(rpath, lpath)

    def pipe_file(self, path, value, **kwargs):
        self._one("write", path, data=base64.b64encode(value).decode())

    def remove_all(self, paths: list[str]) -> list[bool]:
        """Delete files and directory trees in one job (a wipe's checkpoints and logs); True where something was there.

        Example:
            >>> fs.remove_all(["/nemo-workspace/run/checkpoints", "/nemo-workspace/run/logs"])
            [True, False]
        """
        self.forget()
        return self._run([{"op": "rm", "path": self._strip_protocol(p), "recursive": True} for p in paths])

    def rm(self, path, recursive=False, maxdepth=None):
        """Delete files (and directory trees with ``recursive``) in one job; a missing path is FileNotFoundError."""
        paths = path if isinstance(path, list | tuple) else [path]
        self.forget()
        done = self._run([{"op": "rm", "path": self._strip_protocol(p), "recursive": bool(recursive)} for p in paths])
        missing = [p for p, was in zip(paths, done, strict=True) if not was]
        if missing:
            raise FileNotFoundError(f"nothing at {missing[0]} (on the Ray cluster at {self.address})")

    def _open(self, path, mode="rb", **kwargs):
        if "r" not in mode:
            raise NotImplementedError("the Ray jobs filesystem writes whole files only (pipe_file)")
        return io.BytesIO(self.cat_file(path))
