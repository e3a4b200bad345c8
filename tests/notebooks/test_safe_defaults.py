"""Issue 45: notebook 01 opened with ``BACKEND="gke"`` and run top to bottom is a dry run — it creates nothing — and
its check cell says so. Before, its first cell set ``APPLY = True``, so Run All on gke created a B200 node pool.

The kernel gets no gcloud, kubectl or helm on PATH (``tools/path_without.py``): a real apply would have to call them
and fail, so a notebook that completes ran nothing; the plan's state file (written by every real apply) stays absent.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from repo_tools import load_tool

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # a notebook kernel


def test_01_on_gke_is_a_dry_run_unless_apply(tmp_path, monkeypatch):
    import papermill as pm

    from nbtools.demo import kernel_config

    nopath = load_tool("path_without").build(tmp_path / "path", {"gcloud", "kubectl", "helm"})
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), str(nopath)]))
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    # the backend and experiment chosen once, the shared settings' way; no parameter but the defaults
    monkeypatch.setenv("NBTOOLS_BACKEND", "gke")
    monkeypatch.setenv("NBTOOLS_EXPERIMENT", str(ROOT / "experiments" / "gke-b200-gemma3-1b.yaml"))
    out = tmp_path / "01.ipynb"
    pm.execute_notebook(str(ROOT / "notebooks" / "01_provision_gke.ipynb"), str(out), cwd=str(ROOT / "notebooks"),
                        kernel_name="python3", progress_bar=False, execution_timeout=300, config=kernel_config())
    cells = [c for c in json.loads(out.read_text())["cells"] if c["cell_type"] == "code"]
    verdict = "".join("".join(o["data"]["text/plain"]) for o in cells[-1]["outputs"] if "data" in o)
    assert verdict.startswith("dry run: nothing was changed;") and "set APPLY = True" in verdict, verdict
    assert not list((tmp_path / "runs").rglob("provision-state.json")), "a dry run records no progress"
