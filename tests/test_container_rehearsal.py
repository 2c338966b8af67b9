"""The container rehearsal: runtime images built here, the compiled pipeline run in them through
kfp.local's DockerRunner (podman), against a real registry, MLflow server, moto S3 and the
Kubernetes API double (``shipyard run --local --runner container``)."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import pytest
import yaml
from conftest import require_tool

from shipyard.core.errors import ShipyardError
from shipyard.run.container import SECRETS_MOUNT, check_traversable, pipeline_images, step_env
from shipyard.runtimes.images import BuiltImage, _local_paths, build_args, format_built
from shipyard.runtimes.runtime import REPO_ROOT, runtime_image
from shipyard.testing.services import KubeAPI, MotoS3, private_dir

EVAL = json.dumps({"tasks": ["shipyard_capitals_mc", "shipyard_arithmetic_mc"], "limit": 8, "batch_size": 4})
BENCH = json.dumps({"profile": "concurrent", "loads": [1], "prompt_tokens": 16, "output_tokens": 8, "max_requests": 4})


def test_cpu_flavor_tags_differ_from_the_cluster_tags() -> None:
    gpu, cpu = runtime_image("vllm", "gpu"), runtime_image("vllm", "cpu")
    assert cpu.endswith("-cpu") and cpu.split(":")[0] == gpu.split(":")[0]
    assert cpu.split(":")[1].removesuffix("-cpu") == gpu.split(":")[1].split("@")[0]


def test_cpu_build_args_name_the_base_and_flavor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIPYARD_PYTHON_BASE", "example.org/python:3.11-bookworm")
    assert build_args("base", "gpu") == []
    assert build_args("vllm", "cpu") == ["--build-arg", "BASE_IMAGE=example.org/python:3.11-bookworm",
                                         "--build-arg", "FLAVOR=cpu", "--build-arg", "GARAK=0"]
    assert "TORCH_INDEX=" in build_args("compress", "cpu")


def test_local_pip_indexes_are_mounted_whole(tmp_path: Path) -> None:
    (tmp_path / "pypi" / "simple").mkdir(parents=True)
    (tmp_path / "wheels").mkdir()
    value = f"file://{tmp_path}/pypi/simple {tmp_path}/wheels https://pypi.org/simple {tmp_path}/missing"
    assert _local_paths(value) == [str(tmp_path / "pypi"), str(tmp_path / "wheels")]


def test_containerfiles_take_their_base_as_a_build_arg_and_run_as_non_root() -> None:
    for runtime in ("base", "compress", "vllm", "garak"):
        text = (REPO_ROOT / "images" / runtime / "Containerfile").read_text()
        assert "ARG BASE_IMAGE=" in text and "FROM ${BASE_IMAGE}" in text, runtime
        assert text.rstrip().splitlines()[-1] == "USER 1001", runtime
        assert "COPY images /src/images" in text, runtime
        installs = [line for line in text.splitlines() if "pip install" in line and "/src" not in line]
        assert all("--no-deps" in line or "TORCH_INDEX" in line for line in installs), (runtime, installs)


def test_gpu_lock_pins_every_line() -> None:
    lock = REPO_ROOT / "images" / "vllm" / "requirements-gpu.lock"
    pins = [line for line in lock.read_text().splitlines() if line and not line.startswith("#")]
    assert pins and all("==" in line for line in pins)
    names = {line.split("==")[0].lower() for line in pins}
    assert {"guidellm", "lm-eval", "kfp"} <= {n.replace("_", "-") for n in names}
    assert not {"vllm", "torch", "transformers"} & names  # the vLLM image brings those


def test_format_built_prints_tags_and_sizes() -> None:
    text = format_built([BuiltImage("base", "cpu", "r/shipyard-base:t-cpu", 512_000_000, 12.5)])
    assert "r/shipyard-base:t-cpu" in text and "512MB" in text and "12.5" in text


def test_step_env_uses_the_cluster_contract_names(tmp_path: Path) -> None:
    contract = yaml.safe_load((REPO_ROOT / "pipelines" / "cluster.yaml").read_text())

    class _S3:
        env = MotoS3().env

    class _Mlflow:
        url = "http://127.0.0.1:1"

    env = step_env({"s3": _S3(), "mlflow": _Mlflow()}, tmp_path / "steps.jsonl")
    s3_names = set(contract["secrets"]["shipyard-s3"]["env"].values())
    assert s3_names <= set(env)
    assert "MLFLOW_TRACKING_URI" in contract["secrets"]["shipyard-mlflow"]["env"].values()
    registry_env = contract["registry_secret_volume"].get("env", "SHIPYARD_REGISTRY_AUTH_FILE")
    assert env[registry_env].startswith(SECRETS_MOUNT) and env["KUBECONFIG"].startswith(SECRETS_MOUNT)
    assert env["HF_HUB_OFFLINE"] == "1"


def test_a_work_dir_the_step_user_cannot_reach_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    (locked / "run").mkdir(parents=True)
    locked.chmod(stat.S_IRWXU)
    with pytest.raises(ShipyardError, match="uid 1001"):
        check_traversable(locked / "run")
    open_dir = private_dir("shipyard-test-")
    try:
        check_traversable(open_dir)
    finally:
        shutil.rmtree(open_dir)


def test_kube_api_double_serves_a_kubeconfig(tmp_path: Path) -> None:
    with KubeAPI(tmp_path / "kube") as kube:
        config = yaml.safe_load(kube.kubeconfig.read_text())
        assert config["clusters"][0]["cluster"]["server"] == kube.double.url
        assert kube.get("missing", "shipyard") is None


def test_pipeline_images_reads_the_compiled_executors(tmp_path: Path) -> None:
    compiled = tmp_path / "p.yaml"
    compiled.write_text(yaml.safe_dump({"deploymentSpec": {"executors": {
        "exec-a": {"container": {"image": "localhost/shipyard/shipyard-base:0.1.0-abc-cpu"}},
        "exec-b": {"container": {"image": "ghcr.io/x/shipyard-vllm:0.1.0-def-cpu@sha256:" + "0" * 64}},
        "exec-c": {"container": {"image": "python:3.11"}}}}}))
    assert pipeline_images(compiled) == {"base": "localhost/shipyard/shipyard-base:0.1.0-abc-cpu",
                                         "vllm": "ghcr.io/x/shipyard-vllm:0.1.0-def-cpu@sha256:" + "0" * 64}


@pytest.mark.slow
def test_rehearsal_runs_the_whole_pipeline_in_containers(tiny_model: Path) -> None:
    require_tool(shutil.which("podman") is not None and shutil.which("mmdebstrap") is not None,
                 "bash .ci/podman-setup")
    import contextlib
    import io

    from shipyard.run.container import run_container

    work = private_dir("shipyard-rehearsal-")
    try:
        console = io.StringIO()
        with contextlib.redirect_stdout(console):
            summary = run_container("optimize-and-deploy", str(work), overrides=[
                f"model_uri={tiny_model}", "num_calibration_samples=8", "max_seq_length=64",
                f"eval_config={EVAL}", f"benchmark_config={BENCH}", "registered_model_name=tiny-llama",
            ])
        on_disk = json.loads((work / "run-summary.json").read_text())
        # as quiet as the local run (the rest is in kfp-local.log), and the same answer fields
        lines = console.getvalue().splitlines()
        print(console.getvalue())  # shown when an assertion below fails
        assert len(lines) < 80 and not [line for line in lines if "executor_input" in line or "Executing task" in line]
        assert "Executing task" in (work / "kfp-local.log").read_text()
        steps = [(s["task"], s["status"], s["error"]) for s in on_disk["steps"]]
        assert summary.status == "SUCCESS", (steps, on_disk["rehearsal"]["problems"])
        answer = {k: on_disk[k] for k in ("champion", "promoted", "production", "model_uri", "gates")}
        assert on_disk["champion"] and on_disk["promoted"] is True, answer  # applied (dry_run=false), Ready
        assert on_disk["model_uri"].startswith("oci://") and on_disk["gates"]["candidates"], answer
        rehearsal = on_disk["rehearsal"]
        assert on_disk["runner"] == "container" and rehearsal["problems"] == []
        assert rehearsal["staged"]["model_uri"].startswith("s3://")
        assert rehearsal["staged"]["calibration_dataset"].startswith("s3://")
        ref = rehearsal["registry_reference"]
        assert ref.startswith(f"oci://{rehearsal['services']['registry']}/") and "@sha256:" in ref
        assert rehearsal["digest_resolves"] is True
        assert rehearsal["applied_object"]["model_uri"] == ref and rehearsal["applied_object"]["ready"] is True
        assert rehearsal["mlflow_runs"]
        ran = {s["task"].rsplit("/", 1)[-1] for s in on_disk["steps"] if s["status"] == "SUCCESS"}
        assert {"resolve-model", "compress", "package-champion", "deploy"} <= ran
        # every step ran in its image, as the image's user, and wrote its outputs there
        for task_dir in Path(on_disk["run_dir"]).rglob("executor_output.json"):
            assert task_dir.stat().st_uid == 1001
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.slow
def test_docker_runner_reports_the_real_exit_status(tmp_path: Path) -> None:
    """kfp 2.17 assumed 0 for a container it had already removed (a failed compress "succeeded")."""
    require_tool(shutil.which("podman") is not None and shutil.which("mmdebstrap") is not None,
                 "bash .ci/podman-setup")
    import docker
    from kfp.local import docker_task_handler

    from shipyard.run.container import exact_exit_codes
    from shipyard.runtimes.images import ensure_python_base
    from shipyard.testing.services import PodmanSocket

    image = ensure_python_base()
    exact_exit_codes()
    with PodmanSocket(tmp_path / "podman") as podman:
        client = docker.DockerClient(base_url=podman.docker_host)
        try:
            for code in (0, 3):
                assert docker_task_handler.run_docker_container(
                    client, image, ["sh", "-c", f"echo step; exit {code}"], volumes={}) == code
            assert not client.containers.list(all=True, filters={"ancestor": image})  # nothing left behind
            with pytest.raises(ShipyardError, match="not in the local image store"):
                docker_task_handler.run_docker_container(client, "localhost/shipyard/none:0", ["true"], volumes={})
        finally:
            client.close()


def test_image_names_must_start_with_a_registry_host() -> None:
    """podman files ``team/img`` under ``localhost/team/img``: the step image would not be found."""
    from shipyard.runtimes.images import _check_qualified

    for ok in ("ghcr.io/shipyard-llm/shipyard-base:t", "localhost/shipyard/shipyard-base:t",
               "127.0.0.1:5000/t/shipyard-base:t"):
        _check_qualified(ok)
    with pytest.raises(ShipyardError, match="registry host"):
        _check_qualified("team/shipyard-base:t")
