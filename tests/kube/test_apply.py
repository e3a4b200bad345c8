"""nbtools.kube.apply is server-side apply, and the Kubernetes API double (tests/doubles/kube_double.py) keeps field
ownership the way the API server does (https://kubernetes.io/docs/reference/using-api/server-side-apply/), so it can
refuse what a real cluster would refuse: an apply without a field manager, a change to a field someone else owns.

Through the real ``kubernetes`` client and a real kubeconfig; the RayCluster is checked against KubeRay v1.7.0's CRD.
"""

from __future__ import annotations

from pathlib import Path

import kuberay_api
import pytest
from kube_double import APPLY
from kubernetes.client.exceptions import ApiException

import nbtools
from nbtools import kube, manifests
from nbtools.errors import ConfigError, ConflictError

ROOT = Path(__file__).resolve().parents[2]
NS, NAME = "default", "nbtools-b200"
kuberay_double, kd = kuberay_api.kuberay_double, kuberay_api.kd  # the shared API double's fixtures
RC = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"


@pytest.fixture
def api(kd, tmp_path):
    return kube.connect(kubeconfig=str(tmp_path / "kubeconfig"))


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("HF_TOKEN", "hf_TESTVALUEnotarealtoken000000")
    return nbtools.config.load(ROOT / "experiments/gke-b200-gemma3-1b.yaml", backend="gke").replace(
        **{"cluster.worker_replicas": 2})


def _rc(cfg) -> dict:
    return manifests.raycluster(cfg)


def _owners(obj: dict) -> dict[tuple[str, str], dict]:
    return {(e["manager"], e["operation"]): e["fieldsV1"] for e in obj["metadata"].get("managedFields") or []}


def test_apply_is_one_server_side_apply_patch_per_object_after_a_dry_run(kd, api, cfg):
    objs = manifests.workload_objects(cfg)
    out = kube.apply(api, objs)
    assert list(out["action"]) == ["created"] * len(objs)
    writes = [(m, q) for m, q in kd.requests if m in ("POST", "PUT", "PATCH", "DELETE")]
    assert [m for m, _ in writes] == ["PATCH"] * (2 * len(objs)), "no GET-then-POST: one apply PATCH creates"
    assert all("fieldManager=nbtools" in q for _, q in writes)
    assert all("dryRun=All" in q for _, q in writes[: len(objs)]) and not any("dryRun" in q for _, q in writes[len(objs):])
    assert not any(m == "GET" and f"{RC}/{NAME}" in q for m, q in kd.requests), "the live object is never fetched"
    rc = kd.objects(RC)[NAME]
    owned = _owners(rc)[("nbtools", "Apply")]
    assert "f:workerGroupSpecs" in owned["f:spec"], "nbtools owns what it applied (a list is one atomic field)"
    assert rc["metadata"]["generation"] == 1


def test_a_field_the_config_no_longer_sets_is_removed(kd, api, cfg):
    """Apply's semantics: what nbtools applied before and leaves out now goes (a merge patch would keep it)."""
    rc = _rc(cfg)
    rc["metadata"].setdefault("annotations", {})["nbtools.io/note"] = "first"
    kube.apply(api, [rc])
    del rc["metadata"]["annotations"]["nbtools.io/note"]
    out = kube.apply(api, [rc])
    assert list(out["action"]) == ["patched"]
    assert "nbtools.io/note" not in (kd.objects(RC)[NAME]["metadata"].get("annotations") or {})


def test_a_field_someone_else_changed_is_a_conflict_until_forced(kd, api, cfg):
    kube.apply(api, [_rc(cfg)])
    res = kube._api._resource(api, _rc(cfg))  # `kubectl scale`/`kubectl edit`: an update by another field manager
    scaled = _rc(cfg)["spec"]["workerGroupSpecs"]
    scaled[0]["replicas"] = 5
    res.patch(body={"spec": {"workerGroupSpecs": scaled}}, name=NAME, namespace=NS,
              content_type="application/merge-patch+json", field_manager="kubectl-edit")
    assert ("kubectl-edit", "Update") in _owners(kd.objects(RC)[NAME])
    with pytest.raises(ConflictError, match=r'(?s)server-side dry run of RayCluster default/nbtools-b200 was rejected '
                                            r'\(409\): Apply failed with 1 conflict: conflict with "kubectl-edit": '
                                            r'\.spec\.workerGroupSpecs.*fix: another field manager changed'):
        kube.apply(api, [_rc(cfg)])
    assert kd.objects(RC)[NAME]["spec"]["workerGroupSpecs"][0]["replicas"] == 5, "nothing written"
    out = kube.apply(api, [_rc(cfg)], force=True)
    assert list(out["action"]) == ["patched"]
    live = kd.objects(RC)[NAME]
    assert live["spec"]["workerGroupSpecs"][0]["replicas"] == 2 and live["metadata"]["generation"] == 3
    assert ("kubectl-edit", "Update") not in _owners(live), "forcing took the field over"


def test_applying_the_same_objects_again_writes_nothing(kd, api, cfg):
    objs = manifests.workload_objects(cfg)
    kube.apply(api, objs)
    versions = {n: o["metadata"]["resourceVersion"] for n, o in kd.objects(RC).items()}
    assert list(kube.apply(api, objs)["action"]) == ["unchanged"] * len(objs)
    assert {n: o["metadata"]["resourceVersion"] for n, o in kd.objects(RC).items()} == versions


def test_a_kind_the_cluster_does_not_serve_names_its_crd(kd, api, cfg):
    with pytest.raises(ConfigError, match=r"(?s)no kind RayJob in ray.io/v1.*install the CRDs"):
        kube.apply(api, [{"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "x", "namespace": NS}}])


def test_the_double_refuses_what_the_api_server_refuses(kd, api, cfg):
    """An apply without a field manager, and ``force`` on a patch that is not an apply (apimachinery
    ``ValidatePatchOptions``): the double must be able to say no to a client that gets SSA wrong."""
    res = kube._api._resource(api, _rc(cfg))
    with pytest.raises(ApiException) as e:
        res.patch(body=_rc(cfg), name=NAME, namespace=NS, content_type=APPLY)
    assert e.value.status == 422 and "fieldManager: Required value" in e.value.body
    with pytest.raises(ApiException) as e:
        res.patch(body={"metadata": {"labels": {"a": "b"}}}, name=NAME, namespace=NS,
                  content_type="application/merge-patch+json", field_manager="x", force_conflicts=True)
    assert e.value.status == 422 and "force: Forbidden" in e.value.body
    wrong = _rc(cfg)
    with pytest.raises(ApiException) as e:
        res.server_side_apply(body=wrong, name="another-name", namespace=NS, field_manager="nbtools")
    assert e.value.status == 400 and "does not match the name on the URL" in e.value.body
    assert not kd.objects(RC)


def test_a_watch_replays_changes_after_its_resource_version_and_ends_at_its_timeout(kd, api, cfg):
    from kubernetes import watch

    kube.apply(api, [_rc(cfg)])
    res = kube._api._resource(api, _rc(cfg))
    first = [e["type"] for e in res.watch(namespace=NS, name=NAME, timeout=1, watcher=watch.Watch())]
    assert first == ["ADDED"], "a watch without resourceVersion starts with the current object"
    rv = kd.objects(RC)[NAME]["metadata"]["resourceVersion"]
    kd.remove(RC, NAME)
    later = [(e["type"], e["raw_object"]["metadata"]["name"])
             for e in res.watch(namespace=NS, name=NAME, resource_version=rv, timeout=1, watcher=watch.Watch())]
    assert later == [("DELETED", NAME)]
