"""Attempts of one run: attempt 1 is ``cfg.submission_id``, attempt n the same id + ``-attempt<n>``, each resuming
from the newest complete ``step_N`` (the trainer's own auto-resume; a ``tmp_step_N`` never counts).

Why: a job killed by a spot reclaim keeps its submission id, so re-running the launch re-attaches to the dead job.
Each retry needs an id of its own, and the user needs to know what each loss cost. The record (ids, start/end,
last step reached, step resumed from, cause, steps redone, GPU-hours lost) is a small JSON beside the run's logs
(``<logs_url>/nbtools-attempts.json``, a local path or ``gs://``), written atomically, so a notebook re-run or
another machine finds it.

Example:
    >>> job = nbtools.launch.resubmit(cfg)        # attempt 2 (3, …), resuming from the newest step_N
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

from nbtools import storage
from nbtools._layout import STEP_RE
from nbtools.errors import CheckpointError, ConflictError, NotFoundError

__all__ = ["Attempt", "RECORD_NAME", "attempt_id", "read_attempts", "attempts", "newest_checkpoint", "resubmit",
           "finalize", "record_url", "steps_from_log"]

RECORD_NAME = "nbtools-attempts.json"
_STEP = re.compile(r"Step (\d+)/(\d+)")
_DONE = re.compile(r"Training Results")
_STEP_TIME = re.compile(r"Total step time:\s*([\d.]+)\s*s")
_RESUMED = re.compile(r"Resuming from checkpoint \S*?step_(\d+)")


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


def _save(cfg, items: list[Attempt]) -> None:
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
    steps = [int(m.group(1)) for e in entries if e.is_dir and (m := STEP_RE.match(e.name))]
    return max(steps) if steps else None


def steps_from_log(log: str) -> tuple[int | None, int | None, dict[int, float]]:
    """(last step whose training finished, step resumed from, {step: wall seconds}) from a trainer's log.

    NeMo-RL (and the rehearsal) print ``===== Step k/N =====`` when step k starts, ``Training Results`` when its
    update is done and ``Total step time: …s`` after it.

    Example:
        >>> steps_from_log("Step 1/3\nTraining Results:\n  Total step time: 0.5s\nStep 2/3\n")
        (1, None, {1: 0.5})
    """
    current = done = resumed = None
    times: dict[int, float] = {}
    for line in log.splitlines():
        if (m := _STEP.search(line)) is not None:
            current = int(m.group(1))
        elif current is not None and _DONE.search(line):
            done = current
        elif done is not None and (m := _STEP_TIME.search(line)) is not None:
            times[done] = float(m.group(1))
        elif resumed is None and (m := _RESUMED.search(line)) is not None:
            resumed = int(m.group(1))
    return done, resumed, times


def finalize(cfg, attempt: Attempt, job=None) -> Attempt:
    """Fill an ended attempt from the cluster: status, times, last step and (when it did not succeed) diagnosis."""
    from nbtools import jobs
    from nbtools.launch._diagnose import diagnose

    try:
        job = job or jobs.attach(cfg.dashboard_url, attempt.submission_id)
    except NotFoundError:  # the cluster was replaced or its head restarted: the job went with it
        if not attempt.terminal:
            attempt.status, attempt.cause, attempt.retry = "LOST", "lost-node", True
            attempt.evidence = f"the cluster at {cfg.dashboard_url} no longer knows job {attempt.submission_id!r}"
            attempt.fix = "resubmit (nbtools.launch.resubmit(cfg)): the run resumes from the newest complete step_N"
        return attempt
    info = job.info()
    attempt.status = info.status.value
    attempt.started = info.start_time / 1000 if info.start_time else attempt.started
    attempt.ended = info.end_time / 1000 if info.end_time else attempt.ended
    if not attempt.terminal:
        return attempt
    done, resumed, times = steps_from_log(job.logs())
    attempt.last_step = done if done is not None else attempt.last_step
    if resumed is not None:  # what the trainer says it resumed from beats what was on disk at submission
        attempt.resumed_from = resumed
    ckpt = newest_checkpoint(cfg) or 0
    attempt.step_seconds = {str(k): v for k, v in times.items() if k > ckpt}
    if attempt.status == "SUCCEEDED":
        attempt.cause, attempt.retry, attempt.evidence, attempt.fix = "succeeded", False, "", ""
    elif not attempt.cause:
        d = diagnose(cfg, attempt.submission_id)
        attempt.cause, attempt.retry, attempt.evidence, attempt.fix = d.cause, d.retry, d.evidence, d.fix
    return attempt


def _charge(prev: Attempt, resumed_from: int | None) -> None:
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


def _gpus(cfg) -> int | None:
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
                         gpus=_gpus(cfg))]
        _save(cfg, items)
    return items


def attach(cfg):
    """The Ray job of the run's latest attempt, found again from any notebook or kernel.

    The attempts record names the last attempt's submission id (attempt 1 is ``cfg.submission_id``; a resubmission
    adds ``-attempt<n>``); before anything is recorded it is attempt 1's.

    Raises:
        NotFoundError: the experiment's cluster does not know that job (the message lists the ids it knows).

    Example:
        >>> nbtools.launch.attach(cfg).status()
    """
    from nbtools import jobs

    items = read_attempts(cfg)
    return jobs.attach(cfg.dashboard_url, items[-1].submission_id if items else cfg.submission_id)


def resubmit(cfg, *, force: bool = False):
    """Submit the next attempt of ``cfg``'s run with its own submission id, resuming from the newest ``step_N``.

    The previous attempt must have ended (its status, last step and cause are recorded first); the trainer resumes
    by itself from the highest complete ``step_N`` in the checkpoint dir, and the record keeps which one that was.

    Args:
        cfg: the experiment (the same config as the first attempt: the record is kept per submission id).
        force: resubmit even when the last attempt's cause is not one a retry fixes (OOM, user error).

    Raises:
        NotFoundError: nothing was submitted yet (launch it first).
        ConflictError: the last attempt is still running, or it failed for a reason a retry does not fix.

    Example:
        >>> job = nbtools.launch.resubmit(cfg)
        >>> job.id
        'local-rehearsal-1a2b3c4d5e-attempt2'
    """
    from nbtools import jobs
    from nbtools.launch import _send, build

    items = read_attempts(cfg)
    if not items:
        try:
            first = jobs.attach(cfg.dashboard_url, cfg.submission_id)
        except NotFoundError:
            raise NotFoundError(f"expected a first attempt {cfg.submission_id!r} to retry, found none on "
                                f"{cfg.dashboard_url}", fix="launch it first: nbtools.launch.submit(cfg) (or "
                                "nbtools.launch.supervise(cfg))") from None
        items = record_first(cfg, first)
    last = items[-1] = finalize(cfg, items[-1])
    _save(cfg, items)  # the diagnosis is kept even when this refuses to resubmit
    if not last.terminal:
        raise ConflictError(f"attempt {last.n} ({last.submission_id}) is still {last.status}",
                            fix="follow it (nbtools.launch.follow(cfg, job)) or stop it (job.stop()) before "
                                "submitting another attempt")
    if last.status == "SUCCEEDED" and not force:
        raise ConflictError(f"attempt {last.n} ({last.submission_id}) already SUCCEEDED; nothing to resume",
                            fix="change the config (e.g. more grpo.max_num_steps) to train further")
    if last.retry is False and not force:
        raise ConflictError(f"attempt {last.n} ended with cause {last.cause!r}, which a retry does not fix",
                            fix=f"{last.fix} (or pass force=True / --force to retry anyway)")
    resumed = newest_checkpoint(cfg)
    _charge(last, resumed)
    n = last.n + 1
    spec = build(cfg)
    spec = dataclasses.replace(spec, submission_id=attempt_id(cfg, n), metadata={
        **spec.metadata, "nbtools.attempt": str(n), "nbtools.run": cfg.submission_id,
        "nbtools.resumed_from": str(resumed if resumed is not None else 0)})
    job = _send(spec, cfg)
    items.append(Attempt(n, job.id, started=time.time(), resumed_from=resumed, gpus=_gpus(cfg)))
    _save(cfg, items)
    return job


def update(cfg, attempt: Attempt) -> None:
    """Store one attempt's fields back into the record."""
    items = read_attempts(cfg)
    items = [attempt if a.n == attempt.n else a for a in items]
    _save(cfg, items)
