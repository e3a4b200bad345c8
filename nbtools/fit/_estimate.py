"""The fit verdict: training and generation estimates held against one GPU, and the smallest change that fits.

Why: an out-of-memory error after the image pull, the model download and vLLM's start-up costs 20+ minutes of GPU
nodes; the numbers to predict it are all known before launch.

Verdict rules (per GPU; ``usable = capacity - 1.9 GiB`` of CUDA runtime, minus what a sleeping vLLM keeps when colocated):

* ``error = ERROR_MARGIN x peak``: the largest amount by which a measured peak exceeded its estimate over every
  committed calibration row (1, 2 and 4 GPUs, H100 and H200; the test recomputes it), rounded up.
* ``stranded = [low, high]`` GiB, the memory PyTorch's default caching allocator holds reserved but cannot reuse at
  the peak (freed blocks too small for a slightly larger request: the log-softmax is one token shorter than the
  logits), in units of the largest block, the fp32 ``[B, L, V]`` logits. ``low``: what every boundary run stranded
  (0.45 of the block; 0.75 where several rows meet materialised sliding-window masks, which split the cached logits
  blocks - Gemma-3). ``high``: the largest ``reserved - allocated`` peak over the committed rows in which that block
  is at least a tenth of the peak and no allocator retry capped the reserve (1.55 blocks, Qwen2.5-1.5B 4 x 6144 on
  four GPUs; the test recomputes it). Inside the band the allocator's luck decides: the two-GPU Qwen2.5-1.5B 4 x 6144
  case ran out on two H100s (cuBLAS, 77.65 GiB reserved for 61.8 GiB allocated) and fitted after two allocator
  retries on emulated H100s. With ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (nbtools' default for the
  training job) nothing is stranded: ``low = high = 0.5`` GiB of page rounding.
* ``need = peak + error + low``; ``does-not-fit`` when ``peak + low > usable`` (the estimate and the memory the
  allocator always strands already overflow); ``tight`` when ``peak + error + high > usable`` (the error band or the
  stranded band crosses the usable memory); else ``fits``.
* ``certain`` (``launch`` refuses) when the peak alone exceeds ``usable`` by more than the estimator's error bound:
  5% where calibrated (FSDP2 on 1, 2 or 4 GPUs, NeMo-RL's DTensor policy; measured error within 2.4%), 15% elsewhere
  (more GPUs, TP/CP); never where the trainer trims or packs its micro-batches (``FitProfile.tokens_upper_bound``: verl's
  padding-free ones), which are usually shorter than the worst case.

Example:
    >>> r = estimate("Qwen/Qwen2.5-1.5B", gpu="h100", micro_batch=8, seq_len=4096)
    >>> r.verdict, r.suggestions[0]
    ('does-not-fit', 'use --micro-batch 2: training peak 59.5 GiB, need 62.3 of 75.8 -> fits')
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from nbtools._escape import html as _h
from nbtools._gpus import GpuSpec, gpu_spec
from nbtools.errors import ConfigError
from nbtools.fit._arch import ModelArch, resolve_arch
from nbtools.fit._generation import (
    RUNTIME_GIB,
    VLLM_SLEEP_RESIDUAL_GIB,
    GenerationEstimate,
    generation_estimate,
)
from nbtools.fit._training import TrainingEstimate, training_estimate
from nbtools.fit._verdict import Verdict
from nbtools.trainers import FitProfile

__all__ = ["FitInputs", "FitReport", "estimate", "evaluate", "TIGHT_FRACTION"]

ERROR_MARGIN = 0.011  # measured peak / estimate - 1, largest over the calibration rows: +1.03% (tests/fit/test_fit.py)
STRANDED_BLOCK_FRACTION = 0.45  # the stranded band's low end, in fp32 logits blocks (default allocator)
STRANDED_BLOCK_FRACTION_MASKED = 0.75  # ... where several rows meet materialised sliding-window masks
STRANDED_BLOCK_FRACTION_HIGH = 1.6  # its high end: largest measured (reserved - allocated) / block, 1.55, rounded up
EXPANDABLE_HEADROOM_GIB = 0.5
CALIBRATED_GPUS = 4  # FSDP2 world sizes the calibration measured (1, 2, 4); larger ones use the 15% bound
TIGHT_FRACTION = 0.90  # kept for the generation side and old callers; training uses the margin band
CERTAIN_CALIBRATED, CERTAIN_UNCALIBRATED = 1.05, 1.15
_FORMULAS = {  # the short form of each term's formula (the module docstrings of _training / _generation explain them)
    "master_weights_fp32": "4 B x params / GPUs",
    "gradients_fp32": "4 B x params / GPUs (fp32 reduce)",
    "adamw_states_fp32": "8 B x params / GPUs (exp_avg, exp_avg_sq)",
    "gathered_bf16_params": "2 B x (embedding + LM head, + 2 layers while a layer runs) / TP",
    "activations": "bytes saved per token per layer x layers x micro-batch x seq",
    "logits_fp32": "k x 4 B x rows x seq x vocab / (TP x CP); k = 3 in the loss backward, 2 in the log-prob pass "
                   "(3 with logprob_chunk_size)",
    "backward_buffers": "layer grads (bf16 + fp32) + embedding grad + activation grads (+ recompute)",
    "optimizer_step_temp": "AdamW foreach: 4 B x params / GPUs",
    "reference_model": "2 B x params / GPUs (verl keeps it on the GPU)",
    "weights": "2 B x params / vLLM TP",
    "cuda_graphs": "captured CUDA graphs (0 with enforce_eager)",
    "runtime": "CUDA context, cuBLAS workspaces, driver reserve",
    "kv_cache": "budget - the rest; layers x KV heads x head dim x 2 x 2 B per token",
}


@dataclass(frozen=True)
class FitInputs:
    """Everything one estimate depends on; ``keys`` names where a field came from (for suggestions)."""

    arch: ModelArch
    gpu: GpuSpec
    micro_batch: int
    seq_len: int
    gpus: int = 1  # GPUs training runs on
    logprob_batch: int | None = None
    logprob_chunk_size: int | None = None
    activation_checkpointing: bool = False
    tensor_parallel: int = 1
    context_parallel: int = 1
    sequence_parallel: bool = False
    sequence_packing: bool = False
    cpu_offload: bool = False
    optimizer_foreach: bool | None = None
    expandable_segments: bool = False
    profile: FitProfile = field(default_factory=FitProfile)  # the trainer's actor (``Trainer.fit_inputs``)
    reference_on_gpu: bool | None = None
    phase: str = "both"  # training | generation | both
    colocated: bool = True
    generation_nodes: int = 0  # nodes vLLM holds when not colocated (cluster.worker_replicas counts them too)
    gpu_memory_utilization: float = 0.6
    max_model_len: int | None = None
    vllm_tensor_parallel: int = 1
    kv_cache_dtype: str = "auto"
    enforce_eager: bool = False
    keys: dict[str, str] = field(default_factory=dict)

    def with_(self, **changes: Any) -> FitInputs:
        return dataclasses.replace(self, **changes)


@dataclass
class FitReport:
    """The estimate for one GPU: training and generation terms (GiB), the verdict, and what to change."""

    inputs: FitInputs
    gpu_gib: float
    usable_gib: float
    training: TrainingEstimate | None
    training_need_gib: float | None
    generation: GenerationEstimate | None
    verdict: Verdict
    certain: bool
    suggestions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stranded_gib: tuple[float, float] | None = None  # the allocator's stranded band at the training peak

    def __post_init__(self):
        self.verdict = Verdict(self.verdict)

    def training_verdict(self) -> Verdict:
        """The training side's verdict alone (the rules of the module docstring)."""
        low, high = self.stranded_gib or (0.0, 0.0)
        return _train_verdict(self.training.peak_gib, self.usable_gib, low, high)

    @property
    def fits(self) -> bool:
        return self.verdict.ok

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of ``nbtools fit --json``."""
        i = self.inputs
        tr = None
        if self.training is not None:
            t = self.training
            tr = {"peak_gib": t.peak_gib, "peak_phase": t.peak_phase, "need_gib": self.training_need_gib,
                  "margin_gib": round(self.training_need_gib - t.peak_gib, 3), "error_margin": ERROR_MARGIN,
                  "stranded_gib": list(self.stranded_gib) if self.stranded_gib else None,
                  "usable_gib": self.usable_gib, "terms": t.terms, "phases": t.phases, "tokens_per_gpu": t.tokens_per_gpu}
        gen = None
        if self.generation is not None:
            g = self.generation
            gen = {"budget_gib": g.budget_gib, "terms": g.terms, "kv_cache_gib": g.kv_cache_gib,
                   "kv_bytes_per_token": g.kv_bytes_per_token, "kv_gib_per_sequence": g.kv_gib_per_sequence,
                   "max_concurrent_sequences": g.max_concurrent_sequences, "verdict": g.verdict, "problems": g.problems}
        return {
            "model": i.arch.name, "gpu": i.gpu.key, "gpu_gib": self.gpu_gib, "gpus": i.gpus,
            "inputs": {"micro_batch": i.micro_batch, "seq_len": i.seq_len, "logprob_batch": i.logprob_batch or i.micro_batch,
                       "activation_checkpointing": i.activation_checkpointing, "tensor_parallel": i.tensor_parallel,
                       "context_parallel": i.context_parallel, "expandable_segments": i.expandable_segments,
                       "framework": i.profile.trainer or None, "colocated": i.colocated,
                       "gpu_memory_utilization": i.gpu_memory_utilization, "max_model_len": i.max_model_len or i.seq_len,
                       "vllm_tensor_parallel": i.vllm_tensor_parallel},
            "training": tr, "generation": gen, "verdict": self.verdict, "certain": self.certain,
            "suggestions": self.suggestions, "notes": self.notes,
        }

    def to_frame(self):
        """One row per term: phase, term, GiB, formula (the table notebook 03 shows)."""
        import pandas as pd

        rows = []
        if self.training is not None:
            rows += [("training", k, v, _FORMULAS.get(k, "")) for k, v in self.training.terms.items()]
            rows.append(("training", f"peak ({self.training.peak_phase})", self.training.peak_gib, "sum of the above"))
        if self.generation is not None:
            acts = "vLLM's profiling forward + sampler logits"
            rows += [("generation", k, v, acts if k == "activations" else _FORMULAS.get(k, ""))
                     for k, v in self.generation.terms.items()]
            rows.append(("generation", "budget", self.generation.budget_gib, "gpu_memory_utilization x GPU memory"))
        return pd.DataFrame(rows, columns=["phase", "term", "GiB", "formula"])

    def summary(self) -> str:
        """Plain text: the verdict, the terms, the suggestions (what ``nbtools fit`` prints)."""
        i = self.inputs
        if self.verdict == Verdict.NOT_APPLICABLE:
            return "\n".join([f"{i.arch.name}: NOT APPLICABLE"] + [f"  note: {n}" for n in self.notes])
        head = (f"{i.arch.name} on {i.gpus} x {i.gpu.label} ({self.gpu_gib:g} GiB, {self.usable_gib:g} usable): "
                f"{self.verdict.upper()}" + (" (certain)" if self.certain else ""))
        lines = [head]
        if self.training is not None:
            t = self.training
            lines.append(f"  training: peak {t.peak_gib:.1f} GiB in {t.peak_phase}, need {self.training_need_gib:.1f} GiB "
                         f"with a {self.training_need_gib - t.peak_gib:.1f} GiB margin "
                         f"(micro-batch {i.micro_batch} x {i.seq_len} tokens, activation checkpointing "
                         f"{'on' if i.activation_checkpointing else 'off'})")
            lines += [f"    {k:<24} {v:>8.2f} GiB" for k, v in t.terms.items()]
        if self.generation is not None:
            g = self.generation
            lines.append(f"  generation (vLLM, {g.budget_gib:.1f} GiB budget): KV cache {g.kv_cache_gib:.1f} GiB = "
                         f"{g.max_concurrent_sequences:g} sequences of {i.max_model_len or i.seq_len} tokens -> {g.verdict}")
            lines += [f"    {k:<24} {v:>8.2f} GiB" for k, v in g.terms.items()]
            lines += [f"    problem: {p}" for p in g.problems]
        lines += [f"  suggestion: {s}" for s in self.suggestions]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    __str__ = summary

    def _repr_html_(self) -> str:
        color = {Verdict.FITS: "#2e7d32", Verdict.TIGHT: "#ef6c00", Verdict.DOES_NOT_FIT: "#c62828"}.get(self.verdict, "#555")
        df = self.to_frame()
        table = df.to_html(index=False, float_format=lambda x: f"{x:.2f}") if len(df) else ""
        extra = "".join(f"<li>{_h(s)}</li>" for s in self.suggestions)
        notes = "".join(f"<li><small>{_h(n)}</small></li>" for n in self.notes)
        head = _h(self.summary().splitlines()[0])
        return (f"<b style='color:{color}'>{head}</b>{table}"
                + (f"<p>smallest changes that fit:</p><ul>{extra}</ul>" if extra else "") + (f"<ul>{notes}</ul>" if notes else ""))


def _training(i: FitInputs) -> TrainingEstimate:
    return training_estimate(
        i.arch, micro_batch=i.micro_batch, seq_len=i.seq_len, gpus=i.gpus, tensor_parallel=i.tensor_parallel,
        context_parallel=i.context_parallel, sequence_parallel=i.sequence_parallel,
        activation_checkpointing=i.activation_checkpointing, logprob_batch=i.logprob_batch,
        logprob_chunk_size=i.logprob_chunk_size, sequence_packing=i.sequence_packing,
        optimizer_foreach=i.optimizer_foreach, cpu_offload=i.cpu_offload, profile=i.profile,
        reference_on_gpu=i.reference_on_gpu)


def _usable(i: FitInputs) -> float:
    residual = VLLM_SLEEP_RESIDUAL_GIB if (i.colocated and i.phase == "both") else 0.0
    return round(i.gpu.gib - RUNTIME_GIB - residual, 2)


def _stranded(i: FitInputs, t: TrainingEstimate) -> tuple[float, float]:
    """``(low, high)`` GiB the caching allocator strands at the peak (see the module docstring)."""
    low = _allowance(i, t)
    if i.expandable_segments:
        return low, low
    return low, max(low, STRANDED_BLOCK_FRACTION_HIGH * _block(i))


def _block(i: FitInputs) -> float:
    """GiB of the training micro-batch's fp32 logits, the largest block the allocator has to place."""
    return 4 * i.micro_batch * i.seq_len * i.arch.vocab_size / (i.tensor_parallel * i.context_parallel) / 1024**3


def _allowance(i: FitInputs, t: TrainingEstimate) -> float:
    """GiB the caching allocator always strands at the peak: the stranded band's low end."""
    if i.expandable_segments:
        return EXPANDABLE_HEADROOM_GIB
    # the training micro-batch's logits block: in the log-prob pass too, since what stays stranded there is the
    # partly used segments the training step left (two H100s: a 2 x 16384 pass after a 1 x 16384 step ran out with
    # 7.5 GiB reserved but unallocated; the same pass after a 1 x 8192 step fitted)
    block = _block(i)
    masked = bool(i.arch.sliding_window and i.arch.num_sliding_layers and i.seq_len > i.arch.sliding_window
                  and not i.sequence_packing)
    several = i.micro_batch > 1 and t.peak_phase != "logprob"
    frac = STRANDED_BLOCK_FRACTION_MASKED if (masked and several) else STRANDED_BLOCK_FRACTION
    return frac * block


def _margin(i: FitInputs, t: TrainingEstimate) -> float:
    return ERROR_MARGIN * t.peak_gib + _allowance(i, t)


def _need(i: FitInputs, t: TrainingEstimate) -> float:
    return t.peak_gib + _margin(i, t)


def _train_verdict(peak: float, usable: float, low: float, high: float) -> Verdict:
    """``does-not-fit`` when the peak and the memory always stranded overflow; ``tight`` when the error band or the
    stranded band reaches past ``usable``; else ``fits``."""
    if peak + low > usable:
        return Verdict.DOES_NOT_FIT
    return Verdict.TIGHT if peak * (1 + ERROR_MARGIN) + high > usable else Verdict.FITS


def _flag(i: FitInputs, name: str) -> str:
    return i.keys.get(name, name)


def _example(i: FitInputs, name: str, value: str) -> str:
    flag = _flag(i, name)
    return f"{flag} {value}" if flag.startswith("--") else f"{flag}={value}"


def validate(i: FitInputs) -> None:
    """Refuse inputs no GPU run can have (negative or fractional counts, NaN shares) with the key and the fix."""
    def whole(name: str, value: Any, *, minimum: int = 1, optional: bool = False) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum or value > 1 << 40:
            raise ConfigError(f"{_flag(i, name)} must be a whole number >= {minimum}, got {value!r}; fix: pass e.g. "
                              f"{_example(i, name, str(max(minimum, 1)))}")

    for name in ("micro_batch", "seq_len", "gpus", "tensor_parallel", "context_parallel", "vllm_tensor_parallel"):
        whole(name, getattr(i, name))
    for name in ("logprob_batch", "logprob_chunk_size", "max_model_len"):
        whole(name, getattr(i, name), optional=True)
    whole("generation_nodes", i.generation_nodes, minimum=0)
    u = i.gpu_memory_utilization
    if isinstance(u, bool) or not isinstance(u, (int, float)) or not math.isfinite(u) or not 0 < u <= 1:
        raise ConfigError(f"{_flag(i, 'gpu_memory_utilization')} must be a fraction of the GPU in (0, 1], got {u!r}; "
                          f"fix: pass e.g. {_example(i, 'gpu_memory_utilization', '0.6')}")


def evaluate(i: FitInputs, *, suggest: bool = True) -> FitReport:
    """The report for fully specified inputs (``estimate`` and ``check`` build them).

    Raises:
        ConfigError: an input no run can have (``validate``), naming the key or flag and the fix.
    """
    validate(i)
    usable = _usable(i)
    t = need = g = band = None
    verdicts, notes = [], []
    certain = False
    if i.phase in ("training", "both"):
        t = _training(i)
        margin = _margin(i, t)
        need = round(t.peak_gib + margin, 3)
        band = tuple(round(x, 3) for x in _stranded(i, t))
        verdicts.append(_train_verdict(t.peak_gib, usable, *band))
        calibrated = i.gpus <= CALIBRATED_GPUS and i.tensor_parallel == 1 and i.context_parallel == 1 and i.profile.calibrated
        # micro-batches the trainer trims or packs are usually shorter than this worst case: never certain
        certain = not i.profile.tokens_upper_bound and \
            t.peak_gib > usable * (CERTAIN_CALIBRATED if calibrated else CERTAIN_UNCALIBRATED)
        notes += t.notes
        low, high = band
        notes.append(f"margin {margin:.1f} GiB = estimate error {ERROR_MARGIN:.2%} of the peak (largest measured "
                     f"excess over the calibration) + {low:.1f} GiB "
                     + ("page rounding (expandable segments)" if i.expandable_segments else
                        "for blocks PyTorch's default allocator always strands"))
        if not i.expandable_segments:
            notes.append(f"stranded memory {low:.1f}-{high:.1f} GiB: what PyTorch's default caching allocator may hold "
                         "reserved but unusable at the peak (the band of the committed reserved/allocated peaks); "
                         "inside it the verdict is tight. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (nbtools' "
                         "default for the training job) leaves 0.5 GiB")
    if i.phase in ("generation", "both"):
        g = generation_estimate(
            i.arch, capacity_gib=i.gpu.gib, gpu_memory_utilization=i.gpu_memory_utilization,
            max_model_len=i.max_model_len or i.seq_len, tensor_parallel=i.vllm_tensor_parallel,
            kv_cache_dtype=i.kv_cache_dtype, enforce_eager=i.enforce_eager, colocated=i.colocated)
        verdicts.append(g.verdict)
        notes += g.notes + ["vLLM terms follow vLLM's documented behaviour; they were not measured (no vLLM on the "
                            "calibration machine)"]
        certain = certain or (g.verdict == Verdict.DOES_NOT_FIT and g.kv_cache_gib < 0)
    verdict = Verdict.worst(verdicts)
    rep = FitReport(i, i.gpu.gib, usable, t, need, g, verdict, bool(certain and verdict == Verdict.DOES_NOT_FIT), [], notes,
                    band)
    if suggest and verdict != Verdict.FITS:
        rep.suggestions = _suggestions(i, rep)
    return rep


def _key(i: FitInputs, name: str, value: Any) -> str:
    """How to make the change where the inputs came from: ``set key=value`` (experiment) or ``use --flag value``."""
    if name == "expandable_segments":
        return "set " + i.keys.get(name, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the training processes")
    key = i.keys.get(name, name)
    if name == "gpus" and i.keys.get("gpus_per_node"):
        nodes = _nodes_for(i, value)
        extra = f" + {i.generation_nodes} for vLLM" if i.generation_nodes else ""
        return f"set {key}={nodes} ({value} training GPUs{extra})"
    if key.startswith("--"):
        return f"use {key}" if value is True else f"use {key} {value}"
    v = "null" if value is None else (str(value).lower() if isinstance(value, bool) else value)
    if key.startswith(("policy.", "actor_rollout_ref.", "data.")):  # trainer keys travel as overrides
        return f"set {key}={v} (in trainer.overrides)"
    return f"set {key}={v}"


def _nodes_for(i: FitInputs, training_gpus: int) -> int:
    """``cluster.worker_replicas`` that gives ``training_gpus`` (vLLM's own nodes added when not colocated)."""
    per = max(1, int(i.keys.get("gpus_per_node") or 1))
    return max(1, -(-training_gpus // per)) + (i.generation_nodes if not i.colocated else 0)


def training_candidates(i: FitInputs, peak_phase: str) -> list[tuple[str, Any, FitInputs]]:
    """Single changes of the training side, smallest first: ``(field, new value, inputs)``; none repeats a value set."""
    cands: list[tuple[str, Any, FitInputs]] = []
    lp = i.logprob_batch or i.micro_batch
    if peak_phase == "logprob":  # first what changes the log-prob pass alone
        if i.logprob_chunk_size:  # the chunked local path costs a block more
            cands.append(("logprob_chunk_size", None, i.with_(logprob_chunk_size=None)))
        cands += [("logprob_batch", n, i.with_(logprob_batch=n)) for n in _halvings(lp)]
    if not i.activation_checkpointing:
        cands.append(("activation_checkpointing", True, i.with_(activation_checkpointing=True)))
    if not i.expandable_segments:
        cands.append(("expandable_segments", True, i.with_(expandable_segments=True)))
    cands += [("micro_batch", n, i.with_(micro_batch=n, logprob_batch=min(lp, n) if i.logprob_batch else None))
              for n in _halvings(i.micro_batch)]
    per = max(1, int(i.keys.get("gpus_per_node") or 1))
    more = sorted({g for g in (i.gpus * 2, i.gpus * 4, -(-(i.gpus + 1) // per) * per) if g > i.gpus})
    cands += [("gpus", g, i.with_(gpus=g)) for g in more if _nodes_for(i, g) != _nodes_for(i, i.gpus)]
    cands += [("seq_len", n, i.with_(seq_len=n, max_model_len=n)) for n in _halvings(i.seq_len, 256)]
    return cands


def generation_candidates(i: FitInputs) -> list[tuple[str, Any, FitInputs]]:
    """Single changes of the generation side, smallest first."""
    top = round(max(0.3, 1 - (RUNTIME_GIB + 1) / i.gpu.gib), 2)
    cands: list[tuple[str, Any, FitInputs]] = [
        ("gpu_memory_utilization", u, i.with_(gpu_memory_utilization=u)) for u in (0.7, 0.8, 0.9, top)
        if i.gpu_memory_utilization < u <= top]
    cands += [("vllm_tensor_parallel", i.vllm_tensor_parallel * k, i.with_(vllm_tensor_parallel=i.vllm_tensor_parallel * k))
              for k in (2, 4, 8)]
    mml = i.max_model_len or i.seq_len
    cands += [("max_model_len", n, i.with_(max_model_len=n)) for n in _halvings(mml, 256)]
    return cands


def _suggestions(i: FitInputs, rep: FitReport, limit: int = 3) -> list[str]:
    """Single changes, smallest first, that turn the failing side into ``fits`` (else ``tight``)."""
    out: list[str] = []
    if rep.training is not None and rep.training_need_gib is not None and rep.verdict != Verdict.FITS and \
            rep.training_verdict() != Verdict.FITS:
        cands = [(_key(i, name, v), inp) for name, v, inp in training_candidates(i, rep.training.peak_phase)]
        out += _first_fitting(cands, "training", limit)
    if rep.generation is not None and rep.generation.verdict != Verdict.FITS:
        cands = [(_key(i, name, v), inp) for name, v, inp in generation_candidates(i)]
        out += _first_fitting(cands, "generation", limit)
    return out


def _halvings(n: int, floor: int = 1) -> list[int]:
    out, x = [], n // 2
    while x >= floor:
        out.append(x)
        x //= 2
    return out


def _first_fitting(cands: list[tuple[str, FitInputs]], side: str, limit: int) -> list[str]:
    found, fallback = [], []
    for text, inp in cands:
        r = evaluate(inp, suggest=False)
        if side == "training":
            v = r.training_verdict()
            detail = f"training peak {r.training.peak_gib:.1f} GiB, need {r.training_need_gib:.1f} of {r.usable_gib:.1f} -> {v}"
        else:
            v = r.generation.verdict
            detail = f"KV cache {r.generation.kv_cache_gib:.1f} GiB, {r.generation.max_concurrent_sequences:g} sequences -> {v}"
        if v == Verdict.FITS:
            found.append(f"{text}: {detail}")
        elif v == Verdict.TIGHT and not fallback:
            fallback.append(f"{text}: {detail}")
        if len(found) >= limit:
            break
    return found or fallback


def estimate(
    model: ModelArch | dict | str,
    *,
    gpu: str | GpuSpec = "h200",
    micro_batch: int = 1,
    seq_len: int = 1024,
    gpus: int = 1,
    activation_checkpointing: bool = False,
    phase: str = "both",
    **options: Any,
) -> FitReport:
    """Estimate one case without an experiment (``nbtools fit --model ...``).

    Args:
        model: a config.json path or dict, a Hub id (shipped configs first, then ``AutoConfig``), or a ``ModelArch``.
        gpu: ``h100``, ``h200``, ``b200``, ``a100-80`` ... or a GKE accelerator name.
        micro_batch, seq_len: sequences per training micro-batch per GPU, and their length in tokens.
        gpus: GPUs training runs on.
        activation_checkpointing: NeMo-RL's ``dtensor_cfg.activation_checkpointing``.
        phase: ``training``, ``generation`` or ``both``.
        **options: any other :class:`FitInputs` field (``logprob_batch``, ``gpu_memory_utilization`` ...).

    Example:
        >>> nbtools.fit.estimate("google/gemma-3-1b-it", gpu="b200", micro_batch=4, seq_len=2048).verdict
        'fits'
    """
    if phase not in ("training", "generation", "both"):
        raise ConfigError(f"phase {phase!r} is not one of training, generation, both; fix: pass one of them")
    for name, value in (("micro_batch", micro_batch), ("seq_len", seq_len), ("gpus", gpus)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}; fix: pass e.g. {name}=1")
    known = {f.name for f in dataclasses.fields(FitInputs)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(f"unknown option(s) {unknown}; fix: use FitInputs fields: {', '.join(sorted(known))}")
    keys = {"activation_checkpointing": "--activation-checkpointing", "micro_batch": "--micro-batch",
            "seq_len": "--seq-len", "gpus": "--gpus", "logprob_batch": "logprob_batch",
            "logprob_chunk_size": "logprob_chunk_size",
            "gpu_memory_utilization": "--gpu-memory-utilization", "max_model_len": "--max-model-len",
            "vllm_tensor_parallel": "--vllm-tensor-parallel"}
    inp = FitInputs(arch=resolve_arch(model), gpu=gpu_spec(gpu), micro_batch=micro_batch, seq_len=seq_len, gpus=gpus,
                    activation_checkpointing=activation_checkpointing, phase=phase, keys=keys, **options)
    return evaluate(inp)
