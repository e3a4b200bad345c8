"""The nbmake pass of notebooks/conftest.py on three tiny notebooks (a copy of that conftest beside them): under
pytest-randomly's shuffle and two pytest-xdist workers they run in file order on one worker, with no cloud CLI on the
kernels' PATH and a new runs dir, and a failed notebook fails the next one by name without running it.

The committed notebooks themselves run through the same conftest in ``make test`` (``pytest tests notebooks --nbmake``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # three kernels and two xdist workers: about 15 CPU-seconds

CELL = """
import os, shutil, pathlib
runs = pathlib.Path(os.environ["NBTOOLS_RUNS_DIR"])
with open(runs.parent / "order.txt", "a") as f:
    f.write(f"{NAME} {os.environ.get('PYTEST_XDIST_WORKER', '-')} {runs.name} {shutil.which('gcloud')}\\n")
"""


def _notebook(path: Path, name: str, fail: bool = False) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(f"NAME = {name!r}" + CELL)]
    if fail:
        nb.cells.append(nbformat.v4.new_code_cell("raise RuntimeError('this notebook fails')"))
    nbformat.write(nb, path)


@pytest.fixture
def project(tmp_path):
    """A checkout-shaped tmp dir: notebooks/ (the real conftest, three notebooks), tools/path_without.py, a gcloud
    on PATH, and one ordinary test module so the notebooks share the xdist workers with other tests."""
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "tools").mkdir()
    shutil.copy(ROOT / "notebooks" / "conftest.py", tmp_path / "notebooks" / "conftest.py")
    shutil.copy(ROOT / "tools" / "path_without.py", tmp_path / "tools" / "path_without.py")
    for name, fail in (("01_a", False), ("02_b", True), ("03_c", False)):
        _notebook(tmp_path / "notebooks" / f"{name}.ipynb", name, fail)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_other.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    bin_ = tmp_path / "cloud-bin"
    bin_.mkdir()
    (bin_ / "gcloud").write_text("#!/bin/sh\nexit 0\n")
    (bin_ / "gcloud").chmod(0o755)
    return tmp_path


def _pytest(project: Path, *args: str, **extra_env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **extra_env, "PATH": f"{project / 'cloud-bin'}{os.pathsep}{os.environ['PATH']}",
           "NBTOOLS_RUNS_DIR": str(project / "runs"), "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run([sys.executable, "-m", "pytest", "tests", "notebooks", "--nbmake", "-p", "no:cacheprovider",
                           "-p", "randomly", *args], cwd=project, env=env, capture_output=True, text=True, timeout=300)


def test_notebooks_run_in_order_on_one_worker_without_cloud_clis(project):
    r = _pytest(project, "-n", "2", "--dist", "loadfile", "--randomly-seed=7", "-rA")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    lines = (project / "runs" / "order.txt").read_text().split("\n")[:-1]
    ran = [line.split() for line in lines]
    assert [x[0] for x in ran] == ["01_a", "02_b"], f"03 must not run after 02 failed: {lines}\n{out}"
    assert len({x[1] for x in ran}) == 1 and ran[0][1].startswith("gw"), f"one xdist worker for all notebooks: {lines}"
    assert len({x[2] for x in ran}) == 1 and ran[0][2].startswith("notebooks-"), f"one new runs dir: {lines}"
    assert {x[3] for x in ran} == {"None"}, f"gcloud is on the test's PATH but must not reach the kernels: {lines}"
    assert "03_c needs what 02_b leaves, and 02_b failed" in out, out
    assert "PASSED tests/test_other.py::test_one" in out and "PASSED tests/test_other.py::test_two" in out, out


def test_keep_path_lets_a_gke_notebook_pass_reach_the_cloud_clis(project):
    (project / "notebooks" / "02_b.ipynb").unlink()
    r = _pytest(project, "--randomly-seed=3", NBTOOLS_NOTEBOOKS_KEEP_PATH="1")
    assert r.returncode == 0, r.stdout + r.stderr
    ran = [line.split() for line in (project / "runs" / "order.txt").read_text().splitlines()]
    assert [x[0] for x in ran] == ["01_a", "03_c"]
    assert all(x[3].endswith("cloud-bin/gcloud") for x in ran), ran
