"""Deploy parameters: one typed object built from the ``deploy_config`` JSON, a preset and flags.

Every check that can be made without a cluster happens here, each failing with a one-line
:class:`~shipyard.core.errors.ShipyardError` naming the parameter and the fix.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from shipyard.core.errors import ShipyardError
from shipyard.core.files import package_dir
from shipyard.core.jsonargs import json_object

PRESETS_DIR = package_dir("shipyard.serving.kserve") / "presets"
NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
KV_ROLES = {"producer-consumer", "both"}
MANAGED, NONE = "managed", "none"
# Longest child name KServe derives is "<name>-kserve-workload-svc" and similar; Services and
# Deployments must stay within 63 characters.
MAX_NAME = 42
PLANNER_KEYS = {"gpu_memory_utilization", "max_model_len", "max_num_seqs", "kv_cache_dtype", "wanted_concurrency",
                "dtype", "max_num_batched_tokens", "enforce_eager", "kv_cache_memory_bytes"}


@dataclass
class Router:
    """How requests reach the pods: managed Gateway/HTTPRoute/scheduler or references."""

    gateway: str | list[dict[str, str]] = MANAGED  # "managed" | "none" | [{"name":..,"namespace":..}]
    route: str | list[str] = MANAGED  # "managed" | "none" | [HTTPRoute names]
    scheduler: str | dict[str, str] = MANAGED  # "managed" | "none" | {"pool": InferencePool name}

    @property
    def has_scheduler(self) -> bool:
        return self.scheduler != NONE


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
    planner: dict[str, Any] = field(default_factory=dict)
    base_refs: list[str] = field(default_factory=list)
    fast_start: bool = False
    kv_connector: str = "NixlConnector"
    kv_role: str = "producer-consumer"
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    mlflow_model_name: str | None = None
    mlflow_model_version: str | None = None
    oci_digest: str | None = None
    pipeline_run_id: str | None = None

    @property
    def disaggregated(self) -> bool:
        return self.mode == "pd"

    @property
    def served_name(self) -> str:
        return self.model_name or self.name

    @property
    def nodes(self) -> int:
        """Pods per replica (LeaderWorkerSet group size): data / dataLocal, or pipeline."""
        if self.data_parallel:
            return max(self.data_parallel // (self.data_local or 1), 1)
        return self.pipeline_parallel or 1

    @property
    def gpus_per_pod(self) -> int:
        return self.gpus if self.gpus is not None else self.tensor_parallel * (self.data_local or 1)


def _fail(field_name: str, problem: str, fix: str) -> ShipyardError:
    return ShipyardError(f"deploy_config.{field_name}", problem, fix)


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise _fail(f"{prefix}{unknown[0]}", "is not a deploy parameter", f"use one of: {', '.join(sorted(names))}")
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


def parse_config(raw: str | dict[str, Any] | None, **overrides: Any) -> DeployConfig:
    """Build a :class:`DeployConfig` from JSON (or a dict), an optional ``preset`` inside it and
    keyword overrides (CLI flags, component inputs); ``None`` overrides are ignored."""
    data = json_object(raw, "deploy_config", '{"mode": "pd", "replicas": 2}')
    preset = data.pop("preset", None)
    merged = {**(load_preset(preset) if preset else {}), **data}
    merged.update({k: v for k, v in overrides.items() if v is not None})
    for key in ("name", "model_uri"):
        if not merged.get(key):
            raise _fail(key, "is required", f"give {key}")
    if isinstance(merged.get("router"), dict):
        merged["router"] = _build(Router, merged["router"], "router.")
    elif merged.get("router") is not None and not isinstance(merged["router"], Router):
        raise _fail("router", "must be an object", 'e.g. {"gateway": "managed", "scheduler": "managed"}')
    if isinstance(merged.get("scaling"), dict):
        merged["scaling"] = _build(Scaling, merged["scaling"], "scaling.")
    cfg = _build(DeployConfig, merged, "")
    check_config(cfg)
    return cfg


def _positive(cfg: DeployConfig, name: str, minimum: int = 1) -> None:
    value = getattr(cfg, name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(name, f"must be an integer >= {minimum}, got {value!r}", f"set {name} to {minimum} or more")


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
    repo, at, digest = rest.partition("@")
    if at:
        if not DIGEST_RE.match(digest):
            raise _fail("model_uri", f"{digest!r} is not a sha256 digest", "write oci://REGISTRY/REPO@sha256:<64 hex>")
        return digest
    if not allow_mutable_tag:
        tag = repo.rpartition("/")[2].partition(":")[2] or "latest"
        raise _fail("model_uri", f"oci:// reference uses the mutable tag {tag!r}: pods could run different weights",
                    "use the digest from the package step (oci://...@sha256:...) or set allow_mutable_tag")
    return None


def check_config(cfg: DeployConfig) -> None:
    """Every rule that needs no cluster: names, parallelism, GPUs, P/D, router, scaling."""
    if not NAME_RE.match(cfg.name) or len(cfg.name) > MAX_NAME:
        raise _fail("name", f"{cfg.name!r} must be a DNS-1035 label of at most {MAX_NAME} characters",
                    "use lower-case letters, digits and '-', starting with a letter")
    if not re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", cfg.namespace) or len(cfg.namespace) > 63:
        raise _fail("namespace", f"{cfg.namespace!r} is not a valid namespace", "use a DNS-1123 label")
    digest = check_model_uri(cfg.model_uri, cfg.allow_mutable_tag)
    if cfg.oci_digest and digest and cfg.oci_digest != digest:
        raise _fail("oci_digest", f"{cfg.oci_digest} differs from the digest in model_uri ({digest})",
                    "drop oci_digest or make them agree")
    cfg.oci_digest = cfg.oci_digest or digest
    if cfg.oci_digest and not DIGEST_RE.match(cfg.oci_digest):
        raise _fail("oci_digest", f"{cfg.oci_digest!r} is not a sha256 digest", "write sha256:<64 hex>")
    for name in ("tensor_parallel", "prefill_tensor_parallel", "pipeline_parallel", "data_parallel",
                 "data_local", "gpus"):
        _positive(cfg, name)
    _positive(cfg, "replicas", 0)
    _positive(cfg, "prefill_replicas", 0)
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
    _check_router(cfg.router)
    if cfg.scaling is not None:
        _check_scaling(cfg.scaling, cfg)
    for flag in cfg.vllm_args:
        if not isinstance(flag, str) or not flag.strip("-"):
            raise _fail("vllm_args", f"bad flag {flag!r}", "use flag names such as 'max-model-len'")
    if not all(isinstance(b, str) and NAME_RE.match(b.replace(".", "-")) for b in cfg.base_refs):
        raise _fail("base_refs", f"{cfg.base_refs!r} must be LLMInferenceServiceConfig names", "list preset names")
    unknown = sorted(set(cfg.planner) - PLANNER_KEYS)
    if unknown:
        raise _fail(f"planner.{unknown[0]}", "is not a planner option", f"use {', '.join(sorted(PLANNER_KEYS))}")
    if cfg.gpu_memory_gib is not None and cfg.gpu_memory_gib <= 0:
        raise _fail("gpu_memory_gib", "must be positive", "give the memory of one GPU in GiB, e.g. 80")


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
    if isinstance(router.scheduler, dict) and not router.scheduler.get("pool"):
        raise _fail("router.scheduler", "a scheduler reference needs the InferencePool name", 'write {"pool": NAME}')


def _check_scaling(s: Scaling, cfg: DeployConfig) -> None:
    if s.mode not in ("wva", "keda"):
        raise _fail("scaling.mode", f"unknown mode {s.mode!r}", "use 'wva' (spec.scaling) or 'keda' (ScaledObject)")
    if s.actuator not in ("hpa", "keda"):
        raise _fail("scaling.actuator", f"unknown actuator {s.actuator!r}", "use 'hpa' or 'keda'")
    if not 0 <= s.min_replicas <= s.max_replicas or s.max_replicas < 1:
        raise _fail("scaling", f"min_replicas={s.min_replicas} max_replicas={s.max_replicas} is not a valid range",
                    "use 0 <= min_replicas <= max_replicas, max_replicas >= 1")
    if s.mode == "keda" and s.threshold <= 0:
        raise _fail("scaling.threshold", "must be positive", "e.g. 5 waiting requests per replica")
