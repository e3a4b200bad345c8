"""Say which verl releases the oracle tests ran (the fixture of test_verl_oracle.py writes one line per release)."""

from __future__ import annotations

import os
from pathlib import Path


def pytest_terminal_summary(terminalreporter):
    runs = os.environ.get("NBTOOLS_RUNS_DIR")
    path = Path(runs) / "verl-oracle-releases.txt" if runs else None
    if path is not None and path.is_file():
        terminalreporter.write_sep("=", "verl oracle: releases whose own code ran")
        terminalreporter.write(path.read_text())
