"""The simulated GKE's GPU worker nodes: real Ray worker nodes (``ray start --address=<head> --block``) joined to the
sim's Ray head, each in its own mount namespace (the pod's view: the bucket's mount, and its own local disk).

Why: on KubeRay the head pod has no GPU and every pod has its own disk. Ray itself then decides where a job's driver
runs (the head, unless the job asks for GPUs with ``entrypoint_num_gpus``) and where GPU tasks run (the workers), so a
job that reads a file from the wrong pod's disk fails here as it does on GKE. The head is started with
``--num-gpus 0``; worker node ``i`` has the experiment's ``cluster.gpus_per_node`` GPUs and stands for the ``i``-th
worker pod (by name) of the RayCluster. A replaced (preempted) pod keeps its slot's disk here; on GKE a new VM's
disk is empty.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ports import free_port
from sim_files import pods_launcher

__all__ = ["WorkerNodes", "PATIENT_RAY", "PATIENT_GET_NODE", "OWN_SOCKETS", "NODE_SETTINGS", "kill_tree"]

# Ray settings of every sim node (the head's and the workers' processes), to cut CPU that no test and no nbtools reader
# uses (measured on the 2-core CI machine, one head + one worker node):
# - no idle workers prestarted when the first driver connects (raylet's ``prestart_worker_first_driver``): every job the
#   sim runs has a runtime_env (py_modules), whose workers start through setup_worker, so the prestarted plain ones sat
#   idle until the end (2 x 1.4 CPU-s per module); a job without one starts its worker on demand instead.
# - no C++ metrics recording (``enable_metrics_collection``: raylet, GCS, core workers; ~0.5 CPU-s a minute): nbtools
#   reads no Prometheus metric; the dashboard's node stats, logs and py-spy dumps come from the agents as before.
NODE_SETTINGS = {"RAY_prestart_worker_first_driver": "false", "RAY_enable_metrics_collection": "false"}

# ``ray start`` for a worker node, waiting up to 5 min (not Ray's fixed 30 s: ray/_private/node.py, Node.__init__'s
# ``raylet_start_wait_time_s``) for its raylet to register with the head's GCS, which on a loaded 2-core machine takes
# longer, but only while that raylet (a child of ``ray start``) is alive: a raylet that stopped on a failed start-up
# check (its wait for the agent's ports, on a busy machine) never registers: ``ray start`` now exits at once and
# WorkerNodes._wait starts the node again, instead of after 5 min (test_gke_verl's set-up, two worker nodes, once took
# 378 s on CI instead of 14); everything else is Ray's own CLI.
PATIENT_GET_NODE = """
import time
import psutil
import ray._private.services as services
_get_node = services.get_node
def _raylet_alive():
    for p in psutil.Process().children():
        try:
            if p.name() == "raylet" and p.status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.Error:
            pass
    return False
def get_node(*args, **kwargs):
    end = time.monotonic() + 300
    while True:
        try:
            return _get_node(*args, **kwargs)
        except RuntimeError:
            if time.monotonic() > end:
                raise
            if not _raylet_alive():
                raise RuntimeError("the raylet of this node exited before it registered with the GCS") from None
            time.sleep(1)
services.get_node = get_node
"""
# Each node's own raylet and object store socket names (from the environment ``_spawn`` gives it): left to Ray, two
# nodes starting at once on this one machine take the same free name in the head's session dir
# (ray/_private/node.py, _prepare_socket_file -> _make_inc_temp) and the second raylet dies on "bind: Address already
# in use" (seen on CI: the verl experiment's two worker nodes). This Ray's `ray start` has no option for them
# (its RayParams has the fields), so they are set on the RayParams it builds.
OWN_SOCKETS = """
import os
import ray._private.parameter as parameter
_init = parameter.RayParams.__init__
def _init_own_sockets(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.raylet_socket_name = os.environ["SIM_NODE_RAYLET_SOCKET"]
    self.plasma_store_socket_name = os.environ["SIM_NODE_PLASMA_SOCKET"]
parameter.RayParams.__init__ = _init_own_sockets
"""
PATIENT_RAY = PATIENT_GET_NODE + OWN_SOCKETS + """
import sys
from ray.scripts.scripts import main
sys.exit(main())
"""


class WorkerNodes:
    """``count`` Ray worker nodes of ``gpus`` GPUs each, joined to the head at ``gcs_address``; stop with :meth:`stop`."""

    def __init__(self, root: Path, *, backing: Path, mount: Path, gcs_address: str, dashboard_url: str, count: int,
                 gpus: int, env: dict[str, str], python: str):
        self.root, self.backing, self.mount = Path(root), backing, mount
        self.gcs_address, self.dashboard_url, self.count, self.gpus = gcs_address, dashboard_url, count, gpus
        self.env, self.ray_cli = env, [python]  # the venv's Python, running PATIENT_RAY
        self.procs: list[subprocess.Popen] = []
        self.sockets: Path | None = None  # the nodes' raylet and object store sockets (_spawn)

    def disk(self, i: int) -> Path:
        """Worker ``i``'s local disk on this machine (what its pod sees at sim_files.LOCAL_DISK)."""
        return self.root / f"worker-{i}" / "disk"

    def start(self, *, timeout: float = 600) -> WorkerNodes:
        self.sockets = Path(tempfile.mkdtemp(prefix="simnodes-"))  # short: a socket path has at most 107 bytes
        try:
            self.procs = [self._spawn(i) for i in range(self.count)]
            self._wait(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, i: int) -> subprocess.Popen:
        log = self.root / f"worker-{i}" / "ray-start.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        ports = [str(free_port()) for _ in range(6)]
        sockets = {"SIM_NODE_RAYLET_SOCKET": self.sockets / f"raylet.{i}", "SIM_NODE_PLASMA_SOCKET": self.sockets / f"plasma.{i}"}
        for path in sockets.values():  # a failed try's, before the node is started again (OWN_SOCKETS)
            path.unlink(missing_ok=True)
        cmd = [*pods_launcher(self.backing, self.mount, self.disk(i)), *self.ray_cli, "-c", PATIENT_RAY, "start", "--block",
               "--address", self.gcs_address, "--num-gpus", str(self.gpus), "--num-cpus", "2",
               "--object-store-memory", str(100 << 20), "--node-manager-port", ports[0], "--object-manager-port", ports[1],
               "--dashboard-agent-listen-port", ports[2], "--dashboard-agent-grpc-port", ports[3],
               "--runtime-env-agent-port", ports[4], "--metrics-export-port", ports[5], "--disable-usage-stats"]
        env = {**os.environ, **self.env, **NODE_SETTINGS, "RAY_AUTH_MODE": "disabled", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
               "RAY_USAGE_STATS_ENABLED": "0", "RAY_agent_register_timeout_ms": "120000",
               "RAY_raylet_start_wait_time_s": "120", **{k: str(v) for k, v in sockets.items()}}
        env.pop("RAY_ADDRESS", None)
        with open(log, "wb") as out:
            return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env=env, close_fds=True)

    def _wait(self, timeout: float) -> None:
        """Until every node's ``ray start`` reports it started, then the head's State API lists them with their GPUs (as
        notebook 02 reads them). A node whose ``ray start`` gave up is started again (a fresh log), twice at most."""
        from nbtools.backends._types import fetch_resources

        end, delay, tries = time.monotonic() + timeout, 0.2, [1] * self.count
        while True:
            for i, p in enumerate(self.procs):
                if p.poll() is None:
                    continue
                kill_tree(p.pid, session_only=True)
                if tries[i] == 3:
                    tail = (self.root / f"worker-{i}" / "ray-start.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"simulated GPU worker node {i} exited during start (3 tries):\n{tail}")
                tries[i] += 1
                self.procs[i] = self._spawn(i)
            # `ray start` says "Ray runtime started." once its node is registered with the head's GCS (no API call:
            # on a loaded machine the State API itself can take longer than any short timeout)
            joined = sum("Ray runtime started" in (self.root / f"worker-{i}" / "ray-start.log").read_text(errors="replace")
                         for i in range(self.count))
            if joined >= self.count:
                table = fetch_resources(self.dashboard_url, timeout=60).node_table
                if int((table["GPU"] > 0).sum()) < self.count:
                    raise RuntimeError(f"the simulated GPU worker nodes started but the head lists {table}")
                return
            if time.monotonic() > end:
                tail = (self.root / "worker-0" / "ray-start.log").read_text(errors="replace")[-1500:]
                raise TimeoutError(f"{joined} of {self.count} simulated GPU worker nodes joined {self.gcs_address} "
                                   f"in {timeout}s (logs under {self.root}); worker 0's log ends:\n{tail}")
            time.sleep(delay)
            delay = min(delay * 1.5, 2.0)

    def pid(self, i: int) -> int | None:
        """The pid of worker ``i``'s ``ray start`` (inside its namespace: ``nsenter --target`` it), if running."""
        if not self.procs:
            return None
        p = self.procs[i % len(self.procs)]
        return p.pid if p.poll() is None else None

    def stop(self) -> None:
        """SIGKILL each node's ``ray start --block`` with every process it started (as a deleted pod's node goes):
        Ray's graceful shutdown on SIGTERM costs about half a CPU-second a node, and nothing reads what it writes."""
        for p in self.procs:
            kill_tree(p.pid)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []
        if self.sockets is not None:
            shutil.rmtree(self.sockets, ignore_errors=True)


def kill_tree(pid: int, *, create_time: float | None = None, session_only: bool = False) -> None:
    """SIGKILL process ``pid`` (if it is still the one started at ``create_time``, when given), its descendants and
    every process still in its session (``start_new_session``), all found before the first is killed; with
    ``session_only`` (``pid`` has exited and may be reused) only what is left in its session."""
    import psutil

    procs = {}
    try:
        root = psutil.Process(pid)
        if create_time is not None and abs(root.create_time() - create_time) > 1.0:
            return  # the pid was reused
        if not session_only:
            procs = {root.pid: root, **{c.pid: c for c in root.children(recursive=True)}}
    except psutil.Error:
        pass
    for proc in psutil.process_iter():
        try:
            if proc.pid not in procs and os.getsid(proc.pid) == pid:
                procs[proc.pid] = proc
        except (psutil.Error, OSError):
            pass
    for proc in procs.values():
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(list(procs.values()), timeout=10)
