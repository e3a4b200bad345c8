"""Is a running job stuck, and where: progress from the run's own files, then a verdict from its ranks' stacks.

Why: a hung GRPO run burns its GPUs until someone looks. A run is *stalled* when nothing new has appeared in its
logs and checkpoints (a step's dump, a TensorBoard flush, a checkpoint) for more than ``stall.k`` × its median step
time and at least ``stall.floor_s`` (``stall.startup_s`` before its first step), or when its job is RUNNING while a Ray
actor of it is dead. The step times are read from the files' own times (``train_data_step{N}.jsonl``, verl's
``{N}.jsonl``, ``step_N`` / ``global_step_N``), so one rule serves every trainer. The verdict then reads each rank's
phase from its stack (``_stacks``): the stragglers are the ranks outside the collective the others wait in; the
cause is ``hang`` (a straggler, or ranks that stopped with none waiting), ``deadlock`` (every rank waits in a
collective) or, for a job that ended, ``diagnose``'s cause.

``progress`` does the storage I/O; ``judge`` is pure (progress, job status, stacks → ``StallVerdict``).

Example:
    >>> v = nbtools.launch.stall(cfg)          # one-shot: progress, stacks, bundle, verdict
    >>> v.status, v.stragglers, v.cause
    ('stalled', [1], 'hang')
"""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nbtools import _paths
from nbtools._escape import html as _h
from nbtools.launch._diagnose import Cause
from nbtools.launch._stacks import RankStack

__all__ = ["Progress", "StallVerdict", "progress", "judge", "judge_pods", "STATUSES", "STALL_CAUSES"]

STATUSES = ("running", "stalled", "ended", "not-found")
STALL_CAUSES = tuple(c.value for c in Cause)  # diagnose's vocabulary, hang and deadlock included
_STEP_NAME = re.compile(r"(?:^|[_/])(?:global_)?step_?(\d+)(?:\.jsonl)?$|(?:^|/)(\d+)\.jsonl$")


@dataclass(frozen=True)
class Progress:
    """What a run has written: the newest file time, and when each step's first file appeared."""

    newest: float | None  # Unix time of the newest file (None: nothing written yet)
    step_times: dict[int, float]  # step -> first appearance

    @property
    def last_step(self) -> int | None:
        return max(self.step_times) if self.step_times else None

    @property
    def median_step_s(self) -> float | None:
        """The median time between consecutive steps (None before two steps)."""
        steps = sorted(self.step_times)
        gaps = [self.step_times[b] - self.step_times[a] for a, b in zip(steps, steps[1:], strict=False) if b == a + 1]
        gaps = [g for g in gaps if g >= 0]
        return statistics.median(gaps) if gaps else None


def _mtime(d: dict) -> float | None:
    v = d.get("mtime", d.get("updated"))
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, datetime):
        return v.timestamp()
    if isinstance(v, str):
        try:
            return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def progress(urls: list[str]) -> Progress:
    """The run's progress marks under ``urls`` (its log and checkpoint directories; missing ones are skipped)."""
    from nbtools import storage

    newest, steps = None, {}
    for url in urls:
        if not storage.exists(url):
            continue
        fs, path = storage.filesystem(url)
        for name, d in fs.find(path, detail=True, withdirs=True).items():
            t = _mtime(d)
            if t is None or "nbtools-diagnosis" in name:  # our own bundles are not the run's progress
                continue
            newest = t if newest is None else max(newest, t)
            m = _STEP_NAME.search(name.rstrip("/"))
            if m:
                n = int(m.group(1) or m.group(2))
                steps[n] = min(steps.get(n, t), t)
    return Progress(newest, steps)


@_paths.tidy_reprs
@dataclass
class StallVerdict:
    """Is the job stuck, where (each rank's phase), who holds the others up, why, and what to do.

    ``status``: running | stalled | ended | not-found. ``stalled_for_s``: seconds since the run's last progress.
    ``ranks``: each rank's phase and stack summary. ``stragglers``: ranks outside the collective the others wait
    in (or that died). ``cause``: ``diagnose``'s vocabulary plus ``hang`` and ``deadlock``. ``bundle``: the
    evidence archive's URL (None when not collected).
    """

    experiment: str
    submission_id: str
    job_status: str
    status: str
    stalled_for_s: float | None
    threshold_s: float
    median_step_s: float | None
    last_step: int | None
    ranks: list[RankStack] = field(default_factory=list)
    stragglers: list[int] = field(default_factory=list)
    cause: str = "running"
    fix: str = ""
    evidence: str = ""
    bundle: str | None = None
    summary_url: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def stalled(self) -> bool:
        return self.status == "stalled"

    def to_dict(self) -> dict[str, Any]:
        return {"experiment": self.experiment, "submission_id": self.submission_id, "job_status": self.job_status,
                "status": self.status, "stalled_for_s": _round(self.stalled_for_s), "threshold_s": _round(self.threshold_s),
                "median_step_s": _round(self.median_step_s), "last_step": self.last_step,
                "ranks": [{"rank": r.rank, "pid": r.pid, "phase": r.phase, "collective": r.collective,
                           "stack": r.summary(), "source": r.source, "error": r.error} for r in self.ranks],
                "stragglers": self.stragglers, "cause": self.cause, "fix": self.fix, "evidence": self.evidence,
                "bundle": self.bundle, "summary": self.summary_url, "notes": self.notes}

    def headline(self) -> str:
        """One sentence: "rank 1 is in weight refit at step 4; ranks 0 wait for it in all_reduce"."""
        if self.status == "running" and not self.stragglers:
            return (f"{self.submission_id}: running (last step {self.last_step if self.last_step is not None else '-'}, "
                    f"quiet for {_secs(self.stalled_for_s)}, threshold {_secs(self.threshold_s)})")
        by = {r.rank: r for r in self.ranks}
        parts = []
        for s in self.stragglers:
            r = by.get(s)
            parts.append(f"rank {s} is in {r.phase}" + (f" ({r.error})" if r and r.error else "") if r else f"rank {s}")
        waiting = [r for r in self.ranks if r.collective and r.rank not in self.stragglers]
        if waiting:
            names = sorted({r.collective for r in waiting if r.collective})
            parts.append(f"rank(s) {', '.join(str(r.rank) for r in waiting)} wait in {'/'.join(names)}")
        where = f" at step {(self.last_step or 0) + 1}" if self.last_step is not None and self.status != "ended" else ""
        what = {"stalled": f"stalled for {_secs(self.stalled_for_s)}", "ended": f"ended {self.job_status}",
                "running": "running"}.get(self.status, self.status)
        return f"{self.submission_id}: {what}{where}, cause {self.cause}" + (f": {'; '.join(parts)}" if parts else "")

    def __str__(self) -> str:
        lines = [self.headline()]
        for r in self.ranks:
            mark = " <- straggler" if r.rank in self.stragglers else ""
            lines.append(f"  rank {r.rank if r.rank is not None else '?'} (pid {r.pid or '?'}): {r.phase}{mark}\n"
                         f"      {r.summary()}")
        lines += [f"  note: {n}" for n in self.notes]
        if self.fix:
            lines.append(f"fix: {self.fix}")
        if self.bundle:
            lines.append(f"evidence bundle: {self.bundle}" + (f"\nsummary: {self.summary_url}" if self.summary_url else ""))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        color = {"running": "green", "stalled": "red", "ended": "orange"}.get(self.status, "gray")
        rows = "".join(f"<tr><td>{r.rank}</td><td>{_h(r.phase)}{' (straggler)' if r.rank in self.stragglers else ''}"
                       f"</td><td><code>{_h(r.summary())}</code></td></tr>" for r in self.ranks)
        table = f"<table><tr><th>rank</th><th>phase</th><th>stack</th></tr>{rows}</table>" if rows else ""
        fix = f"<p><b>fix:</b> {_h(self.fix)}</p>" if self.fix else ""
        bundle = f"<p>evidence: <code>{_h(self.bundle)}</code></p>" if self.bundle else ""
        return f"<b style='color:{color}'>{_h(self.headline())}</b>{table}{fix}{bundle}"


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 1)


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f} s"


_RESUME = "stop the job (`nbtools jobs stop EXPERIMENT.yaml`) and launch again: it resumes from the newest complete step_N"
_PHASE_FIX = {
    "weight refit": "the weight refit from the trainer to the generation engine does not complete (NCCL timeouts in "
                    "refit: NVIDIA-NeMo/RL#2140, #1961, trl#2923): compare the NCCL/CUDA environment in the bundle across "
                    "nodes, run with NCCL_DEBUG=INFO, and check the straggler's GPU memory",
    "generation": "generation does not return on the straggler (a request that never ends, a dead vLLM engine): check "
                  "its stack and log in the bundle; lower the generation's max_new_tokens or restart the engine",
    "train fwd/bwd": "the straggler's forward/backward does not finish while the others wait in a collective: check its "
                     "GPU memory and log tail in the bundle (memory thrash, a dead GPU)",
    "logprob": "the straggler's log-prob pass does not finish: check its GPU memory and log tail in the bundle",
    "checkpoint save": "the checkpoint save blocks on the straggler: check the storage (free space, gcsfuse / PVC "
                       "throughput) and its log tail",
    "reward": "the reward computation does not return on the straggler (a remote judge or sandbox that hangs): add a "
              "timeout to the reward function",
    "data loading": "data loading does not return on the straggler: check the dataset's storage and the data workers",
}


def judge(*, experiment: str, submission_id: str, job_status: str, prog: Progress, started_at: float | None,
          k: float, floor_s: float, startup_s: float, samples: list[list[RankStack]], log_stacks: list[RankStack],
          dead_actors: list[str], ended_cause: str | None = None, ended_fix: str = "", ended_evidence: str = "",
          now: float | None = None) -> StallVerdict:
    """The verdict from what was observed (pure).

    Args:
        samples: stack snapshots of the live ranks, a second or so apart (a straggler must be one in every sample).
        log_stacks: stacks the log holds of ranks that died (faulthandler dumps, tracebacks).
        dead_actors: "name: death cause" of the job's dead Ray actors.
        ended_cause/ended_fix/ended_evidence: ``diagnose``'s verdict when the job ended.
    """
    now = time.time() if now is None else now
    med = prog.median_step_s
    threshold = max(floor_s, k * med) if med is not None else max(floor_s, startup_s if prog.last_step is None else floor_s)
    since = prog.newest if prog.newest is not None else started_at
    if started_at is not None and since is not None:
        since = max(since, started_at)  # files of an earlier attempt are not this attempt's progress
    quiet = None if since is None else max(0.0, now - since)
    v = StallVerdict(experiment, submission_id, job_status, "running", quiet, threshold, med, prog.last_step)
    live = samples[-1] if samples else []
    if job_status in ("SUCCEEDED", "FAILED", "STOPPED"):
        v.status, v.ranks = "ended", log_stacks or live
        v.cause, v.fix, v.evidence = ended_cause or "unknown", ended_fix, ended_evidence
        v.stragglers = sorted({r.rank for r in log_stacks if r.rank is not None})
        return v
    v.ranks = sorted(live, key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0))
    v.stragglers = _stragglers(samples)
    if dead_actors:
        v.status, v.cause = "stalled", Cause.LOST_NODE.value
        v.evidence = "job RUNNING while its actors are dead: " + "; ".join(dead_actors[:5])
        v.fix = f"{_RESUME} (its actors died; see the bundle's logs for why)"
        return v
    if log_stacks and job_status == "RUNNING":  # a rank died, its launcher has not noticed yet
        v.stragglers = sorted({r.rank for r in log_stacks if r.rank is not None} | set(v.stragglers))
        v.ranks = log_stacks + [r for r in v.ranks if r.rank not in {s.rank for s in log_stacks}]
    if quiet is None or quiet <= threshold:
        if v.stragglers:
            v.notes.append(f"rank(s) {v.stragglers} lag behind the others (outside the collective they wait in) in "
                           f"every sample; not stalled yet (quiet {_secs(quiet)} of {_secs(threshold)})")
        return v
    v.status = "stalled"
    waiting = [r for r in v.ranks if r.collective]
    if v.ranks and len(waiting) == len(v.ranks):
        v.cause = "deadlock"
        v.fix = ("every rank waits in a collective (" + ", ".join(sorted({str(r.collective) for r in waiting})) + "): the ranks "
                 f"disagree on the order of collectives or a peer's link is gone; set NCCL_DEBUG=INFO and compare their "
                 f"stacks in the bundle; {_RESUME}")
    else:
        v.cause = "hang"
        strag = [r for r in v.ranks if r.rank in v.stragglers]
        phase = strag[0].phase if strag else (v.ranks[0].phase if v.ranks else "unknown")
        v.fix = f"{_PHASE_FIX.get(phase, 'read the stragglers stacks in the bundle')}; {_RESUME}"
        if not v.ranks:
            v.fix = ("no stack could be read (see the notes): open the bundle's logs; " + _RESUME)
    v.evidence = f"no new step, dump or checkpoint for {_secs(quiet)} (threshold {_secs(threshold)}: max(floor {floor_s:g} s, " \
                 f"{k:g} x median step {_secs(med)}))"
    return v


_EVICTED = re.compile(r"^Warning Evicted: Pod/(\S+): (.*)$")  # nbtools.kube.cluster_events' line of kubelet's event
_HEAD_FIX = ("resubmit (nbtools.launch.resubmit(cfg), or `nbtools launch EXPERIMENT.yaml --retry`): it resumes from the "
             "newest complete step_N; delete the RayJob that still says Running (kuberay#3860, #3903), and if the head "
             "keeps restarting read its last exit in the bundle's pods.txt (memory limit: raise the head's)")


def judge_pods(v: StallVerdict, pods: list[Any], events: list[str], *, started_at: float | None) -> StallVerdict:
    """Refine a verdict with what the pods' status says (pure; ``pods``: ``nbtools.kube.PodState``).

    A head pod restarted since the job started, or a pod evicted or terminated by the kubelet (status ``Evicted``,
    the ``DisruptionTarget`` condition) while the job is still "running", stalls the run whatever its stacks say:
    the head restart lost the job's driver and Ray's state (the RayJob may still say Running: kuberay#3860, #3903);
    an evicted worker took its ranks with it. The verdict names the pod, its cause (``diagnose``'s rules read the
    pod's reason and the events: node memory pressure is ``host-oom``, a node shutdown ``preempted``, else
    ``lost-node``) and the fix. A job that ended keeps ``diagnose``'s verdict (which read the same events).
    """
    from nbtools.launch._diagnose import diagnose_log

    def since_start(t: float | None) -> bool:
        return t is None or started_at is None or t >= started_at - 1

    found: list[tuple[Cause, str, str]] = []
    for p in pods:
        gone = p.disrupted
        if gone is not None and since_start(gone[2]):
            reason, message, _ = gone
            mine = [e for e in events if p.name in e]
            d = diagnose_log("", status="FAILED", events=[f"Warning {reason}: Pod/{p.name}: {message}", *mine])
            cause = d.cause if d.cause != Cause.UNKNOWN else Cause.LOST_NODE
            how = "evicted" if p.reason == "Evicted" else "terminated"
            found.append((cause, f"{p.node_type or 'pod'} {p.name} was {how} ({reason})"
                                 f"{f' on {p.node}' if p.node else ''}: {message}".rstrip(": "), d.fix))
        elif p.node_type == "head" and p.restarts and since_start(p.restarted_at):
            found.append((Cause.LOST_NODE, f"head {p.name} restarted ({p.restarts} restart(s), last: {p.last_exit or '?'}): "
                                           "the job's driver and Ray's job table restarted with it", _HEAD_FIX))
    named = {e.split(" ", 2)[1] for _, e, _ in found}
    for e in events:  # KubeRay deletes an evicted worker and creates another: its Evicted event outlives it
        m = _EVICTED.match(e)
        if m and m.group(1) not in named:
            named.add(m.group(1))
            d = diagnose_log("", status="FAILED", events=[e])
            role = "head" if "-head-" in m.group(1) else "worker"  # KubeRay's pod names: <cluster>-head-*, *-worker-*
            found.append((d.cause if d.cause != Cause.UNKNOWN else Cause.LOST_NODE,
                          f"{role} {m.group(1)} was evicted: {m.group(2)} (its pod is gone; the event says it)", d.fix))
    if not found or v.status == "ended":
        v.notes += [f"pod: {e}" for _, e, _ in found]
        return v
    cause, evidence, fix = found[0]
    v.status, v.cause, v.fix = "stalled", cause.value, fix
    v.evidence = "; ".join(e for _, e, _ in found) + (f"; {v.evidence}" if v.evidence else "")
    return v


def _stragglers(samples: list[list[RankStack]]) -> list[int]:
    """Ranks outside any collective while other ranks wait in one, in every sample."""
    out: set[int] | None = None
    for ranks in samples:
        if not ranks:
            return []
        waiting = {r.rank for r in ranks if r.collective}
        these = {r.rank for r in ranks if not r.collective and r.rank is not None} if waiting else set()
        out = these if out is None else out & these
    return sorted(out or ())
