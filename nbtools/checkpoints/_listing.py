"""List a checkpoint_dir's ``step_N`` directories, pick latest/best the way NeMo-RL ranks them, detect layouts.

The checkpoint_dir may be a local path or a URL (``gs://…`` on GKE): only directory listings and the small
``training_info.json`` files are read, never the weights. Local paths come back as ``Path``, URLs as ``str``.

``tmp_step_N`` is a checkpoint being written (NeMo-RL renames it to ``step_N`` when complete,
``nemo_rl/utils/checkpoint.py``); on NeMo-RL main the rename runs in a background thread (``begin_finalization``)
and waits for async writes, so a ``tmp_step_N`` lingers for a while, and ``latest_checkpoint_status.json`` at the
checkpoint root records ``last_checkpoint_step`` right after the save starts finalising (``nemo_rl/algorithms/grpo.py``
``_write_latest_checkpoint_status``, NVIDIA-NeMo/RL main at 7ea279ab). Neither is ever a checkpoint here: the
listing reports them as in progress (``df.attrs["in_progress"]``, ``df.attrs["status"]``).
"""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path
from types import EllipsisType

import pandas as pd

from nbtools import _paths, _table, _trainer_folders, storage
from nbtools._layout import STEP_RE, weights_dir
from nbtools.config import Experiment
from nbtools.errors import CheckpointError, Fix, NotFoundError

__all__ = ["NATIVE_LAYOUTS", "step_owner", "list_checkpoints", "overview", "latest", "best", "detect_layout", "read_training_info", "weights_dir",
           "in_progress", "checkpoint_status"]

STATUS_FILE = "latest_checkpoint_status.json"  # NeMo-RL main: {last_checkpoint_step, last_successful_ckpt_save_completion}
_TMP_RE = re.compile(r"^tmp_step_(\d+)$")

NATIVE_LAYOUTS = ("dtensor_v1", "v2_torch_save", "v2_safetensors", "consolidated", "megatron")


def __getattr__(name: str):
    """``LAYOUTS``: the weight layouts read here, then those of every registered trainer's own reader
    (``RunLayout.checkpoint_layouts``: verl's ``verl_fsdp``)."""
    if name == "LAYOUTS":
        return NATIVE_LAYOUTS + tuple(n for lay in _trainer_folders.layouts().values() for n in lay.checkpoint_layouts)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _at(url: str) -> Path:
    """What a listing returns for one of its directories: a ``Path`` on this machine, a ``Url`` (str) elsewhere."""
    return _paths.Url(url) if storage.is_remote(url) else Path(url)


def _root(checkpoint_dir: str | Path) -> str:
    text = str(checkpoint_dir).rstrip("/") or "/"
    return text if storage.is_remote(text) else str(Path(text).expanduser())


def _steps(checkpoint_dir: str | Path) -> list[tuple[int, Path]]:
    """``(N, dir)`` of every complete ``step_N``, lowest first: one listing, the same on every storage."""
    url = _root(checkpoint_dir)
    found = storage.info(url)
    if found is None or not found.is_dir:
        raise NotFoundError(f"checkpoint_dir {url!r} does not exist",
                            fix=Fix("check the experiment's checkpointing.checkpoint_dir (cfg.checkpoint_dir; cfg.checkpoints_url for a "
                                    "run in a bucket), or wait until the run saved its first checkpoint",
                                    cli="check the experiment's checkpointing.checkpoint_dir (its gs:// URL for a run in "
                                        "a bucket), or wait until the run saved its first checkpoint"))
    # tmp_step_N (being written) and old_step_N (being replaced) never match
    return sorted((int(m.group(1)), _at(e.url)) for e in storage.ls(url) if e.is_dir and (m := STEP_RE.match(e.name)))


def in_progress(checkpoint_dir: str | Path) -> list[int]:
    """The steps whose ``tmp_step_N`` exists and whose ``step_N`` does not yet: being written or finalised.

    Example:
        >>> nbtools.checkpoints.in_progress(cfg.checkpoint_dir)
        [300]
    """
    try:
        names = [e.name for e in storage.ls(_root(checkpoint_dir)) if e.is_dir]
    except (NotFoundError, OSError):
        return []
    done = {int(m.group(1)) for n in names if (m := STEP_RE.match(n))}
    return sorted({int(m.group(1)) for n in names if (m := _TMP_RE.match(n))} - done)


def checkpoint_status(checkpoint_dir: str | Path) -> dict | None:
    """NeMo-RL main's ``latest_checkpoint_status.json`` at the checkpoint root (None when absent or unreadable).

    Its ``last_checkpoint_step`` is written when a save *starts* finalising: the step may still be ``tmp_step_N``.
    """
    try:
        data = json.loads(storage.read_bytes(storage.join(_root(checkpoint_dir), STATUS_FILE)))
    except (NotFoundError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _none_yet(checkpoint_dir: str | Path) -> NotFoundError:
    pending = in_progress(checkpoint_dir)
    if pending:
        return NotFoundError(
            f"no complete step_N checkpoint in {checkpoint_dir} yet: tmp_step_{pending[-1]} is still being written or "
            "finalised (NeMo-RL renames it to step_N when done)",
            fix="wait for the rename; never use a tmp_step_N directory (it may be incomplete)")
    return NotFoundError(f"no step_N checkpoints in {checkpoint_dir}",
                         fix="wait for the first save (checkpointing.save_period) or check checkpoint_dir")


def _owner(checkpoint_dir):
    """The registered layout that claims ``checkpoint_dir`` (verl's ``global_step_N``, ...), or None: then it is read
    here as ``step_N`` dirs (``nbtools.trainers.RunLayout.owns_checkpoints``)."""
    return next((lay for lay in _trainer_folders.layouts().values() if lay.owns_checkpoints(checkpoint_dir)), None)


def step_owner(step_dir) -> tuple[object, str] | None:
    """(the registered layout whose own reader reads this one checkpoint, its weight layout), or None: a ``step_N``
    read here (``nbtools.trainers.RunLayout.step_layout``)."""
    for lay in _trainer_folders.layouts().values():
        if (name := lay.step_layout(step_dir)) is not None:
            return lay, name
    return None


_INT_FIELDS = ("consumed_samples", "current_step", "current_epoch", "total_steps", "total_valid_tokens")
_DAMAGED = "the checkpoint is damaged or incomplete; pick another step (or re-copy this one from where training wrote it)"


def _is_number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _load_info(step_dir: str | Path) -> tuple[dict, str | None]:
    """(fields, problem) of ``training_info.json``; fields are {} when it cannot be used at all."""
    url = storage.join(_root(step_dir), "training_info.json")
    try:
        info = json.loads(storage.read_bytes(url))
    except NotFoundError:
        what = "is a dangling symlink" if not storage.is_remote(url) and Path(url).is_symlink() else "is missing"
        return {}, f"training_info.json {what} (NeMo-RL writes it first)"
    except (OSError, UnicodeDecodeError) as e:
        return {}, f"training_info.json cannot be read ({type(e).__name__}: {e})"
    except json.JSONDecodeError as e:
        return {}, f"training_info.json is not valid JSON, truncated? ({e})"
    if not isinstance(info, dict):
        return {}, f"training_info.json holds a JSON {type(info).__name__}, not an object"
    bad = [f"{k}={v!r}" for k, v in info.items()
           if (k in _INT_FIELDS and not (isinstance(v, int) and not isinstance(v, bool)))
           or isinstance(v, dict | list)
           or ((":" in k or k.startswith("val")) and v is not None and not _is_number(v))]
    if bad:
        shown = ", ".join(b if len(b) < 60 else b[:57] + "..." for b in bad[:4])
        return info, f"training_info.json has values of the wrong type: {shown}"
    return info, None


def read_training_info(step_dir: str | Path) -> dict:
    """``training_info.json`` of one checkpoint ({} when absent: NeMo-RL writes it first, so that means damage).

    Raises:
        CheckpointError: the file is not a JSON object (names the problem); listings report it per step instead.

    Example:
        >>> nbtools.checkpoints.read_training_info(step)["current_step"]
        100
    """
    info, problem = _load_info(step_dir)
    if problem and not info and "missing" not in problem:
        raise CheckpointError(f"{storage.join(_root(step_dir), 'training_info.json')}: {problem}", fix=_DAMAGED)
    return info


def detect_layout(step_dir: str | Path) -> str:
    """Which of NeMo-RL's weight layouts a checkpoint uses (see nemo-rl-facts §4).

    Per-rank shards win over a ``consolidated/`` dir when both exist: NeMo-RL#2029 showed consolidated output
    that was not actually concatenated, and the shards are the source of truth.

    Returns:
        "dtensor_v1" | "v2_torch_save" | "v2_safetensors" | "consolidated" | "megatron".

    Raises:
        NotFoundError: no weights at all under ``step_dir``.

    Example:
        >>> nbtools.checkpoints.detect_layout("runs/local-rehearsal/checkpoints/step_100")
        'v2_safetensors'
    """
    if (owned := step_owner(step_dir)) is not None:  # a trainer's own checkpoint (verl's global_step_N)
        return owned[1]
    w = _weights_url(_root(step_dir))
    found = _names(w)
    top = found or {}
    if top.get(".metadata") and not top[".metadata"].is_dir:
        return "dtensor_v1"
    model = _names(storage.join(w, "model")) or {}
    if model.get(".metadata") and not model[".metadata"].is_dir:
        return "v2_torch_save"
    if any(n.startswith("shard-") and n.endswith(".safetensors") for n in model):
        return "v2_safetensors"
    if any(n.endswith(".safetensors") for n in _names(storage.join(w, "model", "consolidated")) or {}):
        return "consolidated"
    if any(n.startswith("iter_") and e.is_dir for n, e in top.items()):
        return "megatron"
    seen = sorted(n for n in top if not n.startswith("."))[:10] if found is not None else "nothing (directory missing)"
    raise NotFoundError(
        f"no model weights found under {w}: expected policy/weights/.metadata (DTensor v1), "
        f"policy/weights/model/.metadata or shard-*.safetensors (DTensor v2), model/consolidated/ or iter_* "
        f"(Megatron); saw {seen}",
        fix="pass a complete step_N directory (not tmp_step_N); if it was copied, copy policy/weights again",
    )


def _names(url: str) -> dict[str, storage.Entry] | None:
    """{name: entry} of a directory's children; None when it is not there."""
    try:
        return {e.name: e for e in storage.ls(url)}
    except NotFoundError:
        return None


def _weights_url(step: str) -> str:
    """``step_N/policy/weights`` (also that directory itself, or its ``model/`` subdirectory), on any storage."""
    w = storage.join(step, "policy", "weights")
    if (e := storage.info(w)) is not None and e.is_dir:
        return w
    if storage.name_of(step) == "model" and storage.name_of(storage.parent_of(step)) == "weights":
        return storage.parent_of(step)
    return step


def list_checkpoints(checkpoint_dir: str | Path) -> pd.DataFrame:
    """Every finished ``step_N`` with its layout and ``training_info.json`` fields, oldest first.

    ``tmp_step_N`` directories are not rows: their steps are in ``df.attrs["in_progress"]``, and NeMo-RL main's
    ``latest_checkpoint_status.json`` (when present) in ``df.attrs["status"]``.

    A step whose ``training_info.json`` is missing, not JSON, truncated or of the wrong shape is still listed,
    with the reason in the ``problem`` column (None when fine), so one damaged step never hides the others.

    Example:
        >>> nbtools.checkpoints.list_checkpoints(cfg.checkpoint_dir)[["step", "layout", "val:accuracy"]]
    """
    if (owner := _owner(checkpoint_dir)) is not None:
        return owner.list_checkpoints(checkpoint_dir)
    rows = []
    for step, path in _steps(checkpoint_dir):
        try:
            layout = detect_layout(path)
        except NotFoundError:
            layout = "missing"
        except OSError:
            layout = "unreadable"
        info, problem = _load_info(path)
        reserved = {"step", "path", "layout", "problem"}
        rows.append({"step": step, "path": str(path), "layout": layout, "problem": problem,
                     **{k: v for k, v in info.items() if k not in reserved}})
    df = pd.DataFrame(rows, columns=None if rows else ["step", "path", "layout", "problem"]).reset_index(drop=True)
    df.attrs["in_progress"] = in_progress(checkpoint_dir)  # tmp_step_N: never rows, never picked
    df.attrs["status"] = checkpoint_status(checkpoint_dir)
    return df


def overview(checkpoints: pd.DataFrame) -> pd.DataFrame:
    """:func:`list_checkpoints`' frame as a person reads it: one row per ``step_N``, its state first, then its metrics.

    ``path`` becomes the directory's name; ``current_step`` (NeMo-RL's position *within the epoch*, 50 for every
    checkpoint at an epoch's end) and ``val_reward`` where it repeats a ``val:`` metric are left out; counters get
    their units. The full frame keeps every ``training_info.json`` field.

    Example:
        >>> nbtools.checkpoints.overview(nbtools.checkpoints.list_checkpoints(cfg.checkpoints_url))
    """
    df = checkpoints.copy()
    out = pd.DataFrame({"checkpoint": [storage.name_of(str(p)) for p in df["path"]],
                        "state": ["ok" if p is None or p != p else f"damaged: {p}" for p in df["problem"]],
                        "layout": df["layout"]})
    metrics = [c for c in df.columns if c.startswith("val:")]
    for c in metrics:
        out[c] = df[c]
    if "val_reward" in df.columns and not any(df["val_reward"].equals(df[c]) for c in metrics):
        out["val_reward"] = df["val_reward"]
    for col, label in (("current_epoch", "epoch"), ("consumed_samples", "samples seen"),
                       ("total_valid_tokens", "tokens trained")):
        if col in df.columns:
            out[label] = df[col]
    return _table.table(out, when_empty="no complete step_N checkpoint yet")


def latest(checkpoint_dir: str | Path) -> Path:
    """The highest ``step_N`` (what NeMo-RL auto-resumes from).

    Example:
        >>> nbtools.checkpoints.latest(cfg.checkpoint_dir)
        PosixPath('.../checkpoints/step_600')
    """
    if (owner := _owner(checkpoint_dir)) is not None:
        return owner.latest_checkpoint(checkpoint_dir)
    steps = _steps(checkpoint_dir)
    if not steps:
        raise _none_yet(checkpoint_dir)
    return steps[-1][1]


def best(source: Experiment | str | Path, metric: str | None | EllipsisType = ...,
         higher_is_better: bool | EllipsisType = ...) -> Path:
    """The best checkpoint by a ``training_info.json`` metric, ranked exactly like NeMo-RL's top-k.

    Sorted by the metric (descending when ``higher_is_better``); ties go to the higher step; a checkpoint
    without the metric ranks worst; ``metric=None`` means the latest (NeMo-RL's ``metric_name: null``).
    A step whose ``training_info.json`` is damaged (see :func:`list_checkpoints`' ``problem``) ranks below
    every healthy step, with a warning naming it; it is returned only when no step is healthy.

    Args:
        source: the experiment (its ``checkpoints_url``, ranked by its ``checkpointing.metric_name`` and
            ``higher_is_better``, as the trainer kept its top-k), or a checkpoint dir (``val:accuracy``, higher
            is better, unless given).
        metric / higher_is_better: override what ``source`` says.

    Example:
        >>> nbtools.checkpoints.best(cfg)
        PosixPath('.../checkpoints/step_400')
        >>> nbtools.checkpoints.best("gs://bucket/run/checkpoints", metric="val:loss", higher_is_better=False)
    """
    if isinstance(source, Experiment):
        c = source.checkpointing
        checkpoint_dir = source.checkpoints_url
        metric = c.metric_name if metric is ... else metric
        higher_is_better = c.higher_is_better if higher_is_better is ... else higher_is_better
    else:
        checkpoint_dir = source
        metric = "val:accuracy" if metric is ... else metric
        higher_is_better = True if higher_is_better is ... else higher_is_better
    if (owner := _owner(checkpoint_dir)) is not None:
        if metric is not None:
            warnings.warn(f"{owner.name} keeps no metrics beside its checkpoints, so {metric!r} cannot rank them here: "
                          f"returning the latest; rank them with its metrics frame (nbtools.trainers.{owner.name}.best_{owner.name})",
                          stacklevel=2)
        return owner.latest_checkpoint(checkpoint_dir)
    steps = _steps(checkpoint_dir)
    if not steps:
        raise _none_yet(checkpoint_dir)
    worst = -math.inf if higher_is_better else math.inf
    ranked, damaged = [], []
    for n, path in steps:
        info, problem = _load_info(path)
        value = info.get(metric) if metric is not None else None
        if problem is None and metric is not None and value is not None and not _is_number(value):
            problem = f"{metric}={value!r} is not a number"
        if problem:
            damaged.append(f"{storage.name_of(path)}: {problem}")
        v = float(value) if _is_number(value) and not math.isnan(float(value)) else worst
        ranked.append(((problem is None, (v if higher_is_better else -v) if metric is not None else 0.0, n), path))
    chosen = max(ranked, key=lambda r: r[0])
    if damaged:
        note = ("every step is damaged; returning the best of them" if not chosen[0][0]
                else "ranked below every healthy step")
        warnings.warn(f"{len(damaged)} checkpoint(s) in {checkpoint_dir} {note}: " + "; ".join(damaged),
                      stacklevel=2)
    return chosen[1]


def at_step(source: Experiment | str | Path, step: int) -> str | Path:
    """The checkpoint of step ``step`` (NeMo-RL's ``step_N``, verl's ``global_step_N``), for a run that evaluates a
    named step rather than the best one (tutorial 000 merges and scores step 30).

    Raises:
        NotFoundError: no complete checkpoint of that step, with the steps there are.

    Example:
        >>> nbtools.checkpoints.at_step(cfg, 30)
        'gs://bucket/gemma3-1b-b200/checkpoints/step_30'
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise CheckpointError(f"step must be a checkpoint's step number (an int >= 0), got {step!r}",
                              fix="pass the N of step_N, e.g. 30; `nbtools checkpoints` lists them")
    checkpoint_dir = source.checkpoints_url if isinstance(source, Experiment) else source
    df = list_checkpoints(checkpoint_dir)
    ok = df[df["problem"].isna()] if "problem" in df.columns else df
    hit = ok[ok["step"] == step]
    if hit.empty:
        have = ", ".join(str(int(s)) for s in ok["step"]) or "none yet"
        damaged = "; it is there but damaged (see `problem`)" if step in set(df["step"]) else ""
        raise NotFoundError(f"no complete checkpoint of step {step} in {checkpoint_dir} (complete steps: {have}){damaged}",
                            fix="pick one of those steps (checkpointing.save_period decides which are saved, "
                                "keep_top_k which are kept), or leave the step out to take the best")
    path = hit.iloc[-1]["path"]
    return _paths.Url(str(path)) if storage.is_remote(str(path)) else Path(path)
