"""Choose, verify and merge checkpoints into HuggingFace models (streaming, verified, atomic): NeMo-RL's ``step_N``
here, and every other trainer's through its layout (``nbtools.trainers.layouts()``: verl's ``global_step_N``).

Example:
    >>> step = nbtools.checkpoints.best(cfg)
    >>> result = nbtools.checkpoints.merge(step, cfg.run_dir / "merged_hf")
    >>> nbtools.checkpoints.verify(result.out).ok
    True
"""

from __future__ import annotations

from nbtools.checkpoints._listing import (
    NATIVE_LAYOUTS,
    at_step,
    best,
    checkpoint_status,
    detect_layout,
    in_progress,
    latest,
    list_checkpoints,
    overview,
    read_training_info,
)
from nbtools.checkpoints._merge import merge
from nbtools.checkpoints._remote import (
    copy_to_local_disk_command,
    megatron_convert_entrypoint,
    merge_entrypoint,
    merge_in_cluster,
    submit_merge,
)
from nbtools.checkpoints._result import MergeResult
from nbtools.checkpoints._verify import AgainstReport, VerifyReport, verify, verify_against

__all__ = [
    "LAYOUTS",
    "list_checkpoints",
    "overview",
    "latest",
    "best",
    "at_step",
    "in_progress",
    "checkpoint_status",
    "detect_layout",
    "read_training_info",
    "merge",
    "MergeResult",
    "verify",
    "VerifyReport",
    "verify_against",
    "AgainstReport",
    "merge_entrypoint",
    "merge_in_cluster",
    "submit_merge",
    "megatron_convert_entrypoint",
    "copy_to_local_disk_command",
    "NATIVE_LAYOUTS",
]

# A trainer's own reader lives in its folder: these moved there (issue 43); the generic verbs read every trainer's.
_MOVED = dict.fromkeys(("list_verl_checkpoints", "is_verl_dir", "latest_verl", "best_verl", "merge_verl"),
                       "nbtools.trainers.verl")


def __getattr__(name: str):
    """``LAYOUTS`` (asks the registered layouts, see ``_listing``); a clear error for a verb that moved to a trainer's
    folder."""
    if name == "LAYOUTS":
        from nbtools.checkpoints import _listing

        return _listing.LAYOUTS
    if name in _MOVED:
        raise AttributeError(f"nbtools.checkpoints.{name} moved to {_MOVED[name]}.{name}; fix: call that, or the "
                             "generic nbtools.checkpoints.list_checkpoints / latest / best / merge, which read every "
                             "trainer's checkpoints")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
