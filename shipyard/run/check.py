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

Without a kubeconfig (none given, no ``$KUBECONFIG``, no ``~/.kube/config``, not in a pod), or
with an API server that does not answer, the Kubernetes part is one line (``SKIP kubernetes: not
checked: no kubeconfig`` or ``FAIL kubernetes: cannot reach ...``) and what needs no cluster is
still checked: the deploy config, KFP, MLflow (through ``--mlflow-url``), the registry and S3 (from
``AWS_*`` in this environment).
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from shipyard.core.errors import ShipyardError, UnreachableError
from shipyard.pipelines.platform import cluster_layout, ephemeral_storage, load_cluster_config
from shipyard.serving import cluster_check as cc
from shipyard.serving.cluster_check import Check

_PLACEHOLDER_OCI = "oci://check.invalid/model@sha256:" + "0" * 64


class _Kube:
    """Raw reads of the Kubernetes API through a kubernetes ``ApiClient``."""

    def __init__(self, api: Any) -> None:
        self.api = api

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        import urllib3
        from kubernetes.client.rest import ApiException

        try:
            data = self.api.call_api(path, method, body=body, auth_settings=["BearerToken"], response_type="object",
                                     header_params={"Content-Type": "application/json", "Accept": "application/json"},
                                     _return_http_data_only=True)
        except ApiException as err:
            return int(err.status or 0), None
        except urllib3.exceptions.HTTPError as err:
            from shipyard.serving.kserve.apply import connection_problem

            host = self.api.configuration.host
            raise UnreachableError("kubeconfig", f"cannot reach the Kubernetes API at {host}: {connection_problem(err)}",
                                   "check the kubeconfig's server and the network") from None
        return 200, data

    def get(self, path: str) -> Any:
        code, data = self.call("GET", path)
        return data if code == 200 else None


def _deploy_config(raw: str | None, namespace: str) -> Any:
    from shipyard.params.deploy import parse_deploy_config
    from shipyard.params.pipeline import BY_NAME

    text = raw if raw else BY_NAME["deploy_config"].default
    return parse_deploy_config(text, name="shipyard-llm", namespace=namespace, model_uri=_PLACEHOLDER_OCI)


def kfp_healthz(host: str, token: str = "", timeout_s: float = 10.0) -> Check:
    """KFP's release from ``GET /apis/v2beta1/healthz`` (``tag_name``)."""
    headers = {"Accept": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{host.rstrip('/')}/apis/v2beta1/healthz", headers=headers),
                                    timeout=timeout_s) as resp:  # noqa: S310 - http(s) host given by the user
            data = json.loads(resp.read() or b"{}")
    except (urllib.error.URLError, OSError, ValueError) as err:
        return Check("kfp version", cc.FAIL, f"cannot read {host}/apis/v2beta1/healthz ({getattr(err, 'reason', err)})",
                     "check --kfp-host and --kfp-token")
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
    controller runs (default: ``kserve``, then ``kubeflow``, where Kubeflow installs it)."""
    from shipyard.core.errors import refuse_credentials
    from shipyard.params.checks import CREDENTIAL_FIXES
    from shipyard.serving.kserve.apply import api_client, has_cluster_credentials

    refuse_credentials(kfp_host, "--kfp-host", "drop them; pass the token with --kfp-token")
    refuse_credentials(mlflow_url, "--mlflow-url", CREDENTIAL_FIXES["tracking_uri"] + " (check reads it from there)")
    if registry:
        from shipyard.oci.client import check_registry

        check_registry(registry, "--registry")
    cfg = load_cluster_config(cluster_config)
    chosen = cluster_layout(layout, cluster_config)
    if namespace:
        chosen = {**chosen, "serving_namespace": namespace}
    settings = _deploy_config(deploy_config, chosen["serving_namespace"])
    deploy, rollout = settings.config, settings.rollout
    checks: list[Check] = [deploy_config_check(deploy, rollout)]
    checks.append(kfp_healthz(kfp_host, kfp_token) if kfp_host else
                  Check("kfp version", cc.SKIP, "no --kfp-host given", "pass --kfp-host to check KFP >= 2.17.0"))
    outside = {"mlflow_url": mlflow_url, "registry": registry, "insecure_registry": insecure_registry,
               "check_s3": check_s3}
    if not has_cluster_credentials(kubeconfig):
        checks.append(Check("kubernetes", cc.SKIP, "not checked: no kubeconfig (none given, KUBECONFIG unset, no "
                            "~/.kube/config, not in a pod): KServe, CRDs, Secrets, nodes and permissions unchecked",
                            "give --kubeconfig FILE or set KUBECONFIG"))
        return checks + outside_checks(chosen, **outside)
    kube = _Kube(api_client(kubeconfig, context, timeout_s=15.0))
    try:
        kube.call("GET", "/version")
    except UnreachableError as err:
        checks.append(Check("kubernetes", cc.FAIL, f"{err.problem}: KServe, CRDs, Secrets, nodes and permissions "
                            "unchecked", err.fix))
        return checks + outside_checks(chosen, **outside)

    checks.append(_kserve_version(kube, kserve_namespace, deploy))
    checks.extend(cc.resource_checks(cc.served_resources(kube.get), deploy, rollout))
    checks.extend(_secret_checks(kube, chosen, cfg, mlflow_url=mlflow_url, registry=registry,
                                 insecure_registry=insecure_registry, check_s3=check_s3))
    checks.extend(_node_checks(kube, cfg))
    checks.extend(_permissions(kube, chosen, deploy, rollout))
    return checks


def _kserve_version(kube: _Kube, kserve_namespace: str, deploy: Any) -> Check:
    """KServe's version from its controller's image (looked for in ``kserve_namespace``, else in
    :data:`cc.KSERVE_NAMESPACES`), against what the deploy config needs."""
    places = [kserve_namespace] if kserve_namespace else list(cc.KSERVE_NAMESPACES)
    found = next(((ns, c) for ns in places
                  if (c := kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{cc.KSERVE_CONTROLLER}")) is not None),
                 None)
    if found is None:
        return Check("kserve version", cc.WARN, f"no Deployment {cc.KSERVE_CONTROLLER} in namespace "
                     f"{' or '.join(places)}", "install KServe v0.20, or give --kserve-namespace")
    where, controller = found
    image = controller["spec"]["template"]["spec"]["containers"][0].get("image", "")
    version = cc.kserve_version_check(image, deploy)
    version.detail += f" (controller in namespace {where})"
    return version


def _secret_checks(kube: _Kube, chosen: dict[str, Any], cfg: dict[str, Any], *, mlflow_url: str, registry: str,
                   insecure_registry: bool, check_s3: bool) -> list[Check]:
    """The checks that read the cluster's Secrets: the contract Secrets in every layout namespace, the
    attestation keys, MLflow (its Service name, then the server with the Secret's token), the
    registry with the Secret's auth and, with ``check_s3``, S3 with the Secret's endpoint."""
    checks: list[Check] = []

    def read_secret(ns: str, name: str) -> dict[str, Any] | None:
        return kube.get(f"/api/v1/namespaces/{ns}/secrets/{name}")

    others = sorted({v for lay in (cfg.get("layouts") or {}).values() for k, v in lay.items() if k.endswith("namespace")}
                    | {chosen["serving_namespace"]})
    checks.extend(cc.secret_checks(read_secret, lambda ns: kube.get(f"/api/v1/namespaces/{ns}") is not None,
                                   chosen, cfg, others))
    keys = cc.attestation_keys_check(read_secret, chosen["pipeline_namespace"])
    if keys is not None:
        checks.append(keys)
    uri = cc.tracking_uri_of(read_secret, chosen)
    checks.append(cc.mlflow_name_check(uri, chosen["pipeline_namespace"],
                                       lambda ns, name: kube.get(f"/api/v1/namespaces/{ns}/services/{name}") is not None))
    token = ((read_secret(chosen["pipeline_namespace"], "shipyard-mlflow") or {}).get("data") or {}).get(
        "MLFLOW_TRACKING_TOKEN", "")
    checks.extend(cc.mlflow_checks(uri, mlflow_url, base64.b64decode(token).decode() if token else ""))
    auth = cc.decode_dockerconfig(read_secret(chosen["pipeline_namespace"], "shipyard-registry"))
    checks.append(cc.registry_check(registry, auth, insecure_registry))
    if check_s3:
        s3 = read_secret(chosen["pipeline_namespace"], "shipyard-s3")
        env = {k: base64.b64decode(v).decode() for k, v in ((s3 or {}).get("data") or {}).items()}
        checks.append(cc.s3_check(env) if s3 else Check("s3", cc.SKIP, "no Secret shipyard-s3 to read an endpoint from"))
    return checks


def _node_checks(kube: _Kube, cfg: dict[str, Any]) -> list[Check]:
    """The nodes: GPU nodes matching the cluster config's ``gpu.node_selector``, and nodes with the
    ephemeral storage the model-holding steps request."""
    code, nodes = kube.call("GET", "/api/v1/nodes?labelSelector=" + ",".join(
        f"{k}={v}" for k, v in ((cfg.get("gpu") or {}).get("node_selector") or {}).items()))
    gpu = cc.gpu_node_check((nodes or {}).get("items", []) if code == 200 else None, cfg.get("gpu") or {})
    code, nodes = kube.call("GET", "/api/v1/nodes")
    return [gpu, cc.disk_node_check((nodes or {}).get("items", []) if code == 200 else None, ephemeral_storage(cfg))]


def _permissions(kube: _Kube, chosen: dict[str, Any], deploy: Any, rollout: dict[str, Any]) -> list[Check]:
    """What the pipeline's ServiceAccount may do, by SubjectAccessReviews (:func:`cc.permission_checks`);
    a WARN when the reviews cannot be created."""
    user = f"system:serviceaccount:{chosen['pipeline_namespace']}:{chosen['service_account']}"

    def review(verb: str, group: str, resource: str, ns: str) -> bool:
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": user, "groups": ["system:serviceaccounts", "system:authenticated",
                                                  f"system:serviceaccounts:{chosen['pipeline_namespace']}"],
                         "resourceAttributes": {"namespace": ns, "verb": verb, "group": group, "resource": resource}}}
        code, data = kube.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body)
        if code != 200:
            raise ShipyardError("kubeconfig", f"cannot create a SubjectAccessReview ({code})",
                                "run shipyard check as a cluster admin (it asks what the deploy identity may do)")
        return bool((data.get("status") or {}).get("allowed"))

    try:
        who = f"ServiceAccount {chosen['pipeline_namespace']}/{chosen['service_account']}"
        return cc.permission_checks(review, chosen["serving_namespace"], who, chosen["name"], deploy, rollout)
    except ShipyardError as err:
        return [Check("deploy permissions", cc.WARN, err.problem, err.fix)]
