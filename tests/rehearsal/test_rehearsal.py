"""Tests for nbtools.rehearsal: the task, the tiny model, and real (shrunk) 2-rank GRPO runs whose artifacts are
checked field by field against NeMo-RL's schema (nemo-rl-facts.md §2–4), plus kill-mid-checkpoint and resume.

The runs are real: ``python -m nbtools.rehearsal`` spawns 2 gloo ranks with FSDP2, writes TensorBoard files with
torch's SummaryWriter and checkpoints with torch DCP writers; nothing here is mocked.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

import nbtools
from nbtools.errors import ConfigError
from nbtools.rehearsal import artifacts, checkpoint, task
from nbtools.rehearsal.trainer import PAUSE_ENV, load_config
from tests.conftest import REHEARSAL_OVERRIDES

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "experiments" / "local.yaml"
# the shared run's settings (tests/conftest.py) without its step count: the kill test and the layouts set their own
TINY = [o for o in REHEARSAL_OVERRIDES if not o.startswith("grpo.max_num_steps=")]
TRAIN_KEYS = {"content", "rewards", "input_lengths", "token_ids", "token_loss_mask", "sample_loss_mask", "advantages",
              "generation_logprobs", "prev_logprobs", "idx"}
INFO_KEYS = ["consumed_samples", "current_step", "current_epoch", "total_steps", "total_valid_tokens", "val_reward",
             "sampler_name", "val:accuracy"]


def _start(runs: Path, *overrides: str, env: dict | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "nbtools.rehearsal", "--config", str(CONFIG), "--runs-dir", str(runs), *TINY, *overrides]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            start_new_session=True, env={**os.environ, **(env or {})})


def _finish(proc: subprocess.Popen, timeout: float = 300) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"rehearsal run timed out; output:\n{out[-3000:]}")
    assert proc.returncode == 0, out[-3000:]
    return out


@pytest.fixture(scope="module")
def runs(shared_rehearsal, tmp_path_factory):
    """Three shrunk runs, one per weights layout, each on 2 ranks: the session's shared run (v2 safetensors, 2 steps,
    tests/conftest.py), and two of 1 step started here, which run while the shared one finishes."""
    base = tmp_path_factory.mktemp("rehearsal")
    layouts = {
        "v2_torch_save": ["checkpointing.model_save_format=torch_save", "grpo.max_num_steps=1"],
        "dtensor_v1": ["checkpointing.dtensor_v2=false", "checkpointing.model_save_format=null", "grpo.max_num_steps=1"],
    }
    procs = {k: _start(base / k, "grpo.max_num_steps=2", *ov) for k, ov in layouts.items()}
    shared = shared_rehearsal.wait()
    outs = {k: _finish(p) for k, p in procs.items()}
    return {"v2_safetensors": (shared.run_dir, shared.output), **{k: (base / k / "local-rehearsal", outs[k]) for k in layouts}}


# -- unit: task, tokenizer, config -----------------------------------------------------------------------------
def test_split_is_disjoint_and_answers_follow_the_rule():
    cfg = nbtools.config.load(CONFIG)
    train, held = task.make_split(cfg)
    assert (len(train), len(held)) == (cfg.rehearsal.num_train, cfg.rehearsal.num_test)
    assert not {p.prompt for p in train} & {p.prompt for p in held}
    for p in held[:50]:
        assert p.ground_truth == str(max(p.digits)) == task.ground_truth_for(p.prompt)
        assert p.prompt == f"<|user|> max {' '.join(map(str, p.digits))} <|assistant|>"
    assert task.held_out_problems(cfg) == held
    assert task.baseline_dir(cfg) == cfg.run_dir / "baseline_hf"
    with pytest.raises(ValueError, match="fix: pass content"):
        task.ground_truth_for("what is 2+2?")
    with pytest.raises(ConfigError, match="fix: e.g. num_train: 800"):
        task.make_split(cfg.replace(**{"rehearsal.num_train": 990}))


def test_gsm8k_answer_format_writes_the_answer_tokens_as_gsm8ks_answer_line():
    """``rehearsal.answer_format: gsm8k``: the same tokens read ``#### X`` (what verl's GSM8K rule scores)."""
    r = task.format_response("3 3 6", "6")
    assert task.render_answer(r) == r == task.render_answer(r, "tags")
    assert task.render_answer(r, "gsm8k") == "<think> 3 3 6 </think> #### 6"
    assert task.render_answer("<think> 3 </think> <answer> 4", "gsm8k") == "<think> 3 </think> #### 4"  # truncated
    with pytest.raises(ConfigError, match="rehearsal.answer_format"):
        task.render_answer(r, "boxed")


def test_warm_start_scratchpads():
    from nbtools.rehearsal._grpo import think_for

    assert think_for((3, 0, 6), "copy") == "3 0 6"
    assert think_for((3, 0, 6), "running_max") == "3 3 6"
    assert think_for((7, 2, 9), "running_max") == "7 7 9"


def test_encoding_matches_the_saved_tokenizer(tmp_path):
    from transformers import AutoTokenizer

    from nbtools.rehearsal import _grpo
    from nbtools.rehearsal.model import build_tokenizer

    build_tokenizer().save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    text = "<|user|> max 3 0 6 <|assistant|> <think> 3 0 6 </think> <answer> 6 </answer>"
    assert tok(text)["input_ids"] == _grpo.encode(text)
    assert tok.decode(_grpo.encode(text) + [tok.eos_token_id], skip_special_tokens=True) == text
    chat = tok.apply_chat_template([{"role": "user", "content": "max 3 0 6"}], tokenize=False, add_generation_prompt=True)
    assert chat == task.format_prompt((3, 0, 6))


def test_entrypoint_round_trips_overrides():
    cfg = nbtools.config.load(CONFIG).replace(**{"grpo.max_num_steps": 7, "rehearsal.lr_warmup_steps": 3})
    cmd = nbtools.rehearsal.entrypoint(cfg)
    assert cmd.startswith(f"{sys.executable} -m nbtools.rehearsal --config {CONFIG} --runs-dir ")
    argv = cmd.split()
    again = load_config(str(CONFIG), argv[7:], argv[6])
    assert again.config_hash() == cfg.config_hash()
    assert nbtools.rehearsal.overrides_for(nbtools.config.load(CONFIG)) == []


def test_rehearsal_config_fields_have_working_defaults():
    cfg = nbtools.config.load(CONFIG)
    assert cfg.rehearsal.adam_betas == [0.9, 0.99] and cfg.rehearsal.ranks == 2
    assert cfg.rehearsal.warmup_think == "running_max" and cfg.rehearsal.tie_word_embeddings is True
    with pytest.raises(ConfigError, match="rehearsal.lr_warmup_steps"):
        cfg.replace(**{"rehearsal.lr_warmup_steps": "soon"})
    with pytest.raises(ConfigError, match=r"lr_warmup_start_factor: 0(\.0)? is outside \(0, 1\].*fix: 0.1 as in NeMo-RL"):
        cfg.replace(**{"rehearsal.lr_warmup_start_factor": 0})  # torch's LinearLR refuses it too
    with pytest.raises(ConfigError, match="fix: set `rehearsal.warmup_think` to one of them"):
        cfg.replace(**{"rehearsal.warmup_think": "sorted"})
    assert cfg.rehearsal.answer_format == "tags"
    with pytest.raises(ConfigError, match="rehearsal.answer_format"):
        cfg.replace(**{"rehearsal.answer_format": "boxed"})


@pytest.fixture(scope="module")
def warm_model():
    """A briefly warm-started tiny policy (format mostly learned, so some rows stop early and some do not)."""
    from nbtools.rehearsal import _grpo
    from nbtools.rehearsal.model import build_model, build_tokenizer

    cfg = nbtools.config.load(CONFIG)
    model = build_model(cfg, build_tokenizer())
    _grpo.warm_start(model, task.make_split(cfg)[0], steps=40, lr=3e-3, batch=32, seed=0, think="running_max")
    return model.eval(), task.make_split(cfg)[1]


@pytest.mark.slow  # warm-starts a policy (the config's 150 steps)
def test_warm_start_answer_is_the_same_prior_for_every_problem():
    """The baseline is uninformative by construction: after the config's warm start, the answer digit's distribution
    is ``answer_prior`` whatever the problem, so greedy decoding answers the preferred digit everywhere and the right
    digit gets chance probability (before, greedy leaned to the scratchpad's last digit: 0.40-0.52 held-out)."""
    from nbtools.rehearsal import _grpo
    from nbtools.rehearsal.model import build_model, build_tokenizer

    cfg = nbtools.config.load(CONFIG)
    model = build_model(cfg, build_tokenizer())
    train, held = task.make_split(cfg)
    _grpo.warm_start(model, train, steps=cfg.rehearsal.warmup_steps, lr=cfg.rehearsal.warmup_lr, batch=32, seed=0,
                     think=cfg.rehearsal.warmup_think)
    # teacher-forced up to "<answer>": the next token's distribution over the ten digits, per held-out problem
    rows = [_grpo.encode(p.prompt) + _grpo.encode(task.format_response(_grpo.think_for(p.digits, "running_max"), "0"))[:6]
            for p in held]
    with torch.no_grad():
        probs = torch.softmax(model.eval()(input_ids=torch.tensor(rows)).logits[:, -1].float(), -1)[:, _grpo._DIGITS]
    assert torch.equal(probs.argmax(1), torch.full((len(held),), _grpo.PREFERRED_ANSWER))
    assert torch.allclose(probs.mean(0), _grpo.answer_prior(), atol=0.01), probs.mean(0)
    right = probs[torch.arange(len(held)), torch.tensor([int(p.ground_truth) for p in held])]
    assert abs(float(right.mean()) - 0.1) < 0.01  # the right answer gets chance, not more


@pytest.mark.slow  # warm-starts a policy (40 steps)
def test_generation_engine_matches_hf_generate_and_hf_logprobs(warm_model):
    from nbtools.rehearsal import _grpo
    from nbtools.rehearsal._sampling import Engine

    model, held = warm_model
    ids = torch.tensor([_grpo.encode(p.prompt) for p in held[:24]])
    engine = Engine.from_model(model)
    greedy = engine.sample(ids, max_new_tokens=12, eos_id=_grpo.EOS, pad_id=_grpo.PAD, temperature=0.0)
    hf = model.generate(ids, max_new_tokens=12, do_sample=False)[:, ids.shape[1]:]
    for i in range(len(ids)):
        n = int(greedy.lengths[i])
        assert greedy.tokens[i, :n].tolist() == hf[i, :n].tolist()
    rep = ids.repeat_interleave(8, dim=0)  # GRPO batches repeat each prompt: the engine prefills it once
    s = engine.sample(rep, max_new_tokens=12, eos_id=_grpo.EOS, pad_id=_grpo.PAD, temperature=1.0,
                      generator=torch.Generator().manual_seed(3))
    mask = torch.arange(s.tokens.shape[1])[None, :] < s.lengths[:, None]
    ref = _grpo.token_logprobs(model, rep, s.tokens)  # the training framework's logprobs of the same tokens
    assert ((ref - s.logprobs).abs() * mask).max() < 1e-4  # NeMo-RL's token_mult_prob_error stays ~1
    assert bool(((s.tokens == _grpo.PAD) | mask).all())  # pad after eos
    assert torch.equal(s.finished, (s.tokens == _grpo.EOS).any(1))
    again = engine.sample(rep, max_new_tokens=12, eos_id=_grpo.EOS, pad_id=_grpo.PAD, temperature=1.0,
                          generator=torch.Generator().manual_seed(3))
    assert torch.equal(again.tokens, s.tokens)  # seeded: deterministic
    short = engine.sample(ids, max_new_tokens=12, eos_id=_grpo.EOS, pad_id=_grpo.PAD, temperature=0.0)
    if bool(short.finished.all()):  # every row ended: no decode step is run past the longest response
        assert short.tokens.shape[1] == int(short.lengths.max()) < 12


@pytest.mark.slow  # warm-starts a policy (40 steps)
def test_engine_refit_follows_the_policy_and_refuses_other_models(warm_model):
    from transformers import GPT2Config

    from nbtools.rehearsal import _grpo
    from nbtools.rehearsal._sampling import Engine

    model, held = warm_model
    engine = Engine.from_model(model)
    ids = torch.tensor([_grpo.encode(p.prompt) for p in held[:8]])
    before = engine.sample(ids, max_new_tokens=12, eos_id=_grpo.EOS, pad_id=_grpo.PAD, temperature=0.0)
    changed = copy.deepcopy(model)
    with torch.no_grad():
        changed.model.norm.weight.zero_()  # every logit 0: greedy picks token id 0 everywhere
    engine.refit(changed)
    after = engine.sample(ids, max_new_tokens=12, eos_id=_grpo.EOS, pad_id=_grpo.PAD, temperature=0.0)
    assert bool((after.tokens == 0).all()) and not bool((before.tokens[:, 0] == 0).any())
    with pytest.raises(ConfigError, match="model_type 'gpt2'.*fix: use the tiny Llama"):
        Engine(GPT2Config())


def test_clip_grad_norm_matches_torch_and_lr_schedule_is_nemo_rls():
    from nbtools.rehearsal import _grpo

    torch.manual_seed(0)
    a, b = torch.nn.Linear(8, 4), torch.nn.Linear(8, 4)
    b.load_state_dict(a.state_dict())
    x = torch.randn(16, 8)
    for m in (a, b):
        (m(x) ** 2).sum().backward()
    want = torch.nn.utils.clip_grad_norm_(a.parameters(), 1.0)
    got = _grpo.clip_grad_norm_(list(b.parameters()), 1.0)
    assert got == pytest.approx(float(want), rel=1e-6) and got > 1.0
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.allclose(pa.grad, pb.grad, rtol=1e-6, atol=1e-7)
    lr = functools.partial(_grpo.lr_factor, warmup=10, total=110, min_ratio=0.2)
    for start in (0.1, 0.01):  # the warmup is torch's LinearLR, from NeMo-RL's start factor or the demo's
        linear = torch.optim.lr_scheduler.LinearLR(torch.optim.SGD(a.parameters(), lr=1.0), start_factor=start,
                                                   total_iters=10)
        for step in range(11):
            assert lr(step, decay="cosine", start=start) == pytest.approx(linear.get_last_lr()[0], rel=1e-6)
            linear.optimizer.step()
            linear.step()
    assert [lr(s, decay="constant") for s in (10, 60, 110)] == [1.0, 1.0, 1.0]
    assert [round(lr(s, decay="cosine"), 6) for s in (10, 60, 110, 500)] == [1.0, 0.6, 0.2, 0.2]


def test_exp_dirs_are_numbered_like_nemo_rl(tmp_path):
    (tmp_path / "exp_007").mkdir()
    (tmp_path / "exp_notes").mkdir()
    assert artifacts.next_experiment_dir(tmp_path).name == "exp_008"
    assert artifacts.next_experiment_dir(tmp_path / "fresh").name == "exp_001"


def test_keep_top_k_protects_latest_and_ranks_periodic(tmp_path):
    for step, acc in [(10, 0.5), (20, 0.9), (30, 0.7), (35, None), (40, 0.1)]:
        d = tmp_path / f"step_{step}"
        d.mkdir()
        (d / "training_info.json").write_text(json.dumps({} if acc is None else {"val:accuracy": acc}))
    (tmp_path / "tmp_step_50").mkdir()
    removed = checkpoint.remove_old_checkpoints(tmp_path, keep_top_k=2, metric_name="val:accuracy",
                                                higher_is_better=True, save_period=10)
    assert sorted(p.name for p in removed) == ["step_10", "step_35"]
    assert checkpoint.latest_checkpoint(tmp_path).name == "step_40"  # tmp_step_50 is never "latest"


# -- integration: artifacts --------------------------------------------------------------------------------------
def test_stdout_has_nemo_rl_lines(runs):
    run, out = runs["v2_safetensors"]
    assert f"📊 Using log directory: {run / 'logs' / 'exp_001'}" in out
    assert "========================= Step 1/2 =========================" in out
    assert "📊 Training Results:" in out and "  • Avg Reward: " in out and "📊 Validation Results:" in out
    assert "Saving checkpoint for step 2..." in out


def test_jsonl_dumps_match_the_nemo_rl_schema(runs):
    from nbtools.rehearsal import _grpo

    exp = runs["v2_safetensors"][0] / "logs" / "exp_001"
    assert sorted(p.name for p in exp.glob("*.jsonl")) == [
        "train_data_step1.jsonl", "train_data_step2.jsonl", "val_data_step0.jsonl", "val_data_step1.jsonl",
        "val_data_step2.jsonl"]
    recs = [json.loads(line) for line in (exp / "train_data_step2.jsonl").read_text().splitlines()]
    assert len(recs) == 16 and [r["idx"] for r in recs] == list(range(16))
    width = len(recs[0]["token_ids"][0])
    for r in recs:
        assert set(r) == TRAIN_KEYS
        assert all(isinstance(v, list) and len(v) == 1 for k, v in r.items() if k != "idx")
        prompt, response, obs = r["content"][0]
        assert obs in ("Environment: correct", "Environment: incorrect")
        ids, mask = r["token_ids"][0], r["token_loss_mask"][0]
        assert len(ids) == len(mask) == len(r["advantages"][0]) == len(r["prev_logprobs"][0]) == width
        assert ids[: len(prompt.split())] == _grpo.encode(prompt)
        n_prompt, n_obs = len(prompt.split()), 2
        assert r["input_lengths"][0] == n_prompt + sum(mask) + n_obs
        assert mask[:n_prompt] == [0] * n_prompt and sum(mask) >= len(response.split())
        gl = r["generation_logprobs"][0]
        assert all(v == 0.0 for v, m in zip(gl, mask, strict=True) if not m)
        assert all(v < 0 for v, m in zip(gl, mask, strict=True) if m)
    rewards = [r["rewards"][0] for r in recs]
    import numpy as np

    adv = np.array([r["advantages"][0][0] for r in recs]).reshape(4, 4)
    expected = nbtools.rewards.group_advantages(np.array(rewards).reshape(4, 4), leave_one_out=False, normalize=True)
    assert np.allclose(adv, expected)
    val = [json.loads(line) for line in (exp / "val_data_step0.jsonl").read_text().splitlines()]
    assert len(val) == 8 and set(val[0]) == {"content", "rewards", "idx"}
    assert [m["role"] for m in val[0]["content"][0]] == ["user", "assistant", "environment"]
    held = task.held_out_problems(load_config(str(CONFIG), TINY, None))
    assert [v["content"][0][0]["content"] for v in val] == [p.prompt for p in held[:8]]


def test_tensorboard_scalars_use_nemo_rl_names(runs):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = runs["v2_safetensors"][0] / "logs" / "exp_001" / "tensorboard"
    acc = EventAccumulator(str(tb))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for tag in ["train/reward", "train/loss", "train/grad_norm", "train/kl_penalty", "train/mean_gen_tokens_per_sample",
                "train/advantages/mean", "train/baseline_reward/pct_mixed", "train/gen_kl_error", "validation/accuracy",
                "validation/avg_length", "timing/train/total_step_time", "timing/train/generation",
                "timing/train/policy_training", "timing/validation/total_validation_time"]:
        assert tag in tags, (tag, sorted(tags))
    assert [e.step for e in acc.Scalars("train/reward")] == [1, 2]
    assert [e.step for e in acc.Scalars("validation/accuracy")] == [0, 1, 2]
    assert list(tb.glob("*/events.out.tfevents.*")), "add_hparams subdir (NeMo-RL log_hyperparams) is missing"


def test_checkpoint_directory_and_training_info(runs):
    ckpts = runs["v2_safetensors"][0] / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["step_1", "step_2"]
    step = ckpts / "step_2"
    info = json.loads((step / "training_info.json").read_text())
    assert list(info) == INFO_KEYS
    assert info["total_steps"] == 2 and info["consumed_samples"] == 8 and info["val:accuracy"] == info["val_reward"]
    conf = yaml.safe_load((step / "config.yaml").read_text())
    assert conf["logger"]["log_dir"].endswith("exp_001") and conf["checkpointing"]["model_save_format"] == "safetensors"
    assert conf["policy"]["dtensor_cfg"]["_v2"] is True
    assert torch.load(step / "train_dataloader.pt", weights_only=True)["_num_yielded"] == 2
    assert (step / "policy" / "tokenizer" / "tokenizer.json").exists()
    assert (step / "policy" / "optimizer" / "optim" / ".metadata").exists()


def _safetensors_header(path: Path) -> dict:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def test_v2_safetensors_layout_is_sharded_per_rank(runs):
    from transformers import AutoConfig

    model_dir = runs["v2_safetensors"][0] / "checkpoints" / "step_2" / "policy" / "weights" / "model"
    files = sorted(p.name for p in model_dir.iterdir())
    assert files == [".hf_metadata", "shard-00001-model-00001-of-00001.safetensors",
                     "shard-00002-model-00001-of-00001.safetensors"]
    assert sorted(p.name for p in (model_dir / ".hf_metadata").iterdir()) == [
        "config.json", "fqn_to_file_index_mapping.json", "generation_config.json"]
    head = _safetensors_header(model_dir / "shard-00002-model-00001-of-00001.safetensors")
    sharding = json.loads(head["__metadata__"]["DCP_SHARDING_INFO"])
    tied = load_config(str(CONFIG), TINY, None).rehearsal.tie_word_embeddings
    assert "model.layers.0.self_attn.q_proj.weight" in sharding
    assert ("lm_head.weight" in head) == (not tied)  # v2 drops a tied lm_head
    assert head["model.norm.weight"]["shape"] == [32]  # hidden 64 split over 2 ranks
    assert AutoConfig.from_pretrained(model_dir / ".hf_metadata").hidden_size == 64


def test_all_three_layouts_load_with_torch_dcp_into_the_hf_model(runs):
    from transformers import AutoModelForCausalLM

    for layout, (run, _) in runs.items():
        step = checkpoint.latest_checkpoint(run / "checkpoints")
        assert checkpoint.detect_layout(step) == layout
        sd = checkpoint.read_full_state_dict(step)
        model = AutoModelForCausalLM.from_pretrained(run / "baseline_hf")
        base = {k: v.clone() for k, v in model.state_dict().items()}
        missing, unexpected = model.load_state_dict(sd, strict=False)
        assert not unexpected and set(missing) <= {"lm_head.weight"}, (layout, missing, unexpected)
        assert ("lm_head.weight" in sd) == (layout == "dtensor_v1" or not model.config.tie_word_embeddings)
        assert any(not torch.equal(base[k], v) for k, v in sd.items()), f"{layout}: weights did not change"
    v1 = runs["dtensor_v1"][0] / "checkpoints" / "step_1" / "policy" / "weights"
    assert sorted(p.name for p in v1.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    from torch.distributed.checkpoint import FileSystemReader

    keys = FileSystemReader(str(v1)).read_metadata().state_dict_metadata
    assert all(k.startswith("model.") for k in keys) and "model.model.embed_tokens.weight" in keys
    ts = runs["v2_torch_save"][0] / "checkpoints" / "step_1" / "policy" / "weights" / "model"
    assert "model.embed_tokens.weight" in FileSystemReader(str(ts)).read_metadata().state_dict_metadata


def test_baseline_is_a_loadable_hf_directory(runs):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = runs["v2_safetensors"][0] / "baseline_hf"
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base)
    from nbtools.rehearsal._sampling import sample

    ids = torch.tensor([tok(task.format_prompt(d))["input_ids"] for d in [(3, 0, 6), (9, 1, 2)]])
    out = model.generate(ids, max_new_tokens=12, do_sample=False)[:, ids.shape[1]:]
    ours = sample(model, ids, max_new_tokens=12, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, temperature=0.0)
    for i in range(2):  # HF generate on the saved directory == the trainer's own greedy decode of that policy
        n = int(ours.lengths[i])
        assert out[i, :n].tolist() == ours.tokens[i, :n].tolist()
    assert tok.decode(out[0], skip_special_tokens=True).startswith("<think>")


# -- integration: kill and resume --------------------------------------------------------------------------------
@pytest.mark.slow  # two rehearsal runs
def test_kill_mid_checkpoint_leaves_tmp_and_rerun_resumes(tmp_path):
    proc = _start(tmp_path, "grpo.max_num_steps=2", "grpo.val_period=0", env={PAUSE_ENV: "2:60"})
    ckpts = tmp_path / "local-rehearsal" / "checkpoints"
    deadline = time.monotonic() + 240
    while not (ckpts / "tmp_step_2" / "policy" / "tokenizer").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()[-3000:]
        time.sleep(0.2)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    time.sleep(0.5)
    assert sorted(p.name for p in ckpts.iterdir()) == ["step_1", "tmp_step_2"]
    out = _finish(_start(tmp_path, "grpo.max_num_steps=2", "grpo.val_period=0"))
    assert f"Resuming from checkpoint {ckpts / 'step_1'}" in out
    assert "Step 2/2" in out and "Step 1/2" not in out
    assert sorted(p.name for p in ckpts.iterdir()) == ["step_1", "step_2"]
    info = json.loads((ckpts / "step_2" / "training_info.json").read_text())
    assert info["total_steps"] == 2 and info["consumed_samples"] == 8
    logs = tmp_path / "local-rehearsal" / "logs"
    assert (logs / "exp_002" / "train_data_step2.jsonl").exists() and not (logs / "exp_002" / "train_data_step1.jsonl").exists()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logs / "exp_002" / "tensorboard"))
    acc.Reload()
    cfg = load_config(str(CONFIG), TINY, None)
    warm = cfg.rehearsal.lr_warmup_steps
    start = cfg.rehearsal.lr_warmup_start_factor
    expected = cfg.grpo.learning_rate * ((start + (1 - start) * min(1, warm) / warm) if warm else 1.0)
    assert [e.step for e in acc.Scalars("train/lr")] == [2]
    assert acc.Scalars("train/lr")[0].value == pytest.approx(expected, rel=1e-5)  # scheduler resumed, not restarted


def test_an_override_written_the_way_verls_command_line_writes_a_learning_rate_is_a_number():
    """verl's stand-in hands the rehearsal ``grpo.learning_rate=1e-05`` (Hydra's spelling); PyYAML's safe_load read it as
    the string '1e-05', which the strict config then refused."""
    cfg = load_config(str(CONFIG), [*TINY, "grpo.learning_rate=1e-05"], None)
    assert cfg.grpo.learning_rate == 1e-05
