"""Interrupts leave nothing half-done: SIGTERM (a cancelled KFP run) and Ctrl-C during a deploy's
apply or Ready wait roll back exactly as a timeout does. The real ``shipyard deploy`` runs as a
subprocess against the Kubernetes API double over a kubeconfig."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import default_sigint

from shipyard.serving.kserve.apply import LAST_GOOD
from shipyard.serving.kserve.config import parse_config
from shipyard.serving.kserve.render import render
from shipyard.testing.k8s_double import K8sDouble, condition, ready_after

OLD = "oci://registry.example/models/qwen@sha256:" + "0" * 64
NEW = "oci://registry.example/models/qwen@sha256:" + "1" * 64
KEY = ("llminferenceservices", "serving", "llm")


def never_ready(obj: dict, n: int) -> dict:
    return {"conditions": [condition("PresetsCombined", "True"),
                           condition("WorkloadsReady", "Unknown", "Progressing", "pulling the image"),
                           condition("Ready", "Unknown", "Progressing", "pulling the image")]}


def _deploy(double: K8sDouble, tmp_path: Path) -> subprocess.Popen[str]:
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"namespace": "serving", "apply": {"poll_s": 0.05, "wait_timeout_s": 600}}))
    cmd = [sys.executable, "-m", "shipyard.cli.main", "deploy", "--name", "llm", "--model-uri", NEW,
           "--prefill-replicas", "1", "--params-file", str(params),
           "--kubeconfig", str(double.kubeconfig(tmp_path / "kc")), "--out-file", str(tmp_path / "applied.yaml")]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))


def _interrupt_during_wait(proc: subprocess.Popen[str], sig: int) -> tuple[int, str, str]:
    seen = []
    deadline = time.monotonic() + 60
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if "waiting up to" in line:
            break
        assert time.monotonic() < deadline, "the deploy never reached the Ready wait"
    time.sleep(0.3)  # a few polls into the wait
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, "".join(seen) + out, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_interrupted_first_deploy_is_deleted(tmp_path: Path, sig: int) -> None:
    with K8sDouble() as double:
        double.script("llm", never_ready)
        code, out, err = _interrupt_during_wait(_deploy(double, tmp_path), sig)
        assert double.get(*KEY) is None, "a never-Ready first deployment must not stay applied"
    assert code != 0
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("shipyard: error:"), err
    assert f"interrupted by {signal.Signals(sig).name} during the Ready wait" in lines[0]
    assert "deleted the new service" in lines[0]


def test_sigterm_during_the_wait_restores_the_last_good_spec(tmp_path: Path) -> None:
    with K8sDouble() as double:
        old = render(parse_config({"name": "llm", "namespace": "serving", "model_uri": OLD, "prefill_replicas": 1}))[0]
        double.put(old, status=ready_after(0)(old, 0))  # a running service
        double.script("llm", never_ready)
        code, out, err = _interrupt_during_wait(_deploy(double, tmp_path), signal.SIGTERM)
        stored = double.get(*KEY)
    assert code != 0 and "Traceback" not in err
    assert stored is not None and stored["spec"]["model"]["uri"] == OLD, "rolled back to the running model"
    assert json.loads(stored["metadata"]["annotations"][LAST_GOOD])["spec"]["model"]["uri"] == OLD
    assert "interrupted by SIGTERM during the Ready wait; rolled back to the previous spec" in err


def test_a_mangled_last_good_annotation_still_rolls_back(tmp_path: Path) -> None:
    """Someone edited the annotation by hand: the rollback uses the running spec instead of crashing."""
    with K8sDouble() as double:
        old = render(parse_config({"name": "llm", "namespace": "serving", "model_uri": OLD, "prefill_replicas": 1}))[0]
        old["metadata"].setdefault("annotations", {})[LAST_GOOD] = json.dumps({"spec": {"edited": True}})
        double.put(old, status=ready_after(0)(old, 0))
        double.script("llm", never_ready)
        code, _, err = _interrupt_during_wait(_deploy(double, tmp_path), signal.SIGTERM)
        stored = double.get(*KEY)
    assert code != 0 and "Traceback" not in err, err
    assert stored["spec"]["model"]["uri"] == OLD


STEP = """
import json
import sys
from shipyard.steps.deploy import promotion_allowed, run_deploy
from shipyard.core.errors import ShipyardError
from shipyard.core.interrupts import sigterm_as_interrupt
from shipyard.tracking.promotion import promote_production

sigterm_as_interrupt()
url, experiment, run, name, kubeconfig, record, work = sys.argv[1:]
try:  # the deploy step: deploy, verify once Ready, then (only when allowed) move production
    result = run_deploy(deploy_config={"prefill_replicas": 1, "verify": {"timeout_s": 600},
                                       "apply": {"poll_s": 0.05, "wait_timeout_s": 60}},
                        manifest_path=work + "/manifest.yaml", dry_run=False, kubeconfig=kubeconfig, candidate=record,
                        verify_dir=work + "/verify", name="llm", namespace="serving",
                        model_uri="oci://registry.example/models/qwen@sha256:" + "1" * 64)
    if promotion_allowed(result, False)[0]:
        promote_production(url, experiment, run, name, "2", "w4a16",
                           attestation_json=json.dumps(result["attestation"]))
except ShipyardError as err:
    print(f"shipyard: error: {err}", file=sys.stderr)
    sys.exit(1)
"""


def test_an_interrupt_during_the_verification_keeps_the_previous_version_and_production(tmp_path: Path) -> None:
    """The new service is Ready but its URL hangs (a service that accepts and never answers); SIGTERM
    arrives while the verification waits: the previous spec is re-applied and ``production`` stays."""
    import socket
    import uuid

    from mlflow import MlflowClient
    from mlflow_server import shared_server

    from shipyard.evaluation.golden import SCHEMA
    from shipyard.tracking import pipeline_runs as track
    from shipyard.tracking.promotion import promote_production

    url = shared_server().url
    experiment, run, name = f"intr-{uuid.uuid4().hex[:6]}", f"run-{uuid.uuid4().hex[:6]}", f"m-{uuid.uuid4().hex[:6]}"
    parent = track.start_tracking(url, experiment, "optimize-and-deploy", run, "", "")["parent_run_id"]
    track.register_model(url, name, OLD, parent, "")
    promote_production(url, experiment, run, name, "1", "base",  # the previous version, deployed before
                       attestation_json=json.dumps({"checked": False, "overridden": True, "why": "overridden: set-up"}))
    track.register_model(url, name, NEW, parent, "")
    record = tmp_path / "candidate.json"
    record.write_text(json.dumps({"schema": "shipyard.candidate/v1", "recipe": "w4a16", "passed": True, "reason": "passed both gates", "golden": {
        "schema": SCHEMA, "max_tokens": 4, "answers": [{"prompt": "Question: x", "text": " y", "tokens": [" y"]}]}}))
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)
    try:
        with K8sDouble() as double:
            old = render(parse_config({"name": "llm", "namespace": "serving", "model_uri": OLD, "prefill_replicas": 1}))[0]
            double.put(old, status=ready_after(0)(old, 0))  # the running version
            double.script("llm", ready_after(1, url=f"http://127.0.0.1:{hung.getsockname()[1]}"))
            proc = subprocess.Popen([sys.executable, "-c", STEP, url, experiment, run, name,
                                     str(double.kubeconfig(tmp_path / "kc", namespace="serving")), str(record),
                                     str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=dict(os.environ, PYTHONUNBUFFERED="1"))
            assert proc.stdout is not None
            deadline = time.monotonic() + 60
            for line in proc.stdout:
                if "verifying it before anything moves" in line:
                    break
                assert time.monotonic() < deadline, "the deploy never reached the verification"
            time.sleep(0.5)  # inside GET /v1/models, which never answers
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
            stored = double.get(*KEY)
    finally:
        hung.close()
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert "interrupted by SIGTERM during the verification; rolled back to the previous spec" in err
    assert stored["spec"]["model"]["uri"] == OLD
    assert json.loads(stored["metadata"]["annotations"][LAST_GOOD])["spec"]["model"]["uri"] == OLD
    assert MlflowClient(url).get_model_version_by_alias(name, "production").version == "1"
