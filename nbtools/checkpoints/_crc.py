"""What "verified" means for the shard files a merge reads: every byte of every file checked, for every layout.

The merges copy raw byte spans, which a bit flip inside a tensor passes unseen. Every shard nbtools merges is made
of ``torch.save`` zips (a verl rank file is one; a DCP ``.distcp`` file is the records ``FileSystemWriter`` wrote
back to back, one zip each), and a zip records the CRC-32 of every member. So: the records must tile each file
exactly (the offsets and lengths ``.metadata`` holds; nothing missing, overlapping or appended), every member's bytes
must match its CRC-32, and no file may be a byte-identical copy of another (distinct shards of a trained model never
hash alike throughout). A shard swapped with another of exactly the same layout cannot be told from its bytes.

Example:
    >>> check_dcp_files(step / "policy" / "weights", fix="re-copy the step")  # (bytes read, note for MergeResult)
"""

from __future__ import annotations

import os
import struct
import zipfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nbtools.checkpoints._sources import _member_data, _Window, _zip_entries
from nbtools.errors import CheckpointError

__all__ = ["check_zip", "check_files", "check_dcp_files"]

_BLOCK = 16 << 20

Signature = tuple  # ((member, crc, bytes), ...) of a file's tensor data: equal signatures = byte-identical copies


def _members(fd: int, fh, base: int, length: int) -> list[tuple[str, int, int, int, int]]:
    """(name, method, crc, stored bytes, local header offset) of every member of the zip at [base, base+length)."""
    entries = _zip_entries(fd, base, length)
    if entries is not None:
        return [(k, method, crc, size, offset) for k, (method, size, offset, crc) in entries.items()]
    z = zipfile.ZipFile(_Window(fh, base, length))  # zip64, a long directory or a comment: let zipfile read it
    return [(i.filename, i.compress_type, i.CRC, i.compress_size, i.header_offset) for i in z.infolist()]


def check_zip(fh, path: Path, base: int, length: int, *, fix: str, where: str = "") -> tuple[int, list]:
    """Read every byte of every member of the zip at bytes [base, base+length) of ``fh`` and compare it with the
    CRC-32 in the zip's directory; (bytes read, [(member, crc, bytes) of its ``data/`` members]).

    Raises:
        CheckpointError: naming ``path`` (and ``where``, the record) and the member that does not match.
    """
    fd, n, data = fh.fileno(), 0, []
    try:
        for name, method, crc, size, offset in _members(fd, fh, base, length):
            if method != zipfile.ZIP_STORED:
                raise zipfile.BadZipFile(f"{name} is compressed (torch.save never compresses)")
            start, left, got = _member_data(fd, base, length, offset, size), size, 0
            while left:
                chunk = os.pread(fd, min(_BLOCK, left), start + size - left)
                if not chunk:
                    raise zipfile.BadZipFile(f"{name} ends early")
                got, left, n = _crc32(chunk, got), left - len(chunk), n + len(chunk)
            if got != crc:
                raise CheckpointError(f"{path}{where}: the bytes of {name} do not match the CRC-32 torch.save recorded "
                                      f"({got:08x} != {crc:08x}): the file was damaged after it was written", fix=fix)
            if "/data/" in name:
                data.append((name.rsplit("/data/", 1)[1], crc, size))
    except (zipfile.BadZipFile, OSError, struct.error, ValueError) as e:
        raise CheckpointError(f"{path}{where} is not a readable torch.save record, truncated or replaced? "
                              f"({type(e).__name__}: {e})", fix=fix) from None
    return n, data


def _crc32(chunk: bytes, crc: int) -> int:
    import zlib

    return zlib.crc32(chunk, crc)  # releases the GIL on large buffers: the files are checked on threads


def check_files(paths: Sequence[Path], one: Callable[[Path], tuple[int, Signature]], *, fix: str,
                workers: int = 2) -> int:
    """Run ``one`` (bytes read, signature) over every file on ``workers`` threads; refuse byte-identical copies.

    Raises:
        CheckpointError: from ``one``, or naming the file that holds exactly another file's bytes.
    """
    with ThreadPoolExecutor(max(1, min(workers, len(paths)))) as pool:
        results = list(pool.map(one, paths))
    seen: dict[Signature, Path] = {}
    for path, (_, sig) in zip(paths, results, strict=True):
        if sig and sig in seen:
            raise CheckpointError(f"{path.name} holds exactly the bytes of {seen[sig].name}: one shard file was copied "
                                  "over another, so the merge would repeat one shard", fix=fix)
        seen[sig] = path
    return sum(n for n, _ in results)


def check_dcp_files(d: Path, *, fix: str, workers: int = 2) -> tuple[int, str]:
    """Every ``.distcp`` file of the DCP checkpoint in ``d``: its records (``.metadata``'s ``storage_data``:
    relative path, offset, length) tile it from byte 0 to its end, and every record is a ``torch.save`` zip whose
    members match their CRC-32; (bytes read, note).

    Raises:
        CheckpointError: naming the file and the byte range that is missing, overlapping, extra or damaged.
    """
    from nbtools.checkpoints._unpickle import load_dcp_metadata

    md = load_dcp_metadata(d / ".metadata")
    spans: dict[str, list[tuple[int, int, str]]] = {}
    for idx, info in md.storage_data.items():
        if getattr(info, "transform_descriptors", None):
            raise CheckpointError(f"{d / info.relative_path}: {idx.fqn} is stored with transforms "
                                  f"{info.transform_descriptors}, which nbtools cannot check or merge",
                                  fix="save without DCP storage extensions (compression), then merge")
        spans.setdefault(info.relative_path, []).append((info.offset, info.length, idx.fqn))

    def one(path: Path) -> tuple[int, Signature]:
        records, size = sorted(spans[path.name]), path.stat().st_size
        end, n, sig = 0, 0, []
        with open(path, "rb") as fh:
            for offset, length, fqn in records:
                if offset != end:
                    what = "are recorded twice" if offset < end else "belong to no entry of .metadata"
                    raise CheckpointError(f"{path}: bytes {min(end, offset)}..{max(end, offset)} {what}: the file is "
                                          "not the one this checkpoint's ranks wrote (replaced or damaged)", fix=fix)
                end = offset + length
                if end > size:
                    raise CheckpointError(f"shard file {path} is truncated: {size} bytes, but {fqn} ends at byte {end}",
                                          fix=fix)
                got, data = check_zip(fh, path, offset, length, fix=fix, where=f" ({fqn}, bytes {offset}..{end})")
                n, sig = n + got, sig + [(fqn, *x) for x in data]
        if end != size:
            raise CheckpointError(f"shard file {path} is {size} bytes, but its .metadata records end at byte {end}: "
                                  f"{size - end} bytes were appended or the file was replaced", fix=fix)
        return n, tuple(sig)

    paths = [d / name for name in sorted(spans)]
    total = check_files(paths, one, fix=fix, workers=workers)
    return total, (f"zip CRC-32 of every record of the {len(paths)} shard files checked; the records tile each file "
                   f"({total:,} bytes read)")
