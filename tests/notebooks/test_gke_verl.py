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
from pathlib import Path

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


def test_07_scores_the_answers_the_verl_stand_in_trained(in_order, sim_gke):
    """07's jobs score with verl's GSM8K rule, which reads only a final ``#### N``: the texts must say the answers as
    the verl stand-in trained and scored them, or both models score 0 and the comparison says nothing (it did).
    Each ``correct`` must be what the stand-in's own copy of verl's rule says (tests/doubles/sim_verl), not only nbtools'."""
    import importlib.util

    import pandas as pd

    import nbtools

    in_order.through(next(p for p in NOTEBOOKS if p.stem.startswith("07")))
    with sim_gke.activated():
        cfg = sim_gke.cfg()
        tables = {d.name: pd.read_parquet(d / "results.parquet") for d in nbtools.evals.eval_dir(cfg).iterdir()
                  if (d / "results.parquet").is_file()}
    assert {"baseline_greedy", "finetuned_greedy"} <= set(tables), sorted(tables)
    both = pd.concat(tables.values())
    assert not both["response"].str.contains("<answer>", regex=False).any()
    assert both["response"].str.contains(r"#### -?\d", regex=True).mean() > 0.5, both["response"].head().tolist()
    rule_file = Path(__file__).resolve().parents[1] / "doubles" / "sim_verl" / "verl" / "utils" / "reward_score" / "gsm8k.py"
    spec = importlib.util.spec_from_file_location("sim_verl_gsm8k", rule_file)
    verl_rule = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(verl_rule)
    theirs = [verl_rule.compute_score(r, str(g)) >= 1.0 for r, g in zip(both["response"], both["ground_truth"], strict=True)]
    differ = both["correct"].to_numpy() != theirs
    assert not differ.any(), both.loc[differ, ["response", "ground_truth", "correct"]].head()
    assert tables["finetuned_greedy"]["correct"].any(), "no answer scored correct: the scorer reads none of them"
