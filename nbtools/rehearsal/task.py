"""The rehearsal task, "max of 3 digits" (defined in ``nbtools._rehearsal_task``, below the rewards that grade its
runs; this name is the one the rehearsal, the evals and the notebooks use).

Example:
    >>> train, held_out = nbtools.rehearsal.task.make_split(cfg)
"""

from __future__ import annotations

from nbtools._rehearsal_task import (
    ASSISTANT_TAG,
    NUM_DIGITS,
    USER_TAG,
    Problem,
    baseline_dir,
    format_prompt,
    format_response,
    ground_truth_for,
    held_out_problems,
    make_split,
    render_answer,
)

__all__ = ["Problem", "USER_TAG", "ASSISTANT_TAG", "NUM_DIGITS", "make_split", "held_out_problems", "ground_truth_for",
           "format_prompt", "format_response", "render_answer", "baseline_dir"]
