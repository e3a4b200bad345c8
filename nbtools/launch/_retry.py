"""Between two attempts: read the ended one back from the cluster (status, steps, why it ended) and submit the next.

Why: this is the I/O around the pure diagnosis (``_diagnose``) and the attempts record (``_attempts``): Ray's job
status and log tail, the pods' Kubernetes events and conditions (``backends.get(cfg).events``), then a submission
with its own id. ``supervise`` calls it in a loop; ``resubmit`` and ``diagnose`` are the same steps by hand.

Example:
    >>> nbtools.launch.diagnose(cfg).cause          # why the latest attempt ended
    >>> job = nbtools.launch.resubmit(cfg)           # attempt 2 (3, …), resuming from the newest step_N
"""

from __future__ import annotations

import dataclasses
import time

from nbtools.config import Experiment
from nbtools.errors import ConfigError, ConflictError, Fix, NotFoundError
from nbtools.launch._attempts import (
    Attempt,
    attempt_id,
    charge,
    cluster_gpus,
    newest_checkpoint,
    read_attempts,
    record_first,
    save,
    steps_from_log,
)
from nbtools.launch._diagnose import Cause, Diagnosis, diagnose_log
from nbtools.launch._submit import build, send

__all__ = ["attach", "diagnose", "finalize", "resubmit"]


def diagnose(cfg_or_address: Experiment | str, submission_id: str | None = None, *, events: list[str] | None = None,
             tail: int = 400) -> Diagnosis:
    """Diagnose a finished job from Ray's status, its log tail and (GKE) the pods' Kubernetes events and conditions.

    Args:
        cfg_or_address: the experiment (its dashboard and backend are used) or a dashboard address.
        submission_id: the job (default: the experiment's latest attempt, else ``cfg.submission_id``).
        events: Kubernetes events to weigh (default: ``nbtools.backends.get(cfg).events(...)`` of the job's run
            time, for an experiment).
        tail: log lines read from the end.

    Raises:
        NotFoundError: no job with that id on the cluster.

    Example:
        >>> nbtools.launch.diagnose(cfg).cause
        <Cause.PREEMPTED: 'preempted'>
    """
    from nbtools import jobs

    cfg = None if isinstance(cfg_or_address, str) else cfg_or_address
    address = cfg_or_address if cfg is None else cfg.dashboard_url
    recorded = read_attempts(cfg) if cfg is not None else []
    if submission_id is None:
        if cfg is None:
            raise ConfigError("diagnose: a dashboard address needs a submission id",
                              fix=Fix("pass submission_id=...", cli="pass SUBMISSION_ID"))
        submission_id = recorded[-1].submission_id if recorded else cfg.submission_id
    job = jobs.attach(address, submission_id)
    # stopped by the supervisor because the run was not learning or was stuck: the record says why
    stopped = (Cause.UNHEALTHY, Cause.HANG, Cause.DEADLOCK)
    mine = [a for a in recorded if a.submission_id == submission_id and a.cause in stopped]
    if mine:
        cause = Cause(mine[-1].cause)
        return Diagnosis(cause, mine[-1].evidence, mine[-1].fix or cause.fix, submission_id, job.status().value)
    info = job.info()
    if events is None and cfg is not None:
        from nbtools import backends

        start = info.start_time / 1000 if info.start_time else None
        end = info.end_time / 1000 + 300 if info.end_time else None  # the node's events may trail the job's end
        events = backends.get(cfg).events(since=start, until=end)
    message = (info.message or "").split(", last available logs")[0]
    return diagnose_log(job.log_tail(tail), status=info.status.value, message=message, events=events or [],
                        submission_id=submission_id)


def finalize(cfg: Experiment, attempt: Attempt, job=None) -> Attempt:
    """Fill an ended attempt from the cluster: status, times, last step and (when it did not succeed) diagnosis."""
    from nbtools import jobs

    try:
        job = job or jobs.attach(cfg.dashboard_url, attempt.submission_id)
    except NotFoundError:  # the cluster was replaced or its head restarted: the job went with it
        if not attempt.terminal:
            attempt.status, attempt.cause, attempt.retry = "LOST", Cause.LOST_NODE.value, True
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
        attempt.cause, attempt.retry, attempt.evidence, attempt.fix = Cause.SUCCEEDED.value, False, "", ""
    elif not attempt.cause:
        d = diagnose(cfg, attempt.submission_id)
        attempt.cause, attempt.retry, attempt.evidence, attempt.fix = d.cause.value, d.retry, d.evidence, d.fix
    return attempt


def resubmit(cfg: Experiment, *, force: bool = False):
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

    items = read_attempts(cfg)
    if not items:
        try:
            first = jobs.attach(cfg.dashboard_url, cfg.submission_id)
        except NotFoundError:
            raise NotFoundError(f"expected a first attempt {cfg.submission_id!r} to retry, found none on "
                                f"{cfg.dashboard_url}", fix=Fix("launch it first: nbtools.launch.submit(cfg) (or "
                                "nbtools.launch.supervise(cfg))", cli="launch it first: `nbtools launch EXPERIMENT.yaml` "
                                "(or with --supervise)")) from None
        items = record_first(cfg, first)
    last = items[-1] = finalize(cfg, items[-1])
    save(cfg, items)  # the diagnosis is kept even when this refuses to resubmit
    if not last.terminal:
        raise ConflictError(f"attempt {last.n} ({last.submission_id}) is still {last.status}",
                            fix=Fix("follow it (nbtools.launch.follow(cfg, job)) or stop it (job.stop()) before "
                                    "submitting another attempt", cli="follow it (`nbtools launch EXPERIMENT.yaml "
                                    f"--follow`) or stop it (`nbtools jobs stop EXPERIMENT.yaml --id {last.submission_id}`) "
                                    "before submitting another attempt"))
    if last.status == "SUCCEEDED" and not force:
        raise ConflictError(f"attempt {last.n} ({last.submission_id}) already SUCCEEDED; nothing to resume",
                            fix="change the config (e.g. more grpo.max_num_steps) to train further")
    if last.retry is False and not force:
        raise ConflictError(f"attempt {last.n} ended with cause {last.cause!r}, which a retry does not fix",
                            fix=Fix(f"{last.fix} (or pass force=True to retry anyway)",
                                    cli=f"the diagnosis names the fix (`nbtools diagnose {last.submission_id} --experiment "
                                        "EXPERIMENT.yaml`); or pass --force to retry anyway"))
    resumed = newest_checkpoint(cfg)
    charge(last, resumed)
    n = last.n + 1
    spec = build(cfg)
    spec = dataclasses.replace(spec, submission_id=attempt_id(cfg, n), metadata={
        **spec.metadata, "nbtools.attempt": str(n), "nbtools.run": cfg.submission_id,
        "nbtools.resumed_from": str(resumed if resumed is not None else 0)})
    job = send(spec, cfg)
    items.append(Attempt(n, job.id, started=time.time(), resumed_from=resumed, gpus=cluster_gpus(cfg)))
    save(cfg, items)
    return job


def attach(cfg: Experiment):
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
