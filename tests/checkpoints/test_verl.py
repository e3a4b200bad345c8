"""verl FSDP checkpoints (``global_step_N/actor``) listed, chosen and merged like NeMo-RL's.

The checkpoints are written by real torch code the way verl v0.7.0 writes them (tests/support/verl_checkpoint_writer.py:
2 gloo CPU ranks, FSDP2 ``fully_shard``, per-rank ``torch.save(model.state_dict())`` of DTensors). The merge must
equal the weights the ranks trained (gathered with torch) exactly, and, cast to bfloat16, verl's own
``model_merger`` output tensor for tensor (checksums in tests/assets/verl/v0.7.0, see its SOURCE.md).
"""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from verl_checkpoint_writer import exact_state_dict, full_state_dicts, tiny_config, write_verl_run  # noqa: E402

from nbtools import checkpoints as ck  # noqa: E402
from nbtools.errors import CheckpointError, ConflictError  # noqa: E402
from nbtools.trainers import verl  # noqa: E402

ASSETS = Path(__file__).parents[1] / "assets" / "verl" / "v0.7.0"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("verl")
    cfg = tiny_config()
    torch.manual_seed(0)
    from transformers import AutoModelForCausalLM

    write_verl_run(base / "trained", cfg, AutoModelForCausalLM.from_config(cfg).state_dict(), [1, 2])
    write_verl_run(base / "exact", cfg, exact_state_dict(cfg), [3], train=False)
    tied = tiny_config(tied=True)
    write_verl_run(base / "tied", tied, AutoModelForCausalLM.from_config(tied).state_dict(), [5])
    write_verl_run(base / "placed", cfg, AutoModelForCausalLM.from_config(cfg).state_dict(), [4], train=False,
                   verl_placement=True)
    write_verl_run(base / "buffer", cfg, AutoModelForCausalLM.from_config(cfg).state_dict(), [6], train=False,
                   buffer=True)
    return base


def _copy(runs: Path, tmp_path: Path, name: str = "trained") -> Path:
    shutil.copytree(runs / name, tmp_path / name)
    return tmp_path / name


def _load(out: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {k: v for f in sorted(out.glob("*.safetensors")) for k, v in load_file(f).items()}


def test_listing_latest_and_layout(runs):
    d = runs / "trained"
    df = ck.list_checkpoints(d)
    assert df["step"].tolist() == [1, 2] and set(df["layout"]) == {"verl_fsdp"}
    assert df["problem"].isna().all() and df["world_size"].tolist() == [2, 2] and df["latest"].tolist() == [False, True]
    assert ck.latest(d) == d / "global_step_2"
    assert ck.detect_layout(d / "global_step_1") == "verl_fsdp" == ck.detect_layout(d / "global_step_1" / "actor")


def test_tracker_decides_what_is_finished(runs, tmp_path):
    d = _copy(runs, tmp_path)
    (d / "latest_checkpointed_iteration.txt").write_text("1")  # verl died while saving step 2
    df = ck.list_checkpoints(d)
    assert df.loc[df.step == 2, "problem"].item().startswith("newer than latest_checkpointed_iteration.txt")
    assert ck.latest(d) == d / "global_step_1"
    with pytest.raises(CheckpointError, match="still writing"):
        ck.merge(d / "global_step_2", tmp_path / "out", progress=False)
    (d / "global_step_1" / "actor" / "model_world_size_2_rank_1.pt").unlink()
    df = ck.list_checkpoints(d)
    assert "rank files missing (model_world_size_2_rank_1.pt)" in df.loc[df.step == 1, "problem"].item()
    with pytest.raises(Exception, match="no complete verl checkpoint"):
        ck.latest(d)


def test_a_huge_world_size_is_counted_not_listed(runs, tmp_path):
    """#41: ``fsdp_config.json`` ``world_size: 1e9`` made the listing build every missing rank name (59 s, then
    MemoryError)."""
    import time

    d = _copy(runs, tmp_path)
    cfg = d / "global_step_2" / "actor" / "fsdp_config.json"
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "world_size": 10**9}))
    t0 = time.perf_counter()
    df = ck.list_checkpoints(d)
    assert time.perf_counter() - t0 < 5
    problem = df.loc[df.step == 2, "problem"].item()
    assert problem.startswith(f"{10**9} of {10**9} rank files missing (model_world_size_1000000000_rank_0.pt"), problem


def test_best_needs_metrics(runs):
    d = runs / "trained"
    with pytest.warns(UserWarning, match="verl keeps no metrics"):
        assert ck.best(d, metric="val:accuracy") == d / "global_step_2"
    tag = "val-core/openai/gsm8k/acc/mean@1"
    m = pd.DataFrame({"run": "r", "tag": [tag, tag, "x"], "step": [1, 2, 1], "value": [0.7, 0.6, 9.0],
                      "wall_time": 0.0})
    assert verl.best_verl(d, tag, metrics=m) == d / "global_step_1"
    assert verl.best_verl(d, tag, metrics=m, higher_is_better=False) == d / "global_step_2"
    with pytest.raises(CheckpointError, match="needs a metrics frame"):
        verl.best_verl(d, tag)


def test_merge_equals_trained_weights(runs, tmp_path):
    d = runs / "trained"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DeviceMesh unpickling note from torch
        truth = full_state_dicts(d, 2)
    r = ck.merge(d / "global_step_2", tmp_path / "hf", progress=False)
    assert r.layout == "verl_fsdp" and r.verified and r.tensors == len(truth)
    got = _load(r.out)
    assert set(got) == set(truth)
    for k, v in truth.items():
        assert got[k].dtype == torch.float32 and torch.equal(got[k], v), k
    assert ck.verify(r.out).ok
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(r.out))
    assert torch.equal(model.state_dict()["lm_head.weight"], truth["lm_head.weight"])
    assert AutoTokenizer.from_pretrained(str(r.out)).convert_tokens_to_ids("w7") == 7
    # the same source again: reused; another step into it: refused
    assert ck.merge(d / "global_step_2", r.out, progress=False).reused
    with pytest.raises(ConflictError, match="overwrite"):
        ck.merge(d / "global_step_1", r.out, progress=False)
    with pytest.raises(ConflictError, match="inside the checkpoint"):
        ck.merge(d / "global_step_1", d / "global_step_1" / "hf", progress=False)


def test_merge_equals_verls_model_merger(runs, tmp_path):
    """verl's FSDPModelMerger casts to bfloat16; ours keeps float32 and must agree after that cast, bit for bit."""
    expected = json.loads((ASSETS / "model_merger_fsdp_sha256.json").read_text())
    r = ck.merge(runs / "exact" / "global_step_3" / "actor", tmp_path / "hf", progress=False)
    got = _load(r.out)
    assert set(got) == set(expected)
    for k, e in expected.items():
        b = got[k].to(torch.bfloat16).contiguous()
        assert [list(b.shape), "bfloat16"] == [e["shape"], e["dtype"]], k
        assert hashlib.sha256(b.view(-1).view(torch.uint8).numpy().tobytes()).hexdigest() == e["sha256"], k


def test_shards_on_the_dim_verls_placement_chose(runs, tmp_path):
    """verl's workers shard each parameter on its first dim the FSDP size divides: the 103-row embedding and lm_head
    of 2 ranks are Shard(1). Before, the merge refused them ("sharded on dim 1; this merge streams dim-0 shards"), so
    verl's own checkpoints of a vocabulary the GPU count does not divide could not be merged
    (tests/oracle/test_verl_checkpoint_oracle.py runs it on checkpoints verl wrote)."""
    d = runs / "placed"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shard = torch.load(d / "global_step_4" / "actor" / "model_world_size_2_rank_0.pt", weights_only=False)
        truth = full_state_dicts(d, 4)
    assert shard["model.embed_tokens.weight"].placements[0].dim == 1 == shard["lm_head.weight"].placements[0].dim
    r = ck.merge(d / "global_step_4", tmp_path / "hf", progress=False)
    got = _load(r.out)
    assert r.verified and set(got) == set(truth)
    for k, v in truth.items():
        assert torch.equal(got[k], v), k


def test_a_plain_tensor_is_kept_once(runs, tmp_path):
    """A tensor FSDP did not shard (a persistent buffer) is whole on every rank: kept once, as verl 0.9's merger does
    (fsdp_model_merger.py merge_non_dtensor_shards), not concatenated into one twice its size (v0.7.0's merger); a
    copy that differs between ranks is refused."""
    from nbtools.trainers.verl._checkpoints import read_verl_sources

    actor = runs / "buffer" / "global_step_6" / "actor"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shard = torch.load(actor / "model_world_size_2_rank_1.pt", weights_only=False)
    assert not hasattr(shard["model.probe"], "placements")
    src = read_verl_sources(actor)["model.probe"]
    assert src.shape == (6,) and len(src.chunks) == 1 and src.chunks[0].path.name.endswith("rank_0.pt")
    d = _copy(runs, tmp_path, "buffer") / "global_step_6" / "actor"
    rank1 = d / "model_world_size_2_rank_1.pt"
    sd = torch.load(rank1, weights_only=False)
    sd["model.probe"] = sd["model.probe"] + 1
    torch.save(sd, rank1)
    with pytest.raises(CheckpointError, match="model.probe differs between rank 0 and rank 1"):
        read_verl_sources(d)


def test_tied_embeddings(runs, tmp_path):
    """Qwen2.5's small models tie lm_head to the embeddings: FSDP2 saves both keys; HF loads the merge re-tied."""
    from transformers import AutoModelForCausalLM

    d = runs / "tied"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        truth = full_state_dicts(d, 5)
    r = ck.merge(d / "global_step_5", tmp_path / "hf", progress=False)
    assert "lm_head.weight" not in _load(r.out) and any("tied" in n for n in r.notes)
    sd = AutoModelForCausalLM.from_pretrained(str(r.out)).state_dict()
    assert all(torch.equal(sd[k], v) for k, v in truth.items())


def test_damaged_rank_files(runs, tmp_path):
    d = _copy(runs, tmp_path)
    actor = d / "global_step_2" / "actor"
    rank1 = actor / "model_world_size_2_rank_1.pt"
    data = rank1.read_bytes()
    rank1.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="model_world_size_2_rank_1.pt") as e:
        ck.merge(d / "global_step_2", tmp_path / "out", progress=False)
    assert "re-copy" in e.value.fix and not (tmp_path / "out").exists()
    rank1.unlink()
    with pytest.raises(CheckpointError, match="missing"):
        ck.merge(d / "global_step_2", tmp_path / "out", progress=False)


def _data_entries(path: Path) -> list:
    import zipfile

    return [i for i in zipfile.ZipFile(path).infolist() if "/data/" in i.filename and i.file_size > 64]


def test_a_bit_flip_inside_a_tensor_is_not_verified(runs, tmp_path):
    """#41: the merge read raw byte spans, so a bit flip inside a rank file's tensor merged as ``verified: true``;
    every entry's bytes are now checked against the CRC-32 torch.save wrote in the zip directory."""
    from nbtools.trainers.verl._checkpoints import _zip_member_start

    d = _copy(runs, tmp_path)
    rank1 = d / "global_step_2" / "actor" / "model_world_size_2_rank_1.pt"
    info = _data_entries(rank1)[0]
    with open(rank1, "r+b") as fh:
        at = _zip_member_start(fh, info) + info.file_size // 2
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0x04]))  # one bit of one float: still a finite number
    with pytest.raises(CheckpointError, match=r"model_world_size_2_rank_1.pt: the bytes of .*/data/\d+ do not match "
                                              r"the CRC-32 torch.save recorded") as e:
        ck.merge(d / "global_step_2", tmp_path / "out", progress=False)
    assert "re-copy" in e.value.fix and not (tmp_path / "out").exists()


def test_one_rank_copied_over_another_is_not_verified(runs, tmp_path):
    d = _copy(runs, tmp_path)
    actor = d / "global_step_2" / "actor"
    shutil.copyfile(actor / "model_world_size_2_rank_0.pt", actor / "model_world_size_2_rank_1.pt")
    with pytest.raises(CheckpointError, match="rank_1.pt holds exactly the bytes of model_world_size_2_rank_0.pt"):
        ck.merge(d / "global_step_2", tmp_path / "out", progress=False)
    r = ck.merge(runs / "trained" / "global_step_2", tmp_path / "good", progress=False)
    assert r.verified and any(n.startswith("zip CRC-32 of every entry of the 2 rank files checked") for n in r.notes)


class _Evil:
    def __reduce__(self):
        return (Path.touch, (_Evil.marker,))


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])  # 2: torch.save's default
def test_crafted_pickle_is_not_run(runs, tmp_path, protocol):
    """A crafted rank file is refused by name before anything is called, whichever protocol pickled it."""
    d = _copy(runs, tmp_path)
    _Evil.marker = tmp_path / "pwned"
    rank0 = d / "global_step_2" / "actor" / "model_world_size_2_rank_0.pt"
    torch.save({"model.embed_tokens.weight": _Evil()}, rank0, pickle_protocol=protocol)
    refusal = r"asks to import (pathlib\.Path|builtins\.getattr)"  # protocol 2: getattr(Path, "touch")
    with pytest.raises(CheckpointError, match=refusal) as e:
        ck.merge(d / "global_step_2", tmp_path / "out", progress=False)
    assert "do not use this checkpoint" in e.value.fix and not _Evil.marker.exists()
    from nbtools.trainers.verl._checkpoints import read_verl_sources

    with pytest.raises(CheckpointError, match=refusal):
        read_verl_sources(d / "global_step_2")
    assert not _Evil.marker.exists()


def test_cli_lists_and_merges(runs, tmp_path, capfd):
    from nbtools.cli import main

    assert main(["checkpoints", str(runs / "trained"), "--json"]) == 0
    rows = json.loads(capfd.readouterr().out)["checkpoints"]
    assert [(r["step"], r["latest"]) for r in rows] == [(1, False), (2, True)]
    assert main(["merge", str(runs / "trained" / "global_step_1"), str(tmp_path / "m"), "--json"]) == 0
    m = json.loads(capfd.readouterr().out)
    assert m["layout"] == "verl_fsdp" and m["verified"] is True


@pytest.mark.parametrize("config_as", ["dir", "config.json"])
def test_overwrite_never_deletes_the_base_model_given_as_config(runs, tmp_path, capfd, config_as):
    """#41 H1: ``merge global_step_N BASE --config BASE --overwrite`` replaced BASE, weights included."""
    from transformers import AutoModelForCausalLM

    from nbtools.cli import main

    base = tmp_path / "base"
    AutoModelForCausalLM.from_config(tiny_config()).save_pretrained(str(base))
    before = {p.name: p.read_bytes() for p in base.iterdir()}
    cfg = base if config_as == "dir" else base / "config.json"
    step = runs / "trained" / "global_step_2"
    rc = main(["merge", str(step), str(base), "--config", str(cfg), "--overwrite"])
    err = capfd.readouterr().err
    assert rc != 0 and "pick an output outside" in err
    assert f"the output directory {base} {'is' if config_as == 'dir' else 'contains'} {cfg}, which the merge" in err
    assert {p.name: p.read_bytes() for p in base.iterdir()} == before  # not a byte of the base model lost
    with pytest.raises(ConflictError, match="which the merge of .*global_step_2 reads"):
        verl.merge_verl(step / "actor", base, config=cfg, overwrite=True, progress=False)
    r = ck.merge(step, tmp_path / "hf", config=cfg, progress=False)  # reading the base model's config is fine
    assert r.verified and r.layout == "verl_fsdp"


def test_listing_in_a_bucket(runs, tmp_path, monkeypatch):
    """On GKE verl writes to the bucket behind /data: the listing reads only listings and the small files there."""
    from gcs_emulator import GcsEmulator

    monkeypatch.setenv("NBTOOLS_CACHE_DIR", str(tmp_path / "cache"))
    with GcsEmulator() as gcs:
        gcs.create_bucket("verl-bucket")
        gcs.fs.put(str(runs / "trained"), "verl-bucket/ckpt", recursive=True)
        gcs.fs.pipe("verl-bucket/ckpt/latest_checkpointed_iteration.txt", b"1")
        gcs.fs.rm("verl-bucket/ckpt/global_step_1/actor/huggingface", recursive=True)
        url = "gs://verl-bucket/ckpt"
        df = ck.list_checkpoints(url)
        assert df["step"].tolist() == [1, 2] and df["world_size"].tolist() == [2, 2]
        assert df["problem"][0].startswith("huggingface/config.json is missing")
        assert df["problem"][1].startswith("newer than latest_checkpointed_iteration.txt")
        gcs.fs.pipe("verl-bucket/ckpt/latest_checkpointed_iteration.txt", b"2")
        assert ck.latest(url) == f"{url}/global_step_2"
        chosen = ck.best(url, metric=None)  # notebook 06 shows the chosen step's name, as for NeMo-RL's step_N
        assert chosen == f"{url}/global_step_2" and chosen.name == "global_step_2"


def test_byte_spans_equal_torchs_own_reader(runs):
    """The rank files are read by our allow-list unpickler, kept over torch's (issue 43 item 4) because
    ``torch.load(map_location="meta", weights_only=True)`` (a pure-Python unpickler) took 7x its time in
    benchmarks/bench_ckpt_read.py; torch's reader is the referee: every chunk's file offset, size and the global
    shape must be what torch itself finds (each storage's ``_checkpoint_offset``)."""
    import torch.distributed.tensor  # noqa: F401 - registers the DTensor classes as weights-only globals

    from nbtools.trainers.verl._checkpoints import read_verl_sources

    actor = runs / "trained" / "global_step_2" / "actor"
    ours = read_verl_sources(actor)
    spans: dict[str, list] = {}
    for rank in range(2):
        path = actor / f"model_world_size_2_rank_{rank}.pt"
        for k, v in torch.load(path, map_location="meta", weights_only=True).items():
            local = v.to_local()
            assert ours[k].shape == tuple(v.shape) and ours[k].dtype == v.dtype, k
            if local.numel():
                start = local.untyped_storage()._checkpoint_offset + local.storage_offset() * v.dtype.itemsize
                spans.setdefault(k, []).append((path, start, local.numel() * v.dtype.itemsize, tuple(local.shape)))
    assert {k: [(c.path, c.start, c.nbytes, c.sizes) for c in st.chunks] for k, st in ours.items()} == spans


def test_the_verl_reader_lives_in_its_trainers_folder():
    """nbtools.checkpoints names no trainer: verl's weight layout comes from its layout, and the verbs that moved to
    nbtools.trainers.verl say where they went."""
    assert "verl_fsdp" in ck.LAYOUTS and "verl_fsdp" not in ck.NATIVE_LAYOUTS
    with pytest.raises(AttributeError, match=r"moved to nbtools\.trainers\.verl\.best_verl"):
        ck.best_verl  # noqa: B018
    assert callable(verl.merge_verl) and callable(verl.list_verl_checkpoints)
