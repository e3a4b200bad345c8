"""TEST DOUBLES of the ``gcloud``, ``kubectl`` and ``helm`` command-line tools, for the simulated GKE (sim_gke.py).

They are NOT Google's or Kubernetes' tools. ``SimGke`` writes three small executable scripts (``<root>/shims/bin``,
put first on PATH) that call :func:`main` here. Each invocation is appended to a JSON-lines log (argv, stdin with
Secret values redacted, exit code) and works on one state file, so that the provisioning plan's checks see what its
commands created:

- ``gcloud``: services, VPC networks, subnets, firewall rules, GKE clusters and node pools, IAM bindings live in
  the state file; ``storage buckets create/describe/delete`` go to the real GCS emulator (a non-empty bucket is not
  deleted, like GCS), ``storage cat`` / ``storage rm`` / ``storage rsync`` (a local directory to a prefix) act on its
  objects; ``container clusters get-credentials`` writes the ``gke_<project>_<location>_<cluster>``
  context pointing at the Kubernetes API double into ``$KUBECONFIG``; ``projects describe`` prints a project number;
  ``--help`` prints the flags of that command path from nbtools' shipped table (``nbtools/data/gcloud_flags_*.json``),
  or a generic text when there is none.
- ``kubectl`` / ``helm``: see ``sim_shims_kube.py``.

This is the project's one double of these tools: the simulated GKE and the unit tests of plans and scripts
(tests/gke/test_fidelity.py) both use it, so a command nbtools starts to use is taught here once. A test can make a
command fail as GCP would when a call fails for reasons of its own (``inject_failure``).

Messages and exit codes follow the real tools' (``ERROR: (gcloud.compute.networks.describe) ...``, exit 1). The
scripts run Python with ``-S`` (no site-packages: ~0.1 s a call); PyYAML is imported from the path in the config
only where YAML must be read.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

SDK_VERSION = "528.0.0"  # what `gcloud version` reports when nbtools ships no flag table


class Call:
    """One invocation: config, mutable state, argv (positionals and ``--flag[=value]``), what it prints.

    (A plain class, not a dataclass: every import costs start-up time, and the plan runs ~50 of these.)
    """

    def __init__(self, conf: dict, state: dict, argv: list[str], stdin: str | None = None):
        self.conf, self.state, self.argv, self.stdin = conf, state, argv, stdin
        self.out: list[str] = []
        self.err: list[str] = []

    @property
    def positionals(self) -> list[str]:
        return [a for a in self.argv if not a.startswith("-")]

    def flag(self, name: str, default: Any = None) -> Any:
        for a in self.argv:
            if a == f"--{name}":
                return True
            if a.startswith(f"--{name}="):
                return a.split("=", 1)[1]
        return default

    def print(self, text: str = "") -> None:
        self.out.append(text)

    def fail(self, text: str, rc: int = 1) -> int:
        self.err.append(text)
        return rc


_CONF: dict = {}  # the sim's shims config (sim.json), loaded by main()


def yaml_module():
    """PyYAML from the venv's site-packages (the shims run with ``python -S``)."""
    try:
        import yaml
    except ImportError:
        sys.path.extend(p for p in _CONF.get("site_packages", []) if p not in sys.path)
        import yaml
    return yaml


# -- state, log ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def locked_state(path: str | Path):
    """The shims' state (JSON), read and written under an exclusive lock: one command at a time."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p.with_name(p.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state = json.loads(p.read_text()) if p.exists() else {}
        except ValueError:
            state = {}
        before = json.dumps(state, sort_keys=True)
        yield state
        if json.dumps(state, sort_keys=True) != before:
            tmp = p.with_name(f"{p.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
            tmp.replace(p)


def redact(stdin: str | None) -> str | None:
    """The stdin of ``kubectl apply -f -`` with every Secret's data values replaced (what the log may keep)."""
    if not stdin or "Secret" not in stdin:
        return stdin
    yaml = yaml_module()
    docs = list(yaml.safe_load_all(stdin))
    for d in docs:
        if isinstance(d, dict) and d.get("kind") == "Secret":
            for key in ("data", "stringData"):
                if isinstance(d.get(key), dict):
                    d[key] = {k: "<redacted>" for k in d[key]}
    return yaml.safe_dump_all(docs, sort_keys=False)


def main(tool: str, config_path: str) -> int:
    """Entry point of the generated ``gcloud``/``kubectl``/``helm`` scripts."""
    conf = json.loads(Path(config_path).read_text())
    _CONF.update(conf)
    argv = sys.argv[1:]
    reads = "-f" in argv and argv[argv.index("-f") + 1:][:1] == ["-"] or any(
        a.startswith("--from-file=") and a.endswith("=/dev/stdin") for a in argv)
    stdin = sys.stdin.read() if tool == "kubectl" and reads else None
    if tool == "gcloud":
        handler = gcloud
    else:
        import sim_shims_kube

        handler = getattr(sim_shims_kube, tool)
    with locked_state(conf["state"]) as state:
        call = Call(conf, state, argv, stdin)
        try:
            rc = _injected(call, tool)
            if rc is None:
                rc = handler(call)
        except Exception as e:  # noqa: BLE001 - a bug in the double must show up as a failed command, with its text
            rc = call.fail(f"(simulated {tool}) internal error: {type(e).__name__}: {e}", 70)
    if call.out:
        sys.stdout.write("\n".join(call.out) + "\n")
    if call.err:
        sys.stderr.write("\n".join(call.err) + "\n")
    kept = "<redacted>" if stdin and "--from-file=" in " ".join(argv) else redact(stdin)  # a Secret's raw value
    record = {"tool": tool, "argv": argv, "stdin": kept, "rc": rc, "t": round(time.time(), 3)}
    with open(conf["log"], "a") as log:  # one write per line: O_APPEND keeps lines whole
        log.write(json.dumps(record) + "\n")
    return rc


def inject_failure(state_path: str | Path, command: str) -> None:
    """Make every later call whose ``tool positionals...`` starts with ``command`` (e.g. ``"gcloud container clusters
    delete nbtools-b200"``) fail with exit 1 and an error naming the injection, changing nothing."""
    with locked_state(state_path) as state:
        state.setdefault("inject", {}).setdefault("fail", []).append(command.split())


def _injected(call: Call, tool: str) -> int | None:
    words = [tool, *call.positionals]
    for prefix in call.state.get("inject", {}).get("fail", []):
        if words[: len(prefix)] == prefix:
            return call.fail(f"ERROR: ({tool}) {' '.join(prefix[1:])} failed (a failure the test injected)")
    return None


def read_log(path: str | Path) -> list[dict]:
    """Every recorded invocation, oldest first."""
    p = Path(path)
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []


# -- kubeconfig ---------------------------------------------------------------------------------------------


def load_kubeconfig(path: str | Path) -> dict:
    p = Path(path)
    if not p.exists() or not p.read_text().strip():
        return {"apiVersion": "v1", "kind": "Config", "clusters": [], "contexts": [], "users": [], "preferences": {}}
    text = p.read_text()
    try:
        return json.loads(text)
    except ValueError:
        return yaml_module().safe_load(text)


def save_kubeconfig(path: str | Path, cfg: dict) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f"{p.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cfg, indent=1))  # JSON is YAML: the kubernetes client reads it as a kubeconfig
    tmp.replace(p)


def write_credentials(kubeconfig: str | Path, context: str, server: str, token: str) -> None:
    """What ``gcloud container clusters get-credentials`` does: add/replace the context and make it current."""
    cfg = load_kubeconfig(kubeconfig)
    for key, entry in (("clusters", {"name": context, "cluster": {"server": server}}),
                       ("users", {"name": context, "user": {"token": token}}),
                       ("contexts", {"name": context, "context": {"cluster": context, "user": context}})):
        cfg[key] = [e for e in cfg.get(key) or [] if e.get("name") != context] + [entry]
    cfg["current-context"] = context
    save_kubeconfig(kubeconfig, cfg)


def kubeconfig_path() -> str:
    return os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")


# -- gcloud -------------------------------------------------------------------------------------------------


def project_number(project: str) -> str:
    """A stable 12-digit project number for a project id (what `projects describe` prints)."""
    import hashlib

    return str(100000000000 + int(hashlib.sha256(project.encode()).hexdigest(), 16) % 900000000000)


def flag_table(conf: dict) -> dict | None:
    files = sorted(Path(conf["nbtools_data"]).glob("gcloud_flags_*.json"),
                   key=lambda f: tuple(int(x) for x in f.stem.split("_")[-1].split(".") if x.isdigit()))
    return json.loads(files[-1].read_text()) if files else None


def _format(call: Call, obj: dict) -> None:
    fmt = call.flag("format", "")
    if fmt == "json":
        call.print(json.dumps(obj, indent=2, sort_keys=True))
    elif fmt.startswith("value(") and fmt.endswith(")"):
        cur: Any = obj
        for part in fmt[6:-1].split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
        if cur is not None:
            call.print(str(cur))
    else:
        call.print(json.dumps(obj, indent=2, sort_keys=True))


def _help(call: Call, path: list[str]) -> int:
    table = flag_table(call.conf)
    flags = (table or {}).get("commands", {}).get(" ".join(path))
    call.print(f"NAME\n    gcloud {' '.join(path)}\n\nSYNOPSIS\n    gcloud {' '.join(path)} [FLAGS]\n\nFLAGS")
    if flags is None:  # no table shipped (or the path is not in it): gcloud-wide flags only
        call.print("    (simulated gcloud: nbtools ships no flag table for this command path)")
        flags = ["account", "configuration", "flags-file", "flatten", "format", "help", "project", "quiet", "verbosity"]
    call.print("\n".join(f"    --{f}" for f in flags))
    return 0


_COMPUTE = {  # gcloud group -> (state key, URL collection, parent flag that must name an existing resource)
    ("compute", "networks"): ("networks", "global/networks", None),
    ("compute", "networks", "subnets"): ("subnets", "regions/{region}/subnetworks", ("network", "networks")),
    ("compute", "firewall-rules"): ("firewalls", "global/firewalls", ("network", "networks")),
}


def gcloud(call: Call) -> int:
    pos = call.positionals
    if "--help" in call.argv or "-h" in call.argv:
        return _help(call, pos)
    if pos[:1] == ["version"]:
        table = flag_table(call.conf)
        _format(call, {"Google Cloud SDK": (table or {}).get("gcloud_version", SDK_VERSION), "core": "2026.01.01"})
        return 0
    g = call.state.setdefault("gcloud", {})
    project = call.flag("project")
    where = "gcloud." + ".".join(p for p in pos[:4] if not p.startswith("gs:") and "/" not in p and "@" not in p)
    if not project and pos[:1] != ["projects"]:
        return call.fail(f"ERROR: ({where}) The required property [project] is not currently set.")
    if pos and pos[-1] == "list" and tuple(pos[:-1]) in _LISTS:
        return _list(call, g, project, tuple(pos[:-1]), where)
    for n in (3, 2):
        group = tuple(pos[:n])
        if group in _COMPUTE and len(pos) > n + 1:
            return _compute(call, g, project, group, pos[n], pos[n + 1], where)
    if pos[:2] == ["services", "enable"]:
        enabled = g.setdefault("services", {}).setdefault(project, [])
        enabled += [a for a in pos[2:] if a not in enabled]
        call.err.append(f"Operation \"operations/acf.p2-{project_number(project)}\" finished successfully.")
        return 0
    if pos[:2] == ["services", "list"]:
        for name in g.get("services", {}).get(project, []):
            _format(call, {"config": {"name": name}})
        return 0
    if pos[:2] == ["container", "clusters"] and len(pos) > 3:
        return _cluster(call, g, project, pos[2], pos[3], where)
    if pos[:2] == ["container", "node-pools"] and len(pos) > 3:
        return _node_pool(call, g, project, pos[2], pos[3], where)
    if pos[:2] in (["storage", "rm"], ["storage", "cat"]) and len(pos) > 2:
        from sim_shims_kube import objects

        return objects(call, pos[1], pos[2], where)
    if pos[:2] == ["storage", "rsync"] and len(pos) > 3:
        from sim_shims_kube import rsync

        return rsync(call, pos[2], pos[3], where)
    if pos[:2] == ["storage", "buckets"] and len(pos) > 3:
        from sim_shims_kube import bucket

        return bucket(call, g, project, pos[2], pos[3].removeprefix("gs://").rstrip("/"), where)
    if pos[:2] == ["iam", "service-accounts"] and len(pos) > 3:
        return _iam(call, g.setdefault("sa_iam", {}), pos[2], pos[3], where, exists=True)
    if pos[:2] == ["projects", "describe"] and len(pos) > 2:
        _format(call, {"projectId": pos[2], "projectNumber": project_number(pos[2]), "lifecycleState": "ACTIVE"})
        return 0
    return call.fail(f"ERROR: (gcloud) the simulated gcloud does not implement `gcloud {' '.join(pos[:4])}`", 2)


_LISTS = {("compute", "networks"), ("compute", "networks", "subnets"), ("compute", "firewall-rules"),
          ("container", "clusters"), ("container", "node-pools"), ("storage", "buckets")}


def _list(call: Call, g: dict, project: str, group: tuple, where: str) -> int:
    """``gcloud … list --filter=name=X --format=value(name)``: the destroy plan's existence checks (an empty answer
    with exit 0 means "gone"; a failing list proves nothing, as with the real gcloud)."""
    flt = call.flag("filter", "")
    wanted = flt.split("=", 1)[1] if flt.startswith("name=") else None
    if group in _COMPUTE:
        key, collection, _ = _COMPUTE[group]
        regions = [r for r in (call.flag("regions") or "").split(",") if r]
        items = [v for k, v in g.get(key, {}).items() if k.startswith(f"projects/{project}/")
                 and (not regions or any(f"/regions/{r}/" in k for r in regions))]
    elif group == ("container", "clusters"):
        loc = call.flag("location") or call.flag("region") or call.flag("zone")
        items = [v for k, v in g.get("clusters", {}).items() if k.startswith(f"projects/{project}/locations/{loc}/")]
    elif group == ("container", "node-pools"):
        parent = f"projects/{project}/locations/{call.flag('location')}/clusters/{call.flag('cluster')}"
        if parent not in g.get("clusters", {}):
            return call.fail(f"ERROR: ({where}) ResponseError: code=404, message=Not found: {parent}.")
        items = [v for k, v in g.get("node_pools", {}).items() if k.startswith(parent + "/")]
    else:
        from sim_shims_kube import bucket_names

        items = [{"name": n} for n in bucket_names(call)]
    for item in items:
        if wanted is None or item.get("name") == wanted:
            _format(call, item)
    return 0


def _compute(call: Call, g: dict, project: str, group: tuple, verb: str, name: str, where: str) -> int:
    key, collection, parent = _COMPUTE[group]
    region = call.flag("region", "")
    link = f"projects/{project}/{collection.format(region=region)}/{name}"
    items = g.setdefault(key, {})
    if verb == "create":
        if link in items:
            return call.fail(f"ERROR: ({where}) Could not fetch resource:\n - The resource '{link}' already exists")
        if parent:
            ref = f"projects/{project}/global/networks/{call.flag(parent[0])}"
            if ref not in g.get(parent[1], {}):
                return call.fail(f"ERROR: ({where}) Could not fetch resource:\n - The resource '{ref}' was not found")
        items[link] = {"name": name, "selfLink": f"https://www.googleapis.com/compute/v1/{link}",
                       **{f: call.flag(f) for f in ("network", "range", "subnet-mode", "network-profile", "rules") if call.flag(f)}}
        call.err.append(f"Created [https://www.googleapis.com/compute/v1/{link}].")
        return 0
    if link not in items:
        return call.fail(f"ERROR: ({where}) Could not fetch resource:\n - The resource '{link}' was not found")
    if verb == "describe":
        _format(call, items[link])
        return 0
    if verb == "delete":
        users = [k for c in ("subnets", "firewalls") for k, v in g.get(c, {}).items() if v.get("network") == name]
        if key == "networks" and users:
            return call.fail(f"ERROR: ({where}) Could not fetch resource:\n - The network resource '{link}' is already "
                             f"being used by '{users[0]}'")
        del items[link]
        call.err.append(f"Deleted [https://www.googleapis.com/compute/v1/{link}].")
        return 0
    return call.fail(f"ERROR: ({where}) the simulated gcloud does not implement `{verb}` here", 2)


def _cluster(call: Call, g: dict, project: str, verb: str, name: str, where: str) -> int:
    loc = call.flag("location") or call.flag("region") or call.flag("zone")
    link = f"projects/{project}/locations/{loc}/clusters/{name}"
    clusters = g.setdefault("clusters", {})
    if verb in ("create", "create-auto"):
        if link in clusters:
            return call.fail(f"ERROR: ({where}) ResponseError: code=409, message=Already exists: {link}.")
        clusters[link] = {"name": name, "location": loc, "autopilot": {"enabled": verb == "create-auto"},
                          "status": "RUNNING", "addons": call.flag("addons"), "workloadPool": call.flag("workload-pool")}
        call.err.append(f"Created [https://container.googleapis.com/v1/{link}].")
        return 0
    if link not in clusters:
        return call.fail(f"ERROR: ({where}) ResponseError: code=404, message=Not found: {link}.")
    if verb == "describe":
        _format(call, clusters[link])
    elif verb == "delete":
        del clusters[link]
        pools = g.get("node_pools", {})
        for k in [k for k in pools if k.startswith(link + "/")]:  # GKE deletes the node pools with the cluster
            del pools[k]
        from sim_shims_kube import wipe_cluster

        wipe_cluster(call)  # ... and every in-cluster object (its etcd), Helm's releases included
        context = f"gke_{project}_{loc}_{name}"
        helm = call.state.get("helm", {})
        for k in [k for k in helm if k.startswith(context + "/")]:
            del helm[k]
        call.err.append(f"Deleted [https://container.googleapis.com/v1/{link}].")
    elif verb == "get-credentials":
        context = f"gke_{project}_{loc}_{name}"
        write_credentials(kubeconfig_path(), context, call.conf["kube_server"], call.conf["kube_token"])
        call.err.append(f"Fetching cluster endpoint and auth data.\nkubeconfig entry generated for {name}.")
    else:
        return call.fail(f"ERROR: ({where}) the simulated gcloud does not implement `{verb}` here", 2)
    return 0


def _node_pool(call: Call, g: dict, project: str, verb: str, name: str, where: str) -> int:
    loc, cluster = call.flag("location"), call.flag("cluster")
    parent = f"projects/{project}/locations/{loc}/clusters/{cluster}"
    link = f"{parent}/nodePools/{name}"
    pools = g.setdefault("node_pools", {})
    if parent not in g.get("clusters", {}):
        return call.fail(f"ERROR: ({where}) ResponseError: code=404, message=Not found: {parent}.")
    if verb == "create":
        if link in pools:
            return call.fail(f"ERROR: ({where}) ResponseError: code=409, message=Already exists: {link}.")
        nets = [a.split("=", 1)[1] for a in call.argv if a.startswith("--additional-node-network=")]
        for spec in nets:
            parts = dict(p.split("=", 1) for p in spec.split(","))
            ref = f"projects/{project}/global/networks/{parts.get('network')}"
            if ref not in g.get("networks", {}):
                return call.fail(f"ERROR: ({where}) ResponseError: code=400, message=Network \"{parts.get('network')}\" "
                                 "does not exist.")
        pools[link] = {"name": name, "status": "RUNNING",
                       "config": {"machineType": call.flag("machine-type"), "spot": bool(call.flag("spot"))},
                       "initialNodeCount": int(call.flag("num-nodes", 1)), "additionalNodeNetworks": nets}
        call.err.append(f"Created [https://container.googleapis.com/v1/{link}].")
        return 0
    if link not in pools:
        return call.fail(f"ERROR: ({where}) ResponseError: code=404, message=Not found: {link}.")
    if verb == "describe":
        _format(call, pools[link])
        return 0
    del pools[link]
    call.err.append(f"Deleted [https://container.googleapis.com/v1/{link}].")
    return 0


def _iam(call: Call, store: dict, verb: str, resource: str, where: str, *, exists: bool,
         defaults: list[dict] | None = None) -> int:
    """add-/remove-iam-policy-binding and get-iam-policy on one resource (a bucket or a service account)."""
    if not exists:
        return call.fail(f"ERROR: ({where}) HTTPError 404: {resource} not found")
    bindings = store.setdefault(resource, [])
    member, role = call.flag("member"), call.flag("role")
    if verb in ("add-iam-policy-binding", "remove-iam-policy-binding"):
        b = next((b for b in bindings if b["role"] == role), None)
        if verb.startswith("add"):
            if b is None:
                bindings.append(b := {"role": role, "members": []})
            if member not in b["members"]:
                b["members"].append(member)
        elif b is None or member not in b["members"]:
            return call.fail(f"ERROR: ({where}) Policy binding with the specified principal, role, and condition not found!")
        else:
            b["members"].remove(member)
            if not b["members"]:
                bindings.remove(b)
        call.err.append(f"Updated IAM policy for [{resource}].")
    elif verb != "get-iam-policy":
        return call.fail(f"ERROR: ({where}) the simulated gcloud does not implement `{verb}` here", 2)
    policy = {"bindings": [*(defaults or []), *bindings], "etag": "CAE=", "version": 1}
    if verb == "get-iam-policy":
        _format(call, policy)
    else:
        call.print(json.dumps(policy, indent=2, sort_keys=True))
    return 0
