"""Faults the rehearsal injects on request (``rehearsal.faults``), so stall detection is tested on real ranks.

Why: a hang, a crashed rank, an out-of-memory error or a straggler is what stalls a GRPO run on GPUs; the
rehearsal reproduces each on one rank, in one phase, from one step, on real processes whose stacks py-spy reads
through Ray's dashboard. Each fault runs *inside* the phase's own function (``refit``, ``_generate``, ``_train``,
``save``), so the stack shows the phase as a real trainer's would; the others then block in their next collective.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

__all__ = ["Injector", "PHASES"]

PHASES = ("generation", "train", "refit", "checkpoint")


class Injector:
    """The faults of one rank; ``at(step, phase)`` does what the first matching fault says (nothing otherwise)."""

    def __init__(self, faults: list[Any], rank: int):
        self.mine = [f for f in faults if f.rank == rank]
        self.rank = rank

    def at(self, step: int, phase: str) -> None:
        for f in self.mine:
            if f.phase != phase or step < f.step or (f.kind != "slow" and step != f.step):
                continue
            print(f"[rehearsal fault] rank {self.rank}: {f.kind} in {phase} at step {step}", file=sys.stderr, flush=True)
            if f.kind == "hang":
                threading.Event().wait()  # blocks forever, as a lost collective peer or a deadlocked lock does
            elif f.kind == "slow":
                time.sleep(f.seconds)
            elif f.kind == "exit":
                os.kill(os.getpid(), signal.SIGABRT)  # an abort in native code; faulthandler prints the Python stack
            elif f.kind == "oom":
                import torch

                raise torch.OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate 2.00 GiB. GPU {self.rank} has a total capacity of 79.10 GiB "
                    "of which 1.06 GiB is free. (injected by rehearsal.faults)")
