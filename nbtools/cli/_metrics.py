"""``nbtools metrics RUN``: what a person asks of a run's metrics — where is each one now — before the raw rows.

Why: the old output was a truncated pandas dump of every point sorted by tag (7,820 rows, wall time as
``1.795811e+09``, ``train/reward`` never on screen). Now the default is one row per tag with its latest step and
value and a readable wall time, headed by the friendly metrics (reward, accuracy, generation length, KL, step time);
``--tag NAME`` shows one metric's series (a friendly name, a tag, or part of one), ``--all`` every point, ``--csv`` /
``--json`` the data (``--json`` keeps every row under ``rows`` and adds ``latest``).

Example:
    $ nbtools metrics runs/local-rehearsal
    $ nbtools metrics runs/local-rehearsal --tag reward
"""

from __future__ import annotations

import datetime as dt
import difflib
import sys
from pathlib import Path

from nbtools._escape import csv_frame
from nbtools.cli._kinds import looks_like_text
from nbtools.cli._out import Out, _records

__all__ = ["add_metrics", "cmd_metrics", "number", "when"]

FRIENDLY = ("reward", "accuracy", "generation_length", "kl", "step_time")


def add_metrics(add) -> None:
    """Register the subcommand with the CLI's ``add`` helper."""
    p = add("metrics", cmd_metrics, "a run's metrics: the latest value of every tag (--tag one series, --all every "
            "point) from TensorBoard or a verl log")
    p.add_argument("run", metavar="RUN", help="exp_NNN dir, logs dir, event file, or a verl console log (a run dir or "
                   "an experiment file: their logs dir)")
    p.add_argument("--tag", metavar="NAME", help="one metric's series: reward | accuracy | generation_length | kl | "
                   "step_time, a logged tag, or part of one")
    p.add_argument("--all", action="store_true", help="every point of every tag")
    p.add_argument("--csv", action="store_true", help="every point as CSV on stdout")


def number(v) -> str:
    """A value for people: 4 significant digits, no exponent for ordinary magnitudes, thousands separated."""
    if v is None or v != v:
        return "—"
    v = float(v)
    if v in (float("inf"), float("-inf")):  # a diverged run logs them: shown, never an OverflowError
        return "inf" if v > 0 else "-inf"
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v):,}"
    if 1e-3 <= abs(v) < 1e6:
        return f"{v:,.4g}" if abs(v) >= 1 else f"{v:.4g}"
    return f"{v:.3e}"


def when(wall: float) -> str:
    """A wall time (seconds since the epoch) as UTC date and time to the second ("—" when the log has none: verl's
    console lines carry no time)."""
    if wall is None or wall != wall:
        return "—"
    return dt.datetime.fromtimestamp(float(wall), tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _readable(df, *, run: bool) -> str:
    """The rows as a text table: names left-aligned, numbers right-aligned, wall time as UTC date and time."""
    cols = [("run", "run", False)] if run else []
    cols += [("tag", "tag", False), ("step", "step", True), ("value", "value", True), ("wall_time", "wall time (UTC)", False)]
    cells = [[str(int(r["step"])) if c == "step" else number(r["value"]) if c == "value" else when(r["wall_time"])
              if c == "wall_time" else str(r[c]) for c, _, _ in cols] for r in df.to_dict("records")]
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, (_, h, _) in enumerate(cols)]

    def line(values):
        return "  ".join(v.rjust(w) if right else v.ljust(w) for v, w, (_, _, right) in zip(values, widths, cols,
                                                                                          strict=True)).rstrip()

    return "\n".join([line([h for _, h, _ in cols]), *map(line, cells)])


def _series(df, name: str):
    from nbtools import metrics
    from nbtools.errors import NbtoolsError, NotFoundError

    try:
        sel = metrics.select(df, name)
    except NbtoolsError:
        sel = df.iloc[0:0]
    if sel.empty:
        sel = df[df["tag"].str.contains(name, regex=False)]
    if sel.empty:
        tags = sorted(df["tag"].unique())
        close = difflib.get_close_matches(name, tags, n=3, cutoff=0.4)
        raise NotFoundError(f"--tag {name}: no logged tag is or contains it" + (f" (close: {', '.join(close)})" if close
                                                                              else ""),
                            fix=f"pass one of {', '.join(FRIENDLY)}, or a tag `nbtools metrics RUN` lists "
                                f"({len(tags)} logged)")
    return sel.drop(columns=[c for c in ("metric",) if c in sel])


def cmd_metrics(a) -> Out:
    from nbtools import metrics, storage, trainers
    from nbtools.cli._kinds import resolve
    from nbtools.errors import NotFoundError

    source = resolve(a.run, want="metrics", flag="RUN", command="metrics").path
    found = storage.info(source)  # a path or a URL (gs://…): the same forms on every storage
    console_log = found is not None and not found.is_dir and "tfevents" not in storage.name_of(source)
    p = storage.fetch(source, entry=found) if console_log else source
    df = metrics.read_verl_log(p) if console_log else metrics.read_tensorboard(p)
    if df.empty and console_log and not _is_text(p):
        raise NotFoundError(f"{p} holds no metrics: it is not text (so not a verl console log) and its name has no "
                            "'tfevents' (so not a TensorBoard event file)",
                            fix="pass an exp_NNN dir, its tensorboard/ dir, an events.out.tfevents.* file or a verl "
                                "console log")
    if df.empty and console_log:  # a text file with no `step:N - key:value` line: not (yet) a verl console log
        raise NotFoundError(f"RUN {a.run}: no verl metric line (`step:N - key:value`) in this text file",
                            fix="pass the run's logs dir (<run>/logs), one exp_NNN dir or an events.out.tfevents.* "
                                "file; a verl console log has metric lines once its job finished step 1")
    problems = list(df.attrs.get("problems") or [])
    if problems:
        print(f"note: {len(problems)} damaged stretch(es) were skipped; the JSON lists them under 'problems'",
              file=sys.stderr)
    data = {"source": trainers.CONSOLE_LOG_FAMILY if console_log else "tensorboard", "rows": _records(df), "problems": problems}
    if df.empty:
        print(f"note: no scalars in {p} yet (a job logs its first metrics after step 1)", file=sys.stderr)
        return Out({**data, "latest": []}, "" if a.csv else f"no scalars in {p} yet")
    df = df.sort_values(["run", "tag", "step"], kind="stable")
    latest = df.groupby(["run", "tag"], sort=True).tail(1).reset_index(drop=True)
    data["latest"] = _records(latest)
    several = df["run"].nunique() > 1
    if a.csv:
        return Out(data, csv_frame(df).to_csv(index=False))  # no cell a spreadsheet would run as a formula
    if a.tag:
        sel = _series(df, a.tag)
        data["series"] = _records(sel)
        return Out(data, _readable(sel, run=several))
    if a.all:
        return Out(data, _readable(df, run=several))
    head = (f"{a.run}: {len(df):,} points of {df['tag'].nunique()} tags, steps "
            f"{int(df['step'].min())}..{int(df['step'].max())}"
            + (f", last written {when(df['wall_time'].max())} UTC" if df["wall_time"].notna().any() else ""))
    glance = metrics.latest(df, FRIENDLY)
    lines = [head]
    if len(glance):
        lines.append("now: " + " · ".join(f"{r.metric} {number(r.value)} (step {r.step})"
                                          for r in glance.drop_duplicates("metric").itertuples()))
    lines += ["", _readable(latest, run=several), "",
              "one tag's series: --tag NAME · every point: --all · data: --csv / --json"]
    return Out(data, "\n".join(lines))


def _is_text(p: Path) -> bool:
    """The first 64 KB look like text (:func:`nbtools.cli._kinds.looks_like_text`)."""
    with open(p, "rb") as f:
        return looks_like_text(f.read(1 << 16))
