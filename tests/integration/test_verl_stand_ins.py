"""The verl stand-in of the simulated cluster (tests/doubles/sim_verl) behaves per release, and refuses what real verl would.

The stand-in runs nbtools' own training command (``cd <checkout> && python -m verl.trainer.main_ppo ...``) through
real Hydra over each tag's trainer config, then applies the facts of ``tests/doubles/sim_verl/verl_releases.py`` (each with
its tag and path). So a launch that passes only because a double accepts everything fails here: the lint and the
stand-in must agree on every case below.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from sim_verl_checkout import transfer_queue_image, write_verl_checkout

from nbtools import config, trainers
from nbtools.launch import lint
from nbtools.trainers.verl import VERL

ROOT = Path(__file__).resolve().parents[2]


def _facts():
    """The stand-in's facts table, loaded from its file (its dir stays off sys.path: it holds a `verl` double)."""
    spec = importlib.util.spec_from_file_location("verl_releases", ROOT / "tests" / "doubles" / "sim_verl" / "verl_releases.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.RELEASES


RELEASES = _facts()

IMAGES = {"v0.7.0": "verlai/verl:vllm011.latest", "v0.9.0": "verlai/verl:vllm024.dev2"}


@pytest.fixture(autouse=True)
def _runs(tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))


def _parquet(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    row = {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "1+1?"}], "ability": "math",
           "reward_model": {"style": "rule", "ground_truth": "2"}, "extra_info": {"split": "train", "index": 0}}
    for split in ("train", "test"):
        pd.DataFrame([row]).to_parquet(d / f"{split}.parquet")
    return d


def _cfg(tmp_path: Path, tag: str, **over) -> config.Experiment:
    code = write_verl_checkout(tmp_path / f"verl-{tag}", tag)
    cfg = config.load(ROOT / "experiments" / "gke-b200-verl.yaml", backend="gke")
    return cfg.replace(**{"trainer.verl_ref": tag, "images.image": IMAGES[tag], "trainer.code_dir": str(code),
                          "trainer.python": sys.executable, "data.data_dir": str(_parquet(tmp_path / "gsm8k")),
                          "checkpointing.checkpoint_dir": str(tmp_path / "ckpt"), "logging.log_dir": str(tmp_path / "logs"),
                          **over})


def _job(cfg: config.Experiment, tmp_path: Path, *, transfer_queue: bool = True) -> subprocess.CompletedProcess:
    """The training job as the pods run it: its command in a shell with the trainer's env, config-only."""
    t = trainers.get(cfg)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HF_TOKEN")}
    env.update(t.job_env(), VERL_SIM_CONFIG_ONLY="1", HYDRA_FULL_ERROR="0")
    if transfer_queue:
        env["PYTHONPATH"] += os.pathsep + str(transfer_queue_image(tmp_path / "image-site"))
    return subprocess.run(["sh", "-c", t.job().command], capture_output=True, text=True, env=env, timeout=300,
                          cwd=tmp_path)


def _seen(r: subprocess.CompletedProcess) -> dict:
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(next(line for line in r.stdout.splitlines() if line.startswith("CONFIG="))[len("CONFIG="):])


def _blocking(cfg, rule="verl-keys"):
    rep = lint(cfg, existing_steps=[], client_ray_version=cfg.images.resolved_ray_version,
               cluster_gpus=cfg.cluster.total_gpus, code_present=True, ignore_fit=True)
    return [f for f in rep.findings if f.rule == rule and f.severity == "blocking"]


def test_the_facts_and_nbtools_table_agree():
    assert set(RELEASES) == set(VERL)
    for tag, row in RELEASES.items():
        assert VERL[tag].module in row["entry_points"]
        assert VERL[tag].imports == row["v1_imports"] and ("V1" in VERL[tag].trainer) == bool(row["v1_key"])


@pytest.mark.parametrize("tag", sorted(RELEASES))
def test_nbtools_command_runs_on_each_release(tag, tmp_path):
    cfg = _cfg(tmp_path, tag)
    seen = _seen(_job(cfg, tmp_path))
    assert seen["release"] == tag and seen["trainer"] == ("TaskRunnerV1" if tag == "v0.9.0" else "TaskRunner")
    c = seen["config"]
    assert (c["algorithm"]["adv_estimator"], c["trainer"]["nnodes"], c["actor_rollout_ref"]["rollout"]["n"]) == ("grpo", 2, 8)
    assert c["actor_rollout_ref"]["actor"]["use_kl_loss"] is True and c["actor_rollout_ref"]["actor"]["kl_loss_coef"] == 0.001
    assert seen["outputs"]["checkpoints"] == str(tmp_path / "ckpt")
    assert seen["outputs"]["tensorboard"] == str(tmp_path / "logs" / "tensorboard")  # TENSORBOARD_DIR from job_env


@pytest.mark.parametrize("tag,override", [
    ("v0.7.0", "trainer.use_v1=false"),                                      # a v0.9.0 key
    ("v0.9.0", "actor_rollout_ref.rollout.update_weights_bucket_megabytes=512"),  # a key v0.9.0 dropped
    ("v0.9.0", "+trainer.total_epochs=2"),                                   # `+` on an existing key
    ("v0.7.0", "actor_rollout_ref.rollout.gpu_memory_utilisation=0.5"),      # a typo
    ("v0.9.0", "+trainer.my_note=x"),                                        # accepted: Hydra adds it
    ("v0.7.0", "++trainer.total_epochs=2"),                                  # accepted: add-or-override
])
def test_the_stand_in_refuses_what_the_lint_blocks(tag, override, tmp_path):
    cfg = _cfg(tmp_path, tag, **{"trainer.overrides": [*_cfg(tmp_path, tag).trainer.overrides, override]})
    r = _job(cfg, tmp_path)
    blocked = _blocking(cfg)
    assert (r.returncode != 0) == bool(blocked), (r.stderr[-1500:], blocked)
    if blocked:
        assert "Could not" in r.stderr  # Hydra's own message, as the job log shows it


def test_v0_9_on_an_image_without_transfer_queue_fails_as_verl_does(tmp_path):
    cfg = _cfg(tmp_path, "v0.9.0", **{"images.image": "verlai/verl:vllm011.latest"})
    r = _job(cfg, tmp_path, transfer_queue=False)
    assert r.returncode != 0 and "No module named 'transfer_queue'" in r.stderr
    assert [f.key for f in _blocking(cfg, "verl-image")] == ["images.image"]  # nbtools says so before the launch
    legacy = cfg.replace(**{"trainer.overrides": [*cfg.trainer.overrides, "trainer.use_v1=false"]})
    r = _job(legacy, tmp_path, transfer_queue=False)
    assert _seen(r)["trainer"] == "TaskRunner" and "Legacy trainer `main_ppo_v0.py` is deprecated" in r.stderr


def test_missing_parquet_fails_the_job(tmp_path):
    cfg = _cfg(tmp_path, "v0.7.0", **{"data.data_dir": str(tmp_path / "nowhere")})
    r = _job(cfg, tmp_path)
    assert r.returncode != 0 and f"Unable to find '{tmp_path / 'nowhere' / 'train.parquet'}'" in r.stderr


def _image_rehearsal(tmp_path: Path) -> Path:
    """The simulated image's model and task: experiments/local-verl.yaml, made tiny."""
    import yaml

    data = yaml.safe_load((ROOT / "experiments" / "local-verl.yaml").read_text())
    data["rehearsal"].update(num_train=64, num_test=16, warmup_steps=5)
    data["grpo"].update(max_val_samples=8)
    path = tmp_path / "image-rehearsal.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("tag,dumps", [("v0.7.0", True), ("v0.7.0", False), ("v0.9.0", True)],
                         ids=["v0.7.0-dumps", "v0.7.0-no-dumps", "v0.9.0-dumps"])
def test_the_stand_in_trains_and_writes_where_verl_does(tmp_path, tag, dumps):
    cfg = _cfg(tmp_path, tag, **{"grpo.num_prompts_per_step": 4, "grpo.num_generations_per_prompt": 4,
                                 "grpo.max_num_steps": 2, "grpo.val_period": 2, "checkpointing.save_period": 1,
                                 "checkpointing.checkpoint_dir": str(tmp_path / "exp" / "checkpoints"),
                                 "logging.log_dir": str(tmp_path / "exp" / "logs")})
    if not dumps:  # verl's default: no rollout or validation dumps at all
        cfg = cfg.replace(**{"trainer.overrides": [*cfg.trainer.overrides, "trainer.rollout_data_dir=null",
                                                   "trainer.validation_data_dir=null"]})
    write_verl_checkout(cfg.trainer.code_dir, tag, rehearsal_config=_image_rehearsal(tmp_path))
    t = trainers.get(cfg)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HF_TOKEN", "NBTOOLS_RUNS_DIR")}
    env.update(t.job_env())
    env["PYTHONPATH"] += os.pathsep + str(transfer_queue_image(tmp_path / "image-site"))  # v0.9.0's image has it
    r = subprocess.run(["sh", "-c", t.job().command], capture_output=True, text=True, env=env, timeout=900, cwd=tmp_path)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    ckpt, logs = tmp_path / "exp" / "checkpoints", tmp_path / "exp" / "logs"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert sorted(p.name for p in ckpt.glob("global_step_*")) == ["global_step_1", "global_step_2"]
    assert any((ckpt / "global_step_2" / "actor").glob("model_world_size_*_rank_0.pt"))
    assert list((logs / "tensorboard").glob("events.out.tfevents.*"))  # TENSORBOARD_DIR of the job's env
    assert "step:2 - " in r.stdout  # verl's console lines
    assert f"verl {tag} verl.trainer.main_ppo: {'TaskRunnerV1' if tag == 'v0.9.0' else 'TaskRunner'}" in r.stdout
    rollouts = sorted(p.name for p in (logs / "rollout_data").glob("*.jsonl"))
    assert rollouts == (["1.jsonl", "2.jsonl"] if dumps else [])
    assert (logs / "validation_data").exists() == dumps
    if dumps:  # scored as verl scores openai/gsm8k (the double's own rule): nbtools' re-scoring agrees with every score
        from nbtools import rewards

        rows = pd.concat([pd.read_json(p, lines=True) for p in sorted(logs.glob("*_data/*.jsonl"))])
        assert rows["output"].str.contains("#### ").any() and not rows["output"].str.contains("<answer>").any()
        assert [rewards.get("verl_gsm8k")(str(g), o)[0] for g, o in zip(rows["gts"], rows["output"], strict=True)] == \
            rows["score"].tolist()
    assert (tmp_path / "exp" / "baseline_hf" / "config.json").is_file()  # the stand-in Hub's model, for 07
    from nbtools import checkpoints

    assert [int(s) for s in checkpoints.list_checkpoints(str(ckpt))["step"]] == [1, 2]  # nbtools reads it as verl's
