"""The evaluation job of a verl run: vLLM generations over the experiment's test split, scored per problem, written
in NeMo-RL's ``run_eval.py`` output format so ``evals.collect`` and notebook 07's paired statistics read it unchanged.

Why: verl has no evaluation script of its own for a merged model (v0.7.0's ``verl/trainer/main_generation.py`` writes
responses without scores and is gone in v0.9.0); its image has vLLM. This program runs there (``python -m
nbtools.evals.vllm_generate``, nbtools carried in ``py_modules``), reads the test parquet the preparation job wrote
(verl's rows: ``prompt`` chat messages, ``data_source``, ``reward_model.ground_truth``), generates ``n`` answers per
problem with ``vllm.LLM.chat``, scores each with the data source's rule as verl's reward does, and writes
``<save_path>/config.json`` and ``evaluation_data.json`` (each problem's samples consecutive), then prints the score
block as NeMo-RL's ``_print_results`` does. Several decodings (``--n 1 8 --temperature 0 1 --save-path A B``) share
one engine: the model loads once, and each decoding writes its own save path and prints its own block.

Example:
    python -m nbtools.evals.vllm_generate --data /data/gsm8k/test.parquet --model Qwen/Qwen2.5-32B-Instruct \\
        --save-path /data/eval/gsm8k_baseline --n 1 --temperature 0 --max-tokens 1024
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nbtools import rewards
from nbtools._atomic import write_json

__all__ = ["gsm8k_score", "SCORERS", "main"]

def gsm8k_score(response: str, ground_truth: str) -> float:
    """verl's GSM8K rule (verl v0.7.0 verl/utils/reward_score/gsm8k.py, ``method="strict"``) as a score: nbtools'
    ``verl_gsm8k`` reward, the one 08 re-scores a verl run's dumps with."""
    return rewards.verl_gsm8k(ground_truth, response)[0]


# data_source -> scorer, as verl's default_compute_score routes them (verl/utils/reward_score/__init__.py)
SCORERS: dict[str, Callable[[str, str], float]] = {"openai/gsm8k": gsm8k_score}


def _rows(path: str, limit: int | None) -> list[dict[str, Any]]:
    import pandas as pd

    df = pd.read_parquet(path)
    missing = {"prompt", "data_source", "reward_model"} - set(df.columns)
    if missing:
        sys.exit(f"{path}: no column(s) {sorted(missing)}; expected verl's rows (the preparation job's parquet)")
    rows = df.to_dict("records")
    return rows[:limit] if limit else rows


def _messages(prompt: Any) -> list[dict[str, str]]:
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in list(prompt)]


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k NeMo-RL reports: 1 - C(n-c, k) / C(n, k)."""
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="verl test parquet")
    ap.add_argument("--model", required=True, help="HF directory or Hub id")
    ap.add_argument("--save-path", required=True, nargs="+", help="one per decoding")
    ap.add_argument("--n", type=int, nargs="+", default=[1], help="samples per problem, one per decoding")
    ap.add_argument("--temperature", type=float, nargs="+", default=[0.0], help="one per decoding")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=-1)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--max-model-len", type=int, default=None)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--tensor-parallel-size", type=int, default=1)
    ap.add_argument("--limit", type=int, default=None)
    a = ap.parse_args(argv)
    if not len(a.save_path) == len(a.n) == len(a.temperature):
        ap.error(f"--save-path, --n and --temperature name the decodings: give each the same number of values, got "
                 f"{len(a.save_path)}, {len(a.n)}, {len(a.temperature)}")
    rows = _rows(a.data, a.limit)
    sources = sorted({str(r["data_source"]) for r in rows} - set(SCORERS))
    if sources:
        sys.exit(f"no scorer for data_source {sources}; nbtools scores {sorted(SCORERS)} as verl does")
    from vllm import LLM, SamplingParams

    # one engine for every decoding: its start (weights, CUDA graphs, KV cache) is minutes on a real model
    llm = LLM(model=a.model, seed=a.seed, tensor_parallel_size=a.tensor_parallel_size,
              **({"max_model_len": a.max_model_len} if a.max_model_len else {}))
    for save_path, n, temperature in zip(a.save_path, a.n, a.temperature, strict=True):
        params = SamplingParams(n=n, temperature=temperature, top_p=a.top_p, top_k=a.top_k, max_tokens=a.max_tokens,
                                seed=a.seed)
        _decode(a, rows, llm.chat([_messages(r["prompt"]) for r in rows], params), Path(save_path), n, temperature)
    return 0


def _decode(a: argparse.Namespace, rows: list[dict[str, Any]], outputs: list[Any], save: Path, n: int,
            temperature: float) -> None:
    """Score one decoding's outputs, write its ``config.json`` and ``evaluation_data.json``, print its score block."""
    data, total = [], 0.0
    for row, out in zip(rows, outputs, strict=True):
        truth = str(row["reward_model"]["ground_truth"])
        score = SCORERS[str(row["data_source"])]
        prompt = "\n".join(m["content"] for m in _messages(row["prompt"]))
        got = [score(o.text, truth) for o in out.outputs]
        total += pass_at_k(n, sum(1 for r in got if r >= 1.0), 1)
        for o, reward in zip(out.outputs, got, strict=True):
            data.append({"prompt": prompt, "response": o.text, "reward": reward,
                         "message_log": str([*_messages(row["prompt"]), {"role": "assistant", "content": o.text}]),
                         "extra_env_info": str({"ground_truth": truth, "data_source": str(row["data_source"])}),
                         "sample_index": len(data)})
    save.mkdir(parents=True, exist_ok=True)
    for name, payload in (("config.json", {"model_name": a.model, "dataset_name": a.data, "metric": "pass@k", "k_value": 1,
                                           "num_tests_per_prompt": n, "temperature": temperature, "top_p": a.top_p,
                                           "top_k": a.top_k, "max_new_tokens": a.max_tokens, "seed": a.seed}),
                          ("evaluation_data.json", {"evaluation_data": data})):
        write_json(save / name, payload, indent=4)
    model_name, dataset_name = os.path.basename(a.model.rstrip("/")), os.path.basename(a.data)
    max_new_tokens, top_p, top_k, seed, num_tests_per_prompt = a.max_tokens, a.top_p, a.top_k, a.seed, n
    print("\n" + "=" * 60)
    print(f"{model_name=} {dataset_name=}")
    print(f"{max_new_tokens=} {temperature=} {top_p=} {top_k=} {seed=}\n")
    print(f"metric=pass@1 {num_tests_per_prompt=}\n")
    print(f"score={total / len(rows):.4f} ({total}/{len(rows)})")
    print("=" * 60 + "\n", flush=True)


if __name__ == "__main__":
    sys.exit(main())
