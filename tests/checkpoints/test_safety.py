"""Hostile and damaged inputs to nbtools.checkpoints: crafted pickles, outputs over the input, killed merges, umask,
damaged training_info.json. Checkpoints are written by real DCP writers (tests/support/checkpoint_writer.py), 2 gloo ranks.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import stat
import sys
import time
import warnings
import zipfile
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from checkpoint_writer import Job, write_checkpoints, write_step_files  # noqa: E402

from nbtools import checkpoints as ck  # noqa: E402
from nbtools.checkpoints._unpickle import load_dcp_metadata  # noqa: E402
from nbtools.errors import CheckpointError, ConflictError  # noqa: E402

LAYOUTS = {"v1": "v1", "ts": "v2_torch_save", "st": "v2_safetensors"}
WEIGHTS = {"v1": "policy/weights", "ts": "policy/weights/model", "st": "policy/weights/model"}


def tiny_config():
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2,
                       num_key_value_heads=1, max_position_embeddings=32, tie_word_embeddings=False)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """One step_1 per layout (v1, v2 torch_save, v2 safetensors), 2 FSDP2 ranks, one forked launch."""
    from transformers import LlamaForCausalLM

    root = tmp_path_factory.mktemp("safety")
    torch.manual_seed(0)
    sd = {k: v.detach().clone() for k, v in LlamaForCausalLM(tiny_config()).to(torch.bfloat16).state_dict().items()}
    write_checkpoints([Job(root / k / "step_1", layout, sd) for k, layout in LAYOUTS.items()], 2)
    for k, layout in LAYOUTS.items():
        write_step_files(root / k / "step_1", layout, tiny_config(), step=1, metric=0.5)
    return root


def _copy(base, key, tmp_path) -> Path:
    import shutil

    shutil.copytree(base / key, tmp_path / "ckpt")
    return tmp_path / "ckpt" / "step_1"


def _merge(step, out, **kw):
    return ck.merge(step, out, config=tiny_config(), progress=False, **kw)


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


# -- 4: a crafted pickle never runs ------------------------------------------------------------------------------


class _Evil:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("key", ["v1", "ts"])
def test_crafted_metadata_runs_no_code(base, tmp_path, key):
    step = _copy(base, key, tmp_path)
    marker = tmp_path / "pwned"
    meta = step / WEIGHTS[key] / ".metadata"
    md = load_dcp_metadata(meta)  # the real file, read with the allow-list
    md.planner_data = {"x": _Evil(marker)}  # hidden inside a well-formed Metadata
    meta.write_bytes(pickle.dumps(md))
    with pytest.raises(CheckpointError, match=r"(?s)asks to import posix\.system.*not loaded.*fix: do not use this"):
        _merge(step, tmp_path / "hf")
    assert ck.detect_layout(step) == {"v1": "dtensor_v1", "ts": "v2_torch_save"}[key]  # by file names: no unpickling
    assert ck.list_checkpoints(step.parent)["step"].tolist() == [1]
    assert ck.best(step.parent) == step
    assert not ck.verify(step).ok  # not a merged dir: reported, nothing loaded
    meta.write_bytes(pickle.dumps(_Evil(marker)))  # the plain form: the whole file is the payload
    with pytest.raises(CheckpointError, match=r"posix\.system"):
        _merge(step, tmp_path / "hf")
    assert not marker.exists() and not (tmp_path / "hf").exists()


def test_crafted_tensor_record_runs_no_code(base, tmp_path):
    """The .distcp data goes through the same allow-list: a chunk pointing at a torch.save'd payload is refused."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    step = _copy(base, "ts", tmp_path)
    marker = tmp_path / "pwned"
    w = step / WEIGHTS["ts"]
    evil = w / "__9_0.distcp"
    torch.save({"w": _Evil(marker)}, evil)
    assert zipfile.is_zipfile(evil)
    md = load_dcp_metadata(w / ".metadata")
    idx = next(i for i in md.storage_data if i.fqn == "model.norm.weight")
    md.storage_data[idx] = _StorageInfo("__9_0.distcp", 0, evil.stat().st_size)
    (w / ".metadata").write_bytes(pickle.dumps(md))
    with pytest.raises(CheckpointError, match=r"(?s)__9_0\.distcp: the chunk .* asks to import posix\.system"):
        _merge(step, tmp_path / "hf")
    assert not marker.exists()


def test_metadata_pointing_outside_the_checkpoint_is_refused(base, tmp_path):
    step = _copy(base, "v1", tmp_path)
    meta = step / WEIGHTS["v1"] / ".metadata"
    md = load_dcp_metadata(meta)
    idx = next(iter(md.storage_data))
    info = md.storage_data[idx]
    md.storage_data[idx] = type(info)("../../../../etc/passwd", info.offset, info.length)
    meta.write_bytes(pickle.dumps(md))
    with pytest.raises(CheckpointError, match=r"stored at '\.\./\.\./\.\./\.\./etc/passwd', which is not a shard file"):
        _merge(step, tmp_path / "hf")


# -- 5: the output never overlaps the input; stale dirs; umask -------------------------------------------------


@pytest.mark.parametrize("case", ["step", "checkpoint_dir", "inside", "symlink", "weights-given"])
def test_output_over_the_input_is_refused(base, tmp_path, case):
    step = _copy(base, "st", tmp_path)
    before = _tree(step.parent)
    src, out = step, {"step": step, "checkpoint_dir": step.parent, "inside": step / "policy" / "hf",
                      "symlink": tmp_path / "link", "weights-given": step / "merged"}[case]
    if case == "symlink":
        out.symlink_to(step, target_is_directory=True)
    if case == "weights-given":
        src = step / "policy" / "weights"
    with pytest.raises(ConflictError, match=r"(?s)(is the checkpoint itself|contains the checkpoint|lies inside the "
                                            r"checkpoint).*fix: pick an output outside the checkpoint dir, e.g. "
                                            r".*ckpt-hf/step_1"):
        _merge(src, out, overwrite=True)
    assert _tree(step.parent) == before  # not a byte changed, nothing added
    assert not list(tmp_path.glob(".*.partial-*")) and not list(step.parent.glob(".*"))
    assert _merge(step, tmp_path / "hf").verified  # a sibling output is fine


_KILLED_MERGE = """
import sys, threading, time, types
from pathlib import Path
from nbtools import checkpoints as ck
from nbtools.checkpoints import _merge, _outdir, _writer
step, out, flags = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])

def blocker(name, real):
    def block(*a, **k):
        if name == "writing" and not (flags / "installing").exists():
            return real(*a, **k)
        (flags / name).touch()
        time.sleep(600)
    return block

_writer._check_finite = blocker("writing", _writer._check_finite)  # the 2nd merge: busy writing its .partial dir
_outdir.shutil = types.SimpleNamespace(rmtree=blocker("installing", None))  # the 1st: old output moved away
cfg = _merge._resolve_config(step, None)[0]
kw = {"config": cfg, "progress": False, "overwrite": True}
threading.Thread(target=ck.merge, args=(step, out), kwargs=kw, daemon=True).start()
while not (flags / "installing").exists():
    time.sleep(0.05)
ck.merge(step, out, **kw)
"""


def _killed_merge(step: Path, out: Path, flags: Path) -> int:
    """A merge process SIGKILLed while one merge is writing and another is installing; returns its pid."""
    import subprocess

    flags.mkdir()
    p = subprocess.Popen([sys.executable, "-c", _KILLED_MERGE, str(step), str(out), str(flags)])
    deadline = time.monotonic() + 240
    while not ((flags / "writing").exists() and (flags / "installing").exists()):
        assert p.poll() is None and time.monotonic() < deadline, "the merge process never reached the kill point"
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    return p.pid


@pytest.mark.slow  # merge processes, one killed
def test_stale_dirs_of_a_killed_merge_are_removed_by_the_next(base, tmp_path):
    step, out = base / "st" / "step_1", tmp_path / "hf"
    _merge(step, out)
    pid = _killed_merge(step, out, tmp_path / "flags")
    stale = sorted(p.name.split("-")[0] for p in tmp_path.glob(".hf.*"))
    assert stale == [".hf.old", ".hf.partial"], stale
    host = os.uname().nodename
    keep = [tmp_path / f".hf.partial-{os.getppid()}-0123abcd@{host}",  # a live process's merge
            tmp_path / f".hf.partial-{pid}-0123abcd@another-host",  # another machine on shared storage
            tmp_path / f".other.partial-{pid}-0123abcd@{host}",  # another output's
            tmp_path / ".hf.partialX"]
    for p in keep:
        p.mkdir()
    (tmp_path / f".hf.old-{pid}-0123abcd").write_text("a file, not ours")
    keep.append(tmp_path / f".hf.old-{pid}-0123abcd")
    r = _merge(base / "ts" / "step_1", out, overwrite=True)
    assert r.verified and ck.verify(out).ok
    assert sorted(tmp_path.glob(".hf.*")) == sorted(p for p in keep if p.name.startswith(".hf."))
    assert all(p.exists() for p in keep)


def test_umask_is_honoured(base, tmp_path):
    old = os.umask(0o027)
    try:
        r = _merge(base / "st" / "step_1", tmp_path / "hf")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in r.out.iterdir()}
    assert set(modes.values()) == {0o640}, modes
    assert stat.S_IMODE(r.out.stat().st_mode) == 0o750


# -- 11: one damaged training_info.json -----------------------------------------------------------------------

DAMAGE = {
    "not-json": (b"this is not json", "not valid JSON"),
    "truncated": (b'{"current_step": 3, "val:accuracy": 0.9', "not valid JSON"),
    "not-an-object": (b"[0.9, 3]", "holds a JSON list, not an object"),
    "wrong-types": (b'{"current_step": "3", "val:accuracy": "0.99"}', "wrong type: current_step='3', val:accuracy='0.99'"),
    "missing": (None, "is missing"),
    "dangling-symlink": ("link", "is a dangling symlink"),
}


def _ckpt_dir(tmp_path, damaged: dict[int, str]) -> Path:
    d = tmp_path / "checkpoints"
    for s, metric in ((1, 0.5), (2, 0.7), (3, 0.95)):
        (d / f"step_{s}" / "policy/weights/model").mkdir(parents=True)
        p = d / f"step_{s}" / "training_info.json"
        content = DAMAGE[damaged[s]][0] if s in damaged else json.dumps({"current_step": s, "val:accuracy": metric}).encode()
        if content == "link":
            p.symlink_to(d / "gone.json")
        elif content is not None:
            p.write_bytes(content)
    return d


@pytest.mark.parametrize("case", list(DAMAGE))
def test_one_damaged_training_info_does_not_hide_the_others(tmp_path, case):
    d = _ckpt_dir(tmp_path, {3: case})  # the damaged one is the latest and would rank best
    df = ck.list_checkpoints(d)
    assert df["step"].tolist() == [1, 2, 3]
    assert df["problem"].iloc[:2].isna().all() and DAMAGE[case][1] in df["problem"].iloc[2]
    assert df["val:accuracy"].iloc[:2].tolist() == [0.5, 0.7]
    for metric in ("val:accuracy", None):
        with pytest.warns(UserWarning, match=rf"step_3: training_info\.json.*{DAMAGE[case][1][:12]}"):
            assert ck.best(d, metric=metric).name == "step_2"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ck.latest(d).name == "step_3"  # what NeMo-RL resumes from, whatever its info says


def test_every_step_damaged_still_answers_with_a_warning(tmp_path):
    d = _ckpt_dir(tmp_path, {1: "not-json", 2: "missing", 3: "truncated"})
    assert ck.list_checkpoints(d)["problem"].notna().all()
    with pytest.warns(UserWarning, match="every step is damaged"):
        assert ck.best(d).name == "step_3"
    with pytest.raises(CheckpointError, match=r"(?s)step_1/training_info\.json: .*not valid JSON.*fix: .*pick another"):
        ck.read_training_info(d / "step_1")


# -- durability and parallel files (#19) -----------------------------------------------------------------------


def test_durable_merge_fsyncs_every_file_before_the_rename(base, tmp_path, monkeypatch):
    synced: list[str] = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    threads = torch.get_num_threads()
    r = _merge(base / "st" / "step_1", tmp_path / "hf")
    assert torch.get_num_threads() == threads  # the writer pins its own pool threads only
    names = {Path(p).name for p in synced}
    assert {p.name for p in r.out.iterdir()} <= names  # every file, synced while still in the .partial dir
    assert all(".hf.partial-" in p for p in synced if Path(p).name != tmp_path.name)
    assert str(tmp_path) in synced  # the parent, after the rename
    synced.clear()
    r = _merge(base / "ts" / "step_1", tmp_path / "fast", durable=False)
    assert synced == [] and r.verified and ck.verify(r.out).ok
    # as after a crash that lost data the rename kept: same sizes, other bytes. A durable merge is reused on its
    # sizes; one made with durable=False is re-read in full before it is reused, and here it is refused
    weights = next(r.out.glob("model-*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-2:] = b"\0\0"
    weights.write_bytes(bytes(data))
    with pytest.raises(ConflictError, match="not a verified merge"):
        _merge(base / "ts" / "step_1", tmp_path / "fast", durable=False)
    assert _merge(base / "st" / "step_1", tmp_path / "hf").reused


def test_files_are_balanced_over_the_workers():
    from nbtools.checkpoints._sources import SourceTensor
    from nbtools.checkpoints._writer import plan_files

    tensors = [SourceTensor(f"t{i}", torch.bfloat16, (1024, 1024)) for i in range(3000)]  # 3000 x 2 MiB = 6.3 GB
    sizes = lambda files: [f.data_bytes for f in files]  # noqa: E731
    assert len(plan_files(tensors, 2 * 10**9)) == 4  # ceil(6.3 / 2)
    assert len(plan_files(tensors, 2 * 10**9, workers=2)) == 4
    three = plan_files(tensors, 2 * 10**9, workers=3)
    assert len(three) == 6 and max(sizes(three)) - min(sizes(three)) <= 2 << 20
    assert len(plan_files(tensors[:200], 2 * 10**9, workers=2)) == 1  # 420 MB: one file (split only above 512 MB)
    assert len(plan_files(tensors[:300], 2 * 10**9, workers=2)) == 2  # 630 MB: one per worker


def test_torch_save_records_are_read_with_and_without_the_short_path(tmp_path):
    """The central directory is parsed with two preads; records it does not handle (here: a zip comment) go
    through zipfile and give the same span."""
    import io

    from nbtools.checkpoints import _sources

    t = torch.arange(12, dtype=torch.bfloat16).reshape(3, 4)
    blob = io.BytesIO()
    torch.save(t, blob)
    plain = blob.getvalue()
    commented = plain[:-2] + (5).to_bytes(2, "little") + b"hello"  # EOCD comment length + comment
    f = tmp_path / "records.bin"
    f.write_bytes(b"x" * 100 + plain + commented)
    with open(f, "rb") as fh:
        a = _sources._raw_span(fh, f, 100, len(plain), (3, 4), 2)
        assert _sources._zip_entries(fh.fileno(), 100 + len(plain), len(commented)) is None
        b = _sources._raw_span(fh, f, 100 + len(plain), len(commented), (3, 4), 2)
    data = f.read_bytes()
    assert data[a[0]:a[0] + a[1]] == data[b[0]:b[0] + b[1]] == t.view(torch.uint8).numpy().tobytes()
    assert b[0] - a[0] == len(plain)


# -- #31 H1: overwrite never deletes what the merge reads through a link ----------------------------------------


@pytest.mark.parametrize("out_is", ["the-linked-weights", "its-parent", "the-linked-tokenizer"])
def test_overwrite_into_a_directory_read_through_a_link_is_refused(base, tmp_path, out_is):
    import shutil

    step = _copy(base, "st", tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    what = "tokenizer" if out_is == "the-linked-tokenizer" else "weights"
    shutil.move(step / "policy" / what, elsewhere / what)  # the real files live elsewhere; the step links to them
    (step / "policy" / what).symlink_to(elsewhere / what, target_is_directory=True)
    before = _tree(elsewhere)
    out = elsewhere if out_is == "its-parent" else elsewhere / what
    with pytest.raises(ConflictError, match=rf"(?s)the output directory {out} (is|contains) .*elsewhere/{what}, which "
                                            rf"the merge of .*step_1 reads through the link .*step_1/policy/{what}; .*"
                                            rf"fix: pick an output outside"):
        _merge(step, out, overwrite=True)
    assert _tree(elsewhere) == before and (step / "policy" / what).resolve().is_dir()  # not a byte lost
    assert not list(elsewhere.glob(".*"))
    r = _merge(step, tmp_path / "hf")  # reading through the link is fine; only writing over it is refused
    assert r.verified and ck.verify(r.out).ok


def test_config_path_inside_the_output_is_refused(base, tmp_path):
    step = _copy(base, "st", tmp_path)
    out = tmp_path / "hf"
    (out / "base").mkdir(parents=True)
    tiny_config().save_pretrained(str(out / "base"))
    with pytest.raises(ConflictError, match=r"(?s)contains .*hf/base.*reads"):
        ck.merge(step, out, config=out / "base", overwrite=True, progress=False)
    assert (out / "base" / "config.json").is_file()


# -- #31 H2: a stale extra shard never merges as verified ----------------------------------------------------------


def _zeroed_copy(src: Path, dst: Path) -> None:
    """A stale shard: ``src``'s header (same tensors, same DCP_SHARDING_INFO offsets) with zeroed data."""
    from nbtools.checkpoints._sources import read_safetensors_header

    _, start = read_safetensors_header(src)
    data = src.read_bytes()
    dst.write_bytes(data[:start] + bytes(len(data) - start))


def _tensors(d: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {k: v for f in sorted(d.glob("model-*.safetensors")) for k, v in load_file(f).items()}


@pytest.mark.parametrize("name", ["shard-00000-model-00001-of-00001.safetensors",  # a rank no writer numbers
                                  "shard-00003-model-00001-of-00001.safetensors"])  # a 3rd rank of an earlier save
def test_a_stale_extra_shard_with_another_shards_header_is_refused(base, tmp_path, name):
    step = _copy(base, "st", tmp_path)
    model = step / WEIGHTS["st"]
    _zeroed_copy(model / "shard-00001-model-00001-of-00001.safetensors", model / name)
    what = (r"shard-00000-model-00001-of-00001\.safetensors: not a name any rank writes" if "00000" in name else
            r"the chunk at \[0(, 0)?\] is saved twice with different contents \(shard-00001-model-00001-of-00001"
            r"\.safetensors and shard-00003")
    with pytest.raises(CheckpointError, match=rf"(?s){what}.*fix: move the named file\(s\) out of the checkpoint"):
        _merge(step, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    (model / name).unlink()
    assert _merge(step, tmp_path / "hf").verified


def test_a_byte_identical_replica_shard_merges_to_the_same_tensors(base, tmp_path):
    """Replicas are allowed when they are equal byte for byte; the result is the true merge's."""
    import shutil

    true = _tensors(_merge(base / "st" / "step_1", tmp_path / "true").out)
    step = _copy(base, "st", tmp_path)
    model = step / WEIGHTS["st"]
    shutil.copyfile(model / "shard-00001-model-00001-of-00001.safetensors",
                    model / "shard-00003-model-00001-of-00001.safetensors")
    got = _tensors(_merge(step, tmp_path / "hf").out)
    assert got.keys() == true.keys() and all(torch.equal(got[k], true[k]) for k in true)


@pytest.mark.parametrize("key", ["v1", "ts"])
def test_a_distcp_file_no_rank_wrote_is_named_and_refused(base, tmp_path, key):
    import shutil

    step = _copy(base, key, tmp_path)
    w = step / WEIGHTS[key]
    shutil.copyfile(w / "__1_0.distcp", w / "__2_0.distcp")  # an earlier save's 3rd rank, left behind
    with pytest.raises(CheckpointError, match=r"(?s)__2_0\.distcp in .*: no rank of this checkpoint wrote it \(its "
                                              r"\.metadata lists 2 other shard file\(s\)\).*fix: move the named"):
        _merge(step, tmp_path / "hf")


def test_overlapping_chunks_at_other_offsets_are_refused():
    from nbtools.checkpoints._sources import Chunk, SourceTensor, _check_coverage

    st = SourceTensor("w", torch.bfloat16, (8, 4))
    # rows 0-4 and 2-6: 8 rows counted, as many as the tensor has, yet rows 2-4 twice and rows 6-8 never
    st.chunks = [Chunk((0, 0), (4, 4), Path("a"), 0, 32), Chunk((2, 0), (4, 4), Path("b"), 0, 32)]
    with pytest.raises(CheckpointError, match=r"w: the chunks at \[0, 0\] \(a\) and \[2, 0\] \(b\) overlap"):
        _check_coverage(st)


# -- #31 H1 and H2 on a checkpoint the rehearsal itself wrote ------------------------------------------------------


@pytest.fixture(scope="module")
def rehearsal_step(rehearsal_run) -> Path:
    """``step_1`` of the session's shared rehearsal run (tests/conftest.py: the CPU GRPO notebook 03 launches, shrunk),
    saved by its own two ranks; read only (the test below copies it)."""
    return rehearsal_run.run_dir / "checkpoints" / "step_1"


@pytest.mark.slow
def test_h1_and_h2_on_a_checkpoint_the_rehearsal_wrote(rehearsal_step, tmp_path):
    import shutil

    step = tmp_path / "ckpt" / "step_1"
    shutil.copytree(rehearsal_step, step)
    true = _tensors(ck.merge(step, tmp_path / "true", progress=False).out)
    # H1: the weights live elsewhere behind a link; an overwrite into them is refused and loses nothing
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.move(step / "policy" / "weights", elsewhere / "weights")
    (step / "policy" / "weights").symlink_to(elsewhere / "weights", target_is_directory=True)
    before = _tree(elsewhere)
    with pytest.raises(ConflictError, match=r"reads through the link"):
        ck.merge(step, elsewhere / "weights", overwrite=True, progress=False)
    assert _tree(elsewhere) == before
    # H2: a stale third shard (another shard's header, zeroed data) is refused, never merged as verified
    model = elsewhere / "weights" / "model"
    stale = model / "shard-00003-model-00001-of-00001.safetensors"
    _zeroed_copy(model / "shard-00001-model-00001-of-00001.safetensors", stale)
    with pytest.raises(CheckpointError, match=r"saved twice with different contents"):
        ck.merge(step, tmp_path / "hf", progress=False)
    assert not (tmp_path / "hf").exists()
    stale.unlink()
    r = ck.merge(step, tmp_path / "hf", progress=False)
    merged = _tensors(r.out)
    assert r.verified and merged.keys() == true.keys() and all(torch.equal(true[k], v) for k, v in merged.items())


# -- #41 gap: "verified" reads every byte of every .distcp file (zip CRC-32 of each record; records tile the file) --


def _flip_inside_a_tensor(w: Path, name: str) -> None:
    """Flip one bit in the middle of the largest raw tensor chunk stored in ``w/name`` (still a finite number)."""
    from nbtools.checkpoints._sources import _read_dcp

    chunks = [c for st in _read_dcp(w, "").values() for c in st.chunks if c.path.name == name and c.start >= 0]
    c = max(chunks, key=lambda c: c.nbytes)
    with open(w / name, "r+b") as fh:
        fh.seek(c.start + c.nbytes // 2)
        byte = fh.read(1)
        fh.seek(c.start + c.nbytes // 2)
        fh.write(bytes([byte[0] ^ 0x04]))


@pytest.mark.parametrize("key", ["v1", "ts"])
def test_a_bit_flip_inside_a_distcp_tensor_is_not_verified(base, tmp_path, key):
    """The merge copied raw byte spans, so one flipped bit inside a shard merged as ``verified: true``."""
    step = _copy(base, key, tmp_path)
    _flip_inside_a_tensor(step / WEIGHTS[key], "__1_0.distcp")
    with pytest.raises(CheckpointError, match=r"__1_0\.distcp \(model\.[\w.]+, bytes \d+\.\.\d+\): the bytes of "
                                              r"\S+/data/\d+ do not match the CRC-32 torch\.save recorded") as e:
        _merge(step, tmp_path / "hf")
    assert "re-copy the complete step_N directory" in e.value.fix and not (tmp_path / "hf").exists()


def test_bytes_appended_to_a_distcp_file_are_refused(base, tmp_path):
    step = _copy(base, "v1", tmp_path)
    with open(step / WEIGHTS["v1"] / "__0_0.distcp", "ab") as fh:
        fh.write(b"\0" * 100)
    with pytest.raises(CheckpointError, match=r"__0_0\.distcp is \d+ bytes, but its \.metadata records end at byte "
                                              r"\d+: 100 bytes were appended"):
        _merge(step, tmp_path / "hf")


@pytest.mark.parametrize("key", ["v1", "ts"])
def test_one_distcp_file_copied_over_another_is_not_verified(base, tmp_path, key):
    """Two ranks of even shards write files of one layout, so a copy passed every offset check and merged rank 0's
    rows twice; the records' CRC-32s are now compared across files."""
    import shutil

    step = _copy(base, key, tmp_path)
    w = step / WEIGHTS[key]
    shutil.copyfile(w / "__0_0.distcp", w / "__1_0.distcp")
    with pytest.raises(CheckpointError, match=r"__1_0\.distcp holds exactly the bytes of __0_0\.distcp: one shard "
                                              r"file was copied over another"):
        _merge(step, tmp_path / "hf")
    good = _merge(base / key / "step_1", tmp_path / "good")
    assert good.verified and any(n.startswith("zip CRC-32 of every record of the 2 shard files checked; the records "
                                              "tile each file") for n in good.notes)


def test_the_crc_check_reads_the_same_with_and_without_the_short_path(base, monkeypatch):
    """zip64 records, long directories and comments go through zipfile instead of the two-pread short path."""
    from nbtools.checkpoints import _crc

    w = base / "v1" / "step_1" / WEIGHTS["v1"]
    fast = _crc.check_dcp_files(w, fix="f")
    monkeypatch.setattr(_crc, "_zip_entries", lambda *a: None)
    from transformers import LlamaForCausalLM

    weights = sum(t.numel() * 2 for t in LlamaForCausalLM(tiny_config()).state_dict().values())  # bf16 bytes
    assert _crc.check_dcp_files(w, fix="f") == fast and fast[0] > weights
