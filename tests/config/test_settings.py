"""The notebooks' shared settings (issue 45): BACKEND and CONFIG chosen once — ``settings.yaml`` beside the notebooks
or ``NBTOOLS_BACKEND`` / ``NBTOOLS_EXPERIMENT`` — and a notebook's own non-empty value overriding them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import nbtools
from nbtools.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def nbdir(tmp_path, monkeypatch):
    """A notebooks dir with two experiments beside it, as the kernel's working directory."""
    monkeypatch.delenv("NBTOOLS_BACKEND", raising=False)
    monkeypatch.delenv("NBTOOLS_EXPERIMENT", raising=False)
    (tmp_path / "experiments").mkdir()
    for name in ("local.yaml", "gke-b200-gemma3-1b.yaml"):
        shutil.copy(ROOT / "experiments" / name, tmp_path / "experiments" / name)
    d = tmp_path / "notebooks"
    d.mkdir()
    monkeypatch.chdir(d)
    return d


def test_the_committed_settings_file_is_what_the_notebooks_ran_with_before():
    s = nbtools.config.settings(ROOT / "notebooks")
    assert (s.backend, Path(s.experiment)) == ("local", ROOT / "experiments" / "local.yaml")
    assert s.source == {"backend": str(ROOT / "notebooks" / "settings.yaml"),
                        "experiment": str(ROOT / "notebooks" / "settings.yaml")}


def test_settings_file_once_then_every_empty_cell_follows_it(nbdir):
    (nbdir / "settings.yaml").write_text("backend: gke\nexperiment: ../experiments/gke-b200-gemma3-1b.yaml\n")
    cfg = nbtools.config.load("", backend="")  # what a notebook's first cell leaves: BACKEND = "", CONFIG = ""
    assert cfg.backend == "gke" and cfg.source == str((nbdir.parent / "experiments" / "gke-b200-gemma3-1b.yaml").resolve())
    # the cell overrides (papermill -p BACKEND local does the same)
    assert nbtools.config.load("", backend="local").backend == "local"
    assert nbtools.config.load("../experiments/local.yaml", backend="local").name == "local-rehearsal"


def test_environment_overrides_the_file_key_by_key(nbdir, monkeypatch):
    (nbdir / "settings.yaml").write_text("backend: local\nexperiment: ../experiments/local.yaml\n")
    monkeypatch.setenv("NBTOOLS_EXPERIMENT", str(nbdir.parent / "experiments" / "gke-b200-gemma3-1b.yaml"))
    s = nbtools.config.settings()
    assert s.backend == "local" and s.experiment.endswith("gke-b200-gemma3-1b.yaml")
    assert s.source["experiment"] == "$NBTOOLS_EXPERIMENT"
    monkeypatch.setenv("NBTOOLS_BACKEND", "gke")
    assert nbtools.config.load("", backend="").backend == "gke"


def test_without_a_backend_anywhere_the_experiment_files_own_backend_counts(nbdir):
    (nbdir / "settings.yaml").write_text("experiment: ../experiments/gke-b200-gemma3-1b.yaml\n")
    assert nbtools.config.settings().backend is None
    assert nbtools.config.load("", backend="").backend == "gke"


def test_a_misspelt_key_is_refused_with_the_keys_allowed(nbdir):
    (nbdir / "settings.yaml").write_text("backnd: gke\n")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['backnd'\]; allowed: \['backend', 'experiment'\]"):
        nbtools.config.load("", backend="")
