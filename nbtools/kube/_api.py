"""Kubernetes objects with kubectl's verbs, through the official ``kubernetes`` client: apply, get, delete, find
pods by label selector, wait for Ready pods, read events, exec.

Why its own package: operating a cluster (here) is not provisioning one (``nbtools.gke``). Everything below takes
plain values (namespace, names, selectors), never the experiment config. The client's own mechanisms do the work:
its dynamic API finds each kind's path from the server's discovery, ``apply`` is server-side apply (the API server
merges and tracks which fields nbtools owns), and ``wait_ready`` watches the RayCluster's status instead of polling.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pandas as pd

from nbtools.errors import ConfigError, ConflictError, DependencyError, Fix, NotFoundError, NotReadyError


def kubeconfig_file(kubeconfig: str | None = None) -> str:
    """The kubeconfig file(s) to read now: the argument, else ``$KUBECONFIG`` as it is now, else ~/.kube/config.

    The kubernetes client reads ``$KUBECONFIG`` once, when it is imported; a kernel that set it later (or a second
    cluster's credentials) would otherwise talk to the first file."""
    import os

    return kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


__all__ = [
    "kubeconfig_file", "connect", "apply", "delete", "get", "list_pods", "find_pod", "exec_pod", "CompletedExec",
    "pod_events", "cluster_events", "FIELD_MANAGER",
]

# The field manager of every write nbtools makes: server-side apply records which fields it owns under this name, so a
# later apply removes what the config no longer sets and a change someone else made to one of them is a conflict
FIELD_MANAGER = "nbtools"


def connect(*, kubeconfig: str | None = None, context: str | None = None, prefer_context: str | None = None):
    """An ``ApiClient`` for a cluster in a kubeconfig.

    Context: ``context`` if given; else ``prefer_context`` (e.g. the ``gke_<project>_<region>_<cluster>`` context
    that ``get-credentials`` wrote) when the kubeconfig has it; else the kubeconfig's current context.

    Example:
        >>> api = nbtools.kube.connect(prefer_context="gke_my-project_us-central1_nbtools-b200")
    """
    try:
        from kubernetes import client, config
    except ImportError as e:  # the optional extra [gke]
        raise DependencyError.extra("kubernetes", "the Kubernetes API (backend gke)") from e
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


def _dynamic(api):
    """The client's dynamic API for ``api`` (one per ApiClient): it resolves a kind's path and scope from the API
    server's discovery documents, so no table of kinds lives here. Its discovery cache is private to this process."""
    dyn = getattr(api, "_nbtools_dynamic", None)
    if dyn is None:
        import atexit
        import hashlib
        import shutil
        import tempfile

        from kubernetes.dynamic import DynamicClient

        global _CACHE_DIR
        if _CACHE_DIR is None:
            _CACHE_DIR = tempfile.mkdtemp(prefix="nbtools-kube-discovery-")
            atexit.register(shutil.rmtree, _CACHE_DIR, True)
        host = hashlib.sha256(api.configuration.host.encode()).hexdigest()[:16]
        dyn = DynamicClient(api, cache_file=f"{_CACHE_DIR}/{host}-{id(api)}.json")
        api._nbtools_dynamic = dyn
    return dyn


_CACHE_DIR: str | None = None


def _resource(api, obj: dict):
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    try:
        return _dynamic(api).resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    except ResourceNotFoundError:
        raise ConfigError(
            f"the cluster's API serves no kind {obj['kind']} in {obj['apiVersion']}",
            fix="install the CRDs that define it (KubeRay's for RayCluster: the GKE Ray add-on or the `kuberay-operator` "
                "step of the provisioning plan), or check that kubectl's context is the cluster you mean",
        ) from None


def _ns(obj: dict, resource) -> str | None:
    return (obj.get("metadata", {}).get("namespace") or "default") if resource.namespaced else None


def get(api, obj: dict) -> dict | None:
    """The live object with ``obj``'s kind/namespace/name, or None."""
    from kubernetes.dynamic.exceptions import NotFoundError as Missing

    res = _resource(api, obj)
    try:
        return res.get(name=obj["metadata"]["name"], namespace=_ns(obj, res)).to_dict()
    except Missing:
        return None


def _label(obj: dict) -> str:
    ns = obj["metadata"].get("namespace")
    return f"{obj['kind']} {ns + '/' if ns else ''}{obj['metadata']['name']}"


def apply(api, objs: list[dict], *, force: bool = False) -> pd.DataFrame:
    """Server-side apply of each object (one PATCH creates or updates it; the API server merges and records what
    nbtools owns), after a server-side dry run of all of them, so nothing half-applies.

    A field that someone else changed since (``kubectl edit``, ``kubectl scale``) and that the config sets to another
    value is a conflict, not silently overwritten; ``force=True`` takes such fields over.

    Returns:
        DataFrame with kind, name, namespace, action ("created" | "patched" | "unchanged": the API server left the
        object as it was, its resourceVersion unchanged).

    Raises:
        ConflictError: the API server rejected an object (a conflict with another field manager, an immutable field,
            an invalid value), with its message.

    Example:
        >>> nbtools.kube.apply(api, nbtools.manifests.workload_objects(cfg))
    """
    from kubernetes.client.exceptions import ApiException

    planned: list[str] = []
    for dry in (True, False):
        for i, obj in enumerate(objs):
            res = _resource(api, obj)
            try:
                resp = res.server_side_apply(body=obj, namespace=_ns(obj, res), field_manager=FIELD_MANAGER,
                                             force_conflicts=force or None, dry_run="All" if dry else None,
                                             serialize=False)
            except ApiException as e:
                raise _rejected(e, obj, dry) from None
            version = json.loads(resp.data).get("metadata", {}).get("resourceVersion")
            if dry:  # a dry run returns the object as it would be, at the live resourceVersion (none when absent)
                planned.append(version if resp.status != 201 else "")
            else:
                planned[i] = ("created" if resp.status == 201 else "unchanged" if version == planned[i] else "patched")
    return pd.DataFrame(
        [{"kind": o["kind"], "name": o["metadata"]["name"], "namespace": o["metadata"].get("namespace", ""), "action": a}
         for o, a in zip(objs, planned, strict=True)]
    )


def _rejected(e, obj: dict, dry: bool) -> ConflictError:
    msg = _api_message(e)
    what = f"{'server-side dry run' if dry else 'apply'} of {_label(obj)} was rejected ({_status(e)}): {msg}"
    if _status(e) == 409:
        return ConflictError(
            what, fix=Fix("another field manager changed these fields since nbtools applied them: set the value you "
                          "want in the experiment config, or take the fields over with "
                          "nbtools.kube.apply(api, objs, force=True)",
                          cli="another field manager changed these fields since nbtools applied them: set the value you "
                              "want in the experiment config, or delete the object (`nbtools down EXPERIMENT.yaml "
                              "--apply`) and apply again"))
    return ConflictError(
        what, fix=Fix("if a field is immutable, delete the object (cluster.down() in notebook 09) and apply again; "
                      "otherwise correct the experiment config",
                      cli="if a field is immutable, delete the object (`nbtools down EXPERIMENT.yaml --apply`) and "
                          "apply again; otherwise correct the experiment config"))


def _status(e) -> int:
    return getattr(e, "status", 0) or 0


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
            res = _resource(api, obj)
            res.delete(name=obj["metadata"]["name"], namespace=_ns(obj, res), propagation_policy="Background")
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
