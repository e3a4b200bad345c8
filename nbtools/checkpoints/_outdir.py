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

from nbtools import _atomic
from nbtools.errors import ConflictError, Fix

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


def _linked(root: Path, limit: int = 100_000) -> list[tuple[Path, Path]]:
    """(link, resolved target) of every symlink under ``root``, following linked directories (each target once)."""
    found, seen, todo = [], {root.resolve()}, [root]
    while todo and len(found) < limit:
        d = todo.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if e.is_symlink():
                target = Path(e.path).resolve()
                found.append((Path(e.path), target))
                if target.is_dir() and target not in seen:
                    seen.add(target)
                    todo.append(target)
            elif e.is_dir(follow_symlinks=False):
                todo.append(Path(e.path))
    return found


def _overlap(src: Path, o: Path) -> str | None:
    """How the resolved output ``o`` overlaps the resolved input ``src``, or None."""
    if o == src:
        return "is"
    if src.is_relative_to(o):
        return "contains"
    if o.is_relative_to(src):
        return "lies inside"
    s_ids, o_ids = _ids(src), _ids(o)
    if o.exists() and s_ids and o_ids and o_ids[0] in s_ids:
        return "contains (under another path)"
    if src.exists() and s_ids and s_ids[0] in o_ids:
        return "lies inside (under another path)"
    return None


def check_not_overlapping(step: Path, out: Path, *, config=None) -> None:
    """Refuse an ``out`` that is, contains or lies inside anything the merge reads (symlinks resolved).

    The one guard every merge path (NeMo-RL DCP, verl FSDP) calls first, before anything is read or written.
    With ``overwrite`` the merge renames ``out`` away and deletes it: on the input, that deletes the checkpoint.
    The input is the step dir and every directory or file it reaches through a symlink (e.g. ``policy/weights``
    moved elsewhere and linked back), plus ``config`` when it is a path (the base model's directory or
    config.json; a dict or config object reads nothing).

    Raises:
        ConflictError: naming the overlap and an output path outside the checkpoint directory.
    """
    s, o = step_root(step.resolve()), out.resolve()
    how = {"is": "is the checkpoint itself", "contains": "contains the checkpoint",
           "lies inside": "lies inside the checkpoint",
           "contains (under another path)": "contains the checkpoint (the same directory under another path)",
           "lies inside (under another path)": "lies inside the checkpoint (the same directory under another path)",
           }.get(_overlap(s, o) or "")
    if how:
        raise ConflictError(f"the output directory {out} {how} {step}; merging there would overwrite or delete the "
                            f"checkpoint", fix=f"pick an output outside the checkpoint dir, e.g. {_suggest(s)}")
    also = [Path(config)] if isinstance(config, str | os.PathLike) else []
    for link, target in _linked(s) + [(p, p.expanduser().resolve()) for p in also]:
        rel = _overlap(target, o)
        if rel:
            via = f"through the link {link}" if link.is_symlink() else f"({link})"
            raise ConflictError(f"the output directory {out} {rel} {target}, "
                                f"which the merge of {step} reads {via}; merging there with overwrite would "
                                f"delete what the checkpoint is made of",
                                fix=f"pick an output outside {target} and outside the checkpoint dir, e.g. {_suggest(s)}")


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
            raise ConflictError(f"{out} appeared while merging", fix=Fix("pass overwrite=True or choose another out_dir",
                                                                              cli="pass --overwrite or choose another OUT_DIR"))
        old = temp_dir(out, "old")  # named so that clean_stale finds it after a crash
        _atomic.publish(out, old)
        _atomic.publish(tmp, out)
        if old.is_symlink() or not old.is_dir():
            old.unlink()
        else:
            shutil.rmtree(old, ignore_errors=True)
    else:
        _atomic.publish_dir(tmp, out)
    if not durable:
        return
    fd = os.open(out.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
