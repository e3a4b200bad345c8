"""NeMo-RL, one release at a time (``trainers.releases.NEMO_RL``), run from its container on the cluster."""

from __future__ import annotations

from typing import Any

from nbtools.config import Experiment
from nbtools.trainers import nemo_rl
from nbtools.trainers._findings import LintReport
from nbtools.trainers._nemo_rl_lint import check_nemo_rl
from nbtools.trainers._protocol import OutputDirs, TrainerJob
from nbtools.trainers.releases import NEMO_RL, NemoRlRelease

__all__ = ["NemoRl"]

NAME = "nemo-rl"


class NemoRl:
    """NeMo-RL's GRPO (``examples/run_grpo*.py`` with Hydra overrides) at ``images.nemo_rl_version``."""

    name = NAME
    label = "NeMo-RL"
    miniature = False
    eval_plan = "run-eval-job"
    code_on_storage = False  # the image holds the checkout (/opt/nemo-rl)
    metric_family = "nemo_rl"
    layout = "nemo_rl"

    def __init__(self, cfg: Experiment):
        self.spec: NemoRlRelease = NEMO_RL[cfg.images.nemo_rl_version]
        self.release = self.spec.version

    @classmethod
    def check(cls, cfg: Experiment) -> list[tuple[tuple[str, ...], str]]:
        """Config rules only a NeMo-RL run has (none beyond the config's own yet)."""
        return []

    def output_dirs(self, cfg: Experiment) -> OutputDirs:
        return OutputDirs("nemo_rl", cfg.log_dir, cfg.checkpoint_dir, cfg.log_dir)

    def job(self, cfg: Experiment) -> TrainerJob:
        lines = nemo_rl.command_lines(cfg)
        renv: dict[str, Any] = {}
        if cfg.trainer.reward_functions:  # nbtools (for the reward wrapper) + the user's reward module travel along
            from nbtools.jobs.carry import carry_env
            from nbtools.rewards import reward_py_modules

            carried = carry_env()
            renv = {"py_modules": [*carried["py_modules"], *reward_py_modules(cfg)], "excludes": carried["excludes"]}
        return TrainerJob(" ".join(lines), tuple(lines), nemo_rl.recipe_files(cfg), renv)

    def prepare_command(self, cfg: Experiment) -> str | None:
        return None

    def job_env(self, cfg: Experiment) -> dict[str, str]:
        # NeMo-RL's own `ray job submit` support: actor runtime envs override the job-level one.
        return {"RAY_OVERRIDE_JOB_RUNTIME_ENV": "1"}

    def metadata(self, cfg: Experiment) -> dict[str, str]:
        return {"nbtools.nemo_rl_version": self.release}

    def lint(self, cfg: Experiment, report: LintReport, *, code_present: Any = None) -> None:
        check_nemo_rl(cfg, report)

    def ray_pinned_by(self, cfg: Experiment) -> str:
        return f"NeMo-RL {self.release}'s uv.lock" if not cfg.images.ray_version else "images.ray_version"

    def baseline_model(self, cfg: Experiment) -> str:
        return cfg.model.name

    def rewards(self, cfg: Experiment) -> tuple[list[dict[str, Any]], str]:
        env = ((nemo_rl.recipe_tree(cfg) or {}).get("env") or {}).get("math") or {}
        impl = env.get("math_verify_impl", "hf_math_verify")
        for o in cfg.trainer.overrides:
            if o.lstrip("+").startswith("env.math.math_verify_impl="):
                impl = o.split("=", 1)[1]
        spec = env.get("reward_functions") or [{"name": f"math_verify ({impl}): 1 if the answer is right", "weight": 1.0}]
        return spec, "NeMo-RL math environment (env.math)"

    def version(self, cfg: Experiment) -> str:
        return self.release

    def hub_tag(self) -> str:
        return NAME
