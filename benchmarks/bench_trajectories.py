"""Benchmark: read step, idx, prompt, response, reward, generation length of a ~1 GB NeMo-RL run, side by side.

Why: the trajectory reader must beat the obvious tools on the dumps a real run writes. Every method runs in
its own fresh process (round-robin repetitions, warm page cache); time is measured in-process after imports
(shell tools: wall time); "CPU s" is user+sys of the whole process (imports and pool workers included: a
contention-robust view); peak RSS comes from ``os.wait4`` ``ru_maxrss`` of that process (for a process pool:
the largest process; the "Σ RSS" column adds the pool workers' peak for a conservative total). All Python
methods must produce identical checksums (rows, sum of generation lengths, sum of rewards).

Methods: cat (floor), pandas.read_json(lines=True) per file, jq, orjson per line, polars scan_ndjson,
msgspec Struct of the needed fields (decode_lines), and nbtools: cold (no cache; both cores), cold with every
column, first open that writes the column cache, second open from the cache; plus index build and record k of
step N on the full run and on a 10-step copy (size independence).

Example:
    $ python benchmarks/bench_trajectories.py                    # generates /tmp/nbtools-bench/run if missing
    $ python benchmarks/bench_trajectories.py --reps 1 --run /path/to/log_dir
    $ python benchmarks/bench_trajectories.py --tiny             # 12 steps x 16 records in a temp dir, once (tests)
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
COLS = ["step", "idx", "prompt", "response", "reward", "generation_length"]
_STEP = re.compile(r"train_data_step(\d+)\.jsonl$")


def _files(exp: str) -> list[str]:
    return sorted(glob.glob(os.path.join(exp, "train_data_step*.jsonl")), key=lambda f: int(_STEP.search(f).group(1)))


def _check(rows: int, gen_sum: float, reward_sum: float) -> dict:
    return {"rows": int(rows), "gen_sum": int(round(gen_sum)), "reward_sum": round(float(reward_sum), 3)}


# ---- methods (each runs in a fresh child process) ------------------------------------------------------------
def m_pandas(exp):
    import pandas as pd

    t = time.perf_counter()
    frames = []
    for f in _files(exp):
        d = pd.read_json(f, lines=True)
        frames.append(pd.DataFrame({
            "step": int(_STEP.search(f).group(1)), "idx": d["idx"],
            "prompt": d["content"].map(lambda c: c[0][0]), "response": d["content"].map(lambda c: c[0][1]),
            "reward": d["rewards"].map(lambda r: r[0]), "generation_length": d["token_loss_mask"].map(lambda m: sum(m[0]))}))
    df = pd.concat(frames, ignore_index=True)
    return time.perf_counter() - t, _check(len(df), df.generation_length.sum(), df.reward.sum())


def m_pandas_concat_map(exp):
    """perf-baselines.md's exact pandas method: read_json per file, concat the whole frames, then .map (≈4 GB RSS)."""
    import pandas as pd

    t = time.perf_counter()
    frames = []
    for f in _files(exp):
        d = pd.read_json(f, lines=True)
        d["step"] = int(_STEP.search(f).group(1))
        frames.append(d)
    d = pd.concat(frames, ignore_index=True)
    df = pd.DataFrame({
        "step": d["step"], "idx": d["idx"],
        "prompt": d["content"].map(lambda c: c[0][0]), "response": d["content"].map(lambda c: c[0][1]),
        "reward": d["rewards"].map(lambda r: r[0]), "generation_length": d["token_loss_mask"].map(lambda m: sum(m[0]))})
    return time.perf_counter() - t, _check(len(df), df.generation_length.sum(), df.reward.sum())


def m_orjson(exp):
    import orjson
    import pandas as pd

    t = time.perf_counter()
    cols = {c: [] for c in COLS}
    for f in _files(exp):
        step = int(_STEP.search(f).group(1))
        with open(f, "rb") as fh:
            for line in fh:
                r = orjson.loads(line)
                c = r["content"][0]
                cols["step"].append(step)
                cols["idx"].append(r["idx"])
                cols["prompt"].append(c[0])
                cols["response"].append(c[1])
                cols["reward"].append(r["rewards"][0])
                cols["generation_length"].append(sum(r["token_loss_mask"][0]))
    df = pd.DataFrame(cols)
    return time.perf_counter() - t, _check(len(df), df.generation_length.sum(), df.reward.sum())


def m_msgspec(exp):
    import msgspec
    import pandas as pd

    class Rec(msgspec.Struct):
        content: list[list[str]]
        rewards: list[float]
        token_loss_mask: list[list[int]]
        idx: int

    dec = msgspec.json.Decoder(Rec)
    t = time.perf_counter()
    cols = {c: [] for c in COLS}
    for f in _files(exp):
        step = int(_STEP.search(f).group(1))
        with open(f, "rb") as fh:
            recs = dec.decode_lines(fh.read())
        for r in recs:
            cols["step"].append(step)
            cols["idx"].append(r.idx)
            cols["prompt"].append(r.content[0][0])
            cols["response"].append(r.content[0][1])
            cols["reward"].append(r.rewards[0])
            cols["generation_length"].append(sum(r.token_loss_mask[0]))
    df = pd.DataFrame(cols)
    return time.perf_counter() - t, _check(len(df), df.generation_length.sum(), df.reward.sum())


def m_polars(exp):
    import polars as pl

    t = time.perf_counter()
    df = (pl.scan_ndjson(_files(exp), include_file_paths="path", infer_schema_length=64)
          .select(pl.col("path").str.extract(r"step(\d+)\.jsonl$").cast(pl.Int64).alias("step"), pl.col("idx"),
                  pl.col("content").list.first().list.get(0).alias("prompt"),
                  pl.col("content").list.first().list.get(1).alias("response"),
                  pl.col("rewards").list.first().alias("reward"),
                  pl.col("token_loss_mask").list.first().list.sum().alias("generation_length"))
          .collect())
    return time.perf_counter() - t, _check(df.height, df["generation_length"].sum(), df["reward"].sum())


def _nbtools(exp, **kw):
    from nbtools import trajectories

    t = time.perf_counter()
    df = trajectories.open_run(exp, cache=kw.pop("cache", False)).read(progress=False, **kw)
    return time.perf_counter() - t, _check(len(df), df.generation_length.sum(), df.reward.sum())


def m_nbtools(exp):
    return _nbtools(exp, columns=COLS)


def m_nbtools_all_columns(exp):
    return _nbtools(exp)


def m_nbtools_first_open(exp):
    shutil.rmtree(os.path.join(exp, ".nbtools"), ignore_errors=True)
    return _nbtools(exp, cache=True, columns=COLS)


def m_nbtools_second_open(exp):
    return _nbtools(exp, cache=True, columns=COLS)


def m_index(exp):
    from nbtools import trajectories

    run = trajectories.open_run(exp, cache=False)
    t = time.perf_counter()
    n = sum(run.index(s).n_lines for s in run.steps)
    return time.perf_counter() - t, {"rows": n}


def m_record(exp):
    """Median time of open_run + record(N, k) (index from the on-disk cache, built on the first call)."""
    from nbtools import trajectories

    steps = trajectories.open_run(exp).steps
    picks = [(steps[i * 7919 % len(steps)], i * 13 % 16) for i in range(15)]
    trajectories.open_run(exp).record(*picks[0])  # make sure the index cache exists
    times, cold = [], []
    for s, k in picks:
        t = time.perf_counter()
        trajectories.open_run(exp).record(s, k)
        times.append(time.perf_counter() - t)
        t = time.perf_counter()
        trajectories.open_run(exp, cache=False).record(s, k)  # no cache at all: index that one file now
        cold.append(time.perf_counter() - t)
    return statistics.median(times), {"no_cache_ms": round(statistics.median(cold) * 1e3, 2)}


METHODS = {
    "pandas": m_pandas, "pandas_concat_map": m_pandas_concat_map, "orjson": m_orjson, "msgspec": m_msgspec, "polars": m_polars,
    "nbtools": m_nbtools, "nbtools_all_columns": m_nbtools_all_columns,
    "nbtools_first_open": m_nbtools_first_open, "nbtools_second_open": m_nbtools_second_open,
}


def _child(method: str, exp: str) -> None:
    fn = {**METHODS, "index": m_index, "record": m_record}[method]
    seconds, check = fn(exp)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"seconds": seconds, "check": check, "workers_rss_kb": workers}))


def run_python(method: str, exp: str) -> dict:
    p = subprocess.Popen([sys.executable, __file__, "--child", method, "--run", exp], stdout=subprocess.PIPE,
                         env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    if status != 0:
        raise RuntimeError(f"{method} failed with status {status}")
    res = json.loads(out.decode().strip().splitlines()[-1])
    res["rss_mb"] = ru.ru_maxrss * 1024 / 1e6
    res["cpu_s"] = ru.ru_utime + ru.ru_stime  # whole process incl. pool workers and imports
    res["sum_rss_mb"] = (ru.ru_maxrss + res.pop("workers_rss_kb")) * 1024 / 1e6
    return res


def run_shell(cmd: str) -> dict:
    t = time.perf_counter()
    p = subprocess.Popen(["bash", "-c", cmd])
    _, status, ru = os.wait4(p.pid, 0)
    return {"seconds": time.perf_counter() - t, "rss_mb": ru.ru_maxrss * 1024 / 1e6, "check": {}, "ok": status == 0,
            "cpu_s": ru.ru_utime + ru.ru_stime}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="/tmp/nbtools-bench/run", help="log_dir or exp dir (generated if missing)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of the fast methods (round-robin)")
    ap.add_argument("--slow-reps", type=int, default=1, help="repetitions of pandas and jq (≈20 s each)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--tiny", action="store_true", help="a 12-step run of 16 records in a temp dir, one repetition: "
                    "every method in seconds, no figure worth reading (tests/test_benchmarks.py)")
    a = ap.parse_args(argv)
    if a.child:
        _child(a.child, a.run)
        return 0
    if a.tiny:
        sys.path.insert(0, str(HERE))
        from gen_nemo_rl_run import generate

        with tempfile.TemporaryDirectory(prefix="bench-trajectories-tiny-") as d:
            generate(Path(d) / "run", steps=12, records=16, seq_len=32)  # record() picks k < 16
            a.run, a.reps, a.slow_reps = str(Path(d) / "run"), 1, 1
            return _bench(a)
    return _bench(a)


def _bench(a: argparse.Namespace) -> int:
    if not glob.glob(os.path.join(a.run, "exp_*")) and not _files(a.run):
        sys.path.insert(0, str(HERE))
        from gen_nemo_rl_run import generate

        print(f"generating the benchmark run in {a.run} …", flush=True)
        generate(a.run)
    exp = a.run if _files(a.run) else sorted(glob.glob(os.path.join(a.run, "exp_*")))[-1]
    files = _files(exp)
    size = sum(os.path.getsize(f) for f in files)
    quoted = " ".join(f"'{f}'" for f in files)
    shell = {
        "cat (floor)": f"cat {quoted} > /dev/null",
        "jq": "jq -c '{step: input_filename, idx, prompt: .content[0][0], response: .content[0][1], "
              f"reward: .rewards[0], gen: (.token_loss_mask[0] | add)}}' {quoted} > /dev/null",
    }
    order = ["cat (floor)", "pandas", "pandas_concat_map", "jq", "orjson", "polars", "msgspec", "nbtools", "nbtools_all_columns",
             "nbtools_first_open", "nbtools_second_open"]
    missing = [m for m in ("orjson", "polars", "msgspec") if importlib.util.find_spec(m) is None]
    missing += ["jq"] if shutil.which("jq") is None else []
    if missing and not a.tiny:
        sys.exit(f"the benchmark compares against {', '.join(missing)}, not installed here: pip install -e '.[bench]' "
                 "(and jq from the system's packages)")
    if missing:  # the tiny mode checks nbtools' paths with the test extras only ('.[bench]' is not installed for tests)
        print(f"tiny mode: leaving out {', '.join(missing)} (not installed)", flush=True)
        order = [m for m in order if m not in missing]
    results: dict[str, list[dict]] = {m: [] for m in order}
    print(f"run: {exp}: {len(files)} files, {size:,} bytes; {os.cpu_count()} cores; reps {a.reps}", flush=True)
    for rep in range(a.reps):
        for m in order:
            if m in ("pandas", "pandas_concat_map", "jq") and rep >= a.slow_reps:
                continue
            res = run_shell(shell[m]) if m in shell else run_python(m, exp)
            results[m].append(res)
            print(f"  rep {rep + 1} {m:<22} {res['seconds']:7.3f} s  {res['rss_mb']:7.0f} MB  {res['check']}", flush=True)
    checks = {json.dumps(r["check"], sort_keys=True) for m in order for r in results[m] if r["check"]}
    med = {m: statistics.median(r["seconds"] for r in results[m]) for m in order}
    best = {m: min(r["seconds"] for r in results[m]) for m in order}
    rss = {m: max(r["rss_mb"] for r in results[m]) for m in order}
    srss = {m: max(r.get("sum_rss_mb", r["rss_mb"]) for r in results[m]) for m in order}
    cpu = {m: statistics.median(r["cpu_s"] for r in results[m]) for m in order}
    nb = med["nbtools"]
    print(f"\nchecksums identical across Python methods: {len(checks) == 1} {sorted(checks)}")
    print("\n| method | s min / med | MB/s (med) | records/s (med) | peak RSS MB | Σ RSS MB | CPU s (med) | med ÷ nbtools |")
    print("|---|---|---|---|---|---|---|---|")
    rows = json.loads(next(iter(checks)))["rows"] if checks else 0
    for m in order:
        print(f"| {m} | {best[m]:.3f} / {med[m]:.3f} | {size / 1e6 / med[m]:,.0f} | {rows / med[m]:,.0f} | "
              f"{rss[m]:,.0f} | {srss[m]:,.0f} | {cpu[m]:.2f} | {med[m] / nb:.2f} |")
    idx = run_python("index", exp)
    small = Path(a.run).parent / "small-copy" / "exp_001"
    if not small.is_dir():
        small.mkdir(parents=True)
        for f in files[:10]:
            shutil.copy(f, small)
    rec_big, rec_small = run_python("record", exp), run_python("record", str(small))
    print(f"\nindex of all {len(files)} files (no cache): {idx['seconds']:.3f} s = {idx['seconds'] / (size / 1e9):.3f} s/GB "
          f"= {idx['seconds'] / med['cat (floor)']:.2f}× cat")
    print(f"open_run + record(N, k), median of 15: {rec_big['seconds'] * 1e3:.2f} ms on {len(files)} steps vs "
          f"{rec_small['seconds'] * 1e3:.2f} ms on 10 steps (no cache at all: {rec_big['check']['no_cache_ms']} / "
          f"{rec_small['check']['no_cache_ms']} ms)")
    libs = [m for m in ("pandas", "jq", "orjson", "polars", "msgspec") if m in med]
    print("\ngoals:")
    print(f"  nbtools ≤ pandas/20: {nb:.3f} s vs {med['pandas'] / 20:.3f} s → pandas/nbtools = {med['pandas'] / nb:.1f}× "
          f"(projecting per file); the reference's concat-then-map pandas: {med['pandas_concat_map'] / nb:.1f}× "
          f"at {rss['pandas_concat_map']:.0f} MB")
    print(f"  faster than every library: {all(nb < med[m] for m in libs)} "
          f"({', '.join(f'{m} {med[m] / nb:.1f}×' for m in libs)})")
    print(f"  peak RSS ≤ 500 MB: {rss['nbtools']:.0f} MB (Σ with workers {srss['nbtools']:.0f} MB)")
    print(f"  second open ≤ 0.2 s: {med['nbtools_second_open']:.3f} s")
    print(f"  record < 5 ms and size-independent: {rec_big['seconds'] * 1e3:.2f} ms vs {rec_small['seconds'] * 1e3:.2f} ms")
    print(f"  index ≤ 0.5 s/GB: {idx['seconds'] / (size / 1e9):.3f} s/GB")
    print(f"  nbtools / cat floor = {nb / med['cat (floor)']:.1f}×; CPU seconds pandas/nbtools = "
          f"{cpu['pandas'] / cpu['nbtools']:.1f}×, msgspec/nbtools = {cpu.get('msgspec', float('nan')) / cpu['nbtools']:.1f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
