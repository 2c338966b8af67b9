"""Realistic result dicts for the report tests: the shapes the evaluate and benchmark steps write
(``summary.json``, ``results.json``), with figures like a local SmolLM2-135M run (8 requests per
level, so every percentile warns), and helpers that write them where the gates read them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def level(name: str, nominal: float, rps: float, tok_s: float, ttft: tuple[float, float, float],
          itl: tuple[float, float, float], ok: int = 8, errored: int = 0) -> dict[str, Any]:
    """One load level as ``parse_guidellm_report`` writes it (p50/p90/p99 and per-request samples)."""
    total = ok + errored
    step = (ttft[2] - ttft[0]) / max(1, ok - 1)
    return {
        "name": name, "strategy": name.partition("@")[0], "nominal_load": nominal, "requests_per_s": rps,
        "output_tokens_per_s": tok_s, "total_tokens_per_s": tok_s * 3, "concurrency_mean": nominal,
        "successful": ok, "errored": errored, "incomplete": 0, "total": total,
        "error_rate": round(errored / total, 4) if total else 1.0,
        "ttft_ms": {"mean": ttft[1], "p50": ttft[0], "p90": ttft[1], "p99": ttft[2]},
        "itl_ms": {"mean": itl[1], "p50": itl[0], "p90": itl[1], "p99": itl[2]},
        "tpot_ms": {"mean": itl[1], "p50": itl[0], "p90": itl[1], "p99": itl[2]},
        "latency_s": {"mean": 1.2, "p50": 1.1, "p90": 1.4, "p99": 1.5},
        "prompt_tokens_mean": 32.0, "output_tokens_mean": 16.0, "duration_s": 14.0,
        # per request as guidellm records them: TTFT, ITL, end-to-end latency, output (16) and prompt (32) tokens
        "samples": {"ttft_ms": [round(ttft[0] + i * step, 2) for i in range(ok)], "itl_ms": [itl[0]] * ok,
                    "latency_s": [round(16 * nominal / tok_s * (0.9 + 0.2 * i / max(1, ok - 1)), 4) for i in range(ok)],
                    "output_tokens": [16] * ok, "prompt_tokens": [32] * ok},
        "first_errors": [],
    }


BENCH_CONFIG: dict[str, Any] = {
    "profile": "concurrent", "loads": [1, 2], "prompt_tokens": 32, "output_tokens": 16, "max_requests": 8,
    "max_seconds": 60, "warmup_requests": 1, "request_timeout": 120, "server_warmup_requests": 2,
    "vllm_args": ["--max-model-len", "2048"], "max_concurrency": None, "sweep_size": 5, "rate_type": None,
}


def bench_results(model: str, levels: list[dict[str, Any]], kv_tokens: int = 74_000) -> dict[str, Any]:
    """A benchmark step's ``results.json``."""
    return {
        "schema": "shipyard.benchmark/v1", "model_name": model, "model_dir": f"/models/{model}",
        "config": BENCH_CONFIG, "comparable": {"profile": "concurrent", "loads": [1, 2], "prompt_tokens": 32},
        "vllm_args": ["--max-model-len", "2048"], "device": "cpu", "levels": levels,
        "memory": {"vllm": {"kv_cache_tokens": kv_tokens, "max_concurrency": 36.1, "kv_cache_gib": 4.0,
                            "checkpoint_gib": 0.25},
                   "planner": {"kv_cache_tokens": kv_tokens, "max_concurrency": 36, "weights_bytes": 269_060_552}},
        "planner_error": None, "server_startup_seconds": 21.4, "benchmark_seconds": 48.2, "wall_seconds": 97.8,
        "guidellm_version": "0.8.1",
    }


BASE_BENCH = bench_results("SmolLM2-135M-Instruct", [
    level("concurrent@1", 1, 0.5769, 9.23, (50.2, 55.0, 57.8), (60.1, 62.0, 64.5)),
    level("concurrent@2", 2, 0.98, 15.9, (80.4, 95.0, 101.2), (95.0, 99.0, 104.9)),
])
CAND_BENCH = bench_results("w8a8-int8", [
    level("concurrent@1", 1, 0.3623, 10.71, (61.0, 190.0, 312.0), (55.2, 58.0, 59.9)),  # TTFT p99 x5.4
    level("concurrent@2", 2, 1.11, 18.7, (85.0, 99.0, 110.5), (90.0, 94.0, 97.3)),       # tok/s x1.18
], kv_tokens=98_000)


def score(value: float, stderr: float | None, hib: bool = True) -> dict[str, Any]:
    """One lm-eval score as the evaluate step keeps it."""
    return {"value": value, "stderr": stderr, "higher_is_better": hib, "metric": "m", "filter": "none"}


BASE_SCORES = {
    "shipyard_arithmetic_mc": {"acc,none": score(0.4688, 0.0896), "acc_norm,none": score(0.50, 0.0898)},
    "shipyard_capitals_mc": {"acc,none": score(0.80, 0.07)},
    "shipyard_prose_ppl": {"word_perplexity,none": score(20.0, None, False)},
}
CAND_SCORES = {
    "shipyard_arithmetic_mc": {"acc,none": score(0.4340, 0.0890),  # recovery 0.926: passes by the stderr rule
                               "acc_norm,none": score(0.50, 0.0898)},
    "shipyard_capitals_mc": {"acc,none": score(0.80, 0.07)},
    "shipyard_prose_ppl": {"word_perplexity,none": score(20.1, None, False)},
}


def eval_summary(scores: dict[str, Any], sha: str) -> dict[str, Any]:
    """An evaluate step's ``summary.json``."""
    return {"format": "shipyard.eval/v1", "config": {"tasks": sorted(scores), "limit": 32}, "config_hash": "c0ffee" * 4,
            "model_identity": {"sha256": sha * 32, "files": 3, "bytes": 10}, "backend": "hf", "scores": scores}


def write_json(folder: Path, name: str, data: dict[str, Any]) -> str:
    """``data`` as ``folder/name``; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(data))
    return str(folder)


# the recovery rule with the small-eval-set stderr rule: the fixtures' summaries have no per-sample logs,
# which the default rule (paired non-inferiority) needs for accuracy metrics
THRESHOLDS = json.dumps({"rule": "recovery", "min_recovery": 0.99, "stderr_k": 2})
SLO = json.dumps({"ttft_p99_ms": 500, "itl_p99_ms": 200, "min_output_tokens_per_s": 5, "max_error_rate": 0.0})


def judged(tmp: Path, recipe: str = "w8a8-int8", cand_bench: dict[str, Any] | None = None,
           cand_scores: dict[str, Any] | None = None, slo: str = SLO, thresholds: str = THRESHOLDS) -> dict[str, Any]:
    """Run the real candidate gates on the fixtures; returns judge_candidate's result (per-sample
    logs written beforehand into ``tmp/base-eval/samples`` and ``tmp/<recipe>-eval/samples`` are used)."""
    from shipyard.steps.judge import judge_candidate

    return judge_candidate(
        recipe=recipe,
        base_eval=write_json(tmp / "base-eval", "summary.json", eval_summary(BASE_SCORES, "ab")),
        candidate_eval=write_json(tmp / f"{recipe}-eval", "summary.json", eval_summary(cand_scores or CAND_SCORES, "cd")),
        base_bench=write_json(tmp / "base-bench", "results.json", BASE_BENCH),
        candidate_bench=write_json(tmp / f"{recipe}-bench", "results.json", cand_bench or CAND_BENCH),
        thresholds=thresholds, slo=slo, out_dir=str(tmp / f"{recipe}-gates"),
        compress_figures={"size_before_bytes": 269_060_552, "size_after_bytes": 163_226_688, "compression_ratio": 1.648},
        model_uri=f"/models/{recipe}",
    )
