"""Notebooks 01–09 executed on the local backend with a verl experiment (``experiments/local-verl.yaml``): the
rehearsal writes verl v0.7.0's layout (global_step_N, ``{step}.jsonl`` dumps, verl's scalar names) and every notebook
reads it through the same calls it makes on a NeMo-RL run; each final check cell must hold.

One rehearsal run serves all nine: the notebooks run in their order, once each, in one module, each with papermill in
its own kernel, the way a user runs them, against one runs dir, whatever order pytest runs the tests in (a test asks
for its notebook and every earlier one not yet run). The experiment is copied with its own free Ray ports (never the
8265/6379 another head on this machine may hold) and ``NBTOOLS_VERL_NOTEBOOK_STEPS`` GRPO steps (default 20: what the
notebooks read and check matters here, not how far the policy learns; 20 steps still give three validations and two
checkpoints, as 40 did, in half the training; the local pass (notebooks/ through nbmake) trains the demo's 200).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from ports import free_port

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("0[1-9]_*.ipynb"))
STEPS = int(os.environ.get("NBTOOLS_VERL_NOTEBOOK_STEPS", "20"))

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    """(the experiment file the notebooks load, the runs dir), with NBTOOLS_RUNS_DIR set for the module."""
    base = tmp_path_factory.mktemp("verl-local-notebooks")
    data = yaml.safe_load((ROOT / "experiments" / "local-verl.yaml").read_text())
    data["ray"] = {**data.get("ray", {}), "port": free_port(), "dashboard_port": free_port()}
    data["grpo"]["max_num_steps"] = STEPS
    period = max(1, min(data["grpo"]["val_period"], STEPS // 2))
    data["grpo"]["val_period"] = data["checkpointing"]["save_period"] = period
    path = base / "local-verl.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    runs = base / "runs"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NBTOOLS_RUNS_DIR", str(runs))
        yield path, runs
        import nbtools

        # 09 stops it; a failure before 09 must not leave the head behind. Inside the context: the runs dir decides
        # which head (outside it, the suite's own runs dir was asked, and the head outlived the test run)
        cfg = nbtools.config.load(path)
        nbtools.backends.get(cfg).down(timeout=60)
        assert nbtools.backends.get(cfg).status().state.name == "STOPPED"


@pytest.fixture(scope="module")
def in_order(experiment, notebooks_in_order):
    """The notebooks on this module's experiment, each run once in their order (conftest's NotebooksInOrder)."""
    path, runs = experiment

    def execute(notebook: Path) -> None:
        import papermill as pm

        from nbtools.demo import kernel_config

        out = runs / "executed" / notebook.name
        out.parent.mkdir(parents=True, exist_ok=True)
        pm.execute_notebook(str(notebook), str(out), parameters={"BACKEND": "local", "CONFIG": str(path)},
                            cwd=str(notebook.parent), kernel_name="python3", progress_bar=False,
                            execution_timeout=1500, config=kernel_config())

    return notebooks_in_order(NOTEBOOKS, execute)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_on_a_verl_experiment(notebook, in_order):
    in_order.through(notebook)
