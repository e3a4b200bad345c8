"""Issue 42 item 5: what the tutorials script from a terminal. ``nbtools checkpoints`` and ``nbtools merge`` take
storage URLs (``gs://…``, here on the GCS emulator the tests use); ``nbtools prepare`` agrees with the notebook's
``prepare()`` for a trainer that needs no preparation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BUCKET = "parity-bucket"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cli(capfd, monkeypatch, tmp_path):
    from nbtools import cli as nbcli

    monkeypatch.delenv("NBTOOLS_DEBUG", raising=False)
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))

    def go(*argv):
        capfd.readouterr()
        code = nbcli.main([str(x) for x in argv])
        out, err = capfd.readouterr()
        return code, out, err

    return go


def test_prepare_of_a_local_verl_rehearsal_says_nothing_is_needed_and_exits_0(cli):
    """``nbtools prepare experiments/local-verl.yaml`` exited 1 (no verl script for max3) where notebook 03's
    ``nbtools.launch.prepare(cfg)`` says the rehearsal needs no preparation job."""
    import nbtools

    path = ROOT / "experiments" / "local-verl.yaml"
    code, out, err = cli("prepare", path, "--json")
    assert code == 0, out + err
    doc = json.loads(out)
    assert doc["jobs"] == [] and "needs no preparation job" in doc["note"]
    note = nbtools.launch.prepare(nbtools.config.load(path)).note
    assert "needs no preparation job" in note  # the notebook says the same


@pytest.fixture
def bucket_run(rehearsal_run, gcs, storage_cache):
    """The shared rehearsal's checkpoints copied into the emulator's bucket, as a GKE run leaves them."""
    src = rehearsal_run.run_dir / "checkpoints"
    gcs.fs.put(str(src), f"{BUCKET}/run/checkpoints", recursive=True)
    return f"gs://{BUCKET}/run/checkpoints", src


def test_checkpoints_and_merge_take_a_bucket_url(cli, bucket_run, tmp_path):
    url, local = bucket_run
    code, out, err = cli("checkpoints", url, "--json")
    assert code == 0, out + err
    doc = json.loads(out)
    assert [c["step"] for c in doc["checkpoints"]] == [1, 2] and doc["checkpoint_dir"] == url
    code, out, err = cli("merge", f"{url}/step_2", tmp_path / "merged", "--json")
    assert code == 0, out + err
    merged = json.loads(out)
    assert merged["verified"] and merged["tensors"] > 0 and merged["step"] == f"{url}/step_2"
    assert "copying gs://" in err  # said before the copy, not a silent download
    # the same weights as a merge of the step on disk
    code, out, _ = cli("merge", local / "step_2", tmp_path / "merged-local", "--json")
    same = json.loads(out)
    a = json.loads((Path(merged["out"]) / "checksums.json").read_text())["files"]
    b = json.loads((Path(same["out"]) / "checksums.json").read_text())["files"]
    assert {k: v for k, v in a.items() if k.endswith(".safetensors")} == {k: v for k, v in b.items() if k.endswith(".safetensors")}


def test_merge_refuses_a_bucket_out_dir_and_a_missing_step(cli, gcs, storage_cache, tmp_path):
    code, out, err = cli("merge", tmp_path, f"gs://{BUCKET}/out")
    assert code == 1 and "a merge on this machine writes a local directory" in err and "--in-cluster" in err
    code, out, err = cli("merge", f"gs://{BUCKET}/nothing/step_9", tmp_path / "out")
    assert code == 1 and "STEP_DIR gs://parity-bucket/nothing/step_9: no such file or directory" in err
