"""States are string enums: one type per verb, and the JSON output keeps the words it always had."""

from __future__ import annotations

import json

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
