"""The explorer's data layer: one step's (or the run's) light table, GRPO groups, filters, sort, search, pages.

Why: the widget must stay a thin layer; every number it shows comes from here and is unit-tested without a
browser. Pages are built from the light columns (no response text, no per-token arrays) plus one indexed read
(``Run.record``) per row on screen, so a page of a 1 GB run costs a few preads, never a whole step's records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from nbtools.errors import ConfigError, NotFoundError
from nbtools.trajectories import Run, group_numbers, verdict

__all__ = ["Query", "Page", "ExplorerData", "FILTERS", "SORTS", "LIGHT_COLUMNS"]

FILTERS = ("all", "correct", "incorrect", "groups with signal", "groups with no signal", "no answer tag")
SORTS = {  # label -> (column, ascending); "file order" keeps the dump's line order (groups stay together)
    "file order": (None, True),
    "reward ↓": ("reward", False), "reward ↑": ("reward", True),
    "advantage ↓": ("advantage", False), "advantage ↑": ("advantage", True),
    "length ↓": ("generation_length", False), "length ↑": ("generation_length", True),
    "group mean ↓": ("baseline", False), "group mean ↑": ("baseline", True),
}
LIGHT_COLUMNS = ["step", "idx", "prompt", "reward", "advantage", "generation_length", "env_observation", "answer"]


@dataclass(frozen=True)
class Query:
    """What to show: a step (None = every step of the run), filters, search and sort.

    Example:
        >>> q = Query(step=5, show="correct", search="max", sort="reward ↓")
    """

    step: int | None = None
    show: str = "all"
    reward: tuple[float, float] | None = None  # inclusive range; None = any
    length: tuple[float, float] | None = None  # inclusive generation-length range; None = any (NaN lengths pass)
    search: str = ""
    regex: bool = False
    case: bool = False
    sort: str = "file order"

    def replace(self, **changes) -> Query:
        """A copy with some fields changed."""
        return replace(self, **changes)

    def pattern(self) -> re.Pattern | None:
        """The compiled search (case-insensitive unless ``case``; literal unless ``regex``), or None.

        Raises:
            ConfigError: an invalid regular expression (the message names the position).
        """
        if not self.search:
            return None
        try:
            return re.compile(self.search if self.regex else re.escape(self.search), 0 if self.case else re.I)
        except re.error as err:
            raise ConfigError(f"search: {self.search!r} is not a valid regular expression ({err}); fix: correct it, "
                              "or untick 'regex' to search for the literal text") from None


@dataclass
class Page:
    """One page of the selection: its rows (with prompt and response read by index) and where it sits."""

    query: Query
    number: int  # 0-based
    size: int
    total: int  # rows matching the query
    in_scope: int  # rows in the step (or run) before filtering
    rows: pd.DataFrame = field(repr=False)

    @property
    def pages(self) -> int:
        """Number of pages (at least 1)."""
        return max(1, -(-self.total // self.size))

    @property
    def first(self) -> int:
        """1-based position of the first row on the page (0 when empty)."""
        return self.number * self.size + 1 if self.total else 0

    @property
    def last(self) -> int:
        """1-based position of the last row on the page."""
        return min(self.total, (self.number + 1) * self.size)


def _groups(df: pd.DataFrame) -> pd.DataFrame:
    """Add group (0-based within its step: the reader's ``group`` where it has one, else the rows with the same uid
    sample part or prompt, wherever they sit: ``nbtools.trajectories.group_numbers``), group_size, baseline (the
    group's mean reward), no_signal (all rewards equal) and correct."""
    if df.empty:
        return df.assign(group=pd.Series(dtype="int64"), group_size=pd.Series(dtype="int64"),
                         baseline=pd.Series(dtype="float64"), no_signal=pd.Series(dtype="bool"),
                         correct=pd.Series(dtype="object"))
    number = df["group"].to_numpy() if "group" in df and df["group"].notna().all() else group_numbers(df)
    out = df.assign(group=np.asarray(number, dtype="int64"))
    g = out.groupby([out["step"].to_numpy(), out["group"].to_numpy()], sort=False)["reward"]
    out["group_size"] = g.transform("size").astype("int64")
    out["baseline"] = g.transform("mean")
    out["no_signal"] = np.isclose(g.transform("min"), g.transform("max"))
    out["correct"] = out["env_observation"].map(verdict) if "env_observation" in out else None
    return out


class ExplorerData:
    """Queries over a ``Run`` (or a trajectory DataFrame): light tables cached per step file size, pages, records.

    Example:
        >>> data = ExplorerData(run)
        >>> page = data.page(Query(step=run.steps[-1], show="correct"), number=0, size=16)
        >>> page.rows[["idx", "group", "reward", "response"]]
    """

    def __init__(self, source: Run | pd.DataFrame):
        if not isinstance(source, Run | pd.DataFrame) and hasattr(source, "read"):  # a VerlRun: its whole table
            source = source.read()
        self.run = source if isinstance(source, Run) else None
        self._df = None if self.run is not None else source.reset_index(drop=True)
        self._light: dict[object, tuple[object, pd.DataFrame]] = {}
        self._text: dict[object, tuple[object, pd.Series]] = {}

    # ---- steps and tables ----------------------------------------------------------------------------------
    @property
    def steps(self) -> list[int]:
        """Steps with records (re-listed each time: a live run adds steps)."""
        if self.run is not None:
            return self.run.steps
        return sorted(int(s) for s in self._df["step"].unique())

    def nearest_step(self, step: int) -> int:
        """``step`` when it exists, else the nearest step that does (ties: the later one).

        Raises:
            NotFoundError: the run has no step yet.
        """
        steps = self.steps
        if not steps:
            raise NotFoundError("expected at least one train_data_step*.jsonl, found none",
                                fix="wait for the run's first step (notebook 04 shows its progress)")
        return step if step in steps else min(steps, key=lambda s: (abs(s - step), -s))

    def _version(self, step: int | None) -> object:
        if self.run is None:
            return len(self._df)
        if step is None:
            return tuple((s, self.run.index(s).n_lines) for s in self.run.steps)
        return self.run.index(step).n_lines

    def table(self, step: int | None) -> pd.DataFrame:
        """The light rows of one step (None: the whole run) with group, group_size, baseline, no_signal, correct.

        Cached until the step's file grows or is rewritten.
        """
        version = self._version(step)
        hit = self._light.get(step)
        if hit is not None and hit[0] == version:
            return hit[1]
        if self.run is not None:
            df = self.run.read(step, columns=LIGHT_COLUMNS)
        else:
            df = self._df if step is None else self._df[self._df["step"] == step]
            df = df[[c for c in [*LIGHT_COLUMNS, "group", "uid"] if c in df]]
        df = _groups(df.reset_index(drop=True))
        self._light[step] = (version, df)
        return df

    def responses(self, step: int | None) -> pd.Series:
        """The response texts of the step (None: the run), aligned with :meth:`table`; read only for a search."""
        version = self._version(step)
        hit = self._text.get(step)
        if hit is not None and hit[0] == version:
            return hit[1]
        if self.run is not None:
            texts = self.run.read(step, columns=["response"])["response"]
        else:
            texts = (self._df if step is None else self._df[self._df["step"] == step])["response"]
        texts = texts.reset_index(drop=True)
        self._text[step] = (version, texts)
        return texts

    # ---- selection -----------------------------------------------------------------------------------------
    def select(self, q: Query) -> pd.DataFrame:
        """Every row matching ``q``, in the order asked for (the export: light columns + group numbers).

        Raises:
            ConfigError: an unknown ``show`` or ``sort``, or an invalid regex.
        """
        problems = []
        if q.show not in FILTERS:
            problems.append(f"show: expected one of {list(FILTERS)}, got {q.show!r}")
        if q.sort not in SORTS:
            problems.append(f"sort: expected one of {list(SORTS)}, got {q.sort!r}")
        if problems:
            raise ConfigError(problems)
        df = self.table(q.step)
        keep = np.ones(len(df), dtype=bool)
        if q.show == "correct":
            keep &= df["correct"].eq(True).to_numpy()
        elif q.show == "incorrect":
            keep &= df["correct"].eq(False).to_numpy()
        elif q.show.startswith("groups"):
            keep &= df["no_signal"].to_numpy() == (q.show == "groups with no signal")
        elif q.show == "no answer tag":
            keep &= df["answer"].isna().to_numpy()
        if q.reward is not None:
            r = df["reward"].to_numpy(float)
            keep &= (r >= q.reward[0]) & (r <= q.reward[1])
        if q.length is not None:
            gl = df["generation_length"].to_numpy(float)
            keep &= np.isnan(gl) | ((gl >= q.length[0]) & (gl <= q.length[1]))
        pat = q.pattern()
        if pat is not None:
            in_prompt = df["prompt"].fillna("").str.contains(pat, regex=True).to_numpy(bool)
            in_response = self.responses(q.step).fillna("").str.contains(pat, regex=True).to_numpy(bool)
            keep &= in_prompt | in_response
        out = df[keep]
        col, asc = SORTS[q.sort]
        if col is not None:
            out = out.sort_values([col, "step", "idx"], ascending=[asc, True, True], kind="mergesort",
                                  na_position="last")
        return out

    def page(self, q: Query, number: int = 0, size: int = 16) -> Page:
        """Page ``number`` (0-based; clamped to the last page) of the selection, texts read by index.

        Example:
            >>> page = data.page(Query(step=5), number=-1)   # negative numbers count from the end
        """
        if size < 1:
            raise ConfigError(f"page size: expected a positive int, got {size!r}")
        sel = self.select(q)
        pages = max(1, -(-len(sel) // size))
        number = min(max(pages + number if number < 0 else number, 0), pages - 1)
        rows = sel.iloc[number * size:(number + 1) * size].copy()
        texts = [self._texts(int(s), int(i)) for s, i in zip(rows["step"], rows["idx"], strict=True)]
        rows["prompt"] = [t[0] for t in texts]
        rows["response"] = [t[1] for t in texts]
        return Page(query=q, number=number, size=size, total=len(sel), in_scope=len(self.table(q.step)), rows=rows)

    def _texts(self, step: int, idx: int) -> tuple[str | None, str | None]:
        rec = self.record(step, idx, arrays=False)
        return rec.get("prompt"), rec.get("response")

    def record(self, step: int, idx: int, *, arrays: bool = True) -> dict:
        """One record: ``Run.record`` (one pread) for a run, the frame's row otherwise."""
        if self.run is not None:
            return self.run.record(step, idx, arrays=arrays)
        hit = self._df[(self._df["step"] == step) & (self._df["idx"] == idx)]
        if hit.empty:
            raise NotFoundError(f"expected a record with step {step} and idx {idx}, found none",
                                fix="pick a row of the explorer's current selection")
        return hit.iloc[0].to_dict()

    def same_prompt(self, prompt: str, step: int) -> pd.DataFrame:
        """The light rows of ``step`` whose prompt is ``prompt`` (the same GRPO group at another step)."""
        df = self.table(self.nearest_step(step))
        return df[df["prompt"] == prompt]

    def steps_with_prompt(self, prompt: str) -> list[int]:
        """Every step whose records include ``prompt`` (reads the run's light columns)."""
        df = self.table(None)
        return sorted(int(s) for s in df.loc[df["prompt"] == prompt, "step"].unique())
