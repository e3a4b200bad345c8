"""One escaping layer per format (nbtools._escape): hostile strings through every renderer that shows run data.

The property: a renderer's markup does not depend on the data. For HTML, the tag sequence (parsed by the standard
library's HTMLParser) of the output with a hostile value equals the one with a plain value, and no comment, tag
or attribute comes from the value; for Markdown the same holds for the HTML that markdown-it-py (CommonMark)
renders from it; YAML reads back to the same data; a CSV cell never starts a formula.
"""

from __future__ import annotations

import csv
import io
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbtools import _escape

FAST = settings(max_examples=80, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
PAYLOADS = ["<img src=x onerror=alert(1)>", "<script>alert(1)</script>", "<!--", "-->", "<!-- hidden", "`", "```",
            "``x``", "**bold**", "_x_", "[a](javascript:alert(1))", "![i](x)", "| a | b |", "\n# heading\n", "\r\n---\n",
            "&lt;", "&amp;", "'\"", "=cmd|' /C calc'!A0", "+1+1", "-2+3", "@SUM(A1)", "\t=1", "\\", "~~s~~", "<", ">",
            "{{x}}", "${x}", "a: b", "- x", "? x", "!!python/object", "\u2028", "\x00", "comparison_<img src=x>"]
hostile = st.one_of(st.sampled_from(PAYLOADS), st.text(max_size=30),
                    st.lists(st.sampled_from(PAYLOADS + ["x", " ", "a_b"]), min_size=2, max_size=5).map("".join))
PLAIN = "plainvalue"
nonblank = hostile.filter(lambda s: _escape.md(s))  # a blank value may leave a line out, which is not markup


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(("start", tag, tuple(k for k, _ in attrs)))

    def handle_endtag(self, tag):
        self.tags.append(("end", tag))

    def handle_comment(self, data):
        self.tags.append(("comment",))

    def handle_decl(self, decl):
        self.tags.append(("decl",))

    def unknown_decl(self, data):
        self.tags.append(("decl",))

    def handle_pi(self, data):
        self.tags.append(("pi",))


def tags(markup: str) -> list[tuple]:
    p = _Tags()
    p.feed(markup)
    p.close()
    return p.tags


def _md_html(text: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough").render(text)


# -- the renderers, each given one value -------------------------------------------------------------------------


def _score_block(v):
    from nbtools.evals.parse import ScoreBlock

    return ScoreBlock(model_name=v, dataset_name=v, max_new_tokens=64, temperature=0.0, top_p=1.0, top_k=-1, seed=1,
                      metric=v, num_tests_per_prompt=1, score=0.5, numerator=1.0, denominator=2)._repr_html_()


def _eval_result(v):
    from nbtools.evals import EvalResult

    table = pd.DataFrame({"problem_id": ["p1", "p2"], "sample": [0, 0], "correct": [True, False]})
    return (EvalResult(table=table, model=v, params={"temperature": v}, path=Path("runs") / v)._repr_html_()
            + EvalResult(table=table.iloc[:0], model=v)._repr_html_())


def _verify_report(v):
    from nbtools.checkpoints._verify import AgainstReport, VerifyReport

    return (VerifyReport(Path(v), False, [v, v], pd.DataFrame({"file": [v], "bytes": [1]}), 2)._repr_html_()
            + AgainstReport(False, "tensors", 0.5, [v])._repr_html_())


def _merge_result(v):
    from nbtools.checkpoints import MergeResult

    return MergeResult(Path(v), 2, 10, 0.1, v, True, {v: "00"}, notes=[v])._repr_html_()


def _comparison(v):
    from nbtools.evals.compare import Comparison

    return Comparison(v, v, 0.1, 0.2, (0.0, 0.3), (0.1, 0.4), 10, v, 0.5, 0.1, -0.1, 0.3, True, 0.05, v,
                      notes=[v])._repr_html_()


def _plan(v):
    from nbtools.gke._plan import Plan

    return Plan(kind=v, steps=[], state_path=Path(v), note=v)._repr_html_()


def _record_panel(v):
    """#41: a foreign dump's non-numeric ``token_ids`` (and a string group id) reach the explorer's record panel."""
    from nbtools.explorer._record import record_view
    from nbtools.explorer._render import compare_html, record_html

    rec = {"step": 1, "idx": 0, "prompt": v, "response": v, "reward": 0.5, "env_observation": v,
           "token_ids": [v, 7], "token_loss_mask": [1, 1], "generation_logprobs": [-0.1, -0.2]}
    view = record_view(rec, group=v)
    return record_html(view) + compare_html([view], [], (1, 2), [3])


def _explorer_summary(v):
    from nbtools.explorer._render import summary_html

    df = pd.DataFrame({"step": [1, 1], "group": [v, v], "reward": [0.0, 1.0], "correct": [True, None],
                       "no_signal": [False, False], "generation_length": [3.0, 4.0]})
    return summary_html(df, v) + summary_html(df.iloc[:0], v)


def _supervised_run(v):
    from nbtools.launch._supervise import SupervisedRun

    return SupervisedRun(v, v, [], 3, note=v)._repr_html_()


def _health_report(v):
    from nbtools.health import CheckResult, Example, HealthReport

    checks = (CheckResult(v, "unhealthy", 1, 0.5, 0.9, v, v, (v,), (Example(1, 2),)),
              CheckResult("zero-reward", "unknown", None, None, 0.9, v, v))
    return HealthReport(v, "unhealthy", (1, 2), checks)._repr_html_()


HTML_RENDERERS = {"ScoreBlock": _score_block, "EvalResult": _eval_result, "VerifyReport": _verify_report,
                  "MergeResult": _merge_result, "Comparison": _comparison, "gke Plan": _plan,
                  "explorer record panel": _record_panel, "explorer summary": _explorer_summary,
                  "HealthReport": _health_report, "SupervisedRun": _supervised_run}


def _evaluation_section(v):
    from nbtools.card._render import evaluation_section
    from nbtools.evals.compare import Comparison

    c = Comparison("a", "b", 0.1, 0.2, (0.0, 0.3), (0.1, 0.4), 10, v, 0.5, 0.1, -0.1, 0.3, True, 0.05, v, notes=[v])
    return evaluation_section([(v, c)], (v, v, v), v, "abc")


def _card_markdown(v):
    from nbtools.card import Card

    meta = {"base_model": v, "license": v, "tags": [v, "grpo"]}
    return Card(v, meta, "", (v,), 1, f"upload_folder(folder_path={v!r})", (v,))._repr_markdown_()


MD_RENDERERS = {"card evaluation section": _evaluation_section, "Card._repr_markdown_": _card_markdown}


@pytest.mark.parametrize("name", list(HTML_RENDERERS))
@FAST
@given(value=nonblank)
def test_html_renderers_keep_their_markup_whatever_the_data(name, value):
    render = HTML_RENDERERS[name]
    assert tags(render(value)) == tags(render(PLAIN))


@pytest.mark.parametrize("name", list(MD_RENDERERS))
@FAST
@given(value=nonblank)
def test_markdown_renderers_keep_their_markup_whatever_the_data(name, value):
    render = MD_RENDERERS[name]
    no_code = lambda t: [x for x in t if x[1:2] != ("code",)]  # noqa: E731 - plain values show as code, others as text
    assert no_code(tags(_md_html(render(value)))) == no_code(tags(_md_html(render(PLAIN))))


@FAST
@given(value=hostile)
def test_markdown_text_renders_as_exactly_its_characters(value):
    import html
    import re

    out = _md_html("x " + _escape.md(value) + " y")
    assert tags(out) == [("start", "p", ()), ("end", "p")]
    norm = lambda s: " ".join(re.sub(r"[\x00-\x1f\x7f\u2028\u2029]", " ", s).split())  # noqa: E731
    assert norm(html.unescape(out.removeprefix("<p>").removesuffix("</p>\n"))) == norm(f"x {value} y")


@FAST
@given(st.dictionaries(hostile, st.one_of(hostile, st.lists(hostile, max_size=3)), max_size=4))
def test_yaml_goes_through_the_serializer_and_reads_back(data):
    assert yaml.safe_load(_escape.yaml_dump(data)) == data


@FAST
@given(st.lists(hostile, min_size=1, max_size=6))
def test_csv_cells_never_start_a_formula(values):
    df = pd.DataFrame({"text": values, "n": range(len(values))})
    text = _escape.csv_frame(df).to_csv(index=False)
    rows = list(csv.reader(io.StringIO(text)))
    for row in rows[1:]:
        cell = row[0]
        assert not cell or cell[0] not in "=+-@\t\r" or _escape._NUMBER.fullmatch(cell), cell
    assert _escape.csv_cell("-0.5") == "-0.5" and _escape.csv_cell(-3) == -3
    assert _escape.csv_cell("=cmd|' /C calc'!A0") == "'=cmd|' /C calc'!A0"


FORMULA = "=HYPERLINK(\"http://x\",\"y\")"


def _cells(text: str) -> list[str]:
    return [c for row in csv.reader(io.StringIO(text)) for c in row]


def test_every_csv_nbtools_writes_neutralises_formulas(tmp_path, capfd):
    """#41: EvalResult.save()'s results.csv (prompts, responses) and ``nbtools metrics --csv`` (tag names) wrote
    formula-leading cells as they were; the parquet keeps the values as they are."""
    from tensorboard.summary import DirectoryOutput, Writer

    from nbtools.cli import main
    from nbtools.evals import EvalResult

    table = pd.DataFrame({"problem_id": ["p1"], "sample": [0], "correct": [True], "prompt": [FORMULA],
                          "response": ["@SUM(A1)"]})
    out = EvalResult(table=table, model="m").save(tmp_path / "eval")
    cells = _cells((out / "results.csv").read_text())
    assert "'" + FORMULA in cells and "'@SUM(A1)" in cells and not [c for c in cells if c[:1] in "=+-@"]
    assert EvalResult.load(out).table["prompt"].tolist() == [FORMULA]
    w = Writer(DirectoryOutput(str(tmp_path / "logs" / "exp_001" / "tensorboard")))
    w.add_scalar(FORMULA, 1.0, 1)
    w.close()
    assert main(["metrics", str(tmp_path / "logs" / "exp_001"), "--csv"]) == 0
    cells = _cells(capfd.readouterr().out)
    assert "'" + FORMULA in cells and FORMULA not in cells, cells


def test_hub_ids():
    assert _escape.is_hub_id("Qwen/Qwen2.5-1.5B") and _escape.is_hub_id("gpt2")
    for bad in ["<script>", "a/b/c", "/abs/path", "a`b", "x\ny", "../x", "", "a b"]:
        assert not _escape.is_hub_id(bad), bad



def test_html_is_escaped_through_the_one_helper():
    """Every renderer escapes HTML with nbtools._escape.html (one layer to fix, one to test)."""
    root = Path(__file__).resolve().parent.parent
    direct = sorted(str(p.relative_to(root)) for p in (root / "nbtools").rglob("*.py")
                    if "html.escape(" in p.read_text() and p.name != "_escape.py")
    assert direct == [], direct


@settings(max_examples=25, deadline=None, database=None, derandomize=True)
@given(value=hostile.filter(lambda s: "\x00" not in s))
def test_shell_words_and_messages_stand_for_exactly_their_text(value):
    """#41: what a built command names or prints is one quoted word, in bash and in sh (whose echo expands ``\\``)."""
    import subprocess

    script = f"{_escape.sh_echo(value)}; printf '%s|' {_escape.sh_join([value, 'x y'])}"
    for shell in ("bash", "sh"):
        out = subprocess.run([shell, "-c", script], capture_output=True, check=True).stdout
        assert out == f"{value}\n{value}|x y|".encode(errors="surrogateescape"), (shell, script)


def test_shell_commands_are_quoted_through_the_one_helper():
    """One quoting path: no module but nbtools._escape imports shlex, and no f-string pastes values into an echo."""
    import ast

    root = Path(__file__).resolve().parent.parent
    direct, echoes = [], []
    for p in (root / "nbtools").rglob("*.py"):
        if p.name == "_escape.py":
            continue
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and "shlex" in (
                    [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]):
                direct.append(str(p.relative_to(root)))
            if isinstance(node, ast.JoinedStr) and any(isinstance(v, ast.FormattedValue) for v in node.values) and any(
                    isinstance(v, ast.Constant) and "echo " in str(v.value) for v in node.values):
                echoes.append(f"{p.relative_to(root)}:{node.lineno}")
    assert direct == [] and echoes == [], (direct, echoes)


def test_commands_shown_to_be_copied_work_when_pasted(tmp_path, monkeypatch):
    """Issue 45: a command a cell shows for copying carries no ``<runs_dir>/…`` mask (that breaks when pasted) and no
    absolute path: runs-dir and checkout paths are relative to where it is shown (the notebook's directory)."""
    import shlex

    from IPython.lib.pretty import pretty

    from nbtools import _paths
    from nbtools.checkpoints import copy_to_local_disk_command

    runs = tmp_path / "runs"
    (runs / "exp" / "merged_hf").mkdir(parents=True)
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(runs))
    monkeypatch.chdir(nbdir)
    argv = copy_to_local_disk_command(str(runs / "exp" / "merged_hf"))
    shown = pretty(argv)
    assert "<runs_dir>" not in shown and str(tmp_path) not in shown and shown.startswith("bash -c 'set -euo")
    assert shlex.split(shown) == [a.replace(str(runs), "../runs") for a in argv]  # the same command, pasteable here
    call = _paths.pasteable(f'upload_folder(folder_path="{runs}/exp/merged_hf")')
    assert call == 'upload_folder(folder_path="../runs/exp/merged_hf")'
    assert _paths.shown(str(runs / "x")) == "<runs_dir>/x"  # prose keeps the mask


def test_a_merge_result_reads_as_one_sentence(tmp_path, monkeypatch):
    """Issue 45: in a console or a text export the merge result was the dataclass repr with every file's checksum."""
    from pathlib import Path

    from nbtools.checkpoints._result import MergeResult

    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path))
    r = MergeResult(Path(tmp_path) / "exp" / "merged_hf", 20, 512_000, 3.21, "v2_safetensors", True,
                    {f"model-{i}.safetensors": "ab" * 16 for i in range(30)})
    assert repr(r) == ("<runs_dir>/exp/merged_hf: 20 tensors, 0.5 MB, layout v2_safetensors, merged in 3.2 s, verified "
                       "yes, 30 files with xxh3_128 checksums")


def test_a_card_reads_as_one_sentence(tmp_path, monkeypatch):
    """Issue 45: a card's text form was the dataclass repr, its whole Markdown text inside."""
    from nbtools.card import Card

    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path))
    card = Card(str(tmp_path / "m" / "README.md"), {"tags": ["grpo"]}, "---\nlong text\n" * 50, ("experiment.yaml",), 2,
                "upload_folder(...)", ("fill in the licence",))
    assert repr(card) == ("model card <runs_dir>/m/README.md: 2 evaluation(s) in the model-index; beside it: "
                          "experiment.yaml\n  note: fill in the licence")
