"""Saved widgets degrade to something true (#30 item 2): what a notebook shows once its kernel is gone.

- The explorer's and the re-scoring view's HTML carries its look in inline ``style=`` attributes that JupyterLab's
  sanitiser keeps (untrusted output is sanitised: ``<style>`` and ``<script>`` go, and so does any declaration whose
  property or value is not on its allowlist). ``sanitize`` below applies that allowlist for the properties the
  snapshots use: SOURCE jupyterlab/jupyterlab, packages/apputils/src/sanitizer.ts (``CssProp`` value patterns and
  ``allowedStyles``; BSD-3-Clause), transcribed as Python regexes; a property it does not list is dropped, as
  upstream drops it.
- ``nbtools.demo.freeze_widgets`` keeps the snapshot and drops the dead widget view and state, so JupyterLab (trusted
  or not) and nbconvert's HTML export show the snapshot.
"""

from __future__ import annotations

import importlib.util
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from nbtools import explorer, rewards, trajectories
from nbtools.demo import WIDGET_VIEW, check_outputs, freeze_widgets
from nbtools.rewards import display

_GEN = Path(__file__).resolve().parents[2] / "benchmarks" / "gen_nemo_rl_run.py"
_spec = importlib.util.spec_from_file_location("gen_nemo_rl_run", _GEN)
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)

# --- JupyterLab's sanitiser, the part that decides inline styles (see the module docstring for the source) ----------
_NUM = r"[+-]?([0-9]*[.])?[0-9]+(e-?[0-9]*)?"
_NUM_POS = r"[+]?([0-9]*[.])?[0-9]+(e-?[0-9]*)?"
_LEN = rf"({_NUM}(px|em|rem|ex|in|cm|mm|pt|pc)|0)"
_LEN_POS = rf"({_NUM_POS}(px|em|rem|ex|in|cm|mm|pt|pc)|0)"
_LEN_PERC = rf"(0|{_NUM}(px|em|rem|ex|in|cm|mm|pt|pc|%))"
_ZERO_ONE = r"[+]?(1([.][0]+)?|0([.][0-9]+)?)"
_ZERO_FF = r"([0-9]|[1-9][0-9]|1[0-9][0-9]|2[0-4][0-9]|25[0-5])"
_COLOR = (r"\#(0x)?[0-9a-f]+|rgb\(\s*(\d{1,3})\s*,\s*(\d{1,3})\s*,\s*(\d{1,3})\s*\)|"
          rf"rgba\(\s*(\d{{1,3}})\s*,\s*(\d{{1,3}})\s*,\s*(\d{{1,3}})\s*,\s*({_ZERO_FF}|{_ZERO_ONE})\s*\)|"
          r"black|white|gray|red|green|blue|transparent")
_BORDER_STYLE = "none|hidden|dotted|dashed|solid|double|groove|ridge|inset|outset"
_BORDER = rf"((thin|medium|thick|{_LEN}|{_BORDER_STYLE}|{_COLOR})\s*){{1,3}}"
_IDENT = r"-?([_a-z]|[\xA0-\xFF])([_a-z0-9-]|[\xA0-\xFF])*"
_FAMILY = rf"(('[^']*'|\"[^\"]*\"|({_IDENT}\s*)+)|serif|sans-serif|cursive|fantasy|monospace)"
ALLOWED = {
    "background-color": _COLOR, "color": _COLOR,
    "background": rf"(({_COLOR})\s*)+",
    "border": _BORDER, "border-top": _BORDER, "border-left": _BORDER, "border-bottom": _BORDER, "border-right": _BORDER,
    "border-collapse": "collapse|separate", "border-radius": rf"(({_LEN_PERC})\s*){{1,4}}",
    "table-layout": "auto|fixed", "text-align": "left|right|center|justify",
    "vertical-align": rf"baseline|sub|super|top|text-top|middle|bottom|text-bottom|{_LEN_PERC}",
    "overflow-wrap": "normal|break-word", "white-space": "normal|pre|nowrap|pre-wrap|pre-line",
    "font-weight": "normal|bold|bolder|lighter|100|200|300|400|500|600|700|800|900",
    "font-family": rf"{_FAMILY}(,\s*{_FAMILY})*",
    "font-size": rf"xx-small|x-small|small|medium|large|x-large|xx-large|smaller|larger|{_LEN_POS}|{_NUM_POS}%",
    "padding": rf"(({_LEN_POS}|{_NUM_POS}%)\s*){{1,4}}", "margin": rf"(({_LEN_PERC}|auto)\s*){{1,4}}",
    "width": rf"{_LEN_POS}|{_NUM_POS}%|auto", "height": rf"{_LEN}|{_NUM}%|auto",
    "display": "inline|block|list-item|inline-block|table|inline-table|table-cell|flex|inline-flex|grid|none",
    "outline": rf"(({_COLOR}|invert|{_BORDER_STYLE}|thin|medium|thick|{_LEN})\s*){{1,3}}",
}
_KEEP_ATTRS = {"class", "style", "title", "id", "colspan", "rowspan", "span", "width", "align", "valign", "border"}


class _Sanitiser(HTMLParser):
    """What JupyterLab renders of untrusted HTML, for what these tests look at: tags, allowed attributes, styles."""

    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.out, self.dropped, self.skip = [], [], 0

    def handle_starttag(self, tag, attrs):
        if tag in ("style", "script"):
            self.skip += 1
            self.dropped.append(f"<{tag}>")
            return
        kept = []
        for k, v in attrs:
            if k == "style":
                good = []
                for decl in filter(None, (d.strip() for d in (v or "").split(";"))):
                    prop, _, value = (x.strip().lower() for x in decl.partition(":"))
                    if prop in ALLOWED and re.fullmatch(ALLOWED[prop], value, re.IGNORECASE):
                        good.append(f"{prop}:{value}")
                    else:
                        self.dropped.append(decl)
                v = ";".join(good)
            elif k not in _KEEP_ATTRS:
                continue
            kept.append(f" {k}='{v}'" if v is not None else f" {k}")
        self.out.append(f"<{tag}{''.join(kept)}>")

    def handle_endtag(self, tag):
        if tag in ("style", "script"):
            self.skip -= 1
            return
        self.out.append(f"</{tag}>")

    def handle_data(self, data):
        if not self.skip:
            self.out.append(data)

    def handle_entityref(self, name):
        self.out.append(f"&{name};")

    def handle_charref(self, name):
        self.out.append(f"&#{name};")


def sanitize(markup: str) -> tuple[str, list[str]]:
    """(the HTML as the sanitiser leaves it, what it removed: tags and style declarations)."""
    s = _Sanitiser()
    s.feed(markup)
    s.close()
    return "".join(s.out), s.dropped


def _styles_of(markup: str, pattern: str) -> list[str]:
    """The style attribute of every opening tag matching ``pattern`` (a regex over the tag's opening text)."""
    return [re.search(r"style='([^']*)'", t).group(1) for t in re.findall(r"<[a-z][^>]*>", markup)
            if re.search(pattern, t) and "style='" in t]


# --- the snapshots ----------------------------------------------------------------------------------------------------
MIX = [{"name": "format", "weight": 0.2}, {"name": "exact_alnum", "weight": 0.8}]


def _truth(prompt: str) -> str:
    digits = [int(x) for x in prompt.split()[1:]]
    return str(max(digits)) if digits else ""


@pytest.fixture()
def ex(tmp_path):
    exp = gen.generate(tmp_path, steps=2, records=16, seq_len=32, group_size=4)
    return explorer.explore(trajectories.open_run(exp), step=1, rewards=MIX, ground_truth=_truth, page_size=8)


def _rescore_view():
    rows = [{"step": 1, "idx": i, "prompt": "max 1 2 3", "response": f"<think>t</think> <answer>{a}</answer>",
             "reward": 1.0} for i, a in enumerate("3321")]
    rows += [{"step": 1, "idx": 4 + i, "prompt": "max 5 4 0", "response": "<answer>4</answer>" if r else "4",
              "reward": r} for i, r in enumerate([1.0, 0.0, 0.0, 0.0])]
    result = rewards.rescore(pd.DataFrame(rows).assign(advantage=0.0), [{"name": "exact_alnum", "weight": 1.0}],
                             ground_truth=_truth, progress=False)
    return display.compare_view(result)


def _bundle(obj) -> dict:
    b = obj._repr_mimebundle_()
    return dict(b[0] if isinstance(b, tuple) else b)


def test_the_explorer_snapshot_keeps_its_colours_through_the_sanitiser(ex):
    ex.record.value = 2
    ex.compare.value = 2
    html = _bundle(ex)["text/html"]
    for part in (html, ex.record_panel.value, ex.compare_panel.value):
        clean, dropped = sanitize(part)
        assert dropped == [], dropped  # no <style>/<script>, every declaration allowed
        assert "<style" not in part and "var(" not in part
    clean, _ = sanitize(html)
    # a coloured row: the cells of a correct (or incorrect) sample keep their background after sanitising
    rows = re.findall(r"<tr class='nbx-row (ok|bad)'[^>]*>\s*<td[^>]*style='([^']*)'", clean)
    assert rows and all("background-color:#f1f9f3" in s if k == "ok" else "background-color:#fdf3f2" in s
                        for k, s in rows)
    assert {k for k, _ in rows} == {"ok", "bad"}
    # the group header keeps its rule, the histogram its bars (a width and a fill each)
    assert any("border-top:2px solid #6b7fa8" in s for s in _styles_of(clean, r"^<td colspan='8'"))
    bars = _styles_of(clean, r"class='bar'")
    assert bars and all("background-color:#4c72b0" in s and re.search(r"width:\d+px", s) for s in bars)
    assert max(int(re.search(r"width:(\d+)px", s).group(1)) for s in bars) == 220
    tokens = _styles_of(sanitize(ex.record_panel.value)[0], r"class='tok'")
    assert tokens and all(re.search(r"background(-color)?:(rgba\(76,114,176,[01]\.\d\d\)|#eee)", s) for s in tokens)


def test_the_sanitiser_check_catches_what_jupyterlab_strips():
    clean, dropped = sanitize("<div><style>.x{color:red}</style><span style='color:var(--jp-x);gap:4px;"
                              "overflow-wrap:anywhere;color:#123456'>t</span><script>1</script></div>")
    assert dropped == ["<style>", "color:var(--jp-x)", "gap:4px", "overflow-wrap:anywhere", "<script>"]
    assert clean == "<div><span style='color:#123456'>t</span></div>"


def test_the_rescoring_view_saves_a_static_snapshot():
    view = _rescore_view()
    data = _bundle(view)
    assert WIDGET_VIEW in data and "VBox(" not in data["text/plain"] and "re-run this cell" in data["text/plain"]
    html = data["text/html"]
    assert "Re-run the cell" in html and "group 0" in html and html.count("class='nbx-row'") == 4
    assert sanitize(html)[1] == []
    pick, pos, _ = view.children[0].children
    pick.value, pos.value = "every group", 2  # the snapshot is what is on screen
    assert "max 5 4 0" in _bundle(view)["text/html"] and "group 2 of 2 groups" in _bundle(view)["text/html"]


def _executed(tmp_path: Path, outputs: list[dict], state: dict | None) -> Path:
    """A notebook as papermill saves it: display_data outputs (the kernel's bundles) and the widget state."""
    nb = nbformat.v4.new_notebook()
    for data in outputs:
        cell = nbformat.v4.new_code_cell("view")
        cell.outputs = [nbformat.v4.new_output("display_data", data=data)]
        nb.cells.append(cell)
    if state is not None:
        nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"version_major": 2,
                                                                              "version_minor": 0, "state": state}}
    path = tmp_path / "executed.ipynb"
    nbformat.write(nb, path)
    return path


def _export_html(path: Path) -> str:
    from nbconvert import HTMLExporter

    return HTMLExporter(template_name="lab").from_notebook_node(nbformat.read(path, as_version=4))[0]


def test_a_frozen_notebook_shows_the_snapshots_in_jupyterlab_and_in_nbconvert_html(ex, tmp_path):
    import ipywidgets as w

    outputs = [_bundle(ex), _bundle(_rescore_view())]
    state = w.Widget.get_manager_state(drop_defaults=True)["state"]
    assert outputs[0][WIDGET_VIEW]["model_id"] in state
    before = _export_html(_executed(tmp_path, outputs, state))
    # as papermill saves it, nbconvert prefers the widget view: a script tag and the state, which need a CDN and
    # a live kernel's models to draw anything; the snapshot is not in the page
    assert before.count(f'<script type="{WIDGET_VIEW}">') == 2 and "A snapshot of the" not in before

    path = _executed(tmp_path, outputs, state)
    assert freeze_widgets(path) == 2
    saved = json.loads(path.read_text())
    assert "widgets" not in saved["metadata"]
    assert all(WIDGET_VIEW not in o["data"] and "text/html" in o["data"] for c in saved["cells"] for o in c["outputs"])
    assert check_outputs(path) == []
    after = _export_html(path)
    assert WIDGET_VIEW not in after and "widget-state" not in after
    assert "A snapshot of the trajectory explorer" in after and "A snapshot of the re-scoring view" in after
    assert "background-color:#f1f9f3" in after and "class='bar'" in after.replace('"', "'")
    assert freeze_widgets(path) == 0  # idempotent


def test_check_outputs_flags_a_widget_saved_as_its_python_repr(tmp_path):
    path = _executed(tmp_path, [{"text/plain": "VBox(children=(HBox(children=(Dropdown(…",
                                 WIDGET_VIEW: {"model_id": "abc", "version_major": 2, "version_minor": 0}}], None)
    freeze_widgets(path)
    assert [p for p in check_outputs(path) if "without a static snapshot" in p] == [
        "executed.ipynb cell 0: a widget saved without a static snapshot (shows VBox(children=(HBox(children=(Dropdown(……)"]


def test_the_health_panel_carries_its_table_as_a_snapshot():
    import ipywidgets as w

    from nbtools.health.display import HealthPanel

    panel = HealthPanel.__new__(HealthPanel)  # the display layer only: no run to check here
    panel.widget = w.HTML("<table><tr><td style='color:#b00020'>zero-reward</td></tr></table>")
    data = _bundle(panel)
    assert data["text/html"] == panel.widget.value and "re-run this cell" in data["text/plain"]
    assert WIDGET_VIEW in data
