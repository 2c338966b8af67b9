"""The deploy step runs in the vllm runtime (issue 22: the verification's accuracy slice and SLO smoke
need lm-eval and guidellm, which only that runtime has; a container cannot reach another venv)."""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from shipyard.components.deploy.component import deploy
from shipyard.core.errors import ShipyardError
from shipyard.runtimes.runtime import DEADLINE_GRACE_S, run_in_runtime, runtime_image, venv_python
from shipyard.steps import verify
from shipyard.steps.deploy import deploy_task, promote_verified


def test_the_deploy_step_runs_in_the_vllm_image_and_calls_only_the_vllm_runtime() -> None:
    assert deploy.component_spec.implementation.container.image == runtime_image("vllm")
    wrapper = inspect.getsource(deploy.python_func)
    assert "call_step(" not in wrapper and "deploy_task(" in wrapper  # the wrapper hands the step to deploy_task
    source = inspect.getsource(deploy_task) + inspect.getsource(promote_verified)
    assert 'call_step("base"' not in source and source.count('call_step("vllm"') == 2


def test_in_the_vllm_image_the_accuracy_slice_and_slo_smoke_run_in_process(tmp_path: Path) -> None:
    """As in the vllm image: SHIPYARD_RUNTIME=vllm and no other venvs. The verification finds its runtime
    (nothing "not checked" for a missing venv) and run_in_runtime("vllm", ...) stays in this process."""
    code = ("import json, os\n"
            "from shipyard.steps.verify import _no_vllm_runtime\n"
            "from shipyard.runtimes.runtime import run_in_runtime\n"
            "import lm_eval, guidellm, mlflow, kubernetes\n"
            "print(json.dumps({'missing': _no_vllm_runtime(), 'pid': os.getpid(),"
            " 'child': run_in_runtime('vllm', os.getpid)}))\n")
    env = {**os.environ, "SHIPYARD_RUNTIME": "vllm", "SHIPYARD_VENVS": str(tmp_path / "none")}
    out = subprocess.run([str(venv_python("vllm")), "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=300)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["missing"] == "" and got["child"] == got["pid"]


def test_a_runtime_call_past_its_deadline_is_stopped_with_its_children(tmp_path: Path) -> None:
    """``run_in_runtime(..., deadline_s=)``: lm-eval or guidellm hanging inside the verification's
    runtime call held the deploy step without end. A real child that starts a ``sleep`` of its own
    is stopped at the deadline, the sleep with it (its process group), and the error is one line
    naming the setting."""
    pid_file = tmp_path / "sleep.pid"
    started = time.monotonic()
    with pytest.raises(ShipyardError) as info:
        run_in_runtime("base", subprocess.call, deadline_s=2, deadline_setting="verify.run_timeout_s",
                       args=["sh", "-c", f"echo $$ > {pid_file}; exec sleep 120"])
    seconds = time.monotonic() - started
    line = str(info.value)
    assert info.value.field == "verify.run_timeout_s" and "call did not finish within 2 s" in line, line
    assert "raise verify.run_timeout_s" in line and "\n" not in line, line
    assert seconds < 2 + DEADLINE_GRACE_S + 5, seconds
    sleeper = int(pid_file.read_text())
    try:
        os.kill(sleeper, 0)
        state = Path(f"/proc/{sleeper}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (ProcessLookupError, FileNotFoundError):
        state = "gone"
    if state != "gone":
        os.kill(sleeper, signal.SIGKILL)
    assert state in ("gone", "Z"), f"the child's sleep outlived the deadline ({state})"


def test_a_runtime_call_within_its_deadline_returns_its_result() -> None:
    assert run_in_runtime("base", subprocess.call, deadline_s=60, args=["true"]) == 0
    assert run_in_runtime("base", os.getpid, deadline_s=60) != os.getpid()  # a child, even in its own runtime


def test_the_verification_runs_lm_eval_and_guidellm_within_run_timeout_s() -> None:
    source = inspect.getsource(verify._accuracy_checks) + inspect.getsource(verify._slo_checks)
    assert source.count('deadline_s=cfg["run_timeout_s"], deadline_setting=RUN_TIMEOUT') == 2
    assert verify.RUN_TIMEOUT == "verify.run_timeout_s"
