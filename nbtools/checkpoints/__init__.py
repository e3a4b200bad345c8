"""Choose, verify and merge NeMo-RL checkpoints into HuggingFace models (streaming, verified, atomic).

Example:
    >>> step = nbtools.checkpoints.best(cfg.checkpoint_dir, metric="val:accuracy")
    >>> result = nbtools.checkpoints.merge(step, cfg.run_dir / "merged_hf")
    >>> nbtools.checkpoints.verify(result.out).ok
    True
"""

from __future__ import annotations

from nbtools.checkpoints._listing import (
    LAYOUTS,
    best,
    detect_layout,
    latest,
    list_checkpoints,
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
    "latest",
    "best",
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
]
