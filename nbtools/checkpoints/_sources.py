"""Where every chunk of every tensor lives, read from the checkpoint's own metadata (never guessed).

DCP layouts: chunk offsets/sizes from ``.metadata``; each chunk is a ``torch.save`` zip inside a ``.distcp``
file, whose stored (uncompressed) ``data/0`` member holds the raw row-major bytes. Sharded safetensors: the
``DCP_SHARDING_INFO`` header entry gives each chunk's offsets. Consolidated / plain safetensors: full tensors.
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import re
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from nbtools._layout import weights_dir
from nbtools.checkpoints._unpickle import ForbiddenGlobal, load_dcp_metadata, load_tensor_record
from nbtools.errors import CheckpointError

__all__ = ["Chunk", "SourceTensor", "read_sources", "read_safetensors_header", "ST_DTYPES"]

ST_DTYPES = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "U16": torch.uint16,
    "I32": torch.int32, "U32": torch.uint32, "I64": torch.int64, "U64": torch.uint64, "F16": torch.float16,
    "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64, "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}
_RESYNC = "re-copy the complete step_N directory from where training wrote it (e.g. the bucket), or pick another step"
_STRAY = ("move the named file(s) out of the checkpoint (a stale file from an earlier save or copy), or " + _RESYNC)
# torch.distributed.checkpoint._hf_utils.SHARDED_FILE_NAME; HuggingFaceStorageWriter numbers ranks from 1
_SHARD_NAME = re.compile(r"^shard-(\d{5})-model-(\d{5})-of-(\d{5})\.safetensors$")


@dataclass(frozen=True)
class Chunk:
    """One saved piece of a tensor: its place in the full tensor and its raw bytes in a file."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    path: Path
    start: int  # byte offset of the row-major data; -1 = not raw, load the torch.save region [region]
    nbytes: int
    region: tuple[int, int] | None = None


@dataclass
class SourceTensor:
    name: str  # the HF name (NeMo-RL's v1 "model." wrapper already stripped)
    dtype: torch.dtype
    shape: tuple[int, ...]
    chunks: list[Chunk] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def read_safetensors_header(path: Path) -> tuple[dict, int]:
    """(header dict, data start offset) of a safetensors file; CheckpointError naming the file when broken."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        raw = f.read(8)
        n = struct.unpack("<Q", raw)[0] if len(raw) == 8 else -1
        if n < 2 or 8 + n > size:
            raise CheckpointError(f"{path} is truncated or not a safetensors file (header length {n}, file {size} bytes)",
                                  fix=_RESYNC)
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CheckpointError(f"{path}: unreadable safetensors header ({e})", fix=_RESYNC) from None
    return header, 8 + n


class _Window(io.RawIOBase):
    """A read-only view of bytes [base, base+length) of an open file, for zipfile."""

    def __init__(self, fh, base: int, length: int):
        self.fh, self.base, self.length, self.pos = fh, base, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = 0) -> int:
        self.pos = {0: pos, 1: self.pos + pos, 2: self.length + pos}[whence]
        return self.pos

    def readinto(self, b) -> int:
        n = max(0, min(len(b), self.length - self.pos))
        self.fh.seek(self.base + self.pos)
        got = self.fh.readinto(memoryview(b)[:n])
        self.pos += got
        return got


def _zip_entries(fd: int, base: int, length: int) -> dict[str, tuple[int, int, int, int]] | None:
    """{name: (method, size, local header offset, CRC-32)} from the central directory at the end of [base, base+length).

    Two preads instead of zipfile's many small reads: merging a 4-rank 1.2 B model reads 804 records, and
    zipfile took ~0.4 s of CPU there. ``None`` for what this short path does not read (zip64, a comment).
    """
    tail_len = min(length, 1 << 16)
    tail = os.pread(fd, tail_len, base + length - tail_len)
    if len(tail) != tail_len or tail[-22:-18] != b"PK\x05\x06":
        return None
    count, cd_size, cd_off = struct.unpack("<xxxxxxxxxxHII", tail[-22:-2])
    start = cd_off - (length - tail_len)
    if cd_off == 0xFFFFFFFF or start < 0 or start + cd_size > tail_len - 22:
        return None
    out, pos = {}, start
    for _ in range(count):
        if tail[pos:pos + 4] != b"PK\x01\x02":
            return None
        method, crc, csize, usize, nlen, xlen, clen = struct.unpack("<10xH4xIIIHHH", tail[pos:pos + 34])
        (offset,) = struct.unpack("<I", tail[pos + 42:pos + 46])
        if 0xFFFFFFFF in (csize, usize, offset):
            return None
        out[tail[pos + 46:pos + 46 + nlen].decode("utf-8", "replace")] = (method, usize if method == 0 else -1, offset, crc)
        pos += 46 + nlen + xlen + clen
    return out


def _member_data(fd: int, base: int, length: int, offset: int, size: int) -> int:
    """Absolute start of a stored member's data (after its local header), checked to lie inside the record."""
    head = os.pread(fd, 30, base + offset)
    if head[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"no local header at {offset}")
    nlen, xlen = struct.unpack("<HH", head[26:30])
    start = base + offset + 30 + nlen + xlen
    if start + size > base + length:
        raise zipfile.BadZipFile(f"member at {offset} runs past the end of the record")
    return start


def _contiguous(sizes: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(sizes):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def _raw_span(fh, path: Path, base: int, length: int, sizes: tuple[int, ...], itemsize: int) -> tuple[int, int]:
    """Byte span of the raw data of the torch.save zip at [base, base+length); (-1, n) when not plain."""
    n = math.prod(sizes) * itemsize
    fd = fh.fileno()
    try:
        entries = _zip_entries(fd, base, length)
        if entries is None:  # an unusual record: let zipfile read it
            z = zipfile.ZipFile(_Window(fh, base, length))
            entries = {i.filename: (i.compress_type, i.file_size if i.compress_type == 0 else -1, i.header_offset,
                                    i.CRC) for i in z.infolist()}
        pkl = next(k for k in entries if k.endswith("/data.pkl"))
        method, size, offset, _ = entries[pkl]
        if method != zipfile.ZIP_STORED:
            return -1, n
        meta = load_tensor_record(os.pread(fd, size, _member_data(fd, base, length, offset, size)))
        method, size, offset, _ = entries[f"{pkl[: -len('data.pkl')]}data/{meta['storage']['key']}"]
        contiguous = _contiguous(sizes) == meta["stride"] or n == 0
        if method != zipfile.ZIP_STORED or meta["offset"] != 0 or meta["size"] != sizes or not contiguous or size < n:
            return -1, n
        return _member_data(fd, base, length, offset, n), n
    except ForbiddenGlobal as e:
        raise CheckpointError(f"{path}: the chunk at bytes {base}..{base + length} asks to import {e.qualname}, which "
                              f"a saved tensor never contains; it was not loaded (it could run code)",
                              fix="do not use this checkpoint; " + _RESYNC) from None
    except (zipfile.BadZipFile, pickle.UnpicklingError, StopIteration, KeyError, struct.error, EOFError, TypeError,
            IndexError, ValueError) as e:
        raise CheckpointError(f"{path}: the chunk at bytes {base}..{base + length} is not a readable torch.save "
                              f"record ({type(e).__name__}: {e})", fix=_RESYNC) from None


def _check_file(path: Path, end: int, what: str) -> None:
    if not path.is_file():
        raise CheckpointError(f"shard file {path.name} is missing from {path.parent} (needed for {what})", fix=_RESYNC)
    size = path.stat().st_size
    if size < end:
        raise CheckpointError(f"shard file {path} is truncated: {size} bytes, but {what} ends at byte {end}", fix=_RESYNC)


def _read_dcp(d: Path, strip_prefix: str) -> dict[str, SourceTensor]:
    from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata

    md = load_dcp_metadata(d / ".metadata")  # allow-listed unpickling: a crafted file cannot run code
    _check_unlisted(d, {getattr(i, "relative_path", None) for i in md.storage_data.values()})
    out: dict[str, SourceTensor] = {}
    handles: dict[Path, object] = {}
    try:
        for fqn, tmd in md.state_dict_metadata.items():
            if not isinstance(tmd, TensorStorageMetadata):
                continue  # non-tensor (bytes) entries are not model weights
            name = fqn[len(strip_prefix):] if strip_prefix and fqn.startswith(strip_prefix) else fqn
            _check_entry(d, fqn, tmd)
            st = SourceTensor(name, tmd.properties.dtype, tuple(tmd.size))
            for c in tmd.chunks:
                info = md.storage_data.get(MetadataIndex(fqn, c.offsets))
                if info is None:
                    raise CheckpointError(f"{d / '.metadata'} lists chunk {tuple(c.offsets)} of {fqn} without storage",
                                          fix=_RESYNC)
                _check_storage(d, fqn, info)
                if getattr(info, "transform_descriptors", None):
                    raise CheckpointError(f"{fqn}: chunk stored with transforms {info.transform_descriptors}",
                                          fix="save without DCP storage extensions (compression), then merge")
                path = d / info.relative_path
                _check_file(path, info.offset + info.length, f"{fqn} chunk {tuple(c.offsets)}")
                if math.prod(c.sizes) == 0:
                    continue
                fh = handles.get(path) or handles.setdefault(path, open(path, "rb"))  # noqa: SIM115
                start, n = _raw_span(fh, path, info.offset, info.length, tuple(c.sizes), st.dtype.itemsize)
                st.chunks.append(Chunk(tuple(c.offsets), tuple(c.sizes), path, start, n, (info.offset, info.length)))
            out[name] = st
    finally:
        for fh in handles.values():
            fh.close()
    return out


def _check_unlisted(d: Path, listed: set) -> None:
    """Shard files in ``d`` that no rank recorded in ``.metadata``: a stale file that must not be taken for data."""
    stray = sorted(p.name for p in d.glob("*.distcp") if p.name not in listed)
    if stray:
        raise CheckpointError(f"{', '.join(stray)} in {d}: no rank of this checkpoint wrote it (its .metadata lists "
                              f"{len(listed)} other shard file(s)); it is not merged", fix=_STRAY)


def _is_ints(x, n: int | None = None) -> bool:
    return (isinstance(x, tuple | list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in x)
            and (n is None or len(x) == n))


def _check_entry(d: Path, fqn: str, tmd) -> None:
    """Types and ranks of one tensor's entry: a damaged or crafted .metadata fails here, by name, not deep inside."""
    props, size = getattr(tmd, "properties", None), getattr(tmd, "size", None)
    chunks = getattr(tmd, "chunks", None)
    ok = (isinstance(fqn, str) and isinstance(getattr(props, "dtype", None), torch.dtype) and _is_ints(size)
          and isinstance(chunks, list)
          and all(_is_ints(getattr(c, "offsets", None), len(size)) and _is_ints(getattr(c, "sizes", None), len(size))
                  and all(o + s <= n for o, s, n in zip(c.offsets, c.sizes, size, strict=True)) for c in chunks))
    if not ok:
        raise CheckpointError(f"{d / '.metadata'}: the entry of {fqn!r} is malformed (dtype, size or chunk offsets/sizes "
                              f"of the wrong type or out of range)", fix=_RESYNC)


def _check_storage(d: Path, fqn: str, info) -> None:
    rel = getattr(info, "relative_path", None)
    if not (isinstance(rel, str) and rel and "/" not in rel and "\\" not in rel and rel not in (".", "..")
            and isinstance(getattr(info, "offset", None), int) and isinstance(getattr(info, "length", None), int)
            and info.offset >= 0 and info.length >= 0):
        raise CheckpointError(f"{d / '.metadata'}: {fqn} is stored at {rel!r}, which is not a shard file in {d} "
                              f"(DCP writes flat __R_N.distcp names), or has a bad offset/length", fix=_RESYNC)


def _read_safetensors(files: list[Path], sharded: bool) -> dict[str, SourceTensor]:
    out: dict[str, SourceTensor] = {}
    for path in files:
        header, data_start = read_safetensors_header(path)
        meta = header.pop("__metadata__", None) or {}
        sharding = json.loads(meta["DCP_SHARDING_INFO"]) if sharded and "DCP_SHARDING_INFO" in meta else {}
        size = path.stat().st_size
        for name, h in header.items():
            dtype = ST_DTYPES.get(h["dtype"])
            if dtype is None:
                raise CheckpointError(f"{path}: {name} has unsupported dtype {h['dtype']}", fix="report this layout")
            sizes = tuple(h["shape"])
            offsets = tuple(sharding.get(name, {}).get("saved_offsets", [0] * len(sizes)))
            b, e = h["data_offsets"]
            if data_start + e > size:
                raise CheckpointError(f"shard file {path} is truncated: {size} bytes, but {name} ends at byte "
                                      f"{data_start + e}", fix=_RESYNC)
            st = out.setdefault(name, SourceTensor(name, dtype, sizes))
            if st.dtype != dtype:
                raise CheckpointError(f"{name}: {path.name} stores {dtype}, another shard {st.dtype}", fix=_RESYNC)
            st.shape = tuple(max(a, o + s) for a, o, s in zip(st.shape, offsets, sizes, strict=True))
            if math.prod(sizes):
                st.chunks.append(Chunk(offsets, sizes, path, data_start + b, e - b))
    return out


def read_sources(step_dir: Path, layout: str) -> dict[str, SourceTensor]:
    """Every tensor of the checkpoint with its chunks, in save order; missing/truncated files raise here."""
    w = weights_dir(step_dir)
    if layout == "dtensor_v1":
        out = _read_dcp(w, "model.")
    elif layout == "v2_torch_save":
        out = _read_dcp(w / "model", "")
    elif layout == "v2_safetensors":
        files = sorted((w / "model").glob("shard-*.safetensors"))
        out = _read_safetensors(files, sharded=True)
        _check_rank_files(files)
    elif layout == "consolidated":
        out = _read_safetensors(sorted((w / "model" / "consolidated").glob("*.safetensors")), sharded=False)
    else:
        raise CheckpointError(f"layout {layout!r} cannot be read here", fix="see nbtools.checkpoints.detect_layout")
    for st in out.values():
        _check_coverage(st)
    return out


def _check_rank_files(files: list[Path]) -> None:
    """Every file is one a rank of ``HuggingFaceStorageWriter(save_distributed=True)`` names, and no rank is missing."""
    parsed = {p: _SHARD_NAME.match(p.name) for p in files}
    stray = [p.name for p, m in parsed.items() if not m or int(m[1]) == 0 or int(m[2]) == 0 or int(m[2]) > int(m[3])]
    totals = {m[3] for m in parsed.values() if m}
    if stray or len(totals) > 1:
        what = (f"{', '.join(stray)}: not a name any rank writes (ranks write shard-0000R-model-0000K-of-0000N"
                f".safetensors, R from 1)" if stray else f"the shard files disagree on the file count ({sorted(totals)})")
        raise CheckpointError(f"{files[0].parent}: {what}; nothing was merged", fix=_STRAY)
    ranks = sorted(int(parsed[p][1]) for p in files)
    missing = sorted(set(range(1, (ranks[-1] if ranks else 0) + 1)) - set(ranks))
    if missing:
        names = ", ".join(f"shard-{r:05d}-model-*.safetensors" for r in missing)
        raise CheckpointError(f"shard file(s) {names} missing from {files[0].parent} (found ranks {ranks})", fix=_RESYNC)


def _chunk_blocks(c: Chunk, itemsize: int, block: int = 4 << 20):
    """The row-major bytes of a chunk, in blocks (raw chunks by pread; a non-plain torch.save record loaded)."""
    if c.start >= 0:
        with open(c.path, "rb") as f:
            for pos in range(0, c.nbytes, block):
                got = os.pread(f.fileno(), min(block, c.nbytes - pos), c.start + pos)
                if not got:
                    return
                yield got
        return
    with open(c.path, "rb") as f:
        f.seek(c.region[0])
        blob = f.read(c.region[1])
    try:
        t = torch.load(io.BytesIO(blob), weights_only=True).contiguous()
    except Exception as e:  # noqa: BLE001 - any failure here means the same: this chunk cannot be read
        raise CheckpointError(f"{c.path}: the chunk at bytes {c.region[0]}..{sum(c.region)} cannot be loaded "
                              f"({type(e).__name__}: {e})", fix=_RESYNC) from None
    data = t.reshape(-1).view(torch.uint8).numpy().tobytes()
    for pos in range(0, len(data), block):
        yield data[pos:pos + block]


def _same_bytes(a: Chunk, b: Chunk, itemsize: int) -> bool:
    if a.nbytes != b.nbytes:
        return False
    ia, ib = _chunk_blocks(a, itemsize), _chunk_blocks(b, itemsize)
    buf_a = buf_b = b""
    while True:
        if not buf_a:
            buf_a = next(ia, b"")
        if not buf_b:
            buf_b = next(ib, b"")
        if not buf_a or not buf_b:
            return not buf_a and not buf_b
        n = min(len(buf_a), len(buf_b))
        if buf_a[:n] != buf_b[:n]:
            return False
        buf_a, buf_b = buf_a[n:], buf_b[n:]


def _boxes_overlap(a: Chunk, b: Chunk) -> bool:
    return all(oa < ob + sb and ob < oa + sa for oa, sa, ob, sb in zip(a.offsets, a.sizes, b.offsets, b.sizes, strict=True))


def _check_coverage(st: SourceTensor) -> None:
    """Chunks tile the tensor exactly; a chunk saved more than once (replicas) must be the same bytes every time."""
    seen: dict[tuple[int, ...], Chunk] = {}
    for c in st.chunks:  # identical replicas of a chunk may be saved by more than one rank: keep one, after comparing
        first = seen.setdefault(c.offsets, c)
        if first is not c and (first.sizes != c.sizes or not _same_bytes(first, c, st.dtype.itemsize)):
            raise CheckpointError(
                f"{st.name}: the chunk at {list(c.offsets)} is saved twice with different contents ({first.path.name} "
                f"and {c.path.name}); one of them is stale or damaged, and which one is right cannot be told; "
                f"nothing was merged", fix=_STRAY)
    st.chunks = sorted(seen.values(), key=lambda c: c.offsets)
    active: list[Chunk] = []  # sweep on dim 0: chunks whose dim-0 range reaches the current one
    for c in st.chunks if st.shape else []:
        active = [a for a in active if a.offsets[0] + a.sizes[0] > c.offsets[0]]
        clash = next((a for a in active if _boxes_overlap(a, c)), None)
        if clash is not None:
            raise CheckpointError(f"{st.name}: the chunks at {list(clash.offsets)} ({clash.path.name}) and "
                                  f"{list(c.offsets)} ({c.path.name}) overlap; a shard file is stale or damaged",
                                  fix=_STRAY)
        active.append(c)
    covered = sum(math.prod(c.sizes) for c in st.chunks)
    if covered != math.prod(st.shape):
        raise CheckpointError(
            f"{st.name}: the saved chunks cover {covered} of {math.prod(st.shape)} elements of shape {list(st.shape)} "
            f"(chunks at {[list(c.offsets) for c in st.chunks]}); a shard file is missing or damaged", fix=_RESYNC)
