"""The package step: logic and its KFP wrapper run through kfp.local, against a real local registry."""

# No `from __future__ import annotations`: KFP reads the pipeline function's real annotations.

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.core.errors import ShipyardError
from shipyard.core.files import sha256_file
from shipyard.core.report import CSS
from shipyard.oci import transfer
from shipyard.steps.package import package_model
from shipyard.testing.registry import LocalRegistry

pytestmark = pytest.mark.usefixtures("registry_tools")


def tree_hashes(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): sha256_file(p) for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def registry() -> Iterator[LocalRegistry]:
    with LocalRegistry() as reg:
        yield reg


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIPYARD_REGISTRY_RETRIES", "2")
    monkeypatch.setenv("SHIPYARD_REGISTRY_BACKOFF", "0.05")
    monkeypatch.setenv("SHIPYARD_REGISTRY_AUTH_FILE", "/nonexistent/auth.json")


def test_local_layout_fallback(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "modelcar"
    result = package_model(str(tiny_model), str(out), annotations='{"recipe": "w4a16", "benchmark": {"tps": 12.5}}')
    assert result["uri"] == f"oci://{out.resolve()}@{result['digest']}"
    assert result["registry"] == "" and result["tag"].startswith("model-")
    assert json.loads((out / "shipyard-package.json").read_text())["digest"] == result["digest"]
    assert result["uri"] in (out / "shipyard-package.md").read_text()
    page = (out / "shipyard-package.html").read_text()  # the reports' page, which fits MLflow's artifact viewer
    assert "<table" in page and CSS in page and result["digest"] in page
    assert result["annotations"]["io.shipyard.benchmark.summary"] == '{"tps":12.5}'
    transfer.pull_model(result["uri"], tmp_path / "back")
    assert tree_hashes(tmp_path / "back") == tree_hashes(tiny_model)


def test_push_modelcar_and_oras(tiny_model: Path, tmp_path: Path, registry: LocalRegistry) -> None:
    car = package_model(str(tiny_model), str(tmp_path / "car"), registry=registry.address, repository="team/tiny",
                        tag="candidate", annotations="{}")
    assert car["uri"] == f"oci://{registry.address}/team/tiny@{car['digest']}"
    assert car["tag_ref"] == f"{registry.address}/team/tiny:candidate"
    again = package_model(str(tiny_model), str(tmp_path / "car2"), registry=registry.address, repository="team/tiny",
                          tag="candidate", annotations="{}")
    assert again["digest"] == car["digest"] and again["bytes_sent"] == 0

    art = package_model(str(tiny_model), str(tmp_path / "oras"), registry=registry.address, repository="team/tiny-oras",
                        tag="candidate", mode="oras")
    transfer.pull_model(art["uri"], tmp_path / "oras-back")
    assert tree_hashes(tmp_path / "oras-back") == tree_hashes(tiny_model)


def test_bad_input_leaves_no_output(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    for kwargs, message in [
        ({"mode": "docker"}, "mode: unknown mode 'docker'"),
        ({"annotations": "{not json"}, "annotations: is not JSON"),
        ({"registry": "127.0.0.1:1"}, "repository: is empty"),
        ({"tag": "bad tag!"}, "tag: 'bad tag!' is not a valid OCI tag"),
        ({"base_image": "/nonexistent/layout"}, "base_image: /nonexistent/layout is not an OCI layout"),
        ({"registry": "127.0.0.1:1", "repository": "team/x"}, "registry 127.0.0.1:1: unreachable"),
    ]:
        with pytest.raises(ShipyardError, match=message.replace("(", r"\(")) as err:
            package_model(str(tiny_model), str(out), **kwargs)
        assert "\n" not in str(err.value)
        assert not out.exists(), kwargs
    assert [p.name for p in tmp_path.iterdir()] == []


def test_kfp_component_runs_locally(tiny_model: Path, tmp_path: Path, registry: LocalRegistry) -> None:
    from kfp import dsl, local
    from kfp.dsl import Model

    from shipyard.components.package.component import package_model as component

    @dsl.pipeline(name="package-only")
    def pipeline(model_path: str, registry: str) -> str:
        imported = dsl.importer(artifact_uri=model_path, artifact_class=Model, reimport=False)
        task = component(model=imported.output, registry=registry, repository="team/kfp", tag="v1", mode="modelcar",
                         base_image="", annotations='{"pipeline_run": "local"}', insecure_tls=False)
        return task.outputs["uri"]

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    run = pipeline(model_path=str(tiny_model), registry=registry.address)
    uri = run.output
    assert uri.startswith(f"oci://{registry.address}/team/kfp@sha256:")
    transfer.pull_model(uri, tmp_path / "back")
    assert tree_hashes(tmp_path / "back") == tree_hashes(tiny_model)
