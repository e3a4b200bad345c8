"""The explorer widget: ipywidgets controls over ``ExplorerData`` (every number comes from the data layer).

Why: a researcher keeps it open all day — typed steps, paging through every record, groups, a record view that
shows what the reward judged — and drives it from code as easily as with the mouse (set a control's ``value``).
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nbtools._escape import html as _h
from nbtools.errors import NbtoolsError
from nbtools.explorer._query import FILTERS, SORTS, ExplorerData, Page, Query
from nbtools.explorer._record import RecordView, record_view
from nbtools.explorer._render import compare_html, page_html, record_html, summary_html
from nbtools.trajectories import Run

__all__ = ["TrajectoryExplorer"]

_BIG = 1 << 20


class TrajectoryExplorer:
    """Controls: ``step`` (typed; snaps to the nearest existing step), ``whole_run``, ``filter``, ``sort``,
    ``page_size``, ``reward`` and ``length`` ranges, ``search`` (+ ``regex``, ``case``), page buttons,
    ``record`` (position in the selection) and ``compare`` (a second step for the side-by-side view).

    ``frame()`` returns the whole selection, ``page_data`` the page on screen, ``view`` the record panel's data.
    """

    def __init__(self, source: Run | pd.DataFrame, *, step: int | None = None, page_size: int = 16,
                 rewards: Any = None, ground_truth: Callable[[str], Any] | None = None,
                 export_dir: str | os.PathLike | None = None, decode: Callable[[list[int]], list[str]] | None = None):
        import ipywidgets as w

        from nbtools.rewards import combine

        self.data = ExplorerData(source)
        self.mix = combine(rewards) if rewards is not None else None
        self.ground_truth = ground_truth
        self.decode = decode  # token ids -> their text, for the record view's token strip
        run = self.data.run
        self.think_tag, self.answer_tag = (run.think_tag, run.answer_tag) if run is not None else ("think", "answer")
        self.export_dir = Path(export_dir) if export_dir else (
            (run.cache_dir or run.path) / "exports" if run is not None else Path.cwd())
        steps = self.data.steps
        first = self.data.nearest_step(step if step is not None else steps[-1]) if steps else 0
        lay = w.Layout
        self.step = w.IntText(value=first, description="step", layout=lay(width="160px"))
        self.prev_step, self.next_step = w.Button(description="◀ step", layout=lay(width="80px")), w.Button(
            description="step ▶", layout=lay(width="80px"))
        self.latest = w.Button(description="latest", layout=lay(width="70px"))
        self.steps_label = w.HTML()
        self.whole_run = w.Checkbox(value=False, description="whole run", indent=False, layout=lay(width="100px"))
        self.filter = w.Dropdown(options=FILTERS, value="all", description="show", layout=lay(width="260px"))
        self.sort = w.Dropdown(options=list(SORTS), value="file order", description="sort", layout=lay(width="230px"))
        self.page_size = w.Dropdown(options=sorted({8, 16, 32, 64, 128, int(page_size)}), value=int(page_size),
                                    description="per page", layout=lay(width="170px"))
        self.reward = w.FloatRangeSlider(value=(0.0, 1.0), min=0.0, max=1.0, step=0.01, description="reward",
                                         continuous_update=False, readout_format=".2f", layout=lay(width="420px"))
        self.length = w.IntRangeSlider(value=(0, _BIG), min=0, max=_BIG, description="gen length",
                                       continuous_update=False, layout=lay(width="420px"))
        self.search = w.Text(value="", placeholder="text in prompt or response", description="search",
                             continuous_update=False, layout=lay(width="360px"))
        self.regex = w.Checkbox(value=False, description="regex", indent=False, layout=lay(width="70px"))
        self.case = w.Checkbox(value=False, description="match case", indent=False, layout=lay(width="110px"))
        self.first_page, self.prev_page = w.Button(description="« first"), w.Button(description="‹ prev")
        self.next_page, self.last_page = w.Button(description="next ›"), w.Button(description="last »")
        for b in (self.first_page, self.prev_page, self.next_page, self.last_page):
            b.layout = lay(width="80px")
        self.page = w.BoundedIntText(value=1, min=1, max=1, description="page", layout=lay(width="150px"))
        self.export_button = w.Button(description="export CSV", layout=lay(width="100px"))
        self.status = w.HTML()
        self.summary, self.table = w.HTML(), w.HTML()
        self.record = w.BoundedIntText(value=1, min=1, max=1, description="record #", layout=lay(width="170px"))
        self.prev_record, self.next_record = w.Button(description="◀"), w.Button(description="▶")
        for b in (self.prev_record, self.next_record):
            b.layout = lay(width="40px")
        self.compare = w.IntText(value=0, description="compare at step", style={"description_width": "initial"},
                                 layout=lay(width="200px"))
        self.record_panel, self.compare_panel = w.HTML(), w.HTML()
        self._quiet = False
        self.page_data: Page | None = None
        self.view: RecordView | None = None
        self._wire()
        self.widget = w.VBox([
            w.HBox([self.step, self.prev_step, self.next_step, self.latest, self.whole_run, self.steps_label]),
            w.HBox([self.filter, self.sort, self.page_size]),
            w.HBox([self.reward, self.length]),
            w.HBox([self.search, self.regex, self.case]),
            self.summary,
            w.HBox([self.first_page, self.prev_page, self.page, self.next_page, self.last_page, self.export_button,
                    self.status]),
            self.table,
            w.HBox([self.record, self.prev_record, self.next_record, self.compare]),
            self.record_panel, self.compare_panel,
        ])
        self.refresh()

    # ---- wiring --------------------------------------------------------------------------------------------
    def _wire(self) -> None:
        for c in (self.whole_run, self.filter, self.sort, self.page_size, self.reward, self.length, self.search,
                  self.regex, self.case):
            c.observe(lambda _ch: self._update(page=0), names="value")
        self.step.observe(self._on_step, names="value")
        self.page.observe(lambda ch: self._update(page=ch["new"] - 1, keep_ranges=True), names="value")
        self.record.observe(lambda _ch: self._show_record(), names="value")
        self.compare.observe(lambda _ch: self._show_record(), names="value")
        self.prev_step.on_click(lambda _b: self._move_step(-1))
        self.next_step.on_click(lambda _b: self._move_step(+1))
        self.latest.on_click(lambda _b: setattr(self.step, "value", self.data.steps[-1]) if self.data.steps else None)
        self.first_page.on_click(lambda _b: self.goto(0))
        self.prev_page.on_click(lambda _b: self.goto(self.page.value - 2))
        self.next_page.on_click(lambda _b: self.goto(self.page.value))
        self.last_page.on_click(lambda _b: self.goto(-1))
        self.prev_record.on_click(lambda _b: setattr(self.record, "value", max(1, self.record.value - 1)))
        self.next_record.on_click(lambda _b: setattr(self.record, "value", min(self.record.max, self.record.value + 1)))
        self.export_button.on_click(lambda _b: self._export_clicked())

    def _set(self, control, **values) -> None:
        self._quiet = True
        try:
            for k, v in values.items():
                setattr(control, k, v)
        finally:
            self._quiet = False

    def _on_step(self, change) -> None:
        if self._quiet:
            return
        steps = self.data.steps
        if steps and change["new"] not in steps:  # a typed step with no dump: the nearest one, said so
            near = self.data.nearest_step(change["new"])
            self._set(self.step, value=near)
            self._update(page=0, note=f"no dump for step {change['new']}; showing step {near}")
            return
        self._update(page=0)

    def _move_step(self, delta: int) -> None:
        steps = self.data.steps
        if steps:
            i = steps.index(self.data.nearest_step(self.step.value))
            self.step.value = steps[min(max(i + delta, 0), len(steps) - 1)]

    def goto(self, number: int) -> None:
        """Show page ``number`` (0-based; -1 = the last page)."""
        self._update(page=number, keep_ranges=True)

    # ---- the query ---------------------------------------------------------------------------------------
    def query(self) -> Query:
        """The controls as a :class:`Query` (full-range sliders mean "any")."""
        rlo, rhi = self.reward.value
        llo, lhi = self.length.value
        return Query(step=None if self.whole_run.value else self.step.value, show=self.filter.value,
                     reward=None if (rlo, rhi) == (self.reward.min, self.reward.max) else (rlo, rhi),
                     length=None if (llo, lhi) == (self.length.min, self.length.max) else (llo, lhi),
                     search=self.search.value.strip(), regex=self.regex.value, case=self.case.value,
                     sort=self.sort.value)

    def frame(self) -> pd.DataFrame:
        """Every row of the current selection (light columns, group ids and baselines): the export."""
        return self.data.select(self.query())

    def export(self, path: str | os.PathLike | None = None) -> Path:
        """Write the current selection to CSV (atomically); returns the path.

        Text cells a spreadsheet would run as a formula (starting with ``= + - @``) get a leading ``'``.

        Example:
            >>> explorer.export("selection.csv")
        """
        from nbtools._atomic import write_text
        from nbtools._escape import csv_frame

        q = self.query()
        path = Path(path) if path else self.export_dir / f"selection_{'run' if q.step is None else f'step{q.step}'}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_text(path, csv_frame(self.frame()).to_csv(index=False))

    def _export_clicked(self) -> None:
        try:
            self.status.value = f"<span class='nbx-status'>wrote {_h(str(self.export()))}</span>"
        except (NbtoolsError, OSError) as err:
            self.status.value = f"<span style='color:#b00'>{_h(str(err))}</span>"

    # ---- rendering ---------------------------------------------------------------------------------------
    def _fit_ranges(self, scope: pd.DataFrame) -> None:
        """Widen the sliders to the data; a range the user narrowed is kept across step changes."""
        gl = scope["generation_length"].dropna()
        top = max(int(gl.max()) if len(gl) else 1, 1)
        full = self.length.value == (self.length.min, self.length.max)
        if full or self.length.max == _BIG:
            self._set(self.length, max=max(top, 1), value=(0, max(top, 1)))
        elif top > self.length.max:
            self._set(self.length, max=top)
        r = scope["reward"].dropna()
        lo, hi = (float(np.floor(r.min() * 100) / 100), float(np.ceil(r.max() * 100) / 100)) if len(r) else (0.0, 1.0)
        hi = hi if hi > lo else lo + 0.01
        if self.reward.value == (self.reward.min, self.reward.max):
            self._set(self.reward, min=min(lo, self.reward.max), max=hi)
            self._set(self.reward, min=lo, value=(lo, hi))
        elif lo < self.reward.min or hi > self.reward.max:
            self._set(self.reward, min=min(lo, self.reward.min), max=max(hi, self.reward.max))

    def _update(self, page: int = 0, *, keep_ranges: bool = False, note: str = "", record: int | None = None) -> None:
        if self._quiet:
            return
        steps = self.data.steps
        self.steps_label.value = (f"<span class='muted'>steps {steps[0]}…{steps[-1]} ({len(steps)} dumps)</span>"
                                  if steps else "<i>no steps yet</i>")
        if not steps:
            self.table.value = "<div class='nbx-note' data-total='0'>no trajectories yet: re-run or press latest</div>"
            return
        q = self.query()
        scope = self.data.table(q.step)
        if not keep_ranges:
            self._fit_ranges(scope)
            q = self.query()
        try:
            self.page_data = self.data.page(q, page, self.page_size.value)
        except NbtoolsError as err:  # e.g. an invalid regex: say so, keep the last page on screen
            self.status.value = f"<span style='color:#b00'>{_h(str(err))}</span>"
            return
        p = self.page_data
        self.status.value = _h(note)
        self._set(self.page, max=p.pages, value=p.number + 1)
        self.summary.value = summary_html(scope, "the run" if q.step is None else f"step {q.step}")
        self._set(self.record, max=max(p.total, 1), value=min(max(record or p.first, 1), max(p.total, 1)))
        self._show_record(render_page=False)
        self.table.value = page_html(p, think_tag=self.think_tag, answer_tag=self.answer_tag,
                                     pattern=q.pattern(), selected=self._selected())

    def _selected(self) -> tuple[int, int] | None:
        return (self.view.step, self.view.idx) if self.view is not None else None

    def _show_record(self, render_page: bool = True) -> None:
        if self._quiet or self.page_data is None:
            return
        q = self.query()
        try:
            sel = self.data.select(q)
        except NbtoolsError:
            return
        if sel.empty:
            self.view, self.record_panel.value, self.compare_panel.value = None, "", ""
            return
        row = sel.iloc[min(self.record.value, len(sel)) - 1]
        rec = self.data.record(int(row["step"]), int(row["idx"]), arrays=True)
        self.view = record_view(rec, think_tag=self.think_tag, answer_tag=self.answer_tag, mix=self.mix,
                                ground_truth=self.ground_truth, pattern=q.pattern(), group=int(row["group"]),
                                baseline=float(row["baseline"]), decode=self.decode)
        self.record_panel.value = record_html(self.view)
        self.compare_panel.value = self._compare_html(row) if self.compare.value else ""
        if render_page and self.page_data is not None:
            want = (self.record.value - 1) // self.page_data.size
            if want != self.page_data.number:
                self._update(page=want, keep_ranges=True, record=self.record.value)
            else:
                self.table.value = page_html(self.page_data, think_tag=self.think_tag, answer_tag=self.answer_tag,
                                             pattern=q.pattern(), selected=self._selected())

    def _compare_html(self, row: pd.Series) -> str:
        other = self.data.nearest_step(self.compare.value)
        views = []
        for s in (int(row["step"]), other):
            same = self.data.same_prompt(row["prompt"], s)
            views.append([record_view(self.data.record(int(r.step), int(r.idx), arrays=False), think_tag=self.think_tag,
                                      answer_tag=self.answer_tag) for r in same.itertuples(index=False)])
        elsewhere = [] if views[1] else self.data.steps_with_prompt(row["prompt"])
        return compare_html(views[0], views[1], (int(row["step"]), other), elsewhere)

    def show(self, step: int, idx: int) -> None:
        """Open record ``(step, idx)``: its step, the page it is on and the record panel (filters reset).

        Example:
            >>> explorer.show(5, 12)
            >>> explorer.view.step, explorer.view.idx
            (5, 12)
        """
        from nbtools.errors import NotFoundError

        for control, value in ((self.whole_run, False), (self.search, ""), (self.filter, "all")):
            self._set(control, value=value)
        self._set(self.step, value=self.data.nearest_step(int(step)))
        self._update(page=0)
        sel = self.data.select(self.query())
        hits = np.flatnonzero((sel["step"].to_numpy() == int(step)) & (sel["idx"].to_numpy() == int(idx)))
        if not len(hits):
            raise NotFoundError(f"expected a record (step {step}, idx {idx}) in the run, found none",
                                fix=f"pick a step from {self.data.steps[:3]}…{self.data.steps[-3:]} and an idx below "
                                    "its record count")
        self.record.value = int(hits[0]) + 1

    def jump(self, finding, k: int = 0) -> TrajectoryExplorer:
        """Open example ``k`` of a health finding: a ``CheckResult``, a list of (step, idx), or a ``HealthReport``
        (its worst finding; nothing happens when the report has none). Returns the explorer, so a cell can end on
        ``explorer.jump(report)`` and its saved snapshot shows the record it opened.

        Example:
            >>> explorer.jump(report["zero-reward"])       # the first record that shows the finding
        """
        if hasattr(finding, "findings"):  # a whole report: its worst finding with examples
            finding = next((f for f in finding.findings if f.examples), None)
            if finding is None:
                self.status.value = "health: no finding with example records (nothing to open)"
                return self
        examples = list(getattr(finding, "examples", finding))
        if not examples:
            from nbtools.errors import NotFoundError

            raise NotFoundError(f"expected example records in {getattr(finding, 'check', 'the finding')!r}, found none "
                                "(a check that passed has none)", fix="jump to a finding whose status is not 'ok': "
                                "report.findings lists them")
        e = examples[k]
        self.show(*((e.step, e.idx) if hasattr(e, "step") else e))
        return self

    def refresh(self) -> None:
        """Re-list the steps (a live run grows) and redraw the current page."""
        n = self.page.value - 1 if self.page_data is not None else 0
        self._update(page=n)

    # ---- display -------------------------------------------------------------------------------------------
    def _repr_mimebundle_(self, **kwargs):
        bundle = self.widget._repr_mimebundle_(**kwargs)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        note = ("<div class='nbx-frozen' style='padding:4px 8px;background:#fff8e1;border-left:3px solid #f0a020'>"
                "A snapshot of the trajectory explorer as it was when this notebook ran: <b>re-run the cell</b> "
                "(with the run's files present) to page, filter and search interactively.</div>")
        data["text/html"] = note + self.summary.value + self.table.value
        data["text/plain"] = ("TrajectoryExplorer (interactive widget): re-run this cell in JupyterLab to use it; "
                              + html.unescape(self.status.value or ""))
        return bundle
