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

import json
import shlex
from pathlib import Path
from typing import Any

import yaml

from shipyard.core.errors import ShipyardError
from shipyard.serving.kserve.config import MANAGED, NONE, DeployConfig

API_VERSION = "serving.kserve.io/v1alpha2"
KIND = "LLMInferenceService"
LABEL_PREFIX = "shipyard.io"
# Flags the CRD or the presets own; passing them again would conflict.
OWNED_FLAGS = {
    "tensor-parallel-size", "data-parallel-size", "data-parallel-size-local", "data-parallel-address",
    "data-parallel-rpc-port", "data-parallel-start-rank", "enable-expert-parallel", "port",
    "served-model-name", "model", "kv-transfer-config",
}


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
    return {k: v for k, v in args.items() if normalise_flag(k) not in OWNED_FLAGS}


def vllm_arguments(cfg: DeployConfig, model_config: dict[str, Any] | None, *, role: str) -> list[str]:
    """The extra ``vllm serve`` arguments for one pool (``role``: aggregated, decode or prefill)."""
    merged: dict[str, Any] = {}
    for source in (planner_args(cfg, model_config), cfg.vllm_args):
        for flag, value in source.items():
            merged[normalise_flag(flag)] = value
    owned = sorted(OWNED_FLAGS & set(merged))
    if owned:
        raise ShipyardError("deploy_config.vllm_args", f"--{owned[0]} is set by the deployment itself",
                            "use tensor_parallel / data_parallel / kv_role instead of that flag")
    if cfg.fast_start:
        merged.setdefault("load-format", "runai_streamer")
    if cfg.data_parallel and cfg.nodes == 1:
        # single-pod data parallelism: the single-node presets pass only --tensor-parallel-size
        merged["data-parallel-size"] = cfg.data_parallel
    if cfg.pipeline_parallel:
        merged["pipeline-parallel-size"] = cfg.pipeline_parallel
    if cfg.expert_parallel and cfg.nodes == 1:
        merged["enable-expert-parallel"] = True
    args: list[str] = []
    for flag, value in merged.items():
        if value is False or value is None:
            continue
        args.append(f"--{flag}")
        if value is not True:
            args.append(json.dumps(value, separators=(",", ":")) if isinstance(value, dict | list) else str(value))
    if role in ("prefill", "decode"):
        kv_role = "kv_both" if cfg.kv_role == "both" else ("kv_producer" if role == "prefill" else "kv_consumer")
        transfer = {"kv_connector": cfg.kv_connector, "kv_role": kv_role}
        args += ["--kv-transfer-config", json.dumps(transfer, separators=(",", ":"))]
    return args


def _env(cfg: DeployConfig, args: list[str], disaggregated: bool) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = []
    if args:
        env.append({"name": "VLLM_ADDITIONAL_ARGS", "value": shlex.join(args)})
    if disaggregated:
        env.append({"name": "VLLM_NIXL_SIDE_CHANNEL_HOST",
                    "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    env += [{"name": k, "value": str(v)} for k, v in sorted(cfg.env.items())]
    return env


def _resources(cfg: DeployConfig) -> dict[str, Any]:
    limits: dict[str, str] = {cfg.gpu_resource: str(cfg.gpus_per_pod)}
    requests: dict[str, str] = {cfg.gpu_resource: str(cfg.gpus_per_pod)}
    if cfg.cpu:
        limits["cpu"] = requests["cpu"] = str(cfg.cpu)
    if cfg.memory:
        limits["memory"] = requests["memory"] = str(cfg.memory)
    return {"limits": limits, "requests": requests}


def _pod(cfg: DeployConfig, args: list[str]) -> dict[str, Any]:
    """A PodSpec fragment the controller merges over the preset (container ``main``)."""
    container: dict[str, Any] = {"name": "main"}
    if cfg.image:
        container["image"] = cfg.image
    env = _env(cfg, args, cfg.disaggregated)
    if env:
        container["env"] = env
    container["resources"] = _resources(cfg)
    pod: dict[str, Any] = {"containers": [container]}
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
        router["scheduler"] = {"pool": {"ref": {"name": r.scheduler["pool"]}}}
    return router


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


def render_llmisvc(cfg: DeployConfig, model_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The LLMInferenceService object (a dict ready for server-side apply)."""
    labels, annotations = link_metadata(cfg)
    keda = cfg.scaling is not None and cfg.scaling.mode == "keda"
    wva = cfg.scaling is not None and cfg.scaling.mode == "wva"
    spec: dict[str, Any] = {"model": {"uri": cfg.model_uri, "name": cfg.served_name}}
    if wva:
        spec["scaling"] = _wva(cfg, None, None)
    elif not keda:
        spec["replicas"] = cfg.replicas
    if cfg.base_refs:
        spec["baseRefs"] = [{"name": n} for n in cfg.base_refs]
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
        elif not keda:
            prefill["replicas"] = cfg.prefill_replicas
        prefill["parallelism"] = _parallelism(cfg, prefill_tp)
        prefill_cfg = cfg if prefill_tp == cfg.tensor_parallel else _with_tp(cfg, prefill_tp)
        prefill_pod = _pod(prefill_cfg, vllm_arguments(cfg, model_config, role="prefill"))
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


def _with_tp(cfg: DeployConfig, tp: int) -> DeployConfig:
    import dataclasses

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


def render(cfg: DeployConfig, model_config: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every object of the deployment: the LLMInferenceService, then any ScaledObjects."""
    return [render_llmisvc(cfg, model_config), *render_scaled_objects(cfg)]


def to_yaml(docs: list[dict[str, Any]]) -> str:
    """Multi-document YAML, keys in the order rendered."""
    return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False, width=1000)


def load_model_config(path: str | Path | None) -> dict[str, Any] | None:
    """``config.json`` of a model folder (or the file itself); ``None`` when no path is given."""
    if not path:
        return None
    from shipyard.serving.planner import load_model_config as planner_load

    return planner_load(path)


__all__ = ["NONE", "render", "render_llmisvc", "render_scaled_objects", "to_yaml", "vllm_arguments",
           "load_model_config", "link_metadata"]
