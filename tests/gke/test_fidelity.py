"""Issue 14, GKE side: teardown order and keep-going, explicit driver and MTU, Google's installer at a pinned ref, and
checks that read the live state. Plans are applied (and their scripts run) against the gcloud/kubectl/helm TEST
DOUBLE of tests/doubles/sim_shims.py, the one the simulated GKE uses: the Kubernetes API double behind its kubectl, the GCS
emulator behind its `gcloud storage`, no Ray head. It refuses what GCP refuses (a non-empty bucket, a network still
used by subnets, a name that exists) and records every call."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from sim_gke import SimGke
from sim_shims import inject_failure, load_kubeconfig, locked_state

import nbtools
from nbtools.gke import Plan, PlanIncompleteError, StepFailedError

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "tests" / "assets" / "container-engine-accelerators" / "gpudirect-rdma"
PRE = "nbtools-b200"
PROJECT = "my-gcp-project"
BUCKET = "my-gcp-project-nemo-rl"
CTX = "gke_my-gcp-project_us-central1_nbtools-b200"


def _cfg(name="gke-b200-gemma3-1b.yaml", **over):
    cfg = nbtools.config.load(ROOT / "experiments" / name, backend="gke")
    return cfg.replace(**over) if over else cfg


@pytest.fixture(autouse=True)
def _runs(tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("PROJECT_NUMBER", "123456")  # the plan's one look-up, answered without gcloud


def _secret_key() -> str:
    """The key under which the experiment's Secret holds the HF token."""
    return next(key for _, name, key, _ in nbtools.manifests.secret_specs(_cfg()) if name == "hf-secret")


class Cloud:
    """The double's world as ``kind:name`` keys (what a test compares), its recorded calls, and ways to make it."""

    def __init__(self, sim: SimGke):
        self.sim = sim

    def tool(self, *argv: str, stdin: str | None = None) -> None:
        r = self.sim.tool(*argv, stdin=stdin)
        assert r.returncode == 0, (argv, r.stderr)

    def world(self, cfg, *, objects: bool = True) -> None:
        """Everything the provisioning plan made, plus a RayCluster and (by default) a bucket that holds a run."""
        p, reg = f"--project={PROJECT}", f"--region={cfg.gcp.region}"
        for net in ("gvnic-net", "rdma-net"):
            self.tool("gcloud", "compute", "networks", "create", f"{PRE}-{net}", p, "--subnet-mode=custom")
        self.tool("gcloud", "compute", "networks", "subnets", "create", f"{PRE}-gvnic-sub", p, reg,
                  f"--network={PRE}-gvnic-net", "--range=10.0.0.0/16")
        for i in range(8):
            self.tool("gcloud", "compute", "networks", "subnets", "create", f"{PRE}-rdma-sub-{i}", p, reg,
                      f"--network={PRE}-rdma-net", f"--range=10.{i + 1}.0.0/16")
        self.tool("gcloud", "compute", "firewall-rules", "create", f"{PRE}-gvnic-internal", p, f"--network={PRE}-gvnic-net")
        self.cluster(cfg)
        self.tool("gcloud", "storage", "buckets", "create", f"gs://{BUCKET}", p, f"--location={cfg.gcp.region}")
        member = nbtools.gke.wi_member(cfg).replace("${PROJECT_NUMBER}", "123456")
        self.tool("gcloud", "storage", "buckets", "add-iam-policy-binding", f"gs://{BUCKET}", p, f"--member={member}",
                  "--role=roles/storage.objectUser")
        self.tool("kubectl", f"--context={CTX}", "apply", "-f", "-", stdin=yaml.safe_dump(nbtools.manifests.raycluster(cfg)))
        self.secret("old-token")
        if objects:
            self.sim.gcs.fs.pipe(f"{BUCKET}/checkpoints/step_1/config.yaml", b"a run")

    def cluster(self, cfg, *, pool: bool = True) -> None:
        """The GKE cluster (and its GPU pool), and a kubeconfig context for it."""
        p, loc = f"--project={PROJECT}", f"--location={cfg.gcp.region}"
        self.tool("gcloud", "container", "clusters", "create", cfg.cluster.name, p, loc)
        if pool:
            self.tool("gcloud", "container", "node-pools", "create", cfg.cluster.node_pool, f"--cluster={cfg.cluster.name}",
                      p, loc)
        self.sim.write_credentials(CTX)

    def secret(self, token: str) -> None:
        doc = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-secret"},
               "data": {_secret_key(): base64.b64encode(token.encode()).decode()}}
        self.tool("kubectl", f"--context={CTX}", "apply", "-f", "-", stdin=yaml.safe_dump(doc))

    def state(self) -> dict[str, str]:
        """What exists now, as ``kind:name`` -> value (a node pool's status, a Secret's token, "ok")."""
        g = self.sim.shim_state().get("gcloud", {})
        res = {f"{kind}:{v['name']}": v.get("status", "ok") for key, kind in (
            ("networks", "network"), ("subnets", "subnet"), ("firewalls", "firewall"), ("clusters", "cluster"),
            ("node_pools", "nodepool")) for v in g.get(key, {}).values()}
        for target, bindings in g.get("bucket_iam", {}).items():
            res.update({f"iam:{target}:{m}": "bound" for b in bindings for m in b["members"]})
        for b in self.sim.gcs.fs.ls("", detail=False):
            res[f"bucket:{b.strip('/')}"] = "ok"
            if self.sim.gcs.fs.find(b.strip("/")):
                res[f"objects:{b.strip('/')}"] = "ok"
        res.update({f"context:{c['name']}": "ok" for c in load_kubeconfig(self.sim.kubeconfig).get("contexts") or []})
        for name, obj in self.sim.kube.objects("/api/v1/namespaces/default/secrets").items():
            res[f"secrets:{name}"] = base64.b64decode(obj.get("data", {}).get(_secret_key(), "")).decode()
        res.update({f"rayclusters:{n}": "ok" for n in self.sim.kube.objects("/apis/ray.io/v1/namespaces/default/rayclusters")})
        return res

    def fail(self, command: str) -> None:
        inject_failure(self.sim.shims_dir / "state.json", command)

    def set_status(self, node_pool: str, status: str) -> None:
        with locked_state(self.sim.shims_dir / "state.json") as st:
            next(v for v in st["gcloud"]["node_pools"].values() if v["name"] == node_pool)["status"] = status

    def env(self) -> dict[str, str]:
        """The environment of a script run against the double (no HF_TOKEN: a test sets one when it wants one)."""
        import os

        env = {**os.environ, **self.sim.env(), "PROJECT_NUMBER": "123456"}
        env.pop("HF_TOKEN", None)
        return env

    def calls(self, verb: str) -> list[str]:
        """``tool argv...`` of every recorded call with ``verb`` among its words, oldest first."""
        lines = [" ".join([c["tool"], *c["argv"]]) for c in self.sim.commands()]
        return [line for line in lines if f" {verb} " in f" {line} "]


@pytest.fixture
def cloud(tmp_path, monkeypatch):
    """The gcloud/kubectl/helm double on PATH (with its API double and GCS emulator), nothing in it yet."""
    with SimGke(tmp_path / "sim", ray=False, mirror=False, isolate=False) as sim:
        for k, v in sim.env().items():
            # the emulator sets STORAGE_EMULATOR_HOST itself and puts it back when it stops; monkeypatch's undo runs
            # after that stop and would bring back the stopped emulator's address for every later test
            if k != "STORAGE_EMULATOR_HOST":
                monkeypatch.setenv(k, v)
        assert os.environ["STORAGE_EMULATOR_HOST"] == sim.gcs.url
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield Cloud(sim)


# -- item 1: teardown that stops the billing ------------------------------------------------------------------

def test_destroy_plan_goes_compute_first_data_last():
    # Issue 14 item 1: the old plan was the provisioning plan reversed, so `gcloud storage buckets delete` came before
    # the GPU pool; GCS refuses a non-empty bucket (gcloud 528 `storage buckets delete --help`), the plan stopped.
    names = [s.name for s in nbtools.gke.destroy_plan(_cfg()).steps]
    assert names[:3] == ["raycluster", "gpu-pool", "cluster"]
    assert names[-1] == "bucket" and names.index("bucket-iam") > names.index("gvnic-net") > names.index("cluster")
    assert max(names.index(f"rdma-subnet-{i}") for i in range(8)) < names.index("rdma-net")
    ap = [s.name for s in nbtools.gke.destroy_plan(_cfg(**{"cluster.mode": "autopilot"})).steps]
    assert ap[:2] == ["raycluster", "cluster"] and "gpu-pool" not in ap
    d = nbtools.gke.destroy_plan(_cfg())
    assert d.keep_going and all(s.absent and s.check for s in d.steps)
    # every existence check is a list (empty = gone) rather than a describe (whose failure said "gone" on auth errors)
    assert all(s.check[:1] == ("kubectl",) or "list" in s.check or "get-iam-policy" in s.check for s in d.steps)
    assert d["bucket"].command[:4] == ("gcloud", "storage", "buckets", "delete"), "deleted only when empty"


@pytest.mark.slow  # a whole world made and destroyed through the double (~60 calls)
def test_destroy_apply_survives_a_refused_bucket_delete_and_reports_what_is_left(cloud):
    cfg = _cfg()
    cloud.world(cfg)
    kept = nbtools.gke.destroy_plan(cfg).apply(dry_run=False, progress=False)  # the refused bucket is kept, not failed
    res = cloud.state()
    assert set(res) == {f"bucket:{BUCKET}", f"objects:{BUCKET}"}, "everything that bills is gone; the run's data is kept"
    deleted = [c.split()[1:4] for c in cloud.calls("delete")]
    assert deleted[:3] == [[f"--context={CTX}", "--namespace=default", "delete"], ["container", "node-pools", "delete"],
                           ["container", "clusters", "delete"]]
    status = kept.set_index("step")
    assert kept.attrs["kept"] == ["bucket"] and status.loc["bucket", "now"] == "still there"
    assert status.loc["bucket", "status"].startswith("kept:") and "delete_bucket='" in status.loc["bucket", "status"]
    assert status.loc["gpu-pool", "now"] == "gone"
    # asked for by name, the bucket goes with its objects; the re-run skips what is already gone
    out = nbtools.gke.destroy_plan(cfg, delete_bucket=BUCKET).apply(dry_run=False, progress=False)
    assert cloud.state() == {} and (out["now"] == "gone").all()
    assert set(out.set_index("step").drop("bucket")["status"]) == {"already gone"}
    with pytest.raises(nbtools.errors.ConfigError, match="not this experiment's bucket"):
        nbtools.gke.destroy_plan(cfg, delete_bucket="someone-elses-bucket")


@pytest.mark.slow  # a whole world made and destroyed through the double (~60 calls)
def test_a_failed_step_skips_only_the_steps_that_need_it(cloud):
    cfg = _cfg()
    cloud.world(cfg, objects=False)
    cloud.fail(f"gcloud container clusters delete {cfg.cluster.name}")
    with pytest.raises(PlanIncompleteError) as ei:
        nbtools.gke.destroy_plan(cfg).apply(dry_run=False, progress=False)
    status = ei.value.results.set_index("step")["status"]
    assert status["gpu-pool"] == "done" and status["cluster"].startswith("failed")
    assert status["credentials"].startswith("skipped (needs cluster")  # the context stays while the cluster does
    assert status["rdma-subnet-3"].startswith("skipped (needs") and status["rdma-net"].startswith("skipped (needs")
    assert status["gvnic-firewall"] == "done" and status["bucket"] == "done" and status["bucket-iam"] == "done"
    assert {"cluster", "credentials", "rdma-net", "gvnic-net"} <= set(ei.value.remaining["step"])


@pytest.mark.slow  # a whole world made and destroyed through the double (~60 calls)
def test_destroy_script_keeps_going_past_a_refused_bucket_and_deletes_the_raycluster_first(cloud, tmp_path):
    cfg = _cfg()
    cloud.world(cfg)
    env = cloud.env()
    script = tmp_path / "destroy.sh"
    script.write_text(nbtools.gke.destroy_plan(cfg).to_script())
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, env={**env, "PROJECT_NUMBER": "123456"})
    assert r.returncode == 0, r.stdout + r.stderr  # everything that bills is gone; the data is kept on purpose
    assert "kept bucket: refused, so it stays" in r.stdout and "--delete-bucket" in r.stdout
    assert "kept on purpose: bucket" in r.stdout and "still there" not in r.stdout
    assert set(cloud.state()) == {f"bucket:{BUCKET}", f"objects:{BUCKET}"}
    first = cloud.calls("delete")[0]
    assert first.startswith("kubectl") and "rayclusters.ray.io/nbtools-b200" in first
    again = subprocess.run(["bash", str(script)], capture_output=True, text=True, env={**env, "PROJECT_NUMBER": "123456"})
    assert "skip gpu-pool: gone with cluster" in again.stdout and "skip rdma-net: already gone" in again.stdout


def test_cli_destroy_script_lists_compute_before_data(capfd):
    rc = nbtools.cli.main(["plan", str(ROOT / "experiments" / "gke-b200-gemma3-1b.yaml"), "--destroy", "--script"])
    text = capfd.readouterr().out
    assert rc == 0 and text.index("delete rayclusters.ray.io/") < text.index("node-pools delete") < text.index(
        "clusters delete") < text.index("networks delete") < text.index("buckets delete")
    assert "set -e" not in text.split("set -uo pipefail")[0] + text.split("set -uo pipefail")[1].split("\n", 1)[0]


# -- items 2 and 3: the GPU driver and the gVNIC MTU are explicit -----------------------------------------------

def test_gpu_pool_installs_the_driver_and_the_gvnic_vpc_has_the_jumbo_mtu():
    # gcloud 528 `container node-pools create --help`, --accelerator: "If you omit the flag `gpu-driver-version`,
    # [disabled] is the default option" (no driver, no GPU for pods). Google's A3 Ultra blueprint
    # (GoogleCloudPlatform/cluster-toolkit, gke-a3-ultragpu pool) installs `gpu_driver_version = "LATEST"`.
    p = nbtools.gke.plan(_cfg())
    assert "--accelerator=type=nvidia-b200,count=8,gpu-driver-version=latest" in p["gpu-pool"].command
    q = nbtools.gke.plan(_cfg(**{"cluster.gpu_driver_version": "default"}))
    assert "--accelerator=type=nvidia-b200,count=8,gpu-driver-version=default" in q["gpu-pool"].command
    # gcloud 528 `compute networks create --help`: "--mtu ... Default value is 1460 bytes ... maximum 8896";
    # https://cloud.google.com/vpc/docs/mtu: 8896 is the largest; Google's A4/A3 Ultra gVNIC VPC uses it.
    assert "--mtu=8896" in p["gvnic-net"].command and not any(a.startswith("--mtu") for a in p["rdma-net"].command)
    assert "--mtu=1500" in nbtools.gke.plan(_cfg(**{"cluster.gvnic_mtu": 1500}))["gvnic-net"].command
    with pytest.raises(nbtools.errors.ConfigError, match=r"(?s)(?=.*gvnic_mtu: 9000.*1300\.\.8896)(?=.*gpu_driver_version: 'disabled')"):
        _cfg(**{"cluster.gvnic_mtu": 9000, "cluster.gpu_driver_version": "disabled"})


# -- items 7 and 8: Google's installer, at a pinned ref, checked where it is deployed ---------------------------

@pytest.mark.parametrize("mode,asset", [("standard", "nccl-rdma-installer.yaml"),
                                        ("autopilot", "nccl-rdma-installer-autopilot.yaml")])
def test_nccl_installer_is_the_published_manifest_checked_in_its_own_namespace(mode, asset):
    cfg = _cfg(**{"cluster.mode": mode})
    step = nbtools.gke.plan(cfg)["nccl-installer"]
    url = ("https://raw.githubusercontent.com/GoogleCloudPlatform/container-engine-accelerators/"
           f"2da1c92ff7bd772a2c833710bb6c21dcfe6dfaae/gpudirect-rdma/{asset}")
    assert url in step.command[-1] and nbtools.manifests.nccl_installer_url(cfg) == url
    # the upstream manifest (tests/assets copy at that commit) says where the DaemonSet lives: the check looks there
    ds = next(d for d in yaml.safe_load_all((ASSETS / asset).read_text()) if d["kind"] == "DaemonSet")
    assert f"--namespace={ds['metadata']['namespace']}" in step.check
    assert f"daemonsets.apps/{ds['metadata']['name']}" in step.check and step.expect == (cfg.cluster.nccl_installer_ref,)
    assert ds["metadata"]["namespace"] == ("kube-system" if mode == "standard" else "rdma-system")
    repinned = nbtools.gke.plan(_cfg(**{"cluster.mode": mode, "cluster.nccl_installer_ref": "0c62442930784b"}))
    assert "/0c62442930784b/" in repinned["nccl-installer"].command[-1]


def test_no_hand_copy_of_the_installer_and_workers_mount_what_it_installs():
    cfg = _cfg()
    assert not [o for o in nbtools.manifests.all_objects(cfg) if o["kind"] == "DaemonSet"]
    assert "kubectl apply -f https://raw.githubusercontent.com/GoogleCloudPlatform/container-engine-accelerators/" in (
        nbtools.manifests.render(cfg))
    ds = yaml.safe_load((ASSETS / "nccl-rdma-installer.yaml").read_text())
    written = {v["hostPath"]["path"] for v in ds["spec"]["template"]["spec"]["volumes"]}
    worker = nbtools.manifests.raycluster(cfg)["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    mounted = {v["hostPath"]["path"] for v in worker["volumes"] if "hostPath" in v}
    assert all(any(w == m or w.startswith(m + "/") for m in mounted) for w in written), (written, mounted)
    with pytest.raises(nbtools.errors.ConfigError, match="does not pin the installer"):
        _cfg(**{"cluster.nccl_installer_ref": "master"})


# -- item 13: checks read the state; credentials and Secrets refresh --------------------------------------------

def test_a_node_pool_in_error_is_not_done_and_the_failure_names_the_fix(cloud, tmp_path):
    cfg = _cfg()
    cloud.cluster(cfg)
    cloud.set_status(cfg.cluster.node_pool, "ERROR")
    plan = Plan("provision", [nbtools.gke.plan(cfg)["gpu-pool"]], tmp_path / "s.json")
    with pytest.raises(StepFailedError, match=r"(?s)Already exists.*the check found 'ERROR'.*node-pools delete gpu-pool"):
        plan.apply(dry_run=False, progress=False)
    cloud.set_status(cfg.cluster.node_pool, "RUNNING")
    assert list(plan.apply(dry_run=False, progress=False)["status"]) == ["already done"]


def test_credentials_are_always_refreshed_and_a_rotated_token_reaches_the_secret(cloud, tmp_path, monkeypatch):
    cfg = _cfg()
    cloud.cluster(cfg, pool=False)  # its context is stale: a test double's server either way
    cloud.secret("old-token")
    p = nbtools.gke.plan(cfg)
    assert p["credentials"].check is None, "a context of the same name may point at a deleted cluster"
    plan = Plan("provision", [p["credentials"], p["secret-hf-secret"]], tmp_path / "s.json")
    monkeypatch.setenv("HF_TOKEN", "hf_rotated")
    out = plan.apply(dry_run=False, progress=False)
    assert list(out["status"]) == ["done", "updated"] and cloud.state()["secrets:hf-secret"] == "hf_rotated"
    assert len(cloud.calls("get-credentials")) == 1
    monkeypatch.delenv("HF_TOKEN")
    out = plan.apply(dry_run=False, progress=False)
    assert list(out["status"]) == ["done", "kept (no new value in the environment)"]
    assert cloud.state()["secrets:hf-secret"] == "hf_rotated"
    assert base64.b64encode(b"hf_rotated").decode() not in (tmp_path / "s.json").read_text()


def test_provision_script_refreshes_secrets_only_with_a_value(cloud, tmp_path):
    cfg = _cfg()
    cloud.cluster(cfg, pool=False)
    cloud.secret("old")
    env = cloud.env()
    plan = Plan("provision", [nbtools.gke.plan(cfg)["secret-hf-secret"]], tmp_path / "s.json")
    script = tmp_path / "p.sh"
    script.write_text(plan.to_script())
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "keep secret-hf-secret: $HF_TOKEN is not set" in r.stdout
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, env={**env, "HF_TOKEN": "hf_new"})
    assert r.returncode == 0 and cloud.state()["secrets:hf-secret"] == "hf_new"


# -- item 12: the NCCL environment is set once, and LD_LIBRARY_PATH is appended to -----------------------------

def test_nccl_env_is_set_once_in_the_job_and_keeps_the_images_library_path(monkeypatch):
    # GKE's gIB guidance (the gIB image's /usr/local/gib/scripts/set_nccl_env.sh, as GKE's NeMo RL recipe and the
    # container-engine-accelerators nccl-test-a4.yaml use it): NCCL_NET=gIB + RoCE classes + the tuner file; gIB's
    # libraries in /usr/local/gib/lib64 and /usr/local/nvidia/lib64 (the installer copies them to both).
    cfg = _cfg()
    job = nbtools.launch.runtime_env.env_vars(cfg)
    assert {k: job[k] for k in ("NCCL_NET", "NCCL_IB_TC", "NCCL_IB_FIFO_TC", "NCCL_CROSS_NIC")} == {
        "NCCL_NET": "gIB", "NCCL_IB_TC": "52", "NCCL_IB_FIFO_TC": "84", "NCCL_CROSS_NIC": "0"}
    assert "NCCL_NET_PLUGIN" not in job and "NCCL_IB_GID_INDEX" not in job and "NCCL_SOCKET_IFNAME" not in job
    for spec in (nbtools.manifests.raycluster(cfg)["spec"]["headGroupSpec"],
                 *nbtools.manifests.raycluster(cfg)["spec"]["workerGroupSpecs"]):
        env = {e["name"] for c in spec["template"]["spec"]["containers"] for e in c.get("env", [])}
        assert not {n for n in env if n.startswith("NCCL_") or n == "LD_LIBRARY_PATH"}, "set once: in the job env"
    # Ray applies runtime_env env_vars with its own expansion of ${VAR} against the process's value (ray
    # python/ray/_private/utils.py update_envs, ray-project/ray#36187): the image's paths stay, gIB's are appended
    from ray._private.utils import update_envs

    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/cuda/lib64:/opt/nemo_rl_venv/lib")
    update_envs({"LD_LIBRARY_PATH": job["LD_LIBRARY_PATH"]})
    import os

    assert os.environ["LD_LIBRARY_PATH"].split(":") == [
        "/usr/local/cuda/lib64", "/opt/nemo_rl_venv/lib", "/usr/local/gib/lib64", "/usr/local/nvidia/lib64"]
    verl = nbtools.launch.runtime_env.env_vars(_cfg(**{"trainer.kind": "verl", "data.dataset": "gsm8k"}))
    assert verl["LD_LIBRARY_PATH"] == job["LD_LIBRARY_PATH"], "verl no longer replaces the image's LD_LIBRARY_PATH"
