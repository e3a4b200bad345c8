"""Benchmark: ``nbtools.storage`` verbs on a local run, this tree against another checkout of nbtools.

Why: storage goes through ``fsspec.core.url_to_fs`` for local paths too (one code path per verb, issue 26 item 7)
where it used ``os.scandir``/``open`` directly before; reading a run on the local backend must not get slower.
The workload is a real rehearsal run (``python -m nbtools.rehearsal``, 4 steps, two checkpoints) on this
machine's disk: ``ls`` of the log, exp and checkpoint dirs, ``info``/``exists`` of files and dirs, whole and
ranged reads of step dumps, and the readers built on them (checkpoint listing, ``best``).

Each tree runs in its own fresh process, alternating (round robin, so load drifts hit both alike); the
medians of ``--reps`` rounds are printed with the ratio to the baseline tree.

Example:
    $ python benchmarks/bench_storage_local.py --baseline ../main      # another checkout (e.g. before the change)
    $ python benchmarks/bench_storage_local.py --tiny     # a 2-step run in a temp dir, each verb twice (tests)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _workload(run: Path, calls: int = 200, rounds: int = 5) -> dict[str, float]:
    """Seconds per verb (median of many calls) with the nbtools found first on sys.path."""
    from nbtools import checkpoints, storage

    logs, ckpts = run / "logs", run / "checkpoints"
    exp = sorted(logs.glob("exp_*"))[-1]
    dumps = sorted(str(p) for p in exp.glob("train_data_step*.jsonl"))
    step = sorted(ckpts.glob("step_*"))[-1]
    size = os.path.getsize(dumps[-1])
    cases = {
        "ls(log_dir)": lambda: storage.ls(logs),
        "ls(exp_dir)": lambda: storage.ls(exp),
        "ls(checkpoint_dir)": lambda: storage.ls(ckpts),
        "info(file)": lambda: [storage.info(d) for d in dumps],
        "exists(missing)": lambda: storage.exists(exp / "nope.jsonl"),
        "read_bytes(whole)": lambda: [storage.read_bytes(d) for d in dumps],
        "read_bytes(range)": lambda: storage.read_bytes(dumps[-1], size // 2, size // 2 + 200),
        "glob(exp_dir)": lambda: storage.glob(exp, "train_data_step*.jsonl"),
        "fetch(file)": lambda: storage.fetch(dumps[-1]),
        "checkpoints.list": lambda: checkpoints.list_checkpoints(ckpts),
        "checkpoints.best": lambda: checkpoints.best(ckpts, "val:accuracy"),
        "training_info": lambda: storage.read_text(step / "training_info.json"),
    }
    out = {}
    for name, fn in cases.items():
        fn()  # warm: imports and the page cache
        n, times = calls, []
        for _ in range(rounds):
            t = time.perf_counter()
            for _ in range(n):
                fn()
            times.append((time.perf_counter() - t) / n)
        out[name] = statistics.median(times)
    return out


def _child(tree: str, run: str, *, tiny: bool = False) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": tree}
    r = subprocess.run([sys.executable, __file__, "--child", "--run", run, *(["--tiny"] if tiny else [])],
                       capture_output=True, text=True, env=env, cwd=tree, timeout=1800)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{tree} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return json.loads(line[7:])


# --tiny: a small data set, a short warm start and few samples per step (the files, not their size)
TINY = ["rehearsal.num_train=64", "rehearsal.num_test=16", "rehearsal.warmup_steps=5", "grpo.num_prompts_per_step=4",
        "grpo.num_generations_per_prompt=4", "grpo.max_val_samples=8"]


def _rehearse(runs: Path, steps: int = 4, extra: tuple[str, ...] = ()) -> Path:
    run = runs / "local-rehearsal"
    if not (run / "checkpoints").is_dir():
        subprocess.run([sys.executable, "-m", "nbtools.rehearsal", "--config", str(ROOT / "experiments" / "local.yaml"),
                        "--runs-dir", str(runs), f"grpo.max_num_steps={steps}", "grpo.val_period=2",
                        "checkpointing.save_period=2", *extra], check=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", help="another checkout of the project (its nbtools/ is the baseline)")
    ap.add_argument("--runs", help="runs dir of the rehearsal (made if missing; default /tmp/nbtools-bench/storage-local, "
                    "--tiny: a temp dir)")
    ap.add_argument("--run", help=argparse.SUPPRESS)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tiny", action="store_true", help="a 2-step rehearsal in a temp dir, one round of 2 calls per "
                    "verb: every code path in seconds, no figure worth reading (tests/test_benchmarks.py)")
    a = ap.parse_args(argv)
    if a.child:
        calls = (2, 1) if a.tiny else (200, 5)
        print("RESULT " + json.dumps(_workload(Path(a.run), *calls)), flush=True)
        return 0
    if a.tiny:  # --runs: a run already there (e.g. the tests' shared rehearsal) is read as it is
        with tempfile.TemporaryDirectory(prefix="bench-storage-local-tiny-") as d:
            return _bench(_rehearse(Path(a.runs or d), steps=2, extra=tuple(TINY)), baseline=a.baseline, reps=1, tiny=True)
    return _bench(_rehearse(Path(a.runs or "/tmp/nbtools-bench/storage-local")), baseline=a.baseline, reps=a.reps)


def _bench(run: Path, *, baseline: str | None, reps: int, tiny: bool = False) -> int:
    trees = {"this tree": str(ROOT)} | ({"baseline": str(Path(baseline).resolve())} if baseline else {})
    rows: dict[str, list[dict]] = {k: [] for k in trees}
    for _ in range(reps):
        for k, tree in trees.items():
            rows[k].append(_child(tree, str(run), tiny=tiny))
    med = {k: {case: statistics.median(r[case] for r in v) for case in v[0]} for k, v in rows.items()}
    print(f"local run {run}; median of {reps} rounds (each a median of {'1 x 2' if tiny else '5 x 200'} calls); load {os.getloadavg()[0]:.1f}")
    print(f"  {'verb':22}" + "".join(f"{k:>14}" for k in trees) + ("   this/baseline" if baseline else ""))
    for case in med["this tree"]:
        cells = "".join(f"{med[k][case] * 1e6:11.1f} us" for k in trees)
        ratio = f"   {med['this tree'][case] / med['baseline'][case]:8.2f}x" if baseline else ""
        print(f"  {case:22}{cells}{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
