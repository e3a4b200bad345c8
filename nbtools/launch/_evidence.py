"""The evidence of a stuck or dead job, in one call, from what Ray and Kubernetes already expose; written as a bundle.

Why: the first thing a maintainer asks for (verl#3873) is versions, the resolved config, every rank's traceback, the
worker logs and ``ray status``. Ray's dashboard serves all of it: py-spy dumps per process (``/worker/traceback``,
and every Python descendant of a job's entrypoint on this machine, where the ranks of the rehearsal or torchrun are;
the head needs ``RAY_DASHBOARD_ENABLE_PROFILING=1``, which the local backend sets and the GKE manifests set with the
pods' ``SYS_PTRACE`` capability; a failed dump becomes a note that names that fix), GPU memory per process (``/nodes?view=summary``), ``ray status``
(``/api/cluster_status``), actors and their log files (the state API). On GKE the pods' events and conditions come
from the backend. The bundle is one ``.tar.gz`` plus a ``.md`` summary under ``<logs>/nbtools-diagnosis/``; every
text in it passes through ``_scrub`` (secret values of this environment and the config's secrets, token-shaped
strings, secret-named variables) before it is written.

Example:
    >>> v = nbtools.launch.stall(cfg)
    >>> print(v)                                  # the verdict; v.bundle is the archive's URL
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import tarfile
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

from nbtools.config import Experiment, redact, secret_values, to_dict, token_kind
from nbtools.errors import NotFoundError
from nbtools.launch._attempts import read_attempts
from nbtools.launch._diagnose import diagnose_log
from nbtools.launch._stacks import RankStack, parse_log_stacks, parse_py_spy
from nbtools.launch._stall import StallVerdict, judge, judge_pods, progress

__all__ = ["stall", "collect", "write_bundle", "BUNDLE_DIR"]

BUNDLE_DIR = "nbtools-diagnosis"
_ENV_KEEP = re.compile(r"^(NCCL_|CUDA_|NVIDIA_|TORCH_|GLOO_|NVTE_|VLLM_|RAY_|PYTORCH_|OMP_|UCX_|FI_|LD_LIBRARY_PATH$)")
_SECRET_NAME = re.compile(r"token|secret|password|passwd|api_?key|credential|(^|_)key$|auth", re.I)
_WORDS = re.compile(r"[A-Za-z0-9_\-\.+/=]{16,}")
_HTTP_TIMEOUT = 20.0


# -- Ray's dashboard --------------------------------------------------------------------------------------------
def _get(url: str, path: str, params: dict[str, Any] | None = None, *, timeout: float = _HTTP_TIMEOUT) -> str:
    q = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{url.rstrip('/')}{path}{q}", timeout=timeout) as r:  # noqa: S310 - the dashboard URL
        return r.read().decode("utf-8", "replace")


def _actors(url: str, **filters: str) -> list[dict[str, Any]]:
    from ray.util.state import list_actors

    flt = [(k, "=", v) for k, v in filters.items()]
    return [a if isinstance(a, dict) else a.__dict__ for a in
            list_actors(address=url, filters=flt, detail=True, limit=500, raise_on_missing_output=False)]


def _traceback(url: str, pid: int, node_id: str, *, subprocesses: bool) -> str:
    return _get(url, "/worker/traceback", {"pid": pid, "node_id": node_id, "native": "0",
                                           "subprocesses": "1" if subprocesses else "0"}, timeout=60)


def _stacks(url: str, targets: list[tuple[int, str, bool]], notes: list[str], *,
            actors: bool = False) -> tuple[list[RankStack], dict[str, str]]:
    """One py-spy sample of every target (pid, node, with children); ranks numbered by thread name, else fork order."""
    raw: dict[str, str] = {}

    def one(t):
        pid, node, sub = t
        try:
            return t, _traceback(url, pid, node, subprocesses=sub)
        except OSError as e:
            body = ""
            with contextlib.suppress(Exception):
                body = e.read().decode()[:300]  # type: ignore[attr-defined]
            return t, f"ERROR {e} {body}"

    found: list[RankStack] = []
    with ThreadPoolExecutor(max_workers=8) as ex:
        for (pid, _node, _sub), text in ex.map(one, targets):
            raw[str(pid)] = text
            if text.startswith("ERROR"):
                fix = (" (fix: start the head with RAY_DASHBOARD_ENABLE_PROFILING=1 and py-spy allowed to attach: "
                       "root or CAP_SYS_PTRACE)") if "disabled" in text or "ermission" in text else ""
                notes.append(f"py-spy dump of pid {pid} failed: {text[:200]}{fix}")
                continue
            found += parse_py_spy(text)
    if actors:  # one worker per Ray actor: its main thread (numbered by the caller)
        return [s for s in found if s.thread in ("MainThread", "") or s.rank is not None], raw
    ranks = [s for s in found if s.rank is not None]
    if not ranks:  # no "rank N" thread names: the rank processes in fork order (torch forks rank 0 first)
        workers = sorted({s.pid for s in found if _is_rank(s) and s.pid is not None})
        ranks = [s for s in found if s.pid in workers]
        for s in ranks:
            s.rank = workers.index(s.pid)
    return ranks, raw


def _entrypoint_targets(pid: int, node: str) -> list[tuple[int, str, bool]]:
    """What to dump for a job's entrypoint, whose ranks are children of the job supervisor's shell (the rehearsal,
    torchrun): on this machine each Python descendant alone, since a ``subprocesses`` dump aborts ("Failed to find
    python version") when a short-lived child exits mid-scan, and the supervisor's watchdog starts a ``sleep 1``
    every second; on another machine the supervisor with its subprocesses (retried by the caller's samples)."""
    import psutil

    try:
        p = psutil.Process(pid)
        if not p.cmdline() or "JobSupervisor" not in p.cmdline()[0]:
            return [(pid, node, True)]  # not ours to walk: the pid names a process on another machine
        kids = [c for c in p.children(recursive=True) if os.path.basename(c.exe()).startswith("python")]
    except (psutil.Error, OSError, IndexError):
        return [(pid, node, True)]
    return [(c.pid, node, False) for c in kids]


def _is_rank(s: RankStack) -> bool:
    return any(f.func in ("_wrap", "run_rank", "worker_main", "_worker_loop") or "multiprocessing/spawn" in f.file
               for f in s.frames)


def _renumber(samples: list[list[RankStack]], actor_ranks: list[RankStack]) -> None:
    """Ray actors of the job (one per worker) get ranks after those of the launcher's children, by pid order."""
    taken = {r.rank for s in samples for r in s if r.rank is not None}
    base = max(taken) + 1 if taken else 0
    for i, r in enumerate(sorted(actor_ranks, key=lambda r: r.pid or 0)):
        r.rank = base + i


# -- the job ----------------------------------------------------------------------------------------------------
def collect(cfg: Experiment, submission_id: str | None = None, *, samples: int = 3, gap_s: float = 0.7,
            now: float | None = None) -> tuple[StallVerdict, dict[str, str]]:
    """Observe the job and judge it: the verdict and the bundle's files (name -> text, not yet scrubbed)."""
    from nbtools import jobs

    url = cfg.dashboard_url
    if submission_id is None:
        recorded = read_attempts(cfg)
        submission_id = recorded[-1].submission_id if recorded else cfg.submission_id
    job = jobs.attach(url, submission_id)
    info = job.info()
    status = info.status.value
    files: dict[str, str] = {}
    notes: list[str] = []
    log = job.logs()
    files["logs/driver.log"] = "\n".join(log.splitlines()[-2000:])
    started = info.start_time / 1000 if info.start_time else None
    prog = progress([cfg.logs_url, cfg.checkpoints_url])
    samples_taken: list[list[RankStack]] = []
    dead: list[str] = []
    actors: list[dict[str, Any]] = []
    if not info.status.is_terminal():
        try:
            sup = _actors(url, name=f"_ray_internal_job_actor_{submission_id}")
            actors = [a for a in _actors(url, job_id=info.job_id) if a.get("class_name") != "JobSupervisor"] \
                if info.job_id else []
        except Exception as e:  # noqa: BLE001 - a state API that does not answer is a note, not a failure
            sup, notes = [], notes + [f"Ray's state API did not answer: {type(e).__name__}: {e}"]
        dead = [f"{a.get('class_name')} {a.get('actor_id', '')[:12]}: {(a.get('death_cause') or {})}"[:400]
                for a in actors if a.get("state") == "DEAD"]
        targets = [t for a in sup if a.get("pid") for t in _entrypoint_targets(int(a["pid"]), a["node_id"])]
        alive = [(int(a["pid"]), a["node_id"], False) for a in actors if a.get("state") == "ALIVE" and a.get("pid")]
        for i in range(max(1, samples)):
            if i:
                time.sleep(gap_s)
            mine, raw = _stacks(url, targets, notes if i == 0 else [])
            theirs, raw2 = _stacks(url, alive[:64], notes if i == 0 else [], actors=True)
            _renumber([mine], theirs)
            samples_taken.append(mine + theirs)
            for pid, text in {**raw, **raw2}.items():
                files[f"stacks/sample{i + 1}/pid{pid}.txt"] = text
        files["actors.json"] = json.dumps(actors, indent=1, default=str)
        for a in actors[:64]:
            with contextlib.suppress(Exception):
                from ray.util.state import get_log

                tail = "".join(get_log(address=url, actor_id=a["actor_id"], tail=200, suffix="err"))
                files[f"logs/actor-{a.get('class_name')}-{a['actor_id'][:12]}.err"] = tail
    ended_cause = ended_fix = ended_evidence = None
    if info.status.is_terminal():
        d = diagnose_log(job.log_tail(400), status=status, message=(info.message or "").split(", last available logs")[0],
                         submission_id=submission_id)
        ended_cause, ended_fix, ended_evidence = d.cause.value, d.fix, d.evidence
    v = judge(experiment=cfg.name, submission_id=submission_id, job_status=status, prog=prog, started_at=started,
              k=cfg.stall.k, floor_s=cfg.stall.floor_s, startup_s=cfg.stall.startup_s, samples=samples_taken,
              log_stacks=parse_log_stacks(log), dead_actors=dead, ended_cause=ended_cause, ended_fix=ended_fix or "",
              ended_evidence=ended_evidence or "", now=now)
    v.notes += notes
    files.update(_context(cfg, url, info, v))
    return v, files


def _context(cfg: Experiment, url: str, info, v: StallVerdict) -> dict[str, str]:
    """Versions, config, environment, GPU memory, ``ray status`` and (GKE) the pods' events, conditions and restarts,
    which refine ``v`` (``judge_pods``)."""
    from importlib import metadata

    from nbtools import backends, trainers
    from nbtools._version import __version__

    out: dict[str, str] = {}
    versions = {"nbtools": __version__}
    for pkg in ("ray", "torch", "vllm", "transformers", "nvidia-nccl-cu12"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[pkg] = metadata.version(pkg)
    with contextlib.suppress(Exception):
        t = trainers.get(cfg)
        versions["trainer"] = f"{t.label} {t.release}".strip()
        with contextlib.suppress(metadata.PackageNotFoundError):  # the trainer's own distribution, where installed here
            versions[t.name] = metadata.version(t.name)
    out["versions.json"] = json.dumps({"this machine": versions, "note": "the cluster's image may differ: see the "
                                       "driver log's first lines"}, indent=1)
    out["config.json"] = json.dumps(to_dict(cfg), indent=1, default=str)
    out["entrypoint.txt"] = str(info.entrypoint or "")
    renv = dict((info.runtime_env or {}).get("env_vars") or {})

    def kept(env) -> dict[str, str]:
        return {k: (redact(x) if _SECRET_NAME.search(k) else str(x)) for k, x in sorted(env.items()) if _ENV_KEEP.match(k)}

    out["env.json"] = json.dumps({"job runtime_env": kept(renv), "this machine": kept(os.environ),
                                  "note": "NCCL/CUDA/torch/Ray variables only; the image's own defaults are not listed"},
                                 indent=1)
    gpu: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        summary = json.loads(_get(url, "/nodes", {"view": "summary"})).get("data", {}).get("summary", [])
        for node in summary:
            for g in node.get("gpus") or []:
                gpu[f"{node.get('ip', '?')}/gpu{g.get('index')}"] = {
                    "memory_used_mb": g.get("memoryUsed"), "memory_total_mb": g.get("memoryTotal"),
                    "processes": {str(p.get("pid")): p.get("gpuMemoryUsage") for p in g.get("processesPids") or []}}
    out["gpu_memory.json"] = json.dumps(gpu or {"note": "no GPUs reported by Ray on this cluster"}, indent=1)
    try:
        st = json.loads(_get(url, "/api/cluster_status", {"format": "1"}))
        out["ray_status.txt"] = str((st.get("data") or {}).get("clusterStatus") or st)
    except Exception as e:  # noqa: BLE001
        out["ray_status.txt"] = f"unavailable: {type(e).__name__}: {e}"
    start = info.start_time / 1000 if info.start_time else None
    try:  # the pods' side (GKE): events, conditions, restarts; a restarted head or an evicted worker refines the verdict
        be = backends.get(cfg)
        events, pods = be.events(since=start, until=None, limit=200), be.pod_states()
    except Exception as e:  # noqa: BLE001 - an API that does not answer is a note, not a failure
        v.notes.append(f"the cluster's pods could not be read: {type(e).__name__}: {e}")
    else:
        out["events.txt"] = "\n".join(events)
        if pods:
            out["pods.txt"] = "\n".join(p.line() for p in pods)
            out["pods.json"] = json.dumps([p.to_dict() for p in pods], indent=1, default=str)
        judge_pods(v, pods, events, started_at=start)
    return out


# -- the bundle -------------------------------------------------------------------------------------------------
def _scrubber(cfg: Experiment):
    secrets = {**secret_values(to_dict(cfg))}
    secrets.update({k: x for k, x in os.environ.items() if _SECRET_NAME.search(k) and len(x) >= 8})

    def scrub(text: str) -> str:
        for name, value in sorted(secrets.items(), key=lambda kv: -len(kv[1])):
            text = text.replace(value, f"<value of ${name}>")
        return _WORDS.sub(lambda m: redact(m.group(0)) if token_kind(m.group(0), names=False) else m.group(0), text)

    return scrub


def write_bundle(cfg: Experiment, v: StallVerdict, files: dict[str, str]) -> tuple[str, str]:
    """Write ``<logs>/nbtools-diagnosis/<id>-<UTC time>.tar.gz`` and ``.md`` (scrubbed); return both URLs."""
    from nbtools import storage

    scrub = _scrubber(cfg)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = storage.join(cfg.logs_url, BUNDLE_DIR, f"{v.submission_id}-{stamp}")
    v.bundle, v.summary_url = base + ".tar.gz", base + ".md"
    doc = dict(v.to_dict())
    files = {**files, "verdict.json": json.dumps(doc, indent=1, default=str)}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in sorted(files.items()):
            data = scrub(text).encode()
            ti = tarfile.TarInfo(f"{v.submission_id}-{stamp}/{name}")
            ti.size, ti.mtime = len(data), int(time.time())
            tar.addfile(ti, io.BytesIO(data))
    storage.write_bytes(v.bundle, buf.getvalue())
    storage.write_text(v.summary_url, scrub(_summary(v, files)))
    return v.bundle, v.summary_url


def _summary(v: StallVerdict, files: dict[str, str]) -> str:
    lines = [f"# {v.experiment}: {v.status}", "", v.headline(), "", f"- cause: **{v.cause}**", f"- fix: {v.fix or '-'}",
             f"- evidence: {v.evidence or '-'}", f"- quiet for: {_n(v.stalled_for_s)} s (threshold {_n(v.threshold_s)} s, median step "
             f"{_n(v.median_step_s)} s, last step {v.last_step})", "", "| rank | pid | phase | collective | stack |",
             "| --- | --- | --- | --- | --- |"]
    for r in v.ranks:
        lines.append(f"| {r.rank} | {r.pid} | {r.phase}{' (straggler)' if r.rank in v.stragglers else ''} | "
                     f"{r.collective or ''} | `{r.summary()}` |")
    lines += ["", *[f"- note: {n}" for n in v.notes], "", "## ray status", "```",
              files.get("ray_status.txt", "")[:3000], "```", "",
              *(["## pods", "```", files["pods.txt"][:3000], "```", ""] if files.get("pods.txt") else []),
              "## driver log (last 40 lines)", "```",
              "\n".join(files.get("logs/driver.log", "").splitlines()[-40:]), "```",
              "", f"Everything else is in the archive: {', '.join(sorted(files))}."]
    return "\n".join(lines) + "\n"


class _NoInfo:
    """Stands in for a job the cluster no longer knows (no entrypoint, runtime env or start time to show)."""

    entrypoint, runtime_env, start_time = "", {}, None


def _lost(cfg: Experiment, submission_id: str | None) -> StallVerdict | None:
    """A job the attempts record holds as unfinished while the cluster does not know it: its head restarted (a
    KubeRay RayJob then stays "Running": kuberay#3860, #3903, #4217). None when the record says nothing about it."""
    recorded = read_attempts(cfg)
    mine = [a for a in recorded if submission_id in (None, a.submission_id)]
    if not mine or mine[-1].terminal:
        return None
    a = mine[-1]
    v = StallVerdict(cfg.name, a.submission_id, "UNKNOWN", "stalled", None, cfg.stall.floor_s, None, a.last_step,
                     cause="lost-node")
    v.evidence = (f"attempt {a.n} ({a.submission_id}) is recorded as {a.status} but the cluster at {cfg.dashboard_url} "
                  "does not know it: the Ray head restarted (or the cluster was replaced) and the job died with it")
    v.fix = ("resubmit (nbtools.launch.resubmit(cfg), or `nbtools launch EXPERIMENT.yaml --retry`): it resumes from the "
             "newest complete step_N; on GKE also delete a RayJob that still says Running")
    return v


def _n(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def stall(cfg: Experiment, submission_id: str | None = None, *, bundle: bool = True, samples: int = 3) -> StallVerdict:
    """Is the job stuck? Progress, every rank's stack (sampled ``samples`` times), the verdict and the evidence bundle.

    Args:
        cfg: the experiment (its cluster, storage and ``stall`` thresholds).
        submission_id: the job (default: the latest attempt, else ``cfg.submission_id``).
        bundle: write the evidence archive and its summary to the run's storage.
        samples: stack samples a straggler must appear in.

    Raises:
        NotFoundError: no such job on the cluster.

    Example:
        >>> v = nbtools.launch.stall(cfg)
        >>> v.status, v.cause, v.stragglers, v.bundle
    """
    try:
        v, files = collect(cfg, submission_id, samples=samples)
    except NotFoundError:
        v = _lost(cfg, submission_id)
        if v is None:
            raise
        recorded = read_attempts(cfg)
        files = {"attempts.json": json.dumps([a.to_dict() for a in recorded], indent=1)}
        info = _NoInfo()
        started = [a.started for a in recorded if a.submission_id == v.submission_id and a.started]
        info.start_time = started[-1] * 1000 if started else None  # a head restarted before the attempt is not its cause
        files.update(_context(cfg, cfg.dashboard_url, info, v))
    if bundle:
        write_bundle(cfg, v, files)
    return v
