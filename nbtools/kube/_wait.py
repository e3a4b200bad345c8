"""Wait for a RayCluster's pods by watching the RayCluster (KubeRay's status says when they are ready), and say
which pod is stuck and why when they are not.

Why its own module: the wait reads KubeRay's status and the pods' conditions; applying and finding objects
(``_api``) does not need to know either.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pandas as pd

from nbtools._escape import html as _h
from nbtools.errors import NotReadyError
from nbtools.kube._api import _resource, list_pods, pod_events

__all__ = ["ReadyReport", "is_ready", "wait_ready"]


def is_ready(pod) -> bool:
    if (pod.status.phase or "") != "Running":
        return False
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _why(pod) -> str:
    st = pod.status
    for c in st.conditions or []:
        if c.type == "PodScheduled" and c.status == "False":
            return f"{c.reason or 'Unschedulable'}: {c.message or ''}".strip()
    for cs in (st.init_container_statuses or []) + (st.container_statuses or []):
        w = cs.state.waiting if cs.state else None
        if w and w.reason:
            return f"container {cs.name} {w.reason}: {w.message or ''}".strip()
    return f"phase {st.phase or 'Unknown'}"


def _fix_for(reason: str, hints: dict[str, str]) -> str:
    r = reason.lower()
    if "insufficient nvidia.com/gpu" in r or "quota" in r or "unschedulable" in r or "didn't match" in r:
        return hints.get("capacity", "no node can take the pod: check quota and node pools")
    if "imagepull" in r or "errimage" in r:
        return hints.get("image", "the image cannot be pulled: check its name and registry access")
    return "read the events above; `kubectl describe pod` shows the same"


@dataclass
class ReadyReport:
    """Pods of a RayCluster that reached Running/Ready."""

    cluster: str
    pods: pd.DataFrame = field(default_factory=pd.DataFrame)

    def _repr_html_(self) -> str:
        return f"<b>RayCluster {_h(self.cluster)}</b>: {len(self.pods)} pods ready" + self.pods.to_html(index=False)


def _condition(rc: dict, type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True" for c in (rc.get("status") or {}).get("conditions") or [])


def _reported_ready(rc: dict, workers: int) -> int:
    """How many of the RayCluster's pods KubeRay reports ready: the head by its ``HeadPodReady`` condition, the workers
    by ``readyWorkerReplicas``; nothing while the status is of an older generation of the spec (a re-apply)."""
    st = rc.get("status") or {}
    gen, seen = rc.get("metadata", {}).get("generation"), st.get("observedGeneration")
    if gen is not None and seen is not None and int(seen) < int(gen):
        return 0
    head = _condition(rc, "HeadPodReady") or st.get("state") == "ready"  # KubeRay before its status conditions
    return int(head) + min(int(st.get("readyWorkerReplicas") or 0), workers)


def _ready_pods(api, ns: str, name: str, want: int) -> tuple[ReadyReport | None, list, list]:
    """(the report when ``want`` pods, the head among them, are Running and Ready, else None; all pods; ready ones)."""
    pods = list_pods(api, ns, f"ray.io/cluster={name}")
    ready = [p for p in pods if is_ready(p)]
    if len(ready) < want or not any((p.metadata.labels or {}).get("ray.io/node-type") == "head" for p in ready):
        return None, pods, ready
    rows = [{"pod": p.metadata.name, "type": p.metadata.labels.get("ray.io/node-type"), "node": p.spec.node_name,
             "ip": p.status.pod_ip} for p in ready]
    return ReadyReport(name, pd.DataFrame(rows)), pods, ready


def wait_ready(api, namespace: str, name: str, *, pods: int, timeout: float = 900, progress: bool = True,
               hints: dict[str, str] | None = None) -> ReadyReport:
    """Wait until the head and every worker pod of RayCluster ``name`` is Running and Ready (``pods`` in all).

    Watches the RayCluster (no polling): KubeRay's status says when its head is ready (condition ``HeadPodReady``,
    as ``kubectl wait --for=condition=HeadPodReady`` reads it) and how many workers are (``readyWorkerReplicas``);
    when it says all are, one list of the pods confirms it and names them. ``hints`` holds the fix texts for a stuck
    pod ("capacity", "image"), which know the experiment. Shows a tqdm bar of ready pods.

    Raises:
        NotReadyError: on timeout, naming the stuck pod, its reason (Unschedulable, quota, image pull) and events.

    Example:
        >>> nbtools.kube.wait_ready(api, "default", "nbtools-b200", pods=3, timeout=1200)
    """
    import math

    from kubernetes import watch

    from nbtools._progress import tqdm

    ns, want = namespace, pods
    res = _resource(api, {"apiVersion": "ray.io/v1", "kind": "RayCluster"})
    deadline = time.monotonic() + timeout
    bar = tqdm(total=want, desc=f"RayCluster {name} pods ready", unit="pod", disable=not progress)
    try:
        while (left := deadline - time.monotonic()) > 0:
            w = watch.Watch()  # the server ends the stream at timeoutSeconds; a dropped stream is watched again
            for event in res.watch(namespace=ns, name=name, timeout=max(1, math.ceil(left)), watcher=w):
                if event["type"] == "DELETED":
                    continue
                bar.n = min(_reported_ready(event["raw_object"], want - 1), want)
                bar.refresh()
                if bar.n >= want and (report := _ready_pods(api, ns, name, want))[0]:  # the status can trail the pods
                    w.stop()
                    return report[0]
                if time.monotonic() >= deadline:
                    break
    finally:
        bar.close()
    report, pods, ready = _ready_pods(api, ns, name, want)
    if report:  # ready after the status's last word
        return report
    stuck = [p for p in pods if not is_ready(p)]
    if not stuck:
        raise NotReadyError(
            f"RayCluster {ns}/{name}: {len(ready)}/{want} pods ready after {timeout:.0f}s; no other pods exist",
            reason="KubeRay did not create the pods",
            events=pod_events(api, ns, name),
            fix="check that the KubeRay operator runs (GKE Ray add-on or `kuberay-operator` step of the plan) "
            "and that the RayCluster was applied",
        )
    pod = stuck[0]
    reason = _why(pod)
    raise NotReadyError(
        f"RayCluster {ns}/{name}: {len(ready)}/{want} pods ready after {timeout:.0f}s; "
        f"stuck: {', '.join(p.metadata.name for p in stuck)}; first stuck pod {pod.metadata.name}",
        reason=reason,
        events=pod_events(api, ns, pod.metadata.name),
        fix=_fix_for(reason + " " + " ".join(pod_events(api, ns, pod.metadata.name)), hints or {}),
    )
