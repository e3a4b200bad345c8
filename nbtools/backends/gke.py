"""The ``gke`` backend: KubeRay's RayCluster applied, awaited and port-forwarded; the run's files in a GCS bucket.

The pods see the bucket at ``storage.mount_path`` (``/data``) through gcsfuse; this machine reads the same objects
as ``gs://<bucket>/…`` (``storage``), so every reader after the launch works from a laptop or a Workbench VM
without a mount. Everything Kubernetes goes through ``nbtools.kube`` (the official client); the dashboard is
forwarded by a detached process owned by its pid (see ``nbtools.kube.forward`` for why not ``kubectl``).

Example:
    >>> cluster = nbtools.backends.get(cfg)       # an experiment with `backend: gke`
    >>> head = cluster.up(timeout=1800)
    >>> cluster.storage.url(cluster.log_dir)
    'gs://my-bucket/nemo-rl/gemma3-1b-b200/logs'
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from nbtools import kube, manifests
from nbtools.backends._env import gib_nccl_env
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
from nbtools.errors import ConflictError, Fix, NotFoundError, NotReadyError
from nbtools.storage import RunStorage

__all__ = ["GkeBackend", "POD_LOCAL_ROOTS", "DEFAULT_UP_TIMEOUT"]

# NeMo-RL's relative results/ and logs/ land here on every pod when checkpoint_dir/log_dir are not shared (the
# NeMo-RL image's working directory); wipe removes <root>/<experiment> there for a NeMo-RL layout.
POD_LOCAL_ROOTS = ("/opt/nemo-rl/results", "/opt/nemo-rl/logs")  # kept for callers; the layouts own it (pod_local_roots)
# A first pull of the NeMo-RL image (~20 GB) plus GPU node start-up takes 10-20 minutes.
DEFAULT_UP_TIMEOUT = 1800.0


class GkeBackend:
    """A RayCluster on GKE reached through the Kubernetes API of ``kubeconfig`` (default: $KUBECONFIG)."""

    name = "gke"
    secrets_from = "kubernetes"  # the pods read Kubernetes Secrets
    provisions = True  # notebook 01 applies the provisioning plan
    first_notebook = "01_provision_gke"  # the cluster is provisioned first
    unread_sections = LOCAL_SECTIONS

    def __init__(self, cfg: Experiment, *, kubeconfig: str | None = None, context: str | None = None):
        self.cfg = cfg
        self.kubeconfig = kubeconfig
        self.context = context
        self._api = None

    @property
    def python(self) -> str:
        """The interpreter jobs run on the pods (``trainer.python``, else the image's ``python``)."""
        return self.cfg.trainer.python or "python"

    # -- where things are ---------------------------------------------------------------------------------
    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.cfg.ray.dashboard_port}"

    @property
    def log_dir(self) -> str:
        return self.cfg.logging.log_dir

    @property
    def checkpoint_dir(self) -> str:
        return self.cfg.checkpointing.checkpoint_dir

    @property
    def storage(self) -> RunStorage:
        s = self.cfg.storage
        if s.kind == "gcsfuse" and s.bucket:
            return RunStorage(f"gs://{s.bucket}", s.mount_path)
        return RunStorage(s.mount_path)  # Lustre/none: readable only where the same path is mounted

    # -- Kubernetes ---------------------------------------------------------------------------------------
    def api(self):
        """The Kubernetes ``ApiClient`` (the ``gke_<project>_<region>_<cluster>`` context when present)."""
        if self._api is None:
            from nbtools.gke import context_name

            prefer = context_name(self.cfg) if self.cfg.gcp.project else None
            self._api = kube.connect(kubeconfig=self.kubeconfig, context=self.context, prefer_context=prefer)
        return self._api

    def _selector(self, node_type: str | None = None) -> str:
        sel = f"ray.io/cluster={self.cfg.cluster.name}"
        return sel + (f",ray.io/node-type={node_type}" if node_type else "")

    @property
    def _pid_file(self) -> Path:
        return self.cfg.runs_dir / "gke" / f"forward-{self.cfg.cluster.name}.json"

    def _secret_objects(self) -> list[dict]:
        """Secrets revealed from the environment; a secret missing from env must already exist in the cluster."""
        cfg, objs = self.cfg, []
        for _, name, _, var in manifests.secret_specs(cfg):
            placeholder = next(o for o in manifests.secrets(cfg) if o["metadata"]["name"] == name)
            if os.environ.get(var):
                objs.append(next(o for o in manifests.secrets(cfg, reveal=True) if o["metadata"]["name"] == name))
            elif kube.get(self.api(), placeholder) is None:
                raise NotFoundError(
                    f"Secret {name!r} is not in namespace {cfg.cluster.namespace!r} and ${var} is not set here",
                    fix=f"export {var}=... before starting Jupyter (nbtools creates the Secret from it), then re-run",
                )
        return objs

    def _hints(self) -> dict[str, str]:
        c, g = self.cfg.cluster, self.cfg.gcp
        return {
            "capacity": (f"no node can take the pod: check GPU quota and the {c.node_pool!r} node pool (gcloud container "
                         f"node-pools describe {c.node_pool} --cluster={c.name} --location={g.region}); spot capacity may "
                         "be exhausted: try another zone or `cluster.provisioning: reservation`"),
            "image": f"the image {self.cfg.images.resolved_image!r} cannot be pulled: check `images.image` and registry access",
        }

    def port_forward(self, *, timeout: float = 60) -> kube.forward.ForwardHandle:
        """Forward the head's dashboard (8265) to ``127.0.0.1:<ray.dashboard_port>``; re-attaches to a running one."""
        return kube.forward.start(
            namespace=self.cfg.cluster.namespace, selector=self._selector("head"), ports={8265: self.cfg.ray.dashboard_port},
            pid_file=self._pid_file, kubeconfig=self.kubeconfig, context=self._context(), timeout=timeout)

    def _context(self) -> str | None:
        if self.context is not None:
            return self.context
        from kubernetes import config

        from nbtools.gke import context_name

        if not self.cfg.gcp.project:
            return None
        try:
            contexts, _ = config.list_kube_config_contexts(config_file=kube.kubeconfig_file(self.kubeconfig))
        except Exception:  # noqa: BLE001 - no kubeconfig: connect() reports it
            return None
        return context_name(self.cfg) if any(c["name"] == context_name(self.cfg) for c in contexts) else None

    def pods(self) -> pd.DataFrame:
        """Head and worker pods of the experiment's RayCluster (pod, type, phase, ready, node)."""
        from nbtools.kube import is_ready

        rows = [
            {"pod": p.metadata.name, "type": (p.metadata.labels or {}).get("ray.io/node-type"), "phase": p.status.phase,
             "ready": is_ready(p), "node": p.spec.node_name}
            for p in kube.list_pods(self.api(), self.cfg.cluster.namespace, self._selector())
        ]
        return pd.DataFrame(rows, columns=["pod", "type", "phase", "ready", "node"])

    # -- verbs --------------------------------------------------------------------------------------------
    def up(self, *, timeout: float | None = None, progress: bool = True) -> ClusterHandle:
        """Apply the RayCluster (+ KSA, data PV/PVC, Secrets from env), wait for Ready pods, forward the dashboard.

        Raises:
            NotReadyError: pods not Ready within ``timeout`` (names the stuck pod, its reason and events).
            ConflictError: the API server rejected an object during the server-side dry run (nothing applied).
        """
        cfg, api = self.cfg, self.api()
        objs = manifests.workload_objects(cfg)
        objs[1:1] = self._secret_objects()
        applied = kube.apply(api, objs)
        ready = kube.wait_ready(api, cfg.cluster.namespace, cfg.cluster.name, pods=1 + cfg.cluster.worker_replicas,
                                timeout=timeout or DEFAULT_UP_TIMEOUT, progress=progress, hints=self._hints())
        fwd = self.port_forward()
        created = bool((applied["kind"].eq("RayCluster") & applied["action"].eq("created")).any())
        extra = {"raycluster": f"{cfg.cluster.namespace}/{cfg.cluster.name}", "pods": len(ready.pods),
                 "port-forward pid": fwd.pid,
                 "applied": ", ".join(f"{k}:{a}" for k, a in zip(applied["kind"], applied["action"], strict=True))}
        try:
            res = fetch_resources(fwd.url(8265), timeout=15)
            extra["GPUs registered"] = f"{res.gpus:g} of {cfg.cluster.total_gpus}"
        except NotReadyError as e:
            extra["GPUs registered"] = f"unknown yet ({e.reason or 'dashboard not answering'}); call .resources() again"
        return ClusterHandle(backend=self.name, dashboard_url=fwd.url(8265), started_by_us=created, reattached=not created,
                             pid_file=self._pid_file, extra=extra)

    def stop_port_forward(self, *, timeout: float = 10) -> str:
        """Stop this cluster's forward process (exactly the recorded pid): "stopped", "killed: …" or "absent"."""
        handle = kube.forward.attach(self._pid_file)
        if handle is None:
            self._pid_file.unlink(missing_ok=True)
            return "absent"
        return handle.stop(timeout=timeout)

    def reattach(self) -> ClusterHandle | None:
        """The dashboard forward when the head pod exists (re-attached or started again), else None; never raises.

        For code that must work whether or not a cluster is still there (notebook 09).
        """
        fwd = kube.forward.attach(self._pid_file)
        if fwd is None:
            try:
                kube.find_pod(self.api(), self.cfg.cluster.namespace, self._selector("head"))
                fwd = self.port_forward()
            except Exception:  # noqa: BLE001 - no head pod, no kubeconfig, or an API server that is gone
                return None
        return ClusterHandle(backend=self.name, dashboard_url=fwd.url(8265), started_by_us=True, reattached=True,
                             pid_file=self._pid_file, extra={"port-forward pid": fwd.pid})

    def down(self, *, timeout: float = 30, storage: bool = True) -> Teardown:
        """Stop the forward; delete the RayCluster first, then (with ``storage``) its PVC, PV and KSA — only the
        objects nbtools labelled for this experiment; anything else with the same name is kept and reported."""
        rows = [{"kind": "port-forward", "name": str(self._pid_file), "action": self.stop_port_forward(timeout=timeout)}]
        objs = list(reversed(manifests.workload_objects(self.cfg)))  # RayCluster first, then PVC, PV, KSA
        if not storage:
            objs = [o for o in objs if o["kind"] == "RayCluster"]
        try:
            out = kube.delete(self.api(), objs, only_labelled=manifests.labels_for(self.cfg))
            rows += out.to_dict(orient="records")
            message = f"deleted what nbtools created for {self.cfg.name} in {self.cfg.cluster.namespace}"
        except NotFoundError as e:  # no kubeconfig/context: the cluster is gone or was never created
            why = str(e).splitlines()[0]
            rows += [{"kind": o["kind"], "name": o["metadata"]["name"], "action": f"skipped: {why}"} for o in objs]
            message = "the Kubernetes cluster is not reachable: nothing to delete there"
        except Exception as e:  # noqa: BLE001 - urllib3 MaxRetryError etc.: the API server is gone
            why = f"the Kubernetes API did not answer ({type(e).__name__})"
            rows += [{"kind": o["kind"], "name": o["metadata"]["name"], "action": f"skipped: {why}"} for o in objs]
            message = why
        return Teardown(self.name, pd.DataFrame(rows, columns=["kind", "name", "action"]), message)

    def preview(self, verb: str) -> Preview:
        objs = manifests.workload_objects(self.cfg)
        listed = [{"kind": o["kind"], "name": o["metadata"]["name"]} for o in objs]
        if verb == "up":
            would = (f"apply {len(objs)} objects (+ Secrets from your environment), wait for Ready pods, port-forward "
                     f"the dashboard to {self.dashboard_url}")
        else:
            would = f"stop the dashboard port-forward and delete {len(objs)} objects nbtools labelled for {self.cfg.name}"
            listed.reverse()
        return Preview(self.name, verb, would, listed)

    def status(self) -> ClusterStatus:
        try:
            pods = self.pods()
        except Exception as e:  # noqa: BLE001 - no kubeconfig, API down
            return ClusterStatus(self.name, ClusterState.UNREACHABLE, self.dashboard_url, f"Kubernetes API: {str(e).splitlines()[0]}")
        if pods.empty:
            return ClusterStatus(self.name, ClusterState.STOPPED, self.dashboard_url,
                                 f"no pod of RayCluster {self.cfg.cluster.name} in {self.cfg.cluster.namespace}", pods=pods)
        fwd = kube.forward.attach(self._pid_file)
        ready = bool(pods["ready"].all())
        state = ClusterState.RUNNING if ready and fwd is not None else ClusterState.STARTING
        detail = f"{int(pods['ready'].sum())}/{len(pods)} pods ready; port-forward {'pid ' + str(fwd.pid) if fwd else 'not running'}"
        return ClusterStatus(self.name, state, self.dashboard_url, detail, started_by_us=True, pods=pods)

    def resources(self, *, timeout: float = 10) -> ClusterResources:
        return fetch_resources(self.dashboard_url, timeout=timeout)

    def gpus(self) -> int | None:
        """The GPUs the config provisions (``cluster.worker_replicas`` × ``gpus_per_node``)."""
        return self.cfg.cluster.total_gpus

    def events(self, *, since: float | None = None, until: float | None = None, limit: int = 50) -> list[str]:
        """Kubernetes events of the RayCluster's pods (also the deleted ones) and of the nodes, oldest first."""
        return kube.cluster_events(self.api(), self.cfg.cluster.namespace, self.cfg.cluster.name, limit, since=since,
                                   until=until)

    def pod_states(self) -> list[kube.PodState]:
        """The RayCluster's pods (``ray.io/cluster``) as their status describes them."""
        return kube.pod_states(self.api(), self.cfg.cluster.namespace, self._selector())

    def describe(self) -> list[tuple[str, str]]:
        c, g = self.cfg.cluster, self.cfg.gcp
        return [("GCP", f"{g.project} / {g.zone}"),
                ("cluster", f"{c.name} ({c.mode}), {c.worker_replicas} x {c.machine_type}"),
                ("storage", self.storage.root)]

    def job_env(self) -> dict[str, str]:
        return gib_nccl_env(self.cfg.cluster.nccl_tuner_config)

    def job_secrets(self) -> dict:
        return {}  # the pods read them from the Kubernetes Secret

    def slow_mount(self, path: str) -> bool:
        s = self.cfg.storage
        mount = str(s.mount_path or "").rstrip("/")
        return s.kind == "gcsfuse" and bool(mount) and str(path).startswith(mount + "/")

    def exec_on(self, command: list[str], *, node_type: str | None = "head", timeout: float = 300) -> list[kube.CompletedExec]:
        """Run ``command`` on the pods selected by ``ray.io/cluster`` (+ ``ray.io/node-type`` unless None).

        ``node_type="head"`` must match exactly one pod ("none"/"more than one" raise, naming the selector).
        """
        api, ns = self.api(), self.cfg.cluster.namespace
        if node_type == "head":
            targets = [kube.find_pod(api, ns, self._selector("head"))]
        else:
            targets = kube.list_pods(api, ns, self._selector(node_type))
            if not targets:
                raise NotFoundError(f"no pod in {ns!r} matches selector {self._selector(node_type)!r}",
                                    fix="bring the cluster up (notebook 02) or fix the node type")
        out = []
        for p in targets:
            kind = (p.metadata.labels or {}).get("ray.io/node-type")
            container = {"head": "ray-head", "worker": "ray-worker"}.get(kind)
            out.append(kube.exec_pod(api, ns, p.metadata.name, command, container=container, timeout=timeout))
        return out

    def wipe_paths(self, roots: tuple[str, ...] | None = None) -> list[str]:
        """What ``wipe`` removes: checkpoint_dir, log_dir (verl's TensorBoard and dump directories are in it) and
        ``<root>/<experiment>`` under ``roots`` (default: the run's layout's ``pod_local_roots``, where a NeMo-RL run's
        relative results/ and logs/ land; none for verl, whose directories nbtools passes absolute). Each must name
        the experiment."""
        from nbtools import trainers

        name = self.cfg.name
        if roots is None:
            roots = trainers.layout(trainers.get(self.cfg, self).layout).pod_local_roots
        return wipe_targets(name, [self.checkpoint_dir, self.log_dir] + [f"{r.rstrip('/')}/{name}" for r in roots])

    def wipe(self, *, confirm: str, roots: tuple[str, ...] | None = None) -> Teardown:
        """Remove this experiment's results on the head and every worker (NeMo-RL auto-resumes from them otherwise)."""
        if not confirm:
            return Teardown.unconfirmed(self.name, self.cfg.name)
        if confirm != self.cfg.name:
            raise ConflictError(
                f"wipe deletes results of experiment {self.cfg.name!r} on every pod; confirm={confirm!r} does not match it",
                fix=Fix(f"pass confirm={self.cfg.name!r} (notebook 09: CONFIRM = {self.cfg.name!r}) if you really mean it",
                        cli=f"wipe is notebook 09's step: set CONFIRM = {self.cfg.name!r} there if you really mean it"),
            )
        paths = self.wipe_paths(roots)
        results = self.exec_on(["rm", "-rf", "--", *paths], node_type=None)
        rows = [{"kind": "pod", "name": r.pod, "action": "removed" if r.returncode == 0 else f"failed: {r.stderr.strip()}"}
                for r in results]
        return Teardown(self.name, pd.DataFrame(rows, columns=["kind", "name", "action"]), "removed " + " ".join(paths))

    def provision_plan(self):
        from nbtools import gke

        return gke.plan(self.cfg)

    def destroy_plan(self, *, delete_bucket: str | None = None):
        from nbtools import gke

        return gke.destroy_plan(self.cfg, delete_bucket=delete_bucket)

    def job_trainer(self, trainer):
        """``trainer.kind`` itself: the cluster has its GPUs."""
        return trainer

    @classmethod
    def check(cls, cfg: Experiment) -> list[tuple[tuple[str, ...], str]]:
        """What GKE needs named: the project, a zone in the region, the bucket (or Lustre instance), a valid name."""
        import re

        p: list[tuple[tuple[str, ...], str]] = []
        if not cfg.gcp.project:
            p.append((("gcp.project",), "gcp.project: missing for backend 'gke'; fix: set `gcp.project: <your-project-id>` "
                      "(see `gcloud projects list`)"))
        if not cfg.gcp.zone.startswith(cfg.gcp.region):
            p.append((("gcp.zone", "gcp.region"),
                      f"gcp.zone: {cfg.gcp.zone!r} is not in region {cfg.gcp.region!r}; fix: pick a zone like `{cfg.gcp.region}-b`"))
        if cfg.storage.kind == "gcsfuse" and not cfg.storage.bucket:
            p.append((("storage.kind", "storage.bucket"),
                      "storage.bucket: missing for gcsfuse storage on gke; fix: set `storage.bucket: <bucket-name>` (no gs:// prefix)"))
        if cfg.storage.kind == "lustre" and not (cfg.storage.lustre and cfg.storage.lustre.instance and cfg.storage.lustre.ip):
            p.append((("storage.kind", "storage.lustre"),
                      "storage.lustre: instance and ip are required for lustre storage; fix: set `storage.lustre.instance` "
                      "and `storage.lustre.ip`"))
        c = cfg.cluster
        from nbtools.config import GPU_TYPES

        if c.gpu_type not in GPU_TYPES:
            p.append((("cluster.gpu_type",),
                      f"cluster.gpu_type: {c.gpu_type!r} is not a GPU the gke backend provisions; allowed: "
                      f"{', '.join(GPU_TYPES)} (the A4 and A3 Ultra machines with the gIB RDMA stack); fix: pick one of "
                      "those, or `backend: ray` with `ray.address` for a Ray cluster you made yourself (any NVIDIA GPU)"))
        if c.gpu_driver_version == "disabled" and c.mode == "standard":
            p.append((("cluster.gpu_driver_version", "cluster.mode"),
                      "cluster.gpu_driver_version: 'disabled' leaves the GPU nodes without an NVIDIA driver (GKE installs "
                      "none), so no pod gets a GPU; fix: `gpu_driver_version: latest` (or `default`)"))
        if not re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", cfg.cluster.name):
            p.append((("cluster.name",),
                      f"cluster.name: {cfg.cluster.name!r} is not a valid GKE/Kubernetes name; fix: lower-case letters, digits and '-'"))
        return p

    def __repr__(self) -> str:
        return f"GkeBackend({self.cfg.name!r}, cluster={self.cfg.cluster.name}, dashboard={self.dashboard_url})"
