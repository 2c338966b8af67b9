"""Checks of a cluster before any GPU is spent: what ``shipyard check`` runs once against a
cluster (:mod:`shipyard.run.check`) and what the pipeline's pre-flight step runs from its pod.

Each check is one :class:`Check`: a name, ``pass``/``fail``/``warn``/``skip``, one line saying
what was found and, unless it passed, the fix. Nothing here changes the cluster: reads,
discovery, ``SubjectAccessReview`` / ``SelfSubjectAccessReview``, one read-only MLflow API call
and MLflow's artifact round-trip (a throwaway run and file, deleted after; the experiment
``shipyard-check`` stays).

The inputs are explicit (a kubernetes ``ApiClient``, the layout from ``pipelines/cluster.yaml``,
the contract's Secrets, the deploy config), so the same functions serve the CLI and a pod.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from shipyard.core.contract import ATTESTATION_SECRET, ATTESTATION_TRUST_SECRET
from shipyard.core.errors import ShipyardError, UnreachableError, refuse_credentials
from shipyard.core.net import call_within, http_request
from shipyard.core.redact import redact
from shipyard.models import s3 as s3store
from shipyard.models.s3 import ENV_ENDPOINT, refuse_endpoint_credentials
from shipyard.oci import attestation as att
from shipyard.serving.kserve.access import deploy_kinds, needed_access
from shipyard.serving.kserve.apply import connection_problem
from shipyard.serving.kserve.config import API_TIMEOUT_S, EPP_CONFIG_APIS, epp_config_api, parse_quantity
from shipyard.tracking.tracker import TRACKING_CREDENTIALS_FIX

PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"
KFP_MINIMUM = (2, 17, 0)  # artifact OneOf (dsl.OneOf over the eval backends) needs KFP 2.17.0
KSERVE_NAMESPACE = "kserve"
#: where KServe's controller runs: its own install, and Kubeflow's (kubeflow/manifests installs it in kubeflow)
KSERVE_NAMESPACES = (KSERVE_NAMESPACE, "kubeflow")
#: KServe minor -> the Kubeflow release that ships it (kubeflow/manifests' README), named in the line
KUBEFLOW_KSERVE = {(0, 16): "Kubeflow 26.03"}
KSERVE_CONTROLLER = "kserve-controller-manager"
TEMPLATE_VALUE = "CHANGE_ME"


@dataclass
class Check:
    """One check's verdict: ``status`` is pass, fail, warn or skip; ``fix`` says what to do."""

    name: str
    status: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        """``PASS name: detail`` (and ``(fix: ...)`` unless it passed): one line, redacted
        (:func:`shipyard.core.redact.redact`: the pre-flight prints it to the pod's log as it is)."""
        fix = f" (fix: {self.fix})" if self.fix and self.status != PASS else ""
        return redact(f"{self.status.upper():4} {self.name}: {self.detail}{fix}")

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def _version(text: str) -> tuple[int, ...] | None:
    found = re.search(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(g or 0) for g in found.groups()) if found else None


# -- versions ------------------------------------------------------------------------------------

def kfp_version_check(tag: str) -> Check:
    """KFP's release (``tag_name`` of ``/apis/v2beta1/healthz``) against the 2.17.0 minimum."""
    version = _version(tag)
    if version is None:
        return Check("kfp version", WARN, f"KFP reported no release ({tag!r})", "check the KFP API server's version")
    shown = ".".join(map(str, version))
    if version < KFP_MINIMUM:
        return Check("kfp version", FAIL, f"KFP {shown} is older than 2.17.0: the compiled pipelines use artifact "
                     "OneOf (one output over the vllm and hf eval branches), which older backends refuse",
                     "upgrade Kubeflow Pipelines to 2.17.0 or newer (manifests/kfp)")
    return Check("kfp version", PASS, f"KFP {shown} (2.17.0 or newer)")


def kserve_version_check(image_or_version: str, deploy: Any = None) -> Check:
    """The KServe release against the known-bad ones, for the chosen deploy options."""
    version = _version(image_or_version.rsplit(":", 1)[-1] if ":" in image_or_version else image_or_version)
    if version is None:
        return Check("kserve version", WARN, f"cannot tell the KServe release from {image_or_version!r}",
                     "use KServe v0.20 (see README, Install on a cluster)")
    shown = "v" + ".".join(map(str, version))
    minor = version[:2]
    pd = bool(deploy is not None and getattr(deploy, "disaggregated", False))
    tp = int(getattr(deploy, "tensor_parallel", 1) or 1) if deploy is not None else 1
    if minor < (0, 16):
        return Check("kserve version", FAIL, f"KServe {shown} has no LLMInferenceService",
                     "install KServe v0.20 (v0.17 at least)")
    if minor == (0, 16):
        shipped = f" (the KServe {KUBEFLOW_KSERVE[minor]} ships)" if minor in KUBEFLOW_KSERVE else ""
        return Check("kserve version", FAIL, f"KServe {shown}{shipped} serves LLMInferenceService v1alpha1 only; "
                     "shipyard renders v1alpha2", "upgrade KServe to v0.20 (v0.17 at least)")
    scheduler = _scheduler_config_api(deploy)
    if scheduler is not None and minor in EPP_CONFIG_APIS and scheduler not in EPP_CONFIG_APIS[minor][1]:
        picker, accepted = EPP_CONFIG_APIS[minor]
        return Check("kserve version", FAIL, f"KServe {shown}'s endpoint picker ({picker}) decodes only "
                     f"{', '.join(accepted)}; the deploy config's scheduler config is {scheduler}, so the scheduler "
                     "would not start", "upgrade KServe to v0.20, or drop router.scheduler's preset/config")
    if minor == (0, 17):
        detail = (f"KServe {shown}: its single-node presets ignore VLLM_ADDITIONAL_ARGS, so the P/D KV transfer "
                  "and the planner's vLLM flags are silently dropped")
        return Check("kserve version", FAIL if pd else WARN, detail, "upgrade KServe to v0.20")
    if minor in ((0, 18), (0, 19)):
        detail = f"KServe {shown}: tensor parallelism silently stays 1 (fixed upstream in v0.20)"
        if tp > 1:
            return Check("kserve version", FAIL, f"{detail}; the deploy config asks for tensor_parallel={tp}",
                         "upgrade KServe to v0.20, or deploy with tensor_parallel 1")
        return Check("kserve version", WARN, detail, "upgrade KServe to v0.20 before using tensor_parallel > 1")
    return Check("kserve version", PASS, f"KServe {shown}")


def _scheduler_config_api(deploy: Any) -> str | None:
    """The apiVersion of the EndpointPickerConfig the deploy config renders inline (a routing preset's
    or the user's), None when KServe's own default is used."""
    options = getattr(deploy, "scheduler_options", None) or {}
    if isinstance(options.get("config"), dict):
        return str(options["config"].get("apiVersion"))
    return epp_config_api() if options.get("preset") else None


# -- what the chosen options need ----------------------------------------------------------------

#: (check name, API group, version, plural, why) of each resource an option needs
LLMISVC = ("LLMInferenceService v1alpha2", "serving.kserve.io", "v1alpha2", "llminferenceservices",
           "shipyard renders serving.kserve.io/v1alpha2")


def needed_resources(deploy: Any, rollout: dict[str, Any] | None = None) -> list[tuple[str, str, str, str, str]]:
    """The API resources (CRDs) the deploy options (and a canary ``rollout``) need,
    LLMInferenceService v1alpha2 first."""
    need = [LLMISVC, ("LLMInferenceServiceConfig v1alpha2", "serving.kserve.io", "v1alpha2",
                      "llminferenceserviceconfigs", "shipyard's presets (manifests/base/presets)")]
    if deploy is None:
        return need
    router = getattr(deploy, "router", None)
    if router is not None and router.gateway == "managed":
        need += [("Gateway API Gateway", "gateway.networking.k8s.io", "v1", "gateways", "router.gateway managed"),
                 ("Gateway API HTTPRoute", "gateway.networking.k8s.io", "v1", "httproutes", "router.gateway managed")]
    if router is not None and router.has_scheduler:
        need.append(("InferencePool", "inference.networking.k8s.io", "v1", "inferencepools",
                     "the llm-d scheduler (router.scheduler)"))
    if getattr(deploy, "objectives", None):
        need.append(("InferenceObjective", "inference.networking.x-k8s.io", "v1alpha2", "inferenceobjectives",
                     "objectives"))
    if deploy.nodes > 1:
        need.append(("LeaderWorkerSet", "leaderworkerset.x-k8s.io", "v1", "leaderworkersets",
                     f"{deploy.nodes} pods per replica (multi-node preset)"))
    if (rollout or {}).get("strategy") == "canary" and not any(n[3] == "httproutes" for n in need):
        need.append(("Gateway API HTTPRoute", "gateway.networking.k8s.io", "v1", "httproutes",
                     "rollout.strategy canary (the route's weights)"))
    scaling = getattr(deploy, "scaling", None)
    if scaling is not None and scaling.mode == "wva":
        need.append(("WVA VariantAutoscaling", "llmd.ai", "v1alpha1", "variantautoscalings",
                     "scaling.mode wva (llm-d workload-variant-autoscaler)"))
    if scaling is not None and (scaling.mode == "keda" or getattr(scaling, "actuator", "") == "keda"):
        need.append(("KEDA ScaledObject", "keda.sh", "v1alpha1", "scaledobjects", "KEDA scaling"))
    return need


INSTALL_HINT = {
    "serving.kserve.io": "install KServe v0.20 with its LLMInferenceService CRDs",
    "gateway.networking.k8s.io": "install the Gateway API v1.5 CRDs and a Gateway implementation",
    "inference.networking.k8s.io": "install the Gateway API Inference Extension v1.5 CRDs",
    "inference.networking.x-k8s.io": "install the Gateway API Inference Extension v1.5 CRDs (InferenceObjective)",
    "leaderworkerset.x-k8s.io": "install LeaderWorkerSet v0.8",
    "llmd.ai": "install llm-d's workload-variant-autoscaler (WVA) or set scaling.mode keda/none",
    "keda.sh": "install KEDA 2.x or choose another scaling mode",
}


def served_resources(get: Callable[[str], Any]) -> dict[str, dict[str, set[str]]]:
    """group -> version -> served plural resources, from discovery (``get(path)``)."""
    out: dict[str, dict[str, set[str]]] = {}
    for group in (get("/apis") or {}).get("groups", []):
        for version in group.get("versions", []):
            resources = (get(f"/apis/{version['groupVersion']}") or {}).get("resources", [])
            out.setdefault(group["name"], {})[version["version"]] = {r["name"] for r in resources}
    return out


def resource_checks(served: dict[str, dict[str, set[str]]], deploy: Any,
                    rollout: dict[str, Any] | None = None) -> list[Check]:
    """One check per API resource the options need: served in the needed version or not."""
    checks = []
    for name, group, version, plural, why in needed_resources(deploy, rollout):
        versions = served.get(group, {})
        if plural in versions.get(version, set()):
            checks.append(Check(f"crd {name}", PASS, f"{group}/{version} {plural} is served ({why})"))
            continue
        other = sorted(v for v, plurals in versions.items() if plural in plurals)
        detail = (f"{group} serves {plural} only as {', '.join(other)}, not {version} ({why})" if other
                  else f"{plural}.{group} is not served: its CRD is missing ({why})")
        fix = ("upgrade KServe to v0.20 (v1alpha2 is served from v0.17)" if group == "serving.kserve.io" and other
               else INSTALL_HINT.get(group, "install the CRD"))
        checks.append(Check(f"crd {name}", FAIL, detail, fix))
    return checks


# -- namespaces, Secrets, identity -----------------------------------------------------------------

def secret_checks(read_secret: Callable[[str, str], dict[str, Any] | None], namespace_exists: Callable[[str], bool],
                  layout: dict[str, str], contract: dict[str, Any], elsewhere: list[str]) -> list[Check]:
    """The namespaces of the layout, then each contract Secret and key where the pipeline pods run.

    ``read_secret(ns, name)`` gives the Secret (``None`` when absent); ``elsewhere``: namespaces to
    look in when a Secret is missing, to name the wrong namespace it was put in."""
    pods_ns, serving_ns = layout["pipeline_namespace"], layout["serving_namespace"]
    checks = []
    for role, ns in (("pipeline pods", pods_ns), ("deploy target", serving_ns)):
        if namespace_exists(ns):
            checks.append(Check(f"namespace {ns}", PASS, f"exists ({role}, layout {layout['name']})"))
        else:
            checks.append(Check(f"namespace {ns}", FAIL, f"does not exist; the {role} of layout {layout['name']} "
                                "are there", f"kubectl apply -k manifests/overlays/{layout['name']}"))
    required = {"shipyard-mlflow": {"MLFLOW_TRACKING_URI"}, "shipyard-s3": set(), "hf-token": set()}
    for secret, entry in (contract.get("secrets") or {}).items():
        keys = list((entry.get("env") or {}).keys())
        found = read_secret(pods_ns, secret)
        name = f"secret {pods_ns}/{secret}"
        if found is None:
            where = [ns for ns in elsewhere if ns != pods_ns and read_secret(ns, secret) is not None]
            if where:
                checks.append(Check(name, FAIL, f"is in namespace {', '.join(where)}, but the pipeline pods run in "
                                    f"{pods_ns} and mount it from there (absent: every key optional, silently empty)",
                                    f"create it in {pods_ns}: kubectl apply -k manifests/overlays/{layout['name']}"))
            else:
                status = FAIL if required.get(secret) else WARN
                checks.append(Check(name, status, f"is missing ({entry.get('needed_for', '')})".strip(),
                                    f"kubectl -n {pods_ns} create secret generic {secret} "
                                    + " ".join(f"--from-literal={k}=..." for k in keys)))
            continue
        data = {k: base64.b64decode(v).decode(errors="replace") for k, v in (found.get("data") or {}).items()}
        missing = [k for k in keys if k not in data]
        templates = [k for k in keys if data.get(k, "").strip() == TEMPLATE_VALUE]
        if missing:
            must = required.get(secret) or set(keys)
            status = FAIL if set(missing) & must else WARN
            checks.append(Check(name, status, f"lacks key {', '.join(missing)}",
                                f"kubectl -n {pods_ns} patch secret {secret} --type merge -p "
                                f"'{{\"stringData\": {{\"{missing[0]}\": \"...\"}}}}'"))
        elif templates:
            checks.append(Check(name, FAIL, f"key {', '.join(templates)} still holds the template value {TEMPLATE_VALUE}",
                                "replace it with the real value (or create the Secret from your secret store)"))
        elif refused := credentials_in_uri_keys(data):
            checks.append(Check(name, FAIL, refused[0], refused[1]))
        else:
            checks.append(Check(name, PASS, f"has {', '.join(keys)}"))
    return checks


def uri_keys() -> dict[str, tuple[str, Callable[[str, str], None]]]:
    """Secret key -> (the contract Secret that holds it, the steps' own refusal ``(value, field)``) for
    the URI keys every step refuses when they carry credentials: MLflow's tracking URI
    (:func:`shipyard.tracking.tracker.resolve_tracking_uri`) and the S3 endpoint
    (:func:`shipyard.models.s3.refuse_endpoint_credentials`)."""
    def tracking(value: str, field: str) -> None:
        refuse_credentials(value, field, TRACKING_CREDENTIALS_FIX)

    return {"MLFLOW_TRACKING_URI": ("shipyard-mlflow", tracking), ENV_ENDPOINT: ("shipyard-s3", refuse_endpoint_credentials)}


def credentials_in_uri_keys(data: dict[str, str]) -> tuple[str, str] | None:
    """The problem and the fix when a Secret's URI key (:func:`uri_keys`) carries a user name,
    password or token: every step refuses it, and the line names the key, never the value."""
    for key, (_, refuse) in uri_keys().items():
        try:
            refuse(data.get(key, ""), f"key {key}")
        except ShipyardError as err:
            return f"{err.field}: {err.problem}; every step refuses it", err.fix
    return None


def _secret_value(read_secret: Callable[[str, str], dict[str, Any] | None], ns: str, secret: str, key: str) -> str:
    """The decoded value of ``secret``'s ``key`` in ``ns``; empty when absent or still the template's."""
    raw = ((read_secret(ns, secret) or {}).get("data") or {}).get(key)
    value = base64.b64decode(raw).decode(errors="replace").strip() if raw else ""
    return "" if value == TEMPLATE_VALUE else value


def attestation_keys_check(read_secret: Callable[[str, str], dict[str, Any] | None], pods_ns: str) -> Check | None:
    """The attestation key pair as the pods get it: the signing key (package-champion) and the trust
    root (deploy) must be the two halves of one pair, or the deploy step refuses every model the
    package step signs. ``None`` when neither Secret holds a key (the Secret rows say so already)."""
    signing = _secret_value(read_secret, pods_ns, ATTESTATION_SECRET, "signing-key.pem")
    trust = _secret_value(read_secret, pods_ns, ATTESTATION_TRUST_SECRET, "public-key.pem")
    name, pair_fix = "attestation keys", ("make one pair: openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out signing-key.pem; "
                                          "openssl pkey -in signing-key.pem -pubout -out public-key.pem; then recreate "
                                          f"both Secrets in {pods_ns} (docs/cluster-contract.md)")
    if not signing and not trust:
        return None
    if not signing:
        return Check(name, FAIL, f"{ATTESTATION_TRUST_SECRET} holds a trust root but {ATTESTATION_SECRET} no signing "
                     "key: nothing is attested, so the deploy step refuses every model", pair_fix)
    if not trust:
        return Check(name, WARN, f"{ATTESTATION_SECRET} signs the champion's attestations, but without "
                     f"{ATTESTATION_TRUST_SECRET} the deploy step does not check them",
                     f"kubectl -n {pods_ns} create secret generic {ATTESTATION_TRUST_SECRET} --from-file=public-key.pem")
    try:
        private = att.load_private_key(signing.encode(), f"{ATTESTATION_SECRET} signing-key.pem")
        public = att.load_public_key(trust.encode(), f"{ATTESTATION_TRUST_SECRET} public-key.pem")
    except ShipyardError as err:
        return Check(name, FAIL, f"{err.field} {err.problem}", pair_fix)
    if b"PRIVATE KEY" in trust.encode():
        return Check(name, FAIL, f"{ATTESTATION_TRUST_SECRET} public-key.pem holds a private key: whatever reads the "
                     "trust root could sign", pair_fix)
    if att.keyid(private.public_key()) != att.keyid(public):
        return Check(name, FAIL, f"{ATTESTATION_TRUST_SECRET} public-key.pem (keyid {att.keyid(public)[:16]}) is not "
                     f"the public half of {ATTESTATION_SECRET} signing-key.pem (keyid "
                     f"{att.keyid(private.public_key())[:16]}): the deploy step would refuse every model the package "
                     "step signs", pair_fix)
    return Check(name, PASS, f"one pair: {ATTESTATION_TRUST_SECRET} holds the public half of {ATTESTATION_SECRET}'s "
                 f"signing key (keyid {att.keyid(public)[:16]})")


def tracking_uri_of(read_secret: Callable[[str, str], dict[str, Any] | None], layout: dict[str, str]) -> str:
    """MLFLOW_TRACKING_URI as the pods get it (the Secret), else the layout's."""
    found = read_secret(layout["pipeline_namespace"], "shipyard-mlflow") or {}
    raw = (found.get("data") or {}).get("MLFLOW_TRACKING_URI")
    return base64.b64decode(raw).decode() if raw else layout["tracking_uri"]


def credentialed_uri_skip(name: str, uri: str, pods_ns: str, key: str = "MLFLOW_TRACKING_URI") -> Check | None:
    """The ``name`` line of a check that does not run because its Secret's URI ``key`` (MLflow's
    tracking URI, the S3 endpoint: :func:`uri_keys`) carries credentials (the Secret's own line is the
    FAIL, :func:`credentials_in_uri_keys`), so nothing is contacted with them; None when it carries none."""
    if credentials_in_uri_keys({key: uri}) is None:
        return None
    return Check(name, SKIP, f"not checked: {key} of Secret {pods_ns}/{uri_keys()[key][0]} carries "
                 "credentials (see that Secret's line)")


def mlflow_service_of(uri: str, pods_ns: str) -> tuple[str, str] | None:
    """The Service (namespace, name) the tracking URI's host names from the pods' namespace; None when
    the host is not a Service name (outside the cluster, or an IP)."""
    host = urllib.parse.urlparse(uri).hostname or ""
    parts = host.split(".")
    if not host or re.match(r"^\d+\.\d+\.\d+\.\d+$", host) or (len(parts) > 2 and parts[2] != "svc"):
        return None
    return (parts[1] if len(parts) > 1 else pods_ns), parts[0]


#: the MLflow image the manifests ship, and the variant of it that carries the S3 artifact-store client
MLFLOW_IMAGE = "ghcr.io/mlflow/mlflow"
MLFLOW_FULL_SUFFIX = "-full"


def mlflow_image_lacks_boto3(image: str) -> bool:
    """Whether ``image`` is the plain ``ghcr.io/mlflow/mlflow:vX`` (by tag, not the ``-full``
    variant): mlflow's docker/Dockerfile, ``pip install mlflow`` without extras, so no boto3."""
    repo = image.partition("@")[0]
    tag = repo.rpartition(":")[2] if ":" in repo.rpartition("/")[2] else ""
    return (repo.rpartition(":")[0] or repo) == MLFLOW_IMAGE and bool(tag) and not tag.endswith(MLFLOW_FULL_SUFFIX)


def mlflow_image_check(deployment: dict[str, Any], ns: str, name: str) -> Check:
    """The MLflow server's image: the plain ``ghcr.io/mlflow/mlflow`` image with an S3 artifact store
    fails (no boto3: its first artifact upload is a 500 while /health says 200); an image by tag is a
    warning (a re-pushed tag changes the server under a running install: pin it by digest)."""
    spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)] or [{}]
    container = next((c for c in containers if c.get("name") == "mlflow"), containers[0])
    image = str(container.get("image", ""))
    repo, _, digest = image.partition("@")
    tag = repo.rpartition(":")[2] if ":" in repo.rpartition("/")[2] else ""
    args = " ".join(str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])])
    where = f"Deployment {ns}/{name}"
    if mlflow_image_lacks_boto3(image) and "--artifacts-destination=s3://" in args:
        return Check("mlflow image", FAIL, f"{where} runs {image} with an s3:// artifact store: that image is a plain "
                     "pip install mlflow, without boto3, so every artifact upload fails",
                     f"run {MLFLOW_IMAGE}:{tag}{MLFLOW_FULL_SUFFIX} pinned by digest, as manifests/base/mlflow does")
    if not digest.startswith("sha256:"):
        return Check("mlflow image", WARN, f"{where} runs {image or 'an image'} by tag: a re-pushed tag changes the "
                     "server under a running install", f"pin it by digest: crane digest {image}, then "
                     f"kustomize edit set image {repo.rpartition(':')[0] or repo}@sha256:<digest>")
    return Check("mlflow image", PASS, f"{where} runs {image}")


def mlflow_name_check(uri: str, pods_ns: str, service_exists: Callable[[str, str], bool]) -> Check:
    """The tracking URI's host resolves from the pods' namespace to an existing Service."""
    host = urllib.parse.urlparse(uri).hostname or ""
    service = mlflow_service_of(uri, pods_ns)
    if service is None:
        return Check("mlflow name", PASS, f"{host or uri} is not a Service name (outside the cluster or an IP)")
    ns, name = service
    if service_exists(ns, name):
        return Check("mlflow name", PASS, f"{host} resolves from {pods_ns} (Service {ns}/{name})")
    return Check("mlflow name", FAIL, f"{host} does not resolve from the pods' namespace {pods_ns}: no Service "
                 f"{ns}/{name}", "address MLflow by its FQDN, mlflow.<namespace>.svc.cluster.local:5000, in the "
                 "Secret shipyard-mlflow")


#: the body Envoy answers when an Istio AuthorizationPolicy refuses a request (its RBAC filter)
ISTIO_DENIED = "RBAC: access denied"
#: where the AuthorizationPolicy that admits the sidecar-less pipeline pods to MLflow ships
ISTIO_POLICY = "manifests/overlays/kubeflow-multi-user (AuthorizationPolicy mlflow)"


def _mlflow_request(uri: str, connect_url: str, token: str, method: str, path: str, *, payload: Any = None,
                    data: bytes | None = None, timeout_s: float = 10.0) -> tuple[int, bytes]:
    """One call to MLflow with the Host header of ``uri`` (through ``connect_url`` when given):
    its status and body; an HTTP error status is returned, not raised (a connection problem is,
    and an answer past ``timeout_s`` in all is a :class:`TimeoutError`; one over
    :data:`~shipyard.core.net.MAX_ANSWER_BYTES` a :class:`ShipyardError`)."""
    target = urllib.parse.urlparse(uri)
    via = connect_url.rstrip("/") if connect_url else f"{target.scheme}://{target.netloc}"
    headers = {"Host": target.netloc, **({"Authorization": f"Bearer {token}"} if token else {})}
    if payload is not None:
        data = json.dumps(payload).encode()
        headers["Content-Type"] = "application/json"
    return http_request(f"{via}{path}", deadline_s=timeout_s, data=data, method=method, headers=headers,
                        field="mlflow")


def mlflow_refusal(name: str, code: int, body: str, host: str, what: str) -> Check | None:
    """The one line for a refused MLflow call (``what`` names the call), or None when ``code`` is
    not a refusal: Istio's ``403 RBAC: access denied`` (a mesh policy, not MLflow: a token does
    not help), MLflow's ``403 Invalid Host header``, or 401/403 for the token."""
    if code == 403 and ISTIO_DENIED.lower() in body.lower():
        return Check(name, FAIL, f"{what} as Host {host} answered 403 {ISTIO_DENIED}: an Istio sidecar in front of "
                     "MLflow refused it (MLflow never saw it); the pipeline pods run without a sidecar (KFP sets "
                     "sidecar.istio.io/inject: \"false\"), so the profile namespace's owner-only policy has no "
                     "identity to admit", f"admit them to MLflow: kubectl apply -k {ISTIO_POLICY}; a token does not "
                     "help (README, Install on a cluster, Istio)")
    if code == 403 and "host" in body.lower():
        return Check(name, FAIL, f"MLflow rejects Host {host} (403 Invalid Host header): /health "
                     "still answers, so the pod looks Ready", "allow the Service names: MLFLOW_SERVER_ALLOWED_HOSTS as "
                     "in manifests/base/mlflow, then restart MLflow")
    if code in (401, 403):
        return Check(name, FAIL, f"MLflow refuses {what} ({code})", "set MLFLOW_TRACKING_TOKEN in the Secret "
                     "shipyard-mlflow")
    return None


def mlflow_api_check(uri: str, connect_url: str = "", token: str = "", timeout_s: float = 10.0) -> Check:
    """A real MLflow API call (``experiments/search``; ``/health`` skips MLflow's Host check) sent
    with the Host header of ``uri``, through ``connect_url`` when given (e.g. a port-forward)."""
    target = urllib.parse.urlparse(uri)
    via = connect_url.rstrip("/") if connect_url else f"{target.scheme}://{target.netloc}"
    try:
        code, raw = _mlflow_request(uri, connect_url, token, "GET", "/api/2.0/mlflow/experiments/search?max_results=1",
                                    timeout_s=timeout_s)
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        return Check("mlflow api", FAIL, f"cannot reach {via} ({reason})",
                     "check the Service and the MLflow pod, or run from inside the cluster (--mlflow-url through a "
                     "port-forward sends the in-cluster Host header)")
    except ShipyardError as err:  # an answer over the size cap
        return Check("mlflow api", FAIL, err.problem, "check that the tracking URI is an MLflow server")
    if code == 200:
        return Check("mlflow api", PASS, f"experiments/search as Host {target.netloc} answered 200")
    refused = mlflow_refusal("mlflow api", code, raw.decode(errors="replace"), target.netloc, "experiments/search")
    return refused or Check("mlflow api", FAIL, f"experiments/search answered {code}", "see the MLflow server's log")


#: the experiment the artifact round-trip's throwaway run is made in (created once, kept)
CHECK_EXPERIMENT = "shipyard-check"
#: why an artifact write answers 5xx while the API answers, and what to do (the manifest's image)
ARTIFACT_STORE_FIX = ("run an MLflow image that carries boto3 for the s3:// artifacts destination "
                      "(ghcr.io/mlflow/mlflow:vX.Y.Z is pip install mlflow without extras; manifests/base/mlflow runs "
                      "the -full variant), and check the bucket mlflow-artifacts and shipyard-s3's keys: "
                      "kubectl logs deploy/mlflow names the error")


_ARTIFACTS_CHECK = "mlflow artifacts"


def _artifact_failure(host: str, what: str, code: int, body: str) -> Check:
    """The artifact round-trip's failing step ``what`` as a check: MLflow's own refusals (auth, a
    wrong host) by :func:`mlflow_refusal`, a 5xx as the artifact store that cannot write."""
    refused = mlflow_refusal(_ARTIFACTS_CHECK, code, body, host, what)
    if refused is not None:
        return refused
    said = " ".join(body.split())[:160] or "no body"
    if code >= 500:
        return Check(_ARTIFACTS_CHECK, FAIL, f"{what} answered {code} ({said}) while /health and the API answer: "
                     "MLflow's artifact store cannot write, so every step's first log_artifact fails", ARTIFACT_STORE_FIX)
    return Check(_ARTIFACTS_CHECK, FAIL, f"{what} answered {code} ({said})", "see the MLflow server's log")


def _check_experiment(call: Callable[..., tuple[int, str]]) -> tuple[str, int, str]:
    """(the id of experiment ``shipyard-check``, created when missing, or "" ; the last answer's code
    and body, for the failure's words)."""
    code, body = call("GET", "/api/2.0/mlflow/experiments/get-by-name?" +
                      urllib.parse.urlencode({"experiment_name": CHECK_EXPERIMENT}))
    if code == 404:
        code, body = call("POST", "/api/2.0/mlflow/experiments/create", payload={"name": CHECK_EXPERIMENT})
        experiment = json.loads(body).get("experiment_id", "") if code == 200 else ""
    else:
        experiment = (json.loads(body).get("experiment") or {}).get("experiment_id", "") if code == 200 else ""
    return experiment, code, body


def _artifact_round_trip(call: Callable[..., tuple[int, str]], host: str, folder: str, stored: str,
                         content: bytes) -> Check | None:
    """``content`` uploaded to ``stored``, listed in ``folder`` and read back through the proxied
    artifact store; the failing check, or None when all three held."""
    base = "/api/2.0/mlflow-artifacts/artifacts"
    code, body = call("PUT", f"{base}/{urllib.parse.quote(stored)}", data=content)
    if code != 200:
        return _artifact_failure(host, "an artifact upload", code, body)
    code, body = call("GET", f"{base}?" + urllib.parse.urlencode({"path": folder}))
    listed = [f.get("path") for f in (json.loads(body).get("files") or [])] if code == 200 else []
    if code != 200:
        return _artifact_failure(host, "listing the run's artifacts", code, body)
    if "shipyard-check.txt" not in listed:
        return Check(_ARTIFACTS_CHECK, FAIL, f"an uploaded artifact is not listed (the store lists {listed or 'nothing'})",
                     ARTIFACT_STORE_FIX)
    code, body = call("GET", f"{base}/{urllib.parse.quote(stored)}")
    if code != 200:
        return _artifact_failure(host, "reading the artifact back", code, body)
    if body.encode() != content:
        return Check(_ARTIFACTS_CHECK, FAIL, "the artifact read back differs from the one written", ARTIFACT_STORE_FIX)
    return None


def mlflow_artifact_check(uri: str, connect_url: str = "", token: str = "", timeout_s: float = 20.0) -> Check:
    """An artifact round-trip through MLflow's proxied artifact store (``--serve-artifacts``), as
    the steps' first ``log_artifact`` does it: a throwaway run in experiment ``shipyard-check``,
    one small file written, listed and read back, then the file and the run deleted. A server
    whose artifact store cannot write (e.g. an image without boto3 for an ``s3://`` destination)
    answers ``/health`` and the API and fails here, in one line naming the cause and the fix."""
    name = _ARTIFACTS_CHECK
    host = urllib.parse.urlparse(uri).netloc

    def call(method: str, path: str, **kw: Any) -> tuple[int, str]:
        code, raw = _mlflow_request(uri, connect_url, token, method, path, timeout_s=timeout_s, **kw)
        return code, raw.decode(errors="replace")

    run_id, stored = "", ""
    try:
        experiment, code, body = _check_experiment(call)
        if not experiment:
            return _artifact_failure(host, f"the experiment {CHECK_EXPERIMENT}", code, body)
        code, body = call("POST", "/api/2.0/mlflow/runs/create",
                          payload={"experiment_id": experiment, "run_name": "shipyard-check-artifacts"})
        if code != 200:
            return _artifact_failure(host, "creating a run", code, body)
        info = json.loads(body)["run"]["info"]
        run_id, artifact_uri = info["run_id"], str(info.get("artifact_uri") or "")
        if not artifact_uri.startswith("mlflow-artifacts:"):
            return Check(name, SKIP, f"not checked: the server does not proxy artifacts (artifact_uri {artifact_uri}); "
                         "the steps write to that store themselves")
        folder = urllib.parse.urlparse(artifact_uri).path.strip("/")
        stored = f"{folder}/shipyard-check.txt"
        failure = _artifact_round_trip(call, host, folder, stored, f"shipyard check {run_id}\n".encode())
        if failure is not None:
            return failure
    except (urllib.error.URLError, OSError) as err:
        return Check(name, FAIL, f"cannot reach MLflow as Host {host} ({getattr(err, 'reason', err)})",
                     "check the Service and the MLflow pod")
    except ShipyardError as err:  # an answer over the size cap
        return Check(name, FAIL, err.problem, "check that the tracking URI is an MLflow server")
    except (ValueError, KeyError, TypeError) as err:
        return Check(name, FAIL, f"MLflow answered something that is not its REST API ({type(err).__name__})",
                     "check that the tracking URI is an MLflow server")
    finally:
        _forget(call, stored, run_id)
    return Check(name, PASS, f"an artifact written, listed, read back and deleted through {host} (throwaway run in "
                 f"experiment {CHECK_EXPERIMENT})")


def _forget(call: Callable[..., tuple[int, str]], stored: str, run_id: str) -> None:
    """Delete the round-trip's file and run; best effort (the verdict is already known)."""
    try:
        if stored:
            call("DELETE", f"/api/2.0/mlflow-artifacts/artifacts/{urllib.parse.quote(stored)}")
        if run_id:
            call("POST", "/api/2.0/mlflow/runs/delete", payload={"run_id": run_id})
    except (urllib.error.URLError, OSError, ShipyardError):
        pass


def mlflow_checks(uri: str, connect_url: str = "", token: str = "") -> list[Check]:
    """MLflow's API, then (when it answered) the artifact round-trip: a fault is one line."""
    api = mlflow_api_check(uri, connect_url, token)
    return [api] if api.status != PASS else [api, mlflow_artifact_check(uri, connect_url, token)]


#: what a review function answers: allowed or not, and why not in the API server's words (may be empty)
Answer = tuple[bool, str]


def review_answer(data: Any) -> Answer:
    """A (Self)SubjectAccessReview's answer: allowed only when ``status.allowed`` is the boolean
    true (false, missing or anything else: not allowed, as the API server's client libraries read
    it), with why not: the reason of an explicit denial (``status.denied``, e.g. a webhook
    authorizer) and ``status.evaluationError`` (e.g. a RoleBinding whose Role does not exist), one
    line each. An answer that is not an object is :class:`ShipyardError` (it is not a review)."""
    if not isinstance(data, dict):
        raise ShipyardError("deploy permissions", "cannot check permissions: the Kubernetes API answered the "
                            "access review with something that is not a review (not JSON, or not an object)",
                            "point the kubeconfig (or the pod's API server address) at the Kubernetes API server")
    status = data.get("status") if isinstance(data.get("status"), dict) else {}
    allowed = status.get("allowed") is True
    why = []
    if not allowed and status.get("denied") is True and status.get("reason"):
        why.append(f"denied: {status['reason']}")
    if not allowed and status.get("evaluationError"):
        why.append(f"evaluation error: {status['evaluationError']}")
    return allowed, "; ".join(" ".join(str(w).split())[:300] for w in why)


def permission_checks(review: Callable[[str, str, str, str], bool | Answer], ns: str, who: str, overlay: str,
                      deploy: Any = None, rollout: dict[str, Any] | None = None) -> list[Check]:
    """The deploy identity's permissions, one review per (verb, group, resource) the deploy step
    needs for ``deploy`` and ``rollout`` (:func:`shipyard.serving.kserve.access.needed_access`: the
    table the shipped Role is also made of), in the deploy target ``ns`` (a canary's route: in its
    own namespace). ``review(verb, group, resource, namespace)`` is a SubjectAccessReview or
    SelfSubjectAccessReview: allowed, or (allowed, why not) (:func:`review_answer`); it raises
    :class:`ShipyardError` when it cannot ask. ``who`` names the identity in the line, ``overlay``
    the manifests/overlays folder the fix applies."""
    missing, notes = [], []
    for verb, group, resource, where in needed_access(deploy, rollout, ns):
        answer = review(verb, group, resource, where)
        allowed, why = answer if isinstance(answer, tuple) else (answer is True, "")
        if not allowed:
            missing.append(f"{verb} {resource}" + (f".{group}" if group else "") + (f" (in {where})" if where != ns else ""))
        if why and why not in notes:
            notes.append(why)
    if missing:
        said = f" (the API server: {'; '.join(notes)})" if notes else ""
        return [Check("deploy permissions", FAIL, f"{who} may not {', '.join(missing)} in namespace {ns}{said}",
                      f"bind Role shipyard-deployer to {who} in {ns}: kubectl apply -k manifests/overlays/{overlay}")]
    extra = [k for k in deploy_kinds(deploy, rollout) if k != "LLMInferenceService"] if deploy is not None else []
    also = f" (and the {', '.join(extra)} its options need)" if extra else ""
    return [Check("deploy permissions", PASS, f"{who} may apply, watch and roll back LLMInferenceServices in {ns}{also}")]


def gpu_node_check(nodes: list[dict[str, Any]] | None, gpu: dict[str, Any]) -> Check:
    """Nodes that carry the labels the GPU steps select and allocate the accelerator."""
    selector = {str(k): str(v) for k, v in (gpu.get("node_selector") or {}).items()}
    resource = str(gpu.get("accelerator_type") or "nvidia.com/gpu")
    shown = ",".join(f"{k}={v}" for k, v in selector.items()) or "(no selector)"
    if nodes is None:
        return Check("gpu nodes", WARN, "cannot list nodes with these credentials", "run shipyard check as a cluster admin")
    usable = [n for n in nodes if int(str((n.get("status") or {}).get("allocatable", {}).get(resource, "0")) or 0) > 0]
    if not usable:
        return Check("gpu nodes", FAIL, f"no node labelled {shown} allocates {resource}: every GPU step would stay "
                     "Pending", "label the GPU nodes (GPU operator: nvidia.com/gpu.present=true) or set gpu.node_selector "
                     "in the cluster config")
    return Check("gpu nodes", PASS, f"{len(usable)} node(s) labelled {shown} with {resource}")


def disk_node_check(nodes: list[dict[str, Any]] | None, requests: dict[str, int]) -> Check:
    """A node with the allocatable ephemeral storage that the steps holding a whole model request
    (``ephemeral_storage`` in the cluster config; :func:`shipyard.pipelines.platform.ephemeral_storage`)."""
    if not requests:
        return Check("node disk", SKIP, "no ephemeral_storage in the cluster config")
    if nodes is None:
        return Check("node disk", WARN, "cannot list nodes with these credentials", "run shipyard check as a cluster admin")
    need, steps = max(requests.values()), ", ".join(sorted(requests))

    def allocatable(node: dict[str, Any]) -> float:
        value = ((node.get("status") or {}).get("allocatable") or {}).get("ephemeral-storage", "0")
        try:
            return parse_quantity(value, "ephemeral-storage")
        except ShipyardError:
            return 0.0

    usable = [n for n in nodes if allocatable(n) >= need]
    gib = need / 1024**3
    if not usable:
        return Check("node disk", FAIL, f"no node has {gib:.0f} GiB of allocatable ephemeral storage: {steps} would "
                     "stay Pending", "add nodes with larger disks, or lower ephemeral_storage.size in the cluster "
                     "config while 2 x the model + 2Gi still fits (docs/cluster-contract.md, Disk)")
    return Check("node disk", PASS, f"{len(usable)} node(s) with {gib:.0f} GiB of allocatable ephemeral storage for {steps}")


def registry_check(registry: str, auth: dict[str, Any] | None, insecure: bool = False, timeout_s: float = 10.0) -> Check:
    """``GET /v2/`` of the registry with the credentials of the ``.dockerconfigjson`` (``auth``)."""
    if not registry:
        return Check("registry", SKIP, "no registry given (--registry)")
    entry = next((v for k, v in ((auth or {}).get("auths") or {}).items() if k.split("//")[-1].rstrip("/") == registry),
                 None)
    headers = {"Authorization": f"Basic {entry['auth']}"} if entry and entry.get("auth") else {}
    url = f"{'http' if insecure else 'https'}://{registry}/v2/"
    try:  # within timeout_s in all, however slowly the registry answers
        code, _ = http_request(url, deadline_s=timeout_s, headers=headers, field="registry")
    except (urllib.error.URLError, OSError) as err:
        return Check("registry", FAIL, f"cannot reach {url} ({getattr(err, 'reason', err)})",
                     "check the registry host and the network from the cluster")
    except ShipyardError as err:  # an answer over the size cap
        return Check("registry", FAIL, err.problem, "check the registry host")
    if code == 200:
        return Check("registry", PASS, f"{registry} answers /v2/ with the credentials of shipyard-registry")
    if code == 401:
        return Check("registry", FAIL, f"{registry} refuses the credentials (401)" if headers else
                     f"{registry} needs credentials and shipyard-registry has none for it",
                     "create shipyard-registry: kubectl create secret docker-registry shipyard-registry ...")
    return Check("registry", FAIL, f"{registry} answered {code} to /v2/", "check the registry")


def s3_check(env: dict[str, str], bucket: str = "mlflow-artifacts") -> Check:
    """The object store of the Secret shipyard-s3 answers, and the MLflow artifact bucket exists."""
    if not env.get("AWS_ENDPOINT_URL_S3"):
        return Check("s3", WARN, "no AWS_ENDPOINT_URL_S3 in shipyard-s3", "set it (https://s3.amazonaws.com on AWS)")
    try:
        config = s3store.load_config(env)
        found = s3store.client(config).bucket_exists(bucket)
    except ShipyardError as err:  # an endpoint with credentials among them: one line, nothing contacted
        return Check("s3", FAIL, f"{err.field}: {err.problem}", err.fix or "fix the keys of shipyard-s3")
    except Exception as err:  # noqa: BLE001 - network, credentials: one line
        return Check("s3", FAIL, f"{env['AWS_ENDPOINT_URL_S3']}: {type(err).__name__}: {err}".splitlines()[0],
                     "check the endpoint and the keys in shipyard-s3")
    if not found:
        return Check("s3", WARN, f"{env['AWS_ENDPOINT_URL_S3']} answers but has no bucket {bucket} (MLflow's artifacts)",
                     f"create the bucket {bucket}")
    return Check("s3", PASS, f"{env['AWS_ENDPOINT_URL_S3']} answers; bucket {bucket} exists")


def pod_checks(*, tracking_uri: str, namespace: str, dry_run: bool, api: Any = None, connect_url: str = "",
               token: str = "", deploy: Any = None, rollout: dict[str, Any] | None = None) -> list[Check]:
    """What a pipeline pod can check about itself (the pre-flight step, in a cluster): MLflow's API
    by the URI the steps use, with its Host header (``connect_url`` only redirects the connection,
    for tests); and, when the run deploys, whether this pod's identity may deploy into
    ``namespace`` (SelfSubjectAccessReview through ``api``, a kubernetes ``ApiClient``), for what
    the run's deploy config (``deploy``, ``rollout``) makes the deploy step do."""
    checks = []
    if tracking_uri.startswith(("http://", "https://")):
        checks.extend(mlflow_checks(tracking_uri, connect_url, token))
    if not dry_run and api is not None:
        who = pod_identity(api)
        try:
            checks.extend(permission_checks(self_review(api, who), namespace, who, "<layout>", deploy, rollout))
        except ShipyardError as err:  # the review itself was refused or not answered: not "allowed"
            checks.append(Check("deploy permissions", FAIL, err.problem, err.fix))
    return checks


def pod_identity(api: Any) -> str:
    """The pod's identity in words: ``ServiceAccount NS/NAME`` from the subject of its bearer token
    (an in-cluster token is a JWT whose ``sub`` is ``system:serviceaccount:NS:NAME``; only that
    claim is read, the token is never shown), else "this pod's ServiceAccount"."""
    keys = getattr(getattr(api, "configuration", None), "api_key", None) or {}
    words = str(keys.get("authorization") or keys.get("BearerToken") or "").split()  # "bearer TOKEN" in a pod
    parts = words[-1].split(".") if words else []
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))) if len(parts) == 3 else {}
    except (ValueError, TypeError):
        claims = {}
    found = re.fullmatch(r"system:serviceaccount:([a-z0-9.-]{1,253}):([a-z0-9.-]{1,253})",
                         str(claims.get("sub", "")) if isinstance(claims, dict) else "")
    return f"ServiceAccount {found.group(1)}/{found.group(2)}" if found else "this pod's ServiceAccount"


def self_review(api: Any, who: str) -> Callable[[str, str, str, str], Answer]:
    """A SelfSubjectAccessReview through ``api`` (a kubernetes ``ApiClient``) as ``who``: the answer
    (:func:`review_answer`); a review the API server refuses (403: the identity may not even ask,
    401: its credentials are rejected), any other error status, and an API server out of reach
    raise one :class:`ShipyardError` line, never "allowed"."""
    import urllib3
    from kubernetes.client.rest import ApiException

    host = str(getattr(getattr(api, "configuration", None), "host", "") or "the Kubernetes API")
    cannot, field = "cannot check permissions", "deploy permissions"

    def review(verb: str, group: str, resource: str, ns: str) -> Answer:
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"namespace": ns, "verb": verb, "group": group, "resource": resource}}}
        def late() -> UnreachableError:
            return UnreachableError(field, f"{cannot}: the Kubernetes API at {host} gave no whole answer to a review "
                                    f"within {API_TIMEOUT_S:g} s", "check that pods reach the API server "
                                    "(kubernetes.default.svc) and that it answers, then rerun")

        try:
            data = call_within(API_TIMEOUT_S, api.call_api, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                               "POST", body=body, auth_settings=["BearerToken"], response_type="object",
                               header_params={"Content-Type": "application/json"}, _return_http_data_only=True,
                               on_timeout=late, owner=api)
        except ApiException as err:
            raise ShipyardError(field, *_review_refused(int(err.status or 0), err.body, host, who)) from None
        except urllib3.exceptions.HTTPError as err:
            raise ShipyardError(field, f"{cannot}: cannot reach the Kubernetes API at {host}: {connection_problem(err)}",
                                "check that pods reach the API server (kubernetes.default.svc) and rerun") from None
        except UnicodeDecodeError:
            data = None
        return review_answer(data)

    return review


def _review_refused(code: int, body: Any, host: str, who: str) -> tuple[str, str]:
    """The line (problem, fix) for a SelfSubjectAccessReview the API server did not answer: 401, 403
    (with the API server's own message, which names the user) or another status."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
    try:
        said = json.loads(text).get("message", "")
    except (ValueError, AttributeError):
        said = ""
    said = f": {' '.join(str(said).split())[:300]}" if said else ""
    if code == 401:
        return (f"cannot check permissions: the Kubernetes API at {host} rejects the credentials of {who} "
                "(401 Unauthorized)", "the pod's ServiceAccount token is expired or invalid: check that the "
                "pipeline's ServiceAccount exists and its token is mounted (automountServiceAccountToken), then rerun")
    if code == 403:
        return (f"cannot check permissions: {who} may not create selfsubjectaccessreviews.authorization.k8s.io "
                f"(403 Forbidden{said})", f"bind ClusterRole system:basic-user to {who} (Kubernetes binds it to "
                "system:authenticated by default), so that the pre-flight can ask what it may do")
    return (f"cannot check permissions: the Kubernetes API at {host} answered {code} to a SelfSubjectAccessReview"
            f"{said}", "check that the API server serves authorization.k8s.io/v1 and is healthy, then rerun")


def summary(checks: list[Check]) -> dict[str, Any]:
    """Counts and the overall verdict (``ok``: nothing failed)."""
    counts = {s: sum(c.status == s for c in checks) for s in (PASS, FAIL, WARN, SKIP)}
    return {"ok": counts[FAIL] == 0, **counts, "checks": [c.to_dict() for c in checks]}


def decode_dockerconfig(secret: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``.dockerconfigjson`` of a Secret as a mapping (None when absent or unreadable)."""
    raw = ((secret or {}).get("data") or {}).get(".dockerconfigjson")
    if not raw:
        return None
    try:
        return json.loads(base64.b64decode(raw))
    except (ValueError, TypeError):
        return None
