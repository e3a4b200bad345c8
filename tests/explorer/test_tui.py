"""The terminal trajectory viewer (``nbtools trajectories RUN --browse``, issue 45 item 6) driven by Textual's Pilot
with real key presses over a real rehearsal run (tests/assets/health-corpus/healthy-seed0, SOURCE.md there): paging,
a step change, a search and a filter each change what the table shows; Enter opens the record view. Then the CLI
itself in a pseudo-terminal, as over ``ssh -t``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import textual  # noqa: F401 - the tui extra, also in the test extra: a missing Textual fails here, never skips

import nbtools
from nbtools.explorer import BrowseState, ExplorerData, Query

CORPUS_RUN = Path(__file__).parents[1] / "assets" / "health-corpus" / "healthy-seed0" / "logs"
SHOTS = os.environ.get("NBTOOLS_TUI_SVG")  # where to write the viewer's SVG screenshot (the README's), if set


def _table(app) -> list[tuple[str, ...]]:
    from textual.widgets import DataTable

    t = app.query_one(DataTable)
    return [tuple(str(c) for c in t.get_row_at(i)) for i in range(t.row_count)]


def _status(app) -> str:
    return str(app.query_one("#status").render())


def _distinctive(data, step):
    """A word of one response that some records of the step contain and others do not, and the rows that do."""
    n = len(data.table(step))
    for idx in range(n):
        for word in dict.fromkeys(str(data.record(step, idx)["response"]).split()):
            word = word.strip(".,:;()<>/")[:8]
            if len(word) >= 3:
                hits = data.select(Query(step=step, search=word))
                if 0 < len(hits) < n:
                    return word, hits
    raise AssertionError(f"no word of step {step} tells its records apart")


@pytest.fixture(scope="module")
def RUN(tmp_path_factory):
    """A copy of the corpus run: the readers write their index and column cache beside the logs."""
    import shutil

    return shutil.copytree(CORPUS_RUN, tmp_path_factory.mktemp("tui") / "healthy-seed0" / "logs")


def test_pilot_pages_searches_filters_and_opens_a_record(RUN):
    from nbtools.explorer._tui import build_app

    run = nbtools.trajectories.open_run(RUN)
    data = ExplorerData(run)
    last = run.steps[-1]
    df = data.table(last)
    state = BrowseState(data, page_size=8)
    app = build_app(state)

    async def drive():
        async with app.run_test(size=(120, 16)) as pilot:
            first = _table(app)
            assert len(first) == 8 and {r[0] for r in first} == {str(last)} and first[0][1] == "0"
            assert _status(app).startswith(f"step {last} · page 1/{-(-len(df) // 8)} · records 1–8 of {len(df)}")
            await pilot.press("n")  # paging
            second = _table(app)
            assert second[0][1] == "8" and second != first and "page 2/" in _status(app)
            await pilot.press("p", "left_square_bracket")  # back a page, then the previous step
            prev = run.steps[-2]
            assert {r[0] for r in _table(app)} == {str(prev)} and _status(app).startswith(f"step {prev} ·")
            await pilot.press("right_square_bracket", "f")  # the latest step again; filter: correct
            correct = df[df["correct"].eq(True)]
            assert "filter: correct" in _status(app) and f"of {len(correct)} (of {len(df)})" in _status(app)
            assert [r[1] for r in _table(app)] == [str(i) for i in correct["idx"].head(8)]
            assert all(r[6] == "yes" for r in _table(app))
            if SHOTS:  # the README's: the latest step filtered to the correct samples
                app.save_screenshot(filename=Path(SHOTS).name + ".svg", path=str(Path(SHOTS).parent))
            await pilot.press("f", "f", "f", "f", "f")  # round the filters back to "all"
            assert "filter: all" in _status(app)
            term, hits = _distinctive(data, last)  # a search: the rows whose prompt or response contains it
            await pilot.press("slash", *term, "enter")
            assert f"search {term!r}" in _status(app) and f"of {len(hits)} (of {len(df)})" in _status(app)
            assert [r[1] for r in _table(app)] == [str(i) for i in hits["idx"].head(8)] and len(hits) < len(df)
            await pilot.press("enter")  # the record view of the highlighted (first) row
            text = str(app.screen.query_one("#record").render())
            rec = data.record(last, int(hits["idx"].iloc[0]))
            assert f"idx {rec['idx']}" in text and rec["response"].strip()[:40] in text and "── prompt" in text
            if SHOTS:
                app.save_screenshot(filename=Path(SHOTS).name + "-record.svg", path=str(Path(SHOTS).parent))
            await pilot.press("escape")
            assert app.query_one("#status") is not None and "search" in _status(app)
            await pilot.press("q")

    asyncio.run(drive())


def test_cli_browse_refuses_json_and_a_pipe(RUN):
    from nbtools.cli import main

    assert main(["trajectories", str(RUN), "--browse", "--json"]) == 2
    r = subprocess.run([sys.executable, "-m", "nbtools.cli", "trajectories", str(RUN), "--browse"], capture_output=True,
                       text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert r.returncode == 1 and "--browse needs a terminal" in r.stderr and "ssh -t" in r.stderr, r.stderr


def test_without_textual_the_viewer_names_its_extra(RUN, monkeypatch):
    import builtins

    from nbtools.errors import DependencyError
    from nbtools.explorer._tui import build_app

    real = builtins.__import__
    monkeypatch.setattr(builtins, "__import__", lambda name, *a, **k: (_ for _ in ()).throw(
        ModuleNotFoundError(f"No module named {name!r}", name=name)) if name.startswith("textual") else real(name, *a, **k))
    with pytest.raises(DependencyError, match=r"needs textual, in the optional extra \[tui\]") as e:
        build_app(BrowseState(ExplorerData(nbtools.trajectories.open_run(RUN))))
    assert "pip install 'nbtools-grpo[tui]'" in str(e.value)


def test_cli_browse_in_a_real_terminal(RUN):
    """`nbtools trajectories RUN --browse` in a pseudo-terminal, as over `ssh -t`: it draws the page, a key changes the
    filter, `q` quits with exit 0 (the CLI's stdout-to-stderr redirection must not break the terminal)."""
    import pty
    import select
    import time

    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI as a user starts it
        os.environ.update(TERM="xterm-256color", COLUMNS="120", LINES="30")
        os.execv(sys.executable, [sys.executable, "-m", "nbtools.cli", "trajectories", str(RUN), "--browse"])
    seen = b""

    def until(text: bytes, timeout: float = 90) -> None:
        nonlocal seen
        deadline = time.monotonic() + timeout
        while text not in seen:
            assert time.monotonic() < deadline, f"{text!r} never shown: {seen[-800:]!r}"
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    seen += os.read(fd, 65536)
                except OSError:  # the child closed the terminal
                    break
    try:
        until(b"page 1/")
        os.write(fd, b"f")
        until(b"filter: correct")
        os.write(fd, b"q")
        until(b"closed the viewer on")
    except BaseException:
        os.kill(pid, 9)  # the viewer this test started, by its pid
        raise
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, seen[-800:]
