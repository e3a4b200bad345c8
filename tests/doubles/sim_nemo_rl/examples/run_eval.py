"""TEST DOUBLE of NeMo-RL v0.7.0 ``examples/run_eval.py``, in the simulated GKE's NeMo-RL checkout (sim_gke.py).

NOT NeMo-RL (no vLLM, no GPUs, no MATH-500 here). It takes run_eval.py's command line (``--config`` plus plain
dotlist overrides, as ``OmegaConf.from_cli`` reads them), loads the eval config with its ``defaults:`` parent, and
evaluates the HuggingFace model at ``generation.model_name`` on the rehearsal's held-out problems with
``nbtools.evals.evaluate_local`` (``eval.num_tests_per_prompt`` samples per problem at ``generation.temperature``),
whatever ``data.dataset_name`` says. Where the real one runs each part, so does the double: the driver (on the head
pod, which has no GPU) loads the tokenizer from ``generation.model_name`` (``tokenizer.name:
${generation.model_name}``, ``get_tokenizer`` in ``examples/run_eval.py`` at v0.7.0: transformers' AutoTokenizer; the
double reads the same ``tokenizer.json`` with ``tokenizers``, under transformers), and the model is loaded and
generates in a Ray task holding ``cluster.gpus_per_node`` GPUs (NeMo-RL's vLLM workers), so on the simulated GKE on a
GPU worker node with that pod's own disk; a cluster with no GPUs (a local test head) runs it where it can. Like
``nemo_rl/evals/eval.py`` it prints the score block (``_print_results``:
basenames, f-string reprs, pass@k summed over problems) and, with ``eval.save_path``, writes ``config.json`` and
``evaluation_data.json`` (prompt, response, reward 0/1, ``message_log`` and ``extra_env_info`` as Python reprs,
``sample_index``; each prompt's samples consecutive).
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_nemo_rl_config import apply_dotlist, get, load_config, sim  # noqa: E402


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator NeMo-RL uses: 1 - C(n-c, k) / C(n, k)."""
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _generate(nbtools_root: str, rehearsal_config: str, model_path: str, n: int, temperature: float, top_p: float,
              top_k: int, seed: int):
    """The GPU part (NeMo-RL's vLLM workers), run as a Ray task: load ``model_path`` where it runs, generate, score."""
    if nbtools_root not in sys.path:
        sys.path.insert(0, nbtools_root)
    from nbtools.config import load
    from nbtools.evals import evaluate_local
    from nbtools.rehearsal import task

    reh = load(rehearsal_config, backend="local")
    return evaluate_local(model_path, task.held_out_problems(reh), reward=list(reh.rehearsal.reward_functions), n=n,
                          temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=reh.rehearsal.max_new_tokens,
                          seed=seed, progress_desc="run_eval double").table


def _driver_tokenizer(model_path: str):
    """The driver's ``get_tokenizer``: the tokenizer files of ``generation.model_name`` loaded where the driver runs.

    NeMo-RL loads it with transformers' ``AutoTokenizer``; the double loads the same ``tokenizer.json`` with the
    ``tokenizers`` library under it (transformers' import alone costs the driver seconds of CPU, four times per notebook
    07) and fails as transformers does where the path holds no tokenizer (``OSError: Can't load tokenizer for ...``).
    """
    from tokenizers import Tokenizer

    path = Path(model_path, "tokenizer.json")
    if not path.is_file():
        raise OSError(f"Can't load tokenizer for '{model_path}'. If you were trying to load it from "
                      "'https://huggingface.co/models', make sure you don't have a local directory with the same name. "
                      f"Otherwise, make sure '{model_path}' is the correct path to a directory containing all relevant "
                      "files for a PreTrainedTokenizerFast tokenizer.")
    return Tokenizer.from_file(str(path))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    config = argv[argv.index("--config") + 1] if "--config" in argv else "examples/configs/evals/eval.yaml"
    cfg = apply_dotlist(load_config(config), argv)
    model_path = str(get(cfg, "generation.model_name"))
    dataset = str(get(cfg, "data.dataset_name"))
    n, k = int(get(cfg, "eval.num_tests_per_prompt", 1)), int(get(cfg, "eval.k_value", 1))
    temperature, top_p, top_k = float(get(cfg, "generation.temperature", 0.0)), float(get(cfg, "generation.top_p", 1.0)), int(get(cfg, "generation.top_k", -1))
    seed, metric = int(get(cfg, "eval.seed", 42)), str(get(cfg, "eval.metric", "pass@k"))
    max_model_len = get(cfg, "generation.vllm_cfg.max_model_len", 2048)
    if not model_path.startswith("/") and not os.path.isdir(model_path):  # a Hub id: the stand-in Hub has one model, the rehearsal's warm start, which the
        # run_grpo.py double saved beside the experiment's dirs (save_path = <experiment dir>/eval/<dataset>_<label>)
        hub = os.path.join(os.path.dirname(os.path.dirname(str(get(cfg, "eval.save_path")))), "baseline_hf")
        print(f"(NeMo-RL test double) {model_path} comes from the stand-in Hub: {hub}", flush=True)
        model_path = hub
    _driver_tokenizer(model_path)  # the driver's tokenizer, here (the head): a missing path fails as in NeMo-RL
    print(f"(NeMo-RL test double) evaluating {model_path} on the rehearsal's held-out split as {dataset!r}", flush=True)
    import ray

    ray.init(address="auto", log_to_driver=True, include_dashboard=False)
    gpus = min(int(get(cfg, "cluster.gpus_per_node", 1)), int(ray.cluster_resources().get("GPU", 0)))
    generate = ray.remote(num_gpus=gpus, num_cpus=0)(_generate)
    table = ray.get(generate.remote(sim()["nbtools_root"], sim()["rehearsal_config"], model_path, n, temperature, top_p,
                                    top_k, seed))  # problems in dataset order, each one's samples consecutive
    rows, score = [], 0.0
    for _, group in table.groupby("problem_id", sort=False):
        correct = int(group["correct"].sum())
        score += pass_at_k(n, correct, k)
        for r in group.itertuples():
            rows.append({"prompt": r.prompt, "response": r.response, "reward": 1.0 if r.correct else 0.0,
                         "message_log": str([{"role": "user", "content": r.prompt}, {"role": "assistant", "content": r.response},
                                             {"role": "environment", "content": "Environment: correct" if r.correct else
                                              "Environment: incorrect"}]),
                         "extra_env_info": str({"ground_truth": r.ground_truth}), "sample_index": len(rows)})
    problems = table["problem_id"].nunique()
    save = get(cfg, "eval.save_path")
    if save:
        Path(save).mkdir(parents=True, exist_ok=True)
        Path(save, "config.json").write_text(json.dumps(
            {"model_name": model_path, "dataset_name": dataset, "metric": metric, "k_value": k, "num_tests_per_prompt": n,
             "temperature": temperature, "top_p": top_p, "top_k": top_k}, indent=4))
        Path(save, "evaluation_data.json").write_text(json.dumps({"evaluation_data": rows}, indent=4))
    model_name, dataset_name = os.path.basename(model_path.rstrip("/")), os.path.basename(dataset)
    max_new_tokens, num_tests_per_prompt = max_model_len, n
    print("\n" + "=" * 60)
    print(f"{model_name=} {dataset_name=}")
    print(f"{max_new_tokens=} {temperature=} {top_p=} {top_k=} {seed=}\n")
    print(f"metric={metric[:-1]}{k} {num_tests_per_prompt=}\n")
    print(f"score={score / problems:.4f} ({score}/{problems})")
    print("=" * 60 + "\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
