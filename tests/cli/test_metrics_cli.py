"""``nbtools metrics RUN`` reads as a person asks (issue 45): the latest value of every tag with a readable wall time,
headed by reward / accuracy / generation length / KL / step time; ``--tag`` one series, ``--all`` every point,
``--json`` the data. Before: a truncated dump of every point sorted by tag, wall time as ``1.795811e+09``,
``train/reward`` never on screen."""

from __future__ import annotations

import json
import re

import pytest

from nbtools.cli import main
from nbtools.cli._metrics import number


@pytest.fixture(scope="module")
def logs(rehearsal_run, tmp_path_factory):
    return rehearsal_run.copy(tmp_path_factory.mktemp("metrics")) / "logs"


def test_default_is_the_latest_value_of_every_tag(logs, capfd):
    assert main(["metrics", str(logs)]) == 0
    out = capfd.readouterr().out
    head, now = out.splitlines()[:2]
    assert re.fullmatch(r".*: [\d,]+ points of \d+ tags, steps 0\.\.2, last written \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", head)
    assert now.startswith("now: reward ") and "(step 2)" in now
    rows = [ln for ln in out.splitlines() if ln.startswith("train/reward ")]
    assert len(rows) == 1 and re.fullmatch(r"train/reward +2 +\S+ +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", rows[0]), rows
    assert "e+09" not in out and "..." not in out  # no raw epoch seconds, no truncated table


def test_tag_all_and_json(logs, capfd):
    assert main(["metrics", str(logs), "--tag", "reward"]) == 0
    series = capfd.readouterr().out.splitlines()
    assert series[0].split()[:3] == ["tag", "step", "value"] and [ln.split()[1] for ln in series[1:]] == ["1", "2"]
    assert main(["metrics", str(logs), "--json"]) == 0
    doc = json.loads(capfd.readouterr().out)
    assert len(doc["latest"]) == len({r["tag"] for r in doc["rows"]}) < len(doc["rows"])
    assert main(["metrics", str(logs), "--all"]) == 0
    assert len(capfd.readouterr().out.splitlines()) == len(doc["rows"]) + 1
    assert main(["metrics", str(logs), "--tag", "rewrd"]) == 1
    err = capfd.readouterr().err
    assert "close: train/reward" in err and err.count("fix:") == 1


def test_numbers_for_people():
    assert [number(v) for v in (0.8888888888888888, 1234.5678, 16, 1.795811e9, 1e-7, float("nan"))] == \
        ["0.8889", "1,235", "16", "1,795,811,000", "1.000e-07", "—"]


def test_a_verl_console_log_has_no_wall_time_and_still_reads(tmp_path, capfd):
    log = tmp_path / "verl.log"
    log.write_text("noise\nstep:1 - critic/score/mean:0.25 - response_length/mean:512.5\nstep:2 - critic/score/mean:0.5\n")
    assert main(["metrics", str(log)]) == 0
    out = capfd.readouterr().out
    assert "now: reward 0.5 (step 2) · generation_length 512.5 (step 1)" in out and "last written" not in out
    assert re.search(r"critic/score/mean +2 +0\.5 +—", out), out


def test_an_infinite_latest_value_is_shown_not_an_overflow():
    from nbtools.cli._metrics import number

    assert (number(float("inf")), number(float("-inf")), number(float("nan"))) == ("inf", "-inf", "—")
