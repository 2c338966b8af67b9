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

Faults: ``forbid(method, plural)`` answers 403 (``forbid("POST", "selfsubjectaccessreviews")``:
the review itself, as for an identity without ``system:basic-user``); ``delay(method, seconds)``
holds the answer (a PATCH is committed first, as a slow API server may do) so that client
timeouts fire.

A whole cluster, for ``shipyard check`` and the rehearsal of a namespace layout: ``load(docs)``
stores what ``kubectl apply`` would (the objects ``manifests/`` builds, per namespace: Secrets,
Services, Roles, RoleBindings, ...), ``add_node`` GPU nodes, ``install_kserve(version)`` the
controller Deployment whose image tag names the version. ``groups`` chooses the served API groups
and versions (e.g. KServe serving only ``v1alpha1``, or no LeaderWorkerSet CRD). Tokens map to
users (``users``); with ``enforce_rbac`` a token it does not know is a 401 to every call (as an
expired one is to an API server) and every namespaced request of a user who is not an admin is
authorized from the stored Roles and RoleBindings (and ClusterRoles and ClusterRoleBindings), as
the API server's RBAC authorizer does, so a verb the Role lacks is a 403; ``SubjectAccessReview``
and ``SelfSubjectAccessReview`` answer from the same rules (201 with ``status.allowed: false`` for a
missing rule, and ``status.evaluationError`` when a binding's Role does not exist).
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

from shipyard.serving.kserve.validate import validate_object
from shipyard.testing.loopback import LoopbackServer

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
    # Istio (multi-user Kubeflow): the kubeflow-multi-user overlay ships MLflow's AuthorizationPolicy
    "security.istio.io": {"versions": ["v1", "v1beta1"],
                          "resources": [("authorizationpolicies", "AuthorizationPolicy", "ap")]},
}
VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]

#: API groups a complete install serves for every deploy option (KServe v0.20 + its dependencies)
FULL_INSTALL_GROUPS: dict[str, dict[str, Any]] = {
    **GROUPS,
    "leaderworkerset.x-k8s.io": {"versions": ["v1"], "resources": [("leaderworkersets", "LeaderWorkerSet", "lws")]},
    "gateway.networking.k8s.io": {"versions": ["v1", "v1beta1"], "resources": [
        ("gateways", "Gateway", "gtw"), ("httproutes", "HTTPRoute", "httproute")]},
    "inference.networking.k8s.io": {"versions": ["v1"], "resources": [("inferencepools", "InferencePool", "infpool")]},
    "inference.networking.x-k8s.io": {"versions": ["v1alpha2"], "resources": [
        ("inferenceobjectives", "InferenceObjective", "infobj")]},
    "llmd.ai": {"versions": ["v1alpha1"], "resources": [("variantautoscalings", "VariantAutoscaling", "va")]},
}
#: kind -> (plural, namespaced) of the objects ``load`` stores besides the CRDs' kinds
CORE_KINDS: dict[str, tuple[str, bool]] = {
    "Namespace": ("namespaces", False), "Node": ("nodes", False), "Secret": ("secrets", True),
    "Service": ("services", True), "ServiceAccount": ("serviceaccounts", True), "ConfigMap": ("configmaps", True),
    "PersistentVolumeClaim": ("persistentvolumeclaims", True), "Deployment": ("deployments", True),
    "Role": ("roles", True), "RoleBinding": ("rolebindings", True), "ClusterRole": ("clusterroles", False),
    "ClusterRoleBinding": ("clusterrolebindings", False),
}
#: plural -> API group of the stored core kinds
CORE_GROUPS = {"deployments": "apps", "roles": "rbac.authorization.k8s.io",
               "rolebindings": "rbac.authorization.k8s.io", "clusterroles": "rbac.authorization.k8s.io",
               "clusterrolebindings": "rbac.authorization.k8s.io"}
ADMIN = "kubernetes-admin"
READY_TYPE = "Ready"


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


#: KServe v0.20's MainWorkloadReady while a new Deployment starts (workload_single_node.go copies the
#: Deployment's Available=False condition; Kubernetes' deployment controller words it so)
STARTING_REASON, STARTING_MESSAGE = "MinimumReplicasUnavailable", "Deployment does not have minimum availability."
#: KServe v0.20's advisory condition for oci+native:// on a cluster whose ImageVolume is feature-gated (controller.go)
OCI_IMAGE_VOLUME_ADVISORY = ("OciImageVolumeCompatible", "ImageVolumeAlpha",
                             "Cluster K8s 1.33 has ImageVolume feature-gated (K8s 1.33–1.34 beta). Ensure "
                             "--feature-gates=ImageVolume=true is set on kube-apiserver and kubelet.")


def kserve_conditions(phase: str, reason: str = "", message: str = "", *, advisory: bool = False) -> list[dict[str, Any]]:
    """The conditions KServe v0.20 reports for a single-node LLMInferenceService (managed router, no
    autoscaling) in ``phase``: ``created`` (its Deployment has no conditions yet: reason
    ``Progressing``), ``starting`` (``Available=False / MinimumReplicasUnavailable`` until the pods
    pass their readiness probe), ``failed`` (``reason``/``message`` on ``MainWorkloadReady``) or
    ``ready``. A False sub-condition is copied into ``WorkloadsReady`` and ``Ready`` with its reason
    and message (``DetermineWorkloadReadiness``, knative's LivingConditionSet). ``advisory`` adds
    ``OciImageVolumeCompatible=False``, which is outside the Ready rollup."""
    if phase == "ready":
        main = condition("MainWorkloadReady", "True")
    elif phase == "created":
        main = condition("MainWorkloadReady", "False", "Progressing")
    elif phase == "starting":
        main = condition("MainWorkloadReady", "False", STARTING_REASON, STARTING_MESSAGE)
    else:
        main = condition("MainWorkloadReady", "False", reason, message)
    rolled = ("True",) if phase == "ready" else ("False", main.get("reason", ""), main.get("message", ""))
    conds = [condition("PresetsCombined", "True"), main, condition("WorkloadsReady", *rolled),
             condition("HTTPRoutesReady", "True"), condition("InferencePoolReady", "True"),
             condition("SchedulerWorkloadReady", "True"), condition("RouterReady", "True"), condition(READY_TYPE, *rolled)]
    if advisory:
        conds.insert(0, condition(OCI_IMAGE_VOLUME_ADVISORY[0], "False", *OCI_IMAGE_VOLUME_ADVISORY[1:]))
    return conds


def kserve_startup(startup_s: float, url: str = "http://gateway.example/ns/name", *, advisory: bool = False,
                   then: tuple[str, str] | None = None) -> Script:
    """KServe v0.20's real sequence for a new Deployment, in wall-clock time since the object's
    generation was first read: ``Progressing`` on the first read, ``MinimumReplicasUnavailable``
    for ``startup_s`` seconds (image pull, model pull, load, CUDA-graph capture), then Ready with
    ``url`` or, with ``then=(reason, message)``, ``MainWorkloadReady=False`` with that reason."""
    first: dict[tuple[str, int], float] = {}

    def script(obj: dict[str, Any], n: int) -> dict[str, Any]:
        meta = obj["metadata"]
        since = first.setdefault((meta.get("uid", ""), int(meta.get("generation") or 0)), time.monotonic())
        elapsed = time.monotonic() - since
        if n == 0:
            return {"conditions": kserve_conditions("created", advisory=advisory)}
        if elapsed < startup_s:
            return {"conditions": kserve_conditions("starting", advisory=advisory)}
        if then is not None:
            return {"conditions": kserve_conditions("failed", *then, advisory=advisory)}
        return {"url": url, "conditions": kserve_conditions("ready", advisory=advisory)}

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

    def __init__(self, groups: dict[str, dict[str, Any]] | None = None, users: dict[str, str] | None = None,
                 enforce_rbac: bool = False) -> None:
        self.groups = {g: {"versions": list(v["versions"]), "resources": list(v["resources"])}
                       for g, v in (groups or GROUPS).items()}
        self.users = {"test-token": ADMIN, **(users or {})}
        self.enforce_rbac = enforce_rbac
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.polls: dict[tuple[str, str, str], int] = {}
        self.scripts: dict[str, Script] = {}
        self.forbidden: set[tuple[str, str]] = set()
        self.delays: dict[str, float] = {}
        self.requests: list[tuple[str, str]] = []
        self.served_groups = set(self.groups)
        self.lock = threading.Lock()
        self.server = LoopbackServer(self._handler())

    # -- test controls -----------------------------------------------------------------------
    def __enter__(self) -> K8sDouble:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    @property
    def url(self) -> str:
        return self.server.url

    def script(self, name: str, script: Script) -> None:
        self.scripts[name] = script

    def forbid(self, method: str, plural: str) -> None:
        self.forbidden.add((method.upper(), plural))

    def delay(self, method: str, seconds: float) -> None:
        self.delays[method.upper()] = seconds

    def kubeconfig(self, path: Path, namespace: str = "default", token: str = "test-token") -> Path:
        """A kubeconfig for this server; ``token`` chooses the user (``users``; the default is an admin)."""
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "double",
            "clusters": [{"name": "double", "cluster": {"server": self.url}}],
            "users": [{"name": "deployer", "user": {"token": token}}],
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

    def serve_versions(self, group: str, versions: list[str]) -> None:
        """Serve only ``versions`` of ``group`` (e.g. an old KServe without ``v1alpha2``)."""
        self.groups[group]["versions"] = list(versions)

    def load(self, docs: list[dict[str, Any]]) -> None:
        """Store ``docs`` as ``kubectl apply`` would (their namespaces created first)."""
        for doc in docs:
            ns = (doc.get("metadata") or {}).get("namespace")
            if ns:
                self.add_namespace(ns)
            self.store(doc)

    def store(self, doc: dict[str, Any]) -> None:
        """Store one object (a known core kind or a served custom resource) as it is."""
        kind, meta = doc["kind"], doc["metadata"]
        if kind in CORE_KINDS:
            plural, namespaced = CORE_KINDS[kind]
        else:
            plural = next((p for g in self.groups.values() for p, k, _ in g["resources"] if k == kind), "")
            namespaced = True
            if not plural:
                raise ValueError(f"the double does not serve kind {kind}")
        stored = json.loads(json.dumps(doc))
        if kind == "Secret" and "stringData" in stored:  # the API server folds stringData into data
            stored.setdefault("data", {}).update({k: base64.b64encode(str(v).encode()).decode()
                                                  for k, v in stored.pop("stringData").items()})
        stored["metadata"].setdefault("uid", str(uuid.uuid4()))
        stored["metadata"].setdefault("resourceVersion", "1")
        with self.lock:
            self.objects[(plural, meta.get("namespace", "") if namespaced else "", meta["name"])] = stored

    def add_namespace(self, name: str) -> None:
        if ("namespaces", "", name) not in self.objects:
            self.store({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name},
                        "status": {"phase": "Active"}})

    def remove(self, plural: str, ns: str, name: str) -> None:
        with self.lock:
            self.objects.pop((plural, ns, name), None)

    def add_node(self, name: str, labels: dict[str, str], allocatable: dict[str, str]) -> None:
        self.store({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels)},
                    "status": {"allocatable": dict(allocatable), "capacity": dict(allocatable)}})

    def install_kserve(self, version: str, namespace: str = "kserve") -> None:
        """KServe's controller Deployment, its image tag naming the release (what ``shipyard check`` reads)."""
        self.add_namespace(namespace)
        self.store({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "kserve-controller-manager", "namespace": namespace,
                                 "labels": {"app.kubernetes.io/name": "kserve"}},
                    "spec": {"template": {"spec": {"containers": [
                        {"name": "manager", "image": f"kserve/kserve-controller:{version}"}]}}}})

    # -- RBAC ------------------------------------------------------------------------------------
    @staticmethod
    def _groups_of(user: str) -> set[str]:
        groups = {"system:authenticated"}
        if user.startswith("system:serviceaccount:"):
            ns = user.split(":")[2]
            groups |= {"system:serviceaccounts", f"system:serviceaccounts:{ns}"}
        return groups

    def _subject_matches(self, subject: dict[str, Any], binding_ns: str, user: str, groups: set[str]) -> bool:
        kind, name = subject.get("kind"), subject.get("name")
        if kind == "ServiceAccount":
            return user == f"system:serviceaccount:{subject.get('namespace') or binding_ns}:{name}"
        if kind == "User":
            return user == name
        return kind == "Group" and name in groups

    def allowed(self, user: str, verb: str, group: str, resource: str, ns: str, name: str = "",
                groups: set[str] | None = None, errors: list[str] | None = None) -> bool:
        """What the RBAC authorizer says: an admin may do anything; anyone else needs a rule of a
        Role bound in ``ns`` (or a ClusterRole bound there or cluster-wide). A binding of the user
        whose Role does not exist adds the authorizer's error to ``errors`` (a review's
        ``evaluationError``)."""
        if user == ADMIN:
            return True
        groups = (groups or set()) | self._groups_of(user)
        bindings = [(b, ns) for (p, bns, _), b in self.objects.items() if p == "rolebindings" and bns == ns and ns]
        bindings += [(b, "") for (p, _, _), b in self.objects.items() if p == "clusterrolebindings"]
        for binding, bns in bindings:
            if not any(self._subject_matches(s, bns, user, groups) for s in binding.get("subjects") or []):
                continue
            ref = binding.get("roleRef") or {}
            role = (self.objects.get(("roles", bns, ref.get("name", ""))) if ref.get("kind") == "Role"
                    else self.objects.get(("clusterroles", "", ref.get("name", ""))))
            if role is None and errors is not None:
                errors.append(f'{str(ref.get("kind", "")).lower()}.rbac.authorization.k8s.io "{ref.get("name", "")}" '
                              "not found")
            for rule in (role or {}).get("rules") or []:
                if ((group in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", []))
                        and (resource in rule.get("resources", []) or "*" in rule.get("resources", []))
                        and (verb in rule.get("verbs", []) or "*" in rule.get("verbs", []))
                        and (not rule.get("resourceNames") or name in rule["resourceNames"])):
                    return True
        return False

    def _forbidden(self, user: str, verb: str, group: str, resource: str, ns: str, name: str) -> tuple[int, Any]:
        what = (f"{resource}.{group}" if group else resource) + (f' "{name}"' if name else "")
        where = f' in the namespace "{ns}"' if ns else " at the cluster scope"
        return 403, self.status(403, "Forbidden", f'{what} is forbidden: User "{user}" cannot {verb} resource '
                                f'"{resource}" in API group "{group}"{where}')

    def _review(self, body: dict[str, Any], user: str, self_review: bool) -> tuple[int, Any]:
        spec = body.get("spec") or {}
        attrs = spec.get("resourceAttributes") or {}
        who = user if self_review else str(spec.get("user") or "")
        errors: list[str] = []
        ok = self.allowed(who, attrs.get("verb", ""), attrs.get("group", ""), attrs.get("resource", ""),
                          attrs.get("namespace", ""), attrs.get("name", ""), set(spec.get("groups") or []), errors)
        status: dict[str, Any] = {"allowed": ok}
        if not ok:
            status["reason"] = "no RBAC rule allows it"
        if not ok and errors:  # as the API server aggregates the authorizer's errors
            status["evaluationError"] = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
        kind = "SelfSubjectAccessReview" if self_review else "SubjectAccessReview"
        return 201, {"kind": kind, "apiVersion": "authorization.k8s.io/v1", "metadata": {}, "spec": spec,
                     "status": status}

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
        token = (h.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        user = self.users.get(token, "system:anonymous")
        code, payload = self._authorized_route(user, method, parsed.path, parse_qs(parsed.query),
                                               h.headers.get("Content-Type", ""), raw)
        delay = self.delays.get(method, 0.0)
        if delay and "/namespaces/" in parsed.path:
            time.sleep(delay)
        self._send(h, code, payload)

    def _authorized_route(self, user: str, method: str, path: str, query: dict[str, list[str]], ctype: str,
                          raw: bytes) -> tuple[int, Any]:
        """RBAC first (with ``enforce_rbac``), then :meth:`_route`, then the core objects."""
        parts = [p for p in path.split("/") if p]
        if user == "system:anonymous" and self.enforce_rbac:
            return 401, self.status(401, "Unauthorized", "Unauthorized")
        if parts[:3] == ["apis", "authorization.k8s.io", "v1"] and method == "POST" and len(parts) == 4:
            body = json.loads(raw or b"{}")
            if (method, parts[3]) in self.forbidden:  # an identity without system:basic-user
                return self._forbidden(user, "create", "authorization.k8s.io", parts[3], "", "")
            if parts[3] == "selfsubjectaccessreviews":
                return self._review(body, user, True)
            if parts[3] == "subjectaccessreviews":
                if self.enforce_rbac and not self.allowed(user, "create", "authorization.k8s.io",
                                                          "subjectaccessreviews", ""):
                    return self._forbidden(user, "create", "authorization.k8s.io", "subjectaccessreviews", "", "")
                return self._review(body, user, False)
        target = self._target(parts, method, query)
        if target is not None and self.enforce_rbac:
            verb, group, plural, ns, name = target
            if not self.allowed(user, verb, group, plural, ns, name):
                return self._forbidden(user, verb, group, plural, ns, name)
            if verb == "patch" and self.objects.get((plural, ns, name)) is None \
                    and not self.allowed(user, "create", group, plural, ns, name):
                return self._forbidden(user, "create", group, plural, ns, name)
        code, payload = self._route(method, path, query, ctype, raw)
        if code == 404 and method == "GET":
            found = self._core_get(parts, query)
            if found is not None:
                return found
        return code, payload

    def _target(self, parts: list[str], method: str, query: dict[str, list[str]]) -> tuple[str, ...] | None:
        """(verb, group, plural, namespace, name) of a resource request; None for discovery."""
        group = ""
        if parts[:2] == ["api", "v1"]:
            rest = parts[2:]
        elif parts[:1] == ["apis"] and len(parts) > 3:
            group, rest = parts[1], parts[3:]
        else:
            return None
        ns = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        elif rest[:1] == ["namespaces"] and len(rest) == 2:
            return ({"GET": "get"}.get(method, method.lower()), "", "namespaces", "", rest[1])
        if not rest:
            return None
        plural, name = rest[0], (rest[1] if len(rest) > 1 else "")
        verb = {"GET": "get" if name else ("watch" if query.get("watch") else "list"), "PATCH": "patch",
                "DELETE": "delete", "POST": "create", "PUT": "update"}[method]
        return verb, group, plural, ns, name

    def _core_get(self, parts: list[str], query: dict[str, list[str]]) -> tuple[int, Any] | None:
        """GET of a stored core object (or a list of nodes with a label selector); None: not one."""
        if parts[:2] == ["api", "v1"]:
            rest, api_version = parts[2:], "v1"
        elif parts[:2] == ["apis", "apps"] and len(parts) > 3:
            rest, api_version = parts[3:], "apps/v1"
        else:
            return None
        if rest[:1] == ["namespaces"] and len(rest) == 2:
            key = ("namespaces", "", rest[1])
        elif rest[:1] == ["namespaces"] and len(rest) == 4:
            key = (rest[2], rest[1], rest[3])
        elif len(rest) == 1:  # a cluster-scoped list: nodes
            selector = dict(kv.split("=", 1) for kv in (query.get("labelSelector") or [""])[0].split(",") if "=" in kv)
            items = [json.loads(json.dumps(o)) for (p, _, _), o in sorted(self.objects.items())
                     if p == rest[0] and all(o["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())]
            kind = next((k for k, (p, _) in CORE_KINDS.items() if p == rest[0]), "")
            return 200, {"kind": f"{kind}List", "apiVersion": api_version, "metadata": {"resourceVersion": "1"},
                         "items": items}
        elif len(rest) == 2:
            key = (rest[0], "", rest[1])
        else:
            return None
        obj = self.objects.get(key)
        if obj is None:
            return 404, self.status(404, "NotFound", f'{key[0]} "{key[2]}" not found')
        return 200, json.loads(json.dumps(obj))

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
                {"name": "secrets", "singularName": "secret", "namespaced": True, "kind": "Secret", "verbs": VERBS},
                {"name": "services", "singularName": "service", "namespaced": True, "kind": "Service", "verbs": VERBS},
                {"name": "nodes", "singularName": "node", "namespaced": False, "kind": "Node", "verbs": VERBS},
                {"name": "namespaces", "singularName": "namespace", "namespaced": False, "kind": "Namespace", "verbs": VERBS}]}
        if method == "GET" and parts == ["apis"]:
            groups = []
            for group in sorted(g for g in self.served_groups if self.groups[g]["versions"]):
                versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in self.groups[group]["versions"]]
                groups.append({"name": group, "versions": versions, "preferredVersion": versions[0]})
            return 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        if len(parts) == 3 and parts[0] == "apis" and method == "GET":
            group, version = parts[1], parts[2]
            if group not in self.served_groups or version not in self.groups[group]["versions"]:
                return 404, self.status(404, "NotFound", "the server could not find the requested resource")
            resources = []
            for plural, kind, short in self.groups[group]["resources"]:
                resources.append({"name": plural, "singularName": kind.lower(), "namespaced": True, "kind": kind,
                                  "verbs": VERBS, "shortNames": [short] if short else []})
                resources.append({"name": f"{plural}/status", "singularName": "", "namespaced": True, "kind": kind,
                                  "verbs": ["get", "patch", "update"]})
            return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}",
                         "resources": resources}
        # /apis/{group}/{version}/namespaces/{ns}/{plural}/{name}
        if len(parts) == 7 and parts[0] == "apis" and parts[3] == "namespaces":
            group, version, ns, plural, name = parts[1], parts[2], parts[4], parts[5], parts[6]
            if group not in self.served_groups or version not in self.groups[group]["versions"]:
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
        dry_run = query.get("dryRun") or []
        if dry_run not in ([], ["All"]):
            return 400, self.status(400, "BadRequest", f"Invalid dry run value: {dry_run}")
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
                if generation != old_meta["generation"] and not dry_run:
                    self.polls[key] = 0
                code = 200
            stored["metadata"]["managedFields"] = [{"manager": query["fieldManager"][0], "operation": "Apply",
                                                    "apiVersion": f"{group}/{version}", "time": now}]
            if not dry_run:  # dryRun=All: checked and answered as it would be stored, nothing stored
                self.objects[key] = stored
            return code, json.loads(json.dumps(stored))
