"""Deploy parameters: one typed object built from the ``deploy_config`` JSON, a preset and flags.

Every check that can be made without a cluster happens here, each failing with a one-line
:class:`~shipyard.core.errors.ShipyardError` naming the parameter and the fix.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from shipyard.core.errors import ShipyardError, shown
from shipyard.core.files import package_dir
from shipyard.core.jsonargs import json_object
from shipyard.core.k8s_names import is_dns1035_label, is_label, is_object_name
from shipyard.core.numbers import check_number
from shipyard.core.redact import has_credentials, looks_like_token
from shipyard.oci.reference import DIGEST_RE, require_pinned
from shipyard.oci.reference import parse as parse_reference
from shipyard.serving.kserve.template import check_s3_template, load_template
from shipyard.serving.vllm_cli import check_vllm_args, mapping_words
from shipyard.serving.vllm_flags import DEPLOY_FLAGS, refuse_owned

PRESETS_DIR = package_dir("shipyard.serving.kserve") / "presets"
KV_ROLES = {"producer-consumer", "both"}
MANAGED, NONE = "managed", "none"
#: ``deploy_config.image: "preset"``: serve with the image of KServe's presets (llm-d's vLLM build),
#: not the image the SLO gate benchmarked (the default). Any other value pins that image.
PRESET_IMAGE = "preset"
#: a container image reference: [registry[:port]/]repo[/repo...][:tag][@sha256:<64 hex>]
#: (``deploy_config.image`` also needs a ``/``: a vLLM serving image is never a bare library name)
IMAGE_RE = re.compile(r"^(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
                      r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
                      r"(?:@sha256:[0-9a-f]{64})?\Z")
#: the Python module a P/D KV connector imports in the serving vLLM (vLLM raises "NIXL is not
#: available" at start-up without ``nixl``): the image that serves P/D must have it
CONNECTOR_MODULES = {"NixlConnector": "nixl", "LMCacheConnectorV1": "lmcache"}
# Longest child name KServe derives is "<name>-kserve-workload-svc" and similar; Services and
# Deployments must stay within 63 characters.
MAX_NAME = 42
PLANNER_KEYS = {"gpu_memory_utilization", "max_model_len", "max_num_seqs", "kv_cache_dtype", "wanted_concurrency",
                "dtype", "max_num_batched_tokens", "enforce_eager", "kv_cache_memory_bytes"}
SCHEDULER_KEYS = {"pool", "config", "config_ref", "preset", "block_size", "hash_seed"}
SCHEDULER_PRESETS = ("precise-prefix-cache", "latency-predictor")
#: the KServe release shipyard renders for (the vendored CRDs and presets, shipyard/schemas/SOURCES.md)
TARGET_KSERVE = (0, 20)
_GIE_CONFIG_API = "inference.networking.x-k8s.io/v1alpha1"
#: KServe release -> (endpoint picker it ships, the EndpointPickerConfig apiVersions it decodes, strictly,
#: preferred first; any other is a start-up error of the scheduler pod). v0.17 ships
#: llm-d-inference-scheduler v0.4.0 and v0.18/v0.19 v0.7.1, whose config loader is GIE's (only
#: inference.networking.x-k8s.io/v1alpha1); v0.20 ships llm-d-router v0.9.0 (config-llm-scheduler.yaml),
#: which decodes llm-d.ai/v1alpha1 and still the deprecated GIE group (pkg/epp/config/loader).
EPP_CONFIG_APIS: dict[tuple[int, int], tuple[str, tuple[str, ...]]] = {
    (0, 17): ("llm-d-inference-scheduler v0.4.0", (_GIE_CONFIG_API,)),
    (0, 18): ("llm-d-inference-scheduler v0.7.1", (_GIE_CONFIG_API,)),
    (0, 19): ("llm-d-inference-scheduler v0.7.1", (_GIE_CONFIG_API,)),
    (0, 20): ("llm-d-router v0.9.0", ("llm-d.ai/v1alpha1", _GIE_CONFIG_API)),
}
#: profile handlers that route prefill and decode apart (KServe v0.20 renames pd-profile-handler to
#: disagg-profile-handler when it migrates a config)
PD_PROFILE_HANDLERS = ("disagg-profile-handler", "pd-profile-handler")
POOL_KEYS = {"vllm_args"}
#: the largest value of a Kubernetes int32 field (a Probe's seconds and thresholds)
INT32_MAX = 2**31 - 1
PROBE_KEYS = {"period_seconds", "timeout_seconds", "failure_threshold", "initial_delay_seconds", "success_threshold"}
OFFLOAD_KEYS = {"cpu", "eviction_policy", "secondary"}
LORA_KEYS = {"adapters", "max_adapters", "max_rank", "max_cpu_adapters"}
OBJECTIVE_KEYS = {"name", "priority", "pool"}
# What deploy_config may set next to a template: where the service goes, which model, lineage, sizing.
TEMPLATE_KEYS = {"name", "namespace", "model_uri", "template", "served_model_name", "model_name", "allow_mutable_tag",
                 "labels", "annotations", "mlflow_model_name", "mlflow_model_version", "oci_digest", "pipeline_run_id",
                 "planner", "gpu_memory_gib", "objectives", "tuned_vllm_args"}
# These patterns end in ``\Z``, not ``$`` (which also matches before a final newline: "8Gi\n" passed and
# reached the manifest as written); a quantity is checked as written, unstripped, since it is rendered so.
QUANTITY_RE = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?\Z")
QUANTITY_SCALE = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "n": 1e-9, "u": 1e-6,
                  "m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
ENV_NAME_RE = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*\Z")
RESOURCE_NAME_RE = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                              r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
ADAPTER_SCHEMES = ("hf", "s3", "pvc")


@dataclass
class Router:
    """How requests reach the pods: managed Gateway/HTTPRoute/scheduler or references."""

    gateway: str | list[dict[str, str]] = MANAGED  # "managed" | "none" | [{"name":..,"namespace":..}]
    route: str | list[str] = MANAGED  # "managed" | "none" | [HTTPRoute names]
    # "managed" | "none" | {"pool": InferencePool name, "config": {EndpointPickerConfig} | "config_ref":
    # {"name": ConfigMap, "key": key}, "preset": "precise-prefix-cache" | "latency-predictor"}
    scheduler: str | dict[str, Any] = MANAGED

    @property
    def has_scheduler(self) -> bool:
        return self.scheduler != NONE


@dataclass
class Probes:
    """Probe timings for the vLLM container (the presets keep the handler: ``/health`` on 8000).

    ``startup_seconds`` is how long vLLM may take to start (given, or measured by shipyard);
    the startup probe allows it as ``failureThreshold = ceil(startup_seconds / period_seconds)``.
    ``liveness`` / ``readiness``: ``period_seconds``, ``timeout_seconds``, ``failure_threshold``,
    ``initial_delay_seconds``, ``success_threshold``."""

    startup_seconds: float | None = None
    period_seconds: int = 10
    liveness: dict[str, int] | None = None
    readiness: dict[str, int] | None = None


@dataclass
class Scaling:
    """Autoscaling: ``wva`` (the CRD's spec.scaling) or ``keda`` (a KEDA ScaledObject)."""

    mode: str = "wva"  # "wva" | "keda"
    min_replicas: int = 1
    max_replicas: int = 4
    actuator: str = "hpa"  # wva actuator: "hpa" | "keda"
    prefill_min_replicas: int | None = None
    prefill_max_replicas: int | None = None
    metric: str = "vllm:num_requests_waiting"
    threshold: float = 5.0  # keda: waiting requests per replica
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"
    polling_interval: int = 15
    cooldown_period: int = 300
    # wva: the accelerator WVA attributes the variant to (default: gpu_type), see WVA_ACCELERATOR_LABEL
    accelerator_name: str | None = None


@dataclass
class DeployConfig:
    """Everything the renderer needs; field names are the ``deploy_config`` JSON keys."""

    name: str
    model_uri: str
    namespace: str = "default"
    model_name: str | None = None
    allow_mutable_tag: bool = False
    mode: str | None = None  # "aggregated" | "pd" (default: pd when prefill_replicas > 0)
    replicas: int = 1
    prefill_replicas: int = 0
    tensor_parallel: int = 1
    prefill_tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    data_parallel: int | None = None
    data_local: int | None = None
    expert_parallel: bool = False
    gpus: int | None = None  # GPUs per pod (default: tensor_parallel x data_local)
    gpu_resource: str = "nvidia.com/gpu"
    gpu_type: str | None = None  # value of the node label nvidia.com/gpu.product
    gpu_memory_gib: float | None = None  # per GPU, for the memory planner
    cpu: str | None = None
    memory: str | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    router: Router = field(default_factory=Router)
    scaling: Scaling | None = None
    vllm_args: dict[str, Any] = field(default_factory=dict)
    #: the champion's flags from the serving-configuration search (selection.json "serving"); the
    #: deploy step fills it, between the planner's and the user's vllm_args
    tuned_vllm_args: dict[str, Any] = field(default_factory=dict)
    planner: dict[str, Any] = field(default_factory=dict)
    base_refs: list[str] = field(default_factory=list)
    fast_start: bool = False
    kv_connector: str = "NixlConnector"
    kv_role: str = "producer-consumer"
    image: str | None = None
    env: dict[str, Any] = field(default_factory=dict)  # NAME -> text, {"value": ..} or {"valueFrom": {..}}
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    mlflow_model_name: str | None = None
    mlflow_model_version: str | None = None
    oci_digest: str | None = None
    pipeline_run_id: str | None = None
    served_model_name: str | None = None  # spec.model.name (default: model_name, else the service name)
    # a complete LLMInferenceService to deploy into (template mode); an s3:// URI until rendered
    template: dict[str, Any] | str | None = None
    probes: Probes | None = None
    #: how an oci:// model reaches the pod: "modelcar" (KServe's sidecar, the default) or "native" (an
    #: image volume: spec.model.uri oci+native://, KServe >= v0.20, Kubernetes >= 1.33 with image volumes)
    oci_delivery: str = "modelcar"
    service_account: str | None = None
    image_pull_secrets: list[str] = field(default_factory=list)
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)  # {"requests": {...}, "limits": {...}}
    extra_resources: dict[str, Any] = field(default_factory=dict)  # e.g. {"rdma/roce_gdr": 1}
    shm_size: str | None = None  # /dev/shm (the presets' dshm volume), e.g. "32Gi"
    secret_env: dict[str, Any] = field(default_factory=dict)  # NAME -> Secret name, or {"secret", "key"}
    prefill: dict[str, Any] = field(default_factory=dict)  # {"vllm_args": {...}} for the prefill pool only
    decode: dict[str, Any] = field(default_factory=dict)  # {"vllm_args": {...}} for the decode pool only
    kv_cache_offloading: dict[str, Any] | None = None  # {"cpu": "100Gi", "eviction_policy", "secondary"}
    lora: dict[str, Any] | None = None  # {"adapters": [{"name", "uri"}], "max_adapters", "max_rank"}
    objectives: list[dict[str, Any]] = field(default_factory=list)  # InferenceObjectives [{"name", "priority"}]

    @property
    def pinned_image(self) -> str | None:
        """The image set on the ``main`` containers; None: KServe's preset image serves."""
        return None if not self.image or self.image == PRESET_IMAGE else self.image

    @property
    def disaggregated(self) -> bool:
        return self.mode == "pd"

    @property
    def served_name(self) -> str:
        return self.served_model_name or self.model_name or self.name

    @property
    def scheduler_options(self) -> dict[str, Any]:
        """``router.scheduler`` as a mapping ({} for "managed")."""
        return self.router.scheduler if isinstance(self.router.scheduler, dict) else {}

    @property
    def pool_name(self) -> str | None:
        """The InferencePool the service's endpoints join: a referenced one, or the one KServe
        creates for a managed scheduler (``ChildName(name, "-inference-pool")``, scheduler preset)."""
        if not self.router.has_scheduler:
            return None
        return self.scheduler_options.get("pool") or f"{self.name}-inference-pool"

    @property
    def nodes(self) -> int:
        """Pods per replica (LeaderWorkerSet group size): data / dataLocal, or pipeline."""
        if self.data_parallel:
            return max(self.data_parallel // (self.data_local or 1), 1)
        return self.pipeline_parallel or 1

    @property
    def gpus_per_pod(self) -> int:
        return self.gpus if self.gpus is not None else self.tensor_parallel * (self.data_local or 1)


#: the fix of a vLLM flag the deployment sets itself (:data:`shipyard.serving.vllm_flags.DEPLOY_FLAGS`)
DEPLOY_FIX = ("drop it; set deploy_config's tensor_parallel, data_parallel, data_local, pipeline_parallel, "
              "expert_parallel, kv_connector/kv_role or served_model_name instead")


def _fail(field_name: str, problem: str, fix: str) -> ShipyardError:
    return ShipyardError(f"deploy_config.{field_name}", problem, fix)


_KINDS: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,),
                                       "dict": (dict,), "list": (list,)}
_SHOWN = {"str": "text", "int": "a whole number", "float": "a number", "bool": "true or false", "dict": "an object",
          "list": "a list"}


#: fields whose own rule (check_config) explains a wrong value better than a type error; numbers
#: written as text ("2", "1h") are also left to their rules
_OWN_CHECKS = frozenset({"image_pull_secrets", "base_refs", "mode", "served_model_name", "replicas", "prefill_replicas",
                         "tensor_parallel", "prefill_tensor_parallel", "pipeline_parallel", "data_parallel",
                         "data_local", "gpus", "startup_seconds", "period_seconds"})


def _refuse_credentials(value: Any, path: str) -> None:
    """No credential anywhere in the config (a model URI ``s3://KEY:SECRET@bucket/m``, a token in
    an annotation or an ``env`` value): it would be rendered into the manifest and its annotations.
    One line naming the key, never the value; credentials go through ``secret_env`` or the
    contract's Secrets (:func:`shipyard.core.redact.has_credentials`: the redaction's own rule)."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in item.items())
            if any(isinstance(k, str) and has_credentials(k) for k in item):
                raise _fail(where or "deploy_config", "has a key that carries credentials (not shown)",
                            "drop them; give credentials through secret_env or the cluster's Secrets")
        elif isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
        elif isinstance(item, str) and has_credentials(item):
            raise _fail(where or "deploy_config", "carries credentials (not shown)",
                        "drop them; give credentials through secret_env or the cluster's Secrets "
                        "(shipyard-s3, shipyard-registry, hf-token)")


def _check_types(cls: type, data: dict[str, Any], prefix: str) -> None:
    """Each value has its field's type before anything uses it (a list where an object is expected,
    a number where text is): one line naming the field, never a crash in the deploy step."""
    for f in dataclasses.fields(cls):
        if f.name not in data or data[f.name] is None:
            continue
        value, kinds = data[f.name], []
        for member in str(f.type).split(" | "):
            base = member.strip().split("[", 1)[0]
            if base == "None":
                continue
            if base not in _KINDS:  # a nested object (Router, Scaling, Probes): built and checked on its own
                kinds = []
                break
            kinds.append(base)
        if not kinds:
            continue
        if f.name in ("cpu", "memory", "shm_size"):  # Kubernetes quantities may be numbers (cpu: 4)
            kinds.append("float")
        ok = any(isinstance(value, _KINDS[k]) and not (isinstance(value, bool) and k in ("int", "float")) for k in kinds)
        if ok and str(f.type).startswith(("dict[str, str]", "list[str]")):
            items = list(value.items()) if isinstance(value, dict) else [("", v) for v in value]
            ok = all(isinstance(k, str) and isinstance(v, str) for k, v in items)
            kinds = ["an object of text values" if isinstance(value, dict) else "a list of text"]
        if not ok and f.name in _OWN_CHECKS:
            continue  # the field's own rule (check_config) says it in its words
        if not ok:
            shown = repr(value)
            shown = shown if len(shown) <= 60 else shown[:56] + "..."
            want = " or ".join(_SHOWN.get(k, k) for k in kinds)
            raise _fail(f"{prefix}{f.name}", f"must be {want}, got {shown}",
                        "fix the value's type (see components/deploy/README.md)")


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise _fail(f"{prefix}{unknown[0]}", "is not a deploy parameter", f"use one of: {', '.join(sorted(names))}")
    _check_types(cls, data, prefix)
    return cls(**data)


def load_preset(name: str) -> dict[str, Any]:
    """A named deploy preset from ``shipyard/serving/kserve/presets/<name>.yaml``."""
    path = PRESETS_DIR / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))
        raise _fail("preset", f"unknown preset {name!r}", f"use one of: {', '.join(known)}")
    data = yaml.safe_load(path.read_text()) or {}
    data.pop("description", None)
    return data


#: one API call's read timeout (its deadline in all: this and the connect attempts): above kube-apiserver's own --request-timeout (60 s by default, admission
#: webhooks included, each at most 30 s), so the server's verdict (applied, or its 504) arrives before the
#: client gives up on an apply the server may still commit (which the deploy then rolls back unseen)
API_TIMEOUT_S = 75.0
#: ``wait_timeout_s`` None: derived from the rendered startup probe (``shipyard.serving.sizing.ready_wait_seconds``)
APPLY_KEYS: dict[str, float | None] = {"wait_timeout_s": None, "poll_s": 5.0, "false_grace_s": 120.0,
                                       "api_timeout_s": API_TIMEOUT_S}


def apply_options(options: Any) -> dict[str, Any]:
    """``deploy_config.apply``: the wait / poll / grace / API timeouts, in seconds, with defaults
    (``wait_timeout_s`` None: the deploy derives it from the startup probe)."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise _fail("apply", "must be an object", '{"wait_timeout_s": 1800}')
    unknown = sorted(set(options) - set(APPLY_KEYS))
    if unknown:
        raise _fail(f"apply.{unknown[0]}", "is not an apply option", f"use {sorted(APPLY_KEYS)}")
    merged: dict[str, Any] = {}
    for key, default in APPLY_KEYS.items():
        value = options.get(key, default)
        if value is None and default is None:
            merged[key] = None
            continue
        low = 0 if key == "false_grace_s" else 0.0
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < low \
                or (key != "false_grace_s" and value == 0):
            raise _fail(f"apply.{key}", f"{value!r} is not a number of seconds", "use seconds > 0 (false_grace_s >= 0)")
        merged[key] = float(value)
    return merged


def parse_config(raw: str | dict[str, Any] | None, **overrides: Any) -> DeployConfig:
    """Build a :class:`DeployConfig` from the render parameters (JSON or a dict), an optional
    ``preset`` inside them and keyword overrides (CLI flags, component inputs); ``None`` overrides
    are ignored. The whole ``deploy_config`` (its ``apply``, ``verify`` and ``rollout`` objects
    included) is read by :func:`shipyard.params.deploy.parse_deploy_config`, which calls this."""
    data = json_object(raw, "deploy_config", '{"mode": "pd", "replicas": 2}')
    preset = data.pop("preset", None)
    if preset is not None and (not isinstance(preset, str) or not preset.strip()):
        raise _fail("preset", f"must be a preset name, got {preset!r}"[:120], "e.g. aggregated or pd-nixl")
    merged = {**(load_preset(preset) if preset else {}), **data}
    merged.update({k: v for k, v in overrides.items() if v is not None})
    _refuse_credentials(merged, "")
    if merged.get("template") is not None:
        if preset:
            raise _fail("preset", "cannot be combined with a template", "drop preset; the template says everything")
        _template_mode(merged)
    for key in ("name", "model_uri"):
        if not merged.get(key):
            raise _fail(key, "is required", f"give {key}")
    if isinstance(merged.get("router"), dict):
        merged["router"] = _build(Router, merged["router"], "router.")
    elif merged.get("router") is not None and not isinstance(merged["router"], Router):
        raise _fail("router", "must be an object", 'e.g. {"gateway": "managed", "scheduler": "managed"}')
    if isinstance(merged.get("scaling"), dict):
        merged["scaling"] = _build(Scaling, merged["scaling"], "scaling.")
    elif merged.get("scaling") is not None and not isinstance(merged["scaling"], Scaling):
        raise _fail("scaling", "must be an object", 'e.g. {"mode": "wva", "min_replicas": 1, "max_replicas": 4}')
    if isinstance(merged.get("probes"), dict):
        merged["probes"] = _build(Probes, merged["probes"], "probes.")
    elif merged.get("probes") is not None:
        raise _fail("probes", "must be an object", 'e.g. {"startup_seconds": 4800}')
    cfg = _build(DeployConfig, merged, "")
    check_config(cfg)
    return cfg


def _template_mode(merged: dict[str, Any]) -> None:
    """Template mode: load the template; name and namespace default to its own; anything the
    template itself says (replicas, router, pods...) may not also come from deploy_config."""
    extra = sorted(set(merged) - TEMPLATE_KEYS)
    if extra:
        raise _fail(extra[0], "is set by the template in template mode",
                    f"write it into the template, or drop the template; next to one give only {', '.join(sorted(TEMPLATE_KEYS))}")
    raw = merged["template"]
    if isinstance(raw, str) and raw.strip().startswith("s3://") and merged.get("name"):
        # read when rendering (the deploy step), not in the pipeline's pre-flight, which has no S3 credentials
        merged["template"] = check_s3_template(raw.strip())
        return
    template = load_template(raw)
    _refuse_credentials(template, "template")  # its model URI, annotations and env are rendered as they are
    merged["template"] = template
    check_template_scheduler(template)
    meta = template.get("metadata") or {}
    if not merged.get("name") and meta.get("name"):
        merged["name"] = meta["name"]
    if not merged.get("namespace") and meta.get("namespace"):
        merged["namespace"] = meta["namespace"]


def check_template_scheduler(template: dict[str, Any]) -> None:
    """A template's inline scheduler config decodes in the targeted KServe's endpoint picker, and a
    P/D template (``spec.prefill``) keeps its P/D profile (:func:`refuse_pd_scheduler_loss`)."""
    spec = template.get("spec") or {}
    config = ((spec.get("router") or {}).get("scheduler") or {}).get("config") or {}
    where = "deploy_config.template.spec.router.scheduler.config"
    if not isinstance(config, dict):
        return
    if "inline" in config:
        check_scheduler_config(config["inline"], f"{where}.inline")
    if spec.get("prefill") is not None:
        refuse_pd_scheduler_loss(config.get("inline"), f"{where}.inline", f"{where}.ref" if "ref" in config else None)


def parse_quantity(value: Any, field_name: str) -> float:
    """A Kubernetes resource quantity ("16Gi", "500m", 2) as a number, or a one-line error."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _fail(field_name, f"{value!r} is not a resource quantity", 'write a number or a quantity such as "16Gi"')
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise _fail(field_name, f"{value!r} is not a resource quantity", "use a number >= 0")
        return float(value)
    match = QUANTITY_RE.match(value)
    if not match:
        raise _fail(field_name, f"{value!r} is not a resource quantity", 'write e.g. "16Gi", "500m" or "2"')
    number, suffix = match.group(1), match.group(2) or ""
    amount = float(number + suffix) if suffix[:1] in ("e", "E") and suffix not in QUANTITY_SCALE \
        else float(number) * QUANTITY_SCALE[suffix]
    if not math.isfinite(amount) or amount < 0:  # the API server refuses a negative or unbounded request or limit
        raise _fail(field_name, f"{value!r} is not a resource quantity", "use a quantity >= 0, e.g. \"16Gi\" or \"500m\"")
    return amount


def _positive(cfg: DeployConfig, name: str, minimum: int = 1) -> None:
    check_number(getattr(cfg, name), f"deploy_config.{name}", int, minimum=minimum, fix=f"set {name} to {minimum} or more",
                 optional=True)


def check_model_uri(uri: str, allow_mutable_tag: bool) -> str | None:
    """Refuse URIs KServe cannot pull and mutable ``oci://`` tags; return the OCI digest if any."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme not in ("oci", "hf", "s3", "pvc", "gs", "https"):
        raise _fail("model_uri", f"{uri!r} is not a URI KServe can load",
                    "use the digest-pinned oci:// from the package step, or hf://, s3://, pvc://")
    if not rest.strip("/"):
        raise _fail("model_uri", f"{uri!r} names no model", f"write {scheme}://<location>")
    if scheme != "oci":
        return None
    where = "deploy_config.model_uri"
    ref = parse_reference(uri, where)
    if ref.is_layout and not ref.pinned and not allow_mutable_tag:  # run_deploy says what a layout needs
        raise _fail("model_uri", f"{uri!r} names no digest", "write oci:///PATH@sha256:... as the package step prints it")
    require_pinned(ref, where, allow_mutable_tag=allow_mutable_tag, how_to_allow="set allow_mutable_tag")
    return ref.digest or None


def check_config(cfg: DeployConfig) -> None:
    """Every rule that needs no cluster: names, parallelism, GPUs, P/D, router, scaling."""
    _check_identity(cfg)
    for name in ("tensor_parallel", "prefill_tensor_parallel", "pipeline_parallel", "data_parallel",
                 "data_local", "gpus"):
        _positive(cfg, name)
    _positive(cfg, "replicas", 0)
    _positive(cfg, "prefill_replicas", 0)
    _check_mode(cfg)
    _check_parallelism(cfg)
    _check_router(cfg.router)
    if cfg.disaggregated:
        _check_pd_scheduler(cfg)
    if cfg.scaling is not None:
        _check_scaling(cfg.scaling, cfg)
    _check_serving_options(cfg)
    _check_env(cfg)
    _check_pod_options(cfg)
    for pool in ("prefill", "decode"):
        _check_pool(cfg, pool)
    if cfg.probes is not None:
        _check_probes(cfg.probes)
    if cfg.kv_cache_offloading is not None:
        _check_offloading(cfg)
    if cfg.lora is not None:
        _check_lora(cfg.lora, cfg.served_name)
    _check_objectives(cfg)


def _check_identity(cfg: DeployConfig) -> None:
    """Name, namespace, model URI, OCI delivery and digest (``oci_digest`` is filled from the URI)."""
    if not is_dns1035_label(cfg.name, MAX_NAME):
        raise _fail("name", f"{cfg.name!r} must be a DNS-1035 label of at most {MAX_NAME} characters",
                    "use lower-case letters, digits and '-', starting with a letter")
    if not is_label(cfg.namespace):
        raise _fail("namespace", f"{cfg.namespace!r} is not a valid namespace", "use a DNS-1123 label")
    digest = check_model_uri(cfg.model_uri, cfg.allow_mutable_tag)
    if cfg.oci_delivery not in ("modelcar", "native"):
        raise _fail("oci_delivery", f"unknown delivery {cfg.oci_delivery!r}",
                    "use modelcar (a sidecar) or native (an image volume, KServe >= v0.20)")
    if cfg.oci_delivery == "native" and not (cfg.model_uri.startswith("oci://") and not cfg.model_uri.startswith("oci:///")):
        raise _fail("oci_delivery", f"native delivery needs a registry oci:// model_uri, got {cfg.model_uri!r}",
                    "push the package to a registry, or use oci_delivery modelcar")
    if cfg.oci_digest and digest and cfg.oci_digest != digest:
        raise _fail("oci_digest", f"{cfg.oci_digest} differs from the digest in model_uri ({digest})",
                    "drop oci_digest or make them agree")
    cfg.oci_digest = cfg.oci_digest or digest
    if cfg.oci_digest and not DIGEST_RE.match(cfg.oci_digest):
        raise _fail("oci_digest", f"{cfg.oci_digest!r} is not a sha256 digest", "write sha256:<64 hex>")


def _check_mode(cfg: DeployConfig) -> None:
    """``mode`` (from ``prefill_replicas`` when unset) and what P/D needs: prefill replicas, the scheduler, a KV role."""
    if cfg.mode is None:
        cfg.mode = "pd" if cfg.prefill_replicas else "aggregated"
    if cfg.mode not in ("aggregated", "pd"):
        raise _fail("mode", f"unknown mode {cfg.mode!r}", "use 'aggregated' or 'pd' (prefill/decode)")
    if cfg.mode == "aggregated" and cfg.prefill_replicas:
        raise _fail("prefill_replicas", "is set but mode is 'aggregated'", "set mode to 'pd' or drop prefill_replicas")
    if cfg.mode == "pd":
        if not cfg.prefill_replicas and not (cfg.scaling and cfg.scaling.mode == "wva"):
            raise _fail("prefill_replicas", "must be at least 1 in P/D mode", "set prefill_replicas (e.g. 1)")
        if not cfg.router.has_scheduler:
            raise _fail("router.scheduler", "prefill/decode disaggregation needs the llm-d scheduler to pick a "
                        "prefill and a decode pod, but the scheduler is 'none'",
                        "set router.scheduler to 'managed' or {\"pool\": NAME}, or use mode 'aggregated'")
        if cfg.kv_role not in KV_ROLES:
            raise _fail("kv_role", f"unknown kv_role {cfg.kv_role!r}", f"use one of {sorted(KV_ROLES)}")


def _check_parallelism(cfg: DeployConfig) -> None:
    """Tensor, pipeline, data and expert parallelism against the GPUs per pod."""
    if cfg.pipeline_parallel and (cfg.data_parallel or cfg.data_local):
        raise _fail("pipeline_parallel", "cannot be combined with data parallelism (KServe rejects "
                    "pipeline together with data/dataLocal)", "use either pipeline_parallel or data_parallel/data_local")
    if (cfg.data_parallel is None) != (cfg.data_local is None):
        raise _fail("data_local" if cfg.data_local is None else "data_parallel",
                    "data_parallel and data_local must be set together",
                    "set data_local to the data-parallel ranks per pod (data_parallel / pods)")
    if cfg.data_parallel and cfg.data_parallel % cfg.data_local:
        raise _fail("data_parallel", f"{cfg.data_parallel} is not a multiple of data_local={cfg.data_local}",
                    "make data_parallel = data_local x number of pods")
    tp = cfg.tensor_parallel
    gpus = cfg.gpus_per_pod
    if gpus % tp:
        raise _fail("tensor_parallel", f"{tp} does not divide the {gpus} GPUs per pod",
                    f"pick a tensor_parallel that divides {gpus} (or set gpus to a multiple of {tp})")
    used = tp * (cfg.data_local or 1)
    if gpus != used:
        raise _fail("gpus", f"{gpus} GPUs per pod but tensor_parallel x data_local uses {used}",
                    f"set gpus to {used}, or data_parallel/data_local to use {gpus // tp} ranks per pod")
    ptp = cfg.prefill_tensor_parallel or tp
    if cfg.disaggregated and cfg.gpus is not None and cfg.gpus % ptp:
        raise _fail("prefill_tensor_parallel", f"{ptp} does not divide the {cfg.gpus} GPUs per pod",
                    "pick a divisor of gpus")
    if cfg.expert_parallel and tp * (cfg.data_parallel or 1) < 2:
        raise _fail("expert_parallel", "needs more than one GPU (tensor_parallel x data_parallel >= 2)",
                    "raise tensor_parallel or data_parallel, or drop expert_parallel")


def _check_serving_options(cfg: DeployConfig) -> None:
    """vLLM flags, base presets, planner options, GPU memory and the served model name."""
    for flag in cfg.vllm_args:
        if not isinstance(flag, str) or not flag.strip("-"):
            raise _fail("vllm_args", f"bad flag {flag!r}", "use flag names such as 'max-model-len'")
    for where in ("vllm_args", "tuned_vllm_args"):
        refuse_owned(getattr(cfg, where), DEPLOY_FLAGS, f"deploy_config.{where}", "the deployment", DEPLOY_FIX,
                     keys=True)
        if cfg.image is None:  # shipyard's vllm image serves: its vLLM's parser (another image: its own vLLM's)
            check_vllm_args(mapping_words(getattr(cfg, where)), f"deploy_config.{where}")
    if not all(isinstance(b, str) and is_dns1035_label(b.replace(".", "-"), 253) for b in cfg.base_refs):
        raise _fail("base_refs", f"{cfg.base_refs!r} must be LLMInferenceServiceConfig names", "list preset names")
    unknown = sorted(set(cfg.planner) - PLANNER_KEYS)
    if unknown:
        raise _fail(f"planner.{unknown[0]}", "is not a planner option", f"use {', '.join(sorted(PLANNER_KEYS))}")
    if cfg.gpu_memory_gib is not None and cfg.gpu_memory_gib <= 0:
        raise _fail("gpu_memory_gib", "must be positive", "give the memory of one GPU in GiB, e.g. 80")
    if cfg.served_model_name is not None and (not isinstance(cfg.served_model_name, str)
                                              or not cfg.served_model_name.strip()):
        raise _fail("served_model_name", f"{cfg.served_model_name!r} is not a model name",
                    "give the name clients send as 'model', e.g. qwen2-7b")


def _check_env(cfg: DeployConfig) -> None:
    """``env``: NAME -> text, or {"value": text} / {"valueFrom": {...}}; ``secret_env``: NAME -> Secret."""
    if not isinstance(cfg.env, dict):
        raise _fail("env", "must be an object of NAME: value", '{"VLLM_LOGGING_LEVEL": "DEBUG"}')
    if not isinstance(cfg.secret_env, dict):
        raise _fail("secret_env", "must be an object of NAME: Secret", '{"HF_TOKEN": {"secret": "hf-token", "key": "token"}}')
    for name in [*cfg.env, *cfg.secret_env]:
        if not isinstance(name, str) or not ENV_NAME_RE.match(name) or looks_like_token(name):
            raise _fail("env" if name in cfg.env else "secret_env", f"{shown(name)} is not a valid environment "
                        "variable name", "use letters, digits, '_', '-', '.'")
    for name, value in cfg.env.items():
        if isinstance(value, str) and looks_like_token(value):
            raise _fail(f"env.{name}", "looks like a credential (not shown): env is rendered in plain text into the "
                        "manifest", "store it in a Kubernetes Secret and give that Secret's name (and key) in secret_env")
        if isinstance(value, dict):
            if len(value) != 1 or not ({"value", "valueFrom"} & set(value)) or \
                    ("valueFrom" in value and not isinstance(value["valueFrom"], dict)):
                raise _fail(f"env.{name}", f"{value!r} is neither a value nor a valueFrom",
                            'write "text", {"value": "text"} or {"valueFrom": {"secretKeyRef": {"name": S, "key": K}}}')
        elif isinstance(value, bool) or not isinstance(value, str | int | float):
            raise _fail(f"env.{name}", f"{value!r} is not text", 'write a string, or {"valueFrom": {...}}')
    for name, ref in cfg.secret_env.items():
        if name in cfg.env:
            raise _fail(f"secret_env.{name}", "is also set in env", "set it in one place")
        secret, key = (ref, name) if isinstance(ref, str) else (
            (ref.get("secret"), ref.get("key", name)) if isinstance(ref, dict) and set(ref) <= {"secret", "key"}
            else (None, None))
        if not isinstance(secret, str) or not is_object_name(secret) \
                or not isinstance(key, str) or not key:
            raise _fail(f"secret_env.{name}", f"{shown(ref)} does not name a Secret and key (a Secret's name goes "
                        "here, never its content)",
                        'write "SECRET" (key = the variable name) or {"secret": "hf-token", "key": "token"}')


def is_image_reference(text: Any) -> bool:
    """Whether ``text`` is an image reference ``deploy_config.image`` takes (see :data:`IMAGE_RE`)."""
    return isinstance(text, str) and bool(IMAGE_RE.match(text)) and "/" in text


def check_image(image: Any) -> None:
    """``deploy_config.image``: ``"preset"`` or a container image reference (no scheme, no spaces)."""
    if image is None or image == PRESET_IMAGE:
        return
    if not is_image_reference(image):
        raise _fail("image", f"{image!r} is not a container image reference"[:160],
                    f'write REGISTRY/REPO:TAG or REPO@sha256:<64 hex>, or "{PRESET_IMAGE}" for KServe\'s preset image; '
                    "leave it out to serve the image the benchmark ran")


def _check_pod_options(cfg: DeployConfig) -> None:
    """image, service_account, image_pull_secrets, resources, extra_resources, shm_size."""
    check_image(cfg.image)
    if cfg.service_account is not None and (not isinstance(cfg.service_account, str)
                                            or not is_object_name(cfg.service_account)):
        raise _fail("service_account", f"{shown(cfg.service_account, 100)} is not a ServiceAccount name",
                    "use a DNS-1123 name of at most 253 characters")
    if not isinstance(cfg.image_pull_secrets, list) or not all(isinstance(n, str) and is_object_name(n)
                                                                for n in cfg.image_pull_secrets):
        bad = next((n for n in cfg.image_pull_secrets if not isinstance(n, str) or not is_object_name(n)), None) \
            if isinstance(cfg.image_pull_secrets, list) else cfg.image_pull_secrets
        raise _fail("image_pull_secrets", f"{shown(bad, 100)} is not a Secret name: must be a list of Secret names",
                    '["quay-pull"]; a kubernetes.io/dockerconfigjson Secret in the namespace')
    if not isinstance(cfg.resources, dict) or set(cfg.resources) - {"requests", "limits"}:
        bad = sorted(set(cfg.resources) - {"requests", "limits"}) if isinstance(cfg.resources, dict) else ["resources"]
        raise _fail(f"resources.{bad[0]}" if isinstance(cfg.resources, dict) else "resources",
                    "is not requests or limits", '{"requests": {"cpu": "8"}, "limits": {"cpu": "16"}}')
    parsed: dict[str, dict[str, float]] = {}
    for kind, amounts in cfg.resources.items():
        if not isinstance(amounts, dict):
            raise _fail(f"resources.{kind}", "must be an object of resource: quantity", '{"memory": "64Gi"}')
        parsed[kind] = {}
        for res, qty in amounts.items():
            if not isinstance(res, str) or not RESOURCE_NAME_RE.match(res):
                raise _fail(f"resources.{kind}", f"{res!r} is not a resource name", "e.g. cpu, memory, ephemeral-storage")
            if res == cfg.gpu_resource:
                raise _fail(f"resources.{kind}.{res}", "is set from gpus / tensor_parallel", "use gpus instead")
            parsed[kind][res] = parse_quantity(qty, f"resources.{kind}.{res}")
    for res, low in parsed.get("requests", {}).items():
        high = parsed.get("limits", {}).get(res)
        if high is not None and low > high:
            raise _fail(f"resources.requests.{res}", f"{cfg.resources['requests'][res]} is above the limit "
                        f"{cfg.resources['limits'][res]}", "make requests <= limits")
    for res in ("cpu", "memory"):
        if getattr(cfg, res) and any(res in amounts for amounts in cfg.resources.values()):
            raise _fail(f"resources.{res}" if res in cfg.resources.get("requests", {}) else res,
                        f"{res} is given twice (top-level {res} and resources)", "use one of them")
    if not isinstance(cfg.extra_resources, dict):
        raise _fail("extra_resources", "must be an object of resource: count", '{"rdma/roce_gdr": 1}')
    for res, qty in cfg.extra_resources.items():
        if not isinstance(res, str) or "/" not in res or not RESOURCE_NAME_RE.match(res):
            raise _fail("extra_resources", f"{res!r} is not an extended resource name",
                        "use a device-plugin resource such as rdma/roce_gdr or rdma/ib")
        if res == cfg.gpu_resource or any(res in amounts for amounts in cfg.resources.values()):
            raise _fail(f"extra_resources.{res}", "is given twice", "give it in one place")
        count = parse_quantity(qty, f"extra_resources.{res}")
        if count != int(count) or count < 1:
            raise _fail(f"extra_resources.{res}", f"{qty!r} is not a whole count >= 1",
                        "extended resources are whole devices, e.g. 1")
    if cfg.shm_size is not None:
        if parse_quantity(cfg.shm_size, "shm_size") < 2**20:
            raise _fail("shm_size", f"{cfg.shm_size!r} is below 1Mi", 'write the /dev/shm size, e.g. "32Gi"')


def _check_pool(cfg: DeployConfig, pool: str) -> None:
    options = getattr(cfg, pool)
    if not isinstance(options, dict):
        raise _fail(pool, "must be an object", '{"vllm_args": {"max-num-seqs": 64}}')
    unknown = sorted(set(options) - POOL_KEYS)
    if unknown:
        raise _fail(f"{pool}.{unknown[0]}", "is not a per-pool option", f"use {', '.join(sorted(POOL_KEYS))}")
    if pool == "prefill" and options and not cfg.disaggregated:
        raise _fail("prefill", "is set but there is no prefill pool (mode is 'aggregated')",
                    "set mode 'pd' / prefill_replicas, or use vllm_args")
    args = options.get("vllm_args", {})
    if not isinstance(args, dict) or not all(isinstance(f, str) and f.strip("-") for f in args):
        raise _fail(f"{pool}.vllm_args", f"{args!r} must map flag names to values", '{"max-num-batched-tokens": 8192}')
    refuse_owned(args, DEPLOY_FLAGS, f"deploy_config.{pool}.vllm_args", "the deployment", DEPLOY_FIX, keys=True)
    if cfg.image is None:  # as in _check_serving_options
        check_vllm_args(mapping_words(args), f"deploy_config.{pool}.vllm_args")


def _check_probes(p: Probes) -> None:
    if p.startup_seconds is not None and (isinstance(p.startup_seconds, bool) or not isinstance(p.startup_seconds, int | float)
                                          or not math.isfinite(p.startup_seconds) or p.startup_seconds <= 0):
        raise _fail("probes.startup_seconds", f"{p.startup_seconds!r} is not a positive number of seconds",
                    "give how long vLLM may take to start, e.g. 1800")
    if isinstance(p.period_seconds, bool) or not isinstance(p.period_seconds, int) or not 1 <= p.period_seconds <= INT32_MAX:
        raise _fail("probes.period_seconds", f"{p.period_seconds!r} must be an integer from 1 to {INT32_MAX}", "e.g. 10")
    if p.startup_seconds is not None and math.ceil(p.startup_seconds / p.period_seconds) > INT32_MAX:
        raise _fail("probes.startup_seconds", f"{p.startup_seconds!r} s at {p.period_seconds} s a probe needs more "
                    f"than {INT32_MAX} probes (Kubernetes' failureThreshold is an int32)", "give hours, e.g. 7200")
    for kind in ("liveness", "readiness"):
        timings = getattr(p, kind)
        if timings is None:
            continue
        if not isinstance(timings, dict) or not timings:
            raise _fail(f"probes.{kind}", "must be an object of timings", '{"period_seconds": 10, "failure_threshold": 3}')
        for key, value in timings.items():
            if key not in PROBE_KEYS:
                raise _fail(f"probes.{kind}.{key}", "is not a probe timing", f"use {', '.join(sorted(PROBE_KEYS))}")
            low = 0 if key == "initial_delay_seconds" else 1
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= INT32_MAX:
                raise _fail(f"probes.{kind}.{key}", f"{value!r} must be an integer from {low} to {INT32_MAX} (an int32 "
                            "in Kubernetes' Probe)", "give whole seconds or counts")
        if kind == "liveness" and timings.get("success_threshold", 1) != 1:
            raise _fail("probes.liveness.success_threshold", "must be 1 (Kubernetes)", "drop it")


def _check_offloading(cfg: DeployConfig) -> None:
    off = cfg.kv_cache_offloading
    if not isinstance(off, dict):
        raise _fail("kv_cache_offloading", "must be an object", '{"cpu": "100Gi"}')
    unknown = sorted(set(off) - OFFLOAD_KEYS)
    if unknown:
        raise _fail(f"kv_cache_offloading.{unknown[0]}", "is not an offloading option", f"use {', '.join(sorted(OFFLOAD_KEYS))}")
    if "cpu" not in off:
        raise _fail("kv_cache_offloading.cpu", "is required", 'give the CPU memory for offloaded KV blocks, e.g. "100Gi"')
    if parse_quantity(off["cpu"], "kv_cache_offloading.cpu") < 2**20:
        raise _fail("kv_cache_offloading.cpu", f"{off['cpu']!r} is below 1Mi", 'e.g. "100Gi"')
    if off.get("eviction_policy", "lru") not in ("lru", "arc"):
        raise _fail("kv_cache_offloading.eviction_policy", f"unknown policy {off['eviction_policy']!r}", "use 'lru' or 'arc'")
    secondary = off.get("secondary")
    if secondary is not None and (not isinstance(secondary, list) or not all(isinstance(t, dict) for t in secondary)):
        raise _fail("kv_cache_offloading.secondary", "must be a list of tiers",
                    '[{"fileSystem": {"emptyDir": {"size": "200Gi"}}}] (the CRD form)')
    if secondary and cfg.disaggregated:
        raise _fail("kv_cache_offloading.secondary", "cannot be combined with prefill/decode: shipyard chains the "
                    "NIXL transfer and the CPU offloading connector itself, which has no secondary tiers",
                    "drop secondary, or use mode 'aggregated'")


def _check_lora(lora: dict[str, Any], served: str = "") -> None:
    """The ``lora`` option; ``served``: the served model name (spec.model.name), which no adapter may take."""
    if not isinstance(lora, dict):
        raise _fail("lora", "must be an object", '{"adapters": [{"name": "sql", "uri": "hf://org/sql-lora"}]}')
    unknown = sorted(set(lora) - LORA_KEYS)
    if unknown:
        raise _fail(f"lora.{unknown[0]}", "is not a LoRA option", f"use {', '.join(sorted(LORA_KEYS))}")
    adapters = lora.get("adapters")
    if not isinstance(adapters, list) or not adapters:
        raise _fail("lora.adapters", "must list at least one adapter", '[{"name": "sql", "uri": "hf://org/sql-lora"}]')
    names: set[str] = set()
    for i, adapter in enumerate(adapters):
        if not isinstance(adapter, dict) or set(adapter) != {"name", "uri"}:
            raise _fail(f"lora.adapters[{i}]", f"{adapter!r} must have exactly name and uri",
                        '{"name": "sql", "uri": "hf://org/sql-lora"}')
        name, uri = adapter["name"], adapter["uri"]
        if not isinstance(name, str) or not re.match(r"^[A-Za-z0-9][-A-Za-z0-9_.]*\Z", name):
            raise _fail(f"lora.adapters[{i}].name", f"{name!r} is not an adapter name", "use letters, digits, '-', '_', '.'")
        if name in names:
            raise _fail(f"lora.adapters[{i}].name", f"{name!r} is listed twice", "give each adapter its own name")
        if served and name == served:
            raise _fail(f"lora.adapters[{i}].name", f"{name!r} is also the served model's name (spec.model.name): a "
                        "request's model field names the base model or one adapter, so the two would collide and "
                        "the apply fails", "rename the adapter, or set served_model_name to another name")
        names.add(name)
        scheme, sep, rest = str(uri).partition("://")
        if scheme == "oci":
            raise _fail(f"lora.adapters[{i}].uri", "KServe does not load LoRA adapters from oci:// yet (kserve#6094)",
                        "publish the adapter to hf://, s3:// or a pvc://")
        if not sep or scheme not in ADAPTER_SCHEMES or not rest.strip("/"):
            raise _fail(f"lora.adapters[{i}].uri", f"{uri!r} is not an adapter URI KServe can load",
                        "use hf://ORG/REPO, s3://BUCKET/PREFIX or pvc://CLAIM/PATH")
    for key in ("max_adapters", "max_rank", "max_cpu_adapters"):
        value = lora.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise _fail(f"lora.{key}", f"{value!r} must be an integer >= 1", "e.g. 4 adapters, rank 64")
    if lora.get("max_adapters") is not None and lora["max_adapters"] < len(adapters):
        raise _fail("lora.max_adapters", f"{lora['max_adapters']} is below the {len(adapters)} adapters listed",
                    f"set max_adapters to {len(adapters)} or more")


def _check_objectives(cfg: DeployConfig) -> None:
    if not isinstance(cfg.objectives, list):
        raise _fail("objectives", "must be a list", '[{"name": "premium", "priority": 10}]')
    if cfg.objectives and cfg.pool_name is None:
        raise _fail("objectives", "need an InferencePool, but router.scheduler is 'none'",
                    'use a managed scheduler or {"pool": NAME}, or drop objectives')
    names: set[str] = set()
    for i, obj in enumerate(cfg.objectives):
        if not isinstance(obj, dict):
            raise _fail(f"objectives[{i}]", "must be an object", '{"name": "premium", "priority": 10}')
        unknown = sorted(set(obj) - OBJECTIVE_KEYS)
        if unknown:
            raise _fail(f"objectives[{i}].{unknown[0]}", "is not an objective option", f"use {', '.join(sorted(OBJECTIVE_KEYS))}")
        name = obj.get("name")
        if not isinstance(name, str) or not is_label(name):
            raise _fail(f"objectives[{i}].name", f"{name!r} is not a DNS-1123 name", "e.g. premium")
        if name in names:
            raise _fail(f"objectives[{i}].name", f"{name!r} is listed twice", "give each objective its own name")
        names.add(name)
        priority = obj.get("priority")
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
            raise _fail(f"objectives[{i}].priority", f"{priority!r} must be an integer", "higher is served first, e.g. 10")
        pool = obj.get("pool")
        if pool is not None and (not isinstance(pool, str) or not is_object_name(pool)):
            raise _fail(f"objectives[{i}].pool", f"{pool!r} is not an InferencePool name", "use a DNS-1123 name")


def epp_config_api(kserve: tuple[int, int] = TARGET_KSERVE) -> str:
    """The EndpointPickerConfig apiVersion shipyard renders for ``kserve`` (its endpoint picker decodes it)."""
    return EPP_CONFIG_APIS[kserve][1][0]


def check_scheduler_config(config: Any, field_name: str, kserve: tuple[int, int] = TARGET_KSERVE) -> None:
    """An inline EndpointPickerConfig the endpoint picker of ``kserve`` can decode: kind
    EndpointPickerConfig, an apiVersion it knows (it decodes strictly: any other and the scheduler
    pod does not start). ``field_name``: where the config was given, for the one-line error."""
    picker, accepted = EPP_CONFIG_APIS[kserve]
    shown = "v" + ".".join(map(str, kserve))
    if not isinstance(config, dict) or config.get("kind") != "EndpointPickerConfig":
        raise ShipyardError(field_name, "must be an EndpointPickerConfig object (kind: EndpointPickerConfig)",
                            f'{{"apiVersion": "{accepted[0]}", "kind": "EndpointPickerConfig", "plugins": [...], '
                            '"schedulingProfiles": [...]}')
    version = config.get("apiVersion")
    if version not in accepted:
        raise ShipyardError(f"{field_name}.apiVersion", f"{version!r} is not decoded by KServe {shown}'s endpoint "
                            f"picker ({picker}), which would not start", f"use apiVersion {accepted[0]}")


def refuse_pd_scheduler_loss(config: Any, config_field: str, ref_field: str | None = None) -> None:
    """A P/D service's scheduler config replaces KServe's default P/D profile (prefill and decode
    filters, the disaggregation profile handler) whole, so prefill/decode routing would silently
    stop: refuse an inline ``config`` (given at ``config_field``) without a P/D profile handler,
    and a ConfigMap reference (given at ``ref_field``), which shipyard cannot read."""
    if ref_field:
        raise ShipyardError(ref_field, "replaces KServe's prefill/decode scheduling profile with a ConfigMap "
                            "shipyard cannot check, so P/D routing may be silently lost",
                            f"give the config inline ({config_field}, with a disagg-profile-handler), or drop it to "
                            "keep KServe's P/D profile")
    if not isinstance(config, dict):
        return
    handlers = {p.get("type") for p in config.get("plugins") or [] if isinstance(p, dict)}
    if not handlers & set(PD_PROFILE_HANDLERS):
        raise ShipyardError(config_field, "replaces KServe's prefill/decode scheduling profile and has no "
                            "disagg-profile-handler, so P/D routing would be silently lost",
                            "add a disagg-profile-handler with prefill and decode profiles (prefill-filter, "
                            "decode-filter), drop the config to keep KServe's P/D profile, or use mode 'aggregated'")


def _check_pd_scheduler(cfg: DeployConfig) -> None:
    """P/D keeps its routing: a user's scheduler config must carry a P/D profile (the
    precise-prefix-cache preset is rendered onto KServe's P/D profile); the latency-predictor
    preset has no P/D form."""
    sched = cfg.scheduler_options
    refuse_pd_scheduler_loss(sched.get("config"), "deploy_config.router.scheduler.config",
                             "deploy_config.router.scheduler.config_ref" if "config_ref" in sched else None)
    if sched.get("preset") == "latency-predictor":
        raise _fail("router.scheduler.preset", "'latency-predictor' has no prefill/decode profile: its config would "
                    "replace KServe's P/D profile and P/D routing would be silently lost",
                    "use it with mode 'aggregated', or drop the preset to keep KServe's P/D profile")


def _check_router(router: Router) -> None:
    if isinstance(router.gateway, str) and router.gateway not in (MANAGED, NONE):
        raise _fail("router.gateway", f"unknown value {router.gateway!r}", "use 'managed', 'none' or a list of refs")
    if isinstance(router.gateway, list) and not all(isinstance(r, dict) and r.get("name") for r in router.gateway):
        raise _fail("router.gateway", "refs need a name", 'write [{"name": "gw", "namespace": "ns"}]')
    if isinstance(router.route, str) and router.route not in (MANAGED, NONE):
        raise _fail("router.route", f"unknown value {router.route!r}", "use 'managed', 'none' or HTTPRoute names")
    if isinstance(router.route, list) and router.gateway == MANAGED:
        raise _fail("router.route", "existing HTTPRoutes cannot be used with a managed gateway",
                    "give router.gateway as a list of Gateway refs")
    if isinstance(router.scheduler, str) and router.scheduler not in (MANAGED, NONE):
        raise _fail("router.scheduler", f"unknown value {router.scheduler!r}", 'use "managed", "none" or {"pool": NAME}')
    if isinstance(router.scheduler, dict):
        _check_scheduler(router.scheduler)
    elif not isinstance(router.scheduler, str):
        raise _fail("router.scheduler", f"{router.scheduler!r} is not a scheduler", 'use "managed", "none" or an object')


def _check_scheduler(sched: dict[str, Any]) -> None:
    unknown = sorted(set(sched) - SCHEDULER_KEYS)
    if unknown:
        raise _fail(f"router.scheduler.{unknown[0]}", "is not a scheduler option", f"use {', '.join(sorted(SCHEDULER_KEYS))}")
    if "pool" in sched and (not isinstance(sched["pool"], str) or not sched["pool"]):
        raise _fail("router.scheduler.pool", f"{sched['pool']!r} is not an InferencePool name", 'write {"pool": NAME}')
    given = [k for k in ("config", "config_ref", "preset") if k in sched]
    if len(given) > 1:
        raise _fail(f"router.scheduler.{given[1]}", f"cannot be combined with {given[0]}",
                    "give one of config (inline), config_ref (a ConfigMap key) or preset")
    if "config" in sched:
        check_scheduler_config(sched["config"], "deploy_config.router.scheduler.config")
    if "config_ref" in sched:
        ref = sched["config_ref"]
        if not isinstance(ref, dict) or set(ref) - {"name", "key"} or not ref.get("name") or not ref.get("key"):
            raise _fail("router.scheduler.config_ref", f"{ref!r} must name a ConfigMap and its key",
                        '{"name": "epp-config", "key": "config.yaml"}')
    if "preset" in sched and sched["preset"] not in SCHEDULER_PRESETS:
        raise _fail("router.scheduler.preset", f"unknown preset {sched['preset']!r}", f"use one of {list(SCHEDULER_PRESETS)}")
    for key in ("block_size", "hash_seed"):
        if key in sched and sched.get("preset") != "precise-prefix-cache":
            raise _fail(f"router.scheduler.{key}", "only applies to the precise-prefix-cache preset",
                        'add "preset": "precise-prefix-cache" or drop it')
    size = sched.get("block_size", 64)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise _fail("router.scheduler.block_size", f"{size!r} must be an integer >= 1", "vLLM's --block-size, e.g. 64")
    seed = sched.get("hash_seed", "42")
    if isinstance(seed, bool) or not isinstance(seed, int | str) or not str(seed).isdigit():
        raise _fail("router.scheduler.hash_seed", f"{seed!r} must be a whole number", "PYTHONHASHSEED, e.g. 42")


#: KServe v0.20's LLMInferenceService controller copies this label from spec.labels (decode) and
#: spec.prefill.labels onto the VariantAutoscaling (and HPA / ScaledObject) it creates for WVA, "unknown"
#: when absent; WVA reads the accelerator from it (llm-d workload-variant-autoscaler).
WVA_ACCELERATOR_LABEL = "inference.optimization/acceleratorName"
LABEL_VALUE_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")


def wva_accelerator(cfg: DeployConfig) -> str | None:
    """The accelerator name WVA gets (``scaling.accelerator_name``, else ``gpu_type``), or None when
    scaling is not WVA or neither is given."""
    s = cfg.scaling
    if s is None or s.mode != "wva":
        return None
    return s.accelerator_name or cfg.gpu_type or None


def _check_scaling(s: Scaling, cfg: DeployConfig) -> None:
    if s.mode not in ("wva", "keda"):
        raise _fail("scaling.mode", f"unknown mode {s.mode!r}", "use 'wva' (spec.scaling) or 'keda' (ScaledObject)")
    if s.actuator not in ("hpa", "keda"):
        raise _fail("scaling.actuator", f"unknown actuator {s.actuator!r}", "use 'hpa' or 'keda'")
    if not 0 <= s.min_replicas <= s.max_replicas or s.max_replicas < 1:
        raise _fail("scaling", f"min_replicas={s.min_replicas} max_replicas={s.max_replicas} is not a valid range",
                    "use 0 <= min_replicas <= max_replicas, max_replicas >= 1")
    if s.accelerator_name is not None and s.mode != "wva":
        raise _fail("scaling.accelerator_name", "only applies to WVA", 'use "mode": "wva", or drop it')
    name = wva_accelerator(cfg)
    if name is not None and (not isinstance(name, str) or len(name) > 63 or not LABEL_VALUE_RE.match(name)):
        field = "scaling.accelerator_name" if s.accelerator_name else "gpu_type"
        raise _fail(field, f"{name!r} is not a Kubernetes label value (WVA reads it from {WVA_ACCELERATOR_LABEL})",
                    "use at most 63 letters, digits, '-', '_' or '.', e.g. NVIDIA-H100-80GB-HBM3")
    if s.mode == "keda" and s.threshold <= 0:
        raise _fail("scaling.threshold", "must be positive", "e.g. 5 waiting requests per replica")
