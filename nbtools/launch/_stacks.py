"""Stacks → per-rank phases: parse py-spy dumps, faulthandler dumps and Python tracebacks; name the phase of each.

Why: "rank 3 is in ``all_reduce`` of the weight refit, the others wait for it" is read from the ranks' Python stacks.
Three real formats carry them: ``py-spy dump`` (what Ray's dashboard serves per worker, innermost frame first,
``Thread <tid> (idle): "<thread name>"``), faulthandler's dump of a process that died in native code ("Fatal Python
error: Aborted" / "Current thread 0x… (most recent call first):"), and the traceback torch.multiprocessing prints for
a rank that raised ("-- Process 1 terminated with the following error:", outermost first). A rank's number comes
from its thread name (``rank N``: the rehearsal names its main thread so; a trainer's worker may too), else from
torch's "Process N" (its ``start_processes`` index is the rank), else from the order its launcher forked it.

The phase rules name functions of NeMo-RL, verl, vLLM and the rehearsal; they are checked in a fixed priority (a
checkpoint save that all-gathers is a checkpoint save) and the collective a rank waits in is read from its innermost
``torch.distributed`` frame. This module is pure: text in, ``RankStack`` out.

Example:
    >>> ranks = parse_py_spy(text)
    >>> [(r.rank, r.phase, r.collective) for r in ranks]
    [(0, 'train fwd/bwd', 'all_reduce'), (1, 'weight refit', None)]
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Frame", "RankStack", "PHASES", "phase_of", "collective_of", "parse_py_spy", "parse_log_stacks"]

PHASES = ("checkpoint save", "weight refit", "reward", "generation", "train fwd/bwd", "logprob", "data loading",
          "validation", "collective wait", "startup", "unknown")


@dataclass(frozen=True)
class Frame:
    """One stack frame: function, file, line."""

    func: str
    file: str
    line: int = 0

    def __str__(self) -> str:
        return f"{self.func} ({'/'.join(self.file.rsplit('/', 2)[-2:])}:{self.line})"


@dataclass
class RankStack:
    """One rank's (or worker's) stack, innermost frame first, with the phase read from it."""

    rank: int | None
    pid: int | None
    frames: list[Frame]
    thread: str = ""
    source: str = "py-spy"  # py-spy | faulthandler | traceback
    error: str = ""  # the exception line of a traceback, or faulthandler's "Fatal Python error: …"
    phase: str = field(init=False)
    collective: str | None = field(init=False)

    def __post_init__(self) -> None:
        self.phase = phase_of(self.frames)
        self.collective = collective_of(self.frames)

    def summary(self, n: int = 4) -> str:
        """The innermost frames of the rank's own code (library internals folded), innermost first."""
        own = [f for f in self.frames if not _LIBRARY.search(f.file)] or self.frames
        head = [str(f) for f in own[:n]]
        if self.collective:
            head.insert(0, f"[waits in {self.collective}]")
        return " <- ".join(head)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["frames"] = [str(f) for f in self.frames]
        d["summary"] = self.summary()
        return d


# (phase, function-name pattern, file pattern or None): the first phase with a matching frame anywhere wins.
_RULES: list[tuple[str, re.Pattern[str], re.Pattern[str] | None]] = [
    ("checkpoint save", re.compile(r"^(save|_save|save_checkpoint|save_state_dict|async_save|save_hf|_save_checkpoint)$"),
     None),
    ("checkpoint save", re.compile(r"."), re.compile(r"torch/distributed/checkpoint/")),
    ("weight refit", re.compile(r"refit|update_weights|broadcast_weights|sync_weights|_sync_weights|prepare_refit|"
                                r"update_weights_from|load_weights|rebuild_cuda_tensor"), None),
    ("reward", re.compile(r"reward|compute_score|^score$|_score$|verify|^step$"), re.compile(r"reward|environment|/envs?/")),
    ("generation", re.compile(r"^(_?generate\w*|rollout|generate_sequences|sample|_run_engine|step_async|"
                              r"generate_async|_generate)$"), None),
    ("train fwd/bwd", re.compile(r"^(_train|train_step|update_actor|update_policy|backward|_backward|optimizer_step|"
                                 r"train_batch|policy_train)$"), None),
    ("train fwd/bwd", re.compile(r"^train$"), re.compile(r"policy|worker|actor")),  # NeMo-RL's Policy.train, a worker's
    ("logprob", re.compile(r"logprob|log_prob|get_reference_policy_logprobs|compute_ref_log_prob"), None),
    ("data loading", re.compile(r"^(__next__|_next_data|next_batch|collate\w*|_get_data|load_dataset)$"), None),
    ("validation", re.compile(r"^(_?validate|validation|_validate)$"), None),
    ("startup", re.compile(r"^(setup|init_process_group|warm_start|from_pretrained|_init_model|init_model|__init__)$"),
     re.compile(r"(rehearsal|policy|worker|nemo_rl|verl)")),
]
_COLLECTIVE_FILE = re.compile(r"torch/distributed/|/nccl|pynccl|_fsdp_collectives")
_COLLECTIVE_FUNC = re.compile(r"all_reduce|all_gather|reduce_scatter|broadcast|barrier|gather|scatter|all_to_all|"
                              r"send|recv|wait|monitored_barrier|foreach_all_gather|reduce")
_LIBRARY = re.compile(r"site-packages/|dist-packages/|/lib/python3\.\d+/|^<frozen|^<string>")


def phase_of(frames: list[Frame]) -> str:
    """The phase a stack is in: the highest-priority rule matching any frame; ``collective wait`` when the only
    thing it names is a collective."""
    names = [f.func.rsplit(".", 1)[-1] for f in frames]  # py-spy 0.4 qualifies methods: "_Run.refit"
    for phase, func, file in _RULES:
        for f, name in zip(frames, names, strict=True):
            if func.search(name) and (file is None or file.search(f.file)):
                return phase
    return "collective wait" if collective_of(frames) else "unknown"


def collective_of(frames: list[Frame]) -> str | None:
    """The collective the innermost frames wait in (``all_reduce``, ``barrier``, …), or None."""
    for f in frames[:12]:
        if _COLLECTIVE_FILE.search(f.file) and _COLLECTIVE_FUNC.search(f.func):
            return f.func.rsplit(".", 1)[-1]
    return None


# -- py-spy dump ------------------------------------------------------------------------------------------------
_PROCESS = re.compile(r"^Process (\d+): (.*)$")
_THREAD = re.compile(r'^Thread (0x[0-9A-Fa-f]+|\d+) \(([^)]*)\)(?:: "(.*)")?\s*$')
_SPY_FRAME = re.compile(r"^\s+(\S.*?) \((.+?):(\d+)\)\s*$")
_RANK_NAME = re.compile(r"\brank[ _-]?(\d+)\b", re.I)


def parse_py_spy(text: str, *, main_only: bool = True) -> list[RankStack]:
    """Every thread stack in a ``py-spy dump`` (``--subprocesses`` included); with ``main_only`` the processes' main
    threads (or threads named ``rank N``) only. Processes without a rank in their thread name get ``rank=None``."""
    out: list[RankStack] = []
    pid, cur = None, None
    for line in text.splitlines():
        m = _PROCESS.match(line)
        if m:
            pid = int(m.group(1))
            continue
        m = _THREAD.match(line)
        if m:
            name = m.group(3) or ""
            cur = RankStack(rank=None, pid=pid, frames=[], thread=name)
            out.append(cur)
            continue
        m = _SPY_FRAME.match(line)
        if m and cur is not None:
            cur.frames.append(Frame(m.group(1), m.group(2), int(m.group(3))))
    for s in out:
        s.__post_init__()
        r = _RANK_NAME.search(s.thread)
        s.rank = int(r.group(1)) if r else None
    if main_only:
        out = [s for s in out if s.rank is not None or s.thread in ("MainThread", "")]
    return out


# -- faulthandler and tracebacks in a log ------------------------------------------------------------------------
_FATAL = re.compile(r"^Fatal Python error: (.+)$")
_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)")
_FH_FRAME = re.compile(r'^\s+File "(.+)", line (\d+) in (.+)$')
_TB_START = re.compile(r"^Traceback \(most recent call last\):")
_TB_FRAME = re.compile(r'^\s+File "(.+)", line (\d+), in (.+)$')
_TB_EXC = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt))\b(:.*)?$")
_MP_PROCESS = re.compile(r"-- Process (\d+) terminated with the following error|process (\d+) terminated with (signal|exit)")
_PREFIX = re.compile(r"^\([^()\s]+ pid=\d+(, ip=[\d.]+)?\) ?")


def parse_log_stacks(log: str) -> list[RankStack]:
    """The stacks a log holds of ranks that died: faulthandler dumps (their current thread) and tracebacks.

    The rank is torch.multiprocessing's process index named next to it ("-- Process N terminated with the following
    error:" before a traceback; "process N terminated with signal …" after a faulthandler dump), else None.
    """
    lines = [_PREFIX.sub("", ln) for ln in log.splitlines()]
    out: list[RankStack] = []
    i = 0
    while i < len(lines):
        ln = lines[i]
        fatal = _FATAL.match(ln)
        if fatal:
            frames, j, current = [], i + 1, False
            while j < len(lines) and (j - i) < 400:
                t = _FH_THREAD.match(lines[j])
                if t:
                    if current:
                        break  # the next thread's block: the dying thread's stack ends here
                    current = t.group(1) == "Current thread"
                f = _FH_FRAME.match(lines[j])
                if f and current:
                    frames.append(Frame(f.group(3).strip(), f.group(1), int(f.group(2))))
                elif frames and not f and lines[j].strip() and not t:
                    break
                j += 1
            out.append(RankStack(rank=_rank_near(lines, j, forward=True), pid=None, frames=frames, source="faulthandler",
                                 error=f"Fatal Python error: {fatal.group(1)}"))
            i = j
            continue
        if _TB_START.match(ln):
            frames, j, error = [], i + 1, ""
            while j < len(lines) and (j - i) < 2000:
                f = _TB_FRAME.match(lines[j])
                if f:
                    frames.append(Frame(f.group(3).strip(), f.group(1), int(f.group(2))))
                elif _TB_EXC.match(lines[j].strip()):
                    error = lines[j].strip()[:300]
                    break
                j += 1
            if frames and error:
                out.append(RankStack(rank=_rank_near(lines, i, forward=False), pid=None, frames=frames[::-1],
                                     source="traceback", error=error))
            i = j + 1
            continue
        i += 1
    return out


def _rank_near(lines: list[str], at: int, *, forward: bool) -> int | None:
    """torch.multiprocessing's process index stated within a few lines of a stack (before a traceback, after a dump)."""
    span = range(at, min(len(lines), at + 40)) if forward else range(at - 1, max(-1, at - 4), -1)
    for k in span:
        m = _MP_PROCESS.search(lines[k])
        if m:
            return int(m.group(1) or m.group(2))
    return None
