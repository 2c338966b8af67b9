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
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
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
