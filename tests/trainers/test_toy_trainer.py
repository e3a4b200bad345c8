"""Adding a trainer touches one folder: ``tests/trainers/toy_trainer/`` registered through the public hook is linted,
launched on the local backend (the job's own command, run here) and read back by the readers, which ask its layout."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

import nbtools
from nbtools import _trainer_folders, checkpoints, metrics, trainers

ROOT = Path(__file__).resolve().parents[2]
SLOW_FIXTURES = ("toy_run",)  # one real rehearsal run (tests/conftest.py marks the tests that read it slow)
TINY = {"grpo": {"num_prompts_per_step": 4, "num_generations_per_prompt": 4, "max_num_steps": 2, "val_period": 2,
                 "max_val_samples": 8}, "checkpointing": {"save_period": 1, "keep_top_k": 2},
        "rehearsal": {"num_train": 64, "num_test": 16, "warmup_steps": 1}}


@pytest.fixture
def toy(monkeypatch):
    """The toy registered for this test (and the jobs it starts), unregistered after."""
    monkeypatch.delenv(_trainer_folders.ENV, raising=False)
    monkeypatch.setattr(_trainer_folders, "TRAINERS", dict(_trainer_folders.TRAINERS))
    trainers.register("toy", "tests.trainers.toy_trainer")
    yield
    os.environ.pop(_trainer_folders.ENV, None)


def _cfg(tmp_path: Path, monkeypatch) -> nbtools.config.Experiment:
    data = yaml.safe_load((ROOT / "experiments" / "local.yaml").read_text())
    data["name"] = "toy-run"
    data.setdefault("trainer", {})["kind"] = "toy"
    for section, values in TINY.items():
        data.setdefault(section, {}).update(values)
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(data))
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    return nbtools.config.load(path)


def test_the_registry_hook_adds_a_trainer_from_one_folder(toy, tmp_path, monkeypatch):
    assert "toy" in trainers.names() and os.environ[_trainer_folders.ENV] == "toy=tests.trainers.toy_trainer"
    cfg = _cfg(tmp_path, monkeypatch)  # trainer.kind: toy passes config.load's registry rules
    assert trainers.get(cfg).layout == "toy" and trainers.get(cfg).name == "rehearsal"  # the local backend rehearses it
    assert trainers.METRIC_NAMES["toy"]["toy_signal"] == ("train/reward",)
    assert trainers.CITATIONS["Toy"][0] == "Toy" and trainers.CONSOLE_LOG_FAMILY == "verl"
    report = nbtools.launch.lint(cfg)
    assert report.ok, report.blocking
    own = trainers.LintReport()
    trainers.trainer_class("toy")(cfg).lint(own)
    assert own.findings[0].rule == "toy-lint"


def test_an_unregistered_kind_is_refused_with_the_registered_ones(tmp_path, monkeypatch):
    monkeypatch.delenv(_trainer_folders.ENV, raising=False)
    with pytest.raises(nbtools.errors.ConfigError, match="trainer.kind: 'toy' is not allowed; allowed: 'nemo-rl', 'verl'"):
        _cfg(tmp_path, monkeypatch)


@pytest.fixture
def toy_run(toy, tmp_path, monkeypatch):
    cfg = _cfg(tmp_path, monkeypatch)
    spec = nbtools.launch.build(cfg)
    proc = subprocess.run(shlex.split(spec.entrypoint), cwd=ROOT, capture_output=True, text=True, timeout=400,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return cfg


def test_a_local_launch_writes_through_the_toys_layout_and_the_readers_ask_it(toy_run):
    cfg = toy_run
    listed = checkpoints.list_checkpoints(cfg.checkpoint_dir)
    assert listed.attrs["read_by"] == "toy" and listed["step"].tolist() == [1, 2]  # the toy's layout claimed the dir
    assert checkpoints.latest(cfg.checkpoint_dir).name == "step_2"
    df = metrics.read_tensorboard(cfg.log_dir)
    signal = metrics.select(df, "toy_signal", framework="toy")
    assert len(signal) == 2 and set(signal["tag"]) == {"train/reward"}  # a friendly name only the toy's layout has
