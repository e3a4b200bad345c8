"""A Kubernetes API **test double**: a small HTTP + websocket server on 127.0.0.1 that speaks the REST and
streaming protocols the official ``kubernetes`` Python client uses. It is NOT a kube-apiserver (none can be
installed here); it is what the gke tests talk to through the real client and a real kubeconfig.

What it implements (faithfully enough for nbtools' calls):
- CRUD on any ``/api/v1/...`` or ``/apis/<group>/<version>/...`` collection, namespaced or cluster-scoped:
  GET (object or list, ``labelSelector`` with ``k=v`` terms, ``fieldSelector=involvedObject.name=X``), POST
  (409 AlreadyExists), PATCH (JSON merge patch, RFC 7386), DELETE (404 when absent), ``dryRun=All`` (validated,
  not stored), bearer-token auth (401 otherwise); ``metadata.generation`` set to 1 on create and bumped when a
  write changes anything but metadata and status (what the API server does for resources with a status subresource).
- Discovery (``/version``, ``/apis``, ``/api/v1``, ``/apis/<group>/<version>``) of the kinds in ``resources``, which is
  what the client's dynamic API resolves a kind's path and scope from.
- Server-side apply (https://kubernetes.io/docs/reference/using-api/server-side-apply/, Kubernetes 1.22+ GA): PATCH with
  ``Content-Type: application/apply-patch+yaml`` creates the object when absent (201) or merges the applied
  configuration into it (200); ``fieldManager`` is required (422 ``fieldManager: Required value``, and ``force`` is
  refused on other patch types: apimachinery ``ValidatePatchOptions``); every write records field ownership in
  ``metadata.managedFields`` (``FieldsV1``, operation ``Apply`` for apply, ``Update`` for POST/PATCH, whose manager
  takes the fields it changed); an apply that changes a field another manager owns fails with 409 Conflict
  ("Apply failed with N conflict(s): conflict with "M": .spec.x", causes of type ``FieldManagerConflict``) unless
  ``force=true``, which takes the fields over; fields the manager applied before and now leaves out are removed
  unless another manager owns them; an apply that changes nothing is not written (same ``resourceVersion``).
  Simplifications: lists are atomic (the default for a CRD list without ``x-kubernetes-list-type``; built-in types'
  keyed lists such as ``containers`` are not merged by key), and ``status`` is never applied.
- Watches (https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes): a list GET
  with ``watch=true`` streams ``{"type": ADDED|MODIFIED|DELETED, "object": ...}`` lines for the objects matching its
  selectors; without ``resourceVersion`` (or with "0") it starts with a synthetic ADDED per existing object, with one
  it replays the changes after that version; ``timeoutSeconds`` ends the stream.
- Optional schema validation per (group, plural) with jsonschema (tests pass KubeRay's CRD openAPIV3Schema),
  answered like the API server: 422 Invalid.
- ``pods/<name>/exec`` over websocket, subprotocol ``v4.channel.k8s.io``: stdout on channel 1, stderr on 2,
  the status JSON on 3. Commands are recorded; ``exec_result`` chooses the answer, else ``exec_handler`` (when set,
  e.g. by the simulated GKE) runs them, else they succeed with no output.
- ``pods/<name>/portforward`` over websocket: the initial port frames on channels 0/1, then bytes bridged to a
  real TCP endpoint chosen with ``route_port``.
There is no controller: tests play the KubeRay operator by adding pods and events with ``add_pod``/``add_event``,
or run ``tests/doubles/sim_kuberay.py`` (a KubeRay controller stand-in), which waits on ``wait_change`` and writes with
``put``/``remove``.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as _dt
import itertools
import json
import threading
import uuid
from pathlib import Path
from typing import Any

import yaml
from aiohttp import WSMsgType, web

TOKEN = "test-double-token"
# (group, version, plural, kind, namespaced): what discovery serves by default (a GKE cluster with the Ray add-on's
# KubeRay CRDs and GKE's multi-network CRDs installed)
DEFAULT_RESOURCES: tuple[tuple[str, str, str, str, bool], ...] = (
    ("", "v1", "pods", "Pod", True), ("", "v1", "events", "Event", True), ("", "v1", "services", "Service", True),
    ("", "v1", "namespaces", "Namespace", False), ("", "v1", "serviceaccounts", "ServiceAccount", True),
    ("", "v1", "secrets", "Secret", True), ("", "v1", "persistentvolumes", "PersistentVolume", False),
    ("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True), ("apps", "v1", "daemonsets", "DaemonSet", True),
    ("storage.k8s.io", "v1", "csidrivers", "CSIDriver", False), ("ray.io", "v1", "rayclusters", "RayCluster", True),
    ("networking.gke.io", "v1", "networks", "Network", False),
    ("networking.gke.io", "v1", "gkenetworkparamsets", "GKENetworkParamSet", False),
)
APPLY = "application/apply-patch+yaml"
_SERVER_SET = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace"), ("metadata", "uid"),
               ("metadata", "resourceVersion"), ("metadata", "generation"), ("metadata", "creationTimestamp"),
               ("metadata", "managedFields")}
_MISSING = object()


def field_paths(obj: Any, prefix: tuple = ()) -> set[tuple]:
    """The leaf fields of an object as key paths (maps recursed, lists and scalars are leaves), without the
    identity and server-set fields and without ``status``: the field set a manager owns."""
    if isinstance(obj, dict) and obj:
        out: set[tuple] = set()
        for k, v in obj.items():
            p = (*prefix, k)
            if p in _SERVER_SET or p == ("status",):
                continue
            out |= field_paths(v, p)
        return out
    return {prefix} if prefix else set()


def _at(obj: Any, path: tuple) -> Any:
    for k in path:
        if not isinstance(obj, dict) or k not in obj:
            return _MISSING
        obj = obj[k]
    return obj


def _set(obj: dict, path: tuple, value: Any) -> None:
    for k in path[:-1]:
        if not isinstance(obj.get(k), dict):
            obj[k] = {}
        obj = obj[k]
    obj[path[-1]] = copy.deepcopy(value)


def _drop(obj: dict, path: tuple) -> None:
    """Remove a field and the maps it leaves empty."""
    chain = [obj]
    for k in path[:-1]:
        nxt = chain[-1].get(k)
        if not isinstance(nxt, dict):
            return
        chain.append(nxt)
    chain[-1].pop(path[-1], None)
    for depth in range(len(path) - 1, 0, -1):
        if chain[depth] == {}:
            chain[depth - 1].pop(path[depth - 1], None)


def fields_v1(paths: set[tuple]) -> dict:
    """Field paths in the API server's ``FieldsV1`` encoding (``{"f:spec": {"f:replicas": {}}}``)."""
    out: dict = {}
    for p in sorted(paths):
        cur = out
        for k in p:
            cur = cur.setdefault(f"f:{k}", {})
    return out


def _paths_of(fv1: dict, prefix: tuple = ()) -> set[tuple]:
    out: set[tuple] = set()
    for k, v in fv1.items():
        if not k.startswith("f:"):
            continue
        p = (*prefix, k[2:])
        out |= _paths_of(v, p) if v else {p}
    return out


def _related(a: tuple, b: tuple) -> bool:
    return a[: len(b)] == b or b[: len(a)] == a
WIPE_PATH = "/_double/wipe"  # POST: drop every object (what deleting a GKE cluster does to its API server's data)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class KubeDouble:
    """Start with ``with KubeDouble() as kd:``; ``kd.kubeconfig(path)`` writes a kubeconfig pointing at it."""

    def __init__(self, schemas: dict[tuple[str, str], dict] | None = None,
                 resources: tuple[tuple[str, str, str, str, bool], ...] = DEFAULT_RESOURCES):
        self.store: dict[str, dict[str, dict]] = {}  # collection path -> name -> object
        self.schemas = schemas or {}
        self.resources = resources
        self.events: list[tuple[int, str, str, dict]] = []  # (resourceVersion, ADDED|MODIFIED|DELETED, collection, object)
        self._watchers: set[asyncio.Event] = set()
        self._closing = False
        self.requests: list[tuple[str, str]] = []  # (method, path?query)
        self.execs: list[dict] = []
        self.exec_result: dict[str, tuple[str, str, int]] = {}  # pod -> (stdout, stderr, rc)
        self.exec_handler = None  # (namespace, pod, container, command) -> (stdout, stderr, rc), run off the loop
        self.routes: dict[tuple[str, str, int], tuple[str, int]] = {}
        self._rv = itertools.count(1)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified on every write (the stand-in controller's "watch")
        self.generation = 0  # how many writes the store has seen
        self.port = 0

    # -- lifecycle ------------------------------------------------------------------------------------------
    def __enter__(self) -> KubeDouble:
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self._closing = True
        with self._lock:
            self._bump()  # open watches end now
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
        fut.result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        ready.set()
        self._loop.run_forever()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig(self, path: str | Path, context: str = "test-double") -> Path:
        cfg = {
            "apiVersion": "v1", "kind": "Config", "current-context": context,
            "clusters": [{"name": "double", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": TOKEN}}],
            "contexts": [{"name": context, "context": {"cluster": "double", "user": "tester"}}],
        }
        p = Path(path)
        p.write_text(yaml.safe_dump(cfg))
        return p

    # -- test-side helpers (the "operator") -----------------------------------------------------------------
    def objects(self, collection: str) -> dict[str, dict]:
        with self._lock:
            return copy.deepcopy(self.store.get(collection, {}))

    def put(self, collection: str, obj: dict) -> dict:
        with self._lock:
            return self._store(collection, copy.deepcopy(obj))

    def add_pod(self, namespace: str, name: str, labels: dict[str, str], *, phase: str = "Pending", ready: bool = False,
                conditions: list[dict] | None = None, waiting: str | None = None) -> dict:
        conds = list(conditions or [])
        conds.append({"type": "Ready", "status": "True" if ready else "False"})
        container = {"name": "c", "ready": ready, "restartCount": 0, "image": "x", "imageID": "",
                     "state": {"waiting": {"reason": waiting, "message": f"{waiting} for image"}} if waiting else {"running": {}}}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": namespace, "labels": labels},
               "spec": {"containers": [{"name": "c", "image": "x"}], "nodeName": "node-1" if phase == "Running" else None},
               "status": {"phase": phase, "conditions": conds, "containerStatuses": [container],
                          "podIP": "10.0.0.1" if phase == "Running" else None}}
        return self.put(f"/api/v1/namespaces/{namespace}/pods", pod)

    def add_event(self, namespace: str, pod: str, reason: str, message: str, type_: str = "Warning", *,
                  kind: str = "Pod", component: str | None = None) -> None:
        n = next(self._rv)
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{pod}.{n}", "namespace": namespace},
            "involvedObject": {"kind": kind, "name": pod, "namespace": namespace},
            "reason": reason, "message": message, "type": type_,
            "lastTimestamp": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),  # like the kubelet's
        }
        if component:
            event["source"] = {"component": component}
        self.put(f"/api/v1/namespaces/{namespace}/events", event)

    def remove(self, collection: str, name: str) -> dict | None:
        """Delete an object as the API server would (None when absent); wakes ``wait_change`` callers."""
        with self._lock:
            obj = self.store.get(collection, {}).pop(name, None)
            if obj is not None:
                self._deleted(collection, obj)
            return obj

    def collections(self, plural: str) -> list[str]:
        """Every stored collection path of a resource, e.g. all namespaces' ``rayclusters``."""
        with self._lock:
            return [c for c in self.store if c.rsplit("/", 1)[-1] == plural]

    def wait_change(self, since: int, timeout: float) -> int:
        """Block until the store has changed after generation ``since`` (or ``timeout``); returns the generation."""
        with self._changed:
            self._changed.wait_for(lambda: self.generation != since, timeout=timeout)
            return self.generation

    def _bump(self) -> None:  # caller holds self._lock
        self.generation += 1
        self._changed.notify_all()
        loop = getattr(self, "_loop", None)
        if self._watchers and loop is not None and not loop.is_closed():
            for ev in list(self._watchers):
                loop.call_soon_threadsafe(ev.set)

    def _deleted(self, collection: str, obj: dict) -> None:  # caller holds self._lock
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = rv = str(next(self._rv))
        self.events.append((int(rv), "DELETED", collection, gone))
        self._bump()

    def route_port(self, namespace: str, pod: str, port: int, target: tuple[str, int]) -> None:
        self.routes[(namespace, pod, port)] = target

    # -- HTTP -----------------------------------------------------------------------------------------------
    def _store(self, collection: str, obj: dict) -> dict:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        meta["resourceVersion"] = str(next(self._rv))
        items = self.store.setdefault(collection, {})
        kind = "MODIFIED" if meta["name"] in items else "ADDED"
        items[meta["name"]] = obj
        self.events.append((int(meta["resourceVersion"]), kind, collection, copy.deepcopy(obj)))
        self._bump()
        return obj

    # -- field management (server-side apply) ---------------------------------------------------------------
    @staticmethod
    def _owners(obj: dict | None) -> list[dict]:
        return [dict(e) for e in ((obj or {}).get("metadata", {}).get("managedFields") or [])]

    @staticmethod
    def _set_owners(obj: dict, entries: list[dict], api_version: str) -> None:
        now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        out = []
        for e in entries:
            if e["paths"]:
                out.append({"manager": e["manager"], "operation": e["operation"], "apiVersion": api_version,
                            "time": e.get("time") or now, "fieldsType": "FieldsV1", "fieldsV1": fields_v1(e["paths"])})
        obj["metadata"]["managedFields"] = out

    def _entries(self, obj: dict | None) -> list[dict]:
        return [{"manager": e["manager"], "operation": e["operation"], "time": e.get("time"),
                 "paths": _paths_of(e.get("fieldsV1") or {})} for e in self._owners(obj)]

    def _update_owners(self, old: dict | None, new: dict, manager: str) -> None:
        """A POST/PUT/non-apply PATCH: the manager takes every field it changed (operations other than apply never
        conflict); fields it removed leave every manager."""
        after = field_paths(new)
        changed = {p for p in after if _at(old or {}, p) != _at(new, p)}
        entries = self._entries(old)
        for e in entries:
            e["paths"] = {p for p in e["paths"] if p in after and not any(_related(p, c) for c in changed)}
        mine = next((e for e in entries if (e["manager"], e["operation"]) == (manager, "Update")), None)
        if mine is None:
            mine = {"manager": manager, "operation": "Update", "paths": set()}
            entries.append(mine)
        mine["paths"] |= changed
        mine["time"] = None
        self._set_owners(new, entries, new.get("apiVersion", ""))

    def _apply(self, live: dict | None, applied: dict, manager: str, force: bool) -> tuple[dict | None, dict | None]:
        """Server-side apply of ``applied`` by ``manager`` onto ``live``: (the new object, None) or (None, the
        409 conflict's causes)."""
        mine_now = field_paths(applied)
        entries = self._entries(live)
        me = next((e for e in entries if (e["manager"], e["operation"]) == (manager, "Apply")), None)
        mine_before = me["paths"] if me else set()
        changing = {p for p in mine_now if live is not None and _at(live, p) is not _MISSING and _at(live, p) != _at(applied, p)}
        conflicts = sorted({(e["manager"], q) for e in entries if e is not me for q in e["paths"]
                            for p in changing if _related(p, q)})
        if conflicts and not force:
            return None, {"conflicts": conflicts}
        new = copy.deepcopy(live) if live is not None else {"apiVersion": applied["apiVersion"], "kind": applied["kind"],
                                                              "metadata": {}}
        others = set().union(*(e["paths"] for e in entries if e is not me)) if entries else set()
        for p in sorted(mine_before - mine_now, key=len, reverse=True):
            if p not in others:
                _drop(new, p)
        for p in sorted(mine_now):
            _set(new, p, _at(applied, p))
        for k in ("name", "namespace"):
            if k in applied.get("metadata", {}):
                new["metadata"][k] = applied["metadata"][k]
        for e in entries:
            if e is not me and force:
                e["paths"] = {q for q in e["paths"] if not any(_related(p, q) for p in changing)}
        if me is None:
            me = {"manager": manager, "operation": "Apply", "paths": set()}
            entries.append(me)
        me["paths"], me["time"] = mine_now, (me.get("time") if mine_now == mine_before else None)
        self._set_owners(new, entries, applied["apiVersion"])
        return new, None

    @staticmethod
    def _next_generation(old: dict | None, new: dict) -> None:
        """metadata.generation: 1 on create, +1 when anything but metadata and status changed."""
        if old is None:
            new["metadata"]["generation"] = 1
            return
        body = lambda o: {k: v for k, v in o.items() if k not in ("metadata", "status")}  # noqa: E731
        gen = int(old["metadata"].get("generation") or 1)
        new["metadata"]["generation"] = gen + 1 if body(old) != body(new) else gen

    @staticmethod
    def _split(path: str) -> tuple[str, str, str | None, str | None]:
        """-> (collection path, plural, name, subresource)."""
        parts = path.strip("/").split("/")
        head = parts[:2] if parts[0] == "api" else parts[:3]
        rest = parts[len(head):]
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            head, rest = head + rest[:2], rest[2:]
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        return "/" + "/".join(head + [plural]), plural, name, sub

    def _status(self, code: int, reason: str, message: str) -> web.Response:
        body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code}
        return web.json_response(body, status=code)

    def _validate(self, group: str, plural: str, obj: dict) -> str | None:
        schema = self.schemas.get((group, plural))
        if not schema:
            return None
        import jsonschema

        errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(obj), key=lambda e: list(e.path))
        if errors:
            e = errors[0]
            return f"{'.'.join(str(p) for p in e.path)}: {e.message}"
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path_qs))
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._status(401, "Unauthorized", "missing or wrong bearer token")
        if request.path == WIPE_PATH and request.method == "POST":  # not a Kubernetes API: the simulated cluster delete
            with self._lock:
                for coll, items in list(self.store.items()):
                    for obj in items.values():
                        self._deleted(coll, obj)
                self.store.clear()
            return web.json_response({})
        discovery = self._discovery(request.path)
        if discovery is not None:
            return web.json_response(discovery)
        collection, plural, name, sub = self._split(request.path)
        group = "" if request.path.startswith("/api/") else request.path.split("/")[2]
        if request.method == "GET" and name is None and request.query.get("watch", "").lower() in ("true", "1"):
            return await self._watch(request, collection)
        if sub == "exec":
            return await self._exec(request, collection, name)
        if sub == "portforward":
            return await self._portforward(request, collection, name)
        dry = request.query.get("dryRun") == "All"
        with self._lock:
            items = self.store.setdefault(collection, {})
            if request.method == "GET":
                if name is None:
                    return web.json_response({"kind": "List", "apiVersion": "v1", "metadata": {},
                                              "items": [copy.deepcopy(o) for o in items.values() if self._match(o, request.query)]})
                if name not in items:
                    return self._status(404, "NotFound", f'{plural} "{name}" not found')
                return web.json_response(items[name])
            if request.method == "DELETE":
                if name not in items:
                    return self._status(404, "NotFound", f'{plural} "{name}" not found')
                gone = items.pop(name)
                self._deleted(collection, gone)
                return web.json_response(gone)
        apply = request.method == "PATCH" and request.content_type == APPLY
        manager = request.query.get("fieldManager", "")
        force = request.query.get("force", "").lower() in ("true", "1")
        if apply and not manager:
            return self._status(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                                                "is required for apply patch")
        if "force" in request.query and not apply:
            return self._status(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be '
                                                "specified for non-apply patch")
        body = yaml.safe_load(await request.text()) if apply else await request.json()  # JSON is YAML
        manager = manager or request.headers.get("User-Agent", "unknown").split("/")[0]  # the server's default
        url_ns = collection.split("/")[-2] if "/namespaces/" in collection else None
        body_ns = (body.get("metadata") or {}).get("namespace") if isinstance(body, dict) else None
        if url_ns and body_ns and body_ns != url_ns and request.method in ("POST", "PATCH"):
            return self._status(400, "BadRequest", "the namespace of the provided object does not match the namespace "
                                                   "sent on the request")
        if url_ns and isinstance(body, dict) and (request.method == "POST" or apply):  # the server fills it from the URL
            body.setdefault("metadata", {}).setdefault("namespace", url_ns)
        with self._lock:
            items = self.store.setdefault(collection, {})
            created = False
            if request.method == "POST":
                oname = body.get("metadata", {}).get("name")
                if oname in items:
                    return self._status(409, "AlreadyExists", f'{plural} "{oname}" already exists')
                old, new, created = None, body, True
                self._update_owners(None, new, manager)
            elif apply:
                if (body.get("metadata") or {}).get("name") != name:
                    return self._status(400, "BadRequest", f"the name of the object ({(body.get('metadata') or {}).get('name')}) "
                                                           f"does not match the name on the URL ({name})")
                old = items.get(name)
                new, conflict = self._apply(old, body, manager, force)
                if conflict:
                    fields = [(m, "." + ".".join(q)) for m, q in conflict["conflicts"]]
                    n = len(fields)
                    return web.json_response({
                        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409,
                        "message": f"Apply failed with {n} conflict{'s' if n > 1 else ''}: " + "\n".join(
                            f'conflict with "{m}": {f}' for m, f in fields),
                        "details": {"causes": [{"reason": "FieldManagerConflict", "message": f'conflict with "{m}"',
                                                "field": f} for m, f in fields]}}, status=409)
                created = old is None
                if old is not None and new == old:  # nothing changed: not written, same resourceVersion
                    return web.json_response(old, status=200)
            elif request.method == "PATCH":
                if name not in items:
                    return self._status(404, "NotFound", f'{plural} "{name}" not found')
                if request.content_type != "application/merge-patch+json":
                    return self._status(415, "UnsupportedMediaType",
                                        f"this double does merge patch and apply patch, not {request.content_type}")
                old = items[name]
                new = merge_patch(old, body)
                self._update_owners(old, new, manager)
            else:
                return self._status(405, "MethodNotAllowed", request.method)
            self._next_generation(old, new)
            problem = self._validate(group, plural, new)
            if problem:
                return self._status(422, "Invalid", f'{plural} "{new["metadata"].get("name")}" is invalid: {problem}')
            if dry:
                return web.json_response(new, status=201 if created else 200)
            return web.json_response(self._store(collection, copy.deepcopy(new)), status=201 if created else 200)

    def _discovery(self, path: str) -> dict | None:
        """The discovery documents the client's dynamic API reads, from ``self.resources``."""
        path = path.rstrip("/")
        if path == "/version":
            return {"major": "1", "minor": "33", "gitVersion": "v1.33.0-double", "platform": "linux/amd64"}
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"]}
        if path == "/apis":
            groups: dict[str, list[str]] = {}
            for g, v, *_ in self.resources:
                if g and v not in groups.setdefault(g, []):
                    groups[g].append(v)
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                 "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}} for g, vs in groups.items()]}
        parts = path.strip("/").split("/")
        if parts[:1] == ["api"] and len(parts) == 2:
            group, version = "", parts[1]
        elif parts[:1] == ["apis"] and len(parts) == 3:
            group, version = parts[1], parts[2]
        else:
            return None
        verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}".lstrip("/"),
                "resources": [{"name": p, "singularName": k.lower(), "namespaced": ns, "kind": k, "verbs": verbs}
                              for g, v, p, k, ns in self.resources if (g, v) == (group, version)]}

    async def _watch(self, request: web.Request, collection: str) -> web.StreamResponse:
        """A watch stream of the collection's changes (newline-delimited watch events) until ``timeoutSeconds``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(request.query.get("timeoutSeconds") or 1800)
        since = request.query.get("resourceVersion") or "0"
        wake = asyncio.Event()
        self._watchers.add(wake)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        try:
            with self._lock:
                if since == "0":  # "start at most recent": the current objects as ADDED, then what changes
                    out = [("ADDED", copy.deepcopy(o)) for o in self.store.get(collection, {}).values()]
                    seen = max((e[0] for e in self.events), default=0)
                else:
                    out, seen = [], int(since)
            while not self._closing:
                with self._lock:
                    for rv, kind, coll, obj in self.events:
                        if rv > seen and coll == collection:
                            out.append((kind, obj))
                    seen = max([seen, *(e[0] for e in self.events)])
                    wake.clear()
                for kind, obj in out:
                    if self._match(obj, request.query):
                        await resp.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                out = []
                if request.transport is None or request.transport.is_closing():  # the client stopped watching
                    return resp
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    await asyncio.wait_for(wake.wait(), timeout=left)
                except asyncio.TimeoutError:
                    pass
        except ConnectionResetError:  # aiohttp's ClientConnectionResetError: the client stopped watching mid-write
            return resp
        finally:
            self._watchers.discard(wake)
        await resp.write_eof()
        return resp

    @staticmethod
    def _match(obj: dict, query) -> bool:
        sel = query.get("labelSelector")
        if sel:
            labels = obj.get("metadata", {}).get("labels") or {}
            for term in sel.split(","):
                k, _, v = term.partition("=")
                if labels.get(k.strip()) != v.strip():
                    return False
        fsel = query.get("fieldSelector")
        if fsel:
            for term in fsel.split(","):
                k, _, v = term.partition("=")
                cur: Any = obj
                for part in k.split("."):
                    cur = cur.get(part) if isinstance(cur, dict) else None
                if cur != v:
                    return False
        return True

    # -- websockets -----------------------------------------------------------------------------------------
    async def _exec(self, request: web.Request, collection: str, pod: str) -> web.StreamResponse:
        ns = collection.split("/")[4]
        if pod not in self.store.get(collection, {}):
            return self._status(404, "NotFound", f'pods "{pod}" not found')
        ws = web.WebSocketResponse(protocols=("v4.channel.k8s.io",))
        await ws.prepare(request)
        command = request.query.getall("command", [])
        self.execs.append({"namespace": ns, "pod": pod, "container": request.query.get("container"), "command": command})
        if pod not in self.exec_result and self.exec_handler is not None:
            out, err, rc = await asyncio.get_running_loop().run_in_executor(
                None, self.exec_handler, ns, pod, request.query.get("container"), command)
        else:
            out, err, rc = self.exec_result.get(pod, ("", "", 0))
        if out:
            await ws.send_bytes(b"\x01" + out.encode())
        if err:
            await ws.send_bytes(b"\x02" + err.encode())
        status = {"metadata": {}, "status": "Success"} if rc == 0 else {
            "metadata": {}, "status": "Failure", "message": f"command terminated with non-zero exit code: {rc}",
            "reason": "NonZeroExitCode", "details": {"causes": [{"reason": "ExitCode", "message": str(rc)}]}}
        await ws.send_bytes(b"\x03" + json.dumps(status).encode())
        await ws.close()
        return ws

    async def _portforward(self, request: web.Request, collection: str, pod: str) -> web.StreamResponse:
        ns = collection.split("/")[4]
        port = int(request.query.get("ports", "0").split(",")[0])
        target = self.routes.get((ns, pod, port))
        if pod not in self.store.get(collection, {}) or target is None:
            return self._status(404, "NotFound", f"no route to pod {pod} port {port}")
        ws = web.WebSocketResponse(protocols=("v4.channel.k8s.io",))
        await ws.prepare(request)
        pb = bytes((port % 256, port // 256))
        await ws.send_bytes(b"\x00" + pb)
        await ws.send_bytes(b"\x01" + pb)
        reader, writer = await asyncio.open_connection(*target)

        async def upstream() -> None:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                await ws.send_bytes(b"\x00" + data)
            await ws.close()

        task = asyncio.ensure_future(upstream())
        async for msg in ws:
            if msg.type == WSMsgType.BINARY and msg.data[:1] == b"\x00" and len(msg.data) > 1:
                writer.write(msg.data[1:])
                await writer.drain()
            elif msg.type in (WSMsgType.CLOSE, WSMsgType.ERROR):
                break
        writer.close()
        task.cancel()
        return ws
