"""The simulated GPU worker nodes' ``ray start`` (tests/doubles/sim_nodes.py, ``PATIENT_RAY``) waits longer than Ray's
fixed 30 s for its raylet to register with the head's GCS, but only while that raylet is alive: one that stopped on a
failed start-up check never registers, and waiting the 5 min out for it held a CI run's test_gke_verl set-up for
378 s before the node was started again. Checked on Ray's own ``services.get_node`` patched as ``ray start`` runs it,
with a GCS that never knows the node and a stand-in raylet process (``sleep`` under the name ``raylet``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types

from sim_nodes import PATIENT_GET_NODE

CHILD = """
import subprocess, sys, threading, time
import ray._private.services as services

def unknown(*args, **kwargs):  # what Ray's get_node raises until the raylet has registered
    raise RuntimeError("node not found")

services.get_node = unknown
exec(sys.argv[1])
raylet = subprocess.Popen([sys.argv[2], "60"])
threading.Timer(3.0, raylet.kill).start()  # stopped, not reaped: a zombie child counts as exited
t0 = time.monotonic()
try:
    services.get_node("127.0.0.1:1", "00" * 28)
except RuntimeError as e:
    print(f"{time.monotonic() - t0:.1f} {e}")
"""


def test_worker_ray_start_waits_for_a_live_raylet_and_gives_up_once_it_exited(tmp_path):
    fake = tmp_path / "raylet"
    shutil.copy(shutil.which("sleep"), fake)
    r = subprocess.run([sys.executable, "-c", CHILD, PATIENT_GET_NODE, str(fake)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    waited, message = r.stdout.split(" ", 1)
    assert 2.5 <= float(waited) < 30, r.stdout  # waited while the raylet ran, not the 300 s after it exited
    assert "exited before it registered" in message, r.stdout


def test_two_worker_nodes_starting_at_once_never_share_a_socket_name(tmp_path, monkeypatch):
    """Left to Ray, two nodes starting at once on one machine take the same free socket name in the head's session dir
    and one raylet dies on "bind: Address already in use" (test_gke_verl's two worker nodes did, on CI). Each node's
    ``ray start`` is given its own names, and Ray's own RayParams, as ``ray start`` builds it, carries them."""
    import sim_nodes

    started = []

    class Recorded:
        pid = 0

        def __init__(self, cmd, **kwargs):
            started.append(kwargs["env"])

    fake = types.SimpleNamespace(**{k: getattr(subprocess, k) for k in ("STDOUT", "DEVNULL", "TimeoutExpired")}, Popen=Recorded)
    monkeypatch.setattr(sim_nodes, "subprocess", fake)  # only the nodes' `ray start`: pods_launcher runs its own
    monkeypatch.setattr(sim_nodes.WorkerNodes, "_wait", lambda self, timeout: None)
    (tmp_path / "b").mkdir()
    (tmp_path / "m").mkdir()
    nodes = sim_nodes.WorkerNodes(tmp_path, backing=tmp_path / "b", mount=tmp_path / "m", gcs_address="127.0.0.1:1",
                                  dashboard_url="http://127.0.0.1:2", count=2, gpus=8, env={}, python=sys.executable)
    nodes.start()
    try:
        names = [(env["SIM_NODE_RAYLET_SOCKET"], env["SIM_NODE_PLASMA_SOCKET"]) for env in started]
        every = [n for node in names for n in node]
        assert len(set(every)) == 4, names
        assert all(len(n.encode()) < 108 for n in every), every  # a Unix socket path's limit
        probe = "import ray._private.parameter as p\nr = p.RayParams()\nprint(r.raylet_socket_name, r.plasma_store_socket_name)"
        r = subprocess.run([sys.executable, "-c", sim_nodes.OWN_SOCKETS + probe], capture_output=True, text=True,
                           env={**os.environ, **started[1]}, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == list(names[1]), r.stdout
    finally:
        nodes.procs = []
        nodes.stop()
    assert not nodes.sockets.exists()
