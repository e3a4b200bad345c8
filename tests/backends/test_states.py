"""States are string enums: one type per verb, and the JSON output keeps the words it always had."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbtools.backends import ClusterState, ClusterStatus
from nbtools.cli._out import _jsonable


def test_cluster_status_holds_a_cluster_state_and_json_keeps_the_word():
    s = ClusterStatus("gke", "starting", "http://127.0.0.1:8265", "1/2 pods ready")
    assert s.state is ClusterState.STARTING and not s.running
    assert s.state == "starting" and f"{s.state}" == "starting"  # callers that compared strings still work
    assert json.loads(json.dumps(s.to_dict()))["state"] == "starting"
    assert _jsonable(s)["state"] == "starting"  # the CLI's --json
    assert ClusterStatus("ray", ClusterState.RUNNING, "u").running


def test_an_unknown_state_is_refused():
    with pytest.raises(ValueError, match="'sleeping' is not a valid ClusterState"):
        ClusterStatus("local", "sleeping", "u")


def test_fit_verdicts_are_a_string_enum_and_the_json_keeps_the_words():
    from pathlib import Path

    from nbtools import fit

    model = Path(__file__).resolve().parents[2] / "nbtools/data/model_configs/google--gemma-3-1b-it.json"
    assert [v.value for v in fit.Verdict] == ["not-applicable", "fits", "tight", "does-not-fit"]
    assert fit.Verdict.worst(["fits", fit.Verdict.TIGHT]) is fit.Verdict.TIGHT
    assert fit.Verdict.worst([]) is fit.Verdict.NOT_APPLICABLE and fit.Verdict.TIGHT.ok
    ok = fit.estimate(model, gpu="h200", micro_batch=2, seq_len=2048)
    big = fit.estimate(model, gpu="h100", micro_batch=64, seq_len=16384)
    for r, word in ((ok, "fits"), (big, "does-not-fit")):
        assert isinstance(r.verdict, fit.Verdict) and r.verdict == word and f"{r.verdict}" == word
        assert isinstance(r.generation.verdict, fit.Verdict)
        doc = json.loads(json.dumps(r.to_dict()))
        assert doc["verdict"] == word and _jsonable(r.to_dict())["verdict"] == word  # the CLI's --json
    assert ok.fits and not big.fits and "DOES-NOT-FIT" in big.summary()


def test_wipe_returns_a_teardown_whether_or_not_it_was_confirmed(tmp_path):
    """Notebook 09's wipe cell gives one type: an empty confirm wipes nothing and says how to mean it; a wrong one is
    refused; the right one removes the experiment's results."""
    from nbtools import backends, config
    from nbtools.backends import Teardown
    from nbtools.errors import ConflictError

    root = Path(__file__).resolve().parents[2]
    cfg = config.load(root / "experiments" / "local.yaml", overrides={"local.runs_dir": str(tmp_path / "runs")})
    be = backends.get(cfg)
    Path(be.log_dir).mkdir(parents=True)
    none = be.wipe(confirm="")
    assert isinstance(none, Teardown) and not none.stopped and f"confirm={cfg.name!r}" in none.message
    assert Path(be.log_dir).is_dir() and json.loads(json.dumps(none.to_dict()))["stopped"] is False
    with pytest.raises(ConflictError, match="does not match"):
        be.wipe(confirm="someone-else")
    done = be.wipe(confirm=cfg.name)
    assert isinstance(done, Teardown) and done.stopped and not Path(be.log_dir).exists()
