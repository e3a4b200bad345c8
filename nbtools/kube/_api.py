"""Kubernetes objects with kubectl's verbs, through the official ``kubernetes`` client: apply, get, delete, find
pods by label selector, wait for Ready pods, read events, exec.

Why its own package: operating a cluster (here) is not provisioning one (``nbtools.gke``). Everything below takes
plain values (namespace, names, selectors), never the experiment config.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from nbtools._escape import html as _h
from nbtools.errors import ConfigError, ConflictError, DependencyError, Fix, NotFoundError, NotReadyError


def kubeconfig_file(kubeconfig: str | None = None) -> str:
    """The kubeconfig file(s) to read now: the argument, else ``$KUBECONFIG`` as it is now, else ~/.kube/config.

    The kubernetes client reads ``$KUBECONFIG`` once, when it is imported; a kernel that set it later (or a second
    cluster's credentials) would otherwise talk to the first file."""
    import os

    return kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


__all__ = [
    "kubeconfig_file", "connect", "apply", "delete", "get", "list_pods", "find_pod", "wait_ready", "exec_pod", "CompletedExec",
    "pod_events", "ReadyReport", "RESOURCES",
]

# (apiVersion, kind) -> (plural, namespaced): every kind nbtools creates
RESOURCES: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "ServiceAccount"): ("serviceaccounts", True),
    ("v1", "Secret"): ("secrets", True),
    ("v1", "PersistentVolume"): ("persistentvolumes", False),
    ("v1", "PersistentVolumeClaim"): ("persistentvolumeclaims", True),
    ("apps/v1", "DaemonSet"): ("daemonsets", True),
    ("networking.gke.io/v1", "GKENetworkParamSet"): ("gkenetworkparamsets", False),
    ("networking.gke.io/v1", "Network"): ("networks", False),
    ("ray.io/v1", "RayCluster"): ("rayclusters", True),
}


def connect(*, kubeconfig: str | None = None, context: str | None = None, prefer_context: str | None = None):
    """An ``ApiClient`` for a cluster in a kubeconfig.

    Context: ``context`` if given; else ``prefer_context`` (e.g. the ``gke_<project>_<region>_<cluster>`` context
    that ``get-credentials`` wrote) when the kubeconfig has it; else the kubeconfig's current context.

    Example:
        >>> api = nbtools.kube.connect(prefer_context="gke_my-project_us-central1_nbtools-b200")
    """
    try:
        from kubernetes import client, config
    except ImportError as e:  # pragma: no cover - kubernetes is a hard dependency
        raise DependencyError("the kubernetes client is missing", fix="pip install kubernetes") from e
    shown = kubeconfig or "$KUBECONFIG or ~/.kube/config"
    kubeconfig = kubeconfig_file(kubeconfig)
    if context is None and prefer_context:
        try:
            contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)
        except Exception:  # noqa: BLE001 - a missing kubeconfig is reported below
            contexts = []
        if any(c["name"] == prefer_context for c in contexts or []):
            context = prefer_context
    conf = client.Configuration()
    try:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=conf)
    except Exception as e:  # noqa: BLE001 - the client raises several types for one cause
        raise NotFoundError(
            f"no usable kubeconfig (file {shown}, context {context or 'current'}): {e}",
            fix="run the `credentials` step of the provisioning plan (gcloud container clusters get-credentials ...)",
        ) from None
    return client.ApiClient(conf)


def _path(obj_or_kind: dict, namespace: str | None = None, name: str | None = None) -> str:
    api_version, kind = obj_or_kind["apiVersion"], obj_or_kind["kind"]
    try:
        plural, namespaced = RESOURCES[(api_version, kind)]
    except KeyError:
        raise ConfigError(f"kind {api_version}/{kind} is not one nbtools manages; known: {sorted(RESOURCES)}") from None
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if namespaced:
        base += f"/namespaces/{namespace or obj_or_kind.get('metadata', {}).get('namespace') or 'default'}"
    return f"{base}/{plural}" + (f"/{name}" if name else "")


def _request(api, method: str, path: str, *, query: list | None = None, body: Any = None, content_type: str | None = None):
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    params = api.param_serialize(method, path, query_params=query or [], header_params=headers, body=body,
                                 auth_settings=["BearerToken"])
    resp = api.call_api(*params)
    resp.read()
    return api.response_deserialize(resp, {"2XX": "object"}).data


def _status(e) -> int:
    return getattr(e, "status", 0) or 0


def get(api, obj: dict) -> dict | None:
    """The live object with ``obj``'s kind/namespace/name, or None."""
    from kubernetes.client.exceptions import ApiException

    try:
        return _request(api, "GET", _path(obj, name=obj["metadata"]["name"]))
    except ApiException as e:
        if _status(e) == 404:
            return None
        raise


def _subset(want: Any, have: Any) -> bool:
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_subset(v, have.get(k)) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(want) == len(have) and all(_subset(a, b) for a, b in zip(want, have, strict=True))
    return want == have or str(want) == str(have)


def _label(obj: dict) -> str:
    ns = obj["metadata"].get("namespace")
    return f"{obj['kind']} {ns + '/' if ns else ''}{obj['metadata']['name']}"


def apply(api, objs: list[dict], *, dry_run_first: bool = True) -> pd.DataFrame:
    """Create or patch each object; a server-side dry run of all of them comes first, so nothing half-applies.

    Returns:
        DataFrame with kind, name, namespace, action ("created" | "patched" | "unchanged").

    Raises:
        ConflictError: the API server rejected an object (immutable field, invalid value), with its message.

    Example:
        >>> nbtools.kube.apply(api, nbtools.manifests.workload_objects(cfg))
    """
    from kubernetes.client.exceptions import ApiException

    plan = []
    for obj in objs:
        live = get(api, obj)
        if live is None:
            plan.append((obj, "created"))
        elif _subset({k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}, live):
            plan.append((obj, "unchanged"))
        else:
            plan.append((obj, "patched"))
    passes = ([["All"]] if dry_run_first else []) + [[]]
    for dry in passes:
        for obj, action in plan:
            query = [("fieldManager", "nbtools")] + [("dryRun", d) for d in dry]
            try:
                if action == "created":
                    _request(api, "POST", _path(obj), query=query, body=obj, content_type="application/json")
                elif action == "patched":
                    _request(api, "PATCH", _path(obj, name=obj["metadata"]["name"]), query=query, body=obj,
                             content_type="application/merge-patch+json")
            except ApiException as e:
                msg = _api_message(e)
                raise ConflictError(
                    f"{'server-side dry run' if dry else 'apply'} of {_label(obj)} was rejected ({_status(e)}): {msg}",
                    fix=Fix("if a field is immutable, delete the object (cluster.down() in notebook 09) and apply again; "
                            "otherwise correct the experiment config",
                            cli="if a field is immutable, delete the object (`nbtools down EXPERIMENT.yaml --apply`) and "
                                "apply again; otherwise correct the experiment config"),
                ) from None
    return pd.DataFrame(
        [{"kind": o["kind"], "name": o["metadata"]["name"], "namespace": o["metadata"].get("namespace", ""), "action": a}
         for o, a in plan]
    )


def _api_message(e) -> str:
    try:
        return json.loads(e.body).get("message", e.reason)
    except (TypeError, ValueError):
        return str(e.reason)


def delete(api, objs: list[dict], *, only_labelled: dict[str, str] | None = None) -> pd.DataFrame:
    """Delete each object that exists and (with ``only_labelled``) carries every given label; others are kept.

    Returns:
        DataFrame with kind, name, action ("deleted" | "absent" | "kept: not created by nbtools").
    """
    rows = []
    for obj in objs:
        live = get(api, obj)
        if live is None:
            action = "absent"
        elif only_labelled and any(live.get("metadata", {}).get("labels", {}).get(k) != v for k, v in only_labelled.items()):
            action = "kept: not created by nbtools for this experiment"
        else:
            _request(api, "DELETE", _path(obj, name=obj["metadata"]["name"]), query=[("propagationPolicy", "Background")])
            action = "deleted"
        rows.append({"kind": obj["kind"], "name": obj["metadata"]["name"], "action": action})
    return pd.DataFrame(rows, columns=["kind", "name", "action"])


def list_pods(api, namespace: str, selector: str) -> list[Any]:
    """Pods matching a label selector (``V1Pod`` objects, sorted by name)."""
    from kubernetes import client

    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items
    return sorted(pods, key=lambda p: p.metadata.name)


def find_pod(api, namespace: str, selector: str) -> Any:
    """Exactly one pod for ``selector``; "none" and "more than one" are errors naming the selector."""
    pods = list_pods(api, namespace, selector)
    if not pods:
        raise NotFoundError(
            f"no pod in namespace {namespace!r} matches selector {selector!r}",
            fix=Fix("check that the RayCluster is up (notebook 02: cluster.up()) and that the selector names it",
                    cli="check that the RayCluster is up (`nbtools up EXPERIMENT.yaml --apply`) and that the selector "
                        "names it"),
        )
    if len(pods) > 1:
        names = ", ".join(p.metadata.name for p in pods)
        raise ConflictError(
            f"expected exactly one pod for selector {selector!r} in {namespace!r}, found {len(pods)}: {names}",
            fix="narrow the selector, e.g. add ray.io/node-type=head or ray.io/group=<group>",
        )
    return pods[0]


def pod_events(api, namespace: str, name: str, limit: int = 10) -> list[str]:
    """The pod's last events as ``reason: message`` lines (oldest first)."""
    from kubernetes import client

    evs = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    evs = sorted(evs, key=lambda e: str(e.last_timestamp or e.event_time or e.metadata.creation_timestamp or ""))
    return [f"{e.type or 'Normal'} {e.reason}: {e.message}" for e in evs[-limit:]]


def cluster_events(api, namespace: str, name_prefix: str, limit: int = 50, *, since: float | None = None,
                   until: float | None = None) -> list[str]:
    """Events of every object named ``name_prefix…`` (a RayCluster's pods, also deleted ones: their events
    outlive them) and of the nodes, plus what the pods' status says about their end, as ``type reason: object:
    message`` lines, oldest first; ``since``/``until`` (Unix seconds) keep those of a time window (a job's run),
    lines without a time are kept.

    Why the status too: kubelet reports a graceful node shutdown or a node-pressure eviction as the pod's
    ``DisruptionTarget`` *condition* with reason ``TerminationByKubelet`` (and ``status.reason`` ``Terminated`` /
    ``Evicted``), not necessarily as an event (Kubernetes ``k8s.io/api/core/v1`` ``PodReasonTerminationByKubelet``).
    """
    from kubernetes import client

    def stamp(t) -> float | None:
        return t.timestamp() if hasattr(t, "timestamp") else None

    def inside(t) -> bool:
        t = stamp(t)
        return t is None or ((since is None or t >= since - 1) and (until is None or t <= until))

    core = client.CoreV1Api(api)
    rows: list[tuple[str, str]] = []
    for e in core.list_namespaced_event(namespace).items:
        t = e.last_timestamp or e.event_time or e.metadata.creation_timestamp
        if ((e.involved_object.name or "").startswith(name_prefix) or e.involved_object.kind == "Node") and inside(t):
            rows.append((str(t or ""), f"{e.type or 'Normal'} {e.reason}: {e.involved_object.kind}/"
                                       f"{e.involved_object.name}: {e.message}"))
    for pod in core.list_namespaced_pod(namespace).items:
        name = pod.metadata.name or ""
        if not name.startswith(name_prefix):
            continue
        st = pod.status
        for c in st.conditions or []:
            if c.type == "DisruptionTarget" and c.status == "True" and inside(c.last_transition_time):
                rows.append((str(c.last_transition_time or ""),
                             f"Warning {c.reason}: Pod/{name}: {c.message or ''} (pod condition {c.type})"))
        if (st.phase or "") == "Failed" and st.reason and not any(
                c.type == "DisruptionTarget" and c.message == st.message for c in st.conditions or []):
            rows.append(("", f"Warning {st.reason}: Pod/{name}: {st.message or ''} (pod status)"))
    rows.sort(key=lambda r: r[0])
    return [line for _, line in rows[-limit:]]


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


def wait_ready(api, namespace: str, name: str, *, pods: int, timeout: float = 900, progress: bool = True,
               hints: dict[str, str] | None = None) -> ReadyReport:
    """Wait until the head and every worker pod of RayCluster ``name`` is Running and Ready (``pods`` in all).

    ``hints`` holds the fix texts for a stuck pod ("capacity", "image"), which know the experiment.

    Backs off between checks (0.2 s growing to 5 s) and shows a tqdm bar of ready pods.

    Raises:
        NotReadyError: on timeout, naming the stuck pod, its reason (Unschedulable, quota, image pull) and events.

    Example:
        >>> nbtools.kube.wait_ready(api, "default", "nbtools-b200", pods=3, timeout=1200)
    """
    from nbtools._progress import tqdm

    ns, want = namespace, pods
    deadline = time.monotonic() + timeout
    delay = 0.2
    bar = tqdm(total=want, desc=f"RayCluster {name} pods ready", unit="pod", disable=not progress)
    try:
        while True:
            pods = list_pods(api, ns, f"ray.io/cluster={name}")
            ready = [p for p in pods if is_ready(p)]
            bar.n = min(len(ready), want)
            bar.refresh()
            heads = [p for p in ready if (p.metadata.labels or {}).get("ray.io/node-type") == "head"]
            if len(ready) >= want and heads:
                rows = [{"pod": p.metadata.name, "type": p.metadata.labels.get("ray.io/node-type"), "node": p.spec.node_name,
                         "ip": p.status.pod_ip} for p in ready]
                return ReadyReport(name, pd.DataFrame(rows))
            if time.monotonic() >= deadline:
                break
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 1.6, 5.0)
    finally:
        bar.close()
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


@dataclass(frozen=True)
class CompletedExec:
    """Result of a command run in a pod, like ``subprocess.CompletedProcess``."""

    pod: str
    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def exec_pod(api, namespace: str, pod: str, command: list[str], *, container: str | None = None,
             timeout: float = 300) -> CompletedExec:
    """Run ``command`` in a pod over the API's exec websocket and collect its output and exit code.

    Raises:
        NotReadyError: the command was still running after ``timeout`` seconds.

    Example:
        >>> exec_pod(api, "default", "nbtools-b200-head-x7k2p", ["ray", "status"])
    """
    from kubernetes import client
    from kubernetes.stream import stream

    core = client.CoreV1Api(client.ApiClient(api.configuration))  # stream() swaps call_api: keep it private
    kwargs = {"command": command, "stderr": True, "stdout": True, "stdin": False, "tty": False, "_preload_content": False}
    if container:
        kwargs["container"] = container
    ws = stream(core.connect_get_namespaced_pod_exec, pod, namespace, **kwargs)
    ws.run_forever(timeout=timeout)
    still_running = ws.is_open()
    out, err = ws.read_stdout(), ws.read_stderr()
    rc = ws.returncode
    ws.close()
    if still_running or rc is None:
        raise NotReadyError(
            f"`{' '.join(command)}` in pod {namespace}/{pod} did not finish within {timeout:g} s",
            reason=(err or out)[-500:], fix="run it again with a longer timeout, or check the pod (kubectl describe pod)",
        )
    return CompletedExec(pod, list(command), rc, out, err)
