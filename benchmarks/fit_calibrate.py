"""Calibrate ``nbtools.fit``: one real GRPO training step per case, NeMo-RL's DTensor policy, peak GPU memory.

Each case builds a real architecture from its Hugging Face ``config.json`` with random weights and runs the step the
way NeMo-RL's DTensor v2 policy worker does (read from NeMo-RL v0.7 / NeMo-Automodel):

* fp32 master parameters, FSDP2 ``fully_shard`` per decoder layer and on the root with
  ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32, output_dtype=fp32)`` over a process group of all ranks
  (NCCL; one rank on one GPU); activation checkpointing, when on, wraps ``mlp``, ``self_attn``, ``input_layernorm``
  and ``post_attention_layernorm`` of every layer (Automodel's scheme), before sharding;
* ``torch.optim.AdamW`` (lr 5e-6, weight decay 0.01; fp32 states), two micro-batches per step (gradient
  accumulation), ``clip_grad`` at 1.0, ``optimizer.step()``, ``zero_grad()``;
* forward under ``torch.autocast(bf16)`` with an all-ones bool attention mask and explicit position ids (and zero
  ``token_type_ids`` for Gemma-3, as v0.7.0's ``model_forward`` passes them); fp32 logits (the root's
  ``output_dtype``); the loss's token log-probs through NeMo-RL v0.7.0's own ``get_next_token_logprobs_from_logits``
  (``nemo_rl/distributed/model_utils.py``, put on ``sys.path`` with ``--nemo-rl DIR`` on the GPU machine, never
  committed here; a reproduction otherwise, the table's meta says which ran) - no chunk size reaches it on the DTensor
  path - and NeMo-RL's clipped policy-gradient loss with the k3 KL penalty against reference log-probs;
* then the log-prob pass (``torch.no_grad()``, ``logprob_batch`` rows) as v0.7.0's
  ``LogprobsPostProcessor._compute_local_logprobs`` runs it: log-softmax of the whole logits, or with
  ``logprob_chunk`` (``policy.logprob_chunk_size``) chunk by chunk, the chunks concatenated.

Step 1 creates the optimizer states; step 2 is measured (``torch.cuda.max_memory_allocated`` per phase, reset in
between), so the peak is the steady state in which parameters, gradients and AdamW states all live on the GPU. Each
rank also records the caching allocator's view (``reserved_bytes.all.peak``, ``active_bytes.all.peak``,
``num_alloc_retries``, ``num_ooms`` from ``torch.cuda.memory_stats()``), the device memory outside it (``mem_get_info``
used - ``memory_reserved()``) after NCCL's start, after set-up, after each step and at an out-of-memory, and every size
the out-of-memory message states (``ranks`` of each row). ``--allocator-cap-gib`` caps the allocator per GPU, to run a
larger card's allocator as a smaller one's (the memory outside it stays uncapped). ``--emulate-gpu h100`` runs a
larger card as the whole smaller one: each rank, before NCCL, cuBLAS or the allocator touch the card, takes the
difference to the H100's 81,559 MiB with a raw ``cudaMalloc`` outside PyTorch (CuPy's runtime binding, else
libcudart through ctypes), so the allocator's ``cudaMalloc`` and everything outside it fail where an H100's would;
each row records the real card (``card``), ``emulate_gpu`` and the pad, the meta names the emulated GPU and keeps the
real one, and the device samples and OOM figures are given net of the pad. Every
case runs in fresh processes (forked from a parent that imported torch but never touched CUDA), so fragmentation and
cached blocks of one case never reach the next; an out-of-memory is caught and recorded with the allocation that failed
and PyTorch's whole message (a cuBLAS allocation failure counts as one); when a rank fails its peers get 15 s, then
are killed, so a rank stuck in a collective never holds up the next case.

Run (one GPU; writes a JSON document and a CSV table)::

    python fit_calibrate.py --configs ../nbtools/data/model_configs --out results/fit_calibration.json
    python fit_calibrate.py --cases smoke --out /tmp/smoke.json                 # 2 small cases
    python fit_calibrate.py --nproc 2 --cases 2gpu --nemo-rl DIR --out results/fit_calibration_h100x2.json  # 2 GPUs
    python fit_calibrate.py --nproc 4 --cases 4gpu --emulate-gpu h100 --nemo-rl DIR \
        --out results/fit_calibration_h100x4.json                      # 4 GPUs of any larger kind, run as H100s
    #   (--nproc takes any world size: one process per GPU, FSDP2 over all of them)
    #   (DIR holds nemo_rl/distributed/model_utils.py and nemo_rl/algorithms/logits_sampling_utils.py of v0.7.0)
    torchrun --nproc-per-node 2 fit_calibrate.py --worker --case '{"model": ...}'  # one case under torchrun

``--device cpu`` runs the same code path on CPU ranks with gloo (no memory numbers): a check of the script itself.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime as _dt
import json
import os
import re
import socket
import sys
import time
import traceback
from pathlib import Path

for _k, _v in (("PYTORCH_NVML_BASED_CUDA_CHECK", "1"), ("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)  # NVLink multicast off (the device machines' rule); CUDA untouched before fork
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent
DEFAULT_CONFIGS = HERE.parent / "nbtools" / "data" / "model_configs"
GIB = 1024**3

L32, Q15, G1, Q4 = "meta-llama--Llama-3.2-1B", "Qwen--Qwen2.5-1.5B", "google--gemma-3-1b-it", "Qwen--Qwen3-4B"

# (model, micro_batch, seq_len, activation_checkpointing[, extra]) in priority order (every model early, the
# out-of-memory cases after the fitting ones). Chosen with the estimator so that each case is clearly on one side of a
# 140 GiB H200: estimated <= ~75% of it, or >= ~135% of it (never in between, where a verdict is a coin toss).
CASES_DEFAULT: list[tuple] = [
    (L32, 1, 1024, False, {"probe": True}),
    (G1, 1, 1024, False, {"probe": True}),
    (Q15, 1, 1024, False, {"probe": True}),
    (Q4, 1, 1024, False, {"probe": True}),
    (L32, 4, 2048, False),
    (G1, 2, 2048, False),
    (Q15, 4, 2048, False),
    (Q4, 4, 2048, True),
    (L32, 8, 4096, True),
    (G1, 8, 2048, True),
    (Q15, 8, 4096, True),
    (Q4, 2, 2048, False),
    (L32, 4, 4096, False),
    (G1, 2, 4096, False),
    (Q15, 4, 4096, True, {"foreach": False}),
    (Q4, 4, 4096, True),
    (L32, 16, 8192, False),
    (G1, 16, 4096, True),
    (Q15, 32, 4096, True),
    (Q4, 8, 8192, False),
    (G1, 4, 4096, True),
    (Q15, 4, 4096, False),
    (G1, 8, 4096, False),
    (L32, 4, 4096, True),
]
# Second run: the region around the H200's 139.8 GiB, to see where an allocated peak stops fitting (the caching
# allocator needs headroom), with PyTorch's default allocator and with expandable segments; Qwen3-1.7B-Base (the
# H200 experiment's model); log-prob passes with a larger batch than training (logprob_batch_size).
ES = {"alloc_conf": "expandable_segments:True"}
Q17 = "Qwen--Qwen3-1.7B-Base"
CASES_BOUNDARY: list[tuple] = [
    (Q17, 2, 4096, False, {"probe": True}),
    (Q17, 4, 4096, True),
    (L32, 4, 14848, True),
    (Q15, 2, 11008, False),
    (G1, 1, 16384, False),
    (Q4, 2, 12288, True),
    (Q17, 4, 11008, True),
    (L32, 4, 16384, True),
    (Q15, 2, 12032, False),
    (G1, 4, 7936, True),
    (Q4, 2, 14336, True),
    (Q17, 4, 12032, True),
    (L32, 8, 8704, True),
    (Q15, 2, 12800, False),
    (G1, 4, 5120, False),
    (Q4, 2, 15616, True),
    (Q17, 4, 12800, True),
    (L32, 4, 9728, False),
    (Q15, 2, 13056, False),
    (G1, 2, 9984, False),
    (Q4, 1, 10496, False),
    (Q17, 2, 12032, False),
    (L32, 4, 9984, False),
    (Q15, 4, 14592, True),
    (G1, 4, 8704, True),
    (Q4, 4, 8448, True),
    (Q17, 4, 13568, True),
    (L32, 8, 8704, True, ES),
    (Q15, 2, 12800, False, ES),
    (L32, 4, 9728, False, ES),
    (Q15, 2, 13056, False, ES),
    (L32, 4, 9984, False, ES),
    (Q15, 4, 14592, True, ES),
    (Q15, 2, 4096, False, {"logprob_batch": 8}),
    (G1, 1, 2048, False, {"logprob_batch": 8}),
]
# Third run, out of sample: an 80 GiB H100, cases whose verdicts nbtools.fit predicted before the run
# (benchmarks/results/fit_predictions_h100.json, committed first) - fits, tight and does-not-fit.
CASES_H100: list[tuple] = [
    (L32, 2, 2048, False), (L32, 4, 4096, True), (L32, 4, 4096, False), (L32, 8, 4096, True), (L32, 8, 4096, True, ES),
    (Q15, 2, 4096, False), (Q15, 4, 4096, True), (Q15, 4, 4096, False), (Q15, 8, 4096, True),
    (G1, 1, 2048, False), (G1, 2, 4096, False), (G1, 4, 2048, False), (G1, 4, 4096, True), (G1, 4, 4096, True, ES),
    (G1, 2, 8192, False), (Q4, 1, 1024, False), (Q4, 2, 2048, True), (Q4, 2, 2048, False),
    (Q17, 2, 4096, False), (Q17, 4, 4096, True), (Q17, 4, 4096, False), (L32, 2, 8192, False), (Q15, 2, 8192, True),
    (Q17, 8, 4096, True),
]
# Fourth run: two H100s (FSDP2 over both), NeMo-RL's log-prob paths (default and ``logprob_chunk_size``), Gemma-3's
# 262k vocabulary at 8k-16k tokens per micro-batch with and without activation checkpointing, Llama-3.1-8B. Cases
# on both sides of the 79.2 GiB card, a third or more expected out of memory; cheap cases first.
L8 = "meta-llama--Llama-3.1-8B-Instruct"
CH = {"logprob_chunk": 1024}
CASES_2GPU: list[tuple] = [
    (L32, 4, 4096, False, {"probe": True}),
    (G1, 1, 8192, False, {"probe": True}),
    (Q15, 4, 4096, True),
    (Q17, 4, 4096, True),
    (G1, 2, 8192, True),
    (G1, 1, 16384, True),
    (G1, 1, 8192, True, {"logprob_batch": 2}),
    (G1, 1, 8192, True, {"logprob_batch": 2, **CH}),
    (G1, 1, 8192, True, {"logprob_batch": 4}),
    (G1, 1, 8192, True, {"logprob_batch": 4, **CH}),
    (Q4, 2, 4096, True),
    (L8, 1, 2048, True),
    (G1, 2, 8192, False),
    (G1, 2, 16384, True),
    (G1, 1, 16384, False, CH),
    (L32, 4, 8192, False),
    (Q15, 4, 8192, True),
    (Q17, 2, 16384, True),
    (Q4, 4, 4096, False),
    (L32, 8, 8192, True),
    (L8, 1, 4096, True),
    (L8, 2, 4096, True),
]
# Fifth run, same machine kind: the boundary of the two-GPU card (16k tokens per micro-batch in several shapes),
# expandable segments on the two cases that ran out with >10 GiB reserved but unallocated, the per-parameter AdamW.
CASES_2GPU_B: list[tuple] = [
    (G1, 2, 8192, True, ES),
    (Q15, 4, 8192, True, ES),
    (G1, 4, 4096, True),
    (G1, 8, 2048, True),
    (L32, 4, 4096, True),
    (L32, 2, 8192, True),
    (L32, 1, 16384, True),
    (L32, 4, 8192, True),
    (Q4, 2, 8192, True),
    (Q4, 1, 4096, False),
    (Q17, 1, 16384, True),
    (Q17, 2, 8192, True),
    (G1, 1, 16384, True, CH),
    (G1, 1, 16384, True, {"logprob_batch": 2}),
    (L8, 1, 2048, True, {"foreach": False}),
    (L8, 1, 2048, False),
    (L8, 1, 8192, True),
    (Q15, 8, 4096, True),
    (G1, 4, 4096, False),
    (Q17, 4, 8192, True),
    (G1, 4, 4096, True, ES),
]
# Sixth run, out of sample: verdicts predicted by nbtools.fit after the two runs above were fitted, committed first
# (benchmarks/results/fit_predictions_h100x2.json) - fits, tight and does-not-fit, same machine kind.
CASES_2GPU_OOS: list[tuple] = [
    (Q17, 8, 2048, True), (L32, 2, 8192, False), (G1, 2, 4096, True), (G1, 1, 12288, True), (L8, 1, 1024, False),
    (G1, 2, 6144, True), (Q15, 2, 4096, False, {"logprob_batch": 8, "logprob_chunk": 2048}), (Q4, 2, 6144, True),
    (L8, 1, 4096, True, {"foreach": False}), (Q15, 4, 6144, True),
    (Q17, 2, 12288, True), (G1, 2, 7168, True), (L32, 2, 10240, False), (G1, 1, 10240, False),
    (Q15, 2, 8192, False), (G1, 1, 20480, True), (Q17, 2, 14336, True), (L32, 4, 9216, True), (Q4, 2, 9216, True),
    (L8, 1, 6144, True, {"foreach": False}), (Q4, 1, 6144, False),
]
# Seventh run, same machine kind: the out-of-sample miss (Qwen2.5-1.5B 4 x 6144, checkpointing on: cuBLAS could not
# create the backward thread's handle with 77.65 GiB reserved) three times, the two fitting cases that dominate it
# (larger estimate, logits block at least as large) twice each, and its neighbours - with the allocator's counters
# and the memory outside it recorded per rank, to tell non-allocator memory from fragmentation.
CASES_2GPU_MISS: list[tuple] = [
    (Q15, 4, 6144, True), (L32, 4, 8192, True), (Q17, 2, 12288, True), (Q15, 4, 5120, True),
    (Q15, 4, 6144, True), (Q15, 4, 7168, True), (L32, 4, 8192, True), (Q15, 2, 12288, True),
    (Q17, 2, 12288, True), (Q15, 4, 6656, True), (Q15, 4, 6144, True), (Q15, 4, 6144, True, ES),
]
# Eighth run, four GPUs (issue 46): FSDP2 over 4 ranks, the calibrated architectures and Llama-3.1-8B, cases on
# both sides of an 80 GiB H100 (emulated with --emulate-gpu h100 where larger cards came), clear fits and clear
# out-of-memory cases first, then the boundary; the allocator's default first, then expandable segments on the
# boundary cases and on fitting ones (the reserved/allocated ratio of each setting).
CASES_4GPU: list[tuple] = [
    (L32, 4, 4096, False, {"probe": True}), (G1, 1, 8192, False, {"probe": True}), (Q15, 4, 4096, True),
    (Q17, 2, 8192, True), (Q4, 2, 8192, True), (L8, 1, 2048, True), (L8, 1, 4096, False), (L8, 2, 4096, True),
    (L32, 4, 8192, True), (Q4, 1, 4096, False), (G1, 2, 4096, False), (L32, 2, 16384, True), (L8, 1, 8192, True),
    (Q15, 4, 6144, True), (G1, 1, 8192, True, {"logprob_batch": 4}), (Q15, 2, 8192, True, {"logprob_batch": 4, **CH}),
    (L32, 4, 8192, False), (Q4, 4, 8192, True), (L8, 2, 4096, False), (L8, 4, 8192, True), (G1, 4, 4096, False),
    (Q15, 2, 16384, False),
    (G1, 1, 16384, True), (L8, 4, 4096, True), (L8, 1, 16384, True), (Q15, 4, 8192, True), (Q17, 4, 8192, True),
    (G1, 4, 4096, True), (G1, 2, 8192, True), (Q4, 2, 4096, False), (Q15, 4, 4096, False),
    (L8, 2, 8192, True, {"foreach": False}),
]
CASES_4GPU_ES: list[tuple] = [
    (Q15, 4, 8192, True, ES), (Q17, 4, 8192, True, ES), (G1, 4, 4096, True, ES), (G1, 2, 8192, True, ES),
    (Q4, 2, 4096, False, ES), (L8, 4, 4096, True, ES), (L8, 1, 16384, True, ES), (Q15, 4, 4096, False, ES),
    (L32, 4, 8192, True, ES), (Q15, 4, 6144, True, ES), (L8, 2, 4096, True, ES), (L32, 4, 4096, False, ES),
    (G1, 1, 16384, True, ES), (Q4, 2, 8192, True, ES), (L8, 2, 4096, False, ES), (L32, 4, 8192, False, ES),
]
# Ninth run, out of sample: four GPUs again, verdicts predicted by nbtools.fit with the four-GPU margin and stranded
# band and committed first (benchmarks/results/fit_predictions_h100x4.json: 11 fits, 5 tight, 8 does-not-fit).
CASES_4GPU_OOS: list[tuple] = [
    (L8, 1, 3072, False), (Q4, 1, 6144, False), (Q15, 1, 12288, False), (G1, 2, 6144, True), (G1, 3, 4096, True),
    (L8, 1, 12288, True), (L8, 3, 4096, True), (Q17, 4, 6144, True), (Q17, 2, 12288, True), (Q15, 4, 7168, True),
    (Q15, 2, 12288, True), (L32, 1, 20480, False), (L8, 1, 6144, False), (Q4, 4, 6144, True), (Q4, 2, 12288, True),
    (L32, 4, 10240, True), (L32, 2, 12288, False), (G1, 1, 20480, True), (G1, 2, 10240, True),
    (Q4, 4, 6144, True, ES), (L32, 4, 10240, True, ES), (Q15, 4, 7168, True, ES), (L8, 1, 6144, False, ES),
    (Q4, 2, 12288, True, ES),
]
# The four-GPU out-of-sample run's one out-of-memory case predicted ``tight`` (Qwen2.5-1.5B 4 x 7168, checkpointing,
# PyTorch's default allocator) twice more, and once with expandable segments: is it the same failure each time, and
# does the same step fit once the allocator strands nothing?
CASES_4GPU_TIGHT: list[tuple] = [(Q15, 4, 7168, True), (Q15, 4, 7168, True), (Q15, 4, 7168, True, ES)]
# The two-GPU miss again (issue 46), under --emulate-gpu h100 on larger cards: twice with the default allocator,
# once with expandable segments, and the two fitting cases that dominate it.
CASES_2GPU_MISS_EMU: list[tuple] = [
    (Q15, 4, 6144, True), (L32, 4, 8192, True), (Q15, 4, 6144, True, ES), (Q17, 2, 12288, True), (Q15, 4, 6144, True),
]
CASES_SMOKE: list[tuple] = [(L32, 1, 512, False, {"probe": True}), (G1, 1, 512, True)]


def _case_dict(t: tuple) -> dict:
    extra = t[4] if len(t) > 4 else {}
    return {"model": t[0], "micro_batch": t[1], "seq_len": t[2], "activation_checkpointing": t[3], **extra}


# ------------------------------------------------------------------------------------------------ worker side


def _fwd_kwargs(cfg, data, torch) -> dict:
    """Keyword arguments of NeMo-RL's ``model_forward`` (v0.7.0 ``nemo_rl/models/automodel/train.py``)."""
    kw = {"input_ids": data["input_ids"], "attention_mask": data["attention_mask"],
          "position_ids": data["position_ids"], "use_cache": False}
    if str(getattr(cfg, "model_type", "")).startswith("gemma3"):
        kw["token_type_ids"] = torch.zeros_like(data["input_ids"])
    return kw


def _load_config(configs: Path, name: str):
    from transformers import AutoConfig

    data = json.loads((configs / f"{name}.json").read_text())
    cfg = AutoConfig.for_model(**data)
    if "text_config" in data:  # a multimodal checkpoint: train its language model
        cfg = cfg.text_config
    cfg.use_cache = False
    cfg._attn_implementation = "sdpa"
    return cfg


def _build(cfg, device, ac: bool, mesh, torch):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import AutoModelForCausalLM

    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="sdpa")
        except TypeError:
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32, attn_implementation="sdpa")
    layers = model.model.layers
    if ac:  # NeMo-Automodel's fsdp2_strategy_parallelize: wrap these four sub-modules of every layer
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

        for layer in layers:
            for name in ("mlp", "self_attn", "input_layernorm", "post_attention_layernorm"):
                if hasattr(layer, name):
                    setattr(layer, name, checkpoint_wrapper(getattr(layer, name)))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, output_dtype=torch.float32)
    for i, layer in enumerate(layers):
        fully_shard(layer, mesh=mesh, mp_policy=mp, reshard_after_forward=i < len(layers) - 1)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    return model


class _Meter:
    """Per-phase peak of allocated bytes (reset between phases) and the allocation at each phase's end.

    Also the caching allocator's own view, kept across the resets (``reset_peak_memory_stats`` clears every peak):
    the largest ``reserved_bytes.all.peak`` / ``active_bytes.all.peak`` seen, and its cumulative ``num_alloc_retries``
    (a cudaMalloc failed, the cache was freed and the request retried) and ``num_ooms``.
    """

    def __init__(self, torch, cuda: bool):
        self.torch, self.cuda, self.phases, self.current = torch, cuda, {}, None
        self.reserved_peak = self.active_peak = 0

    def fold(self) -> dict:
        """Fold the current peaks into the running maxima; return the allocator's counters now."""
        if not self.cuda:
            return {}
        st = self.torch.cuda.memory_stats()
        self.reserved_peak = max(self.reserved_peak, st.get("reserved_bytes.all.peak", 0))
        self.active_peak = max(self.active_peak, st.get("active_bytes.all.peak", 0))
        return {"num_alloc_retries": st.get("num_alloc_retries", 0), "num_ooms": st.get("num_ooms", 0),
                "reserved_bytes_all_peak": self.reserved_peak, "active_bytes_all_peak": self.active_peak}

    @contextlib.contextmanager
    def phase(self, name: str):
        t = self.torch
        self.current = name
        if self.cuda:
            t.cuda.synchronize()
            self.fold()
            t.cuda.reset_peak_memory_stats()
        yield
        if self.cuda:
            t.cuda.synchronize()
            peak, end = t.cuda.max_memory_allocated(), t.cuda.memory_allocated()
            prev = self.phases.get(name, {"peak": 0, "end": 0})
            self.phases[name] = {"peak": max(prev["peak"], peak), "end": end}
            self.fold()


# Cards a larger one can stand in for (``--emulate-gpu``): the total memory their driver reports, in MiB
# (nvidia-smi's "Total"; the same numbers as nbtools.fit's GPU table, which a test holds this to).
EMULATE_MIB = {"h100": 81559, "a100-80": 81920, "a100-40": 40960, "l40s": 46068, "l4": 23034}
EMULATED_NAME = {"h100": "NVIDIA H100 80GB HBM3", "a100-80": "NVIDIA A100-SXM4-80GB", "a100-40": "NVIDIA A100-SXM4-40GB",
                 "l40s": "NVIDIA L40S", "l4": "NVIDIA L4"}  # torch.cuda.get_device_name of each
_PAD_BYTES = 0  # this rank's raw allocation that makes the card look like the emulated one (one case per process)
_PAD_KEEP: list = []  # the allocation's owner, alive until the process exits


def _raw_malloc(nbytes: int, local_rank: int) -> str:
    """``cudaMalloc`` outside PyTorch's caching allocator; returns how. CuPy's runtime binding (no memory pool) where
    it imports, else the CUDA runtime library through ctypes. The memory is never freed: the process ends with it."""
    try:
        import cupy

        with cupy.cuda.Device(local_rank):
            ptr = cupy.cuda.runtime.malloc(nbytes)
        _PAD_KEEP.append(ptr)
        return f"cupy {cupy.__version__} cuda.runtime.malloc"
    except ImportError:
        pass
    import ctypes
    import ctypes.util

    names = [n for n in ("libcudart.so.13", "libcudart.so.12", ctypes.util.find_library("cudart")) if n]
    lib = None
    for n in names:
        try:
            lib = ctypes.CDLL(n)
            break
        except OSError:
            continue
    if lib is None:
        raise RuntimeError("--emulate-gpu needs cupy or the CUDA runtime library (libcudart) to allocate outside "
                           "PyTorch; fix: install cupy-cuda13x (or cupy-cuda12x) on the GPU machine")
    ptr = ctypes.c_void_p()
    if lib.cudaSetDevice(local_rank) or lib.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(nbytes)):
        raise RuntimeError(f"cudaMalloc of {nbytes} bytes failed on GPU {local_rank}")
    _PAD_KEEP.append(ptr)
    return "ctypes libcudart cudaMalloc"


def emulate_card(name: str, local_rank: int, torch) -> dict:
    """Make this rank's GPU look like ``name`` to everything in the process: take ``total - name's memory`` with a raw
    ``cudaMalloc`` before the step (before NCCL, cuBLAS and the caching allocator touch the card), so the allocator's
    ``cudaMalloc`` and everything outside it (cuBLAS workspaces, NCCL buffers) fail where that card's would.
    ``set_per_process_memory_fraction`` caps only the allocator; this caps the card. A card no larger than the
    emulated one is used as it is (pad 0)."""
    global _PAD_BYTES
    target = EMULATE_MIB[name] * 1024**2
    free, total = torch.cuda.mem_get_info(local_rank)
    pad = max(0, total - target)
    how = _raw_malloc(pad, local_rank) if pad else "none (the card is no larger)"
    _PAD_BYTES = pad
    free_after, _ = torch.cuda.mem_get_info(local_rank)
    return {"emulate_gpu": name, "emulated_total_bytes": min(total, target), "card_total_bytes": total,
            "pad_bytes": pad, "pad_method": how, "free_before_bytes": free, "free_after_bytes": free_after}


def _device_sample(torch) -> dict:
    """The device's use as the driver sees it (``mem_get_info``) against the caching allocator's: what lies outside
    the allocator (CUDA context, cuBLAS handles via cublasCreate, NCCL buffers) is ``used - reserved`` (less the
    emulation's raw allocation, which is no part of the step)."""
    free, total = torch.cuda.mem_get_info()
    reserved = torch.cuda.memory_reserved()
    used = total - free - _PAD_BYTES
    return {"device_used_bytes": used, "reserved_bytes": reserved, "allocated_bytes": torch.cuda.memory_allocated(),
            "non_allocator_bytes": used - reserved}


def _saved_probe(model, batch, torch, autocast):
    """Bytes autograd saves for backward in one forward + loss (unique storages holding token-shaped tensors)."""
    seen: dict[int, int] = {}
    tokens = batch["input_ids"].shape[0] * batch["input_ids"].shape[1]

    def pack(t):
        try:
            st = t.untyped_storage()
            if t.numel() % tokens == 0 or (t.dim() >= 2 and batch["input_ids"].shape[1] in t.shape):
                seen[st.data_ptr()] = st.nbytes()
        except Exception:  # noqa: BLE001 - a probe never fails the case
            pass
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with autocast():
            out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                        position_ids=batch["position_ids"], use_cache=False)
        logits = out.logits
        del out
        loss = _grpo_loss(logits, batch, torch)
        del logits
    loss.backward()
    model.zero_grad(set_to_none=True)
    return sum(seen.values())


def _nemo_rl_next_token_logprobs():
    """NeMo-RL's ``get_next_token_logprobs_from_logits`` (v0.7.0 ``nemo_rl/distributed/model_utils.py``) if it imports.

    The GPU run puts the file (with ``nemo_rl/algorithms/logits_sampling_utils.py``, its one import) on ``sys.path``
    through ``--nemo-rl DIR``; the files are never committed here. Without them the reproduction below is used.
    """
    try:
        from nemo_rl.distributed.model_utils import get_next_token_logprobs_from_logits
    except Exception:  # noqa: BLE001 - the reproduction is used instead; the meta says which ran
        return None
    return get_next_token_logprobs_from_logits


_NEXT_TOKEN_LOGPROBS = None


def _train_logprobs(logits, input_ids, torch):
    """The training loss's log-probs on NeMo-RL's DTensor path (no TP: ``vocab_parallel_group`` is None).

    v0.7.0 ``prepare_loss_input`` passes no ``chunk_size`` here, so ``policy.logprob_chunk_size`` does not change the
    training step: ``to(float32)`` (a no-op, the root's ``output_dtype`` is fp32), ``log_softmax(logits[:, :-1])``,
    ``gather``.
    """
    if _NEXT_TOKEN_LOGPROBS is not None:
        return _NEXT_TOKEN_LOGPROBS(input_ids=input_ids, next_token_logits=logits)
    logits = logits.to(torch.float32)
    lp = torch.nn.functional.log_softmax(logits[:, :-1], dim=-1)
    return lp.gather(dim=-1, index=input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def _local_logprobs(logits, input_ids, chunk, torch):
    """NeMo-RL v0.7.0 ``LogprobsPostProcessor._compute_local_logprobs`` (``nemo_rl/models/automodel/train.py``).

    With ``logprob_chunk_size`` each sequence chunk is cast and log-softmaxed, the chunks are kept in a list and
    concatenated: the full fp32 log-probs exist twice at the ``cat`` (the chunking bounds nothing on this path).
    """
    if chunk:
        n = (int(logits.shape[1]) + chunk - 1) // chunk
        parts = []
        for i in range(n):
            c = logits[:, i * chunk:min(int(logits.shape[1]), (i + 1) * chunk), :].to(torch.float32)
            parts.append(torch.nn.functional.log_softmax(c, dim=-1))
        log_probs = torch.cat(parts, dim=1)
        del parts
    else:
        log_probs = torch.nn.functional.log_softmax(logits.to(torch.float32), dim=-1)
    tok = log_probs[:, :-1].gather(dim=-1, index=input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    del log_probs
    tok = torch.cat([torch.zeros_like(tok[:, :1]), tok], dim=1)
    return tok * torch.ones_like(input_ids, dtype=torch.bool)  # post-attention mask (all tokens valid)


def _grpo_loss(logits, batch, torch):
    """NeMo-RL's ClippedPGLossFn on fp32 logits (token-level, k3 KL penalty 0.01, ratio clip 0.2)."""
    # temperature 1.0: apply_temperature_scaling leaves the logits alone
    curr = _train_logprobs(logits, batch["input_ids"], torch)
    prev, ref, adv, mask = batch["prev_logprobs"], batch["ref_logprobs"], batch["advantages"], batch["mask"]
    kl = torch.exp((ref - curr).clamp(-20, 20)) - (ref - curr) - 1
    ratio = torch.exp(curr - prev)
    pg = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
    return ((pg + 0.01 * kl.clamp(-10, 10)) * mask).sum() / mask.sum()


_SIZE = r"([\d.]+) (GiB|MiB|KiB|bytes)"
_OOM_FIGURES = {  # PyTorch's OutOfMemoryError text (c10/cuda/CUDACachingAllocator.cpp), the parts that carry a size
    "tried_gib": r"Tried to allocate " + _SIZE,
    "capacity_gib": r"total capacity of " + _SIZE,
    "free_gib": r"of which " + _SIZE + r" is free",
    "process_in_use_gib": r"this process has " + _SIZE + r" memory in use",
    "allocated_by_pytorch_gib": r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch",
    "reserved_unallocated_gib": r"and " + _SIZE + r" is reserved by PyTorch but unallocated",
}
_SCALE = {"GiB": 1.0, "MiB": 1 / 1024, "KiB": 1 / 1024**2, "bytes": 1 / 1024**3}


def _oom_figures(msg: str, pad_gib: float = 0.0) -> dict:
    """Every size the out-of-memory message states, in GiB; ``non_pytorch_gib`` derived as in-use - (allocated +
    reserved-but-unallocated), the memory of this process outside the caching allocator. Under ``--emulate-gpu`` the
    card's capacity and this process's use include the raw pad: both are given less it (``pad_gib`` recorded)."""
    out = {}
    for key, pat in _OOM_FIGURES.items():
        m = re.search(pat, msg)
        if m:
            out[key] = round(float(m.group(1)) * _SCALE[m.group(2)], 4)
    if pad_gib:
        out["pad_gib"] = round(pad_gib, 4)
        for key in ("capacity_gib", "process_in_use_gib"):
            if key in out:
                out[key] = round(out[key] - pad_gib, 4)
    if {"process_in_use_gib", "allocated_by_pytorch_gib", "reserved_unallocated_gib"} <= set(out):
        out["non_pytorch_gib"] = round(out["process_in_use_gib"] - out["allocated_by_pytorch_gib"]
                                       - out["reserved_unallocated_gib"], 4)
    return out


def _oom_details(msg: str) -> float | None:
    return _oom_figures(msg).get("tried_gib")


def run_case(case: dict, *, rank: int, world: int, local_rank: int, port: int, configs: Path, device_kind: str) -> dict:
    """Build, shard, run two training steps and a log-prob pass; return the measurements of this rank."""
    import torch
    import torch.distributed as dist
    import transformers

    cuda = device_kind == "cuda"
    res: dict = {"case": case, "rank": rank, "world": world, "status": "error",
                 "torch": torch.__version__, "transformers": transformers.__version__}
    t0 = time.time()
    meter = _Meter(torch, cuda)
    stage = "init"
    try:
        if cuda:
            torch.cuda.set_device(local_rank)
            device = torch.device("cuda", local_rank)
            res["gpu"] = torch.cuda.get_device_name(device)
            res["gpu_total_bytes"] = torch.cuda.get_device_properties(device).total_memory
            if case.get("emulate_gpu"):  # before NCCL, cuBLAS and the allocator: the whole process sees that card
                res["emulation"] = emulate_card(case["emulate_gpu"], local_rank, torch)
            if case.get("allocator_cap_gib"):  # emulate a smaller card's allocator limit (the memory outside stays real)
                torch.cuda.set_per_process_memory_fraction(case["allocator_cap_gib"] * GIB / res["gpu_total_bytes"], device)
            dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                    device_id=device)
            dist.barrier()  # NCCL's communicator exists from here on: its buffers are in the next sample
            res["samples"] = {"after_init": _device_sample(torch)}
        else:
            device = torch.device("cpu")
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device_kind, (world,))
        torch.manual_seed(1234 + rank)
        stage = "build"
        cfg = _load_config(configs, case["model"])
        if case.get("shrink"):  # CPU self-check only: a few small layers of the same architecture
            for k, v in case["shrink"].items():
                setattr(cfg, k, v)
        model = _build(cfg, device, bool(case["activation_checkpointing"]), mesh, torch)
        foreach = case.get("foreach")
        opt = torch.optim.AdamW(model.parameters(), lr=5e-6, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-8,
                                **({} if foreach is None else {"foreach": bool(foreach), "fused": False}))
        res["params"] = sum(p.numel() for p in model.parameters())
        B, L, V = case["micro_batch"], case["seq_len"], cfg.vocab_size

        def batch(B=B):
            ids = torch.randint(0, V, (B, L), device=device)
            f = lambda: torch.randn(B, L - 1, device=device) * 0.1  # noqa: E731
            return {"input_ids": ids, "attention_mask": torch.ones(B, L, dtype=torch.bool, device=device),
                    "position_ids": torch.arange(L, device=device).repeat(B, 1), "prev_logprobs": f() - 10,
                    "ref_logprobs": f() - 10, "advantages": f() * 10, "mask": torch.ones(B, L - 1, device=device)}

        def autocast():
            return torch.autocast(device_type=device_kind, dtype=torch.bfloat16)

        def train_step(measure: bool):
            model.train()
            for mb in range(2):
                data = batch()
                ph = meter.phase if measure else (lambda _n: contextlib.nullcontext())
                with ph("forward"):
                    with autocast():
                        out = model(**_fwd_kwargs(cfg, data, torch))
                    logits = out.logits
                    del out
                    if measure and mb == 1 and cuda:
                        res["after_forward_bytes"] = torch.cuda.memory_allocated()
                    loss = _grpo_loss(logits, data, torch)
                    del logits
                with ph("backward"):
                    loss.backward()
                del loss, data
            with (meter.phase("optimizer") if measure else contextlib.nullcontext()):
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)

        if cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            res["setup_bytes"] = torch.cuda.memory_allocated()
        if case.get("probe"):
            stage = "probe"
            res["saved_activation_bytes"] = _saved_probe(model, batch(), torch, autocast)
        if cuda:
            res["samples"]["after_setup"] = _device_sample(torch)
        stage = "step1"
        train_step(measure=False)
        if cuda:
            res["static_bytes"] = torch.cuda.memory_allocated()  # params + AdamW states, grads freed
            res["samples"]["after_step1"] = _device_sample(torch)
        stage = "step2"
        train_step(measure=True)
        if cuda:
            torch.cuda.synchronize()
            res["samples"]["after_step2"] = _device_sample(torch)  # the measured step's end
        stage = "logprob"
        model.eval()
        with meter.phase("logprob"), torch.no_grad():
            data = batch(case.get("logprob_batch") or B)
            with autocast():
                out = model(**_fwd_kwargs(cfg, data, torch))
            logits = out.logits
            del out
            _local_logprobs(logits, data["input_ids"], case.get("logprob_chunk"), torch)
            del logits
        res["status"] = "ok"
    except torch.OutOfMemoryError as e:  # type: ignore[attr-defined]
        if cuda:
            res.setdefault("samples", {})["at_oom"] = _device_sample(torch)
        res["status"] = "oom"
        res["oom_figures"] = _oom_figures(str(e), _PAD_BYTES / GIB)
        res["oom_stage"] = f"{stage}/{meter.current}" if stage in ("step1", "step2") else stage
        res["oom_tried_gib"] = _oom_details(str(e))
        if cuda:
            res["oom_allocated_bytes"] = torch.cuda.memory_allocated()
            res["oom_max_allocated_bytes"] = torch.cuda.max_memory_allocated()
        res["error"] = str(e).splitlines()[0][:300]
        res["oom_message"] = str(e)[:2000]
    except Exception as e:  # noqa: BLE001 - recorded, the driver goes on with the next case
        if "CUBLAS_STATUS_ALLOC_FAILED" in str(e):  # cuBLAS could not allocate (a handle for the backward thread)
            if cuda:
                res.setdefault("samples", {})["at_oom"] = _device_sample(torch)
            res["status"], res["oom_kind"] = "oom", "cublas"
            res["oom_stage"] = f"{stage}/{meter.current}" if stage in ("step1", "step2") else stage
            res["oom_message"] = str(e)[:2000]
        res["error"] = f"{type(e).__name__}: {e}"[:500]
        res["traceback"] = traceback.format_exc()[-3000:]
    finally:
        res["phases"] = meter.phases
        if cuda:
            res["peak_train_bytes"] = max([v["peak"] for k, v in meter.phases.items() if k != "logprob"], default=0)
            res["peak_logprob_bytes"] = meter.phases.get("logprob", {}).get("peak", 0)
            res["max_reserved_bytes"] = torch.cuda.max_memory_reserved()
            free, total = torch.cuda.mem_get_info()
            res["non_torch_bytes"] = total - free - torch.cuda.memory_reserved()
            res["allocator"] = meter.fold()
        res["seconds"] = round(time.time() - t0, 2)
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    return res


# ------------------------------------------------------------------------------------------------ driver side


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(case, rank, world, port, configs, device_kind, q):
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank)})
    if case.get("alloc_conf"):  # read by the caching allocator at its first use, which is after this line
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = case["alloc_conf"]
    try:
        r = run_case(case, rank=rank, world=world, local_rank=rank, port=port, configs=configs, device_kind=device_kind)
    except BaseException as e:  # noqa: BLE001
        r = {"case": case, "rank": rank, "status": "error", "error": repr(e)[:500]}
    q.put(r)
    q.close()
    q.join_thread()  # the queue's feeder thread must flush before the hard exit below
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown (CUDA/NCCL atexit) in the forked child


def run_forked(case: dict, nproc: int, configs: Path, device_kind: str, timeout: float,
               method: str = "fork") -> list[dict]:
    """One case in ``nproc`` fresh processes (rank i on GPU i), forked by default; returns each rank's record."""
    import multiprocessing as mp

    ctx = mp.get_context(method)
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_child, args=(case, r, nproc, port, configs, device_kind, q)) for r in range(nproc)]
    for p in procs:
        p.start()
    out, deadline = [], time.time() + timeout
    while len(out) < nproc and time.time() < deadline:
        try:
            out.append(q.get(timeout=1.0))
            if out[-1].get("status") != "ok":  # a failed rank leaves its peers in a collective: a short grace only
                deadline = min(deadline, time.time() + 15)
        except Exception:  # noqa: BLE001 - queue.Empty: keep waiting until the deadline
            if all(not p.is_alive() for p in procs) and q.empty():
                break
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
    hung = "timeout" if not any(r.get("status") not in ("ok", None) for r in out) else "peer-failed"
    return sorted(out, key=lambda r: r["rank"]) if len(out) == nproc else sorted(
        out + [{"case": case, "rank": r, "status": hung} for r in range(nproc) if r not in {o["rank"] for o in out}],
        key=lambda r: r["rank"])


def summarize(case: dict, ranks: list[dict]) -> dict:
    """One row per case: the worst rank's numbers (every rank's peak kept in ``rank_peaks_gib``)."""
    r0 = ranks[0]
    status = "oom" if any(r["status"] == "oom" for r in ranks) else (
        "ok" if all(r["status"] == "ok" for r in ranks) else next(r["status"] for r in ranks if r["status"] != "ok"))
    g = lambda k: max((r.get(k) or 0) for r in ranks) / GIB  # noqa: E731
    row = {
        "model": case["model"], "micro_batch": case["micro_batch"], "seq_len": case["seq_len"],
        "activation_checkpointing": bool(case["activation_checkpointing"]), "gpus": len(ranks),
        "optimizer_foreach": case.get("foreach"), "logprob_batch": case.get("logprob_batch") or case["micro_batch"],
        "alloc_conf": case.get("alloc_conf") or "", "status": status,
        **({"allocator_cap_gib": case["allocator_cap_gib"]} if case.get("allocator_cap_gib") else {}),
        "card": next((r["gpu"] for r in ranks if r.get("gpu")), None),
        "emulate_gpu": case.get("emulate_gpu"), "emulation_pad_gib": round(max(
            (r.get("emulation") or {}).get("pad_bytes", 0) for r in ranks) / GIB, 3) if case.get("emulate_gpu") else None,
        "peak_gib": round(max(g("peak_train_bytes"), g("peak_logprob_bytes")), 3) if status == "ok" else None,
        "peak_train_gib": round(g("peak_train_bytes"), 3) if status == "ok" else None,
        "peak_logprob_gib": round(g("peak_logprob_bytes"), 3) if status == "ok" else None,
        "static_gib": round(g("static_bytes"), 3) or None, "setup_gib": round(g("setup_bytes"), 3) or None,
        "after_forward_gib": round(g("after_forward_bytes"), 3) or None,
        "max_reserved_gib": round(g("max_reserved_bytes"), 3), "non_torch_gib": round(g("non_torch_bytes"), 3),
        "saved_activation_gib": round(g("saved_activation_bytes"), 4) or None,
        "phase_peaks_gib": {k: round(v["peak"] / GIB, 3) for k, v in (r0.get("phases") or {}).items()},
        "rank_peaks_gib": [round((r.get("peak_train_bytes") or 0) / GIB, 3) for r in ranks],
        "rank_logprob_peaks_gib": [round((r.get("peak_logprob_bytes") or 0) / GIB, 3) for r in ranks],
        "logprob_chunk": case.get("logprob_chunk"), "oom_message": r0.get("oom_message") or next(
            (r.get("oom_message") for r in ranks if r.get("oom_message")), None),
        "oom_ranks": [r["rank"] for r in ranks if r.get("status") == "oom"],
        "oom_kind": next((r["oom_kind"] for r in ranks if r.get("oom_kind")), "torch" if status == "oom" else None),
        "oom_stage": r0.get("oom_stage"), "oom_tried_gib": r0.get("oom_tried_gib"),
        "oom_allocated_gib": round((r0.get("oom_allocated_bytes") or 0) / GIB, 3) or None,
        "params": r0.get("params"), "seconds": r0.get("seconds"), "error": r0.get("error"),
        "ranks": [_rank_record(r) for r in ranks],
    }
    recs = row["ranks"]
    row["num_alloc_retries"] = max((x["num_alloc_retries"] or 0 for x in recs), default=0)
    row["num_ooms"] = max((x["num_ooms"] or 0 for x in recs), default=0)
    row["reserved_peak_gib"] = max((x["reserved_peak_gib"] or 0 for x in recs), default=0)
    at = "at_oom" if status == "oom" else "after_step2"
    row["non_allocator_gib"] = max((x["non_allocator_gib"].get(at) or 0 for x in recs), default=0) or None
    if row["status"] == "error" and r0.get("traceback"):
        row["traceback"] = r0["traceback"]
    return row


def _rank_record(r: dict) -> dict:
    """One rank's allocator and device view: peaks, retries, out-of-memory counters, memory outside the allocator."""
    gib = lambda b: None if b is None else round(b / GIB, 3)  # noqa: E731
    a, samples = r.get("allocator") or {}, r.get("samples") or {}
    return {
        "rank": r.get("rank"), "status": r.get("status"),
        "allocated_peak_gib": gib(max([v["peak"] for v in (r.get("phases") or {}).values()], default=None)),
        "reserved_peak_gib": gib(a.get("reserved_bytes_all_peak")), "active_peak_gib": gib(a.get("active_bytes_all_peak")),
        "num_alloc_retries": a.get("num_alloc_retries"), "num_ooms": a.get("num_ooms"),
        "non_allocator_gib": {k: gib(v["non_allocator_bytes"]) for k, v in samples.items()},
        "samples_gib": {k: {n: gib(b) for n, b in v.items()} for k, v in samples.items()},
        "oom_stage": r.get("oom_stage"), "oom_kind": r.get("oom_kind"), "oom_figures": r.get("oom_figures"),
        "error": r.get("error"), "emulation": r.get("emulation"),
    }


def _cases(spec: str) -> list[dict]:
    if spec == "default":
        return [_case_dict(t) for t in CASES_DEFAULT]
    if spec == "smoke":
        return [_case_dict(t) for t in CASES_SMOKE]
    if spec == "boundary":
        return [_case_dict(t) for t in CASES_BOUNDARY]
    if spec == "h100":
        return [_case_dict(t) for t in CASES_H100]
    if spec == "2gpu":
        return [_case_dict(t) for t in CASES_2GPU]
    if spec == "2gpu-boundary":
        return [_case_dict(t) for t in CASES_2GPU_B]
    if spec == "2gpu-oos":
        return [_case_dict(t) for t in CASES_2GPU_OOS]
    if spec == "2gpu-miss":
        return [_case_dict(t) for t in CASES_2GPU_MISS]
    if spec == "2gpu-miss-emu":
        return [_case_dict(t) for t in CASES_2GPU_MISS_EMU]
    if spec == "4gpu":
        return [_case_dict(t) for t in CASES_4GPU]
    if spec == "4gpu-oos":
        return [_case_dict(t) for t in CASES_4GPU_OOS]
    if spec == "4gpu-tight":
        return [_case_dict(t) for t in CASES_4GPU_TIGHT]
    if spec == "4gpu-es":
        return [_case_dict(t) for t in CASES_4GPU_ES]
    return json.loads(Path(spec).read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", type=Path, default=DEFAULT_CONFIGS, help="directory of <org>--<name>.json configs")
    ap.add_argument("--cases", default="default", help="default | boundary | h100 | 2gpu | 2gpu-boundary | 2gpu-oos | 2gpu-miss | 2gpu-miss-emu | 4gpu | "
                    "4gpu-es | 4gpu-oos | 4gpu-tight | smoke | a JSON file "
                    "of cases")
    ap.add_argument("--only", nargs="*", help="run only cases whose model contains one of these strings")
    ap.add_argument("--nproc", type=int, default=1, help="processes (= GPUs) per case, FSDP2 over all of them")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--timeout", type=float, default=180, help="seconds per case")
    ap.add_argument("--budget", type=float, default=0, help="stop starting new cases after this many seconds (0: none)")
    ap.add_argument("--allocator-cap-gib", type=float, help="cap PyTorch's caching allocator per GPU "
                    "(set_per_process_memory_fraction): a larger card run as a smaller one's allocator; recorded per row")
    ap.add_argument("--emulate-gpu", choices=sorted(EMULATE_MIB), help="run each rank as this (smaller) card: a raw "
                    "cudaMalloc outside PyTorch takes the difference before the step, so the allocator and everything "
                    "outside it (cuBLAS, NCCL) see that card's memory; recorded per row; a card no larger runs as it is")
    ap.add_argument("--out", type=Path, help="JSON results (a .csv with the same stem is written beside it)")
    ap.add_argument("--worker", action="store_true", help="run one --case in this process (torchrun sets the ranks)")
    ap.add_argument("--case", help="the case as JSON (with --worker)")
    ap.add_argument("--nemo-rl", type=Path, help="a directory holding NeMo-RL's nemo_rl package (model_utils.py and its "
                    "import): the training loss then calls NeMo-RL's own get_next_token_logprobs_from_logits")
    a = ap.parse_args(argv)
    global _NEXT_TOKEN_LOGPROBS
    if a.nemo_rl:
        sys.path.insert(0, str(a.nemo_rl))
    _NEXT_TOKEN_LOGPROBS = _nemo_rl_next_token_logprobs()
    if a.nemo_rl and _NEXT_TOKEN_LOGPROBS is None:
        print(f"warning: nemo_rl did not import from {a.nemo_rl}; using the reproduction", flush=True)

    if a.worker:  # torchrun-style: RANK / WORLD_SIZE / LOCAL_RANK / MASTER_PORT from the environment
        env = os.environ
        r = run_case(json.loads(a.case), rank=int(env.get("RANK", 0)), world=int(env.get("WORLD_SIZE", 1)),
                     local_rank=int(env.get("LOCAL_RANK", 0)), port=int(env.get("MASTER_PORT", _free_port())),
                     configs=a.configs, device_kind=a.device)
        print(json.dumps(r))
        return 0 if r["status"] in ("ok", "oom") else 1

    import torch  # noqa: F401 - imported once here; every forked case starts with it loaded (CUDA untouched)
    import transformers
    from transformers import AutoModelForCausalLM  # noqa: F401

    for mod in ("llama", "qwen2", "qwen3", "gemma3"):
        with contextlib.suppress(Exception):
            __import__(f"transformers.models.{mod}.modeling_{mod}")
    cases = _cases(a.cases)
    if a.only:
        cases = [c for c in cases if any(s in c["model"] for s in a.only)]
    if a.allocator_cap_gib:
        cases = [{**c, "allocator_cap_gib": a.allocator_cap_gib} for c in cases]
    if a.emulate_gpu and a.device == "cuda":
        cases = [{**c, "emulate_gpu": a.emulate_gpu} for c in cases]
    meta = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": sys.version.split()[0], "nproc": a.nproc,
            "device": a.device, "script": "benchmarks/fit_calibrate.py", "emulate_gpu": a.emulate_gpu,
            "train_logprobs": ("nemo_rl v0.7.0 get_next_token_logprobs_from_logits" if _NEXT_TOKEN_LOGPROBS
                               else "reproduction of nemo_rl v0.7.0 get_next_token_logprobs_from_logits"),
            "logprob_pass": "reproduction of nemo_rl v0.7.0 LogprobsPostProcessor._compute_local_logprobs"}
    rows: list[dict] = []
    start, method = time.time(), "fork"
    for i, case in enumerate(cases):
        if a.budget and time.time() - start > a.budget:
            print(f"[{i + 1}/{len(cases)}] budget reached, skipping the rest", flush=True)
            break
        ranks = run_forked(case, a.nproc, a.configs, a.device, a.timeout, method)
        if i == 0 and any("fork" in str(r.get("error", "")) or "initialization error" in str(r.get("error", ""))
                          for r in ranks):
            print("CUDA refused a forked child; using spawn from now on", flush=True)
            method = "spawn"
            ranks = run_forked(case, a.nproc, a.configs, a.device, a.timeout, method)
        for r in ranks:
            for k in ("gpu", "gpu_total_bytes"):
                if r.get(k) and k not in meta:
                    meta[k] = r[k]
            if r.get("emulation") and "card" not in meta:  # the table speaks for the emulated card; the real one kept
                em = r["emulation"]
                meta["card"], meta["card_total_bytes"] = meta.get("gpu"), em["card_total_bytes"]
                meta["emulation"] = {k: em[k] for k in ("emulate_gpu", "emulated_total_bytes", "pad_bytes", "pad_method")}
                if em["pad_bytes"]:
                    meta["gpu"], meta["gpu_total_bytes"] = EMULATED_NAME[em["emulate_gpu"]], em["emulated_total_bytes"]
        row = summarize(case, ranks)
        rows.append(row)
        print(f"[{i + 1}/{len(cases)}] {row['model']} B={row['micro_batch']} L={row['seq_len']} "
              f"ac={row['activation_checkpointing']} -> {row['status']} peak={row['peak_gib']} GiB "
              f"phases={row['phase_peaks_gib']} ({row['seconds']} s){' ' + str(row['error']) if row['error'] else ''}",
              flush=True)
        if i == 1 and all(r["status"] == "error" for r in rows):
            print("the first two cases failed; stopping (fix the script first)", flush=True)
            break
        if a.out:
            _write(a.out, meta, rows)
    if a.out:
        _write(a.out, meta, rows)
    return 0


def _write(out: Path, meta: dict, rows: list[dict]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"meta": {**meta, "gpu_total_gib": round(meta.get("gpu_total_bytes", 0) / GIB, 3)}, "cases": rows}
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(out)
    cols = ["model", "micro_batch", "seq_len", "activation_checkpointing", "gpus", "optimizer_foreach", "logprob_batch",
            "alloc_conf", "logprob_chunk", "card", "emulate_gpu", "status",
            "peak_gib", "peak_train_gib", "peak_logprob_gib", "static_gib", "after_forward_gib", "max_reserved_gib",
            "oom_stage", "oom_tried_gib", "oom_allocated_gib", "reserved_peak_gib", "non_allocator_gib",
            "num_alloc_retries", "num_ooms", "seconds"]
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["gpu", "torch", "transformers", "date"] + cols)
        for r in rows:
            w.writerow([meta.get("gpu"), meta["torch"], meta["transformers"], meta["date"]] + [r.get(c) for c in cols])


if __name__ == "__main__":
    sys.exit(main())
