"""Attempts of one run: attempt 1 is ``cfg.submission_id``, attempt n the same id + ``-attempt<n>``, each resuming
from the newest complete ``step_N`` (the trainer's own auto-resume; a ``tmp_step_N`` never counts).

Why: a job killed by a spot reclaim keeps its submission id, so re-running the launch re-attaches to the dead job.
Each retry needs an id of its own, and the user needs to know what each loss cost. The record (ids, start/end,
last step reached, step resumed from, cause, steps redone, GPU-hours lost) is a small JSON beside the run's logs
(``<logs_url>/nbtools-attempts.json``, a local path or ``gs://``), written atomically, so a notebook re-run or
another machine finds it.

This module is the record alone; reading an attempt back from the cluster and submitting the next one is
``_retry``'s (``launch.resubmit``).

Example:
    >>> nbtools.launch.attempts(cfg)               # the record as a DataFrame
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from nbtools import _trainer_folders, storage
from nbtools.errors import CheckpointError, NotFoundError

__all__ = ["Attempt", "RECORD_NAME", "attempt_id", "read_attempts", "attempts", "newest_checkpoint", "record_url",
           "steps_from_log", "save", "charge", "cluster_gpus", "record_first", "update"]

RECORD_NAME = "nbtools-attempts.json"
_STEP = re.compile(r"Step (\d+)/(\d+)")
_DONE = re.compile(r"Training Results")
_STEP_TIME = re.compile(r"Total step time:\s*([\d.]+)\s*s")
_RESUMED = re.compile(r"Resuming from checkpoint \S*?step_(\d+)|Load from checkpoint folder: \S*?global_step_(\d+)")
# verl prints one console line per finished step (aggregate_logger.concat_dict_to_str), its wall time among them
_VERL_DONE = re.compile(r"(?:^|[\s|)\]])step:(\d+) - ")
_VERL_TIME = re.compile(r" - timing_s/step:(?:np\.\w+\()?([\d.]+(?:[eE][-+]?\d+)?)")


@dataclass
class Attempt:
    """One submission of the run; times are Unix seconds, steps are GRPO steps (None: not known)."""

    n: int
    submission_id: str
    started: float | None = None
    ended: float | None = None
    status: str = "PENDING"
    last_step: int | None = None  # the last step whose training finished in this attempt
    resumed_from: int | None = None  # the step_N it resumed from (None: from scratch)
    cause: str = ""
    retry: bool | None = None
    evidence: str = ""
    fix: str = ""
    steps_redone: int | None = None  # steps past the checkpoint the next attempt resumed from (lost work)
    lost_s: float | None = None  # wall seconds of those steps
    gpus: int | None = None
    gpu_hours_lost: float | None = None
    step_seconds: dict[str, float] = field(default_factory=dict)  # step -> its wall time, for steps past the checkpoint

    @property
    def terminal(self) -> bool:
        return self.status in ("SUCCEEDED", "FAILED", "STOPPED", "LOST")  # LOST: the cluster no longer knows it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def attempt_id(cfg, n: int) -> str:
    """The submission id of attempt ``n`` (1 is ``cfg.submission_id``, so ``launch.submit`` re-attaches to it)."""
    return cfg.submission_id if n <= 1 else f"{cfg.submission_id}-attempt{n}"


def record_url(cfg) -> str:
    """Where the attempts record lives: beside the run's logs (``<logs_url>/nbtools-attempts.json``)."""
    return storage.join(cfg.logs_url, RECORD_NAME)


_SHAPE = ('{"experiment": NAME, "runs": {SUBMISSION_ID: [{"n": 1, "submission_id": ..., "status": ...}, '
          '{"n": 2, ...}]}}')
_TYPES = {"n": int, "submission_id": str, "started": (int, float, type(None)), "ended": (int, float, type(None)),
          "status": str, "last_step": (int, type(None)), "resumed_from": (int, type(None)), "cause": str,
          "retry": (bool, type(None)), "evidence": str, "fix": str, "steps_redone": (int, type(None)),
          "lost_s": (int, float, type(None)), "gpus": (int, type(None)), "gpu_hours_lost": (int, float, type(None)),
          "step_seconds": dict}


def _bad_record(url: str, what: str) -> CheckpointError:
    return CheckpointError(f"the attempts record {url} {what}; expected {_SHAPE}, with n counting 1, 2, 3 …",
                           fix=f"restore {url} from a copy, or delete it (the next launch starts the record again "
                               "from attempt 1); nothing was submitted")


def _load(cfg) -> dict:
    """The whole record file, checked: a damaged or hand-edited record is named, never read as empty and overwritten."""
    url = record_url(cfg)
    try:
        data = json.loads(storage.read_text(url))
    except (FileNotFoundError, NotFoundError):
        return {"experiment": cfg.name, "runs": {}}
    except (ValueError, RecursionError) as e:
        what = "nests too deeply" if isinstance(e, RecursionError) else f"is not valid JSON ({e})"
        raise _bad_record(url, what) from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), dict):
        got = type(data).__name__ if not isinstance(data, dict) else f"'runs' as {type(data.get('runs')).__name__}"
        raise _bad_record(url, f"holds {got}")
    for sid, rows in data["runs"].items():
        _check_rows(url, sid, rows)
    return data


def _check_rows(url: str, sid: str, rows: Any) -> None:
    if not isinstance(rows, list):
        raise _bad_record(url, f"holds a {type(rows).__name__} for run {sid!r}, not a list of attempts")
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise _bad_record(url, f"holds a {type(r).__name__} as attempt {i + 1} of run {sid!r}, not an object")
        missing = [k for k in ("n", "submission_id") if k not in r]
        wrong = [f"{k}={r[k]!r}" for k, t in _TYPES.items() if k in r and (
            not isinstance(r[k], t) or (t is int and isinstance(r[k], bool))
            or (isinstance(r[k], float) and not math.isfinite(r[k])))]
        if missing or wrong:
            what = ", ".join([f"no {k}" for k in missing] + [f"{w[:60]} of the wrong type" for w in wrong])
            raise _bad_record(url, f"has attempt {i + 1} of run {sid!r} with {what}")
        if r["n"] != i + 1:
            raise _bad_record(url, f"numbers attempt {i + 1} of run {sid!r} as n={r['n']!r}")


def read_attempts(cfg) -> list[Attempt]:
    """The recorded attempts of ``cfg``'s run (its submission id), oldest first; [] before the first.

    Raises:
        CheckpointError: the record is damaged or not in nbtools' shape (naming the file and how to fix it).

    Example:
        >>> [a.submission_id for a in nbtools.launch.read_attempts(cfg)]
    """
    names = {f.name for f in dataclasses.fields(Attempt)}
    rows = _load(cfg)["runs"].get(cfg.submission_id, [])
    return [Attempt(**{k: v for k, v in r.items() if k in names}) for r in rows]


def save(cfg, items: list[Attempt]) -> None:
    data = _load(cfg)
    data["experiment"] = cfg.name
    data["runs"][cfg.submission_id] = [a.to_dict() for a in items]
    storage.write_text(record_url(cfg), json.dumps(data, indent=1))


def attempts(cfg) -> pd.DataFrame:
    """The attempts record as a table (one row per attempt; empty before the first).

    Example:
        >>> nbtools.launch.attempts(cfg)[["n", "status", "cause", "resumed_from", "last_step", "steps_redone"]]
    """
    cols = [f.name for f in dataclasses.fields(Attempt) if f.name != "step_seconds"]
    return pd.DataFrame([{k: getattr(a, k) for k in cols} for a in read_attempts(cfg)], columns=cols)


def newest_checkpoint(cfg) -> int | None:
    """The highest complete ``step_N`` where the run's checkpoints are (what the trainer resumes from), or None.

    Example:
        >>> nbtools.launch._attempts.newest_checkpoint(cfg)    # tmp_step_N / old_step_N never count
        20
    """
    try:
        entries = storage.ls(cfg.checkpoints_url)
    except (FileNotFoundError, NotFoundError):
        return None
    steps = [n for e in entries if e.is_dir and (n := _trainer_folders.checkpoint_step(e.name)) is not None]
    return max(steps) if steps else None


def steps_from_log(log: str) -> tuple[int | None, int | None, dict[int, float]]:
    """(last step whose training finished, step resumed from, {step: wall seconds}) from a trainer's log.

    NeMo-RL (and the rehearsal) print ``===== Step k/N =====`` when step k starts, ``Training Results`` when its
    update is done and ``Total step time: …s`` after it; verl prints ``step:k - … - timing_s/step:… - …`` when step
    k is done, and ``Load from checkpoint folder: …/global_step_k`` when it resumes.

    Example:
        >>> steps_from_log("Step 1/3\nTraining Results:\n  Total step time: 0.5s\nStep 2/3\n")
        (1, None, {1: 0.5})
    """
    current = done = resumed = None
    times: dict[int, float] = {}
    for line in log.splitlines():
        if (m := _VERL_DONE.search(line)) is not None:
            if (t := _VERL_TIME.search(line)) is not None:  # step 0 (validation before training) has no step time
                done = int(m.group(1))
                times[done] = float(t.group(1))
        elif (m := _STEP.search(line)) is not None:
            current = int(m.group(1))
        elif current is not None and _DONE.search(line):
            done = current
        elif done is not None and (m := _STEP_TIME.search(line)) is not None:
            times[done] = float(m.group(1))
        elif resumed is None and (m := _RESUMED.search(line)) is not None:
            resumed = int(m.group(1) or m.group(2))
    return done, resumed, times


def charge(prev: Attempt, resumed_from: int | None) -> None:
    """The cost of ``prev``'s loss once we know where the next attempt resumes: steps redone, wall s, GPU-hours."""
    base = resumed_from or 0
    if prev.last_step is None:
        prev.steps_redone = 0
        return
    prev.steps_redone = max(0, prev.last_step - base)
    redone = [v for k, v in prev.step_seconds.items() if int(k) > base]
    if redone:
        prev.lost_s = round(sum(redone), 3)
    elif prev.started and prev.ended:  # no step times in the log: the attempt's pace
        ran = max(1, prev.last_step - (prev.resumed_from or 0))
        prev.lost_s = round((prev.ended - prev.started) * prev.steps_redone / ran, 3)
    if prev.gpus and prev.lost_s is not None:
        prev.gpu_hours_lost = round(prev.gpus * prev.lost_s / 3600, 4)


def cluster_gpus(cfg) -> int | None:
    from nbtools import backends

    try:
        return backends.get(cfg).gpus()
    except Exception:  # noqa: BLE001 - a cost without a GPU count is still a cost in steps and seconds
        return None


def record_first(cfg, job) -> list[Attempt]:
    """Make sure attempt 1 (``job``, ``cfg.submission_id``) is in the record; returns the record."""
    items = read_attempts(cfg)
    if not items:
        items = [Attempt(1, job.id, started=time.time(), status="PENDING", resumed_from=newest_checkpoint(cfg),
                         gpus=cluster_gpus(cfg))]
        save(cfg, items)
    return items


def update(cfg, attempt: Attempt) -> None:
    """Store one attempt's fields back into the record."""
    items = read_attempts(cfg)
    items = [attempt if a.n == attempt.n else a for a in items]
    save(cfg, items)
