"""The trajectory explorer: page through every record of a step or a run, GRPO groups, what the reward judged.

Why: reading what the model wrote — one group at a time, with the tags the reward functions saw — is the check a
reward curve cannot replace. ``ExplorerData`` is the pure query layer (tested without a browser);
``TrajectoryExplorer`` is the ipywidgets layer over it; the HTML comes from ``_render``.

Example:
    >>> ex = nbtools.explorer.explore(run, cfg=cfg)           # displays in JupyterLab
    >>> ex.step.value = 120; ex.search.value = "</think>"; ex.frame()
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pandas as pd

from nbtools.config import Experiment
from nbtools.explorer._query import FILTERS, LIGHT_COLUMNS, SORTS, ExplorerData, Page, Query
from nbtools.explorer._record import (
    RecordView,
    Segment,
    record_view,
    reward_breakdown,
    tag_segments,
    token_table,
)
from nbtools.explorer._render import inline_styles, segments_html
from nbtools.explorer._tui import BrowseState, browse, record_text
from nbtools.explorer._widget import TrajectoryExplorer
from nbtools.trajectories import Run

__all__ = ["explore", "browse", "BrowseState", "record_text", "TrajectoryExplorer", "ExplorerData", "Query", "Page", "RecordView", "Segment", "FILTERS",
           "SORTS", "LIGHT_COLUMNS", "record_view", "reward_breakdown", "tag_segments", "token_table", "inline_styles", "segments_html"]


def explore(source: Run | pd.DataFrame, *, step: int | None = None, cfg: Experiment | None = None, rewards: Any = None,
            ground_truth: Callable[[str], Any] | None = None, page_size: int = 16,
            export_dir: str | os.PathLike | None = None, tokenizer: Any = None) -> TrajectoryExplorer:
    """The explorer over a run (or a trajectory DataFrame) at ``step`` (default: the latest).

    Args:
        source: ``nbtools.trajectories.open_run(...)`` or a frame with the same columns.
        step: the step to open (a missing one opens the nearest).
        cfg: the experiment: its reward mix (``nbtools.rewards.trained_with``) and, when known, its ground truth
            give the record view's reward-by-function table.
        rewards / ground_truth: the same explicitly (a NeMo-RL ``reward_functions`` list or a RewardMix; a
            ``prompt -> answer`` function); they win over ``cfg``.
        page_size: records per page.
        export_dir: where "export CSV" writes (default: the run's ``.nbtools/exports``).
        tokenizer: decodes the record view's token strip (a ``transformers`` tokenizer or its directory); with
            ``cfg`` the run's own (``policy/tokenizer`` of its latest checkpoint) when there is one, else token ids.

    Example:
        >>> explorer = nbtools.explorer.explore(run, step=run.steps[-1], cfg=cfg)
        >>> explorer
    """
    if cfg is not None:
        from nbtools import rewards as _rewards
        from nbtools.errors import ConfigError, NotFoundError

        if rewards is None:
            try:  # a mix naming rewards registered only in the cluster's reward module: no breakdown here
                rewards = _rewards.combine(_rewards.trained_with(cfg))
            except ConfigError:
                rewards = None
        if ground_truth is None:
            try:
                ground_truth = _rewards.ground_truth(cfg)
            except NotFoundError:  # a dataset whose answers are not known here: truth-based rewards show NaN
                ground_truth = None
    return TrajectoryExplorer(source, step=step, page_size=page_size, rewards=rewards, ground_truth=ground_truth,
                              export_dir=export_dir, decode=_decoder(tokenizer, cfg))


def _decoder(tokenizer: Any, cfg: Any) -> Callable[[list[int]], list[str]] | None:
    """ids -> one text per token from ``tokenizer`` (or the run's checkpointed tokenizer); None when there is none."""
    if tokenizer is None and cfg is not None:
        from nbtools import checkpoints, storage
        from nbtools.errors import NbtoolsError

        try:
            tokenizer = storage.mirror(storage.join(str(checkpoints.latest(cfg.checkpoints_url)), "policy", "tokenizer"))
        except (NbtoolsError, OSError):
            return None
    if tokenizer is None:
        return None
    if isinstance(tokenizer, str | os.PathLike):
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
        except (ImportError, OSError, ValueError):
            return None
    return lambda ids: [tokenizer.decode([i]) for i in ids]
