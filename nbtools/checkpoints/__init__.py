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
from nbtools.checkpoints._remote import (
    copy_to_local_disk_command,
    megatron_convert_entrypoint,
    merge_entrypoint,
    merge_in_cluster,
    submit_merge,
)
from nbtools.checkpoints._result import MergeResult

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


# The verbs that read weights import torch (the optional extra [merge], ~1 CPU-s): loaded when first asked, so listing
# and choosing checkpoints (every notebook kernel and CLI call that lints or lists a run) never imports it.
_WEIGHTS = {"merge": "_merge", "verify": "_verify", "verify_against": "_verify", "VerifyReport": "_verify",
            "AgainstReport": "_verify"}


def __getattr__(name: str):
    """``LAYOUTS`` (asks the registered layouts, see ``_listing``); the verbs that read weights (``_WEIGHTS``, torch),
    or the error naming their extra; a clear error for a verb that moved to a trainer's folder."""
    if name in _WEIGHTS:
        import importlib

        from nbtools.errors import DependencyError

        try:
            return getattr(importlib.import_module(f"{__name__}.{_WEIGHTS[name]}"), name)
        except ImportError as e:  # torch not installed: say which extra (`pip install 'nbtools-grpo[merge]'`)
            missing = DependencyError.from_import(e, f"nbtools.checkpoints.{name}")
            if missing is None:
                raise
            raise missing from e
    if name == "LAYOUTS":
        from nbtools.checkpoints import _listing

        return _listing.LAYOUTS
    if name in _MOVED:
        raise AttributeError(f"nbtools.checkpoints.{name} moved to {_MOVED[name]}.{name}; fix: call that, or the "
                             "generic nbtools.checkpoints.list_checkpoints / latest / best / merge, which read every "
                             "trainer's checkpoints")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
