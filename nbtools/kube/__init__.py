"""Operate a Kubernetes cluster the way kubectl does, through the official ``kubernetes`` client.

Objects are plain dicts (built by ``nbtools.manifests``); the verbs are functions taking an ``ApiClient`` and plain
values (namespace, names, label selectors), never the experiment config. ``forward`` holds the dashboard's
port-forward, a detached process owned by its pid. Provisioning the cluster itself is ``nbtools.gke``.

Example:
    >>> api = nbtools.kube.connect()
    >>> nbtools.kube.find_pod(api, "default", "ray.io/cluster=nbtools-b200,ray.io/node-type=head")
"""

from __future__ import annotations

from nbtools.kube import forward
from nbtools.kube._api import (
    FIELD_MANAGER,
    CompletedExec,
    apply,
    cluster_events,
    connect,
    delete,
    exec_pod,
    find_pod,
    get,
    kubeconfig_file,
    list_pods,
    pod_events,
)
from nbtools.kube._pods import PodState, pod_states
from nbtools.kube._wait import ReadyReport, is_ready, wait_ready

__all__ = [
    "kubeconfig_file",
    "FIELD_MANAGER", "CompletedExec", "ReadyReport", "apply", "cluster_events", "connect", "delete", "exec_pod", "find_pod", "forward",
    "get", "is_ready", "list_pods", "pod_events", "wait_ready", "PodState", "pod_states",
]
