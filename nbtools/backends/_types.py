"""What the backends' verbs return — the same types on every backend, so callers never branch on where the
cluster runs: :class:`ClusterHandle` (up), :class:`Teardown` (down, wipe), :class:`ClusterStatus` (status),
:class:`Preview` (a dry run) and :class:`ClusterResources` (resources, read over HTTP from the Ray dashboard's
State API, which works the same for a local head, a port-forwarded KubeRay head and any other Ray address).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import pandas as pd

from nbtools import _paths, _table
from nbtools._escape import html as _h
from nbtools.errors import ConflictError

# the experiment's sections only a local run reads: the local Ray head's settings and the CPU rehearsal's (the config
# section named `rehearsal`, not a trainer's name)
LOCAL_SECTIONS = ("local", "rehearsal")

__all__ = ["LOCAL_SECTIONS", "ClusterHandle", "ClusterResources", "ClusterState", "ClusterStatus", "Preview", "Teardown", "fetch_resources", "process_tree_memory", "wipe_targets"]

_GIB = 1024**3


@_paths.tidy_reprs
@dataclass
class ClusterResources:
    """Totals and usage of a Ray cluster, like `ray status` prints them.

    Example:
        >>> res = nbtools.backends.get(cfg).resources()
        >>> res.nodes, res.cpus
        (1, 2.0)
    """

    dashboard_url: str
    nodes: int
    cpus: float
    gpus: float
    memory_bytes: int
    object_store_bytes: int
    used: dict[str, float] = field(default_factory=dict)  # CPU, GPU, memory, object_store_memory in use
    node_table: pd.DataFrame = field(default_factory=pd.DataFrame)
    head_rss_bytes: int | None = None  # local head only: RSS summed over its processes
    head_uss_bytes: int | None = None  # local head only: memory unique to its processes (no shared pages)
    head_processes: int | None = None

    def summary(self) -> str:
        """The `ray status`-style text block."""
        u = self.used
        lines = [
            f"Ray cluster at {self.dashboard_url}",
            f"Active: {self.nodes} node(s)",
            "Usage:",
            f"  {u.get('CPU', 0.0):.1f}/{self.cpus:.1f} CPU",
            f"  {u.get('GPU', 0.0):.1f}/{self.gpus:.1f} GPU",
            f"  {u.get('memory', 0.0) / _GIB:.2f}GiB/{self.memory_bytes / _GIB:.2f}GiB memory",
            f"  {u.get('object_store_memory', 0.0) / _GIB:.2f}GiB/{self.object_store_bytes / _GIB:.2f}GiB object_store_memory",
        ]
        if self.head_rss_bytes is not None:
            uss = f" (unique {self.head_uss_bytes / _GIB:.2f} GiB)" if self.head_uss_bytes is not None else ""
            lines.append(f"Head processes: {self.head_processes}, RSS {self.head_rss_bytes / _GIB:.2f} GiB{uss}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def nodes_view(self) -> pd.DataFrame:
        """``node_table`` as ``kubectl get nodes`` reads: state first, the role, sizes in GiB (units in the header).

        Example:
            >>> nbtools.backends.get(cfg).resources().nodes_view()
        """
        t = self.node_table
        if t.empty:
            return _table.table(pd.DataFrame(columns=["state", "node", "role", "ip", "CPU", "GPU", "memory (GiB)",
                                               "object store (GiB)"]), when_empty="no node: the cluster reports none")
        out = pd.DataFrame({
            "state": t.get("state", "?"),
            "node": t.get("node_id", ""),
            "role": ["head" if h else "worker" for h in t.get("head", [False] * len(t))],
            "ip": t.get("ip", ""),
            "CPU": t.get("CPU", 0.0),
            "GPU": t.get("GPU", 0.0),
        })
        for col, label in (("memory_bytes", "memory (GiB)"), ("object_store_bytes", "object store (GiB)")):
            if col in t:
                out[label] = (t[col].astype(float) / _GIB).round(2)
        return _table.table(out.reset_index(drop=True))

    def _repr_html_(self) -> str:
        u = self.used
        rows = [
            ("nodes", f"{self.nodes}"),
            ("CPU", f"{u.get('CPU', 0.0):.1f} / {self.cpus:.1f}"),
            ("GPU", f"{u.get('GPU', 0.0):.1f} / {self.gpus:.1f}"),
            ("memory", f"{u.get('memory', 0.0) / _GIB:.2f} / {self.memory_bytes / _GIB:.2f} GiB"),
            ("object store", f"{u.get('object_store_memory', 0.0) / _GIB:.2f} / {self.object_store_bytes / _GIB:.2f} GiB"),
        ]
        if self.head_rss_bytes is not None:
            uss = f", unique {self.head_uss_bytes / _GIB:.2f} GiB" if self.head_uss_bytes is not None else ""
            rows.append(("head memory", f"RSS {self.head_rss_bytes / _GIB:.2f} GiB over {self.head_processes} processes{uss}"))
        body = "".join(f"<tr><th style='text-align:left'>{k}</th><td>{_h(v)}</td></tr>" for k, v in rows)
        url = _h(self.dashboard_url)
        return f"<b>Ray resources</b> (used / total) at <a href='{url}'>{url}</a><table>{body}</table>"


@_paths.tidy_reprs
@dataclass
class ClusterHandle:
    """A running Ray cluster the Jobs API can reach at `dashboard_url` (local head, GKE port-forward or address).

    Example:
        >>> head = nbtools.backends.get(cfg).up()
        >>> head.dashboard_url, head.started_by_us
        ('http://127.0.0.1:8265', True)
    """

    backend: str
    dashboard_url: str
    started_by_us: bool
    pid: int | None = None  # local: the `ray start --head --block` process that owns the head's processes
    pid_file: Path | None = None  # local: <runs_dir>/ray/head.json
    temp_dir: Path | None = None  # local: Ray's --temp-dir (session logs live here)
    log_file: Path | None = None  # local: stdout/stderr of `ray start`
    gcs_address: str | None = None
    reattached: bool = False  # True when `up` found this cluster already running
    note: str = ""  # anything the user should know (e.g. a temp dir fallback)
    extra: dict[str, Any] = field(default_factory=dict)  # backend-specific details (e.g. gke port-forward pid)

    def resources(self) -> ClusterResources:
        """Nodes, CPUs, GPUs, memory and object store of this cluster (plus the local head's own memory)."""
        return fetch_resources(self.dashboard_url, head_pid=self.pid)

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "dashboard_url": self.dashboard_url, "started_by_us": self.started_by_us,
                "reattached": self.reattached, "pid": self.pid, "note": self.note,
                "extra": {k: str(v) for k, v in self.extra.items()}}

    def _repr_html_(self) -> str:
        rows = [
            ("backend", self.backend),
            ("dashboard", self.dashboard_url),
            ("started by us", "yes" if self.started_by_us else "no (attached to a running cluster)"),
            ("state", "re-attached" if self.reattached else "started" if self.started_by_us else "attached"),
        ]
        for key in ("pid", "pid_file", "temp_dir", "log_file", "gcs_address", "note"):
            v = getattr(self, key)
            if v:
                rows.append((key.replace("_", " "), str(v)))
        rows += [(k, str(v)) for k, v in self.extra.items()]
        body = "".join(f"<tr><th style='text-align:left'>{k}</th><td>{_h(v)}</td></tr>" for k, v in rows)
        return f"<b>Ray cluster</b><table>{body}</table>"


def _table_html(title: str, rows: list[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th style='text-align:left'>{_h(k)}</th><td style='text-align:left'>{_h(v)}</td></tr>"
                   for k, v in rows)
    return f"<b>{_h(title)}</b><table>{body}</table>"


@_paths.tidy_reprs
@dataclass
class Teardown:
    """What ``down`` or ``wipe`` did: one row per thing (kind, name, action), and a one-line summary.

    Example:
        >>> td = nbtools.backends.get(cfg).down()
        >>> td.stopped, td.message
        (True, 'stopped the Ray head pid 4242 (17 processes) recorded in runs/ray/head.json')
    """

    backend: str
    actions: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["kind", "name", "action"]))
    message: str = ""

    @property
    def stopped(self) -> bool:
        """True when something was actually stopped or deleted."""
        return bool(self.actions["action"].isin(["stopped", "deleted", "removed"]).any()) if len(self.actions) else False

    @classmethod
    def unconfirmed(cls, backend: str, name: str) -> Teardown:
        """What ``wipe(confirm="")`` returns: nothing deleted, and how to mean it (so a wipe cell has one type)."""
        return cls(backend, message=f"nothing wiped: confirm is empty; pass confirm={name!r} (notebook 09: CONFIRM = "
                                    f"{name!r}) to delete this experiment's results")

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "stopped": self.stopped, "message": self.message,
                "actions": self.actions.to_dict(orient="records")}

    def __str__(self) -> str:
        return self.message or self.actions.to_string(index=False)

    def _repr_html_(self) -> str:
        return f"<b>{_h(self.backend)}</b>: {_h(self.message)}" + self.actions.to_html(index=False)


def wipe_targets(name: str, paths: list[str]) -> list[str]:
    """The directories a cluster's ``wipe`` deletes, each checked to be absolute, at least two levels deep and inside
    a directory named after the experiment (a typo in a config must not delete ``/data``).

    Raises:
        ConflictError: a path fails that, with where to put the results instead.
    """
    for p in paths:
        pp = PurePosixPath(p)
        if not pp.is_absolute() or len(pp.parts) < 3 or name not in pp.parts or ".." in pp.parts:
            raise ConflictError(
                f"refusing to wipe {p!r}: it must be absolute, at least two levels deep and contain the experiment "
                f"name {name!r} as a directory",
                fix=f"put checkpoints/logs under a directory named after the experiment, e.g. /data/nemo-rl/{name}/checkpoints",
            )
    return list(dict.fromkeys(paths))


class ClusterState(str, enum.Enum):
    """What ``status()`` found; a ``str`` whose value is the word JSON output and older comparisons use."""

    RUNNING = "running"  # the Jobs API answers
    STARTING = "starting"  # exists, not answering yet
    STOPPED = "stopped"  # nothing of ours runs
    UNREACHABLE = "unreachable"  # cannot tell: the Kubernetes API or the address does not answer

    def __str__(self) -> str:
        return self.value


@_paths.tidy_reprs
@dataclass
class ClusterStatus:
    """Whether the experiment's cluster runs and its Jobs API answers; nothing is started to find out.

    ``state``: a :class:`ClusterState` (``running``, ``starting``, ``stopped`` or ``unreachable``).
    """

    backend: str
    state: ClusterState
    dashboard_url: str
    detail: str = ""
    started_by_us: bool = False
    pods: pd.DataFrame | None = None

    def __post_init__(self):
        self.state = ClusterState(self.state)

    @property
    def running(self) -> bool:
        return self.state is ClusterState.RUNNING

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in ("backend", "state", "dashboard_url", "detail", "started_by_us")}
        out["state"] = self.state.value
        out["pods"] = None if self.pods is None else self.pods.to_dict(orient="records")
        return out

    def _repr_html_(self) -> str:
        rows = [("state", self.state), ("dashboard", self.dashboard_url), ("detail", self.detail)]
        extra = "" if self.pods is None else self.pods.to_html(index=False)
        return _table_html(f"{self.backend} cluster", rows) + extra


@_paths.tidy_reprs
@dataclass
class Preview:
    """What a verb would do (a dry run): a sentence and the objects involved."""

    backend: str
    verb: str
    would: str
    objects: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "verb": self.verb, "dry_run": True, "would": self.would, "objects": self.objects}

    def __str__(self) -> str:
        return f"dry run ({self.backend}): {self.verb} would {self.would}"

    def _repr_html_(self) -> str:
        return (f"<b>dry run</b> ({_h(self.backend)}): {_h(self.verb)} would {_h(self.would)}; nothing was done "
                "(set <code>APPLY = True</code>, or pass <code>--apply</code> to the CLI, to do it)")


def process_tree_memory(pid: int) -> tuple[int, int | None, int]:
    """(RSS sum, USS sum or None, process count) of `pid` and all its descendants."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0, None, 0
    rss, uss, n = 0, 0, 0
    for p in procs:
        try:
            info = p.memory_full_info()
            rss, n = rss + info.rss, n + 1
            uss = uss + info.uss if uss is not None else None
        except psutil.AccessDenied:  # USS needs /proc/<pid>/smaps; RSS alone stays exact
            try:
                rss, n, uss = rss + p.memory_info().rss, n + 1, None
            except psutil.Error:
                continue
        except psutil.Error:  # the process ended while we were counting
            continue
    return rss, uss, n


def fetch_resources(dashboard_url: str, *, head_pid: int | None = None, timeout: float = 10.0) -> ClusterResources:
    """Read totals from the State API (`list_nodes`) and usage from the dashboard's cluster status."""
    import requests
    from ray.util.state import list_nodes

    from nbtools.errors import Fix, NotReadyError

    try:
        states = list_nodes(address=dashboard_url, detail=True, timeout=int(max(1, timeout)), raise_on_missing_output=False)
    except Exception as e:  # ServerUnavailable, ConnectionError, ...
        raise NotReadyError(
            f"could not read resources from the Ray dashboard at {dashboard_url}",
            reason=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
            fix=Fix("bring the cluster up first (notebook 02: nbtools.backends.get(cfg).up()) or check ray.dashboard_port / "
                    "ray.address", cli="bring the cluster up first (`nbtools up EXPERIMENT.yaml --apply`) or check ray.dashboard_port / ray.address"),
        ) from None
    rows = []
    for n in states:
        if getattr(n, "state", "") != "ALIVE":
            continue
        r = dict(getattr(n, "resources_total", {}) or {})
        rows.append({
            "node_id": n.node_id[:12], "ip": n.node_ip, "head": bool(n.is_head_node), "state": n.state,
            "CPU": float(r.get("CPU", 0.0)), "GPU": float(r.get("GPU", 0.0)),
            "memory_bytes": int(r.get("memory", 0)), "object_store_bytes": int(r.get("object_store_memory", 0)),
        })
    table = pd.DataFrame(rows, columns=["node_id", "ip", "head", "state", "CPU", "GPU", "memory_bytes", "object_store_bytes"])
    used: dict[str, float] = {}
    try:  # usage is best effort: totals above are the contract
        from nbtools.backends._proc import auth_headers

        resp = requests.get(f"{dashboard_url.rstrip('/')}/api/cluster_status", timeout=timeout, headers=auth_headers())
        usage = resp.json()["data"]["clusterStatus"]["loadMetricsReport"]["usage"]
        names = {"CPU": "CPU", "GPU": "GPU", "memory": "memory", "objectStoreMemory": "object_store_memory",
                 "object_store_memory": "object_store_memory"}
        used = {names[k]: float(v[0]) for k, v in usage.items() if k in names}
    except Exception:
        used = {}
    rss = uss = nproc = None
    if head_pid:
        rss, uss, nproc = process_tree_memory(head_pid)
    return ClusterResources(
        dashboard_url=dashboard_url, nodes=len(table), cpus=float(table["CPU"].sum()), gpus=float(table["GPU"].sum()),
        memory_bytes=int(table["memory_bytes"].sum()), object_store_bytes=int(table["object_store_bytes"].sum()),
        used=used, node_table=table, head_rss_bytes=rss, head_uss_bytes=uss, head_processes=nproc,
    )
