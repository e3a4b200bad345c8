"""The ``ray`` backend in notebook 01 (issue 40 item 5): nothing is provisioned, and the plan shown is the one the same
experiment would need on GKE, never applied, so 01's check cell (every gcloud flag of that plan exists) holds there
as on the local backend."""

from __future__ import annotations

from pathlib import Path

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
