"""Notebooks 01–09 executed with ``BACKEND="gke"`` against the simulated GKE of ``tests/doubles/sim_gke.py``: the
Kubernetes API TEST DOUBLE with a KubeRay operator stand-in, the real GCS API emulator (fake-gcs-server) that gcsfs
reads, a real local Ray head standing in for the KubeRay head behind the real port-forward (its Python cannot import
nbtools, like the NeMo-RL image), the recording gcloud/kubectl/helm TEST DOUBLE (sim_shims.py, the one the unit
tests of plans use too), a gcsfuse stand-in and NeMo-RL stand-ins
(run_grpo.py trains nbtools' miniature GRPO with NeMo-RL's command line and layout; run_eval.py evaluates with
NeMo-RL's output format). The notebooks run in their order, once each, in one module, each with papermill in its own
kernel, the way a user runs them, whatever order pytest runs the tests in (a test asks for its notebook and every
earlier one not yet run); each one's final check cell must hold as it does on the local backend. The backend and the
experiment are set once for all nine (the shared settings' environment variables), not per notebook. 01 and 09 run
with ``APPLY`` (09 also with ``CONFIRM``), so the provisioning, the wipe and the destroy plan run too (the local pass
covers the dry-run defaults).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("0[1-9]_*.ipynb"))
# GRPO steps: 40 by default (what the notebooks read and check matters here, not how far the policy learns; the local
# pass, notebooks/ through nbmake, trains the demo's 200); validation and checkpoint every min(50, STEPS // 2), so two of each
STEPS = int(os.environ.get("NBTOOLS_SIM_STEPS", "40"))
PERIOD = max(1, min(50, STEPS // 2))  # 50 as local.yaml at 200 steps

SIM_GKE = {"provisioned": False, "steps": STEPS,  # notebook 01 provisions it through the shims
           "changes": {"grpo.val_period": PERIOD, "checkpointing.save_period": PERIOD}}


CLI_AFTER_07: dict[str, object] = {}  # what `nbtools evaluate` printed right after 07, while the cluster is up


def _cli_evaluate(sim_gke) -> None:
    """Issue 42 item 5: ``nbtools evaluate EXPERIMENT`` from a terminal on the same cluster, after 07 (same jobs:
    they re-attach), with the bucket's per-problem results and the comparison 07 shows."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "nbtools.cli", "evaluate", str(sim_gke.experiment_yaml), "--backend", "gke",
                        "--json"], capture_output=True, text=True, timeout=900, env=dict(os.environ))
    CLI_AFTER_07.update(code=r.returncode, out=r.stdout, err=r.stderr)


def sim_executor(sim_gke, out: Path):
    """Executes one notebook on ``sim_gke``, into ``out``. The backend and the experiment are set ONCE, the way a user
    moves to GKE: ``NBTOOLS_BACKEND`` / ``NBTOOLS_EXPERIMENT`` in the kernels' environment (the notebooks' shared
    settings), no ``BACKEND`` / ``CONFIG`` parameter. Only the notebooks that change cloud resources get their one
    flag, ``APPLY`` (01 provisions, 09 tears down, confirmed with the experiment's name); after 07, ``nbtools
    evaluate`` runs on the same cluster (``CLI_AFTER_07``)."""

    def execute(notebook: Path) -> None:
        import papermill as pm

        from nbtools.demo import kernel_config

        params = {"APPLY": True} if notebook.stem[:2] in ("01", "09") else {}
        if notebook.stem.startswith("09"):
            params["CONFIRM"] = sim_gke.cfg().name
        with sim_gke.activated(), pytest.MonkeyPatch.context() as mp:
            mp.setenv("NBTOOLS_BACKEND", "gke")
            mp.setenv("NBTOOLS_EXPERIMENT", str(sim_gke.experiment_yaml))
            pm.execute_notebook(str(notebook), str(out / notebook.name), parameters=params,
                                cwd=str(notebook.parent), kernel_name="python3", progress_bar=False,
                                execution_timeout=1500, config=kernel_config())
            if notebook.stem.startswith("07"):
                _cli_evaluate(sim_gke)

    return execute


@pytest.fixture(scope="module")
def in_order(sim_gke, tmp_path_factory, notebooks_in_order):
    """The notebooks on this module's simulated GKE, each run once in their order (conftest's NotebooksInOrder)."""
    return notebooks_in_order(NOTEBOOKS, sim_executor(sim_gke, tmp_path_factory.mktemp("executed-gke")))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_on_simulated_gke(notebook, in_order):
    in_order.through(notebook)


def test_cli_evaluate_prints_the_results_location_and_the_comparison_like_07(in_order):
    """``nbtools evaluate`` (run right after 07, before 09 tears the cluster down): both models evaluated through the
    cluster's run_eval.py jobs, the per-problem results where the pods wrote them (the bucket) and here, the paired
    comparison saved, MATH-500 at tutorial 000's 8192 tokens."""
    import json

    in_order.through(next(nb for nb in NOTEBOOKS if nb.stem.startswith("07")))
    assert CLI_AFTER_07.get("code") == 0, CLI_AFTER_07
    doc = json.loads(CLI_AFTER_07["out"])
    rows = {r["label"]: r for r in doc["evaluations"]}
    assert set(rows) == {"baseline", "fine-tuned"}
    for r in rows.values():
        assert r["cluster_results"].startswith("gs://") and Path(r["results"]).is_file(), r
        assert r["max_new_tokens"] == 8192 and r["length_from"] == "MATH-500 as tutorial 000 scored it", r
    (c,) = doc["comparisons"]
    assert c["paired"] and c["n_problems"] == rows["baseline"]["problems"] > 0 and Path(c["saved"]).is_file()
