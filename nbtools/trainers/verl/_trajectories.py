"""verl rollout / validation dumps (``trainer.rollout_data_dir``, ``trainer.validation_data_dir``) as trajectory tables.

verl v0.7.0 (``verl/trainer/ppo/ray_trainer.py`` ``_dump_generations``) writes one ``{global_step}.jsonl`` per step,
one JSON object per sample: ``input`` and ``output`` (decoded text, special tokens skipped), ``gts`` (the ground
truth), ``score`` (the sequence's summed token-level score), ``step``, plus every reward-extra-info list of the
batch's length (``acc``, ``pred``…). Rows are not in group order: v0.7.0 dumps after ``_balance_batch`` has
reordered the batch, and 0.9.x's V1 trainer adds ``uid`` = ``{sample}_{rollout}_{output}``; a GRPO group is the rows
of one step with the same uid sample part, or without uids the same ``input`` (``nbtools._groups``).

The table has NeMo-RL's columns (:data:`nbtools.trajectories.COLUMNS`) where they mean the same: prompt=input,
response=output, reward=score; ``generation_length``, ``input_length`` and ``advantage`` are NaN (verl dumps text,
not tokens or advantages: NaN means "not recorded"); ``env_observation`` is ``"correct"``/``"incorrect"`` from an
``acc`` field when the reward function returned one (so ``step_summary``'s correct share works), else None.
Extra columns: ``group`` (GRPO group number within the step), ``ground_truth``, and the dump's other fields.

Live-safe like :class:`nbtools.trajectories.Run`: only complete lines are read, the rest is ``pending``; a malformed
line (not JSON, not an object, a ``uid`` that is not a string or number) is skipped and listed in ``problems``.

Example:
    >>> run = nbtools.trajectories.open_run("outputs/rollouts")   # through verl's layout (``open_trajectories``)
    >>> nbtools.trajectories.step_summary(run.read(run.steps[-1]))
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from nbtools import storage
from nbtools._groups import group_numbers
from nbtools._layout import (
    VERL_DUMP_RE,
    VERL_ROLLOUT_DIR,
    VERL_TENSORBOARD_DIR,
    VERL_VALIDATION_DIR,
    exp_dirs,
    step_ranges,
)
from nbtools._tfevents import event_files, events
from nbtools.errors import ConfigError, Fix, NotFoundError

__all__ = ["VERL_FILE_RE", "VerlRun", "open_verl_run", "is_verl_dump_dir", "open_trajectories"]

VERL_FILE_RE = VERL_DUMP_RE
_BASE = ("step", "idx", "prompt", "response", "env_observation", "reward", "generation_length", "input_length",
         "advantage", "think", "answer", "group", "ground_truth")
_RENAMED = {"input", "output", "gts", "score", "step"}
_PROBLEM_COLS = ["file", "line", "kind", "message", "excerpt"]


def _files(d: Path | None) -> dict[int, Path]:
    if d is None or not d.is_dir():
        return {}
    with os.scandir(d) as it:
        return dict(sorted((int(m.group(1)), Path(e.path)) for e in it if (m := VERL_FILE_RE.match(e.name))))


def is_verl_dump_dir(path: str | os.PathLike) -> bool:
    """A directory holding verl's ``{step}.jsonl`` dumps."""
    return bool(_files(Path(path).expanduser()))


def _verdict(acc) -> str | None:
    if isinstance(acc, bool) or (isinstance(acc, int | float) and not math.isnan(float(acc))):
        return "correct" if float(acc) > 0 else "incorrect"
    return None


def _number(v) -> float:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, int | float):
        return float(v)
    return math.nan


class VerlRun:
    """The dumps of one verl run: ``steps``, ``read``, ``record``, ``iter_records``, ``problems`` like ``Run``.

    Args:
        rollout_dir: ``trainer.rollout_data_dir`` (training samples), or None.
        validation_dir: ``trainer.validation_data_dir`` (validation samples, ``kind="val"``), or None.
        think_tag / answer_tag: tags split out of the response into ``think`` / ``answer``.
    """

    def __init__(self, rollout_dir: str | os.PathLike | None, validation_dir: str | os.PathLike | None = None, *,
                 think_tag: str = "think", answer_tag: str = "answer"):
        self.dirs = {"train": Path(rollout_dir).expanduser() if rollout_dir is not None else None,
                     "val": Path(validation_dir).expanduser() if validation_dir is not None else None}
        self.path = self.dirs["train"] or self.dirs["val"]
        self.log_dir: Path | None = None  # the log_dir it was opened from (open_run), where TENSORBOARD_DIR is too
        self.remote: str | None = None  # read from local directories only
        self.think_tag, self.answer_tag = think_tag, answer_tag
        self.segments = [str(self.path)]
        self.overlap: dict[str, list[int]] = {"train": [], "val": []}
        self._problems: dict[tuple[str, str], list[tuple]] = {}
        self._pending: dict[str, int] = {}

    # ---- listing -------------------------------------------------------------------------------------------
    def files(self, kind: str = "train") -> dict[int, Path]:
        """{step: path} of the dumps of this kind ("train" or "val"), sorted by step."""
        if kind not in self.dirs:
            raise ConfigError(f"kind: expected 'train' or 'val', got {kind!r}")
        return _files(self.dirs[kind])

    @property
    def steps(self) -> list[int]:
        """Training steps with a rollout dump."""
        return list(self.files("train"))

    @property
    def val_steps(self) -> list[int]:
        """Steps with a validation dump (verl validates before training too: step 0)."""
        return list(self.files("val"))

    # ---- lines ---------------------------------------------------------------------------------------------
    def _lines(self, step: int, kind: str) -> tuple[Path, list[bytes]]:
        files = self.files(kind)
        if step not in files:
            raise NotFoundError(f"expected a dump of step {step} ({kind}) in {self.dirs[kind]}; the run has steps "
                                f"{step_ranges(files)}",
                                fix="pick one of run.steps (run.val_steps for validation); verl dumps every step "
                                    "only when trainer.rollout_data_dir is set")
        path = files[step]
        try:
            data = path.read_bytes()
        except OSError as e:
            raise NotFoundError(f"expected a readable {path}, got: {e.strerror or e}",
                                fix="restore the file; the other steps read as usual") from None
        end = data.rfind(b"\n") + 1
        if end < len(data):
            self._pending[path.name] = len(data) - end
        else:
            self._pending.pop(path.name, None)
        return path, data[:end].split(b"\n")[:-1] if end else []

    def _record(self, step: int, k: int, line: bytes, path: Path, kind: str) -> dict | None:
        key = (kind, path.name)
        if not line.strip():
            self._note(key, k + 1, "empty", "blank line", "")
            return None
        try:
            obj = json.loads(line.decode("utf-8", errors="replace"))
        except (ValueError, RecursionError) as e:
            self._note(key, k + 1, "malformed", f"not JSON ({e})", line[:80].decode("utf-8", "replace"))
            return None
        if not isinstance(obj, dict):
            self._note(key, k + 1, "malformed", f"a JSON {type(obj).__name__}, not an object",
                       line[:80].decode("utf-8", "replace"))
            return None
        uid = obj.get("uid")
        if uid is not None and (isinstance(uid, bool) or not isinstance(uid, str | int | float)):
            self._note(key, k + 1, "malformed", f"uid is a JSON {type(uid).__name__}, expected a string (verl's "
                       "{sample}_{rollout}_{output})", line[:80].decode("utf-8", "replace"))
            return None
        from nbtools.rewards import split_think_answer

        response = obj.get("output") if isinstance(obj.get("output"), str) else None
        think, answer = split_think_answer(response, self.think_tag, self.answer_tag) if response else (None, None)
        rec = {"step": step, "idx": k, "prompt": obj.get("input") if isinstance(obj.get("input"), str) else None,
               "response": response, "env_observation": _verdict(obj.get("acc")), "reward": _number(obj.get("score")),
               "generation_length": math.nan, "input_length": math.nan, "advantage": math.nan,
               "think": think, "answer": answer, "group": None, "ground_truth": obj.get("gts")}
        for name, v in obj.items():
            if name not in _RENAMED and name not in rec:
                rec[name] = v
        return rec

    def _note(self, key: tuple[str, str], line: int, kind: str, message: str, excerpt: str) -> None:
        seen = self._problems.setdefault(key, [])
        if (line, kind) not in {(p[0], p[1]) for p in seen}:
            seen.append((line, kind, message, excerpt))

    def iter_records(self, step: int, *, kind: str = "train") -> Iterator[dict]:
        """Yield the records of one step file (complete lines only)."""
        path, lines = self._lines(step, kind)
        for k, line in enumerate(lines):
            if (rec := self._record(step, k, line, path, kind)) is not None:
                yield rec

    def record(self, step: int, idx: int, *, kind: str = "train") -> dict:
        """One record (``idx`` counts lines, 0-based), with its GRPO group number.

        Raises:
            NotFoundError: no such line, or a line ``read()`` skips too (see ``run.problems``).
        """
        df = self.read(step, kind=kind)
        row = df[df["idx"] == idx]
        if row.empty:
            n = len(self._lines(step, kind)[1])
            raise NotFoundError(f"expected a record at idx {idx} of step {step} (lines 0..{n - 1}); it is missing or "
                                f"was skipped", fix="run.problems lists every skipped line; read another idx")
        return row.iloc[0].to_dict()

    # ---- tables --------------------------------------------------------------------------------------------
    def read(self, step: int | range | list[int] | None = None, *, kind: str = "train",
             columns: list[str] | None = None) -> pd.DataFrame:
        """Records of one step, several steps or all (None) as a DataFrame (see the module doc for columns).

        Example:
            >>> run.read(range(1, 11)).groupby("step").reward.mean()
        """
        files = self.files(kind)
        wanted = list(files) if step is None else [step] if isinstance(step, int) else sorted(set(step))
        missing = [s for s in wanted if s not in files]
        if isinstance(step, int) and missing:
            self._lines(step, kind)  # raises, naming the steps there are
        frames = []
        for s in wanted:
            if s in files:
                df = pd.DataFrame(list(self.iter_records(s, kind=kind)))
                if not df.empty:
                    df["group"] = group_numbers(df)
                frames.append(df)
        frames = [f for f in frames if not f.empty]
        out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(_BASE))
        for c in _BASE:
            if c not in out:
                out[c] = None
        out = out[list(_BASE) + [c for c in out.columns if c not in _BASE]]
        if columns is not None:
            out = out[[c for c in columns if c in out]]
        out.attrs.update(pending_bytes=sum(self._pending.values()), skipped=self.skipped, missing_steps=missing)
        if kind == "train" and self.log_dir is not None:
            out.attrs["logged_advantage_extremes"] = _logged_extremes(self.log_dir / VERL_TENSORBOARD_DIR)
        return out

    def search(self, text: str, *, kind: str = "train", step: int | range | list[int] | None = None,
               regex: bool = False, case: bool = False) -> pd.DataFrame:
        """Rows whose prompt or response contains ``text`` (a literal unless ``regex``; case-insensitive unless
        ``case``).

        Raises:
            ConfigError: an invalid regex.
        """
        try:
            pat = re.compile(text if regex else re.escape(text), 0 if case else re.IGNORECASE)
        except re.error as e:
            raise ConfigError(f"search: {text!r} is not a valid regex ({e})",
                              fix=Fix("correct it, or pass regex=False to search for the literal text",
                                      cli="correct the regular expression")) from None
        df = self.read(step, kind=kind)
        hit = df["prompt"].map(lambda s: bool(isinstance(s, str) and pat.search(s))) | \
            df["response"].map(lambda s: bool(isinstance(s, str) and pat.search(s)))
        return df[hit.astype(bool)].reset_index(drop=True)

    def summary(self, step: int | range | list[int] | None = None) -> pd.DataFrame:
        """Per-step summary (:func:`nbtools.trajectories.step_summary`), GRPO groups by ``group``."""
        from nbtools.trajectories import step_summary

        return step_summary(self.read(step), group_by="group")

    @property
    def problems(self) -> pd.DataFrame:
        """Every problem seen so far: file, line (1-based), kind (``malformed``/``empty``), message, excerpt."""
        rows = [(name, *p) for (_, name), ps in self._problems.items() for p in ps]
        return pd.DataFrame(rows, columns=_PROBLEM_COLS)

    @property
    def skipped(self) -> int:
        """Lines skipped by the reads so far (each listed in ``problems``)."""
        return sum(len(ps) for ps in self._problems.values())

    @property
    def pending(self) -> dict[str, int]:
        """{file: bytes after its last newline} for files still being written."""
        return dict(self._pending)

    def stale_steps(self, started: float, slack: float = 1.0) -> list[int]:
        """Steps whose dump was last written before ``started`` (a relaunch into the same dirs): the earlier run's
        (the health checks leave them out; a NeMo-RL relaunch writes a new ``exp_NNN`` instead)."""
        out = []
        for step, path in self.files("train").items():
            try:
                if os.stat(path).st_mtime < started - slack:
                    out.append(step)
            except OSError:
                continue
        return out

    def __repr__(self) -> str:
        s = self.steps
        span = f"steps {s[0]}..{s[-1]} ({len(s)} files)" if s else "no steps yet"
        return f"VerlRun({str(self.path)!r}, {span}, val steps {len(self.val_steps)})"


# verl logs each step's advantage extremes over the response tokens (metric_utils.compute_data_metrics), not each
# sample's advantage: what a re-scoring can check its recomputed advantages against
_EXTREME_TAGS = {"critic/advantages/max": "max", "critic/advantages/min": "min"}


def _logged_extremes(tb_dir: Path) -> dict[int, dict[str, float]]:
    """``{step: {"max", "min"}}`` of ``critic/advantages/*`` in the run's TensorBoard dir ({} when there is none; a
    plain dict, as DataFrame.attrs must compare equal when frames are concatenated)."""
    rows: dict[int, dict[str, float]] = {}
    for f in event_files(tb_dir) if tb_dir.is_dir() else []:
        for ev in events(f, [], migrate=False):
            for v in ev.summary.value if ev.HasField("summary") else []:
                if v.tag in _EXTREME_TAGS and v.HasField("simple_value"):
                    rows.setdefault(int(ev.step), {})[_EXTREME_TAGS[v.tag]] = float(v.simple_value)
    return {k: v for k, v in sorted(rows.items()) if set(v) == {"max", "min"}}


def open_verl_run(rollout_dir: str | os.PathLike | None, validation_dir: str | os.PathLike | None = None, *,
                  think_tag: str = "think", answer_tag: str = "answer") -> VerlRun:
    """Open verl's dump directories (``trainer.rollout_data_dir`` and/or ``trainer.validation_data_dir``).

    Raises:
        NotFoundError: neither directory exists.

    Example:
        >>> run = nbtools.trainers.verl.open_verl_run("/data/runs/r1/rollouts", "/data/runs/r1/validation")
    """
    given = [Path(p).expanduser() for p in (rollout_dir, validation_dir) if p is not None]
    if not given or not any(p.is_dir() for p in given):
        raise NotFoundError(f"expected verl dump directories, found nothing at {[str(p) for p in given] or 'none'}",
                            fix="pass trainer.rollout_data_dir (and trainer.validation_data_dir); verl writes "
                                "{step}.jsonl there only when they are set")
    return VerlRun(rollout_dir, validation_dir, think_tag=think_tag, answer_tag=answer_tag)


def open_trajectories(path: str, *, entries=None, think_tag: str = "think", answer_tag: str = "answer") -> VerlRun | None:
    """``nbtools.trajectories.open_run`` of a directory that holds no NeMo-RL dumps: a :class:`VerlRun` when it is verl's
    ``rollout_data_dir`` or a log dir where nbtools points verl's dumps, else None.

    Args:
        path: a local directory or a URL.
        entries: the URL's listing the caller already made (``storage.ls``), so a bucket is listed once.
    """
    if storage.is_remote(path):
        names = entries if entries is not None else storage.ls(path)
        if any(VERL_DUMP_RE.match(e.name) for e in names if not e.is_dir) or any(
                e.is_dir and e.name in (VERL_ROLLOUT_DIR, VERL_VALIDATION_DIR) for e in names):
            run = _open_local(storage.mirror(path, include=_verl_files), think_tag=think_tag, answer_tag=answer_tag)
            if run is not None:
                run.remote = path
            return run
        return None
    return _open_local(Path(path), think_tag=think_tag, answer_tag=answer_tag)


def _open_local(p: Path, **kw) -> VerlRun | None:
    if is_verl_dump_dir(p):  # verl's trainer.rollout_data_dir
        return open_verl_run(p, **kw)
    dumps = [p / VERL_ROLLOUT_DIR, p / VERL_VALIDATION_DIR]  # a log_dir where nbtools points verl's dumps
    if any(is_verl_dump_dir(d) for d in dumps) and not exp_dirs(p):
        run = open_verl_run(*(d if d.is_dir() else None for d in dumps), **kw)
        run.log_dir = p  # where the run's TensorBoard dir is too (health checks read both)
        return run
    return None


def _verl_files(rel: str) -> bool:
    """The files of a verl run's log dir that its readers open: the ``{step}.jsonl`` dumps (in the dir itself or in
    its rollout / validation dirs) and the TensorBoard event files (the health checks read both). A snapshot: open
    it again for steps written since (only new or rewritten objects are fetched)."""
    parts = rel.split("/")
    if len(parts) == 1:
        return bool(VERL_DUMP_RE.match(rel))
    if parts[0] in (VERL_ROLLOUT_DIR, VERL_VALIDATION_DIR):
        return len(parts) == 2 and bool(VERL_DUMP_RE.match(parts[1]))
    return parts[0] == VERL_TENSORBOARD_DIR and "tfevents" in parts[-1]
