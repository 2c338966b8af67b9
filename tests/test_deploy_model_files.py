"""The deploy step gets the model's config and tokenizer without the weights (issue 19 §7: it used
to take the champion's whole model artifact, which KFP downloads in full, to read config.json)."""

from __future__ import annotations

from pathlib import Path

import yaml

from shipyard.cli.commands.compile import compile_all
from shipyard.serving.kserve.render import copy_model_files
from shipyard.steps.deploy import run_deploy

MODEL_URI = "oci://registry.example/team/tiny@sha256:" + "1" * 64


def _task(dag: dict, components: dict, name: str) -> dict | None:
    for task_name, task in (dag.get("tasks") or {}).items():
        if task_name == name:
            return task
        sub = components.get(task["componentRef"]["name"], {}).get("dag")
        if sub and (found := _task(sub, components, name)):
            return found
    return None


def test_the_deploy_task_takes_small_files_not_the_model_in_every_pipeline(tmp_path: Path) -> None:
    compile_all(str(tmp_path), ["optimize-and-deploy", "promote"])
    for name, producer in (("optimize-and-deploy", "package-champion"), ("promote", "resolve-model")):
        spec, _ = yaml.safe_load_all((tmp_path / f"{name}.yaml").read_text())
        deploy = _task(spec["root"]["dag"], spec["components"], "deploy")
        assert deploy is not None
        artifacts = deploy["inputs"]["artifacts"]
        assert "model" not in artifacts  # no Model artifact (every weight, which KFP downloads) is an input
        assert artifacts["model_files"]["componentInputArtifact"].startswith(f"pipelinechannel--{producer}")
        assert artifacts["model_files"]["componentInputArtifact"].endswith("-model_files")
        types = spec["components"][deploy["componentRef"]["name"]]["inputDefinitions"]["artifacts"]
        assert not any(t["artifactType"]["schemaTitle"] == "system.Model" for t in types.values())


def test_the_small_files_plan_and_render_like_the_whole_model(tiny_model: Path, tmp_path: Path) -> None:
    out = copy_model_files(str(tiny_model), str(tmp_path / "files"))
    names = set(out["files"])
    assert {"config.json", "tokenizer.json"} <= names
    assert not any(n.endswith((".safetensors", ".bin")) for n in names)
    assert not any(p.suffix == ".safetensors" for p in (tmp_path / "files").iterdir())
    assert out["size_bytes"] < sum(p.stat().st_size for p in tiny_model.iterdir() if p.is_file())
    config = {"prefill_replicas": 1, "gpu_memory_gib": 80}
    small = run_deploy(deploy_config=config, manifest_path=str(tmp_path / "small.yaml"), dry_run=True,
                       model_dir=str(tmp_path / "files"), name="llm", namespace="serving", model_uri=MODEL_URI)
    whole = run_deploy(deploy_config=config, manifest_path=str(tmp_path / "whole.yaml"), dry_run=True,
                       model_dir=str(tiny_model), name="llm", namespace="serving", model_uri=MODEL_URI)
    assert small["planned"] and whole["planned"]
    assert (tmp_path / "small.yaml").read_text() == (tmp_path / "whole.yaml").read_text()
