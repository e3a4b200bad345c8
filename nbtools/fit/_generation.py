"""Per-GPU memory of the generation phase (vLLM), modelled from vLLM's documented behaviour (not measured here).

Why: vLLM takes ``gpu_memory_utilization x`` the GPU's memory for itself and fills what its weights, activations and
CUDA graphs leave with KV cache; it refuses to start when that cache cannot hold one sequence of ``max_model_len``
tokens, and it serves fewer sequences at once the smaller the cache is. Colocated with training (NeMo-RL's default),
vLLM sleeps while the policy trains, and the policy offloads to the CPU while vLLM generates.

Terms (GiB per GPU):

* ``budget = gpu_memory_utilization x capacity``;
* ``weights = bytes x P / tp`` (bf16: 2 bytes; the embedding and LM head are split over the TP ranks too);
* ``activations`` - vLLM's profiling forward over ``max_num_batched_tokens`` tokens: the fused gate/up output, the
  MLP activation, q/k/v and a few hidden-size buffers in bf16, ``Tb (2 (3 I + (nq + 2 nkv) hd) / tp + 8 H)`` bytes,
  plus the sampler's fp32 logits and two same-sized temporaries for ``max_num_seqs`` rows, ``3 * 4 S V / tp``;
* ``cuda_graphs`` - about 1 GiB unless ``enforce_eager`` (vLLM captures graphs for its batch sizes);
* ``runtime`` - the CUDA context and NCCL of the process (the same 1.9 GiB the training side measured);
* ``kv_cache = budget - weights - activations - cuda_graphs - runtime``;
* KV bytes per token and rank: ``layers x max(1, nkv / tp) x hd x 2 (K and V) x dtype bytes``; sliding-window layers
  keep at most ``window`` tokens (vLLM's hybrid KV-cache manager);
* ``max_concurrent_sequences = kv_cache / kv_bytes(max_model_len)``.

Example:
    >>> g = generation_estimate(resolve_arch("google/gemma-3-1b-it"), capacity_gib=179.1, max_model_len=2048)
    >>> g.verdict, g.max_concurrent_sequences > 1000
    ('fits', True)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nbtools.fit._arch import ModelArch
from nbtools.fit._verdict import Verdict

__all__ = ["GenerationEstimate", "generation_estimate", "RUNTIME_GIB", "VLLM_SLEEP_RESIDUAL_GIB"]

GIB = 1024**3
# CUDA context, cuBLAS workspaces and the driver's own reserve per process, measured on the H200 calibration machine:
# 140.4 GiB total (nvidia-smi) - 139.8 GiB visible to PyTorch + 1.3 GiB of non-PyTorch memory in the process.
RUNTIME_GIB = 1.9
# What a sleeping vLLM (sleep level 1: weights to CPU, KV cache dropped) still holds: its CUDA context and graph pool.
# Not measured here (no vLLM on the calibration machine); vLLM's sleep-mode documentation describes the rest as freed.
VLLM_SLEEP_RESIDUAL_GIB = 2.0
CUDA_GRAPHS_GIB = 1.0


@dataclass
class GenerationEstimate:
    """vLLM's share of a GPU: terms in GiB, the KV cache, how many full-length sequences it holds, a verdict."""

    terms: dict[str, float]
    budget_gib: float
    kv_cache_gib: float
    kv_bytes_per_token: int
    kv_gib_per_sequence: float
    max_concurrent_sequences: float
    verdict: Verdict
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def generation_estimate(
    arch: ModelArch,
    *,
    capacity_gib: float,
    gpu_memory_utilization: float = 0.6,
    max_model_len: int = 1024,
    tensor_parallel: int = 1,
    kv_cache_dtype: str = "auto",
    weight_bytes: int = 2,
    enforce_eager: bool = False,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    colocated: bool = True,
) -> GenerationEstimate:
    """Estimate vLLM's memory on one GPU and whether one ``max_model_len`` sequence fits its KV cache.

    Args:
        arch: the model.
        capacity_gib: the GPU's total memory (GiB, as the driver reports it).
        gpu_memory_utilization: vLLM's fraction of the GPU (NeMo-RL ``vllm_cfg.gpu_memory_utilization``).
        max_model_len: the longest sequence (prompt + generation) vLLM must hold.
        tensor_parallel: vLLM's ``tensor_parallel_size``.
        kv_cache_dtype: ``auto`` (the model dtype, bf16) or ``fp8``.
        weight_bytes: 2 for bf16 weights, 1 for fp8.
        enforce_eager: no CUDA graphs.
        max_num_batched_tokens, max_num_seqs: vLLM's scheduler limits (default: vLLM's offline defaults, 16384 and
            1024 on GPUs of 70 GiB or more, 8192 and 256 below).
        colocated: generation shares the GPU with training (the policy offloads while vLLM runs).
    """
    tp = max(1, tensor_parallel)
    big = capacity_gib >= 70
    tb = max_num_batched_tokens or (16384 if big else 8192)
    seqs = max_num_seqs or (1024 if big else 256)
    h, hd, i = arch.hidden_size, arch.head_dim, arch.intermediate_size
    budget = gpu_memory_utilization * capacity_gib
    weights = weight_bytes * arch.params / tp / GIB
    acts = (tb * (2 * (3 * i + (arch.num_heads + 2 * arch.num_kv_heads) * hd) / tp + 8 * h)
            + 3 * 4 * seqs * arch.vocab_size / tp) / GIB
    graphs = 0.0 if enforce_eager else CUDA_GRAPHS_GIB
    kv_dtype = 1 if str(kv_cache_dtype).startswith("fp8") else 2
    kv_heads = max(1, arch.num_kv_heads // tp)
    per_layer_token = kv_heads * hd * 2 * kv_dtype
    kv_token = arch.num_layers * per_layer_token
    window = arch.sliding_window or max_model_len
    seq_bytes = per_layer_token * ((arch.num_layers - arch.num_sliding_layers) * max_model_len
                                   + arch.num_sliding_layers * min(max_model_len, window))
    kv_cache = budget - weights - acts - graphs - RUNTIME_GIB
    per_seq = seq_bytes / GIB
    n = max(0.0, kv_cache / per_seq) if per_seq else 0.0
    problems, notes = [], []
    if weights + acts + graphs + RUNTIME_GIB >= budget:
        problems.append(f"vLLM's {budget:.1f} GiB (gpu_memory_utilization {gpu_memory_utilization:g}) does not even hold "
                        f"its weights ({weights:.1f} GiB) and working memory; no KV cache is left")
    elif n < 1:
        problems.append(f"the KV cache ({kv_cache:.2f} GiB) cannot hold one sequence of max_model_len {max_model_len} "
                        f"({per_seq:.2f} GiB); vLLM refuses to start")
    if colocated and budget + RUNTIME_GIB > capacity_gib:
        problems.append(f"gpu_memory_utilization {gpu_memory_utilization:g} leaves less than the training worker's "
                        f"{RUNTIME_GIB} GiB runtime; vLLM's start-up check fails")
    verdict = Verdict.DOES_NOT_FIT if problems else (Verdict.TIGHT if n < 2 else Verdict.FITS)
    if arch.num_sliding_layers:
        notes.append("sliding-window layers counted with at most their window of KV cache (vLLM's hybrid KV-cache "
                     "manager); older vLLM keeps full-length KV for every layer")
    terms = {"weights": round(weights, 3), "activations": round(acts, 3), "cuda_graphs": graphs,
             "runtime": RUNTIME_GIB, "kv_cache": round(max(kv_cache, 0.0), 3)}
    return GenerationEstimate(terms, round(budget, 3), round(kv_cache, 3), kv_token, round(per_seq, 4),
                              round(n, 1), verdict, problems, notes)
