"""Issue 45: an error with several problems prints "fix:" exactly once — every problem's own fix on that line, keyed
by its key when they differ — and never "fix: see the message above"; one problem reads as one sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbtools._layout import step_ranges
from nbtools.cli import main

ROOT = Path(__file__).resolve().parents[2]
LOCAL = str(ROOT / "experiments" / "local.yaml")


@pytest.mark.parametrize(("argv", "fix"), [
    (["plan", LOCAL, "grpo.max_num_steps=abc", "grpo.seed=x"], "fix: write a whole number"),
    (["plan", LOCAL, "grpo.max_num_steps=-1", "grpo.seed=x"],
     "fix: grpo.seed: write a whole number; grpo.max_num_steps: use a positive integer"),
    (["fit", LOCAL, "--model", "x"], "fix: drop one of them"),
])
def test_fix_is_printed_once(argv, fix, capfd, tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path))
    assert main(argv) == 1
    err = capfd.readouterr().err
    assert err.count("fix:") == 1 and err.rstrip().endswith(fix), err
    assert "see the message above" not in err and "problem(s)" not in err, err


def test_steps_read_as_ranges():
    assert step_ranges(range(1, 201)) == "1..200" and step_ranges([0, 5, 6, 7, 8, 9, 12]) == "0, 5..9, 12"
    assert step_ranges([]) == "none"
