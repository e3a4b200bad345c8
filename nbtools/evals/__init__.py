"""Evaluate models and compare them with statistics a reviewer would accept.

Run locally (`evaluate_local`: transformers generation graded by nbtools.rewards) or on a cluster
(`build_eval_job`: NeMo-RL's run_eval.py as a Ray job), parse NeMo-RL's output (`parse_score_blocks`,
`load_evaluation_data`), and `compare` two results (paired McNemar / bootstrap when per-problem results exist,
an unpaired test clearly labelled otherwise). Display helpers live in `nbtools.evals.plots`.

Example:
    >>> base = nbtools.evals.evaluate(cfg, "baseline")
    >>> tuned = nbtools.evals.evaluate(cfg, "fine-tuned")
    >>> nbtools.evals.compare(base, tuned).verdict
"""

from __future__ import annotations

from nbtools.evals import stats
from nbtools.evals.compare import Comparison, as_result, compare
from nbtools.evals.flow import eval_dir, evaluate, evaluate_model, local_models, models
from nbtools.evals.generate_job import build_generate_job, generate_jobs, generate_together
from nbtools.evals.job import (
    EvalJob,
    EvalJobs,
    build_eval_job,
    collect,
    dataset_names,
    eval_jobs,
    finetuned_model_path,
    validate_overrides,
)
from nbtools.evals.one_job import in_one_job
from nbtools.evals.parse import (
    ScoreBlock,
    ScoreLog,
    load_eval_config,
    load_evaluation_data,
    parse_score_blocks,
    read_score_log,
)
from nbtools.evals.result import EvalResult
from nbtools.evals.run import evaluate_local, problems_frame, text_generation

__all__ = [
    "Comparison",
    "EvalJob",
    "EvalJobs",
    "EvalResult",
    "ScoreBlock",
    "ScoreLog",
    "as_result",
    "build_eval_job",
    "build_generate_job",
    "generate_jobs",
    "generate_together",
    "in_one_job",
    "collect",
    "compare",
    "dataset_names",
    "eval_dir",
    "eval_jobs",
    "evaluate",
    "evaluate_local",
    "finetuned_model_path",
    "load_eval_config",
    "load_evaluation_data",
    "local_models",
    "evaluate_model",
    "models",
    "text_generation",
    "parse_score_blocks",
    "plots",
    "problems_frame",
    "read_score_log",
    "stats",
    "validate_overrides",
]


def __getattr__(name: str):
    if name == "plots":  # matplotlib only when drawing
        import importlib

        return importlib.import_module("nbtools.evals.plots")
    raise AttributeError(f"module 'nbtools.evals' has no attribute {name!r}")
