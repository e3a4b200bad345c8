"""A stand-in for `gcloud` and `kubectl` that keeps a small world of GCP/Kubernetes resources in a JSON file.

Tests put shims named ``gcloud``/``kubectl`` on PATH that run this file, then apply real plans (or run their bash
scripts) against it. It answers the commands the provisioning and destroy plans use, the way the real tools do
where it matters to a plan: ``list --filter=name=X`` prints the name or nothing (exit 0); ``describe`` of a missing
resource exits 1; a subnet still used by node NICs, a network with subnets and a bucket with objects refuse to be
deleted; deleting a cluster takes its node pools; ``get-credentials`` writes a context. Every call is appended to
``log`` so a test can check the order. State: ``{"res": {key: value}, "fail": [keys whose delete fails]}``.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

_KINDS = {
    ("container", "clusters"): "cluster",
    ("container", "node-pools"): "nodepool",
    ("compute", "networks", "subnets"): "subnet",
    ("compute", "networks"): "network",
    ("compute", "firewall-rules"): "firewall",
    ("storage", "buckets"): "bucket",
    ("iam", "service-accounts"): "gsa",
}


def _load() -> dict:
    return json.loads(Path(os.environ["CLOUD_DOUBLE_STATE"]).read_text())


def _save(st: dict) -> None:
    Path(os.environ["CLOUD_DOUBLE_STATE"]).write_text(json.dumps(st, indent=1))


def _flag(args: list[str], name: str) -> str | None:
    for a in args:
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


def _positional(args: list[str]) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "-o":
            skip = True  # its value (`-o name`) is not a positional argument
        elif not a.startswith("-"):
            out.append(a)
    return out


def _fail(msg: str, code: int = 1) -> int:
    print(msg, file=sys.stderr)
    return code


def gcloud(args: list[str]) -> int:
    st = _load()
    res = st["res"]
    words = _positional(args)
    if words[:2] == ["storage", "rm"]:
        bucket = words[2].removeprefix("gs://").rstrip("/")
        for k in [k for k in res if k in (f"bucket:{bucket}", f"objects:{bucket}") or k.startswith(f"iam:gs://{bucket}:")]:
            del res[k]
        _save(st)
        return 0
    if words[:2] == ["storage", "cat"]:
        key = f"object:{words[2]}"
        if key not in res:
            return _fail(f"ERROR: {words[2]} not found: 404", 1)
        print(res[key])
        return 0
    kind, rest = None, words
    for path, k in sorted(_KINDS.items(), key=lambda x: -len(x[0])):
        if tuple(words[: len(path)]) == path:
            kind, rest = k, words[len(path):]
            break
    if kind is None:
        return _fail(f"cloud_double: unsupported gcloud {' '.join(args)}", 2)
    verb, names = rest[0], rest[1:]
    if verb == "list":
        name = (_flag(args, "filter") or "name=").split("=", 1)[1]
        if kind == "nodepool" and f"cluster:{_flag(args, 'cluster')}" not in res:
            return _fail("ERROR: (gcloud.container.node-pools.list) NOT_FOUND: cluster not found", 1)
        if f"{kind}:{name}" in res:
            print(name)
        return 0
    if verb == "describe":
        key = f"{kind}:{names[0].removeprefix('gs://')}"
        if key not in res:
            return _fail(f"ERROR: NOT_FOUND: {key}", 1)
        print(res[key] if _flag(args, "format") == "value(status)" else names[0])
        return 0
    if verb == "get-iam-policy":
        target = names[0]
        members = [k.split(":", 2)[2] for k in res if k.startswith(f"iam:{target}:")]
        if kind == "bucket" and f"bucket:{target.removeprefix('gs://')}" not in res:
            return _fail("ERROR: 404 bucket not found", 1)
        print(json.dumps({"bindings": [{"members": members}]}))
        return 0
    if verb in ("add-iam-policy-binding", "remove-iam-policy-binding"):
        key = f"iam:{names[0]}:{_flag(args, 'member')}"
        if verb.startswith("add"):
            res[key] = "bound"
        elif key in res:
            del res[key]
        else:
            return _fail("ERROR: Policy binding not found", 1)
        _save(st)
        return 0
    if verb == "delete":
        name = names[0].removeprefix("gs://")
        key = f"{kind}:{name}"
        if key in st.get("fail", []):
            return _fail(f"ERROR: deleting {key} failed (injected)", 1)
        if key not in res:
            return _fail(f"ERROR: NOT_FOUND: {key}", 1)
        if kind == "subnet" and any(k.startswith(("nodepool:", "cluster:")) for k in res):
            return _fail(f"ERROR: The subnetwork resource '{name}' is already being used by a node", 1)
        if kind == "network" and any(k.startswith(("subnet:", "firewall:")) and name.rsplit("-", 1)[0] in k for k in res):
            return _fail(f"ERROR: The network resource '{name}' is already being used", 1)
        if kind == "bucket" and f"objects:{name}" in res:
            return _fail(f"ERROR: HTTPError 409: The bucket you tried to delete is not empty: {name}", 1)
        del res[key]
        if kind == "cluster":
            for k in [k for k in res if k.startswith(("nodepool:", "rayclusters:", "secrets:", "daemonsets:"))]:
                del res[k]
        _save(st)
        return 0
    if verb in ("create", "create-auto"):
        key = f"{kind}:{names[0].removeprefix('gs://')}"
        if key in res:
            return _fail(f"ERROR: (gcloud) ALREADY_EXISTS: {key} already exists", 1)
        res[key] = "RUNNING" if kind in ("cluster", "nodepool") else "ok"
        _save(st)
        return 0
    if verb == "get-credentials":
        res[f"context:gke_{_flag(args, 'project')}_{_flag(args, 'location')}_{names[0]}"] = "ok"
        _save(st)
        return 0
    return _fail(f"cloud_double: unsupported gcloud verb {verb}", 2)


def kubectl(args: list[str]) -> int:
    st = _load()
    res = st["res"]
    words = _positional(args)
    ctx = _flag(args, "context")
    if words[:2] == ["config", "get-contexts"]:
        print("\n".join(k.split(":", 1)[1] for k in res if k.startswith("context:")))
        return 0
    if words[:2] == ["config", "delete-context"]:
        res.pop(f"context:{words[2]}", None)
        _save(st)
        return 0
    if ctx is not None and f"context:{ctx}" not in res:
        return _fail(f'error: context "{ctx}" does not exist', 1)
    verb = words[0]
    if words[:3] == ["create", "secret", "generic"] and "--dry-run=client" in args:  # render only, as kubectl does
        key = _flag(args, "from-file").split("=", 1)[0]
        value = base64.b64encode(sys.stdin.read().encode()).decode()
        print(f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: {words[3]}\ndata:\n  {key}: {value}")
        return 0
    if verb == "get":
        out = []
        for ref in words[1:]:
            kind, name = ref.split("/", 1)
            key = f"{kind.split('.')[0]}:{name}"
            if key in res:
                jsonpath = next((a.split("=", 1)[1] for a in args if a.startswith("jsonpath=")), None)
                out.append(res[key] if jsonpath else f"{kind.split('.')[0][:-1]}/{name}")
            elif "--ignore-not-found" not in args:
                return _fail(f'Error from server (NotFound): {ref} not found', 1)
        print("\n".join(out))
        return 0
    if verb == "delete":
        for ref in words[1:]:
            kind, name = ref.split("/", 1)
            res.pop(f"{kind.split('.')[0]}:{name}", None)
        _save(st)
        return 0
    if verb == "apply":
        body = sys.stdin.read()
        for doc in body.split("---"):
            if "kind: Secret" in doc:
                lines = doc.splitlines()
                name = next(ln.split(": ", 1)[1] for ln in lines if ln.startswith("  name: "))
                data = next((lines[i + 1].split(": ", 1)[1] for i, ln in enumerate(lines) if ln == "data:"), "")
                res[f"secrets:{name}"] = base64.b64decode(data).decode() if data else "placeholder"
        _save(st)
        return 0
    return _fail(f"cloud_double: unsupported kubectl {' '.join(args)}", 2)


def install(bin_dir: Path, state: dict) -> dict[str, str]:
    """Write ``gcloud``/``kubectl`` shims into ``bin_dir`` and the initial ``state``; returns the env to use."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    me = Path(__file__).resolve()
    for tool in ("gcloud", "kubectl"):
        shim = bin_dir / tool
        shim.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{bin_dir}/log"\nexec "{sys.executable}" -S -I "{me}" {tool} "$@"\n')
        shim.chmod(0o755)
    state_file = bin_dir / "state.json"
    state_file.write_text(json.dumps({"res": dict(state), "fail": []}))
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "CLOUD_DOUBLE_STATE": str(state_file)}


if __name__ == "__main__":
    tool, *rest = sys.argv[1:]
    sys.exit(gcloud(rest) if tool == "gcloud" else kubectl(rest))
