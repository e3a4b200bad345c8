"""TEST DOUBLE of the part of vLLM that ``nbtools.evals.vllm_generate`` uses: ``LLM(model=..., seed=...,
tensor_parallel_size=..., max_model_len=...)``, ``SamplingParams(n, temperature, top_p, top_k, max_tokens, seed)`` and
``LLM.chat(list of message lists, sampling_params) -> list[RequestOutput]`` whose ``.outputs`` hold ``n``
``CompletionOutput`` with ``.text`` (vllm/entrypoints/llm.py, vllm/outputs.py). NOT vLLM: it generates with
transformers on CPU, applying the tokenizer's chat template with ``add_generation_prompt=True`` as ``LLM.chat`` does;
greedy at temperature 0, else sampled with the request's seed.

``SIM_VLLM_ANSWER_FORMAT=gsm8k`` (set by the simulated GKE for a verl experiment): the text reads the model's answer
tokens as the verl stand-in trained and scored them, ``#### X`` (nbtools' ``rehearsal.answer_format: gsm8k``), so an
evaluation scored with verl's GSM8K rule sees what the trainer saw.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput"]


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


@dataclass
class RequestOutput:
    prompt: str
    outputs: list[CompletionOutput]


def _as_trained(text: str) -> str:
    if os.environ.get("SIM_VLLM_ANSWER_FORMAT") != "gsm8k":
        return text
    words = {"<answer>": "####", "</answer>": ""}
    return " ".join(w for w in (words.get(t, t) for t in text.split()) if w)


class LLM:
    def __init__(self, model: str, *, seed: int = 0, tensor_parallel_size: int = 1, max_model_len: int | None = None,
                 **_: object):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(model)
        self.model = AutoModelForCausalLM.from_pretrained(model).eval()
        self.seed = seed

    def chat(self, messages, sampling_params: SamplingParams | None = None, **_: object) -> list[RequestOutput]:
        """One batched ``generate`` over every conversation (left-padded, as a decoder-only batch must be): vLLM
        batches its requests too, and a call per prompt cost the simulated GKE's evaluation jobs most of their time."""
        import torch

        sp = sampling_params or SamplingParams()
        prompts = [self.tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=True) for conv in messages]
        if not prompts:
            return []
        self.tok.padding_side = "left"
        if self.tok.pad_token_id is None:
            self.tok.pad_token = self.tok.eos_token
        batch = self.tok(prompts, return_tensors="pt", add_special_tokens=False, padding=True)
        torch.manual_seed(sp.seed if sp.seed is not None else self.seed)
        greedy = sp.temperature == 0
        with torch.no_grad():
            gen = self.model.generate(**batch, max_new_tokens=sp.max_tokens or 16, do_sample=not greedy,
                                      num_return_sequences=sp.n, pad_token_id=self.tok.pad_token_id,
                                      **({} if greedy else {"temperature": sp.temperature, "top_p": sp.top_p,
                                                            "top_k": sp.top_k if sp.top_k > 0 else 0}))
        width = batch.input_ids.shape[1]
        texts = [_as_trained(self.tok.decode(g[width:], skip_special_tokens=True)) for g in gen]
        return [RequestOutput(p, [CompletionOutput(j, texts[i * sp.n + j]) for j in range(sp.n)])
                for i, p in enumerate(prompts)]
