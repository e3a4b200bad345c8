"""A simulated GKE that the tests (and later the notebooks, with ``BACKEND="gke"``) drive end to end.

Every part is a TEST DOUBLE or a stand-in, started under one temp root and stopped in reverse order on exit (also
when a start-up step fails):

1. **GCS**: the real fake-gcs-server emulator (``gcs_emulator.py``); the bucket ``sim-bucket`` is created by the
   simulated ``gcloud storage buckets create`` (the plan's ``bucket`` step), or up front with ``provisioned=True``.
2. **Kubernetes API**: ``kube_double.py`` with KubeRay v1.7.0's RayCluster CRD schema, and a **KubeRay operator
   stand-in** thread (``sim_kuberay.py``) that creates the head/worker pods, events and status conditions and routes
   the head pod's port 8265 to (3).
3. **The Ray head behind the port-forward**: a real local Ray head on free ports whose processes cannot import
   nbtools, like the NeMo-RL image (``sim_image/sitecustomize.py`` on its PYTHONPATH); ``python`` on its PATH is
   this venv's interpreter (the image's venv). It runs in its own mount namespace: only it and its jobs (the
   "pods") see the run's files at the mount path ``<root>/data``; here that directory stays empty (sim_files.py).
   Like a KubeRay head pod it has no GPU; the GPU worker pods are real Ray worker nodes joined to it (sim_nodes.py),
   each in its own namespace, and every pod has its own local disk (sim_files.LOCAL_DISK), so Ray places a job's
   driver on the head unless the job asks for GPUs, as on GKE. ``kubectl exec`` into a sim pod runs the command in
   that pod's namespace.
4. **gcloud / kubectl / helm**: recording shims first on PATH (``sim_shims.py``, ``sim_shims_kube.py``): the TEST
   DOUBLE of these tools that the unit tests of plans use too (alone: ``SimGke(root, ray=False, mirror=False)``).
5. **gcsfuse**: a mirror thread from what the pods write (``backing_dir``, their ``/data``) into ``gs://sim-bucket``
   (``sim_gcsfuse.py``): this machine reads the run only from the bucket, as a laptop does on GKE.
6. **NeMo-RL**: ``<root>/opt/nemo-rl`` with the v0.7.0 example configs and test doubles of ``examples/run_grpo.py``
   (trains nbtools' miniature GRPO, writing NeMo-RL's layout) and ``examples/run_eval.py`` (``sim_nemo_rl/``).
   **verl** (a verl experiment): the verl stand-in checkout at ``<root>/opt/verl`` (sim_verl_checkout.py), the Hub's
   copy of the experiment's model in the shared HF cache (the pods reach no Hub: ``HF_HUB_OFFLINE=1``), and vLLM's
   test double (``vllm_double/``) on the image's Python path for the evaluation jobs.
7. **The experiment**: ``experiment_yaml``, written from ``experiments/gke-b200-gemma3-1b.yaml`` with the sim's
   project, bucket, mount, checkout, ports and the rehearsal's model, data and GRPO settings.

Example:
    with SimGke(tmp_path, steps=20, provisioned=True) as sim, sim.activated():
        cfg = sim.cfg()
        nbtools.backends.get(cfg).up()
        job = nbtools.launch.submit(cfg)
        sim.flush()                                   # what the job wrote is now in gs://sim-bucket/...

    # a notebook on the gke path (its kernel inherits the activated environment):
    with SimGke(tmp_path) as sim, sim.activated():
        papermill.execute_notebook("notebooks/01_provision_gke.ipynb", out,
                                   parameters={"BACKEND": "gke", "CONFIG": str(sim.experiment_yaml)})
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from unittest import mock

import yaml
from gcs_emulator import GcsEmulator, restore_emulator_env
from kube_double import TOKEN, KubeDouble
from ports import free_port as _free_port
from sim_files import BUCKET, PROJECT, in_pods, pods_launcher, write_checkout, write_experiment, write_shims
from sim_gcsfuse import BucketMirror
from sim_kuberay import KubeRayController, local_exec
from sim_nodes import NODE_SETTINGS, WorkerNodes, kill_tree
from sim_shims import read_log, write_credentials

__all__ = ["SimGke", "BUCKET", "PROJECT", "FAKE_HF_TOKEN", "crd_schema", "nemo_rl_configs"]

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1]
DOUBLES = Path(__file__).resolve().parent
FAKE_HF_TOKEN = "hf_SIMULATEDgkeTOKENnotARealOne0000"
KUBERAY_ASSET = TESTS / "assets" / "kuberay" / "v1.7.0" / "ray.io_rayclusters.yaml"
NEMO_RL_ASSET = TESTS / "assets" / "nemo-rl" / "v0.7.0" / "examples" / "configs"
# the image's Python path: no nbtools (sim_image/sitecustomize.py); vLLM is its test double (the trainers' images ship
# vLLM), or with ``SimGke(vllm_python=...)`` the bridge to real vLLM in that venv (vllm_bridge/)
IMAGE_PYTHONPATH = os.pathsep.join([str(DOUBLES / "sim_image"), str(DOUBLES / "vllm_double")])
REAL_VLLM_PYTHONPATH = os.pathsep.join([str(DOUBLES / "sim_image"), str(DOUBLES / "vllm_bridge")])


@functools.cache
def crd_schema() -> dict:
    """KubeRay v1.7.0's RayCluster ``openAPIV3Schema`` (tests/assets, else where tests/backends/test_gke.py reads it).

    Parsed once per process with libyaml (17,000 lines: ~1 s, against ~8 s for the pure-Python loader).
    """
    path = KUBERAY_ASSET
    if not path.exists():
        from tests.backends.test_gke import KUBERAY as path
    crd = yaml.load(Path(path).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]


def nemo_rl_configs() -> Path:
    """NeMo-RL v0.7.0's ``examples/configs`` (tests/assets, else where tests/launch/test_ray.py reads them)."""
    if NEMO_RL_ASSET.is_dir():
        return NEMO_RL_ASSET
    from tests.launch.test_ray import SHARED_CONFIGS

    return Path(SHARED_CONFIGS)


@contextlib.contextmanager
def _environ(changes: dict[str, str]):
    old = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for k, v in old.items():
            if k == "STORAGE_EMULATOR_HOST":  # never back to an emulator that has stopped since (see the helper)
                restore_emulator_env(changes[k], v)
            elif v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class SimGke:
    """The simulated GKE under ``root``; use as a context manager (see the module docstring).

    Args:
        root: an empty directory for everything (emulator files, kubeconfig, /data, checkout, Ray state, logs).
        name: the experiment's name.
        steps: the experiment's ``grpo.max_num_steps``.
        ray: start the Ray head (off for tests of the shims alone).
        mirror: run the gcsfuse stand-in.
        provisioned: create what notebook 01 would (cluster, kubeconfig context, bucket) through the shims.
        changes: dotted-key changes to the experiment YAML, e.g. ``{"cluster.kuberay": "helm"}``.
        rehearsal: changes to the rehearsal section the NeMo-RL doubles train with (the "image"), e.g.
            ``{"warmup_steps": 60}``.
        ready_after: seconds a new pod stays Pending before it is Running and Ready.
        vllm_python: the python of a venv with real vLLM (tools/vllm_venv.sh): the pods' ``vllm`` is then the bridge to
            it (vllm_bridge/), so an evaluation job's generations are real vLLM's, loaded from where the job reads the
            model; None: vLLM's test double (vllm_double/).
        isolate: only the pods (the Ray head's processes) see the run's files at the mount path ``data_dir``; this
            machine reads them from the bucket, as on GKE (sim_files.py; needs ``unshare --mount`` as root).
        experiment: the file in ``experiments/`` the sim experiment is written from; a verl one runs the verl stand-in
            (tests/doubles/sim_verl, at its ``trainer.verl_ref``) from ``verl_dir``.
    """

    def __init__(self, root: str | os.PathLike, *, name: str = "sim-grpo", steps: int = 300, ray: bool = True,
                 mirror: bool = True, provisioned: bool = False, changes: dict[str, Any] | None = None,
                 rehearsal: dict[str, Any] | None = None, ready_after: float = 0.2, head_cpus: int = 4,
                 isolate: bool = True, experiment: str = "gke-b200-gemma3-1b.yaml", vllm_python: str | None = None):
        self.root = Path(root).resolve()
        self.name, self.steps = name, steps
        self._want_ray, self._want_mirror, self._provisioned = ray, mirror, provisioned
        self._changes, self._rehearsal = dict(changes or {}), dict(rehearsal or {})
        self.ready_after, self.head_cpus = ready_after, head_cpus
        self.data_dir = self.root / "data"  # the pods' /data (storage.mount_path); empty here when isolated
        self.isolated = isolate
        self.vllm_python = vllm_python
        self.image_pythonpath = REAL_VLLM_PYTHONPATH if vllm_python else IMAGE_PYTHONPATH
        self.backing_dir = self.root / "pods" / "data" if isolate else self.data_dir  # where the pods' files are
        self.flush_dir = self.root / "pods" / "flush"  # a job's exiting processes ask the gcsfuse stand-in here
        self.code_dir = self.root / "opt" / "nemo-rl"  # the image's /opt/nemo-rl (trainer.code_dir)
        self.experiment_base = experiment  # the file in experiments/ the sim experiment is written from
        self.verl_dir = self.root / "opt" / "verl"  # a verl experiment's trainer.code_dir (sim_verl_checkout.py)
        self.shims_dir = self.root / "shims"
        self.bin_dir = self.shims_dir / "bin"
        self.kubeconfig = self.root / "kube" / "config"
        self.runs_dir = self.root / "runs"  # NBTOOLS_RUNS_DIR of the notebook side (forward pid files, plan state)
        self.cache_dir = self.root / "cache"
        self.head_dir = self.root / "head"  # the Ray head's runs dir (its pid file)
        self.image_dir = self.root / "image"  # PATH entry of the Ray head: `python` of the "image"
        self.experiment_yaml = self.root / "experiments" / f"{name}.yaml"
        self.dashboard_port = _free_port()  # the port-forward's local port (ray.dashboard_port)
        self.gcs: GcsEmulator | None = None
        self.kube: KubeDouble | None = None
        self.kuberay: KubeRayController | None = None
        self.mirror: BucketMirror | None = None
        self.head = None  # ClusterHandle of the Ray head (its dashboard is what the head pod's 8265 reaches)
        self.workers: WorkerNodes | None = None  # the GPU worker pods' Ray nodes (isolated sims only)
        self.head_disk = self.root / "pods" / "head" / "disk"  # the head pod's local disk (its LOCAL_DISK)
        self._stack: ExitStack | None = None

    # -- lifecycle ----------------------------------------------------------------------------------------
    def __enter__(self) -> SimGke:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> SimGke:
        stack = ExitStack()
        try:
            for d in (self.data_dir, self.backing_dir, self.flush_dir, self.code_dir.parent, self.bin_dir, self.kubeconfig.parent, self.runs_dir,
                      self.cache_dir, self.image_dir, self.experiment_yaml.parent):
                d.mkdir(parents=True, exist_ok=True)
            (self.root / "gcs").mkdir(exist_ok=True)
            self.gcs = stack.enter_context(GcsEmulator(self.root / "gcs"))
            self.kube = stack.enter_context(KubeDouble(schemas={("ray.io", "rayclusters"): crd_schema()}))
            write_shims(self, conf={"gcs": self.gcs.url, "kube_server": self.kube.url, "kube_token": TOKEN})
            write_checkout(self, self._rehearsal)
            write_experiment(self, self._rehearsal, self._changes)
            import nbtools

            with self.activated():
                nbtools.config.load(self.experiment_yaml, backend="gke")  # fail at start-up, not in a test
            routes = {}
            if self._want_ray:
                stack.callback(self._stop_head)
                self.head = self._start_head()
                routes[8265] = ("127.0.0.1", self.head.extra["dashboard_port"])
                if self.isolated:
                    self.workers = self._start_workers()
                    stack.callback(self.workers.stop)
            self.kuberay = stack.enter_context(KubeRayController(self.kube, routes=routes, ready_after=self.ready_after))
            self.kube.exec_handler = local_exec(self.pod_paths, cwd=self.code_dir, env=self._image_env, prefix=self._in_pods)
            if self._want_mirror:
                self.mirror = stack.enter_context(BucketMirror(self.backing_dir, self.gcs.url, BUCKET,
                                                               requests_dir=self.flush_dir))
            stack.callback(self._stop_forwards)
            if self._provisioned:
                self.provision()
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def stop(self) -> None:
        """Stop everything this sim started (forwards, mirror, controller, Ray head by pid, API double, emulator), and
        a TensorBoard a notebook started on its experiment (09 stops it, but a run that ends earlier would leave it)."""
        if self._stack is not None and self.experiment_yaml.is_file():
            import nbtools
            from nbtools.errors import NbtoolsError

            with self.activated():
                try:
                    nbtools.tensorboard.stop(self.cfg())
                except (NbtoolsError, OSError) as e:
                    print(f"sim_gke: TensorBoard not stopped: {e}", file=sys.stderr)
        if self._stack is not None:
            stack, self._stack = self._stack, None
            stack.close()

    # -- the parts ----------------------------------------------------------------------------------------
    def _start_head(self):
        import nbtools
        from nbtools.backends import _head

        cfg = nbtools.config.load(ROOT / "experiments" / "local.yaml", backend="local", overrides={
            "ray.port": _free_port(), "ray.dashboard_port": _free_port(), "ray.num_cpus": self.head_cpus})
        gpus = yaml.safe_load(self.experiment_yaml.read_text())["cluster"]
        env = {"NBTOOLS_RUNS_DIR": str(self.head_dir), "PYTHONPATH": self.image_pythonpath, "HF_HUB_OFFLINE": "1",
               "SIM_VLLM_PYTHON": self.vllm_python or "",
               "PATH": f"{self.image_dir}{os.pathsep}{os.environ.get('PATH', '')}", "HF_TOKEN": FAKE_HF_TOKEN,
               "RAY_AUTH_MODE": "disabled", "SIM_GKE_FLUSH_DIR": str(self.flush_dir) if self._want_mirror else "",
               # the verl stand-in trains answers written "#### X"; the vLLM double's text says them so too
               "SIM_VLLM_ANSWER_FORMAT": "gsm8k" if self.trainer_kind() == "verl" else "", **NODE_SETTINGS}
        from nbtools.errors import NotReadyError

        ray_cli = launch = _head._ray_cli
        num_gpus = gpus["worker_replicas"] * gpus["gpus_per_node"]
        if self.isolated:  # the head and every job it starts see backing_dir at data_dir (sim_files.py), and its disk
            prefix = pods_launcher(self.backing_dir, self.data_dir, self.head_disk)
            launch = lambda: [*prefix, *ray_cli()]  # noqa: E731
            num_gpus = 0  # a KubeRay head pod has no GPU: the worker nodes (_start_workers) have them
        for attempt in (1, 2):  # on a loaded 2-core machine the raylet's fixed 15 s wait for its agent can expire
            try:
                with _environ(env), mock.patch.object(_head, "_ray_cli", launch):
                    return _head.up(cfg, timeout=600, progress=False,
                                    extra_args=("--num-gpus", str(num_gpus)))
            except NotReadyError as e:
                if attempt == 2 or "exited during start" not in str(e):
                    raise
                _head.stop_all_under(self.head_dir)

    def _start_workers(self) -> WorkerNodes:
        """One Ray worker node per worker pod (``cluster.worker_replicas``), ``cluster.gpus_per_node`` GPUs each."""
        cluster = yaml.safe_load(self.experiment_yaml.read_text())["cluster"]
        env = {k: v for k, v in self._image_env().items() if k != "RAY_ADDRESS"}
        env["SIM_VLLM_ANSWER_FORMAT"] = "gsm8k" if self.trainer_kind() == "verl" else ""
        env["SIM_GKE_FLUSH_DIR"] = str(self.flush_dir) if self._want_mirror else ""
        return WorkerNodes(self.root / "pods", backing=self.backing_dir, mount=self.data_dir,
                           gcs_address=self.head.gcs_address, dashboard_url=self.head.dashboard_url,
                           count=int(cluster["worker_replicas"]), gpus=int(cluster["gpus_per_node"]), env=env,
                           python=sys.executable).start()

    def _image_env(self) -> dict[str, str]:
        """The environment of the sim's pods: the image's ``python`` first on PATH, no nbtools, the Ray head."""
        env = {**os.environ, "PATH": f"{self.image_dir}{os.pathsep}{os.environ.get('PATH', '')}",
               "PYTHONPATH": self.image_pythonpath, "HF_HUB_OFFLINE": "1", "HF_TOKEN": FAKE_HF_TOKEN,
               "SIM_VLLM_PYTHON": self.vllm_python or ""}
        if self.head is not None and self.head.gcs_address:
            env["RAY_ADDRESS"] = self.head.gcs_address
        return env

    def _stop_head(self) -> None:
        """SIGKILL the head with everything it started (as a deleted head pod goes: Ray's graceful shutdown on SIGTERM
        costs about 2 CPU-s), then let the local backend retire its record (and stop anything left, as it always does)."""
        from nbtools.backends import _head

        rec = _head.head_record(self.head_dir)
        if rec is not None:
            kill_tree(int(rec["pid"]), create_time=float(rec.get("create_time") or 0) or None)
        _head.stop_all_under(self.head_dir)
        temp, note = _head.temp_dir_for(self.head_dir)
        if note:  # the root was too long for Ray's socket paths: its /tmp fallback goes with the head
            shutil.rmtree(temp, ignore_errors=True)

    def _stop_forwards(self) -> None:
        """Stop every dashboard port-forward the gke backend started from this sim (by their recorded pids)."""
        from nbtools.kube.forward import ForwardHandle

        for pf in self.runs_dir.rglob("forward-*.json"):
            try:
                rec = json.loads(pf.read_text())
            except (OSError, ValueError):
                continue
            ForwardHandle(int(rec["pid"]), {int(k): int(v) for k, v in rec["ports"].items()}, pf).stop()

    def pod_paths(self) -> dict[str, Path]:
        """Where an exec'd command finds the pods' paths: the mount (``data_dir``, also as ``/data``; inside the
        pods' namespace when there is one, else at ``backing_dir``) and ``/opt/nemo-rl`` (the checkout)."""
        data = self.data_dir if self._in_pods() else self.backing_dir
        return {str(self.data_dir): data, "/data": data, "/opt/nemo-rl": self.code_dir, str(self.root): self.root}

    def _in_pods(self, namespace: str = "default", pod: str | None = None) -> list[str]:
        """The prefix that runs a command in ``pod``'s namespace: a worker pod's Ray node, else the head's."""
        if not self.isolated or self.head is None:
            return []
        labels = (self.pods(namespace).get(pod or "", {}).get("metadata") or {}).get("labels") or {}
        if labels.get("ray.io/node-type") == "worker" and self.workers is not None:
            workers = sorted(n for n, p in self.pods(namespace).items()
                             if p["metadata"]["labels"].get("ray.io/node-type") == "worker"
                             and p["metadata"]["labels"].get("ray.io/cluster") == labels.get("ray.io/cluster"))
            return in_pods(self.workers.pid(workers.index(pod)))
        return in_pods(self.head.pid)

    def host_path(self, pod_path: str | os.PathLike) -> Path:
        """Where a file the pods see at ``pod_path`` (under the mount path) is on this machine (``backing_dir``)."""
        return self.backing_dir / Path(pod_path).resolve().relative_to(self.data_dir)

    # -- using it -----------------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """The variables a notebook kernel (or this process, see :meth:`activated`) needs to use the sim."""
        return {
            "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "KUBECONFIG": str(self.kubeconfig),
            "STORAGE_EMULATOR_HOST": self.gcs.url,
            "NBTOOLS_RUNS_DIR": str(self.runs_dir),
            "NBTOOLS_CACHE_DIR": str(self.cache_dir),
            "HF_TOKEN": FAKE_HF_TOKEN,
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
        }

    def trainer_kind(self) -> str:
        """The sim experiment's ``trainer.kind`` (nemo-rl unless written from a verl experiment)."""
        return (yaml.safe_load(self.experiment_yaml.read_text()).get("trainer") or {}).get("kind", "nemo-rl")

    def activated(self):
        """A context in which this process's environment is :meth:`env` (restored on exit)."""
        return _environ(self.env())

    def cfg(self, **changes: Any):
        """The sim experiment (backend gke), with dotted-key ``changes``; use inside :meth:`activated`."""
        import nbtools

        cfg = nbtools.config.load(self.experiment_yaml, backend="gke")
        return cfg.replace(**changes) if changes else cfg

    def tool(self, *argv: str, stdin: str | None = None):
        """Run a shim (``sim.tool("gcloud", "projects", "describe", PROJECT)``) with the sim's environment."""
        import subprocess

        return subprocess.run([str(self.bin_dir / argv[0]), *argv[1:]], input=stdin, capture_output=True, text=True,
                              env={**os.environ, **self.env()}, check=False)

    def provision(self) -> None:
        """What notebook 01 leaves behind, for tests that skip it: the GKE cluster, its kubeconfig context, the bucket."""
        cfg = yaml.safe_load(self.experiment_yaml.read_text())
        p, loc, cluster = f"--project={PROJECT}", f"--location={cfg['gcp']['region']}", cfg["cluster"]["name"]
        for argv in (("gcloud", "container", "clusters", "create", cluster, p, loc),
                     ("gcloud", "container", "clusters", "get-credentials", cluster, p, loc),
                     ("gcloud", "storage", "buckets", "create", f"gs://{BUCKET}", p, loc)):
            r = self.tool(*argv)
            if r.returncode:
                raise RuntimeError(f"sim provisioning failed: {' '.join(argv)}: {r.stderr}")

    def write_credentials(self, context: str) -> None:
        """Add ``context`` (pointing at the API double) to the sim's kubeconfig, as get-credentials does."""
        write_credentials(self.kubeconfig, context, self.kube.url, TOKEN)

    def flush(self) -> dict[str, int]:
        """Sync the gcsfuse stand-in once: everything written under ``data_dir`` so far is in the bucket."""
        if self.mirror is None:
            raise RuntimeError("this SimGke runs without the gcsfuse stand-in (mirror=False)")
        return self.mirror.flush()

    def commands(self, tool: str | None = None) -> list[dict]:
        """The recorded shim invocations (``tool``, ``argv``, ``stdin`` with Secret values redacted, ``rc``)."""
        return [c for c in read_log(self.shims_dir / "commands.jsonl") if tool is None or c["tool"] == tool]

    def shim_state(self) -> dict:
        """What the simulated gcloud/helm hold (networks, clusters, node pools, IAM bindings, releases)."""
        p = self.shims_dir / "state.json"
        return json.loads(p.read_text()) if p.exists() else {}

    def pods(self, namespace: str = "default") -> dict[str, dict]:
        """The pods in the API double (name -> object)."""
        return self.kube.objects(f"/api/v1/namespaces/{namespace}/pods")

    def preempt(self, pod: str | None = None, *, namespace: str = "default", replace_after: float = 0.5) -> dict:
        """Reclaim a spot node: its pod (default: the first worker) fails with kubelet's node-shutdown condition and a
        node event, then KubeRay's
        stand-in replaces it after ``replace_after`` seconds. Returns the failed pod."""
        if pod is None:
            workers = sorted(n for n, p in self.pods(namespace).items()
                             if p["metadata"]["labels"].get("ray.io/node-type") == "worker")
            if not workers:
                raise RuntimeError("no worker pod to preempt: bring the cluster up first")
            pod = workers[0]
        return self.kuberay.preempt(namespace, pod, replace_after=replace_after)

    def evict(self, pod: str | None = None, *, namespace: str = "default", replace_after: float = 0.5) -> dict:
        """Evict a pod for node memory pressure (default: the first worker); KubeRay's stand-in replaces it."""
        if pod is None:
            pod = min(n for n, p in self.pods(namespace).items() if p["metadata"]["labels"].get("ray.io/node-type") == "worker")
        return self.kuberay.evict(namespace, pod, replace_after=replace_after)

    def restart_head(self, cluster: str, *, namespace: str = "default") -> dict:
        """The head pod of RayCluster ``cluster`` restarts its container (kuberay#3860): its restart count and last
        termination change."""
        return self.kuberay.restart_head(namespace, cluster)

    def report(self) -> str:
        """State for a failure message: recent shim commands, API objects, controller/mirror errors, head log tail."""
        lines = ["--- simulated GKE ---"]
        lines += [f"$ {c['tool']} {' '.join(c['argv'])}  -> {c['rc']}" for c in self.commands()[-15:]]
        if self.kube is not None:
            lines += [f"{coll}: {sorted(objs)}" for coll, objs in sorted(self.kube.store.items()) if objs]
        if self.kuberay is not None and self.kuberay.errors:
            lines.append(f"KubeRay stand-in errors: {self.kuberay.errors[-5:]}")
        if self.mirror is not None and self.mirror.last_error:
            lines.append(f"gcsfuse stand-in: {self.mirror.last_error}")
        if self.head is not None and self.head.log_file and Path(self.head.log_file).exists():
            lines += ["Ray head log tail:", *Path(self.head.log_file).read_text(errors="replace").splitlines()[-10:]]
        return "\n".join(lines)
