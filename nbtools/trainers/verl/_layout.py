"""What a verl run leaves and how it is read: ``global_step_N`` checkpoints (FSDP shards; ``_checkpoints`` reads and
``_merge`` merges them), ``{step}.jsonl`` dumps under the dirs nbtools points ``trainer.rollout_data_dir`` /
``validation_data_dir`` at, TensorBoard under ``TENSORBOARD_DIR``, console lines, and its scalar names."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from nbtools._layout import VERL_STEP_RE

__all__ = ["VerlLayout", "LAYOUT"]


@dataclass(frozen=True)
class VerlLayout:
    """verl's files (see :class:`nbtools.trainers.RunLayout`)."""

    name: str = "verl"
    # checked against verl's metric_utils / ray_trainer names (tests/assets/verl/*/metric_tags.json)
    metric_names: dict[str, tuple[str, ...]] = field(default_factory=lambda: {
        "reward": ("critic/score/mean", "critic/rewards/mean"),
        "accuracy": ("val-core/*/acc/mean@*", "val-core/*/reward/mean@*"),
        "generation_length": ("response_length/mean",),
        # v0.7.0 logs the in-reward KL as actor/reward_kl_penalty (ray_trainer.apply_kl_penalty); no critic/kl
        "kl": ("actor/kl_loss", "actor/ppo_kl", "actor/reward_kl_penalty"),
        "loss": ("actor/pg_loss",),
        "grad_norm": ("actor/grad_norm",),
        "entropy": ("actor/entropy",),
        # share of responses at the generation limit (verl/trainer/ppo/metric_utils.py compute_data_metrics)
        "truncation": ("response_length/clip_ratio",),
        "val_length": ("val-aux/*/response_length/mean@*",),
        "step_time": ("timing_s/step",),
        "generation_time": ("timing_s/gen",),
        "training_time": ("timing_s/update_actor",),
        "throughput": ("perf/throughput",),
        "no_signal": (),
        # verl v0.7.0 verl/workers/fsdp_workers.py update_actor: perf/mfu/actor, perf/max_memory_*_gb (GiB); 0.9.x's
        # V1 trainer prefixes the actor worker's metrics (verl/trainer/ppo/v1/trainer_base.py at v0.9.1:
        # rename_dict(output["metrics"], "actor/") over engine_workers.py's perf/max_memory_allocated_gb)
        "mfu": ("perf/mfu/actor",),
        "memory": ("perf/max_memory_allocated_gb", "actor/perf/max_memory_allocated_gb"),
    })
    metric_prefixes: tuple[str, ...] = ("critic", "actor", "timing_s", "response_length", "perf")
    rehearsal_writer: str = "nbtools.trainers.verl.rehearsal_writer:VerlWriter"  # what the CPU rehearsal writes these files with
    # where a run's relative results/ and logs/ land on the pods (``wipe`` removes <root>/<experiment> there)
    pod_local_roots: tuple[str, ...] = ()
    console_log: bool = True  # it prints its scalars as console lines (``metrics.read_verl_log``)

    checkpoint_step_re: re.Pattern = VERL_STEP_RE  # global_step_N (ray_trainer._save_checkpoint)
    checkpoint_layouts: tuple[str, ...] = ("verl_fsdp",)  # the weight layout its steps have (checkpoints.LAYOUTS)

    # Its checkpoint listing (``_steps``: listings and small files, no torch) is what every run's
    # ``checkpoints.list_checkpoints`` asks; its rank-file reader and merge (``_checkpoints``, ``_merge``) read rank
    # files with torch, the optional extra [merge]: imported by the merge alone, never by the trainer itself.
    def owns_checkpoints(self, checkpoint_dir: str | Path) -> bool:
        """A ``trainer.default_local_dir`` (``global_step_N``, local or ``gs://``) holding no NeMo-RL ``step_N``."""
        import nbtools.trainers.verl._steps as _steps  # listings and small files, no torch

        return _steps.is_verl_dir(checkpoint_dir)

    def list_checkpoints(self, checkpoint_dir: str | Path):
        import nbtools.trainers.verl._steps as _steps  # listings and small files, no torch

        return _steps.list_verl_checkpoints(checkpoint_dir)

    def latest_checkpoint(self, checkpoint_dir: str | Path):
        import nbtools.trainers.verl._steps as _steps  # listings and small files, no torch

        return _steps.latest_verl(checkpoint_dir)

    def step_layout(self, step_dir: str | Path) -> str | None:
        """``verl_fsdp`` for a local ``global_step_N`` (or its ``actor/``) with ``fsdp_config.json`` or rank files."""
        import nbtools.trainers.verl._steps as _steps  # listings and small files, no torch

        return _steps.VERL_LAYOUT if _steps.is_verl_step(step_dir) else None

    def merge(self, step_dir, out_dir, **options):
        """``nbtools.checkpoints.merge`` of one of its steps: verl's rank files, the same writer and checks."""
        from nbtools.trainers.verl._merge import merge_verl  # torch (the [merge] extra)

        return merge_verl(step_dir, out_dir, **options)

    def open_trajectories(self, path: str, **options):
        """``nbtools.trajectories.open_run`` of a directory with no NeMo-RL dumps: its ``{step}.jsonl`` dumps (a
        ``VerlRun``), or None when there are none."""
        from nbtools.trainers.verl._trajectories import open_trajectories  # pandas, read on first use

        return open_trajectories(path, **options)


LAYOUT = VerlLayout()
