"""Kubernetes settings for pipeline steps: GPU, node selection, shared memory, secrets.

Loaded from ``pipelines/cluster.yaml`` (or ``SHIPYARD_CLUSTER_CONFIG``) at compile time and
written into the pipeline's platform spec through kfp-kubernetes. ``kfp.local`` ignores them.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from kfp import kubernetes
from kfp.dsl import PipelineTask

from shipyard.errors import ShipyardError

DEFAULT_CLUSTER_CONFIG = Path(__file__).parent / "cluster.yaml"


def load_cluster_config(path: str | None = None) -> dict[str, Any]:
    """The cluster settings (``path``, ``SHIPYARD_CLUSTER_CONFIG`` or the shipped defaults)."""
    return _read_cluster_config(str(path or os.environ.get("SHIPYARD_CLUSTER_CONFIG") or DEFAULT_CLUSTER_CONFIG))


@lru_cache(maxsize=8)
def _read_cluster_config(path: str) -> dict[str, Any]:
    chosen = Path(path)
    try:
        data = yaml.safe_load(chosen.read_text())
    except FileNotFoundError:
        raise ShipyardError("cluster_config", f"{chosen} does not exist", "give an existing YAML file") from None
    except yaml.YAMLError:
        raise ShipyardError("cluster_config", f"{chosen} is not valid YAML", "fix its syntax") from None
    if not isinstance(data, dict):
        raise ShipyardError("cluster_config", f"{chosen} is not a mapping", "see pipelines/cluster.yaml")
    return data


def _common(task: PipelineTask, cfg: dict[str, Any], section: dict[str, Any]) -> None:
    if section.get("cpu_request"):
        task.set_cpu_request(str(section["cpu_request"]))
    if section.get("memory_request"):
        task.set_memory_request(str(section["memory_request"]))
    if section.get("memory_limit"):
        task.set_memory_limit(str(section["memory_limit"]))
    if cfg.get("image_pull_policy"):
        kubernetes.set_image_pull_policy(task, cfg["image_pull_policy"])
    for secret, mapping in (cfg.get("secrets") or {}).items():
        kubernetes.use_secret_as_env(task, secret_name=secret, secret_key_to_env=dict(mapping), optional=True)


def on_gpu(task: PipelineTask, config_path: str | None = None) -> PipelineTask:
    """Run ``task`` on a GPU node: accelerator, node selector, tolerations, /dev/shm, secrets."""
    cfg = load_cluster_config(config_path)
    gpu = cfg.get("gpu") or {}
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


def on_cpu(task: PipelineTask, config_path: str | None = None) -> PipelineTask:
    """Run ``task`` on an ordinary node with the configured requests and secrets."""
    cfg = load_cluster_config(config_path)
    _common(task, cfg, cfg.get("cpu") or {})
    return task


def with_registry_credentials(task: PipelineTask, config_path: str | None = None) -> PipelineTask:
    """Mount the registry's docker config JSON secret (optional) into ``task``."""
    cfg = load_cluster_config(config_path).get("registry_secret_volume") or {}
    if cfg.get("secret"):
        kubernetes.use_secret_as_volume(task, secret_name=cfg["secret"], mount_path=cfg["mount_path"], optional=True)
        task.set_env_variable("SHIPYARD_REGISTRY_AUTH_FILE", f"{cfg['mount_path']}/.dockerconfigjson")
    return task
