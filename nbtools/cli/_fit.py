"""`nbtools fit`: the pre-flight GPU memory check, for an experiment or for a single case.

Why: scripts and CI gate launches on it; the JSON shape is fixed (issue 15):
``{"gpu_gib", "training": {"peak_gib", "terms": {...}}, "generation": {...} | null, "verdict", "suggestions"}``;
exit 0 when it fits or is tight, 1 when it does not fit.

Example:
    $ nbtools fit experiments/gke-b200-gemma3-1b.yaml --json
    $ nbtools fit --model Qwen/Qwen2.5-1.5B --gpu h100 --gpus 1 --micro-batch 4 --seq-len 4096 --json
"""

from __future__ import annotations

from nbtools.cli._load import load_cfg
from nbtools.cli._out import Out

__all__ = ["register_fit", "cmd_fit"]


def register_fit(sub) -> None:
    """Add the ``fit`` subcommand to the ``nbtools`` parser."""
    what = "will the GRPO step fit in GPU memory? per-GPU terms, a verdict, the smallest change that fits"
    p = sub.add_parser("fit", help=what, description=what + ". Exit 0 fits/tight, 1 does not fit.")
    p.set_defaults(func=cmd_fit)
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else there")
    p.add_argument("experiment", nargs="?", metavar="EXPERIMENT.yaml", help="take everything from the experiment")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. model.max_total_sequence_length=4096")
    p.add_argument("--backend", choices=["local", "gke", "ray"], help="override the file's backend")
    p.add_argument("--model", metavar="CONFIG_DIR_OR_HUB_ID", help="single case: a config.json, its directory or a Hub id")
    p.add_argument("--gpu", metavar="TYPE", help="h100 | h200 | b200 | a100-80 | ... (default: the experiment's, or h200)")
    p.add_argument("--gpus", type=int, default=1, help="single case: GPUs training runs on (default 1)")
    p.add_argument("--micro-batch", type=int, default=1, help="single case: sequences per micro-batch per GPU")
    p.add_argument("--seq-len", type=int, default=1024, help="single case: tokens per sequence (prompt + generation)")
    p.add_argument("--activation-checkpointing", action="store_true", help="single case: activation checkpointing on")
    p.add_argument("--phase", choices=["training", "generation", "both"], help="what to estimate (default: both)")
    p.add_argument("--gpu-memory-utilization", type=float, help="single case: vLLM's share of the GPU (default 0.6)")
    p.add_argument("--max-model-len", type=int, help="single case: vLLM's max_model_len (default: --seq-len)")
    p.add_argument("--vllm-tensor-parallel", type=int, help="single case: vLLM's tensor_parallel_size (default 1)")


def cmd_fit(a) -> Out:
    from nbtools import fit
    from nbtools.errors import ConfigError

    if a.experiment and a.model:
        raise ConfigError("pass either EXPERIMENT.yaml or --model, not both; fix: drop one of them")
    if not a.experiment and not a.model:
        raise ConfigError("nothing to check; fix: pass EXPERIMENT.yaml, or --model CONFIG_OR_HUB_ID with --gpu, "
                          "--micro-batch and --seq-len")
    if a.experiment:

        report = fit.check(load_cfg(a), gpu=a.gpu)
        if a.phase and report.verdict != "not-applicable":
            report = fit.evaluate(report.inputs.with_(phase=a.phase))
    else:
        extra = {k: v for k, v in (("gpu_memory_utilization", a.gpu_memory_utilization),
                                   ("max_model_len", a.max_model_len),
                                   ("vllm_tensor_parallel", a.vllm_tensor_parallel)) if v is not None}
        report = fit.estimate(a.model, gpu=a.gpu or "h200", gpus=a.gpus, micro_batch=a.micro_batch, seq_len=a.seq_len,
                              activation_checkpointing=a.activation_checkpointing, phase=a.phase or "both", **extra)
    bad = report.verdict == "does-not-fit"
    fix = (report.suggestions[0] if report.suggestions else "lower the micro-batch or the sequence length, or add GPUs")
    return Out(report.to_dict(), report.summary(), code=1 if bad else 0,
               error="does not fit in GPU memory" if bad else None, fix=fix)
