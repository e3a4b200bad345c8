"""``rehearsal.faults``: typed, validated with every problem at once, and injected where the config says."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nbtools.config import FaultConfig, load
from nbtools.errors import ConfigError
from nbtools.rehearsal._faults import Injector

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "experiments" / "local.yaml"


def test_faults_are_typed_and_default_to_none():
    cfg = load(LOCAL, overrides={"rehearsal.faults": [{"kind": "hang", "rank": 1, "step": 3, "phase": "refit"}]})
    assert cfg.rehearsal.faults == [FaultConfig(kind="hang", rank=1, step=3, phase="refit")]
    assert load(LOCAL).rehearsal.faults == []
    assert load(LOCAL).stall.k > 1 and load(LOCAL).stall.floor_s > 0


def test_bad_faults_are_reported_at_once_with_fixes():
    with pytest.raises(ConfigError) as e:
        load(LOCAL, overrides={"rehearsal.faults": [
            {"kind": "hnag", "rank": 0, "step": 1},
            {"kind": "hang", "rank": 2, "step": 999},
            {"kind": "exit", "step": 7, "phase": "checkpoint"},
            {"kind": "slow", "seconds": 0, "phase": "disk"},
        ]})
    text = str(e.value)
    assert "rehearsal.faults[0].kind: 'hnag' is not allowed" in text and "did you mean 'hang'" in text
    assert "rehearsal.faults[1].rank: 2 is not a rank of this run" in text and "fix: e.g. `rank: 1`" in text
    assert "rehearsal.faults[1].step: 999 is not a step the run reaches" in text
    assert "rehearsal.faults[2]: phase 'checkpoint' at step 7, but no checkpoint is saved" in text
    assert "rehearsal.faults[3].phase: 'disk' is not allowed" in text


def test_injector_acts_only_on_its_rank_step_and_phase(capsys):
    f = [FaultConfig(kind="oom", rank=1, step=3, phase="train"), FaultConfig(kind="slow", rank=1, step=2, phase="refit",
                                                                              seconds=0.01)]
    Injector(f, rank=0).at(3, "train")  # another rank: nothing
    inj = Injector(f, rank=1)
    inj.at(2, "train")
    inj.at(3, "generation")
    import torch

    with pytest.raises(torch.OutOfMemoryError, match="CUDA out of memory"):
        inj.at(3, "train")
    inj.at(5, "refit")  # slow: from its step on
    assert capsys.readouterr().err.count("slow in refit") == 1


def test_exit_aborts_the_process_and_faulthandler_shows_the_phase():
    code = textwrap.dedent("""
        import faulthandler
        from nbtools.config import FaultConfig
        from nbtools.rehearsal._faults import Injector
        faulthandler.enable()
        def refit():
            Injector([FaultConfig(kind="exit", rank=0, step=4, phase="refit")], 0).at(4, "refit")
        refit()
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == -signal.SIGABRT
    assert "Fatal Python error: Aborted" in p.stderr and "in refit" in p.stderr
