"""Follow a run and resubmit it when a retry can fix what killed it (spot preemption, a lost node, a transient NCCL
fault); never on CUDA OOM or a user error, where it stops and says what to change.

Why: on spot GPUs a multi-hour GRPO run loses nodes; the trainer already resumes from the newest complete
``step_N``, so what is missing is someone who notices, diagnoses, resubmits with a new submission id and keeps the
books (steps redone, GPU-hours lost). This is that loop, on Ray's Jobs API, the same on every backend; re-running
the cell re-attaches to the attempt in flight.

Example:
    >>> run = nbtools.launch.supervise(cfg, max_attempts=3)
    >>> run.attempts_table()[["n", "status", "cause", "resumed_from", "last_step", "steps_redone"]]
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Any

import pandas as pd

from nbtools import _paths
from nbtools._escape import html as _h
from nbtools.config import Experiment
from nbtools.errors import NotFoundError, NotReadyError
from nbtools.launch._attempts import Attempt, read_attempts, record_first, update
from nbtools.launch._diagnose import Cause, Diagnosis
from nbtools.launch._retry import finalize, resubmit
from nbtools.launch._submit import submit

__all__ = ["SupervisedRun", "supervise"]


@_paths.tidy_reprs
@dataclass
class SupervisedRun:
    """What ``supervise`` saw: the attempts (oldest first), the final status and, when it gave up, why.

    ``ok`` is True when the last attempt SUCCEEDED. ``costs`` is one row per lost attempt: steps redone and the
    GPU-hours spent since the checkpoint it was resumed from (GPUs × wall time of those steps).
    """

    experiment: str
    status: str
    attempts: list[Attempt]
    max_attempts: int
    diagnosis: Diagnosis | None = None  # of the last attempt when it did not succeed
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "SUCCEEDED"

    def attempts_table(self) -> pd.DataFrame:
        cols = ["n", "submission_id", "status", "cause", "retry", "resumed_from", "last_step", "steps_redone",
                "lost_s", "gpus", "gpu_hours_lost", "started", "ended"]
        return pd.DataFrame([{c: getattr(a, c) for c in cols} for a in self.attempts], columns=cols)

    @property
    def costs(self) -> pd.DataFrame:
        t = self.attempts_table()
        return t[t.steps_redone.notna()][["n", "cause", "steps_redone", "lost_s", "gpus", "gpu_hours_lost"]]

    def to_dict(self) -> dict[str, Any]:
        return {"experiment": self.experiment, "status": self.status, "ok": self.ok, "max_attempts": self.max_attempts,
                "attempts": [a.to_dict() for a in self.attempts], "note": self.note,
                "diagnosis": self.diagnosis.to_dict() if self.diagnosis else None}

    def __str__(self) -> str:
        lines = [f"{self.experiment}: {self.status} after {len(self.attempts)} attempt(s) (max {self.max_attempts})"]
        for a in self.attempts:
            cost = ""
            if a.steps_redone is not None:
                cost = f"; lost {a.steps_redone} step(s)"
                if a.lost_s is not None:
                    cost += f", {a.lost_s:.1f} s"
                if a.gpu_hours_lost is not None:
                    cost += f", {a.gpu_hours_lost:.3f} GPU-h"
            why = f" ({a.cause})" if a.cause and a.cause != Cause.SUCCEEDED else ""
            lines.append(f"  {a.n}. {a.submission_id}: {a.status}{why}, resumed from "
                         f"{a.resumed_from if a.resumed_from is not None else 'scratch'}, reached step "
                         f"{a.last_step if a.last_step is not None else '?'}{cost}")
        if self.note:
            lines.append(self.note)
        if self.diagnosis and not self.ok:
            lines.append(f"fix: {self.diagnosis.fix}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        color = "green" if self.ok else ("blue" if self.status == "RUNNING" else "red")
        table = self.attempts_table().drop(columns=["started", "ended"]).to_html(index=False, na_rep="")
        extra = f"<p>{_h(self.note)}</p>" if self.note else ""
        if self.diagnosis and not self.ok:
            extra += self.diagnosis._repr_html_()
        return (f"<b>supervised run {_h(self.experiment)}: <span style='color:{color}'>{_h(self.status)}</span>"
                f"</b> ({len(self.attempts)} of at most {self.max_attempts} attempts){table}{extra}")


class _HealthWatch:
    """While an attempt runs: check the run's health every ``every`` s; stop the job when it is unhealthy.

    Why: a run that learns nothing should stop billing within minutes, not when someone looks at the curves.
    """

    def __init__(self, cfg: Experiment, job, every: float, thresholds: dict | None, warmup: int):
        self.cfg, self.job, self.every, self.thresholds, self.warmup = cfg, job, every, thresholds, warmup
        self.report = None
        self.error = ""
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nbtools-health-watch", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join(timeout=max(30.0, self.every))

    def _loop(self) -> None:
        from nbtools import health, jobs, storage
        from nbtools.errors import NbtoolsError

        while not self._done.wait(self.every):
            try:
                if not storage.exists(self.cfg.logs_url):
                    continue
                report = health.check(self.cfg.logs_url, config=self.cfg, thresholds=self.thresholds,
                                      warmup=self.warmup)
            except Exception as e:  # noqa: BLE001 - a half-written step, or a check's bug: the watch must outlive it
                self.error = f"{type(e).__name__}: {e}"
                continue
            if report.status == "unhealthy":
                self.report = report
                with contextlib.suppress(NbtoolsError, OSError):
                    jobs.attach(self.cfg.dashboard_url, self.job.id).stop(wait=False)
                return


class _StallWatch:
    """While an attempt runs: every ``every`` s ask ``launch.stall``; when stalled, write the evidence bundle, stop
    the job and keep the verdict.

    Why: a hung run holds its GPUs until someone looks; its stacks must be read before it is stopped.
    """

    def __init__(self, cfg: Experiment, job, every: float):
        self.cfg, self.job, self.every = cfg, job, every
        self.verdict = None
        self.error = ""
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nbtools-stall-watch", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join(timeout=max(120.0, self.every))

    def _loop(self) -> None:
        from nbtools import jobs
        from nbtools.errors import NbtoolsError
        from nbtools.launch._evidence import collect, write_bundle

        while not self._done.wait(self.every):
            try:
                v, files = collect(self.cfg, self.job.id)
            except (NbtoolsError, OSError, ValueError) as e:
                self.error = f"{type(e).__name__}: {e}"
                continue
            if v.status != "stalled":
                continue
            with contextlib.suppress(NbtoolsError, OSError):
                write_bundle(self.cfg, v, files)
            self.verdict = v
            with contextlib.suppress(NbtoolsError, OSError):
                jobs.attach(self.cfg.dashboard_url, self.job.id).stop(wait=False)
            return


def _stalled(attempt: Attempt, v) -> Attempt:
    """Record why the supervisor stopped a stuck attempt (the verdict's cause, evidence, fix and bundle)."""
    attempt.cause, attempt.retry = v.cause if v.cause in (Cause.HANG.value, Cause.DEADLOCK.value, Cause.LOST_NODE.value) \
        else Cause.HANG.value, False
    attempt.evidence = "\n".join([f"stopped by supervise(stop_when_stalled=True): {v.headline()}", v.evidence]
                                  + [f"rank {r.rank}: {r.phase}: {r.summary()}" for r in v.ranks]
                                  + ([f"evidence bundle: {v.bundle}"] if v.bundle else []))
    attempt.fix = v.fix
    return attempt


def _health_args(every, warmup) -> int:
    """Refuse a health period that is not a finite number of seconds, 1 or more, and a negative warm-up."""
    import math

    from nbtools.errors import ConfigError, Fix
    from nbtools.health import WARMUP_STEPS

    problems = []
    if isinstance(every, bool) or not isinstance(every, int | float) or not math.isfinite(every) or every < 1:
        problems.append(f"health_every: expected seconds between health checks, 1 or more, got {every!r}")
    warmup = WARMUP_STEPS if warmup is None else warmup
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        problems.append(f"health_warmup: expected a whole number of steps, 0 or more, got {warmup!r}")
    if problems:
        raise ConfigError(problems, fix=Fix("e.g. health_every=60, health_warmup=10",
                                            cli="e.g. --health-every 60 --health-warmup 10"))
    return warmup


def _unhealthy(attempt: Attempt, report) -> Attempt:
    """Record why the supervisor stopped the attempt (its cause survives ``finalize``, which keeps a set cause)."""
    bad = report.unhealthy
    attempt.cause, attempt.retry = Cause.UNHEALTHY.value, False
    attempt.evidence = "\n".join([f"stopped by supervise(stop_when_unhealthy=True): {report.summary()}"]
                                  + [f"{c.check}: {c.message}" for c in bad])
    attempt.fix = "; ".join(f"{c.check}: {c.fix}" for c in bad) + " — then launch again"
    return attempt


def supervise(cfg: Experiment, *, max_attempts: int = 3, timeout: float | None = None, echo: bool = False,
              stop_when_unhealthy: bool = False, health_every: float = 60.0,
              health_thresholds: dict | None = None, health_warmup: int | None = None,
              stop_when_stalled: bool = False, stall_every: float = 60.0) -> SupervisedRun:
    """Submit (or re-attach to) the run, follow it, and resubmit from the newest ``step_N`` when a retry can help.

    Each ended attempt is diagnosed (``nbtools.launch.diagnose``) and recorded beside the logs. Preemption, a lost
    node and NCCL faults are retried until ``max_attempts`` submissions; CUDA OOM, a Python error or a stop by the
    user end supervision with the fix. Reaching ``timeout`` returns with the attempt still RUNNING (call again to
    continue following it).

    Args:
        cfg: the experiment.
        max_attempts: submissions in all, the first included.
        timeout: seconds to follow in this call (None: until the run ends).
        echo: print the job's log lines while following.
        stop_when_unhealthy: check the run's health (``nbtools.health.check``) every ``health_every`` seconds and
            stop it when a check is unhealthy; the attempt is recorded with cause ``unhealthy`` and the findings
            (``diagnose`` reports them) and is not retried.
        health_every: seconds between health checks (1 or more: each check reads the run's logs, on gs:// too).
        health_thresholds: thresholds for ``nbtools.health.check`` (default: ``nbtools.health.CHECKS``').
        health_warmup: training steps before a threshold finding may stop the run (default
            ``nbtools.health.WARMUP_STEPS``); NaN/inf values stop it at once.
        stop_when_stalled: every ``stall_every`` seconds ask ``nbtools.launch.stall`` whether the run is stuck (no
            new step for ``cfg.stall.k`` x its median step time, at least ``cfg.stall.floor_s``); when it is, write
            the evidence bundle, stop the job and record the verdict (cause ``hang``/``deadlock``, the straggling
            rank and its phase, the fix); not retried.
        stall_every: seconds between stall checks.

    Raises:
        LintError: the first submission is refused by lint (as ``launch.submit``).

    Example:
        >>> run = nbtools.launch.supervise(cfg, max_attempts=3)
        >>> run.ok, [a.cause for a in run.attempts]
        (True, ['preempted', 'succeeded'])
    """
    from nbtools import jobs

    if not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1:
        from nbtools.errors import ConfigError, Fix

        raise ConfigError(f"max_attempts: expected a whole number, 1 or more, got {max_attempts!r}",
                          fix=Fix("e.g. max_attempts=3", cli="e.g. --max-attempts 3"))
    if stop_when_unhealthy:
        health_warmup = _health_args(health_every, health_warmup)
    if stop_when_stalled and (isinstance(stall_every, bool) or not isinstance(stall_every, int | float)
                              or not 1 <= stall_every < float("inf")):
        from nbtools.errors import ConfigError, Fix

        raise ConfigError(f"stall_every: expected seconds between stall checks, 1 or more, got {stall_every!r}",
                          fix=Fix("e.g. stall_every=60", cli="e.g. --stall-every 60"))
    deadline = None if timeout is None else time.monotonic() + timeout
    items = read_attempts(cfg)
    job, made = None, 1  # attempts followed by this call (a re-attached one counts): a bound whatever the record says
    if not items:
        job = submit(cfg)
        items = record_first(cfg, job)
    else:
        with contextlib.suppress(NotFoundError):  # gone with a restarted cluster: finalize records it as LOST
            job = jobs.attach(cfg.dashboard_url, items[-1].submission_id)
    while True:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        watch = (_HealthWatch(cfg, job, health_every, health_thresholds, health_warmup)
                 if stop_when_unhealthy and job else None)
        stall = _StallWatch(cfg, job, stall_every) if stop_when_stalled and job else None
        try:
            with watch or contextlib.nullcontext(), stall or contextlib.nullcontext():
                if job is not None:
                    jobs.follow_with_progress(job, total_steps=cfg.grpo.max_num_steps, timeout=remaining, echo=echo,
                                              raise_on_failure=False)
        except NotReadyError:
            items = read_attempts(cfg)
            return SupervisedRun(cfg.name, job.status().value, items, max_attempts,
                                 note=f"still running after {timeout:g} s; call supervise again to keep following")
        last = read_attempts(cfg)[-1]
        if watch is not None and watch.report is not None:
            last = _unhealthy(last, watch.report)
        if stall is not None and stall.verdict is not None:
            last = _stalled(last, stall.verdict)
        current = finalize(cfg, last, job)
        update(cfg, current)
        if current.status == "SUCCEEDED":
            return SupervisedRun(cfg.name, "SUCCEEDED", read_attempts(cfg), max_attempts)
        d = Diagnosis(Cause(current.cause), current.evidence, current.fix, current.submission_id, current.status)
        if not d.retry:
            return SupervisedRun(cfg.name, current.status, read_attempts(cfg), max_attempts, d,
                                 note=f"not retried: {d.cause} is not something a new attempt fixes")
        if current.n >= max_attempts or made >= max_attempts:
            return SupervisedRun(cfg.name, current.status, read_attempts(cfg), max_attempts, d,
                                 note=f"gave up after {max(current.n, made)} attempt(s) (max_attempts={max_attempts}); "
                                      "nbtools.launch.resubmit(cfg) submits one more")
        job, made = resubmit(cfg), made + 1
