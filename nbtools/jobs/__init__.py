"""Submit, watch and stop Ray jobs through Ray's Jobs API: one code path for local, gke and ray backends.

The only thing that differs between backends is the dashboard address (``cfg.dashboard_url``): the local head,
the GKE head's port-forward, or any Ray address. Submission ids come from the caller (``cfg.submission_id`` =
name + config hash), so submitting again re-attaches to the job instead of starting it twice.

Example:
    >>> job = nbtools.jobs.submit(cfg.dashboard_url, entrypoint="python -c 'print(1)'", submission_id=cfg.submission_id)
    >>> for line in job.follow():
    ...     print(line)
    >>> job.wait(timeout=600)
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pandas as pd

from nbtools import _paths, _rayfs, _table
from nbtools._escape import html as _h
from nbtools.config import Experiment
from nbtools.errors import Fix, JobFailedError, NotReadyError
from nbtools.jobs._client import address_of, client_for, forget, is_missing, not_found
from nbtools.jobs._tail import LogPump

__all__ = ["Job", "StoppedJobs", "submit", "attach", "list_jobs", "stop_jobs", "logs", "follow_with_progress"]

_LOG_TAIL_LINES = 40
_JOBS: dict[tuple[str, str], Job] = {}  # one Job object per (address, id): follow() stays resumable across cells


@_paths.tidy_reprs
class Job:
    """A Ray job on some cluster, addressed by its submission id; every method asks the cluster afresh.

    Example:
        >>> job = nbtools.jobs.attach(cfg.dashboard_url, cfg.submission_id)
        >>> job.status()
        <JobStatus.RUNNING: 'RUNNING'>
    """

    def __init__(self, address: str, submission_id: str, *, entrypoint: str = "", reattached: bool = False):
        self.address, self.id, self.entrypoint = address, submission_id, entrypoint
        self.reattached = reattached  # True when submit() found the id already on the cluster
        self._pump: LogPump | None = None
        self._lock = threading.Lock()
        self.last_step: tuple[int, int] | None = None  # (k, N) of the last "Step k/N" line seen by follow_with_progress
        self._seen_end = False

    def __repr__(self) -> str:
        return f"Job(id={self.id!r}, address={self.address!r})"

    # -- state ------------------------------------------------------------------------------------------
    def info(self):
        """Ray's ``JobDetails`` (status, message, start/end time, metadata, entrypoint)."""
        info = _call(self.address, lambda c: c.get_job_info(self.id), job_id=self.id)
        if info.status.is_terminal() and not self._seen_end:  # what it wrote is read afresh from now on
            self._seen_end = True
            _rayfs.forget()
        return info

    def status(self):
        """The job's ``ray.job_submission.JobStatus`` (``.is_terminal()`` tells whether it ended)."""
        return self.info().status

    def logs(self) -> str:
        """The whole log so far (for following it live use :meth:`follow`)."""
        return _call(self.address, lambda c: c.get_job_logs(self.id), job_id=self.id)

    def log_tail(self, n: int = _LOG_TAIL_LINES) -> str:
        """The last ``n`` lines of the log."""
        try:
            return "\n".join(self.logs().splitlines()[-n:])
        except Exception as e:  # a tail is a courtesy inside error messages; never mask the real error
            return f"(log unavailable: {type(e).__name__})"

    # -- waiting ----------------------------------------------------------------------------------------
    def wait(self, timeout: float, *, raise_on_failure: bool = True, progress: bool = False):
        """Block until the job ends; back off 0.1 s → 2 s between status checks, never past the deadline.

        Args:
            timeout: seconds to wait at most.
            raise_on_failure: raise JobFailedError when it ends FAILED or STOPPED.
            progress: show a tqdm status line while waiting.

        Raises:
            NotReadyError: still not finished at the deadline (carries the last status and Ray's message).
            JobFailedError: ended FAILED/STOPPED (status, message and the last log lines).

        Example:
            >>> job.wait(timeout=900)
            <JobStatus.SUCCEEDED: 'SUCCEEDED'>
        """
        from nbtools._progress import tqdm

        deadline, delay = time.monotonic() + timeout, 0.1
        with tqdm(desc=f"job {self.id}", total=None, disable=not progress, leave=False, bar_format="{desc}: {postfix} [{elapsed}]") as bar:
            while True:
                info = self.info()
                bar.set_postfix_str(str(info.status.value))
                if info.status.is_terminal():
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise NotReadyError(
                        f"job {self.id!r} is still {info.status.value} after {timeout:g} s",
                        reason=info.message or "", events=self.log_tail(10).splitlines(),
                        fix=Fix("wait longer (job.wait(timeout=...)), watch it with job.follow(), or stop it with job.stop()",
                            cli="follow it longer (`nbtools launch EXPERIMENT.yaml --follow --timeout SECONDS`), or stop it "
                                "(`nbtools jobs stop EXPERIMENT.yaml --id ID`)"),
                    )
                time.sleep(min(delay, remaining))
                delay = min(delay * 2, 2.0)
        if raise_on_failure:
            self._raise_if_failed(info)
        return info.status

    def _raise_if_failed(self, info) -> None:
        if info.status.value in ("FAILED", "STOPPED"):
            message = (info.message or "").split(", last available logs")[0]  # the tail follows anyway
            raise JobFailedError(
                self.id, info.status.value, message, self.log_tail(),
                fix=Fix(f"read the whole log with job.logs() (or nbtools.jobs.attach({self.address!r}, {self.id!r}).logs()); "
                        "fix the cause and submit again with a changed config (a new submission id)",
                        cli=f"read the whole log (`nbtools jobs logs EXPERIMENT.yaml --id {self.id}`); fix the cause and "
                            "launch again with a changed config (a new submission id)"),
            )

    # -- logs -------------------------------------------------------------------------------------------
    def follow(self, *, timeout: float | None = None) -> Iterator[str]:
        """Yield log lines as the job writes them, until it ends; interruptible and resumable.

        Stop it any time (KeyboardInterrupt, ``break``): the job keeps running, and the next ``follow()`` on this
        job continues after the last line already yielded (no repeats, no gaps).

        Args:
            timeout: seconds after which to stop following with NotReadyError (the job keeps running).

        Example:
            >>> for line in job.follow():
            ...     print(line)
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            if self._pump is None:
                self._pump = LogPump(client_for(self.address), self.id)
            pump = self._pump
        reconnects, backoff = 0, 0.5
        if not pump.ended:
            self.status()  # NotFoundError / NotReadyError early, with the fix, rather than from inside the thread
            pump.start()
        try:
            while True:
                wait = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
                line = pump.get(timeout=wait)
                if line is not None:
                    yield line
                    continue
                if deadline is not None and time.monotonic() >= deadline:
                    info = self.info()
                    raise NotReadyError(
                        f"stopped following job {self.id!r} after {timeout:g} s; it is still {info.status.value}",
                        reason=info.message or "", fix=Fix("call job.follow() again to continue where this stopped, or job.wait(timeout=...)",
                                                        cli="run `nbtools launch EXPERIMENT.yaml --follow` again: it re-attaches"),
                    )
                if pump.running:
                    continue
                if pump.ended and pump.pending() == 0:
                    _rayfs.forget()  # it ended: what it wrote is read afresh
                    return
                if pump.error is not None:  # the websocket dropped: reconnect, skipping what was delivered
                    reconnects += 1
                    if reconnects > 5:
                        raise NotReadyError(
                            f"lost the log stream of job {self.id!r} {reconnects - 1} times", reason=repr(pump.error),
                            fix=Fix("check the cluster (notebook 02: nbtools.backends.get(cfg).up()); job.follow() resumes where it stopped",
                                    cli="check the cluster (`nbtools up EXPERIMENT.yaml --apply`); `nbtools launch EXPERIMENT.yaml --follow` re-attaches"),
                        )
                    time.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                    pump.start()
        finally:
            pump.stop()

    # -- control ----------------------------------------------------------------------------------------
    def stop(self, *, wait: bool = True, timeout: float = 60):
        """Ask Ray to stop the job (SIGTERM, then SIGKILL after Ray's grace period); optionally wait until it ended.

        Example:
            >>> job.stop()
            <JobStatus.STOPPED: 'STOPPED'>
        """
        _call(self.address, lambda c: c.stop_job(self.id), job_id=self.id)
        return self.wait(timeout, raise_on_failure=False) if wait else self.status()

    def _repr_html_(self) -> str:
        try:
            info = self.info()
            status, message = info.status.value, info.message or ""
            started = _ts(info.start_time)
        except Exception as e:
            status, message, started = "unknown", f"{type(e).__name__}: {e}", None
        color = {"SUCCEEDED": "green", "FAILED": "red", "STOPPED": "orange", "RUNNING": "blue"}.get(status, "gray")
        rows = [("id", self.id), ("address", self.address), ("entrypoint", self.entrypoint[:300]),
                ("started", str(started or "")), ("message", message[:300])]
        if self.reattached:
            rows.append(("note", "re-attached: this submission id already existed, nothing was submitted twice"))
        body = "".join(f"<tr><th style='text-align:left'>{k}</th><td>{_h(v)}</td></tr>" for k, v in rows if v)
        return f"<b>Ray job</b> <span style='color:{color}'>{status}</span><table>{body}</table>"


# -- module functions ---------------------------------------------------------------------------------------


def submit(
    address: Any,
    *,
    entrypoint: str,
    submission_id: str,
    runtime_env: dict | None = None,
    metadata: dict[str, str] | None = None,
    entrypoint_num_cpus: float | None = None,
    entrypoint_num_gpus: float | None = None,
) -> Job:
    """Submit a job, or re-attach when ``submission_id`` already exists on that cluster (never twice).

    Args:
        address: the dashboard URL (``cfg.dashboard_url``), or a ClusterHandle.
        entrypoint: the shell command the job runs.
        submission_id: caller-chosen id (``cfg.submission_id``); the key that makes re-submitting safe.
        runtime_env: Ray runtime env (working_dir, env_vars, ...). Never put secrets in it.
        metadata: string tags stored with the job.
        entrypoint_num_cpus: CPUs reserved for the entrypoint process.
        entrypoint_num_gpus: GPUs reserved for the entrypoint process; Ray then runs it on a node with that many free
            GPUs (without it, on the head, which on KubeRay has none and its own local disk).

    Example:
        >>> job = nbtools.jobs.submit(cfg.dashboard_url, entrypoint="python -c 'print(42)'", submission_id="demo-1")
        >>> job.wait(timeout=120)
        <JobStatus.SUCCEEDED: 'SUCCEEDED'>
    """
    url = address_of(address)
    existing = _lookup(url, submission_id)
    if existing is not None:
        return _job(url, submission_id, existing.entrypoint, reattached=True)
    kwargs = {k: v for k, v in {"runtime_env": runtime_env, "metadata": metadata, "entrypoint_num_cpus": entrypoint_num_cpus,
                                "entrypoint_num_gpus": entrypoint_num_gpus}.items() if v is not None}
    _rayfs.forget()  # the job may change the cluster's files: no answer read before it is kept past this point
    try:
        _call(url, lambda c: c.submit_job(entrypoint=entrypoint, submission_id=submission_id, **kwargs))
    except RuntimeError as e:  # a concurrent submit won the race: attach to that one
        if "already exists" not in str(e):
            raise
        return _job(url, submission_id, entrypoint, reattached=True)
    return _job(url, submission_id, entrypoint, reattached=False)


def attach(address: Any, submission_id: str) -> Job:
    """The job with this submission id on that cluster.

    Raises:
        NotFoundError: no such id (the message lists the ids the cluster knows).

    Example:
        >>> job = nbtools.jobs.attach(cfg.dashboard_url, cfg.submission_id)
    """
    url = address_of(address)
    info = _lookup(url, submission_id)
    if info is None:
        raise not_found(url, submission_id, list(list_jobs(url)["submission_id"]))
    return _job(url, submission_id, info.entrypoint)


def list_jobs(address: Any) -> pd.DataFrame:
    """Submitted jobs on that cluster, oldest first: submission_id, status, entrypoint, start/end time, message.

    Example:
        >>> nbtools.jobs.list_jobs(cfg.dashboard_url)
    """
    url = address_of(address)
    rows = []
    for d in _call(url, lambda c: c.list_jobs()):
        if getattr(d.type, "value", str(d.type)) != "SUBMISSION" or not d.submission_id:
            continue
        rows.append({
            "submission_id": d.submission_id, "status": d.status.value, "entrypoint": d.entrypoint,
            "start_time": _ts(d.start_time), "end_time": _ts(d.end_time), "message": d.message or "",
        })
    df = pd.DataFrame(rows, columns=["submission_id", "status", "entrypoint", "start_time", "end_time", "message"])
    return _table.table(df.sort_values("start_time", kind="stable").reset_index(drop=True),
                        when_empty=f"no job submitted to the cluster at {_paths.shown(url)} yet")


class StoppedJobs(dict):
    """``{submission_id: final status}`` of the jobs :func:`stop_jobs` stopped; shown as a one-line verdict."""

    def __init__(self, statuses=(), *, prefix: str = "", answered: bool = True, dry_run: bool = False):
        super().__init__(statuses)
        self.prefix, self.answered, self.dry_run = prefix, answered, dry_run

    def __repr__(self) -> str:
        which = f"of {self.prefix!r} " if self.prefix else ""
        if not self.answered:
            return f"no job {which}can be running: no Ray cluster answers"
        if not self:
            return f"no job {which}was running: nothing to stop"
        if self.dry_run:
            return (f"dry run: would stop {len(self)} running job(s): "
                    + ", ".join(f"{k} ({getattr(v, 'value', v)})" for k, v in self.items()) + "; nothing was stopped")
        return f"stopped {len(self)} job(s): " + ", ".join(f"{k} ({getattr(v, 'value', v)})" for k, v in self.items())

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(repr(self))


def stop_jobs(address: Experiment | Any, *, prefix: str | None = None, dry_run: bool = False) -> StoppedJobs:
    """Stop every unfinished job whose id starts with ``prefix``; a cluster that does not answer runs nothing.

    ``dry_run=True`` stops nothing and returns the jobs it would stop, with their current status (notebook 09's
    default).

    ``address`` is a dashboard URL or handle, or the experiment: then its cluster and, unless ``prefix`` is given,
    every job of the experiment (``<name>-``: its training attempts, merges and evaluations).

    Returns the final status per stopped id (a dict; empty when nothing was running or nothing answers).

    Example:
        >>> nbtools.jobs.stop_jobs(cfg)
        no job of 'local-rehearsal-' was running: nothing to stop
    """
    if prefix is None:
        prefix = f"{address.name}-" if isinstance(address, Experiment) else ""
    try:
        df = list_jobs(address)
    except NotReadyError:
        return StoppedJobs(prefix=prefix, answered=False)
    mine = df[df.submission_id.str.startswith(prefix) & ~df.status.isin(["SUCCEEDED", "FAILED", "STOPPED"])]
    if dry_run:
        return StoppedJobs(dict(zip(mine.submission_id, mine.status, strict=True)), prefix=prefix, dry_run=True)
    return StoppedJobs({sid: attach(address, sid).stop() for sid in mine.submission_id}, prefix=prefix)


def logs(job_or_id: Job | str, address: Any | None = None) -> str:
    """The whole log of a job (a Job, or an id plus the address; an id alone works for jobs seen in this session).

    Example:
        >>> print(nbtools.jobs.logs(cfg.submission_id, cfg.dashboard_url)[-2000:])
    """
    if isinstance(job_or_id, Job):
        return job_or_id.logs()
    if address is None:
        known = [j for (a, i), j in _JOBS.items() if i == job_or_id]
        if len(known) != 1:
            from nbtools.errors import NotFoundError

            raise NotFoundError(
                f"job id {job_or_id!r} was {'seen on several clusters' if known else 'not seen'} in this session",
                fix=Fix(f"pass the cluster: nbtools.jobs.logs({job_or_id!r}, cfg.dashboard_url)",
                        cli=f"name the experiment: `nbtools jobs logs EXPERIMENT.yaml --id {job_or_id}`"),
            )
        return known[0].logs()
    return attach(address, job_or_id).logs()


def follow_with_progress(
    job: Job,
    *,
    total_steps: int | None,
    step_pattern: str = r"Step (\d+)/(\d+)",
    timeout: float | None = None,
    echo: bool = False,
    raise_on_failure: bool = True,
    tail: int = 8,
):
    """Follow a job's log and drive a tqdm bar from NeMo-RL's ``===== Step k/N =====`` lines; return its status.

    Interrupting leaves the job running; calling again continues the bar and the log where they stopped.

    Args:
        job: the job to follow.
        total_steps: the bar's total; None takes N from the first step line.
        step_pattern: regex with groups (k, N).
        timeout: stop following after this many seconds (NotReadyError; the job keeps running).
        echo: also print every log line.
        tail: in a notebook, the log's last ``tail`` lines under the bar, updated as they come (0: none).
        raise_on_failure: raise JobFailedError (with the log tail) when the job ends FAILED/STOPPED.

    Example:
        >>> nbtools.jobs.follow_with_progress(job, total_steps=cfg.grpo.max_num_steps)
        <JobStatus.SUCCEEDED: 'SUCCEEDED'>
    """
    from nbtools._progress import LogTail, tqdm

    pattern = re.compile(step_pattern)
    log_tail = LogTail(tail, title=f"{job.id} log") if tail else None
    done = job.last_step[0] - 1 if job.last_step else 0  # "Step k/N" is printed when step k starts
    with tqdm(total=total_steps or (job.last_step[1] if job.last_step else None), initial=max(done, 0), desc=job.id, unit="step") as bar:
        for line in job.follow(timeout=timeout):
            if echo:
                print(line)
            if log_tail is not None:
                log_tail.add(line)
            m = pattern.search(line)
            if m:
                k, n = int(m.group(1)), int(m.group(2))
                job.last_step = (k, n)
                if bar.total is None:
                    bar.total = total_steps or n
                bar.update(max(0, k - 1 - bar.n))
        info = job.info()
        if info.status.value == "SUCCEEDED" and job.last_step:
            bar.update(max(0, job.last_step[0] - bar.n))
        bar.set_postfix_str(info.status.value)
    if log_tail is not None:
        log_tail.show()
    if raise_on_failure:
        job._raise_if_failed(info)
    return info.status


# -- helpers ------------------------------------------------------------------------------------------------


def _job(url: str, submission_id: str, entrypoint: str, *, reattached: bool = False) -> Job:
    """One Job object per (address, id) in this process, so a re-run cell resumes the same log position."""
    job = _JOBS.get((url, submission_id))
    if job is None:
        job = _JOBS[(url, submission_id)] = Job(url, submission_id, entrypoint=entrypoint)
    job.entrypoint = entrypoint or job.entrypoint
    job.reattached = reattached
    return job


def _lookup(url: str, submission_id: str):
    """JobDetails for the id, or None when the cluster does not know it."""
    try:
        return _call(url, lambda c: c.get_job_info(submission_id))
    except RuntimeError as e:
        if is_missing(e):
            return None
        raise


def _call(url: str, fn, *, job_id: str | None = None):
    """Run ``fn(client)``; connection failures become NotReadyError, "no such job" becomes NotFoundError."""
    client = client_for(url)
    try:
        return fn(client)
    except OSError as e:  # requests' ConnectionError/Timeout: the cluster went away
        forget(url)
        raise NotReadyError(
            f"the Ray Jobs API at {url} did not answer", reason=str(e).splitlines()[0] if str(e) else type(e).__name__,
            fix=Fix("check that the cluster is up (notebook 02: nbtools.backends.get(cfg).up()) and the address/port-forward is right",
                    cli="check that the cluster is up (`nbtools up EXPERIMENT.yaml --apply`) and the address/port-forward is right"),
        ) from None
    except RuntimeError as e:
        if job_id is not None and is_missing(e):
            raise not_found(url, job_id, list(list_jobs(url)["submission_id"])) from None
        raise


def _ts(ms: int | None):
    return pd.to_datetime(ms, unit="ms", utc=True) if ms else pd.NaT
