"""`nbtools explore` and `nbtools rescore` (issue 45: "no CLI for the explorer or re-scoring"): notebook 05's explorer
and notebook 08's re-scoring at a terminal, on a real rehearsal run of the health corpus (tests/assets/health-corpus,
SOURCE.md there). Each answer is checked against the library's own (``ExplorerData``, ``rewards.rescore``); a step,
record or page that does not exist is refused with the fix, never answered with the nearest one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import nbtools
from nbtools.cli import main
from nbtools.explorer import ExplorerData, Query

ROOT = Path(__file__).resolve().parents[2]
CORPUS_RUN = ROOT / "tests" / "assets" / "health-corpus" / "healthy-seed0" / "logs"
EXPERIMENT = ROOT / "experiments" / "local.yaml"  # what the corpus was made with (SOURCE.md: the local rehearsal)


@pytest.fixture(scope="module")
def RUN(tmp_path_factory):
    """A copy of the corpus run: the readers write their index and column cache beside the logs."""
    import shutil

    return shutil.copytree(CORPUS_RUN, tmp_path_factory.mktemp("explore") / "healthy-seed0" / "logs")


@pytest.fixture(scope="module")
def data(RUN):
    return ExplorerData(nbtools.trajectories.open_run(RUN))


def _json(capfd, argv, code=0):
    assert main([*argv, "--json"]) == code
    out, err = capfd.readouterr()
    return json.loads(out), err


def test_explore_pages_filters_and_searches_as_the_explorer_does(RUN, data, capfd):
    doc, _ = _json(capfd, ["explore", str(RUN), "--page-size", "5"])
    last = data.steps[-1]
    assert doc["query"]["step"] == last and doc["total"] == len(data.table(last)) and doc["pages"] == -(-doc["total"] // 5)
    assert [r["idx"] for r in doc["rows"]] == [0, 1, 2, 3, 4]
    want = data.select(Query(step=3, show="correct", search="max"))
    doc, _ = _json(capfd, ["explore", str(RUN), "--step", "3", "--show", "correct", "--search", "max"])
    assert doc["total"] == len(want) > 0 and [r["idx"] for r in doc["rows"]] == want["idx"].tolist()
    assert all(r["correct"] is True for r in doc["rows"])
    doc, _ = _json(capfd, ["explore", str(RUN), "--all-steps", "--sort", "reward ↓", "--page", "-1"])
    assert doc["page"] == doc["pages"] and doc["total"] == len(data.table(None))
    assert main(["explore", str(RUN), "--step", "3", "--show", "incorrect", "--page-size", "4"]) == 0
    text = capfd.readouterr().out
    assert text.startswith("step 3 · page 1/") and "filter: incorrect" in text and " yes " not in text


def test_building_the_parser_imports_neither_the_explorer_nor_pandas():
    """Every command builds the whole parser (``--help`` too): the explorer's lists are checked after parsing."""
    import subprocess
    import sys

    code = "import sys, nbtools.cli; nbtools.cli.build_parser(); print(sorted(m for m in ('pandas', 'nbtools.explorer') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_explore_record_shows_the_whole_record(RUN, data, capfd):
    assert main(["explore", str(RUN), "--step", "3", "--record", "2"]) == 0
    out = capfd.readouterr().out
    rec = data.record(3, 2)
    assert out.startswith("step 3 · idx 2 · group ") and rec["response"] in out and rec["prompt"] in out


@pytest.mark.parametrize(("argv", "code", "said"), [
    (["--step", "999"], 1, "step 999 has no records; the run has 12 steps, 1–12"),
    (["--step", "3", "--record", "999"], 1, "step 3 has no record idx 999"),
    (["--page", "99"], 1, "--page 99: the selection has"),
    (["--all-steps", "--record", "1"], 1, "--record needs one step"),
    (["--show", "bogus"], 2, "invalid choice: 'bogus' (choose from 'all', 'correct'"),
    (["--sort", "size"], 2, "argument --sort: invalid choice: 'size'"),
    (["--page-size", "0"], 1, "--page-size: expected a positive number"),
])
def test_explore_refuses_what_does_not_exist(RUN, argv, code, said, capfd):
    assert main(["explore", str(RUN), *argv]) == code
    err = capfd.readouterr().err
    assert said in err and ("fix:" in err or code == 2), err


def test_rescore_reproduces_the_run_then_scores_a_new_mix(RUN, capfd):
    doc, _ = _json(capfd, ["rescore", str(RUN), "--experiment", str(EXPERIMENT), "--step", "11", "--step", "12"])
    assert doc["summary"]["changed_rewards"] == 0 and doc["summary"]["steps"] == 2 and [r["step"] for r in doc["steps"]] == [11, 12]
    assert doc["summary"]["stored_advantage_max_diff"] < 1e-4
    doc, _ = _json(capfd, ["rescore", str(RUN), "--experiment", str(EXPERIMENT), "--reward-module",
                           str(ROOT / "experiments" / "my_rewards.py"), "--reward", "closeness=0.3", "--reward", "format=0"])
    cfg = nbtools.config.load(EXPERIMENT)
    mix = [{"name": "exact_alnum", "weight": 0.8}, {"name": "closeness", "weight": 0.3}]
    want = nbtools.rewards.rescore(nbtools.trajectories.open_run(RUN).read(), mix, cfg=cfg, progress=False).summary()
    assert doc["mix"] == mix and doc["summary"] == pytest.approx(dict(want), nan_ok=True)
    assert doc["summary"]["flipped_to_signal"] > 0
    assert main(["rescore", str(RUN), "--experiment", str(EXPERIMENT)]) == 0
    nbtools.rewards.unregister("closeness")  # the CLI ran in this process: later tests see the built-ins only
    out = capfd.readouterr().out
    assert out.startswith("mix: format 0.2, exact_alnum 0.8\nre-scored 384 samples") and "0 rewards changed" in out


@pytest.mark.parametrize(("argv", "said"), [
    ([], "rescore needs the experiment that made the run"),
    (["--experiment", str(EXPERIMENT), "--reward", "closeness"], "expected NAME=WEIGHT"),
    (["--experiment", str(EXPERIMENT), "--reward", "nosuch=1"], "unknown reward 'nosuch'"),
    (["--experiment", str(EXPERIMENT), "--reward-module", "nothing.py"], "--reward-module nothing.py: expected a .py"),
    (["--experiment", str(EXPERIMENT), "--step", "99"], "step 99 has no records"),
])
def test_rescore_refuses_with_the_fix(RUN, argv, said, capfd):
    assert main(["rescore", str(RUN), *argv]) == 1
    err = capfd.readouterr().err
    assert said in err and err.count("fix:") == 1, err
