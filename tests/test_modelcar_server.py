"""The API double's KServe stand-in (:mod:`shipyard.testing.modelcar_server`): an applied
LLMInferenceService is served by a vLLM container running from the modelcar pushed to the test
registry, and the deploy step verifies it through its status URL (issue 22, "the container
rehearsal runs the verification against a vLLM container serving the pushed modelcar").

The golden outputs come from the tiny model's own vLLM server started as the measure step starts
it (its planner flags and CPU KV cache) and recorded with the function the benchmark step uses.
The deploys go through the deploy step (:func:`run_deploy`: render with the rehearsal's
``pd-nixl`` config, server-side apply to the double, the wait, the verification, the rollback).

Slow tests start vLLM (one local server, up to three containers) and podman: run them under the
heavy lock. The cpu vllm image of the current code must be in podman's store
(``shipyard images build --flavor cpu --runtime vllm``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shipyard.core.errors import ShipyardError
from shipyard.testing.modelcar_server import (
    LABEL,
    MOUNT,
    ModelcarServers,
    loopback_url,
    model_of,
    object_vllm_args,
    podman_ref,
)

USER, PASSWORD = "rehearsal", "modelcar-secret"
DIGEST = "sha256:" + "a" * 64
TIMINGS: dict[str, Any] = {}
CONFIG = {"preset": "pd-nixl", "gpu_memory_gib": 80, "verify": {"checks": ["models", "golden"]},
          "apply": {"wait_timeout_s": 600, "poll_s": 1, "false_grace_s": 0, "api_timeout_s": 30}}


# -- what the object asks for (no podman) ----------------------------------------------------------
def test_the_model_and_its_served_name_come_from_the_object() -> None:
    obj = {"metadata": {"name": "llm"}, "spec": {"model": {"uri": f"oci+native://r.io/team/m@{DIGEST}"}}}
    assert model_of(obj) == (f"oci://r.io/team/m@{DIGEST}", "llm")  # KServe's default: the service's name
    obj["spec"]["model"]["name"] = "served"
    assert model_of(obj)[1] == "served"
    assert podman_ref(f"oci://127.0.0.1:5000/team/m@{DIGEST}") == f"127.0.0.1:5000/team/m@{DIGEST}"


@pytest.mark.parametrize("uri", ["oci://r.io/team/m:v1", f"oci:///tmp/layout@{DIGEST}", "hf://org/model"])
def test_only_a_digest_pinned_registry_modelcar_is_served(uri: str) -> None:
    with pytest.raises(ShipyardError) as err:
        podman_ref(uri)
    assert err.value.field == "spec.model.uri" and "\n" not in str(err.value)


def test_the_objects_vllm_flags_keep_what_changes_answers_and_drop_gpu_and_pd_flags() -> None:
    args = ("--max-model-len 2048 --gpu-memory-utilization 0.9 --dtype=float32 --enforce-eager "
            "--kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_consumer\"}' --seed 7")
    obj = {"spec": {"template": {"containers": [{"name": "main", "env": [
        {"name": "VLLM_ADDITIONAL_ARGS", "value": args}]}]}}}
    kept, dropped = object_vllm_args(obj)
    assert kept == ["--max-model-len", "2048", "--dtype=float32", "--seed", "7"]
    assert dropped == ["--gpu-memory-utilization", "--enforce-eager", "--kv-transfer-config"]
    assert object_vllm_args({"spec": {}}) == ([], [])


def test_the_default_status_url_is_the_server_on_loopback() -> None:
    assert loopback_url("llm", "serving", 8123) == "http://127.0.0.1:8123"


def test_the_status_replays_kserve_v020s_sequence_for_a_new_deployment() -> None:
    """First read: MainWorkloadReady=False Progressing (no Deployment conditions yet); then
    MinimumReplicasUnavailable (rolled up into WorkloadsReady and Ready) for at least min_start_s,
    even once the server answers; then Ready with the URL. No container is started here; the
    rehearsal's own hold is longer than the deploy's 120 s grace."""
    from conftest import require_tool

    from shipyard.run.container import REHEARSAL_START_S
    from shipyard.testing.modelcar_server import ModelcarServer

    require_tool(bool(shutil.which("podman")), "podman (bash .ci/podman-setup)")
    assert REHEARSAL_START_S > 120
    with ModelcarServers("127.0.0.1:5000", USER, PASSWORD, "vllm:cpu", min_start_s=0.5) as servers:
        server = ModelcarServer(servers, "serving", "llm", f"oci://127.0.0.1:5000/m@{DIGEST}", "llm", [], 1)

        def main_and_ready() -> tuple[tuple[str, str], tuple[str, str], str | None]:
            status = server.status()
            conds = {c["type"]: c for c in status["conditions"]}
            return ((conds["MainWorkloadReady"]["status"], conds["MainWorkloadReady"].get("reason", "")),
                    (conds["Ready"]["status"], conds["Ready"].get("reason", "")), status.get("url"))

        assert main_and_ready() == (("False", "Progressing"), ("False", "Progressing"), None)
        assert main_and_ready()[:2] == (("False", "MinimumReplicasUnavailable"),) * 2
        server.phase = "ready"  # vLLM answers before min_start_s: still reported as starting
        assert main_and_ready()[:2] == (("False", "MinimumReplicasUnavailable"),) * 2
        time.sleep(0.6)
        assert main_and_ready() == (("True", ""), ("True", ""), server.url)
        server.phase, server.reason, server.message = "failed", "ServerExited", "vLLM exited with status 1"
        assert main_and_ready()[:2] == (("False", "ServerExited"),) * 2


# -- real servers ----------------------------------------------------------------------------------
def _require_podman_and_image() -> str:
    """The cpu vllm image of this code, else the newest cpu vllm image in podman's store (the image
    tag hashes every code file, so any edit renames it; vLLM itself changes only with the lock)."""
    from conftest import require_tool

    from shipyard.runtimes.runtime import runtime_image

    require_tool(bool(shutil.which("podman")), "podman (bash .ci/podman-setup)")
    require_tool(bool(shutil.which("docker-registry")) and os.path.isfile("/usr/bin/busybox"),
                 "apt-get install -y docker-registry busybox-static")
    image = runtime_image("vllm", "cpu")
    if subprocess.run(["podman", "image", "exists", image], check=False).returncode == 0:
        return image
    repo = image.rsplit(":", 1)[0]
    listed = subprocess.run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}}", "--filter",
                             f"reference={repo}"], capture_output=True, text=True, check=False).stdout.split()
    newest = next((i for i in listed if i.endswith("-cpu")), "")
    require_tool(bool(newest), f"the cpu vllm image {image}: shipyard images build --flavor cpu --runtime vllm")
    print(f"\n{image} is not built; serving with the newest cpu vllm image, {newest}")
    return newest


@pytest.fixture(scope="module")
def pushed(tiny_model: Path, tiny_other_model: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The tiny model and another one (the tiny base, seed 1) packaged by the package step and
    pushed to a registry with htpasswd auth; the tiny model's golden outputs as the measure step
    records them, in a candidate record."""
    image = _require_podman_and_image()
    from shipyard.benchmarking.guidellm import parse_benchmark_config, plan_for_server
    from shipyard.evaluation.golden import record_golden
    from shipyard.serving.vllm_server import VLLMServer
    from shipyard.steps.package import package_model
    from shipyard.testing.registry import LocalRegistry

    tmp = tmp_path_factory.mktemp("modelcar-server")
    other = tiny_other_model
    with LocalRegistry(users={USER: PASSWORD}) as reg, pytest.MonkeyPatch.context() as env:
        env.setenv("SHIPYARD_REGISTRY_USERNAME", USER)
        env.setenv("SHIPYARD_REGISTRY_PASSWORD", PASSWORD)
        candidate = package_model(str(tiny_model), str(tmp / "car"), registry=reg.address, repository="team/tiny")
        wrong = package_model(str(other), str(tmp / "other-car"), registry=reg.address, repository="team/other")
        # the measure step's server: the benchmark config's planner flags and CPU KV cache
        cfg = parse_benchmark_config("")
        _, args, _ = plan_for_server(str(tiny_model), cfg)
        started = time.monotonic()
        with VLLMServer(tiny_model, extra_args=args, env={"VLLM_CPU_KVCACHE_SPACE": str(int(cfg["cpu_kv_cache_gib"]))},
                        progress=False) as server:
            TIMINGS["local_vllm_start_s"] = server.startup_seconds
            golden = record_golden(server.base_url, server.served_model_name)
        TIMINGS["measure_server_and_golden_s"] = round(time.monotonic() - started, 1)
        (tmp / "record").mkdir()
        (tmp / "record" / "candidate.json").write_text(json.dumps({
            "schema": "shipyard.candidate/v1", "recipe": "tiny", "passed": True, "reason": "passed both gates",
            "golden": golden}))
        yield {"registry": reg.address, "image": image, "candidate": candidate["uri"], "other": wrong["uri"],
               "record": str(tmp / "record"), "model_dir": str(tiny_model), "golden": golden}
    print(f"\ntest_modelcar_server timings: {TIMINGS}")


@pytest.fixture(scope="module")
def cluster(pushed: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The API double whose LLMInferenceServices are served from their modelcars."""
    from shipyard.testing.k8s_double import K8sDouble

    with K8sDouble() as double, ModelcarServers(pushed["registry"], USER, PASSWORD, pushed["image"]) as servers:
        servers.watch(double, interval_s=0.5)
        for name in ("llm", "llm-other", "llm-broken"):
            double.script(name, servers.script)
        kubeconfig = double.kubeconfig(tmp_path_factory.mktemp("kube") / "config", namespace="serving")
        yield {"double": double, "servers": servers, "kubeconfig": str(kubeconfig)}
        TIMINGS["servers"] = servers.timings()
        print("\n" + "\n".join(servers.log))
    assert not _containers(), "close() left modelcar containers behind"


def _containers() -> list[str]:
    out = subprocess.run(["podman", "ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}"],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def _deploy(pushed: dict[str, Any], cluster: dict[str, Any], tmp_path: Path, name: str, uri: str) -> dict[str, Any]:
    from shipyard.steps.deploy import run_deploy

    return run_deploy(deploy_config=CONFIG, manifest_path=str(tmp_path / "manifest.yaml"), dry_run=False,
                      model_dir=pushed["model_dir"], kubeconfig=cluster["kubeconfig"], candidate=pushed["record"],
                      verify_dir=str(tmp_path / "verify"), name=name, namespace="serving", model_uri=uri)


@pytest.mark.slow
def test_the_pushed_modelcar_is_served_and_passes_golden_outputs(pushed: dict[str, Any], cluster: dict[str, Any],
                                                                 tmp_path: Path) -> None:
    started = time.monotonic()
    result = _deploy(pushed, cluster, tmp_path, "llm", pushed["candidate"])
    TIMINGS["deploy_and_verify_candidate_s"] = round(time.monotonic() - started, 1)
    server = cluster["servers"].servers[("serving", "llm")]
    assert result["status"] == "Ready" and result["url"] == server.url
    checks = result["verification"]
    assert checks["ran"] and checks["passed"], checks
    assert checks["golden"] == {"matched": 8, "total": 8, "match_rate": 1.0}
    # the container reads the pushed image itself (an image volume), not a local folder
    mounts = json.loads(subprocess.run(["podman", "container", "inspect", "--format", "{{json .Mounts}}",
                                        server.container], capture_output=True, text=True, check=True).stdout)
    assert {m["Destination"] for m in mounts} == {MOUNT}, mounts
    assert [m["Source"] for m in mounts if m["Type"] == "image"] == [pushed["candidate"].removeprefix("oci://")]
    # the object's P/D flag (NIXL) and GPU sizing are left out; what it serves is named as deployed
    assert not any("kv-transfer-config" in a for a in server.command)
    assert server.command[server.command.index("--served-model-name") + 1] == "llm"
    report = json.loads((tmp_path / "verify" / "verification.json").read_text())
    assert report["passed"] and report["golden"]["match_rate"] == 1.0


@pytest.mark.slow
def test_a_modelcar_of_another_model_fails_golden_outputs_and_its_server_goes_with_the_rollback(
        pushed: dict[str, Any], cluster: dict[str, Any], tmp_path: Path) -> None:
    servers, key = cluster["servers"], ("serving", "llm-other")
    started = time.monotonic()
    with pytest.raises(ShipyardError) as err:
        _deploy(pushed, cluster, tmp_path, "llm-other", pushed["other"])
    TIMINGS["deploy_and_verify_other_s"] = round(time.monotonic() - started, 1)
    assert err.value.field == "verification" and "golden outputs (exact-match rate)" in err.value.problem
    report = json.loads((tmp_path / "verify" / "verification.json").read_text())
    assert report["failed_checks"] == ["golden outputs (exact-match rate)"]
    assert report["golden"]["match_rate"] < 0.75 and report["golden"]["mismatches"]
    # a new service that failed is deleted; its server stops with it
    assert cluster["double"].get("llminferenceservices", *key) is None
    deadline = time.monotonic() + 60
    while key in servers.servers and time.monotonic() < deadline:
        time.sleep(0.5)
    assert key not in servers.servers
    retired = next(s for s in servers.retired if (s.namespace, s.name) == key)
    assert retired.ref == pushed["other"].removeprefix("oci://")
    while retired.container in _containers() and time.monotonic() < deadline:
        time.sleep(1)
    assert retired.container not in _containers()
    assert ("serving", "llm") in servers.servers  # the other service keeps serving


@pytest.mark.slow
def test_a_served_model_whose_server_dies_turns_not_ready(cluster: dict[str, Any]) -> None:
    """After Ready, a dead server (here killed) turns the service's Ready False, with how it ended."""
    servers, double, key = cluster["servers"], cluster["double"], ("serving", "llm")
    server = servers.servers[key]
    assert servers.script(double.get("llminferenceservices", *key), 5).get("url") == server.url
    subprocess.run(["podman", "kill", "--signal", "KILL", server.container], check=True, capture_output=True)
    deadline = time.monotonic() + 60
    while server.phase == "ready" and time.monotonic() < deadline:
        time.sleep(0.5)
    status = servers.script(double.get("llminferenceservices", *key), 6)
    ready = {c["type"]: c for c in status["conditions"]}["WorkloadsReady"]
    assert (ready["status"], ready["reason"]) == ("False", "ServerExited"), ready
    assert "vLLM exited with status 137" in ready["message"] and "url" not in status


@pytest.mark.slow
def test_a_server_that_dies_reports_workloads_not_ready_with_its_log(pushed: dict[str, Any], tmp_path: Path) -> None:
    from shipyard.testing.k8s_double import K8sDouble

    with K8sDouble() as double, ModelcarServers(pushed["registry"], USER, PASSWORD, pushed["image"],
                                                vllm_args=["--no-such-flag"]) as servers:
        double.script("llm-broken", servers.script)
        cluster = {"kubeconfig": str(double.kubeconfig(tmp_path / "kubeconfig", namespace="serving"))}
        started = time.monotonic()
        with pytest.raises(ShipyardError) as err:
            _deploy(pushed, cluster, tmp_path, "llm-broken", pushed["candidate"])
        TIMINGS["dead_server_reported_s"] = round(time.monotonic() - started, 1)
    assert err.value.field == "LLMInferenceService serving/llm-broken"
    # the first condition to fail is reported: the main workload's (its roll-ups say the same)
    assert "MainWorkloadReady=False ServerExited: vLLM exited with status" in err.value.problem
    assert "--no-such-flag" in err.value.problem  # vLLM's own words, from the container's log
    assert "\n" not in str(err.value)


def _settled(servers: ModelcarServers, obj: dict[str, Any]) -> dict[str, Any]:
    """The status once it no longer reports a start-up in progress (two minutes at most)."""
    deadline = time.monotonic() + 120
    status = servers.script(obj, 0)
    while (status["conditions"][-1].get("reason") in ("Progressing", "MinimumReplicasUnavailable")
           and time.monotonic() < deadline):
        time.sleep(0.5)
        status = servers.script(obj, 1)
    return status


@pytest.mark.slow
def test_a_pull_the_registry_refuses_is_reported_and_a_new_model_uri_replaces_the_server(
        pushed: dict[str, Any]) -> None:
    obj = {"metadata": {"name": "llm", "namespace": "serving"},
           "spec": {"model": {"uri": pushed["other"], "name": "llm"}}}
    with ModelcarServers(pushed["registry"], USER, "wrong-password", pushed["image"]) as servers:
        status = _settled(servers, obj)
        first = servers.servers[("serving", "llm")]
        obj["spec"]["model"]["uri"] = pushed["candidate"]  # a new version (or a rollback) of the same service
        replaced = servers.script(obj, 0)
        assert servers.servers[("serving", "llm")] is not first and servers.retired == [first]
        assert servers.servers[("serving", "llm")].ref == pushed["candidate"].removeprefix("oci://")
        # a new Deployment: KServe reports it as starting, as it did the first one
        assert {c["type"]: c for c in replaced["conditions"]}["Ready"]["reason"] == "Progressing", replaced
    ready = {c["type"]: c for c in status["conditions"]}["Ready"]
    assert ready["status"] == "False" and ready["reason"] == "ModelcarPullFailed", ready
    assert "unauthorized" in ready["message"].lower() and "wrong-password" not in ready["message"]
    assert "\n" not in ready["message"] and "url" not in status
