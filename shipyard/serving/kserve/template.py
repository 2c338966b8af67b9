"""Template mode: a user's own LLMInferenceService, loaded, checked and (from v1alpha1) converted.

``deploy_config.template`` is a complete LLMInferenceService (a mapping, YAML text, or an
``s3://bucket/key.yaml`` object; the CLI reads ``--template FILE``). It is validated strictly
against the vendored CRD of its own version first, so a typo is named where the user wrote it.

A ``serving.kserve.io/v1alpha1`` template is converted to ``v1alpha2`` the way KServe's conversion
webhook does (``pkg/apis/serving/v1alpha1/llm_inference_service_conversion.go``):

* every field the two versions share is copied unchanged;
* ``spec.model.criticality`` (gone in v1alpha2) moves to the annotation
  ``internal.serving.kserve.io/model-criticality``, and the LoRA adapters' criticalities to
  ``internal.serving.kserve.io/lora-criticalities`` (JSON ``{"index": "Criticality"}``);
* an inline ``spec.router.scheduler.pool.spec`` (GIE v1alpha2 InferencePool form) becomes the GIE
  v1 form: ``selector`` -> ``selector.matchLabels``, ``targetPortNumber`` -> ``targetPorts:
  [{number}]``, ``extensionRef`` -> ``endpointPickerRef`` (``portNumber`` -> ``port.number``).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml

from shipyard.core.errors import ShipyardError
from shipyard.core.jsonargs import load_yaml
from shipyard.models.s3 import client, load_config, parse_s3_uri
from shipyard.serving.kserve.validate import validate_object

GROUP = "serving.kserve.io"
V1ALPHA1, V1ALPHA2 = f"{GROUP}/v1alpha1", f"{GROUP}/v1alpha2"
MODEL_CRITICALITY = "internal.serving.kserve.io/model-criticality"
LORA_CRITICALITIES = "internal.serving.kserve.io/lora-criticalities"
FIELD = "deploy_config.template"


def check_s3_template(uri: str) -> str:
    """An ``s3://BUCKET/KEY`` template URI, checked for form only (read later by :func:`load_template`)."""
    _, key = parse_s3_uri(uri, FIELD)
    if not key:
        raise ShipyardError(FIELD, f"{uri} names a bucket, not an object", "write s3://BUCKET/KEY.yaml")
    return uri


def _read_capped(minio: Any, bucket: str, key: str, limit: int) -> bytes:
    """At most ``limit`` bytes of one object (a raw ``minio.Minio``)."""
    response = minio.get_object(bucket, key)
    try:
        return bytes(response.read(limit))
    finally:
        response.close()
        response.release_conn()


def read_s3_text(uri: str) -> str:
    """The text of one S3 object (credentials from the environment, as for models)."""
    check_s3_template(uri)
    bucket, key = parse_s3_uri(uri, FIELD)
    config = load_config()
    try:
        mc = client(config)
        data = mc.within(f"get_object {uri}", _read_capped, mc.minio, bucket, key, 4 * 2**20 + 1, size=4 * 2**20)
    except ShipyardError:  # past SHIPYARD_S3_TIMEOUT_S: one line naming it
        raise
    except Exception as err:  # minio S3Error, urllib3 errors: one line naming the object
        code = getattr(err, "code", None) or type(err).__name__
        raise ShipyardError(FIELD, f"cannot read {uri} ({code}: {str(getattr(err, 'message', err)).splitlines()[0][:200]})",
                            "check the object key, and the keys of Secret shipyard-s3 that the deploy step gets "
                            "(secrets.shipyard-s3.steps in the cluster config)") from None
    if len(data) > 4 * 2**20:
        raise ShipyardError(FIELD, f"{uri} is larger than 4 MiB", "give the LLMInferenceService manifest itself")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ShipyardError(FIELD, f"{uri} is not UTF-8 text", "give a YAML manifest") from None


def load_template(template: Any) -> dict[str, Any]:
    """The template as a v1alpha2 LLMInferenceService mapping, validated against the vendored CRD."""
    source = "template"
    if isinstance(template, str):
        text = template
        if template.strip().startswith("s3://"):
            source = template.strip()
            text = read_s3_text(source)
        try:  # strict: a key given twice (which Kubernetes would resolve to the last) is refused
            docs = [d for d in load_yaml(text, FIELD, all_documents=True) if d is not None]
        except yaml.YAMLError as err:
            raise ShipyardError(FIELD, f"{source} is not valid YAML: {str(err).splitlines()[0]}",
                                "give an LLMInferenceService manifest") from None
        if len(docs) != 1:
            raise ShipyardError(FIELD, f"{source} holds {len(docs)} documents", "give exactly one LLMInferenceService")
        template = docs[0]
    if not isinstance(template, dict):
        raise ShipyardError(FIELD, f"{str(template)[:60]!r} is not an LLMInferenceService",
                            "give the manifest as a mapping, YAML text or s3://BUCKET/KEY.yaml (a file: shipyard deploy --template FILE)")
    if template.get("kind") != "LLMInferenceService" or template.get("apiVersion") not in (V1ALPHA1, V1ALPHA2):
        raise ShipyardError(FIELD, f"is {template.get('apiVersion')}/{template.get('kind')}, not an LLMInferenceService",
                            f"give a {V1ALPHA2} (or {V1ALPHA1}) LLMInferenceService")
    if not isinstance(template.get("spec"), dict):
        raise ShipyardError(f"{FIELD}.spec", "is missing", "give the LLMInferenceService's spec")
    template = copy.deepcopy(template)
    template.pop("status", None)
    meta = template.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise ShipyardError(f"{FIELD}.metadata", "must be a mapping", "write name:, namespace:, labels:")
    for key in ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink"):
        meta.pop(key, None)  # server-set fields of a manifest exported with kubectl get -o yaml
    _check(template, "the template")
    if template["apiVersion"] == V1ALPHA1:
        template = convert_v1alpha1(template)
    return template


def _check(doc: dict[str, Any], what: str) -> None:
    probe = copy.deepcopy(doc)
    spec = probe.setdefault("spec", {})
    model = spec.setdefault("model", {})
    model.setdefault("uri", "hf://placeholder/model")  # shipyard sets it; a template may leave it out
    meta = probe["metadata"]
    meta.setdefault("name", "template")
    problems = [p for p in validate_object(probe, what)]
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ShipyardError(FIELD, f"{problems[0].path or '(object)'}: {problems[0].message}{more}",
                            f"fix {what}; `shipyard validate FILE` lists every problem")


def _pool_spec_to_v1(spec: dict[str, Any]) -> dict[str, Any]:
    """GIE v1alpha2 InferencePoolSpec -> v1 (the GIE conversion KServe calls)."""
    out: dict[str, Any] = {}
    if "selector" in spec:
        out["selector"] = {"matchLabels": dict(spec["selector"] or {})}
    if "targetPortNumber" in spec:
        out["targetPorts"] = [{"number": spec["targetPortNumber"]}]
    ext = spec.get("extensionRef")
    if isinstance(ext, dict):
        ref = {k: ext[k] for k in ("group", "kind", "name", "failureMode") if k in ext}
        if "portNumber" in ext:
            ref["port"] = {"number": ext["portNumber"]}
        out["endpointPickerRef"] = ref
    return out


def convert_v1alpha1(doc: dict[str, Any]) -> dict[str, Any]:
    """A v1alpha1 LLMInferenceService as v1alpha2 (KServe's conversion rules, see the module doc)."""
    out = copy.deepcopy(doc)
    out["apiVersion"] = V1ALPHA2
    spec = out["spec"]
    model = spec.get("model") or {}
    annotations: dict[str, str] = {}
    criticality = model.pop("criticality", None)
    if criticality:
        annotations[MODEL_CRITICALITY] = criticality
    adapters = (model.get("lora") or {}).get("adapters") or []
    crits = {}
    for i, adapter in enumerate(adapters):
        if isinstance(adapter, dict) and adapter.get("criticality"):
            crits[str(i)] = adapter["criticality"]
        if isinstance(adapter, dict):
            adapter.pop("criticality", None)
    if crits:
        annotations[LORA_CRITICALITIES] = json.dumps(crits, separators=(",", ":"), sort_keys=True)
    if annotations:
        out["metadata"].setdefault("annotations", {}).update(annotations)
    pool = ((spec.get("router") or {}).get("scheduler") or {}).get("pool")
    if isinstance(pool, dict) and isinstance(pool.get("spec"), dict):
        pool["spec"] = _pool_spec_to_v1(pool["spec"])
    _check(out, "the template converted to v1alpha2")
    return out


__all__ = ["load_template", "convert_v1alpha1", "read_s3_text", "check_s3_template"]
