"""What a launched run has produced so far: job status plus the trainer's artifacts, read where they live.

Why: notebook 03 ends by checking that the run did what it claims (a job that did not fail, and — once it
finished — its logs, TensorBoard events, per-step dumps and checkpoints), on any backend: the artifacts are
listed through the run's storage URL (a local path, or the bucket the pods write to).

Example:
    >>> out = nbtools.launch.outputs(cfg, job)
    >>> out.ok, out.checkpoints[-1]
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nbtools import _paths, storage, trainers
from nbtools._escape import html as _h
from nbtools._layout import EXP_RE, STEP_RE, TRAIN_RE, VERL_DUMP_RE, VERL_STEP_RE
from nbtools.config import Experiment
from nbtools.errors import NbtoolsError

__all__ = ["RunOutputs", "outputs"]


@_paths.tidy_reprs
@dataclass(frozen=True)
class RunOutputs:
    """Status and artifacts of one run; ``ok`` is the notebook's final check."""

    submission_id: str
    status: str
    logs_url: str
    checkpoints_url: str
    exp_dir: str | None = None
    tensorboard_files: int = 0
    train_dumps: int = 0
    checkpoints: list[str] = field(default_factory=list)
    problem: str = ""  # why the artifacts could not be listed (e.g. no credentials for the bucket)
    tensorboard_expected: bool = True  # the experiment has logging.tensorboard on

    @property
    def ok(self) -> bool:
        """The job did not fail (stopped on purpose is no failure); and when it SUCCEEDED, its logs, dumps, a checkpoint
        and (when the experiment logs to TensorBoard) event files exist."""
        if self.status in ("FAILED", "MISSING"):
            return False
        if self.status == "SUCCEEDED":
            tb = self.tensorboard_files or not self.tensorboard_expected
            return bool(self.exp_dir and tb and self.train_dumps and self.checkpoints)
        return True

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {"ok": self.ok}

    def _repr_html_(self) -> str:
        rows = [
            ("job", self.submission_id), ("status", self.status), ("logs", self.exp_dir or self.logs_url),
            ("TensorBoard event files", self.tensorboard_files), ("training dumps", self.train_dumps),
            ("checkpoints", ", ".join(storage.name_of(c) for c in self.checkpoints) or "none"),
        ]
        body = "".join(f"<tr><td>{k}</td><td><code>{_h(str(v))}</code></td></tr>" for k, v in rows)
        note = f"<p>{_h(self.problem)}</p>" if self.problem else ""
        return f"<b>{'OK' if self.ok else 'NOT OK'}</b><table>{body}</table>{note}"

    def __str__(self) -> str:
        return (
            f"RunOutputs(ok={self.ok}, job={self.submission_id}, status={self.status}, exp_dir={self.exp_dir}, "
            f"tensorboard_files={self.tensorboard_files}, train_dumps={self.train_dumps}, checkpoints={len(self.checkpoints)})"
        )

    __repr__ = __str__


def _events(url: str) -> int:
    return sum(1 for e in storage.ls(url) if "tfevents" in e.name) if storage.exists(url) else 0


def _count(url: str) -> tuple[str | None, int, int]:
    """(latest exp dir, TensorBoard event files, train dumps) under a NeMo-RL log_dir URL."""
    exps = sorted((int(m.group(1)), e.url) for e in storage.ls(url) if e.is_dir and (m := EXP_RE.match(e.name)))
    if not exps:
        return None, 0, 0
    exp = exps[-1][1]
    dumps = sum(1 for e in storage.ls(exp) if TRAIN_RE.match(e.name))
    return exp, _events(storage.join(exp, "tensorboard")), dumps


def _count_dumps(cfg: Experiment, dirs) -> tuple[str | None, int, int]:
    """(log_dir, event files in TENSORBOARD_DIR, ``{step}.jsonl`` rollout dumps): a trainer that writes its dumps and
    TensorBoard to directories of their own (verl)."""
    roll = cfg.url(dirs.rollout_dir)
    dumps = sum(1 for e in storage.ls(roll) if VERL_DUMP_RE.match(e.name)) if storage.exists(roll) else 0
    return cfg.logs_url, _events(cfg.url(dirs.tensorboard_dir)), dumps


def _checkpoints(url: str) -> list[tuple[int, str]]:
    """``step_N`` dirs, or ``global_step_N`` dirs that still hold their ``actor/`` (verl keeps data.pt of older ones)."""
    out = []
    for e in storage.ls(url):
        if e.is_dir and (m := STEP_RE.match(e.name)):
            out.append((int(m.group(1)), e.url))
        elif e.is_dir and (m := VERL_STEP_RE.match(e.name)) and storage.exists(storage.join(e.url, "actor")):
            out.append((int(m.group(1)), e.url))
    return sorted(out)


def outputs(cfg: Experiment, job=None) -> RunOutputs:
    """Collect the job's status and the artifacts under the run's log and checkpoint URLs."""
    status, sid = "MISSING", cfg.submission_id
    if job is not None:
        sid = job.id
        status = str(getattr(job.status(), "value", job.status()))
    logs, ckpts = cfg.logs_url, cfg.checkpoints_url
    exp, tb, dumps, steps, problem = None, 0, 0, [], ""
    try:
        dirs = trainers.get(cfg).output_dirs()
        if storage.exists(logs):
            exp, tb, dumps = _count_dumps(cfg, dirs) if dirs.rollout_dir else _count(logs)
        if storage.exists(ckpts):
            steps = _checkpoints(ckpts)
    except NbtoolsError as e:
        problem = str(e).splitlines()[0]
    return RunOutputs(submission_id=sid, status=status, logs_url=logs, checkpoints_url=ckpts, exp_dir=exp,
                      tensorboard_files=tb, train_dumps=dumps, checkpoints=[u for _, u in steps], problem=problem,
                      tensorboard_expected=cfg.logging.tensorboard)
