"""What nbtools.kube.wait_ready reads from a RayCluster's status (KubeRay v1.7.0's fields: the ``HeadPodReady``
condition, ``readyWorkerReplicas``, ``observedGeneration``; ``state: ready`` from KubeRay releases before the
conditions). The wait itself runs against the API double in tests/backends/test_gke.py and tests/integration."""

from __future__ import annotations

from nbtools.kube._wait import _reported_ready


def _rc(generation=1, observed=1, head=True, workers=2, state=None) -> dict:
    status = {"observedGeneration": observed, "readyWorkerReplicas": workers,
              "conditions": [{"type": "HeadPodReady", "status": "True" if head else "False"}]}
    if state:
        status = {"state": state, "readyWorkerReplicas": workers}
    return {"metadata": {"generation": generation}, "status": status}


def test_head_condition_and_ready_workers_count():
    assert _reported_ready(_rc(), 2) == 3
    assert _reported_ready(_rc(head=False), 2) == 2
    assert _reported_ready(_rc(workers=5), 2) == 3, "extra workers do not stand in for a missing head"


def test_a_status_of_an_older_spec_counts_nothing():
    """After a re-apply (replicas 2 -> 3) the status still speaks of generation 1 until KubeRay reconciles."""
    assert _reported_ready(_rc(generation=2, observed=1), 3) == 0


def test_a_kuberay_without_conditions_is_read_by_its_state():
    assert _reported_ready(_rc(state="ready", workers=1), 1) == 2
    assert _reported_ready({"metadata": {}}, 1) == 0
