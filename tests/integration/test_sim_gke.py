"""The simulated GKE (tests/doubles/sim_gke.py) does what each of its parts claims. Its parts are TEST DOUBLES and
stand-ins: the gcloud/kubectl/helm shims (sim_shims*.py: the project's one double of these tools), the Kubernetes API double (kube_double.py) with a KubeRay
operator stand-in (sim_kuberay.py), a real local Ray head that cannot import nbtools (sim_image/), the real GCS
emulator (gcs_emulator.py) fed by a gcsfuse stand-in (sim_gcsfuse.py), and NeMo-RL doubles (sim_nemo_rl/).

The last test drives the gke path end to end: submit the sim experiment through the port-forwarded dashboard,
follow it to SUCCEEDED, and read the run back from ``gs://sim-bucket``.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests
from sim_gke import BUCKET, DOUBLES, FAKE_HF_TOKEN, PROJECT, SimGke
from sim_shims import flag_table, project_number

import nbtools
from nbtools import kube, storage
from nbtools.launch._attempts import record_url

pytestmark = pytest.mark.ray

# The module's sim (conftest.py's ``sim_gke``): 20 GRPO steps, a shorter warm start and a 50-problem held-out split
# keep these tests short.
SIM_GKE = {"steps": 20, "rehearsal": {"warmup_steps": 50, "num_test": 50}}
NS = "default"
RC = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"


def _until(predicate, timeout: float, what: str):
    """Wait for ``predicate()`` to be truthy (the API double's change notifications wake us); return its value."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > end:
            assert value, f"timed out after {timeout}s waiting for {what}"
            return value
        time.sleep(0.05)


# -- 4. the shims, driven by the real provisioning and destroy plans ---------------------------------------------


@pytest.mark.slow  # the whole provisioning and destroy plans through the shims
def test_shims_apply_the_provisioning_plan_and_the_destroy_plan_removes_everything(tmp_path):
    with SimGke(tmp_path / "sim", ray=False, mirror=False, changes={"cluster.kuberay": "helm"}) as sim, sim.activated():
        cfg = sim.cfg()
        plan = nbtools.gke.plan(cfg)
        out = plan.apply(dry_run=False, progress=False)
        assert set(out["status"]) == {"done"}, out

        # every check ran before its command, with ${PROJECT_NUMBER} looked up once through `gcloud projects describe`
        number = project_number(PROJECT)
        expected = [["gcloud", "projects", "describe", PROJECT, "--format=value(projectNumber)"]]
        for s in plan.steps:
            expected += [[a.replace("${PROJECT_NUMBER}", number) for a in argv] for argv in (s.check, s.command) if argv]
        recorded = sim.commands()
        # a `bash -c` step shows up as the tool calls its script makes, in its place
        got, scripts = [[c["tool"], *c["argv"]] for c in recorded], [e for e in expected if e[0] == "bash"]
        it = iter(got)
        assert all(any(g == e for g in it) for e in expected if e[0] != "bash"), "checks and commands ran in plan order"
        extra = [g for g in got if g not in expected]
        assert extra and all(any(" ".join(g) in b[-1] for b in scripts) for g in extra), extra
        assert all(c["rc"] == 0 for c in recorded if [c["tool"], *c["argv"]] in [list(s.command) for s in plan.steps])

        # what the commands created, where each tool keeps it
        g = sim.shim_state()["gcloud"]
        assert len(g["networks"]) == 2 and len(g["subnets"]) == 9 and len(g["firewalls"]) == 1
        net = f"{cfg.cluster.networks}-gvnic-net"
        described = sim.tool("gcloud", "compute", "networks", "describe", net, f"--project={PROJECT}", "--format=value(name)")
        assert (described.returncode, described.stdout) == (0, f"{net}\n")
        assert list(g["clusters"]) == [f"projects/{PROJECT}/locations/us-central1/clusters/{cfg.cluster.name}"]
        (pool,) = g["node_pools"].values()
        assert pool["config"] == {"machineType": "a4-highgpu-8g", "spot": True} and len(pool["additionalNodeNetworks"]) == 9
        member = nbtools.gke.wi_member(cfg).replace("${PROJECT_NUMBER}", number)
        assert g["bucket_iam"][f"gs://{BUCKET}"] == [{"role": "roles/storage.objectUser", "members": [member]}]
        (release,) = sim.shim_state()["helm"].values()
        assert release["info"]["status"] == "deployed" and release["chart"]["metadata"]["version"] == "1.7.0"
        assert sim.gcs.fs.exists(BUCKET)
        kubeconfig = json.loads(sim.kubeconfig.read_text())
        assert kubeconfig["current-context"] == nbtools.gke.context_name(cfg)
        objs = {c.rsplit("/", 1)[-1]: sorted(o) for c, o in sim.kube.store.items() if o}
        assert objs["daemonsets"] == ["nccl-rdma-installer"] and len(objs["gkenetworkparamsets"]) == 9
        assert objs["serviceaccounts"] == ["nbtools-ksa"] and objs["secrets"] == ["hf-secret"]
        assert len(objs["persistentvolumes"]) == len(objs["persistentvolumeclaims"]) == 1
        secret = sim.kube.objects(f"/api/v1/namespaces/{NS}/secrets")["hf-secret"]
        assert base64.b64decode(secret["data"]["hf_api_token"]).decode() == FAKE_HF_TOKEN

        # the log keeps the Secret's manifest but never its value
        log = (sim.shims_dir / "commands.jsonl").read_text()
        assert FAKE_HF_TOKEN not in log and base64.b64encode(FAKE_HF_TOKEN.encode()).decode() not in log
        assert "<redacted>" in next(c["stdin"] for c in recorded if c["stdin"] and "kind: Secret" in c["stdin"])

        # flags of every gcloud command, checked against the shim's --help (nbtools' shipped table when present)
        report = plan.validate()
        assert len(report) and set(report["command"]) >= {"gcloud container clusters create", "gcloud storage buckets create"}
        if flag_table({"nbtools_data": str(Path(nbtools.__file__).parent / "data")}):
            assert report["ok"].all(), report[~report["ok"]]
        else:
            assert set(report.loc[report["flag"] == "--project", "ok"]) == {True}

        # like GCS, a bucket with objects is not deleted: destroy keeps it (and says why), everything else goes
        sim.gcs.fs.pipe(f"{BUCKET}/nemo-rl/keep.txt", b"x")
        destroy = nbtools.gke.destroy_plan(cfg)
        first = destroy.apply(dry_run=False, progress=False).set_index("step")
        assert first.attrs["kept"] == ["bucket"]
        assert "The bucket you tried to delete is not empty" in first.loc["bucket", "status"] and "delete_bucket=" in first.loc["bucket", "status"]
        assert first.drop(index="bucket")["status"].eq("done").all(), first
        assert sim.gcs.fs.exists(BUCKET) and not sim.kube.objects(f"/api/v1/namespaces/{NS}/secrets")
        # emptied, the next apply deletes it; every other step's check now sees its resource gone
        sim.gcs.fs.rm(f"{BUCKET}/nemo-rl/keep.txt")
        rest = destroy.apply(dry_run=False, progress=False).set_index("step")
        assert rest.loc["bucket", "status"] == "done" and rest.drop(index="bucket")["status"].eq("already gone").all(), rest

        # everything is gone (the APIs stay enabled, as the destroy plan says)
        g = sim.shim_state()["gcloud"]
        assert not any(g[k] for k in ("networks", "subnets", "firewalls", "clusters", "node_pools", "bucket_iam"))
        assert g["services"][PROJECT] and not sim.shim_state()["helm"]
        assert not sim.gcs.fs.exists(BUCKET) and not json.loads(sim.kubeconfig.read_text())["contexts"]
        assert not [c for c, o in sim.kube.store.items() if o and not c.endswith("/events")]
        # a context whose cluster is gone answers like an unreachable server
        sim.write_credentials(nbtools.gke.context_name(cfg))
        r = sim.tool("kubectl", f"--context={nbtools.gke.context_name(cfg)}", "get", "secrets/hf-secret", "-o", "name")
        assert r.returncode == 1 and "Unable to connect to the server" in r.stderr


# -- 2 + 3. KubeRay stand-in, port-forward, the Ray head that cannot import nbtools --------------------------------


def test_up_gets_kuberay_pods_and_reaches_the_sim_ray_head_through_the_forward(sim_gke):
    sim = sim_gke
    with sim.activated():
        cfg = sim.cfg()
        cluster = nbtools.backends.get(cfg)
        try:
            head = cluster.up(timeout=120, progress=False)
            assert head.extra["GPUs registered"] == "8 of 8", head.extra
            assert head.dashboard_url == f"http://127.0.0.1:{sim.dashboard_port}" != sim.head.dashboard_url
            via_forward = requests.get(f"{head.dashboard_url}/api/version", timeout=30).json()
            assert via_forward["session_name"] == requests.get(f"{sim.head.dashboard_url}/api/version", timeout=30).json()["session_name"]
            assert cluster.resources().gpus == 8 and nbtools.jobs.list_jobs(head.dashboard_url) is not None

            pods = sim.pods()
            kinds = sorted((p["metadata"]["labels"]["ray.io/node-type"], p["metadata"]["labels"]["ray.io/group"])
                           for p in pods.values())
            assert kinds == [("head", "headgroup"), ("worker", "gpu-workers")]
            assert all(p["spec"]["containers"][0]["name"] in ("ray-head", "ray-worker") for p in pods.values())
            rc = sim.kube.objects(RC)[cfg.cluster.name]
            conds = {c["type"]: (c["status"], c["reason"]) for c in rc["status"]["conditions"]}
            assert conds == {"HeadPodReady": ("True", "HeadPodRunningAndReady"),
                             "RayClusterProvisioned": ("True", "AllPodRunningAndReadyFirstTime")}
            assert rc["status"]["state"] == "ready" and rc["status"]["readyWorkerReplicas"] == 1
            assert sim.kube._validate("ray.io", "rayclusters", rc) is None, "the status is valid for KubeRay's CRD"
            reasons = {e["reason"] for e in sim.kube.objects(f"/api/v1/namespaces/{NS}/events").values()}
            assert {"CreatedHeadPod", "CreatedWorkerPod", "Scheduled", "Started"} <= reasons

            # a spot reclaim: the worker fails with node-shutdown events and KubeRay's stand-in replaces it
            failed = sim.preempt(replace_after=0.3)
            gone = failed["metadata"]["name"]
            # kubelet says it in the pod's condition (nbtools.kube.cluster_events reads it while the pod exists;
            # KubeRay deletes a failed worker at once), never with an event
            assert {(c["type"], c.get("reason")) for c in failed["status"]["conditions"]} >= {
                ("DisruptionTarget", "TerminationByKubelet")}
            events = kube.pod_events(cluster.api(), NS, gone)
            assert not any("TerminationByKubelet" in e for e in events), events
            kube.wait_ready(cluster.api(), NS, cfg.cluster.name, pods=2, timeout=30, progress=False)
            assert gone not in sim.pods() and len(sim.pods()) == 2
            assert sim.kube.objects(RC)[cfg.cluster.name]["status"]["conditions"][1]["status"] == "True"

            # exec in the pods runs here, on the pods' paths: wipe removes this experiment's results, nothing else
            (sim.host_path(cfg.checkpoint_dir) / "step_5").mkdir(parents=True)
            other = sim.backing_dir / "nemo-rl" / "other-exp" / "checkpoints"
            other.mkdir(parents=True)
            wiped = cluster.wipe(confirm=cfg.name)
            assert list(wiped.actions["action"]) == ["removed", "removed"], wiped.actions
            assert not sim.host_path(cfg.checkpoint_dir).exists() and other.is_dir()
            outside = cluster.exec_on(["ls", "/etc"])[0]
            assert outside.returncode == 1 and "not in the simulated pod" in outside.stderr
        finally:
            down = cluster.down()
        assert down.actions.loc[0, "action"] == "stopped"
        _until(lambda: not sim.pods(), 10, "the RayCluster's pods to go with it")
        assert not sim.kuberay.errors


def test_every_pod_has_its_own_disk_and_ray_runs_a_jobs_driver_on_the_gpu_less_head_unless_it_asks_for_gpus(sim_gke):
    """Issue 40 item 5: a file copied to the worker pods' local disks is not on the head's, and a job's driver runs
    where Ray puts it (the head, with no GPU, unless ``entrypoint_num_gpus``), so it sees only that pod's disk."""
    from nbtools.evals.job import LOCAL_MODELS

    sim = sim_gke
    with sim.activated():
        cfg = sim.cfg()
        cluster = nbtools.backends.get(cfg)
        try:
            url = cluster.up(timeout=120, progress=False).dashboard_url
            nodes = cluster.resources().node_table
            assert sorted(zip(nodes["head"], nodes["GPU"], strict=True)) == [(False, 8.0), (True, 0.0)], nodes
            f = f"{LOCAL_MODELS}/{uuid.uuid4().hex[:8]}/weights"
            wrote = cluster.exec_on(["bash", "-c", f"mkdir -p {os.path.dirname(f)} && echo worker-disk > {f}"],
                                    node_type="worker")
            assert [r.returncode for r in wrote] == [0], wrote
            on_head = cluster.exec_on(["bash", "-c", f"cat {f}"], node_type="head")[0]
            assert on_head.returncode == 1 and "No such file" in on_head.stderr and not os.path.exists(f)
            tag = uuid.uuid4().hex[:6]
            driver_on_head = nbtools.jobs.submit(url, entrypoint=f"cat {f}", submission_id=f"sim-disk-head-{tag}")
            driver_on_gpu = nbtools.jobs.submit(url, entrypoint=f"cat {f}", submission_id=f"sim-disk-gpu-{tag}",
                                                entrypoint_num_gpus=1)
            assert driver_on_gpu.wait(timeout=300).value == "SUCCEEDED" and "worker-disk" in driver_on_gpu.logs()
            with pytest.raises(nbtools.errors.JobFailedError):
                driver_on_head.wait(timeout=300)
            assert "No such file" in driver_on_head.logs()
        finally:
            cluster.down()


def test_jobs_on_the_sim_head_import_nbtools_only_through_py_modules(sim_gke):
    """Issue #13 item 3's proof: where the image has no nbtools, a job gets it from its runtime_env."""
    url, python = sim_gke.head.dashboard_url, sys.executable
    probe = "import nbtools, sys; print('nbtools from', nbtools.__file__)"
    bare = nbtools.jobs.submit(url, entrypoint=f'{python} -c "{probe}"', submission_id=f"sim-no-nbtools-{uuid.uuid4().hex[:6]}")
    carried = nbtools.jobs.submit(url, entrypoint=f'{python} -c "{probe}"', submission_id=f"sim-py-modules-{uuid.uuid4().hex[:6]}",
                                  runtime_env={"py_modules": [str(Path(nbtools.__file__).parent)]})
    with pytest.raises(nbtools.errors.JobFailedError):
        bare.wait(timeout=300)
    assert "ModuleNotFoundError: No module named 'nbtools'" in bare.logs()
    assert carried.wait(timeout=300).value == "SUCCEEDED"
    where = carried.logs().split("nbtools from ", 1)[1].split()[0]
    assert "runtime_resources" in where and not where.startswith(str(Path(nbtools.__file__).parent)), where


# -- 5. gcsfuse stand-in ----------------------------------------------------------------------------------------


def test_gcsfuse_standin_uploads_new_and_changed_files_and_deletes_removed_ones(sim_gke):
    sim, base = sim_gke, sim_gke.backing_dir / "mirror-test"  # what a pod writes under /data/mirror-test
    url = f"gs://{BUCKET}/mirror-test"
    with sim.activated():
        (base / "sub").mkdir(parents=True)
        (base / "a.txt").write_text("one")
        (base / "sub" / "b.bin").write_bytes(b"\x00" * 1000)
        sim.flush()
        assert [e.name for e in storage.ls(url)] == ["a.txt", "sub"] and storage.read_text(f"{url}/a.txt") == "one"
        first = storage.info(f"{url}/a.txt").version
        (base / "a.txt").write_text("two, longer")
        (base / "sub" / "b.bin").unlink()
        (base / "tmp_step_1").mkdir()
        (base / "tmp_step_1" / "x").write_text("x")
        (base / "tmp_step_1").rename(base / "step_1")  # a checkpoint's finishing rename
        assert sim.flush() == {"uploaded": 2, "deleted": 1}
        assert storage.read_text(f"{url}/a.txt") == "two, longer" and storage.info(f"{url}/a.txt").version != first
        assert not storage.exists(f"{url}/sub/b.bin") and storage.exists(f"{url}/step_1/x")
        assert not storage.exists(f"{url}/tmp_step_1/x")
        # no flush: the polling thread uploads it; a request (what a job's exiting process makes) is answered after
        (base / "c.txt").write_text("by the thread")
        request = sim.flush_dir / "req-test"
        request.touch()
        _until(lambda: not request.exists(), 10, "the mirror thread to answer the request")
        assert storage.read_text(f"{url}/c.txt") == "by the thread"


# -- 6. the NeMo-RL doubles -------------------------------------------------------------------------------------


def _image_env(sim) -> dict:
    return {**os.environ, "PYTHONPATH": str(DOUBLES / "sim_image"), "PATH": f"{sim.image_dir}{os.pathsep}{os.environ['PATH']}"}


def test_nemo_rl_doubles_take_nemo_rls_command_lines(sim_gke, tmp_path):
    sim = sim_gke
    grpo = ["python", "-u", "examples/run_grpo.py", "--config", "examples/configs/grpo_math_1B.yaml"]
    for override, error in (("grpo.max_num_step=3", "Could not override 'grpo.max_num_step'"),
                            ("+grpo.max_num_steps=3", "Could not append to config. An item is already at 'grpo.max_num_steps'")):
        r = subprocess.run([*grpo, override], cwd=sim.code_dir, env=_image_env(sim), capture_output=True, text=True)
        assert r.returncode == 1 and error in r.stderr, r.stderr

    # run_eval.py: what nbtools.evals.evaluate_local says about a (briefly warm-started) tiny model, in NeMo-RL's form
    with sim.activated():
        import torch

        from nbtools.rehearsal import _grpo, task
        from nbtools.rehearsal.model import build_model, build_tokenizer, save_hf

        reh = nbtools.config.load(sim.code_dir / "sim_rehearsal.yaml", backend="local")
        train, held_out = task.make_split(reh)
        tok, model = build_tokenizer(), build_model(reh, build_tokenizer())
        threads = torch.get_num_threads()
        # one thread: ~5x faster for a tiny model on a shared 2-core machine, and the same arithmetic as the double's
        torch.set_num_threads(1)
        try:  # a few SFT steps teach the answer format; the answers stay at chance, so some are right, most wrong
            _grpo.warm_start(model, train, steps=20, lr=3e-3, batch=32, seed=0, think="running_max")
            model_dir = save_hf(model, tok, tmp_path / "tiny")
            expected = nbtools.evals.evaluate_local(model_dir, held_out, reward=list(reh.rehearsal.reward_functions),
                                                    max_new_tokens=reh.rehearsal.max_new_tokens, seed=42)
        finally:
            torch.set_num_threads(threads)
    save = tmp_path / "eval" / "math500_tiny"
    r = subprocess.run(["python", "-u", "examples/run_eval.py", "--config", "examples/configs/evals/math_eval.yaml",
                        f"generation.model_name={model_dir}", "data.dataset_name=math500", "eval.num_tests_per_prompt=1",
                        f"eval.save_path={save}", "generation.temperature=0.0"],
                       # its ray.init(address="auto") joins the sim's cluster, as in a pod (else any Ray on this machine)
                       cwd=sim.code_dir, env={**_image_env(sim), "OMP_NUM_THREADS": "1", "RAY_ADDRESS": sim.head.gcs_address},
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (block,) = nbtools.evals.parse_score_blocks(r.stdout)
    assert (block.model_name, block.dataset_name, block.num_tests_per_prompt, block.denominator) == (
        "tiny", "math500", 1, len(held_out))
    assert (block.metric, block.temperature, block.max_new_tokens) == ("pass@1", 0.0, 2048)
    table = nbtools.evals.load_evaluation_data(save)
    assert list(table["prompt"]) == [p.prompt for p in held_out], "dataset order, one row per sample"
    assert list(table["response"]) == list(expected.table["response"]) and list(table["correct"]) == list(expected.table["correct"])
    assert set(table["reward"]) == {0.0, 1.0} and block.numerator == table["correct"].sum() == expected.table["correct"].sum()
    assert table["ground_truth"].tolist() == [p.ground_truth for p in held_out]
    assert json.loads((save / "config.json").read_text())["num_tests_per_prompt"] == 1


# -- the gke path end to end --------------------------------------------------------------------------------------


def test_end_to_end_submit_through_the_forward_follow_and_read_the_run_from_the_bucket(sim_gke):
    sim = sim_gke
    with sim.activated():
        cfg = sim.cfg(**{"grpo.max_val_samples": 40})
        cluster = nbtools.backends.get(cfg)
        try:
            cluster.up(timeout=120, progress=False)
            job = nbtools.launch.submit(cfg)
            assert job.id == cfg.submission_id and job.address == cluster.dashboard_url
            assert nbtools.launch.follow(cfg, job, timeout=1200).value == "SUCCEEDED", job.log_tail(40)
            log = job.logs()
            assert f"cd {sim.code_dir} && {sys.executable} -u examples/run_grpo.py" in log
            assert "(NeMo-RL test double)" in log and "Step 20/20" in log
            out = nbtools.launch.outputs(cfg, job)
            assert out.ok and out.exp_dir.startswith(f"gs://{BUCKET}/"), "only the pods see the mount path; this machine reads the bucket"
            assert sim.isolated and not any(sim.data_dir.iterdir())
        finally:
            cluster.down()
        # no sim.flush(): like gcsfuse, the job's processes exited only after the stand-in had uploaded their files
        exp = f"gs://{BUCKET}/nemo-rl/{cfg.name}/logs/exp_001"
        assert cluster.storage.url(cfg.log_dir) == f"gs://{BUCKET}/nemo-rl/{cfg.name}/logs"
        # the run's directories (another test of this module may have left the attempts record beside them)
        assert [e.name for e in storage.ls(cluster.storage.url(cfg.log_dir)) if e.is_dir] == ["exp_001"]
        local = storage.mirror(exp)
        assert sorted(p.name for p in local.glob("train_data_step*.jsonl")) == sorted(
            f"train_data_step{k}.jsonl" for k in range(1, 21))
        assert list(local.glob("tensorboard/events.out.tfevents.*"))
        assert (local / "val_data_step0.jsonl").is_file()
        ckpts = storage.ls(cluster.storage.url(cfg.checkpoint_dir))
        assert [e.name for e in ckpts] == ["step_20"]
        info = json.loads(storage.read_text(f"{ckpts[0].url}/training_info.json"))
        assert info["total_steps"] == 20
        baseline = cluster.storage.url(str(Path(cfg.checkpoint_dir).parent / "baseline_hf"))
        assert storage.exists(baseline + "/config.json"), "the stand-in Hub's model (the warm start) is in the bucket too"


# -- issue #16: diagnosis from the pods' events; supervise does not retry an OOM ---------------------------------

NODE_DIED = ("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
             "The actor died because its node has died. Node Id: 2e4f0c9a1b7d")
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.82 GiB. GPU 3 has a total capacity of "
       "178.35 GiB of which 5.12 GiB is free.")


def _job(cfg, submission_id: str, lines, *, wait_for=None):
    """A job that prints ``lines`` and exits 1 (after ``wait_for`` exists, when given)."""
    script = "import pathlib, sys, time\n"
    if wait_for is not None:
        script += f"while not pathlib.Path({str(wait_for)!r}).exists(): time.sleep(0.05)\n"
    script += "".join(f"print({line!r}, flush=True)\n" for line in lines) + "sys.exit(1)\n"
    return nbtools.jobs.submit(cfg.dashboard_url, entrypoint=f"{sys.executable} -c {shlex.quote(script)}",
                               submission_id=submission_id)


def test_a_reclaimed_pod_is_preemption_and_an_oom_is_not_retried(sim_gke, tmp_path):
    sim = sim_gke
    with sim.activated():
        cfg = sim.cfg().replace(**{"grpo.seed": 16})  # a submission id of its own (not the end-to-end run's)
        cluster = nbtools.backends.get(cfg)
        try:
            cluster.up(timeout=120, progress=False)
            flag = tmp_path / "node-gone"
            job = _job(cfg, cfg.submission_id, NODE_DIED, wait_for=flag)  # attempt 1 of the run, training
            _until(lambda: job.status().value == "RUNNING", 60, "the job to run")
            gone = sim.preempt(replace_after=0.3)["metadata"]["name"]
            preempted_at = time.time()
            flag.touch()
            job.wait(timeout=120, raise_on_failure=False)
            _until(lambda: gone not in sim.pods(), 30, "the reclaimed pod to be deleted")

            d = nbtools.launch.diagnose(cfg)  # no id: the run's latest attempt (none recorded yet: attempt 1)
            assert (d.submission_id, d.status, d.cause, d.retry) == (cfg.submission_id, "FAILED", "preempted", True)
            assert "is being reclaimed" in d.evidence  # the pod (and its condition) is gone: the node's event says it
            assert any("PreemptionNotice" in e for e in d.events)
            assert nbtools.launch.diagnose_log(job.logs()).cause == "lost-node"  # the log alone cannot tell why

            # a later run of another config dies of CUDA OOM: supervise re-attaches to it, diagnoses, and stops
            oom_cfg = cfg.replace(**{"grpo.max_num_steps": 4})
            _until(lambda: time.time() > preempted_at + 2.5, 5, "the preemption to lie before the next job")
            failed = _job(oom_cfg, oom_cfg.submission_id, ["Traceback (most recent call last):", OOM])
            failed.wait(timeout=120, raise_on_failure=False)
            run = nbtools.launch.supervise(oom_cfg, max_attempts=3, timeout=120)
            assert not run.ok and run.status == "FAILED" and len(run.attempts) == 1, str(run)
            assert run.diagnosis.cause == "oom" and run.attempts[0].cause == "oom" and run.attempts[0].retry is False
            assert "not retried" in run.note and "lower the memory per GPU" in str(run)
            ids = set(nbtools.jobs.list_jobs(cfg.dashboard_url).submission_id)
            assert f"{oom_cfg.submission_id}-attempt2" not in ids  # nothing was resubmitted
            assert record_url(oom_cfg).startswith("gs://") and storage.exists(record_url(oom_cfg))  # beside the logs
            assert nbtools.launch.read_attempts(oom_cfg)[0].cause == "oom"
        finally:
            cluster.down()
    assert not sim.kuberay.errors


# -- the pods' side of a stall verdict (issue #44): a restarted head, an evicted worker, and no secret in the bundle ---
SENTINEL = "s3ntinel-" + "Q7w8E9r0T1y2U3i4"


def _bundle_text(v) -> str:
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(storage.read_bytes(v.bundle))) as tar:
        texts = {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}
    return texts, "\n".join(texts.values()) + storage.read_text(v.summary_url)


def test_a_restarted_head_and_an_evicted_worker_are_named_in_the_stall_verdict(sim_gke, tmp_path, monkeypatch):
    from nbtools.launch._attempts import Attempt, save

    sim = sim_gke
    monkeypatch.setenv("MY_SERVICE_PASSWORD", SENTINEL)
    with sim.activated():
        cfg = sim.cfg().replace(**{"grpo.seed": 17})  # a submission id of its own
        cluster = nbtools.backends.get(cfg)
        try:
            cluster.up(timeout=120, progress=False)
            # an evicted worker while the job runs: Ray's job still says RUNNING
            flag = tmp_path / "done"
            script = (f"import os, pathlib, time\nprint('login', {FAKE_HF_TOKEN!r}, os.environ.get('MY_SERVICE_PASSWORD', "
                      f"{SENTINEL!r}), flush=True)\nwhile not pathlib.Path({str(flag)!r}).exists(): time.sleep(0.05)\n")
            job = nbtools.jobs.submit(cfg.dashboard_url, entrypoint=f"{sys.executable} -c {shlex.quote(script)}",
                                      submission_id=cfg.submission_id)
            _until(lambda: "login" in job.logs(), 60, "the job to run and print its secrets")
            gone = sim.evict(replace_after=30)["metadata"]["name"]
            v = nbtools.launch.stall(cfg, samples=1)
            assert (v.status, v.cause) == ("stalled", "host-oom"), f"{v}\n{v.notes}"
            assert f"worker {gone} was evicted" in v.evidence and "low on resource: memory" in v.evidence
            assert "host memory" in v.fix
            files, everything = _bundle_text(v)
            assert "(head): Running" in files["pods.txt"] and "Ready=True" in files["pods.txt"]  # the pods' conditions
            assert gone not in files["pods.txt"]  # KubeRay deleted it: its event names it
            assert f"Warning Evicted: Pod/{gone}: The node was low on resource: memory" in files["events.txt"]
            assert FAKE_HF_TOKEN not in everything and SENTINEL not in everything
            assert "<value of $HF_TOKEN>" in files["logs/driver.log"]  # it was there, and scrubbed
            flag.touch()
            job.wait(timeout=60, raise_on_failure=False)

            # a restarted head: the record says RUNNING, the head's new job table does not know the job
            ghost = f"{cfg.submission_id}-ghost"
            save(cfg, [Attempt(1, ghost, started=time.time() - 600, status="RUNNING", last_step=7)])
            head = sim.restart_head(cfg.cluster.name)["metadata"]["name"]
            v = nbtools.launch.stall(cfg, ghost)
            assert (v.status, v.cause, v.job_status, v.last_step) == ("stalled", "lost-node", "UNKNOWN", 7), str(v)
            assert f"head {head} restarted (1 restart(s), last: OOMKilled, exit 137)" in v.evidence
            assert "does not know it" in v.evidence and "delete the RayJob" in v.fix
            files, everything = _bundle_text(v)
            assert "1 restart(s) (last: OOMKilled, exit 137)" in files["pods.txt"] and "head" in files["pods.json"]
            assert FAKE_HF_TOKEN not in everything and SENTINEL not in everything
        finally:
            cluster.down()
    assert not sim.kuberay.errors
