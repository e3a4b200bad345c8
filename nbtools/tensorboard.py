"""TensorBoard on the run's logs, on this machine, for every backend: a local path, or ``gs://`` on GKE.

Why here and not on the head pod: TensorBoard reads ``gs://`` through fsspec/gcsfs with the user's credentials, so
the same call works for a local run, a GKE run (its bucket) and any Ray address whose storage is a URL, with no
port to forward and nothing running in the cluster. The server is a detached process recorded by pid under
``<runs_dir>/tensorboard/``: re-running the cell re-attaches, ``stop`` ends exactly that process.

Example:
    >>> tb = nbtools.tensorboard.start(cfg)
    >>> tb.url
    'http://127.0.0.1:6006'
    >>> nbtools.tensorboard.stop(cfg)
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbtools import _paths, _pids
from nbtools._atomic import write_text
from nbtools._escape import html as _h
from nbtools.config import Experiment
from nbtools.errors import DependencyError, NotReadyError

__all__ = ["TensorBoard", "Stopped", "start", "stop", "logdir_of", "tags"]


@_paths.tidy_reprs
@dataclass
class TensorBoard:
    """A running TensorBoard server: open :attr:`url` in a browser."""

    pid: int
    port: int
    logdir: str
    pid_file: Path
    reattached: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return _is_ours(self.pid)

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "url": self.url, "logdir": self.logdir, "reattached": self.reattached}

    def _repr_html_(self) -> str:
        state = "re-attached" if self.reattached else "started"
        return (f"TensorBoard ({state}, pid {self.pid}) on <code>{_h(self.logdir)}</code>: "
                f"<a href='{self.url}' target='_blank'>{self.url}</a>")


def logdir_of(cfg: Experiment) -> str:
    """The URL of the run's log_dir as this machine reads it (``gs://…`` on GKE)."""
    from nbtools import backends

    b = backends.get(cfg)
    return b.storage.url(b.log_dir)


def _servable(logdir: str) -> str:
    """What TensorBoard itself can read for ``logdir``: the URL, except a Ray cluster's own files (``ray+http://``,
    read by jobs in this process only), which it serves from their local mirror, refreshed on each :func:`start`."""
    if not logdir.startswith("ray+"):
        return logdir
    from nbtools import storage

    return str(storage.mirror(logdir, include=lambda rel: "tfevents" in posixpath.basename(rel)))


def _pid_file(cfg: Experiment) -> Path:
    return Path(cfg.runs_dir) / "tensorboard" / f"{cfg.name}.json"


def _is_ours(pid: int) -> bool:
    return _pids.runs(pid, b"tensorboard")



def _attach(pf: Path, logdir: str) -> TensorBoard | None:
    try:
        rec = json.loads(pf.read_text())
    except (OSError, ValueError):
        return None
    if rec.get("logdir") == logdir and _is_ours(rec["pid"]) and _pids.port_answers(rec["port"]):
        return TensorBoard(rec["pid"], rec["port"], logdir, pf, reattached=True)
    return None


# TensorBoard's own words (tensorboard/program.py) and werkzeug's when the port it was given is bound by another
_PORT_TAKEN = re.compile(r"could not bind to port|Address already in use|is in use by another program")


def start(cfg: Experiment, *, port: int = 6006, timeout: float = 90) -> TensorBoard:
    """Serve the run's TensorBoard scalars on ``127.0.0.1`` (``port``, or a free one when it is taken).

    Raises:
        NotReadyError: TensorBoard exited or did not answer within ``timeout`` (with its output).

    Example:
        >>> nbtools.tensorboard.start(cfg).url
    """
    logdir = logdir_of(cfg)
    pf = _pid_file(cfg)
    running = _attach(pf, logdir)
    if running is not None:
        _servable(logdir)  # a mirror it serves is brought up to date
        return running
    stop(cfg)  # a server of ours on another logdir (the config changed): replace it
    exe = Path(sys.executable).parent / "tensorboard"
    if not exe.is_file():
        raise DependencyError.extra("tensorboard", "the TensorBoard server")
    if _pids.port_answers(port):
        port = 0
    served = _servable(logdir)
    env = {**os.environ, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}  # gcsfs: plain JSON API reads
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        env["FSSPEC_GS_TOKEN"] = "anon"
    pf.parent.mkdir(parents=True, exist_ok=True)
    log = pf.with_suffix(".log")
    for attempt in (port, 0):  # port 0: TensorBoard binds a free one itself, so a second start cannot race the first
        cmd = [str(exe), "--logdir", served, "--host", "127.0.0.1", "--port", str(attempt), "--load_fast", "false",
               "--reload_interval", "15"]
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            m = re.search(r"http://[^:/\s]+:(\d+)/", text)
            if m and _pids.port_answers(int(m.group(1))):
                tb = TensorBoard(proc.pid, int(m.group(1)), logdir, pf)
                write_text(pf, json.dumps({"pid": proc.pid, "port": tb.port, "logdir": logdir, "command": cmd}))
                return tb
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        if proc.poll() is None:
            proc.kill()
        if attempt == 0 or not _PORT_TAKEN.search(log.read_text(errors="replace")):
            break  # taken between our check and its bind: try again on a port of its own choosing
    raise NotReadyError(f"TensorBoard on {logdir} did not start within {timeout:g} s",
                        reason=log.read_text(errors="replace")[-1500:],
                        fix="read the output above (credentials for gs://? `gcloud auth application-default login`)")


@dataclass(frozen=True)
class Stopped:
    """What :func:`stop` did: true when a TensorBoard of this experiment ran and was stopped."""

    pid: int | None = None
    killed: bool = False  # it ignored SIGTERM for ``timeout`` seconds

    def __bool__(self) -> bool:
        return self.pid is not None

    def __repr__(self) -> str:
        if self.pid is None:
            return "no TensorBoard of this experiment was running: nothing to stop"
        return f"TensorBoard (pid {self.pid}) stopped" + (" (killed after it ignored SIGTERM)" if self.killed else "")

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(repr(self))


def stop(cfg: Experiment, *, timeout: float = 10) -> Stopped:
    """Stop the TensorBoard this experiment started (exactly its recorded pid); false when none ran."""
    pf = _pid_file(cfg)
    try:
        rec = json.loads(pf.read_text())
    except (OSError, ValueError):
        return Stopped()
    pid, ran, killed = rec.get("pid"), None, False
    if pid and _is_ours(pid):
        ran = pid
        os.kill(pid, signal.SIGTERM)
        end = time.monotonic() + timeout
        while _is_ours(pid) and time.monotonic() < end:
            time.sleep(0.05)
        if _is_ours(pid):
            os.kill(pid, signal.SIGKILL)
            killed = True
    pf.unlink(missing_ok=True)
    return Stopped(ran, killed)


def tags(tb: TensorBoard, *, timeout: float = 60) -> dict[str, list[str]]:
    """{run: [scalar tags]} that the server reports, waiting (backing off) until it has loaded some; {} at timeout.

    Example:
        >>> nbtools.tensorboard.tags(tb)
        {'exp_001/tensorboard': ['train/reward', ...]}
    """
    import urllib.request

    end, delay = time.monotonic() + timeout, 0.2
    while True:
        try:
            with urllib.request.urlopen(tb.url + "/data/plugin/scalars/tags", timeout=10) as r:
                data = json.loads(r.read())
        except (OSError, ValueError):
            data = {}
        if data or time.monotonic() >= end:
            return {run: sorted(t) for run, t in data.items()}
        time.sleep(delay)
        delay = min(delay * 1.5, 2.0)
