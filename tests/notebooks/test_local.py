"""Notebooks 01–09 as committed, on the local backend, with no gcloud, kubectl or helm on the kernels' PATH: what a user
gets who opens them after ``make install`` and runs every cell (the demo's ``experiments/local.yaml``, its 200 GRPO
steps and its ports), each final check cell included.

The notebooks run in their order, once each, in one module, each in its own kernel through papermill without
parameters (nothing is injected: the committed defaults run), against one runs dir, whatever order pytest runs the
tests in (a test asks for its notebook and every earlier one not yet run). The runs dir is
a new ``$NBTOOLS_RUNS_DIR/local-notebooks-*`` when that is set (``make test`` sets it), else the module's tmp dir; the executed
copies go to its ``executed/``. The kernels' PATH is this venv's ``bin`` and a directory of links to everything on
PATH except ``gcloud``, ``kubectl`` and ``helm`` (``tools/path_without.py``: those tools may sit in ``/usr/bin``).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from repo_tools import load_tool

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("0[1-9]_*.ipynb"))
CLOUD_CLIS = {"gcloud", "kubectl", "helm"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The runs dir, with NBTOOLS_RUNS_DIR and the reduced PATH set for the module (the kernels inherit both)."""
    base = os.environ.get("NBTOOLS_RUNS_DIR")
    if base:  # a new dir each run: a re-run never re-attaches to (or writes into) an earlier one's
        Path(base).mkdir(parents=True, exist_ok=True)
        runs = Path(tempfile.mkdtemp(prefix="local-notebooks-", dir=base))
    else:
        runs = tmp_path_factory.mktemp("local-notebooks")
    nopath = load_tool("path_without").build(tmp_path_factory.mktemp("path") / "without-cloud-clis", CLOUD_CLIS)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NBTOOLS_RUNS_DIR", str(runs))
        mp.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), str(nopath)]))
        assert not [t for t in CLOUD_CLIS if shutil.which(t)], "the kernels must find no cloud CLI on PATH"
        yield runs
        import nbtools

        cfg = nbtools.config.load(ROOT / "experiments" / "local.yaml")
        nbtools.backends.get(cfg).down(timeout=60)  # 09 stops it; a failure before 09 must not leave the head behind


@pytest.fixture(scope="module")
def in_order(runs, notebooks_in_order):
    """The committed notebooks, each run once in their order (conftest's NotebooksInOrder)."""

    def execute(notebook: Path) -> None:
        import papermill as pm

        from nbtools.demo import kernel_config

        out = runs / "executed" / notebook.name
        out.parent.mkdir(parents=True, exist_ok=True)
        pm.execute_notebook(str(notebook), str(out), cwd=str(notebook.parent), kernel_name="python3",
                            progress_bar=False, execution_timeout=1500, config=kernel_config())

    return notebooks_in_order(NOTEBOOKS, execute)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_notebook_on_the_local_backend(notebook, in_order):
    in_order.through(notebook)
