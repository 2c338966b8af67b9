"""Render a KServe ``LLMInferenceService`` (serving.kserve.io/v1alpha2) from deploy parameters.

The object follows KServe's well-known presets: the controller merges the vLLM container
(``main``) from ``kserve-config-llm-template`` (aggregated), ``kserve-config-llm-decode-template``
and ``kserve-config-llm-prefill-template`` (P/D), or the ``*-worker-data-parallel`` presets
(multi-node), so shipyard only sets what differs: model, parallelism, replicas, router, GPU
resources, placement and extra vLLM arguments. The presets start vLLM with
``eval "exec vllm serve ... ${VLLM_ADDITIONAL_ARGS} $@"``, so the extra arguments travel in
``VLLM_ADDITIONAL_ARGS``, shell-quoted. ``--tensor-parallel-size`` (and the data-parallel
flags in the worker presets) come from ``spec.parallelism``, never from the arguments.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import shlex
from pathlib import Path
from typing import Any

import yaml

from shipyard.core.errors import ShipyardError
from shipyard.oci.modelcar import WEIGHT_SUFFIXES
from shipyard.serving.kserve.config import (
    DEPLOY_FIX,
    MANAGED,
    NONE,
    WVA_ACCELERATOR_LABEL,
    DeployConfig,
    epp_config_api,
    parse_quantity,
    wva_accelerator,
)
from shipyard.serving.kserve.template import load_template
from shipyard.serving.planner import load_model_config as planner_load
from shipyard.serving.vllm_cli import mapping_words
from shipyard.serving.vllm_flags import DEPLOY_FLAGS, owned_flag, refuse_owned

API_VERSION = "serving.kserve.io/v1alpha2"
KIND = "LLMInferenceService"
LABEL_PREFIX = "shipyard.io"
OBJECTIVE_API = "inference.networking.x-k8s.io/v1alpha2"
POOL_GROUP = "inference.networking.k8s.io"
LATENCY_PREDICTOR_CONFIG = "kserve-config-llm-scheduler-latency-predictor"
KV_EVENTS_PORT = 5557  # the scheduler preset's "zmq" port; vLLM's --kv-events-config default endpoint
PROBE_FIELDS = {"period_seconds": "periodSeconds", "timeout_seconds": "timeoutSeconds",
                "failure_threshold": "failureThreshold", "initial_delay_seconds": "initialDelaySeconds",
                "success_threshold": "successThreshold"}


def normalise_flag(flag: str) -> str:
    """``max_model_len`` / ``--max-model-len`` -> ``max-model-len``."""
    return flag.strip().lstrip("-").replace("_", "-")


def planner_args(cfg: DeployConfig, model_config: dict[str, Any] | None) -> dict[str, Any]:
    """vLLM arguments from the memory planner (``shipyard.serving.planner``) when a model config is given."""
    if model_config is None:
        return {}
    if not cfg.gpu_memory_gib:
        raise ShipyardError("deploy_config.gpu_memory_gib", "is needed to size vLLM from the model config",
                            "give the memory of one GPU in GiB (e.g. 80 for an H100)")
    try:
        from shipyard.serving.planner import plan_memory
    except ImportError as err:  # pragma: no cover - the planner ships with shipyard
        raise ShipyardError("shipyard.serving.planner", f"is not available ({err})", "install shipyard completely") from None
    kwargs = {k: v for k, v in cfg.planner.items() if v is not None}
    plan = plan_memory(model_config, gpu_memory_gib=cfg.gpu_memory_gib, gpu_count=cfg.tensor_parallel,
                       tensor_parallel_size=cfg.tensor_parallel, **kwargs)
    if not plan.fits:
        short = plan.shortfall_bytes_per_gpu / 2**30
        raise ShipyardError("deploy_config.tensor_parallel",
                            f"the model does not fit: {short:.2f} GiB short per GPU at tensor_parallel="
                            f"{cfg.tensor_parallel} on {cfg.gpu_memory_gib:g} GiB GPUs",
                            "raise tensor_parallel (and gpus), use bigger GPUs or a lower planner.max_model_len")
    args = dict(plan.to_dict()["vllm_args"])
    # parallelism is spec.parallelism's job; the presets pass --tensor-parallel-size themselves
    return {k: v for k, v in args.items() if owned_flag(k, DEPLOY_FLAGS, key=True) is None}


def _precise_prefix_flags(cfg: DeployConfig) -> dict[str, Any]:
    """The vLLM settings the precise prefix-cache scorer relies on: KV events over ZMQ (bound on
    every pod, the scheduler discovers the pods), the same block size and a CBOR hash."""
    sched = cfg.scheduler_options
    if sched.get("preset") != "precise-prefix-cache":
        return {}
    events = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{KV_EVENTS_PORT}",
              "topic": f"kv@$(POD_IP)@{cfg.served_name}"}
    return {"prefix-caching-hash-algo": "sha256_cbor", "block-size": sched.get("block_size", 64),
            "kv-events-config": events}


def _kv_transfer(cfg: DeployConfig, role: str) -> dict[str, Any]:
    """--kv-transfer-config of a P/D pool: the NIXL (or other) connector, chained with the CPU
    offloading connector when kv_cache_offloading is set (the presets skip their own offloading
    connector once VLLM_ADDITIONAL_ARGS carries a --kv-transfer-config)."""
    kv_role = "kv_both" if cfg.kv_role == "both" else ("kv_producer" if role == "prefill" else "kv_consumer")
    transfer: dict[str, Any] = {"kv_connector": cfg.kv_connector, "kv_role": kv_role}
    off = cfg.kv_cache_offloading
    if not off:
        return transfer
    offload = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
               "kv_connector_extra_config": {"cpu_bytes_to_use": int(parse_quantity(off["cpu"], "kv_cache_offloading.cpu")),
                                             "eviction_policy": off.get("eviction_policy", "lru")}}
    return {"kv_connector": "MultiConnector", "kv_role": kv_role,
            "kv_connector_extra_config": {"connectors": [transfer, offload]}}


def vllm_arguments(cfg: DeployConfig, model_config: dict[str, Any] | None, *, role: str) -> list[str]:
    """The extra ``vllm serve`` arguments for one pool (``role``: aggregated, decode or prefill).

    Precedence, lowest first: the memory planner, the champion's serving-configuration search
    (``tuned_vllm_args``), ``vllm_args``, the pool's own ``prefill.vllm_args``
    / ``decode.vllm_args``; the routing preset's KV-event settings and the parallelism flags are
    the deployment's own and cannot be overridden."""
    pool = cfg.prefill if role == "prefill" else cfg.decode
    merged: dict[str, Any] = {}
    sources = (("planner", planner_args(cfg, model_config)), ("tuned_vllm_args", cfg.tuned_vllm_args),
               ("vllm_args", cfg.vllm_args),
               (f"{role}.vllm_args", pool.get("vllm_args", {})))
    for where, source in sources:
        for flag, value in source.items():
            merged[normalise_flag(flag)] = value
        if where != "planner":
            refuse_owned(source, DEPLOY_FLAGS, f"deploy_config.{where}", "the deployment", DEPLOY_FIX, keys=True)
    preset = _precise_prefix_flags(cfg)
    clash = sorted(set(preset) & set(merged) - {"block-size"})
    if clash:
        raise ShipyardError("deploy_config.vllm_args", f"--{clash[0]} is set by router.scheduler.preset "
                            "'precise-prefix-cache'", "drop the flag; the preset keeps vLLM and the scheduler in step")
    if "block-size" in merged and preset and str(merged["block-size"]) != str(preset["block-size"]):
        raise ShipyardError("deploy_config.vllm_args", f"--block-size {merged['block-size']} differs from the "
                            f"scheduler's block_size {preset['block-size']}", "set router.scheduler.block_size instead")
    merged.update(preset)
    if cfg.fast_start:
        merged.setdefault("load-format", "runai_streamer")
    if cfg.data_parallel and cfg.nodes == 1:
        # single-pod data parallelism: the single-node presets pass only --tensor-parallel-size
        merged["data-parallel-size"] = cfg.data_parallel
    if cfg.pipeline_parallel:
        merged["pipeline-parallel-size"] = cfg.pipeline_parallel
    if cfg.expert_parallel and cfg.nodes == 1:
        merged["enable-expert-parallel"] = True
    args = mapping_words(merged)
    if role in ("prefill", "decode"):
        args += ["--kv-transfer-config", json.dumps(_kv_transfer(cfg, role), separators=(",", ":"))]
    return args


def _env_entry(name: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):  # {"value": ...} or {"valueFrom": {...}}, checked in config
        return {"name": name, **({"value": str(value["value"])} if "value" in value else {"valueFrom": value["valueFrom"]})}
    return {"name": name, "value": str(value)}


def _env(cfg: DeployConfig, args: list[str], disaggregated: bool) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = []
    precise = cfg.scheduler_options.get("preset") == "precise-prefix-cache"
    if precise:  # before VLLM_ADDITIONAL_ARGS: Kubernetes expands $(POD_IP) only from earlier entries
        env.append({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    if args:
        env.append({"name": "VLLM_ADDITIONAL_ARGS", "value": shlex.join(args)})
    if precise:  # the scheduler hashes prompt blocks with the same seed
        env.append({"name": "PYTHONHASHSEED", "value": str(cfg.scheduler_options.get("hash_seed", "42"))})
    if disaggregated:
        env.append({"name": "VLLM_NIXL_SIDE_CHANNEL_HOST",
                    "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    env += [_env_entry(k, v) for k, v in sorted(cfg.env.items())]
    for name, ref in sorted(cfg.secret_env.items()):
        secret, key = (ref, name) if isinstance(ref, str) else (ref["secret"], ref.get("key", name))
        env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    return env


def _resources(cfg: DeployConfig) -> dict[str, Any]:
    limits: dict[str, Any] = {cfg.gpu_resource: str(cfg.gpus_per_pod)}
    requests: dict[str, Any] = {cfg.gpu_resource: str(cfg.gpus_per_pod)}
    if cfg.cpu:
        limits["cpu"] = requests["cpu"] = str(cfg.cpu)
    if cfg.memory:
        limits["memory"] = requests["memory"] = str(cfg.memory)
    for res, qty in cfg.resources.get("requests", {}).items():
        requests[res] = str(qty)
    for res, qty in cfg.resources.get("limits", {}).items():
        limits[res] = str(qty)
    for res, count in cfg.extra_resources.items():  # extended resources: requests must equal limits
        limits[res] = requests[res] = str(count)
    return {"limits": limits, "requests": requests}


def _probes(cfg: DeployConfig) -> dict[str, Any]:
    """Probe timings only; the presets keep the handler (httpGet /health, port 8000, the TLS scheme)."""
    p = cfg.probes
    out: dict[str, Any] = {}
    if p is None:
        return out
    if p.startup_seconds is not None:
        out["startupProbe"] = {"periodSeconds": p.period_seconds,
                               "failureThreshold": max(1, math.ceil(p.startup_seconds / p.period_seconds))}
    for kind, key in (("liveness", "livenessProbe"), ("readiness", "readinessProbe")):
        timings = getattr(p, kind)
        if timings:
            out[key] = {PROBE_FIELDS[k]: v for k, v in timings.items()}
    return out


def _pod(cfg: DeployConfig, args: list[str]) -> dict[str, Any]:
    """A PodSpec fragment the controller merges over the preset (container ``main``)."""
    container: dict[str, Any] = {"name": "main"}
    if cfg.pinned_image:  # the image the SLO gate benchmarked (the deploy step's default) or the user's pin
        container["image"] = cfg.pinned_image
    env = _env(cfg, args, cfg.disaggregated)
    if env:
        container["env"] = env
    container["resources"] = _resources(cfg)
    container.update(_probes(cfg))
    pod: dict[str, Any] = {"containers": [container]}
    if cfg.service_account:
        pod["serviceAccountName"] = cfg.service_account
    if cfg.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in cfg.image_pull_secrets]
    if cfg.shm_size:  # the presets mount the volume "dshm" at /dev/shm (1Gi); same name, larger
        pod["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": str(cfg.shm_size)}}]
    node_selector = dict(cfg.node_selector)
    if cfg.gpu_type:
        node_selector.setdefault("nvidia.com/gpu.product", cfg.gpu_type)
    if node_selector:
        pod["nodeSelector"] = node_selector
    tolerations = list(cfg.tolerations)
    if cfg.gpu_resource == "nvidia.com/gpu" and not any(t.get("key") == "nvidia.com/gpu" for t in tolerations):
        tolerations.append({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
    pod["tolerations"] = tolerations
    return pod


def _parallelism(cfg: DeployConfig, tensor: int) -> dict[str, Any]:
    par: dict[str, Any] = {"tensor": tensor}
    if cfg.data_parallel:
        par["data"] = cfg.data_parallel
        par["dataLocal"] = cfg.data_local
    if cfg.pipeline_parallel:
        par["pipeline"] = cfg.pipeline_parallel
    if cfg.expert_parallel:
        par["expert"] = True
    return par


def _router(cfg: DeployConfig) -> dict[str, Any]:
    r = cfg.router
    router: dict[str, Any] = {}
    if r.gateway == MANAGED:
        router["gateway"] = {}
    elif isinstance(r.gateway, list):
        router["gateway"] = {"refs": [dict(ref) for ref in r.gateway]}
    if r.route == MANAGED:
        router["route"] = {}
    elif isinstance(r.route, list):
        router["route"] = {"http": {"refs": [{"name": n} for n in r.route]}}
    if r.scheduler == MANAGED:
        router["scheduler"] = {}
    elif isinstance(r.scheduler, dict):
        sched: dict[str, Any] = {}
        opts = r.scheduler
        if opts.get("pool"):
            sched["pool"] = {"ref": {"name": opts["pool"]}}
        if "config" in opts:
            sched["config"] = {"inline": copy.deepcopy(opts["config"])}
        elif "config_ref" in opts:
            sched["config"] = {"ref": {"name": opts["config_ref"]["name"], "key": opts["config_ref"]["key"]}}
        elif opts.get("preset") == "precise-prefix-cache":
            sched["config"] = {"inline": precise_prefix_config(int(opts.get("block_size", 64)), disaggregated=cfg.disaggregated,
                                                               lora=bool(cfg.lora))}
        elif opts.get("preset") == "latency-predictor":
            sched["config"] = {"inline": latency_predictor_config()}
        router["scheduler"] = sched
    return router


def _precise_producers(block_size: int) -> list[dict[str, Any]]:
    """The plugins that feed the prefix-cache scorer from the pods' own KV events: the scheduler
    subscribes to every pod's vLLM KV events (ZMQ, port 5557, topics ``kv@<pod IP>@<model>``) and
    matches the prompt's blocks; ``blockSize`` must equal vLLM's ``--block-size``."""
    return [
        {"type": "token-producer"},
        {"type": "precise-prefix-cache-producer",
         "parameters": {"tokenProcessorConfig": {"blockSize": block_size},
                        "kvEventsConfig": {"topicFilter": "kv@", "discoverPods": True,
                                           "podDiscoveryConfig": {"socketPort": KV_EVENTS_PORT}}}},
    ]


#: the prefix-cache scorer reading the precise producer's matches instead of its own estimate
PRECISE_SCORER = {"type": "prefix-cache-scorer", "parameters": {"prefixMatchInfoProducerName": "precise-prefix-cache-producer"}}


def precise_prefix_config(block_size: int, *, disaggregated: bool = False, lora: bool = False) -> dict[str, Any]:
    """EndpointPickerConfig for precise prefix-cache aware routing, in the apiVersion the targeted
    KServe's endpoint picker decodes (:func:`~shipyard.serving.kserve.config.epp_config_api`).

    Aggregated: one profile scoring pods by the prompt blocks they already hold, KV-cache
    utilisation and queue. ``disaggregated``: KServe's own P/D profile (:func:`pd_scheduler_config`)
    with the precise producer feeding its prefix-cache scorer, so prefill/decode routing is kept
    (an inline config replaces KServe's default whole)."""
    if disaggregated:
        return pd_scheduler_config(lora=lora, producers=_precise_producers(block_size), prefix_scorer=PRECISE_SCORER)
    return {
        "apiVersion": epp_config_api(),
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "single-profile-handler"},
            *_precise_producers(block_size),
            copy.deepcopy(PRECISE_SCORER),
            {"type": "kv-cache-utilization-scorer"},
            {"type": "queue-scorer"},
            {"type": "max-score-picker"},
        ],
        "schedulingProfiles": [{"name": "default", "plugins": [
            {"pluginRef": "prefix-cache-scorer", "weight": 3},
            {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
            {"pluginRef": "queue-scorer", "weight": 2},
            {"pluginRef": "max-score-picker"},
        ]}],
    }


def pd_scheduler_config(*, lora: bool = False, producers: list[dict[str, Any]] | None = None,
                        prefix_scorer: dict[str, Any] | None = None) -> dict[str, Any]:
    """The P/D EndpointPickerConfig KServe v0.20 generates when a service with a prefill pool sets
    no config (``schedulerConfigText`` in pkg/controller/v1alpha2/llmisvc/scheduler.go): the
    disaggregation headers and profile handlers with an always-disaggregate decider; a ``prefill``
    profile (prefill filter; prefix cache 3, queue 2, KV-cache utilisation 2) and a ``decode``
    profile (decode filter; active requests 2, prefix cache 3); the LoRA affinity scorer (4) in both
    when adapters are served. ``producers`` are added to the plugins and ``prefix_scorer`` replaces
    the plain prefix-cache scorer: what a routing preset merges onto it."""
    lora_refs = [{"pluginRef": "lora-affinity-scorer", "weight": 4}] if lora else []
    return {
        "apiVersion": epp_config_api(),
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "disagg-headers-handler"},
            {"type": "prefill-filter"},
            {"type": "decode-filter"},
            {"type": "queue-scorer"},
            {"type": "kv-cache-utilization-scorer"},
            {"type": "active-request-scorer"},
            *(producers or []),
            copy.deepcopy(prefix_scorer or {"type": "prefix-cache-scorer"}),
            {"type": "max-score-picker"},
            {"type": "always-disagg-pd-decider"},
            {"type": "disagg-profile-handler", "parameters": {"deciders": {"prefill": "always-disagg-pd-decider"}}},
            *([{"type": "lora-affinity-scorer"}] if lora else []),
        ],
        "schedulingProfiles": [
            {"name": "prefill", "plugins": [
                {"pluginRef": "prefill-filter"}, *lora_refs,
                {"pluginRef": "prefix-cache-scorer", "weight": 3},
                {"pluginRef": "queue-scorer", "weight": 2},
                {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
                {"pluginRef": "max-score-picker"},
            ]},
            {"name": "decode", "plugins": [
                {"pluginRef": "decode-filter"}, *copy.deepcopy(lora_refs),
                {"pluginRef": "active-request-scorer", "weight": 2},
                {"pluginRef": "prefix-cache-scorer", "weight": 3},
                {"pluginRef": "max-score-picker"},
            ]},
        ],
    }


def latency_predictor_config() -> dict[str, Any]:
    """EndpointPickerConfig that routes on predicted latency (KServe's latency-predictor sample);
    the predictor's training and prediction sidecars come from the vendored preset
    ``kserve-config-llm-scheduler-latency-predictor``, which the service names in baseRefs."""
    return {
        "apiVersion": epp_config_api(),
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "approx-prefix-cache-producer"},
            {"type": "predicted-latency-producer"},
            {"type": "latency-scorer"},
            {"type": "weighted-random-picker"},
        ],
        "schedulingProfiles": [{"name": "default", "plugins": [
            {"pluginRef": "predicted-latency-producer"},
            {"pluginRef": "latency-scorer"},
            {"pluginRef": "weighted-random-picker"},
        ]}],
    }


def _wva(cfg: DeployConfig, lo: int | None, hi: int | None) -> dict[str, Any]:
    s = cfg.scaling
    assert s is not None
    scaling: dict[str, Any] = {"minReplicas": s.min_replicas if lo is None else lo,
                               "maxReplicas": s.max_replicas if hi is None else hi}
    scaling["wva"] = {"hpa": {}} if s.actuator == "hpa" else {"keda": {}}
    return scaling


def link_metadata(cfg: DeployConfig) -> tuple[dict[str, str], dict[str, str]]:
    """Labels and annotations that tie the deployment to its MLflow version, digest and run."""
    labels = {"app.kubernetes.io/managed-by": "shipyard", "app.kubernetes.io/part-of": "shipyard"}
    annotations = {f"{LABEL_PREFIX}/model-uri": cfg.model_uri}
    links = {"mlflow-model-name": cfg.mlflow_model_name, "mlflow-model-version": cfg.mlflow_model_version,
             "oci-digest": cfg.oci_digest, "pipeline-run": cfg.pipeline_run_id}
    for key, value in links.items():
        if value:
            annotations[f"{LABEL_PREFIX}/{key}"] = str(value)
    for key in ("mlflow-model-version", "pipeline-run"):
        value = links[key]
        if value and len(str(value)) <= 63 and str(value).replace("-", "").replace(".", "").isalnum():
            labels[f"{LABEL_PREFIX}/{key}"] = str(value)
    labels.update(cfg.labels)
    annotations.update(cfg.annotations)
    return labels, annotations


def model_uri(cfg: DeployConfig) -> str:
    """``spec.model.uri``: the model URI, as ``oci+native://`` when ``oci_delivery`` is ``native``
    (KServe v0.20 mounts the image as a Kubernetes image volume: no modelcar sidecar, no copy)."""
    if cfg.oci_delivery == "native" and cfg.model_uri.startswith("oci://"):
        return "oci+native://" + cfg.model_uri.removeprefix("oci://")
    return cfg.model_uri


def render_llmisvc(cfg: DeployConfig, model_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The LLMInferenceService object (a dict ready for server-side apply)."""
    labels, annotations = link_metadata(cfg)
    keda = cfg.scaling is not None and cfg.scaling.mode == "keda"
    wva = cfg.scaling is not None and cfg.scaling.mode == "wva"
    spec: dict[str, Any] = {"model": {"uri": model_uri(cfg), "name": cfg.served_name}}
    if cfg.lora:
        spec["model"]["lora"] = _lora(cfg.lora)
    accelerator = wva_accelerator(cfg)
    if wva:
        spec["scaling"] = _wva(cfg, None, None)
        if accelerator:  # the controller copies it onto the decode VariantAutoscaling
            spec["labels"] = {WVA_ACCELERATOR_LABEL: accelerator}
    elif not keda:
        spec["replicas"] = cfg.replicas
    base_refs = list(cfg.base_refs)
    if cfg.scheduler_options.get("preset") == "latency-predictor" and LATENCY_PREDICTOR_CONFIG not in base_refs:
        base_refs.append(LATENCY_PREDICTOR_CONFIG)
    if base_refs:
        spec["baseRefs"] = [{"name": n} for n in base_refs]
    if cfg.kv_cache_offloading:
        spec["kvCacheOffloading"] = _offloading(cfg.kv_cache_offloading)
    spec["parallelism"] = _parallelism(cfg, cfg.tensor_parallel)
    spec["router"] = _router(cfg)
    decode_role = "decode" if cfg.disaggregated else "aggregated"
    pod = _pod(cfg, vllm_arguments(cfg, model_config, role=decode_role))
    spec["template"] = pod
    if cfg.nodes > 1:
        spec["worker"] = pod
    if cfg.disaggregated:
        prefill_tp = cfg.prefill_tensor_parallel or cfg.tensor_parallel
        prefill: dict[str, Any] = {}
        if wva:
            s = cfg.scaling
            assert s is not None
            prefill["scaling"] = _wva(cfg, s.prefill_min_replicas, s.prefill_max_replicas)
            if accelerator:
                prefill["labels"] = {WVA_ACCELERATOR_LABEL: accelerator}
        elif not keda:
            prefill["replicas"] = cfg.prefill_replicas
        if cfg.kv_cache_offloading:
            prefill["kvCacheOffloading"] = _offloading(cfg.kv_cache_offloading)
        prefill["parallelism"] = _parallelism(cfg, prefill_tp)
        prefill_cfg = cfg if prefill_tp == cfg.tensor_parallel else _with_tp(cfg, prefill_tp)
        # planner sizing per pool: the prefill pool is sized at its own tensor parallelism
        prefill_pod = _pod(prefill_cfg, vllm_arguments(prefill_cfg, model_config, role="prefill"))
        prefill["template"] = prefill_pod
        if cfg.nodes > 1:
            prefill["worker"] = prefill_pod
        spec["prefill"] = prefill
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": cfg.name, "namespace": cfg.namespace, "labels": labels, "annotations": annotations},
        "spec": spec,
    }


def _lora(lora: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"adapters": [{"name": a["name"], "uri": a["uri"]} for a in lora["adapters"]]}
    for key, crd in (("max_adapters", "maxAdapters"), ("max_rank", "maxRank"), ("max_cpu_adapters", "maxCpuAdapters")):
        if lora.get(key) is not None:
            out[crd] = lora[key]
    return out


def _offloading(off: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"cpu": off["cpu"] if isinstance(off["cpu"], str) else int(off["cpu"]),
                           "evictionPolicy": off.get("eviction_policy", "lru")}
    if off.get("secondary"):
        out["secondary"] = copy.deepcopy(off["secondary"])
    return out


def _with_tp(cfg: DeployConfig, tp: int) -> DeployConfig:
    gpus = tp * (cfg.data_local or 1) if cfg.gpus is None else cfg.gpus
    return dataclasses.replace(cfg, tensor_parallel=tp, gpus=gpus)


def keda_scale_target(cfg: DeployConfig, suffix: str = "") -> tuple[dict[str, str], str]:
    """The workload KServe creates for a pool, as a KEDA ``scaleTargetRef``, and a PromQL regex
    (anchored) matching its pods.

    KServe v0.20 names them in pkg/controller/v1alpha2/llmisvc: a single-node pool is the
    Deployment ``kmeta.ChildName(name, "-kserve")`` (``-kserve-prefill`` for prefill,
    workload_single_node.go); a multi-node pool (``spec.worker``) is the LeaderWorkerSet
    ``kmeta.ChildName(name, "-kserve-mn")`` (``-kserve-mn-prefill``, expectedMainMultiNodeLWS /
    expectedPrefillMultiNodeLWS in workload_multi_node.go). LeaderWorkerSet has a ``/scale``
    subresource (its CRD), so KEDA scales replica groups; its pods are ``<lws>-<group>`` (leaders)
    and ``<lws>-<group>-<worker>``.
    """
    if cfg.nodes > 1:
        name = f"{cfg.name}-kserve-mn{suffix}"
        return ({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": name},
                f"{name}-[0-9]+(-[0-9]+)?")
    name = f"{cfg.name}-kserve{suffix}"
    # Pods of Deployment D are named D-<hash>-<id>.
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}, f"{name}-[a-z0-9]+-[a-z0-9]+"


def render_scaled_objects(cfg: DeployConfig) -> list[dict[str, Any]]:
    """KEDA ScaledObjects on ``vllm:num_requests_waiting`` (scaling.mode == 'keda')."""
    s = cfg.scaling
    if s is None or s.mode != "keda":
        return []
    pools = [("decode", "", s.min_replicas, s.max_replicas)]
    if cfg.disaggregated:
        pools.append(("prefill", "-prefill",
                      s.prefill_min_replicas if s.prefill_min_replicas is not None else s.min_replicas,
                      s.prefill_max_replicas if s.prefill_max_replicas is not None else s.max_replicas))
    labels, _ = link_metadata(cfg)
    out = []
    for role, suffix, lo, hi in pools:
        target, pods = keda_scale_target(cfg, suffix)
        query = f'sum({s.metric}{{namespace="{cfg.namespace}",pod=~"{pods}"}})'
        out.append({
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {"name": f"{cfg.name}-{role}", "namespace": cfg.namespace,
                         "labels": {**labels, f"{LABEL_PREFIX}/pool": role}},
            "spec": {
                "scaleTargetRef": target,
                "minReplicaCount": lo,
                "maxReplicaCount": hi,
                "pollingInterval": s.polling_interval,
                "cooldownPeriod": s.cooldown_period,
                "triggers": [{
                    "type": "prometheus",
                    "metadata": {"serverAddress": s.prometheus_url, "query": query,
                                 "threshold": f"{s.threshold:g}"},
                }],
            },
        })
    return out


def render_objectives(cfg: DeployConfig) -> list[dict[str, Any]]:
    """InferenceObjectives (GIE ``inference.networking.x-k8s.io/v1alpha2``): one traffic class per
    entry, with its priority, on the service's InferencePool (or the entry's own ``pool``).
    Requests choose one with the header ``x-gateway-inference-objective: <name>``."""
    labels, _ = link_metadata(cfg)
    pool = cfg.pool_name
    if isinstance(cfg.template, dict) and cfg.objectives:  # the template's router decides the pool
        scheduler = (cfg.template["spec"].get("router") or {}).get("scheduler")
        ref = ((scheduler or {}).get("pool") or {}).get("ref") or {}
        pool = ref.get("name") or (f"{cfg.name}-inference-pool" if isinstance(scheduler, dict) else None)
    out = []
    for obj in cfg.objectives:
        if not (obj.get("pool") or pool):
            raise ShipyardError("deploy_config.objectives", "need an InferencePool, but the template has no "
                                "spec.router.scheduler", 'give each objective a "pool", or add a scheduler to the template')
        spec: dict[str, Any] = {"poolRef": {"group": POOL_GROUP, "kind": "InferencePool",
                                            "name": obj.get("pool") or pool}}
        if obj.get("priority") is not None:
            spec["priority"] = obj["priority"]
        out.append({"apiVersion": OBJECTIVE_API, "kind": "InferenceObjective",
                    "metadata": {"name": obj["name"], "namespace": cfg.namespace, "labels": dict(labels)},
                    "spec": spec})
    return out


def _has_vllm_args(container: dict[str, Any]) -> bool:
    env = {e.get("name") for e in container.get("env") or [] if isinstance(e, dict)}
    return "VLLM_ADDITIONAL_ARGS" in env or bool(container.get("args"))


def render_template(cfg: DeployConfig, model_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Template mode: the user's LLMInferenceService with every field kept, except the model URI
    (and model.name when absent), name/namespace, shipyard's lineage labels and annotations, and
    planner-sized (and tuning-search) vLLM arguments for a pool whose ``main`` container sets none,
    in a template without baseRefs."""
    assert isinstance(cfg.template, dict)
    doc = copy.deepcopy(cfg.template)
    meta = doc.setdefault("metadata", {})
    meta["name"], meta["namespace"] = cfg.name, cfg.namespace
    labels, annotations = link_metadata(cfg)
    meta["labels"] = {**(meta.get("labels") or {}), **labels}
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    spec = doc["spec"]
    model = spec.setdefault("model", {})
    model["uri"] = model_uri(cfg)
    if cfg.served_model_name or cfg.model_name:
        model["name"] = cfg.served_name
    else:
        model.setdefault("name", cfg.name)
    if (model_config is not None or cfg.tuned_vllm_args) and not spec.get("baseRefs"):
        # With baseRefs a referenced LLMInferenceServiceConfig may set VLLM_ADDITIONAL_ARGS, which an
        # entry here would replace: shipyard then adds nothing.
        pools = [(spec, spec.get("parallelism") or {})]
        if isinstance(spec.get("prefill"), dict):
            pools.append((spec["prefill"], spec["prefill"].get("parallelism") or {}))
        for workload, par in pools:
            tp = int(par.get("tensor") or 1)
            sized = dataclasses.replace(cfg, tensor_parallel=tp, gpus=tp * int(par.get("dataLocal") or 1),
                                        data_parallel=None, data_local=None)
            template = workload.setdefault("template", {})
            containers = template.setdefault("containers", [])
            main = next((c for c in containers if c.get("name") == "main"), None)
            if main is not None and _has_vllm_args(main):
                continue  # the template's own arguments win; shipyard adds nothing
            args = {normalise_flag(k): v for k, v in planner_args(sized, model_config).items()}
            args.update({normalise_flag(k): v for k, v in cfg.tuned_vllm_args.items()
                         if owned_flag(k, DEPLOY_FLAGS, key=True) is None})
            flags: list[str] = []
            for flag, value in args.items():
                if value is False or value is None:
                    continue
                flags.append(f"--{flag}")
                if value is not True:
                    flags.append(str(value))
            if not flags:
                continue
            if main is None:
                main = {"name": "main"}
                containers.append(main)
            main.setdefault("env", []).append({"name": "VLLM_ADDITIONAL_ARGS", "value": shlex.join(flags)})
    return doc


def render(cfg: DeployConfig, model_config: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every object of the deployment: the LLMInferenceService, then any ScaledObjects and
    InferenceObjectives."""
    if isinstance(cfg.template, str):  # an s3:// template is read here, in the deploy step
        cfg.template = load_template(cfg.template)
    if cfg.template is not None:
        return [render_template(cfg, model_config), *render_objectives(cfg)]
    return [render_llmisvc(cfg, model_config), *render_scaled_objects(cfg), *render_objectives(cfg)]


def to_yaml(docs: list[dict[str, Any]]) -> str:
    """Multi-document YAML, keys in the order rendered."""
    return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False, width=1000)


def load_model_config(path: str | Path | None) -> dict[str, Any] | None:
    """``config.json`` of a model folder (or the file itself); ``None`` when no path is given."""
    if not path:
        return None
    return planner_load(path)


#: a model file the deploy step may take: small (config, tokenizer, chat template), never a weight
MODEL_FILE_MAX_BYTES = 64 * 1024 * 1024


def copy_model_files(model_dir: str, out_dir: str) -> dict[str, Any]:
    """Copy what the deploy step needs from a model folder, without its weights, into ``out_dir``:
    every top-level file that is not a weight (``config.json`` for the memory planner, the tokenizer
    and chat template for the verification's lm-eval slice and guidellm smoke, generation_config.json).
    The package step hands this on, so the deploy step never downloads the model. Returns the file
    names and their total size."""
    import shutil

    src, out = Path(model_dir), Path(out_dir)
    if not (src / "config.json").is_file():
        raise ShipyardError("model", f"{src} has no config.json", "give the model folder (config, weights, tokenizer)")
    out.mkdir(parents=True, exist_ok=True)
    names, total = [], 0
    for path in sorted(src.iterdir()):
        if not path.is_file() or path.name.endswith(WEIGHT_SUFFIXES) or path.name.endswith(".index.json"):
            continue
        size = path.stat().st_size
        if size > MODEL_FILE_MAX_BYTES:
            continue
        shutil.copyfile(path, out / path.name)
        names.append(path.name)
        total += size
    return {"files": names, "size_bytes": total}


__all__ = ["NONE", "render", "render_llmisvc", "render_scaled_objects", "render_objectives", "render_template",
           "to_yaml", "vllm_arguments", "load_model_config", "copy_model_files", "link_metadata", "precise_prefix_config",
           "pd_scheduler_config"]
