"""Notebooks 01–09 executed with ``BACKEND="gke"`` against the simulated GKE of ``tests/sim_gke.py``: the
Kubernetes API TEST DOUBLE with a KubeRay operator stand-in, the real GCS API emulator (fake-gcs-server) that gcsfs
reads, a real local Ray head standing in for the KubeRay head behind the real port-forward (its Python cannot import
nbtools, like the NeMo-RL image), recording gcloud/kubectl/helm shims, a gcsfuse stand-in and NeMo-RL stand-ins
(run_grpo.py trains nbtools' miniature GRPO with NeMo-RL's command line and layout; run_eval.py evaluates with
NeMo-RL's output format). The notebooks run in order, in one module, each with papermill in its own kernel, the way
a user runs them; each one's final check cell must hold as it does on the local backend. 09 runs with ``CONFIRM``
set, so the wipe and the destroy plan run too (the local pass covers the empty-``CONFIRM`` path).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("0[1-9]_*.ipynb"))
STEPS = int(os.environ.get("NBTOOLS_SIM_STEPS", "200"))  # as many as local's demo run

SIM_GKE = {"provisioned": False, "steps": STEPS}  # notebook 01 provisions it through the shims


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    return tmp_path_factory.mktemp("executed-gke")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_on_simulated_gke(notebook, sim_gke, executed):
    import papermill as pm

    from nbtools.demo import kernel_config

    params = {"BACKEND": "gke", "CONFIG": str(sim_gke.experiment_yaml)}
    if notebook.stem.startswith("09"):
        params["CONFIRM"] = sim_gke.cfg().name
    with sim_gke.activated():
        pm.execute_notebook(str(notebook), str(executed / notebook.name), parameters=params, cwd=str(notebook.parent),
                            kernel_name="python3", progress_bar=False, execution_timeout=1500, config=kernel_config())
