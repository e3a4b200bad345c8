"""The DCP metadata allow-list accepts an Enum member pickled as ``getattr(EnumClass, "NAME")`` and nothing else.

Python 3.11.0-3.11.4 (Debian 12's ``/usr/bin/python3`` is 3.11.2) pickle an ``Enum`` member that way; other releases
pickle it as ``EnumClass(value)``. The streams below are built by hand (the bytes 3.11.2 writes), so these tests check
that form on every Python.
"""

from __future__ import annotations

import enum
import io
import os
import pickle
import signal
from collections import OrderedDict

import pytest
import torch
import torch.distributed.checkpoint.metadata as md

from nbtools.checkpoints._unpickle import (
    ForbiddenGlobal,
    SafeUnpickler,
    dcp_metadata_globals,
    load_dcp_metadata,
)
from nbtools.errors import CheckpointError

MOD = md.__name__.encode()


def _p2_getattr(owner: bytes, name: bytes) -> bytes:
    """Protocol 2, as 3.11.2 writes ``pickle.dumps(member, 2)``: GLOBAL __builtin__ getattr, GLOBAL owner, name, R."""
    return b"\x80\x02c__builtin__\ngetattr\nq\x00c" + owner + b"\nq\x01X" + len(name).to_bytes(4, "little") + name \
        + b"q\x02\x86q\x03Rq\x04."


def _p4_getattr(module: bytes, qualname: bytes, name: bytes) -> bytes:
    """Protocol 4 (STACK_GLOBAL), as 3.11.2 writes ``pickle.dumps(member)``; no FRAME (it is optional)."""
    def s(b: bytes) -> bytes:
        return b"\x8c" + bytes([len(b)]) + b
    return b"\x80\x04" + s(b"builtins") + s(b"getattr") + b"\x93" + s(module) + s(qualname) + b"\x93" + s(name) \
        + b"\x86R."


def _load(data: bytes):
    return SafeUnpickler(io.BytesIO(data), dcp_metadata_globals()).load()


@pytest.mark.parametrize("member", list(md._MEM_FORMAT_ENCODING))
def test_an_enum_member_pickled_as_getattr_is_accepted(member):
    name = member.name.encode()
    assert _load(_p2_getattr(MOD + b"\n_MEM_FORMAT_ENCODING", name)) is member
    assert _load(_p4_getattr(MOD, b"_MEM_FORMAT_ENCODING", name)) is member


class _Py3112Pickler(pickle.Pickler):
    """Pickles enum members the way Python 3.11.2 does, whatever Python runs the test."""

    def reducer_override(self, obj):
        if isinstance(obj, enum.Enum):
            return getattr, (type(obj), obj.name)
        return NotImplemented


def test_dcp_metadata_written_by_python_3_11_2_loads(tmp_path):
    props = md.TensorProperties(dtype=torch.bfloat16, memory_format=torch.channels_last)
    chunk = md.ChunkStorageMetadata(offsets=torch.Size([0, 0]), sizes=torch.Size([2, 3]))
    meta = md.Metadata(state_dict_metadata={"w": md.TensorStorageMetadata(props, torch.Size([2, 3]), [chunk])})
    buf = io.BytesIO()
    _Py3112Pickler(buf).dump(meta)
    assert b"getattr" in buf.getvalue()  # the 3.11.2 form is really in the file
    (tmp_path / ".metadata").write_bytes(buf.getvalue())
    back = load_dcp_metadata(tmp_path / ".metadata")
    assert back.state_dict_metadata["w"].properties.memory_format == torch.channels_last
    assert back.state_dict_metadata["w"].chunks == [chunk]


@pytest.mark.parametrize(("data", "named"), [
    # an attribute of an allowed enum that is not one of its members
    (_p2_getattr(MOD + b"\n_MEM_FORMAT_ENCODING", b"__class__"), "getattr(torch.distributed.checkpoint.metadata."
                                                                   "_MEM_FORMAT_ENCODING, '__class__')"),
    (_p4_getattr(MOD, b"_MEM_FORMAT_ENCODING", b"_missing_"), "_MEM_FORMAT_ENCODING, '_missing_')"),
    # an allowed class that is not an enum
    (_p2_getattr(b"collections\nOrderedDict", b"fromkeys"), "getattr(collections.OrderedDict, 'fromkeys')"),
    (_p4_getattr(MOD, b"Metadata", b"__init__"), "Metadata, '__init__')"),
    # a class outside the allow-list is refused when it is named, before getattr is called
    (_p2_getattr(b"os\nsystem", b"x"), "posix.system|os.system"),
    (_p4_getattr(b"signal", b"Signals", b"SIGKILL"), "signal.Signals"),
    # a name that is not a string
    (_p2_getattr(MOD + b"\n_MEM_FORMAT_ENCODING", b"A").replace(b"X\x01\x00\x00\x00A", b"K\x01"),
     "_MEM_FORMAT_ENCODING, 1)"),
])
def test_every_other_getattr_is_refused(tmp_path, data, named):
    with pytest.raises(ForbiddenGlobal, match=named.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        _load(data)
    (tmp_path / ".metadata").write_bytes(data)
    with pytest.raises(CheckpointError, match="which DCP metadata never contains"):
        load_dcp_metadata(tmp_path / ".metadata")


def test_getattr_of_os_system_is_refused():
    """A pickle cannot name ``os`` without a global the allow-list refuses; the stand-in refuses it all the same."""
    getattr_ = SafeUnpickler(io.BytesIO(b""), dcp_metadata_globals()).find_class("builtins", "getattr")
    assert getattr_ is not getattr
    with pytest.raises(ForbiddenGlobal, match=r"getattr\(os, 'system'\)"):
        getattr_(os, "system")
    with pytest.raises(ForbiddenGlobal, match=r"getattr\(signal\.Signals, 'SIGKILL'\)"):  # an enum, not allowed
        getattr_(signal.Signals, "SIGKILL")
    with pytest.raises(ForbiddenGlobal, match=r"getattr\(OrderedDict, 'fromkeys'\)"):  # an instance
        getattr_(OrderedDict(), "fromkeys")
    with pytest.raises(ForbiddenGlobal, match=r"__builtin__\.__import__"):  # getattr(__import__("os"), "system")
        _load(b"\x80\x02c__builtin__\ngetattr\n(c__builtin__\n__import__\nX\x02\x00\x00\x00ostRX\x06\x00\x00\x00"
              b"systemtR.")


class _Touch:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (type(self.marker).touch, (self.marker,))


def test_dcps_own_metadata_reader_runs_a_crafted_file_ours_refuses_it(tmp_path):
    """Why ``load_dcp_metadata`` is kept over DCP's ``FileSystemReader(dir).read_metadata()`` (issue 43 item 4;
    benchmarks/bench_ckpt_read.py measures both): torch's is a plain ``pickle.load``, so a ``.metadata`` written by
    anyone with access to the bucket runs code on the machine that merges. Should torch make it safe, the last
    assert fails: then swap to it."""
    from torch.distributed.checkpoint import FileSystemReader

    marker = tmp_path / "pwned"
    (tmp_path / ".metadata").write_bytes(pickle.dumps(_Touch(marker)))
    with pytest.raises(CheckpointError, match=r"asks to import pathlib\..*Path\.touch"):
        load_dcp_metadata(tmp_path / ".metadata")
    assert not marker.exists()
    try:
        FileSystemReader(str(tmp_path)).read_metadata()
    except Exception:  # noqa: BLE001, S110 - the crafted object is no Metadata; what matters is what ran
        pass
    assert marker.exists(), "torch's read_metadata no longer runs a crafted pickle: swap load_dcp_metadata for it"
