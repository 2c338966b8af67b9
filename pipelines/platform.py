"""Kubernetes settings for pipeline steps: GPU, node selection, shared memory, disk, and the
cluster contract (which step gets which secret, registry credentials, PVCs; caching off for steps
with side effects).

Loaded from ``pipelines/cluster.yaml`` (or ``SHIPYARD_CLUSTER_CONFIG``) at compile time and
written into the pipeline's platform spec through kfp-kubernetes. ``kfp.local`` ignores the
platform spec, so local runs get none of it. See docs/cluster-contract.md.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from kfp import kubernetes
from kfp.dsl import PipelineTask

from shipyard.core.contract import (
    CONTRACT_ANNOTATION,
    ENV_CONTRACT,
    ENV_EPHEMERAL_STORAGE,
    ENV_IMAGE,
    ENV_STEP_SECRETS,
    disk_needed,
)
from shipyard.core.errors import ShipyardError
from shipyard.core.files import package_dir
from shipyard.params.input_secrets import step_secrets
from shipyard.runtimes.runtime import RUNTIMES

DEFAULT_CLUSTER_CONFIG = package_dir("shipyard.pipelines") / "cluster.yaml"


def load_cluster_config(path: str | None = None) -> dict[str, Any]:
    """The cluster settings (``path``, ``SHIPYARD_CLUSTER_CONFIG`` or the shipped defaults)."""
    return _read_cluster_config(str(path or os.environ.get("SHIPYARD_CLUSTER_CONFIG") or DEFAULT_CLUSTER_CONFIG))


@lru_cache(maxsize=8)
def _read_cluster_config(path: str) -> dict[str, Any]:
    chosen = Path(path)
    from shipyard.core.jsonargs import load_yaml, read_text

    try:
        data = load_yaml(read_text(chosen, "cluster_config"), "cluster_config")  # strict: a key given twice
    except FileNotFoundError:
        raise ShipyardError("cluster_config", f"{chosen} does not exist", "give an existing YAML file") from None
    except yaml.YAMLError:
        raise ShipyardError("cluster_config", f"{chosen} is not valid YAML", "fix its syntax") from None
    if not isinstance(data, dict):
        raise ShipyardError("cluster_config", f"{chosen} is not a mapping", "see pipelines/cluster.yaml")
    check_cluster_config(data, str(chosen))
    return data


_QTY = (str, int, float)  # Kubernetes quantities: "4", 4, 32Gi
_STEPS = {"steps": list, "needed_for": str}
#: every key cluster.yaml may hold and its type; a dict value is a section with its own keys, and
#: ("each", spec) a mapping of names (Secrets, layouts) to entries of that spec
_CLUSTER_SCHEMA: dict[str, Any] = {
    "gpu": {"accelerator_type": str, "accelerator_count": int, "cpu_request": _QTY, "memory_request": _QTY,
            "memory_limit": _QTY, "shm_size": _QTY, "node_selector": dict, "tolerations": list},
    "cpu": {"cpu_request": _QTY, "memory_request": _QTY, "memory_limit": _QTY},
    "image_pull_policy": str,
    "secrets": ("each", {"env": dict, **_STEPS}),
    "registry_secret_volume": {"secret": str, "mount_path": str, "env": str, **_STEPS},
    "pvc": {"mount_root": str, "claims": list, "steps": list},
    "service_account": {"name": str, "role": str, "steps": list},
    "ephemeral_storage": {"size": _QTY, **_STEPS},
    "layout": str,
    "layouts": ("each", dict),
    "candidate_parallelism": int,
    "security_context": {"run_as_user": int, "run_as_group": int, "run_as_non_root": bool},
    "gpu_image_runtimes": list,
}


def _type_name(kind: Any) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({str: "text", int: "a whole number", float: "a number", list: "a list", dict: "a mapping",
                        bool: "true or false"}[k] for k in kinds)


def check_cluster_config(data: dict[str, Any], source: str = "cluster_config") -> None:
    """Every key known and of its type: a typo (``gpuu:``, ``tolerations`` misspelt) or a string
    where a list is expected (``claims: models``, which would mount one PVC per character) is one
    line naming the key and the file, at compile time."""
    import difflib

    def fail(path: str, problem: str, fix: str) -> ShipyardError:
        return ShipyardError(f"cluster_config {path}", f"{problem} (in {source})", fix)

    def check(value: Any, spec: Any, path: str) -> None:
        if isinstance(spec, tuple) and spec and spec[0] == "each":
            if not isinstance(value, dict):
                raise fail(path, f"must be a mapping of names, got {type(value).__name__}", "see pipelines/cluster.yaml")
            for name, entry in value.items():
                check(entry, spec[1], f"{path}.{name}")
            return
        if isinstance(spec, dict):
            if not isinstance(value, dict):
                raise fail(path, f"must be a mapping, got {type(value).__name__}", "see pipelines/cluster.yaml")
            for key, item in value.items():
                if key not in spec:
                    close = difflib.get_close_matches(str(key), list(spec), n=1)
                    raise fail(f"{path}.{key}" if path else str(key), "is not a cluster setting",
                               (f"did you mean {close[0]}? " if close else "") + f"use {', '.join(spec)}")
                check(item, spec[key], f"{path}.{key}" if path else str(key))
            return
        kinds = spec if isinstance(spec, tuple) else (spec,)
        if value is None:
            return
        if isinstance(value, bool) != (bool in kinds) or not isinstance(value, kinds):
            hint = "write a YAML list, e.g. [a, b] (a single name is [name])" if list in kinds else "fix the value"
            raise fail(path, f"must be {_type_name(spec)}, got {type(value).__name__} {value!r}"[:200], hint)
        if isinstance(value, list) and path.endswith((".steps", ".claims")):
            bad = next((v for v in value if not isinstance(v, str) or not v.strip()), None)
            if bad is not None:
                raise fail(path, f"holds {bad!r}, not a name", "list names only")

    check(data, _CLUSTER_SCHEMA, "")


LAYOUT_KEYS = ("pipeline_namespace", "service_account", "serving_namespace", "tracking_uri")


def cluster_layout(name: str = "", config_path: str | None = None) -> dict[str, str]:
    """Where the pieces live for one KFP install (``layouts`` in cluster.yaml; ``name`` or the
    file's ``layout``): the namespace the pipeline pods run in (the contract Secrets, MLflow), the
    identity they run as, the deploy target namespace and MLflow's in-cluster URI."""
    cfg = load_cluster_config(config_path)
    layouts = cfg.get("layouts") or {}
    chosen = name or str(cfg.get("layout") or "")
    if chosen not in layouts:
        raise ShipyardError("layout", f"{chosen!r} is not a layout of the cluster config",
                            f"use one of {', '.join(sorted(layouts)) or '(none: add layouts to cluster.yaml)'}")
    entry = layouts[chosen] or {}
    missing = [k for k in LAYOUT_KEYS if not entry.get(k)]
    if missing:
        raise ShipyardError(f"layouts.{chosen}", f"lacks {', '.join(missing)}", "see pipelines/cluster.yaml")
    return {"name": chosen, **{k: str(entry[k]) for k in LAYOUT_KEYS}}


#: Steps whose effects live outside their outputs (a registry, MLflow, the cluster): a cache hit
#: would skip the push, the record or the apply, so they always run.
SIDE_EFFECT_STEPS = frozenset({
    "package-champion", "deploy", "preflight", "candidate-gates", "select-champion", "register-champion",
    "close-tracking",
})
#: Steps that must see the world as it is now: pin-model reads what a mutable model URI names
#: (a hub branch, an S3 prefix) so that resolve-model's cache key follows the content, and
#: pin-eval-sets the sha256 of each eval set so that prepare-eval-sets' does;
#: watch-production reads the last window of production's traffic.
ALWAYS_RUN_STEPS = SIDE_EFFECT_STEPS | {"pin-model", "pin-eval-sets", "watch-production"}


def step_name(task: PipelineTask) -> str:
    """The KFP component name of ``task`` (``comp-<name>`` in the IR): how the contract names steps."""
    return task.component_spec.name.replace("_", "-")


def _gets(section: dict[str, Any], step: str) -> bool:
    return step in (section.get("steps") or [])


def _contract(task: PipelineTask, cfg: dict[str, Any]) -> None:
    """Secrets, registry credentials, PVCs and the contract annotation of one step."""
    step = step_name(task)
    # the image this step's container runs, as compiled: the benchmark records it as the engine the
    # SLO gate measured, and the deploy step serves the champion with that same image
    task.set_env_variable(ENV_IMAGE, str(task.container_spec.image))
    sources: dict[str, str] = {}
    for secret, entry in (cfg.get("secrets") or {}).items():
        if not isinstance(entry, dict) or not _gets(entry, step):
            continue
        mapping = {str(k): str(v) for k, v in (entry.get("env") or {}).items()}
        kubernetes.use_secret_as_env(task, secret_name=secret, secret_key_to_env=mapping, optional=True)
        sources.update({env: f"{secret}/{key}" for key, env in mapping.items()})
    registry = cfg.get("registry_secret_volume") or {}
    if registry.get("secret") and _gets(registry, step):
        kubernetes.use_secret_as_volume(task, secret_name=registry["secret"], mount_path=registry["mount_path"],
                                        optional=True)
        env = registry.get("env") or "SHIPYARD_REGISTRY_AUTH_FILE"
        task.set_env_variable(env, f"{registry['mount_path']}/.dockerconfigjson")
        sources[env] = f"{registry['secret']}/.dockerconfigjson"
    pvc = cfg.get("pvc") or {}
    if _gets(pvc, step):
        root = str(pvc.get("mount_root") or "/mnt/pvc")
        for claim in pvc.get("claims") or []:
            kubernetes.mount_pvc(task, pvc_name=str(claim), mount_path=f"{root}/{claim}")
        task.set_env_variable("SHIPYARD_PVC_ROOT", root)  # where the step looks for pvc://CLAIM/path
    if step == "preflight":  # the pre-flight stops a run whose inputs need a Secret a step is not given
        task.set_env_variable(ENV_STEP_SECRETS, json.dumps(step_secrets(cfg), sort_keys=True))
    if step == DISK_CHECK_STEP and ephemeral_storage(cfg):
        # resolve-model knows the model's size: it fails before any GPU work when a later step's
        # request cannot hold it (core.contract.check_model_fits_disk)
        task.set_env_variable(ENV_EPHEMERAL_STORAGE, json.dumps(ephemeral_storage(cfg), sort_keys=True))
    # The annotation tells the step, through the downward API, which secret and key feed each
    # variable (for its error messages) and that it runs in a cluster (SHIPYARD_CONTRACT set).
    kubernetes.add_pod_annotation(task, CONTRACT_ANNOTATION, json.dumps({"step": step, "env": sources},
                                                                        sort_keys=True))
    kubernetes.use_field_path_as_env(task, ENV_CONTRACT, f"metadata.annotations['{CONTRACT_ANNOTATION}']")
    if step in ALWAYS_RUN_STEPS:
        task.set_caching_options(False)


#: KFP 2.17's IR has no ephemeral-storage field; its accelerator resource is a free resource
#: name that the driver writes as ``limits[<name>] = <count>`` (a quantity), and Kubernetes sets a
#: request equal to a limit given alone. The steps that get it are CPU steps: the slot is free.
EPHEMERAL_STORAGE_RESOURCE = "ephemeral-storage"
#: the step that knows the model's size first, and checks it against the requests
DISK_CHECK_STEP = "resolve-model"


def ephemeral_storage(cfg: dict[str, Any]) -> dict[str, int]:
    """Step -> bytes of ephemeral storage it requests (``ephemeral_storage`` in cluster.yaml)."""
    from shipyard.serving.kserve.config import parse_quantity

    section = cfg.get("ephemeral_storage") or {}
    if not section.get("size"):
        return {}
    try:
        size = int(parse_quantity(section["size"], "size"))
    except ShipyardError:
        raise ShipyardError("cluster_config ephemeral_storage.size", f"{section['size']!r} is not a resource quantity",
                            'write e.g. "40Gi"') from None
    steps = [str(s) for s in section.get("steps") or []]
    for step in steps:
        if size < disk_needed(step, 0):
            raise ShipyardError("cluster_config ephemeral_storage.size", f"{section['size']!r} leaves {step} no room "
                                "for a model", 'give the model room, e.g. "40Gi" (see docs/cluster-contract.md)')
    return {step: size for step in steps}


def holds_a_model(task: PipelineTask) -> bool:
    """Whether ``task`` is handed a whole model (a Model artifact, which KFP's launcher downloads):
    deploy is in promote, not in optimize-and-deploy (package-champion's config and tokenizer)."""
    specs = task.component_spec.inputs or {}
    return any(name in specs and str(specs[name].type).startswith("system.Model") for name in task.inputs)


def _request_ephemeral_storage(task: PipelineTask, cfg: dict[str, Any]) -> None:
    size = ephemeral_storage(cfg).get(step_name(task))
    if size and holds_a_model(task):
        task.set_accelerator_type(EPHEMERAL_STORAGE_RESOURCE)
        task.set_accelerator_limit(size)


def security_context(cfg: dict[str, Any]) -> dict[str, Any]:
    """The container securityContext fields every step sets (``security_context`` in cluster.yaml):
    the identity fields kfp-kubernetes' ``set_security_context`` carries (KFP itself adds
    allowPrivilegeEscalation false, all capabilities dropped, seccomp RuntimeDefault). A negative
    id, or user 0 with ``run_as_non_root`` (the kubelet would refuse to start every step), is one
    line at compile time."""
    section = {k: v for k, v in (cfg.get("security_context") or {}).items() if v is not None}
    for key in ("run_as_user", "run_as_group"):
        if section.get(key, 0) < 0:
            raise ShipyardError(f"cluster_config security_context.{key}", f"{section[key]} is negative",
                                "give the images' user, 1001 (images/*/Containerfile)")
    if section.get("run_as_non_root") and section.get("run_as_user") == 0:
        raise ShipyardError("cluster_config security_context.run_as_user", "0 is root, which run_as_non_root refuses "
                            "(the kubelet would start no step)", "give the images' user, 1001")
    return section


def _common(task: PipelineTask, cfg: dict[str, Any], section: dict[str, Any]) -> None:
    if section.get("cpu_request"):
        task.set_cpu_request(str(section["cpu_request"]))
    if section.get("memory_request"):
        task.set_memory_request(str(section["memory_request"]))
    if section.get("memory_limit"):
        task.set_memory_limit(str(section["memory_limit"]))
    if cfg.get("image_pull_policy"):
        kubernetes.set_image_pull_policy(task, cfg["image_pull_policy"])
    if security_context(cfg):  # restricted namespaces refuse a pod without runAsNonRoot
        kubernetes.set_security_context(task, **security_context(cfg))
    _contract(task, cfg)


def on_gpu(task: PipelineTask, config_path: str | None = None) -> PipelineTask:
    """Run ``task`` on a GPU node: accelerator, node selector, tolerations, /dev/shm, secrets."""
    cfg = load_cluster_config(config_path)
    gpu = cfg.get("gpu") or {}
    if step_name(task) in ephemeral_storage(cfg):
        raise ShipyardError("cluster_config ephemeral_storage.steps", f"{step_name(task)} runs on a GPU node, whose "
                            "accelerator request holds the GPU", "list only CPU steps (package-champion, deploy)")
    _common(task, cfg, gpu)
    task.set_accelerator_type(str(gpu.get("accelerator_type", "nvidia.com/gpu")))
    task.set_accelerator_limit(int(gpu.get("accelerator_count", 1)))
    for key, value in (gpu.get("node_selector") or {}).items():
        kubernetes.add_node_selector(task, label_key=key, label_value=str(value))
    for tol in gpu.get("tolerations") or []:
        kubernetes.add_toleration(task, **tol)
    if gpu.get("shm_size"):
        kubernetes.empty_dir_mount(task, volume_name="dshm", mount_path="/dev/shm", medium="Memory",
                                   size_limit=str(gpu["shm_size"]))
    return task


def image_runtime(task: PipelineTask) -> str | None:
    """The shipyard runtime whose image ``task`` runs in (``.../shipyard-<runtime>:<tag>``), if any."""
    container = getattr(task.component_spec.implementation, "container", None)
    repo = str(getattr(container, "image", "") or "").partition("@")[0].rpartition(":")[0].rpartition("/")[2]
    return repo.removeprefix("shipyard-") if repo.startswith("shipyard-") else None


def on_cpu(task: PipelineTask, config_path: str | None = None) -> PipelineTask:
    """Run ``task`` on an ordinary node with the configured requests and secrets; a step in one of
    ``gpu_image_runtimes`` (the vllm image: CUDA vLLM, several GB) goes to the GPU nodes instead
    (their node selector and tolerations, no accelerator), where the measure steps pulled that image."""
    cfg = load_cluster_config(config_path)
    _common(task, cfg, cfg.get("cpu") or {})
    _request_ephemeral_storage(task, cfg)
    placed = [str(r) for r in cfg.get("gpu_image_runtimes") or []]
    unknown = sorted(set(placed) - set(RUNTIMES))
    if unknown:
        raise ShipyardError("cluster_config gpu_image_runtimes", f"{unknown[0]!r} is not a runtime",
                            f"name runtimes among {sorted(RUNTIMES)}, e.g. [vllm]")
    if image_runtime(task) in placed:
        gpu = cfg.get("gpu") or {}
        for key, value in (gpu.get("node_selector") or {}).items():
            kubernetes.add_node_selector(task, label_key=key, label_value=str(value))
        for tol in gpu.get("tolerations") or []:
            kubernetes.add_toleration(task, **tol)
    return task
