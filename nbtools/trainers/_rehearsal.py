"""The local backend's trainer: the miniature GRPO on this machine's CPU ranks (``nbtools.rehearsal``)."""

from __future__ import annotations

from typing import Any

from nbtools.config import Experiment
from nbtools.trainers._findings import LintReport
from nbtools.trainers._protocol import TrainerJob

__all__ = ["Rehearsal"]


class Rehearsal:
    """The CPU rehearsal: NeMo-RL's artifact layout from a tiny model, no GPUs, images or pods."""

    name = "rehearsal"
    release = ""
    label = "nbtools rehearsal (NeMo-RL artifact layout)"
    miniature = True
    eval_plan = "held-out-local"
    code_on_storage = False
    metric_family = "nemo_rl"  # it logs NeMo-RL's scalar names

    def __init__(self, cfg: Experiment | None = None):
        self.cfg = cfg

    def job(self, cfg: Experiment) -> TrainerJob:
        from nbtools import rehearsal

        return TrainerJob(rehearsal.entrypoint(cfg), secrets=False)

    def prepare_command(self, cfg: Experiment) -> str | None:
        return None

    def job_env(self, cfg: Experiment) -> dict[str, str]:
        return {}

    def metadata(self, cfg: Experiment) -> dict[str, str]:
        return {}

    def lint(self, cfg: Experiment, report: LintReport, *, code_present: Any = None) -> None:
        """Nothing of a cluster to check: no GPUs, pods, images or NeMo-RL keys."""

    def ray_pinned_by(self, cfg: Experiment) -> str:
        return "this environment"

    def baseline_model(self, cfg: Experiment) -> str:
        from nbtools.rehearsal import task

        return str(task.baseline_dir(cfg))

    def rewards(self, cfg: Experiment) -> tuple[list[dict[str, Any]], str]:
        return [dict(x) for x in cfg.rehearsal.reward_functions], "rehearsal.reward_functions"

    def version(self, cfg: Experiment) -> str:
        import nbtools

        return f"nbtools {nbtools.__version__}"

    def hub_tag(self) -> str:
        return "nbtools-rehearsal"
