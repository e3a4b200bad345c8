"""The explorer in a terminal (``nbtools trajectories RUN --browse``): for users on SSH, no browser, no Jupyter.

Why: verl's rollout viewer is a terminal UI because training machines are reached over SSH. This is the same
``ExplorerData`` the notebook widget pages through (filters, search, sort, GRPO groups), drawn with Textual: a table of
one page, a status line, and a record view (prompt, response, think/answer, reward) on Enter. Textual is the
``tui`` extra (``pip install 'nbtools-grpo[tui]'``).

Keys: ``n``/``p`` (or PageDown/PageUp) next/previous page, ``]``/``[`` next/previous step, ``a`` the whole run,
``/`` search (Enter applies, empty clears), ``f`` next filter, ``o`` next sort, Enter the record view (Esc back),
``q`` quit.
"""

from __future__ import annotations

from typing import Any

from nbtools.errors import DependencyError
from nbtools.explorer._query import FILTERS, SORTS, ExplorerData, Page, Query
from nbtools.explorer._record import record_view

__all__ = ["browse", "BrowseState", "build_app", "record_text"]


class BrowseState:
    """What the terminal viewer shows, without Textual: the query, the page number and the page (tested directly)."""

    def __init__(self, data: ExplorerData, *, step: int | None = None, page_size: int = 20):
        self.data, self.size = data, page_size
        last = data.steps[-1] if data.steps else None
        self.query = Query(step=last if step is None else data.nearest_step(step))
        self.number = 0
        self.page: Page = data.page(self.query, 0, page_size)

    def go(self, number: int | None = None, **changes: Any) -> Page:
        """Apply query changes (back to page 0) or move to page ``number`` (clamped); return the page shown."""
        if changes:
            self.query, self.number = self.query.replace(**changes), 0
        if number is not None:
            self.number = number
        self.page = self.data.page(self.query, self.number, self.size)
        self.number = self.page.number
        return self.page

    def step_by(self, delta: int) -> Page:
        """The previous / next step with records (from the whole run: the latest step)."""
        steps = self.data.steps
        if not steps:
            return self.page
        cur = self.query.step if self.query.step is not None else steps[-1]
        i = min(max(steps.index(self.data.nearest_step(cur)) + delta, 0), len(steps) - 1)
        return self.go(step=steps[i])

    def cycle(self, field: str) -> Page:
        """The next value of ``show`` (FILTERS) or ``sort`` (SORTS)."""
        values = list(FILTERS) if field == "show" else list(SORTS)
        return self.go(**{field: values[(values.index(getattr(self.query, field)) + 1) % len(values)]})

    def status(self) -> str:
        """One line: scope, page, the records shown of how many, the filter, sort and search."""
        p, q = self.page, self.query
        scope = "whole run" if q.step is None else f"step {q.step}"
        search = f" · search {q.search!r}" if q.search else ""
        return (f"{scope} · page {p.number + 1}/{p.pages} · records {p.first}–{p.last} of {p.total} "
                f"(of {p.in_scope}) · filter: {q.show} · sort: {q.sort}{search}")

    def rows(self) -> list[tuple[str, ...]]:
        """The table's rows: step, idx, group, reward, advantage, length, correct, the response's first line."""
        out = []
        for r in self.page.rows.itertuples():
            text = (r.response or "").strip().replace("\n", " ⏎ ")
            verdict = {True: "yes", False: "no"}.get(r.correct, "?")
            out.append((str(r.step), str(r.idx), str(r.group), f"{r.reward:.3g}", f"{r.advantage:+.3g}",
                        f"{r.generation_length:.0f}", verdict, text[:90]))
        return out

    def record_text(self, row: int) -> str:
        """The record view of the page's ``row`` (``record_text``)."""
        r = self.page.rows.iloc[row]
        return record_text(self.data, int(r["step"]), int(r["idx"]))


def record_text(data: ExplorerData, step: int, idx: int) -> str:
    """One record as text: header (group and its mean reward), prompt, response, the parsed answer, the observation.

    Example:
        >>> print(record_text(ExplorerData(run), 12, 3))
    """
    light = data.table(step)
    r = light[light["idx"] == idx].iloc[0]
    v = record_view(data.record(step, idx), group=int(r["group"]), baseline=float(r["baseline"]))
    return "\n".join([
            f"step {v.step} · idx {v.idx} · group {v.group} (mean reward {v.baseline:.3g}) · reward {v.reward:.3g} · "
            f"advantage {v.advantage:+.3g} · {v.generation_length:.0f} tokens",
            "", "── prompt " + "─" * 40, v.prompt or "(none)",
            "", "── response " + "─" * 38, v.response or "(none)",
            "", f"── answer: {v.answer if v.answer is not None else '(no answer tag)'}",
            f"── observation: {v.env_observation or '(none)'}",
            ""])


COLUMNS = ("step", "idx", "group", "reward", "adv", "len", "correct", "response")


def build_app(state: BrowseState):
    """The Textual app over ``state`` (``app.run()`` in a terminal; ``app.run_test()`` drives it in tests).

    Raises:
        DependencyError: Textual is not installed (the fix names the extra).
    """
    try:
        from textual.app import App
        from textual.binding import Binding
        from textual.containers import VerticalScroll
        from textual.screen import Screen
        from textual.widgets import DataTable, Footer, Input, Static
    except ImportError as e:
        raise (DependencyError.from_import(e, "the terminal viewer (--browse)") or e) from None

    class RecordScreen(Screen):
        BINDINGS = [Binding("escape,q", "app.pop_screen", "back")]

        def __init__(self, text: str):
            super().__init__()
            self.text = text

        def compose(self):
            with VerticalScroll():
                yield Static(self.text, id="record", markup=False)
            yield Footer()

    class Browse(App):
        TITLE = "nbtools trajectories"
        CSS = "#status { height: 1; background: $boost; } #search { display: none; } #search.on { display: block; }"
        BINDINGS = [Binding("n,pagedown", "page(1)", "next page"), Binding("p,pageup", "page(-1)", "prev page"),
                    Binding("right_square_bracket", "step(1)", "next step"),
                    Binding("left_square_bracket", "step(-1)", "prev step"), Binding("a", "whole_run", "whole run"),
                    Binding("slash", "search", "search"), Binding("f", "cycle('show')", "filter"),
                    Binding("o", "cycle('sort')", "sort"), Binding("q", "quit", "quit")]

        def compose(self):
            yield Static(id="status", markup=False)
            yield Input(placeholder="search prompts and responses (Enter applies, empty clears)", id="search")
            yield DataTable(id="table", cursor_type="row", zebra_stripes=True)
            yield Footer()

        def on_mount(self) -> None:
            table = self.query_one(DataTable)
            table.add_columns(*COLUMNS)
            table.focus()  # keys go to the table (the hidden search box would take them otherwise)
            self.show()

        def show(self) -> None:
            table = self.query_one(DataTable)
            table.clear()
            for row in state.rows():
                table.add_row(*row)
            self.query_one("#status", Static).update(state.status())

        def action_page(self, delta: int) -> None:
            state.go(state.number + delta)
            self.show()

        def action_step(self, delta: int) -> None:
            state.step_by(delta)
            self.show()

        def action_whole_run(self) -> None:
            state.go(step=None)
            self.show()

        def action_cycle(self, field: str) -> None:
            state.cycle(field)
            self.show()

        def action_search(self) -> None:
            box = self.query_one("#search", Input)
            box.add_class("on")
            box.value = state.query.search
            box.focus()

        def on_input_submitted(self, event: Input.Submitted) -> None:
            event.input.remove_class("on")
            try:
                state.go(search=event.value.strip())
            except Exception as e:  # noqa: BLE001 - an invalid pattern is shown, the viewer stays up
                self.notify(str(e), severity="error")
            self.query_one(DataTable).focus()
            self.show()

        def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
            self.push_screen(RecordScreen(state.record_text(event.cursor_row)))

    return Browse()


def browse(source, *, step: int | None = None, page_size: int = 20) -> None:
    """Open the terminal viewer on a run (``nbtools.trajectories.open_run(...)``) until the user quits.

    Example:
        >>> nbtools.explorer.browse(nbtools.trajectories.open_run("runs/local-rehearsal/logs"))
    """
    build_app(BrowseState(ExplorerData(source), step=step, page_size=page_size)).run()
