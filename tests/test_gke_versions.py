"""Issue 27 item 11: the GKE version a GPU type needs (Google's NeMo RL on GKE tutorial, tutorial 001: B200 >=
1.32.2-gke.1422000, H200 >= 1.31.4-gke.1183000) is checked when the experiment names one and shown when it does not."""

from __future__ import annotations

from pathlib import Path

import pytest

import nbtools
from nbtools.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("exp", "too_old", "ok", "floor"), [
    ("gke-b200-gemma3-1b.yaml", "1.31.4-gke.1183000", "1.32.2-gke.1422000", "1.32.2-gke.1422000"),
    ("gke-h200-qwen.yaml", "1.31.3-gke.1", "1.31.4-gke.1183000", "1.31.4-gke.1183000"),
])
def test_a_named_version_older_than_the_gpu_needs_is_refused(exp, too_old, ok, floor):
    with pytest.raises(ConfigError, match=rf"cluster.gke_version: '{too_old}' is older[\s\S]*>= {floor}[\s\S]*fix"):
        nbtools.config.load(ROOT / "experiments" / exp, overrides={"cluster.gke_version": too_old})
    for good in (ok, "1.33", "latest"):
        assert nbtools.config.load(ROOT / "experiments" / exp, overrides={"cluster.gke_version": good})
    with pytest.raises(ConfigError, match="cluster.gke_version"):
        nbtools.config.load(ROOT / "experiments" / exp, overrides={"cluster.gke_version": "1.30"})


def test_the_plan_shows_the_floor_when_no_version_is_named():
    cfg = nbtools.config.load(ROOT / "experiments" / "gke-b200-gemma3-1b.yaml")
    step = next(s for s in nbtools.gke.plan(cfg).steps if s.name == "cluster")
    assert "release channel's default GKE version; nvidia-b200 needs >= 1.32.2-gke.1422000" in step.what
    assert not any(a.startswith("--cluster-version") for a in step.command)
    named = cfg.replace(**{"cluster.gke_version": "1.33.1-gke.100"})
    step = next(s for s in nbtools.gke.plan(named).steps if s.name == "cluster")
    assert "--cluster-version=1.33.1-gke.100" in step.command and "GKE 1.33.1-gke.100" in step.what
