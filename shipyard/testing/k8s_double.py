"""An HTTP test double of the Kubernetes API server, enough for ``shipyard deploy``.

Used by the deploy tests and by the container rehearsal (``shipyard run --local --runner
container``), which applies the deployment to it through a kubeconfig, as a cluster would.

A real HTTP server on 127.0.0.1 that speaks the wire protocol the kubernetes Python client
uses: discovery (``/version``, ``/api``, ``/apis``, group-version resource lists), server-side
apply (``PATCH`` with ``application/apply-patch+yaml`` and ``fieldManager``), ``GET`` (with
``status``), ``DELETE`` and ``Status`` error bodies. Like a real API server with the KServe
CRDs installed it rejects (422) objects that fail the upstream CRD schema, with unknown fields
refused, and the KServe webhook rules, using the same upstream CRD files.

What it does not do: merge fields between several field managers (an apply replaces labels,
annotations and spec, which is what a single manager's apply amounts to), watches, and any
controller: ``status`` comes from a per-test *script*, a function of the stored object and the
number of GETs since its generation changed.

Faults: ``forbid(method, plural)`` answers 403; ``delay(method, seconds)`` holds the answer (a
PATCH is committed first, as a slow API server may do) so that client timeouts fire.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

from shipyard.serving.kserve.validate import validate_object

Script = Callable[[dict[str, Any], int], dict[str, Any] | None]

GROUPS: dict[str, dict[str, Any]] = {
    "serving.kserve.io": {
        "versions": ["v1alpha2", "v1alpha1"],
        "resources": [("llminferenceservices", "LLMInferenceService", "llmisvc"),
                      ("llminferenceserviceconfigs", "LLMInferenceServiceConfig", "llmisvcconfig")],
    },
    "keda.sh": {"versions": ["v1alpha1"], "resources": [("scaledobjects", "ScaledObject", "so")]},
    "inference.networking.x-k8s.io": {"versions": ["v1alpha2"],
                                      "resources": [("inferenceobjectives", "InferenceObjective", "")]},
}
VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


def condition(ctype: str, status: str, reason: str = "", message: str = "") -> dict[str, Any]:
    cond = {"type": ctype, "status": status, "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def ready_after(polls: int, url: str = "http://gateway.example/ns/name") -> Script:
    """Progressing for ``polls`` GETs, then Ready with ``url`` (KServe's rollup)."""

    def script(obj: dict[str, Any], n: int) -> dict[str, Any]:
        if n < polls:
            return {"conditions": [condition("PresetsCombined", "True"),
                                   condition("WorkloadsReady", "Unknown", "Progressing", "waiting for pods"),
                                   condition("RouterReady", "True"),
                                   condition("Ready", "Unknown", "Progressing", "waiting for pods")]}
        return {"url": url, "conditions": [condition(t, "True") for t in
                                           ("PresetsCombined", "WorkloadsReady", "RouterReady", "Ready")]}

    return script


def fails_with(ctype: str, reason: str, message: str, after: int = 1) -> Script:
    """Progressing for ``after`` GETs, then ``ctype=False`` (rolled up into Ready)."""

    def script(obj: dict[str, Any], n: int) -> dict[str, Any]:
        if n < after:
            return ready_after(10**9)(obj, n)
        conds = [condition("PresetsCombined", "True"), condition("RouterReady", "True"),
                 condition("WorkloadsReady", "False", reason, message), condition("Ready", "False", reason, message)]
        if ctype == "PresetsCombined":
            conds = [condition("PresetsCombined", "False", reason, message), condition("Ready", "False", reason, message)]
        elif ctype not in ("WorkloadsReady", "Ready"):
            conds.insert(0, condition(ctype, "False", reason, message))
        return {"conditions": conds}

    return script


def by_model_uri(scripts: dict[str, Script], default: Script) -> Script:
    """Choose the script by the object's ``spec.model.uri`` (old spec healthy, new one broken)."""

    def script(obj: dict[str, Any], n: int) -> dict[str, Any] | None:
        uri = ((obj.get("spec") or {}).get("model") or {}).get("uri", "")
        return scripts.get(uri, default)(obj, n)

    return script


class K8sDouble:
    """The server; use as a context manager. ``objects`` maps (plural, ns, name) to objects."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.polls: dict[tuple[str, str, str], int] = {}
        self.scripts: dict[str, Script] = {}
        self.forbidden: set[tuple[str, str]] = set()
        self.delays: dict[str, float] = {}
        self.requests: list[tuple[str, str]] = []
        self.served_groups = set(GROUPS)
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # -- test controls -----------------------------------------------------------------------
    def __enter__(self) -> K8sDouble:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def script(self, name: str, script: Script) -> None:
        self.scripts[name] = script

    def forbid(self, method: str, plural: str) -> None:
        self.forbidden.add((method.upper(), plural))

    def delay(self, method: str, seconds: float) -> None:
        self.delays[method.upper()] = seconds

    def kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "double",
            "clusters": [{"name": "double", "cluster": {"server": self.url}}],
            "users": [{"name": "deployer", "user": {"token": "test-token"}}],
            "contexts": [{"name": "double", "context": {"cluster": "double", "user": "deployer",
                                                         "namespace": namespace}}],
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def get(self, plural: str, ns: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((plural, ns, name))

    def put(self, obj: dict[str, Any], plural: str = "llminferenceservices", status: dict[str, Any] | None = None) -> None:
        """Seed an existing object (e.g. a running deployment)."""
        meta = obj["metadata"]
        stored = json.loads(json.dumps(obj))
        stored["metadata"].update(uid=str(uuid.uuid4()), generation=1, resourceVersion="1",
                                  creationTimestamp="2026-01-01T00:00:00Z")
        if status is not None:
            stored["status"] = {"observedGeneration": 1, **status}
        self.objects[(plural, meta["namespace"], meta["name"])] = stored

    # -- HTTP ----------------------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                double._dispatch(self, "GET")

            def do_PATCH(self) -> None:
                double._dispatch(self, "PATCH")

            def do_DELETE(self) -> None:
                double._dispatch(self, "DELETE")

            def do_POST(self) -> None:
                double._dispatch(self, "POST")

            def do_PUT(self) -> None:
                double._dispatch(self, "PUT")

        return Handler

    def _send(self, h: BaseHTTPRequestHandler, code: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        try:
            h.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    @staticmethod
    def status(code: int, reason: str, message: str) -> dict[str, Any]:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": code}

    def _dispatch(self, h: BaseHTTPRequestHandler, method: str) -> None:
        parsed = urlparse(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        with self.lock:
            self.requests.append((method, parsed.path))
        code, payload = self._route(method, parsed.path, parse_qs(parsed.query), h.headers.get("Content-Type", ""), raw)
        delay = self.delays.get(method, 0.0)
        if delay and "/namespaces/" in parsed.path:
            time.sleep(delay)
        self._send(h, code, payload)

    def _route(self, method: str, path: str, query: dict[str, list[str]], ctype: str, raw: bytes) -> tuple[int, Any]:
        parts = [p for p in path.split("/") if p]
        if method == "GET" and parts == ["version"]:
            return 200, {"major": "1", "minor": "33", "gitVersion": "v1.33.0", "platform": "linux/amd64"}
        if method == "GET" and parts == ["api"]:
            return 200, {"kind": "APIVersions", "versions": ["v1"],
                         "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}
        if method == "GET" and parts == ["api", "v1"]:
            return 200, {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                {"name": "configmaps", "singularName": "configmap", "namespaced": True, "kind": "ConfigMap", "verbs": VERBS},
                {"name": "namespaces", "singularName": "namespace", "namespaced": False, "kind": "Namespace", "verbs": VERBS}]}
        if method == "GET" and parts == ["apis"]:
            groups = []
            for group in sorted(self.served_groups):
                versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in GROUPS[group]["versions"]]
                groups.append({"name": group, "versions": versions, "preferredVersion": versions[0]})
            return 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        if len(parts) == 3 and parts[0] == "apis" and method == "GET":
            group, version = parts[1], parts[2]
            if group not in self.served_groups or version not in GROUPS[group]["versions"]:
                return 404, self.status(404, "NotFound", "the server could not find the requested resource")
            resources = []
            for plural, kind, short in GROUPS[group]["resources"]:
                resources.append({"name": plural, "singularName": kind.lower(), "namespaced": True, "kind": kind,
                                  "verbs": VERBS, "shortNames": [short] if short else []})
                resources.append({"name": f"{plural}/status", "singularName": "", "namespaced": True, "kind": kind,
                                  "verbs": ["get", "patch", "update"]})
            return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}",
                         "resources": resources}
        # /apis/{group}/{version}/namespaces/{ns}/{plural}/{name}
        if len(parts) == 7 and parts[0] == "apis" and parts[3] == "namespaces":
            group, version, ns, plural, name = parts[1], parts[2], parts[4], parts[5], parts[6]
            if group not in self.served_groups:
                return 404, self.status(404, "NotFound", "the server could not find the requested resource")
            if (method, plural) in self.forbidden:
                return 403, self.status(403, "Forbidden", f'{plural}.{group} "{name}" is forbidden: User '
                                        f'"system:serviceaccount:{ns}:pipeline-runner" cannot {method.lower()} '
                                        f'resource "{plural}" in API group "{group}" in the namespace "{ns}"')
            key = (plural, ns, name)
            if method == "GET":
                return self._get(key, group, plural)
            if method == "DELETE":
                with self.lock:
                    found = self.objects.pop(key, None)
                if found is None:
                    return 404, self.status(404, "NotFound", f'{plural}.{group} "{name}" not found')
                return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success",
                             "details": {"name": name, "group": group, "kind": plural, "uid": found["metadata"]["uid"]}}
            if method == "PATCH":
                return self._apply(key, group, version, ctype, query, raw)
        return 404, self.status(404, "NotFound", f"{method} {path} is not served by the test double")

    def _get(self, key: tuple[str, str, str], group: str, plural: str) -> tuple[int, Any]:
        with self.lock:
            obj = self.objects.get(key)
            if obj is None:
                return 404, self.status(404, "NotFound", f'{plural}.{group} "{key[2]}" not found')
            script = self.scripts.get(key[2])
            if script is not None and plural == "llminferenceservices":
                n = self.polls.get(key, 0)
                self.polls[key] = n + 1
                status = script(obj, n)
                if status is not None:
                    obj["status"] = {"observedGeneration": obj["metadata"]["generation"], **status}
            return 200, json.loads(json.dumps(obj))

    def _apply(self, key: tuple[str, str, str], group: str, version: str, ctype: str,
               query: dict[str, list[str]], raw: bytes) -> tuple[int, Any]:
        if ctype.split(";")[0].strip() != "application/apply-patch+yaml":
            return 415, self.status(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {ctype}")
        if not query.get("fieldManager"):
            return 422, self.status(422, "Invalid", "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: "
                                    "is required for apply patch")
        try:
            body = yaml.safe_load(raw)
        except yaml.YAMLError as err:
            return 400, self.status(400, "BadRequest", f"error decoding YAML: {err}")
        plural, ns, name = key
        meta = body.get("metadata") or {}
        if body.get("apiVersion") != f"{group}/{version}" or meta.get("name") != name or meta.get("namespace", ns) != ns:
            return 400, self.status(400, "BadRequest", "the apiVersion, name or namespace of the body does not match the URL")
        problems = validate_object(body, "request")
        if problems:
            kind = body.get("kind")
            causes = "; ".join(f"{p.path}: {p.message}" for p in problems[:5])
            return 422, self.status(422, "Invalid", f'{kind}.{group} "{name}" is invalid: {causes}')
        with self.lock:
            old = self.objects.get(key)
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            if old is None:
                stored = {**body, "metadata": {**meta, "namespace": ns, "uid": str(uuid.uuid4()), "generation": 1,
                                               "resourceVersion": "1", "creationTimestamp": now}}
                code = 201
            else:
                old_meta = old["metadata"]
                generation = old_meta["generation"] + (1 if body.get("spec") != old.get("spec") else 0)
                stored = {**old, **{k: v for k, v in body.items() if k != "metadata"}}
                stored["metadata"] = {**old_meta, "labels": meta.get("labels", {}),
                                      "annotations": meta.get("annotations", {}), "generation": generation,
                                      "resourceVersion": str(int(old_meta["resourceVersion"]) + 1)}
                if generation != old_meta["generation"]:
                    self.polls[key] = 0
                code = 200
            stored["metadata"]["managedFields"] = [{"manager": query["fieldManager"][0], "operation": "Apply",
                                                    "apiVersion": f"{group}/{version}", "time": now}]
            self.objects[key] = stored
            return code, json.loads(json.dumps(stored))
