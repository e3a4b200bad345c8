"""Read NeMo-RL trajectory dumps (``train_data_step{N}.jsonl``, ``val_data_step{N}.jsonl``) fast and safely.

Another trainer's dumps open through its layout (``nbtools.trainers.layouts()``, ``open_trajectories``): ``open_run``
on verl's ``{step}.jsonl`` dumps (``trainer.rollout_data_dir``) returns verl's run, with the same table columns.

Why: a run writes GBs of per-sample records while it trains; people want one step, one record or the whole
run as a table, at any moment, without ``kubectl exec … | jq`` and without a crash on the line being written.

Columns of :meth:`Run.read`: step, idx, prompt, response, env_observation, reward, generation_length,
input_length, advantage, think, answer (``arrays=True`` adds token_ids, token_loss_mask, advantages,
generation_logprobs, prev_logprobs as numpy arrays).

- ``generation_length`` = ``sum(token_loss_mask)`` (tokens the policy generated). NeMo-RL ≤ v0.5 writes no
  mask: the column is NaN there (NaN means "not recorded", never 0).
- ``advantage`` = the value of ``advantages`` at the first generated token (first 1 in the mask). NeMo-RL
  broadcasts each sample's advantage over all its tokens, so this is the sample's advantage. NaN in v0.5.
- ``think`` / ``answer``: ``nbtools.rewards.split_think_answer`` with the run's tags.
- v0.6+ validation dumps hold chat messages; their user / assistant / environment contents fill
  prompt / response / env_observation.

Live-safe: only complete lines are read; bytes after the last newline are reported as pending
(``run.pending``); malformed lines are skipped, counted (``run.skipped``) and listed with file and line number
(``run.problems``) and a warning; non-UTF-8 bytes are replaced and listed. Gaps in step numbers are fine.
Odd records are coerced, not fatal (see ``_coerce``): message content as a list of parts, fields wrapped once
more or once less than NeMo-RL writes them, ``NaN``/``Infinity`` literals; a record whose ``idx`` does not fit
in int64 is skipped and listed. A step file that cannot be opened (a dangling symlink) is listed in
``run.problems`` and the other steps are read. ``read()``, ``read(arrays=True)`` and ``iter_records`` give the
same rows: read + skipped = complete lines.

Resumed runs: a run resumed from a checkpoint writes a new ``exp_NNN`` starting at the step after it. Opening the
log_dir reads the latest exp dir together with the earlier attempts' exp dirs it continues (``run.segments``); a
step that two attempts wrote (the first one got past its last checkpoint before it died) is read once, from the
newest, and listed in ``run.overlap`` and ``df.attrs["overlap_steps"]``.

Example:
    >>> run = nbtools.trajectories.open_run(cfg.log_dir)       # latest exp_NNN
    >>> df = run.read(range(1, 11))                             # steps 1..10
    >>> run.record(5, 0)["response"]
"""

from __future__ import annotations

import os
from pathlib import Path

from nbtools import _trainer_folders, storage
from nbtools._groups import group_ids, group_numbers, uid_sample
from nbtools._layout import EXP_RE, exp_dirs, resumed_chain
from nbtools.errors import Fix, NotFoundError
from nbtools.trajectories._parse import ARRAY_KEYS, COLUMNS
from nbtools.trajectories._read import ALL_COLUMNS
from nbtools.trajectories._run import FILE_RE, Run
from nbtools.trajectories._summary import group_table, step_summary, verdict

__all__ = ["open_run", "group_ids", "group_numbers", "uid_sample", "Run", "step_summary", "group_table", "verdict", "COLUMNS", "ALL_COLUMNS", "ARRAY_KEYS"]

# A trainer's own reader lives in its folder: these moved there (issue 43); open_run opens every trainer's dumps.
_MOVED = dict.fromkeys(("open_verl_run", "VerlRun"), "nbtools.trainers.verl")


def __getattr__(name: str):
    if name in _MOVED:
        raise AttributeError(f"nbtools.trajectories.{name} moved to {_MOVED[name]}.{name}; fix: call that, or "
                             "nbtools.trajectories.open_run, which opens every trainer's dumps")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _layouts_run(where: str, **kw):
    """The run a registered trainer's layout opens at ``where`` (verl's dumps), or None."""
    return next((run for lay in _trainer_folders.layouts().values()
                 if (run := lay.open_trajectories(where, **kw)) is not None), None)



def open_run(path, *, exp: str | int | None = None, think_tag: str = "think", answer_tag: str = "answer",
             cache: bool = True, cache_dir: str | os.PathLike | None = None) -> Run:
    """Open a run: an ``exp_NNN`` dir, a NeMo-RL ``log_dir`` (latest ``exp_NNN`` unless ``exp``), or a config.

    Why: users know the log_dir (or just the experiment config), not which exp_NNN the last launch created.

    Args:
        path: exp dir or log_dir — a local path or a URL (``gs://…``: read through a local copy kept per object
            generation) — or an ``Experiment`` (its ``logs_url`` is used).
        exp: pick ``exp_NNN`` in a log_dir (``3`` or ``"exp_003"``) instead of the latest.
        think_tag / answer_tag: tags split out of the response into ``think`` / ``answer``.
        cache: keep the line index and a Parquet cache of the columns beside the data (``<exp>/.nbtools``) or,
            when that is not writable, in memory.
        cache_dir: put the cache here instead (e.g. a local dir for a read-only bucket mount).

    Raises:
        NotFoundError: the path does not exist, or holds neither dumps nor ``exp_*`` dirs.

    Example:
        >>> run = nbtools.trajectories.open_run(cfg.logs_url)   # a local path, or gs://… on GKE
        >>> run.steps[-5:]
    """
    if hasattr(path, "logs_url") and not isinstance(path, (str, os.PathLike)):
        path = path.logs_url
    text = os.fspath(path)
    remote = storage.is_remote(text)
    where = text.rstrip("/") if remote else str(Path(text).expanduser())
    found = storage.info(where)  # the same check, the same error, on every storage
    if found is None or not found.is_dir:
        raise NotFoundError(f"expected a run directory at {where}, found {'a file' if found else 'nothing there'}",
                            fix=Fix("pass the experiment's logs URL (cfg.logs_url; a gke run's logs are in its bucket: gs://…) or one exp_NNN "
                                    "dir inside it; the job creates <log_dir>/exp_NNN when it starts (notebook 03)",
                                    cli="pass the run's log_dir (a gke run's logs are in its bucket: gs://…) or one "
                                        "exp_NNN dir inside it; the job creates <log_dir>/exp_NNN when it starts"))
    if remote:
        return _open_remote(where, exp, think_tag=think_tag, answer_tag=answer_tag, cache=cache)
    p = Path(where)
    if exp is None and EXP_RE.match(p.name):  # an exp dir: no listing, so opening is O(1) in the run size
        return Run(p, think_tag=think_tag, answer_tag=answer_tag, cache=cache, cache_dir=cache_dir)
    if exp is None and not _has_dumps(p) and (run := _layouts_run(where, think_tag=think_tag,
                                                                 answer_tag=answer_tag)) is not None:
        return run  # another trainer's dumps (verl's rollout_data_dir, or a log_dir holding it)
    exps = exp_dirs(p)
    if exp is not None:
        try:
            want = int(str(exp).removeprefix("exp_"))
        except ValueError:
            raise NotFoundError(f"expected exp as a number or 'exp_NNN', got {exp!r}",
                                fix=Fix("pass e.g. exp=3 or exp='exp_003', or exp=None for the latest",
                                        cli="pass the exp_NNN directory itself, or the log_dir for its latest exp_NNN")) from None
        match = [d for n, d in exps if n == want]
        if not match:
            raise NotFoundError(f"expected exp_{want:03d} under {p}, found {[d.name for _, d in exps] or 'none'}",
                                fix=Fix("pass one of the listed exp numbers, or exp=None for the latest",
                                        cli="pass one of the listed exp_NNN dirs, or the log_dir for its latest exp_NNN"))
        p = match[0]
    elif exps and not _has_dumps(p):  # the latest exp dir, with those of earlier attempts when it resumed
        chain = resumed_chain(exps, os.listdir)
        return Run(chain[-1], think_tag=think_tag, answer_tag=answer_tag, cache=cache, cache_dir=cache_dir,
                   earlier=chain[:-1])
    elif not exps and not _has_dumps(p) and not (p / "tensorboard").is_dir():
        raise NotFoundError(f"expected train_data_step*.jsonl or exp_* dirs in {p}, found {sorted(n for n in os.listdir(p) if not n.startswith('.'))[:8]}",
                            fix=_FIX_NOT_A_RUN)
    return Run(p, think_tag=think_tag, answer_tag=answer_tag, cache=cache, cache_dir=cache_dir)


_FIX_NOT_A_RUN = Fix("pass the NeMo-RL logger.log_dir (cfg.logs_url: a path, or gs://… on a cluster) or one exp_NNN dir "
                     "inside it", cli="pass the run's log_dir (a path, or gs://… on a cluster) or one exp_NNN dir "
                     "inside it")


def _open_remote(url: str, exp, **kw) -> Run:
    """A run in a bucket: pick the exp dir from one listing, then read through the local mirror."""
    url = url.rstrip("/")
    if exp is None and EXP_RE.match(storage.name_of(url)):
        return Run(None, remote=url, **kw)
    entries = storage.ls(url)
    exps = sorted((int(m.group(1)), e.url) for e in entries if e.is_dir and (m := EXP_RE.match(e.name)))
    has_dumps = any(FILE_RE.match(e.name) for e in entries)
    if exp is not None:
        try:
            want = int(str(exp).removeprefix("exp_"))
        except ValueError:
            raise NotFoundError(f"expected exp as a number or 'exp_NNN', got {exp!r}",
                                fix=Fix("pass e.g. exp=3 or exp='exp_003', or exp=None for the latest",
                                        cli="pass the exp_NNN directory itself, or the log_dir for its latest exp_NNN")) from None
        match = [u for n, u in exps if n == want]
        if not match:
            raise NotFoundError(f"expected exp_{want:03d} under {url}, found {[storage.name_of(u) for _, u in exps] or 'none'}",
                                fix=Fix("pass one of the listed exp numbers, or exp=None for the latest",
                                        cli="pass one of the listed exp_NNN dirs, or the log_dir for its latest exp_NNN"))
        return Run(None, remote=match[0], **kw)
    if not exps and not has_dumps and (run := _layouts_run(url, entries=entries, think_tag=kw["think_tag"],
                                                           answer_tag=kw["answer_tag"])) is not None:
        return run  # another trainer's dumps, read through a local mirror its layout makes
    if exps and not has_dumps:
        chain = resumed_chain(exps, lambda u: [e.name for e in storage.ls(u)])
        return Run(None, remote=chain[-1], earlier=chain[:-1], **kw)
    if not has_dumps and not any(e.name == "tensorboard" for e in entries):
        raise NotFoundError(f"expected train_data_step*.jsonl or exp_* dirs in {url}, found "
                            f"{[e.name for e in entries if not e.name.startswith('.')][:8]}", fix=_FIX_NOT_A_RUN)
    return Run(None, remote=url, **kw)


def _has_dumps(p: Path) -> bool:
    with os.scandir(p) as it:
        return any(FILE_RE.match(e.name) for e in it)  # stops at the first dump
