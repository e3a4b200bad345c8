"""Benchmark: the health checks' false alarms on healthy runs and detection step on broken ones (the labelled corpus).

Why: users distrust checks with an unknown false-alarm rate (verl#7004). The corpus (``tests/assets/health-corpus``,
made by ``tools/make_health_corpus.py`` with the local rehearsal) labels each run healthy or broken-for-a-check; each
run is checked with the config it ran with (so the checks read its own reward functions and generation limit). A
*false alarm* is a warning or unhealthy finding on a healthy run (``solved`` is a result, not an alarm); a broken
run is *detected* when its check is unhealthy or a warning, at the step the check names.

``--tiny`` (what ``tests/health/test_corpus.py`` runs) prints the table and exits 1 on any false alarm or miss.

Example:
    $ python benchmarks/bench_health_corpus.py --tiny
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "assets" / "health-corpus"


def checks_of(spec: dict) -> list[str]:
    """The checks a broken run must trip (``check``: one name or a list)."""
    c = spec.get("check") or []
    return [c] if isinstance(c, str) else list(c)


def evaluate(corpus: Path = CORPUS) -> dict:
    """{"runs": {name: {check: (status, first_step)}}, "false_alarms": {check: [run]},
    "detected": {run: {check: step|None}}}."""
    from nbtools import health
    from nbtools.rehearsal.trainer import load_config

    labels = json.loads((corpus / "labels.json").read_text())
    runs, alarms, detected = {}, {c: [] for c in health.CHECKS}, {}
    for name, spec in sorted(labels.items()):
        cfg = load_config(str(ROOT / "experiments" / "local.yaml"), spec["overrides"], None)
        with tempfile.TemporaryDirectory() as tmp:  # the readers' caches go beside the data: never into the corpus
            logs = shutil.copytree(corpus / name / "logs", Path(tmp) / "logs")
            report = health.check(logs, config=cfg)
        runs[name] = {c.check: (c.status, c.first_step) for c in report.checks}
        if spec["label"] == "healthy":
            for c in report.checks:
                if c.status in ("warning", "unhealthy"):
                    alarms[c.check].append(name)
        else:
            detected[name] = {}
            for check in checks_of(spec):
                status, step = runs[name][check]
                detected[name][check] = step if status in ("warning", "unhealthy") else None
    return {"labels": labels, "runs": runs, "false_alarms": alarms, "detected": detected}


def table(result: dict) -> str:
    labels = result["labels"]
    healthy = [n for n, s in labels.items() if s["label"] == "healthy"]
    lines = [f"{'check':<18} {'false alarms':>14}  detection (broken run: step)"]
    for check, bad in result["false_alarms"].items():
        det = result["detected"]
        found = [f"{n}: " + ("MISSED" if det[n][check] is None else f"step {det[n][check]}")
                 for n, s in labels.items() if check in checks_of(s)]
        lines.append(f"{check:<18} {len(bad):>6} of {len(healthy):<5}  {', '.join(found) or '-'}"
                     + (f"  (alarms: {', '.join(bad)})" if bad else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="the committed corpus only; exit 1 on a false alarm or a miss")
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args(argv)
    result = evaluate(a.corpus)
    print(json.dumps(result, default=str) if a.json else table(result))
    bad = any(result["false_alarms"].values()) or any(v is None for d in result["detected"].values() for v in d.values())
    return 1 if bad and a.tiny else 0


if __name__ == "__main__":
    sys.exit(main())
