"""nbtools.tensorboard: a real TensorBoard server on a local log_dir and on gs:// (tests/doubles/gcs_emulator.py, the
fake-gcs-server GCS stand-in), started, re-attached and stopped by pid."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
from gcs_emulator import GcsEmulator

import nbtools

ROOT = Path(__file__).resolve().parent.parent


def _events(d: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(d / "exp_001" / "tensorboard"))
    for i in range(5):
        w.add_scalar("train/reward", i / 10, i)
    w.close()


def _tags(url: str, timeout: float = 60) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        tags = json.loads(urllib.request.urlopen(url + "/data/plugin/scalars/tags", timeout=10).read())
        if tags:
            return tags
        time.sleep(0.5)
    return {}


@pytest.fixture
def local_cfg(tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    return nbtools.config.load(ROOT / "experiments" / "local.yaml")


def test_serves_the_local_run_reattaches_and_stops_by_pid(local_cfg):
    _events(Path(local_cfg.log_dir))
    tb = nbtools.tensorboard.start(local_cfg)
    try:
        assert "train/reward" in _tags(tb.url)["exp_001/tensorboard"]
        again = nbtools.tensorboard.start(local_cfg)
        assert again.reattached and again.pid == tb.pid and again.url == tb.url
    finally:
        assert nbtools.tensorboard.stop(local_cfg)
    assert not tb.alive() and not nbtools.tensorboard.stop(local_cfg)


def test_a_port_taken_between_the_check_and_the_bind_falls_back_to_one_tensorboard_picks(local_cfg):
    """The port is bound but not listening, so nothing answers on it and `start` chooses it; TensorBoard's bind then
    fails ("could not bind to port"), as when a second start takes it first. The old code raised NotReadyError."""
    import socket

    from ports import free_port

    _events(Path(local_cfg.log_dir))
    port = free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        tb = nbtools.tensorboard.start(local_cfg, port=port)
        try:
            assert tb.port != port and "train/reward" in _tags(tb.url)["exp_001/tensorboard"]
        finally:
            assert nbtools.tensorboard.stop(local_cfg)


def test_serves_a_gke_run_from_its_bucket(tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("NBTOOLS_CACHE_DIR", str(tmp_path / "cache"))
    cfg = nbtools.config.load(ROOT / "experiments" / "gke-b200-gemma3-1b.yaml", backend="gke",
                              overrides={"storage.bucket": "sim-bucket"})
    _events(tmp_path / "logs")
    with GcsEmulator() as gcs:
        gcs.create_bucket("sim-bucket")
        logs = nbtools.tensorboard.logdir_of(cfg)
        assert logs == "gs://sim-bucket/" + cfg.log_dir.removeprefix("/data/")
        gcs.fs.put(str(tmp_path / "logs" / "exp_001"), logs.removeprefix("gs://") + "/exp_001", recursive=True)
        tb = nbtools.tensorboard.start(cfg)
        try:
            assert tb.logdir == logs and "train/reward" in _tags(tb.url)["exp_001/tensorboard"]
        finally:
            nbtools.tensorboard.stop(cfg)
