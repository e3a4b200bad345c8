"""Benchmark: reading a run from a bucket (``gs://``), nbtools vs gcsfs + pandas on the same URLs, side by side.

Why: on GKE the notebooks read the run where the pods wrote it, through gcsfs. The workload is P1's: the ~1 GB run
of benchmarks/gen_nemo_rl_run.py (410 steps x 64 records), uploaded to a real GCS API emulator (fake-gcs-server,
tests/doubles/gcs_emulator.py) on this machine, so the network is loopback: the ratios show what the client side costs
and what caching saves, not the latency of a real bucket (which makes every avoided request worth more).

Rows (each in its own fresh process; NBTOOLS_CACHE_DIR emptied where it says "cold"):
- baseline: ``gcsfs`` + ``pandas.read_json(lines=True)`` per step file URL, then the same 6 columns;
- nbtools cold: ``open_run(url).read()`` with an empty cache (download once + parse + column cache);
- nbtools warm: the same in a new process (one listing; nothing downloaded; columns from the cache);
- record(step, k): baseline = download the step file with gcsfs and take line k; nbtools warm = one
  ``pread`` of the local copy (after one metadata request); nbtools after ``storage.evict`` = one ranged GET
  through the kept index.

Example:
    $ python benchmarks/bench_storage.py                 # generates /tmp/nbtools-bench/run if missing
    $ python benchmarks/bench_storage.py --tiny          # 3 steps x 4 records in a temp dir, once (tests)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
sys.path.insert(0, str(HERE.parent / "tests" / "doubles"))
COLS = ["step", "idx", "prompt", "response", "reward", "generation_length"]
BUCKET = "bench-bucket"
RECORD = (200, 9)  # record(step, k) of the full run; --tiny picks one its 3 x 4 run has


def _checksum(df) -> dict:
    return {"rows": int(len(df)), "gen_sum": int(round(float(df["generation_length"].sum()))),
            "reward_sum": round(float(df["reward"].sum()), 3)}


# ---- methods (each runs in a fresh child process; env holds STORAGE_EMULATOR_HOST) ---------------------------
def m_baseline(url: str) -> dict:
    import re

    import gcsfs
    import pandas as pd

    t = time.perf_counter()
    fs = gcsfs.core.GCSFileSystem(token="anon")
    files = sorted(fs.ls(url.removeprefix("gs://")), key=lambda f: int(re.search(r"step(\d+)", f).group(1)))
    frames = []
    for f in files:
        with fs.open(f, "rb") as fh:
            d = pd.read_json(fh, lines=True)
        frames.append(pd.DataFrame({
            "step": int(re.search(r"step(\d+)", f).group(1)), "idx": d["idx"],
            "prompt": d["content"].map(lambda c: c[0][0]), "response": d["content"].map(lambda c: c[0][1]),
            "reward": d["rewards"].map(lambda r: r[0]), "generation_length": d["token_loss_mask"].map(lambda m: sum(m[0]))}))
    df = pd.concat(frames, ignore_index=True)
    return {"seconds": time.perf_counter() - t, **_checksum(df)}


def m_nbtools(url: str) -> dict:
    from nbtools import trajectories

    t = time.perf_counter()
    df = trajectories.open_run(url).read(columns=COLS)
    return {"seconds": time.perf_counter() - t, **_checksum(df)}


def m_record_baseline(url: str) -> dict:
    import gcsfs

    fs = gcsfs.core.GCSFileSystem(token="anon")
    times = []
    for _ in range(7):
        t = time.perf_counter()
        data = fs.cat_file(f"{url.removeprefix('gs://')}/train_data_step{RECORD[0]}.jsonl")
        rec = json.loads(data.split(b"\n")[RECORD[1]])
        times.append(time.perf_counter() - t)
    return {"seconds": statistics.median(times), "reward": rec["rewards"][0]}


def m_record(url: str) -> dict:
    from nbtools import trajectories

    run = trajectories.open_run(url)
    run.record(*RECORD)  # the first call copies the step file (once per generation)
    times = []
    for _ in range(7):
        t = time.perf_counter()
        rec = run.record(*RECORD)
        times.append(time.perf_counter() - t)
    return {"seconds": statistics.median(times), "reward": float(rec["reward"])}


def m_record_evicted(url: str) -> dict:
    from nbtools import storage, trajectories

    storage.evict(url)
    run = trajectories.open_run(url)
    times = []
    for _ in range(7):
        t = time.perf_counter()
        rec = run.record(*RECORD)
        times.append(time.perf_counter() - t)
    assert not (run.path / f"train_data_step{RECORD[0]}.jsonl").exists(), "evicted copies must stay evicted"
    return {"seconds": statistics.median(times), "reward": float(rec["reward"])}


def _child(method: str, url: str) -> None:
    out = globals()[f"m_{method}"](url)
    print("RESULT " + json.dumps(out), flush=True)


def _run(method: str, url: str, env: dict) -> dict:
    r = subprocess.run([sys.executable, __file__, "--child", method, "--url", url, "--record", *map(str, RECORD)],
                       capture_output=True, text=True, env=env, timeout=3600)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{method} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return json.loads(line[7:])


def main(argv: list[str] | None = None) -> int:
    global RECORD
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="/tmp/nbtools-bench/run", help="local log_dir (generated if missing)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--child")
    ap.add_argument("--url")
    ap.add_argument("--record", type=int, nargs=2, default=list(RECORD), help=argparse.SUPPRESS)
    ap.add_argument("--tiny", action="store_true", help="a 3-step run of 4 records in a temp dir, one repetition: "
                    "every code path in seconds, no figure worth reading (tests/test_benchmarks.py)")
    a = ap.parse_args(argv)
    RECORD = tuple(a.record)
    if a.child:
        _child(a.child, a.url)
        return 0
    if a.tiny:
        from gen_nemo_rl_run import generate

        RECORD = (3, 2)
        with tempfile.TemporaryDirectory(prefix="bench-storage-tiny-") as d:
            generate(Path(d) / "run", steps=3, records=4, seq_len=32)
            return _bench(Path(d) / "run", reps=1)
    return _bench(Path(a.run), reps=a.reps)


def _bench(run: Path, *, reps: int) -> int:
    from gcs_emulator import GcsEmulator

    if not list(run.glob("exp_*")):
        from gen_nemo_rl_run import generate

        print(f"generating the benchmark run in {run} …", flush=True)
        generate(run)
    exp = sorted(run.glob("exp_*"))[-1]
    size = sum(f.stat().st_size for f in exp.glob("train_data_step*.jsonl"))
    with tempfile.TemporaryDirectory(prefix="nbtools-bench-gcs-") as root, GcsEmulator(Path(root) / "gcs") as gcs:
        gcs.create_bucket(BUCKET)
        t = time.perf_counter()
        gcs.fs.put(str(exp), f"{BUCKET}/run/logs/{exp.name}", recursive=True)
        url = f"gs://{BUCKET}/run/logs/{exp.name}"
        print(f"run: {size / 1e9:.2f} GB in {len(list(exp.glob('train_data_step*.jsonl')))} step files, uploaded to "
              f"fake-gcs-server in {time.perf_counter() - t:.1f} s; load {os.getloadavg()[0]:.1f}; reps {reps}",
              flush=True)
        cache = Path(root) / "cache"
        env = {**os.environ, "NBTOOLS_CACHE_DIR": str(cache), "STORAGE_EMULATOR_HOST": gcs.url,
               "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
        rows: dict[str, list[dict]] = {"baseline": [], "cold": [], "warm": []}
        for _ in range(reps):  # round robin: load drifts hit every method alike
            rows["baseline"].append(_run("baseline", url, env))
            shutil.rmtree(cache, ignore_errors=True)
            rows["cold"].append(_run("nbtools", url, env))
            rows["warm"].append(_run("nbtools", url, env))
        checks = {json.dumps({k: r[k] for k in ("rows", "gen_sum", "reward_sum")}) for v in rows.values() for r in v}
        assert len(checks) == 1, f"methods disagree: {checks}"
        med = {k: statistics.median(r["seconds"] for r in v) for k, v in rows.items()}
        print(f"\nfull read of 6 columns ({json.loads(checks.pop())['rows']} rows), median of {reps}:")
        print(f"  {'gcsfs + pandas.read_json (baseline)':42}{med['baseline']:8.2f} s")
        print(f"  {'nbtools cold (download + parse + cache)':42}{med['cold']:8.2f} s   {med['baseline'] / med['cold']:5.1f}x faster")
        print(f"  {'nbtools warm (new process, cached)':42}{med['warm']:8.2f} s   {med['baseline'] / med['warm']:5.1f}x faster")
        rec = {m: _run(m, url, env) for m in ("record_baseline", "record", "record_evicted")}
        assert len({round(r["reward"], 6) for r in rec.values()}) == 1, rec
        b = rec["record_baseline"]["seconds"]
        print(f"\nrecord{RECORD}, median of 7 calls:")
        print(f"  {'gcsfs: download the step file, take line k':42}{b * 1e3:8.2f} ms")
        for m, label in (("record", "nbtools warm (local copy)"), ("record_evicted", "nbtools, copy evicted (byte range)")):
            s = rec[m]["seconds"]
            print(f"  {label:42}{s * 1e3:8.2f} ms   {b / s:5.1f}x faster")
        print(f"\nload at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
