"""nbtools.metrics on damaged and oddly placed TensorBoard event files, written by the real writers
(``torch.utils.tensorboard.SummaryWriter``, as NeMo-RL logs, and tensorboard's own ``tensorboard.summary.Writer``)
and then truncated, bit-flipped, mixed in one directory or reached through symlinks."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import warnings
from pathlib import Path

from torch.utils.tensorboard import SummaryWriter

from nbtools import metrics as M

TAGS = ("train/reward", "train/mean_gen_tokens_per_sample", "train/kl_penalty")


def _torch_run(tb: Path, steps=range(1, 9), base: float = 0.0) -> Path:
    w = SummaryWriter(log_dir=str(tb))
    for s in steps:
        for i, tag in enumerate(TAGS):
            w.add_scalar(tag, base + s + i / 10, s)
    w.close()
    return _newest(tb)


def _newest(tb: Path) -> Path:
    return max(tb.glob("events.out.tfevents.*"), key=lambda f: f.stat().st_mtime_ns)


def _offsets(data: bytes) -> list[int]:
    """Start of every TFRecord (u64 length, u32 crc, payload, u32 crc) in an intact file."""
    out, pos = [], 0
    while pos < len(data):
        out.append(pos)
        pos += 16 + struct.unpack_from("<Q", data, pos)[0]
    return out


def _read(path, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = M.read_tensorboard(path, **kw)
    return df, [str(w.message) for w in caught]


def test_same_scalars_as_tensorboards_own_reader(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.summary import DirectoryOutput, Writer
    from tensorboard.util import tensor_util

    _torch_run(tmp_path / "a" / "exp_001" / "tensorboard")
    w = Writer(DirectoryOutput(str(tmp_path / "b" / "exp_001" / "tensorboard")))  # v2 tensor scalars
    for s in range(1, 6):
        w.add_scalar("train/reward", 0.5 * s, s)
        w.add_scalar("validation/accuracy", 0.25 + s / 100, s)
    w.close()
    for root in (tmp_path / "a", tmp_path / "b"):
        df, warned = _read(root)
        assert warned == [] and df.attrs["problems"] == []
        acc = EventAccumulator(str(root / "exp_001" / "tensorboard"))
        acc.Reload()
        want = [(t, e.step, round(e.value, 6)) for t in acc.Tags()["scalars"] for e in acc.Scalars(t)]
        want += [(t, e.step, round(float(tensor_util.make_ndarray(e.tensor_proto)), 6))
                 for t in acc.Tags()["tensors"] for e in acc.Tensors(t)]
        want.sort()
        got = sorted(zip(df.tag, df.step, df.value.round(6), strict=True))
        assert got == want and len(got) in (24, 10)


def test_flipped_data_byte_skips_one_record_and_says_where(tmp_path):
    tb = tmp_path / "exp_001" / "tensorboard"
    f = _torch_run(tb)
    full, _ = _read(tmp_path)
    data = bytearray(f.read_bytes())
    at = _offsets(bytes(data))[10]  # a scalar in the middle of the file
    data[at + 14] ^= 0x40  # inside the payload: its checksum fails
    f.write_bytes(bytes(data))
    df, warned = _read(tmp_path)
    assert len(df) == len(full) - 1  # the rest of the curve is kept, not cut at the damage
    assert len(warned) == 1 and f"{f.name} at byte {at}" in warned[0] and "record data checksum failed" in warned[0]
    assert df.attrs["problems"] == [{"file": str(f), "offset": at, "kind": "corrupt",
                                     "message": df.attrs["problems"][0]["message"]}]


def test_damaged_header_resumes_at_the_next_intact_record(tmp_path):
    f = _torch_run(tmp_path / "exp_001" / "tensorboard")
    full, _ = _read(tmp_path)
    data = bytearray(f.read_bytes())
    at = _offsets(bytes(data))[5]
    data[at] ^= 0x7F  # the record's length: its header checksum fails, the length cannot be trusted
    f.write_bytes(bytes(data))
    df, warned = _read(tmp_path)
    assert len(df) == len(full) - 1 and "record header checksum failed" in warned[0]
    assert df.attrs["problems"][0]["offset"] == at and df.attrs["problems"][0]["kind"] == "corrupt"
    assert M.select(df, "reward")["step"].tolist() == list(range(1, 9))  # only one kl/length point is gone


def test_truncated_file_warns_with_the_offset_of_the_cut_record(tmp_path):
    f = _torch_run(tmp_path / "exp_001" / "tensorboard")
    data = f.read_bytes()
    last = _offsets(data)[-1]
    f.write_bytes(data[: last + 20])
    df, warned = _read(tmp_path)  # written just now: a writer mid-flush, listed but not warned about
    assert len(df) == 8 * 3 - 1 and warned == [] and df.attrs["problems"][0]["kind"] == "pending"
    old = f.stat().st_mtime - 3600
    os.utime(f, (old, old))  # nobody wrote it for an hour: the writer died inside the record
    df, warned = _read(tmp_path)
    assert len(df) == 8 * 3 - 1 and f"at byte {last}" in warned[0] and "ends inside a record" in warned[0]
    assert df.attrs["problems"][0]["kind"] == "truncated" and df.attrs["problems"][0]["offset"] == last


def test_garbage_event_file_beside_a_good_one(tmp_path):
    tb = tmp_path / "exp_001" / "tensorboard"
    _torch_run(tb)
    (tb / "events.out.tfevents.9999999999.host.1.0").write_bytes(os.urandom(3000) + b"\0" * 64)
    df, warned = _read(tmp_path)
    assert len(df) == 24 and "events.out.tfevents.9999999999.host.1.0 at byte 0" in warned[0]


def test_two_runs_in_one_directory_are_labelled_not_spliced(tmp_path):
    tb = tmp_path / "exp_001" / "tensorboard"
    first = _torch_run(tb, range(1, 9), base=0.0)
    second = _torch_run(tb, range(1, 4), base=100.0)  # another run writing into the same dir, from step 1
    resumed = _torch_run(tb, range(3, 6), base=200.0)  # the second run resumed from its step-2 checkpoint
    df, warned = _read(tmp_path)
    assert len(warned) == 1 and "2 runs" in warned[0] and "'exp_001#2'" in warned[0]
    r = M.select(df, "reward")
    a, b = r[r.run == "exp_001"], r[r.run == "exp_001#2"]
    assert a["step"].tolist() == list(range(1, 9)) and a["value"].tolist() == [float(s) for s in range(1, 9)]
    assert b["step"].tolist() == [1, 2, 3, 4, 5] and b["value"].tolist() == [101.0, 102.0, 203.0, 204.0, 205.0]
    assert df.attrs["files"] == {"exp_001": [str(first)], "exp_001#2": sorted([str(second), str(resumed)])}


def test_resume_in_the_same_directory_is_one_run_without_warning(tmp_path):
    tb = tmp_path / "exp_001" / "tensorboard"
    _torch_run(tb, range(1, 7))
    _torch_run(tb, range(5, 9), base=10.0)  # resumed from the step-4 checkpoint: steps 5, 6 logged again
    df, warned = _read(tmp_path)
    assert warned == [] and set(df.run) == {"exp_001"}
    r = M.select(df, "reward").set_index("step")["value"]
    assert r.to_dict() == {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0, 5: 15.0, 6: 16.0, 7: 17.0, 8: 18.0}


def test_symlinked_tensorboard_exp_and_log_dirs_are_followed(tmp_path):
    real = tmp_path / "bucket" / "tb-of-exp-1"
    _torch_run(real)
    logs = tmp_path / "logs"
    (logs / "exp_001").mkdir(parents=True)
    os.symlink(real, logs / "exp_001" / "tensorboard")  # tensorboard/ is a symlink
    os.symlink(real, real / "loop")  # a cycle must not hang the walk
    os.symlink(logs / "exp_001", tmp_path / "exp_link")  # the exp dir is a symlink
    os.symlink(logs, tmp_path / "logs_link")  # the log_dir is a symlink
    for p in (logs, logs / "exp_001", tmp_path / "exp_link", tmp_path / "logs_link", logs / "exp_001" / "tensorboard"):
        df, warned = _read(p)
        assert len(df) == 24 and warned == [], p


def _cli(*args) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("nbtools")
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_cli_reports_damage_without_a_traceback(tmp_path):
    tb = tmp_path / "exp_001" / "tensorboard"
    f = _torch_run(tb)
    data = bytearray(f.read_bytes())
    data[_offsets(bytes(data))[3] + 13] ^= 1
    f.write_bytes(bytes(data[:-5]))
    os.utime(f, (1e9, 1e9))
    (tb / "events.out.tfevents.1.garbage").write_bytes(b"\x00" * 7 + os.urandom(500))
    for target in (tmp_path, tb / "events.out.tfevents.1.garbage"):  # a subprocess each: ~1.5 s
        res = _cli("metrics", target, "--json")
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
        json.loads(res.stdout)
        assert "damaged" in res.stderr
