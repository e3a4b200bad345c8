"""Shared fixtures: ONE real local Ray head for the whole session, started through the local backend.

Use it in integration tests:

    def test_my_job(ray_head, ray_cfg):
        cfg = ray_cfg(my_cfg)                   # same experiment, ray ports pointing at the session head
        job = nbtools.jobs.submit(ray_head.dashboard_url, entrypoint="...", submission_id="my-test-1")

The head runs on free ports (never 6379/8265) with its runs dir under pytest's tmp dir, and is stopped (by pid,
verified) at the end of the session. When a test that uses it fails, its resources (like `ray status`) and the
jobs that did not succeed, with their log tails, are printed in that test's report.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from ports import free_port

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _shared_head_dir(basetemp: Path) -> Path:
    """Under pytest-xdist, the runs dir of the one head every worker shares (beside the workers' own tmp dirs)."""
    return basetemp / "rayhead-shared"


@pytest.fixture(scope="session")
def ray_head_runs_dir(tmp_path_factory) -> Path:
    """The runs dir the session head was started from (its pid file is ``<dir>/ray/head.json``)."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        shared = _shared_head_dir(tmp_path_factory.getbasetemp().parent)
        shared.mkdir(exist_ok=True)
        return shared
    return tmp_path_factory.mktemp("rayhead")


@pytest.fixture(scope="session")
def ray_head(ray_head_runs_dir):
    """A real local Ray head (ClusterHandle) shared by the session; ``.dashboard_url`` is the Jobs API address.

    Under pytest-xdist the workers share one head: the first that needs it starts it (under a file lock), the others
    attach to it, and the controller stops it when the session ends (pytest_sessionfinish). A second head costs about
    15 CPU-seconds to start and 4 a minute idle, on two cores that the workers' tests already fill.
    """
    from filelock import FileLock

    import nbtools
    from nbtools.backends import _head as local

    xdist = "PYTEST_XDIST_WORKER" in os.environ
    old = os.environ.get("NBTOOLS_RUNS_DIR")
    os.environ["NBTOOLS_RUNS_DIR"] = str(ray_head_runs_dir)
    try:
        with FileLock(f"{ray_head_runs_dir}.lock", timeout=600):  # another worker may be starting it
            rec = local.head_record(ray_head_runs_dir)
            ports = (rec["port"], rec["dashboard_port"]) if rec else (free_port(), free_port())
            cfg = nbtools.config.load(
                PROJECT_ROOT / "experiments" / "local.yaml", backend="local",
                overrides={"ray.port": ports[0], "ray.dashboard_port": ports[1], "ray.num_cpus": 4},
            )
            handle = local.up(cfg, timeout=300, progress=False)
    except BaseException:  # a head still starting in the background must not outlive the session
        if not xdist:
            local.stop_all_under(ray_head_runs_dir)
        raise
    finally:
        _restore_env(old)
    assert handle.started_by_us, handle
    try:
        yield handle
    finally:
        if not xdist:  # under xdist the controller stops it, once every worker is done
            _stop_session_head(ray_head_runs_dir)


def _stop_session_head(runs_dir: Path) -> None:
    from nbtools.backends import _head as local

    results = local.stop_all_under(runs_dir)
    temp, note = local.temp_dir_for(runs_dir)
    if note:  # pytest's tmp path was too long for Ray's sockets: drop the /tmp fallback with the head
        shutil.rmtree(temp, ignore_errors=True)
    assert any(r.stopped for r in results), [str(r) for r in results]


def pytest_sessionfinish(session):
    """The xdist controller stops the head its workers shared (if any of them started one)."""
    if hasattr(session.config, "workerinput") or not getattr(session.config.option, "numprocesses", None):
        return
    shared = _shared_head_dir(session.config._tmp_path_factory.getbasetemp())
    if (shared / "ray").is_dir():
        _stop_session_head(shared)


@pytest.fixture(scope="session")
def ray_cfg(ray_head):
    """``ray_cfg(cfg)``: a copy of an experiment whose ray ports point at the session head."""

    def _point(cfg):
        return cfg.replace(**{"ray.port": ray_head.extra["port"], "ray.dashboard_port": ray_head.extra["dashboard_port"]})

    return _point


@pytest.fixture(scope="module")
def sim_gke(request, tmp_path_factory):
    """A simulated GKE for the test module (tests/doubles/sim_gke.py: API double + KubeRay stand-in, GCS emulator, a Ray head
    without nbtools behind the port-forward, gcloud/kubectl/helm shims, gcsfuse and NeMo-RL stand-ins), provisioned
    as notebook 01 leaves it. A module may set ``SIM_GKE = {...}`` (SimGke keyword arguments) to change it; use it
    inside ``with sim_gke.activated():`` (its PATH, KUBECONFIG, emulator, runs and cache dirs)."""
    from sim_gke import SimGke

    options = {"provisioned": True, **getattr(request.module, "SIM_GKE", {})}
    with SimGke(tmp_path_factory.mktemp("simgke"), **options) as sim:
        yield sim


@pytest.fixture(scope="module")
def gcs(request):
    """A real GCS JSON-API emulator for the test module (tests/doubles/gcs_emulator.py: fake-gcs-server, a STAND-IN for
    Google Cloud Storage that gcsfs talks to through ``STORAGE_EMULATOR_HOST`` while the module runs). The bucket a
    module names in ``BUCKET = "..."`` is created; put objects with ``gcs.fs.pipe`` / ``gcs.fs.put``."""
    from gcs_emulator import GcsEmulator

    with GcsEmulator() as g:
        if getattr(request.module, "BUCKET", None):
            g.create_bucket(request.module.BUCKET)
        yield g


@pytest.fixture
def storage_cache(tmp_path, monkeypatch) -> Path:
    """``NBTOOLS_CACHE_DIR`` in the test's tmp dir: copies of remote objects never outlive (or leak into) a test."""
    monkeypatch.setenv("NBTOOLS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


@pytest.fixture(autouse=True)
def _dump_ray_state_on_failure(request):
    """After a failed test that used the session head: print `ray status`-like resources and unfinished job logs."""
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed and "sim_gke" in request.fixturenames:
        print(request.getfixturevalue("sim_gke").report())
    if rep is None or not rep.failed or "ray_head" not in request.fixturenames:
        return
    head = request.getfixturevalue("ray_head")
    import nbtools

    print("\n===== Ray state after failure =====")
    try:
        print(head.resources().summary())
        table = nbtools.jobs.list_jobs(head.dashboard_url)
        print(table.to_string())
        for sid in table.loc[table["status"] != "SUCCEEDED", "submission_id"]:
            print(f"--- last log lines of {sid} ---")
            print(nbtools.jobs.attach(head.dashboard_url, sid).log_tail(40))
    except Exception as e:  # the dump must never hide the real failure
        print(f"(could not read the Ray state: {type(e).__name__}: {e})")


def _restore_env(old: str | None) -> None:
    if old is None:
        os.environ.pop("NBTOOLS_RUNS_DIR", None)
    else:
        os.environ["NBTOOLS_RUNS_DIR"] = old


_HEAVY_FIXTURES = {"ray_head": ("ray", "slow"), "sim_gke": ("slow",), "shared_rehearsal": ("slow",)}


# The longest modules (seconds of one worker in CI's pytest run, 2 workers on 2 cores, 2026-11-28, unless said): under
# pytest-xdist they are handed out first (keep_longest_first below), so the last worker to finish is not the one that
# drew a five-minute notebook pass at the end; the rest follow in file order.
LONGEST_FIRST = (
    "tests/integration/test_ray_hidden_notebooks.py",  # 335 s: the notebooks on a `ray` cluster with hidden storage
    "tests/notebooks/test_gke.py",  # 258 s (2026-11-26)
    "tests/notebooks/test_gke_verl.py",  # 239 s (2026-11-26)
    "notebooks/*.ipynb",  # about 150 s: the committed notebooks through nbmake, one unit (notebooks/conftest.py)
    "tests/notebooks/test_verl_local.py",  # 134 s (2026-11-26)
    "tests/launch/test_ray.py",  # about 70 s: a second Ray head, with GPUs (notebook 03 on it moved to the hidden-storage pass)
    "tests/integration/test_cli.py",  # 114 s (2026-11-26)
    "tests/test_benchmarks.py",  # every benchmark's --tiny run: about 150 CPU-s of subprocesses plus two Ray heads (2026-11-27)
    "tests/integration/test_sim_gke.py",  # 106 s (2026-11-26)
    # two venvs (built once, cached in .venv-verl/) and one verl process per release that also writes
    # test_verl_checkpoint_oracle.py's checkpoints (tests/oracle/conftest.py): that module, in file order, reads them
    "tests/oracle/test_verl_oracle.py",
    "tests/integration/test_health_rehearsal.py",  # 61 s (2026-11-26)
    "tests/integration/test_supervise_local.py",  # about 60 s: a killed run brought home (35 s of set-up)
    "tests/integration/test_stall_local.py",  # about 50 s: a hang stopped by supervise (29 s)
    "tests/integration/test_verl_stand_ins.py",  # 56 s (2026-11-26)
)


def pytest_collection_modifyitems(config, items):
    """Mark by what a test needs, so ``-m "not slow"`` (the inner loop) leaves out every test that starts or shares a
    Ray head, a simulated GKE or the shared rehearsal run, including through another fixture, without a marker to
    forget in each file. A module names its own heavy fixtures (a training run, a notebook kernel) in
    ``SLOW_FIXTURES = ("run",)``: every test that needs one is slow, so the inner loop never sets it up."""
    for item in items:
        needs = getattr(item, "fixturenames", ())
        heavy = {**_HEAVY_FIXTURES, **{f: ("slow",) for f in getattr(getattr(item, "module", None), "SLOW_FIXTURES", ())}}
        for fixture, marks in heavy.items():
            if fixture in needs:
                for mark in marks:
                    item.add_marker(mark)


class _LongestFirst:
    """Under pytest-xdist (a worker's collection is what the controller hands out, in its order), the longest modules
    go first; each module keeps its tests' order. Without xdist the order stays the file order or pytest-randomly's."""

    @pytest.hookimpl(trylast=True)  # after pytest-randomly's shuffle and the deselection by marker
    def pytest_collection_modifyitems(self, items):
        rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(_unit(item.nodeid), len(rank)))  # stable


def _unit(nodeid: str) -> str:
    """What pytest-xdist hands out as one (a module; the notebooks of notebooks/ together)."""
    path = nodeid.split("::")[0]
    return "notebooks/*.ipynb" if path.startswith("notebooks/") and path.endswith(".ipynb") else path


def keep_longest_first(config) -> None:
    """On the xdist controller: hand the modules out in the workers' collection order (``_LongestFirst``), not
    xdist's own, which since 3.6 sorts loadscope/loadfile units by their number of tests (``--loadscope-reorder``, on
    by default): the notebook modules, ten tests or fewer each and the longest of all, went out in the second half (the
    five-minute hidden-storage ray notebooks 67th of 106 units), after a hundred modules of one-second unit tests."""
    if getattr(config.option, "loadscopereorder", None):
        config.option.loadscopereorder = False


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        config.pluginmanager.register(_LongestFirst(), "nbtools-longest-first")
        return
    keep_longest_first(config)
    if os.environ.get("NBTOOLS_RUNS_DIR"):  # this session's list of verl oracle releases starts empty
        (Path(os.environ["NBTOOLS_RUNS_DIR"]) / "verl-oracle-releases.txt").unlink(missing_ok=True)


class NotebooksInOrder:
    """Runs a sequence of notebooks in their order, each once, however pytest orders the tests (pytest-randomly
    shuffles them; a test may also run alone): ``through(nb)`` executes every earlier notebook not yet run, then
    ``nb``. A notebook that failed fails every later one's test with its name, since each builds on what the ones
    before it left."""

    def __init__(self, notebooks: list[Path], execute):
        self.notebooks, self.execute = list(notebooks), execute
        self.done: dict[str, BaseException | None] = {}

    def through(self, notebook: Path) -> None:
        for nb in self.notebooks[: self.notebooks.index(notebook) + 1]:
            if nb.stem not in self.done:
                failed = next((k for k, e in self.done.items() if e is not None), None)
                if failed is not None:
                    pytest.fail(f"{nb.stem} needs what {failed} leaves, and {failed} failed (its test shows why)")
                try:
                    self.execute(nb)
                    self.done[nb.stem] = None
                except Exception as e:  # kept: the notebook's own test raises it, later ones name it
                    self.done[nb.stem] = e
        if (error := self.done[notebook.stem]) is not None:
            raise error


@pytest.fixture(scope="session")
def notebooks_in_order():
    """``notebooks_in_order(notebooks, execute)``: a :class:`NotebooksInOrder` for a module-scoped fixture."""
    return NotebooksInOrder

# == one shrunk rehearsal run shared by the session (section owned by the test-suite layout; fixtures of other areas
# go above) ===========================================================================================================
# Every test that only reads a finished rehearsal run (its stdout, TensorBoard files, dumps, DCP checkpoints) reads
# this one: `python -m nbtools.rehearsal` on 2 gloo ranks, 2 GRPO steps of a shrunk task, validation at start and after
# each step, a checkpoint after each step (NeMo-RL's v2 safetensors layout). It starts in the background as soon as
# collection shows a test that needs it. A test that writes into a run copies it first (``rehearsal_run.copy``);
# the session checks at its end that nobody wrote into the shared one.

REHEARSAL_CONFIG = PROJECT_ROOT / "experiments" / "local.yaml"
REHEARSAL_OVERRIDES = (
    "rehearsal.num_train=64", "rehearsal.num_test=16", "rehearsal.warmup_steps=5", "grpo.num_prompts_per_step=4",
    "grpo.num_generations_per_prompt=4", "grpo.max_val_samples=8", "grpo.val_period=1", "grpo.val_at_start=true",
    "checkpointing.save_period=1", "checkpointing.keep_top_k=5", "grpo.max_num_steps=2",
)


@dataclass(frozen=True)
class RehearsalRun:
    """A finished rehearsal: ``run_dir`` is ``<runs>/local-rehearsal`` (logs/exp_001, checkpoints/step_1..2,
    baseline_hf); ``output`` is what it printed; ``overrides`` what it ran with, after ``--config REHEARSAL_CONFIG``."""

    run_dir: Path
    output: str
    overrides: tuple[str, ...] = REHEARSAL_OVERRIDES

    def copy(self, dest: Path) -> Path:
        """A private copy under ``dest`` (which becomes its runs dir) for a test that writes; returns its run_dir."""
        shutil.copytree(self.run_dir.parent, dest, symlinks=True, dirs_exist_ok=True)
        return Path(dest) / self.run_dir.name


class _BackgroundRehearsal:
    def __init__(self, runs: Path):
        self.runs, self.log = runs, runs / "rehearsal.log"
        self.result: RehearsalRun | None = None
        self.tree: dict[str, tuple[int, int]] | None = None  # its files once finished: nobody may change them
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "nbtools.rehearsal", "--config", str(REHEARSAL_CONFIG), "--runs-dir", str(runs),
                 *REHEARSAL_OVERRIDES], stdout=log, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT, start_new_session=True)

    def wait(self, timeout: float = 600) -> RehearsalRun:
        if self.result is None:
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                pytest.fail(f"the shared rehearsal did not finish in {timeout:.0f} s:\n{self.log.read_text()[-3000:]}")
            out = self.log.read_text()
            assert self.proc.returncode == 0, f"the shared rehearsal failed:\n{out[-3000:]}"
            self.result = RehearsalRun(self.runs / "local-rehearsal", out)
            self.tree = _tree(self.runs)
        return self.result

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


_REHEARSAL_KEY = pytest.StashKey[_BackgroundRehearsal]()


def _start_rehearsal(config) -> _BackgroundRehearsal:
    if _REHEARSAL_KEY not in config.stash:
        config.stash[_REHEARSAL_KEY] = _BackgroundRehearsal(config._tmp_path_factory.mktemp("shared-rehearsal"))
    return config.stash[_REHEARSAL_KEY]


def pytest_collection_finish(session):
    """Start the shared rehearsal while the first tests run, when a collected test will read it. Under pytest-xdist
    every worker collects every test but runs only some: a worker starts it when its first test asks for it."""
    if not session.config.option.collectonly and "PYTEST_XDIST_WORKER" not in os.environ and any(
            "shared_rehearsal" in getattr(item, "fixturenames", ()) for item in session.items):
        _start_rehearsal(session.config)


def pytest_unconfigure(config):
    if _REHEARSAL_KEY in config.stash:
        config.stash[_REHEARSAL_KEY].kill()


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="session")
def shared_rehearsal(request) -> _BackgroundRehearsal:
    """The shared rehearsal, started (``.wait()`` returns the finished RehearsalRun): for a fixture that starts runs
    of its own before it waits for this one."""
    return _start_rehearsal(request.config)


@pytest.fixture(scope="session")
def rehearsal_run(shared_rehearsal) -> RehearsalRun:
    """The session's finished shrunk rehearsal (see above); read it, never write into it (``.copy(tmp_path)``)."""
    return shared_rehearsal.wait()


@pytest.fixture(autouse=True)
def _shared_rehearsal_untouched(request):
    """A test that used the shared rehearsal run fails if it changed a file there (the next reader would see it)."""
    yield
    shared = request.config.stash.get(_REHEARSAL_KEY, None)
    if shared is None or shared.tree is None or "shared_rehearsal" not in request.fixturenames:
        return
    before, after = shared.tree, _tree(shared.runs)
    root = shared.runs
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    shared.tree = after  # the next test is judged on what it changes itself
    assert not changed, (f"{request.node.name} wrote into the shared rehearsal run {root} ({changed[:5]}); "
                         "fix: write into a copy, rehearsal_run.copy(tmp_path)")


@pytest.fixture(autouse=True)
def _no_dead_storage_emulator():
    """After each test, no STORAGE_EMULATOR_HOST that points at a stopped emulator stays in the process: gcsfs would
    retry it with backoff (about 30 s a call) in every later test that touches gs://. A test that leaves one is
    named with a warning."""
    yield
    import warnings

    from gcs_emulator import _answers

    url = os.environ.get("STORAGE_EMULATOR_HOST")
    if url and not _answers(url):
        os.environ.pop("STORAGE_EMULATOR_HOST", None)
        warnings.warn(f"a test left STORAGE_EMULATOR_HOST={url} pointing at a stopped emulator; removed", stacklevel=1)


def pytest_terminal_summary(terminalreporter):
    """Say which verl releases' own code the oracle tests ran (tests/oracle: one line per release, written by its
    fixture under NBTOOLS_RUNS_DIR; here, so the pytest-xdist controller, which collects nothing, prints it too)."""
    runs = os.environ.get("NBTOOLS_RUNS_DIR")
    path = Path(runs) / "verl-oracle-releases.txt" if runs else None
    if path is not None and path.is_file():
        terminalreporter.write_sep("=", "verl oracle: releases whose own code ran")
        terminalreporter.write(path.read_text())
