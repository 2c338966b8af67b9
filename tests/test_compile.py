"""Compiled pipelines: tasks, runtime images and Kubernetes platform settings in the IR."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kfp import components

from shipyard.cli.commands.compile import compile_all
from shipyard.cli.main import main
from shipyard.pipelines import PIPELINES
from shipyard.runtimes.runtime import runtime_image


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    out = tmp_path_factory.mktemp("ir")
    assert main(["compile", "--out", str(out)]) == 0
    return {name: list(yaml.safe_load_all((out / f"{name}.yaml").read_text())) for name in PIPELINES}


def _all_tasks(dag: dict, components_: dict) -> dict[str, str]:
    """task name -> component name, through nested DAGs (ParallelFor, conditions)."""
    found = {}
    for name, task in (dag.get("tasks") or {}).items():
        comp = task["componentRef"]["name"]
        found[name] = comp
        sub = components_.get(comp, {}).get("dag")
        if sub:
            found.update(_all_tasks(sub, components_))
    return found


def test_every_pipeline_compiles_and_loads_back(tmp_path: Path) -> None:
    for path in compile_all(str(tmp_path)):
        loaded = components.load_component_from_file(str(path))
        assert loaded.name == path.stem


def test_main_pipeline_tasks_and_runtimes(compiled: dict[str, list[dict]]) -> None:
    spec, platform = compiled["optimize-and-deploy"]
    tasks = _all_tasks(spec["root"]["dag"], spec["components"])
    assert {"resolve-model", "compress"} <= set(tasks)
    executors = spec["deploymentSpec"]["executors"]
    image_of = {
        task: executors[spec["components"][comp]["executorLabel"]]["container"]["image"]
        for task, comp in tasks.items()
        if "executorLabel" in spec["components"][comp]
        and "container" in executors[spec["components"][comp]["executorLabel"]]  # not the champion's importer
    }
    assert image_of["compress"] == runtime_image("compress")
    assert image_of["resolve-model"] == runtime_image("compress")
    assert image_of["deploy"] == runtime_image("vllm")  # lm-eval and guidellm for the verification
    for image in image_of.values():
        assert image.split("/")[-1].startswith("shipyard-")
        assert ":latest" not in image
    for executor in executors.values():
        command = " ".join((executor.get("container") or {}).get("command", []))
        assert "pip install" not in command, "no pip installs at run time"


def test_gpu_steps_carry_accelerator_and_platform_settings(compiled: dict[str, list[dict]]) -> None:
    spec, platform = compiled["optimize-and-deploy"]
    executors = spec["deploymentSpec"]["executors"]
    compress_exec = spec["components"]["comp-compress"]["executorLabel"]
    resources = executors[compress_exec]["container"]["resources"]
    assert resources["accelerator"]["resourceType"] == "nvidia.com/gpu"
    assert int(resources["accelerator"]["resourceCount"]) == 1
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"][compress_exec]
    assert k8s["nodeSelector"]["labels"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in k8s["tolerations"]
    shm = k8s["emptyDirMounts"][0]
    assert shm["mountPath"] == "/dev/shm" and shm["medium"] == "Memory"
    assert any(s["secretName"] == "hf-token" and s["optional"] for s in k8s["secretAsEnv"])
    resolve_exec = spec["components"]["comp-resolve-model"]["executorLabel"]
    assert "accelerator" not in executors[resolve_exec]["container"].get("resources", {})


def test_parameters_have_descriptions_for_the_ui(compiled: dict[str, list[dict]]) -> None:
    spec, _ = compiled["optimize-and-deploy"]
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert {"model_uri", "recipes", "num_calibration_samples"} <= set(params)
    for name, param in params.items():
        assert param.get("description"), f"parameter {name} has no description"


def test_image_registry_override(tmp_path: Path) -> None:
    assert main(["compile", "--out", str(tmp_path), "--pipeline", "optimize-and-deploy", "--image-registry", "registry.example.com/ml"]) == 0
    text = (tmp_path / "optimize-and-deploy.yaml").read_text()
    assert "registry.example.com/ml/shipyard-compress:" in text


def test_cluster_config_override(tmp_path: Path) -> None:
    cfg = tmp_path / "cluster.yaml"
    cfg.write_text("gpu:\n  accelerator_type: amd.com/gpu\n  accelerator_count: 2\n  node_selector: {pool: mi300}\n")
    compile_all(str(tmp_path / "out"), ["optimize-and-deploy"], cluster_config=str(cfg))
    spec, platform = yaml.safe_load_all((tmp_path / "out" / "optimize-and-deploy.yaml").read_text())
    label = spec["components"]["comp-compress"]["executorLabel"]
    assert spec["deploymentSpec"]["executors"][label]["container"]["resources"]["accelerator"]["resourceType"] == "amd.com/gpu"
    assert platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"][label]["nodeSelector"]["labels"] == {"pool": "mi300"}


def _images(path: Path) -> dict[str, str]:
    spec = next(yaml.safe_load_all(path.read_text()))
    return {name: ex["container"]["image"] for name, ex in spec["deploymentSpec"]["executors"].items() if "container" in ex}


def test_one_compile_path_cpu_flavor_matches_a_fresh_cpu_interpreter(tmp_path: Path) -> None:
    """The container rehearsal compiles in-process through shipyard.run.compile with the cpu flavor;
    its images are the ones a fresh interpreter with SHIPYARD_IMAGE_FLAVOR=cpu gives."""
    import os
    import subprocess
    import sys

    from shipyard.run.container import compile_for_containers

    compiled = compile_for_containers("optimize-and-deploy", tmp_path / "in-process")
    env = dict(os.environ, SHIPYARD_IMAGE_FLAVOR="cpu")
    subprocess.run([sys.executable, "-m", "shipyard.cli.main", "compile", "--out", str(tmp_path / "fresh"),
                    "--pipeline", "optimize-and-deploy"], env=env, check=True, capture_output=True)
    images = _images(compiled)
    assert images == _images(tmp_path / "fresh" / "optimize-and-deploy.yaml")
    assert all(image.endswith("-cpu") for image in images.values())


def test_submit_path_compiles_with_a_cluster_config_set_later(tmp_path: Path) -> None:
    """kfp_client.load_pipeline (submit/schedule by name) compiles through the one compile path, so a
    cluster config given after the pipelines were imported applies."""
    from shipyard.run.kfp_client import load_pipeline

    cfg = tmp_path / "cluster.yaml"
    cfg.write_text("gpu:\n  accelerator_type: amd.com/gpu\n  accelerator_count: 2\n  node_selector: {pool: mi300}\n")
    package = load_pipeline("optimize-and-deploy", tmp_path / "work", cluster_config=str(cfg),
                            image_registry="registry.example.com/ml")
    spec, platform = yaml.safe_load_all(package.path.read_text())
    label = spec["components"]["comp-compress"]["executorLabel"]
    assert spec["deploymentSpec"]["executors"][label]["container"]["resources"]["accelerator"]["resourceType"] == "amd.com/gpu"
    assert platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"][label]["nodeSelector"]["labels"] == {"pool": "mi300"}
    assert all(image.startswith("registry.example.com/ml/shipyard-") for image in _images(package.path).values())
