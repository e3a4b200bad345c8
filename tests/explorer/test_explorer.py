"""nbtools.explorer: the query layer (pages, groups, filters, sort, search), tag segments as the rewards parse them,
the record view (reward by function, tokens), and the widget driven from code. No browser: tests/browser has that."""

from __future__ import annotations

import importlib.util
import json
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nbtools import explorer, rewards, trajectories
from nbtools.errors import ConfigError
from nbtools.explorer import ExplorerData, Query, tag_segments

_GEN = Path(__file__).resolve().parents[2] / "benchmarks" / "gen_nemo_rl_run.py"
_spec = importlib.util.spec_from_file_location("gen_nemo_rl_run", _GEN)
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)

MIX = [{"name": "format", "weight": 0.2}, {"name": "exact_alnum", "weight": 0.8}]


def _unstyled(markup: str) -> str:
    """The HTML without its inline styles (the look; tests/notebooks/test_saved_widgets.py checks it)."""
    return re.sub(r" style='[^']*'", "", markup)


def _line(prompt: str, response: str, reward: float, idx: int, adv: float, gen_tokens: int = 3) -> str:
    n = 4 + gen_tokens
    mask = [0] * 4 + [1] * gen_tokens
    return json.dumps({"content": [[prompt, response, "Environment: " + ("correct" if reward >= 0.9 else "incorrect")]],
                       "rewards": [reward], "idx": idx, "token_ids": [list(range(100, 100 + n))],
                       "token_loss_mask": [mask], "advantages": [[adv] * n],
                       "generation_logprobs": [[0.0] * 4 + [-0.5] * gen_tokens],
                       "prev_logprobs": [[-0.1] * n]}) + "\n"


def _hand_run(tmp_path: Path) -> Path:
    """Two steps of 2 groups x 3 samples; malformed tags in a few responses; prompt 'max 1 2 3' at both steps."""
    exp = tmp_path / "logs" / "exp_001"
    exp.mkdir(parents=True)
    rows = {
        1: [("max 1 2 3", "<think>compare</think> <answer>3</answer>", 1.0, 5),
            ("max 1 2 3", "<think>hmm</think> <answer>2</answer>", 0.2, 4),
            ("max 1 2 3", "no tags at all, </think> stray", 0.0, 9),
            ("max 4 0 5", "<answer>5</answer>", 0.95, 2),
            ("max 4 0 5", "<answer>5</answer>", 0.95, 2),
            ("max 4 0 5", "<think>x</think><answer>5</answer>", 1.0, 3)],
        2: [("max 7 8 1", "<think>a</think><answer>8</answer>", 1.0, 3),
            ("max 7 8 1", "<think>b<answer>7</think></answer>", 0.95, 3),
            ("max 7 8 1", "<think>c</think><answer>1</answer>", 0.2, 3),
            ("max 1 2 3", "<think>d</think><answer>3</answer>", 1.0, 3),
            ("max 1 2 3", "<think>e</think><answer>MAX is 3</answer>", 0.2, 12),
            ("max 1 2 3", "<think>f</think><answer>3</answer>", 1.0, 3)],
    }
    for step, recs in rows.items():
        lines = []
        for g in range(2):
            grp = recs[3 * g:3 * g + 3]
            r = np.array([x[2] for x in grp])
            adv = r - r.mean()
            lines += [_line(p, resp, rw, 3 * g + j, float(adv[j]), n) for j, (p, resp, rw, n) in enumerate(grp)]
        (exp / f"train_data_step{step}.jsonl").write_text("".join(lines))
    return exp


@pytest.fixture()
def run(tmp_path):
    return trajectories.open_run(_hand_run(tmp_path))


def test_tag_segments_show_exactly_the_spans_the_rewards_parse():
    text = "<think>b<answer>7</think></answer>"  # overlapping: think = 'b<answer>7', answer = '7</think>'
    segs = tag_segments(text)
    assert "".join(s.text for s in segs) == text
    think = "".join(s.text for s in segs if "think" in s.kinds and "tag" not in s.kinds)
    answer = "".join(s.text for s in segs if "answer" in s.kinds and "tag" not in s.kinds)
    t, a = rewards.tag_span(text, "think"), rewards.tag_span(text, "answer")
    assert think.replace("<answer>", "") == text[t[0]:t[1]].replace("<answer>", "")
    assert answer.replace("</think>", "") == text[a[0]:a[1]].replace("</think>", "")
    assert rewards.format_reward("", text)[0] == 1.0  # both spans found, as the highlight says
    stray = tag_segments("no tags at all, </think> stray")
    assert [s.kinds for s in stray] == [frozenset()]  # a stray close tag is no span: nothing highlighted
    hits = tag_segments("Max MAX max", pattern=re.compile("max", re.I))
    assert [s.text for s in hits if "match" in s.kinds] == ["Max", "MAX", "max"]


def test_groups_baselines_and_paging_reach_every_record(run):
    data = ExplorerData(run)
    t = data.table(1)
    assert t["group"].tolist() == [0, 0, 0, 1, 1, 1] and t["group_size"].eq(3).all()
    assert t["baseline"].round(4).tolist() == [0.4] * 3 + [0.9667] * 3
    assert t["no_signal"].tolist() == [False] * 6
    seen = []
    for n in range(3):
        p = data.page(Query(step=2), number=n, size=2)
        seen += p.rows["idx"].tolist()
        assert p.pages == 3 and p.total == 6 and p.in_scope == 6
    assert seen == list(range(6))
    last = data.page(Query(step=2), number=-1, size=4)
    assert last.number == 1 and last.first == 5 and last.last == 6 and last.rows["idx"].tolist() == [4, 5]
    assert data.page(Query(step=2), number=99, size=4).number == 1  # clamped
    assert last.rows["response"].iloc[-1] == run.record(2, 5)["response"]  # texts come from the index
    whole = data.page(Query(step=None), size=100)
    assert whole.total == 12 and whole.rows.groupby("step")["group"].max().tolist() == [1, 1]


def test_filters_sort_ranges_and_search_agree_with_the_data(run):
    data = ExplorerData(run)
    df = run.read(2)
    correct = df["env_observation"].str.endswith(" correct")
    assert len(data.select(Query(step=2, show="correct"))) == correct.sum() == 4
    assert len(data.select(Query(step=2, show="incorrect"))) == (~correct).sum()
    assert len(data.select(Query(step=1, show="no answer tag"))) == 1
    assert data.select(Query(step=2, sort="reward ↓"))["reward"].is_monotonic_decreasing
    assert data.select(Query(step=2, sort="length ↑"))["generation_length"].is_monotonic_increasing
    assert data.select(Query(step=2, sort="advantage ↓"))["advantage"].is_monotonic_decreasing
    assert set(data.select(Query(step=2, reward=(0.5, 0.99)))["idx"]) == {1}
    assert set(data.select(Query(step=2, length=(10, 20)))["idx"]) == {4}
    assert set(data.select(Query(step=2, search="max is"))["idx"]) == {4}  # case-insensitive by default
    assert data.select(Query(step=2, search="max is", case=True)).empty
    assert len(data.select(Query(step=2, search=r"<answer>\d</answer>", regex=True))) == 4
    assert len(data.select(Query(step=2, search="max 7"))) == 3  # the prompt is searched too
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        data.select(Query(step=2, search="[(", regex=True))
    with pytest.raises(ConfigError, match="show: expected one of"):
        data.select(Query(step=2, show="reward = 0"))


def test_no_signal_groups_and_the_same_prompt_at_another_step(run):
    data = ExplorerData(run)
    no_signal = data.select(Query(step=1, show="groups with no signal"))
    assert no_signal.empty  # rewards 0.95, 0.95, 1.0 differ
    same = data.same_prompt("max 1 2 3", 2)
    assert same["idx"].tolist() == [3, 4, 5] and data.steps_with_prompt("max 1 2 3") == [1, 2]
    assert data.nearest_step(7) == 2 and data.nearest_step(-3) == 1


def test_record_view_breaks_the_reward_down_by_function(run):
    mix = rewards.combine(MIX)
    rec = run.record(2, 4)
    view = explorer.record_view(rec, mix=mix, ground_truth=lambda p: "3")
    assert view.answer == "MAX is 3" and view.rewards["function"].tolist() == ["format", "exact_alnum"]
    assert view.rewards.attrs["total"] == pytest.approx(0.2) == pytest.approx(mix("3", rec["response"])[0])
    assert view.tokens["mask"].sum() == 12 == rec["generation_length"]
    unknown = explorer.record_view(rec, mix=mix)  # no ground truth: format scores, exact_alnum is NaN
    assert unknown.rewards["score"].iloc[0] == 1.0 and np.isnan(unknown.rewards["score"].iloc[1])


def test_widget_pages_types_steps_filters_and_exports(run, tmp_path):
    ex = explorer.explore(run, step=1, rewards=MIX, ground_truth=lambda p: p.split()[1 + np.argmax(
        [int(x) for x in p.split()[1:]])], page_size=8)
    assert ex.step.value == 1 and "group 0" in ex.table.value and "baseline (group mean reward) 0.4" in ex.table.value
    ex.page_size.value = 8
    ex.step.value = 5  # typed: no such dump, the nearest one is shown and said so
    assert ex.step.value == 2 and "no dump for step 5" in ex.status.value
    assert all(f"data-step='2' data-idx='{i}'" in ex.table.value for i in range(6))
    ex.length.value = (4, ex.length.max)  # narrowed by the user: survives a step change
    assert ex.page_data.rows["idx"].tolist() == [4]
    ex.step.value = 1
    assert ex.length.value[0] == 4 and ex.frame()["idx"].tolist() == [0, 1, 2]
    ex.length.value = (ex.length.min, ex.length.max)
    ex.filter.value = "incorrect"
    assert ex.page_data.total == (~run.read(1)["env_observation"].str.endswith(" correct")).sum()
    ex.filter.value = "all"
    ex.search.value = "STRAY"
    assert ex.page_data.rows["idx"].tolist() == [2] and "<mark>stray</mark>" in _unstyled(ex.table.value)
    ex.search.value = ""
    ex.record.value = 6
    assert ex.view.idx == 5 and "nbx-tokens" in ex.record_panel.value and "exact_alnum" in ex.record_panel.value
    ex.record.value = 1
    ex.compare.value = 2
    assert "step 2" in ex.compare_panel.value and _unstyled(ex.compare_panel.value).count("<tr><td class='num'>") == 6
    ex.whole_run.value = True  # every step of the run, groups numbered within their step
    assert ex.page_data.in_scope == 12 and "the run" in ex.summary.value
    ex.sort.value = "reward ↓"
    assert ex.page_data.rows["reward"].is_monotonic_decreasing and ex.page_data.total == 12
    ex.sort.value, ex.whole_run.value = "file order", False
    out = ex.export(tmp_path / "sel.csv")
    assert len(pd.read_csv(out)) == 6 and {"group", "baseline"} <= set(pd.read_csv(out).columns)
    bundle = ex._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    assert "application/vnd.jupyter.widget-view+json" in data and "re-run the cell" in data["text/html"]


def test_widget_follows_a_growing_run(tmp_path):
    exp = gen.generate(tmp_path, steps=2, records=16, seq_len=32, group_size=4)
    ex = explorer.explore(trajectories.open_run(exp), page_size=4)
    ex.last_page.click()
    assert ex.page.value == 4 and ex.page_data.rows["idx"].tolist() == [12, 13, 14, 15]
    gen.generate(tmp_path, steps=4, records=16, seq_len=32, group_size=4)
    ex.latest.click()
    assert ex.step.value == 4 and "steps 1…4" in ex.steps_label.value


@pytest.mark.slow
def test_a_page_and_a_record_stay_fast_on_a_large_step(tmp_path):
    """P2: a record < 5 ms; a page of 16 from a 4096-record step well under a second (index + light columns)."""
    exp = gen.generate(tmp_path, steps=2, records=4096, seq_len=256, group_size=16)
    run = trajectories.open_run(exp)
    data = ExplorerData(run)
    data.page(Query(step=2))  # builds the index and the column cache once
    t0 = time.perf_counter()
    for k in range(0, 4096, 41):
        run.record(2, k, arrays=True)
    per_record = (time.perf_counter() - t0) / 100
    t0 = time.perf_counter()
    page = data.page(Query(step=2, sort="reward ↓"), number=-1)
    per_page = time.perf_counter() - t0
    assert per_record < 0.005 and per_page < 0.5 and page.last == 4096, (per_record, per_page)


@pytest.mark.slow
def test_an_executed_notebook_keeps_the_widget_state_and_a_snapshot(tmp_path):
    """What papermill writes: the widgets' state in the metadata, and an HTML snapshot with a re-run note (`make demo`
    then keeps only the snapshot: nbtools.demo.freeze_widgets, tests/notebooks/test_saved_widgets.py)."""
    import nbformat
    import papermill

    exp = _hand_run(tmp_path)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(f"import nbtools\nrun = nbtools.trajectories.open_run({str(exp)!r})"),
                nbformat.v4.new_code_cell("nbtools.explorer.explore(run, step=2)")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    src, out = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, src)
    papermill.execute_notebook(str(src), str(out), kernel_name="python3", progress_bar=False, cwd=str(tmp_path))
    done = nbformat.read(out, as_version=4)
    state = done.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    data = done.cells[1].outputs[0]["data"]
    model = data["application/vnd.jupyter.widget-view+json"]["model_id"]
    assert model in state and state[model]["model_name"] == "VBoxModel"
    assert "re-run the cell" in data["text/html"] and "data-step='2' data-idx='5'" in data["text/html"]
    assert "re-run this cell" in data["text/plain"] and "VBox(children" not in data["text/plain"]


def test_explore_takes_the_reward_mix_and_truth_from_the_experiment(run):
    import nbtools

    cfg = nbtools.config.load(Path(__file__).resolve().parents[2] / "experiments" / "local.yaml", backend="local")
    ex = explorer.explore(run, step=2, cfg=cfg)
    assert ex.mix.names == [r["name"] for r in rewards.trained_with(cfg)] and ex.ground_truth("max 1 2 3") == "3"
    ex.record.value = 5  # "MAX is 3": format scores, the exact answer does not
    table = ex.view.rewards.set_index("function")["score"]
    assert ex.view.idx == 4 and table.notna().all() and "reward by function" in ex.record_panel.value


def test_record_panel_says_when_the_ground_truth_is_unknown(run):
    ex = explorer.explore(run, step=2, rewards=MIX)
    assert "the ground truth is not known here" in ex.record_panel.value
    ex = explorer.explore(run, step=2, rewards=MIX, ground_truth=lambda p: "8")
    assert "recomputed 1;" in ex.record_panel.value and "not known" not in ex.record_panel.value


def test_export_neutralises_spreadsheet_formulas(tmp_path):
    """#31: a prompt or response starting with = + - @ is written with a leading ' (OWASP CSV injection)."""
    import csv

    exp = tmp_path / "logs" / "exp_001"
    exp.mkdir(parents=True)
    evil = ["=cmd|' /C calc'!A0", "+SUM(1)", "@HYPERLINK(\"http://x\")", "-2+3"]
    lines = [_line(p, p, r, i, 0.0) for i, (p, r) in enumerate(zip(evil + ["max 1 2"] * 2, [1.0, 0.0] * 3,
                                                                   strict=True))]
    (exp / "train_data_step1.jsonl").write_text("".join(lines))
    ex = explorer.explore(trajectories.open_run(exp), step=1, page_size=8)
    out = ex.export(tmp_path / "sel.csv")
    rows = list(csv.DictReader(out.open()))
    texts = [v for r in rows for k, v in r.items() if k in ("prompt", "response")]
    assert {"'" + e for e in evil} <= set(texts)
    assert not any(v[:1] in ("=", "+", "@") or v.startswith("-2+") for r in rows for v in r.values())
    assert pd.read_csv(out)["reward"].tolist() == [1.0, 0.0] * 3  # numbers stay numbers (negatives too)


def test_jump_returns_the_explorer_whose_snapshot_shows_the_record_it_opened(run):
    """Issue 45: 05's saved snapshot showed the step the explorer opened at (200) while the cells after it read the
    step a health finding jumped to (196). A cell now ends on ``explorer.jump(report)``: the snapshot it saves is
    the jumped-to step."""
    ex = explorer.explore(run, step=run.steps[-1], rewards=MIX, ground_truth=lambda p: "0")
    first = run.steps[0]
    shown = ex.jump([(first, 1)])
    assert shown is ex and ex.step.value == first
    html = ex._repr_mimebundle_()
    html = (html[0] if isinstance(html, tuple) else html)["text/html"]
    assert f"data-step='{first}'" in html or f'data-step="{first}"' in html, html[:500]
