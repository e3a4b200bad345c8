"""Where a merge may write, and how its output appears: never over its input, atomically, no leftovers.

The merge writes into a hidden sibling ``.<out>.partial-<pid>-<hex>@<host>`` and renames it to ``out`` when
complete; replacing an existing ``out`` first moves it to ``.<out>.old-<pid>-<hex>@<host>``. A merge killed
with SIGKILL leaves those behind; the next merge into the same ``out`` removes them when the pid that made
them no longer runs on this host. Nothing else is ever removed: only directories whose name matches that
exact pattern for this ``out``.

Example:
    >>> check_not_overlapping(Path("ckpt/step_30"), Path("ckpt"))  # raises ConflictError: out contains the input
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
from pathlib import Path

from nbtools.errors import ConflictError

__all__ = ["step_root", "check_not_overlapping", "temp_dir", "clean_stale", "install"]


def _ids(p: Path) -> list[tuple[int, int]]:
    """(st_dev, st_ino) of p and each existing ancestor, nearest first (catches bind mounts and hard aliases)."""
    out = []
    for q in (p, *p.parents):
        try:
            st = os.stat(q)
        except OSError:
            continue
        out.append((st.st_dev, st.st_ino))
    return out


def _suggest(step: Path) -> Path:
    ckpt_dir = step.parent
    return ckpt_dir.parent / f"{ckpt_dir.name}-hf" / step.name


def step_root(p: Path) -> Path:
    """The ``step_N`` dir of a path given as ``step_N``, ``step_N/policy/weights`` or its ``model/``."""
    if p.name == "model" and p.parent.name == "weights" and p.parent.parent.name == "policy":
        return p.parents[2]
    if p.name == "weights" and p.parent.name == "policy":
        return p.parents[1]
    return p


def check_not_overlapping(step: Path, out: Path) -> None:
    """Refuse an ``out`` that is, contains or lies inside the checkpoint being read (symlinks resolved).

    With ``overwrite`` the merge renames ``out`` away and deletes it: on the input, that deletes the checkpoint.

    Raises:
        ConflictError: naming the overlap and an output path outside the checkpoint directory.
    """
    s, o = step_root(step.resolve()), out.resolve()
    how = None
    if o == s:
        how = "is the checkpoint itself"
    elif s.is_relative_to(o):
        how = "contains the checkpoint"
    elif o.is_relative_to(s):
        how = "lies inside the checkpoint"
    else:
        s_ids, o_ids = _ids(s), _ids(o)
        if o.exists() and s_ids and o_ids and o_ids[0] in s_ids:
            how = "contains the checkpoint (the same directory under another path)"
        elif s.exists() and s_ids and s_ids[0] in o_ids:
            how = "lies inside the checkpoint (the same directory under another path)"
    if how:
        raise ConflictError(f"the output directory {out} {how} {step}; merging there would overwrite or delete the "
                            f"checkpoint", fix=f"pick an output outside the checkpoint dir, e.g. {_suggest(s)}")


def _pattern(out: Path) -> re.Pattern:
    return re.compile(rf"^\.{re.escape(out.name)}\.(partial|old)-(\d+)-[0-9a-f]{{8}}(?:@(.+))?$")


def temp_dir(out: Path, kind: str = "partial") -> Path:
    """A fresh hidden sibling name of ``out`` that :func:`clean_stale` recognises (``kind``: partial | old)."""
    return out.parent / f".{out.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}@{socket.gethostname()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def clean_stale(out: Path) -> list[Path]:
    """Remove ``.partial-*`` / ``.old-*`` dirs of ``out`` left by a merge that was killed; returns what went.

    Only directories matching this ``out``'s pattern, made on this host by a process that no longer exists
    (legacy names without ``@host`` count as this host's). A live merge's dirs, another host's (shared
    storage), files and symlinks are left alone.
    """
    pat, host, removed = _pattern(out), socket.gethostname(), []
    if not out.parent.is_dir():
        return removed
    for p in out.parent.iterdir():
        m = pat.match(p.name)
        if not m or (m.group(3) or host) != host or p.is_symlink() or not p.is_dir():
            continue
        pid = int(m.group(2))
        if pid == os.getpid() or _alive(pid):
            continue
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed


def install(tmp: Path, out: Path, overwrite: bool, *, durable: bool = True) -> None:
    """Rename the finished ``tmp`` to ``out`` (replacing it only with ``overwrite``); ``durable``: fsync the parent."""
    if out.exists() or out.is_symlink():
        if not overwrite:
            raise ConflictError(f"{out} appeared while merging", fix="pass overwrite=True or choose another out_dir")
        old = temp_dir(out, "old")
        os.rename(out, old)
        os.rename(tmp, out)
        if old.is_symlink() or not old.is_dir():
            old.unlink()
        else:
            shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, out)
    if not durable:
        return
    fd = os.open(out.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
