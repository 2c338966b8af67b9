"""The deploy step runs in the vllm runtime (issue 22: the verification's accuracy slice and SLO smoke
need lm-eval and guidellm, which only that runtime has; a container cannot reach another venv)."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
from pathlib import Path

from shipyard.components.deploy.component import deploy
from shipyard.runtimes.runtime import runtime_image, venv_python
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
