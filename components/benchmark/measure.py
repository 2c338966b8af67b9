"""One vLLM server per model: evaluate (lm-eval) and benchmark (guidellm) against the same server.

With the vLLM eval backend, evaluating and benchmarking a model used to start two servers, and
so load the model twice (two GPU pods in a cluster). :func:`measure_step` starts one server
with the benchmark's settings (memory planner flags, KV cache), registers it as the shared
server, and runs :func:`~shipyard.components.evaluate.evaluate.evaluate_step` (backend
``openai``) and :func:`~shipyard.components.benchmark.benchmark.benchmark_step` against it;
both find it through :func:`shared_server`. Outputs are the same as the two steps'. Runs in
the ``vllm`` runtime.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shipyard.vllm_server import VLLMServer

_SHARED: list[VLLMServer] = []


def shared_server() -> VLLMServer | None:
    """The server the measure step is sharing, if any (evaluate and benchmark use it instead of their own)."""
    return _SHARED[-1] if _SHARED else None


@contextlib.contextmanager
def sharing(server: VLLMServer) -> Iterator[VLLMServer]:
    """Make ``server`` the shared one while the block runs."""
    _SHARED.append(server)
    try:
        yield server
    finally:
        _SHARED.remove(server)


def measure_step(
    model_dir: str,
    eval_config: str,
    benchmark_config: str,
    eval_out: str,
    table_path: str,
    bench_out: str,
    summary_path: str,
) -> dict[str, Any]:
    """Serve ``model_dir`` once; evaluate and benchmark it; returns ``{"eval", "bench", "server"}``
    (the two steps' results and the shared server's start-up seconds)."""
    from shipyard.components.benchmark.benchmark import (
        benchmark_step,
        parse_benchmark_config,
        plan_for_server,
    )
    from shipyard.components.evaluate.evaluate import evaluate_step
    from shipyard.vllm_server import has_gpu

    cfg = parse_benchmark_config(benchmark_config)
    _, vllm_args, _ = plan_for_server(model_dir, cfg)
    env = {} if has_gpu() else {"VLLM_CPU_KVCACHE_SPACE": str(int(cfg["cpu_kv_cache_gib"]))}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="shipyard-measure-") as tmp:
        server = VLLMServer(model_dir, served_model_name=Path(model_dir).name or "model", extra_args=vllm_args,
                            port=cfg.get("port"), startup_timeout=float(cfg["startup_timeout"]),
                            log_path=Path(tmp) / "vllm.log", env=env)
        with server, sharing(server):
            evaluated = evaluate_step(model_dir, eval_config, eval_out, table_path, backend="openai")
            benched = benchmark_step(model_dir, benchmark_config, bench_out, summary_path)
            startup = server.startup_seconds
    return {"eval": evaluated, "bench": benched,
            "server": {"startup_seconds": startup, "wall_seconds": round(time.monotonic() - started, 2)}}
