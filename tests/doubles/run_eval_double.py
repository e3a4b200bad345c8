"""Test double for NeMo-RL's `examples/run_eval.py` (vLLM + GPUs cannot run here), shared by the evals tests.

`FAKE_RUN_EVAL` takes the exact dotlist overrides `nbtools.evals.build_eval_job` produced, prints unrelated output
plus the score block exactly as `nemo_rl/evals/eval.py::_print_results` does, and writes `eval.save_path`
(`config.json`, `evaluation_data.json` with str() reprs) like `_save_evaluation_data_to_json`. The baseline solves
problems i % 4 == 0 (10/40); a model whose path contains "merged" solves i % 4 != 3 (30/40), breaking none.
"""

from __future__ import annotations

PREFIX = "cd /opt/nemo-rl && python -u examples/run_eval.py"  # what build_eval_job's entrypoint starts with

FAKE_RUN_EVAL = r'''
import json, os, sys
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a and not a.startswith("--"))
model_path, dataset = args["generation.model_name"], args["data.dataset_name"]
n, save = int(args["eval.num_tests_per_prompt"]), args["eval.save_path"]
temperature = float(args["generation.temperature"])
print("INFO worker.py:1820 -- Connected to Ray cluster.")
print({"generation": {"model_name": model_path}, "data": {"dataset_name": dataset}})
tuned = "merged" in model_path
rows, score = [], 0.0
for i in range(40):
    ok = (i % 4 != 3) if tuned else (i % 4 == 0)     # 10/40 -> 30/40, never broken
    for s in range(n):
        reward = 1.0 if ok else 0.0
        rows.append({"prompt": f"problem {i}", "response": f"answer {i}", "reward": reward,
                     "message_log": str([{"role": "user", "content": f"problem {i}"}]),
                     "extra_env_info": str({"ground_truth": str(i), "level": 1 + i % 5}), "sample_index": len(rows)})
    score += 1.0 if ok else 0.0
os.makedirs(save, exist_ok=True)
json.dump({"model_name": model_path, "dataset_name": dataset, "metric": "pass@k", "k_value": 1,
           "num_tests_per_prompt": n, "temperature": temperature, "top_p": 1.0, "top_k": -1},
          open(os.path.join(save, "config.json"), "w"), indent=2)
json.dump({"evaluation_data": rows}, open(os.path.join(save, "evaluation_data.json"), "w"), indent=2)
model_name, dataset_name = os.path.basename(model_path), os.path.basename(dataset)
max_new_tokens, top_p, top_k, seed, num_tests_per_prompt = 2048, 1.0, -1, 42, n
print("\n" + "=" * 60)
print(f"{model_name=} {dataset_name=}")
print(f"{max_new_tokens=} {temperature=} {top_p=} {top_k=} {seed=}\n")
print(f"metric=pass@1 {num_tests_per_prompt=}\n")
print(f"score={score / 40:.4f} ({score}/40)")
print("=" * 60 + "\n")
'''
