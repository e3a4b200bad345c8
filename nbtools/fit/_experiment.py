"""Fit inputs taken from an experiment: the model, the GPUs, and the trainer's own batch / parallelism keys.

Why: the numbers that decide whether a GRPO step fits live in three places (the experiment, the trainer's recipe it
names, the overrides the launch adds); the trainer reads its own keys (``Trainer.fit_inputs``) exactly as the job will
see them, and ``check(cfg)`` holds them against the GPU.

Example:
    >>> report = nbtools.fit.check(cfg)
    >>> report.verdict
    'fits'
"""

from __future__ import annotations

from nbtools import trainers
from nbtools._gpus import GpuSpec, gpu_spec
from nbtools.config import Experiment
from nbtools.fit._arch import resolve_arch
from nbtools.fit._estimate import FitInputs, FitReport, evaluate
from nbtools.fit._verdict import Verdict

__all__ = ["check", "inputs_from_experiment"]


def inputs_from_experiment(cfg: Experiment, *, gpu: str | GpuSpec | None = None,
                           trainer: trainers.Trainer | None = None) -> tuple[FitInputs, list[str]] | None:
    """The :class:`FitInputs` of ``cfg`` and notes, read by its trainer (``trainer``, else the registry's) from its own
    keys (``Trainer.fit_inputs``: NeMo-RL's recipe with the launch's overrides, verl's overrides); None where the run
    uses no GPU."""
    read = (trainer or trainers.get(cfg)).fit_inputs()
    if read is None:
        return None
    d, notes = read
    return FitInputs(arch=resolve_arch(cfg.model.name), gpu=gpu_spec(gpu or cfg.cluster.gpu_type), **d), notes


def check(cfg: Experiment, *, gpu: str | GpuSpec | None = None, trainer: trainers.Trainer | None = None) -> FitReport:
    """Will ``cfg``'s GRPO step fit in GPU memory? Training and generation terms, a verdict, the smallest fixes.

    The local backend's rehearsal runs on CPU ranks, so there the verdict is ``not-applicable``.

    Args:
        cfg: the experiment.
        gpu: override ``cluster.gpu_type`` (``h100``, ``h200``, ``b200`` ... or a GKE accelerator name).
        trainer: the experiment's trainer where the caller resolved it (default: ``nbtools.trainers.get(cfg)``).

    Raises:
        NotFoundError: the model's config.json is neither shipped nor reachable (the message names the fix).

    Example:
        >>> nbtools.fit.check(cfg)        # in notebook 03, before the launch cell
    """
    read = inputs_from_experiment(cfg, gpu=gpu, trainer=trainer)
    if read is None:
        return _not_applicable(cfg)
    inputs, notes = read
    report = evaluate(inputs)
    report.notes = notes + report.notes
    return report


def _not_applicable(cfg: Experiment) -> FitReport:
    from nbtools.fit._arch import ModelArch

    arch = ModelArch(cfg.model.name, "cpu", 0, 0, 0, 1, 1, 0, 0, True)  # no GPU: nothing of the model is estimated
    spec = GpuSpec("cpu", "CPU ranks (no GPU)", 0)
    inputs = FitInputs(arch=arch, gpu=spec, micro_batch=1, seq_len=cfg.model.max_total_sequence_length,
                       phase="none", gpus=cfg.rehearsal.ranks)
    return FitReport(inputs, 0.0, 0.0, None, None, None, Verdict.NOT_APPLICABLE, False, [],
                     ["not applicable (CPU rehearsal): the local backend trains a tiny model on CPU ranks; "
                      "run the check on a gke or ray experiment"])
