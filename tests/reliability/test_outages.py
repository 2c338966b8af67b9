"""Outages of the services a run talks to, with real servers on 127.0.0.1.

* MLflow killed mid-run: the steps keep their payloads in a second, the run's work goes on,
  the champion is not deployed unregistered (its registration request is kept), a deployment
  that became Ready keeps its ``production`` request, the exit handler keeps the run's final
  state, and ``shipyard track replay`` (after the server is back) leaves no run RUNNING, logs
  every step with its own times, registers the model version, sets the aliases, and changes
  nothing when run again.
* MLflow unreachable at the start: ``shipyard run --local`` ends with one line and exit status 3
  before anything is written; the pre-flight task fails the same way within seconds.
* The registry (Debian ``docker-registry``) killed mid-push: no tag, no manifest, and the rerun
  of the package step succeeds.

The step wrappers' tracking (:class:`StepRun`), the champion's registration and the exit
handler's close are driven directly, as the pipeline's tasks call them, so the suite stays
well under a minute of work beyond the servers' start-up.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import require_tool
from mlflow import MlflowClient

from shipyard.core.errors import UnreachableError
from shipyard.core.net import free_port
from shipyard.steps import register
from shipyard.testing.registry import LocalRegistry
from shipyard.testing.services import MlflowServer
from shipyard.tracking import outbox, pending, promotion
from shipyard.tracking import pipeline_runs as track
from shipyard.tracking.steprun import PENDING_KEY, StepRun, apply_pending

pytestmark = pytest.mark.slow

SHIPYARD = str(Path(sys.executable).with_name("shipyard"))
LOCAL = yaml.safe_load((Path(__file__).resolve().parents[2] / "pipelines" / "local-params.yaml").read_text())


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KFP_MLFLOW_CONFIG", "MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "SHIPYARD_MLFLOW_ATTEMPTS",
                 "SHIPYARD_MLFLOW_BACKOFF_S"):
        monkeypatch.delenv(name, raising=False)


def _selection(folder: Path) -> Path:
    folder.mkdir(parents=True)
    record = {"recipe": "w8a8-int8", "size_bytes": 163_000_000,
              "accuracy": {"worst_recovery": 0.98, "rows": [
                  {"task": "arc_easy", "metric": "acc,none", "candidate": 0.61, "higher_is_better": True}]}}
    (folder / "selection.json").write_text(json.dumps({
        "objective": "size", "winner": "w8a8-int8", "decisions": {"w8a8-int8": "smallest that passed"},
        "candidates": [record]}))
    return folder


def _step(name: str, candidate: str, url: str, kfp_run_id: str, report: Path) -> tuple[StepRun, float]:
    run = StepRun(name, candidate, tracking_uri=url, experiment="outage", kfp_run_id=kfp_run_id,
                  params={"recipe": candidate, "seed": 0})
    run.log(metrics={"seconds": 1.5, f"{name}.figure": 0.25}, tags={"shipyard.test": "outage"},
            artifacts={"report.md": str(report)})
    started = time.monotonic()
    run.finish()
    return run, time.monotonic() - started


def _kill(server: MlflowServer) -> None:
    assert server.proc is not None
    os.killpg(server.proc.pid, signal.SIGKILL)  # a crash, not a clean shutdown
    server.proc.wait(timeout=30)


def _replay(work: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SHIPYARD, "track", "replay", str(work)], capture_output=True, text=True, timeout=120,
                          check=False)


def _state(client: MlflowClient, exp_id: str, model: str) -> dict[str, Any]:
    """Everything a replay could duplicate: runs (status, params, metric histories), versions, aliases."""
    runs = client.search_runs([exp_id], max_results=1000)
    return {
        "runs": sorted((r.info.run_id, r.info.status, r.data.tags.get("shipyard.step", "pipeline"),
                        json.dumps(r.data.params, sort_keys=True),
                        json.dumps({k: len(client.get_metric_history(r.info.run_id, k)) for k in r.data.metrics},
                                   sort_keys=True)) for r in runs),
        "versions": sorted((mv.version, mv.source) for mv in client.search_model_versions(f"name = '{model}'")),
        "aliases": dict(client.get_registered_model(model).aliases),
    }


def test_mlflow_killed_mid_run_is_kept_then_replayed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("SHIPYARD_WORK_DIR", str(work))
    report = work / "report.md"
    report.write_text("# report\n")
    kfp_run_id = f"kfp-{uuid.uuid4().hex[:10]}"
    model = f"outage-{uuid.uuid4().hex[:6]}"
    source = "oci://127.0.0.1:5000/team/outage@sha256:" + "c" * 64
    server = MlflowServer(tmp_path / "mlflow").__enter__()
    try:
        url = server.url
        started = track.start_tracking(url, "outage", "optimize-and-deploy", kfp_run_id, json.dumps({"a": "1"}), "")
        parent = started["parent_run_id"]
        compress, _ = _step("compress", "w8a8-int8", url, kfp_run_id, report)
        assert compress.run_id and compress.error is None
        deployed = f"deployed-{uuid.uuid4().hex[:6]}"  # a version registered before the outage
        assert track.register_model(url, deployed, source, parent, "")["version"] == "1"

        _kill(server)
        # Each later step keeps its payload at once: one quick probe, no retries, no MLflow import.
        evaluate, seconds = _step("evaluate", "w8a8-int8", url, kfp_run_id, report)
        assert evaluate.run_id is None and "cannot reach the tracking server" in (evaluate.error or "")
        assert seconds < 3, f"a step spent {seconds:.1f} s on a server seen down"
        benchmark, seconds = _step("benchmark", "w8a8-int8", url, kfp_run_id, report)
        assert benchmark.payload() is not None and seconds < 3
        # A step that could not log in its own image hands its payload on; it stays kept.
        handed = StepRun("evaluate", "base", tracking_uri=url, experiment="outage", kfp_run_id=kfp_run_id)
        handed.log(metrics={"arc_easy/acc": 0.63})
        handed.data.update(ended_ms=int(time.time() * 1000), status="FINISHED")
        t0 = time.monotonic()
        assert apply_pending({PENDING_KEY: dict(handed.data)}) == []
        assert time.monotonic() - t0 < 3
        # The champion is not deployed unregistered: the gate fails closed, the request is kept.
        t0 = time.monotonic()
        out = register.register_champion(url, "outage", kfp_run_id, model, source, "sha256:" + "c" * 64,
                                         str(_selection(tmp_path / "selection")), "hf://org/tiny", 0.0,
                                         str(tmp_path / "decision.md"))
        assert time.monotonic() - t0 < 3
        assert out["passed"] is False and out["version"] == "" and "registration deferred" in out["reason"]
        assert out["pending"]["source_uri"] == source and out["pending"]["alias"] == "candidate"
        assert "shipyard track replay" in (tmp_path / "decision.md").read_text()
        # what the wrapper sets on the gate report and logs: the verdict, failed closed
        assert out["metadata"]["passed"] is False and out["metadata"]["uri"] == source and out["metadata"]["version"] == ""
        assert out["log"]["metrics"] == {"gate.passed": 0.0} and out["log"]["tags"]["shipyard.gate.reason"] == out["reason"]
        assert out["log"]["artifacts"] == {"champion-gate.md": str(tmp_path / "decision.md")}
        # A deployment that became Ready during the outage stands; its 'production' alias is kept.
        t0 = time.monotonic()
        promoted = promotion.promote_production(url, "outage", kfp_run_id, deployed, "1", "w8a8-int8",
                                               json.dumps({"size_bytes": 163e6}), attestation_json=json.dumps(
                                                   {"checked": False, "overridden": True,
                                                    "why": "overridden: deploy_config.attestation.require is false"}))
        assert promoted["aliases"] == {} and promoted["pending"]["version"] == "1" and time.monotonic() - t0 < 3
        # The exit handler keeps the run's final state instead of failing after its retries.
        t0 = time.monotonic()
        assert track.close_pipeline_run(url, "outage", kfp_run_id, "SUCCEEDED") == "PENDING"
        assert time.monotonic() - t0 < 3
        kept = sorted(p.name for p in (work / outbox.PENDING_DIR).iterdir())
        assert len(kept) == 6, kept
        kinds = sorted(json.loads((work / outbox.PENDING_DIR / n).read_text())["kind"] for n in kept)
        assert kinds == ["close", "promote", "register", "step", "step", "step"]

        # End of the local run with the server still down: the console and run-summary.json say
        # what is pending and the exact replay command.
        (work / "run-summary.json").write_text(json.dumps({"status": "SUCCESS", "mlflow_run": parent}))
        note = pending.after_local_run(work)
        assert len(note["pending"]) == 6 and note["replay"] == f"shipyard track replay {work.resolve()}"
        assert json.loads((work / "run-summary.json").read_text())["tracking_pending"]["replay"] == note["replay"]

        replay = _replay(work)
        assert replay.returncode == 3 and "still does not answer" in replay.stderr
        assert len(replay.stderr.strip().splitlines()) == 1

        # The server comes back on the same address with the same store.
        restarted = MlflowServer(tmp_path / "mlflow")
        restarted.port, restarted.url = server.port, server.url
        server = restarted.__enter__()
        kept_evaluate = json.loads(next((work / outbox.PENDING_DIR).glob("step-evaluate-w8a8-int8*")).read_text())
        replay = _replay(work)
        assert replay.returncode == 0, replay.stderr
        lines = replay.stdout.strip().splitlines()
        assert len(lines) == 6, replay.stdout
        assert any(line.startswith(f"registered {model} version 1") for line in lines)
        assert any(line == f"closed pipeline run {parent} FINISHED" for line in lines)
        assert not (work / outbox.PENDING_DIR).exists()

        client = MlflowClient(url)
        exp_id = client.get_run(parent).info.experiment_id
        runs = client.search_runs([exp_id])
        assert [r.info.run_id for r in runs if r.info.status == "RUNNING"] == []
        assert client.get_run(parent).info.status == "FINISHED"
        steps = {(r.data.tags.get("shipyard.step"), r.data.tags.get("shipyard.candidate")): r for r in runs
                 if r.data.tags.get("shipyard.kind") == "step"}
        assert set(steps) == {("compress", "w8a8-int8"), ("evaluate", "w8a8-int8"), ("benchmark", "w8a8-int8"),
                              ("evaluate", "base")}
        ev = steps[("evaluate", "w8a8-int8")]
        assert ev.data.metrics["evaluate.figure"] == 0.25 and ev.data.params["seed"] == "0"
        assert ev.data.tags["mlflow.parentRunId"] == parent and ev.info.status == "FINISHED"
        assert ev.info.end_time == kept_evaluate["ended_ms"]  # the step's real end, not the replay's
        assert {a.path for a in client.list_artifacts(ev.info.run_id)} == {"report.md"}
        assert steps[("evaluate", "base")].data.metrics["arc_easy/acc"] == 0.63
        mv = client.get_model_version(model, "1")
        assert mv.source == source and mv.run_id == parent and mv.tags["oci_digest"] == "sha256:" + "c" * 64
        assert mv.tags["shipyard.gate.passed"] == "false" and mv.tags["shipyard.metric.arc_easy/acc"] == "0.61"
        assert client.get_registered_model(model).aliases == {"candidate": "1"}
        assert client.get_run(parent).data.tags["shipyard.registered_version"] == "1"
        assert client.get_registered_model(deployed).aliases == {"candidate": "1", "production": "1"}
        assert client.get_run(parent).data.tags["shipyard.production_version"] == "1"
        assert client.get_run(parent).data.metrics["champion.size_bytes"] == 163e6

        # A second replay, and the same step payload applied again, change nothing.
        before = _state(client, exp_id, model)
        again = _replay(work)
        assert again.returncode == 0 and again.stdout.strip() == "nothing pending", again.stdout + again.stderr
        assert pending.apply(kept_evaluate, work).endswith(ev.info.run_id)
        assert _state(client, exp_id, model) == before
    finally:
        server.__exit__(None, None, None)


def test_mlflow_unreachable_at_start_is_one_line_exit_3(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    work = tmp_path / "run"
    started = time.monotonic()
    proc = subprocess.run([SHIPYARD, "run", "--local", "--work-dir", str(work), "--param", f"tracking_uri={dead}"],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    seconds = time.monotonic() - started
    assert proc.returncode == 3, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("shipyard: error: tracking_uri: the MLflow server") and dead in lines[0]
    assert "(fix: start the MLflow server" in lines[0]
    assert not work.exists() and list(tmp_path.iterdir()) == []
    assert seconds < 30, seconds
    # The pipeline's first task fails the same way within seconds (a cluster run).
    from shipyard.steps.preflight import preflight_step

    t0 = time.monotonic()
    with pytest.raises(UnreachableError, match="tracking_uri: the MLflow server") as err:
        preflight_step("optimize-and-deploy", LOCAL, dead, "shipyard", "kfp-run-x")
    assert time.monotonic() - t0 < 10 and "\n" not in str(err.value) and err.value.exit_code == 3


def test_registry_killed_mid_push(tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_tool(bool(shutil.which("docker-registry")) and os.path.isfile("/usr/bin/busybox"),
                 "apt-get install -y docker-registry busybox-static")
    monkeypatch.setenv("SHIPYARD_REGISTRY_RETRIES", "2")
    monkeypatch.setenv("SHIPYARD_REGISTRY_BACKOFF", "0.05")
    from shipyard.oci.client import RegistryClient
    from shipyard.steps.package import package_model

    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    with open(model / "extra-weights.bin", "wb") as f:  # big enough that the push takes a while
        f.write(os.urandom(96 * 1024 * 1024))
    root = tmp_path / "registry"
    reg = LocalRegistry(root=root).start()
    uploads = root / "storage" / "docker" / "registry" / "v2" / "repositories" / "team" / "killed" / "_uploads"
    outcome: dict[str, Any] = {}

    def push() -> None:
        try:
            outcome["result"] = package_model(str(model), str(tmp_path / "out"), registry=reg.address,
                                              repository="team/killed", tag="v1")
        except Exception as err:  # noqa: BLE001 - the test inspects it
            outcome["error"] = err

    worker = threading.Thread(target=push)
    worker.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not uploads.exists() and worker.is_alive():
        time.sleep(0.02)
    assert uploads.exists(), f"the push never started uploading: {outcome}"
    assert reg.proc is not None
    reg.proc.kill()  # mid-push
    reg.proc.wait()
    worker.join(timeout=120)
    assert "error" in outcome, f"the push did not fail: {outcome}"
    assert "\n" not in str(outcome["error"]) and not (tmp_path / "out").exists()

    again = LocalRegistry(root=root)
    again.port, again.address = reg.port, reg.address
    again.start()
    try:
        client = RegistryClient(again.address, "team/killed")
        assert client.tags() == []
        with pytest.raises(Exception, match="has no manifest"):
            client.get_manifest("v1")
        result = package_model(str(model), str(tmp_path / "out"), registry=again.address, repository="team/killed",
                               tag="v1")
        assert client.tags() == ["v1"]
        assert result["uri"].endswith("@" + result["digest"])
        assert client.get_manifest("v1")[0]
    finally:
        again.stop()
