"""verl FSDP checkpoints (``<default_local_dir>/global_step_N/actor/``): list them and choose one, from listings and
the small JSON/text files only (no torch: what ``nbtools.checkpoints.list_checkpoints`` asks every trainer's layout,
for every run, without the [merge] extra); reading the rank files is ``_checkpoints``.

verl v0.7.0 (``verl/utils/checkpoint/fsdp_checkpoint_manager.py``, ``verl/trainer/ppo/ray_trainer.py``) writes, per
save, ``global_step_N/actor/model_world_size_{W}_rank_{R}.pt``, ``optim_…``/``extra_state_…`` files, ``huggingface/``
(config, tokenizer) and ``fsdp_config.json``; after every rank finished, ``latest_checkpointed_iteration.txt`` in
``default_local_dir`` holds N. A ``global_step_N`` above that number is still being written (or died writing).

Example:
    >>> nbtools.trainers.verl.list_verl_checkpoints("checkpoints/verl_grpo_gsm8k/qwen2_5_32b")[["step", "latest"]]
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd

from nbtools import _layout, _paths, storage
from nbtools.errors import CheckpointError, Fix, NotFoundError

__all__ = ["VERL_LAYOUT", "VERL_STEP_RE", "TRACKER", "is_verl_dir", "is_verl_step", "verl_actor_dir", "verl_steps",
           "list_verl_checkpoints", "latest_verl", "best_verl", "read_verl_world_size"]


VERL_LAYOUT = "verl_fsdp"
VERL_STEP_RE = _layout.VERL_STEP_RE
TRACKER = "latest_checkpointed_iteration.txt"
_RANK_RE = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")
_RESYNC = ("re-copy the complete global_step_N/actor directory from where verl wrote it "
           "(trainer.default_local_dir), or pick another step")


def _ls(url: str | Path) -> dict[str, storage.Entry]:
    try:
        return {e.name: e for e in storage.ls(url)}
    except (NotFoundError, NotADirectoryError):
        return {}


def _out(url: str) -> str | Path:
    """A ``Path`` on this machine, a ``Url`` (a str with ``.name``, like NeMo-RL's listings) in a bucket."""
    return _paths.Url(url) if storage.is_remote(url) else Path(url)


def verl_steps(run_dir: str | Path) -> list[tuple[int, str | Path]]:
    """``(N, path)`` of every ``global_step_N`` directory, lowest first ([] when there is none); a URL for a bucket."""
    d = str(run_dir).rstrip("/") if storage.is_remote(run_dir) else str(Path(run_dir).expanduser())
    return sorted((int(m.group(1)), _out(e.url)) for e in _ls(d).values()
                  if e.is_dir and (m := VERL_STEP_RE.match(e.name)))


def is_verl_dir(run_dir: str | Path) -> bool:
    """A verl ``trainer.default_local_dir`` (local or ``gs://``): the tracker file or a ``global_step_N`` directory,
    and no NeMo-RL ``step_N``."""
    from nbtools._layout import STEP_RE

    names = _ls(str(run_dir).rstrip("/") if storage.is_remote(run_dir) else Path(run_dir).expanduser())
    if any(STEP_RE.match(n) for n, e in names.items() if e.is_dir):
        return False
    return TRACKER in names or any(VERL_STEP_RE.match(n) for n, e in names.items() if e.is_dir)


def verl_actor_dir(step_dir: str | Path) -> Path:
    """``global_step_N/actor`` (also accepts the ``actor`` directory itself)."""
    p = Path(step_dir).expanduser()
    return p if p.name == "actor" and not (p / "actor").is_dir() else p / "actor"


def is_verl_step(step_dir: str | Path) -> bool:
    """A local verl checkpoint: ``global_step_N`` (or its ``actor/``) with ``fsdp_config.json`` or rank files."""
    if storage.is_remote(step_dir):
        return False
    a = verl_actor_dir(step_dir)
    return a.is_dir() and ((a / "fsdp_config.json").is_file() or any(_RANK_RE.match(p.name) for p in a.iterdir()))


def _tracked(run_dir: str) -> tuple[int | None, str | None]:
    """(N from the tracker file, problem)."""
    try:
        text = storage.read_bytes(storage.join(run_dir, TRACKER)).decode(errors="replace").strip()
    except (NotFoundError, FileNotFoundError):
        return None, None
    if not text.isdigit():
        return None, f"{TRACKER} holds {text[:40]!r}, not a step number"
    return int(text), None


def _world_size(actor: str, names: dict) -> tuple[int, int | None]:
    if "fsdp_config.json" in names:
        try:
            d = json.loads(storage.read_bytes(storage.join(actor, "fsdp_config.json")))
            ws = d["world_size"]
            if isinstance(ws, int) and not isinstance(ws, bool) and ws > 0:
                return ws, d.get("FSDP_version")
        except (ValueError, KeyError, TypeError, NotFoundError):
            pass
        raise CheckpointError(f"{storage.join(actor, 'fsdp_config.json')} is not the JSON object verl writes "
                              f"({{'FSDP_version': …, 'world_size': W}})", fix=_RESYNC)
    sizes = {int(m.group(1)) for n in names if (m := _RANK_RE.match(n))}
    if len(sizes) != 1:
        raise CheckpointError(f"{actor} has no fsdp_config.json and rank files of world sizes {sorted(sizes)}",
                              fix=_RESYNC)
    return sizes.pop(), None


def read_verl_world_size(actor: Path) -> tuple[int, int | None]:
    """(world size, FSDP version) from ``fsdp_config.json``, else from the rank files' names."""
    return _world_size(str(actor), _ls(actor))


def _step_problem(step: str, n: int, tracked: int | None) -> tuple[int | None, int | None, str | None]:
    """(world size, FSDP version, problem) of one step; problem None when every file verl writes is there."""
    actor = storage.join(step, "actor")
    names = _ls(actor)
    if not names:
        return None, None, ("no actor/ directory (verl writes the policy under global_step_N/actor, and "
                            "trainer.max_actor_ckpt_to_keep removes it from older saves, leaving data.pt)")
    try:
        ws, version = _world_size(actor, names)
    except CheckpointError as e:
        return None, None, str(e)
    present = {r for n in names if (m := _RANK_RE.match(n)) and int(m.group(1)) == ws and (r := int(m.group(2))) < ws}
    if len(present) < ws:  # counted, never listed: world_size may be any number (1e9 built 1e9 names)
        first = [f"model_world_size_{ws}_rank_{r}.pt" for r in range(min(ws, len(present) + 3)) if r not in present]
        return ws, version, f"{ws - len(present)} of {ws} rank files missing ({', '.join(first[:3])})"
    if "config.json" not in _ls(storage.join(actor, "huggingface")):
        return ws, version, "huggingface/config.json is missing (verl's rank 0 writes it with the tokenizer)"
    if tracked is not None and n > tracked:
        return ws, version, f"newer than {TRACKER} ({tracked}): still being written, or the save died"
    return ws, version, None


def list_verl_checkpoints(run_dir: str | Path) -> pd.DataFrame:
    """Every ``global_step_N`` of a verl run (a local dir or ``gs://…``), oldest first: step, path, layout, problem,
    world_size, fsdp_version, latest.

    ``latest`` marks the step named by ``latest_checkpointed_iteration.txt`` (what verl resumes from); a step
    with missing files, or newer than that file, carries the reason in ``problem`` (None when complete). Only
    listings and the small JSON/text files are read, never the weights.

    Example:
        >>> nbtools.trainers.verl.list_verl_checkpoints(run_dir)[["step", "world_size", "latest", "problem"]]
    """
    d = str(run_dir).rstrip("/") if storage.is_remote(run_dir) else str(Path(run_dir).expanduser())
    if storage.info(d) is None:
        raise NotFoundError(f"checkpoint dir {d!r} does not exist",
                            fix="check trainer.default_local_dir, or wait until verl saved (trainer.save_freq)")
    tracked, tracker_problem = _tracked(d)
    rows = []
    for step, path in verl_steps(d):
        ws, version, problem = _step_problem(str(path), step, tracked)
        rows.append({"step": step, "path": str(path), "layout": VERL_LAYOUT, "problem": problem or tracker_problem,
                     "world_size": ws, "fsdp_version": version, "latest": step == tracked})
    cols = ["step", "path", "layout", "problem", "world_size", "fsdp_version", "latest"]
    return pd.DataFrame(rows, columns=cols)


def latest_verl(run_dir: str | Path) -> str | Path:
    """The step ``latest_checkpointed_iteration.txt`` names, else the highest complete ``global_step_N``.

    Example:
        >>> nbtools.trainers.verl.latest_verl(run_dir)
        PosixPath('.../global_step_200')
    """
    df = list_verl_checkpoints(run_dir)
    ok = df[df["problem"].isna()]
    if ok.empty:
        seen = "; ".join(f"global_step_{s}: {p}" for s, p in zip(df["step"], df["problem"], strict=True)) or "none"
        raise NotFoundError(f"no complete verl checkpoint in {run_dir} (saw {seen})",
                            fix="wait for the first save (trainer.save_freq) or check trainer.default_local_dir")
    tagged = ok[ok["latest"]]
    return _out((tagged if not tagged.empty else ok).iloc[-1]["path"])


def best_verl(run_dir: str | Path, metric: str | None = None, metrics: pd.DataFrame | None = None,
              higher_is_better: bool = True) -> str | Path:
    """The complete checkpoint with the best ``metric`` at its step, read from a tidy metrics frame.

    verl keeps no metric beside its checkpoints, so the value comes from ``metrics`` (``nbtools.metrics``' frame:
    tag, step, value), e.g. ``val-core/openai/gsm8k/acc/mean@1`` logged at the save step. Ties go to the higher
    step, a step without the metric ranks last; ``metric=None`` means :func:`latest_verl`.

    Example:
        >>> df = nbtools.metrics.read_verl_log(log)
        >>> nbtools.trainers.verl.best_verl(run_dir, "val-core/openai/gsm8k/acc/mean@1", metrics=df)
    """
    if metric is None:
        return latest_verl(run_dir)
    if metrics is None or not {"tag", "step", "value"} <= set(metrics.columns):
        raise CheckpointError(f"verl stores no metrics with its checkpoints, so {metric!r} needs a metrics frame",
                              fix=Fix("pass metrics=nbtools.metrics.read_verl_log(LOG) or read_tensorboard(TENSORBOARD_DIR)",
                                      cli="pick the step from the run's metrics (`nbtools metrics RUN`) and merge it: "
                                          "`nbtools merge STEP_DIR OUT_DIR`"))
    df = list_verl_checkpoints(run_dir)
    ok = df[df["problem"].isna()]
    if ok.empty:
        return latest_verl(run_dir)  # raises with the reasons
    vals = metrics[metrics["tag"] == metric].groupby("step")["value"].last()
    if vals.empty:
        raise CheckpointError(f"metric {metric!r} is not in the metrics frame (tags: {sorted(set(metrics['tag']))[:8]})",
                              fix="pick a tag the run logged, e.g. one starting with val-core/")
    worst = -math.inf
    ranked = []
    for step, path in zip(ok["step"], ok["path"], strict=True):
        v = vals.get(step)
        v = float(v) if v is not None and not math.isnan(float(v)) else None
        ranked.append(((v if higher_is_better else -v) if v is not None else worst, int(step), path))
    return _out(max(ranked)[2])
