"""Validate Kubernetes manifests the way an API server would, without one.

Custom resources (LLMInferenceService, LLMInferenceServiceConfig, InferencePool, HTTPRoute,
Gateway, LeaderWorkerSet, PrometheusRule, PodMonitor, and the admission policies' Kyverno ImageValidatingPolicy
and sigstore ClusterImagePolicy, ...) are checked against the upstream CRDs in ``shipyard/schemas``:
each served version's ``openAPIV3Schema`` becomes a JSON Schema in which unknown fields are
rejected (``additionalProperties: false`` wherever the schema lists ``properties`` and does
not say ``x-kubernetes-preserve-unknown-fields``), as a structural schema is pruned/rejected
by a real API server with strict field validation.

CEL ``x-kubernetes-validations`` cannot run here (no CEL engine); the rules that matter for
what shipyard renders are re-implemented in Python in :func:`cel_rules`, and the KServe v1alpha2 admission-webhook
rules (``llm_inference_service_validation.go``) in :func:`webhook_rules`:

* CEL: ``spec`` and ``spec.prefill``: replicas and scaling are mutually exclusive;
  ``scaling``: wva is required, minReplicas <= maxReplicas, idleReplicaCount needs and stays
  below minReplicas; ``scaling.wva``: exactly one of hpa / keda; ``wva.keda.advanced``: no
  scalingModifiers, no horizontalPodAutoscalerConfig.name; ``scheduler.pool.spec``:
  targetPorts unique, endpointPickerRef of kind Service needs a port.
* Webhook: worker needs data or pipeline parallelism; pipeline and data parallelism are
  exclusive; data and dataLocal are set together; scheduler replicas > 0; scheduler config has
  exactly one of inline / ref; route http refs and inline spec are exclusive; route refs need
  gateway refs (not a managed gateway); decode and prefill use the same scaling actuator.

Not implemented: the Gateway API HTTPRoute rule CEL (path syntax, filter combinations), which
only applies to inline ``router.route.http.spec`` (shipyard never renders one).

Core kinds (Deployment, Service, Role, Secret, ...) are checked with ``kubernetes-validate``
(strict mode) when it is installed (it is a test/dev tool, not in the base image).
"""

from __future__ import annotations

import copy
import functools
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shipyard.core.errors import ShipyardError
from shipyard.core.jsonargs import load_yaml, read_text
from shipyard.core.k8s_names import is_label, is_object_name
from shipyard.schemas import SCHEMAS_DIR

KUBERNETES_VERSION = "1.33"
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                            r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
# Kinds defined by CRDs whose schemas are not vendored in shipyard/schemas; checked structurally only.
UNSCHEMED_KINDS = {("keda.sh", "ScaledObject"), ("kustomize.config.k8s.io", "Kustomization")}


@dataclass(frozen=True)
class Problem:
    """One validation failure: which document, where in it, and what is wrong."""

    source: str
    path: str
    message: str

    def __str__(self) -> str:
        where = f" at {self.path}" if self.path else ""
        return f"{self.source}{where}: {self.message}"


def upstream_dir() -> Path:
    """Folder of the vendored upstream definitions (``shipyard/schemas``, shipped in the wheel and
    every image; ``SOURCES.md`` there names each file's repository, tag, path and license)."""
    return SCHEMAS_DIR


def _load_yaml_all(text: str, source: str = "manifest") -> list[Any]:
    """Every document, strictly: a key given twice (which Kubernetes would silently resolve to the
    last), an alias bomb or too-deep nesting raises a one-line ShipyardError naming ``source``."""
    return [doc for doc in load_yaml(text, source, all_documents=True) if doc is not None]


@functools.lru_cache(maxsize=1)
def _crd_index() -> dict[tuple[str, str, str], dict[str, Any]]:
    """(group, version, kind) -> raw openAPIV3Schema, for every CRD in the upstream folder."""
    index: dict[tuple[str, str, str], dict[str, Any]] = {}
    for path in sorted(upstream_dir().rglob("*.yaml")):
        text = path.read_text()
        if "kind: CustomResourceDefinition" not in text:
            continue
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # vendored upstream files: the fast loader
        for doc in yaml.load_all(text, Loader=loader):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec.get("versions", []):
                schema = (version.get("schema") or {}).get("openAPIV3Schema")
                if schema and version.get("served", True):
                    index[(spec["group"], version["name"], spec["names"]["kind"])] = schema
    return index


def to_json_schema(node: Any) -> Any:
    """Turn an OpenAPI v3 structural schema into a JSON Schema that rejects unknown fields."""
    if isinstance(node, list):
        return [to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("description", "default", "example", "format"):
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {name: to_json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not", "anyOf", "allOf", "oneOf"):
            out[key] = to_json_schema(value)
        else:
            out[key] = value
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if "properties" in node and "additionalProperties" not in node \
            and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


@functools.lru_cache(maxsize=32)
def _validator(group: str, version: str, kind: str) -> Any:
    import jsonschema

    schema = _crd_index().get((group, version, kind))
    if schema is None:
        return None
    schema = copy.deepcopy(schema)
    # Some CRDs (Istio's) describe only spec and status; the API server adds the object's own
    # apiVersion, kind and metadata to every structural schema, so they are no unknown fields
    props = schema.setdefault("properties", {})
    for name in ("apiVersion", "kind"):
        props.setdefault(name, {"type": "string"})
    props.setdefault("metadata", {"type": "object"})
    return jsonschema.Draft4Validator(to_json_schema(schema))


def known_kinds() -> list[tuple[str, str, str]]:
    """Every (group, version, kind) with an upstream schema."""
    return sorted(_crd_index())


def _split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text.lstrip(".")


def _list_semantics(node: Any, schema: Any, path: list[Any], problems: list[tuple[str, str]]) -> None:
    """``x-kubernetes-list-type: map|set`` uniqueness, which JSON Schema cannot say."""
    if not isinstance(schema, dict):
        return
    if isinstance(node, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, value in node.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                _list_semantics(value, sub, [*path, key], problems)
    elif isinstance(node, list):
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            seen: set[tuple[Any, ...]] = set()
            for i, item in enumerate(node):
                if isinstance(item, dict):
                    key = tuple(item.get(k) for k in keys)
                    if key in seen:
                        problems.append((_path([*path, i]), f"duplicate entry for key {dict(zip(keys, key, strict=True))}"))
                    seen.add(key)
        elif list_type == "set":
            seen_items: list[Any] = []
            for i, item in enumerate(node):
                if item in seen_items:
                    problems.append((_path([*path, i]), f"duplicate value {item!r} in a set"))
                seen_items.append(item)
        for i, item in enumerate(node):
            _list_semantics(item, schema.get("items"), [*path, i], problems)


def check_metadata(doc: dict[str, Any], *, namespaced: bool = True) -> list[tuple[str, str]]:
    """ObjectMeta rules an API server applies to every object (name, labels, annotations)."""
    problems: list[tuple[str, str]] = []
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        return [("metadata", "is required")]
    name = meta.get("name")
    if not name and not meta.get("generateName"):
        problems.append(("metadata.name", "is required"))
    elif name and not is_object_name(name):
        problems.append(("metadata.name", f"{name!r} is not a valid DNS-1123 subdomain"))
    ns = meta.get("namespace")
    if ns is not None and not is_label(ns):
        problems.append(("metadata.namespace", f"{ns!r} is not a valid DNS-1123 label"))
    for key, value in (meta.get("labels") or {}).items():
        if not QUALIFIED_NAME.match(key) or len(key.rpartition("/")[2]) > 63:
            problems.append((f"metadata.labels.{key}", "is not a valid label key"))
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            problems.append((f"metadata.labels.{key}", f"value {value!r} is not a valid label value"))
    annotations = meta.get("annotations") or {}
    for key, value in annotations.items():
        if not QUALIFIED_NAME.match(key):
            problems.append((f"metadata.annotations.{key}", "is not a valid annotation key"))
        if not isinstance(value, str):
            problems.append((f"metadata.annotations.{key}", "value must be a string"))
    if sum(len(k) + len(str(v)) for k, v in annotations.items()) > 256 * 1024:
        problems.append(("metadata.annotations", "total size exceeds 256 KiB"))
    return problems


# --- CEL and webhook rules of LLMInferenceService / LLMInferenceServiceConfig -------------------

def _scaling_rules(scaling: dict[str, Any], base: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    wva = scaling.get("wva")
    if wva is None:
        out.append((base, "wva is required when scaling is configured; it provides the autoscaling mechanism"))
    if "minReplicas" in scaling and "maxReplicas" in scaling and scaling["minReplicas"] > scaling["maxReplicas"]:
        out.append((base, "minReplicas cannot exceed maxReplicas"))
    if isinstance(wva, dict):
        if "hpa" in wva and "keda" in wva:
            out.append((f"{base}.wva", "hpa and keda are mutually exclusive; choose one actuator backend"))
        if "hpa" not in wva and "keda" not in wva:
            out.append((f"{base}.wva", "either hpa or keda must be specified as the actuator backend"))
        keda = wva.get("keda")
        if isinstance(keda, dict):
            idle = keda.get("idleReplicaCount")
            if idle is not None and "minReplicas" not in scaling:
                out.append((base, "minReplicas is required when idleReplicaCount is set"))
            elif idle is not None and idle >= scaling["minReplicas"]:
                out.append((base, "idleReplicaCount must be less than minReplicas"))
            advanced = keda.get("advanced") or {}
            modifiers = advanced.get("scalingModifiers") or {}
            if any(modifiers.get(k) for k in ("formula", "target", "activationTarget", "metricType")):
                out.append((f"{base}.wva.keda", "scalingModifiers must not be set; WVA controls the scaling metric formula"))
            if (advanced.get("horizontalPodAutoscalerConfig") or {}).get("name"):
                out.append((f"{base}.wva.keda", "horizontalPodAutoscalerConfig.name must not be set"))
    return out


def _workload_cel(workload: dict[str, Any], base: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if "replicas" in workload and "scaling" in workload:
        out.append((base, "replicas and scaling are mutually exclusive; use scaling for autoscaled deployments "
                          "or replicas for static deployments"))
    if isinstance(workload.get("scaling"), dict):
        out += _scaling_rules(workload["scaling"], f"{base}.scaling")
    return out


def _workload_webhook(workload: dict[str, Any], base: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    par = workload.get("parallelism")
    worker = workload.get("worker")
    if worker is not None and not par:
        out.append((f"{base}.worker", "when worker is specified, parallelism must be configured for either data "
                                      "parallelism or pipeline parallelism"))
    if isinstance(par, dict):
        is_pp = (par.get("pipeline") or 0) > 0
        is_dp = (par.get("data") or 0) > 0 or (par.get("dataLocal") or 0) > 0
        if worker is not None and not is_pp and not is_dp:
            out.append((f"{base}.worker", "when worker is specified, parallelism must be configured for either data "
                                          "parallelism or pipeline parallelism"))
        if is_pp and is_dp:
            out.append((f"{base}.parallelism", "cannot set both pipeline parallelism and data parallelism "
                                               "(data or dataLocal) simultaneously"))
        if ("data" in par) != ("dataLocal" in par):
            missing = "dataLocal" if "data" in par else "data"
            out.append((f"{base}.parallelism.{missing}", f"{missing} must be set when "
                                                         f"{'data' if missing == 'dataLocal' else 'dataLocal'} is set"))
    return out


def _actuator(scaling: dict[str, Any] | None) -> str | None:
    wva = (scaling or {}).get("wva") or {}
    return "hpa" if "hpa" in wva else "keda" if "keda" in wva else None


def cel_rules(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """The CRD's CEL rules listed in the module doc (LLMInferenceService and its Config)."""
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return []
    out = _workload_cel(spec, "spec")
    if isinstance(spec.get("prefill"), dict):
        out += _workload_cel(spec["prefill"], "spec.prefill")
    scheduler = (spec.get("router") or {}).get("scheduler")
    if isinstance(scheduler, dict):
        pool_spec = (scheduler.get("pool") or {}).get("spec") or {}
        ports = [p.get("number") for p in pool_spec.get("targetPorts") or []]
        if len(ports) != len(set(ports)):
            out.append(("spec.router.scheduler.pool.spec.targetPorts", "port number must be unique"))
        epp = pool_spec.get("endpointPickerRef")
        if isinstance(epp, dict) and epp.get("kind", "Service") == "Service" and "port" not in epp:
            out.append(("spec.router.scheduler.pool.spec.endpointPickerRef",
                        "port is required when kind is 'Service' or unspecified"))
    return out


def webhook_rules(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """KServe's v1alpha2 admission-webhook rules for LLMInferenceService listed in the module doc."""
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return []
    out = _workload_webhook(spec, "spec")
    prefill = spec.get("prefill")
    if isinstance(prefill, dict):
        out += _workload_webhook(prefill, "spec.prefill")
        if spec.get("scaling") and prefill.get("scaling") and _actuator(spec["scaling"]) != _actuator(prefill["scaling"]):
            out.append(("spec.prefill.scaling.wva", "decode and prefill must use the same actuator backend"))
    router = spec.get("router") or {}
    scheduler = router.get("scheduler")
    if isinstance(scheduler, dict):
        if scheduler.get("replicas") is not None and scheduler["replicas"] <= 0:
            out.append(("spec.router.scheduler.replicas", "scheduler replicas must be greater than zero"))
        config = scheduler.get("config")
        if isinstance(config, dict) and ("inline" in config) == ("ref" in config):
            out.append(("spec.router.scheduler.config", "exactly one of inline or ref is required"))
    http = ((router.get("route") or {}).get("http")) or {}
    if http.get("refs") and http.get("spec") is not None:
        out.append(("spec.router.route.http", "cannot use both custom HTTPRoute refs and an inline route spec"))
    gateway = router.get("gateway")
    if http.get("refs") and isinstance(gateway, dict) and not gateway.get("refs"):
        out.append(("spec.router.route.http.refs", "custom HTTP routes cannot be used with a managed gateway; "
                                                   "set spec.router.gateway.refs"))
    return out


# --- entry points ------------------------------------------------------------------------------

def _core_problems(doc: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        import kubernetes_validate
        from kubernetes_validate.utils import SchemaNotFoundError
    except ImportError:  # dev tool; the API server checks core kinds in the cluster
        return []
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as err:
        return [(_path(err.path), err.message)]
    except SchemaNotFoundError:
        return [("", f"unknown kind {doc.get('apiVersion')}/{doc.get('kind')}: no CRD in shipyard/schemas "
                     "and not a core Kubernetes kind")]
    return []


def validate_object(doc: Any, source: str = "<manifest>") -> list[Problem]:
    """Every problem an API server (with the CRDs and KServe webhook installed) would report."""
    if not isinstance(doc, dict) or "apiVersion" not in doc or "kind" not in doc:
        return [Problem(source, "", "not a Kubernetes object (needs apiVersion and kind)")]
    group, version = _split_api_version(str(doc["apiVersion"]))
    kind = str(doc["kind"])
    label = f"{source} {kind}/{(doc.get('metadata') or {}).get('name', '?')}"
    raw: list[tuple[str, str]] = []
    validator = _validator(group, version, kind) if group else None
    if validator is not None:
        for err in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
            raw.append((_path(err.absolute_path), err.message))
        _list_semantics(doc, _crd_index()[(group, version, kind)], [], raw)
        raw += check_metadata(doc)
        if group == "serving.kserve.io" and kind in ("LLMInferenceService", "LLMInferenceServiceConfig"):
            raw += cel_rules(doc)
        if group == "serving.kserve.io" and kind == "LLMInferenceService":
            raw += webhook_rules(doc)
    elif (group, kind) in UNSCHEMED_KINDS:
        raw += check_metadata(doc) if kind != "Kustomization" else []
        raw += _structural_problems(doc)
    elif "." in group and not group.endswith(".k8s.io"):
        known = sorted({(g, v) for g, v, k in _crd_index() if k == kind})
        hint = f" (served: {', '.join(f'{g}/{v}' for g, v in known)})" if known else ""
        raw.append(("apiVersion", f"no upstream schema for {doc['apiVersion']} {kind}{hint}"))
    else:
        raw += _core_problems(doc)
        raw += check_metadata(doc)
    return [Problem(label, path, message) for path, message in raw]


def _structural_problems(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """Minimal checks for KEDA ScaledObject (its CRD is not vendored in shipyard/schemas)."""
    if doc.get("kind") != "ScaledObject":
        return []
    out: list[tuple[str, str]] = []
    spec = doc.get("spec") or {}
    if not (spec.get("scaleTargetRef") or {}).get("name"):
        out.append(("spec.scaleTargetRef.name", "is required"))
    triggers = spec.get("triggers")
    if not isinstance(triggers, list) or not triggers:
        out.append(("spec.triggers", "at least one trigger is required"))
    for i, trig in enumerate(triggers or []):
        if not isinstance(trig, dict) or not trig.get("type") or not isinstance(trig.get("metadata"), dict):
            out.append((f"spec.triggers[{i}]", "needs type and metadata"))
    lo, hi = spec.get("minReplicaCount"), spec.get("maxReplicaCount")
    if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
        out.append(("spec", "minReplicaCount cannot exceed maxReplicaCount"))
    return out


def validate_documents(docs: Iterable[Any], source: str = "<manifest>") -> list[Problem]:
    """Validate several objects (a multi-document YAML)."""
    problems: list[Problem] = []
    for i, doc in enumerate(docs):
        problems += validate_object(doc, f"{source}#{i}")
    return problems


def validate_file(path: str | os.PathLike[str]) -> list[Problem]:
    """Validate every document of a YAML file (``-`` reads standard input)."""
    import sys

    path = Path(path)
    if str(path) != "-" and not path.exists():
        raise ShipyardError(str(path), "does not exist", "give a YAML manifest file")
    try:
        docs = _load_yaml_all(sys.stdin.read() if str(path) == "-" else read_text(path, str(path)), str(path))
    except yaml.YAMLError as err:
        return [Problem(str(path), "", f"not valid YAML: {str(err).splitlines()[0]}")]
    except ShipyardError as err:
        if "given twice" not in err.problem:
            raise
        return [Problem(str(path), "", err.problem)]
    if not docs:
        return [Problem(str(path), "", "holds no objects")]
    return validate_documents(docs, str(path))


def require_valid(docs: list[dict[str, Any]], source: str = "rendered manifest") -> None:
    """Raise a one-line :class:`ShipyardError` naming the first problem (and how many more).

    The vendored schemas ship with shipyard, so a step image validates exactly as a workstation does."""
    problems = validate_documents(docs, source)
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ShipyardError(problems[0].source, f"{problems[0].path}: {problems[0].message}{more}",
                            "fix the deploy parameters; `shipyard validate FILE` lists every problem")
