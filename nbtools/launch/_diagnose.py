"""Why did a Ray job end: preempted, lost node, CUDA or host out of memory, NCCL, a Python error, stopped, or unknown.

Why: a run on spot GPUs dies for reasons a retry fixes (the node was reclaimed) and for reasons it never fixes (the
batch does not fit). Deciding which from Ray's status, the job's log tail and, on GKE, the Kubernetes events of the
cluster's pods is what lets ``launch.supervise`` resubmit safely. The patterns are the real messages: Ray's
``ActorDiedError`` / "The node with node id: … has been marked dead because the detector has missed too many
heartbeats" / "The actor died because its node has died", torch's ``torch.OutOfMemoryError: CUDA out of memory``,
NCCL's "NCCL error … unhandled system error" / ``ncclRemoteError`` / "remote process exited or there was a network
error", kubelet's ``TerminationByKubelet`` "Pod was terminated in response to imminent node shutdown." (a pod
*condition* reason: ``nbtools.kube.cluster_events`` reads the pods' conditions as well as events) and GKE's spot
reclaim events; Ray's memory monitor ("N worker(s) were killed due to the node running low on memory", Ray 2.55+;
"Task was killed due to the node running low on memory" before) is host memory, ``host-oom``, not CUDA's.

An actor whose ``__init__`` raised ("The actor died because of an error raised in its creation task", Ray's
``ActorDiedError``) did not lose its node: the diagnosis is the error it carries (vLLM's "No available memory for the
cache blocks" is ``oom``, a gated Hugging Face repo a ``user-error``), never a retry. Each log line is searched
only in its first and last ``LINE_CHARS // 2`` characters, so a megabyte line costs what a short one does.

This module is pure (text in, a ``Diagnosis`` out); fetching the log, Ray's status and the pods' events is the
caller's (``launch.diagnose``).

Example:
    >>> d = nbtools.launch.diagnose_log(open("job.log").read())
    >>> d.cause, d.retry
    (<Cause.OOM: 'oom'>, False)
"""

from __future__ import annotations

import enum
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from nbtools import _paths
from nbtools._escape import html as _h
from nbtools.errors import Fix

__all__ = ["Cause", "Diagnosis", "CAUSES", "diagnose_log", "RETRYABLE"]


class Cause(str, enum.Enum):
    """Why a job ended; a ``str`` whose value is the word the JSON output, the attempts record and the CLI use."""

    PREEMPTED = "preempted"
    LOST_NODE = "lost-node"
    OOM = "oom"
    HOST_OOM = "host-oom"
    NCCL = "nccl"
    USER_ERROR = "user-error"
    STOPPED = "stopped"
    UNKNOWN = "unknown"
    SUCCEEDED = "succeeded"
    RUNNING = "running"
    UNHEALTHY = "unhealthy"
    HANG = "hang"  # stopped while stalled: a rank stopped progressing (``launch.stall``'s verdict names it)
    DEADLOCK = "deadlock"  # stopped while stalled: every rank waits in a collective

    def __str__(self) -> str:
        return self.value

    @property
    def retryable(self) -> bool:
        """A new attempt can fix it: the infrastructure failed (spot reclaim, a node lost, a transient NCCL fault)."""
        return self in RETRYABLE

    @property
    def fix(self) -> str:
        """What to do about it in general (a diagnosis may name a more precise fix from its evidence)."""
        return str(_FIXES[self])

    @property
    def cli_fix(self) -> str:
        """The same fix in the CLI's words."""
        f = _FIXES[self]
        return f.cli if isinstance(f, Fix) else f


CAUSES = tuple(c.value for c in Cause)
LINE_CHARS = 4096  # the characters of one log line the patterns see (its head and its tail)
RETRYABLE = frozenset({Cause.PREEMPTED, Cause.LOST_NODE, Cause.NCCL})
_MEMORY = (Cause.OOM, Cause.HOST_OOM)

# (cause, pattern) checked against Kubernetes events first, then the log; the first cause with a match wins.
_EVENT_RULES: list[tuple[Cause, re.Pattern[str]]] = [
    # kubelet's node-pressure eviction also sets TerminationByKubelet: "The node was low on resource: memory"
    (Cause.HOST_OOM, re.compile(r"low on resource: memory|\bEvicted\b.{0,200}memory|\bOOMKill(ed|ing)\b", re.I)),
    (Cause.PREEMPTED, re.compile(r"TerminationByKubelet|imminent node shutdown|Node is shutting down|\bPreempt(ed|ing|ion)"
                             r"|spot VM .{0,200}reclaimed|being reclaimed", re.I)),
    (Cause.LOST_NODE, re.compile(r"\bNodeNotReady\b|\bDeletingNode\b|\bRemovingNode\b|node .* (is )?not ready|"
                             r"\bKilling\b.*(ray-worker|ray-head)", re.I)),
]
_LOG_RULES: list[tuple[Cause, re.Pattern[str]]] = [
    (Cause.OOM, re.compile(r"torch\.(cuda\.)?OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|"
                       r"No available memory for the cache blocks")),
    (Cause.HOST_OOM, re.compile(r"worker\(s\) were killed due to the node running low on memory|"
                            r"Task was killed due to the node running low on memory|\bOOMKilled\b")),
    (Cause.PREEMPTED, re.compile(r"Actor died by preemption|AUTOSCALER_DRAIN_PREEMPTED|Node was forcibly preempted|"
                             r"the actor's node was preempted|imminent node shutdown|TerminationByKubelet")),
    (Cause.LOST_NODE, re.compile(r"has been marked dead because the detector has missed too many heartbeats|"
                             r"The actor died because its node has died|Owner's node has crashed|"
                             r"node it was running on is dead or unavailable|ray\.exceptions\.NodeDiedError|"
                             r"rank exited abnormally|process \d+ terminated with signal SIG(KILL|TERM)|"
                             r"gloo.{0,200}Connection (closed|reset) by peer")),
    (Cause.NCCL, re.compile(r"NCCL error|ncclRemoteError|ncclSystemError|ncclInternalError|unhandled system error|"
                        r"remote process exited or there was a network error|NCCL communicator was aborted|"
                        r"Watchdog caught collective operation timeout")),
]
# a dead actor without a word on why: a lost node unless an actor's creation task raised (then that error decides)
_DEAD_ACTOR = re.compile(r"ActorDiedError|RayActorError|The actor died unexpectedly before finishing this task")
_CREATION_TASK = re.compile(r"The actor died because of an error raised in its creation task")
_WORKER_PREFIX = re.compile(r"^\([^()\s]+ pid=\d+(, ip=[\d.]+)?\) ?")  # "(VllmWorker pid=12, ip=10.0.0.3) " on forwarded lines
_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):")
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (.+)$')
_EXC = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)|AssertionError)\b(:.*)?$")

_RETRY = "`nbtools launch EXPERIMENT.yaml --retry`"
_FIXES = {
    Cause.PREEMPTED: Fix("nothing to change: the node was reclaimed (spot); resubmit and the run resumes from the newest "
                         "complete step_N (nbtools.launch.resubmit(cfg), or supervise(cfg) does it for you)",
                         cli="nothing to change: the node was reclaimed (spot); resubmit and the run resumes from the "
                             f"newest complete step_N ({_RETRY}, or launch with --supervise and it does it for you)"),
    Cause.LOST_NODE: Fix("resubmit (nbtools.launch.resubmit(cfg)); if the same node keeps dying, check its GPUs and the "
                         "pod events (nbtools.backends.get(cfg).events())",
                         cli=f"resubmit ({_RETRY}); if the same node keeps dying, check its GPUs and the pod events "
                             "(`kubectl get events`)"),
    Cause.NCCL: Fix("resubmit once (transient network faults clear); if it repeats, check the NCCL/gIB settings in "
                    "nbtools.launch.build(cfg).runtime_env and the nodes' network",
                    cli=f"resubmit once ({_RETRY}; transient network faults clear); if it repeats, check the NCCL/gIB "
                        "settings (`nbtools launch EXPERIMENT.yaml --dry-run` prints the runtime env) and the nodes' "
                        "network"),
    Cause.OOM: Fix("a retry fails the same way: lower the memory per GPU (smaller micro-batch, activation checkpointing, "
                   "shorter max sequence length, lower vLLM gpu_memory_utilization; nbtools.fit.check(cfg) lists changes "
                   "that fit), then launch again",
                   cli="a retry fails the same way: lower the memory per GPU (smaller micro-batch, activation "
                       "checkpointing, shorter max sequence length, lower vLLM gpu_memory_utilization; `nbtools fit "
                       "EXPERIMENT.yaml` lists changes that fit), then launch again"),
    Cause.HOST_OOM: "a retry fails the same way: the node's host memory (RAM) ran out, not the GPU's: fewer or lighter "
                    "CPU-side workers (dataloader workers, env num_workers), CPU offload off, a smaller object store, "
                    "or nodes with more memory; then launch again",
    Cause.USER_ERROR: "a retry fails the same way: fix the error at the frame shown (config or code), then launch again",
    Cause.STOPPED: Fix("it was stopped on purpose; resubmit when you want it to continue (nbtools.launch.resubmit(cfg))",
                       cli=f"it was stopped on purpose; resubmit when you want it to continue ({_RETRY})"),
    Cause.UNKNOWN: Fix("read the whole log (nbtools.jobs.logs(...)) and the cluster's events; resubmit if it was the "
                       "infrastructure (nbtools.launch.resubmit(cfg))",
                       cli="read the whole log (`nbtools jobs logs EXPERIMENT.yaml --id ID`) and the cluster's events; "
                           f"resubmit if it was the infrastructure ({_RETRY})"),
    Cause.SUCCEEDED: "nothing to do",
    Cause.UNHEALTHY: Fix("a retry learns nothing either: apply the health findings' fixes (nbtools.health.check("
                         "cfg.logs_url, config=cfg) lists them), then launch again",
                         cli="a retry learns nothing either: apply the health findings' fixes (`nbtools health RUN "
                             "--config EXPERIMENT.yaml` lists them), then launch again"),
    Cause.HANG: Fix("a retry may hang the same way: read the stall verdict (nbtools.launch.stall(cfg) names the "
                    "straggling rank, its phase and the fix; the evidence bundle is under <logs>/nbtools-diagnosis/), "
                    "fix that, then resubmit (nbtools.launch.resubmit(cfg)): it resumes from the newest step_N",
                    cli="a retry may hang the same way: read the stall verdict (`nbtools stall EXPERIMENT.yaml` names the "
                        "straggling rank, its phase and the fix; the evidence bundle is under <logs>/nbtools-diagnosis/), "
                        f"fix that, then resubmit ({_RETRY})"),
    Cause.DEADLOCK: Fix("every rank waited in a collective: run with NCCL_DEBUG=INFO, compare the ranks' stacks in the "
                        "evidence bundle (<logs>/nbtools-diagnosis/), then resubmit (nbtools.launch.resubmit(cfg))",
                        cli="every rank waited in a collective: run with NCCL_DEBUG=INFO, compare the ranks' stacks in "
                            f"the evidence bundle (<logs>/nbtools-diagnosis/), then resubmit ({_RETRY})"),
    Cause.RUNNING: Fix("wait for it to end (nbtools.launch.follow(cfg, job))",
                       cli="wait for it to end (`nbtools launch EXPERIMENT.yaml --follow`)"),
}


# evidence -> a fix more precise than its cause's
_VLLM_KV = ("a retry fails the same way: vLLM found no GPU memory left for its KV cache after loading the weights: raise "
            "trainer.vllm_cfg.gpu_memory_utilization (policy.generation.vllm_cfg), lower max_model_len, or give "
            "generation more GPUs (vLLM tensor parallel)")
_SPECIFIC_FIXES: list[tuple[re.Pattern[str], Fix | str]] = [
    (re.compile(r"No available memory for the cache blocks"), Fix(
        _VLLM_KV + "; nbtools.fit.check(cfg) shows the split", cli=_VLLM_KV + "; `nbtools fit EXPERIMENT.yaml` shows the "
        "split")),
    (re.compile(r"gated repo|GatedRepoError|Access to model .{0,200} is restricted", re.I),
     "a retry fails the same way: the model is gated on Hugging Face: accept its licence on the model page with the "
     "account whose token the job gets (secrets.hf_token), then launch again"),
]


def _clip(line: str) -> str:
    """The head and tail of a long line: what the patterns search (the work per line is bounded by ``LINE_CHARS``)."""
    if len(line) <= LINE_CHARS:
        return line
    half = LINE_CHARS // 2
    return f"{line[:half]} [... {len(line) - 2 * half} characters ...] {line[-half:]}"


@_paths.tidy_reprs
@dataclass(frozen=True)
class Diagnosis:
    """Why a job ended: its :class:`Cause`, whether a retry can fix it, the lines that decided it, the fix.

    Example:
        >>> d = nbtools.launch.diagnose(cfg)
        >>> d.to_dict()["cause"]
        'preempted'
    """

    cause: Cause
    evidence: str
    fix: str
    submission_id: str = ""
    status: str = ""
    frame: str = ""  # user-error: the traceback's last frame (file:line in function)
    events: tuple[str, ...] = field(default_factory=tuple)
    cli_fix: str = ""  # the fix in the CLI's words (the same as ``fix`` when it names no call)

    def __post_init__(self):
        object.__setattr__(self, "cause", Cause(self.cause))
        if not self.cli_fix:
            object.__setattr__(self, "cli_fix", self.fix)

    @property
    def retry(self) -> bool:
        """A new attempt can fix it (``cause.retryable``)."""
        return self.cause.retryable

    def to_dict(self) -> dict[str, Any]:
        """The CLI's JSON: cause (its word), retry, evidence, fix (and the job's id, status, frame and events)."""
        d = asdict(self)
        d["cause"], d["retry"], d["events"] = self.cause.value, self.retry, list(self.events)
        return {k: d[k] for k in ("cause", "retry", "evidence", "fix", "submission_id", "status", "frame", "events")}

    def text(self, *, cli: bool = False) -> str:
        """The diagnosis as lines, its fix in the notebook's words or (``cli=True``) the terminal's."""
        head = f"{self.submission_id}: " if self.submission_id else ""
        fix = self.cli_fix if cli else self.fix
        return f"{head}{self.cause} (retry: {'yes' if self.retry else 'no'})\n{self.evidence}\nfix: {fix}"

    def __str__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        color = "orange" if self.retry else ("green" if self.cause is Cause.SUCCEEDED else "red")
        rows = [("job", self.submission_id), ("status", self.status), ("retry", "yes" if self.retry else "no"),
                ("frame", self.frame), ("fix", self.fix)]
        body = "".join(f"<tr><th style='text-align:left'>{k}</th><td style='text-align:left'>{_h(v)}</td></tr>"
                       for k, v in rows if v)
        return (f"<b>diagnosis: <span style='color:{color}'>{_h(self.cause)}</span></b><table>{body}</table>"
                f"<pre>{_h(self.evidence)}</pre>")


def _first(rules, lines: list[str]) -> tuple[Cause, list[str]] | None:
    for cause, pattern in rules:
        hits = [ln for ln in lines if pattern.search(ln)]
        if hits:
            return cause, hits
    return None


def _creation_task_error(lines: list[str]) -> tuple[str, str, str] | None:
    """(Ray's line, the error the actor's ``__init__`` raised, its last frame) of the last creation-task failure."""
    marks = [i for i, ln in enumerate(lines) if _CREATION_TASK.search(ln)]
    if not marks:
        return None
    block = [_WORKER_PREFIX.sub("", ln) for ln in lines[marks[-1] + 1:]]
    at = next((i for i, ln in enumerate(block) if _EXC.match(ln.strip())), None)
    if at is None:
        return lines[marks[-1]].strip(), "", ""
    frames = [m for ln in block[:at] if (m := _FRAME.match(ln))]
    frame = f"{frames[-1].group(1)}:{frames[-1].group(2)} in {frames[-1].group(3)}" if frames else ""
    return lines[marks[-1]].strip(), block[at].strip(), frame


def _user_traceback(lines: list[str]) -> tuple[str, str] | None:
    """(the exception line, the last frame) of the last Python traceback that carries an error of its own.

    A traceback whose exception is Ray's dead actor (``ActorDiedError: The actor died unexpectedly``) says only that
    a process went away; the one before it, of the error that took the run down (``RayTaskError(KeyError)`` ends
    in the ``KeyError`` it carries), is the diagnosis. Lines forwarded from workers lose their ``(Class pid=N)``.
    """
    starts = [i for i, ln in enumerate(lines)
              if "Traceback (most recent" in ln and _TRACEBACK.search(_WORKER_PREFIX.sub("", ln).strip())]
    ends = starts[1:] + [len(lines)] if starts else []
    for start, end in reversed(list(zip(starts, ends, strict=True))):
        block = [_WORKER_PREFIX.sub("", ln) for ln in lines[start:end]]
        exc = next((ln.strip() for ln in block[1:] if _EXC.match(ln.strip())), "")
        if not exc or _DEAD_ACTOR.search(exc):
            continue
        frames = [m for ln in block if (m := _FRAME.match(ln))]
        frame = f"{frames[-1].group(1)}:{frames[-1].group(2)} in {frames[-1].group(3)}" if frames else ""
        return exc, frame
    return None


def diagnose_log(log: str, *, status: str = "FAILED", message: str = "", events: list[str] | tuple[str, ...] = (),
                 submission_id: str = "") -> Diagnosis:
    """Diagnose from text alone: a job log (its tail is enough), Ray's status and message, Kubernetes events.

    Pure: text in, a :class:`Diagnosis` out (``launch.diagnose`` fetches the log, status and events). Events decide
    first (a spot reclaim explains the Ray errors that follow it), then the log: OOM before node loss (an OOM-killed
    worker also shows up as a dead actor), then NCCL, then a node Ray lost, then a Python traceback carrying an error
    (user error with its last frame), and only then a dead actor with no word on why (``lost-node``); a STOPPED job
    is ``stopped`` unless the events say the node went away.

    Example:
        >>> nbtools.launch.diagnose_log("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB").cause
        'oom'
    """
    status = (status or "").upper()
    lines = [_clip(ln.rstrip()) for ln in (log or "").splitlines() if ln.strip()]
    lines += [_clip(ln) for ln in (message or "").splitlines()[:3] if ln.strip()]  # Ray's message, not its log copy
    ev = [_clip(str(e)) for e in events]

    def make(cause: Cause, evidence: list[str], frame: str = "") -> Diagnosis:
        shown = "\n".join(dict.fromkeys(e.strip() for e in evidence))[-2000:]
        fix = next((f for p, f in _SPECIFIC_FIXES if p.search(shown)), _FIXES[cause])
        forms = fix if isinstance(fix, Fix) else Fix(fix, cli=fix)
        return Diagnosis(cause, shown, forms.python, submission_id, status, frame, tuple(ev), cli_fix=forms.cli)

    if status == "SUCCEEDED":
        return make(Cause.SUCCEEDED, [f"job status {status}"])
    if status in ("PENDING", "RUNNING"):
        return make(Cause.RUNNING, [f"job status {status}"])
    found_ev = _first(_EVENT_RULES, ev)
    if found_ev and found_ev[0] not in _MEMORY:
        return make(found_ev[0], found_ev[1])
    found = _first(_LOG_RULES, lines)
    if found_ev and (found is None or found[0] not in _MEMORY):
        return make(*found_ev)  # the kernel or kubelet killed for memory: the log's own memory line says which kind
    if found is not None and found[0] in (*_MEMORY, Cause.PREEMPTED, Cause.NCCL):
        return make(*found)
    if status == "STOPPED":
        return make(Cause.STOPPED, [f"job status STOPPED: {message or 'stopped through the Jobs API'}"])
    created = _creation_task_error(lines)
    if created is not None and found is None:  # an actor's __init__ raised: that error, not a lost node
        line, exc, frame = created
        return make(Cause.USER_ERROR, [line] + ([exc] if exc else []) + ([f"at {frame}"] if frame else []), frame)
    if found is not None:  # lost-node: a dead node explains the traceback that follows it
        return make(*found)
    tb = _user_traceback(lines)
    if tb is not None:  # the error the run died of, whatever Ray then says of the actors that went down with it
        exc, frame = tb
        return make(Cause.USER_ERROR, [exc] + ([f"at {frame}"] if frame else []), frame)
    dead = [ln for ln in lines if _DEAD_ACTOR.search(ln)] if created is None else []
    if dead:  # an actor died and no error says why: its worker or node went away
        return make(Cause.LOST_NODE, dead)
    return make(Cause.UNKNOWN, [f"job status {status or 'unknown'}"] + ([message] if message else []) + lines[-3:])
