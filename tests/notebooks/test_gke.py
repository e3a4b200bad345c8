"""Notebooks 01–09 executed with ``BACKEND="gke"`` against the simulated GKE of ``tests/doubles/sim_gke.py``: the
Kubernetes API TEST DOUBLE with a KubeRay operator stand-in, the real GCS API emulator (fake-gcs-server) that gcsfs
reads, a real local Ray head standing in for the KubeRay head behind the real port-forward (its Python cannot import
nbtools, like the NeMo-RL image), the recording gcloud/kubectl/helm TEST DOUBLE (sim_shims.py, the one the unit
tests of plans use too), a gcsfuse stand-in and NeMo-RL stand-ins
(run_grpo.py trains nbtools' miniature GRPO with NeMo-RL's command line and layout; run_eval.py evaluates with
NeMo-RL's output format). The notebooks run in their order, once each, in one module, each with papermill in its own
kernel, the way a user runs them, whatever order pytest runs the tests in (a test asks for its notebook and every
earlier one not yet run); each one's final check cell must hold as it does on the local backend. 09 runs with ``CONFIRM``
set, so the wipe and the destroy plan run too (the local pass covers the empty-``CONFIRM`` path).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("0[1-9]_*.ipynb"))
STEPS = int(os.environ.get("NBTOOLS_SIM_STEPS", "200"))  # as many as local's demo run

SIM_GKE = {"provisioned": False, "steps": STEPS}  # notebook 01 provisions it through the shims


class _InOrder:
    """Runs the notebooks of one simulated GKE in their order, each once, however pytest orders the tests: asking for
    07 first runs 01-06 before it (their tests then report what was run); a notebook that failed fails every later
    one's test with its name, since each builds on what the ones before it left."""

    def __init__(self, sim, out: Path):
        self.sim, self.out = sim, out
        self.done: dict[str, BaseException | None] = {}

    def through(self, notebook: Path) -> None:
        for nb in NOTEBOOKS[: NOTEBOOKS.index(notebook) + 1]:
            if nb.stem not in self.done:
                failed = next((k for k, e in self.done.items() if e is not None), None)
                if failed is not None:
                    pytest.fail(f"{nb.stem} needs what {failed} leaves, and {failed} failed (its test shows why)")
                try:
                    self._execute(nb)
                    self.done[nb.stem] = None
                except Exception as e:  # kept: the notebook's own test raises it, later ones name it
                    self.done[nb.stem] = e
        if (error := self.done[notebook.stem]) is not None:
            raise error

    def _execute(self, notebook: Path) -> None:
        import papermill as pm

        from nbtools.demo import kernel_config

        params = {"BACKEND": "gke", "CONFIG": str(self.sim.experiment_yaml)}
        if notebook.stem.startswith("09"):
            params["CONFIRM"] = self.sim.cfg().name
        with self.sim.activated():
            pm.execute_notebook(str(notebook), str(self.out / notebook.name), parameters=params,
                                cwd=str(notebook.parent), kernel_name="python3", progress_bar=False,
                                execution_timeout=1500, config=kernel_config())


@pytest.fixture(scope="module")
def in_order(sim_gke, tmp_path_factory):
    return _InOrder(sim_gke, tmp_path_factory.mktemp("executed-gke"))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_on_simulated_gke(notebook, in_order):
    in_order.through(notebook)
