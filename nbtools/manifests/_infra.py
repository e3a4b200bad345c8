"""Cluster infrastructure objects as plain data: storage, identity, secrets, GKE networks.

The gIB NCCL installer is not built here: the provisioning plan applies Google's published manifest at a pinned
commit (``cluster.nccl_installer_ref``), as the GKE tutorials do, instead of a hand copy that falls behind it.
"""

from __future__ import annotations

import base64
from typing import Any

from nbtools.config import Experiment
from nbtools.errors import NotFoundError

__all__ = [
    "LABELS", "labels_for", "data_volume", "secret_env", "secret_specs", "storage_objects", "service_account",
    "secrets", "network_objects", "GCSFUSE_MOUNT_OPTIONS", "nccl_installer_url", "NCCL_INSTALLER_NAMESPACE",
    "INSTALLER_REF_ANNOTATION",
]

MANAGED_BY = "nbtools"
LABELS = {"app.kubernetes.io/managed-by": MANAGED_BY}

# Google's gIB NCCL installer (GoogleCloudPlatform/container-engine-accelerators, gpudirect-rdma/): the Standard
# manifest deploys DaemonSet nccl-rdma-installer into kube-system, the Autopilot one into its own rdma-system.
_INSTALLER_RAW = "https://raw.githubusercontent.com/GoogleCloudPlatform/container-engine-accelerators"
NCCL_INSTALLER_FILE = {"standard": "nccl-rdma-installer.yaml", "autopilot": "nccl-rdma-installer-autopilot.yaml"}
NCCL_INSTALLER_NAMESPACE = {"standard": "kube-system", "autopilot": "rdma-system"}
INSTALLER_REF_ANNOTATION = "nbtools/nccl-installer-ref"

# Tutorial 002 (verl on GKE): metadata cache without TTL, unlimited file cache with parallel downloads,
# streaming writes. Checkpoints are written once and read back by the merge, so this favours throughput.
GCSFUSE_MOUNT_OPTIONS = [
    "implicit-dirs",
    "metadata-cache:negative-ttl-secs:0",
    "metadata-cache:ttl-secs:0",
    "metadata-cache:stat-cache-max-size-mb:-1",
    "metadata-cache:type-cache-max-size-mb:-1",
    "file-cache:max-size-mb:-1",
    "file-cache:cache-file-for-range-read:true",
    "file-cache:enable-parallel-downloads:true",
    "read_ahead_kb=1024",
    "write:enable-streaming-writes:true",
    "write:global-max-blocks:200000",
]


def nccl_installer_url(cfg: Experiment) -> str:
    """Google's published gIB NCCL installer manifest for the cluster's mode, at ``cluster.nccl_installer_ref``.

    Example:
        >>> nbtools.manifests.nccl_installer_url(cfg).rsplit("/", 1)[-1]
        'nccl-rdma-installer.yaml'
    """
    return f"{_INSTALLER_RAW}/{cfg.cluster.nccl_installer_ref}/gpudirect-rdma/{NCCL_INSTALLER_FILE[cfg.cluster.mode]}"


def labels_for(cfg: Experiment) -> dict[str, str]:
    """Labels on every object nbtools creates: teardown deletes only objects carrying them."""
    return {**LABELS, "nbtools/experiment": cfg.name}


def _meta(cfg: Experiment, name: str, *, namespaced: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels_for(cfg)}
    if namespaced:
        meta["namespace"] = cfg.cluster.namespace
    return meta


def _pv_name(cfg: Experiment) -> str:
    return f"{cfg.cluster.name}-{cfg.storage.kind}-pv"


def _pvc_name(cfg: Experiment) -> str:
    return f"{cfg.cluster.name}-{cfg.storage.kind}-pvc"


def data_volume(cfg: Experiment) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(pod volume, container mount) of the shared data PVC, or (None, None) with ``storage.kind: none``."""
    if cfg.storage.kind == "none":
        return None, None
    vol = {"name": "data", "persistentVolumeClaim": {"claimName": _pvc_name(cfg)}}
    return vol, {"name": "data", "mountPath": cfg.storage.mount_path}


def secret_specs(cfg: Experiment) -> list[tuple[str, str, str, str]]:
    """(env var in the pod, Secret name, key, env var read at apply time) for each configured secret."""
    out = []
    defaults = {"hf_token": "HF_TOKEN", "wandb_api_key": "WANDB_API_KEY"}
    for field, env_default in defaults.items():
        ref = getattr(cfg.secrets, field)
        if ref is not None and ref.k8s_secret:
            out.append((env_default, ref.k8s_secret, ref.key or "value", ref.env or env_default))
    return out


def secret_env(cfg: Experiment) -> list[dict[str, Any]]:
    """Pod env entries that read each secret from its Kubernetes Secret (the value never enters a manifest)."""
    return [
        {"name": env, "valueFrom": {"secretKeyRef": {"name": name, "key": key}}}
        for env, name, key, _ in secret_specs(cfg)
    ]


def secrets(cfg: Experiment, *, reveal: bool = False) -> list[dict[str, Any]]:
    """The Secrets the pods read. Without ``reveal`` the data is a placeholder ``<from $HF_TOKEN>``.

    With ``reveal=True`` (only inside an apply, never for display) the values come from the environment now.

    Raises:
        NotFoundError: ``reveal=True`` and the environment variable is not set.
    """
    import os

    objs = []
    for _, name, key, env in secret_specs(cfg):
        if reveal:
            value = os.environ.get(env)
            if not value:
                raise NotFoundError(
                    f"Secret {name!r} needs ${env} in this process's environment, but it is not set",
                    fix=f"export {env}=... in the shell that started Jupyter (or set os.environ[{env!r}]), then re-run",
                )
            data = {"data": {key: base64.b64encode(value.encode()).decode()}}
        else:
            data = {"stringData": {key: f"<from ${env}>"}}
        objs.append({"apiVersion": "v1", "kind": "Secret", "metadata": _meta(cfg, name), "type": "Opaque", **data})
    return objs


def service_account(cfg: Experiment) -> dict[str, Any]:
    """The KSA of the Ray pods; annotated with the GSA only when ``gcp.service_account`` is set."""
    meta = _meta(cfg, cfg.cluster.ksa)
    if cfg.gcp.service_account:
        meta["annotations"] = {"iam.gke.io/gcp-service-account": cfg.gcp.service_account}
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}


def storage_objects(cfg: Experiment) -> list[dict[str, Any]]:
    """The shared /data volume: a gcsfuse PV/PVC on the bucket, or a Managed Lustre PV/PVC; [] for none."""
    s = cfg.storage
    if s.kind == "none":
        return []
    if s.kind == "gcsfuse":
        capacity = s.capacity
        pv_spec: dict[str, Any] = {
            "storageClassName": "gcsfuse-sc",
            "mountOptions": list(GCSFUSE_MOUNT_OPTIONS),
            "csi": {
                "driver": "gcsfuse.csi.storage.gke.io",
                "volumeHandle": s.bucket or "",
                "volumeAttributes": {"skipCSIBucketAccessCheck": "true", "gcsfuseMetadataPrefetchOnMount": "true"},
            },
        }
        sc = "gcsfuse-sc"
    else:
        lu = s.lustre
        capacity = lu.capacity if lu else s.capacity
        pv_spec = {
            "storageClassName": "",
            "csi": {
                "driver": "lustre.csi.storage.gke.io",
                "volumeHandle": f"{cfg.gcp.project}/{cfg.gcp.zone}/{lu.instance if lu else ''}",
                "volumeAttributes": {"ip": lu.ip if lu else "", "filesystem": lu.filesystem if lu else "lustrefs"},
            },
        }
        sc = ""
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": _meta(cfg, _pv_name(cfg), namespaced=False),
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "capacity": {"storage": capacity},
            # Retain: deleting the PV must never delete the bucket / file system behind it.
            "persistentVolumeReclaimPolicy": "Retain",
            **pv_spec,
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(cfg, _pvc_name(cfg)),
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": capacity}},
            "storageClassName": sc,
            "volumeName": _pv_name(cfg),
        },
    }
    return [pv, pvc]


def network_names(cfg: Experiment) -> dict[str, tuple[str, str]]:
    """GKE network name -> (VPC, subnet): gvnic-1 and rdma-0..7, matching the pods' NIC annotation."""
    p = cfg.cluster.networks
    nets = {"gvnic-1": (f"{p}-gvnic-net", f"{p}-gvnic-sub")}
    nets.update({f"rdma-{i}": (f"{p}-rdma-net", f"{p}-rdma-sub-{i}") for i in range(8)})
    return nets


def network_objects(cfg: Experiment) -> list[dict[str, Any]]:
    """GKENetworkParamSet + Network per additional NIC (cluster-scoped, networking.gke.io/v1)."""
    objs: list[dict[str, Any]] = []
    for name, (vpc, subnet) in network_names(cfg).items():
        mode = "NetDevice" if name.startswith("gvnic") else "RDMA"
        objs.append({
            "apiVersion": "networking.gke.io/v1",
            "kind": "GKENetworkParamSet",
            "metadata": _meta(cfg, name, namespaced=False),
            "spec": {"vpc": vpc, "vpcSubnet": subnet, "deviceMode": mode},
        })
        objs.append({
            "apiVersion": "networking.gke.io/v1",
            "kind": "Network",
            "metadata": _meta(cfg, name, namespaced=False),
            "spec": {
                "type": "Device",
                "parametersRef": {"group": "networking.gke.io", "kind": "GKENetworkParamSet", "name": name},
            },
        })
    return objs
