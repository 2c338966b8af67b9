"""Candidate-vs-base ratios with their noise (shipyard.gates.noise), repeats, the regression budget
and where the base's figures come from, on level dicts shaped as parse_guidellm_report writes them."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest
import report_fixtures as fx

from shipyard.benchmarking.guidellm import build_scenario, parse_benchmark_config, parse_guidellm_report
from shipyard.core.numbers import percentile
from shipyard.core.report import MIN_SAMPLES
from shipyard.gates.noise import WITHIN_NOISE, comparison, expanded_tail, ratio_text, t_quantile
from shipyard.gates.slo import compare, parse_slo, run_slo_gate


def measured(name: str, conc: int, seed: int, n: int, ttft_ms: float, itl_ms: float, latency_s: float,
             spread: float = 0.15, repeats: int = 1) -> dict[str, Any]:
    """A level measured from ``n`` requests (per repeat) drawn around the given figures, its summary
    figures computed from them as guidellm does (tok/s by Little's law, 16 output tokens a request)."""
    rng = random.Random(seed)
    runs = []
    for r in range(repeats):
        shift = (0.9, 1.3)[r] if repeats > 1 else 1.0  # repeats that disagree: the first 10% faster, the second 30% slower
        draw = [(ttft_ms * rng.uniform(1 - spread, 1 + spread) * shift, itl_ms * rng.uniform(1 - spread, 1 + spread),
                 latency_s * rng.uniform(1 - spread, 1 + spread) * shift) for _ in range(n)]
        tok_s = conc * 16 / (sum(d[2] for d in draw) / n)
        lv = fx.level(name, conc, tok_s / 16, tok_s, (50.0, 60.0, 70.0), (60.0, 62.0, 64.0), ok=n)
        for key, col in (("ttft_ms", 0), ("itl_ms", 1)):
            xs = sorted(d[col] for d in draw)
            lv[key] = {"mean": sum(xs) / n, "p50": percentile(xs, 0.5), "p90": percentile(xs, 0.9),
                       "p99": percentile(xs, 0.99)}
        lv["samples"] = {"ttft_ms": [d[0] for d in draw], "itl_ms": [d[1] for d in draw],
                         "latency_s": [d[2] for d in draw], "output_tokens": [16] * n}
        runs.append(lv)
    if repeats == 1:
        return runs[0]
    from shipyard.benchmarking.guidellm import merge_repeats

    (merged,) = merge_repeats(runs)
    return merged


def pair_of(base: dict[str, Any], cand: dict[str, Any]) -> dict[str, Any]:
    return compare(fx.bench_results("base", [base]), fx.bench_results("cand", [cand]), parse_slo(""))


def rows_by_figure(decision: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["figure"]: r for r in decision["comparison"]["rows"]}


# --------------------------------------------------------------------------- intervals
def test_the_same_weights_measured_twice_differ_by_no_more_than_noise() -> None:
    """Two benchmarks of one model (two draws from one machine), 12 requests a level: the throughput interval
    covers 1 and the words say so; the p99s of 12 requests (about the slowest one) get no interval but say
    why, though the point alone would have claimed a 3% slowdown."""
    base = measured("concurrent@1", 1, seed=1, n=12, ttft_ms=1030, itl_ms=85, latency_s=1.63)
    cand = measured("concurrent@1", 1, seed=2, n=12, ttft_ms=1030, itl_ms=85, latency_s=1.63)
    rows = rows_by_figure(pair_of(base, cand))
    assert set(rows) == {"output_tokens_per_s", "ttft_p99", "itl_p99"}
    tps = rows["output_tokens_per_s"]
    assert tps["low"] < 1 < tps["high"] and tps["words"] == WITHIN_NOISE, tps
    assert tps["low"] <= tps["ratio"] <= tps["high"]  # centred on the figure the reports show
    for key in ("ttft_p99", "itl_p99"):
        row = rows[key]
        assert row["low"] is None and row["unresolved"] and row["words"] == "no interval", row
        assert row["note"] == f"too few requests for a p99 interval: 12 < {MIN_SAMPLES}"
        assert f"(too few requests for a p99 interval: 12 < {MIN_SAMPLES})" in ratio_text(row)
    assert rows["ttft_p99"]["ratio"] > 1.03  # the point alone would have claimed a 3% slowdown


def test_a_p99_interval_needs_enough_requests_on_both_sides() -> None:
    """100 requests a side resolve a p99 (the interval covers 1 for the same weights); 100 against 99 does not."""
    base = measured("concurrent@1", 1, seed=21, n=100, ttft_ms=200, itl_ms=60, latency_s=1.2)
    cand = measured("concurrent@1", 1, seed=22, n=100, ttft_ms=200, itl_ms=60, latency_s=1.2)
    rows = rows_by_figure(pair_of(base, cand))
    assert all(r["low"] < 1 < r["high"] and not r["unresolved"] for r in rows.values()), rows
    short = measured("concurrent@1", 1, seed=22, n=MIN_SAMPLES - 1, ttft_ms=200, itl_ms=60, latency_s=1.2)
    rows = rows_by_figure(pair_of(base, short))
    assert rows["ttft_p99"]["unresolved"] and rows["itl_p99"]["unresolved"]
    assert rows["output_tokens_per_s"]["low"] is not None


def test_student_t_quantiles_and_the_expanded_percentile_levels() -> None:
    """The pure-Python t quantile against the printed tables, and the percentile levels it gives."""
    for df, t975 in ((1, 12.706), (4, 2.776), (11, 2.201), (30, 2.042), (99, 1.984)):
        assert t_quantile(0.975, df) == pytest.approx(t975, abs=5e-4)
    assert t_quantile(0.995, 11) == pytest.approx(3.106, abs=5e-4)
    assert expanded_tail(12) == pytest.approx(0.0108, abs=1e-4)  # Phi(-sqrt(12/11) x 2.201)
    assert expanded_tail(100) == pytest.approx(0.0231, abs=1e-4)
    assert 0.0249 < expanded_tail(100_000) < 0.025  # large samples: the plain 2.5% and 97.5%


def test_the_small_sample_correction_widens_the_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """Same-weights pairs of 12 requests: the expanded interval contains the plain percentile interval of the
    same resamples at both ends, and leaves out 1 for fewer pairs (remove the correction and this fails)."""
    from shipyard.gates import noise

    pairs = [(measured("concurrent@1", 1, seed=100 + 2 * i, n=12, ttft_ms=180, itl_ms=60, latency_s=1.0, spread=0.3),
              measured("concurrent@1", 1, seed=101 + 2 * i, n=12, ttft_ms=180, itl_ms=60, latency_s=1.0, spread=0.3))
             for i in range(30)]

    def intervals() -> list[tuple[float, float]]:
        out = []
        for base, cand in pairs:
            row = rows_by_figure(pair_of(base, cand))["output_tokens_per_s"]
            out.append((row["low"], row["high"]))
        return out

    expanded = intervals()
    monkeypatch.setattr(noise, "expanded_tail", lambda n, confidence=noise.CONFIDENCE: (1 - confidence) / 2)
    plain = intervals()
    assert all(e[0] <= p[0] and p[1] <= e[1] for e, p in zip(expanded, plain, strict=True))
    misses = [sum(not lo <= 1 <= hi for lo, hi in ivs) for ivs in (expanded, plain)]
    assert misses[0] < misses[1], misses


def test_a_real_slowdown_is_outside_the_noise_and_says_which_way() -> None:
    base = measured("concurrent@4", 4, seed=3, n=100, ttft_ms=200, itl_ms=60, latency_s=1.2)
    cand = measured("concurrent@4", 4, seed=4, n=100, ttft_ms=300, itl_ms=60, latency_s=1.6)
    rows = rows_by_figure(pair_of(base, cand))
    assert rows["output_tokens_per_s"]["high"] < 1 and rows["output_tokens_per_s"]["words"] == "slower"
    assert rows["ttft_p99"]["low"] > 1 and rows["ttft_p99"]["words"] == "higher latency"
    assert rows["itl_p99"]["words"] == WITHIN_NOISE


def test_the_spread_between_repeats_is_in_the_interval() -> None:
    """A candidate whose two repeats disagree (the machine was busier during one): the two-stage bootstrap
    covers 1; the same requests taken as one run (no repeat information) would have claimed a slowdown."""
    base = measured("concurrent@1", 1, seed=5, n=40, ttft_ms=100, itl_ms=60, latency_s=1.0, spread=0.05)
    cand = measured("concurrent@1", 1, seed=6, n=40, ttft_ms=100, itl_ms=60, latency_s=1.0, spread=0.05, repeats=2)
    assert [r["successful"] for r in cand["repeats"]] == [40, 40] and cand["successful"] == 80
    with_repeats = rows_by_figure(pair_of(base, cand))["output_tokens_per_s"]
    assert with_repeats["repeats"] == {"base": 1, "candidate": 2}
    assert with_repeats["words"] == WITHIN_NOISE and with_repeats["ratio"] < 0.97
    pooled = copy.deepcopy(cand)
    del pooled["repeats"], pooled["samples"]["repeat"]
    one_run = rows_by_figure(pair_of(base, pooled))["output_tokens_per_s"]
    assert one_run["words"] == "slower" and one_run["high"] < 1


def test_results_without_per_request_latency_get_no_throughput_interval_and_say_why() -> None:
    """A base measured before the benchmark kept request latency (an old cached result): TTFT and ITL still
    get their interval; output tok/s is judged by its point, and the row says why."""
    base = measured("concurrent@1", 1, seed=7, n=100, ttft_ms=100, itl_ms=60, latency_s=1.0)
    cand = measured("concurrent@1", 1, seed=8, n=100, ttft_ms=100, itl_ms=60, latency_s=1.0)
    for key in ("latency_s", "output_tokens"):
        del base["samples"][key]
    rows = rows_by_figure(pair_of(base, cand))
    assert rows["output_tokens_per_s"]["low"] is None and "no per-request latency" in rows["output_tokens_per_s"]["note"]
    assert rows["output_tokens_per_s"]["words"] == "no interval"
    assert rows["ttft_p99"]["low"] is not None


def test_the_interval_is_the_same_for_the_same_results() -> None:
    base = measured("concurrent@1", 1, seed=9, n=30, ttft_ms=100, itl_ms=60, latency_s=1.0)
    cand = measured("concurrent@1", 1, seed=10, n=30, ttft_ms=110, itl_ms=60, latency_s=1.1)
    pairs = pair_of(base, cand)["pairs"]
    assert comparison([base], [cand], pairs) == comparison([base], [cand], pairs)


# --------------------------------------------------------------------------- the regression budget
def _gate(tmp: Path, base: dict[str, Any], cand: dict[str, Any], slo: dict[str, Any],
          base_extra: dict[str, Any] | None = None) -> dict[str, Any]:
    b = fx.write_json(tmp / "b", "results.json", {**fx.bench_results("base", [base]), **(base_extra or {})})
    c = fx.write_json(tmp / "c", "results.json", fx.bench_results("cand", [cand]))
    return run_slo_gate(b, c, json.dumps(slo), str(tmp / "slo.html"), str(tmp / "slo.md"))


def test_no_budget_is_declared_by_default_and_the_rule_says_so(tmp_path: Path) -> None:
    base = measured("concurrent@1", 1, seed=1, n=12, ttft_ms=100, itl_ms=60, latency_s=1.0)
    out = _gate(tmp_path, base, base, {"ttft_p99_ms": 1000})
    assert parse_slo("")["max_latency_ratio"] is None and parse_slo("")["min_throughput_ratio"] is None
    assert out["rule"].endswith("regression budget against the base at matched load: none declared")
    md = (tmp_path / "slo.md").read_text()
    assert "none declared" in md and "Candidate / base with its noise" in md and "no difference within noise" in md


def test_a_budget_fails_only_when_the_interval_lies_beyond_it(tmp_path: Path) -> None:
    """max_latency_ratio 1.2: a TTFT p99 point over x1.2 whose interval (100 requests a side) reaches back
    passes "within noise"; the same over a p99 of 12 requests, which no interval resolves, fails as
    inconclusive and says what would decide it; a real x1.6 of 100 requests fails."""
    slo = {"ttft_p99_ms": 5000, "itl_p99_ms": 1000, "max_latency_ratio": 1.2}
    base = measured("concurrent@1", 1, seed=1, n=100, ttft_ms=1030, itl_ms=85, latency_s=1.63)
    noisy = measured("concurrent@1", 1, seed=4, n=100, ttft_ms=1030 * 1.2, itl_ms=85, latency_s=1.63)
    out = _gate(tmp_path / "noise", base, noisy, slo)
    row = next(r for r in out["comparison"]["rows"] if r["figure"] == "ttft_p99")
    assert row["ratio"] > 1.2 and row["low"] < 1.2 < row["high"], row  # the case this half is about
    assert out["passed"] is True
    assert "over the regression budget only within noise: TTFT p99 x" in out["reason"]
    assert "TTFT p99 and ITL p99 <= 1.2 x the base's at every level" in out["rule"]

    base = measured("concurrent@1", 1, seed=1, n=12, ttft_ms=1030, itl_ms=85, latency_s=1.63)
    noisy = measured("concurrent@1", 1, seed=14, n=12, ttft_ms=1030 * 1.2, itl_ms=85, latency_s=1.63)
    out = _gate(tmp_path / "few", base, noisy, slo)
    row = next(r for r in out["comparison"]["rows"] if r["figure"] == "ttft_p99")
    assert row["ratio"] > 1.2 and row["unresolved"] and row["low"] is None, row
    assert out["passed"] is False
    assert ("(too few requests for a p99 interval: 12 < 100) at concurrency 1 > budget 1.2, inconclusive (give "
            "benchmark_config max_requests >= 100 a level to judge a p99 budget)") in out["reason"], out["reason"]

    base = measured("concurrent@1", 1, seed=3, n=100, ttft_ms=200, itl_ms=60, latency_s=1.2)
    slow = measured("concurrent@1", 1, seed=4, n=100, ttft_ms=320, itl_ms=60, latency_s=1.2)
    out = _gate(tmp_path / "real", base, slow, slo)
    assert out["passed"] is False
    assert "higher latency > budget 1.2" in out["reason"]
    row = next(r for r in out["comparison"]["rows"] if r["figure"] == "ttft_p99")
    assert row["low"] > 1.2


def test_a_throughput_budget_fails_on_a_sure_loss(tmp_path: Path) -> None:
    base = measured("concurrent@4", 4, seed=3, n=100, ttft_ms=200, itl_ms=60, latency_s=1.2)
    slow = measured("concurrent@4", 4, seed=4, n=100, ttft_ms=200, itl_ms=60, latency_s=1.6)
    out = _gate(tmp_path, base, slow, {"ttft_p99_ms": 5000, "itl_p99_ms": 1000, "min_throughput_ratio": 0.9})
    assert out["passed"] is False and "output tok/s x0.7" in out["reason"] and "slower < budget 0.9" in out["reason"]


# --------------------------------------------------------------------------- where the base's figures come from
CACHED = {"cached": {"key": "d89b8fc8fbe1462fe0491f46dd67c053", "measured_at": "2026-12-02T02:42:10Z",
                     "age_seconds": 3 * 3600 + 60, "origin": "optimize-and-deploy-2026-12-02-02-37-52",
                     "hardware": {"cpu": "Intel(R) Xeon(R) Platinum 8488C", "cores": 2, "flags": ["avx512f"]}}}


def test_a_cached_base_says_when_and_where_it_was_measured(tmp_path: Path) -> None:
    base = measured("concurrent@1", 1, seed=1, n=12, ttft_ms=100, itl_ms=60, latency_s=1.0)
    out = _gate(tmp_path, base, base, {"ttft_p99_ms": 1000}, base_extra=CACHED)
    assert out["base_source"]["source"] == "cache" and out["base_source"]["hardware"]["cores"] == 2
    said = ("base figures from cache (measured 2026-12-02T02:42:10Z by optimize-and-deploy-2026-12-02-02-37-52, 3 h ago; "
            "not re-checked in this run)")
    assert out["base_source"]["text"] == said and out["reason"].endswith(said)
    assert f"**Base figures:** {said}" in (tmp_path / "slo.md").read_text()
    fresh = _gate(tmp_path / "fresh", base, base, {"ttft_p99_ms": 1000})
    assert fresh["base_source"] == {"source": "this run", "text": "base measured in this run"}
    assert "cache" not in fresh["reason"]


def test_the_decision_record_and_the_headline_say_the_base_came_from_the_cache(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from shipyard.steps.select import select_champion

    monkeypatch.setattr(fx, "BASE_BENCH", {**fx.BASE_BENCH, **CACHED})  # the base benchmark restored from the cache
    fx.judged(tmp_path)
    out = select_champion([str(tmp_path / "w8a8-int8-gates")], "throughput", str(tmp_path / "sel"),
                          str(tmp_path / "c.md"), str(tmp_path / "c.html"), base_eval=str(tmp_path / "base-eval"),
                          base_bench=str(tmp_path / "base-bench"), base_model_uri="/models/base", slo=fx.SLO)
    assert out["headline"].endswith("; base figures from cache (measured 2026-12-02T02:42:10Z by "
                                    "optimize-and-deploy-2026-12-02-02-37-52, 3 h ago; not re-checked in this run)")
    record = json.loads((tmp_path / "sel" / "decision-record.json").read_text())
    assert record["base_measured"]["source"] == "cache"
    assert record["base_measured"]["measured_at"] == "2026-12-02T02:42:10Z"
    assert record["base_measured"]["hardware"]["cpu"].startswith("Intel")
    cand = next(g for g in record["candidates"] if g["candidate"] == "w8a8-int8")
    assert cand["slo"]["base_source"]["source"] == "cache"
    assert record["statistics"]["performance_comparison"].startswith("candidate / base per load level")


# --------------------------------------------------------------------------- dominance at matched load
def test_a_throughput_gain_within_noise_buys_no_accuracy_loss() -> None:
    """A candidate 3% faster at the SLO, within noise, that loses accuracy is dominated by the base
    (before, the bare point made it 'faster' and so not dominated)."""
    from shipyard.gates.baseline import dominance
    from shipyard.gates.selection import objective_value

    def record(recipe: str, tok_s: float, loss: float, comp: dict[str, Any] | None) -> dict[str, Any]:
        return {"recipe": recipe, "is_base": recipe == "base", "passed": True,
                "levels": [{"name": "concurrent@1", "requests_per_s": 0.6, "output_tokens_per_s": tok_s}],
                "slo": {"metrics": {"highest_load_meeting_slo_rps": 0.6}, "comparison": comp},
                "accuracy": {"rows": [{"task": "t", "metric": "acc,none", "gated": True, "base": 0.5,
                                       "candidate": 0.5 - loss, "recovery": (0.5 - loss) / 0.5}]}}

    base_lv = measured("concurrent@1", 1, seed=1, n=12, ttft_ms=100, itl_ms=60, latency_s=1.0)
    cand_lv = measured("concurrent@1", 1, seed=2, n=12, ttft_ms=100, itl_ms=60, latency_s=0.97)
    decision = pair_of(base_lv, cand_lv)
    ratio = decision["pairs"][0]["output_tokens_per_s_ratio"]
    base = record("base", base_lv["output_tokens_per_s"], 0.0, None)
    cand = record("w8a8", cand_lv["output_tokens_per_s"], 0.05, decision["comparison"])
    assert ratio > 1 and rows_by_figure(decision)["output_tokens_per_s"]["words"] == WITHIN_NOISE
    said = dominance(base, cand, "throughput", objective_value)
    assert said is not None and said.startswith(f"dominated by the base: {ratio:.2f}x as fast at the SLO "
                                                f"({WITHIN_NOISE} [")
    assert dominance(base, {**cand, "slo": {**cand["slo"], "comparison": None}}, "throughput", objective_value) is None


# --------------------------------------------------------------------------- repeats in the benchmark
def _bench(streams: int, t0: float, ttfts: list[float]) -> dict[str, Any]:
    reqs = [{"request_start_time": t0 + i, "request_end_time": t0 + i + 0.9, "time_to_first_token_ms": t,
             "inter_token_latency_ms": 5.0, "request_latency": 0.9, "output_tokens": 8,
             "time_per_output_token_ms": 110.0} for i, t in enumerate(ttfts)]
    return {"start_time": t0, "end_time": t0 + len(ttfts), "duration": float(len(ttfts)),
            "config": {"strategy": {"type_": "concurrent", "streams": streams}},
            "metrics": {"request_totals": {"successful": len(ttfts), "errored": 0, "incomplete": 0},
                        "output_tokens_per_second": {"total": {"count": 1, "mean": 8.0 * streams}},
                        "time_to_first_token_ms": {"successful": {"count": len(ttfts), "mean": sum(ttfts) / len(ttfts),
                                                                  "percentiles": {"p99": max(ttfts)}}},
                        "request_concurrency": {"total": {"count": 1, "mean": float(streams)}}},
            "requests": {"successful": reqs, "errored": [], "incomplete": []}}


def test_repeats_run_every_level_again_interleaved_and_merge_into_one_level() -> None:
    cfg = parse_benchmark_config({"loads": [1, 4], "repeats": 2})
    scenario = build_scenario(cfg, target="http://127.0.0.1:9", model_name="m", tokenizer="/t", json_path="/x.json")
    assert scenario["benchmarks"] == [{"profile.streams": 1}, {"profile.streams": 4}] * 2
    assert "repeats" not in parse_benchmark_config({"loads": [1, 4]})  # the base cache's key is unchanged without it
    report = {"benchmarks": [_bench(1, 0.0, [10.0, 12.0]), _bench(4, 10.0, [30.0, 31.0]),
                             _bench(1, 20.0, [20.0, 22.0]), _bench(4, 30.0, [32.0, 33.0])]}
    one, four = parse_guidellm_report(report)
    assert (one["name"], four["name"]) == ("concurrent@1", "concurrent@4")
    assert one["successful"] == one["total"] == 4 and one["samples"]["ttft_ms"] == [10.0, 12.0, 20.0, 22.0]
    assert one["samples"]["repeat"] == [0, 0, 1, 1] and one["samples"]["latency_s"] == [0.9] * 4
    assert one["ttft_ms"]["p99"] == pytest.approx(percentile([10.0, 12.0, 20.0, 22.0], 0.99))
    assert [r["ttft_p99_ms"] is not None for r in one["repeats"]] == [True, True]
    assert four["output_tokens_per_s"] == 32.0 and four["duration_s"] == 4.0
    (single,) = parse_guidellm_report({"benchmarks": [_bench(1, 0.0, [10.0, 12.0])]})
    assert "repeats" not in single and "repeat" not in single["samples"]


def test_a_result_restored_from_the_base_cache_carries_where_it_was_measured(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The real cache: store a finished result, restore it; its record names the hardware it was measured on,
    and the SLO gate's provenance reads it."""
    from shipyard.benchmarking import cache
    from shipyard.gates.noise import provenance

    monkeypatch.setenv("SHIPYARD_CACHE", str(tmp_path / "cache"))
    results = fx.write_json(tmp_path / "measured", "results.json", fx.BASE_BENCH)
    hardware = {"cpu": "Intel(R) Xeon(R) Platinum 8488C", "cores": 2, "flags": ["avx512f"]}
    cache.store("k" * 32, {"hardware": hardware}, Path(results), "optimize-and-deploy-2026-12-02-02-37-52")
    restored = cache.restore(cache.lookup("k" * 32), tmp_path / "restored")  # type: ignore[arg-type]
    said = provenance(restored)
    assert said["source"] == "cache" and said["hardware"] == hardware
    assert said["origin"] == "optimize-and-deploy-2026-12-02-02-37-52" and said["age_seconds"] < 60
    assert said["text"].startswith("base figures from cache (measured ") and "0 min ago" in said["text"]


# --------------------------------------------------------------------------- re-checking a cached base
def test_a_cached_base_figure_this_machine_still_gives_holds() -> None:
    from shipyard.gates.noise import recheck

    cached = measured("concurrent@1", 1, seed=1, n=12, ttft_ms=100, itl_ms=60, latency_s=1.0)
    fresh = measured("concurrent@1", 1, seed=2, n=12, ttft_ms=100, itl_ms=60, latency_s=1.0)
    check = recheck(cached, fresh)
    assert check["held"] is True and check["low"] <= 1 <= check["high"], check
    assert check["requests"] == 12 and check["level"] == "concurrent@1"
    assert check["text"].startswith("re-checked with 12 requests at concurrency 1: output tok/s x")
    assert check["text"].endswith("(no difference within noise): the cached figure held")


def test_a_cached_base_figure_from_a_quieter_machine_does_not_hold() -> None:
    """The base cached at 1.0 s a request, the same base now at 1.6 s: comparing a candidate measured now with
    the cached figure would credit the machine's load to the candidate."""
    from shipyard.gates.noise import recheck

    cached = measured("concurrent@1", 1, seed=1, n=12, ttft_ms=100, itl_ms=60, latency_s=1.0)
    fresh = measured("concurrent@1", 1, seed=2, n=12, ttft_ms=100, itl_ms=60, latency_s=1.6)
    check = recheck(cached, fresh)
    assert check["held"] is False and check["high"] < 1, check
    assert check["text"].endswith("(slower): the cached figure did not hold")


def test_a_cached_level_without_per_request_samples_cannot_be_trusted() -> None:
    from shipyard.gates.noise import recheck

    cached = {k: v for k, v in measured("concurrent@1", 1, seed=1, n=12, ttft_ms=100, itl_ms=60,
                                        latency_s=1.0).items() if k != "samples"}
    fresh = measured("concurrent@1", 1, seed=2, n=12, ttft_ms=100, itl_ms=60, latency_s=1.0)
    check = recheck(cached, fresh)
    assert check["held"] is False and check["low"] is None
    assert "no per-request samples" in check["text"] and check["text"].endswith("did not hold")


def test_the_decision_record_says_how_a_cached_base_was_rechecked(tmp_path: Path) -> None:
    from shipyard.gates.noise import provenance, recheck

    base = measured("concurrent@1", 1, seed=1, n=12, ttft_ms=100, itl_ms=60, latency_s=1.0)
    check = recheck(base, measured("concurrent@1", 1, seed=2, n=12, ttft_ms=100, itl_ms=60, latency_s=1.0))
    rechecked = {"cached": {**CACHED["cached"], "recheck": check}}
    out = _gate(tmp_path, base, base, {"ttft_p99_ms": 1000}, base_extra=rechecked)
    assert out["base_source"]["recheck"]["held"] is True
    assert out["base_source"]["text"].endswith(f"3 h ago; {check['text']})") and out["reason"].endswith(check["text"] + ")")
    stale = recheck(base, measured("concurrent@1", 1, seed=2, n=12, ttft_ms=100, itl_ms=60, latency_s=1.6))
    again = provenance({**fx.bench_results("base", [base]), "recheck": stale})
    assert again["source"] == "this run" and again["recheck"]["held"] is False
    assert again["text"] == f"base measured in this run (the cached figure: {stale['text']})"


def test_a_restored_result_carries_its_recheck_in_the_summary_note(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from shipyard.benchmarking import cache
    from shipyard.gates.noise import recheck

    monkeypatch.setenv("SHIPYARD_CACHE", str(tmp_path / "cache"))
    results = fx.write_json(tmp_path / "measured", "results.json", fx.BASE_BENCH)
    cache.store("k" * 32, {"hardware": {}}, Path(results), "run-a")
    entry = cache.lookup("k" * 32)
    assert entry is not None and cache.read(entry)["levels"][0]["name"] == "concurrent@1"
    level = fx.BASE_BENCH["levels"][0]
    check = recheck(level, level)
    restored = cache.restore(entry, tmp_path / "restored", recheck=check)
    assert restored["cached"]["recheck"] == check
    note = cache.cached_note(restored)
    assert note.endswith(" Re-checked with 8 requests at concurrency 1: output tok/s x1 [0.92, 1.08] (no difference "
                         "within noise): the cached figure held."), note
    # a stale entry is replaced, not kept beside the new result
    other = fx.write_json(tmp_path / "again", "results.json", {**fx.BASE_BENCH, "model_name": "re-measured"})
    cache.store("k" * 32, {"hardware": {}}, Path(other), "run-b")
    assert cache.read(entry)["model_name"] == fx.BASE_BENCH["model_name"]  # a plain store keeps the first
    cache.store("k" * 32, {"hardware": {}}, Path(other), "run-b", replace=True)
    assert cache.read(entry)["model_name"] == "re-measured"
