"""Pre-flight fit check: will this GRPO config fit in GPU memory, and what is the smallest change that makes it fit?

Why: the most common way a NeMo-RL or verl GRPO run fails is out of memory, 20+ minutes of GPU nodes after the
launch. Every term of the per-GPU peak follows from the model's ``config.json``, the GPUs and the GRPO config; the
training terms were calibrated on one H200 / H100, two H100s and four (emulated) H100s (``benchmarks/fit_calibrate.py``;
every measured peak within 2.4%, none more than 1.1% above its estimate); what PyTorch's caching allocator may strand
is reported as a band. After an out-of-memory, ``postmortem`` names the term that overflowed and the change that fits.

Example:
    >>> report = nbtools.fit.check(cfg)                     # an experiment: NeMo-RL recipe + overrides
    >>> report.verdict, report.suggestions
    >>> nbtools.fit.estimate("google/gemma-3-1b-it", gpu="h100", micro_batch=8, seq_len=4096).to_frame()
"""

from __future__ import annotations

from nbtools._gpus import GPUS, GpuSpec, gpu_spec, gpu_type_rules
from nbtools.fit._arch import ModelArch, resolve_arch, shipped_models
from nbtools.fit._estimate import FitInputs, FitReport, estimate, evaluate
from nbtools.fit._experiment import check, inputs_from_experiment
from nbtools.fit._generation import GenerationEstimate, generation_estimate
from nbtools.fit._postmortem import (
    OomFix,
    OomMessage,
    OomPostmortem,
    parse_oom,
    postmortem,
    postmortem_inputs,
)
from nbtools.fit._training import TrainingEstimate, layer_activation_bytes, training_estimate
from nbtools.fit._verdict import Verdict

__all__ = [
    "check",
    "estimate",
    "evaluate",
    "inputs_from_experiment",
    "FitInputs",
    "FitReport",
    "Verdict",
    "ModelArch",
    "resolve_arch",
    "shipped_models",
    "GPUS",
    "GpuSpec",
    "gpu_spec",
    "gpu_type_rules",
    "TrainingEstimate",
    "training_estimate",
    "layer_activation_bytes",
    "postmortem",
    "postmortem_inputs",
    "parse_oom",
    "OomPostmortem",
    "OomMessage",
    "OomFix",
    "GenerationEstimate",
    "generation_estimate",
]
