"""One Ray job for a model's several evaluations (its greedy and sampled decodings), notebook 07's default.

Why: each job costs a job supervisor, a driver, a wait and a copy check in the pods; a model's decodings need none of
them twice, and verl's generation job then starts its vLLM engine once (minutes on a real model).

Example:
    >>> job = nbtools.evals.one_job.in_one_job([greedy_spec, sampled_spec])
    >>> job.entrypoint    # run_eval.py twice, ``&&``-joined
"""

from __future__ import annotations

import hashlib

from nbtools.errors import ConfigError
from nbtools.evals.job import EvalJob

__all__ = ["in_one_job"]


def in_one_job(specs: list[EvalJob] | tuple[EvalJob, ...], *, entrypoint: str | None = None) -> EvalJob:
    """One Ray job that runs the evaluations ``specs`` of one model (its decodings) one after another.

    Why: each job costs a job supervisor, a driver, a wait and a copy check in the pods; a model's greedy and sampled
    evaluations need none of them twice. ``entrypoint``: one program that does them all (verl's generation job loads
    the model once, ``generate_job.generate_together``); default: each spec's command in turn, ``&&``-joined
    (run_eval.py takes one generation config per invocation). Each part keeps its own save path and prints its own
    score block, which :func:`collect` picks by the part's samples and temperature. The submission id is derived from
    the whole entrypoint, so a re-run re-attaches.

    Raises:
        ConfigError: the specs are not of one model, its copy, address and GPUs.
    """
    specs = tuple(specs)
    if not specs:
        raise ConfigError("in_one_job: expected at least one evaluation, got none")
    first = specs[0]
    same = [(s.model_name, s.local_copy, s.address, s.entrypoint_num_gpus) for s in specs]
    if len(set(same)) > 1 or any(s.parts for s in specs):
        raise ConfigError(f"in_one_job: the evaluations {[s.label for s in specs]} are not of one model on one cluster "
                          "(model, local copy, address, driver GPUs differ); fix: one job per model")
    if len({(s.num_tests_per_prompt, s.temperature) for s in specs}) < len(specs):
        raise ConfigError(f"in_one_job: two of {[s.label for s in specs]} have the same samples and temperature; "
                          "their score blocks could not be told apart; fix: one decoding each")
    if len(specs) == 1 and entrypoint is None:
        return first
    entrypoint = entrypoint or " && ".join(s.entrypoint for s in specs)
    digest = hashlib.sha256(entrypoint.encode()).hexdigest()[:8]
    head, _, _ = first.submission_id.rpartition("-")  # <experiment>-eval-<dataset>-<label>
    label = "+".join(s.label for s in specs)
    return EvalJob(label=label, model_name=first.model_name, dataset_name=first.dataset_name,
                   num_tests_per_prompt=first.num_tests_per_prompt, temperature=first.temperature,
                   save_path=first.save_path, config=first.config, overrides=first.overrides, entrypoint=entrypoint,
                   submission_id=f"{head}-x{len(specs)}-{digest}", address=first.address,
                   runtime_env=first.runtime_env, metadata={**first.metadata, "label": label}, local_copy=first.local_copy,
                   length=first.length, length_from=first.length_from, entrypoint_num_gpus=first.entrypoint_num_gpus,
                   parts=specs)
