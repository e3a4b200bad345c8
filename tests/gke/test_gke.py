"""nbtools.gke: the provisioning plan. Flags are checked against the installed gcloud's --help (offline);
plan mechanics (checks, stop at first failure, resume, state file, script idempotence) run real subprocesses."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

import nbtools
from nbtools.gke import Plan, Step, StepFailedError

ROOT = Path(__file__).resolve().parents[2]

# Top-level keys of helm-chart/kuberay-operator/values.yaml at ray-project/kuberay v1.7.0 (read via the source
# index; the chart is not vendored). A --set key outside this tree is silently ignored by Helm.
KUBERAY_CHART_VALUES = {
    "nameOverride", "fullnameOverride", "componentOverride", "replicas", "image.repository", "image.tag",
    "image.pullPolicy", "imagePullSecrets", "nodeSelector", "priorityClassName", "labels", "annotations", "affinity",
    "tolerations", "serviceAccount.create", "serviceAccount.name", "batchScheduler.enabled", "batchScheduler.name",
    "featureGates", "metrics.enabled", "leaderElectionEnabled", "reconcileConcurrency", "rbacEnable",
    "singleNamespaceInstall", "env", "resources", "service.type", "service.port",
}


def _cfg(name="gke-b200-gemma3-1b.yaml", **over):
    cfg = nbtools.config.load(ROOT / "experiments" / name, backend="gke")
    return cfg.replace(**over) if over else cfg


@pytest.fixture(autouse=True)
def _runs(tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))


VARIANTS = {
    "b200-standard-spot": lambda: _cfg(),
    "h200-reservation-helm": lambda: _cfg("gke-h200-qwen.yaml"),
    "autopilot": lambda: _cfg(**{"cluster.mode": "autopilot"}),
    "autopilot-helm": lambda: _cfg(**{"cluster.mode": "autopilot", "cluster.kuberay": "helm"}),
    "lustre-on-demand-version": lambda: _cfg(**{"storage.kind": "lustre", "storage.lustre": {"instance": "l", "ip": "10.0.0.9"},
                                                "cluster.provisioning": "on-demand", "cluster.gke_version": "1.33.1-gke.100"}),
    "gsa-known-project-number": lambda: _cfg(**{"gcp.service_account": "ray@p.iam.gserviceaccount.com", "gcp.project_number": "42"}),
}


def _flat(p: Plan) -> str:
    return "\n".join(" ".join(s.command) for s in p.steps)


def test_standard_plan_has_the_tutorial_steps_in_order():
    p = nbtools.gke.plan(_cfg())
    names = [s.name for s in p.steps]
    assert names[:5] == ["enable-apis", "gvnic-net", "gvnic-subnet", "gvnic-firewall", "rdma-net"]
    assert names[5:13] == [f"rdma-subnet-{i}" for i in range(8)]
    assert names[13:] == ["cluster", "credentials", "gpu-pool", "nccl-installer", "network-mapping", "bucket", "ksa",
                          "bucket-iam", "storage", "secret-hf-secret"]
    assert all(isinstance(s.command, tuple) and all(isinstance(a, str) for a in s.command) for s in p.steps)
    assert all(s.check for s in p.steps if s.name != "credentials"), "every step can tell whether it is already done"
    assert p["credentials"].check is None, "get-credentials always runs: a same-named context may be stale"
    cluster = p["cluster"].command
    for flag in ("--enable-dataplane-v2", "--enable-multi-networking", "--addons=GcsFuseCsiDriver,RayOperator",
                 "--workload-pool=my-gcp-project.svc.id.goog", "--location=us-central1"):
        assert flag in cluster
    pool = p["gpu-pool"].command
    assert "--machine-type=a4-highgpu-8g" in pool and "--spot" in pool
    assert "--accelerator=type=nvidia-b200,count=8,gpu-driver-version=latest" in pool
    nics = [a for a in pool if a.startswith("--additional-node-network=")]
    assert nics == ["--additional-node-network=network=nbtools-b200-gvnic-net,subnetwork=nbtools-b200-gvnic-sub"] + [
        f"--additional-node-network=network=nbtools-b200-rdma-net,subnetwork=nbtools-b200-rdma-sub-{i}" for i in range(8)]
    assert "--network-profile=us-central1-b-vpc-roce" in p["rdma-net"].command
    assert [p[f"rdma-subnet-{i}"].command[-1] for i in range(8)] == [f"--range=192.168.{i + 1}.0/24" for i in range(8)]
    assert "--enable-hierarchical-namespace" in p["bucket"].command
    assert "kind: PersistentVolume\n" in p["storage"].stdin and "kind: PersistentVolumeClaim" in p["storage"].stdin
    assert "container-engine-accelerators/" in p["nccl-installer"].command[-1]
    assert p["network-mapping"].stdin.count("kind: Network\n") == 9


def test_autopilot_and_helm_variants():
    ap = nbtools.gke.plan(_cfg(**{"cluster.mode": "autopilot"}))
    assert ap["cluster"].command[:4] == ("gcloud", "container", "clusters", "create-auto")
    assert {"--enable-multi-networking", "--enable-ray-operator"} <= set(ap["cluster"].command)
    assert "gpu-pool" not in [s.name for s in ap.steps]
    aph = nbtools.gke.plan(_cfg(**{"cluster.mode": "autopilot", "cluster.kuberay": "helm"}))
    assert "--enable-ray-operator" not in aph["cluster"].command
    h = nbtools.gke.plan(_cfg("gke-h200-qwen.yaml"))
    assert "--addons=GcsFuseCsiDriver" in h["cluster"].command
    assert {"--reservation-affinity=specific", "--reservation=my-h200-reservation"} <= set(h["gpu-pool"].command)
    helm = h["kuberay-operator"].command
    assert helm[:3] == ("helm", "upgrade", "--install") and "--version=1.7.0" in helm
    sets = [helm[i + 1] for i, a in enumerate(helm) if a == "--set"]
    assert sets == ["image.tag=v1.7.0"]
    for kv in sets:
        assert kv.split("=", 1)[0] in KUBERAY_CHART_VALUES, f"--set {kv}: not a key of the kuberay-operator chart"
        assert not kv.startswith("values."), "the peers' `values.` prefix is silently ignored by Helm"
    assert [s.name for s in h.steps].count("secret-hf-secret") == 1 and "secret-wandb-secret" in [s.name for s in h.steps]


@pytest.fixture(scope="module")
def all_argvs() -> list[tuple[str, ...]]:
    import os

    os.environ.setdefault("NBTOOLS_RUNS_DIR", "/tmp/nbtools-gke-flags")
    argvs = []
    for make in VARIANTS.values():
        p = nbtools.gke.plan(make())
        argvs += [a for s in p.steps for a in (s.command, s.check, s.undo) if a] + list(p.variables.values())
        d = nbtools.gke.destroy_plan(make())
        argvs += [a for s in d.steps for a in (s.command, s.check) if a]
    return argvs


def test_every_gcloud_flag_exists_in_the_installed_gcloud(all_argvs):
    report = nbtools.gke.validate_flags(all_argvs)
    commands = set(report["command"])
    assert {"gcloud container clusters create", "gcloud container clusters create-auto", "gcloud container node-pools create",
            "gcloud compute networks subnets create", "gcloud storage buckets create",
            "gcloud iam service-accounts add-iam-policy-binding", "gcloud projects describe"} <= commands
    assert report["known_command"].all(), report[~report["known_command"]]
    bad = report[~report["ok"]]
    assert bad.empty, f"flags unknown to the installed gcloud:\n{bad.to_string()}"


def test_flag_check_catches_an_unknown_flag_and_the_tutorials_subnet_location():
    report = nbtools.gke.validate_flags([
        ("gcloud", "container", "clusters", "create", "x", "--enable-magic"),
        # tutorial 001 passes --location to `subnets create`; this gcloud only knows --region there
        ("gcloud", "compute", "networks", "subnets", "create", "s", "--location=us-central1"),
        ("gcloud", "container", "clusters", "create", "x", "--num-nodes=1"),
    ])
    assert report.set_index("flag")["ok"].to_dict() == {"--enable-magic": False, "--location": False, "--num-nodes": True}


def test_destroy_plan_is_scoped_to_the_config():
    cfg = _cfg()
    d = nbtools.gke.destroy_plan(cfg)
    assert "enable-apis" not in [s.name for s in d.steps], "APIs are never disabled"
    assert all(s.absent and s.check for s in d.steps)
    names = {"nbtools-b200", "gs://my-gcp-project-nemo-rl", "gke_my-gcp-project_us-central1_nbtools-b200"}
    for s in d.steps:
        text = " ".join(s.command)
        assert any(n in text for n in names), f"{s.name} touches something the config does not name: {text}"
        assert "-r" not in s.command and "--recursive" not in s.command, "destroy keeps bucket contents unless asked"
    assert d["bucket"].command[:4] == ("gcloud", "storage", "buckets", "delete")


def test_dry_run_runs_nothing_and_real_apply_stops_at_the_first_failure_then_resumes(tmp_path):
    log = tmp_path / "log"
    gate = tmp_path / "gate"

    def step(name, cmd, check=None):
        return Step(name, name, ("sh", "-c", f"echo {name} >> {log}; {cmd}"), check=check)

    steps = [
        step("one", f"touch {tmp_path}/one", check=("sh", "-c", f"test -f {tmp_path}/one && echo yes")),
        step("two", f"test -f {gate} || {{ echo 'quota exceeded for nvidia-b200' >&2; exit 3; }}"),
        step("three", "true"),
    ]
    plan = Plan("provision", steps, tmp_path / "state.json")
    dry = plan.apply()
    assert list(dry["status"]) == ["would run"] * 3 and not log.exists()
    with pytest.raises(StepFailedError, match=r"(?s)step 'two' failed \(exit 3\).*quota exceeded.*resumes at 'two'") as ei:
        plan.apply(dry_run=False, progress=False)
    assert ei.value.returncode == 3
    assert log.read_text().split() == ["one", "two"]
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["steps"]["one"]["status"] == "done" and state["steps"]["two"]["status"] == "failed"
    assert list(plan.show()["status"]) == ["done", "failed", "pending"]
    gate.touch()
    out = plan.apply(dry_run=False, progress=False)
    assert list(out["status"]) == ["already done", "done", "done"], "every apply re-checks (a pool may have gone to ERROR)"
    assert log.read_text().split() == ["one", "two", "two", "three"]
    plan.reset()
    again = plan.apply(dry_run=False, progress=False)
    assert list(again["status"]) == ["already done", "done", "done"], "a passing check skips the command"


def test_destroy_invalidates_provision_state(tmp_path):
    marker = tmp_path / "thing"
    mk = Step("thing", "make", ("touch", str(marker)), check=("sh", "-c", f"test ! -f {marker} || echo y"), undo=("rm", str(marker)))
    prov = Plan("provision", [mk], tmp_path / "p.json", invalidates=tmp_path / "d.json")
    import dataclasses

    des = Plan("destroy", [dataclasses.replace(mk, command=mk.undo, undo=None, absent=True)], tmp_path / "d.json",
               invalidates=tmp_path / "p.json")
    prov.apply(dry_run=False, progress=False)
    assert marker.exists()
    assert list(des.apply(dry_run=False, progress=False)["status"]) == ["done"] and not marker.exists()
    assert list(des.apply()["status"]) == ["skipped (done earlier)"] and list(prov.apply()["status"]) == ["would run"]
    assert list(des.apply(dry_run=False, progress=False)["status"]) == ["already gone"]
    assert list(prov.apply(dry_run=False, progress=False)["status"]) == ["done"] and marker.exists()


def test_project_number_is_looked_up_once_and_kept_in_the_state(tmp_path):
    out = tmp_path / "member"
    plan = Plan("provision", [Step("bind", "bind", ("sh", "-c", f'echo "$1" > {out}', "_", "projects/${PROJECT_NUMBER}/x"),
                                   check=("cat", str(out)), expect=("projects/${PROJECT_NUMBER}/x",))],
                tmp_path / "s.json", variables={"PROJECT_NUMBER": ("sh", "-c", "echo 123456")})
    assert '"projects/${PROJECT_NUMBER}/x"' in plan.to_script()
    plan.apply(dry_run=False, progress=False)
    assert out.read_text().strip() == "projects/123456/x"
    plan.reset()
    assert list(plan.apply(dry_run=False, progress=False)["status"]) == ["already done"], "expect lines are resolved too"
    real = nbtools.gke.plan(_cfg()).to_script()
    assert 'EXPECT=("principal://iam.googleapis.com/projects/${PROJECT_NUMBER}/locations/global/' in real
    assert json.loads((tmp_path / "s.json").read_text())["variables"] == {"PROJECT_NUMBER": "123456"}


def test_secret_value_reaches_only_the_command_stdin(tmp_path, monkeypatch):
    sentinel = "hf_SENTINEL0123456789abcdefghij"
    monkeypatch.setenv("HF_TOKEN", sentinel)
    cfg = _cfg()
    real = nbtools.gke.plan(cfg)["secret-hf-secret"]
    import dataclasses

    sink = tmp_path / "applied.yaml"
    step = dataclasses.replace(real, command=("sh", "-c", f"cat > {sink}"), check=None)
    plan = Plan("provision", [step], tmp_path / "state.json")
    shown = plan.show().to_string() + plan.to_script() + repr(step) + nbtools.gke.plan(cfg).to_script()
    assert sentinel not in shown and "<from $HF_TOKEN>" in plan.show().loc[0, "command"]
    plan.apply(dry_run=False, progress=False)
    assert base64.b64encode(sentinel.encode()).decode() in sink.read_text()
    assert sentinel not in (tmp_path / "state.json").read_text()
    script = nbtools.gke.plan(cfg).to_script()
    assert 'printf %s "$HF_TOKEN" | kubectl' in script and "--from-file=hf_api_token=/dev/stdin" in script


def test_to_script_is_valid_bash_and_idempotent(tmp_path):
    script = nbtools.gke.plan(_cfg()).to_script()
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    checked = [s for s in nbtools.gke.plan(_cfg()).steps if s.check and not s.refresh]
    assert script.count("\nif EXPECT=(") == len(checked) and "keep secret-hf-secret" in script
    d = nbtools.gke.destroy_plan(_cfg()).to_script()
    subprocess.run(["bash", "-n"], input=d, text=True, check=True)
    # run a synthetic plan's script twice: the second run only skips
    f = tmp_path / "made"
    plan = Plan("provision", [Step("make", "make a file", ("sh", "-c", f"echo made >> {f}"),
                                   check=("cat", str(f)), expect=("made",))], tmp_path / "s.json")
    path = tmp_path / "plan.sh"
    path.write_text(plan.to_script())
    first = subprocess.run(["bash", str(path)], capture_output=True, text=True, check=True)
    second = subprocess.run(["bash", str(path)], capture_output=True, text=True, check=True)
    assert f.read_text() == "made\n" and "skip make: already done" in second.stdout and "skip" not in first.stdout


def test_plan_needs_a_project():
    cfg = nbtools.config.load(ROOT / "experiments/local.yaml")
    with pytest.raises(nbtools.errors.ConfigError, match="gcp.project"):
        nbtools.gke.plan(cfg)


def test_gke_config_fields_have_defaults_and_feed_the_plan():
    cfg = _cfg()
    c, g = cfg.cluster, cfg.gcp
    assert (c.ksa, c.node_pool, c.head_machine_type, c.gke_version) == ("nbtools-ksa", "gpu-pool", "e2-standard-16", None)
    assert (g.project_number, g.service_account) == ("", None)
    p = nbtools.gke.plan(cfg)
    assert p.variables == {"PROJECT_NUMBER": ("gcloud", "projects", "describe", "my-gcp-project", "--format=value(projectNumber)")}
    assert "projects/${PROJECT_NUMBER}/locations/global/workloadIdentityPools/my-gcp-project.svc.id.goog/subject/ns/default/sa/nbtools-ksa" in " ".join(p["bucket-iam"].command)
    custom = _cfg(**{"cluster.ksa": "ray-ksa", "cluster.node_pool": "b200", "gcp.project_number": "777", "cluster.gke_version": "1.33.2-gke.1"})
    q = nbtools.gke.plan(custom)
    assert not q.variables and "projects/777/" in " ".join(q["bucket-iam"].command) and "/sa/ray-ksa" in " ".join(q["bucket-iam"].command)
    assert q["gpu-pool"].command[4] == "b200" and "--cluster-version=1.33.2-gke.1" in q["cluster"].command
    gsa = nbtools.gke.plan(_cfg(**{"gcp.service_account": "ray@p.iam.gserviceaccount.com"}))
    assert "--member=serviceAccount:ray@p.iam.gserviceaccount.com" in gsa["bucket-iam"].command
    assert "--member=serviceAccount:my-gcp-project.svc.id.goog[default/nbtools-ksa]" in gsa["wi-impersonation"].command


def test_outcome_says_whether_anything_ran(tmp_path):
    """Issue 45: notebook 01's check cell says what the apply did: a dry run (its default) changed nothing."""
    import nbtools

    marker = tmp_path / "made"
    plan = Plan("provision", [Step("make", "make", ("touch", str(marker)), check=("sh", "-c", f"test -f {marker} && echo y")),
                              Step("more", "more", ("true",))], tmp_path / "state.json")
    dry = nbtools.gke.outcome(plan.apply())
    assert dry.dry_run and not marker.exists()
    assert str(dry) == ("dry run: nothing was changed; 2 of 2 steps would run — set APPLY = True (CLI: --apply) to run "
                        "them")
    real = nbtools.gke.outcome(plan.apply(dry_run=False, progress=False))
    assert not real.dry_run and marker.exists() and str(real) == "applied: 2 of 2 steps ran, the others were already done"
    shown = nbtools.gke.outcome(Plan("provision", plan.steps, tmp_path / "s2.json", applicable=False).apply(dry_run=False))
    assert shown.dry_run and str(shown).startswith("shown only: this backend has nothing to provision")
