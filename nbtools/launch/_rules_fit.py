"""Lint rule ``gpu-memory-fit``: the pre-flight memory estimate of ``nbtools.fit`` as a launch finding.

Why: an out-of-memory step fails 20+ minutes into a job; the estimate costs milliseconds. A config that certainly
does not fit is blocking (``launch.submit`` refuses it unless ``ignore_fit=True``); a possible OOM or a tight fit is
a warning that carries the smallest change that fits.

Example:
    >>> report = nbtools.launch.lint(cfg)
    >>> [f.message for f in report.findings if f.rule == "gpu-memory-fit"]
"""

from __future__ import annotations

from nbtools.config import Experiment
from nbtools.errors import Fix, NbtoolsError
from nbtools.trainers import Finding, LintReport, Trainer

__all__ = ["check_fit"]

RULE = "gpu-memory-fit"


def check_fit(cfg: Experiment, r: LintReport, *, ignore: bool = False, trainer: Trainer | None = None):
    """Append the fit finding for ``cfg`` to ``r``; returns the :class:`nbtools.fit.FitReport` (None if it could not run)."""
    from nbtools import fit

    r.checked.append(RULE)
    try:
        report = fit.check(cfg, trainer=trainer)
    except NbtoolsError as e:
        r.findings.append(Finding(
            "warning", RULE, "model.name",
            f"the GPU memory fit check could not run: {str(e).splitlines()[0]}",
            Fix("pass the model's config.json to nbtools.fit.estimate(...) or go online once (AutoConfig fetches only "
                "config.json)", cli="pass the model's config.json (`nbtools fit --model CONFIG_DIR`) or go online once "
                "(only config.json is fetched)"),
        ))
        return None
    V = fit.Verdict
    if report.verdict in (V.FITS, V.NOT_APPLICABLE):
        return report
    parts = []
    if report.training is not None:
        t = report.training
        parts.append(f"training peak {t.peak_gib:.1f} GiB per GPU ({t.peak_phase}; {report.training_need_gib:.1f} GiB "
                     f"with allocator headroom) vs {report.usable_gib:.1f} GiB usable on {report.inputs.gpu.label}")
    if report.generation is not None and report.generation.problems:
        parts.append("; ".join(report.generation.problems))
    elif report.generation is not None and report.generation.verdict is not V.FITS:
        parts.append(f"vLLM's KV cache holds only {report.generation.max_concurrent_sequences:g} sequence(s) of "
                     "max_model_len")
    certain = report.certain and report.verdict is V.DOES_NOT_FIT
    blocking = certain and not ignore
    verdict = "certainly does not fit" if certain else report.verdict.value
    fix = "; ".join(report.suggestions) or "lower the micro-batch or the sequence length, or add GPUs"
    if certain:
        fix = Fix(fix + " (or launch anyway with ignore_fit=True)", cli=fix + " (or launch anyway with --ignore-fit)")
    first = report.suggestions[0] if report.suggestions else ""
    key = first.removeprefix("set ").split("=", 1)[0] if first.startswith("set ") else "cluster.gpu_type"
    r.findings.append(Finding("blocking" if blocking else "warning", RULE, key, f"{verdict}: " + "; ".join(parts), fix))
    return report
