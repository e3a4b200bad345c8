"""The ``local`` backend (the default): a Ray head on this machine and the run's files under ``runs/``.

The head is the venv's own ``ray start --head --block`` (see ``_head``), recorded by pid under
``<runs_dir>/ray/head.json`` so that re-running ``up`` re-attaches and ``down`` stops exactly that head. Jobs run
the miniature GRPO rehearsal (``nbtools.rehearsal``), which writes NeMo-RL's exact layout into the local run dir,
so every reader after the launch is the same code that reads a GKE run from its bucket.

Example:
    >>> cluster = nbtools.backends.get(cfg)       # an experiment with `backend: local`
    >>> cluster.up().dashboard_url
    'http://127.0.0.1:8265'
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pandas as pd

from nbtools.backends import _head
from nbtools.backends._proc import _alive
from nbtools.backends._types import (
    ClusterHandle,
    ClusterResources,
    ClusterState,
    ClusterStatus,
    Preview,
    Teardown,
    fetch_resources,
)
from nbtools.config import Experiment
from nbtools.errors import ConflictError, Fix
from nbtools.storage import RunStorage

__all__ = ["LocalBackend", "resolve_local", "stop_all_under", "head_record"]


def resolve_local(value: str, source: str | None) -> Path:
    """A configured path as this machine sees it: relative paths are relative to the experiment file."""
    p = Path(value).expanduser()
    if not p.is_absolute():
        p = (Path(source).parent if source else Path.cwd()) / p
    return p.resolve()


class LocalBackend:
    """A Ray head on 127.0.0.1 started from this Python environment; the run's files under ``cfg.run_dir``."""

    name = "local"
    secrets_from = "none"  # the rehearsal needs none
    provisions = False  # the GKE plan is shown, never applied
    first_notebook = "02_ray_cluster"  # the local head is started first
    unread_sections = ("gcp", "cluster", "storage", "images", "trainer")  # the rehearsal trains in this Python

    def __init__(self, cfg: Experiment):
        self.cfg = cfg

    @property
    def python(self) -> str:
        """The interpreter jobs run: this one (the local head was started from this environment)."""
        return sys.executable

    # -- where things are ---------------------------------------------------------------------------------
    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.cfg.ray.dashboard_port}"

    @property
    def log_dir(self) -> str:
        configured = self.cfg.logging.log_dir
        return str(resolve_local(configured, self.cfg.source) if configured else self.cfg.run_dir / "logs")

    @property
    def checkpoint_dir(self) -> str:
        configured = self.cfg.checkpointing.checkpoint_dir
        return str(resolve_local(configured, self.cfg.source) if configured else self.cfg.run_dir / "checkpoints")

    @property
    def storage(self) -> RunStorage:
        return RunStorage(str(self.cfg.runs_dir))

    # -- verbs --------------------------------------------------------------------------------------------
    def up(self, *, timeout: float | None = None, progress: bool = True, extra_args=()) -> ClusterHandle:
        """Start the local head, or re-attach to the one this runs dir already has (never a second one)."""
        return _head.up(self.cfg, timeout=timeout or 300, progress=progress, extra_args=extra_args)

    def reattach(self) -> ClusterHandle | None:
        """The head this runs dir recorded, when it still runs and answers (nothing is started)."""
        if not self.status().running:
            return None
        return _head.up(self.cfg, timeout=30, progress=False)

    def down(self, *, timeout: float = 30) -> Teardown:
        """Stop the head recorded under ``cfg.runs_dir`` (only if we started it), by pid."""
        res = _head.down(self.cfg, timeout=timeout)
        action = "stopped" if res.stopped else "absent"
        rows = pd.DataFrame([{"kind": "ray-head", "name": f"pid {res.pid}" if res.pid else str(res.pid_file), "action": action}])
        return Teardown(self.name, rows, res.message)

    def preview(self, verb: str) -> Preview:
        rec = _head.head_record(self.cfg.runs_dir)
        if verb == "up":
            would = (f"re-attach to the Ray head pid {rec['pid']} recorded under {self.cfg.runs_dir}" if rec else
                     f"start a local Ray head on ports {self.cfg.ray.port}/{self.cfg.ray.dashboard_port} "
                     f"(state in {self.cfg.runs_dir}/ray)")
        else:
            would = (f"stop the Ray head pid {rec['pid']} recorded under {self.cfg.runs_dir}" if rec else
                     f"do nothing: no Ray head is recorded under {self.cfg.runs_dir}")
        return Preview(self.name, verb, would)

    def status(self) -> ClusterStatus:
        rec = _head.head_record(self.cfg.runs_dir)
        if rec is None or _alive(rec) is None:
            return ClusterStatus(self.name, ClusterState.STOPPED, self.dashboard_url, f"no live Ray head recorded under {self.cfg.runs_dir}")
        from nbtools.backends._proc import _dashboard_version

        answers = _dashboard_version(rec["dashboard_url"]) is not None
        return ClusterStatus(self.name, ClusterState.RUNNING if answers else ClusterState.STARTING, rec["dashboard_url"],
                             f"Ray head pid {rec['pid']} ({rec.get('status', '?')})", started_by_us=True)

    def resources(self, *, timeout: float = 10) -> ClusterResources:
        rec = _head.head_record(self.cfg.runs_dir)
        pid = rec["pid"] if rec and rec.get("dashboard_url") == self.dashboard_url and _alive(rec) is not None else None
        return fetch_resources(self.dashboard_url, head_pid=pid, timeout=timeout)

    def gpus(self) -> int | None:
        """None: the rehearsal trains on CPUs, so there is no GPU count to check."""
        return None

    def events(self, *, since: float | None = None, until: float | None = None, limit: int = 50) -> list[str]:
        """None to ask: the rehearsal's processes run on this machine (a dead rank shows in the job's log)."""
        return []

    def pod_states(self) -> list:
        """None: the rehearsal's ranks are processes of this machine."""
        return []

    def describe(self) -> list[tuple[str, str]]:
        return [("cluster", f"local Ray head on 127.0.0.1:{self.cfg.ray.dashboard_port}"), ("runs", str(self.cfg.run_dir))]

    def job_env(self) -> dict[str, str]:
        return {}

    def slow_mount(self, path: str) -> bool:
        return False  # the run's storage is a filesystem the jobs read directly

    def job_secrets(self) -> dict:
        return {}

    def wipe(self, *, confirm: str) -> Teardown:
        """Delete this experiment's logs and checkpoints under the runs dir (NeMo-RL would resume from them)."""
        if not confirm:
            return Teardown.unconfirmed(self.name, self.cfg.name)
        if confirm != self.cfg.name:
            raise ConflictError(
                f"wipe deletes the results of experiment {self.cfg.name!r}; confirm={confirm!r} does not match it",
                fix=Fix(f"pass confirm={self.cfg.name!r} (notebook 09: CONFIRM = {self.cfg.name!r}) if you really mean it",
                        cli=f"wipe is notebook 09's step: set CONFIRM = {self.cfg.name!r} there if you really mean it"))
        rows = []
        for kind, path in (("log_dir", self.log_dir), ("checkpoint_dir", self.checkpoint_dir)):
            p = Path(path)
            existed = p.exists()
            shutil.rmtree(p, ignore_errors=True)
            rows.append({"kind": kind, "name": str(p), "action": "removed" if existed else "absent"})
        return Teardown(self.name, pd.DataFrame(rows), f"wiped {self.cfg.name}'s logs and checkpoints under {self.cfg.run_dir}")

    def provision_plan(self):
        """Nothing to provision here: the plan this experiment would run on GKE, shown and never applied."""
        from nbtools import backends, gke

        return gke.plan(backends.gke_view(self.cfg), applicable=False,
                        note="local backend: nothing to provision; this is what the same experiment needs on GKE")

    def destroy_plan(self, *, delete_bucket: str | None = None):
        from nbtools import gke

        return gke.Plan.empty("destroy", "local backend: nothing was provisioned")

    def job_trainer(self, trainer):
        """The CPU rehearsal in place of ``trainer``: this machine has no GPUs for it; the rehearsal writes its files."""
        from nbtools.trainers import Rehearsal

        return Rehearsal(self.cfg, trainer)

    @classmethod
    def check(cls, cfg: Experiment) -> list[tuple[tuple[str, ...], str]]:
        """The rules of the rehearsal this backend runs (its model shape, ranks, faults and logged metrics), and a
        ``cluster.gpu_type`` whose memory nbtools knows (what the fit check of this experiment holds it against)."""
        from nbtools._gpus import gpu_type_rules
        from nbtools.trainers import Rehearsal

        return Rehearsal.check(cfg) + gpu_type_rules(cfg)

    def __repr__(self) -> str:
        return f"LocalBackend({self.cfg.name!r}, dashboard={self.dashboard_url})"


def stop_all_under(runs_dir, *, timeout: float = 30) -> list:
    """Stop every local head whose pid file lives under ``runs_dir`` (the demo's and the tests' cleanup)."""
    return _head.stop_all_under(runs_dir, timeout=timeout)


def head_record(runs_dir) -> dict | None:
    """The recorded head under ``<runs_dir>/ray/head.json`` (pid, ports, temp dir), or None."""
    return _head.head_record(runs_dir)

