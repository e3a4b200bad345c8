"""Every file the card reads or writes goes through these five functions (local paths today).

Why one place: the model directory will become a storage URL (``gs://…``) once runs are read through
``nbtools.storage``; swapping these bodies (and ``write_text`` for the lead's ``nbtools._atomic.write_text``) is
the whole change.

Example:
    >>> write_text("merged_hf/README.md", "---\\nlicense: apache-2.0\\n---\\n# model\\n")
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["read_text", "write_text", "write_bytes", "exists", "glob"]


def read_text(path: str | os.PathLike) -> str | None:
    """The file's text, or None when it does not exist."""
    p = Path(path)
    return p.read_text(encoding="utf-8") if p.is_file() else None


def exists(path: str | os.PathLike) -> bool:
    """True when ``path`` is an existing file or directory."""
    return Path(path).exists()


def glob(directory: str | os.PathLike, pattern: str) -> list[str]:
    """Sorted paths under ``directory`` matching ``pattern`` ([] when the directory does not exist)."""
    d = Path(directory)
    return sorted(str(p) for p in d.glob(pattern)) if d.is_dir() else []


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` atomically: a hidden temp file beside it, fsync, then one rename (no half file, ever)."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    """Replace a text file atomically (UTF-8); the one-line swap for ``nbtools._atomic.write_text``."""
    write_bytes(path, text.encode("utf-8"))
