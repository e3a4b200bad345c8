"""Benchmark: nbtools.storage's generation-keyed cache vs fsspec's own caching filesystem, side by side (issue 43).

Why: STYLE and issue 43 ask for a library where one does the job; fsspec ships caching filesystems. The one that can
stand in for nbtools' cache is ``filecache`` (``WholeFileCacheFileSystem``): a persistent local copy per object,
re-validated on each read with ``check_files=True`` (its ``ukey``: a hash of the object's ``info()``, which holds the
GCS generation). ``simplecache`` and ``blockcache`` keep no version and never see a rewritten object from a new
process, so ``filecache`` without ``check_files`` is run too, as what a version-blind cache returns.

The workload is a run directory of N objects in a real GCS API emulator (fake-gcs-server, tests/doubles/gcs_emulator.py)
on this machine: a notebook reads every file of it (``cold``: empty cache; ``warm``: a new process, nothing changed;
``rewritten``: a new process after one object was rewritten, as a restarted run re-writes step N). Each row runs in its
own fresh process; every row's bytes are checked against what the bucket holds (``current``). The network is loopback,
so the ratios show the client side and the requests each cache makes, not a real bucket's latency (which makes every
avoided request worth more).

Example:
    $ python benchmarks/bench_storage_cache.py                 # 128 objects of 1 MB, 3 repetitions
    $ python benchmarks/bench_storage_cache.py --tiny          # 4 objects of 2 KB, once (tests)
"""

from __future__ import annotations

import argparse
import hashlib
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
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
sys.path.insert(0, str(HERE.parent / "tests" / "doubles"))
BUCKET = "bench-cache"
PREFIX = f"{BUCKET}/run/logs"


# ---- methods (each runs in a fresh child process; env holds STORAGE_EMULATOR_HOST) ---------------------------
def m_nbtools(cache: str) -> dict:
    """nbtools: one listing, then only objects whose generation the cache lacks are downloaded (storage.mirror)."""
    os.environ["NBTOOLS_CACHE_DIR"] = cache
    import gcsfs  # noqa: F401 - imported before the clock starts, as in the fsspec rows

    from nbtools import storage

    t = time.perf_counter()
    root = storage.mirror(f"gs://{PREFIX}")
    digest = _digest({p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.suffix == ".jsonl"})
    return {"seconds": time.perf_counter() - t, "digest": digest}


def _fsspec(cache: str, check_files: bool) -> dict:
    import fsspec
    import gcsfs  # noqa: F401 - imported before the clock starts, as in the nbtools row

    t = time.perf_counter()
    fs = fsspec.filesystem("filecache", target_protocol="gs", target_options={"token": "anon"},
                           cache_storage=cache, check_files=check_files)
    files = sorted(f for f in fs.find(PREFIX) if f.endswith(".jsonl"))
    data = fs.cat(files)  # uncached (or changed) objects in one batch get, then each read from its local copy
    digest = _digest({f.rsplit("/", 1)[-1]: data[f] for f in files})
    return {"seconds": time.perf_counter() - t, "digest": digest}


def m_filecache(cache: str) -> dict:
    """fsspec filecache, check_files=True: a persistent copy per object, its info() compared on every read."""
    return _fsspec(cache, True)


def m_filecache_blind(cache: str) -> dict:
    """fsspec filecache as configured by default (no check): what a cache that keeps no version returns."""
    return _fsspec(cache, False)


METHODS = {"nbtools": "nbtools.storage (generation manifest)", "filecache": "fsspec filecache, check_files=True",
           "filecache_blind": "fsspec filecache, no check"}


def _digest(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name])
    return h.hexdigest()[:16]


def _run(method: str, cache: Path, env: dict) -> dict:
    r = subprocess.run([sys.executable, __file__, "--child", method, "--cache", str(cache)],
                       capture_output=True, text=True, env=env, timeout=3600)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{method} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return json.loads(line[7:])


def _bench(objects: int, size: int, reps: int) -> int:
    from gcs_emulator import GcsEmulator

    payload = {f"train_data_step{i}.jsonl": os.urandom(size // 2).hex().encode()[:size] for i in range(1, objects + 1)}
    with tempfile.TemporaryDirectory(prefix="nbtools-bench-cache-") as root, GcsEmulator(Path(root) / "gcs") as gcs:
        gcs.create_bucket(BUCKET)
        fs = gcs.fs
        fs.pipe({f"{PREFIX}/{k}": v for k, v in payload.items()})
        env = {**os.environ, "STORAGE_EMULATOR_HOST": gcs.url, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
        print(f"run: {objects} objects of {size / 1e6:.3f} MB in fake-gcs-server; load {os.getloadavg()[0]:.1f}; "
              f"reps {reps}", flush=True)
        rows: dict[tuple[str, str], list[dict]] = {}
        for rep in range(reps):  # round robin: load drifts hit every method alike
            for method in METHODS:
                cache = Path(root) / "cache" / method
                shutil.rmtree(cache, ignore_errors=True)
                before = _digest(payload)
                for phase in ("cold", "warm"):
                    got = _run(method, cache, env)
                    rows.setdefault((method, phase), []).append({**got, "current": got["digest"] == before})
                step = f"train_data_step{1 + rep % objects}.jsonl"  # a restarted run re-writes one step file
                mark = f"rewritten {rep} {method} ".encode()  # new bytes every time, same size
                payload[step] = mark + payload[step][len(mark):]
                fs.pipe(f"{PREFIX}/{step}", payload[step])
                truth = _digest(payload)
                got = _run(method, cache, env)
                rows.setdefault((method, "rewritten"), []).append({**got, "current": got["digest"] == truth})
        med = {k: statistics.median(r["seconds"] for r in v) for k, v in rows.items()}
        current = {k: all(r["current"] for r in v) for k, v in rows.items()}
        print(f"\nread every object of the run, median of {reps} (each row a fresh process):")
        print(f"  {'method':40}{'cold':>9}{'warm':>9}{'rewritten':>11}   current bytes after a rewrite")
        for m, label in METHODS.items():
            print(f"  {label:40}" + "".join(f"{med[(m, p)]:{w}.3f}" for p, w in (("cold", 9), ("warm", 9),
                                                                                ("rewritten", 11)))
                  + f"   {'yes' if current[(m, 'rewritten')] else 'NO (stale copy served)'}")
        for p in ("cold", "warm", "rewritten"):
            print(f"  fsspec filecache (check_files) / nbtools, {p}: {med[('filecache', p)] / med[('nbtools', p)]:.2f}x")
        assert all(current[(m, p)] for m in ("nbtools", "filecache") for p in ("cold", "warm", "rewritten")), current
        print(f"\nload at the end: {os.getloadavg()[0]:.1f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objects", type=int, default=128)
    ap.add_argument("--size", type=int, default=1 << 20, help="bytes per object")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--child", choices=sorted(METHODS))
    ap.add_argument("--cache")
    ap.add_argument("--tiny", action="store_true", help="4 objects of 2 KB, one repetition: every code path in "
                    "seconds, no figure worth reading (tests/test_benchmarks.py)")
    a = ap.parse_args(argv)
    if a.child:
        print("RESULT " + json.dumps(globals()[f"m_{a.child}"](a.cache)), flush=True)
        return 0
    if a.tiny:
        return _bench(4, 2048, 1)
    return _bench(a.objects, a.size, a.reps)


if __name__ == "__main__":
    sys.exit(main())
