"""The ``ray`` backend in notebook 01 (issue 40 item 5): nothing is provisioned, and the plan shown is the one the same
experiment would need on GKE, never applied, so 01's check cell (every gcloud flag of that plan exists) holds there
as on the local backend."""

from __future__ import annotations

from pathlib import Path

import pytest

import nbtools

ROOT = Path(__file__).resolve().parents[2]


def test_notebook_01s_check_holds_on_the_ray_backend(tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path))
    cfg = nbtools.config.load(ROOT / "experiments" / "tutorial-003-qwen3-1.7b-deepscaler.yaml", backend="ray")
    plan = nbtools.backends.get(cfg).provision_plan()
    flags = nbtools.gke.validate(plan)
    assert flags.ok.all() and len(flags) > 50, flags[~flags.ok]
    assert not plan.applicable and "already exists" in plan.note
    script = plan.write_script(cfg.run_dir / "gke" / "provision.sh")
    assert script.exists() and all(s.check for s in plan.steps if s.name != "credentials")


def test_wipe_on_the_ray_backend_deletes_the_runs_results_where_the_cluster_keeps_them(tmp_path, monkeypatch):
    """Notebook 09 on ``BACKEND="ray"``: a confirmed wipe deletes the checkpoints and logs (NeMo-RL would resume from
    them) through the run's storage (here ``storage.url``, a directory this machine reads; without one, through the
    cluster: tests/integration/test_ray_hidden_storage.py), not "kept: nbtools cannot reach the cluster's disks"."""
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    cfg = nbtools.config.load(ROOT / "experiments" / "tutorial-003-qwen3-1.7b-deepscaler.yaml", backend="ray",
                              overrides={"storage.url": str(tmp_path / "ws")})
    be = nbtools.backends.get(cfg)
    step = tmp_path / "ws" / "checkpoints" / cfg.name / "step_10"
    step.mkdir(parents=True)
    (tmp_path / "ws" / "keep.txt").write_text("not this run's")
    assert not be.wipe(confirm="").stopped and step.is_dir()
    done = be.wipe(confirm=cfg.name)
    assert list(done.actions["action"]) == ["removed", "absent"] and done.stopped, done.actions
    assert not step.parent.exists() and (tmp_path / "ws" / "keep.txt").is_file()
    assert list(be.wipe(confirm=cfg.name).actions["action"]) == ["absent", "absent"]  # a second run is safe
    wrong = nbtools.config.load(ROOT / "experiments" / "tutorial-003-qwen3-1.7b-deepscaler.yaml", backend="ray",
                                overrides={"storage.url": str(tmp_path / "ws"), "logging.log_dir": "/nemo-workspace/logs"})
    with pytest.raises(nbtools.errors.ConflictError, match="refusing to wipe '/nemo-workspace/logs'"):
        nbtools.backends.get(wrong).wipe(confirm=wrong.name)
