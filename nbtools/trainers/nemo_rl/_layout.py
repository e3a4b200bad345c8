"""What a NeMo-RL run leaves and how it is read: ``<log_dir>/exp_NNN`` (TensorBoard, ``train_data_step{N}.jsonl``),
``<checkpoint_dir>/step_N``, and its scalar names. The ``step_N`` checkpoints and ``exp_NNN`` dumps are the layout
nbtools' readers read natively (``nbtools.checkpoints``, ``nbtools.trajectories``), so it adds no reader of its own."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nbtools._layout import STEP_RE

__all__ = ["NemoRlLayout", "LAYOUT"]


@dataclass(frozen=True)
class NemoRlLayout:
    """NeMo-RL's files (see :class:`nbtools.trainers.RunLayout`)."""

    name: str = "nemo_rl"
    # friendly name -> candidate scalar tags, first present wins; checked against NeMo-RL (nemo-rl-facts.md §2)
    metric_names: dict[str, tuple[str, ...]] = field(default_factory=lambda: {
        "reward": ("train/reward",),
        "accuracy": ("validation/accuracy",),
        "generation_length": ("train/mean_gen_tokens_per_sample",),
        "kl": ("train/kl_penalty", "train/gen_kl_error"),
        "loss": ("train/loss",),
        "grad_norm": ("train/grad_norm",),
        "entropy": ("train/approx_entropy",),
        "truncation": ("train/truncation_rate",),
        "val_length": ("validation/avg_length",),
        "step_time": ("timing/train/total_step_time",),
        "generation_time": ("timing/train/generation",),
        "training_time": ("timing/train/policy_training",),
        "throughput": ("performance/tokens_per_sec", "timing/train/valid_tokens_per_sec_per_gpu"),
        "no_signal": ("train/baseline_reward/pct_0",),
        "mfu": (),
        "memory": (),
    })
    # the first path component of the tags only NeMo-RL logs (how ``metrics.framework_of`` tells runs apart)
    metric_prefixes: tuple[str, ...] = ("train", "validation", "timing", "performance")
    rehearsal_writer: str = "nbtools.trainers.nemo_rl.rehearsal_writer:NemoRlWriter"  # what the CPU rehearsal writes these files with
    # where a run's relative results/ and logs/ land on the pods (``wipe`` removes <root>/<experiment> there)
    pod_local_roots: tuple[str, ...] = ("/opt/nemo-rl/results", "/opt/nemo-rl/logs")
    console_log: bool = False  # its scalars are in TensorBoard, not in console lines

    checkpoint_step_re: re.Pattern = STEP_RE  # step_N (tmp_step_N while written, old_step_N while replaced)
    checkpoint_layouts: tuple[str, ...] = ()  # its weight layouts are the ones nbtools.checkpoints reads natively

    def owns_checkpoints(self, checkpoint_dir) -> bool:
        """False: ``step_N`` is what ``nbtools.checkpoints`` reads when no other layout claims a directory."""
        return False

    def step_layout(self, step_dir) -> str | None:
        """None: a ``step_N`` is read (and merged) by ``nbtools.checkpoints`` itself."""
        return None

    def open_trajectories(self, path: str, **options):
        """None: ``exp_NNN`` dumps are what ``nbtools.trajectories`` reads natively."""
        return None


LAYOUT = NemoRlLayout()
