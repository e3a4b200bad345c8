"""Kubernetes objects for a GKE/KubeRay run, built as Python data from the experiment config.

No string templates: every object is a dict, schema-validated in the tests (KubeRay v1.7 CRDs,
``kubernetes-validate``) and dumped with ``yaml.safe_dump``. ``manifests/`` in the repository is rendered from
``experiments/gke-*.yaml`` with ``python -m nbtools.manifests --write manifests/`` and diff-tested.

Example:
    >>> objs = nbtools.manifests.all_objects(cfg)
    >>> print(nbtools.manifests.to_yaml(objs)[:40])
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from nbtools import _atomic
from nbtools.config import Experiment
from nbtools.manifests._infra import (
    GCSFUSE_MOUNT_OPTIONS,
    INSTALLER_REF_ANNOTATION,
    LABELS,
    NCCL_INSTALLER_NAMESPACE,
    labels_for,
    nccl_installer_url,
    network_names,
    network_objects,
    secret_specs,
    secrets,
    service_account,
    storage_objects,
)
from nbtools.manifests._ray import HEAD_PORTS, NIC_ANNOTATIONS, raycluster

__all__ = [
    "raycluster", "all_objects", "workload_objects", "infra_objects", "to_yaml", "render", "write",
    "service_account", "secrets", "secret_specs", "storage_objects", "network_objects", "network_names",
    "nccl_installer_url", "NCCL_INSTALLER_NAMESPACE", "INSTALLER_REF_ANNOTATION", "labels_for", "LABELS", "NIC_ANNOTATIONS", "HEAD_PORTS", "GCSFUSE_MOUNT_OPTIONS",
]


def workload_objects(cfg: Experiment) -> list[dict[str, Any]]:
    """What the gke backend's ``up`` applies for one experiment: KSA, data PV/PVC, RayCluster (no Secrets)."""
    return [service_account(cfg), *storage_objects(cfg), raycluster(cfg)]


def infra_objects(cfg: Experiment) -> list[dict[str, Any]]:
    """Cluster-wide objects the provisioning plan applies: the GKE network mapping.

    (The gIB NCCL installer is Google's published manifest, applied by URL at ``cluster.nccl_installer_ref``; see
    ``nbtools.gke.nccl_installer_url`` and the header of ``render``.)
    """
    return network_objects(cfg)


def all_objects(cfg: Experiment) -> list[dict[str, Any]]:
    """Every object of the experiment except Secrets (whose values exist only at apply time).

    Example:
        >>> kinds = [o["kind"] for o in nbtools.manifests.all_objects(cfg)]
        >>> kinds[-1]
        'RayCluster'
    """
    return infra_objects(cfg) + workload_objects(cfg)


def to_yaml(objs: dict[str, Any] | list[dict[str, Any]]) -> str:
    """A multi-document YAML stream (``kubectl apply -f -`` ready), keys in insertion order.

    Example:
        >>> print(nbtools.manifests.to_yaml(nbtools.manifests.raycluster(cfg)))
    """
    if isinstance(objs, dict):
        objs = [objs]
    return "---\n".join(yaml.dump(o, Dumper=_Dumper, sort_keys=False, width=120) for o in objs)


class _Dumper(yaml.SafeDumper):
    """Safe YAML without anchors/aliases (kubectl users read these files) and with multi-line strings as blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render(cfg: Experiment) -> str:
    """The committed ``manifests/<experiment>.yaml`` text: a header saying where it came from, then objects."""
    src = Path(cfg.source).name if cfg.source else "<config>"
    lines = [
        f"# Generated from experiments/{src} by `make manifests` (python -m nbtools.manifests --write manifests/).",
        "# Do not edit: change the experiment file and regenerate. Apply with: kubectl apply --server-side -f <this file>",
    ]
    lines.append(f"# First, Google's gIB NCCL installer at the pinned ref: kubectl apply -f {nccl_installer_url(cfg)}")
    for env, name, key, var in secret_specs(cfg):
        lines.append(
            f"# Secret {name} (pod env {env}) is not in this file; create it without echoing the value:"
            f"  printf %s \"${var}\" | kubectl create secret generic {name} -n {cfg.cluster.namespace}"
            f" --from-file={key}=/dev/stdin"
        )
    return "\n".join(lines) + "\n" + to_yaml(all_objects(cfg))


def write(out_dir: str | os.PathLike, experiments: list[str | os.PathLike]) -> list[Path]:
    """Render each gke experiment to ``out_dir/<name>.yaml`` atomically (temp file + rename)."""
    from nbtools import config

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in experiments:
        cfg = config.load(path, backend="gke")
        target = out / f"{cfg.name}.yaml"
        _atomic.write_text(target, render(cfg))
        written.append(target)
    return written
