"""A Kubernetes API **test double**: a small HTTP + websocket server on 127.0.0.1 that speaks the REST and
streaming protocols the official ``kubernetes`` Python client uses. It is NOT a kube-apiserver (none can be
installed here); it is what the gke tests talk to through the real client and a real kubeconfig.

What it implements (faithfully enough for nbtools' calls):
- CRUD on any ``/api/v1/...`` or ``/apis/<group>/<version>/...`` collection, namespaced or cluster-scoped:
  GET (object or list, ``labelSelector`` with ``k=v`` terms, ``fieldSelector=involvedObject.name=X``), POST
  (409 AlreadyExists), PATCH (JSON merge patch, RFC 7386), DELETE (404 when absent), ``dryRun=All`` (validated,
  not stored), bearer-token auth (401 otherwise).
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

    def __init__(self, schemas: dict[tuple[str, str], dict] | None = None):
        self.store: dict[str, dict[str, dict]] = {}  # collection path -> name -> object
        self.schemas = schemas or {}
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
                self._bump()
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

    def route_port(self, namespace: str, pod: str, port: int, target: tuple[str, int]) -> None:
        self.routes[(namespace, pod, port)] = target

    # -- HTTP -----------------------------------------------------------------------------------------------
    def _store(self, collection: str, obj: dict) -> dict:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        meta["resourceVersion"] = str(next(self._rv))
        self.store.setdefault(collection, {})[meta["name"]] = obj
        self._bump()
        return obj

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
                self.store.clear()
                self._bump()
            return web.json_response({})
        collection, plural, name, sub = self._split(request.path)
        group = "" if request.path.startswith("/api/") else request.path.split("/")[2]
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
                self._bump()
                return web.json_response(gone)
        body = await request.json()
        with self._lock:
            items = self.store.setdefault(collection, {})
            if request.method == "POST":
                oname = body.get("metadata", {}).get("name")
                if oname in items:
                    return self._status(409, "AlreadyExists", f'{plural} "{oname}" already exists')
                new = body
            elif request.method == "PATCH":
                if name not in items:
                    return self._status(404, "NotFound", f'{plural} "{name}" not found')
                if request.content_type != "application/merge-patch+json":
                    return self._status(415, "UnsupportedMediaType", f"this double only does merge patch, not {request.content_type}")
                new = merge_patch(items[name], body)
            else:
                return self._status(405, "MethodNotAllowed", request.method)
            problem = self._validate(group, plural, new)
            if problem:
                return self._status(422, "Invalid", f'{plural} "{new["metadata"].get("name")}" is invalid: {problem}')
            if dry:
                return web.json_response(new, status=201 if request.method == "POST" else 200)
            return web.json_response(self._store(collection, copy.deepcopy(new)), status=201 if request.method == "POST" else 200)

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
