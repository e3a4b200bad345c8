"""Issue 27 item 11: the GKE version a GPU type needs (Google's NeMo RL on GKE tutorial, tutorial 001: B200 >=
1.32.2-gke.1422000, H200 >= 1.31.4-gke.1183000) is checked when the experiment names one and shown when it does not."""

from __future__ import annotations

from pathlib import Path

import pytest

import nbtools
from nbtools.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


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


def test_the_nccl_installer_pin_is_the_gib_v1_1_1_installer_without_its_own_nccl():
    """Issue 27 item 4: container-engine-accelerators 2da1c92f (tests/assets copy) runs nccl-plugin-gib:v1.1.1 and
    ``container_entry.sh install`` without ``--install-nccl`` on GKE Standard; the pin is that commit."""
    import yaml

    from nbtools.config._tables import NCCL_INSTALLER_REF

    assets = ROOT / "tests" / "assets" / "container-engine-accelerators"
    assert NCCL_INSTALLER_REF in (assets / "SOURCE.md").read_text()
    ds = next(d for d in yaml.safe_load_all((assets / "gpudirect-rdma" / "nccl-rdma-installer.yaml").read_text())
              if d["kind"] == "DaemonSet")
    init = {c["name"]: c for c in ds["spec"]["template"]["spec"]["initContainers"]}
    assert init["nccl-rdma-installer"]["image"].endswith("/nccl-plugin-gib:v1.1.1")
    script = " ".join(init["nccl-rdma-installer"].get("args", []))
    assert "container_entry.sh install" in script and "--install-nccl" not in script
    cfg = nbtools.config.load(ROOT / "experiments" / "gke-b200-gemma3-1b.yaml")
    assert f"/{NCCL_INSTALLER_REF}/gpudirect-rdma/nccl-rdma-installer.yaml" in nbtools.manifests.nccl_installer_url(cfg)
