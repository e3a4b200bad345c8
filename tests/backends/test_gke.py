"""The gke backend (nbtools.backends.gke + nbtools.kube) against tests/doubles/kube_double.py — a Kubernetes API TEST DOUBLE on 127.0.0.1 (no
kube-apiserver can run here) — through the real ``kubernetes`` client and a real kubeconfig file.
The double has no controller: each test plays the KubeRay operator by adding pods and events, and has
``sim_kuberay.KubeRayController.report_status`` write what KubeRay would say about them in the RayCluster's status."""

from __future__ import annotations

import dataclasses
import http.server
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import kuberay_api
import pytest
from kube_double import KubeDouble
from ports import free_port as _free
from sim_kuberay import KubeRayController

import nbtools
from nbtools import kube, manifests
from nbtools.backends._types import fetch_resources
from nbtools.errors import ConflictError, NotFoundError, NotReadyError

ROOT = Path(__file__).resolve().parents[2]
NS, NAME = "default", "nbtools-b200"
kuberay_double, kd = kuberay_api.kuberay_double, kuberay_api.kd  # the shared API double's fixtures
RC = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("HF_TOKEN", "hf_TESTVALUEnotarealtoken000000")
    c = nbtools.config.load(ROOT / "experiments/gke-b200-gemma3-1b.yaml", backend="gke")
    return c.replace(**{"ray.dashboard_port": _free(), "cluster.worker_replicas": 2})


@pytest.fixture
def kc(kd, tmp_path) -> str:
    return str(tmp_path / "kubeconfig")


def _be(cfg, kubeconfig=None):
    return nbtools.backends.get(cfg, kubeconfig=kubeconfig)


def _pods(kd, cluster=NAME, workers=2, *, ready=True, phase="Running"):
    kd.add_pod(NS, f"{cluster}-head-h1", {"ray.io/cluster": cluster, "ray.io/node-type": "head"}, phase=phase, ready=ready)
    for i in range(workers):
        kd.add_pod(NS, f"{cluster}-gpu-workers-w{i}", {"ray.io/cluster": cluster, "ray.io/node-type": "worker",
                                                        "ray.io/group": "gpu-workers"}, phase=phase, ready=ready)
    KubeRayController(kd).report_status(NS, cluster)  # KubeRay's status about them, when the RayCluster exists


def test_apply_twice_creates_once_then_patches_only_changes(kd, kc, cfg):
    api = kube.connect(kubeconfig=kc)
    objs = manifests.workload_objects(cfg)
    first = kube.apply(api, objs)
    assert list(first["action"]) == ["created"] * 4
    second = kube.apply(api, objs)
    assert list(second["action"]) == ["unchanged"] * 4
    assert list(kd.objects(RC)) == [NAME] and len(kd.objects(f"/api/v1/namespaces/{NS}/persistentvolumeclaims")) == 1
    bigger = cfg.replace(**{"cluster.worker_replicas": 3})
    third = kube.apply(api, manifests.workload_objects(bigger))
    assert list(third["action"]) == ["unchanged", "unchanged", "unchanged", "patched"]
    rcs = kd.objects(RC)
    assert list(rcs) == [NAME] and rcs[NAME]["spec"]["workerGroupSpecs"][0]["replicas"] == 3
    assert any(("dryRun=All" in q) for m, q in kd.requests if m == "PATCH"), "server-side dry run precedes the patch"


def test_server_side_dry_run_rejects_before_anything_is_written(kd, kc, cfg):
    api = kube.connect(kubeconfig=kc)
    objs = manifests.workload_objects(cfg)
    objs[-1]["spec"]["workerGroupSpecs"][0]["replicas"] = "two"
    with pytest.raises(ConflictError, match=r"(?s)server-side dry run of RayCluster default/nbtools-b200 was rejected \(422\).*replicas"):
        kube.apply(api, objs)
    assert not kd.objects(RC) and not kd.objects(f"/api/v1/namespaces/{NS}/serviceaccounts"), "all-or-nothing"


def test_wait_until_head_and_workers_are_ready(kd, kc, cfg):
    """The wait watches the RayCluster and returns on KubeRay's status saying all pods are ready, not at its timeout."""
    api = kube.connect(kubeconfig=kc)
    kube.apply(api, manifests.workload_objects(cfg))
    _pods(kd, ready=False, phase="Pending")

    def operator():
        time.sleep(0.6)
        _pods(kd)

    t = threading.Thread(target=operator)
    t.start()
    t0, before = time.monotonic(), len(kd.requests)
    report = kube.wait_ready(api, NS, NAME, pods=3, timeout=60, progress=False)
    t.join()
    assert sorted(report.pods["type"]) == ["head", "worker", "worker"]
    assert time.monotonic() - t0 < 30, "returned on the status change, not at the end of the watch"
    seen = [q for m, q in kd.requests[before:] if m == "GET"]
    assert any("watch=true" in q and f"{RC}?" in q for q in seen), f"the wait watches the RayCluster: {seen}"
    assert sum(q.startswith(f"/api/v1/namespaces/{NS}/pods?") for q in seen) <= 2, f"no polling of the pods: {seen}"


def test_wait_timeout_names_the_stuck_pod_reason_and_events(kd, kc, cfg):
    api = kube.connect(kubeconfig=kc)
    kd.add_pod(NS, f"{NAME}-head-h1", {"ray.io/cluster": NAME, "ray.io/node-type": "head"}, phase="Running", ready=True)
    stuck = f"{NAME}-gpu-workers-w0"
    kd.add_pod(NS, stuck, {"ray.io/cluster": NAME, "ray.io/node-type": "worker"}, conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}])
    kd.add_event(NS, stuck, "FailedScheduling", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    kd.add_event(NS, stuck, "NotTriggerScaleUp", "pod didn't trigger scale-up: 1 Insufficient quota")
    with pytest.raises(NotReadyError, match=r"(?s)1/3 pods ready.*first stuck pod nbtools-b200-gpu-workers-w0.*"
                                            r"Unschedulable: 0/3 nodes.*NotTriggerScaleUp.*fix: no node can take the pod") as ei:
        kube.wait_ready(api, NS, NAME, pods=3, timeout=1.0, progress=False, hints=_be(cfg, kc)._hints())
    assert ei.value.reason.startswith("Unschedulable") and len(ei.value.events) == 2


def test_wait_timeout_on_image_pull_says_which_image(kd, kc, cfg):
    api = kube.connect(kubeconfig=kc)
    kd.add_pod(NS, f"{NAME}-head-h1", {"ray.io/cluster": NAME, "ray.io/node-type": "head"}, waiting="ImagePullBackOff")
    with pytest.raises(NotReadyError, match=r"(?s)ImagePullBackOff.*nvcr.io/nvidia/nemo-rl:v0.7.0.*cannot be pulled"):
        kube.wait_ready(api, NS, NAME, pods=3, timeout=0.5, progress=False, hints=_be(cfg, kc)._hints())


def test_pod_lookup_by_labels_errors_name_the_selector(kd, kc, cfg):
    api = kube.connect(kubeconfig=kc)
    with pytest.raises(NotFoundError, match="ray.io/cluster=nbtools-b200,ray.io/node-type=head"):
        _be(cfg, kc).exec_on(["true"])
    _pods(kd, workers=2)
    with pytest.raises(ConflictError, match=r"(?s)found 2.*narrow the selector"):
        kube.find_pod(api, NS, f"ray.io/cluster={NAME},ray.io/node-type=worker")
    kd.exec_result[f"{NAME}-head-h1"] = ("", "boom\n", 7)
    r = _be(cfg, kc).exec_on(["ray", "status"])[0]
    assert (r.pod, r.returncode, r.stderr) == (f"{NAME}-head-h1", 7, "boom\n")


def test_wipe_hits_exactly_the_labelled_pods_and_requires_confirm(kd, kc, cfg):
    _pods(kd, workers=2)
    _pods(kd, cluster="someone-else", workers=1)
    kd.add_pod(NS, "unlabelled", {"app": "x"}, phase="Running", ready=True)
    with pytest.raises(ConflictError, match=r"(?s)confirm='yes'.*pass confirm='gemma3-1b-b200'"):
        _be(cfg, kc).wipe(confirm="yes")
    assert not kd.execs
    out = _be(cfg, kc).wipe(confirm=cfg.name)
    hit = sorted((e["pod"], e["container"]) for e in kd.execs)
    assert hit == [(f"{NAME}-gpu-workers-w0", "ray-worker"), (f"{NAME}-gpu-workers-w1", "ray-worker"), (f"{NAME}-head-h1", "ray-head")]
    cmd = kd.execs[0]["command"]
    assert cmd[:3] == ["rm", "-rf", "--"] and all(cfg.name in p.split("/") for p in cmd[3:])
    assert set(cmd[3:]) == {cfg.checkpoint_dir, cfg.log_dir, f"/opt/nemo-rl/results/{cfg.name}", f"/opt/nemo-rl/logs/{cfg.name}"}
    assert list(out.actions["action"]) == ["removed"] * 3 and out.stopped


def test_a_verl_experiments_wipe_removes_its_directories_and_no_nemo_rl_ones(cfg):
    """verl's TensorBoard and dumps live in log_dir and nbtools passes its paths absolute: nothing under /opt/nemo-rl."""
    verl = nbtools.config.load(ROOT / "experiments/gke-b200-verl.yaml", backend="gke")
    assert _be(verl).wipe_paths() == [verl.checkpoint_dir, verl.log_dir]
    assert _be(cfg).wipe_paths()[2:] == [f"/opt/nemo-rl/results/{cfg.name}", f"/opt/nemo-rl/logs/{cfg.name}"]


def test_the_wipe_command_removes_only_this_experiment(tmp_path, cfg):
    """Run the exact argv wipe sends to the pods, here, on a tree holding two experiments."""
    root = tmp_path / "data"
    mine = cfg.replace(**{"checkpointing.checkpoint_dir": str(root / cfg.name / "checkpoints"),
                          "logging.log_dir": str(root / cfg.name / "logs")})
    for exp in (cfg.name, "other-exp"):
        for sub in ("checkpoints/step_10", "logs/exp_001", "results"):
            (root / exp / sub).mkdir(parents=True)
    local_roots = (str(root / "results-root"),)
    (root / "results-root" / cfg.name).mkdir(parents=True)
    (root / "results-root" / "other-exp").mkdir(parents=True)
    import subprocess

    subprocess.run(["rm", "-rf", "--", *_be(mine).wipe_paths(local_roots)], check=True)
    assert not (root / cfg.name / "checkpoints").exists() and not (root / cfg.name / "logs").exists()
    assert (root / cfg.name / "results").exists(), "only the named dirs go"
    assert (root / "other-exp" / "checkpoints" / "step_10").exists() and (root / "results-root" / "other-exp").exists()
    with pytest.raises(ConflictError, match="refusing to wipe '/data/ckpt'"):
        _be(cfg.replace(**{"checkpointing.checkpoint_dir": "/data/ckpt"})).wipe_paths()


def test_teardown_removes_only_what_nbtools_created_for_this_experiment(kd, kc, cfg):
    api = kube.connect(kubeconfig=kc)
    kube.apply(api, manifests.workload_objects(cfg))
    # a PV with the same name that someone else made (no nbtools labels) must survive
    pvs = "/api/v1/persistentvolumes"
    foreign = kd.objects(pvs)[f"{NAME}-gcsfuse-pv"]
    foreign["metadata"]["labels"] = {"team": "storage"}
    kd.put(pvs, foreign)
    other = nbtools.config.load(ROOT / "experiments/gke-h200-qwen.yaml", backend="gke")
    kube.apply(api, [manifests.raycluster(other)])  # another experiment's RayCluster in the same namespace
    out = _be(cfg, kc).down()
    actions = dict(zip(out.actions["kind"], out.actions["action"], strict=True))
    assert actions["RayCluster"] == "deleted" and actions["PersistentVolumeClaim"] == "deleted"
    assert actions["ServiceAccount"] == "deleted" and actions["PersistentVolume"].startswith("kept")
    assert list(kd.objects(RC)) == ["nbtools-h200"], "another experiment's RayCluster is untouched"
    assert list(kd.objects(pvs)) == [f"{NAME}-gcsfuse-pv"]
    again = _be(cfg, kc).down()
    assert set(again.actions["action"]) <= {"absent", "kept: not created by nbtools for this experiment"}


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"ray dashboard {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_up_applies_waits_forwards_and_down_stops_the_forward(kd, kc, cfg):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=srv.serve_forever, daemon=True).start()

    def operator():
        while not kd.objects(RC):
            time.sleep(0.05)
        _pods(kd)
        kd.route_port(NS, f"{NAME}-head-h1", 8265, srv.server_address)

    t = threading.Thread(target=operator)
    t.start()
    try:
        head = _be(cfg, kc).up(timeout=30, progress=False)
        t.join()
        assert head.backend == "gke" and head.started_by_us
        assert head.dashboard_url == f"http://127.0.0.1:{cfg.ray.dashboard_port}"
        assert urllib.request.urlopen(head.dashboard_url + "/api/version", timeout=10).read() == b"ray dashboard /api/version"
        assert kd.objects(f"/api/v1/namespaces/{NS}/secrets")["hf-secret"]["data"]["hf_api_token"]
        pid = head.extra["port-forward pid"]
        assert head.extra["GPUs registered"].startswith("unknown yet"), "a fake dashboard cannot report Ray nodes"
        again = _be(cfg, kc).up(timeout=30, progress=False)
        assert again.extra["port-forward pid"] == pid and not again.started_by_us, "re-run re-attaches"
        assert len(kd.objects(RC)) == 1
    finally:
        out = _be(cfg, kc).down()
        srv.shutdown()
    assert out.actions.loc[0, "action"] == "stopped"
    assert not Path(f"/proc/{pid}").exists() or b"nbtools.kube.forward" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{cfg.ray.dashboard_port}/", timeout=2)


_OTHER_THREAD_SIGTERM = """
import signal, sys, threading, time
from nbtools.kube import forward

def sigterm_to_this_thread():
    while signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):  # until main() installed its handler
        time.sleep(0.05)
    time.sleep(0.5)  # main is in its wait by now
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

threading.Thread(target=sigterm_to_this_thread).start()
sys.exit(forward.main(sys.argv[1:]))
"""


def test_the_forward_acts_on_a_sigterm_another_thread_took_and_a_stuck_one_is_killed(kc, tmp_path):
    """Python runs a signal handler in the main thread only; the forward's main loop must wake up to run it. A
    process that ignores SIGTERM is killed after the timeout, and ``stop`` says so (notebook 09 shows it)."""
    args = ["--namespace", NS, "--selector", "ray.io/node-type=head", "--map", f"8265:{_free()}", "--kubeconfig", kc]
    proc = subprocess.Popen([sys.executable, "-c", _OTHER_THREAD_SIGTERM, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        seen = b""
        while not seen.endswith(b"\n") or not seen.splitlines()[-1].startswith(b"forwarding"):
            line = proc.stdout.readline()  # main() prints "forwarding ..." once its handlers are installed
            assert line, seen.decode()
            seen += line
        # timed from there: a loaded machine may take long to import kubernetes, which is not what is tested
        assert proc.wait(timeout=20) == 0, (seen + proc.stdout.read()).decode()  # an untimed wait never returned
    finally:
        proc.kill()
    stuck = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                              "signal.SIG_IGN); print('ready', flush=True); time.sleep(60)", "nbtools.kube.forward"],
                             stdout=subprocess.PIPE)
    assert stuck.stdout.readline() == b"ready\n"
    pid_file = tmp_path / "forward.json"
    pid_file.write_text("{}")
    t0 = time.monotonic()
    how = kube.forward.ForwardHandle(stuck.pid, {}, pid_file).stop(timeout=1)
    assert how == "killed: it did not exit within 1s of SIGTERM" and time.monotonic() - t0 < 10
    assert stuck.wait(timeout=10) == -signal.SIGKILL and not pid_file.exists()
    assert kube.forward.ForwardHandle(stuck.pid, {}, pid_file).stop() == "absent"


def test_stop_leaves_the_exit_status_to_the_process_owner_and_reaps_only_its_own_child(kd, kc, tmp_path):
    """``stop`` on a pid it did not start must not ``waitpid`` it: the owner's ``wait()`` would get 0 (ECHILD) instead
    of the signal. A forward that ``start`` made is reaped by its handle, so no zombie is left behind."""
    polite = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)",
                               "nbtools.kube.forward"], stdout=subprocess.PIPE)
    assert polite.stdout.readline() == b"ready\n"
    pid_file = tmp_path / "other.json"
    assert kube.forward.ForwardHandle(polite.pid, {}, pid_file).stop() == "stopped"
    assert polite.wait(timeout=10) == -signal.SIGTERM
    _pods(kd, workers=0)
    fwd = kube.forward.start(namespace=NS, selector="ray.io/node-type=head", ports={8265: _free()},
                             pid_file=tmp_path / "forward.json", kubeconfig=kc, timeout=120)  # a loaded CI host
    assert fwd.alive()
    assert fwd.stop(timeout=60) == "stopped"
    assert not Path(f"/proc/{fwd.pid}").exists()  # reaped, not a zombie
    with pytest.raises(ChildProcessError):
        os.waitpid(fwd.pid, os.WNOHANG)


def test_ray_resources_through_the_forward_of_a_real_ray_head(kd, kc, cfg, ray_head):
    """The double forwards the 'head pod' port 8265 to the session's real local Ray dashboard."""
    _pods(kd, workers=0)
    kd.route_port(NS, f"{NAME}-head-h1", 8265, ("127.0.0.1", ray_head.extra["dashboard_port"]))
    fwd = _be(cfg, kc).port_forward()
    try:
        res = fetch_resources(fwd.url(8265))
        assert res.nodes >= 1 and res.cpus >= 1
    finally:
        fwd.stop()
    assert not fwd.alive()


def test_cleanup_works_when_the_cluster_is_gone(tmp_path, cfg, kd, kc):
    """Notebook 09 must succeed when nothing runs: no head pod, no kubeconfig, or an API server that is gone."""
    assert _be(cfg, kc).reattach() is None  # the double answers, but there is no head pod
    missing = _be(cfg, str(tmp_path / "no-such-kubeconfig")).down()
    assert missing.actions["action"].iloc[1:].str.startswith("skipped: no usable kubeconfig").all()
    dead = KubeDouble.__new__(KubeDouble)
    dead.port = _free()  # nothing listens there
    KubeDouble.kubeconfig(dead, tmp_path / "dead")
    gone = _be(cfg, str(tmp_path / "dead")).down()
    assert gone.actions["action"].iloc[1:].str.startswith("skipped: the Kubernetes API did not answer").all()
    assert _be(cfg, str(tmp_path / "dead")).reattach() is None


def test_events_read_the_pods_disruption_condition_kubelet_sets_without_an_event(kd, kc, cfg):
    """Issue 27 item 2: kubelet's graceful node shutdown is the pod's DisruptionTarget condition with reason
    TerminationByKubelet (k8s.io/api core/v1 PodReasonTerminationByKubelet), not an event; diagnose reads it."""
    shutdown = "Pod was terminated in response to imminent node shutdown."
    kd.add_pod(NS, f"{NAME}-gpu-workers-w0", {"ray.io/cluster": NAME, "ray.io/node-type": "worker"}, phase="Failed",
               conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                            "message": shutdown, "lastTransitionTime": "2026-11-25T10:00:00Z"}])
    kd.add_pod(NS, "other-cluster-w0", {"ray.io/cluster": "other"}, phase="Failed",
               conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                            "message": shutdown, "lastTransitionTime": "2026-11-25T10:00:00Z"}])
    assert not [e for e in kd.objects(f"/api/v1/namespaces/{NS}/events").values()], "no event: only the condition"
    events = _be(cfg, kc).events()
    assert events == [f"Warning TerminationByKubelet: Pod/{NAME}-gpu-workers-w0: {shutdown} (pod condition "
                      "DisruptionTarget)"]
    assert nbtools.launch.diagnose_log("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing "
                                       "this task.", events=events).cause == "preempted"
    t = 1795600800.0  # 2026-11-25T10:00:00Z: outside a window that starts later, inside one around it
    assert _be(cfg, kc).events(since=t + 3600) == [] and len(_be(cfg, kc).events(since=t - 60, until=t + 60)) == 1


def test_the_eval_job_copies_the_merged_model_to_the_disk_of_every_pod_that_reads_it_first(kd, kc, cfg, monkeypatch):
    """Issue 27 item 10: the merged model is loaded from local disk, not mmap'd through gcsfuse. Issue 40 item 5: each
    pod has its own disk, and run_eval.py's driver runs on the (GPU-less) head and loads the tokenizer from the model
    path there, so the head gets the copy too; a driver that runs vLLM itself asks Ray for GPUs and lands on a worker."""
    monkeypatch.setenv("KUBECONFIG", kc)
    _pods(kd, workers=2)
    merged = nbtools.evals.finetuned_model_path(cfg)
    spec = nbtools.evals.build_eval_job(cfg, merged, label="fine-tuned")
    assert spec.entrypoint_num_gpus == 0 and "--entrypoint-num-gpus" not in spec.to_command()
    spec.prepare(cfg)
    hit = sorted((e["pod"], e["container"]) for e in kd.execs)
    assert hit == [(f"{NAME}-gpu-workers-w0", "ray-worker"), (f"{NAME}-gpu-workers-w1", "ray-worker"),
                   (f"{NAME}-head-h1", "ray-head")]
    assert kd.execs[0]["command"] == list(spec.local_copy) and merged in spec.local_copy[2]
    kd.execs.clear()
    on_gpu = dataclasses.replace(spec, entrypoint_num_gpus=1)
    on_gpu.prepare(cfg)
    assert sorted(e["pod"] for e in kd.execs) == [f"{NAME}-gpu-workers-w0", f"{NAME}-gpu-workers-w1"]
    assert "--entrypoint-num-gpus 1 -- " in on_gpu.to_command()
    kd.execs.clear()
    kd.exec_result[f"{NAME}-gpu-workers-w1"] = ("", "cp: No space left on device\n", 1)
    with pytest.raises(nbtools.errors.NotReadyError, match=r"gpu-workers-w1.*No space left on device"):
        spec.prepare(cfg)
