"""``nbtools.evals.evaluate`` on GKE copies each model to the pods' local disks once: notebook 07's greedy and sampled
evaluations of the fine-tuned model load one copy, and a re-run that re-attaches to its finished job (07 again,
``nbtools evaluate`` after 07) execs nothing in the pods. The cluster is left out (jobs and pod execs recorded here);
the simulated GKE runs the whole path in tests/notebooks/test_gke*.py."""

from __future__ import annotations

from pathlib import Path

import pytest

import nbtools
from nbtools.errors import NotFoundError
from nbtools.evals import flow
from nbtools.evals.job import EvalJob

REPO = Path(__file__).resolve().parents[2]


class _Result:
    def __init__(self):
        self.params: dict = {}

    def save(self, out):
        return out


class _Job:
    def wait(self, timeout=None):
        return None


@pytest.mark.parametrize("experiment", ["gke-b200-gemma3-1b.yaml", "gke-b200-verl.yaml"])
def test_a_models_evaluations_share_one_local_copy_and_a_reattach_copies_nothing(experiment, monkeypatch):
    path = REPO / "experiments" / experiment
    if not path.is_file():
        pytest.fail(f"{path} is gone: name another GKE experiment of that trainer here")
    cfg = nbtools.config.load(path, backend="gke")
    prepared: list[EvalJob] = []
    submitted: dict[str, EvalJob] = {}

    def attach(address, submission_id):
        if submission_id not in submitted:
            raise NotFoundError(f"no job {submission_id}")
        return _Job()

    def submit(self):
        submitted[self.submission_id] = self
        return _Job()

    monkeypatch.setattr(nbtools.jobs, "attach", attach)
    monkeypatch.setattr(EvalJob, "submit", submit)
    monkeypatch.setattr(EvalJob, "prepare", lambda self, cfg, **kw: prepared.append(self) or [])
    monkeypatch.setattr(flow, "collect", lambda job, save_path=None: _Result())

    flow.evaluate(cfg, "fine-tuned")
    flow.evaluate(cfg, "fine-tuned", n=4, temperature=1.0)
    flow.evaluate(cfg, "fine-tuned")  # re-run: re-attaches, the copy is there
    assert len(submitted) == 2 and len(prepared) == 2, [j.submission_id for j in prepared]
    copies = {j.local_copy for j in prepared}
    assert len(copies) == 1 and all(j.local_copy for j in prepared)  # one copy, the same destination
    dest = nbtools.evals.job.local_model_path(cfg, prepared[0].model_name, "fine-tuned")
    assert all(dest in j.entrypoint for j in prepared), [j.entrypoint for j in prepared]
    assert prepared[0].submission_id != prepared[1].submission_id  # still one job per decoding
