"""Notebooks 01–09 on ``BACKEND="ray"`` against a Ray cluster whose run storage this machine cannot see (issue 40
item 5; the cluster and why it proves the reads go through it: test_ray_hidden_storage.py's docstring). The
NeMo-RL stand-ins of the sim's image (sim_nemo_rl/) are what the notebooks' jobs run: 07's evaluation jobs run where
the models are (the cluster) and their per-problem results are read back through it, 08 re-scores the dumps read
through it, and 09 runs with ``APPLY`` and ``CONFIRM`` (as on the simulated GKE), so its wipe deletes the run's
results on the cluster's disk through a job there. 03 runs with ``STOP`` (a smoke test's flag; a finished job is left
as it is), and no executed notebook holds the HF token the kernels' environment carries: the checks of notebook 03's
``ray`` branch that tests/launch/test_ray.py ran in a second execution of 03 of its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_files import write_ray_experiment
from sim_gke import FAKE_HF_TOKEN

import nbtools

pytestmark = pytest.mark.ray

STEPS = 8
SIM_GKE = {"mirror": False, "provisioned": False, "steps": STEPS,
           "changes": {"grpo.val_period": STEPS // 2, "checkpointing.save_period": STEPS // 2}}
NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("0[1-9]_*.ipynb"))


@pytest.fixture(scope="module")
def in_order(sim_gke, tmp_path_factory, notebooks_in_order):
    """Notebooks 01–09 with ``BACKEND="ray"`` and the hidden-storage experiment, each once, in their order."""
    out = tmp_path_factory.mktemp("executed-ray")
    path = write_ray_experiment(sim_gke, tmp_path_factory.mktemp("ray-exp") / "ray-hidden.yaml")

    def execute(notebook: Path) -> None:
        import papermill as pm

        from nbtools.demo import kernel_config

        params = {"BACKEND": "ray", "CONFIG": str(path)}
        if notebook.stem.startswith("03"):
            params["STOP"] = True
        if notebook.stem.startswith("09"):  # the teardown for real, as on the simulated GKE (the default is a dry run)
            params.update(APPLY=True, CONFIRM=in_order.cfg().name)
        with sim_gke.activated():
            pm.execute_notebook(str(notebook), str(out / notebook.name), parameters=params,
                                cwd=str(notebook.parent), kernel_name="python3", progress_bar=False,
                                execution_timeout=1500, config=kernel_config())

    in_order = notebooks_in_order(NOTEBOOKS, execute)
    in_order.cfg = lambda: nbtools.config.load(path, backend="ray")
    in_order.out = out
    return in_order


@pytest.mark.slow  # nine notebooks and a short NeMo-RL stand-in run on the sim's Ray head
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_on_a_ray_cluster_whose_storage_this_machine_cannot_see(notebook, in_order, sim_gke):
    in_order.through(notebook)
    assert not any(sim_gke.data_dir.iterdir()), "the notebooks' machine must not see the run's files"


@pytest.mark.slow
def test_07_evaluated_on_the_cluster_and_09_wiped_the_run_there(in_order, sim_gke):
    """07's results came from the cluster's evaluation jobs (their save paths are the cluster's, read through it), the
    card 07 updated is in the merged model's directory there, and after 09 the run's checkpoints and logs are gone
    from the cluster's disk."""
    import json

    in_order.through(NOTEBOOKS[-1])
    with sim_gke.activated():
        cfg = in_order.cfg()
        for label in ("baseline_greedy", "finetuned_greedy", "finetuned_sampled8"):
            params = json.loads((nbtools.evals.eval_dir(cfg) / label / "summary.json").read_text())["params"]
            assert params["save_path"].startswith(cfg.url(str(sim_gke.data_dir))) and params["save_path"].startswith("ray+http"), params
        assert nbtools.storage.info(nbtools.storage.join(cfg.url(nbtools.evals.finetuned_model_path(cfg)), "README.md"))
        assert nbtools.storage.info(cfg.checkpoints_url) is None and nbtools.storage.info(cfg.logs_url) is None


@pytest.mark.slow
def test_03_showed_the_exact_command_and_no_notebook_holds_the_token(in_order, sim_gke):
    """03's ``ray`` branch shows the exact trainer command, its job ended (SUCCEEDED, or STOPPED by ``STOP``), and
    the HF token the kernels had in their environment (the experiment's secret, sent to the job) is in no executed
    notebook (moved here from tests/launch/test_ray.py, which executed 03 a second time for it)."""
    in_order.through(NOTEBOOKS[-1])
    texts = {nb.stem: (in_order.out / nb.name).read_text() for nb in NOTEBOOKS}
    assert not [k for k, t in texts.items() if FAKE_HF_TOKEN in t]
    with sim_gke.activated():
        cfg = in_order.cfg()
        assert f"--config {cfg.trainer.recipe}" in texts["03_launch_grpo"]
        assert nbtools.jobs.attach(cfg.dashboard_url, cfg.submission_id).status().value in ("SUCCEEDED", "STOPPED")
