"""nbtools.manifests: objects validate against KubeRay v1.7's CRD schema (jsonschema on openAPIV3Schema) and
kubernetes-validate's core schemas; manifests/ matches a fresh render; secrets never reach a manifest."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

import nbtools
from nbtools import manifests

ROOT = Path(__file__).resolve().parents[2]
ASSETS = Path(__file__).resolve().parents[1] / "assets"
KUBERAY = ASSETS / "kuberay" / "v1.7.0" / "ray.io_rayclusters.yaml"
TUTORIAL_002 = ASSETS / "tutorials" / "verl-on-gke" / "gcsfuse-pv-mountOptions.txt"
GKE_EXPERIMENTS = sorted((ROOT / "experiments").glob("gke-*.yaml"))
K8S_VERSION = "1.32"


def _cfg(path=GKE_EXPERIMENTS[0], **over):
    cfg = nbtools.config.load(path, backend="gke")
    return cfg.replace(**over) if over else cfg


def _variants():
    b200 = _cfg(ROOT / "experiments/gke-b200-gemma3-1b.yaml")
    h200 = _cfg(ROOT / "experiments/gke-h200-qwen.yaml")
    return {
        "b200-standard-spot": b200,
        "h200-reservation-helm": h200,
        "b200-autopilot": b200.replace(**{"cluster.mode": "autopilot"}),
        "lustre": b200.replace(**{"storage.kind": "lustre", "storage.lustre": {"instance": "lfs", "ip": "10.1.2.3"}}),
        "no-storage-gsa": b200.replace(**{"storage.kind": "none", "gcp.service_account": "ray@p.iam.gserviceaccount.com"}),
    }


VARIANTS = _variants()


@pytest.fixture(scope="module")
def raycluster_schema() -> dict:
    crd = yaml.safe_load(KUBERAY.read_text())
    v1 = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return v1["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize("name", VARIANTS)
def test_raycluster_validates_against_kuberay_v1_7_crd(name, raycluster_schema):
    rc = manifests.raycluster(VARIANTS[name])
    jsonschema.Draft7Validator(raycluster_schema).validate(rc)
    # the pod templates are real PodSpecs: validate them strictly with the Kubernetes schemas too
    groups = [rc["spec"]["headGroupSpec"], *rc["spec"]["workerGroupSpecs"]]
    for g in groups:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", **g["template"]["metadata"]}, "spec": g["template"]["spec"]}
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def test_the_crd_schema_rejects_a_broken_raycluster(raycluster_schema):
    rc = manifests.raycluster(VARIANTS["b200-standard-spot"])
    rc["spec"]["workerGroupSpecs"][0]["replicas"] = "two"
    del rc["spec"]["headGroupSpec"]["template"]
    errors = list(jsonschema.Draft7Validator(raycluster_schema).iter_errors(rc))
    assert len(errors) >= 2


@pytest.mark.parametrize("name", VARIANTS)
def test_core_objects_validate_with_kubernetes_validate(name):
    cfg = VARIANTS[name]
    core = [o for o in manifests.all_objects(cfg) + manifests.secrets(cfg) if o["apiVersion"] in ("v1", "apps/v1")]
    assert {o["kind"] for o in core} >= {"ServiceAccount"}
    for obj in core:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_kubernetes_validate_catches_a_typo():
    sa = manifests.service_account(VARIANTS["b200-standard-spot"])
    sa["metadata"]["lables"] = {"a": "b"}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(sa, K8S_VERSION, strict=True)


def test_worker_pods_have_ten_nics_matching_the_network_objects():
    cfg = VARIANTS["b200-standard-spot"]
    rc = manifests.raycluster(cfg)
    ann = rc["spec"]["workerGroupSpecs"][0]["template"]["metadata"]["annotations"]
    assert ann["networking.gke.io/default-interface"] == "eth0"
    nics = json.loads(ann["networking.gke.io/interfaces"])
    assert [n["interfaceName"] for n in nics] == [f"eth{i}" for i in range(10)]
    assert [n["network"] for n in nics] == ["default", "gvnic-1"] + [f"rdma-{i}" for i in range(8)]
    nets = manifests.network_objects(cfg)
    networks = {o["metadata"]["name"]: o for o in nets if o["kind"] == "Network"}
    params = {o["metadata"]["name"]: o for o in nets if o["kind"] == "GKENetworkParamSet"}
    assert set(networks) == set(params) == {n["network"] for n in nics} - {"default"}
    assert params["gvnic-1"]["spec"]["deviceMode"] == "NetDevice"
    assert {params[f"rdma-{i}"]["spec"]["vpcSubnet"] for i in range(8)} == {f"nbtools-b200-rdma-sub-{i}" for i in range(8)}
    assert all(p["spec"]["deviceMode"] == "RDMA" for n, p in params.items() if n.startswith("rdma"))


@pytest.mark.parametrize(("name", "tuner"), [("b200-standard-spot", "tuner_config_a4.txtpb"), ("h200-reservation-helm", "tuner_config_a3u.txtpb")])
def test_worker_env_image_version_and_mounts_follow_the_config(name, tuner):
    cfg = VARIANTS[name]
    rc = manifests.raycluster(cfg)
    assert rc["spec"]["rayVersion"] == cfg.images.resolved_ray_version
    w = rc["spec"]["workerGroupSpecs"][0]
    spec = w["template"]["spec"]
    c = spec["containers"][0]
    assert c["image"] == cfg.images.resolved_image
    env = {e["name"]: e for e in c["env"]}
    # issue 14 item 12: NCCL/gIB variables live once, in the job's runtime_env (which appends to LD_LIBRARY_PATH);
    # a pod-level LD_LIBRARY_PATH replaced the image's, dropping the paths NeMo-RL's image puts there
    assert not [n for n in env if n.startswith(("NCCL_", "LD_LIBRARY_PATH"))]
    assert nbtools.launch.runtime_env.env_vars(cfg)["NCCL_TUNER_CONFIG_PATH"].endswith(tuner)
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf-secret", "key": "hf_api_token"}
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "8" == c["resources"]["requests"]["nvidia.com/gpu"]
    assert spec["nodeSelector"]["cloud.google.com/gke-accelerator"] == cfg.cluster.gpu_type
    assert w["replicas"] == cfg.cluster.worker_replicas
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols[mounts["/usr/local/nvidia"]]["hostPath"]["path"] == "/home/kubernetes/bin/nvidia"
    assert vols[mounts["/usr/local/gib"]]["hostPath"]["path"] == "/home/kubernetes/bin/gib"
    assert vols[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    assert vols[mounts["/data"]]["persistentVolumeClaim"]["claimName"] == f"{cfg.cluster.name}-gcsfuse-pvc"
    assert w["template"]["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"
    if name.startswith("h200"):
        assert env["WANDB_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "wandb-secret", "key": "api_key"}
    assert "command" not in c, "KubeRay must generate the ray start command (no override)"


@pytest.mark.parametrize("name", VARIANTS)
def test_stall_evidence_can_read_stacks_on_gke(name):
    """Issue 44: the evidence bundle's py-spy dumps need profiling on at the head and SYS_PTRACE in every Ray pod
    (Ray docs: profiling "Enabling dashboard profiling"; cluster/kubernetes/k8s-ecosystem/pyspy)."""
    rc = manifests.raycluster(VARIANTS[name])
    head = rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert {"name": "RAY_DASHBOARD_ENABLE_PROFILING", "value": "1"} in head["env"]
    for g in [rc["spec"]["headGroupSpec"], *rc["spec"]["workerGroupSpecs"]]:
        for c in g["template"]["spec"]["containers"]:
            assert "SYS_PTRACE" in c["securityContext"]["capabilities"]["add"], (g.get("groupName", "head"), c["name"])
    # the committed manifests carry them too (what `kubectl apply -f manifests/` gets)
    for path in (ROOT / "manifests").glob("*.yaml"):
        text = path.read_text()
        assert "RAY_DASHBOARD_ENABLE_PROFILING" in text and "SYS_PTRACE" in text, path.name


def test_the_pod_schema_rejects_a_misspelt_capability():
    """The PodSpec check in the CRD test is strict enough to catch a broken securityContext."""
    rc = manifests.raycluster(VARIANTS["b200-standard-spot"])
    spec = rc["spec"]["headGroupSpec"]["template"]["spec"]
    spec["containers"][0]["securityContext"] = {"capabilities": {"added": ["SYS_PTRACE"]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": spec},
                                     K8S_VERSION, strict=True)


def test_autopilot_workers_select_gpu_count_and_spot():
    sel = manifests.raycluster(VARIANTS["b200-autopilot"])["spec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"]
    assert sel == {"cloud.google.com/gke-accelerator": "nvidia-b200", "cloud.google.com/gke-accelerator-count": "8",
                   "cloud.google.com/gke-spot": "true"}
    assert all(o["kind"] != "DaemonSet" for o in manifests.all_objects(VARIANTS["b200-autopilot"]))


def test_gcsfuse_pv_uses_tutorial_002_mount_options():
    text = TUTORIAL_002.read_text()
    block = text.split("mountOptions:", 1)[1].split("csi:", 1)[0]
    expected = re.findall(r"^\s*-\s*(\S+)\s*$", block, re.M)
    assert len(expected) == 11
    pv, pvc = manifests.storage_objects(VARIANTS["b200-standard-spot"])
    assert pv["spec"]["mountOptions"] == expected
    assert pv["spec"]["csi"]["volumeHandle"] == "my-gcp-project-nemo-rl"
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"


def test_lustre_pv_points_at_the_instance():
    pv, pvc = manifests.storage_objects(VARIANTS["lustre"])
    assert pv["spec"]["csi"] == {"driver": "lustre.csi.storage.gke.io", "volumeHandle": "my-gcp-project/us-central1-b/lfs",
                                 "volumeAttributes": {"ip": "10.1.2.3", "filesystem": "lustrefs"}}
    assert pvc["spec"]["storageClassName"] == ""


def test_gsa_annotation_only_when_configured():
    assert "annotations" not in manifests.service_account(VARIANTS["b200-standard-spot"])["metadata"]
    sa = manifests.service_account(VARIANTS["no-storage-gsa"])
    assert sa["metadata"]["annotations"] == {"iam.gke.io/gcp-service-account": "ray@p.iam.gserviceaccount.com"}
    rc = manifests.raycluster(VARIANTS["no-storage-gsa"])
    assert all(v["name"] != "data" for v in rc["spec"]["headGroupSpec"]["template"]["spec"]["volumes"])


def test_secret_values_exist_only_when_revealed(monkeypatch):
    sentinel = "hf_SENTINELsecretvalue0123456789"
    monkeypatch.setenv("HF_TOKEN", sentinel)
    cfg = VARIANTS["b200-standard-spot"]
    shown = manifests.to_yaml(manifests.all_objects(cfg) + manifests.secrets(cfg)) + manifests.render(cfg)
    assert sentinel not in shown and base64.b64encode(sentinel.encode()).decode() not in shown
    assert "<from $HF_TOKEN>" in manifests.to_yaml(manifests.secrets(cfg))
    real = manifests.secrets(cfg, reveal=True)[0]
    assert base64.b64decode(real["data"]["hf_api_token"]).decode() == sentinel
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(nbtools.errors.NotFoundError, match="export HF_TOKEN"):
        manifests.secrets(cfg, reveal=True)


def test_to_yaml_round_trips():
    objs = manifests.all_objects(VARIANTS["h200-reservation-helm"])
    assert list(yaml.safe_load_all(manifests.to_yaml(objs))) == objs


def test_committed_manifests_match_a_fresh_render(tmp_path):
    """manifests/ is generated: if this fails, run `make manifests` and commit the result."""
    written = manifests.write(tmp_path, GKE_EXPERIMENTS)
    assert len(written) == len(GKE_EXPERIMENTS) >= 2
    for p in written:
        committed = ROOT / "manifests" / p.name
        assert committed.exists(), f"{committed} missing: run `make manifests`"
        assert committed.read_text() == p.read_text(), f"{committed} is stale: run `make manifests`"


@pytest.mark.slow  # a process per experiment
def test_module_cli_writes_the_same_files(tmp_path):
    r = subprocess.run([sys.executable, "-m", "nbtools.manifests", "--write", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, check=True)
    assert "wrote" in r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (ROOT / "manifests").glob("*.yaml"))


@pytest.mark.parametrize("name", ["b200-standard-spot", "h200-reservation-helm"])
def test_nccl_installer_feeds_the_host_paths_the_workers_mount(name):
    # The installer is Google's published manifest (container-engine-accelerators@2da1c92f, copied to tests/assets),
    # applied by URL; the workers must mount the host directories it writes and run on a GPU type it targets.
    import yaml

    cfg = VARIANTS[name]
    asset = ROOT / "tests" / "assets" / "container-engine-accelerators" / "gpudirect-rdma" / "nccl-rdma-installer.yaml"
    ds = yaml.safe_load(asset.read_text())
    terms = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert cfg.cluster.gpu_type in terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
    installed = {v["hostPath"]["path"] for v in ds["spec"]["template"]["spec"]["volumes"]}
    worker = manifests.raycluster(cfg)["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    mounted = {v["hostPath"]["path"] for v in worker["volumes"] if "hostPath" in v}
    assert all(any(p == m or p.startswith(m + "/") for m in mounted) for p in installed), (installed, mounted)


@pytest.mark.parametrize("name", ["tutorial-002-verl-qwen2.5-32b", "gke-b200-verl"])
def test_ray_session_dirs_are_emptydirs_as_in_tutorial_002(name):
    """#42 left: tutorial 002's RayCluster keeps Ray's /tmp on pod emptyDirs (head /tmp/ray, workers /tmp), so the
    session logs outlive a restart of the Ray container; nbtools' pods wrote them to the container's writable layer."""
    rc = manifests.raycluster(nbtools.config.load(ROOT / "experiments" / f"{name}.yaml"))
    for group, path in ((rc["spec"]["headGroupSpec"], "/tmp/ray"), (rc["spec"]["workerGroupSpecs"][0], "/tmp")):
        spec = group["template"]["spec"]
        mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
        assert {v["name"]: v for v in spec["volumes"]}[mounts[path]] == {"name": mounts[path], "emptyDir": {}}
