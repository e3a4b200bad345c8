"""verl, one release at a time (``trainers.releases.VERL``), run from its source on the shared storage."""

from __future__ import annotations

import re
from typing import Any

from nbtools.config import Experiment
from nbtools.trainers import verl
from nbtools.trainers._findings import LintReport
from nbtools.trainers._protocol import OutputDirs, TrainerJob
from nbtools.trainers._verl_lint import check_verl
from nbtools.trainers.releases import VERL, VerlRelease

__all__ = ["Verl"]

NAME = "verl"


class Verl:
    """verl's PPO trainer with ``algorithm.adv_estimator=grpo`` at ``trainer.verl_ref``."""

    name = NAME
    label = "verl"
    miniature = False
    eval_plan = "generate-job"  # vLLM over the prepared test.parquet, scored with verl's rule (evals.vllm_generate)
    code_on_storage = True  # the image has no checkout: the provisioning plan copies the release to the bucket
    metric_family = "verl"
    layout = "verl"

    def __init__(self, cfg: Experiment):
        self.release = cfg.trainer.verl_ref
        # a pinned tag nbtools has no entry for runs with the newest entry's facts (the lint warns: keys unchecked)
        self.spec: VerlRelease = verl.release(cfg)

    @classmethod
    def check(cls, cfg: Experiment) -> list[tuple[tuple[str, ...], str]]:
        """verl runs from a release of its repository, so ``trainer.verl_ref`` must pin one; it scores with its own
        reward functions, not an nbtools mix."""
        t, out = cfg.trainer, []
        if t.verl_ref in ("main", "master", "HEAD", "") or not re.match(r"^[A-Za-z0-9._/-]+$", t.verl_ref):
            out.append((("trainer.verl_ref",),
                        f"trainer.verl_ref: {t.verl_ref!r} does not pin verl (a branch moves under you); fix: a release "
                        f"tag of {t.verl_repo}, e.g. `verl_ref: {list(VERL)[-1]}`"))
        if t.reward_functions:
            out.append((("trainer.reward_functions",),
                        "trainer.reward_functions: only NeMo-RL runs score through the nbtools reward environment; fix: "
                        "remove it for verl (verl's custom_reward_function.path/name go in trainer.overrides)"))
        return out

    def output_dirs(self, cfg: Experiment) -> OutputDirs:
        return OutputDirs("verl", cfg.log_dir, cfg.checkpoint_dir, verl.tensorboard_dir(cfg),
                          rollout_dir=verl.rollout_dir(cfg), validation_dir=verl.validation_dir(cfg))

    def job(self, cfg: Experiment) -> TrainerJob:
        lines = verl.command_lines(cfg)
        return TrainerJob(" ".join(lines), tuple(lines))

    def prepare_command(self, cfg: Experiment) -> str | None:
        return verl.prepare_command(cfg)

    def job_env(self, cfg: Experiment) -> dict[str, str]:
        env = {"PYTHONPATH": verl.code_dir(cfg)}
        if cfg.logging.tensorboard:
            env["TENSORBOARD_DIR"] = verl.tensorboard_dir(cfg)
        return env

    def metadata(self, cfg: Experiment) -> dict[str, str]:
        return {}

    def lint(self, cfg: Experiment, report: LintReport, *, code_present: Any = None) -> None:
        check_verl(cfg, report, code_present)

    def ray_pinned_by(self, cfg: Experiment) -> str:
        return "images.ray_version"

    def baseline_model(self, cfg: Experiment) -> str:
        return cfg.model.name

    def rewards(self, cfg: Experiment) -> tuple[list[dict[str, Any]], str]:
        return [{"name": f"verl's rule-based score for data source {cfg.data.dataset}", "weight": 1.0}], NAME

    def version(self, cfg: Experiment) -> str:
        return self.release  # the tag copied to the bucket; the image holds only verl's dependencies

    def hub_tag(self) -> str:
        return NAME
