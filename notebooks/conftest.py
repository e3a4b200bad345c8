"""How ``pytest --nbmake notebooks/`` runs the committed notebooks (``make test`` runs them the same way, beside the
other tests): in their numbered order, each in its own kernel, on the local backend as committed, against one new
runs dir, with no ``gcloud``, ``kubectl`` or ``helm`` on the kernels' PATH.

- Order: 02 uses the head 01 planned, 03 the head 02 started, and so on, so the notebooks keep their file order
  whatever pytest-randomly does to the other tests, and under pytest-xdist they all go to one worker
  (``pytest_xdist_make_scheduler``: ``--dist loadfile`` with the notebooks as one unit). A notebook whose
  predecessor failed fails at once, naming it, instead of failing somewhere inside on what is missing.
- Runs dir: a new ``notebooks-*`` folder under ``$NBTOOLS_RUNS_DIR`` (``make test`` sets it), else under the
  checkout's git-ignored ``runs/``: a re-run never re-attaches to an earlier run's Ray head or checkpoints.
- PATH: the venv's ``bin`` and a folder of links to everything else on PATH but the three cloud CLIs
  (``tools/path_without.py``; they may sit in ``/usr/bin``): the local backend must not need them. A user whose
  notebooks target GKE sets ``NBTOOLS_NOTEBOOKS_KEEP_PATH=1``.
- The Ray head the notebooks started is stopped (by its recorded pid) after the last one, pass or fail: 09 stops
  it, but a failure before 09 must not leave it running.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CLOUD_CLIS = {"gcloud", "kubectl", "helm"}
_SCOPE = "notebooks (in order, one worker)"


def _is_notebook(item) -> bool:
    return getattr(item, "path", None) is not None and item.path.suffix == ".ipynb" and item.path.parent == HERE


class _Notebooks:
    """The state of the notebook pass in this process: its runs dir, the kernels' environment, the first failure."""

    def __init__(self):
        self.runs: Path | None = None
        self.env: dict[str, str] = {}
        self.saved: dict[str, str | None] = {}
        self.failed: str | None = None

    def environment(self, tmp: Path) -> dict[str, str]:
        if self.runs is None:
            base = Path(os.environ.get("NBTOOLS_RUNS_DIR") or ROOT / "runs")
            base.mkdir(parents=True, exist_ok=True)
            self.runs = Path(tempfile.mkdtemp(prefix=f"notebooks-{time.strftime('%Y%m%d-%H%M%S')}-", dir=base))
            self.env = {"NBTOOLS_RUNS_DIR": str(self.runs)}
            if os.environ.get("NBTOOLS_NOTEBOOKS_KEEP_PATH") != "1":
                nopath = _path_without().build(tmp / "path-without-cloud-clis", CLOUD_CLIS)
                self.env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), str(nopath)])
        return self.env

    def enter(self, tmp: Path) -> None:
        for k, v in self.environment(tmp).items():
            self.saved[k] = os.environ.get(k)
            os.environ[k] = v
        if "PATH" in self.env:
            import shutil

            found = [t for t in sorted(CLOUD_CLIS) if shutil.which(t)]
            assert not found, f"the kernels must find no cloud CLI on PATH, found {found}"

    def leave(self) -> None:
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self.saved.clear()

    def stop_head(self) -> None:
        if self.runs is not None:
            from nbtools.backends.local import stop_all_under

            stop_all_under(self.runs)


def _path_without():
    spec = importlib.util.spec_from_file_location("path_without", ROOT / "tools" / "path_without.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_STATE = _Notebooks()


@pytest.hookimpl(trylast=True)  # after pytest-randomly's shuffle (tryfirst) and any other reordering
def pytest_collection_modifyitems(items):
    """The notebooks back in file order, in the places they were given (the other tests keep theirs)."""
    places = [i for i, item in enumerate(items) if _is_notebook(item)]
    for i, nb in zip(places, sorted((items[i] for i in places), key=lambda it: it.path.name), strict=True):
        items[i] = nb


def pytest_runtest_setup(item):
    if not _is_notebook(item):
        return
    if _STATE.failed is not None:
        pytest.fail(f"{item.path.stem} needs what {_STATE.failed} leaves, and {_STATE.failed} failed (its test says why)",
                    pytrace=False)
    _STATE.enter(item.config._tmp_path_factory.getbasetemp())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if _is_notebook(item) and call.when == "call" and outcome.get_result().failed and _STATE.failed is None:
        _STATE.failed = item.path.stem


def pytest_runtest_teardown(item, nextitem):
    if not _is_notebook(item):
        return
    _STATE.leave()
    if nextitem is None or not _is_notebook(nextitem):
        _STATE.stop_head()


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: without xdist installed there is nothing to schedule
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile``, with every notebook of this folder in one unit (one worker, file order)."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class NotebooksTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::")[0]
            if path.endswith(".ipynb") and (ROOT / path).parent == HERE:
                return _SCOPE
            return super()._split_scope(nodeid)

    return NotebooksTogether(config, log)
