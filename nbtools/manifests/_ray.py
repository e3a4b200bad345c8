"""The RayCluster (ray.io/v1) for KubeRay on GKE, built as plain data from the experiment config."""

from __future__ import annotations

import copy
import json
from typing import Any

from nbtools.config import Experiment
from nbtools.manifests._infra import LABELS, data_volume, labels_for, secret_env

__all__ = ["raycluster", "NIC_ANNOTATIONS", "HEAD_PORTS", "PROFILING_ENV", "PTRACE", "RAY_TMP"]

HEAD_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "tensorboard": 6006}

# eth0 = the pod network; eth1 = gVNIC (data-centre traffic); eth2..eth9 = one RDMA NIC per GPU (gIB).
NIC_ANNOTATIONS = {
    "networking.gke.io/default-interface": "eth0",
    "networking.gke.io/interfaces": "[\n"
    + ",\n".join(
        json.dumps(nic)
        for nic in [{"interfaceName": "eth0", "network": "default"}, {"interfaceName": "eth1", "network": "gvnic-1"}]
        + [{"interfaceName": f"eth{i + 2}", "network": f"rdma-{i}"} for i in range(8)]
    )
    + "\n]",
}

# Annotations for the gcsfuse sidecar: "0" lifts its CPU/memory/ephemeral limits, so a full file cache does
# not evict the pod (gcs-fuse-csi-driver#57/#61; the head eviction in sunbc0120's devlog).
_GCSFUSE_ANNOTATIONS = {
    "gke-gcsfuse/volumes": "true",
    "gke-gcsfuse/cpu-limit": "0",
    "gke-gcsfuse/memory-limit": "0",
    "gke-gcsfuse/ephemeral-storage-limit": "0",
}


# Stack evidence for a stalled run (nbtools.launch.stall): Ray's dashboard serves py-spy dumps only when the head
# starts with RAY_DASHBOARD_ENABLE_PROFILING=1 (off by default since Ray 2.50: Ray docs ray-observability/user-guides/
# profiling, "Enabling dashboard profiling"), and py-spy may attach to a process only with SYS_PTRACE, which
# Kubernetes drops by default: "add ... to the template.spec.containers for both the head and worker Pods" (Ray docs
# cluster/kubernetes/k8s-ecosystem/pyspy). The dashboard stays behind a ClusterIP service (reached by port-forward).
PROFILING_ENV = {"name": "RAY_DASHBOARD_ENABLE_PROFILING", "value": "1"}

# Ray's session dir (/tmp/ray/session_*: logs, runtime_env packages, spilled objects) on a pod emptyDir, not the
# container's writable layer, so it outlives a restart of the Ray container (an OOM-killed raylet) for the life of the
# pod: its logs stay readable for the evidence bundle and `ray logs` (KubeRay #501, "persisted across Container
# restarts"). Tutorial 002's RayCluster mounts exactly these: emptyDir ray-logs at /tmp/ray on the head, ray-tmp-storage
# at /tmp on the workers (with the rest the job writes to /tmp, torch.compile's inductor cache among it).
RAY_TMP = {"head": "/tmp/ray", "worker": "/tmp"}
PTRACE = {"capabilities": {"add": ["SYS_PTRACE"]}}


def _resources(cpu: str, memory: str, gpus: int = 0) -> dict[str, Any]:
    amounts: dict[str, str] = {"cpu": cpu, "memory": memory}
    if gpus:
        amounts["nvidia.com/gpu"] = str(gpus)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _pod_annotations(storage_kind: str, workers: bool) -> dict[str, str]:
    ann: dict[str, str] = {}
    if storage_kind == "gcsfuse":
        ann.update(_GCSFUSE_ANNOTATIONS)
    if workers:
        ann.update(NIC_ANNOTATIONS)
    return ann


def _worker_selector(cfg: Experiment) -> dict[str, str]:
    c = cfg.cluster
    sel = {"cloud.google.com/gke-accelerator": c.gpu_type}
    if c.mode == "standard":
        sel["cloud.google.com/gke-nodepool"] = c.node_pool
        return sel
    # Autopilot provisions the node from the pod's selectors.
    sel["cloud.google.com/gke-accelerator-count"] = str(c.gpus_per_node)
    if c.provisioning == "spot":
        sel["cloud.google.com/gke-spot"] = "true"
    elif c.provisioning == "reservation":
        sel["cloud.google.com/reservation-name"] = c.reservation or ""
        sel["cloud.google.com/reservation-affinity"] = "specific"
    return sel


def raycluster(cfg: Experiment) -> dict[str, Any]:
    """The RayCluster: one CPU head (dashboard, job driver) and one group of 8-GPU workers.

    KubeRay generates the ``ray start`` command itself (no container ``command`` here), so its ulimit and
    start flags are never swallowed by a custom entrypoint (kuberay#2767).

    Example:
        >>> rc = nbtools.manifests.raycluster(cfg)
        >>> rc["spec"]["workerGroupSpecs"][0]["replicas"]
        1
    """
    c, storage = cfg.cluster, cfg.storage
    vol, mount = data_volume(cfg)
    secrets = secret_env(cfg)
    shm = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": c.shm_size}}
    head_mounts = [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "ray-logs", "mountPath": RAY_TMP["head"]}]
    head_mounts += [mount] if mount else []
    head_volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}, {"name": "ray-logs", "emptyDir": {}}]
    head_volumes += [vol] if vol else []
    worker_mounts = [
        {"name": "nvidia", "mountPath": "/usr/local/nvidia"},
        {"name": "gib", "mountPath": "/usr/local/gib"},
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "ray-tmp", "mountPath": RAY_TMP["worker"]},
    ] + ([mount] if mount else [])
    worker_volumes = [
        {"name": "nvidia", "hostPath": {"path": "/home/kubernetes/bin/nvidia"}},
        {"name": "gib", "hostPath": {"path": "/home/kubernetes/bin/gib"}},
        shm,
        {"name": "ray-tmp", "emptyDir": {}},
    ] + ([vol] if vol else [])
    tolerations = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "cloud.google.com/impending-node-termination", "operator": "Exists", "effect": "NoSchedule"},
    ]
    head_spec: dict[str, Any] = {
        "serviceAccountName": c.ksa,
        "containers": [
            {
                "name": "ray-head",
                "image": cfg.images.resolved_image,
                "ports": [{"name": n, "containerPort": p} for n, p in HEAD_PORTS.items()],
                "resources": _resources(c.head_cpu, c.head_memory),
                "env": [dict(PROFILING_ENV), *secrets],
                "securityContext": copy.deepcopy(PTRACE),
                "volumeMounts": head_mounts,
            }
        ],
        "volumes": head_volumes,
    }
    if c.mode == "standard":
        head_spec["nodeSelector"] = {"cloud.google.com/gke-nodepool": "default-pool"}
    worker_spec: dict[str, Any] = {
        "serviceAccountName": c.ksa,
        "nodeSelector": _worker_selector(cfg),
        "tolerations": tolerations,
        "containers": [
            {
                "name": "ray-worker",
                "image": cfg.images.resolved_image,
                "resources": _resources(c.worker_cpu, c.worker_memory, c.gpus_per_node),
                # NCCL/gIB variables are not set here but once, in the job's runtime_env
                # (nbtools.backends.gib_nccl_env), which appends to the image's LD_LIBRARY_PATH.
                "env": secrets,
                "securityContext": copy.deepcopy(PTRACE),
                "volumeMounts": worker_mounts,
            }
        ],
        "volumes": worker_volumes,
    }
    if not secrets:
        worker_spec["containers"][0].pop("env")
    labels = labels_for(cfg)
    return copy.deepcopy({
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": c.name, "namespace": c.namespace, "labels": labels},
        "spec": {
            "rayVersion": cfg.images.resolved_ray_version,
            "enableInTreeAutoscaling": False,
            "headGroupSpec": {
                "serviceType": "ClusterIP",
                "rayStartParams": {"dashboard-host": "0.0.0.0"},
                "template": {
                    "metadata": {"labels": dict(LABELS), "annotations": _pod_annotations(storage.kind, workers=False)},
                    "spec": head_spec,
                },
            },
            "workerGroupSpecs": [
                {
                    "groupName": "gpu-workers",
                    "replicas": c.worker_replicas,
                    "minReplicas": c.worker_replicas,
                    "maxReplicas": c.worker_replicas,
                    "numOfHosts": 1,
                    "rayStartParams": {},
                    "template": {
                        "metadata": {"labels": dict(LABELS), "annotations": _pod_annotations(storage.kind, workers=True)},
                        "spec": worker_spec,
                    },
                }
            ],
        },
    })
