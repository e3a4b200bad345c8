"""A toy trainer in one folder: what adding a trainer to nbtools takes (``nbtools.trainers.register``).

Its runs are the rehearsal's NeMo-RL-shaped files plus a marker file by which its own layout claims the checkpoint
directory, so the readers' answers come from this folder: its checkpoint listing, its metric names, its accuracy tag.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from nbtools.rehearsal.writers import NemoRlWriter
from nbtools.trainers import AdvantageRule, Finding, Hardware, LintReport, OutputDirs, TrainerJob

MARKER = "toy-run.json"


@dataclass(frozen=True)
class ToyLayout:
    name: str = "toy"
    metric_names: dict[str, tuple[str, ...]] = field(default_factory=lambda: {
        "toy_signal": ("train/reward",), "accuracy": ("validation/toy_accuracy",)})
    metric_prefixes: tuple[str, ...] = ("toy",)
    console_log: bool = False
    pod_local_roots: tuple[str, ...] = ()
    rehearsal_writer: str = "tests.trainers.toy_trainer:ToyWriter"

    def owns_checkpoints(self, checkpoint_dir) -> bool:
        return (Path(checkpoint_dir) / MARKER).is_file()

    def list_checkpoints(self, checkpoint_dir) -> pd.DataFrame:
        steps = sorted(int(p.name.split("_")[1]) for p in Path(checkpoint_dir).glob("step_*") if p.is_dir())
        df = pd.DataFrame({"step": steps, "path": [str(Path(checkpoint_dir) / f"step_{s}") for s in steps],
                           "layout": "toy"})
        df.attrs["read_by"] = "toy"
        return df

    def latest_checkpoint(self, checkpoint_dir) -> Path:
        return Path(self.list_checkpoints(checkpoint_dir)["path"].iloc[-1])


LAYOUT = ToyLayout()


class ToyWriter:
    """NeMo-RL's writer, plus the marker that makes the checkpoint dir this layout's (composition, no inheritance)."""

    def __init__(self, cfg, rank, world, say):
        self._inner = NemoRlWriter(cfg, rank, world, say)
        self._cfg, self._rank = cfg, rank

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def begin(self, bcast) -> None:
        self._inner.begin(bcast)
        if self._rank == 0:
            Path(self._cfg.checkpoint_dir).mkdir(parents=True, exist_ok=True)
            (Path(self._cfg.checkpoint_dir) / MARKER).write_text(json.dumps({"trainer": "toy"}))


class Toy:
    name = "toy"
    release = "0.1"
    label = "Toy"
    evaluator = None  # nbtools has no evaluation for it
    citation = ("Toy", "@misc{toy, title = {A toy trainer}}")
    metric_family = "toy"
    layout = "toy"

    def __init__(self, cfg):
        self.cfg = cfg

    @classmethod
    def check(cls, cfg) -> list[tuple[tuple[str, ...], str]]:
        return []

    def output_dirs(self) -> OutputDirs:
        return OutputDirs("toy", str(self.cfg.log_dir), str(self.cfg.checkpoint_dir), str(self.cfg.log_dir))

    def job(self) -> TrainerJob:
        return TrainerJob("echo toy")

    def fit_inputs(self):
        return None

    def prepare_command(self):
        return None

    def job_env(self) -> dict[str, str]:
        return {}

    def metadata(self) -> dict[str, str]:
        return {"trainer": "toy"}

    def lint(self, report: LintReport, *, code_present=None, cluster_checks=None) -> None:
        if cluster_checks is not None:
            cluster_checks()
        report.findings.append(Finding("warning", "toy-lint", "trainer.kind", "the toy trainer's own rule ran",
                                       "nothing to fix"))

    def ray_pinned_by(self) -> str:
        return "the toy"

    def baseline_model(self) -> str:
        return self.cfg.model.name

    def rewards(self):
        return [], "none"

    def advantage_rule(self) -> AdvantageRule:
        return AdvantageRule("group_mean", True)

    def rescore_mix(self):
        return []

    def version(self) -> str:
        return "toy 0.1"

    def hub_tag(self) -> str:
        return "toy"

    @classmethod
    def code_source(cls, cfg):
        return None

    def trained_task(self) -> str:
        return self.cfg.data.dataset

    def hardware(self):
        return Hardware("toy (no image)", "toy", None, ("2 + 2?", 8))


TRAINER = Toy
