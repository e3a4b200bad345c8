"""Links to each Ray worker's logs, built from the cluster's dashboard address (notebooks 02 and 04).

Why: when a GRPO run misbehaves, the answer is often in one worker's stdout/stderr (a vLLM engine that OOMed, a
policy worker that hung); the Ray dashboard serves every worker's log, but finding the right one by hand means
clicking through nodes. This lists the actors (the worker processes a GRPO job starts: policy, generation,
reference workers) through Ray's State API and gives each its log's address on the
dashboard's log endpoint (``/api/v0/logs/file?node_id=…&pid=…&suffix=out|err``, Ray's own: ``ray logs`` reads the
same one), plus the job driver's log (the Jobs API's ``/api/jobs/<submission id>/logs``). The addresses use the dashboard address this machine reaches
(the local head, the GKE port-forward, or ``ray.address``), so they open in a browser here while it answers.

Example:
    >>> nbtools.worker_logs.links(cluster.dashboard_url)
    >>> nbtools.worker_logs.links(cfg.dashboard_url, submission_id=cfg.submission_id)
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

import pandas as pd

from nbtools._escape import html as _h
from nbtools.errors import Fix, NotReadyError

__all__ = ["log_url", "links", "WorkerLogs", "COLUMNS"]

COLUMNS = ["node_id", "pid", "kind", "name", "alive", "job_id", "out", "err"]


def log_url(dashboard_url: str, *, node_id: str | None = None, pid: int | None = None, suffix: str = "out",
            submission_id: str | None = None, lines: int = 1000) -> str:
    """The dashboard's address of one log: a worker's (``node_id`` + ``pid``, its ``out`` or ``err``: the State API's
    log endpoint, the last ``lines`` lines, -1 all) or a job driver's (``submission_id``: the Jobs API's
    ``/api/jobs/<id>/logs``, the whole log as JSON).

    Example:
        >>> log_url("http://127.0.0.1:8265", node_id="ab12", pid=4242, suffix="err")
        'http://127.0.0.1:8265/api/v0/logs/file?node_id=ab12&pid=4242&suffix=err&lines=1000'
    """
    if suffix not in ("out", "err"):
        raise ValueError(f"expected suffix 'out' or 'err', got {suffix!r}")
    if submission_id is None and (node_id is None or pid is None):
        raise ValueError("expected node_id and pid (a worker's log) or submission_id (a job driver's log)")
    if submission_id is not None:
        return f"{dashboard_url.rstrip('/')}/api/jobs/{quote(submission_id, safe='')}/logs"
    query = {"node_id": node_id, "pid": int(pid), "suffix": suffix, "lines": int(lines)}
    return f"{dashboard_url.rstrip('/')}/api/v0/logs/file?{urlencode(query)}"


class WorkerLogs(pd.DataFrame):
    """One row per Ray actor's worker process with its log links (``out``, ``err``); shows as a table of links."""

    _metadata = ["driver", "dashboard_url"]

    @property
    def _constructor(self):
        return WorkerLogs

    def __repr__(self) -> str:
        head = f"Ray worker logs at {self.dashboard_url}: {len(self)} actor(s)"
        if getattr(self, "driver", None):
            head += f"; the job driver's log: {self.driver}"
        if self.empty:
            return f"{head}\n  {_none(self)}"
        return head + "".join(f"\n  {r.kind} pid {r.pid} ({'alive' if r.alive else 'exited'}): {r.out}"
                              for r in self.head(20).itertuples())

    def _repr_html_(self) -> str:
        head = f"<b>Ray worker logs</b> at {_h(self.dashboard_url)}"
        if getattr(self, "driver", None):
            head += f" — <a href='{_h(self.driver)}' target='_blank'>the job driver's log</a>"
        if self.empty:
            return head + f"<div>{_h(_none(self))}</div>"
        rows = "".join(
            f"<tr><td>{_h(r.kind)}</td><td>{_h(r.name or '')}</td><td><code>{_h(str(r.node_id)[:12])}</code></td>"
            f"<td>{r.pid}</td><td>{'alive' if r.alive else 'exited'}</td><td>{_h(r.job_id or '')}</td>"
            f"<td><a href='{_h(r.out)}' target='_blank'>stdout</a> · <a href='{_h(r.err)}' target='_blank'>stderr</a></td></tr>"
            for r in self.itertuples())
        return (f"{head}<table><thead><tr><th>actor</th><th>name</th><th>node</th><th>pid</th><th>state</th>"
                f"<th>job</th><th>logs</th></tr></thead><tbody>{rows}</tbody></table>")


def _none(logs: WorkerLogs) -> str:
    if getattr(logs, "driver", None):  # the local rehearsal trains in its driver process
        return "this job started no Ray actors: everything it printed is in the driver's log"
    return "no actors yet: a job's workers appear here once it runs (notebook 03 submits it)"


def links(dashboard_url: str, *, submission_id: str | None = None, include_dead: bool = True, limit: int = 200,
          timeout: float = 10.0) -> WorkerLogs:
    """Every Ray actor's worker process of the cluster (or of one job: ``submission_id``) with its log links.

    Args:
        dashboard_url: the cluster's dashboard (``cluster.dashboard_url`` / ``cfg.dashboard_url``).
        submission_id: only this job's workers; its driver's log is ``.driver``.
        include_dead: keep workers that exited (their logs stay on the node until the cluster goes).
        limit: the most workers listed.

    Returns:
        ``WorkerLogs`` (a DataFrame[``COLUMNS``]; ``.driver``: the job driver's log link or None).

    Raises:
        NotReadyError: the dashboard does not answer (the fix says how to bring the cluster up).

    Example:
        >>> logs = nbtools.worker_logs.links(cfg.dashboard_url, submission_id=cfg.submission_id)
        >>> logs.out.iloc[0]
    """
    from ray.util.state import list_actors

    try:
        actors = list_actors(address=dashboard_url, detail=True, limit=limit, timeout=int(max(1, timeout)),
                               raise_on_missing_output=False)
    except Exception as e:  # ServerUnavailable, ConnectionError, …
        raise NotReadyError(f"could not list Ray's workers at {dashboard_url}",
                            reason=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                            fix=Fix("bring the cluster up first (notebook 02: nbtools.backends.get(cfg).up())",
                                    cli="bring the cluster up first (`nbtools up EXPERIMENT.yaml --apply`)")) from None
    job_id = _job_id(dashboard_url, submission_id) if submission_id else None
    rows = []
    for a in actors:
        alive = a.state != "DEAD"
        if not a.pid or not a.node_id or (not include_dead and not alive) or (job_id is not None and a.job_id != job_id):
            continue  # an actor not placed yet has no process, hence no log
        rows.append({"node_id": a.node_id, "pid": int(a.pid), "kind": a.class_name, "name": a.name or None,
                     "alive": alive, "job_id": a.job_id,
                     "out": log_url(dashboard_url, node_id=a.node_id, pid=a.pid, suffix="out"),
                     "err": log_url(dashboard_url, node_id=a.node_id, pid=a.pid, suffix="err")})
    out = WorkerLogs(pd.DataFrame(rows, columns=COLUMNS).sort_values(["alive", "pid"], ascending=[False, True])
                     .reset_index(drop=True))
    out.driver = log_url(dashboard_url, submission_id=submission_id) if submission_id else None
    out.dashboard_url = dashboard_url
    return out


def _job_id(dashboard_url: str, submission_id: str) -> str | None:
    """The Ray job id (hex) behind a submission id; None while the driver has not started."""
    from nbtools import jobs

    return getattr(jobs.attach(dashboard_url, submission_id).info(), "job_id", None)
