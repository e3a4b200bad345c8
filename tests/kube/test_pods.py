"""What nbtools.kube.pod_states reads from the pods' status (a node-pressure eviction, a head container restart) through
the real ``kubernetes`` client against tests/doubles/kube_double.py (an API TEST DOUBLE: no kube-apiserver runs here),
the pods changed as tests/doubles/sim_kuberay.py's KubeRay stand-in changes them, and the stall verdict
(``launch._stall.judge_pods``) those states give."""

from __future__ import annotations

import time

import pytest
from kube_double import KubeDouble
from sim_kuberay import KubeRayController

from nbtools import kube
from nbtools.launch._stall import Progress, judge

NS, RC = "default", "nbtools-b200"
LABELS = {"ray.io/cluster": RC}


@pytest.fixture(scope="module")
def double():
    with KubeDouble() as kd:
        yield kd


@pytest.fixture
def api(double, tmp_path):
    from kubernetes import config

    kd = double
    kd.store.clear()  # the pods KubeRay made for one RayCluster (a head, two workers) beside another cluster's
    kd.add_pod(NS, f"{RC}-head-x", {**LABELS, "ray.io/node-type": "head"}, phase="Running", ready=True)
    for i in range(2):
        kd.add_pod(NS, f"{RC}-worker-{i}", {**LABELS, "ray.io/node-type": "worker"}, phase="Running", ready=True)
    kd.add_pod(NS, "other-pod", {"ray.io/cluster": "other"}, phase="Running", ready=True)
    kr = KubeRayController.__new__(KubeRayController)  # its pod verbs only (no reconcile loop)
    kr.kube, kr._hold = kd, {}
    return config.new_client_from_config(str(kd.kubeconfig(tmp_path / "kubeconfig"))), kr


def _verdict(started: float):
    return judge(experiment="e", submission_id="e-1", job_status="RUNNING", prog=Progress(None, {}), started_at=started,
                 k=5, floor_s=600, startup_s=1800, samples=[], log_stacks=[], dead_actors=[], now=started + 20)


def test_an_evicted_worker_is_named_with_host_oom_and_its_fix(api):
    client, kr = api
    started = time.time() - 5
    kr.evict(NS, f"{RC}-worker-1")
    pods = kube.pod_states(client, NS, f"ray.io/cluster={RC}")
    assert [p.name for p in pods] == [f"{RC}-head-x", f"{RC}-worker-0", f"{RC}-worker-1"]  # the selector's only
    gone = pods[2]
    assert (gone.phase, gone.reason, gone.node_type) == ("Failed", "Evicted", "worker")
    assert gone.disrupted[0] == "TerminationByKubelet" and "low on resource: memory" in gone.disrupted[1]
    assert "DisruptionTarget=True (TerminationByKubelet)" in gone.line() and pods[0].disrupted is None
    events = kube.cluster_events(client, NS, RC)
    v = _verdict(started)
    assert v.status == "running"  # quiet 20 s of a 1800 s startup allowance: the stacks alone say nothing
    from nbtools.launch._stall import judge_pods

    judge_pods(v, pods, events, started_at=started)
    assert (v.status, v.cause) == ("stalled", "host-oom"), v.to_dict()
    assert v.evidence.startswith(f"worker {RC}-worker-1 was evicted") and "host memory" in v.fix


def test_a_restarted_head_is_lost_node_and_an_old_restart_or_a_finished_job_is_only_a_note(api):
    from nbtools.launch._stall import judge_pods

    client, kr = api
    started = time.time() - 5
    kr.restart_head(NS, RC)
    head = kube.pod_states(client, NS, f"ray.io/cluster={RC}")[0]
    assert (head.restarts, head.last_exit) == (1, "OOMKilled, exit 137") and head.restarted_at >= started - 1
    v = judge_pods(_verdict(started), [head], [], started_at=started)
    assert (v.status, v.cause) == ("stalled", "lost-node")
    assert f"head {RC}-head-x restarted (1 restart(s), last: OOMKilled, exit 137)" in v.evidence
    assert "delete the RayJob" in v.fix
    later = judge_pods(_verdict(time.time() + 60), [head], [], started_at=time.time() + 60)  # restarted before the job
    assert (later.status, later.cause) == ("running", "running")
    ended = _verdict(started)
    ended.status = "ended"
    assert judge_pods(ended, [head], [], started_at=started).notes[-1].startswith(f"pod: head {RC}-head-x restarted")


def test_an_evicted_worker_kuberay_already_replaced_is_named_from_its_event(api):
    from nbtools.launch._stall import judge_pods

    client, kr = api
    started = time.time() - 5
    kr.evict(NS, f"{RC}-worker-0")
    kr.kube.remove(f"/api/v1/namespaces/{NS}/pods", f"{RC}-worker-0")  # KubeRay deletes it (and creates another)
    pods, events = kube.pod_states(client, NS, f"ray.io/cluster={RC}"), kube.cluster_events(client, NS, RC)
    assert f"{RC}-worker-0" not in {p.name for p in pods}
    v = judge_pods(_verdict(started), pods, events, started_at=started)
    assert (v.status, v.cause) == ("stalled", "host-oom") and v.evidence.startswith(f"worker {RC}-worker-0 was evicted")
