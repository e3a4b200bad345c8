"""Benchmark: ``nbtools.health.check`` over the ~1 GB NeMo-RL run (26,240 records) vs reading its columns.

Why: health is meant to run every minute beside a live run; it reads the records' columns once (step, idx, prompt,
response, reward, generation_length), the TensorBoard scalars, and a few records' per-token arrays when the run logs
no ``train/token_mult_prob_error``. Goal: no more than 2× the time of reading those columns.

Each method runs in its own fresh process (round-robin repetitions, warm page cache), timed in-process after
imports; both cold (``cache=False``: every file parsed) and warm (the column cache beside the data). The run is
``gen_nemo_rl_run.generate(..., steps=410, records=64, tensorboard=True)`` (NeMo-RL's record shape, ~38 KB each).

``--rehearsal-seeds 0 1 2`` also runs the healthy local rehearsal once per seed (``grpo.max_num_steps`` 12, like
``tests/integration/test_health_rehearsal.py``) and prints each run's health: the test runs one seed, this runs three.

Example:
    $ python benchmarks/bench_health.py                         # generates /tmp/nbtools-bench/run-health if missing
    $ python benchmarks/bench_health.py --reps 1 --rehearsal-seeds 0 1 2
    $ python benchmarks/bench_health.py --tiny                  # 3 steps x 4 records in a temp dir, once (tests)
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
COLS = ["step", "idx", "prompt", "response", "reward", "generation_length"]


def m_columns(log_dir: str, cache: bool) -> dict:
    from nbtools import trajectories

    t = time.perf_counter()
    df = trajectories.open_run(log_dir, cache=cache).read(columns=COLS)
    return {"s": time.perf_counter() - t, "rows": len(df)}


def m_health(log_dir: str, cache: bool) -> dict:
    from nbtools import health

    t = time.perf_counter()
    report = health.check(log_dir, cache=cache)
    return {"s": time.perf_counter() - t, "status": report.status, "steps": list(report.steps),
            "unhealthy": [c.check for c in report.unhealthy]}


METHODS = {"columns": m_columns, "health": m_health}


def _child(method: str, log_dir: str, cache: bool) -> dict:
    code = (f"import json, sys; sys.path.insert(0, {str(HERE)!r}); import bench_health as b; "
            f"print(json.dumps(b.METHODS[{method!r}]({log_dir!r}, {cache!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ensure_run(path: Path, steps: int = 410, **shape) -> Path:
    if (path / "exp_001" / f"train_data_step{steps}.jsonl").exists():
        return path
    sys.path.insert(0, str(HERE))
    from gen_nemo_rl_run import generate

    t = time.perf_counter()
    generate(path, steps=steps, records=shape.pop("records", 64), tensorboard=True, **shape)
    print(f"generated {path} in {time.perf_counter() - t:.1f} s")
    return path


def _seeds(seeds: list[int]) -> None:
    from nbtools import health

    for seed in seeds:
        with tempfile.TemporaryDirectory(prefix="bench-health-") as d:
            cmd = [sys.executable, "-m", "nbtools.rehearsal", "--config", str(ROOT / "experiments" / "local.yaml"),
                   "--runs-dir", d, "grpo.max_num_steps=12", "grpo.val_period=4", "checkpointing.save_period=100",
                   f"grpo.seed={seed}"]
            t = time.perf_counter()
            subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
            report = health.check(Path(d) / "local-rehearsal" / "logs")
            print(f"rehearsal seed {seed}: {report.summary()}  ({time.perf_counter() - t:.0f} s)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="/tmp/nbtools-bench/run-health", help="log_dir (generated when missing)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rehearsal-seeds", type=int, nargs="*", default=[])
    ap.add_argument("--tiny", action="store_true", help="a 3-step run of 4 records in a temp dir, one repetition: "
                    "every code path in seconds, no figure worth reading (tests/test_benchmarks.py)")
    a = ap.parse_args(argv)
    if a.tiny:
        with tempfile.TemporaryDirectory(prefix="bench-health-tiny-") as d:
            return _bench(_ensure_run(Path(d) / "run", steps=3, records=4, seq_len=32), reps=1, seeds=a.rehearsal_seeds)
    return _bench(_ensure_run(Path(a.run)), reps=a.reps, seeds=a.rehearsal_seeds)


def _bench(log_dir: Path, *, reps: int, seeds: list[int]) -> int:
    files = list((log_dir / "exp_001").glob("train_data_step*.jsonl"))
    size = sum(f.stat().st_size for f in files)
    print(f"run: {log_dir} ({len(files)} files, {size / 1e9:.2f} GB); cores: {os.cpu_count()}; "
          f"load average: {os.getloadavg()[0]:.1f}")
    _child("columns", str(log_dir), True)  # writes the column cache for the warm rows
    times: dict[tuple[str, bool], list[float]] = {}
    info: dict[str, dict] = {}
    for _ in range(reps):
        for cache in (False, True):
            for m in METHODS:
                r = _child(m, str(log_dir), cache)
                times.setdefault((m, cache), []).append(r["s"])
                info[m] = r
    print(f"{'read':<8} {'columns (s)':>12} {'health (s)':>11} {'ratio':>6}   (median of {reps}; goal ratio <= 2)")
    for cache in (False, True):
        c, h = statistics.median(times[("columns", cache)]), statistics.median(times[("health", cache)])
        print(f"{'warm' if cache else 'cold':<8} {c:>12.2f} {h:>11.2f} {h / c:>6.2f}")
    print(f"rows: {info['columns']['rows']}; health: {info['health']['status']}, steps {info['health']['steps']}, "
          f"unhealthy: {info['health']['unhealthy'] or 'none'}")
    if seeds:
        _seeds(seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
