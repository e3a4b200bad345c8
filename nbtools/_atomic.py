"""The one way nbtools writes a file or a directory so that a reader never sees it half-written.

Why: a notebook cell interrupted, a killed job or a full disk must leave either the old content or the new one,
never a truncated file that looks complete. Every write goes to a temp name in the target's directory and is
renamed over the target, which POSIX makes atomic. Temp names are created exclusively (``O_EXCL``, like
``tempfile.mkstemp``) with a random part, so two writers of one file, in threads, processes or on two hosts of a
shared disk, never share one; on any failure the temp is removed and the target is left as it was. This module is
the only place in nbtools that renames (a test walks the package for ``os.replace``/``rename``/``shutil.move``).

Example:
    >>> from nbtools._atomic import write_json
    >>> write_json(cfg.run_dir / "eval" / "summary.json", summary)
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = [
    "temp_name", "temp_file", "temp_dir", "write_bytes", "write_text", "write_json", "open_atomic", "replace_file",
    "atomic_dir", "publish", "publish_dir",
]

_ATTEMPTS = 100


def temp_name(target: str | os.PathLike, kind: str = "tmp", suffix: str = "") -> Path:
    """``<dir>/.<name>.<kind>-<pid>-<random><suffix>``: hidden, beside the target, not yet created."""
    p = Path(target)
    return p.with_name(f".{p.name}.{kind}-{os.getpid()}-{secrets.token_hex(6)}{suffix}")


def temp_file(target: str | os.PathLike, kind: str = "tmp", suffix: str = "") -> Path:
    """Create an empty, unique temp file beside ``target`` (parents created) and return its path.

    Like ``tempfile.mkstemp`` (exclusive create, random name), but with the permissions the umask gives a new file
    (mkstemp's are 0600), so the renamed target reads like any file the user writes.
    """
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    for _ in range(_ATTEMPTS):
        tmp = temp_name(target, kind, suffix)
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temp name beside {target} after {_ATTEMPTS} tries")


def temp_dir(target: str | os.PathLike, kind: str = "partial") -> Path:
    """Create an empty, unique temp directory beside ``target`` (parents created) and return its path."""
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    for _ in range(_ATTEMPTS):
        tmp = temp_name(target, kind)
        try:
            tmp.mkdir()
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temp name beside {target} after {_ATTEMPTS} tries")


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def open_atomic(path: str | os.PathLike, mode: str = "w", *, fsync: bool = False, chmod: int | None = None,
                **kwargs: Any) -> Iterator[IO]:
    """A file-like writer whose content appears at ``path`` only when the block ends without an error.

    ``mode`` is ``"w"`` (text, UTF-8 unless ``encoding=``) or ``"wb"``; ``chmod`` sets the permissions; ``fsync``
    flushes the data (and the directory entry) to disk before returning.

    Example:
        >>> with open_atomic(run / "train_data_step3.jsonl") as f:
        ...     f.writelines(lines)
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"open_atomic writes a whole file: mode 'w' or 'wb', got {mode!r}")
    if mode == "w":
        kwargs.setdefault("encoding", "utf-8")
    p = Path(path)
    tmp = temp_file(p)
    try:
        with open(tmp, mode, **kwargs) as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        if chmod is not None:
            os.chmod(tmp, chmod)
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if fsync:
        _fsync_dir(p.parent)


def write_bytes(path: str | os.PathLike, data: bytes, *, mode: int | None = None, fsync: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically (parents created); ``mode`` sets the permissions (default: umask).

    Example:
        >>> write_bytes(out / "model.safetensors.index.json", blob)
    """
    with open_atomic(path, "wb", fsync=fsync, chmod=mode) as f:
        f.write(data)
    return Path(path)


def write_text(path: str | os.PathLike, text: str, *, mode: int | None = None, fsync: bool = False) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; see :func:`write_bytes`."""
    return write_bytes(path, text.encode("utf-8"), mode=mode, fsync=fsync)


def write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = 2, default: Any = None,
               fsync: bool = False) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically; see :func:`write_bytes`.

    Example:
        >>> write_json(state_path, {"kind": "provision", "steps": {}})
    """
    return write_text(path, json.dumps(obj, indent=indent, default=default), fsync=fsync)


@contextlib.contextmanager
def replace_file(path: str | os.PathLike, *, suffix: str = "") -> Iterator[Path]:
    """Yield a temp path for a writer that needs a file name (``fig.savefig``, ``feather.write_feather``), then
    rename it over ``path``.

    ``suffix`` keeps an extension that the writer uses to pick its format (``".png"``). On an error the temp
    file is removed and the target is left as it was.

    Example:
        >>> with replace_file(png, suffix=".png") as tmp:
        ...     fig.savefig(tmp)
    """
    p = Path(path)
    tmp = temp_file(p, suffix=suffix)
    try:
        yield tmp
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def publish(tmp: str | os.PathLike, path: str | os.PathLike) -> None:
    """Rename a finished file (or a name whose meaning is a contract, e.g. a pid record moved aside) over ``path``.

    For writers that cannot use the helpers above (a download filling temps it was handed, NeMo-RL's own
    ``tmp_step_N`` → ``step_N``); ``tmp`` must be on the same filesystem as ``path``.
    """
    os.replace(tmp, path)


def publish_dir(tmp: str | os.PathLike, path: str | os.PathLike, *, overwrite: bool = False,
                durable: bool = False) -> None:
    """Rename the finished directory ``tmp`` to ``path`` in one step.

    With ``overwrite`` an existing ``path`` (a directory, a file or a link) is moved aside first and deleted only
    after the new one is in place, so a crash in between leaves one of the two complete (the aside copy is named
    ``.<name>.old-*``). Without it an existing ``path`` is never replaced (``FileExistsError``/``OSError``).
    ``durable`` fsyncs the parent directory so the rename survives a power cut.
    """
    t, p = Path(tmp), Path(path)
    if overwrite and (p.exists() or p.is_symlink()):
        old = temp_name(p, "old")
        os.rename(p, old)
        os.rename(t, p)
        if old.is_symlink() or not old.is_dir():
            old.unlink()
        else:
            shutil.rmtree(old, ignore_errors=True)
    else:
        if p.is_symlink() or p.is_file():
            raise FileExistsError(f"{p} exists")
        os.rename(t, p)  # fails on an existing non-empty dir: never overwrite without being asked
    if durable:
        _fsync_dir(p.parent)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, *, overwrite: bool = False, durable: bool = False) -> Iterator[Path]:
    """Yield an empty, unique temp directory beside ``path``; on success it becomes ``path`` in one rename.

    See :func:`publish_dir` for ``overwrite`` and ``durable``. On an error the temp directory is removed.

    Example:
        >>> with atomic_dir(out, overwrite=True) as tmp:
        ...     (tmp / "config.json").write_text(text)
    """
    tmp = temp_dir(path)
    try:
        yield tmp
        publish_dir(tmp, path, overwrite=overwrite, durable=durable)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
