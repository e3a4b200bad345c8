"""Port-forward a pod port to 127.0.0.1 through the Kubernetes API, in a detached process owned by its pid.

Why not ``kubectl port-forward &``: its one SPDY stream dies with the first dropped connection (ray#24889,
ray#25909), it needs the kubectl binary, and notebooks end up killing it by name. Here each local TCP connection
opens its own API port-forward websocket (``kubernetes.stream.portforward``) to the pod found *at that moment*
by label selector, so a restarted head pod or a dropped stream costs one request, not the forward. The listener
runs in a detached process (it outlives the notebook kernel that started it, as notebooks 03..08 need the
dashboard) recorded in a pid file; ``stop()`` terminates exactly that pid.

Run by hand: ``python -m nbtools.kube.forward --namespace default --selector ray.io/cluster=c,ray.io/node-type=head
--map 8265:8265 --map 6006:6006``.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from nbtools import _atomic, _pids
from nbtools._escape import html as _h
from nbtools.errors import NotReadyError

__all__ = ["Forwarder", "ForwardHandle", "start", "attach", "main"]


class Forwarder:
    """In-process listener: 127.0.0.1:local -> pod (chosen by selector per connection):remote."""

    def __init__(self, api, namespace: str, selector: str, mapping: dict[int, int], host: str = "127.0.0.1"):
        self.api, self.namespace, self.selector, self.host = api, namespace, selector, host
        self.mapping = dict(mapping)  # remote -> local
        self._listeners: list[socket.socket] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> Forwarder:
        for remote, local in self.mapping.items():
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((self.host, local))
            s.listen(64)
            s.settimeout(0.2)
            self.mapping[remote] = s.getsockname()[1]
            self._listeners.append(s)
            t = threading.Thread(target=self._accept, args=(s, remote), daemon=True, name=f"forward-{remote}")
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        for s in self._listeners:
            s.close()
        for t in self._threads:
            t.join(2)

    def _accept(self, listener: socket.socket, remote: int) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._bridge, args=(conn, remote), daemon=True).start()

    def _bridge(self, conn: socket.socket, remote: int) -> None:
        from kubernetes import client
        from kubernetes.stream import portforward

        from nbtools.kube._api import find_pod

        try:
            pod = find_pod(self.api, self.namespace, self.selector).metadata.name
            core = client.CoreV1Api(client.ApiClient(self.api.configuration))
            pf = portforward(core.connect_get_namespaced_pod_portforward, pod, self.namespace, ports=str(remote))
            upstream = pf.socket(remote)
        except Exception as e:  # noqa: BLE001 - report to the client and keep listening
            print(f"nbtools forward: cannot reach {self.selector}:{remote}: {e}", file=sys.stderr, flush=True)
            conn.close()
            return
        try:
            socks = [conn, upstream]
            while not self._stop.is_set():
                r, _, _ = select.select(socks, [], [], 0.5)
                done = False
                for s in r:
                    data = s.recv(65536)
                    if not data:
                        done = True
                        break
                    (upstream if s is conn else conn).sendall(data)
                if done:
                    break
        except OSError:
            pass
        finally:
            conn.close()
            upstream.close()
            pf.close()


@dataclass
class ForwardHandle:
    """A running detached forward: stop it with ``stop()`` (terminates exactly its recorded pid).

    Only the ``Popen`` that ``start`` made is waited on: a pid read from a pid file may be another owner's child, and
    reaping it would rob that owner's ``wait()`` of the exit status (it would see 0 for a killed process).
    """

    pid: int
    ports: dict[int, int]  # remote -> local
    pid_file: Path
    started_by_us: bool = True
    _proc: subprocess.Popen | None = field(default=None, repr=False, compare=False)

    def url(self, remote: int = 8265) -> str:
        return f"http://127.0.0.1:{self.ports[remote]}"

    def alive(self) -> bool:
        return _is_ours(self.pid)

    def stop(self, timeout: float = 10) -> str:
        """Terminate the forward process (SIGTERM, then SIGKILL after ``timeout``) and remove its pid file.

        Returns:
            how it ended: "stopped" (it exited on SIGTERM), "killed: …" (it did not within ``timeout``; SIGKILL),
            or "absent" (no such process of ours).
        """
        how = "absent"
        if _is_ours(self.pid):
            os.kill(self.pid, signal.SIGTERM)
            end = time.monotonic() + timeout
            while _is_ours(self.pid) and time.monotonic() < end:  # a zombie is not "ours": no reaping needed
                self._reap()
                time.sleep(0.05)
            how = "stopped"
            if _is_ours(self.pid):
                os.kill(self.pid, signal.SIGKILL)
                how = f"killed: it did not exit within {timeout:g}s of SIGTERM"
        self._reap(wait=5)
        self.pid_file.unlink(missing_ok=True)
        return how

    def _reap(self, wait: float = 0) -> None:
        """Collect the exit status of the process ``start`` made here (no zombie left); never touch another pid."""
        if self._proc is None:
            return
        if not wait:
            self._proc.poll()
            return
        try:
            self._proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass

    def _repr_html_(self) -> str:
        ports = ", ".join(f"pod:{_h(r)} &rarr; <a href='{_h(self.url(r))}'>{_h(self.url(r))}</a>" for r in self.ports)
        return f"port-forward pid {self.pid} ({'running' if self.alive() else 'stopped'}): {ports}"


def _is_ours(pid: int) -> bool:
    return _pids.runs(pid, b"nbtools.kube.forward")


def attach(pid_file: Path) -> ForwardHandle | None:
    """The forward recorded in ``pid_file`` when its process still runs and its ports answer, else None."""
    try:
        data = json.loads(pid_file.read_text())
    except (OSError, ValueError):
        return None
    ports = {int(k): int(v) for k, v in data["ports"].items()}
    if _is_ours(data["pid"]) and all(_pids.port_answers(p) for p in ports.values()):
        return ForwardHandle(data["pid"], ports, pid_file, started_by_us=False)
    return None


def start(*, namespace: str, selector: str, ports: dict[int, int], pid_file: Path, kubeconfig: str | None = None,
          context: str | None = None, timeout: float = 30) -> ForwardHandle:
    """Start (or re-attach to) a detached forward; returns when every local port accepts connections.

    Raises:
        NotReadyError: the process exited or its ports did not open within ``timeout``, with its stderr.
    """
    existing = attach(pid_file)
    if existing is not None and existing.ports == ports:
        return existing
    if existing is not None:
        existing.stop()
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    log = pid_file.with_suffix(".log")
    args = [sys.executable, "-m", "nbtools.kube.forward", "--namespace", namespace, "--selector", selector]
    for r, loc in ports.items():
        args += ["--map", f"{r}:{loc}"]
    if kubeconfig:
        args += ["--kubeconfig", str(kubeconfig)]
    if context:
        args += ["--context", context]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    handle = ForwardHandle(proc.pid, dict(ports), pid_file, _proc=proc)
    _atomic.write_json(pid_file, {"pid": proc.pid, "ports": ports, "namespace": namespace, "selector": selector},
                       indent=None)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            break
        if all(_pids.port_answers(p) for p in ports.values()):
            return handle
        time.sleep(0.1)
    handle.stop()
    raise NotReadyError(
        f"port-forward to {selector} ({ports}) did not start within {timeout:.0f}s",
        reason=log.read_text(errors="replace")[-2000:] if log.exists() else "",
        fix="check the kubeconfig/context and that the local ports are free (another forward or Ray head?)",
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nbtools.kube.forward", description=__doc__.split("\n\n")[0])
    p.add_argument("--namespace", required=True)
    p.add_argument("--selector", required=True, help="label selector of exactly one pod")
    p.add_argument("--map", action="append", required=True, help="REMOTE:LOCAL, repeatable")
    p.add_argument("--kubeconfig")
    p.add_argument("--context")
    a = p.parse_args(argv)
    from nbtools.kube._api import connect

    api = connect(kubeconfig=a.kubeconfig, context=a.context)
    mapping = {int(r): int(loc) for r, loc in (m.split(":") for m in a.map)}
    fwd = Forwarder(api, a.namespace, a.selector, mapping).start()
    stop = threading.Event()
    # a parent thread that blocks SIGTERM (a Jupyter kernel's) passes its mask on through exec: unblock, or stop()'s
    # SIGTERM would stay pending until the SIGKILL
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"forwarding {a.selector}: {fwd.mapping}", flush=True)
    # Python runs signal handlers in the main thread only, at its next bytecode: a SIGTERM that another thread took
    # would wait for a wake-up that an untimed wait never has
    while not stop.wait(0.5):
        pass
    fwd.stop()
    sys.stdout.flush()
    # kubernetes' port-forward proxy threads are not daemons: one live connection (a dashboard tab, a log stream)
    # would keep this process alive after SIGTERM until the caller's SIGKILL; nothing here needs more clean-up
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
