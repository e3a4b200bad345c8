"""Every file the card reads or writes goes through these functions: ``nbtools.storage``, so the model directory
may be a local path or where the cluster wrote it (``gs://…`` on GKE).

Example:
    >>> write_text("merged_hf/README.md", "---\\nlicense: apache-2.0\\n---\\n# model\\n")
"""

from __future__ import annotations

import os

from nbtools import storage

__all__ = ["read_text", "write_text", "write_bytes", "exists", "glob"]


def read_text(path: str | os.PathLike) -> str | None:
    """The file's text, or None when it does not exist."""
    found = storage.info(path)
    return storage.read_bytes(path).decode("utf-8") if found is not None and not found.is_dir else None


def exists(path: str | os.PathLike) -> bool:
    """True when ``path`` is an existing file or directory."""
    return storage.exists(path)


def glob(directory: str | os.PathLike, pattern: str) -> list[str]:
    """Sorted paths under ``directory`` matching ``pattern`` ([] when the directory does not exist)."""
    return storage.glob(directory, pattern)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` atomically (temp file + rename locally; one complete object upload in a bucket)."""
    storage.write_bytes(path, data)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Replace a text file atomically (UTF-8)."""
    storage.write_text(path, text)
