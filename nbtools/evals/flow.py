"""One call per (model, decoding) for notebook 07, on any backend.

Why: the notebook must evaluate baseline and fine-tuned *the same way*; this picks the models, problems,
grader and output directory from the experiment config so the two calls differ only in `which`.
Local: the rehearsal's held-out split with `evaluate_local`, cached under `<run_dir>/eval/`.
GKE / Ray: NeMo-RL's run_eval.py job (`build_eval_job`), submitted through `nbtools.jobs`, then collected.

Example:
    >>> base = nbtools.evals.evaluate(cfg, "baseline")
    >>> tuned = nbtools.evals.evaluate(cfg, "fine-tuned", n=8, temperature=1.0)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from nbtools.errors import ConfigError, NotFoundError
from nbtools.evals.job import collect, eval_jobs, finetuned_model_path
from nbtools.evals.result import EvalResult
from nbtools.evals.run import evaluate_local

__all__ = ["evaluate", "local_models", "eval_dir"]

Which = Literal["baseline", "fine-tuned"]


def eval_dir(cfg: Any) -> Path:
    """`<run_dir>/eval`, where notebook 07 writes results."""
    return Path(cfg.run_dir) / "eval"


def local_models(cfg: Any) -> dict[str, Path]:
    """The two local model dirs: the rehearsal's warm-started policy and notebook 06's merge.

    Raises:
        NotFoundError: a directory is missing, with the notebook that creates it.

    Example:
        >>> local_models(cfg)
        {'baseline': PosixPath('.../baseline_hf'), 'fine-tuned': PosixPath('.../merged_hf')}
    """
    from nbtools.rehearsal import task

    models = {"baseline": Path(task.baseline_dir(cfg)), "fine-tuned": Path(finetuned_model_path(cfg))}
    fixes = {"baseline": "run the rehearsal first (notebook 03), which writes baseline_hf",
             "fine-tuned": "run notebook 06 (merge the checkpoint) first"}
    for name, path in models.items():
        if not (path / "config.json").is_file():
            raise NotFoundError(f"expected the {name} model as a HF directory at {path}, found nothing", fix=fixes[name])
    return models


def evaluate(
    cfg: Any,
    which: Which,
    *,
    n: int = 1,
    temperature: float | None = None,
    dataset: str = "math500",
    max_model_len: int | None = None,
    timeout: float = 4 * 3600,
    batch_size: int = 64,
) -> EvalResult:
    """Evaluate the baseline or the fine-tuned model of this experiment, greedy (n=1) or sampled.

    Args:
        cfg: the experiment.
        which: "baseline" or "fine-tuned".
        n: samples per problem.
        temperature: default 0 (greedy) for n == 1, else 1.0 (the training temperature).
        dataset: cluster backends only: NeMo-RL `data.dataset_name` (local uses the held-out split).
        max_model_len: cluster backends only: vLLM's max_model_len, i.e. prompt + the longest answer (NeMo-RL prints it
            as max_new_tokens; default: the eval config's 2048; the MATH-500 tutorial used 8192). Use the same value for
            both models: scores are comparable only at equal settings.
        timeout: cluster backends only: seconds to wait for the job.
        batch_size: local only: sequences per forward pass.

    Returns:
        EvalResult (local: saved to `<run_dir>/eval/<which>_<greedy|sampledN>`).

    Example:
        >>> evaluate(cfg, "baseline", n=8, temperature=1.0).pass_at_k(8)
    """
    if which not in ("baseline", "fine-tuned"):
        raise ConfigError(f"which must be 'baseline' or 'fine-tuned', got {which!r}")
    if temperature is None:
        temperature = 0.0 if n == 1 else float(getattr(cfg.grpo, "temperature", 1.0) or 1.0)
    mode = "greedy" if temperature == 0 else f"sampled{n}"
    if cfg.backend == "local":
        from nbtools.rehearsal import task

        model_dir = local_models(cfg)[which]
        return evaluate_local(
            model_dir, task.held_out_problems(cfg), reward=list(cfg.rehearsal.reward_functions), n=n,
            temperature=temperature, max_new_tokens=cfg.rehearsal.max_new_tokens, seed=cfg.grpo.seed,
            batch_size=batch_size, out_dir=eval_dir(cfg) / f"{which.replace('-', '')}_{mode}",
            progress_desc=f"{which} ({mode})",
        )
    spec = eval_jobs(cfg, dataset=dataset, num_tests_per_prompt=n, temperature=temperature,
                     max_model_len=max_model_len)[0 if which == "baseline" else 1]
    job = spec.submit()
    job.wait(timeout=timeout)
    return collect(job, save_path=spec.save_path)
