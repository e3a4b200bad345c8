"""A TEST DOUBLE of the KubeRay operator (v1.7.0) for the simulated GKE: a thread that reconciles RayClusters
stored in the Kubernetes API double (tests/doubles/kube_double.py). It is NOT KubeRay; it does what nbtools relies on:

- for each RayCluster: a head pod ``<name>-head-<5 chars>`` and ``replicas`` worker pods per worker group
  ``<name>-<group>-worker-<5 chars>``, labelled like KubeRay's (``ray.io/cluster``, ``ray.io/node-type``,
  ``ray.io/group``, ``ray.io/is-ray-node``), spec from the group's pod template, first Pending, then Running and
  Ready after ``ready_after`` seconds, with the events kubelet/scheduler/KubeRay emit; the head Service;
- KubeRay's status: ``state``, ``readyWorkerReplicas``/``availableWorkerReplicas``/``desiredWorkerReplicas``,
  ``head.podName``/``podIP``/``serviceName``, ``endpoints``, and the conditions ``HeadPodReady``
  (``HeadPodRunningAndReady``) and ``RayClusterProvisioned`` (``AllPodRunningAndReadyFirstTime``, kept True once set);
- the head pod's ports (8265, ...) routed to real local endpoints (the local Ray head's dashboard) for the double's
  port-forward;
- scaling to ``replicas``, replacing pods that failed, and deleting the pods and Service with the RayCluster.

``local_exec`` plays the kubelet's exec for the API double: the command runs on this machine with the pods' paths
mapped. :meth:`KubeRayController.preempt` plays a spot VM reclaim: the pod fails with Kubernetes' graceful-node-shutdown
status and events, and is replaced after ``replace_after`` seconds (for tests of preemption handling).
"""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import random
import shutil
import string
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kube_double import KubeDouble

__all__ = ["KubeRayController", "local_exec"]

_NODE_SHUTDOWN = "Pod was terminated in response to imminent node shutdown."
_LOW_MEMORY = ("The node was low on resource: memory. Threshold quantity: 100Mi, available: 51200Ki. Container c was "
               "using 1843200Ki, request is 0, has larger consumption of memory.")


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeRayController:
    """Start with ``with KubeRayController(kube, routes={8265: ("127.0.0.1", port)}):``; stopped and joined on exit."""

    def __init__(self, kube: KubeDouble, *, routes: dict[int, tuple[str, int]] | None = None, ready_after: float = 0.2,
                 seed: int = 0):
        self.kube = kube
        self.routes = dict(routes or {})  # head pod port -> real (host, port)
        self.ready_after = ready_after
        self._born: dict[str, float] = {}  # pod -> when it was created (Pending until ready_after)
        self._hold: dict[tuple[str, str], float] = {}  # (ns, raycluster) -> no replacement pods before this time
        self._rand = random.Random(seed)
        self._ips = itertools.count(2)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []  # reconcile exceptions (the thread keeps running; tests may assert it is empty)

    # -- lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> KubeRayController:
        self._thread = threading.Thread(target=self._loop, name="kuberay-controller-double", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self.kube._changed:
            self.kube._bump()  # wake the loop now
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> KubeRayController:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _loop(self) -> None:
        """Reconcile, then sleep until the store changes (a "watch") or a pod is due to become Ready. A pass that
        wrote something is followed by one more pass, which finds nothing to do."""
        while not self._stop.is_set():
            before = self.kube.generation
            try:
                wake = self.reconcile()
            except Exception as e:  # noqa: BLE001 - keep reconciling; the failure is kept for the test to see
                self.errors.append(f"{type(e).__name__}: {e}")
                wake = 1.0
            self.kube.wait_change(before, timeout=wake)

    # -- test hooks -----------------------------------------------------------------------------------------
    def report_status(self, namespace: str, name: str) -> None:
        """Write RayCluster ``name``'s status from the pods that exist now, as one reconcile would, without creating or
        deleting pods: for tests that play the pods by hand and need KubeRay's word on them."""
        coll = f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters"
        rc = self.kube.objects(coll).get(name)
        if rc is not None:
            groups = (rc.get("spec") or {}).get("workerGroupSpecs") or []
            self._update_status(namespace, coll, name, rc, sum(int(g.get("replicas") or 0) for g in groups))

    def preempt(self, namespace: str, pod: str, *, replace_after: float = 0.5) -> dict:
        """Fail ``pod`` as a reclaimed spot node does (graceful node shutdown), then replace it after a delay.

        Returns:
            the failed pod object (its node, status and labels).
        """
        coll = f"/api/v1/namespaces/{namespace}/pods"
        obj = self.kube.objects(coll).get(pod)
        if obj is None:
            raise KeyError(f"no pod {namespace}/{pod}; pods: {sorted(self.kube.objects(coll))}")
        rc = obj["metadata"]["labels"]["ray.io/cluster"]
        node = obj["spec"].get("nodeName")
        self._hold[(namespace, rc)] = time.monotonic() + replace_after
        obj["status"].update(phase="Failed", reason="Terminated", message=_NODE_SHUTDOWN, conditions=[
            {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet", "message": _NODE_SHUTDOWN,
             "lastTransitionTime": _now()},
            {"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": _now()},
        ])
        for cs in obj["status"].get("containerStatuses") or []:
            cs.update(ready=False, state={"terminated": {"exitCode": 137, "reason": "Error", "finishedAt": _now()}})
        self.kube.put(coll, obj)
        # kubelet says it only through the pod's DisruptionTarget condition above (reason TerminationByKubelet), not
        # with an event: nbtools must read the condition (k8s.io/api core/v1 PodReasonTerminationByKubelet)
        self.kube.add_event(namespace, node or pod, "PreemptionNotice",
                            f"Spot VM {node} is being reclaimed by Compute Engine", kind="Node", component="gke")
        return obj

    def evict(self, namespace: str, pod: str, *, replace_after: float = 0.5) -> dict:
        """Evict ``pod`` as the kubelet does under node memory pressure, then replace it after a delay.

        Kubernetes (k8s.io/kubernetes pkg/kubelet/eviction, v1.26+): phase Failed, ``status.reason`` ``Evicted``,
        the message "The node was low on resource: memory. ...", a ``DisruptionTarget`` condition with reason
        ``TerminationByKubelet`` and an ``Evicted`` Warning event on the pod from the kubelet.
        """
        coll = f"/api/v1/namespaces/{namespace}/pods"
        obj = self.kube.objects(coll).get(pod)
        if obj is None:
            raise KeyError(f"no pod {namespace}/{pod}; pods: {sorted(self.kube.objects(coll))}")
        self._hold[(namespace, obj["metadata"]["labels"]["ray.io/cluster"])] = time.monotonic() + replace_after
        obj["status"].update(phase="Failed", reason="Evicted", message=_LOW_MEMORY, conditions=[
            {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet", "message": _LOW_MEMORY,
             "lastTransitionTime": _now()},
            {"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": _now()},
        ])
        for cs in obj["status"].get("containerStatuses") or []:
            cs.update(ready=False, state={"terminated": {"exitCode": 137, "reason": "Error", "finishedAt": _now()}})
        self.kube.put(coll, obj)
        self.kube.add_event(namespace, pod, "Evicted", _LOW_MEMORY, component="kubelet")
        return obj

    def restart_head(self, namespace: str, cluster: str, *, reason: str = "OOMKilled", exit_code: int = 137) -> dict:
        """The head pod's container restarts in place (its pod and name stay): ``restartCount`` + 1 and
        ``lastState.terminated``, as kubelet reports a container restart; Ray's GCS and job table start empty."""
        coll = f"/api/v1/namespaces/{namespace}/pods"
        head = next(p for p in self._pods(namespace, cluster).values()
                    if p["metadata"]["labels"].get("ray.io/node-type") == "head")
        for cs in head["status"].get("containerStatuses") or []:
            cs["restartCount"] = int(cs.get("restartCount") or 0) + 1
            cs["lastState"] = {"terminated": {"exitCode": exit_code, "reason": reason, "finishedAt": _now()}}
        self.kube.put(coll, head)
        self.kube.add_event(namespace, head["metadata"]["name"], "BackOff", "Back-off restarting failed container",
                            component="kubelet")
        return head

    # -- reconcile ------------------------------------------------------------------------------------------
    def reconcile(self) -> float:
        """One pass over every RayCluster; returns how soon the next pass is due (a pod becoming Ready)."""
        now = time.monotonic()
        due = [t + self.ready_after - now for t in self._born.values()] + [t - now for t in self._hold.values()]
        for coll in self.kube.collections("rayclusters"):
            ns = coll.split("/")[5]
            for name, rc in self.kube.objects(coll).items():
                self._reconcile_one(ns, coll, name, rc)
        self._collect_orphans()
        future = [d for d in due if d > 0]
        return min(future) if future else 1.0

    def _pods(self, ns: str, cluster: str | None = None) -> dict[str, dict]:
        pods = self.kube.objects(f"/api/v1/namespaces/{ns}/pods")
        return {n: p for n, p in pods.items() if (p["metadata"].get("labels") or {}).get("ray.io/cluster") == cluster
                or (cluster is None and "ray.io/cluster" in (p["metadata"].get("labels") or {}))}

    def _collect_orphans(self) -> None:
        """Pods and Services of RayClusters that no longer exist go (their owner reference is gone)."""
        live = {(c.split("/")[5], n) for c in self.kube.collections("rayclusters") for n in self.kube.objects(c)}
        for coll in self.kube.collections("pods") + self.kube.collections("services"):
            ns = coll.split("/")[4]
            for name, obj in self.kube.objects(coll).items():
                owner = (obj["metadata"].get("labels") or {}).get("ray.io/cluster")
                if owner and (ns, owner) not in live and obj["metadata"].get("ownerReferences"):
                    self.kube.remove(coll, name)
                    self._born.pop(name, None)
                    for key in [k for k in self.kube.routes if k[:2] == (ns, name)]:
                        self.kube.routes.pop(key, None)

    def _reconcile_one(self, ns: str, coll: str, name: str, rc: dict) -> None:
        spec = rc.get("spec") or {}
        pods_coll = f"/api/v1/namespaces/{ns}/pods"
        pods = self._pods(ns, name)
        for pname, p in pods.items():  # KubeRay deletes failed pods, then creates replacements
            if p["status"].get("phase") == "Failed":
                self.kube.remove(pods_coll, pname)
                self._born.pop(pname, None)
                self._event(ns, name, "DeletedPod", f"Deleted Pod {ns}/{pname}; Pod status: Failed")
        pods = self._pods(ns, name)
        hold = self._hold.get((ns, name), 0) > time.monotonic()
        wanted = [("head", "headgroup", spec.get("headGroupSpec") or {}, 1)]
        wanted += [("worker", g.get("groupName", "workers"), g, int(g.get("replicas") or 0))
                   for g in spec.get("workerGroupSpecs") or []]
        for node_type, group, gspec, count in wanted:
            mine = sorted(n for n, p in pods.items() if p["metadata"]["labels"].get("ray.io/group") == group)
            for extra in mine[count:]:
                self.kube.remove(pods_coll, extra)
                self._born.pop(extra, None)
                self._event(ns, name, "DeletedWorkerPod", f"Deleted worker Pod {ns}/{extra}")
            if not hold:
                for _ in range(count - len(mine)):
                    self._create_pod(ns, rc, node_type, group, gspec)
        self._promote(ns, name)
        self._ensure_service(ns, rc)
        self._update_status(ns, coll, name, rc, sum(c for t, _, _, c in wanted if t == "worker"))

    def _suffix(self) -> str:
        return "".join(self._rand.choices(string.ascii_lowercase + string.digits, k=5))

    def _create_pod(self, ns: str, rc: dict, node_type: str, group: str, gspec: dict) -> None:
        name = rc["metadata"]["name"]
        pname = f"{name}-head-{self._suffix()}" if node_type == "head" else f"{name}-{group}-worker-{self._suffix()}"
        template = copy.deepcopy(gspec.get("template") or {})
        pod_spec = template.get("spec") or {"containers": [{"name": f"ray-{node_type}", "image": "rayproject/ray"}]}
        labels = {**(template.get("metadata", {}).get("labels") or {}), "ray.io/cluster": name, "ray.io/node-type": node_type,
                  "ray.io/group": group, "ray.io/is-ray-node": "yes", "app.kubernetes.io/created-by": "kuberay-operator",
                  "app.kubernetes.io/name": "kuberay"}
        pool = "default-pool" if node_type == "head" else "gpu-pool"
        pod_spec["nodeName"] = f"gke-{name}-{pool}-{self._suffix()}"
        containers = pod_spec.get("containers") or []
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pname, "namespace": ns, "labels": labels,
                         "annotations": template.get("metadata", {}).get("annotations") or {},
                         "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": name,
                                              "uid": rc["metadata"].get("uid", ""), "controller": True}]},
            "spec": pod_spec,
            "status": {"phase": "Pending", "qosClass": "Burstable", "startTime": _now(),
                       "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()},
                                      {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                                       "lastTransitionTime": _now()}],
                       "containerStatuses": [{"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": False,
                                              "restartCount": 0, "started": False,
                                              "state": {"waiting": {"reason": "ContainerCreating"}}} for c in containers]},
        }
        self.kube.put(f"/api/v1/namespaces/{ns}/pods", pod)
        self._born[pname] = time.monotonic()
        what = "head" if node_type == "head" else "worker"
        self._event(ns, name, f"Created{what.title()}Pod", f"Created {what} Pod {ns}/{pname}")
        self.kube.add_event(ns, pname, "Scheduled", f"Successfully assigned {ns}/{pname} to {pod_spec['nodeName']}",
                            "Normal", component="default-scheduler")

    def _promote(self, ns: str, cluster: str) -> None:
        """Pending pods older than ``ready_after`` become Running and Ready (container started), with events."""
        coll = f"/api/v1/namespaces/{ns}/pods"
        for pname, p in self._pods(ns, cluster).items():
            born = self._born.get(pname)
            if p["status"].get("phase") != "Pending" or born is None or time.monotonic() - born < self.ready_after:
                continue
            st = p["status"]
            st.update(phase="Running", podIP=f"10.8.0.{next(self._ips) % 250 + 2}", hostIP="10.128.0.2", conditions=[
                {"type": t, "status": "True", "lastTransitionTime": _now()}
                for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "PodScheduled", "Ready")])
            for cs in st.get("containerStatuses") or []:
                cs.update(ready=True, started=True, state={"running": {"startedAt": _now()}})
                self.kube.add_event(ns, pname, "Pulled", f"Container image \"{cs['image']}\" already present on machine",
                                    "Normal", component="kubelet")
                self.kube.add_event(ns, pname, "Started", f"Started container {cs['name']}", "Normal", component="kubelet")
            self.kube.put(coll, p)
            self._born.pop(pname, None)
            if p["metadata"]["labels"].get("ray.io/node-type") == "head":
                for port, target in self.routes.items():
                    self.kube.route_port(ns, pname, port, target)

    def _ensure_service(self, ns: str, rc: dict) -> None:
        name = rc["metadata"]["name"]
        coll = f"/api/v1/namespaces/{ns}/services"
        if f"{name}-head-svc" in self.kube.objects(coll):
            return
        ports = [{"name": n, "port": p, "protocol": "TCP", "targetPort": p}
                 for n, p in (("gcs-server", 6379), ("dashboard", 8265), ("client", 10001), ("metrics", 8080))]
        self.kube.put(coll, {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"{name}-head-svc", "namespace": ns,
                         "labels": {"ray.io/cluster": name, "ray.io/node-type": "head"},
                         "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": name,
                                              "uid": rc["metadata"].get("uid", ""), "controller": True}]},
            "spec": {"clusterIP": "None", "ports": ports, "selector": {"ray.io/cluster": name, "ray.io/node-type": "head"}},
        })

    def _event(self, ns: str, cluster: str, reason: str, message: str, type_: str = "Normal") -> None:
        self.kube.add_event(ns, cluster, reason, message, type_, kind="RayCluster", component="raycluster-controller")

    def _update_status(self, ns: str, coll: str, name: str, rc: dict, desired_workers: int) -> None:
        pods = self._pods(ns, name)

        def ready(p: dict) -> bool:
            return p["status"].get("phase") == "Running" and any(
                c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])

        head = next((p for p in pods.values() if p["metadata"]["labels"].get("ray.io/node-type") == "head"), None)
        workers_ready = sum(1 for p in pods.values() if p["metadata"]["labels"].get("ray.io/node-type") == "worker" and ready(p))
        all_ready = head is not None and ready(head) and workers_ready >= desired_workers
        old = rc.get("status") or {}
        old_conds = {c["type"]: c for c in old.get("conditions") or []}

        def cond(type_: str, ok: bool, reason: str, message: str) -> dict:
            prev = old_conds.get(type_)
            status = "True" if ok else "False"
            when = prev["lastTransitionTime"] if prev and prev["status"] == status else _now()
            return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": when}

        provisioned = all_ready or old_conds.get("RayClusterProvisioned", {}).get("status") == "True"
        head_ok = head is not None and ready(head)
        status = {
            "desiredWorkerReplicas": desired_workers, "minWorkerReplicas": desired_workers,
            "maxWorkerReplicas": desired_workers, "readyWorkerReplicas": workers_ready,
            "availableWorkerReplicas": workers_ready,
            "endpoints": {"client": "10001", "dashboard": "8265", "gcs-server": "6379", "metrics": "8080"},
            "head": {"podName": head["metadata"]["name"] if head else "", "podIP": (head or {}).get("status", {}).get("podIP") or "",
                     "serviceName": f"{name}-head-svc", "serviceIP": ""},
            "conditions": [
                cond("HeadPodReady", head_ok, "HeadPodRunningAndReady" if head_ok else "HeadPodNotFound" if head is None
                     else "HeadPodNotReady", "Head Pod ready" if head_ok else "Head Pod not ready"),
                cond("RayClusterProvisioned", provisioned,
                     "AllPodRunningAndReadyFirstTime" if provisioned else "RayClusterPodsProvisioning",
                     "All Ray Pods are ready for the first time" if provisioned else "RayCluster Pods are being provisioned"),
            ],
            "observedGeneration": int(rc["metadata"].get("generation") or 1),
        }
        if all_ready:
            status["state"] = "ready"
            status["stateTransitionTimes"] = old.get("stateTransitionTimes") or {"ready": _now()}
        strip = {k: v for k, v in old.items() if k != "lastUpdateTime"}
        if strip != status:
            cur = self.kube.objects(coll).get(name)
            if cur is None:
                return
            cur["status"] = {**status, "lastUpdateTime": _now()}
            self.kube.put(coll, cur)


def local_exec(paths: Callable[[], dict[str, Path]], *, cwd: Path, env: Callable[[], dict[str, str]],
               prefix: Callable[[str, str], list[str]] = lambda namespace, pod: []):
    """An ``exec_handler`` for the API double: ``kubectl exec`` into a pod runs the command here, after
    ``prefix(namespace, pod)`` (e.g. ``nsenter`` into that pod's mount namespace), in ``env()``, with absolute path arguments under a pod path
    mapped (``paths()``: pod path -> local dir); any other absolute path fails like a missing file, so a command can
    touch nothing outside the sim."""

    def run(namespace: str, pod: str, container: str | None, command: list[str]) -> tuple[str, str, int]:
        table = paths()
        argv = list(command[:1])
        for a in command[1:]:
            if a.startswith("/"):
                base = next((k for k in table if a == k or a.startswith(k.rstrip("/") + "/")), None)
                if base is None:
                    return "", f"{command[0]}: {a}: not in the simulated pod (only {', '.join(table)} are)\n", 1
                a = str(table[base]) + a[len(base):]
            argv.append(a)
        if shutil.which(argv[0], path=env().get("PATH")) is None and not Path(argv[0]).is_file():
            return "", f'OCI runtime exec failed: exec: "{argv[0]}": executable file not found in $PATH\n', 127
        r = subprocess.run([*prefix(namespace, pod), *argv], cwd=cwd, env=env(), capture_output=True, text=True, timeout=300, check=False)
        return r.stdout, r.stderr, r.returncode

    return run
