"""One verl process per release for both verl oracle modules (test_verl_oracle.py and test_verl_checkpoint_oracle.py).

``verl_release(version)`` builds (or reuses) the release's venv (tools/verl_oracle_venv.sh) and runs
tests/oracle/verl_checkpoint.py there once with both modules' jobs: its two gloo ranks write verl's checkpoints, verl's
merger merges them, and then the same process runs tests/oracle/verl_oracle.py's job (verl's dump, validation and
scores). Two processes per release each imported torch, transformers and verl's trainer before; the result is kept for
the session in a dir every pytest-xdist worker sees (under a file lock: the first module to ask runs it, the other
reads it), so each module still asserts on its own part.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock

from tests.oracle.verl_cases import KEEP, STEPS, STRATEGIES, dump_job

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def verl_release(tmp_path_factory):
    """``verl_release(version) -> (dir, result)``: ``result["verl"]`` the release, ``result["strategies"]`` the
    checkpoint runs and verl's merges, ``result["oracle"]`` verl_oracle.py's summary (its dump in ``dir/rollout_data``)."""
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / "verl-oracle-shared"
    shared.mkdir(exist_ok=True)

    def run(version: str) -> tuple[Path, dict]:
        out = shared / version
        with FileLock(f"{out}.lock", timeout=1800):
            done = out / "result.json"
            if done.is_file():
                return out, json.loads(done.read_text())
            t0 = time.monotonic()
            built = subprocess.run(["bash", str(ROOT / "tools" / "verl_oracle_venv.sh"), sys.executable,
                                    str(ROOT / ".venv-verl" / version), version], capture_output=True, text=True)
            assert built.returncode == 0, f"building the verl {version} venv failed:\n{built.stderr[-3000:]}"
            python = built.stdout.strip().splitlines()[-1]
            t1 = time.monotonic()
            out.mkdir()
            job = {"out": str(out), "strategies": list(STRATEGIES), "steps": STEPS, "keep": KEEP,
                   "oracle": dump_job(version, out / "rollout_data")}
            env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
            ran = subprocess.run([python, str(Path(__file__).with_name("verl_checkpoint.py"))], input=json.dumps(job),
                                 capture_output=True, text=True, env=env, timeout=1200)  # a dead rank can leave one waiting
            assert ran.returncode == 0, f"verl {version}'s code failed:\n{ran.stderr[-5000:]}"
            result = json.loads(ran.stdout.strip().splitlines()[-1])
            assert result["verl"] == version == result["oracle"]["verl"], result["verl"]
            done.write_text(json.dumps(result))
            runs = os.environ.get("NBTOOLS_RUNS_DIR")
            if runs:  # the session's summary lists the releases that ran (tests/conftest.py pytest_terminal_summary)
                Path(runs).mkdir(parents=True, exist_ok=True)
                with open(Path(runs) / "verl-oracle-releases.txt", "a") as f:
                    f.write(f"verl {version} (dump, validation, scores; checkpoints {', '.join(STRATEGIES)}): venv "
                            f"{t1 - t0:.0f} s, verl's code {time.monotonic() - t1:.0f} s\n")
            return out, result

    return run
