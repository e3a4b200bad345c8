"""The one way nbtools unpickles checkpoint files: an allow-list of globals, so a crafted file cannot run code.

A pickle names the callables it wants called (``GLOBAL``/``STACK_GLOBAL``) and ``pickle.load`` imports and
calls them: ``os.system`` in a DCP ``.metadata`` written by anyone with access to the bucket would run on the
machine that merges. Both pickles nbtools reads go through :class:`SafeUnpickler` with their own allow-list:

- :func:`dcp_metadata_globals`: the dataclasses of ``torch.distributed.checkpoint.metadata`` plus what their pickles
  reference (``_StorageInfo``, ``torch.Size``, dtypes, the layout helper, ``pathlib`` paths, made pure here);
- ``TENSOR_RECORD``: the ``data.pkl`` of one ``torch.save``'d tensor inside a ``.distcp`` file, reduced to its
  shape/stride/offset (nothing is rebuilt, no storage is loaded).

Any other global raises :class:`ForbiddenGlobal`, naming it, before anything is called. One form of
``builtins.getattr`` is accepted: Python 3.11.0–3.11.4 (Debian 12's ``python3`` is 3.11.2) pickle an ``Enum`` member
as ``getattr(EnumClass, "NAME")`` and DCP metadata holds enums; the stand-in returns ``EnumClass.__members__[NAME]``
only when ``EnumClass`` is itself allow-listed, and refuses every other object or name.

Example:
    >>> md = load_dcp_metadata(Path("step_30/policy/weights/.metadata"))
    >>> sorted(md.state_dict_metadata)[:1]
    ['model.embed_tokens.weight']
"""

from __future__ import annotations

import enum
import functools
import io
import pathlib
import pickle
import types
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import torch

from nbtools.errors import CheckpointError

__all__ = ["SafeUnpickler", "ForbiddenGlobal", "dcp_metadata_globals", "TENSOR_RECORD", "load_dcp_metadata",
           "load_tensor_record"]

_RESYNC = "re-copy the complete step_N directory from where training wrote it (e.g. the bucket), or pick another step"


class ForbiddenGlobal(pickle.UnpicklingError):
    """A pickle asked for a global outside the allow-list (nothing was imported or called)."""

    def __init__(self, module: str, name: str):
        self.qualname = f"{module}.{name}"
        super().__init__(f"forbidden global {self.qualname}")


@functools.cache
def dcp_metadata_globals() -> dict[tuple[str, str], object]:
    """The allow-list for DCP ``.metadata`` (built on first use: it imports torch.distributed.checkpoint)."""
    import torch.distributed.checkpoint.metadata as md
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.serialization import _get_layout

    names = ("Metadata", "MetadataIndex", "ChunkStorageMetadata", "TensorStorageMetadata", "BytesStorageMetadata",
             "TensorProperties", "StorageMeta", "_MEM_FORMAT_ENCODING")
    allowed: dict[tuple[str, str], object] = {(md.__name__, n): getattr(md, n) for n in names}
    allowed[(_StorageInfo.__module__, "_StorageInfo")] = _StorageInfo
    allowed[("torch", "Size")] = torch.Size
    allowed[("torch.serialization", "_get_layout")] = _get_layout  # str -> torch.layout from a fixed table
    allowed[("collections", "OrderedDict")] = OrderedDict
    # StorageMeta.checkpoint_id is the writer's path; a pure path never touches the filesystem
    for cls, pure in ((pathlib.PosixPath, pathlib.PurePosixPath), (pathlib.WindowsPath, pathlib.PureWindowsPath),
                      (pathlib.PurePosixPath, pathlib.PurePosixPath), (pathlib.PureWindowsPath, pathlib.PureWindowsPath)):
        allowed[("pathlib", cls.__name__)] = pure
        allowed[("pathlib._local", cls.__name__)] = pure
    return allowed


def _tensor_record_globals() -> dict[tuple[str, str], object]:
    def rebuild(storage, offset, size, stride, *rest):  # records the layout only; no tensor is built
        return {"storage": storage, "offset": offset, "size": tuple(size), "stride": tuple(stride)}

    return {("torch._utils", "_rebuild_tensor_v2"): rebuild, ("collections", "OrderedDict"): OrderedDict}


class SafeUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` that resolves only allow-listed globals (plus torch dtypes / storage type names).

    Args:
        file: a binary file object.
        allowed: ``{(module, name): object}`` returned for that global.
        storages: also accept ``torch.*Storage`` type names (returned as their name, for torch.save records).
        persistent: handler for persistent ids (torch.save storages); ``None`` refuses them.
    """

    def __init__(self, file, allowed: dict[tuple[str, str], object], *, storages: bool = False,
                 persistent: Callable | None = None):
        super().__init__(file)
        self.allowed, self.storages, self.persistent = allowed, storages, persistent

    def find_class(self, module: str, name: str):
        if name == "getattr" and module in ("builtins", "__builtin__"):  # protocol 2 writes Python 2's name
            return self._enum_member
        if (module, name) in self.allowed:
            return self.allowed[(module, name)]
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if self.storages and module == "torch" and name.isidentifier() and name.endswith("Storage"):
            return name
        raise ForbiddenGlobal(module, name)

    def _enum_member(self, owner, name):
        """``getattr(EnumClass, "NAME")`` as 3.11.0-3.11.4 pickle an enum member: allowed class, real member only."""
        if (isinstance(owner, type) and issubclass(owner, enum.Enum) and isinstance(name, str)
                and any(owner is v for v in self.allowed.values()) and name in owner.__members__):
            return owner.__members__[name]
        if isinstance(owner, type):
            what = f"{owner.__module__}.{owner.__qualname__}"
        else:
            what = getattr(owner, "__name__", None) if isinstance(owner, types.ModuleType) else type(owner).__name__
        raise ForbiddenGlobal("builtins", f"getattr({what}, {name!r})")

    def persistent_load(self, pid):
        if self.persistent is None:
            raise pickle.UnpicklingError("persistent ids are not expected in this file")
        return self.persistent(pid)


TENSOR_RECORD = _tensor_record_globals()


def load_dcp_metadata(path: Path):
    """A DCP ``.metadata`` file as ``torch.distributed.checkpoint.metadata.Metadata``, without running its code.

    Kept over DCP's ``FileSystemReader(dir).read_metadata()`` (issue 43 item 4): that is a plain ``pickle.load``
    that runs what a crafted file names (tests/checkpoints/test_unpickle.py), and it took 1.5x the time of this one
    (benchmarks/bench_ckpt_read.py, 147 entries: 3.9 vs 2.6 ms, same CPU and RSS).

    Raises:
        CheckpointError: the file names a forbidden global (names it), is damaged, or is not DCP metadata.
    """
    from torch.distributed.checkpoint.metadata import Metadata

    try:
        with open(path, "rb") as f:
            md = SafeUnpickler(f, dcp_metadata_globals()).load()
    except ForbiddenGlobal as e:
        raise CheckpointError(
            f"{path} asks to import {e.qualname}, which DCP metadata never contains: a pickle naming it could run "
            f"code on this machine, so the file was not loaded", fix="do not use this checkpoint; " + _RESYNC
            + ", and check who can write to that storage") from None
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing", fix=_RESYNC) from None
    except Exception as e:  # noqa: BLE001 - any unpickling problem means a damaged .metadata
        raise CheckpointError(f"{path} cannot be read ({type(e).__name__}: {e})", fix=_RESYNC) from None
    if not isinstance(md, Metadata):
        raise CheckpointError(f"{path} holds a {type(md).__name__}, not DCP Metadata", fix=_RESYNC)
    return md


def load_tensor_record(data: bytes) -> dict:
    """``{"storage", "offset", "size", "stride"}`` of a torch.save'd tensor's ``data.pkl`` (nothing is loaded).

    Raises:
        ForbiddenGlobal / pickle.UnpicklingError: the record is not a plain tensor.
    """
    return SafeUnpickler(io.BytesIO(data), TENSOR_RECORD, storages=True,
                         persistent=lambda pid: {"key": pid[2], "numel": pid[4]}).load()
