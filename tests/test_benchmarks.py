"""Every script in ``benchmarks/`` runs in its tiny mode, so an import or API change breaks a test, not a figure we
publish (issue 43: ``bench_rehearsal.py`` and ``bench_ray_head.py`` had failed on import since ``_free_ports`` moved
to ``nbtools/_ports.py``, unseen, because nothing ran them).

Each script runs as ``python benchmarks/<script> --tiny`` in a fresh process, in a temp dir, as a user would run it:
the same code paths on a workload of seconds (bench_rehearsal on the session's Ray head, bench_storage_local
on a copy of the session's shared rehearsal run, bench_merge and bench_ckpt_read on one checkpoint). No figure is asserted (a tiny workload measures nothing); the exit
status and, where a script drives another, the sign that it ran, are. A new script without an entry in ``TINY`` fails
``test_every_benchmark_has_a_tiny_mode``. The ones taking more than a few seconds are marked slow (``make test`` runs
them, ``make test-fast`` does not).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"

# script -> (arguments after the script, texts its output must contain in order, "|"-separated, slow?). "{tmp}" is the
# test's temp dir, "{shared}" the module's, "{gcs}"/"{dashboard}" the session head's ports, "{rehearsal}" a runs dir
# holding a copy of the session's shared rehearsal run.
TINY: dict[str, tuple[list[str], str, bool]] = {
    "bench_diagnose.py": (["--tiny"], "cause lost-node", False),
    "bench_rewards.py": (["--tiny"], "score() vs per-sample loop", False),
    "gen_nemo_rl_run.py": (["{tmp}/run", "--tiny"], "2 files, 8 records", False),
    "bench_health.py": (["--tiny"], "health:", True),
    "bench_storage.py": (["--tiny"], "nbtools, copy evicted", True),
    # reads a copy of the session's shared rehearsal run (tests/conftest.py), not a rehearsal of its own
    "bench_storage_local.py": (["--tiny", "--runs", "{rehearsal}"], "checkpoints.best", True),
    "bench_storage_cache.py": (["--tiny"], "fsspec filecache (check_files) / nbtools, rewritten", True),
    "bench_trajectories.py": (["--tiny"], "checksums identical across Python methods: True", True),
    # one tiny checkpoint for both: written (both layouts) by bench_merge.generate -> bench_merge_make_ckpt.py under
    # torch.distributed.run, by whichever of the two runs first in the module's shared dir; the other reads it
    "bench_merge.py": (["--tiny", "--workdir", "{shared}"], "nbtools peak RSS", True),
    "bench_ckpt_read.py": (["--tiny", "--keep", "{shared}/tiny/step_1"], "same contents read by both sides of every "
                           "pair: True", True),
    # starts nbtools' head (what it times); its baseline driver connects to that head in tiny mode, starting none
    "bench_ray_head.py": (["--tiny"], "re-attach (second up)|baseline: a driver connected to nbtools' head", True),
    # the session's Ray head (attached to, left running), not a head of its own
    "bench_rehearsal.py": (["--tiny", "ray.port={gcs}", "ray.dashboard_port={dashboard}"],
                           "down() will leave it running|learning targets met on", True),
    # helper scripts that a benchmark above runs in its tiny mode
    "bench_merge_make_ckpt.py": ([], "", False),
    # its functions run in tests/health/test_corpus.py (which also lists any known false alarm): not run twice here
    "bench_health_corpus.py": ([], "", False),
    # GPU calibration (one real training step per model on CUDA): its CPU/dry mode is being added with the fit work;
    # until then only its imports and argument parser run here
    "fit_calibrate.py": (["--help"], "--cases", False),
}
RUN_BY = {"bench_merge_make_ckpt.py": BENCH / "bench_merge.py",  # its generate(), which bench_ckpt_read.py calls
          "bench_health_corpus.py": ROOT / "tests" / "health" / "test_corpus.py"}


def test_every_benchmark_has_a_tiny_mode():
    scripts = {p.name for p in BENCH.glob("*.py")}
    assert scripts == set(TINY), (f"benchmarks without an entry in TINY: {sorted(scripts - set(TINY))}; entries "
                                  f"without a script: {sorted(set(TINY) - scripts)} (give a new script a --tiny mode "
                                  "and list it here)")
    for helper, runner in RUN_BY.items():
        assert helper in runner.read_text(), f"{runner.name} no longer runs {helper}: give {helper} its own entry"


def _cases():
    for script, (args, expect, slow) in sorted(TINY.items()):
        if script in RUN_BY:
            continue
        yield pytest.param(script, args, expect, id=script.removesuffix(".py"),
                           marks=[pytest.mark.slow] if slow else [])


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A dir the module's scripts share (one generated checkpoint for bench_merge and bench_ckpt_read)."""
    return tmp_path_factory.mktemp("bench-shared")


@pytest.mark.parametrize(("script", "args", "expect"), list(_cases()))
def test_tiny_mode_runs(script, args, expect, tmp_path, shared, request):
    env = {**os.environ, "NBTOOLS_RUNS_DIR": str(tmp_path / "runs"), "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    fill = {"tmp": tmp_path, "shared": shared}
    if any("{gcs}" in a for a in args):  # the session head (tests/conftest.py), started once for the whole suite
        head = request.getfixturevalue("ray_head")
        fill |= {"gcs": head.extra["port"], "dashboard": head.extra["dashboard_port"]}
    if any("{rehearsal}" in a for a in args):
        fill["rehearsal"] = request.getfixturevalue("rehearsal_run").copy(tmp_path / "rehearsal").parent
    argv = [sys.executable, str(BENCH / script), *(a.format(**fill) for a in args)]
    r = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    tail = f"\n--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-3000:]}"
    assert r.returncode == 0, f"{' '.join(argv[1:])} exited {r.returncode}{tail}"
    rest = r.stdout
    for text in expect.split("|"):  # each of these, in this order
        assert text in rest, f"{script}: expected {text!r} in its output (in this order: {expect!r}){tail}"
        rest = rest[rest.index(text) + len(text):]
