"""A run's files by URL: a local path (or ``file://``) on the local backend, ``gs://BUCKET/PREFIX`` on GKE, and
``ray+http://HEAD:8265/PATH`` on a Ray cluster whose disks this machine does not see (read by Ray jobs, ``_rayfs``).

Why: on GKE the pods write logs, checkpoints and eval results to a bucket they mount with gcsfuse at ``/data``; a
laptop or a Workbench VM has no such mount. Every reader in nbtools therefore takes a URL and goes through this
module, which lets fsspec pick the filesystem for every URL, local paths included (``fsspec.core.url_to_fs``;
``gcsfs`` for ``gs://``): each verb is one call on that filesystem, and its errors keep their kind on every
storage (nothing there: ``NotFoundError``; no permission: ``AccessDeniedError``). On top sit only what fsspec
lacks: local files are read in place (they are their own copies), and remote objects are copied once into a local cache keyed
by the object's *generation*: an object that is rewritten (a restarted run re-writes step N) has a new generation
and is fetched again; one that did not change is never fetched twice. Credentials are the user's Application
Default Credentials (``gcloud auth application-default login``); nothing is stored. ``STORAGE_EMULATOR_HOST``
points gcsfs at a GCS emulator (the tests use fake-gcs-server).

Example:
    >>> from nbtools import storage
    >>> storage.ls("gs://my-bucket/nemo-rl/gemma3/logs")
    >>> local = storage.mirror("gs://my-bucket/nemo-rl/gemma3/logs/exp_001", include=lambda rel: rel.endswith(".jsonl"))
"""

from __future__ import annotations

import json
import os
import posixpath
import stat as stat_mod
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbtools._atomic import publish, temp_name
from nbtools._atomic import write_bytes as _write_bytes_local
from nbtools._atomic import write_text as _write_local
from nbtools.errors import (
    AccessDeniedError,
    ConflictError,
    DependencyError,
    Fix,
    NotFoundError,
    NotReadyError,
)

__all__ = [
    "Entry", "RunStorage", "is_remote", "local_path", "join", "name_of", "parent_of", "filesystem", "ls", "info",
    "exists", "read_bytes", "StaleVersion", "read_text", "write_bytes", "write_text", "remove", "glob", "fetch", "fetch_many", "mirror", "cache_root", "cache_path", "is_cached", "evict",
]

_MANIFEST = ".nbtools-generations.json"
_LOCK = threading.RLock()
_FS: dict[str, Any] = {}  # gcsfs filesystems by emulator address ("" for Google)
_LOCAL: dict[str, Any] = {}  # the local filesystem, by protocol name ("file", "local")
_GCS = ("gs", "gcs")


@dataclass(frozen=True)
class Entry:
    """One file or directory: ``version`` changes whenever its bytes may have (GCS generation; inode+size+mtime)."""

    url: str
    name: str
    size: int
    version: str
    is_dir: bool = False
    md5: str = ""  # the object's MD5 as GCS reports it (base64), when it has one (not for composite objects)


@dataclass(frozen=True)
class RunStorage:
    """Where the cluster's shared storage is, as this machine reads it.

    ``root`` is the URL of what the cluster sees at ``mount_path`` (GKE: ``gs://BUCKET`` mounted at ``/data`` by
    gcsfuse). ``mount_path`` None means the cluster and this machine see the same paths (the local backend, or a
    shared filesystem).

    Example:
        >>> RunStorage("gs://my-bucket", "/data").url("/data/nemo-rl/x/logs")
        'gs://my-bucket/nemo-rl/x/logs'
    """

    root: str
    mount_path: str | None = None

    def url(self, cluster_path: str) -> str:
        """The URL of a path as the cluster's jobs see it."""
        if self.mount_path is None:
            return str(cluster_path)
        mount = self.mount_path.rstrip("/") or "/"
        p = posixpath.normpath(str(cluster_path))
        if p != mount and not p.startswith(mount.rstrip("/") + "/"):
            raise NotFoundError(
                f"{cluster_path!r} is not under the shared storage mount {mount!r}, so it cannot be read from here "
                f"(only {self.root} is)",
                fix=f"put the run's directories under {mount}/ in the experiment (logging.log_dir, "
                "checkpointing.checkpoint_dir), so they land in the bucket",
            )
        rel = p[len(mount):].lstrip("/")
        return join(self.root, rel) if rel else self.root

    def cluster_path(self, url: str) -> str:
        """The path under which the cluster's jobs see ``url`` (the inverse of :meth:`url`)."""
        if self.mount_path is None:
            return str(url)
        root = self.root.rstrip("/")
        if url != root and not url.startswith(root + "/"):
            raise NotFoundError(f"{url!r} is not under {root!r}", fix=f"pass a URL under {root}/")
        rel = url[len(root):].lstrip("/")
        return posixpath.join(self.mount_path, rel) if rel else self.mount_path


# -- addressing ---------------------------------------------------------------------------------------------


_LOCAL_PROTOCOLS = ("file", "local")  # fsspec's LocalFileSystem.protocol (not a backend's name)


def _protocol(url: str) -> str:
    head, sep, _ = str(url).partition("://")
    return head.lower() if sep else "file"


def is_remote(url: str | os.PathLike) -> bool:
    """True for URLs that are not on this machine's filesystem (``gs://``, ``s3://``, …)."""
    return _protocol(os.fspath(url)) not in _LOCAL_PROTOCOLS


def local_path(url: str | os.PathLike) -> Path:
    """The local path of a local URL (``file://`` stripped, ``~`` expanded)."""
    text = os.fspath(url)
    if is_remote(text):
        raise NotFoundError(f"{text!r} is not a local path", fix="read it with nbtools.storage.fetch / mirror")
    return Path(text.split("://", 1)[1] if "://" in text else text).expanduser()


def join(url: str | os.PathLike, *parts: str) -> str:
    """``url`` with path parts appended (``/`` separators for remote URLs)."""
    text = os.fspath(url)
    if not is_remote(text):
        return str(local_path(text).joinpath(*parts))
    return "/".join([text.rstrip("/"), *(p.strip("/") for p in parts if p)])


def name_of(url: str | os.PathLike) -> str:
    """The last path component."""
    return posixpath.basename(os.fspath(url).rstrip("/"))


def parent_of(url: str | os.PathLike) -> str:
    """The URL one level up."""
    text = os.fspath(url).rstrip("/")
    if not is_remote(text):
        return str(local_path(text).parent)
    proto, _, rest = text.partition("://")
    return f"{proto}://{posixpath.dirname(rest)}"


def cache_root() -> Path:
    """Where remote objects are cached: ``$NBTOOLS_CACHE_DIR/storage`` (default ``~/.cache/nbtools/storage``)."""
    base = os.environ.get("NBTOOLS_CACHE_DIR") or Path.home() / ".cache" / "nbtools"
    return Path(base) / "storage"


def cache_path(url: str) -> Path:
    """Where the cached copy of a remote object (or the mirror of a remote dir) lives on this machine."""
    return _cache_path(url)


def _cache_path(url: str) -> Path:
    proto, _, rest = url.partition("://")
    parts = [p for p in rest.split("/") if p not in ("", ".", "..")]
    return cache_root().joinpath(proto, *parts)


# -- filesystems --------------------------------------------------------------------------------------------


def filesystem(url: str | os.PathLike):
    """``(fs, path)`` for a URL, local paths included, as ``fsspec.core.url_to_fs`` resolves it.

    ``gs://`` is the one exception to the registry's choice of class: gcsfs registers its experimental zonal/HNS
    layer, which asks a gRPC control plane about every bucket (one more request per call where the caller may not
    read bucket metadata, 60 s timeouts against an emulator); nbtools only lists and reads objects, which the JSON
    API of gcsfs' core class does for every bucket type. Credentials: ADC (anonymous against an emulator).
    """
    import fsspec

    text = os.fspath(url)
    proto = _protocol(text)
    local = _LOCAL.get(proto) if "::" not in text else None
    if local is not None:  # the registry's answer for a plain local path never changes: resolve it once
        return local, text if _plain(text) else local._strip_protocol(text)
    if proto not in _GCS:
        if proto.startswith("ray+"):  # a Ray cluster's own files, read by short jobs through its dashboard (_rayfs)
            from nbtools._rayfs import PROTOCOLS, RayJobsFileSystem

            for name in PROTOCOLS:
                fsspec.register_implementation(name, RayJobsFileSystem, clobber=True)
        try:
            fs, path = fsspec.core.url_to_fs(text)
        except (ImportError, ValueError) as e:
            raise DependencyError(f"no filesystem for {text!r}: {e}",
                                  fix=f"install the fsspec implementation for {proto}:// (e.g. pip install s3fs)") from None
        if proto in _LOCAL_PROTOCOLS and "::" not in text:
            _LOCAL[proto] = fs
        return fs, path
    emulator = os.environ.get("STORAGE_EMULATOR_HOST", "")
    with _LOCK:
        fs = _FS.get(emulator)
        if fs is None:
            try:
                from gcsfs.core import GCSFileSystem
            except ImportError:
                raise DependencyError.extra("gcsfs", "reading gs://") from None
            try:
                fs = _FS[emulator] = GCSFileSystem(token="anon" if emulator else "google_default",
                                                   skip_instance_cache=True)
            except Exception as e:  # google.auth.exceptions.DefaultCredentialsError and friends
                raise NotReadyError(
                    f"no Google credentials to read {text}", reason=f"{type(e).__name__}: {str(e).splitlines()[0]}",
                    fix="run `gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS)",
                ) from None
    return fs, fs._strip_protocol(text)


def _call(url: str, fn, *, want: str = ""):
    """Run one filesystem call; its errors keep their kind, typed, with the fix (same on every filesystem).

    ``want`` ("a file" / "a directory") words the not-found message for the verb.
    """
    where = f"{want} at {url}" if want else url
    try:
        return fn()
    except FileNotFoundError:
        raise NotFoundError(f"expected {where}, found nothing there", fix=_FIX_MISSING) from None
    except IsADirectoryError:
        raise NotFoundError(f"expected {want or 'a file'} at {url}, found a directory",
                            fix=Fix("pass a file's path or URL; list the directory with nbtools.storage.ls",
                                    cli="pass a file's path or URL (`gcloud storage ls URL` lists a directory)")) from None
    except NotADirectoryError:
        raise NotFoundError(f"expected {want or 'a directory'} at {url}, found a file",
                            fix="pass the directory that holds it") from None
    except PermissionError as e:
        raise _denied(url, e) from None
    except OSError as e:
        if str(e).startswith("Forbidden"):  # gcsfs raises a plain OSError for HTTP 403 (gcsfs/retry.py)
            raise _denied(url, e) from None
        raise NotReadyError(f"could not read {url}", reason=f"{type(e).__name__}: {e}",
                            fix="check your network and credentials (or the disk), then retry") from None
    except Exception as e:
        if getattr(e, "code", None) in (401, 403):  # gcsfs.retry.HttpError: credentials refused
            raise _denied(url, e) from None
        raise


def _denied(url: str, e: Exception) -> AccessDeniedError:
    reason = " ".join(str(e).split())[:300]
    return AccessDeniedError(
        f"permission denied on {url} ({reason})",
        fix="grant your account roles/storage.objectViewer on the bucket (roles/storage.objectUser to write), or "
            "re-run `gcloud auth application-default login`" if is_remote(url)
        else "make it readable (chmod u+r) or run as its owner")


_FIX_MISSING = Fix("check the URL or path (bucket, prefix; cfg.log_dir / cfg.checkpoint_dir); the job creates its "
                   "directories when it starts", cli="check the URL or path (bucket, prefix; the experiment's log_dir / "
                   "checkpoint_dir); the job creates its directories when it starts")


def _version(d: dict) -> str:
    """What changes whenever the bytes may have: the object generation (GCS), an etag, else inode:size:mtime."""
    for key in ("generation", "etag", "ETag"):
        if d.get(key):
            return str(d[key])
    return ":".join(str(d.get(k, "")) for k in ("ino", "size", "mtime"))


def _entry(url: str, d: dict, name: str | None = None) -> Entry:
    md5 = d.get("md5Hash") if isinstance(d.get("md5Hash"), str) else ""
    return Entry(url, name or name_of(url), int(d.get("size") or 0), _version(d), d.get("type") == "directory", md5)


def _followed(fs, d: dict) -> dict | None:
    """A symbolic link's target (listings report the link itself); None for a dangling link."""
    if not d.get("islink"):
        return d
    try:
        return {**fs.info(d["name"]), "name": d["name"]}
    except OSError:
        return None


# -- reading ------------------------------------------------------------------------------------------------


def ls(url: str | os.PathLike) -> list[Entry]:
    """The directory's children (files and sub-directories), sorted by name.

    Raises:
        NotFoundError: nothing is there, or a file is.
        AccessDeniedError: the directory cannot be listed with these credentials / permissions.
    """
    text = _canonical(url)
    fs, path = filesystem(text)
    items = _call(text, lambda: fs.ls(path, detail=True, refresh=True), want="a directory")
    base = path.rstrip("/")
    if len(items) == 1 and items[0]["name"].rstrip("/") == base and items[0].get("type") != "directory":
        raise NotFoundError(f"expected a directory at {text}, found a file", fix="pass the directory that holds it")
    prefix = text if text.endswith("/") else text + "/"  # join() of a canonical URL, without a Path per entry
    out = []
    for d in items:
        full = d["name"].rstrip("/")
        if full == base or (d := _followed(fs, d)) is None:
            continue
        name = posixpath.basename(full)
        out.append(_entry(prefix + name, d, name))
    return sorted(out, key=lambda e: e.name)


def info(url: str | os.PathLike) -> Entry | None:
    """The file or directory at ``url``, or None when nothing is there.

    Raises:
        AccessDeniedError: it cannot be read with these credentials / permissions.
    """
    text = _canonical(url)
    fs, path = filesystem(text)

    def call():
        try:
            fs.invalidate_cache(path)
            return fs.info(path)
        except FileNotFoundError:
            return None

    d = _call(text, call)
    return None if d is None else _entry(text, d)


def exists(url: str | os.PathLike) -> bool:
    """True when a file or directory is at ``url``."""
    return info(url) is not None


def read_bytes(url: str | os.PathLike, start: int | None = None, end: int | None = None, *,
               version: str | None = None) -> bytes:
    """The bytes ``[start, end)`` of a file (all of it by default): one ranged GET for a remote object.

    ``version`` pins an object's generation (``Entry.version``): an offset found in one generation is never read
    from another. A pinned read of an object rewritten since raises :class:`StaleVersion`.
    """
    text = _canonical(url)
    if version is not None:
        return _read_pinned(text, start, end, version)
    fs, path = filesystem(text)
    return _call(text, lambda: fs.cat_file(path, start=start, end=end), want="a file")


class StaleVersion(NotFoundError):
    """The object was rewritten: the generation a reader pinned is gone (re-list it and read it again)."""


def _read_pinned(url: str, start: int | None, end: int | None, version: str) -> bytes:
    fs, path = filesystem(url)
    stale = StaleVersion(f"{url} was rewritten: generation {version} is gone",
                         fix="read it again (its listing and index are refreshed)")
    if _protocol(url) in _GCS and version.isdigit():  # GCS serves exactly that generation, or 404
        try:
            return _call(url, lambda: fs.cat_file(path, start=start, end=end, generation=version))
        except NotFoundError:
            raise stale from None
    fs.invalidate_cache(path)  # a filesystem that keeps whole files a few seconds (_rayfs) reads this one afresh
    data = _call(url, lambda: fs.cat_file(path, start=start, end=end), want="a file")
    now = info(url)  # a filesystem without generations: the version must not have changed around the read
    if now is None or now.version != version:
        raise stale
    return data


def read_text(url: str | os.PathLike) -> str:
    """A whole (small) file as text (undecodable bytes replaced)."""
    return read_bytes(url).decode("utf-8", errors="replace")


def write_bytes(url: str | os.PathLike, data: bytes) -> None:
    """Replace a file with ``data`` so no reader sees it half-written: one object upload where the store makes
    an object visible only once complete (GCS); a temp file, fsync and rename on a local disk, which fsspec's
    local ``pipe_file`` (written in place) does not do."""
    text = _canonical(url)
    if not is_remote(text):
        _write_bytes_local(local_path(text), data, fsync=True)
        return
    fs, path = filesystem(text)
    _call(text, lambda: fs.pipe_file(path, data))


def write_text(url: str | os.PathLike, text: str) -> None:
    """:func:`write_bytes` of UTF-8 text."""
    write_bytes(url, text.encode("utf-8"))


def remove(url: str | os.PathLike) -> bool:
    """Delete a file or a whole directory tree; False when nothing was there (a wipe that runs twice is safe).

    Example:
        >>> storage.remove(cfg.checkpoints_url)   # on a Ray cluster's own disk: one short job there
        True
    """
    text = _canonical(url)
    fs, path = filesystem(text)
    try:
        _call(text, lambda: fs.rm(path, recursive=True))
    except NotFoundError:
        return False
    evict(text)  # this machine's copies of what was there
    return True


def glob(url: str | os.PathLike, pattern: str) -> list[str]:
    """Sorted URLs (or paths) of the files directly under ``url`` whose names match ``pattern`` ([] when missing)."""
    import fnmatch

    try:
        return sorted(e.url for e in ls(url) if fnmatch.fnmatch(e.name, pattern))
    except NotFoundError:
        return []


def _canonical(url: str | os.PathLike) -> str:
    """A URL as given, a local one as its path (``file://`` stripped, ``~`` expanded): the form entries carry."""
    text = os.fspath(url)
    if _plain(text):
        return text
    return str(local_path(text)) if not is_remote(text) else text.rstrip("/")


def _plain(text: str) -> bool:
    """An absolute, normalised POSIX path: its own canonical form and fsspec's local path (no Path built for it)."""
    return (os.sep == "/" and text.startswith("/") and "://" not in text and "//" not in text and "/./" not in text
            and not text.endswith(("/", "/.")) or text == "/")


# -- the cache of remote objects, by generation ---------------------------------------------------------------
# Kept instead of fsspec's ``filecache`` (WholeFileCacheFileSystem, check_files=True, the one of fsspec's caching
# filesystems that notices a rewritten object): benchmarks/bench_storage_cache.py, 64 objects of 1 MB in
# fake-gcs-server, median of 3 fresh processes (2026-11-28, load average ~25 on 2 cores), filecache / nbtools time:
# cold 0.50x (fsspec faster: nbtools re-reads every download for its MD5 check, 0.85 of its 2.3 s in a profile),
# warm 0.87x, after one object is rewritten 1.08x; both current after the rewrite (filecache without check_files
# served the stale copy). Speed is no reason to keep this; what filecache lacks is: copies under their own names in
# the run's layout (mirror() is a directory TensorBoard and the readers open), the MD5 check of each download, removal
# of copies whose object was deleted, noticing a copy edited or truncated since, and evict() keeping the indexes.


def _load_manifest(d: Path) -> dict[str, str]:
    try:
        data = json.loads((d / _MANIFEST).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _signature(st: os.stat_result) -> str:
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def _hit(p: Path, entry: Entry, man: dict[str, str]) -> bool:
    """The cached copy ``p`` holds ``entry``'s generation, untouched since it was downloaded.

    The manifest keeps ``"<generation>\t<inode>:<size>:<mtime_ns>"`` of the copy as written: a copy edited, replaced
    or truncated since is downloaded again. A directory where the copy belongs is an error naming it.
    """
    version, _, sig = man.get(p.name, "").partition("\t")
    if version != entry.version:
        return False
    try:
        st = os.stat(p)
    except OSError:
        return False
    if stat_mod.S_ISDIR(st.st_mode):
        raise ConflictError(f"the cached copy of {entry.url} at {p} is a directory, not the object's bytes",
                            fix=f"delete {p} (it is nbtools' cache, not the bucket) and read again")
    return stat_mod.S_ISREG(st.st_mode) and st.st_size == entry.size and (not sig or sig == _signature(st))


def _cached(url: str, entry: Entry) -> Path | None:
    p = _cache_path(url)
    return p if _hit(p, entry, _load_manifest(p.parent)) else None


def is_cached(url: str, entry: Entry) -> bool:
    """True when this machine holds the object's current generation (``entry.version``)."""
    return _cached(url, entry) is not None


def _record(paths: list[Path], versions: list[str]) -> None:
    by_dir: dict[Path, dict[str, str]] = {}
    for p, v in zip(paths, versions, strict=True):
        by_dir.setdefault(p.parent, {})[p.name] = f"{v}\t{_signature(os.stat(p))}"
    with _LOCK:
        for d, new in by_dir.items():
            man = _load_manifest(d)
            man.update(new)
            _write_local(d / _MANIFEST, json.dumps(man, sort_keys=True))


def fetch(url: str | os.PathLike, *, entry: Entry | None = None) -> Path:
    """A local file holding the object's current bytes: the file itself when local, else the cached copy.

    A remote object is downloaded only when the cache lacks its current generation (temp file + rename).

    Example:
        >>> storage.fetch("gs://my-bucket/nemo-rl/x/checkpoints/step_30/training_info.json").read_text()
    """
    text = _canonical(url)
    entry = entry or info(text)
    if entry is None or entry.is_dir:
        raise NotFoundError(f"expected a file at {text}, found {'a directory' if entry else 'nothing there'}",
                            fix=Fix("check the URL or path; list its parent with nbtools.storage.ls",
                                    cli="check the URL or path; list its parent (`ls`, or `gcloud storage ls` for gs://)"))
    if not is_remote(text):  # a file on this machine is its own copy
        return local_path(text)
    hit = _cached(text, entry)
    if hit is not None:
        return hit
    _download([(text, entry)])
    return _cache_path(text)


def fetch_many(items: list[tuple[str, Entry]], *, missing_ok: bool = False) -> list[Path]:
    """Local copies of many remote objects at once (only the ones whose generation is not cached are downloaded,
    concurrently); the paths come back in order.

    An object deleted since it was listed raises :class:`NotFoundError` naming it; with ``missing_ok`` its path
    comes back without a file (a cached copy of it is removed) and every other object is still fetched.
    """
    manifests: dict[Path, dict[str, str]] = {}
    stale = []
    for u, e in items:
        p = _cache_path(u)
        man = manifests.get(p.parent)
        if man is None:
            man = manifests[p.parent] = _load_manifest(p.parent)
        if not _hit(p, e, man):
            stale.append((u, e))
    gone = _download(stale, missing_ok=missing_ok)
    for u in gone:
        _forget(_cache_path(u))
    return [_cache_path(u) for u, _ in items]


def _forget(p: Path) -> None:
    """Remove a cached copy and its manifest line (its object no longer exists)."""
    p.unlink(missing_ok=True)
    with _LOCK:
        man = _load_manifest(p.parent)
        if man.pop(p.name, None) is not None:
            _write_local(p.parent / _MANIFEST, json.dumps(man, sort_keys=True))


def evict(url: str | os.PathLike) -> int:
    """Delete the cached copies under a remote URL (readers' indexes and column caches are kept); bytes freed.

    Why: a 1 GB run read once needs no second GB on disk; records are then read by byte range through the kept
    indexes.
    """
    text = os.fspath(url)
    if not is_remote(text):
        return 0
    root, freed = _cache_path(text), 0
    for d, _, files in os.walk(root):
        man = _load_manifest(Path(d))
        gone = [f for f in files if f in man]
        for f in gone:
            p = Path(d, f)
            freed += p.stat().st_size
            p.unlink()
            man.pop(f)
        if gone:
            _write_local(Path(d) / _MANIFEST, json.dumps(man, sort_keys=True))
    return freed


def _download(items: list[tuple[str, Entry]], *, missing_ok: bool = False) -> list[str]:
    """Download objects into the cache (concurrently, through gcsfs' batch ``get``), each renamed into place.

    Returns the URLs of objects that no longer exist (``missing_ok``; else NotFoundError naming them): when the
    batch fails on one, each object is fetched on its own so the error names the right one and the rest arrive.
    """
    if not items:
        return []
    fs, _ = filesystem(items[0][0])
    targets = [_cache_path(u) for u, _ in items]
    temps = [temp_name(t, "download") for t in targets]
    for t in targets:
        t.parent.mkdir(parents=True, exist_ok=True)
    rpaths = [u.split("://", 1)[1] for u, _ in items]
    gone: list[str] = []
    try:
        try:
            fs.get(rpaths, [str(t) for t in temps])
        except FileNotFoundError:  # one object vanished since the listing: find which, keep the others
            for (u, _), r, tmp in zip(items, rpaths, temps, strict=True):
                try:
                    _call(u, lambda r=r, tmp=tmp: fs.get(r, str(tmp)))
                except NotFoundError:
                    gone.append(u)
        except (PermissionError, OSError):
            _call(items[0][0], lambda: fs.get(rpaths, [str(t) for t in temps]))  # the typed error, named
        if gone and not missing_ok:
            raise NotFoundError(f"expected {', '.join(gone[:5])} to exist (listed moments ago), found nothing there",
                                fix="it was deleted or replaced while being read; list and read again")
        done = [(t, tmp, e) for (u, e), t, tmp in zip(items, targets, temps, strict=True) if u not in gone]
        for _, tmp, e in done:
            if not tmp.is_file():
                raise NotReadyError(f"downloading {e.url} left no file at {tmp}", fix="retry")
            _check_md5(tmp, e)
        for target, tmp, _ in done:
            if target.is_dir() and not target.is_symlink():
                raise ConflictError(f"the cached copy of {items[0][0]} at {target} is a directory, not the "
                                    "object's bytes", fix=f"delete {target} (it is nbtools' cache, not the bucket) "
                                                          "and read again")
            publish(tmp, target)
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
    _record([t for t, _, _ in done], [e.version for _, _, e in done])
    return gone


def _check_md5(path: Path, e: Entry) -> None:
    """A downloaded copy must have the MD5 the object's metadata states (when it states one)."""
    if not e.md5:
        return
    import base64
    import hashlib

    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    if base64.b64encode(h.digest()).decode() != e.md5:
        raise NotReadyError(f"the copy of {e.url} downloaded to {path} does not match the object's MD5 ({e.md5})",
                            reason="the download was damaged or the object changed while it was read",
                            fix="read it again")


def mirror(url: str | os.PathLike, *, include: Callable[[str], bool] | None = None) -> Path:
    """A local directory with the current copy of the files under ``url`` (those whose relative path passes
    ``include``): the directory itself when local; for a remote URL only new or rewritten objects are fetched,
    and local copies of objects that disappeared are removed.

    Example:
        >>> d = storage.mirror(logs_url, include=lambda rel: "tfevents" in rel)
    """
    text = _canonical(url)
    fs, path = filesystem(text)
    if not is_remote(text):  # a directory on this machine is its own mirror
        found = info(text)
        if found is None or not found.is_dir:
            raise NotFoundError(f"expected a directory at {text}, found {'a file' if found else 'nothing there'}",
                                fix=_FIX_MISSING)
        return local_path(text)
    found = _call(text, lambda: fs.find(path, detail=True, withdirs=False, refresh=True), want="a directory")
    if not found and info(text) is None:
        raise NotFoundError(f"expected a directory at {text}, found nothing there", fix=_FIX_MISSING)
    if path.rstrip("/") in found:  # find() of an object's own name is that object
        raise NotFoundError(f"expected a directory at {text}, found a file", fix="pass the directory that holds it")
    base = path.rstrip("/") + "/"
    wanted: dict[str, Entry] = {}
    for name, d in found.items():
        rel = name[len(base):] if name.startswith(base) else posixpath.basename(name)
        if rel and not rel.endswith("/") and (include is None or include(rel)):
            wanted[join(text, rel)] = _entry(join(text, rel), d)
    stale = [(u, e) for u, e in wanted.items() if _cached(u, e) is None]
    _download(stale)
    root = _cache_path(text)
    root.mkdir(parents=True, exist_ok=True)
    keep = {_cache_path(u) for u in wanted}
    for d, _, files in os.walk(root):
        man = _load_manifest(Path(d))
        gone = [f for f in files if f in man and Path(d, f) not in keep
                and (include is None or include(os.path.relpath(Path(d, f), root)))]
        for f in gone:
            Path(d, f).unlink(missing_ok=True)
            man.pop(f, None)
        if gone:
            _write_local(Path(d) / _MANIFEST, json.dumps(man, sort_keys=True))
    return root
