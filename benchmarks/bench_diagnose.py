"""Benchmark: ``nbtools.launch.diagnose_log`` on one huge log line (issue 31: a 1 MB line took 74 s, 8 MB > 2 min).

    .venv/bin/python benchmarks/bench_diagnose.py            # 1 MB and 8 MB lines, 3 repeats each, median shown
    .venv/bin/python benchmarks/bench_diagnose.py --tiny     # a 64 KB line once: the code path, no figure (tests)

The line repeats "gloo " (the shape that made ``gloo.*Connection`` backtrack) and the log ends with a real
"Connection reset by peer" line; each repeat runs in this process (the import is not timed).
"""

from __future__ import annotations

import argparse
import statistics
import time

from nbtools.launch import diagnose_log


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="one 64 KB line, once (seconds; tests/test_benchmarks.py)")
    a = ap.parse_args(argv)
    sizes, repeats = ((64 << 10,), 1) if a.tiny else ((1 << 20, 8 << 20), 3)
    for size in sizes:
        line = ("gloo " * (size // 5))[:size]
        log = f"step 3\n{line}\nRuntimeError: gloo Connection reset by peer"
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            d = diagnose_log(log)
            times.append(time.perf_counter() - t0)
        print(f"{size / (1 << 20):g} MB line: {statistics.median(times) * 1000:.1f} ms median of {repeats} (cause {d.cause})")


if __name__ == "__main__":
    main()
