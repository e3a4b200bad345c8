"""The health checks' false-alarm rate on the labelled corpus (``tests/assets/health-corpus``, made by the local
rehearsal with ``tools/make_health_corpus.py``): no warning on a healthy run, every broken run caught by its check.
This is ``benchmarks/bench_health_corpus.py --tiny``."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "assets" / "health-corpus"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_health_corpus", ROOT / "benchmarks" / "bench_health_corpus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_corpus_is_labelled_and_covers_healthy_and_broken_runs():
    labels = json.loads((CORPUS / "labels.json").read_text())
    assert sum(s["label"] == "healthy" for s in labels.values()) >= 3
    assert {s["check"] for s in labels.values() if s["label"] == "broken"} >= {"zero-reward", "truncation", "answer-format"}
    assert all((CORPUS / n / "logs").is_dir() for n in labels) and (CORPUS / "SOURCE").is_file()


def test_no_false_alarm_on_healthy_runs_and_every_broken_run_detected(capsys):
    bench = _bench()
    assert bench.main(["--tiny"]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "MISSED" not in out and "false alarms" in out
    result = bench.evaluate(CORPUS)
    assert not any(result["false_alarms"].values()), result["false_alarms"]
    assert all(step is not None for step in result["detected"].values()), result["detected"]
