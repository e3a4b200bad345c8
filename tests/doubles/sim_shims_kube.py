"""TEST DOUBLES of ``kubectl`` and ``helm`` (and gcloud's bucket commands) for the simulated GKE; see sim_shims.py.

``kubectl`` talks to the Kubernetes API double named by the ``$KUBECONFIG`` context (``--context`` or the current
one) over its REST API: ``apply -f -`` (create, or JSON-merge-patch what exists), ``get REF... -o name`` and
``get RESOURCE -l SELECTOR -o name``, ``delete REF... [--ignore-not-found]``, ``create secret generic NAME
--from-file=KEY=/dev/stdin --dry-run=client -o yaml`` (rendered locally), ``config get-contexts/delete-context/
current-context``. A ``gke_<project>_<location>_<cluster>`` context answers only while the simulated gcloud has that
cluster (after ``clusters delete`` the server is unreachable, as on GKE). ``helm`` keeps releases in the state file:
``upgrade --install``, ``status -o json``, ``uninstall``.
"""

from __future__ import annotations

import json
from typing import Any

from sim_shims import Call, _iam, kubeconfig_path, load_kubeconfig, save_kubeconfig, yaml_module

# resource (plural.group, as kubectl takes it) -> (API prefix, kind, name kubectl prints with -o name, namespaced)
RESOURCES: dict[str, tuple[str, str, str, bool]] = {
    "serviceaccounts": ("/api/v1", "ServiceAccount", "serviceaccount", True),
    "secrets": ("/api/v1", "Secret", "secret", True),
    "persistentvolumes": ("/api/v1", "PersistentVolume", "persistentvolume", False),
    "persistentvolumeclaims": ("/api/v1", "PersistentVolumeClaim", "persistentvolumeclaim", True),
    "pods": ("/api/v1", "Pod", "pod", True),
    "services": ("/api/v1", "Service", "service", True),
    "namespaces": ("/api/v1", "Namespace", "namespace", False),
    "daemonsets.apps": ("/apis/apps/v1", "DaemonSet", "daemonset.apps", True),
    "gkenetworkparamsets.networking.gke.io": ("/apis/networking.gke.io/v1", "GKENetworkParamSet",
                                              "gkenetworkparamset.networking.gke.io", False),
    "networks.networking.gke.io": ("/apis/networking.gke.io/v1", "Network", "network.networking.gke.io", False),
    "rayclusters.ray.io": ("/apis/ray.io/v1", "RayCluster", "raycluster.ray.io", True),
    "csidrivers.storage.k8s.io": ("/apis/storage.k8s.io/v1", "CSIDriver", "csidriver.storage.k8s.io", False),
}
_ALIASES = {r.split(".")[0]: r for r in RESOURCES} | {v[2].split(".")[0]: r for r, v in RESOURCES.items()}
_VALUED = {"-n", "-o", "-l", "-f", "--namespace", "--output", "--selector", "--filename", "--context", "--kube-context",
           "--set", "--repo", "--version", "--kubeconfig", "--field-manager"}


def _split(argv: list[str]) -> tuple[list[str], dict[str, Any]]:
    """kubectl/helm argv -> (positionals, flags); ``-n x``, ``--namespace=x`` and ``--namespace x`` all work."""
    pos: list[str] = []
    flags: dict[str, Any] = {}
    it = iter(argv)
    for tok in it:
        if tok.startswith("-"):
            name, eq, value = tok.partition("=")
            key = {"-n": "namespace", "-o": "output", "-l": "selector", "-f": "filename"}.get(name, name.lstrip("-"))
            if eq:
                flags[key] = value
            elif name in _VALUED:
                flags[key] = next(it, "")
            else:
                flags[key] = True
        else:
            pos.append(tok)
    return pos, flags


def _http(method: str, url: str, body: Any = None, *, token: str | None = None,
          content_type: str = "application/json") -> tuple[int, Any]:
    import http.client
    import urllib.parse

    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers["Content-Type"] = content_type
    conn.request(method, u.path + (f"?{u.query}" if u.query else ""), body=data, headers=headers)
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    try:
        return resp.status, json.loads(raw) if raw else None
    except ValueError:
        return resp.status, raw.decode(errors="replace")


# -- kubectl ------------------------------------------------------------------------------------------------


def _server(call: Call, context: str | None) -> tuple[str, str] | int:
    """(server URL, token) of the context, or the exit code after printing kubectl's error."""
    cfg = load_kubeconfig(kubeconfig_path())
    name = context or cfg.get("current-context")
    ctx = next((c["context"] for c in cfg.get("contexts") or [] if c.get("name") == name), None)
    if ctx is None:
        return call.fail(f'error: context "{name}" does not exist' if name else "error: no context is set in $KUBECONFIG")
    if name.startswith("gke_") and name.count("_") >= 3:
        _, project, loc, cluster = name.split("_", 3)
        if f"projects/{project}/locations/{loc}/clusters/{cluster}" not in call.state.get("gcloud", {}).get("clusters", {}):
            return call.fail(f"Unable to connect to the server: dial tcp: lookup {cluster}.{loc}.gke.internal: no such host "
                             f"(the simulated GKE cluster {cluster} does not exist)")
    cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
    user = next((u["user"] for u in cfg.get("users") or [] if u["name"] == ctx.get("user")), {})
    return cluster["server"], user.get("token", "")


def _resource(ref: str) -> str | None:
    return ref if ref in RESOURCES else _ALIASES.get(ref)


def _collection(resource: str, namespace: str) -> str:
    prefix, _, _, namespaced = RESOURCES[resource]
    plural = resource.split(".")[0]
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespaced else f"{prefix}/{plural}"


def _for_object(obj: dict) -> str | None:
    group = obj.get("apiVersion", "").rpartition("/")[0]
    return next((r for r, v in RESOURCES.items() if v[1] == obj.get("kind") and (r.partition(".")[2] == group)), None)


# A published manifest the plan applies by URL is served from tests/assets (the simulated GKE has no network): only
# the GoogleCloudPlatform/container-engine-accelerators files copied there, at any ref.
_PUBLISHED = "https://raw.githubusercontent.com/GoogleCloudPlatform/container-engine-accelerators/"


def _manifest_text(call: Call, filename: str) -> str | None:
    """The YAML to apply or delete: stdin for ``-f -``, a copied published manifest for its URL, else None."""
    if filename == "-":
        return call.stdin or ""
    if filename.startswith(_PUBLISHED):
        from pathlib import Path

        rel = filename[len(_PUBLISHED):].split("/", 1)[-1]  # drop the ref
        local = Path(__file__).resolve().parents[1] / "assets" / "container-engine-accelerators" / rel
        if local.is_file():
            return local.read_text()
    return None


def _jsonpath(obj: dict, expr: str) -> str:
    """kubectl's ``jsonpath={.a.b.c}`` for plain dotted paths (annotation keys may hold '/' but no '.' after it)."""
    path = expr.removeprefix("jsonpath=").strip("{}").lstrip(".")
    parts = path.split(".")
    if parts[:2] == ["metadata", "annotations"] and len(parts) > 3:
        parts = parts[:2] + [".".join(parts[2:])]
    cur: Any = obj
    for part in parts:
        cur = cur.get(part) if isinstance(cur, dict) else None
    return "" if cur is None else (cur if isinstance(cur, str) else json.dumps(cur))


def kubectl(call: Call) -> int:
    pos, flags = _split(call.argv)
    if pos[:1] == ["config"]:
        return _config(call, pos[1:], flags)
    target = _server(call, flags.get("context"))
    if isinstance(target, int):
        return target
    server, token = target
    ns = flags.get("namespace") or "default"
    verb = pos[0] if pos else ""
    if pos[:3] == ["create", "secret", "generic"] and len(pos) > 3 and flags.get("dry-run") == "client":
        return _render_secret(call, pos[3], flags, ns)
    if verb == "delete" and flags.get("filename"):
        text = _manifest_text(call, flags["filename"])
        if text is None:
            return call.fail(f"error: unable to read URL \"{flags['filename']}\": the simulated GKE has no network access")
        for obj in (d for d in yaml_module().safe_load_all(text) if d):
            res = _for_object(obj)
            if res is not None:
                _http("DELETE", server + _collection(res, obj["metadata"].get("namespace") or ns) + f"/{obj['metadata']['name']}",
                      token=token)
        return 0
    if verb == "annotate":
        kind, _, name = (pos[1] if len(pos) > 1 else "").partition("/")
        res = _resource(kind)
        if res is None:
            return call.fail(f'error: the server doesn\'t have a resource type "{kind}"')
        notes = dict(a.split("=", 1) for a in pos[2:] if "=" in a)
        status, body = _http("PATCH", f"{server}{_collection(res, ns)}/{name}", {"metadata": {"annotations": notes}},
                             token=token, content_type="application/merge-patch+json")
        if status >= 400:
            return call.fail(f"Error from server ({body.get('reason')}): {body.get('message')}")
        call.print(f"{RESOURCES[res][2]}/{name} annotated")
        return 0
    if verb == "apply":
        text = _manifest_text(call, flags.get("filename") or "")
        if text is None:
            return call.fail(f"error: unable to read URL \"{flags.get('filename')}\": the simulated GKE has no network access")
        rc = 0
        for obj in (d for d in yaml_module().safe_load_all(text) if d):
            res = _for_object(obj)
            if res is None:
                rc = call.fail(f'error: resource mapping not found for kind "{obj.get("kind")}" (simulated kubectl)')
                continue
            name = obj["metadata"]["name"]
            coll = server + _collection(res, obj["metadata"].get("namespace") or ns)
            said = "serverside-applied"
            if flags.get("server-side"):  # one apply PATCH per object creates or updates it; the double keeps the
                # field ownership (kubectl's default manager is "kubectl"; --force-conflicts takes others' fields)
                force = "&force=true" if flags.get("force-conflicts") else ""
                status, body = _http("PATCH", f"{coll}/{name}?fieldManager={flags.get('field-manager') or 'kubectl'}"
                                              f"{force}", obj, token=token, content_type="application/apply-patch+yaml")
            else:  # client-side apply: kubectl reads the object, then creates or patches it as manager
                # "kubectl-client-side-apply" (a merge patch here, where kubectl computes a three-way one)
                status, _ = _http("GET", f"{coll}/{name}", token=token)
                query = "?fieldManager=kubectl-client-side-apply"
                if status == 404:
                    status, body = _http("POST", coll + query, obj, token=token)
                    said = "created"
                else:
                    said = "configured"
                    status, body = _http("PATCH", f"{coll}/{name}{query}", obj, token=token,
                                         content_type="application/merge-patch+json")
            if status >= 400:
                rc = call.fail(f"Error from server ({body.get('reason')}): {body.get('message')}")
            else:
                call.print(f"{RESOURCES[res][2]}/{name} {said}")
        return rc
    if verb in ("get", "delete"):
        refs = pos[1:]
        if verb == "get" and len(refs) == 1 and "/" not in refs[0]:
            return _list(call, server, token, refs[0], ns, flags)
        rc = 0
        for ref in refs:
            kind, _, name = ref.partition("/")
            res = _resource(kind)
            if res is None:
                rc = call.fail(f'error: the server doesn\'t have a resource type "{kind}"')
                continue
            url = f"{server}{_collection(res, ns)}/{name}"
            status, body = _http("GET" if verb == "get" else "DELETE", url, token=token)
            if status == 404:
                if not (verb == "delete" and flags.get("ignore-not-found")):
                    rc = call.fail(f'Error from server (NotFound): {res.split(".")[0]} "{name}" not found')
            elif status >= 400:
                rc = call.fail(f"Error from server ({body.get('reason')}): {body.get('message')}")
            elif verb == "get" and str(flags.get("output", "")).startswith("jsonpath="):
                call.print(_jsonpath(body, flags["output"]))
            else:
                call.print(f"{RESOURCES[res][2]}/{name}" if verb == "get" else f'{RESOURCES[res][2]} "{name}" deleted')
        return rc
    return call.fail(f"error: the simulated kubectl does not implement `kubectl {' '.join(pos[:2])}`", 2)


def _render_secret(call: Call, name: str, flags: dict, ns: str) -> int:
    """``create secret generic NAME --from-file=KEY=/dev/stdin --dry-run=client -o yaml``: kubectl renders the Secret
    locally (nothing is sent to the server) with the file's bytes base64-encoded under KEY."""
    import base64

    key, _, source = str(flags.get("from-file") or "").partition("=")
    if source != "/dev/stdin":
        return call.fail(f"error: the simulated kubectl reads --from-file only from /dev/stdin, not {source!r}", 2)
    obj = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns},
           "data": {key: base64.b64encode((call.stdin or "").encode()).decode()}}
    if flags.get("output") != "yaml":
        call.print(f"secret/{name} created (dry run)")
        return 0
    call.print(yaml_module().safe_dump(obj, sort_keys=False).rstrip("\n"))
    return 0


def _list(call: Call, server: str, token: str, kind: str, ns: str, flags: dict) -> int:
    res = _resource(kind)
    if res is None:
        return call.fail(f'error: the server doesn\'t have a resource type "{kind}"')
    import urllib.parse

    query = f"?labelSelector={urllib.parse.quote(flags['selector'])}" if flags.get("selector") else ""
    status, body = _http("GET", f"{server}{_collection(res, ns)}{query}", token=token)
    if status >= 400:
        return call.fail(f"Error from server ({body.get('reason')}): {body.get('message')}")
    items = body.get("items") or []
    for item in items:
        call.print(f"{RESOURCES[res][2]}/{item['metadata']['name']}")
    if not items:
        call.err.append(f"No resources found in {ns} namespace." if RESOURCES[res][3] else "No resources found")
    return 0


def _config(call: Call, pos: list[str], flags: dict) -> int:
    path = kubeconfig_path()
    cfg = load_kubeconfig(path)
    names = [c["name"] for c in cfg.get("contexts") or []]
    verb, args = (pos[0] if pos else ""), pos[1:]
    if verb == "get-contexts":
        wanted = [n for n in names if not args or n in args]
        missing = [a for a in args if a not in names]
        if missing:
            return call.fail(f"error: context {missing[0]} not found")
        if flags.get("output") == "name":
            call.out += wanted
        else:
            call.print("CURRENT   NAME   CLUSTER   AUTHINFO   NAMESPACE")
            call.out += [f"{'*' if n == cfg.get('current-context') else ' '}         {n}   {n}   {n}" for n in wanted]
        return 0
    if verb == "current-context":
        if not cfg.get("current-context"):
            return call.fail("error: current-context is not set")
        call.print(cfg["current-context"])
        return 0
    if verb == "delete-context" and args:
        if args[0] not in names:
            return call.fail(f"error: cannot delete context {args[0]}, not in {path}")
        cfg["contexts"] = [c for c in cfg["contexts"] if c["name"] != args[0]]
        if cfg.get("current-context") == args[0]:
            cfg["current-context"] = ""
        save_kubeconfig(path, cfg)
        call.print(f"deleted context {args[0]} from {path}")
        return 0
    return call.fail(f"error: the simulated kubectl does not implement `kubectl config {verb}`", 2)


# -- helm ---------------------------------------------------------------------------------------------------


def helm(call: Call) -> int:
    pos, flags = _split(call.argv)
    context = flags.get("kube-context")
    target = _server(call, context)
    if isinstance(target, int):
        call.err.append("Error: Kubernetes cluster unreachable")
        return target
    ns = flags.get("namespace") or "default"
    releases = call.state.setdefault("helm", {})
    verb, name = (pos[0] if pos else ""), (pos[1] if len(pos) > 1 else "")
    key = f"{context}/{ns}/{name}"
    if verb == "upgrade" and flags.get("install") and len(pos) > 2:
        old = releases.get(key)
        rel = {"name": name, "namespace": ns, "version": (old or {}).get("version", 0) + 1,
               "info": {"status": "deployed", "description": "Install complete" if old is None else "Upgrade complete"},
               "chart": {"metadata": {"name": pos[2], "version": flags.get("version")}}, "config": {"set": flags.get("set")}}
        releases[key] = rel
        if old is None:
            call.print(f'Release "{name}" does not exist. Installing it now.')
        else:
            call.print(f'Release "{name}" has been upgraded. Happy Helming!')
        call.print(f"NAME: {name}\nNAMESPACE: {ns}\nSTATUS: deployed\nREVISION: {rel['version']}")
        return 0
    if verb in ("status", "uninstall") and name:
        if key not in releases:
            return call.fail("Error: release: not found" if verb == "status" else
                             f"Error: uninstall: Release not loaded: {name}: release: not found")
        if verb == "status":
            if flags.get("output") == "json":
                call.print(json.dumps(releases[key], separators=(",", ":")))  # helm prints compact JSON
            else:
                call.print(f"NAME: {name}\nNAMESPACE: {ns}\nSTATUS: {releases[key]['info']['status']}")
            return 0
        del releases[key]
        call.print(f'release "{name}" uninstalled')
        return 0
    return call.fail(f"Error: the simulated helm does not implement `helm {' '.join(pos[:2])}`", 2)


# -- gcloud storage buckets (on the GCS emulator) ------------------------------------------------------------


def wipe_cluster(call: Call) -> None:
    """The cluster's objects go with it: the Kubernetes API double's one control route outside the Kubernetes API."""
    _http("POST", call.conf["kube_server"] + "/_double/wipe", {}, token=call.conf["kube_token"])  # kube_double.WIPE_PATH


def bucket_names(call: Call) -> list[str]:
    """The emulator's buckets (``gcloud storage buckets list``)."""
    status, body = _http("GET", f"{call.conf['gcs']}/storage/v1/b")
    return [b["name"] for b in (body or {}).get("items") or []] if status == 200 else []


def objects(call: Call, verb: str, url: str, where: str) -> int:
    """``gcloud storage cat gs://B/OBJECT``; ``gcloud storage rm [--recursive] gs://B/PREFIX`` on the GCS emulator. As
    gcloud's ``storage rm --help`` says of --recursive: "If the path is set to a bucket, like gs://bucket, the bucket
    is also deleted" (its IAM bindings with it)."""
    import urllib.parse

    gcs = call.conf["gcs"]
    bucket, _, prefix = url.removeprefix("gs://").partition("/")
    if verb == "cat":
        status, body = _http("GET", f"{gcs}/storage/v1/b/{bucket}/o/{urllib.parse.quote(prefix, safe='')}?alt=media")
        if status != 200:
            return call.fail(f"ERROR: ({where}) The following URLs matched no objects or files:\n-{url}")
        call.print(body if isinstance(body, str) else json.dumps(body))
        return 0
    if (not prefix or prefix.endswith("/")) and not call.flag("recursive"):
        return call.fail(f"ERROR: ({where}) {url} matched a bucket or folder: pass --recursive to remove it")
    status, listing = _http("GET", f"{gcs}/storage/v1/b/{bucket}/o?prefix={urllib.parse.quote(prefix)}")
    if status != 200:
        return call.fail(f"ERROR: ({where}) gs://{bucket} not found: 404.")
    names = [o["name"] for o in (listing or {}).get("items") or []]
    if not names and prefix:
        return call.fail(f"ERROR: ({where}) The following URLs matched no objects or files:\n-{url}")
    for n in names:
        _http("DELETE", f"{gcs}/storage/v1/b/{bucket}/o/{urllib.parse.quote(n, safe='')}")
        call.err.append(f"Removing gs://{bucket}/{n}...")
    if not prefix:
        _http("DELETE", f"{gcs}/storage/v1/b/{bucket}")
        call.state.get("gcloud", {}).get("bucket_iam", {}).pop(f"gs://{bucket}", None)
        call.err.append(f"Removing gs://{bucket}/...")
    return 0


def _listing(gcs: str, bucket: str, prefix: str) -> dict[str, dict] | None:
    """Every object under ``prefix`` (name -> resource), page by page; None when the bucket does not exist."""
    import urllib.parse

    out: dict[str, dict] = {}
    token = ""
    while True:
        page = f"&pageToken={urllib.parse.quote(token)}" if token else ""
        status, body = _http("GET", f"{gcs}/storage/v1/b/{bucket}/o?prefix={urllib.parse.quote(prefix)}{page}")
        if status != 200:
            return None
        out.update({o["name"]: o for o in (body or {}).get("items") or []})
        token = (body or {}).get("nextPageToken") or ""
        if not token:
            return out


def rsync(call: Call, src: str, dest: str, where: str) -> int:
    """``gcloud storage rsync [--recursive] [--delete-unmatched-destination-objects] DIR gs://B/PREFIX``: a local
    directory to a bucket prefix (the provisioning plan's verl-source step). As gcloud's ``storage rsync --help``
    describes it: a file is copied when the object is missing or differs (here by MD5), only the directory's own files
    without ``--recursive``, and ``--delete-unmatched-destination-objects`` deletes the objects under the prefix that
    no source file matches. Bucket-to-local and bucket-to-bucket syncs are not simulated (exit 2)."""
    import base64
    import hashlib
    import urllib.parse
    from pathlib import Path

    if src.startswith("gs://") or not dest.startswith("gs://"):
        return call.fail(f"ERROR: ({where}) the simulated gcloud syncs only a local directory to gs://", 2)
    root = Path(src)
    if not root.is_dir():
        return call.fail(f"ERROR: ({where}) The following URLs matched no objects or files:\n-{src}")
    gcs = call.conf["gcs"]
    bucket, _, prefix = dest.removeprefix("gs://").partition("/")
    prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
    have = _listing(gcs, bucket, prefix)
    if have is None:
        return call.fail(f"ERROR: ({where}) gs://{bucket} not found: 404.")
    walk = root.rglob("*") if call.flag("recursive") else root.glob("*")
    files = {p.relative_to(root).as_posix(): p for p in walk if p.is_file()}
    for rel, p in sorted(files.items()):
        data = p.read_bytes()
        name = prefix + rel
        if have.get(name, {}).get("md5Hash") == base64.b64encode(hashlib.md5(data).digest()).decode():
            continue
        status, body = _http("POST", f"{gcs}/upload/storage/v1/b/{bucket}/o?uploadType=media&name="
                                     f"{urllib.parse.quote(name, safe='')}", data, content_type="application/octet-stream")
        if status >= 300:
            return call.fail(f"ERROR: ({where}) HTTPError {status}: {body}")
        call.err.append(f"Copying file://{p} to gs://{bucket}/{name}")
    if call.flag("delete-unmatched-destination-objects"):
        for name in sorted(set(have) - {prefix + rel for rel in files}):
            _http("DELETE", f"{gcs}/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}")
            call.err.append(f"Removing gs://{bucket}/{name}")
    return 0


def bucket(call: Call, g: dict, project: str, verb: str, name: str, where: str) -> int:
    gcs = call.conf["gcs"]
    status, body = _http("GET", f"{gcs}/storage/v1/b/{name}")
    exists = status == 200
    if verb == "create":
        if exists:
            return call.fail(f"ERROR: ({where}) HTTPError 409: Your previous request to create the named bucket "
                             "succeeded and you already own it.")
        req = {"name": name, "location": (call.flag("location") or "US").upper(),
               "iamConfiguration": {"uniformBucketLevelAccess": {"enabled": bool(call.flag("uniform-bucket-level-access"))}},
               "hierarchicalNamespace": {"enabled": bool(call.flag("enable-hierarchical-namespace"))}}
        status, body = _http("POST", f"{gcs}/storage/v1/b?project={project}", req)
        if status >= 300:
            return call.fail(f"ERROR: ({where}) HTTPError {status}: {body}")
        call.err.append(f"Creating gs://{name}/...")
        return 0
    if verb in ("add-iam-policy-binding", "remove-iam-policy-binding", "get-iam-policy"):
        defaults = [{"members": [f"projectEditor:{project}", f"projectOwner:{project}"], "role": "roles/storage.legacyBucketOwner"},
                    {"members": [f"projectViewer:{project}"], "role": "roles/storage.legacyBucketReader"}]
        return _iam(call, g.setdefault("bucket_iam", {}), verb, f"gs://{name}", where, exists=exists, defaults=defaults)
    if not exists:
        return call.fail(f"ERROR: ({where}) gs://{name} not found: 404.")
    if verb == "describe":
        from sim_shims import _format

        _format(call, {"name": name, "storage_url": f"gs://{name}/", "location": body.get("location"),
                       "creation_time": body.get("timeCreated")})
        return 0
    if verb == "delete":
        status, listing = _http("GET", f"{gcs}/storage/v1/b/{name}/o?maxResults=1")
        if (listing or {}).get("items"):
            return call.fail(f"ERROR: ({where}) HTTPError 409: The bucket you tried to delete is not empty.")
        status, body = _http("DELETE", f"{gcs}/storage/v1/b/{name}")
        if status >= 300:
            return call.fail(f"ERROR: ({where}) HTTPError {status}: {body}")
        g.get("bucket_iam", {}).pop(f"gs://{name}", None)
        call.err.append(f"Removing gs://{name}/...")
        return 0
    return call.fail(f"ERROR: ({where}) the simulated gcloud does not implement `{verb}` here", 2)
