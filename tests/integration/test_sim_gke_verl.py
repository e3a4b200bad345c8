"""The simulated GKE writes a verl experiment (experiments/gke-b200-verl.yaml) whose jobs run on the verl stand-in:
the sim's image holds the stand-in checkout of ``trainer.verl_ref`` (tests/doubles/sim_verl) with the image's task baked in,
and nbtools' own preparation and training commands, run as the pods run them, prepare the parquet files and train
in verl's layout on the sim's mount. (Here without the Ray head: the job path through the port-forward is the one
tests/integration/test_sim_gke.py drives for NeMo-RL.)
"""

from __future__ import annotations

import os
import subprocess

import pytest
from sim_gke import SimGke

from nbtools import checkpoints, launch, trainers

pytestmark = pytest.mark.slow


def _sh(command: str, env: dict[str, str], cwd) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NBTOOLS_RUNS_DIR")}
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, env={**base, **env}, cwd=cwd, timeout=900)


def test_the_sim_runs_nbtools_verl_commands_on_the_stand_in(tmp_path):
    # a short warm start (test_gke_verl's): what runs matters here, not what the model learns (the Hub copy the sim
    # builds and the stand-in's training each warm-start the tiny model)
    with SimGke(tmp_path / "sim", ray=False, mirror=False, isolate=False, steps=2, rehearsal={"warmup_steps": 40},
                experiment="gke-b200-verl.yaml") as sim, sim.activated():
        cfg = sim.cfg(**{"grpo.max_val_samples": 8, "checkpointing.save_period": 1})
        t = trainers.get(cfg)
        assert (t.name, t.release, cfg.trainer.code_dir) == ("verl", "v0.7.0", str(sim.verl_dir))
        prep = _sh(launch.prepare_jobs(cfg)[0].entrypoint, {}, tmp_path)
        assert prep.returncode == 0 and "(verl test double) wrote" in prep.stdout, prep.stderr[-2000:]
        assert (sim.data_dir / "gsm8k" / "train.parquet").is_file() and (sim.data_dir / "gsm8k" / "test.parquet").is_file()
        run = _sh(t.job().command, t.job_env(), tmp_path)
        assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:])
        assert "(verl test double) verl v0.7.0 verl.trainer.main_ppo: TaskRunner" in run.stdout and "step:2 - " in run.stdout
        root = sim.data_dir / "verl-runs" / cfg.name
        assert (root / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
        assert [int(s) for s in checkpoints.list_checkpoints(str(root / "checkpoints"))["step"]] == [1, 2]
        assert sorted(p.name for p in (root / "logs" / "rollout_data").glob("*.jsonl")) == ["1.jsonl", "2.jsonl"]
        assert list((root / "logs" / "tensorboard").glob("events.out.tfevents.*"))
