"""The ``ray`` backend: any running Ray cluster by its dashboard address (a DGX Cloud Lepton RayCluster, an
on-prem head). nbtools attaches and never starts or stops it; the run's files are read at ``storage.url`` (e.g.
``gs://…``, ``s3://…`` or a local directory that the cluster's ``storage.mount_path`` maps to: the fast path), else
through the cluster itself, with nothing but its address: short Ray jobs read the paths where the jobs see them
(``nbtools._rayfs``), since this machine usually does not mount the cluster's disks.

Example:
    >>> cluster = nbtools.backends.get(cfg)       # `backend: ray`, `ray.address: http://head:8265`
    >>> cluster.up().started_by_us
    False
"""

from __future__ import annotations

import pandas as pd

from nbtools import gke as provisioning
from nbtools import jobs
from nbtools.backends._env import secrets_from_env
from nbtools.backends._types import (
    LOCAL_SECTIONS,
    ClusterHandle,
    ClusterResources,
    ClusterState,
    ClusterStatus,
    Preview,
    Teardown,
    fetch_resources,
    wipe_targets,
)
from nbtools.config import Experiment
from nbtools.errors import ConflictError, Fix, NotReadyError
from nbtools.storage import RunStorage

__all__ = ["RayBackend"]


class RayBackend:
    """An existing Ray cluster at ``ray.address``; attach only."""

    name = "ray"
    secrets_from = "this-machine"  # read here, delivered in the job's working_dir
    provisions = False  # someone else's cluster: nothing is provisioned
    first_notebook = "03_launch_grpo"  # the cluster is someone else's: launch on it
    unread_sections = (*LOCAL_SECTIONS, "gcp", "cluster", "storage")  # someone else's cluster

    def __init__(self, cfg: Experiment):
        self.cfg = cfg

    @property
    def python(self) -> str:
        """The interpreter jobs run on the cluster (``trainer.python``, else ``python`` on its PATH)."""
        return self.cfg.trainer.python or "python"

    @property
    def dashboard_url(self) -> str:
        return (self.cfg.ray.address or "").rstrip("/")

    @property
    def log_dir(self) -> str:
        return self.cfg.logging.log_dir

    @property
    def checkpoint_dir(self) -> str:
        return self.cfg.checkpointing.checkpoint_dir

    @property
    def storage(self) -> RunStorage:
        from nbtools._rayfs import root_url

        s = self.cfg.storage
        if s.url:
            return RunStorage(s.url.rstrip("/"), s.mount_path)
        mount = (s.mount_path or "/").rstrip("/") or "/"
        return RunStorage(root_url(self.dashboard_url) + (mount if mount != "/" else ""), mount)

    def up(self, *, timeout: float | None = None, progress: bool = True) -> ClusterHandle:
        """Check that the Jobs API answers at ``ray.address`` and hand back a handle (nothing is started)."""
        try:
            jobs.list_jobs(self.dashboard_url)
        except NotReadyError as e:
            raise NotReadyError(
                f"no Ray Jobs API answers at {self.dashboard_url}", reason=e.reason,
                fix="check `ray.address` (the dashboard URL, usually port 8265) and that this machine can reach it",
            ) from None
        return ClusterHandle(backend=self.name, dashboard_url=self.dashboard_url, started_by_us=False,
                             note="an existing Ray cluster; nbtools did not start it")

    def reattach(self) -> ClusterHandle | None:
        """A handle on the address when its dashboard answers, else None."""
        return self.up() if self.status().running else None

    def down(self, *, timeout: float = 30) -> Teardown:
        rows = pd.DataFrame([{"kind": "ray-cluster", "name": self.dashboard_url, "action": "kept: not started by nbtools"}])
        return Teardown(self.name, rows, f"nbtools did not start the cluster at {self.dashboard_url}; nothing stopped")

    def preview(self, verb: str) -> Preview:
        would = (f"check that the Ray Jobs API answers at {self.dashboard_url}" if verb == "up"
                 else f"do nothing: nbtools did not start the cluster at {self.dashboard_url}")
        return Preview(self.name, verb, would)

    def status(self) -> ClusterStatus:
        from nbtools.backends._proc import _dashboard_version

        answers = _dashboard_version(self.dashboard_url) is not None
        return ClusterStatus(self.name, ClusterState.RUNNING if answers else ClusterState.UNREACHABLE, self.dashboard_url,
                             "the dashboard answers" if answers else "no Ray dashboard answers there")

    def resources(self, *, timeout: float = 10) -> ClusterResources:
        return fetch_resources(self.dashboard_url, timeout=timeout)

    def gpus(self) -> int | None:
        """The GPUs the cluster's dashboard reports; None when it cannot be asked."""
        try:
            return int(self.resources().gpus)
        except Exception:  # noqa: BLE001 - unknown means "not checked", which lint reports
            return None

    def events(self, *, since: float | None = None, until: float | None = None, limit: int = 50) -> list[str]:
        """None to ask: a plain Ray address has no infrastructure API here (Ray's own errors are in the log)."""
        return []

    def pod_states(self) -> list:
        """None to ask: a plain Ray address has no infrastructure API here."""
        return []

    def describe(self) -> list[tuple[str, str]]:
        return [("address", self.dashboard_url), ("storage", self.storage.root)]

    def job_env(self) -> dict[str, str]:
        return {}

    def slow_mount(self, path: str) -> bool:
        return False  # the run's storage is a filesystem the jobs read directly

    def job_secrets(self) -> dict:
        """Secrets from this machine's environment, delivered in the job's working_dir (never in env_vars)."""
        return secrets_from_env(self.cfg)

    def wipe(self, *, confirm: str) -> Teardown:
        """Delete this experiment's checkpoints and logs where the cluster keeps them (a re-run would resume from
        them): through ``storage.url`` when set, else by a short Ray job on the cluster (``nbtools._rayfs``)."""
        if not confirm:
            return Teardown.unconfirmed(self.name, self.cfg.name)
        if confirm != self.cfg.name:
            raise ConflictError(f"wipe needs confirm={self.cfg.name!r}; got {confirm!r}",
                                fix=Fix(f"pass confirm={self.cfg.name!r} if you really mean it",
                                        cli=f"wipe is notebook 09's step: set CONFIRM = {self.cfg.name!r} there if you "
                                            "really mean it"))
        from nbtools import storage

        targets = wipe_targets(self.cfg.name, [self.checkpoint_dir, self.log_dir])
        urls = [self.cfg.url(p) for p in targets]
        fs, _ = storage.filesystem(urls[0])
        if storage.is_remote(urls[0]) and hasattr(fs, "remove_all"):  # the cluster's own disk: one job for all
            done = fs.remove_all([storage.filesystem(u)[1] for u in urls])
            for u in urls:
                storage.evict(u)  # this machine's copies of what was there
        else:
            done = [storage.remove(u) for u in urls]
        rows = [{"kind": kind, "name": path, "action": "removed" if was else "absent"}
                for kind, path, was in zip(("checkpoint_dir", "log_dir"), targets, done, strict=True)]
        return Teardown(self.name, pd.DataFrame(rows, columns=["kind", "name", "action"]),
                        f"wiped {self.cfg.name}'s checkpoints and logs at {self.storage.root}")

    def provision_plan(self):
        """Nothing to provision (the cluster exists): the plan the same experiment would need on GKE, shown and never
        applied, as on the local backend (notebook 01 validates its gcloud flags either way)."""
        from nbtools import backends  # its package facade (gke_view), which imports this module

        return provisioning.plan(backends.gke_view(self.cfg), applicable=False,
                        note=f"backend 'ray': the cluster at {self.dashboard_url} already exists, nothing to provision; "
                             "this is what the same experiment needs on GKE")

    def destroy_plan(self, *, delete_bucket: str | None = None):
        return provisioning.Plan.empty("destroy", "backend 'ray': nbtools provisioned nothing")

    def job_trainer(self, trainer):
        """``trainer.kind`` itself: the cluster has its GPUs."""
        return trainer

    @classmethod
    def check(cls, cfg: Experiment) -> list[tuple[tuple[str, ...], str]]:
        """The dashboard address (its format is checked for every backend), and a GPU whose memory nbtools knows (a
        cluster nbtools did not make: the fit check needs its capacity)."""
        from nbtools._gpus import gpu_type_rules

        p = gpu_type_rules(cfg)
        if not cfg.ray.address:
            p.insert(0, (("ray.address",), "ray.address: missing for backend 'ray'; fix: set `ray.address: "
                         "http://<head>:8265` (the Ray dashboard URL)"))
        return p

    def __repr__(self) -> str:
        return f"RayBackend({self.cfg.name!r}, address={self.dashboard_url})"
