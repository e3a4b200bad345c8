"""verl FSDP checkpoints (``<default_local_dir>/global_step_N/actor/``): locate every shard chunk of a step's rank
files (what ``nbtools.checkpoints`` merges through verl's layout, ``LAYOUT``; listing and choosing a step, which needs
no torch, is ``_steps``, re-exported here).

verl v0.7.0 (``verl/utils/checkpoint/fsdp_checkpoint_manager.py``, ``verl/trainer/ppo/ray_trainer.py``) writes, per
save, ``global_step_N/actor/model_world_size_{W}_rank_{R}.pt`` (each rank ``torch.save``s its FSDP
``model.state_dict()``: DTensors on a 1-D ``("fsdp",)`` mesh), ``optim_…``/``extra_state_…`` files, ``huggingface/``
(config, tokenizer) and ``fsdp_config.json``; after every rank finished, ``latest_checkpointed_iteration.txt`` in
``default_local_dir`` holds N. A ``global_step_N`` above that number is still being written (or died writing).

The rank files are pickles: they are read with an allow-list unpickler in which every DTensor class becomes an
inert record (nothing from the file is imported or called), so only each local tensor's place in the zip, its
shape and the DTensor's global shape and placement are taken; the merge then streams the raw bytes. verl's own
merger (``verl/model_merger/fsdp_model_merger.py``) concatenates the ranks' local tensors in rank order along the
``Shard`` dim and keeps one copy of a ``Replicate`` tensor, and (0.9.x) of a plain tensor: the same rule here.

Example:
    >>> nbtools.trainers.verl.list_verl_checkpoints("checkpoints/verl_grpo_gsm8k/qwen2_5_32b")[["step", "latest"]]
"""

from __future__ import annotations

import math
import pickle
import struct
import zipfile
from pathlib import Path

import torch

from nbtools.checkpoints.parts import Chunk, ForbiddenGlobal, SafeUnpickler, SourceTensor
from nbtools.errors import CheckpointError
from nbtools.trainers.verl._steps import (
    _RESYNC,
    TRACKER,
    VERL_LAYOUT,
    VERL_STEP_RE,
    best_verl,
    is_verl_dir,
    is_verl_step,
    latest_verl,
    list_verl_checkpoints,
    read_verl_world_size,
    verl_actor_dir,
    verl_steps,
)

__all__ = ["VERL_LAYOUT", "VERL_STEP_RE", "TRACKER", "is_verl_dir", "is_verl_step", "verl_actor_dir", "verl_steps",
           "list_verl_checkpoints", "latest_verl", "best_verl", "read_verl_sources", "read_verl_world_size",
           "check_rank_crcs"]


# --- rank files: inert unpickling ------------------------------------------------------------------------------
# Kept over torch.load(weights_only=True) (issue 43 item 4), measured by benchmarks/bench_ckpt_read.py (0.54 GB,
# 4 ranks, 588 records, 2026-11-28): torch.load(map_location="meta") takes 2.3x the wall and 3.0x the CPU time
# (7x warm, in one process: its weights-only unpickler is pure Python), torch.load(mmap=True) 3.3x; reading every
# byte through mmap'd tensors takes 1.19x and 1.27x the peak RSS of our pread of these spans. torch's reader is the
# referee: tests/checkpoints/test_verl.py::test_byte_spans_equal_torchs_own_reader.

class _Inert:
    """Stands for a class named in the pickle (DTensor, DeviceMesh, Shard, …): keeps args and state, runs nothing."""

    qualname = "?"

    def __new__(cls, *args, **kwargs):
        obj = object.__new__(cls)
        obj.__dict__["args"] = args
        obj.__dict__["state"] = {}
        return obj

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2:  # (dict state, slots state)
            state = {**(state[0] or {}), **(state[1] or {})}
        self.__dict__["state"] = state if isinstance(state, dict) else {"value": state}


_INERT_MODULES = ("torch.distributed.tensor", "torch.distributed._tensor", "torch.distributed.device_mesh",
                  "torch.distributed._mesh_layout")
_inert_classes: dict[str, type] = {}


def _inert(module: str, name: str) -> type:
    q = f"{module}.{name}"
    if q not in _inert_classes:
        _inert_classes[q] = type(name, (_Inert,), {"qualname": q})
    return _inert_classes[q]


def _rebuild_wrapper_subclass(cls, dtype, size, stride, storage_offset, layout, device, requires_grad=False):
    return {"wrapper": getattr(cls, "qualname", str(cls)), "dtype": dtype, "size": tuple(size)}


def _rebuild_from_type_v2(func, new_type, args, state):
    obj = func(*args)
    if isinstance(state, tuple) and len(state) == 2:  # (dict state, slots state), as Tensor.__reduce_ex__ writes
        state = {**(state[0] or {}), **(state[1] or {})}
    if isinstance(obj, dict):
        obj = {**obj, "state": state if isinstance(state, dict) else {}}
    return obj


def _rebuild_tensor_v2(storage, offset, size, stride, *rest):
    return {"storage": storage, "offset": offset, "size": tuple(size), "stride": tuple(stride)}


def _reconstructor(cls, base, state):  # copyreg._reconstructor, used by classes pickled with protocol < 2
    return cls() if isinstance(cls, type) and issubclass(cls, _Inert) else _raise(cls)


def _raise(what):
    raise pickle.UnpicklingError(f"unexpected {what!r}")


class _RankUnpickler(SafeUnpickler):
    def find_class(self, module: str, name: str):
        if module.startswith(_INERT_MODULES) and name.lstrip("_")[:1].isupper():
            return _inert(module, name)
        return super().find_class(module, name)


def _allowed() -> dict[tuple[str, str], object]:
    from collections import OrderedDict

    from torch.serialization import _get_layout

    return {("collections", "OrderedDict"): OrderedDict, ("torch", "Size"): torch.Size,
            ("torch", "device"): torch.device, ("torch.serialization", "_get_layout"): _get_layout,
            ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
            ("torch._utils", "_rebuild_wrapper_subclass"): _rebuild_wrapper_subclass,
            ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
            ("copyreg", "_reconstructor"): _reconstructor, ("builtins", "object"): object}


def _zip_member_start(fh, info: zipfile.ZipInfo) -> int:
    fh.seek(info.header_offset)
    head = fh.read(30)
    if head[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"no local header for {info.filename}")
    nlen, xlen = struct.unpack("<HH", head[26:30])
    return info.header_offset + 30 + nlen + xlen


def check_rank_crcs(actor: str | Path, *, workers: int = 2) -> tuple[int, str]:
    """Read every byte of every entry of every rank file and compare it with its zip CRC-32; (bytes read, note).

    Why: the merge reads raw byte spans, which a bit flip inside a tensor passes unseen; a rank file copied over its
    neighbour is refused too. The checks are the DCP merge's (:mod:`nbtools.checkpoints._crc`), on whole files.

    Raises:
        CheckpointError: naming the rank file and entry whose bytes do not match, or the copied rank.
    """
    from nbtools.checkpoints.parts import check_files, check_zip

    actor = Path(actor)
    ws, _ = read_verl_world_size(actor)
    paths = [actor / f"model_world_size_{ws}_rank_{r}.pt" for r in range(ws)]

    def one(path: Path) -> tuple[int, tuple]:
        try:
            with open(path, "rb") as fh:
                n, data = check_zip(fh, path, 0, path.stat().st_size, fix=_RESYNC)
        except FileNotFoundError:
            raise CheckpointError(f"shard file {path.name} is missing from {path.parent}", fix=_RESYNC) from None
        return n, tuple(sorted(data))

    total = check_files(paths, one, fix=_RESYNC, workers=workers)
    return total, f"zip CRC-32 of every entry of the {ws} rank files checked ({total:,} bytes read)"


def _load_rank(path: Path) -> tuple[dict, dict[str, tuple[int, int]]]:
    """(state dict of records, {storage key: (absolute data start, bytes)}) of one rank file; nothing is loaded."""
    try:
        with open(path, "rb") as fh:
            z = zipfile.ZipFile(fh)
            infos = {i.filename: i for i in z.infolist()}
            pkl = next((n for n in infos if n.endswith("/data.pkl")), None)
            if pkl is None:
                raise zipfile.BadZipFile("no data.pkl (not a torch.save file)")
            prefix = pkl[: -len("data.pkl")] + "data/"
            sd = _RankUnpickler(z.open(pkl), _allowed(), storages=True,
                                persistent=lambda pid: {"key": pid[2], "numel": pid[4], "type": pid[1]}).load()
            data = {}
            for n, i in infos.items():
                if n.startswith(prefix):
                    if i.compress_type != zipfile.ZIP_STORED:
                        raise zipfile.BadZipFile(f"{n} is compressed (torch.save never compresses)")
                    data[n[len(prefix):]] = (_zip_member_start(fh, i), i.file_size)
    except ForbiddenGlobal as e:
        raise CheckpointError(f"{path} asks to import {e.qualname}, which a verl model shard never contains; it was "
                              f"not loaded (a pickle naming it could run code)",
                              fix="do not use this checkpoint; " + _RESYNC) from None
    except FileNotFoundError:
        raise CheckpointError(f"shard file {path.name} is missing from {path.parent}", fix=_RESYNC) from None
    except (zipfile.BadZipFile, pickle.UnpicklingError, EOFError, struct.error, KeyError, TypeError, ValueError,
            AttributeError, IndexError) as e:
        raise CheckpointError(f"{path} is not a readable torch.save file, truncated? ({type(e).__name__}: {e})",
                              fix=_RESYNC) from None
    if not isinstance(sd, dict):
        raise CheckpointError(f"{path} holds a {type(sd).__name__}, not the state dict verl saves", fix=_RESYNC)
    return sd, data


def _local(path: Path, key: str, rec, data: dict[str, tuple[int, int]]) -> tuple[dict, torch.dtype, tuple, tuple | None]:
    """(local tensor record, dtype, global shape, placements or None for a plain tensor) of one entry."""
    if isinstance(rec, dict) and "wrapper" in rec:
        state = rec.get("state") or {}
        local, spec = state.get("_local_tensor"), state.get("_spec")
        placements = getattr(spec, "state", {}).get("placements") if spec is not None else None
        if not rec["wrapper"].endswith("DTensor") or not isinstance(local, dict) or placements is None:
            raise CheckpointError(f"{path}: {key} is a {rec['wrapper']} that is not a DTensor with a local tensor",
                                  fix="verl v0.7.0 saves DTensors (FSDP2, or FSDP1 with a device mesh); report this")
        mesh = getattr(spec, "state", {}).get("mesh")
        names = getattr(mesh, "state", {}).get("_mesh_dim_names") if mesh is not None else None
        if len(placements) != 1:
            raise CheckpointError(f"{path}: {key} is sharded over a {len(placements)}-D mesh {names}; nbtools merges "
                                  f"1-D FSDP meshes (verl's default, fsdp_size=-1)",
                                  fix="merge with verl's own model_merger, or save with a 1-D FSDP mesh")
        return local, rec["dtype"], tuple(rec["size"]), tuple(placements)
    if isinstance(rec, dict) and "storage" in rec:
        return rec, None, None, None
    raise CheckpointError(f"{path}: {key} holds a {type(rec).__name__}, not a tensor", fix=_RESYNC)


_STORAGE_DTYPES = {"FloatStorage": torch.float32, "BFloat16Storage": torch.bfloat16, "HalfStorage": torch.float16,
                   "DoubleStorage": torch.float64, "LongStorage": torch.int64, "IntStorage": torch.int32,
                   "ByteStorage": torch.uint8, "BoolStorage": torch.bool, "CharStorage": torch.int8,
                   "ShortStorage": torch.int16}


def _contiguous(size: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(size):
        out.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(out))


def _same_bytes(first: Chunk, path: Path, start: int, key: str, rank: int) -> None:
    """A plain tensor's copy on ``rank`` must equal rank 0's (small: buffers), as verl 0.9.x's merger requires."""
    with open(first.path, "rb") as a, open(path, "rb") as b:
        a.seek(first.start)
        b.seek(start)
        if a.read(first.nbytes) != b.read(first.nbytes):
            raise CheckpointError(f"{key} differs between rank 0 and rank {rank}; a tensor FSDP did not shard is "
                                  f"replicated, the same on every rank", fix=_RESYNC)


def read_verl_sources(step_dir: str | Path) -> dict[str, SourceTensor]:
    """Every weight of a verl checkpoint with its per-rank chunks (raw byte spans in the rank files), in save order.

    Raises:
        CheckpointError: a rank file missing, truncated or crafted; placements this merge does not handle.
    """
    actor = verl_actor_dir(step_dir)
    ws, _ = read_verl_world_size(actor)
    out: dict[str, SourceTensor] = {}
    offsets: dict[str, int] = {}
    for rank in range(ws):
        path = actor / f"model_world_size_{ws}_rank_{rank}.pt"
        sd, data = _load_rank(path)
        if rank and set(sd) != set(out):
            diff = sorted(set(sd) ^ set(out))[:3]
            raise CheckpointError(f"{path.name} holds other keys than rank 0 ({diff})", fix=_RESYNC)
        for key, rec in sd.items():
            local, dtype, full, placements = _local(path, key, rec, data)
            storage = local["storage"]
            sdtype = _STORAGE_DTYPES.get(storage.get("type") if isinstance(storage, dict) else None)
            dtype = dtype or sdtype
            if dtype is None or (sdtype is not None and sdtype != dtype):
                raise CheckpointError(f"{path}: {key} has storage {storage.get('type')} for dtype {dtype}", fix=_RESYNC)
            size = tuple(local["size"])
            if placements is None:  # a plain tensor (a buffer FSDP does not shard): the same on every rank, one copy
                # kept, as verl 0.9.x's merger does (fsdp_model_merger.py merge_non_dtensor_shards; v0.7.0 concatenated
                # the ranks' copies into a tensor world-size times too large)
                dim, replicate = 0, True
            else:
                p = placements[0]
                kind = type(p).__name__
                if kind == "Replicate":
                    dim, replicate = 0, True
                elif kind == "Shard":
                    dim, replicate = p.state.get("dim", 0), False
                else:
                    raise CheckpointError(f"{path}: {key} has placement {kind}, which verl's merger does not merge "
                                          f"either", fix="save the checkpoint again with FSDP (placements sharded on dim 0)")
                # verl's FSDP2 shards each parameter on its first dim that the FSDP size divides (fsdp_utils.py
                # get_shard_placement_fn, v0.7.0 and v0.9.x): a vocabulary that 2 ranks do not divide is Shard(1)
                dim = dim + len(full) if dim < 0 else dim
                if not replicate and (not 0 <= dim < len(full) or len(size) != len(full)
                                      or any(a != b for i, (a, b) in enumerate(zip(size, full, strict=True)) if i != dim)):
                    raise CheckpointError(f"{path}: {key}'s local shard {list(size)} is not a Shard({dim}) piece of "
                                          f"{list(full)}", fix=_RESYNC)
            st = out.get(key)
            if st is None:
                shape = full if full is not None else size
                st = out[key] = SourceTensor(key, dtype, shape)
                offsets[key] = 0
            elif st.dtype != dtype:
                raise CheckpointError(f"{key}: {path.name} stores {dtype}, rank 0 {st.dtype}", fix=_RESYNC)
            if placements is None and tuple(st.shape) != size:
                raise CheckpointError(f"{key}: {path.name} holds shape {list(size)}, rank 0 {list(st.shape)}; a tensor FSDP "
                                      f"did not shard is the same on every rank", fix=_RESYNC)
            start, nbytes = data.get(str(storage["key"]), (None, 0))
            if replicate and rank:
                if placements is None and st.chunks and start is not None:
                    _same_bytes(st.chunks[0], path, start + int(local["offset"]) * dtype.itemsize, key, rank)
                continue
            n = math.prod(size) * dtype.itemsize
            first = int(local["offset"]) * dtype.itemsize
            if start is None or first + n > nbytes:
                raise CheckpointError(f"{path}: {key}'s data ({n} bytes at {first}) is missing or cut short "
                                      f"(storage holds {nbytes})", fix=_RESYNC)
            if tuple(local["stride"]) != _contiguous(size) and n:
                raise CheckpointError(f"{path}: {key} is saved non-contiguous (stride {local['stride']})",
                                      fix="report this layout; verl's FSDP shards are contiguous")
            off = offsets[key]
            if n:
                chunk_off = tuple(off if i == dim else 0 for i in range(len(size)))
                st.chunks.append(Chunk(chunk_off, size, path, start + first, n))
            offsets[key] = off + (size[dim] if size else 1)
    for st in out.values():
        covered = sum(math.prod(c.sizes) for c in st.chunks)
        if covered != math.prod(st.shape):
            raise CheckpointError(f"{st.name}: the {ws} rank files hold {covered} of {math.prod(st.shape)} elements of "
                                  f"shape {list(st.shape)}", fix=_RESYNC)
    return out
