"""A damaged or hand-edited attempts record (#31): named with its fix, never read as empty, never overwritten, and
``supervise`` stays bounded by ``max_attempts`` whatever the record says. No Ray head: every case is refused before
anything is submitted, and the bound is driven through the loop's own collaborators."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import nbtools
from nbtools.errors import CheckpointError, ConfigError
from nbtools.launch import _attempts, _supervise
from nbtools.launch._attempts import Attempt, record_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path))
    return nbtools.config.load(ROOT / "experiments" / "local.yaml")


def _row(n, sid="x", **kw):
    return {"n": n, "submission_id": sid, "status": "FAILED", "cause": "preempted", "retry": True, **kw}


def _records(sid: str) -> dict[str, tuple[str, str]]:
    """name -> (file text, what the error says)."""
    run = lambda rows: json.dumps({"experiment": "e", "runs": {sid: rows}})  # noqa: E731
    return {
        "n-nan": (run([_row(float("nan"), sid)]), r"n=nan of the wrong type"),
        "n-negative": (run([_row(-10, sid)]), r"numbers attempt 1 of run .* as n=-10"),
        "n-string": (run([_row("1", sid)]), r"n='1' of the wrong type"),
        "n-bool": (run([_row(True, sid)]), r"n=True of the wrong type"),
        "n-missing": (run([{"submission_id": sid}]), r"with no n"),
        "n-skips": (run([_row(1, sid), _row(3, sid)]), r"numbers attempt 2 of run .* as n=3"),
        "row-dict": (json.dumps({"runs": {sid: {"n": 1}}}), r"holds a dict for run .*, not a list of attempts"),
        "row-string": (run(["attempt 1"]), r"holds a str as attempt 1 of run"),
        "field-type": (run([_row(1, sid, status=3)]), r"status=3 of the wrong type"),
        "top-list": (json.dumps([_row(1, sid)]), r"holds list"),
        "runs-list": (json.dumps({"experiment": "e", "runs": []}), r"holds 'runs' as list"),
        "deep": ("[" * 100_000 + "]" * 100_000, r"nests too deeply"),
        "not-json": ("{\"runs\": {", r"is not valid JSON"),
    }


CASES = list(_records("x"))


@pytest.mark.parametrize("case", CASES)
def test_a_damaged_record_is_named_with_its_fix_and_left_as_it_is(cfg, case):
    text, what = _records(cfg.submission_id)[case]
    url = Path(record_url(cfg))
    url.parent.mkdir(parents=True, exist_ok=True)
    url.write_text(text)
    fix = r"fix: restore .*nbtools-attempts\.json from a copy, or delete it .*nothing was submitted"
    for call in (lambda: nbtools.launch.supervise(cfg, max_attempts=3), lambda: nbtools.launch.attempts(cfg),
                 lambda: _attempts.update(cfg, Attempt(1, cfg.submission_id))):
        with pytest.raises(CheckpointError, match=rf"(?s)the attempts record {url} .*{what}.*{fix}"):
            call()
    assert url.read_text() == text  # never overwritten


def test_the_cli_says_which_file_and_how_to_fix_it(cfg, capfd):
    from nbtools import cli

    url = Path(record_url(cfg))
    url.parent.mkdir(parents=True, exist_ok=True)
    url.write_text(json.dumps({"experiment": "e", "runs": {cfg.submission_id: [_row(float("nan"))]}}))
    code = cli.main(["launch", str(ROOT / "experiments" / "local.yaml"), "--supervise", "--json"])
    out, err = capfd.readouterr()
    doc = json.loads(out)
    assert code == 1 and "Traceback" not in err and "a bug" not in out + err
    assert str(url) in doc["error"] and "restore" in doc["fix"]


@pytest.mark.parametrize("bad", [0, -1, 2.5, float("nan"), True, "3"])
def test_max_attempts_must_be_a_whole_number(cfg, bad):
    with pytest.raises(ConfigError, match=r"(?s)max_attempts: expected a whole number, 1 or more.*fix: e\.g\. max_attempts=3"):
        nbtools.launch.supervise(cfg, max_attempts=bad)


def test_supervise_counts_the_attempts_it_makes_itself(cfg, monkeypatch):
    """A record another process keeps resetting to attempt 1 (valid, but never growing) cannot keep it looping."""
    from nbtools import jobs

    made = []
    first = Attempt(1, cfg.submission_id, status="FAILED", cause="preempted", retry=True)

    class Job:
        id = cfg.submission_id

        def status(self):
            return jobs.JobStatus.FAILED if hasattr(jobs, "JobStatus") else "FAILED"

    monkeypatch.setattr(_supervise, "read_attempts", lambda c: [first])
    monkeypatch.setattr(_supervise, "finalize", lambda c, a, j=None: first)
    monkeypatch.setattr(_supervise, "update", lambda c, a: None)
    monkeypatch.setattr(_supervise, "resubmit", lambda c: made.append(1) or Job())
    monkeypatch.setattr(jobs, "attach", lambda *a, **k: Job())
    monkeypatch.setattr(jobs, "follow_with_progress", lambda *a, **k: None)
    run = nbtools.launch.supervise(cfg, max_attempts=3)
    assert len(made) == 2 and "gave up after 3 attempt(s) (max_attempts=3)" in run.note
