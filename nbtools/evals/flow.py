"""One call per (model, decoding) for notebook 07, the same on every backend.

Why: the notebook must evaluate baseline and fine-tuned *the same way*; this picks the models, problems, grader
and output directory from the experiment so the two calls differ only in ``which``. What runs depends on the
trainer that produced the run: the local rehearsal is evaluated here on its held-out split (``evaluate_local``);
a NeMo-RL run is evaluated by NeMo-RL's ``run_eval.py`` as a Ray job on the cluster, a verl run by vLLM generations
over its test split (``nbtools.evals.vllm_generate``, same output format), whose per-sample results are read back
from where the pods wrote them (the bucket on GKE). Either way the per-problem table is saved
under ``<run_dir>/eval/`` so the comparison is paired and a re-run is instant.

Example:
    >>> base = nbtools.evals.evaluate(cfg, "baseline")
    >>> tuned = nbtools.evals.evaluate(cfg, "fine-tuned", n=8)
    >>> tuned_greedy, tuned_sampled = nbtools.evals.evaluate(cfg, "fine-tuned", n=(1, 8))  # one cluster job
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from nbtools import _paths, trainers
from nbtools.config import Experiment
from nbtools.errors import ConfigError, Fix, NotFoundError
from nbtools.evals.job import build_eval_job, collect, finetuned_model_path
from nbtools.evals.one_job import in_one_job
from nbtools.evals.result import EvalResult
from nbtools.evals.run import evaluate_local

__all__ = ["evaluate", "evaluate_model", "models", "local_models", "eval_dir"]

Which = Literal["baseline", "fine-tuned"]


class ClusterJob:
    """An evaluation by a Ray job on the cluster: ``build`` makes the job spec of one model and decoding, ``together``
    one job of a model's several decodings (:func:`nbtools.evals.one_job.in_one_job`, or the trainer's own); the
    per-sample results are read back from where the pods wrote them (the bucket on GKE)."""

    def __init__(self, build: Callable[..., Any], together: Callable[..., Any] = in_one_job):
        self.build, self.together = build, together

    def models(self, cfg: Experiment, trainer: trainers.Trainer) -> dict[str, str]:
        return models(cfg, trainer=trainer)

    def run(self, cfg: Experiment, model: str, *, label: str, mode: str, out: Path, n: int, temperature: float,
            dataset: str, max_model_len: int | None, timeout: float, batch_size: int) -> EvalResult:
        return self.run_all(cfg, model, label=label, decodings=[Decoding(mode, out, n, temperature)], dataset=dataset,
                            max_model_len=max_model_len, timeout=timeout, batch_size=batch_size)[0]

    def run_all(self, cfg: Experiment, model: str, *, label: str, decodings: list[Decoding], dataset: str,
                max_model_len: int | None, timeout: float, batch_size: int) -> list[EvalResult]:
        """Every decoding of one model in one job (one copy check, one job supervisor and driver; verl's generation
        loads the model once), each result collected from its own save path and score block."""
        # one local copy per model (``local_name``): its decodings load the same one
        parts = [self.build(cfg, model, label=f"{label}-{d.mode}", n=d.n, temperature=d.temperature, dataset=dataset,
                            max_model_len=max_model_len, local_name=label) for d in decodings]
        spec = parts[0] if len(parts) == 1 else self.together(parts)
        job, job_id = _attach(spec, decodings[0].out if len(parts) == 1 else None)
        if job is None:
            spec.prepare(cfg)  # the merged model to the GPU nodes' local disk first (no mmap over gcsfuse); no-op otherwise
            job, job_id = spec.submit(), spec.submission_id
        job.wait(timeout=timeout)
        where = _read_back([str(cfg.url(p.save_path)) for p in parts])
        results = []
        for part, d, saved in zip(parts, decodings, where, strict=True):
            alone = job_id == part.submission_id  # its own job: the last score block, as run_eval.py prints
            result = collect(job, save_path=saved, n=None if alone else part.num_tests_per_prompt,
                             temperature=None if alone else part.temperature)
            result.params["length_from"] = part.length_from  # 07's settings table says where the length came from
            result.params["save_path"] = str(cfg.url(part.save_path))  # where the job wrote the per-problem results
            result.params["evaluation"] = part.submission_id  # this evaluation's own id ...
            result.params["job"] = job_id  # ... and the job that ran it (one per model in 07)
            result.save(d.out)
            results.append(result)
        return results


def _read_back(urls: list[str]) -> list[str]:
    """Where :func:`collect` reads each save path: the save paths of one job, siblings on remote storage, copied here
    together (one listing and one read of their parent, each a Ray job on a cluster whose storage only it sees),
    instead of a listing and a read each; a single or local save path is read where it is."""
    from nbtools import storage

    parents = {storage.parent_of(u) for u in urls}
    if len(urls) < 2 or len(parents) > 1 or not storage.is_remote(urls[0]):
        return urls
    names = {storage.name_of(u) for u in urls}

    def wanted(rel: str) -> bool:
        return rel.count("/") == 1 and rel.split("/")[0] in names and rel.endswith(("/evaluation_data.json", "/config.json"))

    try:
        local = storage.mirror(parents.pop(), include=wanted)
    except NotFoundError:  # nothing written there: collect says so per result
        return urls
    return [str(local / storage.name_of(u)) for u in urls]


def _attach(spec: Any, out: Path | None) -> tuple[Any, str | None]:
    """The job that ran ``spec`` already and its id, or (None, None): a re-run (07 again, `nbtools evaluate` after 07) re-attaches, its
    copy was made before it was submitted. A single decoding that 07 ran in its model's one job (``out`` holds the
    result saved from it) re-attaches to that job."""
    from nbtools import jobs

    try:
        return jobs.attach(spec.address, spec.submission_id), spec.submission_id
    except NotFoundError:
        pass
    saved = {}
    if out is not None and (out / "summary.json").is_file():
        saved = json.loads((out / "summary.json").read_text()).get("params", {})
    if saved.get("evaluation") == spec.submission_id and saved.get("job") not in (None, spec.submission_id):
        try:
            return jobs.attach(spec.address, saved["job"]), saved["job"]
        except NotFoundError:
            pass
    return None, None


@dataclass(frozen=True)
class Decoding:
    """One decoding of a model's evaluation: its mode name (``greedy`` / ``sampledN``), where its result is saved
    here, samples per problem and temperature."""

    mode: str
    out: Path
    n: int
    temperature: float


class HeldOutHere:
    """The rehearsal's evaluation: on this machine, over its task's held-out split, as it trained (its
    ``max_new_tokens``); the two models are HF directories here."""

    def models(self, cfg: Experiment, trainer: trainers.Trainer) -> dict[str, str]:
        return local_models(cfg, trainer=trainer)

    def run(self, cfg: Experiment, model: str, *, label: str, mode: str, out: Path, n: int, temperature: float,
            dataset: str, max_model_len: int | None, timeout: float, batch_size: int) -> EvalResult:
        from nbtools.rehearsal import task

        path = Path(model)
        if not (path / "config.json").is_file():
            raise NotFoundError(f"expected {label} as a HF directory at {path}, found nothing",
                                fix="merge a checkpoint first (notebook 06 / `nbtools merge`) or pass a model directory")
        result = evaluate_local(
            path, task.held_out_problems(cfg), reward=list(cfg.rehearsal.reward_functions), n=n,
            temperature=temperature, max_new_tokens=cfg.rehearsal.max_new_tokens, seed=cfg.grpo.seed,
            batch_size=batch_size, out_dir=out, progress_desc=f"{label} ({mode})",
        )
        result.params["length_from"] = "the rehearsal's max_new_tokens, as it trained"
        return result

    def run_all(self, cfg: Experiment, model: str, *, label: str, decodings: list[Decoding], **kw: Any) -> list[EvalResult]:
        return [self.run(cfg, model, label=label, mode=d.mode, out=d.out, n=d.n, temperature=d.temperature, **kw)
                for d in decodings]


def _generate_job(cfg: Experiment, model: str, *, label: str, n: int, temperature: float, dataset: str,
                  max_model_len: int | None, local_name: str | None = None):
    """vLLM generations over the experiment's own test split (so ``dataset`` does not apply), verl's rule."""
    from nbtools.evals.generate_job import build_generate_job

    return build_generate_job(cfg, model, label=label, num_tests_per_prompt=n, temperature=temperature,
                              max_new_tokens=max_model_len, local_name=local_name)


def _generate_together(parts: list[Any]) -> Any:
    from nbtools.evals.generate_job import generate_together

    return generate_together(parts)


def _run_eval_job(cfg: Experiment, model: str, *, label: str, n: int, temperature: float, dataset: str,
                  max_model_len: int | None, local_name: str | None = None):
    """NeMo-RL's run_eval.py as a Ray job."""
    return build_eval_job(cfg, model, label=label, dataset=dataset, num_tests_per_prompt=n, temperature=temperature,
                          max_model_len=max_model_len, local_name=local_name)


# The evaluators a trainer names (``Trainer.evaluator``, ``module:name``): what notebook 07 runs for its runs.
HELD_OUT_HERE = HeldOutHere()
RUN_EVAL_JOB = ClusterJob(_run_eval_job)  # a model's decodings: run_eval.py once each, in one job
GENERATE_JOB = ClusterJob(_generate_job, _generate_together)  # one vLLM engine for all


def evaluator(trainer: trainers.Trainer) -> HeldOutHere | ClusterJob:
    """The evaluator ``trainer`` names (``Trainer.evaluator``).

    Raises:
        ConfigError: the trainer names none (nbtools has no evaluation for its runs).
    """
    if not trainer.evaluator:
        raise ConfigError(f"trainer.kind: {trainer.name!r} runs have no evaluation in nbtools; fix: evaluate the "
                          "merged model with a nemo-rl experiment's run_eval.py on the same cluster")
    module, _, name = trainer.evaluator.partition(":")
    return getattr(importlib.import_module(module), name)


def eval_dir(cfg: Experiment) -> Path:
    """``<run_dir>/eval``, where notebook 07 keeps every result on this machine."""
    return Path(cfg.run_dir) / "eval"


def models(cfg: Experiment, *, trainer: trainers.Trainer | None = None) -> dict[str, str]:
    """The two models as the cluster's jobs see them: the baseline and notebook 06's merge.

    The rehearsal's baseline is its warm-started policy (``<run_dir>/baseline_hf``); a NeMo-RL run's is
    ``model.name`` (a Hub id or a directory on the shared mount).

    Example:
        >>> nbtools.evals.models(cfg)
        {'baseline': 'google/gemma-3-1b-it', 'fine-tuned': '/data/nemo-rl/gemma3-1b-b200/merged_hf'}
    """
    return {"baseline": _paths.Url((trainer or trainers.get(cfg)).baseline_model()), "fine-tuned": _paths.Url(finetuned_model_path(cfg))}


def local_models(cfg: Experiment, *, trainer: trainers.Trainer | None = None) -> dict[str, Path]:
    """The two models of a local rehearsal as HF directories on this machine (checked to exist).

    Raises:
        NotFoundError: a directory is missing, with the notebook that creates it.
    """
    paths = {k: Path(v) for k, v in models(cfg, trainer=trainer).items()}
    fixes = {"baseline": "run the rehearsal first (notebook 03), which writes baseline_hf",
             "fine-tuned": "run notebook 06 (merge the checkpoint) first"}
    for name, path in paths.items():
        if not (path / "config.json").is_file():
            raise NotFoundError(f"expected the {name} model as a HF directory at {path}, found nothing", fix=fixes[name])
    return paths


def evaluate(
    cfg: Experiment,
    which: Which,
    *,
    n: int | tuple[int, ...] = 1,
    temperature: float | None = None,
    dataset: str = "math500",
    max_model_len: int | None = None,
    timeout: float = 4 * 3600,
    batch_size: int = 64,
) -> EvalResult | tuple[EvalResult, ...]:
    """Evaluate the baseline or the fine-tuned model of this experiment, greedy (n=1) or sampled, or several ways at once.

    Args:
        cfg: the experiment.
        which: "baseline" or "fine-tuned".
        n: samples per problem; a tuple (``(1, 8)``: greedy and sampled) evaluates each way in one cluster job (one
            job supervisor, driver and copy check; verl's generation job loads the model once) and returns a tuple.
        temperature: default 0 (greedy) for n == 1, else the training temperature.
        dataset: NeMo-RL's ``data.dataset_name`` (the rehearsal uses its held-out split).
        max_model_len: the generation length: NeMo-RL's vLLM max_model_len (prompt + the longest answer, printed as
            max_new_tokens; default: the benchmark's published length, MATH-500 at 8192 as tutorial 000, else the
            experiment's, ``nbtools.evals.job.eval_length``), verl's answer budget (default: the run's
            ``data.max_response_length``). Use the same value for both models: scores compare only at equal settings.
        timeout: seconds to wait for a cluster evaluation job.
        batch_size: rehearsal only: sequences per forward pass.

    Returns:
        EvalResult, also saved to ``<run_dir>/eval/<which>_<greedy|sampledN>``; a tuple of them, in ``n``'s order, for a
        tuple ``n``.

    Example:
        >>> evaluate(cfg, "baseline", n=8).pass_at_k(8)
        >>> greedy, sampled = evaluate(cfg, "baseline", n=(1, 8))
    """
    if which not in ("baseline", "fine-tuned"):
        raise ConfigError(f"which must be 'baseline' or 'fine-tuned', got {which!r}")
    trainer = trainers.get(cfg)  # asked once: which models, and how they are evaluated
    model = evaluator(trainer).models(cfg, trainer)[which]
    return evaluate_model(cfg, str(model), label=which, n=n, temperature=temperature, dataset=dataset, trainer=trainer,
                          max_model_len=max_model_len, timeout=timeout, batch_size=batch_size)


def evaluate_model(
    cfg: Experiment,
    model: str,
    *,
    label: str,
    n: int | tuple[int, ...] = 1,
    temperature: float | None = None,
    dataset: str = "math500",
    max_model_len: int | None = None,
    timeout: float = 4 * 3600,
    batch_size: int = 64,
    trainer: trainers.Trainer | None = None,
) -> EvalResult | tuple[EvalResult, ...]:
    """Evaluate any model the way :func:`evaluate` evaluates the run's two (``nbtools evaluate EXPERIMENT MODEL…``):
    a HF directory or Hub id as the cluster's jobs see it (a directory on this machine for the local rehearsal).

    The result is saved to ``<run_dir>/eval/<label>_<greedy|sampledN>`` (``label`` without dashes); its
    ``params["save_path"]`` is where the cluster job wrote the per-problem results. ``trainer``: the experiment's,
    where the caller resolved it (default: ``nbtools.trainers.get(cfg)``). A tuple ``n`` runs every decoding in one
    job and returns a tuple, as :func:`evaluate`.

    Example:
        >>> evaluate_model(cfg, "/data/nemo-rl/run/merged_step_30", label="step30")
    """
    decodings = [_decoding(cfg, label, k, temperature) for k in (n if isinstance(n, tuple) else (n,))]
    if len({d.mode for d in decodings}) < len(decodings) or not decodings:
        raise ConfigError(f"n={n!r} at temperature={temperature}: expected one or more different decodings, got "
                          f"{[d.mode for d in decodings]}", fix=Fix("name each number of samples once, e.g. n=(1, 8)",
                                                  cli="one --samples per call, e.g. --samples 1, then --samples 8"))
    results = evaluator(trainer or trainers.get(cfg)).run_all(
        cfg, model, label=label, decodings=decodings, dataset=dataset, max_model_len=max_model_len, timeout=timeout,
        batch_size=batch_size)
    return tuple(results) if isinstance(n, tuple) else results[0]


def _decoding(cfg: Experiment, label: str, n: int, temperature: float | None) -> Decoding:
    if isinstance(n, bool) or not isinstance(n, int):
        raise ConfigError(f"n must be a number of samples per problem or a tuple of them, got {n!r}",
                          fix=Fix("e.g. n=1 (greedy), n=8, or n=(1, 8) for both in one job",
                                     cli="e.g. --samples 1 (greedy) or --samples 8"))
    if temperature is None:
        temperature = 0.0 if n == 1 else float(getattr(cfg.grpo, "temperature", 1.0) or 1.0)
    mode = "greedy" if temperature == 0 else f"sampled{n}"
    return Decoding(mode, eval_dir(cfg) / f"{label.replace('-', '')}_{mode}", n, temperature)
