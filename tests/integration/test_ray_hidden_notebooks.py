"""Notebooks 01–06 on ``BACKEND="ray"`` against a Ray cluster whose run storage this machine cannot see (issue 40
item 5; the cluster and why it proves the reads go through it: test_ray_hidden_storage.py's docstring). The
NeMo-RL stand-ins of the sim's image (sim_nemo_rl/) are what the notebooks' jobs run."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_files import write_ray_experiment

pytestmark = pytest.mark.ray

STEPS = 8
SIM_GKE = {"mirror": False, "provisioned": False, "steps": STEPS,
           "changes": {"grpo.val_period": STEPS // 2, "checkpointing.save_period": STEPS // 2}}
NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("0[1-6]_*.ipynb"))


@pytest.fixture(scope="module")
def in_order(sim_gke, tmp_path_factory, notebooks_in_order):
    """Notebooks 01–06 with ``BACKEND="ray"`` and the hidden-storage experiment, each once, in their order."""
    out = tmp_path_factory.mktemp("executed-ray")
    path = write_ray_experiment(sim_gke, tmp_path_factory.mktemp("ray-exp") / "ray-hidden.yaml")

    def execute(notebook: Path) -> None:
        import papermill as pm

        from nbtools.demo import kernel_config

        with sim_gke.activated():
            pm.execute_notebook(str(notebook), str(out / notebook.name), parameters={"BACKEND": "ray", "CONFIG": str(path)},
                                cwd=str(notebook.parent), kernel_name="python3", progress_bar=False,
                                execution_timeout=1500, config=kernel_config())

    return notebooks_in_order(NOTEBOOKS, execute)


@pytest.mark.slow  # six notebooks and a short NeMo-RL stand-in run on the sim's Ray head
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_on_a_ray_cluster_whose_storage_this_machine_cannot_see(notebook, in_order, sim_gke):
    in_order.through(notebook)
    assert not any(sim_gke.data_dir.iterdir()), "the notebooks' machine must not see the run's files"
