"""Choose, verify and merge NeMo-RL (and verl FSDP) checkpoints into HuggingFace models (streaming, verified, atomic).

Example:
    >>> step = nbtools.checkpoints.best(cfg)
    >>> result = nbtools.checkpoints.merge(step, cfg.run_dir / "merged_hf")
    >>> nbtools.checkpoints.verify(result.out).ok
    True
"""

from __future__ import annotations

from nbtools.checkpoints._listing import (
    LAYOUTS,
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
from nbtools.checkpoints._verl import best_verl, is_verl_dir, latest_verl, list_verl_checkpoints
from nbtools.checkpoints._verl_merge import merge_verl

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
    "list_verl_checkpoints",
    "is_verl_dir",
    "latest_verl",
    "best_verl",
    "merge_verl",
]
