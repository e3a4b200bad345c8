"""The Kubernetes API double (tests/doubles/kube_double.py) with KubeRay's RayCluster schema, as pytest fixtures.

Why one place: the gke backend's tests (tests/backends/test_gke.py) and the server-side apply tests
(tests/kube/test_apply.py) need the same double — RayClusters checked against KubeRay v1.7.0's CRD
(tests/assets/kuberay/v1.7.0, ray-project/kuberay at v1.7.0, ray-operator/config/crd/bases/ray.io_rayclusters.yaml) —
started once per module and emptied before each test. A module uses them by importing them:
``from kuberay_api import kd, kuberay_double  # noqa: F401 - pytest fixtures``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kube_double import KubeDouble

__all__ = ["KUBERAY_CRD", "rayclusters_schema", "kuberay_double", "kd"]

KUBERAY_CRD = Path(__file__).resolve().parents[1] / "assets" / "kuberay" / "v1.7.0" / "ray.io_rayclusters.yaml"


def rayclusters_schema() -> dict:
    """The RayCluster v1 openAPIV3Schema of KubeRay's CRD."""
    crd = yaml.safe_load(KUBERAY_CRD.read_text())
    return next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]


@pytest.fixture(scope="module")
def kuberay_double():
    """One API double per module (starting it is the slow part), RayClusters validated against KubeRay's schema."""
    with KubeDouble(schemas={("ray.io", "rayclusters"): rayclusters_schema()}) as double:
        yield double


@pytest.fixture
def kd(kuberay_double, tmp_path):
    """The module's double, emptied (objects, recorded requests and execs, routes), with ``tmp_path/kubeconfig``
    pointing at it."""
    kuberay_double.store.clear()
    kuberay_double.requests.clear()
    kuberay_double.execs.clear()
    kuberay_double.exec_result.clear()
    kuberay_double.routes.clear()
    kuberay_double.kubeconfig(tmp_path / "kubeconfig")
    return kuberay_double
