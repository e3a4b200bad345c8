"""The OOM post-mortem: a real out-of-memory message from the two-H100 calibration, the run's config, the term, the fix.

The messages are the ones PyTorch 2.11 printed on two H100s (``benchmarks/results/fit_calibration_h100x2*.json``,
written by ``benchmarks/fit_calibrate.py``); the job log around them is shaped like a Ray job's tail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nbtools import config, fit

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent / "nbtools"
RESULTS = ROOT / "benchmarks" / "results"


def _row(table: str, model: str, micro: int, seq: int, ac: bool, alloc: str = "", status: str = "") -> dict:
    doc = json.loads((RESULTS / table).read_text())
    (row,) = [r for r in doc["cases"] if (r["model"], r["micro_batch"], r["seq_len"], r["activation_checkpointing"],
                                           r["alloc_conf"]) == (model, micro, seq, ac, alloc)
              and r["status"] == (status or r["status"])]
    return row


def _log(row: dict) -> str:
    first = row["oom_message"].splitlines()[0]
    return "\n".join([
        "(DTensorPolicyWorkerV2 pid=4242) Traceback (most recent call last):",
        '(DTensorPolicyWorkerV2 pid=4242)   File "/opt/nemo-rl/nemo_rl/models/automodel/train.py", line 371, in '
        "forward_with_post_processing_fn",
        f"(DTensorPolicyWorkerV2 pid=4242) torch.OutOfMemoryError: {first}",
        "ray.exceptions.RayTaskError(OutOfMemoryError): ray::DTensorPolicyWorkerV2.train()",
    ]) + "\n"


def _experiment(tmp_path: Path, *, micro: int, seq: int, ac: bool) -> Path:
    """The shipped B200 experiment with the calibration case's batch, trained on two GPUs of its node.

    vLLM takes six of the eight GPUs (non-colocated), so training shards over two, as in the calibration. Experiments
    name B200 or H200 nodes; the message's capacity (79.18 GiB) tells the post-mortem the job ran on H100s.
    """
    data = yaml.safe_load((ROOT / "experiments" / "gke-b200-gemma3-1b.yaml").read_text())
    data["trainer"].update(colocated=False, generation_gpus_per_node=6)
    data["model"]["max_total_sequence_length"] = seq
    data["trainer"]["vllm_cfg"] = {"max_model_len": seq}
    data["trainer"]["overrides"] = [f"policy.train_micro_batch_size={micro}",
                                    f"policy.dtensor_cfg.activation_checkpointing={str(ac).lower()}"]
    # the calibration rows ran with PyTorch's default allocator: nbtools' expandable-segments default turned off
    data["trainer"]["env_vars"] = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}
    p = tmp_path / "exp.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_parse_oom_reads_every_size_of_torchs_message():
    row = _row("fit_calibration_h100x2_boundary.json", "google--gemma-3-1b-it", 4, 4096, True)
    m = fit.parse_oom(_log(row))
    assert (m.tried_gib, m.capacity_gib, m.free_gib, m.in_use_gib, m.allocated_gib, m.stranded_gib) == (
        16.0, 79.18, 15.35, 63.82, 49.5, 12.75)
    assert fit.parse_oom("RuntimeError: CUDA error: device-side assert triggered") is None
    short = fit.parse_oom("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB")
    assert short.tried_gib == 0.5 and short.capacity_gib is None


def test_postmortem_names_the_logits_block_and_a_change_that_fits(tmp_path):
    """Gemma-3-1B, 4 x 4096 tokens, checkpointing, 2 x H100: the 16 GiB request is the fp32 logits block."""
    row = _row("fit_calibration_h100x2_boundary.json", "google--gemma-3-1b-it", 4, 4096, True)
    cfg = config.load(_experiment(tmp_path, micro=4, seq=4096, ac=True))
    pm = fit.postmortem(_log(row), cfg)
    assert pm.phase == "loss_backward" and pm.term == "logits_fp32"
    assert pm.report.inputs.gpu.key == "h100" and pm.report.inputs.gpus == 2
    assert any("estimated for NVIDIA H100" in n for n in pm.notes)
    assert pm.allocation == "the fp32 logits [4, 4096, 262144] of a training micro-batch"
    assert pm.report.verdict == "does-not-fit"  # the estimate agrees: it would not have fitted
    assert pm.fix is not None and pm.fix.verdict == "fits"
    # the override, applied as the CLI would, gives an experiment whose estimate fits
    key, _, value = pm.fix.override.partition("=")
    fixed = config.load(_experiment(tmp_path, micro=4, seq=4096, ac=True), overrides={key: yaml.safe_load(value)})
    assert fit.check(fixed, gpu="h100").verdict in ("fits", "tight")
    # the measured run with that change: expandable segments fitted at 67.4 GiB (same table)
    if pm.fix.field == "expandable_segments":
        ok = _row("fit_calibration_h100x2_boundary.json", "google--gemma-3-1b-it", 4, 4096, True,
                  "expandable_segments:True")
        assert ok["status"] == "ok"


def test_postmortem_of_a_logprob_pass_oom_points_at_the_logprob_pass(tmp_path):
    """The log-prob pass with a larger logprob_batch_size than training ran out: the 32 GiB is its logits block."""
    row = _row("fit_calibration_h100x2_boundary.json", "google--gemma-3-1b-it", 1, 16384, True, status="oom")
    assert row["logprob_batch"] == 2 and row["oom_stage"] == "logprob"
    p = _experiment(tmp_path, micro=1, seq=16384, ac=True)
    data = yaml.safe_load(p.read_text())
    data["trainer"]["overrides"].append("policy.logprob_batch_size=2")
    p.write_text(yaml.safe_dump(data))
    pm = fit.postmortem(_log(row), config.load(p))
    assert pm.phase == "logprob" and pm.term == "logits_fp32"
    assert pm.allocation == "the fp32 logits [2, 16384, 262144] of the log-prob pass"
    assert pm.fix.verdict == "fits"  # expandable segments: 71.4 of 77.8 GiB; logprob_batch_size=1 is only tight
    lower = fit.evaluate(pm.report.inputs.with_(logprob_batch=1), suggest=False)
    assert lower.training.peak_phase == "loss_backward" and lower.verdict == "tight"
    # a recipe key travels in trainer.overrides: the experiment's own overrides are kept, the key replaced
    from nbtools.fit._postmortem import _override

    o = _override(pm.report.inputs, config.load(p), "policy.logprob_batch_size", 1, "logprob_batch")
    assert "'policy.logprob_batch_size=1'" in o and "policy.logprob_batch_size=2" not in o
    assert "'policy.train_micro_batch_size=1'" in o


@pytest.mark.slow  # console-script processes
def test_cli_diagnose_log_names_the_term_and_the_fix(tmp_path):
    row = _row("fit_calibration_h100x2_boundary.json", "google--gemma-3-1b-it", 4, 4096, True)
    log = tmp_path / "job.log"
    log.write_text(_log(row))
    exp = _experiment(tmp_path, micro=4, seq=4096, ac=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([str(BIN), "diagnose", "--log", str(log), "--experiment", str(exp)], capture_output=True,
                       text=True, timeout=120, cwd=ROOT, env=env)
    assert r.returncode == 1, r.stderr
    assert "oom (retry: no)" in r.stdout
    assert "phase loss_backward: largest term logits_fp32" in r.stdout
    assert "the fp32 logits [4, 4096, 262144]" in r.stdout
    assert "smallest change that fits:" in r.stdout and "CLI: " in r.stdout
    r = subprocess.run([str(BIN), "diagnose", "--log", str(log), "--experiment", str(exp), "--json"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    d = json.loads(r.stdout)
    assert d["cause"] == "oom" and d["postmortem"]["term"] == "logits_fp32"
    assert d["postmortem"]["fix"]["verdict"] == "fits" and d["postmortem"]["message"]["tried_gib"] == 16.0
    # a run-time override after --log is an override of the experiment, not a submission id
    r = subprocess.run([str(BIN), "diagnose", "--log", str(log), "--experiment", str(exp), "--json",
                        "model.max_total_sequence_length=2048"], capture_output=True, text=True, timeout=120,
                       cwd=ROOT, env=env)
    assert json.loads(r.stdout)["postmortem"]["term"] != "unknown", r.stderr


@pytest.mark.slow  # console-script processes
def test_cli_diagnose_log_without_experiment_says_how_to_get_the_term(tmp_path):
    row = _row("fit_calibration_h100x2.json", "meta-llama--Llama-3.1-8B-Instruct", 2, 4096, True)
    log = tmp_path / "job.log"
    log.write_text(_log(row))
    r = subprocess.run([str(BIN), "diagnose", "--log", str(log), "--json"], capture_output=True, text=True,
                       timeout=120, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    d = json.loads(r.stdout)
    assert d["cause"] == "oom" and d["postmortem"]["message"]["tried_gib"] == pytest.approx(3.91)
    assert d["postmortem"]["term"] == "unknown" and "--experiment" in d["postmortem"]["notes"][0]


def test_the_trainer_states_its_actor_and_its_keys_and_the_fit_follows_them(tmp_path):
    """Issue #26: the fit takes what differs by trainer from the trainer (``Trainer.fit_inputs``' FitProfile), never
    from its name: another profile for the same inputs changes the terms, the certainty and the override keys."""
    import dataclasses

    from nbtools import trainers

    row = _row("fit_calibration_h100x2_boundary.json", "google--gemma-3-1b-it", 4, 4096, True)
    cfg = config.load(_experiment(tmp_path, micro=4, seq=4096, ac=True))
    inputs, _ = trainers.get(cfg).fit_inputs()
    assert inputs["profile"].trainer == trainers.get(cfg).name and inputs["profile"].calibrated
    i = fit.inputs_from_experiment(cfg, gpu="h100")[0]
    mine = dataclasses.replace(i.profile, trainer="other", bf16_logits=True, tokens_upper_bound=True,
                               override_keys={"micro_batch": "actor.micro", "activation_checkpointing": None})
    base, other = fit.evaluate(i, suggest=False), fit.evaluate(i.with_(profile=mine), suggest=False)
    assert other.training.phase_terms["loss_backward"]["logits_fp32"] == pytest.approx(
        base.training.phase_terms["loss_backward"]["logits_fp32"] * 4 / 12, rel=0.01)  # 2 x bf16 vs 3 x fp32
    big = i.with_(micro_batch=64)
    assert fit.evaluate(big).certain and not fit.evaluate(big.with_(profile=mine)).certain
    pm = fit.postmortem_inputs(big.with_(profile=mine), _log(row), cfg)
    assert pm.fix is not None and pm.fix.config_key == "actor.micro"  # the only input this trainer lets one set
    assert fit.evaluate(big.with_(profile=mine)).to_dict()["inputs"]["framework"] == "other"
