"""``shipyard check``: a cluster's readiness for shipyard, checked once by a platform engineer
(the way ``linkerd check`` works) before a GPU is spent.

:func:`cluster_checks` reads the cluster through a kubeconfig (discovery, Namespaces, Secrets,
Services, Nodes, KServe's controller Deployment, SubjectAccessReviews) and calls the checks of
:mod:`shipyard.serving.cluster_check` with the layout of ``pipelines/cluster.yaml``: KFP and
KServe versions, the served LLMInferenceService versions, the CRDs the deploy options need, the
namespaces, the contract Secrets and keys where the pipeline pods run, MLflow by its in-cluster
name with a real API call and an artifact round-trip (a throwaway run, deleted after), the
registry, S3, GPU nodes and the deploy identity's permissions.
Nothing else is changed in the cluster.

Without a kubeconfig (none given, no ``$KUBECONFIG``, no ``~/.kube/config``, not in a pod, or a
``$KUBECONFIG`` naming only files that do not exist: the line names them), or with an API server that does not answer, the Kubernetes part is one line (``SKIP kubernetes: not
checked: no kubeconfig`` or ``FAIL kubernetes: cannot reach ...``) and what needs no cluster is
still checked: the deploy config, KFP, MLflow (through ``--mlflow-url``), the registry and S3 (from
``AWS_*`` in this environment). So is an API server that rejects the credentials (401: ``not
allowed``) or something that is not an API server at all (a login page, another service's 404:
``not a Kubernetes API server at URL``), found by the first call, ``GET /api``. A read that RBAC
forbids (403) is the ``not allowed`` line of the check that needed it (naming the user, verb and
resource), never "missing". Every name that goes into an API path is checked against Kubernetes'
rules first (:func:`check_names`) and each path segment is URL-quoted (:func:`api_path`). Each
Kubernetes API call ends within 31 s in all (``SHIPYARD_CHECK_API_TIMEOUT_S``, default 15 s, per read,
and the connect attempts), however slowly the API server (or a proxy before it) answers; each HTTP check (KFP, MLflow, the registry) within its own.
"""

from __future__ import annotations

import base64
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from shipyard.core.env import env_seconds
from shipyard.core.errors import ShipyardError, UnreachableError
from shipyard.core.net import call_within, http_request
from shipyard.params.pipeline import BY_NAME, PLACEHOLDER_OCI
from shipyard.pipelines.platform import cluster_layout, ephemeral_storage, load_cluster_config
from shipyard.serving import cluster_check as cc
from shipyard.serving.cluster_check import Check

#: the read timeout of each Kubernetes API call of ``shipyard check`` (its deadline: this and the connect attempts)
CHECK_API_TIMEOUT_S = 15.0
#: the setting that changes it (seconds per read)
ENV_CHECK_API_TIMEOUT = "SHIPYARD_CHECK_API_TIMEOUT_S"


def check_api_timeout_s() -> float:
    """``SHIPYARD_CHECK_API_TIMEOUT_S`` (default :data:`CHECK_API_TIMEOUT_S`), a number of seconds."""
    return env_seconds(ENV_CHECK_API_TIMEOUT, CHECK_API_TIMEOUT_S, most=3600.0)
#: what the Kubernetes part leaves unchecked when it stops at its first call
UNCHECKED = "KServe, CRDs, Secrets, nodes and permissions unchecked"


class Refused(Exception):
    """A 401 or 403 from the API server: the identity running ``check`` (not the cluster) is the
    problem. :meth:`check` is its one line under the check that made the call."""

    def __init__(self, host: str, code: int, verb: str, resource: str, namespace: str, body: Any) -> None:
        self.host, self.code, self.verb, self.resource, self.namespace = host, code, verb, resource, namespace
        self.user = _user_in(body)
        super().__init__(self.detail())

    def detail(self) -> str:
        """What was refused, to whom and why, in words."""
        if self.code == 401:
            return (f"not allowed: the Kubernetes API at {self.host} rejects these credentials (401 Unauthorized): "
                    "the kubeconfig's token or client certificate is expired or invalid")
        where = f" in namespace {self.namespace}" if self.namespace else " (cluster-wide)"
        return (f"not allowed: the Kubernetes API at {self.host} forbids {self.user or 'this identity'} to {self.verb} "
                f"{self.resource}{where} (403 Forbidden: RBAC)")

    def fix(self) -> str:
        """What to do about it."""
        if self.code == 401:
            return ("log in again or put a valid token in the kubeconfig's user entry (kubectl auth whoami "
                    "answers when it works)")
        where = f" in namespace {self.namespace}" if self.namespace else " cluster-wide"
        return (f"run shipyard check as a cluster admin, or grant {self.verb} on {self.resource}{where} to "
                f"{self.user or 'this identity'} (a Role or ClusterRole and its binding)")

    def check(self, name: str, status: str = cc.FAIL) -> Check:
        """The refusal as the line of check ``name`` (a 401 always fails: nothing can be read)."""
        return Check(name, cc.FAIL if self.code == 401 else status, self.detail(), self.fix())


def _user_in(body: Any) -> str:
    """The user a 403 Status names (``User "alice" cannot get ...``), or empty."""
    found = re.search(r'User "([^"]{1,200})"', str(body.get("message", "")) if isinstance(body, dict) else "")
    return f"user {found.group(1)}" if found else ""


def api_path(group_version: str, plural: str, namespace: str = "", name: str = "") -> str:
    """The REST path of a resource (``name``) or collection, each segment URL-quoted: ``v1`` is the
    core group (``/api/v1``), anything else ``/apis/GROUP/VERSION``."""
    base = ["api", "v1"] if group_version == "v1" else ["apis", *group_version.split("/")]
    segments = [*base, *(["namespaces", namespace] if namespace else []), plural, *([name] if name else [])]
    return "/" + "/".join(urllib.parse.quote(s, safe="") for s in segments)


def _body(raw: Any) -> Any:
    """An error answer's body: its JSON (a Status), else its text."""
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw or "")
    try:
        return json.loads(text)
    except ValueError:
        return text


class _Kube:
    """Raw reads of the Kubernetes API through a kubernetes ``ApiClient``: every name checked and
    quoted before it goes into a path; a 401/403 raised as :class:`Refused`."""

    def __init__(self, api: Any, timeout_s: float = CHECK_API_TIMEOUT_S) -> None:
        self.api = api
        self.host = str(api.configuration.host)
        self.timeout_s = timeout_s

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """The status and the answer (JSON, or the text when it is not JSON); a connection that
        fails is :class:`~shipyard.core.errors.UnreachableError`."""
        import urllib3
        from kubernetes.client.rest import ApiException

        from shipyard.serving.kserve.apply import call_deadline_s

        deadline = call_deadline_s(self.timeout_s)

        def late() -> UnreachableError:
            return UnreachableError("kubeconfig", f"the Kubernetes API at {self.host} gave no whole answer to {method} "
                                    f"{path} within {deadline:g} s", "check the API server's health (and a proxy "
                                    f"before it); shipyard check gives each API call {deadline:g} s in all "
                                    f"({ENV_CHECK_API_TIMEOUT}={self.timeout_s:g} s per read and the connect attempts)")

        try:
            data = call_within(deadline, self.api.call_api, path, method, body=body, auth_settings=["BearerToken"],
                               response_type="object", header_params={"Content-Type": "application/json",
                                                                      "Accept": "application/json"},
                               _return_http_data_only=True, on_timeout=late, owner=self)
        except ApiException as err:
            return int(err.status or 0), _body(err.body)
        except UnicodeDecodeError:  # the client decodes a 200's body as UTF-8
            return 200, "(a body that is not text)"
        except urllib3.exceptions.HTTPError as err:
            from shipyard.serving.kserve.apply import connection_problem

            raise UnreachableError("kubeconfig", f"cannot reach the Kubernetes API at {self.host}: "
                                   f"{connection_problem(err)}", "check the kubeconfig's server and the network") from None
        return 200, data

    def refused(self, code: int, verb: str, resource: str, namespace: str, body: Any) -> None:
        """Raise :class:`Refused` for a 401 or 403."""
        if code in (401, 403):
            raise Refused(self.host, code, verb, resource, namespace, body)

    def read(self, group_version: str, plural: str, namespace: str = "", name: str = "", *,
             field: str = "kubernetes API path", query: dict[str, str] | None = None) -> dict[str, Any] | None:
        """GET one object (``name``) or a list: the object, None when absent (404) or not an object;
        ``namespace`` and ``name`` are checked as Kubernetes names first (one line naming ``field``)."""
        from shipyard.core.k8s_names import check_namespace, check_object_name

        if namespace:
            check_namespace(namespace, field, "kubeflow")
        if name:
            (check_namespace if plural == "namespaces" else check_object_name)(name, field, "kubeflow")
        path = api_path(group_version, plural, namespace, name)
        code, data = self.call("GET", path + (f"?{urllib.parse.urlencode(query)}" if query else ""))
        group = group_version.rpartition("/")[0]
        self.refused(code, "get" if name else "list", plural + (f".{group}" if group else ""), namespace, data)
        return data if code == 200 and isinstance(data, dict) else None

    def discover(self, path: str) -> dict[str, Any] | None:
        """A discovery document (``/apis``, ``/apis/GROUP/VERSION``, segments quoted): None when absent."""
        quoted = "/".join(urllib.parse.quote(s, safe="") for s in path.split("/"))
        code, data = self.call("GET", quoted)
        self.refused(code, "get", f"the discovery path {path}", "", data)
        return data if code == 200 and isinstance(data, dict) else None


def probe(kube: _Kube) -> Check | None:
    """``GET /api`` before anything else: None when a Kubernetes API server answers (kind
    APIVersions); else the one ``kubernetes`` line that ends the Kubernetes part: the credentials
    refused (401/403), or something that is not an API server (a login page, another service's
    404, a body that is not JSON or JSON of another kind)."""
    try:
        code, data = kube.call("GET", "/api")
        kube.refused(code, "get", "the discovery path /api", "", data)
    except UnreachableError as err:
        return Check("kubernetes", cc.FAIL, f"{err.problem}: {UNCHECKED}", err.fix)
    except Refused as err:
        return Check("kubernetes", cc.FAIL, f"{err.detail()}: {UNCHECKED}", err.fix())
    if code == 200 and isinstance(data, dict) and data.get("kind") == "APIVersions":
        return None
    if isinstance(data, dict) and data.get("kind") == "Status" and code >= 500:
        return Check("kubernetes", cc.FAIL, f"the Kubernetes API at {kube.host} fails: GET /api answered {code} "
                     f"({' '.join(str(data.get('message') or '').split())[:160]}): {UNCHECKED}", "check the API server's health "
                     "(kubectl get --raw /readyz)")
    return Check("kubernetes", cc.FAIL, f"not a Kubernetes API server at {kube.host}: GET /api answered "
                 f"{_answer(code, data)}: {UNCHECKED}", "point the kubeconfig's cluster server at the API server "
                 "(kubectl config view --minify shows it; an API server answers GET /api with kind APIVersions)")


def _answer(code: int, data: Any) -> str:
    """What came back instead of an API server's answer, in words."""
    if isinstance(data, str):
        page = "<html" in data[:2000].lower() or data.lstrip()[:1] == "<"
        return f"{code} with {'an HTML page' if page else 'a body that is not JSON' if data.strip() else 'no body'}"
    kind = data.get("kind") if isinstance(data, dict) else None
    return f"{code} with JSON of kind {' '.join(str(kind).split())[:60]}" if kind else f"{code} with JSON that has no kind or apiVersion"


def _deploy_config(raw: str | None, namespace: str) -> Any:
    from shipyard.params.deploy import parse_deploy_config

    text = raw if raw else BY_NAME["deploy_config"].default
    return parse_deploy_config(text, name="shipyard-llm", namespace=namespace, model_uri=PLACEHOLDER_OCI)


def kfp_healthz(host: str, token: str = "", timeout_s: float = 10.0) -> Check:
    """KFP's release from ``GET /apis/v2beta1/healthz`` (``tag_name``)."""
    headers = {"Accept": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    url = f"{host.rstrip('/')}/apis/v2beta1/healthz"
    try:  # within timeout_s in all, however slowly KFP (or a proxy before it) answers
        status, body = http_request(url, deadline_s=timeout_s, headers=headers, field="--kfp-host")
        if status >= 400:
            raise ValueError(f"HTTP {status}")
        data = json.loads(body or b"{}")
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (urllib.error.URLError, OSError, ValueError) as err:
        return Check("kfp version", cc.FAIL, f"cannot read {url} ({getattr(err, 'reason', err)})",
                     "check --kfp-host and --kfp-token")
    except ShipyardError as err:  # an answer over the size cap
        return Check("kfp version", cc.FAIL, err.problem, "check --kfp-host")
    return cc.kfp_version_check(str(data.get("tag_name") or ""))


def deploy_config_check(deploy: Any, rollout: dict[str, Any] | None = None) -> Check:
    """The deploy config parsed (a bad one is an error before any check): what it deploys and the
    API resources it and its rollout need."""
    needs = ", ".join(name for name, *_ in cc.needed_resources(deploy, rollout))
    mode = "prefill/decode" if deploy.disaggregated else "aggregated"
    return Check("deploy config", cc.PASS, f"valid ({mode}, namespace {deploy.namespace}); needs {needs}")


def _cluster_internal(uri: str) -> bool:
    host = urllib.parse.urlparse(uri).hostname or ""
    return ".svc" in host or host.endswith(".cluster.local")


def outside_checks(chosen: dict[str, str], *, mlflow_url: str = "", registry: str = "",
                   insecure_registry: bool = False, check_s3: bool = True) -> list[Check]:
    """What can be checked without the cluster's Secrets: MLflow by the layout's URI (through
    ``mlflow_url``, e.g. a port-forward, with the in-cluster Host header), the registry without
    credentials, S3 from ``AWS_ENDPOINT_URL_S3`` and the keys in this environment."""
    uri = chosen["tracking_uri"]
    checks = []
    if not mlflow_url and _cluster_internal(uri):
        parts = (urllib.parse.urlparse(uri).hostname or "").split(".")
        forward = f"kubectl -n {parts[1] if len(parts) > 1 else chosen['pipeline_namespace']} port-forward svc/{parts[0]} 5000"
        checks.append(Check("mlflow api", cc.SKIP, f"not checked: {uri} is a name inside the cluster",
                            f"{forward}, then pass --mlflow-url http://127.0.0.1:5000"))
    else:
        checks.extend(cc.mlflow_checks(uri, mlflow_url, os.environ.get("MLFLOW_TRACKING_TOKEN", "")))
    reg = cc.registry_check(registry, None, insecure_registry)
    if reg.status == cc.FAIL and "needs credentials" in reg.detail:  # the credentials are in the cluster's Secret
        reg = Check("registry", cc.PASS, f"{registry} answers /v2/ and asks for credentials (those of the Secret "
                    "shipyard-registry are checked with a kubeconfig)")
    checks.append(reg)
    if check_s3:
        env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
        checks.append(cc.s3_check(env) if env.get("AWS_ENDPOINT_URL_S3") else Check(
            "s3", cc.SKIP, "not checked: no cluster Secret shipyard-s3 to read and no AWS_ENDPOINT_URL_S3 here",
            "export AWS_ENDPOINT_URL_S3 and the keys, or give --kubeconfig"))
    return checks


def cluster_checks(*, layout: str = "", cluster_config: str | None = None, kubeconfig: str | None = None,
                   context: str | None = None, deploy_config: str | None = None, kfp_host: str = "",
                   kfp_token: str = "", mlflow_url: str = "", registry: str = "", insecure_registry: bool = False,
                   check_s3: bool = True, kserve_namespace: str = "",
                   namespace: str = "") -> list[Check]:
    """Every check, in order; one :class:`Check` each (see the module doc). ``namespace``: the
    deploy target (default: the layout's ``serving_namespace``); ``kserve_namespace``: where KServe's
    controller runs (default: ``kserve``, then ``kubeflow``, where Kubeflow installs it). Every name
    that goes into an API path is checked before the first request (one line naming its field)."""
    from shipyard.serving.kserve.apply import api_client, has_cluster_credentials

    _refuse_credentials(kfp_host, mlflow_url, registry)
    timeout_s = check_api_timeout_s()
    cfg = load_cluster_config(cluster_config)
    chosen = cluster_layout(layout, cluster_config)
    if namespace:
        chosen = {**chosen, "serving_namespace": namespace}
    places = [kserve_namespace] if kserve_namespace else list(cc.KSERVE_NAMESPACES)
    check_names(chosen, cfg, places, namespace_flag=bool(namespace))
    settings = _deploy_config(deploy_config, chosen["serving_namespace"])
    deploy, rollout = settings.config, settings.rollout
    checks: list[Check] = [deploy_config_check(deploy, rollout)]
    checks.append(kfp_healthz(kfp_host, kfp_token) if kfp_host else
                  Check("kfp version", cc.SKIP, "no --kfp-host given", "pass --kfp-host to check KFP >= 2.17.0"))
    outside = {"mlflow_url": mlflow_url, "registry": registry, "insecure_registry": insecure_registry,
               "check_s3": check_s3}
    if not has_cluster_credentials(kubeconfig):
        checks.append(Check("kubernetes", cc.SKIP, "not checked: no kubeconfig (none given, KUBECONFIG unset, no "
                            f"~/.kube/config, not in a pod): {UNCHECKED}", "give --kubeconfig FILE or set KUBECONFIG"))
        return checks + outside_checks(chosen, **outside)
    missing = missing_kubeconfig_env(kubeconfig)
    if missing:
        checks.append(Check("kubernetes", cc.SKIP, f"not checked: {missing}: {UNCHECKED}",
                            "point KUBECONFIG at a kubeconfig file that exists, unset it, or give --kubeconfig FILE"))
        return checks + outside_checks(chosen, **outside)
    kube = _Kube(api_client(kubeconfig, context, timeout_s=timeout_s), timeout_s)
    stop = probe(kube)
    if stop is not None:
        return [*checks, stop, *outside_checks(chosen, **outside)]
    return checks + _Cluster(kube, chosen, cfg, deploy, rollout, places, outside).checks()


def missing_kubeconfig_env(kubeconfig: str | None) -> str:
    """Why there is no kubeconfig to load when ``KUBECONFIG`` (no ``--kubeconfig`` given) names
    only files that do not exist (``KUBECONFIG names /x/config, which does not exist``), else "".
    kubectl then reads nothing either, not ``~/.kube/config``; an explicit ``--kubeconfig`` that
    does not exist stays an error."""
    if kubeconfig:
        return ""
    paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if not paths or any(os.path.exists(os.path.expanduser(p)) for p in paths):
        return ""
    return f"KUBECONFIG names {', '.join(paths)}, which {'does' if len(paths) == 1 else 'do'} not exist"


def _refuse_credentials(kfp_host: str, mlflow_url: str, registry: str) -> None:
    """Credentials in the URL options are refused before anything is contacted."""
    from shipyard.core.errors import refuse_credentials

    refuse_credentials(kfp_host, "--kfp-host", "drop them; pass the token with --kfp-token")
    refuse_credentials(mlflow_url, "--mlflow-url", BY_NAME["tracking_uri"].credential_fix + " (check reads it from there)")
    if registry:
        from shipyard.oci.client import check_registry

        check_registry(registry, "--registry")


def check_names(chosen: dict[str, str], cfg: dict[str, Any], places: list[str], *, namespace_flag: bool = False) -> None:
    """Every namespace and object name ``check`` puts into an API path, checked against Kubernetes'
    own rules (a DNS-1123 label for a namespace, a DNS-1123 subdomain for a Secret or
    ServiceAccount) before any request: a bad one is one line naming its flag or cluster-config key."""
    from shipyard.core.k8s_names import check_namespace, check_object_name

    lay = f"cluster_config layouts.{chosen['name']}"
    check_namespace(chosen["serving_namespace"], "-n/--namespace" if namespace_flag else f"{lay}.serving_namespace",
                    "shipyard")
    check_namespace(chosen["pipeline_namespace"], f"{lay}.pipeline_namespace", "pipeline_namespace: kubeflow")
    check_object_name(chosen["service_account"], f"{lay}.service_account", "service_account: pipeline-runner")
    for name, entry in (cfg.get("layouts") or {}).items():
        for key, value in (entry or {}).items():
            if key.endswith("namespace"):
                check_namespace(str(value), f"cluster_config layouts.{name}.{key}", f"{key}: kubeflow")
    for secret in cfg.get("secrets") or {}:
        check_object_name(str(secret), "cluster_config secrets", "shipyard-mlflow")
    for ns in places:
        check_namespace(ns, "--kserve-namespace", "kserve")


class _Cluster:
    """The checks that read the cluster, in order, each guarded: a refusal (401/403) is the one
    ``not allowed`` line of the check that met it, never "missing"."""

    def __init__(self, kube: _Kube, chosen: dict[str, str], cfg: dict[str, Any], deploy: Any,
                 rollout: dict[str, Any] | None, places: list[str], outside: dict[str, Any]) -> None:
        self.kube, self.chosen, self.cfg, self.deploy, self.rollout = kube, chosen, cfg, deploy, rollout
        self.places, self.outside = places, outside
        self.pods_ns = chosen["pipeline_namespace"]

    def checks(self) -> list[Check]:
        """Every cluster check; a refusal or a bad name ends only the check that met it."""
        sections: list[tuple[str, Any, str]] = [
            ("kserve version", self.kserve, cc.FAIL), ("crds", self.crds, cc.FAIL), ("secrets", self.secrets, cc.FAIL),
            ("mlflow name", self.mlflow_name, cc.FAIL), ("mlflow api", self.mlflow, cc.FAIL),
            ("registry", self.registry, cc.FAIL), ("s3", self.s3, cc.FAIL), ("gpu nodes", self.gpu_nodes, cc.WARN),
            ("node disk", self.node_disk, cc.WARN), ("deploy permissions", self.permissions, cc.WARN)]
        out: list[Check] = []
        for name, section, refused in sections:
            try:
                out.extend(section())
            except Refused as err:
                out.append(err.check(name, refused))
            except UnreachableError:
                raise
            except ShipyardError as err:
                out.append(Check(name, cc.FAIL, f"{err.field}: {err.problem}", err.fix))
        return out

    def secret(self, ns: str, name: str) -> dict[str, Any] | None:
        """A Secret; a refusal raises (:class:`Refused`)."""
        return self.kube.read("v1", "secrets", ns, name, field=f"Secret {ns}/{name}")

    def secret_if_readable(self, ns: str, name: str) -> dict[str, Any] | None:
        """A Secret, or None when absent or not readable (the ``secrets`` line says which)."""
        try:
            return self.secret(ns, name)
        except Refused:
            return None

    def kserve(self) -> list[Check]:
        """KServe's controller Deployment, where KServe or Kubeflow installs it, and its release."""
        refusals: list[Refused] = []
        for ns in self.places:
            try:
                found = self.kube.read("apps/v1", "deployments", ns, cc.KSERVE_CONTROLLER, field="--kserve-namespace")
            except Refused as err:
                refusals.append(err)
                continue
            if found is not None:
                image = (((found.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or [{}]
                version = cc.kserve_version_check(str(image[0].get("image", "")), self.deploy)
                version.detail += f" (controller in namespace {ns})"
                return [version]
        if refusals:
            raise refusals[0]
        return [Check("kserve version", cc.WARN, f"no Deployment {cc.KSERVE_CONTROLLER} in namespace "
                      f"{' or '.join(self.places)}", "install KServe v0.20, or give --kserve-namespace")]

    def crds(self) -> list[Check]:
        """The API resources the deploy options need, from discovery."""
        return cc.resource_checks(cc.served_resources(self.kube.discover), self.deploy, self.rollout)

    def secrets(self) -> list[Check]:
        """The layout's namespaces, the contract Secrets where the pods run, the attestation key pair."""
        others = sorted({v for lay in (self.cfg.get("layouts") or {}).values() for k, v in (lay or {}).items()
                         if k.endswith("namespace")} | {self.chosen["serving_namespace"]})

        def read(ns: str, name: str) -> dict[str, Any] | None:
            return self.secret(ns, name) if ns == self.pods_ns else self.secret_if_readable(ns, name)

        refused: dict[str, Refused] = {}

        def exists(ns: str) -> bool:  # a namespace admin may not get Namespaces: that namespace's line says so
            try:
                return self.kube.read("v1", "namespaces", name=ns, field=f"namespace {ns}") is not None
            except Refused as err:
                if err.code == 401:
                    raise
                refused[f"namespace {ns}"] = err
                return True

        checks = [refused[c.name].check(c.name) if c.name in refused else c
                  for c in cc.secret_checks(read, exists, self.chosen, self.cfg, others)]
        keys = cc.attestation_keys_check(self.secret_if_readable, self.pods_ns)
        return checks + ([keys] if keys is not None else [])

    def tracking_uri(self) -> str:
        """MLFLOW_TRACKING_URI as the pods get it (the layout's when the Secret is not readable)."""
        return cc.tracking_uri_of(self.secret_if_readable, self.chosen)

    def mlflow_name(self) -> list[Check]:
        """The tracking URI's host names an existing Service."""
        def service_exists(ns: str, name: str) -> bool:
            field = "MLFLOW_TRACKING_URI's host (Secret shipyard-mlflow)"
            return self.kube.read("v1", "services", ns, name, field=field) is not None

        uri = self.tracking_uri()
        skip = cc.credentialed_uri_skip("mlflow name", uri, self.pods_ns)
        if skip:
            return [skip]
        named = cc.mlflow_name_check(uri, self.pods_ns, service_exists)
        service = cc.mlflow_service_of(uri, self.pods_ns)
        if named.status != cc.PASS or service is None:
            return [named]
        ns, name = service  # the manifests' Deployment is named like its Service; a managed MLflow has none here
        try:
            found = self.kube.read("apps/v1", "deployments", ns, name, field="MLflow's Deployment")
        except Refused as err:  # the identity may not read Deployments there: nothing to say about the image
            if err.code == 401:
                raise
            found = None
        return [named] + ([cc.mlflow_image_check(found, ns, name)] if found is not None else [])

    def mlflow(self) -> list[Check]:
        """MLflow's API and artifact round-trip with the Secret's token."""
        data = (self.secret_if_readable(self.pods_ns, "shipyard-mlflow") or {}).get("data") or {}
        token = base64.b64decode(data["MLFLOW_TRACKING_TOKEN"]).decode() if data.get("MLFLOW_TRACKING_TOKEN") else ""
        uri = self.tracking_uri()
        skip = cc.credentialed_uri_skip("mlflow api", uri, self.pods_ns)
        return [skip] if skip else cc.mlflow_checks(uri, self.outside["mlflow_url"], token)

    def registry(self) -> list[Check]:
        """The registry with the credentials of shipyard-registry."""
        auth = cc.decode_dockerconfig(self.secret(self.pods_ns, "shipyard-registry")) if self.outside["registry"] else None
        return [cc.registry_check(self.outside["registry"], auth, self.outside["insecure_registry"])]

    def s3(self) -> list[Check]:
        """The object store of shipyard-s3."""
        if not self.outside["check_s3"]:
            return []
        found = self.secret(self.pods_ns, "shipyard-s3")
        if not found:
            return [Check("s3", cc.SKIP, "no Secret shipyard-s3 to read an endpoint from")]
        env = {k: base64.b64decode(v).decode(errors="replace") for k, v in (found.get("data") or {}).items()}
        skip = cc.credentialed_uri_skip("s3", env.get("AWS_ENDPOINT_URL_S3", ""), self.pods_ns, "AWS_ENDPOINT_URL_S3")
        return [skip or cc.s3_check(env)]

    def nodes(self, selector: dict[str, Any] | None = None) -> list[dict[str, Any]] | None:
        """The nodes (with a label selector), None when they cannot be listed."""
        query = {"labelSelector": ",".join(f"{k}={v}" for k, v in selector.items())} if selector else None
        found = self.kube.read("v1", "nodes", query=query)
        return found.get("items", []) if found is not None else None

    def gpu_nodes(self) -> list[Check]:
        """Nodes with the GPU labels and the accelerator."""
        gpu = self.cfg.get("gpu") or {}
        return [cc.gpu_node_check(self.nodes(gpu.get("node_selector") or {}), gpu)]

    def node_disk(self) -> list[Check]:
        """A node with room for the steps' ephemeral storage."""
        return [cc.disk_node_check(self.nodes(), ephemeral_storage(self.cfg))]

    def permissions(self) -> list[Check]:
        """What the deploy identity may do, by SubjectAccessReviews."""
        pods_ns, account = self.pods_ns, self.chosen["service_account"]
        user = f"system:serviceaccount:{pods_ns}:{account}"
        groups = ["system:serviceaccounts", "system:authenticated", f"system:serviceaccounts:{pods_ns}"]

        def review(verb: str, group: str, resource: str, ns: str) -> cc.Answer:
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                    "spec": {"user": user, "groups": groups, "resourceAttributes": {
                        "namespace": ns, "verb": verb, "group": group, "resource": resource}}}
            code, data = self.kube.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body)
            self.kube.refused(code, "create", "subjectaccessreviews.authorization.k8s.io", "", data)
            if code != 200 or not isinstance(data, dict):
                raise ShipyardError("kubeconfig", f"cannot create a SubjectAccessReview ({code})",
                                    "run shipyard check as a cluster admin (it asks what the deploy identity may do)")
            return cc.review_answer(data)

        try:
            return cc.permission_checks(review, self.chosen["serving_namespace"], f"ServiceAccount {pods_ns}/{account}",
                                        self.chosen["name"], self.deploy, self.rollout)
        except ShipyardError as err:
            return [Check("deploy permissions", cc.WARN, err.problem, err.fix)]
