"""What a path given to a command is — an experiment file, a run dir, its logs dir, one exp_NNN dir, a checkpoint
dir, one step, a merged model, a log file — and the one thing each command needs from it.

Why: a command handed a plausible but wrong path used to answer anyway (``nbtools health <run dir>`` checked the
scalars only, ``nbtools metrics experiments/local.yaml`` printed an empty table, both exit 0). Every command that
takes a path asks :func:`resolve` instead: the right kind passes, a kind that holds the right thing one level down
(a run dir's ``logs/``, an experiment's ``logs_url``) is followed with a note on stderr, and anything else is refused
with what it is and what to pass. A kind it does not recognise passes through to the library, which checks it.

Example:
    >>> kind_of("runs/local-rehearsal")
    'run dir'
    >>> resolve("runs/local-rehearsal", want="logs", flag="RUN", command="health").path
    'runs/local-rehearsal/logs'
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from nbtools import _trainer_folders, storage
from nbtools._layout import EXP_RE
from nbtools.errors import NotFoundError

__all__ = ["kind_of", "resolve", "Resolved", "EXPERIMENT", "RUN_DIR", "LOG_DIR", "EXP_DIR", "CHECKPOINT_DIR",
           "STEP_DIR", "MODEL_DIR", "EVENTS", "TEXT", "MISSING"]

EXPERIMENT, RUN_DIR, LOG_DIR, EXP_DIR = "experiment file", "run dir", "logs dir", "exp_NNN dir"
CHECKPOINT_DIR, STEP_DIR, MODEL_DIR, EVENTS = "checkpoint dir", "checkpoint step dir", "merged model dir", "event file"
TEXT, MISSING, OTHER = "text file", "nothing", "other"
_EXPERIMENT_KEYS = {"backend", "grpo", "trainer", "cluster", "checkpointing", "model"}

# what each want accepts as it is, and what it follows one level down
_ACCEPT = {"logs": {LOG_DIR, EXP_DIR}, "metrics": {LOG_DIR, EXP_DIR, EVENTS, TEXT},
           "checkpoints": {CHECKPOINT_DIR}, "step": {STEP_DIR}, "log file": {TEXT}}
_WHAT = {"logs": "the run's logs dir (<run>/logs) or one exp_NNN dir in it",
         "metrics": "the run's logs dir, one exp_NNN dir, an events.out.tfevents.* file or a verl console log",
         "checkpoints": "the run's checkpoint dir (<run>/checkpoints, holding step_N dirs)",
         "step": "one step_N dir of the checkpoint dir",
         "log file": "a saved job log (`nbtools jobs logs EXPERIMENT.yaml --id ID > job.log`)"}


@dataclass(frozen=True)
class Resolved:
    """The path to read, what it was given as, and the experiment when an experiment file named it."""

    path: str
    kind: str
    experiment: Any = None


def _children(path: str) -> list[storage.Entry]:
    try:
        return storage.ls(path)
    except Exception:  # noqa: BLE001 - unreadable: the library reports it with its own fix
        return []


def _is_experiment(entry: storage.Entry) -> bool:
    import yaml

    if entry.size > 4 << 20:
        return False
    try:
        data = yaml.safe_load(storage.read_text(entry.url))
    except Exception:  # noqa: BLE001 - not YAML: not an experiment
        return False
    return isinstance(data, dict) and "name" in data and len(_EXPERIMENT_KEYS & set(data)) >= 2


def _is_text(entry: storage.Entry) -> bool:
    return looks_like_text(storage.read_bytes(entry.url, 0, min(entry.size, 1 << 16)) if entry.size else b"")


def looks_like_text(head: bytes) -> bool:
    """A file's first bytes hold no NUL byte and decode as UTF-8 (a cut multi-byte character at the end allowed)."""
    if b"\0" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start >= len(head) - 3
    return True


def kind_of(path: str | os.PathLike) -> str:
    """One of the kinds above (``OTHER`` when nothing here recognises it)."""
    entry = storage.info(os.fspath(path))
    if entry is None:
        return MISSING
    name = entry.name
    if not entry.is_dir:
        if "tfevents" in name:
            return EVENTS
        if name.endswith((".yaml", ".yml")) and _is_experiment(entry):
            return EXPERIMENT
        return TEXT if not name.endswith((".json", ".parquet", ".pt", ".safetensors")) and _is_text(entry) else OTHER
    if EXP_RE.match(name):
        return EXP_DIR
    kids = _children(entry.url)
    names = {k.name for k in kids}
    dirs = {k.name for k in kids if k.is_dir}
    if _trainer_folders.checkpoint_step(name) is not None and ({"training_info.json", "policy", "actor"} & names):
        return STEP_DIR
    if any(EXP_RE.match(d) for d in dirs):
        return LOG_DIR
    if any(_trainer_folders.checkpoint_step(d) is not None for d in dirs):
        return CHECKPOINT_DIR
    if "tensorboard" in dirs or any(n.startswith("train_data_step") for n in names):
        return EXP_DIR
    if {"logs", "checkpoints"} & dirs:
        return RUN_DIR
    if "config.json" in names:
        return MODEL_DIR
    return OTHER


def resolve(given: str, *, want: str, flag: str, command: str, backend: str | None = None) -> Resolved:
    """The path ``command`` should read for ``given`` (see the module docstring), or a NotFoundError with the fix.

    Args:
        want: "logs" | "metrics" | "checkpoints" | "step" | "log file".
        flag: how the argument is named in the usage (``RUN``, ``--log``), for the message.
    """
    kind = kind_of(given)
    if kind in _ACCEPT[want] or kind in (MISSING, OTHER):
        return Resolved(given, kind)  # the library checks what is (not) there, with its own fix
    if kind == RUN_DIR and want in ("logs", "metrics", "checkpoints"):
        sub = "checkpoints" if want == "checkpoints" else "logs"
        path = storage.join(given, sub)
        if storage.exists(path):
            print(f"nbtools {command}: note: {given} is a run dir; reading its {sub}/", file=sys.stderr)
            return Resolved(path, kind)
    if kind == EXPERIMENT and want in ("logs", "metrics", "checkpoints"):
        from nbtools import config

        cfg = config.load(given, backend=backend)
        path = cfg.checkpoints_url if want == "checkpoints" else cfg.logs_url
        print(f"nbtools {command}: note: {given} is an experiment file; reading its "
              f"{'checkpoint dir' if want == 'checkpoints' else 'logs dir'} {path}", file=sys.stderr)
        return Resolved(str(path), kind, cfg)
    hint = ""
    if kind == CHECKPOINT_DIR and want == "step":
        steps = sorted((e.name for e in _children(given) if e.is_dir and _trainer_folders.checkpoint_step(e.name) is not None),
                       key=_trainer_folders.checkpoint_step)
        hint = f", e.g. the newest: {storage.join(given, steps[-1])}" if steps else ""
    if kind == STEP_DIR and want == "checkpoints":
        hint = f", e.g. its parent {os.path.dirname(os.fspath(given).rstrip('/'))}"
    if kind == RUN_DIR and want == "step":
        hint = f", e.g. {storage.join(given, 'checkpoints', 'step_N')} (`nbtools checkpoints {given}` lists them)"
    article = "an" if kind[0] in "aeiou" else "a"
    raise NotFoundError(f"{flag} {given}: expected {_WHAT[want]}, found {article} {kind}",
                        fix=f"pass {_WHAT[want]}{hint}")
