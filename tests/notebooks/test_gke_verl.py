"""Notebooks 01–09 executed with ``BACKEND="gke"`` against the simulated GKE (tests/doubles/sim_gke.py) with the verl
experiment (``experiments/gke-b200-verl.yaml``), as tests/notebooks/test_gke.py runs the NeMo-RL one: the pods run
the verl stand-in (tests/doubles/sim_verl, at the experiment's ``trainer.verl_ref``) for 03's preparation and training, and
07's evaluation jobs run ``nbtools.evals.vllm_generate`` over the vLLM test double (tests/doubles/vllm_double). The notebooks
run in their order, once each, in one module (conftest's ``NotebooksInOrder``); each one's final check cell must hold.
08 re-scores the dumps with verl's GSM8K rule (what ``rewards.trained_with`` gives a verl run on ``gsm8k``) and must
reproduce the stored scores, which the double computed with its own re-implementation of that rule
(tests/doubles/sim_verl/verl/utils/reward_score); 09 runs with ``CONFIRM`` set, as for the NeMo-RL experiment.

Sized to be cheap: ``NBTOOLS_SIM_VERL_STEPS`` GRPO steps (default 4), a checkpoint and a validation every 2, a short
warm start; 07's checks ask for paired comparisons, not for a gain, and the local verl pass trains the full run.
"""

from __future__ import annotations

import os

import pytest

from tests.notebooks.test_gke import NOTEBOOKS, sim_executor

STEPS = int(os.environ.get("NBTOOLS_SIM_VERL_STEPS", "4"))
PERIOD = max(1, STEPS // 2)

SIM_GKE = {"provisioned": False, "steps": STEPS, "experiment": "gke-b200-verl.yaml", "name": "sim-verl",
           "changes": {"grpo.val_period": PERIOD, "checkpointing.save_period": PERIOD}, "rehearsal": {"warmup_steps": 40}}


@pytest.fixture(scope="module")
def in_order(sim_gke, tmp_path_factory, notebooks_in_order):
    return notebooks_in_order(NOTEBOOKS, sim_executor(sim_gke, tmp_path_factory.mktemp("executed-gke-verl")))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_verl_notebook_on_simulated_gke(notebook, in_order):
    in_order.through(notebook)
