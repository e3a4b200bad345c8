"""The one way nbtools writes a file or a directory so that a reader never sees it half-written.

Why: a notebook cell interrupted, a killed job or a full disk must leave either the old content or the new one,
never a truncated file that looks complete. Every write goes to a temp name in the same directory (unique per
process and thread, so two writers never share one) and is renamed over the target, which POSIX makes atomic.

Example:
    >>> from nbtools._atomic import write_text
    >>> write_text(cfg.run_dir / "eval" / "summary.json", json.dumps(summary))
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["temp_name", "write_bytes", "write_text", "replace_file", "atomic_dir"]


def temp_name(target: str | os.PathLike, kind: str = "tmp") -> Path:
    """``<dir>/.<name>.<kind>-<pid>-<thread>``: hidden, beside the target, unique per writer."""
    p = Path(target)
    return p.with_name(f".{p.name}.{kind}-{os.getpid()}-{threading.get_ident()}")


def write_bytes(path: str | os.PathLike, data: bytes, *, mode: int | None = None, fsync: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically (parents created); ``mode`` sets the permissions (default: umask).

    Example:
        >>> write_bytes(out / "model.safetensors.index.json", blob)
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(p)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return p


def write_text(path: str | os.PathLike, text: str, *, mode: int | None = None, fsync: bool = False) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; see :func:`write_bytes`."""
    return write_bytes(path, text.encode("utf-8"), mode=mode, fsync=fsync)


@contextlib.contextmanager
def replace_file(path: str | os.PathLike, *, suffix: str = "") -> Iterator[Path]:
    """Yield a temp path for a writer that needs a file name (``fig.savefig``, ``pq.write_table``), then rename it.

    ``suffix`` keeps an extension that the writer uses to pick its format (``".png"``). On an error the temp
    file is removed and the target is left as it was.

    Example:
        >>> with replace_file(png, suffix=".png") as tmp:
        ...     fig.savefig(tmp)
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(p)
    tmp = tmp.with_name(tmp.name + suffix)
    try:
        yield tmp
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield an empty temp directory beside ``path``; on success it becomes ``path`` in one rename.

    With ``overwrite`` an existing ``path`` is moved aside first and deleted only after the new one is in place,
    so a crash in between leaves one of the two complete directories (the aside copy is named ``.<name>.old-*``).

    Example:
        >>> with atomic_dir(out, overwrite=True) as tmp:
        ...     (tmp / "config.json").write_text(text)
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(p, "partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        if p.exists() and overwrite:
            old = temp_name(p, "old")
            os.replace(p, old)
            os.replace(tmp, p)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, p)  # fails on an existing non-empty dir: never overwrite without being asked
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
