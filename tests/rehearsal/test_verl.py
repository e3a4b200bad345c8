"""The rehearsal of a verl experiment (``experiments/local-verl.yaml``) writes verl v0.7.0's layout, file by file.

The runs are real (2 gloo ranks, FSDP2, torch.save shards, torch's SummaryWriter); the expectations are verl's
(tag v0.7.0): ``verl/utils/checkpoint/fsdp_checkpoint_manager.py`` (rank file names, ``huggingface/``,
``fsdp_config.json``), ``verl/trainer/ppo/ray_trainer.py`` (``global_step_N``, ``data.pt``, the tracker file,
``_dump_generations``' fields, validation before training and on the last step, ``max_actor_ckpt_to_keep``),
``verl/utils/logger/aggregate_logger.py`` (console lines), ``verl/utils/tracking.py`` (TENSORBOARD_DIR), and the
scalar names of ``metric_utils.py`` / ``fsdp_workers.py``. The readers then read the run as they read verl's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import nbtools
from nbtools.rehearsal import verl_layout

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "experiments" / "local-verl.yaml"
TINY = ["rehearsal.num_train=64", "rehearsal.num_test=16", "rehearsal.warmup_steps=5", "grpo.num_prompts_per_step=4",
        "grpo.num_generations_per_prompt=4", "grpo.max_val_samples=8", "grpo.val_period=2", "grpo.val_at_start=true",
        "checkpointing.save_period=1", "checkpointing.keep_top_k=2"]
SLOW_FIXTURES = ("run",)  # two real rehearsal runs (tests/conftest.py marks their readers slow)
DUMP_KEYS = {"input", "output", "gts", "score", "step", "acc"}  # _dump_generations + the reward's extra info


def _run(runs: Path, *overrides: str, timeout: float = 400) -> str:
    cmd = [sys.executable, "-m", "nbtools.rehearsal", "--config", str(CONFIG), "--runs-dir", str(runs), *TINY, *overrides]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"rehearsal run timed out; output:\n{out[-3000:]}")
    assert proc.returncode == 0, out[-3000:]
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """3 steps, then resumed to 4: (config, console of the first run, console of the resumed run)."""
    runs = tmp_path_factory.mktemp("verl-rehearsal")
    first = _run(runs, "grpo.max_num_steps=3")
    second = _run(runs, "grpo.max_num_steps=4")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NBTOOLS_RUNS_DIR", str(runs))
        yield nbtools.config.load(CONFIG), first, second


def test_the_trainer_registry_chooses_verls_layout():
    cfg = nbtools.config.load(CONFIG)
    t = nbtools.trainers.get(cfg)
    assert (t.name, t.layout, t.metric_family) == ("rehearsal", "verl", "verl")
    dirs = t.output_dirs()
    job = nbtools.trainers.trainer_class("verl")(cfg)  # what a verl job on a cluster is told, for the same config
    assert f"trainer.rollout_data_dir={dirs.rollout_dir}" in job.job().command
    assert f"trainer.validation_data_dir={dirs.validation_dir}" in job.job().command
    assert job.job_env()["TENSORBOARD_DIR"] == dirs.tensorboard_dir
    assert nbtools.trainers.get(nbtools.config.load(ROOT / "experiments" / "local.yaml")).layout == "nemo_rl"


def test_checkpoints_are_verls_files(run):
    cfg, _, _ = run
    ckpt = Path(cfg.checkpoint_dir)
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "4"
    assert not list(ckpt.glob("step_*")) and not list(Path(cfg.log_dir).glob("exp_*"))
    # keep 2 actors per process (max_actor_ckpt_to_keep): the first run kept 2 and 3, the resumed one 3 (its own
    # list starts empty, like verl's) and 4; data.pt stays where the actor went
    assert sorted(p.parent.name for p in ckpt.glob("global_step_*/actor")) == ["global_step_2", "global_step_3", "global_step_4"]
    assert (ckpt / "global_step_1" / "data.pt").is_file() and not (ckpt / "global_step_1" / "actor").exists()
    actor = ckpt / "global_step_4" / "actor"
    names = {p.name for p in actor.iterdir()}
    assert {f"{k}_world_size_2_rank_{r}.pt" for k in ("model", "optim", "extra_state") for r in (0, 1)} <= names
    assert json.loads((actor / "fsdp_config.json").read_text()) == {"FSDP_version": 2, "world_size": 2}
    hf = {p.name for p in (actor / "huggingface").iterdir()}
    assert {"config.json", "tokenizer.json", "tokenizer_config.json"} <= hf
    shard = torch.load(actor / "model_world_size_2_rank_1.pt", weights_only=False)
    emb = shard["model.embed_tokens.weight"]
    assert type(emb).__name__ == "DTensor" and emb.placements[0].is_shard(0), type(emb)
    extra = torch.load(actor / "extra_state_world_size_2_rank_0.pt", weights_only=False)
    assert set(extra) == {"lr_scheduler", "rng"} and "cpu" in extra["rng"]
    df = nbtools.checkpoints.list_checkpoints(cfg.checkpoints_url)
    assert set(df["layout"]) == {"verl_fsdp"}
    assert df[df["latest"]]["step"].tolist() == [4] and df[df["step"] == 1]["problem"].notna().all()


def test_the_merge_of_the_rehearsals_checkpoint_holds_its_weights(run, tmp_path):
    from safetensors.torch import load_file

    cfg, _, _ = run
    step = nbtools.checkpoints.latest(cfg.checkpoints_url)
    assert Path(step).name == "global_step_4"
    result = nbtools.checkpoints.merge(step, tmp_path / "merged")
    assert result.verified
    merged = {}
    for f in sorted((tmp_path / "merged").glob("*.safetensors")):
        merged.update(load_file(f))
    shards = [torch.load(Path(step) / "actor" / f"model_world_size_2_rank_{r}.pt", weights_only=False) for r in (0, 1)]
    tied = json.loads((Path(step) / "actor" / "huggingface" / "config.json").read_text()).get("tie_word_embeddings")
    assert set(merged) == set(shards[0]) - ({"lm_head.weight"} if tied else set())
    for name in merged:
        full = torch.cat([s[name].to_local() for s in shards], dim=0)
        assert torch.equal(merged[name].float(), full.float()), name


def test_dumps_have_verls_fields_and_steps(run):
    cfg, _, _ = run
    dirs = nbtools.trainers.get(cfg).output_dirs()
    rollout, val = Path(dirs.rollout_dir), Path(dirs.validation_dir)
    assert sorted(p.name for p in rollout.iterdir()) == ["1.jsonl", "2.jsonl", "3.jsonl", "4.jsonl"]
    # validation before training (step 0), every test_freq, and on each run's last step (3, then 4)
    assert sorted(int(p.stem) for p in val.iterdir()) == [0, 2, 3, 4]
    lines = (rollout / "2.jsonl").read_text().split("\n")
    assert lines[-1] == "" and len(lines) == 4 * 4 + 1
    recs = [json.loads(x) for x in lines[:-1]]
    assert all(set(r) == DUMP_KEYS and r["step"] == 2 for r in recs)
    assert all(r["gts"] == nbtools.rehearsal.ground_truth_for(r["input"]) for r in recs)
    assert [r["input"] for r in recs[:4]] == [recs[0]["input"]] * 4  # rollout.n samples of a prompt are adjacent
    vrecs = [json.loads(x) for x in (val / "4.jsonl").read_text().splitlines()]
    assert len(vrecs) == 8 and all(set(r) == DUMP_KEYS | {"reward"} and r["reward"] == r["score"] for r in vrecs)
    opened = nbtools.trajectories.open_verl_run(rollout, val)
    assert opened.steps == [1, 2, 3, 4] and opened.read(2)["group"].nunique() == 4


def test_console_and_tensorboard_carry_verls_names(run):
    cfg, first, second = run
    console = nbtools.metrics.read_verl_log(first + second)
    steps = sorted(console["step"].unique())
    assert steps == [0, 1, 2, 3, 4], steps
    tags = set(console["tag"])
    for tag in ("critic/score/mean", "actor/pg_loss", "actor/entropy", "actor/grad_norm", "actor/lr", "perf/mfu/actor",
                "perf/max_memory_allocated_gb", "response_length/mean", "timing_s/step", "timing_s/gen",
                "timing_s/update_actor", "perf/throughput", "training/global_step", "val-core/max3/acc/mean@1"):
        assert tag in tags, tag
    assert nbtools.metrics.framework_of(console["tag"]) == "verl"
    assert "Resuming from checkpoint 3" in second and "step:4 - " in second and "step:3 - " not in second
    tb = nbtools.metrics.read_tensorboard(nbtools.trainers.get(cfg).output_dirs().tensorboard_dir)
    both = console.merge(tb, on=["tag", "step"], suffixes=("_console", "_tb"))
    assert set(both["tag"]) == tags and len(both) == len(console)
    assert (abs(both["value_console"] - both["value_tb"]) <= 1e-6 * (1 + abs(both["value_tb"]))).all()
    mfu = console[console["tag"] == "perf/mfu/actor"]["value"]
    assert ((mfu > 0) & (mfu < 1)).all(), mfu


def test_console_line_is_verls_format():
    assert verl_layout.console_line({"a/b": 1, "c": 0.5, "text": "x", "flag": True}, 3) == "step:3 - a/b:1 - c:0.5 - flag:True"


def test_the_notebooks_calls_read_the_verl_run(run):
    """What notebooks 03, 05, 06 and 08 call, on the log_dir / checkpoint_dir URLs, answers for verl's layout."""
    cfg, _, _ = run
    out = nbtools.launch.outputs(cfg)
    assert (out.tensorboard_files, out.train_dumps) == (2, 4), out  # one event file per process (resumed once)
    assert [Path(c).name for c in out.checkpoints] == ["global_step_2", "global_step_3", "global_step_4"]
    assert out.exp_dir == cfg.logs_url
    opened = nbtools.trajectories.open_run(cfg.logs_url)
    assert isinstance(opened, nbtools.trajectories.VerlRun) and opened.steps == [1, 2, 3, 4]
    assert opened.val_steps == [0, 2, 3, 4]
    report = nbtools.health.check(opened, config=cfg)  # reads the dumps and verl's scalars beside them
    assert report.steps[1] == 4 and not report["zero-reward"].message.startswith("not checked"), report["zero-reward"]
    names = nbtools.checkpoints.overview(nbtools.checkpoints.list_checkpoints(cfg.checkpoints_url))["checkpoint"]
    assert names.tolist() == ["global_step_1", "global_step_2", "global_step_3", "global_step_4"]
    # verl logs each step's advantage extremes, not each sample's: the re-scoring checks its recomputed advantages
    # against those, and the check fails for the wrong settings
    df = opened.read()
    mix = nbtools.rewards.combine(nbtools.rewards.trained_with(cfg))
    truth = nbtools.rewards.ground_truth(cfg)
    g = cfg.grpo
    right = nbtools.rewards.rescore(df, mix, ground_truth=truth, leave_one_out=g.use_leave_one_out_baseline,
                                    normalize=g.normalize_rewards, progress=False).summary()
    wrong = nbtools.rewards.rescore(df, mix, ground_truth=truth, leave_one_out=not g.use_leave_one_out_baseline,
                                    normalize=g.normalize_rewards, progress=False).summary()
    assert right["stored_advantage_max_diff"] < 1e-4 < wrong["stored_advantage_max_diff"], (right, wrong)
    assert right["changed_rewards"] == 0


def test_supervision_reads_verls_console_and_checkpoints(run):
    from nbtools.launch._attempts import newest_checkpoint, steps_from_log
    from nbtools.launch.lint import existing_steps_in

    cfg, first, second = run
    done, resumed, times = steps_from_log(first)
    assert (done, resumed, sorted(times)) == (3, None, [1, 2, 3])
    done, resumed, times = steps_from_log(second)
    assert (done, resumed, sorted(times)) == (4, 3, [4]) and times[4] > 0
    assert existing_steps_in(cfg.checkpoints_url) == [1, 2, 3, 4] and newest_checkpoint(cfg) == 4
