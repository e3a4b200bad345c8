"""Runs under the vLLM venv (tools/vllm_venv.sh), not the project's: real vLLM loads an HF directory and generates
greedily from the prompt token ids given; prints one JSON line {"ids": [[...], ...], "load_s": ..., "generate_s": ...}.

    python tests/vllm/vllm_greedy.py MODEL_DIR MAX_TOKENS PROMPT_IDS_JSON
"""

import json
import os
import sys
import time


def main() -> None:
    model, max_tokens, prompts = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    # the engine core in this process: no second process to spawn and import vLLM again (one tiny model)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    # the KV cache in host memory: 1 GiB is ample for 64-token sequences (vLLM's default claims most of the machine)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    t0 = time.perf_counter()
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    # float32 as the rehearsal trains and merges; eager (no graph capture: nothing to gain on one tiny CPU model)
    # gpu_memory_utilization is the share of host memory vLLM requires free at start on CPUs (its default 0.92 fails
    # on a shared machine: "Available memory on node 0 ... is less than desired CPU memory utilization")
    llm = LLM(model=model, dtype="float32", enforce_eager=True, seed=0, max_model_len=64, gpu_memory_utilization=0.1)
    t1 = time.perf_counter()
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    t2 = time.perf_counter()
    print(json.dumps({"ids": [list(o.outputs[0].token_ids) for o in outs], "load_s": t1 - t0, "generate_s": t2 - t1}))


if __name__ == "__main__":  # vLLM may start its engine core by spawn, which re-imports this file
    main()
