"""The rewards and answers of a finished run, for re-scoring its stored trajectories (notebook 08).

Why: NeMo-RL's ``train_data_step*.jsonl`` holds prompts, responses and rewards but no ground truth, and the reward
mix lives in the trainer's config; both must come from the experiment, not from guesses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nbtools import _trainer_folders
from nbtools._rehearsal_task import ground_truth_for
from nbtools.config import Experiment
from nbtools.errors import Fix, NotFoundError

__all__ = ["trained_with", "ground_truth"]


def _rehearsal_task(cfg: Experiment, trainer: Any = None) -> bool:
    """True when the run trained the rehearsal's generated task (locally, or a stand-in trainer on a cluster)."""
    return (trainer or _trainer_folders.job_trainer(cfg)).trained_task() == cfg.rehearsal.task


def trained_with(cfg: Experiment, *, trainer: Any = None) -> list[dict[str, Any]]:
    """The run's ``reward_functions`` in NeMo-RL's YAML shape (``[{name, weight, kwargs}]``); ``trainer``: the run's
    trainer where the caller resolved it (``nbtools.trainers.get(cfg)``; default: asked here).

    Example:
        >>> nbtools.rewards.trained_with(cfg)
        [{'name': 'format', 'weight': 0.2}, {'name': 'exact_alnum', 'weight': 0.8}]
    """
    trainer = trainer or _trainer_folders.job_trainer(cfg)
    if _rehearsal_task(cfg, trainer):
        return [dict(x) for x in cfg.rehearsal.reward_functions]
    return trainer.rescore_mix()


def ground_truth(cfg: Experiment, *, trainer: Any = None) -> Callable[[str], str]:
    """A ``prompt -> answer`` function for the run's training data (``trainer``: as in :func:`trained_with`).

    Raises:
        NotFoundError: the dataset's answers are not known here (pass your own function or column instead).

    Example:
        >>> truth = nbtools.rewards.ground_truth(cfg)
        >>> truth("<|user|> max 3 0 6 <|assistant|>")
        '6'
    """
    if _rehearsal_task(cfg, trainer):
        return ground_truth_for
    raise NotFoundError(
        f"the answers of dataset {cfg.data.dataset!r} are not in the run's trajectories (NeMo-RL does not log them)",
        fix=Fix("pass ground_truth= a `prompt -> answer` function built from your dataset (e.g. a dict from "
                "datasets.load_dataset(...)), or a column of the trajectories frame holding the answers",
                cli="re-score in a notebook (08) with the dataset's answers: NeMo-RL does not log them"),
    )
