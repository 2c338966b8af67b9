"""The container rehearsal: runtime images built here, the compiled pipeline run in them through
kfp.local's DockerRunner (podman), against a real registry, MLflow server, moto S3 and the
Kubernetes API double (``shipyard run --local --runner container``)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import require_tool

from shipyard.core.errors import ShipyardError
from shipyard.oci.attestation import load_private_key
from shipyard.oci.model_signature import MODEL_SIGNATURE_TYPE, file_signing_problem
from shipyard.pipelines.platform import cluster_layout
from shipyard.run.container import (
    SECRETS_MOUNT,
    LayoutPlan,
    attestation_secret_values,
    check_traversable,
    contract_env,
    manifest_mlflow_port,
    mlflow_allowed_hosts,
    pipeline_images,
    rehearsal_secrets,
    step_env,
)
from shipyard.runtimes.images import BuiltImage, _local_paths, format_built
from shipyard.runtimes.runtime import REPO_ROOT, runtime_image
from shipyard.testing.mlflow_image import PLAIN_IMAGE_LACKS
from shipyard.testing.registry import LocalRegistry
from shipyard.testing.services import KubeAPI, MlflowServer, MotoS3, private_dir

# shipyard_capitals_gen: the deploy step's verification re-runs it through the served model (its
# default accuracy slice) and compares it with the candidate's own result
EVAL = json.dumps({"tasks": ["shipyard_capitals_mc", "shipyard_arithmetic_mc", "shipyard_capitals_gen"], "limit": 8,
                   "batch_size": 4})
BENCH = json.dumps({"profile": "concurrent", "loads": [1], "prompt_tokens": 16, "output_tokens": 8, "max_requests": 4})


def test_cpu_flavor_tags_differ_from_the_cluster_tags() -> None:
    gpu, cpu = runtime_image("vllm", "gpu"), runtime_image("vllm", "cpu")
    assert cpu.endswith("-cpu") and cpu.split(":")[0] == gpu.split(":")[0]
    assert cpu.split(":")[1].removesuffix("-cpu") == gpu.split(":")[1].split("@")[0]


def test_local_pip_indexes_are_mounted_whole(tmp_path: Path) -> None:
    (tmp_path / "pypi" / "simple").mkdir(parents=True)
    (tmp_path / "wheels").mkdir()
    value = f"file://{tmp_path}/pypi/simple {tmp_path}/wheels https://pypi.org/simple {tmp_path}/missing"
    assert _local_paths(value) == [str(tmp_path / "pypi"), str(tmp_path / "wheels")]


def test_containerfiles_take_their_base_as_a_build_arg_and_run_as_non_root() -> None:
    for runtime in ("base", "compress", "vllm", "garak"):
        text = (REPO_ROOT / "images" / runtime / "Containerfile").read_text()
        assert "ARG BASE_IMAGE=" in text and "FROM ${BASE_IMAGE}" in text, runtime
        users = [line for line in text.splitlines() if line.startswith("USER ")]
        assert users and users[-1] == "USER 1001", runtime  # the image runs as 1001 (what follows runs as it too)
        assert "COPY images /src/images" in text, runtime
        installs = [line for line in text.splitlines() if "pip install" in line and "/src" not in line]
        assert all("--no-deps" in line for line in installs), (runtime, installs)  # hashes: tests/test_images.py


def test_format_built_prints_tags_and_sizes() -> None:
    text = format_built([BuiltImage("base", "cpu", "r/shipyard-base:t-cpu", 512_000_000, 12.5)])
    assert "r/shipyard-base:t-cpu" in text and "512MB" in text and "12.5" in text


def test_step_env_uses_the_cluster_contract_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    contract = yaml.safe_load((REPO_ROOT / "pipelines" / "cluster.yaml").read_text())
    values = {**MotoS3().env, "MLFLOW_TRACKING_URI": "http://mlflow.kubeflow.svc.cluster.local:5000",
              ".dockerconfigjson": "{}"}
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    env = step_env(contract_env(rehearsal_secrets("kubeflow", values)), tmp_path / "steps.jsonl")
    # the machine's OpenMP settings where it has them (the tests' conftest sets the wait policy), no others
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and "OMP_NUM_THREADS" not in env
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert "OMP_WAIT_POLICY" not in step_env(contract_env(rehearsal_secrets("kubeflow", values)), tmp_path / "s.jsonl")
    s3_names = set(contract["secrets"]["shipyard-s3"]["env"].values())
    assert s3_names <= set(env)
    assert env["MLFLOW_TRACKING_URI"] == values["MLFLOW_TRACKING_URI"]
    assert "MLFLOW_TRACKING_URI" in contract["secrets"]["shipyard-mlflow"]["env"].values()
    registry_env = contract["registry_secret_volume"].get("env", "SHIPYARD_REGISTRY_AUTH_FILE")
    assert env[registry_env].startswith(SECRETS_MOUNT) and env["KUBECONFIG"].startswith(SECRETS_MOUNT)
    assert env["HF_HUB_OFFLINE"] == "1"
    assert "HF_TOKEN" not in env  # no value in the rehearsal: the optional key is absent, as in a pod
    # each step knows it runs in a cluster, and which Secret feeds each variable
    assert json.loads(env["SHIPYARD_CONTRACT"])["env"]["MLFLOW_TRACKING_URI"] == "shipyard-mlflow/MLFLOW_TRACKING_URI"


LAYOUTS = ["kfp-standalone", "kubeflow-multi-user"]


def _without_allowed_hosts(docs: list[dict]) -> list[dict]:
    """The overlay as it was before issue 19: MLflow's Deployment sets no allowed hosts."""
    old = json.loads(json.dumps(docs))
    for doc in old:
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "mlflow":
            container = doc["spec"]["template"]["spec"]["containers"][0]
            container["env"] = [e for e in container["env"] if e["name"] != "MLFLOW_SERVER_ALLOWED_HOSTS"]
    return old


#: the MLflow image the manifests named before issue 32: mlflow's docker/Dockerfile, pip install mlflow, no boto3
PLAIN_MLFLOW_IMAGE = "ghcr.io/mlflow/mlflow:v3.17.2"


def _with_mlflow_image(docs: list[dict], image: str) -> list[dict]:
    """The overlay with MLflow's Deployment running ``image`` (e.g. the plain image of before issue 32)."""
    changed = json.loads(json.dumps(docs))
    for doc in changed:
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "mlflow":
            doc["spec"]["template"]["spec"]["containers"][0]["image"] = image
    return changed


def test_the_rehearsals_mlflow_runs_as_its_image_is_built(tmp_path: Path) -> None:
    """Issue 32, 1d: the rehearsal's MLflow (LayoutPlan.mlflow_server, as the rehearsal starts it)
    proxies artifacts to the Deployment's s3://mlflow-artifacts on the S3 double and can import only
    what the Deployment's image carries. Today's overlay (the -full image) passes the artifact round
    trip and the artifacts land in the S3 double; the plain image (no boto3) starts, answers /health,
    and fails the round trip in one line naming boto3 and the -full variant."""
    require_tool(shutil.which("kubectl") is not None, "kubectl with kustomize")
    from mlflow import MlflowClient

    from shipyard.core.net import http_ok
    from shipyard.models.s3 import client, load_config
    from shipyard.serving.cluster_check import mlflow_artifact_check

    plan = LayoutPlan.of("kfp-standalone")
    assert plan.mlflow_image == {"image": f"{PLAIN_MLFLOW_IMAGE}-full", "artifacts": "s3://mlflow-artifacts",
                                 "absent": []}
    plain = LayoutPlan(plan.layout, _with_mlflow_image(plan.docs, PLAIN_MLFLOW_IMAGE), plan.mlflow_port,
                       plan.allowed_hosts)
    assert plain.mlflow_image["absent"] == list(PLAIN_IMAGE_LACKS) == ["boto3", "botocore"]
    with MotoS3() as s3:
        with plan.mlflow_server(tmp_path / "overlay", s3) as mlflow:
            passed = mlflow_artifact_check(mlflow.url)
            tracking = MlflowClient(mlflow.url)
            run = tracking.create_run(tracking.create_experiment("proxied")).info.run_id
            tracking.log_text(run, "hello", "report.txt")
        keys = [o.object_name for o in client(load_config(s3.env)).list_objects("mlflow-artifacts", recursive=True)]
        assert [k for k in keys if k.endswith(f"/{run}/artifacts/report.txt")], keys  # on the S3 double
        assert not (tmp_path / "overlay" / "artifacts").exists()  # not in a local folder
        with plain.mlflow_server(tmp_path / "plain", s3) as mlflow:
            assert http_ok(f"{mlflow.url}/health")  # Ready: the image's missing boto3 shows only at an upload
            failed = mlflow_artifact_check(mlflow.url)
    assert passed.status == "pass", passed.line()
    line = failed.line()
    assert failed.status == "fail" and "\n" not in line, line
    assert line.startswith("FAIL mlflow artifacts: an artifact upload answered 500"), line
    assert "boto3" in line and "-full" in line, line
    assert "No module named 'boto3'" in (tmp_path / "plain" / "mlflow-server.log").read_text()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_mlflow_allowed_hosts_come_from_the_overlay(layout: str) -> None:
    require_tool(shutil.which("kubectl") is not None, "kubectl with kustomize")
    plan = LayoutPlan.of(layout)
    ns = cluster_layout(layout)["pipeline_namespace"]
    assert manifest_mlflow_port(plan.docs) == 5000
    hosts = mlflow_allowed_hosts(plan.docs, 5000).split(",")
    assert f"mlflow.{ns}.svc.cluster.local:5000" in hosts and "$(POD_NAMESPACE)" not in ",".join(hosts)
    assert f"mlflow.{ns}.svc.cluster.local" in hosts and "127.0.0.1:*" in hosts
    # on another port only the port part moves; the names stay the manifest's
    moved = mlflow_allowed_hosts(plan.docs, 41234).split(",")
    assert f"mlflow.{ns}.svc.cluster.local:41234" in moved and not [h for h in moved if h.endswith(":5000")]
    assert [h.rsplit(":", 1)[0] for h in moved] == [h.rsplit(":", 1)[0] for h in hosts]
    assert mlflow_allowed_hosts(_without_allowed_hosts(plan.docs), 5000) is None  # MLflow's default then


@pytest.mark.parametrize("layout", LAYOUTS)
def test_steps_reach_each_service_by_its_cluster_name(layout: str, tmp_path: Path) -> None:
    require_tool(shutil.which("kubectl") is not None, "kubectl with kustomize")
    chosen = cluster_layout(layout)
    plan = LayoutPlan.of(layout)
    mlflow, s3, registry = MlflowServer(tmp_path / "m", port=plan.mlflow_port), MotoS3(), LocalRegistry(root=tmp_path / "registry")
    with plan.kube_api(tmp_path / "kube") as kube:
        wired = plan.wire(s3, mlflow, registry, kube)
        names, hosts, env = wired["names"], wired["hosts"], wired["contract"]
        assert names["mlflow"] == f"http://mlflow.{chosen['pipeline_namespace']}.svc.cluster.local:{plan.mlflow_port}"
        if plan.mlflow_port == 5000:
            assert names["mlflow"] == chosen["tracking_uri"]  # the layout's own tracking URI
        assert names["s3"] == f"http://minio.minio.svc:{s3.port}"
        assert names["kubernetes"].startswith("http://kubernetes.default.svc:")
        assert names["registry"] == registry.address  # a node pulls the modelcar: a name nodes resolve
        assert hosts == {f"mlflow.{chosen['pipeline_namespace']}.svc.cluster.local": "127.0.0.1",
                         "minio.minio.svc": "127.0.0.1", "kubernetes.default.svc": "127.0.0.1"}
        assert env["MLFLOW_TRACKING_URI"] == names["mlflow"] and env["AWS_ENDPOINT_URL_S3"] == names["s3"]
        # the contract Secrets are where the pipeline pods run, with the values the steps get
        secret = kube.double.get("secrets", chosen["pipeline_namespace"], "shipyard-mlflow")
        assert secret and base64.b64decode(secret["data"]["MLFLOW_TRACKING_URI"]).decode() == names["mlflow"]
        config = yaml.safe_load(kube.kubeconfig.read_text())
        assert config["clusters"][0]["cluster"]["server"] == names["kubernetes"]
        assert config["contexts"][0]["context"]["namespace"] == chosen["pipeline_namespace"]
        assert kube.double.users[config["users"][0]["user"]["token"]] == (
            f"system:serviceaccount:{chosen['pipeline_namespace']}:{chosen['service_account']}")
        assert kube.double.enforce_rbac
        assert kube.double.get("roles", chosen["serving_namespace"], "shipyard-deployer")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_deploy_identity_is_held_to_the_overlays_role(layout: str, tmp_path: Path) -> None:
    """The steps' kubeconfig acts as the layout's pipeline identity: it may apply in the serving
    namespace as the overlay's RoleBinding allows; a verb taken from the Role is a 403 naming it."""
    require_tool(shutil.which("kubectl") is not None, "kubectl with kustomize")
    from shipyard.serving.kserve.apply import Kube, api_client
    from shipyard.serving.kserve.config import parse_config
    from shipyard.serving.kserve.render import render

    chosen = cluster_layout(layout)
    serving, pods = chosen["serving_namespace"], chosen["pipeline_namespace"]
    plan = LayoutPlan.of(layout)
    with plan.kube_api(tmp_path / "kube") as kube:
        plan.wire(MotoS3(), MlflowServer(tmp_path / "m", port=plan.mlflow_port), LocalRegistry(root=tmp_path / "registry"), kube)
        # the test process reaches the double on 127.0.0.1 (a step resolves kubernetes.default.svc)
        config = yaml.safe_load(kube.kubeconfig.read_text())
        config["clusters"][0]["cluster"]["server"] = kube.double.url
        (tmp_path / "here").write_text(yaml.safe_dump(config))
        api = Kube(api_client(str(tmp_path / "here")))
        (obj,) = [d for d in render(parse_config({"preset": "aggregated"}, name="llm", namespace=serving,
                                                 model_uri="oci://quay.io/org/m@sha256:" + "0" * 64))
                  if d["kind"] == "LLMInferenceService"]
        res = api.resource(obj["apiVersion"], obj["kind"])
        assert api.apply(res, obj)["metadata"]["namespace"] == serving
        role = kube.double.objects[("roles", serving, "shipyard-deployer")]
        next(r for r in role["rules"] if r["resources"] == ["llminferenceservices"])["verbs"].remove("patch")
        with pytest.raises(ShipyardError) as err:
            api.apply(res, obj)
        assert "403" in str(err.value) or "forbidden" in str(err.value).lower()
        assert f"system:serviceaccount:{pods}:{chosen['service_account']}" in str(err.value)


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


PREFLIGHT = ("from shipyard.runtimes.runtime import call_step; from shipyard.steps.preflight import preflight_step; "
             "call_step('base', preflight_step, pipeline='optimize-and-deploy', "
             "params={'dry_run': True}, tracking_uri='', experiment='shipyard', kfp_run_id='host-check')")


@pytest.mark.slow
def test_todays_mlflow_manifest_would_fail_the_rehearsal(capfd: pytest.CaptureFixture) -> None:
    """Before issue 19, manifests/base/mlflow set no MLFLOW_SERVER_ALLOWED_HOSTS: /health answered
    (the pod looked Ready), then the first API call by mlflow.kubeflow.svc.cluster.local was a 403.
    The pre-flight step as the pre-flight component calls it, in the base runtime image, with the
    rehearsal's own runner settings (host entries, host network, the contract's environment):
    against MLflow as the old manifest started it, it fails in one line naming the Host check;
    as the overlay starts it, it passes. Issue 32: MLflow as the manifest of before it ran it, the
    plain ghcr.io/mlflow/mlflow image (no boto3) with s3:// artifacts on the S3 double, answers /health
    and the API, and the pre-flight fails on the artifact round trip in one line naming boto3."""
    require_tool(shutil.which("podman") is not None and shutil.which("mmdebstrap") is not None,
                 "bash .ci/podman-setup")
    require_tool(shutil.which("kubectl") is not None, "kubectl with kustomize")
    import docker
    from kfp.local import docker_task_handler

    from shipyard.core.net import http_ok
    from shipyard.run.container import _runner, exact_exit_codes, write_secrets
    from shipyard.runtimes.images import build_image
    from shipyard.testing.services import PodmanSocket

    image = build_image("base", "cpu").ref  # the rehearsal's base image (built when missing)
    exact_exit_codes()
    plan = LayoutPlan.of("kfp-standalone")
    work = private_dir("shipyard-host-check-")
    outcomes = {}
    try:
        with PodmanSocket(work / "podman") as podman:
            client = docker.DockerClient(base_url=podman.docker_host)
            for label, docs in (("old manifest", _without_allowed_hosts(plan.docs)), ("overlay", plan.docs),
                                ("plain image", _with_mlflow_image(plan.docs, PLAIN_MLFLOW_IMAGE))):
                folder = work / label.replace(" ", "-")
                manifest = LayoutPlan(plan.layout, docs, plan.mlflow_port, mlflow_allowed_hosts(docs, plan.mlflow_port))
                with MotoS3() as s3, manifest.mlflow_server(folder / "mlflow", s3) as mlflow, \
                        manifest.kube_api(folder / "kube") as kube:
                    wired = manifest.wire(s3, mlflow, LocalRegistry(root=folder / "registry"), kube)
                    assert http_ok(f"{mlflow.url}/health")  # Ready either way: /health skips the Host check
                    write_secrets(folder / "secrets", wired["names"]["registry"], kube.kubeconfig)
                    runner = _runner(wired["contract"], wired["hosts"], Path("/tmp/steps.jsonl"), folder / "secrets")
                    capfd.readouterr()
                    code = docker_task_handler.run_docker_container(client, image, ["python", "-c", PREFLIGHT],
                                                                    volumes={}, **runner.container_run_args)
                    outcomes[label] = (code, capfd.readouterr().out, wired["names"]["mlflow"])
            client.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    code, out, url = outcomes["old manifest"]
    print(out)
    host = url.removeprefix("http://")
    assert code == 1, out
    failure = [line for line in out.splitlines() if line.startswith("shipyard: ")]
    assert failure == [f"shipyard: mlflow api: MLflow rejects Host {host} (403 Invalid Host header): /health still "
                       "answers, so the pod looks Ready (fix: allow the Service names: MLFLOW_SERVER_ALLOWED_HOSTS as "
                       "in manifests/base/mlflow, then restart MLflow)"], out
    code, out, _ = outcomes["overlay"]
    assert code == 0, out
    assert f"pre-flight: PASS mlflow api: experiments/search as Host {host} answered 200" in out, out
    assert f"pre-flight: PASS mlflow artifacts: an artifact written, listed, read back and deleted through {host}" in out, out
    code, out, _ = outcomes["plain image"]
    print(out)
    assert code == 1, out
    assert f"pre-flight: PASS mlflow api: experiments/search as Host {host} answered 200" in out, out
    failure = [line for line in out.splitlines() if line.startswith("shipyard: ")]
    assert len(failure) == 1 and failure[0].startswith("shipyard: mlflow artifacts: an artifact upload answered 500"), out
    assert "boto3" in failure[0] and "-full" in failure[0], out


# lenient SLOs: the two layouts' rehearsals run side by side on the same cores (the gate's logic
# has its own tests; here it must pass whatever the other run is doing)
SLO = json.dumps({"ttft_p99_ms": 30000, "itl_p99_ms": 5000, "max_error_rate": 0.0, "require": "base"})


# the verification's requests wait up to 300 s each (the default is 60): the two rehearsals share 2 cores, and a
# modelcar server's first answers can take longer than a minute while the other layout measures its models
DEPLOY = json.dumps({**json.loads(yaml.safe_load((REPO_ROOT / "pipelines" / "local-params.yaml").read_text())
                                  ["deploy_config"]), "verify": {"timeout_s": 300}})


# 8 questions per task: too few for the default accuracy rule (paired non-inferiority) to show anything,
# so the rehearsal keeps the recovery rule with the small-eval-set stderr rule. kubeflow-multi-user asks
# for a recovery no candidate reaches: keep-the-base, where the base is packaged, deployed and verified
# like any champion (and the console's first lines say why).
ACCURACY = {
    "kfp-standalone": 'accuracy_thresholds={"rule": "recovery", "min_recovery": 0.99, "stderr_k": 2}',
    "kubeflow-multi-user": 'accuracy_thresholds={"rule": "recovery", "min_recovery": 1.5}',
}
KEEPS_THE_BASE = "kubeflow-multi-user"


@pytest.fixture(scope="module")
def rehearsals(tiny_model: Path) -> Iterator[dict[str, tuple[int, str, Path]]]:
    """Both layouts rehearsed at once, as ``shipyard run --local --runner container --layout L``:
    each run's exit status, console and work dir. The images are built first (once); the second
    run starts when the first one's services are up (each takes free ports of its own)."""
    require_tool(shutil.which("podman") is not None and shutil.which("mmdebstrap") is not None,
                 "bash .ci/podman-setup")
    require_tool(shutil.which("kubectl") is not None, "kubectl with kustomize")
    import subprocess
    import sys
    import time

    from shipyard.run.container import compile_with_images

    works = {layout: private_dir("shipyard-rehearsal-") for layout in LAYOUTS}
    compile_with_images("optimize-and-deploy", works[LAYOUTS[0]] / "images-compiled", build=True)
    params = [f"model_uri={tiny_model}", "num_calibration_samples=8", "max_seq_length=64", f"eval_config={EVAL}",
              f"benchmark_config={BENCH}", f"slo={SLO}", "registered_model_name=tiny-llama",
              f"deploy_config={DEPLOY}"]
    procs: dict[str, subprocess.Popen[str]] = {}
    consoles = {layout: work / "console.txt" for layout, work in works.items()}
    started = time.perf_counter()
    try:
        for layout in LAYOUTS:
            cmd = [sys.executable, "-m", "shipyard.cli.main", "run", "--local", "--runner", "container", "--no-build",
                   "--layout", layout, "--work-dir", str(works[layout]),
                   *[arg for param in [*params, ACCURACY[layout]] for arg in ("--param", param)]]
            with open(consoles[layout], "w") as console:
                procs[layout] = subprocess.Popen(cmd, stdout=console, stderr=subprocess.STDOUT, text=True,
                                                 env=dict(os.environ, PYTHONUNBUFFERED="1"))
            deadline = time.monotonic() + 300
            while (procs[layout].poll() is None and time.monotonic() < deadline
                   and "in containers; kfp.local's log" not in consoles[layout].read_text()):
                time.sleep(1)
        codes = {layout: proc.wait(timeout=1800) for layout, proc in procs.items()}
        print(f"rehearsals of {', '.join(LAYOUTS)}, side by side: {time.perf_counter() - started:.0f} s")
        yield {layout: (codes[layout], consoles[layout].read_text(), works[layout]) for layout in LAYOUTS}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for work in works.values():
            shutil.rmtree(work, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
def test_rehearsal_runs_the_whole_pipeline_in_containers(
        layout: str, rehearsals: dict[str, tuple[int, str, Path]]) -> None:
    """Each namespace layout: its overlay's RBAC enforced for its pipeline identity, every service
    reached by its cluster name, the pipeline's namespace the layout's serving namespace."""
    code, console, work = rehearsals[layout]
    print(console)  # shown when an assertion below fails
    chosen = cluster_layout(layout)
    on_disk = json.loads((work / "run-summary.json").read_text())
    # as quiet as the local run (the rest is in kfp-local.log), and the same answer fields
    run_lines = console.split("\nrehearsal (containers, podman):\n")[0].splitlines()
    assert len(run_lines) < 120 and not [line for line in run_lines
                                         if "executor_input" in line or "Executing task" in line]
    assert "Executing task" in (work / "kfp-local.log").read_text()
    steps = [(s["task"], s["status"], s["error"]) for s in on_disk["steps"]]
    assert code == 0 and on_disk["status"] == "SUCCESS", (steps, on_disk["rehearsal"]["problems"])
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
    # the evidence travels with the model: the package step signed it in its container with the key
    # from the Secret shipyard-attestation, the registry holds it (the referrers tag: distribution 2.x
    # has no referrers API), and the deploy step verified it with shipyard-attestation-trust's key
    # and, with an ECDSA key (new local pairs are P-256), the model files' signature (model-signing) beside them
    stored = rehearsal["attestations"]["manifests"]
    key = load_private_key(attestation_secret_values()["signing-key.pem"].encode(), "signing-key.pem")
    files_signed = not file_signing_problem(key)
    assert len(stored) == 5 + files_signed and {m["artifactType"] for m in stored} == {"application/vnd.in-toto+json"}
    assert len({m["predicateType"] for m in stored}) == 5 + files_signed, stored
    assert (MODEL_SIGNATURE_TYPE in {m["predicateType"] for m in stored}) == files_signed, stored
    assert rehearsal["deploy_attestation"]["checked"] is True and rehearsal["deploy_attestation"]["passed"] is True
    assert rehearsal["mlflow_runs"]
    # the layout: its identity, its namespaces, the services by their cluster names
    pods, serving = chosen["pipeline_namespace"], chosen["serving_namespace"]
    identity = f"system:serviceaccount:{pods}:{chosen['service_account']}"
    assert rehearsal["layout"]["identity"] == identity
    assert rehearsal["applied_object"]["namespace"] == serving == on_disk["parameters"]["namespace"]
    names = rehearsal["cluster_names"]
    mlflow_host = f"mlflow.{pods}.svc.cluster.local"
    assert names["mlflow"].startswith(f"http://{mlflow_host}:") and names["kubernetes"].startswith(
        "http://kubernetes.default.svc:") and names["s3"].startswith("http://minio.minio.svc:")
    service_host = f"{rehearsal['applied_object']['name']}.{serving}.svc.cluster.local"
    assert set(rehearsal["hosts"]) == {mlflow_host, "kubernetes.default.svc", "minio.minio.svc", service_host}
    # KServe's part: a vLLM container served the pushed modelcar behind the status URL, and the deploy
    # step verified it there (golden outputs, accuracy slice, SLO smoke) before the alias moved
    assert rehearsal["applied_object"]["url"].startswith(f"http://{service_host}:")
    assert [s["ref"] for s in rehearsal["serving"]] == [ref.removeprefix("oci://")]
    verification = rehearsal["verification"]
    assert verification["outcome"] == "passed", verification
    ran = {c["name"]: c for c in verification["checks"] if c.get("compared") is not False}
    assert ran["golden outputs (exact-match rate)"]["passed"] is True
    assert [n for n in ran if n.startswith("accuracy ")] and [n for n in ran if n.startswith("SLO smoke ")], \
        [(c["name"], c.get("note")) for c in verification["checks"]]
    assert all(c["passed"] for c in ran.values()), ran
    printed = console  # what `shipyard run --runner container` printed
    assert f"verification through http://{service_host}:" in printed and ": passed" in printed
    assert "    golden outputs (exact-match rate): pass" in printed
    assert "SLO smoke error rate: pass  measured 0.0 (threshold <= 0)" in printed and " vs None" not in printed
    log = (work / "kfp-local.log").read_text()
    # the pre-flight ran as in a pod: MLflow's API by its in-cluster Host, the identity's permissions
    assert f"pre-flight: PASS mlflow api: experiments/search as Host {names['mlflow'].removeprefix('http://')}" in log
    preflight = [line for line in log.splitlines() if "pre-flight: " in line]
    print("\n".join(preflight))
    # SelfSubjectAccessReviews as the pod's own identity, answered from the overlay's Role
    assert [line for line in preflight if "pre-flight: PASS deploy permissions: " in line
            and f"LLMInferenceServices in {serving}" in line], preflight
    ran = {s["task"].rsplit("/", 1)[-1] for s in on_disk["steps"] if s["status"] == "SUCCESS"}
    assert {"resolve-model", "compress", "package-champion", "deploy"} <= ran
    # every step ran in its image, as the image's user, and wrote its outputs there
    for task_dir in Path(on_disk["run_dir"]).rglob("executor_output.json"):
        assert task_dir.stat().st_uid == 1001


@pytest.mark.slow
def test_a_failing_gate_keeps_the_base_and_deploys_it(rehearsals: dict[str, tuple[int, str, Path]]) -> None:
    """Keep-the-base: the only compressed candidate fails its accuracy gate, so the base is the champion;
    it is packaged, applied and verified like any champion, and the console's first lines say why."""
    code, console, work = rehearsals[KEEPS_THE_BASE]
    print(console)  # shown when an assertion below fails
    on_disk = json.loads((work / "run-summary.json").read_text())
    assert code == 0 and on_disk["status"] == "SUCCESS", console
    (candidate,) = on_disk["gates"]["candidates"]
    assert candidate["recipe"] == "w8a8-int8" and candidate["passed"] is False
    assert candidate["accuracy"]["passed"] is False
    assert on_disk["champion"] == "base" and on_disk["promoted"] is True  # no production yet: the base is the first
    assert on_disk["gates"]["champion"]["passed"] is True
    select = next(s for s in on_disk["steps"] if s["task"].rsplit("/", 1)[-1] == "select-champion")
    decision = json.loads((Path(select["artifacts"]["decision"]) / "decision-record.json").read_text())
    assert decision["champion"] == "base" and decision["kept_base"] is True and decision["base"]["is_base"]
    assert decision["headline"].startswith("kept the base: w8a8-int8 ") and on_disk["headline"] == decision["headline"]
    assert "champion base" in Path(select["artifacts"]["report"]).read_text()
    lines = console.splitlines()
    first = lines.index(next(line for line in lines if line.startswith("shipyard: optimize-and-deploy SUCCESS")))
    assert lines[first + 2].startswith("kept the base: w8a8-int8 "), lines[first:first + 6]
    assert lines[first + 4].startswith("SLO applied: a load level meets the SLO when TTFT p99 <= 30000"), \
        lines[first:first + 6]
    assert not [line for line in lines if "condition was false" in line and not line.startswith("not run (")]


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


def test_a_layout_is_named_once_and_checked_before_any_build(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    from shipyard.cli.main import main

    assert main(["run", "--local", "--layout", "kfp-standalone", "--work-dir", str(tmp_path / "w")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--layout" in err[0] and "--runner container" in err[0], err
    with pytest.raises(ShipyardError, match="kfp-standalone, kubeflow-multi-user"):
        LayoutPlan.of("kubeflow-single-user")


def test_s3_answers_path_style_to_its_cluster_name() -> None:
    """moto reads the first label of ``minio.minio.svc`` as a bucket name unless told the name is an
    S3-compatible endpoint (MinIO answers path-style): the pin-model step failed with NoSuchBucket."""
    import requests

    with MotoS3() as s3:
        s3.make_bucket("shipyard-rehearsal")
        cluster = f"minio.minio.svc:{s3.port}"

        def list_bucket() -> int:
            return requests.get(f"{s3.endpoint}/shipyard-rehearsal", headers={"Host": cluster}, timeout=10).status_code

        assert list_bucket() == 404
        s3.also_named(f"http://{cluster}")
        assert list_bucket() == 200
    assert f"http://{cluster}" not in os.environ.get("MOTO_S3_CUSTOM_ENDPOINTS", "")


def test_a_port_a_stopped_server_left_in_time_wait_counts_as_free() -> None:
    """The second rehearsal found port 5000 'taken' by the first MLflow's closed connections."""
    import socket

    from shipyard.core.net import port_free

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    assert not port_free(port)  # listening
    conn.close()  # the server side closes first: its end of the connection waits in TIME_WAIT
    client.close()
    server.close()
    assert port_free(port)
