"""nbtools.checkpoints against checkpoints written by real torch.distributed.checkpoint writers.

Every layout is produced by DCP itself (FileSystemWriter for DTensor v1 / v2 torch_save, torch's
HuggingFaceStorageWriter(save_distributed=True) for NeMo-RL's default v2 sharded safetensors) from FSDP2
``fully_shard`` (dim-0, uneven: vocab 103) or TP-style DTensor shards (``Shard(1)``), on 1, 2 and 4 gloo ranks
(see tests/support/checkpoint_writer.py). The merged model must give exactly the source model's logits.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from checkpoint_writer import Job, write_checkpoints, write_step_files  # noqa: E402

from nbtools import checkpoints as ck  # noqa: E402
from nbtools.checkpoints import _writer  # noqa: E402
from nbtools.errors import CheckpointError, ConflictError, NotFoundError  # noqa: E402

IDS = torch.tensor([[1, 5, 9, 33, 70, 102, 4, 17]])

# name -> (world size, layout, sharding, tied)
CASES = {
    "v1-fsdp4": (4, "v1", "fsdp", False),
    "v2st-fsdp4-tied": (4, "v2_safetensors", "fsdp", True),
    "v2ts-fsdp4": (4, "v2_torch_save", "fsdp", False),
    "v2st-tp2": (2, "v2_safetensors", "tp", False),
    "v2ts-tp2-tied": (2, "v2_torch_save", "tp", True),
    "v1-tp2-tied": (2, "v1", "tp", True),
    "v2st-1rank": (1, "v2_safetensors", "fsdp", False),
    "v1-1rank-tied": (1, "v1", "fsdp", True),
}


def tiny_config(tied: bool):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=103, hidden_size=32, intermediate_size=72, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=tied, bos_token_id=1,
                       eos_token_id=2, pad_token_id=0)


def source_model(tied: bool):
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(tiny_config(tied)).to(torch.bfloat16).eval()


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """All CASES written by real DCP writers: one forked launch per world size (1, 2, 4 ranks)."""
    root = tmp_path_factory.mktemp("ckpts")
    models = {t: source_model(t) for t in (False, True)}
    by_world: dict[int, list[Job]] = {}
    for name, (world, layout, sharding, tied) in CASES.items():
        sd = {k: v.detach().clone() for k, v in models[tied].state_dict().items()}
        if tied and layout != "v1":
            sd.pop("lm_head.weight")  # NeMo-Automodel (v2) drops a tied lm_head; v1 keeps both keys
        by_world.setdefault(world, []).append(Job(root / name / "step_1", layout, sd, sharding))
    for world, jobs in sorted(by_world.items()):
        write_checkpoints(jobs, world)
    for name, (_, layout, _, tied) in CASES.items():
        write_step_files(root / name / "step_1", layout, tiny_config(tied), step=1)
    return root, models


def _merge(step, out, tied, **kw):
    layout = ck.detect_layout(step)
    cfg = None if layout in ("v2_safetensors", "consolidated") else tiny_config(tied)  # .hf_metadata has the config
    return ck.merge(step, out, config=kw.pop("config", cfg), progress=False, **kw)


@pytest.mark.parametrize("name", list(CASES))
def test_merge_every_layout_gives_identical_logits(ckpts, tmp_path, name):
    root, models = ckpts
    world, layout, sharding, tied = CASES[name]
    step = root / name / "step_1"
    assert ck.detect_layout(step) == {"v1": "dtensor_v1"}.get(layout, layout)
    r = _merge(step, tmp_path / "hf", tied)
    assert r.verified and not r.reused and r.out == (tmp_path / "hf").resolve()
    files = sorted(p.name for p in r.out.iterdir())
    assert {"config.json", "generation_config.json", "model.safetensors.index.json", "model-00001-of-00001.safetensors",
            "tokenizer.json", "checksums.json"} <= set(files) and "SHA256SUMS" not in files  # sha256 is opt-in
    index = json.loads((r.out / "model.safetensors.index.json").read_text())
    assert ("lm_head.weight" in index["weight_map"]) is (not tied)
    assert json.loads((r.out / "config.json").read_text())["dtype"] == "bfloat16"
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in r.out.iterdir())
    assert not list(tmp_path.glob(".hf.*"))
    logits = ck.verify_against(r.out, models[tied], input_ids=IDS)
    assert logits.ok and logits.max_abs_diff == 0.0, logits
    tensors = ck.verify_against(r.out, models[tied])
    assert tensors.ok, tensors.mismatches
    assert ck.verify(r.out).ok


def test_chunks_come_from_metadata_not_guesses(ckpts):
    from nbtools.checkpoints._sources import read_sources

    root, _ = ckpts
    tp = read_sources(root / "v2st-tp2" / "step_1", "v2_safetensors")
    assert [c.offsets for c in tp["model.layers.0.self_attn.o_proj.weight"].chunks] == [(0, 0), (0, 16)]
    fsdp = read_sources(root / "v1-fsdp4" / "step_1", "dtensor_v1")
    emb = fsdp["model.embed_tokens.weight"]  # v1 "model." wrapper stripped; 103 rows on 4 ranks: uneven
    assert emb.shape == (103, 32) and [c.sizes[0] for c in emb.chunks] == [26, 26, 26, 25]
    assert all(c.start >= 0 for c in emb.chunks)  # raw bytes found inside the torch.save records


@pytest.mark.slow  # a merge process
def test_multi_file_output_and_cli_reuse(ckpts, tmp_path):
    root, models = ckpts
    step = root / "v2st-fsdp4-tied" / "step_1"
    r = ck.merge(step, tmp_path / "hf", max_shard_size="20KB", progress=False)
    weights = sorted(p.name for p in r.out.glob("model-*.safetensors"))
    assert len(weights) >= 2 and weights[-1].endswith(f"-of-{len(weights):05d}.safetensors")
    assert ck.verify_against(r.out, models[True], input_ids=IDS).ok
    # the Ray-job entrypoint is a real CLI; running it again finds the verified output and does not redo it
    cmd = ck.merge_entrypoint(str(step), str(tmp_path / "hf"), python=sys.executable)
    assert cmd.startswith(sys.executable) and " -m nbtools.checkpoints merge " in cmd
    before = (r.out / weights[0]).stat().st_mtime_ns
    p = subprocess.run([*cmd.split(), "--no-progress"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    last = p.stdout.strip().splitlines()[-1]
    assert last.startswith("NBTOOLS_RESULT ") and json.loads(last.removeprefix("NBTOOLS_RESULT "))["reused"] is True
    assert (r.out / weights[0]).stat().st_mtime_ns == before


def test_existing_output_is_never_overwritten_silently(ckpts, tmp_path):
    root, _ = ckpts
    out = tmp_path / "hf"
    _merge(root / "v2st-tp2" / "step_1", out, False)
    again = _merge(root / "v2st-tp2" / "step_1", out, False)
    assert again.reused and again.verified
    with pytest.raises(ConflictError, match="overwrite=True"):
        _merge(root / "v1-fsdp4" / "step_1", out, False)
    r = _merge(root / "v1-fsdp4" / "step_1", out, False, overwrite=True)
    assert r.layout == "dtensor_v1" and not r.reused and not list(tmp_path.glob(".hf.*"))


def test_consolidated_layout_and_config_from_config_yaml(ckpts, tmp_path):
    root, models = ckpts
    merged = _merge(root / "v2st-tp2" / "step_1", tmp_path / "first", False).out
    step = tmp_path / "ck" / "step_7"
    cons = step / "policy" / "weights" / "model" / "consolidated"
    cons.mkdir(parents=True)
    for p in merged.glob("*.safetensors"):
        shutil.copy(p, cons / p.name)
    (step / "config.yaml").write_text(f"policy:\n  model_name: {merged}\n")  # a local path as model_name
    assert ck.detect_layout(step) == "consolidated"
    r = ck.merge(step, tmp_path / "again", progress=False)
    assert "config.yaml" in r.notes[0]
    assert ck.verify_against(r.out, models[False], input_ids=IDS).ok


def _copy(root, name, tmp_path):
    dst = tmp_path / name / "step_1"
    shutil.copytree(root / name / "step_1", dst)
    return dst


def _nothing_left(tmp_path):
    return not (tmp_path / "hf").exists() and not list(tmp_path.glob(".hf.*"))


def test_missing_shards(ckpts, tmp_path):
    root, _ = ckpts
    step = _copy(root, "v2ts-fsdp4", tmp_path)
    (step / "policy/weights/model/__1_0.distcp").unlink()
    with pytest.raises(CheckpointError, match=r"(?s)__1_0\.distcp is missing.*fix: re-copy the complete step_N"):
        _merge(step, tmp_path / "hf", False)
    step = _copy(root, "v2st-fsdp4-tied", tmp_path)
    (step / "policy/weights/model/shard-00002-model-00001-of-00001.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"shard-00002-model-\*\.safetensors missing"):
        _merge(step, tmp_path / "hf", True)
    assert _nothing_left(tmp_path)


def test_truncated_shards(ckpts, tmp_path):
    root, _ = ckpts
    step = _copy(root, "v1-fsdp4", tmp_path)
    f = step / "policy/weights/__3_0.distcp"
    os.truncate(f, f.stat().st_size - 100)
    with pytest.raises(CheckpointError, match=r"(?s)__3_0\.distcp is truncated.*model\.norm\.weight|__3_0\.distcp is truncated"):
        _merge(step, tmp_path / "hf", False)
    step = _copy(root, "v2st-tp2", tmp_path)
    f = step / "policy/weights/model/shard-00001-model-00001-of-00001.safetensors"
    os.truncate(f, f.stat().st_size - 10)
    with pytest.raises(CheckpointError, match=r"(?s)shard-00001.* is truncated.*fix: re-copy"):
        _merge(step, tmp_path / "hf", False)
    assert _nothing_left(tmp_path)


def test_wrong_config_names_the_key(ckpts, tmp_path):
    root, _ = ckpts
    wrong = tiny_config(False)
    wrong.intermediate_size = 80
    with pytest.raises(CheckpointError, match=r"(?s)mlp\.gate_proj\.weight: checkpoint shape \[72, 32\], config expects "
                                              r"\[80, 32\].*fix: pass config="):
        _merge(root / "v2ts-fsdp4" / "step_1", tmp_path / "hf", False, config=wrong)
    with pytest.raises(CheckpointError, match=r"missing key\(s\) \['lm_head\.weight'\]"):
        _merge(root / "v2st-fsdp4-tied" / "step_1", tmp_path / "hf", False, config=tiny_config(False))
    assert _nothing_left(tmp_path)


@pytest.mark.parametrize(("name", "shard", "where"), [
    ("v2st-tp2", 2, "0, 39"),  # TP Shard(1) chunk at column offset 36: assembled in a band
    ("v2st-1rank", 1, "0, 3"),  # whole rows: checked in place on the shard's bytes
])
def test_nan_in_a_shard_is_refused(ckpts, tmp_path, name, shard, where):
    from nbtools.checkpoints._sources import read_safetensors_header

    root, _ = ckpts
    step = _copy(root, name, tmp_path)
    f = step / f"policy/weights/model/shard-{shard:05d}-model-00001-of-00001.safetensors"
    header, start = read_safetensors_header(f)
    b = header["model.layers.1.mlp.down_proj.weight"]["data_offsets"][0]
    with open(f, "r+b") as fh:
        fh.seek(start + b + 6)
        fh.write(b"\xc0\x7f")  # bf16 NaN
    with pytest.raises(CheckpointError, match=rf"(?s)model\.layers\.1\.mlp\.down_proj\.weight holds 1\+ non-finite.*"
                                              rf"index \[{where}\].*merge an earlier checkpoint"):
        _merge(step, tmp_path / "hf", False)
    assert _nothing_left(tmp_path)


def test_full_disk_leaves_nothing(ckpts, tmp_path, monkeypatch):
    root, _ = ckpts

    def no_space(fd, size):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(_writer, "allocate", no_space)
    with pytest.raises(CheckpointError, match=r"(?s)no space writing the merged model.*fix: free disk space") as e:
        _merge(root / "v2st-tp2" / "step_1", tmp_path / "hf", False)
    need = re.search(r"needs ([\d.]+) (bytes|KB|MB|GB|TB), ([\d.]+) (bytes|KB|MB|GB|TB) free", str(e.value))
    assert need and float(need[1]) >= 1 and float(need[3]) >= 1, str(e.value)  # #31: never "needs 0.00 GB"
    assert _nothing_left(tmp_path)
    monkeypatch.undo()
    calls = []

    def fails_later(fd, buf, offset):  # the disk fills up after the header went out
        calls.append(offset)
        if len(calls) > 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return _pwrite(fd, buf, offset)

    _pwrite = _writer._pwrite_all
    monkeypatch.setattr(_writer, "_pwrite_all", fails_later)
    with pytest.raises(CheckpointError, match="no space"):
        _merge(root / "v2st-tp2" / "step_1", tmp_path / "hf", False)
    assert _nothing_left(tmp_path)


def test_full_disk_during_in_kernel_copy_leaves_nothing(ckpts, tmp_path, monkeypatch):
    """Whole-row chunks go file-to-file through copy_file_range; a disk filling up there is handled the same way."""
    root, _ = ckpts
    calls = []
    _copy = _writer._copy_range

    def fails_later(src_fd, dst_fd, src_off, dst_off, view):
        calls.append(dst_off)
        if len(calls) > 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return _copy(src_fd, dst_fd, src_off, dst_off, view)

    monkeypatch.setattr(_writer, "_copy_range", fails_later)
    with pytest.raises(CheckpointError, match=r"(?s)no space writing the merged model.*fix: free disk space"):
        _merge(root / "v2st-fsdp4-tied" / "step_1", tmp_path / "hf", True)
    assert len(calls) == 3 and _nothing_left(tmp_path)


def test_pwrite_fallback_when_the_kernel_cannot_copy(ckpts, tmp_path, monkeypatch):
    """Filesystems without copy_file_range (EXDEV/EOPNOTSUPP) fall back to pwrite and give the same bytes."""
    root, models = ckpts

    def unsupported(*a, **k):
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))

    monkeypatch.setattr(os, "copy_file_range", unsupported)
    monkeypatch.setattr(_writer, "_IN_KERNEL_COPY", True)
    res = _merge(root / "v2ts-fsdp4" / "step_1", tmp_path / "hf", False)
    assert res.verified and _writer._IN_KERNEL_COPY is False
    assert ck.verify_against(res.out, models[False]).ok


def test_interrupt_leaves_nothing(ckpts, tmp_path, monkeypatch):
    root, _ = ckpts
    calls = []

    def interrupted(t, band, r0):
        calls.append(t.name)
        if len(calls) == 5:
            raise KeyboardInterrupt

    monkeypatch.setattr(_writer, "_check_finite", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _merge(root / "v1-fsdp4" / "step_1", tmp_path / "hf", False, max_shard_size="20KB")
    assert _nothing_left(tmp_path)


def test_verify_detects_a_changed_file(ckpts, tmp_path):
    root, _ = ckpts
    r = _merge(root / "v2st-1rank" / "step_1", tmp_path / "hf", False)
    f = r.out / "model-00001-of-00001.safetensors"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF
    f.write_bytes(bytes(data))
    report = ck.verify(r.out)
    assert not report.ok and "xxh3_128 differs" in report.problems[0]
    assert ck.verify(r.out, checksums=False).ok  # same size: only the checksum sees it


def test_sha256_checksums_for_sha256sum(ckpts, tmp_path):
    root, _ = ckpts
    r = _merge(root / "v2st-1rank" / "step_1", tmp_path / "hf", False, checksum="sha256")
    assert r.algorithm == "sha256" and list(r.table().columns) == ["file", "bytes", "sha256"]
    p = subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=r.out, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert ck.verify(r.out).ok and json.loads((r.out / "checksums.json").read_text())["algorithm"] == "sha256"
    with pytest.raises(CheckpointError, match=r"checksum='md5' is not supported.*\n.*fix: use one of"):
        _merge(root / "v2st-1rank" / "step_1", tmp_path / "other", False, checksum="md5")


def test_copy_to_local_disk_command_runs(ckpts, tmp_path):
    root, _ = ckpts
    r = _merge(root / "v2st-1rank" / "step_1", tmp_path / "hf", False)
    no_site = tmp_path / "python-without-xxhash"  # an image without xxhash: the copy is compared byte for byte
    no_site.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    no_site.chmod(0o755)
    for python in (sys.executable, str(no_site)):
        local = tmp_path / f"local-{Path(python).name}"
        argv = ck.copy_to_local_disk_command(str(r.out), str(local), python=python)
        first = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert first.returncode == 0 and "copied to" in first.stdout, first.stderr
        assert ck.verify(local).ok
        second = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert "up to date" in second.stdout
    # a copy that comes out different (here: the manifest promises other bytes) is refused and leaves nothing
    manifest = json.loads((r.out / "checksums.json").read_text())
    manifest["files"]["config.json"]["xxh3_128"] = "0" * 32
    (r.out / "checksums.json").write_text(json.dumps(manifest))
    bad = subprocess.run(ck.copy_to_local_disk_command(str(r.out), str(tmp_path / "bad"), python=sys.executable),
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "differs from checksums.json: config.json" in bad.stderr
    assert not list(tmp_path.glob("bad*"))


def test_megatron_is_refused_with_the_converter_command(tmp_path):
    step = tmp_path / "step_3"
    (step / "policy/weights/iter_0000000").mkdir(parents=True)
    assert ck.detect_layout(step) == "megatron"
    with pytest.raises(CheckpointError, match=r"(?s)Megatron.*fix: run NeMo-RL's converter.*convert_megatron_to_hf\.py "
                                              r"--config .*step_3/config\.yaml --megatron-ckpt-path .*iter_0000000"):
        ck.merge(step, tmp_path / "hf", progress=False)
    cmd = ck.megatron_convert_entrypoint("/data/c/step_3", "/data/hf", hf_model_name="google/gemma-3-1b-it")
    assert cmd.startswith("cd /opt/nemo-rl && uv run --extra mcore python") and "--hf-model-name google/gemma-3-1b-it" in cmd


def test_listing_latest_best_with_nemo_rl_ranking(tmp_path):
    d = tmp_path / "checkpoints"
    metrics = {1: 0.5, 2: 0.7, 3: 0.7, 4: None, 10: 0.2}
    for s, m in metrics.items():
        (d / f"step_{s}" / "policy/weights/model").mkdir(parents=True)
        info = {"current_step": s} | ({"val:accuracy": m} if m is not None else {})
        (d / f"step_{s}" / "training_info.json").write_text(json.dumps(info))
    (d / "tmp_step_11").mkdir()
    (d / "old_step_12").mkdir()
    df = ck.list_checkpoints(d)
    assert df["step"].tolist() == [1, 2, 3, 4, 10] and df["layout"].eq("missing").all()
    assert ck.latest(d).name == "step_10"
    assert ck.best(d).name == "step_3"  # tie at 0.7 -> the higher step
    assert ck.best(d, higher_is_better=False).name == "step_10"  # missing metric (step_4) ranks worst both ways
    assert ck.best(d, metric=None).name == "step_10"
    assert ck.best(d, metric="val:nothing").name == "step_10"
    with pytest.raises(NotFoundError, match="check the experiment.s checkpointing.checkpoint_dir"):
        ck.list_checkpoints(tmp_path / "nope")
    with pytest.raises(NotFoundError, match=r"(?s)no model weights.*fix: pass a complete step_N"):
        ck.detect_layout(d / "step_1")



def test_best_of_an_experiment_ranks_by_its_own_checkpointing_settings(tmp_path, monkeypatch):
    """``best(cfg)``: the experiment's checkpoint dir, metric and direction, as its trainer kept its top-k."""
    import nbtools

    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    local = Path(__file__).resolve().parents[2] / "experiments" / "local.yaml"
    cfg = nbtools.config.load(local, overrides={"checkpointing.metric_name": "val:avg_length",
                                                "checkpointing.higher_is_better": False})
    d = Path(cfg.checkpoints_url)
    for s, (loss, acc) in {1: (0.9, 0.8), 2: (0.3, 0.1), 3: (0.5, 0.6)}.items():
        (d / f"step_{s}" / "policy/weights/model").mkdir(parents=True)
        (d / f"step_{s}" / "training_info.json").write_text(json.dumps({"val:avg_length": loss, "val:accuracy": acc}))
    assert ck.best(cfg).name == "step_2"  # the shortest: the experiment's metric and direction
    assert ck.best(d).name == "step_1"  # a bare dir keeps the defaults (val:accuracy, higher is better)
    assert ck.best(cfg, metric="val:accuracy", higher_is_better=True).name == "step_1"  # explicit wins
    assert ck.best(cfg, metric=None).name == "step_3"  # the latest, as NeMo-RL's metric_name: null

def test_merge_in_cluster_asks_the_backend_it_is_handed(tmp_path, monkeypatch):
    """The checkpoints package imports no backends: the merge job goes where the backend it is handed (else
    ``cfg.runs_on()``) says, with that backend's interpreter and job env."""
    import nbtools
    from nbtools.checkpoints import _remote

    class Sent(Exception):
        pass

    def sent(address, step_dir, out_dir, **kw):
        raise Sent(address, step_dir, out_dir, kw["python"], kw["env_vars"])

    monkeypatch.setattr(_remote, "submit_merge", sent)
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    cfg = nbtools.config.load(Path(__file__).resolve().parents[2] / "experiments" / "local.yaml")

    class Head:
        dashboard_url, python = "http://head.example:8265", "/opt/venv/bin/python"

        def job_env(self):
            return {"HF_HOME": "/data/hf"}

    with pytest.raises(Sent) as e:
        ck.merge_in_cluster(cfg, "/data/ckpt/step_3", out="/data/out", backend=Head())
    assert e.value.args == ("http://head.example:8265", "/data/ckpt/step_3", "/data/out", "/opt/venv/bin/python",
                            {"HF_HOME": "/data/hf"})
    with pytest.raises(Sent) as e:
        ck.merge_in_cluster(cfg, "/data/ckpt/step_3", out="/data/out")
    assert e.value.args[0] == cfg.dashboard_url == nbtools.backends.get(cfg).dashboard_url


@pytest.mark.ray
def test_merge_in_cluster_runs_as_a_ray_job_carrying_nbtools(ckpts, tmp_path, ray_head, ray_cfg, monkeypatch):
    """The same merge as a job on a REAL local Ray head, shipped with runtime_env py_modules (what GKE runs)."""
    import nbtools
    from nbtools.jobs.carry import package_dir

    root, models = ckpts
    step = root / "v2st-fsdp4-tied" / "step_1"
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    cfg = ray_cfg(nbtools.config.load(Path(__file__).resolve().parents[2] / "experiments" / "local.yaml",
                                      overrides={"checkpointing.checkpoint_dir": str(root / "v2st-fsdp4-tied")}))
    merged = ck.merge_in_cluster(cfg, str(step), out=str(tmp_path / "merged_hf"), progress=False)
    assert merged.verified and merged.tensors > 0 and merged.url == str(tmp_path / "merged_hf")
    assert ck.verify_against(Path(merged.url), models[True], input_ids=IDS).ok
    job_id = merged.notes[-1].removeprefix("merged by Ray job ")
    assert job_id.startswith(f"{cfg.name}-merge-step-1-")
    info = nbtools.jobs.attach(ray_head.dashboard_url, job_id).info()
    assert info.runtime_env["py_modules"] and info.runtime_env["py_modules"][0].startswith("gcs://_ray_pkg_")
    assert str(package_dir()) not in info.entrypoint  # nbtools travels as a package, not by a path on this machine
    again = ck.merge_in_cluster(cfg, str(step), out=str(tmp_path / "merged_hf"), progress=False)
    assert again.notes[-1] == merged.notes[-1]  # the re-run re-attaches to the same job
