"""Training metrics as one tidy DataFrame (run, tag, step, value, wall_time) from TensorBoard or verl logs.

Why: the curves people watch (reward, generation length, KL) live in TensorBoard event files for NeMo-RL and
in console lines for verl; one frame with a name map lets the same plot serve both, run beside run.

TensorBoard event files are read record by record (``nbtools._tfevents``: TFRecord framing checked with
tensorboard's own ``masked_crc32c``), because tensorboard's ``EventFileLoader`` swallows ``DataLossError`` and
silently cuts a curve at the first damaged record. Here a damaged record is skipped, reading resumes at the
next intact record, and every problem is listed in ``df.attrs["problems"]`` (file, offset, kind, message) and
warned about: ``corrupt`` (a checksum failed), ``truncated`` (the file ends inside a record and has not changed
for a minute: the writer died), ``unreadable``; ``pending`` (the same cut in a file written moments ago: a flush
in progress) is listed but not warned about, as it completes on the next read. Scalars are taken from legacy
``simple_value`` and v2 scalar tensors directly (no ``data_compat`` migration: 5x faster). Symlinked
directories (the ``tensorboard/`` dir, the exp dir, the log_dir) are followed.

Several event files in one directory: a file that resumes (its first step after 0 is later than where the
directory's run began) continues that run, and where it re-logs a step the last write wins; a file that starts
over (first step after 0 at or before that point) is another run, labelled ``<run>#2``, ``#3``… and warned
about, never spliced into the first run's curve. ``df.attrs["files"]`` maps each label to its event files.

A log_dir whose latest exp dir resumed an earlier attempt (``nbtools.launch.resubmit``; see
``nbtools._layout.resumed_chain``) is read with the exp dirs it continues, under the latest one's label: a step both
attempts logged keeps the newest value, and ``df.attrs["overlap_steps"]`` lists those steps (``segments``: the dirs).

Example:
    >>> df = nbtools.metrics.read_tensorboard(cfg.log_dir)           # latest exp_NNN
    >>> nbtools.metrics.select(df, "reward").tail()
"""

from __future__ import annotations

import fnmatch
import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from nbtools import _table, _trainer_folders
from nbtools._layout import EXP_RE, exp_dirs, resumed_chain
from nbtools._tfevents import event_files, events
from nbtools.errors import Fix, NotFoundError

# NAME_MAP comes from __getattr__ (read from the layouts when asked)
__all__ = ["COLUMNS", "NAME_MAP", "read_tensorboard", "read_hparams", "read_verl_log", "read_runs", "select",  # noqa: F822
           "framework_of", "latest", "ema"]

COLUMNS = ["run", "tag", "step", "value", "wall_time"]



def _name_map() -> dict[str, dict[str, tuple[str, ...]]]:
    """Friendly name -> candidate tags per metric family (a layout's name), first present wins: each registered
    trainer's layout's own names (``nbtools.trainers.layouts()``)."""
    return {n: lay.metric_names for n, lay in _trainer_folders.layouts().items()}


def __getattr__(name: str):
    if name == "NAME_MAP":  # read from the registered layouts when asked, so a registered trainer's names appear
        return _name_map()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _empty() -> pd.DataFrame:
    return pd.DataFrame({"run": pd.Series(dtype="str"), "tag": pd.Series(dtype="str"),
                         "step": pd.Series(dtype="int64"), "value": pd.Series(dtype="float64"),
                         "wall_time": pd.Series(dtype="float64")})


def _resolve_tb(path: Path, chain: list[Path] | None = None) -> tuple[Path, list[Path], list[Path]]:
    """(run root, event files, earlier exp dirs): an event file, a tensorboard dir, an exp dir, or a log_dir (its
    latest exp, with the exp dirs of the earlier attempts it resumed: ``_layout.resumed_chain``)."""
    if path.is_file():
        return path.parent, [path], []
    exps = exp_dirs(path)
    if exps and not any(path.glob("events.out.tfevents.*")) and not (path / "tensorboard").is_dir():
        chain = chain or resumed_chain(exps, os.listdir)
        return chain[-1], [f for d in chain for f in event_files(d)], chain[:-1]
    return path, event_files(path), []


def _scalar(value) -> float | None:
    if value.HasField("simple_value"):
        return float(value.simple_value)
    if value.HasField("tensor") and value.metadata.plugin_data.plugin_name in ("scalars", ""):
        from tensorboard.util import tensor_util

        try:
            arr = tensor_util.make_ndarray(value.tensor)
        except (ValueError, TypeError):
            return None
        if arr.size == 1 and arr.dtype.kind in "fiub":
            return float(arr.reshape(()))
    return None


def _run_labels(files: list[Path], start: dict[Path, int | None], first_wall: dict[Path, float],
                label: str) -> dict[Path, str]:
    """Label each event file: a file that starts over (see the module doc) begins another run in its directory."""
    out: dict[Path, str] = {}
    by_dir: dict[Path, list[Path]] = {}
    for f in files:
        by_dir.setdefault(f.parent, []).append(f)
    for d, group in by_dir.items():
        k, begin = 1, None
        for f in sorted(group, key=lambda f: (first_wall[f], f.name)):
            s = start[f]
            if s is not None and begin is not None and s <= begin:
                k += 1
            if s is not None and (begin is None or s <= begin):
                begin = s
            out[f] = label if k == 1 else f"{label}#{k}"
        if k > 1:
            names = ", ".join(f"{f.name} → {out[f]!r}" for f in sorted(group, key=lambda f: first_wall[f]))
            warnings.warn(f"{d} holds event files of {k} runs (a later file starts again from step "
                          f"{begin}): {names}; they are kept as separate runs, not spliced into one curve; "
                          "to read one, pass its event file", stacklevel=3)
    return out


def read_tensorboard(path: str | os.PathLike, run: str | None = None) -> pd.DataFrame:
    """Every scalar in the event files under ``path`` (recursively, so hparams subdirs are included).

    Why: NeMo-RL logs train/*, validation/*, timing/* and performance/* scalars to TensorBoard only.

    Args:
        path: an exp dir, its ``tensorboard/`` dir, one event file, or a log_dir (its latest exp_NNN) — a local
            path or a URL (``gs://…``: the event files are copied here once per object generation).
        run: the run label (default: the exp dir name, e.g. ``exp_001``).

    Returns:
        DataFrame[run, tag, step, value, wall_time] sorted by run, tag and step; empty (same columns) while the
        job has not logged yet. ``df.attrs``: ``problems`` (damaged records, see the module doc) and ``files``
        ({run label: its event files}; a second run found in one directory is labelled ``<run>#2``).

    Raises:
        NotFoundError: ``path`` does not exist.

    Example:
        >>> df = nbtools.metrics.read_tensorboard(cfg.logs_url)
        >>> sorted(df.tag.unique())[:5]
    """
    from nbtools import storage

    remote = storage.is_remote(path)
    text = str(path).rstrip("/") if remote else str(Path(path).expanduser())
    found = storage.info(text)  # the same check, the same error, on every storage
    if found is None:
        raise NotFoundError(f"expected TensorBoard event files under {text}, found nothing there",
                            fix=Fix("pass the run's log_dir (cfg.logs_url: a path, or gs://… on a cluster) or one exp_NNN "
                                "dir inside it; the job creates it when it starts",
                                cli="pass the run's log_dir (a path, or gs://… on a cluster) or one exp_NNN dir inside "
                                    "it; the job creates it when it starts"))
    if remote:
        p = storage.fetch(text) if not found.is_dir else storage.mirror(text, include=lambda rel: "tfevents" in rel)
        chain = None
        if found.is_dir and not EXP_RE.match(storage.name_of(text)):  # a log_dir: which exp dirs make the run
            exps = sorted((int(m.group(1)), e.name) for e in storage.ls(text)
                          if e.is_dir and (m := EXP_RE.match(e.name)))
            names = resumed_chain(exps, lambda n: [e.name for e in storage.ls(storage.join(text, n))])
            chain = [p / n for n in names] or None
    else:
        p, chain = Path(text), None
    root, files, earlier = _resolve_tb(p, chain)
    label = run or (root.parent.name if root.name == "tensorboard" else root.name)
    problems: list[dict] = []
    per_file: dict[Path, tuple[list, list, list, list]] = {}
    start: dict[Path, int | None] = {}
    first_wall: dict[Path, float] = {}
    for f in files:
        tags, steps, values, walls = per_file.setdefault(f, ([], [], [], []))
        first_wall[f] = float("inf")
        for event in events(f, problems, migrate=False):
            first_wall[f] = min(first_wall[f], event.wall_time)
            if not event.HasField("summary"):
                continue
            for v in event.summary.value:
                x = _scalar(v)
                if x is None:
                    continue
                tags.append(v.tag)
                steps.append(event.step)
                values.append(x)
                walls.append(event.wall_time)
        start[f] = min((s for s in steps if s > 0), default=None)
    damaged = [q for q in problems if q["kind"] != "pending"]
    if damaged:
        shown = "; ".join(f"{Path(q['file']).name} at byte {q['offset']}: {q['message']}" for q in damaged[:3])
        warnings.warn(f"{len(damaged)} damaged stretch(es) in TensorBoard event files, the rest was read: {shown}"
                      f"{' …' if len(damaged) > 3 else ''}; see df.attrs['problems']", stacklevel=2)
    labels = _run_labels(files, start, first_wall, label)
    frames = [pd.DataFrame({"run": labels[f], "tag": t, "step": np.asarray(s, dtype=np.int64),
                            "value": np.asarray(v, dtype=np.float64), "wall_time": np.asarray(w, dtype=np.float64)})
              for f, (t, s, v, w) in per_file.items() if t]
    df = pd.concat(frames, ignore_index=True) if frames else _empty()
    overlap: list[int] = []
    if earlier:  # a resumed run: steps logged by two attempts (the newest wins below)
        by_exp: dict[Path, set[int]] = {}
        for f, (_, s, _, _) in per_file.items():
            exp = next((d for d in [*earlier, root] if f.is_relative_to(d)), root)
            by_exp.setdefault(exp, set()).update(x for x in s if x > 0)
        counts = pd.Series([x for v in by_exp.values() for x in v], dtype="int64").value_counts()
        overlap = sorted(int(x) for x in counts[counts > 1].index)
    df = df.sort_values("wall_time", kind="stable").drop_duplicates(["run", "tag", "step"], keep="last")
    df = df.sort_values(["run", "tag", "step"], kind="stable").reset_index(drop=True)
    files_of: dict[str, list[str]] = {}
    for f in files:
        files_of.setdefault(labels[f], []).append(str(f))
    df.attrs.update(problems=problems, files=files_of, overlap_steps=overlap,
                    segments=[str(d) for d in [*earlier, root]])
    return df


def read_hparams(path: str | os.PathLike) -> dict:
    """The hyper-parameters NeMo-RL logged with ``add_hparams`` (``tensorboard/<time>/`` subdirs), as a dict.

    Example:
        >>> nbtools.metrics.read_hparams(cfg.log_dir).get("grpo.num_generations_per_prompt")
    """
    from tensorboard.plugins.hparams import plugin_data_pb2

    _, files, _ = _resolve_tb(Path(path))
    out: dict = {}
    for f in files:
        for event in events(f, []):
            for v in event.summary.value if event.HasField("summary") else ():
                if v.metadata.plugin_data.plugin_name != "hparams":
                    continue
                data = plugin_data_pb2.HParamsPluginData.FromString(v.metadata.plugin_data.content)
                if data.HasField("session_start_info"):
                    for k, hv in data.session_start_info.hparams.items():
                        kind = hv.WhichOneof("kind")
                        out[k] = getattr(hv, kind) if kind else None
    return out


_VERL_STEP = re.compile(r"(?:^|[\s|)\]])step:(\d{1,18})\s+-\s+(.*)$")  # a longer step is a garbled line (int64)
_NUM = re.compile(r"^(?:np\.\w+\()?\s*([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf))\s*\)?$",
                  re.IGNORECASE)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _console_family() -> str | None:
    """The layout whose runs print their scalars as console lines (what :func:`read_verl_log` reads)."""
    return next((n for n, lay in _trainer_folders.layouts().items() if lay.console_log), None)


def read_verl_log(path: str | os.PathLike, run: str | None = None) -> pd.DataFrame:
    """Metrics from verl console lines (``step:32 - critic/score/mean:0.41 - response_length/mean:512.3 - …``).

    Why: verl's console logger is often the only record of a run submitted as a Ray job.

    Args:
        path: a log file (a Ray job log, ``tee``'d stdout), or the text itself when it contains newlines.
        run: the run label (default: the file stem).

    Example:
        >>> df = nbtools.metrics.read_verl_log("verl_demo.log")
        >>> nbtools.metrics.select(df, "kl")
    """
    text_given = isinstance(path, str) and "\n" in path
    if not text_given and not Path(path).exists():
        raise NotFoundError(f"expected a verl log file at {path}, found nothing",
                            fix=Fix("save the job log first, e.g. Path('run.log').write_text(job.logs())",
                                    cli="save the job log first: `nbtools jobs logs EXPERIMENT.yaml --id ID > run.log`"))
    text = path if text_given else Path(path).read_text(errors="replace")
    label = run or (_console_family() if text_given else Path(path).stem)
    tags, steps, values = [], [], []
    for line in text.splitlines():
        m = _VERL_STEP.search(_ANSI.sub("", line).rstrip())
        if not m:
            continue
        step = int(m.group(1))
        for part in m.group(2).split(" - "):
            key, sep, raw = part.strip().rpartition(":")
            num = _NUM.match(raw.strip()) if sep else None
            if num and key:
                tags.append(key)
                steps.append(step)
                values.append(float(num.group(1)))
    if not tags:
        return _empty()
    df = pd.DataFrame({"run": label, "tag": tags, "step": np.asarray(steps, dtype=np.int64),
                       "value": np.asarray(values, dtype=np.float64), "wall_time": np.nan})
    return df.drop_duplicates(["run", "tag", "step"], keep="last").sort_values(["tag", "step"]).reset_index(drop=True)


def read_runs(runs: dict[str, str | os.PathLike] | list[str | os.PathLike]) -> pd.DataFrame:
    """Several runs side by side: TensorBoard dirs and verl logs (``.log``/``.txt`` files) in one frame.

    Example:
        >>> df = nbtools.metrics.read_runs({"lr=1e-6": "/data/logs/a", "lr=3e-6": "/data/logs/b"})
    """
    items = runs.items() if isinstance(runs, dict) else ((None, p) for p in runs)
    frames = []
    for name, p in items:
        is_log = Path(p).is_file() and Path(p).suffix in (".log", ".txt", ".out")
        frames.append(read_verl_log(p, run=name) if is_log else read_tensorboard(p, run=name))
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else _empty()


def ema(values: Sequence[float] | np.ndarray, smoothing: float = 0.6) -> np.ndarray:
    """TensorBoard's debiased exponential moving average (NaNs skipped, kept in place).

    Example:
        >>> nbtools.metrics.ema([0, 1, 1, 1], 0.5).round(3).tolist()
        [0.0, 0.667, 0.857, 0.933]
    """
    x = np.asarray(values, dtype=float)
    if not 0 <= smoothing < 1:
        raise ValueError(f"expected smoothing in [0, 1), got {smoothing}")
    out = np.full_like(x, np.nan)
    last, n = 0.0, 0
    for i, v in enumerate(x):
        if np.isnan(v):
            continue
        last = last * smoothing + (1 - smoothing) * v
        n += 1
        out[i] = last / (1 - smoothing**n) if smoothing else v
    return out


def framework_of(tags) -> str:
    """The metric family (``nemo_rl``, ``verl``) whose tag prefixes most of the run's tags carry; the first family
    on a tie (each layout's ``metric_prefixes``: verl logs critic/, actor/, timing_s/ …)."""
    heads = [t.split("/", 1)[0] for t in set(tags)]
    counts = {f: sum(h in lay.metric_prefixes for h in heads) for f, lay in _trainer_folders.layouts().items()}
    return max(counts, key=counts.__getitem__)


def _match(name: str, tags: set[str], framework: str) -> str | None:
    for pattern in _name_map().get(framework, {}).get(name, ()):
        if "*" in pattern:
            hits = sorted(t for t in tags if fnmatch.fnmatchcase(t, pattern))
            if hits:
                return hits[0]
        elif pattern in tags:
            return pattern
    return name if name in tags else None


def select(df: pd.DataFrame, name: str, *, framework: str | None = None) -> pd.DataFrame:
    """Rows of one metric, by friendly name ("reward", "generation_length", "kl", "accuracy", …) or raw tag.

    Why: "reward" is ``train/reward`` in NeMo-RL and ``critic/score/mean`` in verl; plots ask by meaning.

    Returns:
        The matching rows of every run with a ``metric`` column (= ``name``); empty if no run logged it.

    Example:
        >>> nbtools.metrics.select(df, "generation_length").groupby("run").value.last()
    """
    known = {n for fw in _name_map().values() for n in fw}
    parts = []
    for _run, g in df.groupby("run", sort=False):
        tags = set(g["tag"].unique())
        tag = _match(name, tags, framework or framework_of(tags))
        if tag is not None:
            parts.append(g[g["tag"] == tag])
    if not parts:
        if name not in known and not df.empty and name not in set(df["tag"]):
            raise NotFoundError(f"expected a metric name from {sorted(known)} or a logged tag, got {name!r}",
                                fix=Fix("list the logged tags with sorted(df.tag.unique())",
                                        cli="list the logged tags with `nbtools metrics RUN`"))
        return _empty().assign(metric=pd.Series(dtype="str"))
    return pd.concat(parts, ignore_index=True).assign(metric=name)


def latest(df: pd.DataFrame, names=("reward", "accuracy", "generation_length", "kl", "step_time")) -> pd.DataFrame:
    """Last logged step and value of each friendly metric per run (a one-glance status table).

    Example:
        >>> nbtools.metrics.latest(df)
    """
    rows = []
    for name in names:
        sel = select(df, name)
        for run, g in sel.groupby("run", sort=False):
            last = g.sort_values("step").iloc[-1]
            rows.append({"run": run, "metric": name, "tag": last["tag"], "step": int(last["step"]),
                         "value": float(last["value"])})
    return _table.table(pd.DataFrame(rows, columns=["run", "metric", "tag", "step", "value"]),
                        when_empty=f"none of {', '.join(names)} logged yet")
