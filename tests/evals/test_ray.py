"""nbtools.evals cluster path against the REAL session Ray head (tests/conftest.py `ray_head`).

NeMo-RL's run_eval.py needs vLLM and GPUs, so the job runs a clearly named test double in its place
(`tests/doubles/run_eval_double.py`, see its docstring). Everything else —
the Ray Jobs API submission through `nbtools.jobs`, waiting, reading the log, parsing, pairing — is real.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from run_eval_double import FAKE_RUN_EVAL, PREFIX

import nbtools

REPO = Path(__file__).resolve().parents[2]


def test_eval_jobs_submit_collect_and_compare_on_real_ray(ray_head, tmp_path):
    script = tmp_path / "fake_run_eval.py"
    script.write_text(FAKE_RUN_EVAL)
    cfg = nbtools.config.load(REPO / "experiments" / "gke-b200-gemma3-1b.yaml", backend="gke")
    results = {}
    for label, model in (("baseline", "google/gemma-3-1b-it"), ("fine-tuned", "/data/run/merged_hf")):
        spec = nbtools.evals.build_eval_job(cfg, model, label=label, save_path=str(tmp_path / label))
        assert spec.entrypoint.startswith(PREFIX)
        spec = dataclasses.replace(spec, address=ray_head.dashboard_url,
                                   entrypoint=spec.entrypoint.replace(PREFIX, f"{sys.executable} -u {script}"))
        job = spec.submit()
        assert spec.submit().id == job.id  # re-submitting the same spec re-attaches
        job.wait(timeout=180)
        results[label] = nbtools.evals.collect(job, save_path=spec.save_path)
    base, tuned = results["baseline"], results["fine-tuned"]
    assert base.score_block.model_name == "gemma-3-1b-it" and tuned.score_block.model_name == "merged_hf"
    assert (base.accuracy, tuned.accuracy) == (0.25, 0.75) and "level" in tuned.table.columns
    cmp = nbtools.evals.compare(base, tuned, alpha=0.01)
    assert cmp.paired and cmp.flips == {"fixed": 20, "broken": 0, "both": 10, "neither": 10}
    assert cmp.p_value == pytest.approx(2 * 0.5**20) and cmp.significant
