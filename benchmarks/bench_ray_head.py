"""Local Ray head: time until the Jobs API answers, memory of the head, time to stop it.

Measured side by side against the baseline a user would otherwise reach for: ``ray.init(include_dashboard=True)``
in a fresh Python process (a head owned by that driver, stopped with ``ray.shutdown()``). Ratios > 1 mean nbtools
is slower / bigger. Run once, briefly:

    $ .venv/bin/python benchmarks/bench_ray_head.py
    $ .venv/bin/python benchmarks/bench_ray_head.py --tiny   # one head (nbtools', 1 CPU), the baseline driver
                                                              # connecting to it: what tests/test_benchmarks.py runs

Tiny mode runs every line of both sides but starts one head, not two (a head costs ~15 CPU-s; a tiny run measures
nothing anyway): the baseline's ``ray.init`` connects to nbtools' head instead of starting its own.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_BASELINE = r"""
import json, sys, time
t0 = time.perf_counter()
import ray
from ray.job_submission import JobSubmissionClient
if len(sys.argv) > 4:  # --tiny: connect to the head given (GCS address), start none
    ctx = ray.init(address=sys.argv[4], configure_logging=False)
else:
    ctx = ray.init(include_dashboard=True, dashboard_host="127.0.0.1", dashboard_port=int(sys.argv[1]),
                   num_cpus=int(sys.argv[3]), _temp_dir=sys.argv[2], configure_logging=False)
JobSubmissionClient(f"http://{ctx.dashboard_url}").list_jobs()
ready = time.perf_counter() - t0
import psutil
me = psutil.Process()
procs = [me, *me.children(recursive=True)]
rss = sum(p.memory_info().rss for p in procs)
uss = sum(p.memory_full_info().uss for p in procs)
t1 = time.perf_counter()
ray.shutdown()
print(json.dumps({"ready_s": ready, "rss": rss, "uss": uss, "procs": len(procs), "stop_s": time.perf_counter() - t1}))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def bench_nbtools(runs: Path, cpus: int = 2, *, while_up=None) -> dict:
    """nbtools' head: start, Jobs API, resources, re-attach, stop; ``while_up(gcs_address)`` runs before the stop."""
    import nbtools
    from nbtools._ports import free_ports

    os.environ["NBTOOLS_RUNS_DIR"] = str(runs)
    gcs, dashboard = free_ports(2)  # distinct, and outside Ray's worker port range
    cfg = nbtools.config.load(ROOT / "experiments" / "local.yaml", backend="local",
                              overrides={"ray.port": gcs, "ray.dashboard_port": dashboard, "ray.num_cpus": cpus})
    t0 = time.perf_counter()
    head = nbtools.backends.get(cfg).up(timeout=600, progress=False)
    nbtools.jobs.list_jobs(head.dashboard_url)
    ready = time.perf_counter() - t0
    res = head.resources()
    t1 = time.perf_counter()
    again = nbtools.backends.get(cfg).up()
    reattach = time.perf_counter() - t1
    assert again.pid == head.pid
    if while_up is not None:
        while_up(f"127.0.0.1:{gcs}")
    t2 = time.perf_counter()
    nbtools.backends.get(cfg).down()
    return {"ready_s": ready, "reattach_s": reattach, "rss": res.head_rss_bytes, "uss": res.head_uss_bytes,
            "procs": res.head_processes, "stop_s": time.perf_counter() - t2}


def bench_baseline(tmp: Path, cpus: int = 2, address: str | None = None) -> dict:
    """``ray.init`` in a fresh process: a head of its own, or (``address``) a driver connecting to that head."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}  # like nbtools' head; never writes ~/.ray/auth_token
    out = subprocess.run([sys.executable, "-c", _BASELINE, str(_free_port()), str(tmp), str(cpus),
                          *([address] if address else [])],
                         capture_output=True, text=True, timeout=900, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="one head with 1 CPU, the baseline driver connecting to it "
                    "(tests/test_benchmarks.py)")
    tiny = ap.parse_args(argv).tiny
    cpus = 1 if tiny else 2
    with tempfile.TemporaryDirectory(prefix="bench-ray-", dir="/tmp") as d:
        got: dict = {}
        if tiny:
            ours = bench_nbtools(Path(d) / "runs", cpus,
                                 while_up=lambda gcs: got.update(bench_baseline(Path(d) / "init", cpus, address=gcs)))
            base = got
        else:
            ours = bench_nbtools(Path(d) / "runs", cpus)
            base = bench_baseline(Path(d) / "init", cpus)
    gib = 2**30
    print(f"{'':28}{'backends.get(cfg).up()':>20}{'ray.init (baseline)':>22}{'ratio':>8}")
    for key, label, scale, unit in [("ready_s", "start → Jobs API answers", 1, "s"), ("rss", "head RSS (sum)", gib, "GiB"),
                                    ("uss", "head USS (unique)", gib, "GiB"), ("stop_s", "stop, verified", 1, "s")]:
        a, b = ours[key] / scale, base[key] / scale
        print(f"{label:28}{a:>17.2f} {unit:<3}{b:>18.2f} {unit:<3}{a / b:>8.2f}")
    print(f"{'processes':28}{ours['procs']:>20}{base['procs']:>22}")
    print(f"re-attach (second up): {ours['reattach_s'] * 1000:.0f} ms, no second head")
    if tiny:
        print("baseline: a driver connected to nbtools' head (--tiny starts one head), not a head of its own")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (numbers taken under contention)")


if __name__ == "__main__":
    main()
