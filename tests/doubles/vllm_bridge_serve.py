"""Runs under the vLLM venv (tools/vllm_venv.sh), started by the bridge (``vllm_bridge/vllm/__init__.py``): real
vLLM loads the model and answers the bridge's ``chat`` calls. It lives outside ``vllm_bridge/`` so that its own
directory (``sys.path[0]``) holds no package named ``vllm``: ``import vllm`` here must be the venv's.

Protocol, one JSON line each way, the answers prefixed with :data:`MARK` (vLLM logs to stdout too): the first line
read is ``LLM``'s keyword arguments, answered ``{"vllm": version, "load_s"}`` once the engine is up; each later line
is ``{"params": SamplingParams kwargs, "messages": [conversation, ...]}``, answered ``{"outputs": [[{"text",
"token_ids", "finish_reason"}, ...], ...], "prompt_token_ids": [...], "generate_s"}``. End of input ends it.
"""

import json
import os
import sys
import time

MARK = "NBTOOLS-VLLM-BRIDGE "


def answer(payload: dict) -> None:
    sys.stdout.write("\n" + MARK + json.dumps(payload) + "\n")
    sys.stdout.flush()


def main() -> None:
    t0 = time.perf_counter()
    kwargs = json.loads(sys.stdin.readline())
    import vllm
    from vllm import LLM, SamplingParams

    if os.environ.get("NBTOOLS_VLLM_BRIDGE_SERVE") != "1" or not hasattr(vllm, "__version__"):
        sys.exit(f"vllm_bridge_serve: imported {vllm.__file__}, not real vLLM")

    llm = LLM(**kwargs)
    answer({"vllm": vllm.__version__, "load_s": time.perf_counter() - t0})
    for line in sys.stdin:
        req = json.loads(line)
        t1 = time.perf_counter()
        outs = llm.chat(req["messages"], SamplingParams(**req["params"]), use_tqdm=False)
        answer({"generate_s": time.perf_counter() - t1, "prompt_token_ids": [list(o.prompt_token_ids) for o in outs],
                "outputs": [[{"text": c.text, "token_ids": list(c.token_ids), "finish_reason": c.finish_reason}
                             for c in o.outputs] for o in outs]})


if __name__ == "__main__":  # vLLM may start its engine core by spawn, which re-imports this file
    main()
