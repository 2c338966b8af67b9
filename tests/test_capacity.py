"""Capacity in the user's units (issue 35, item 4): the SLO gate's goodput as "N x your recorded
peak" when the benchmark replayed a recorded workload, in the candidate record, the SLO report, the
candidates report, the decision record and the console line; and the SLO judged on the replay itself
(TTFT/ITL p99, error rate, goodput: the gate fails when it misses); nothing new without a workload."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from report_fixtures import (
    BASE_BENCH,
    BASE_SCORES,
    CAND_BENCH,
    CAND_SCORES,
    SLO,
    THRESHOLDS,
    eval_summary,
    level,
    write_json,
)

from shipyard.gates.capacity import capacity_text, peak_capacity, recorded_arrivals

DIGEST = "sha256:" + "b" * 64
#: a fingerprint's arrivals as shipyard.benchmarking.workload.arrival_stats writes them: the peak over
#: 120-s windows (the window shipyard watch counts production's peak in) is 0.35 req/s, over 10-s ones 0.6
ARRIVALS = {"requests": 60, "duration_s": 300.0, "mean_rate_rps": 0.2, "window_s": 10,
            "rate_series_rps": [0.1, 0.2, 0.35, 0.2, 0.1, 0.15, 0.3, 0.2, 0.1, 0.2], "peak_rate_rps": 0.35,
            "peaks_rps": {"10": 0.6, "60": 0.45, "120": 0.35},
            "peak_to_mean": 1.75, "interarrival_cv": 1.3, "interarrival_s": {"p50": 4.0, "mean": 5.0}}
#: the same arrivals as a fingerprint written before per-window peaks: its peak is the rate series' (10-s windows)
OLD_ARRIVALS = {k: v for k, v in ARRIVALS.items() if k != "peaks_rps"}


def workload(time_scale: float = 2.0, input_mean: float = 40.0, measured: dict[str, Any] | None = None,
             arrivals: dict[str, Any] = ARRIVALS) -> dict[str, Any]:
    """``results["workload"]`` as shipyard.steps.workload's replay keeps it (a faithful replay);
    ``measured``: the replay's own figures (``level``, parsed as a load level is); without it, a
    benchmark recorded before the replay's figures were kept."""
    fingerprint = {"schema": "shipyard.workload/v1", "digest": DIGEST, "arrivals": arrivals,
                   "lengths": {"input": {"mean": input_mean}, "output": {"mean": 10.0}}}
    out = {"digest": DIGEST, "replayed": "trace", "requests": 60, "time_scale": time_scale, "block_size": 16,
           "fingerprint": fingerprint, "fidelity": {"valid": True, "failed": [], "line": "workload fidelity: VALID"}}
    return {**out, "level": measured} if measured is not None else out


#: the replay's own figures (60 requests): within the fixtures' SLO (TTFT p99 <= 500 ms, ITL p99 <= 200 ms, no
#: errors) though its 3.5 output tok/s are under the SLO's floor of 5 (a replay's tok/s is the traffic's rate)
REPLAY_OK = level("replay", 1, 0.21, 3.5, (120.0, 180.0, 240.0), (40.0, 45.0, 50.0), ok=60)
#: a replay missing the SLO: TTFT p99 900 ms and 2 errored requests of 62
REPLAY_SLOW = level("replay", 1, 0.2, 3.2, (300.0, 600.0, 900.0), (40.0, 45.0, 50.0), ok=60, errored=2)


def gates(tmp: Path, replay: dict[str, Any] | None, slo: str = SLO) -> dict[str, Any]:
    """The real candidate gates on the report fixtures, both benchmarks replaying ``replay``."""
    from shipyard.steps.judge import judge_candidate

    base, cand = copy.deepcopy(BASE_BENCH), copy.deepcopy(CAND_BENCH)
    if replay is not None:
        base["workload"], cand["workload"] = replay, replay
    return judge_candidate(
        recipe="w8a8-int8", thresholds=THRESHOLDS, slo=slo, out_dir=str(tmp / "gates"),
        base_eval=write_json(tmp / "base-eval", "summary.json", eval_summary(BASE_SCORES, "ab")),
        candidate_eval=write_json(tmp / "cand-eval", "summary.json", eval_summary(CAND_SCORES, "cd")),
        base_bench=write_json(tmp / "base-bench", "results.json", base),
        candidate_bench=write_json(tmp / "cand-bench", "results.json", cand),
        compress_figures={"size_before_bytes": 269_060_552, "size_after_bytes": 163_226_688, "compression_ratio": 1.648},
    )


def console_line(out: dict[str, Any], tmp: Path) -> str:
    """The console's end line figure of the gates task, from what the KFP wrapper records."""
    from shipyard.run.console import key_figure
    from shipyard.steps.judge import gate_outputs

    metadata = gate_outputs(out, "w8a8-int8", str(tmp / "gates"))["metadata"]["candidate"]
    return key_figure("for-loop-2-iteration-0/candidate-gates", {"Output": out["passed"]}, out["metrics"],
                      {"candidate": metadata})


def test_goodput_at_the_slo_in_units_of_the_recorded_peak(tmp_path: Path) -> None:
    out = gates(tmp_path, workload())
    cap = out["candidate"]["slo"]["capacity"]
    # both levels meet the SLO: the highest is concurrent@2 at 1.11 req/s, every request within it
    assert cap["level"] == "concurrent@2" and cap["goodput_share"] == 1.0 and cap["goodput_rps"] == 1.11
    assert cap["x_recorded_peak"] == round(1.11 / 0.35, 4) and cap["x_recorded_mean"] == round(1.11 / 0.2, 4)
    assert cap["recorded_peak_rps"] == 0.35 and cap["time_scale"] == 2.0 and cap["lower_bound"] and cap["note"] == ""
    assert cap["text"] == ("serves at least 3.2x your recorded peak (1.11 req/s at the SLO, at concurrent@2, vs a peak "
                           "of 0.35 req/s in 120-s windows; 5.5x the mean of 0.2 req/s); no measured load broke the SLO, "
                           "so this is a lower bound; the replay ran at 2x the recorded rate; the peak here is the "
                           "recorded, unscaled one")
    assert out["metrics"]["slo_passed"] == 1.0 and out["metrics"]["capacity_x_recorded_peak"] == cap["x_recorded_peak"]
    assert out["metrics"]["capacity_x_recorded_mean"] == cap["x_recorded_mean"]  # KFP metrics and MLflow
    # the record keeps the recorded arrival process for the deploy's sizing
    assert out["candidate"]["workload"]["arrivals"]["peak_rate_rps"] == 0.35
    assert out["candidate"]["workload"]["arrivals"]["peaks_rps"] == ARRIVALS["peaks_rps"]
    assert cap["window_s"] == 120 and cap["window_note"] == ""  # counted as shipyard watch counts the live peak
    assert out["candidate"]["workload"]["lengths"] == {"input_mean": 40.0, "output_mean": 10.0}
    md = (tmp_path / "gates" / "slo.md").read_text()
    assert "## Capacity in your units (the recorded workload)" in md
    assert "| candidate | at least 3.17x | 5.55x | 1.11 | 0.35 in 120-s windows | 0.2 | 2x |" in md
    assert "**Candidate:** serves at least 3.2x your recorded peak" in md
    html = (tmp_path / "gates" / "slo.html").read_text()
    assert "Capacity in your units" in html and "serves at least 3.2x your recorded peak" in html
    line = console_line(out, tmp_path)
    assert line.startswith("w8a8-int8: accuracy pass") and line.endswith(", SLO pass (at least 3.2x your recorded peak)")


def test_the_peak_is_counted_in_the_watchs_window_and_an_older_fingerprint_says_which_it_used() -> None:
    """The capacity divides by the recorded peak over 120-s windows (what shipyard watch counts live),
    not the 10-s one (0.6 req/s, higher); a trace shorter than 120 s uses its longest window and a
    fingerprint without ``peaks_rps`` its rate series' peak, each named with why it is not the watch's."""
    levels, verdicts = CAND_BENCH["levels"], [{"meets": True, "goodput": 1.0}] * 2
    cap = peak_capacity(levels, verdicts, workload())
    assert cap is not None and cap["recorded_peak_rps"] == 0.35 and cap["window_s"] == 120 and cap["window_note"] == ""
    short = peak_capacity(levels, verdicts, workload(arrivals={**ARRIVALS, "peaks_rps": {"10": 0.6, "60": 0.45}}))
    assert short is not None and short["recorded_peak_rps"] == 0.45 and short["window_s"] == 60
    assert short["window_note"] == ("the recorded peak is counted in 60-s windows, not the 120-s windows shipyard "
                                    "watch counts production's peak in (the trace is shorter than 120 s)")
    assert "vs a peak of 0.45 req/s in 60-s windows" in short["text"] and short["window_note"] in short["text"]
    old = peak_capacity(levels, verdicts, workload(arrivals=OLD_ARRIVALS))
    assert old is not None and old["recorded_peak_rps"] == 0.35 and old["window_s"] == 10
    assert old["window_note"] == ("the recorded peak is counted in 10-s windows, not the 120-s windows shipyard watch "
                                  "counts production's peak in (the fingerprint predates per-window peaks: rebuild it "
                                  "with shipyard workload fingerprint)")
    assert "vs a peak of 0.35 req/s in 10-s windows" in old["text"] and old["text"].endswith(old["window_note"])


def test_the_watch_window_has_one_owner() -> None:
    """The capacity counts its peak in the window ``shipyard watch`` counts live peaks in: watch's
    MIN_WINDOW_S itself (the longest of the fingerprint's PEAK_WINDOWS_S), no copy of it."""
    from shipyard.benchmarking.workload import PEAK_WINDOWS_S
    from shipyard.gates import capacity
    from shipyard.serving import watch

    assert capacity.MIN_WINDOW_S is watch.MIN_WINDOW_S == max(PEAK_WINDOWS_S)
    assert not hasattr(capacity, "WATCH_PEAK_WINDOW_S")


def test_no_recorded_workload_adds_no_number(tmp_path: Path) -> None:
    out = gates(tmp_path, None)
    assert out["candidate"]["slo"]["capacity"] is None and out["candidate"]["workload"] is None
    assert not any(k.startswith("capacity") for k in out["metrics"])
    assert "Capacity in your units" not in (tmp_path / "gates" / "slo.md").read_text()
    assert "judge_replay" not in (tmp_path / "gates" / "slo.md").read_text()  # no replay: no row about one
    assert "recorded peak" not in (tmp_path / "gates" / "slo.html").read_text()
    line = console_line(out, tmp_path)
    assert line.startswith("w8a8-int8: accuracy pass") and line.endswith(", SLO pass"), line


def test_a_missed_slo_is_zero_times_the_peak_and_longer_recorded_requests_are_named(tmp_path: Path) -> None:
    strict = json.dumps({"ttft_p99_ms": 50, "itl_p99_ms": 200, "min_output_tokens_per_s": 5, "max_error_rate": 0.0})
    out = gates(tmp_path, workload(time_scale=1.0), slo=strict)
    cap = out["candidate"]["slo"]["capacity"]
    assert cap["x_recorded_peak"] == 0.0 and cap["level"] is None
    assert cap["text"] == ("meets the SLO at no measured load: 0x your recorded peak of 0.35 req/s in 120-s windows; "
                           "the replay ran at the recorded rate")
    assert console_line(out, tmp_path).endswith("SLO FAIL (0x your recorded peak)")
    # the load levels' requests (32 + 16 tokens) against recorded ones of 400 + 10: the figure says it is optimistic
    long = peak_capacity(CAND_BENCH["levels"], [{"meets": True, "goodput": 1.0}] * 2, workload(input_mean=400.0))
    assert long is not None and long["note"] == ("the load levels' requests (48 tokens on average) are shorter than "
                                                 "your recorded ones (410): the figure is optimistic")
    assert long["text"].endswith(long["note"])


def test_a_broken_level_makes_it_a_measured_figure_not_a_lower_bound() -> None:
    levels = [level("constant@1", 1, 1.0, 10, (50, 60, 70), (20, 21, 22)),
              level("constant@2", 2, 2.0, 20, (50, 60, 70), (20, 21, 22)),
              level("constant@4", 4, 3.6, 30, (900, 950, 990), (20, 21, 22))]
    verdicts = [{"meets": True, "goodput": 1.0}, {"meets": True, "goodput": 0.875}, {"meets": False, "goodput": 0.1}]
    cap = peak_capacity(levels, verdicts, {"arrivals": {"peak_rate_rps": 0.5, "mean_rate_rps": 0.25}})
    assert cap is not None and cap["goodput_rps"] == 1.75 and cap["x_recorded_peak"] == 3.5 and not cap["lower_bound"]
    assert capacity_text(cap).startswith("serves 3.5x your recorded peak (1.75 req/s at the SLO, at constant@2, "
                                         "vs a peak of 0.5 req/s; 7x the mean of 0.25 req/s); the replay ran at")
    assert peak_capacity(levels, verdicts, None) is None
    assert recorded_arrivals({"fingerprint": {"arrivals": {"peak_rate_rps": 0}}}) is None  # no peak: no figure


def test_the_capacity_travels_into_the_decision_record_and_the_candidates_report(tmp_path: Path) -> None:
    from shipyard.steps.select import select_champion

    gates(tmp_path, workload(measured=REPLAY_OK))
    select_champion([str(tmp_path / "gates")], "size", str(tmp_path / "decision"), str(tmp_path / "r.md"),
                    str(tmp_path / "r.html"))
    record = json.loads((tmp_path / "decision" / "decision-record.json").read_text())
    by = {g["candidate"]: g for g in record["candidates"]}
    assert by["w8a8-int8"]["slo"]["capacity"]["x_recorded_peak"] == round(1.11 / 0.35, 4)
    # the SLO measured on the replay itself, beside the capacity
    assert by["w8a8-int8"]["slo"]["replay"]["meets"] is True and by["w8a8-int8"]["slo"]["replay"]["goodput_rps"] == 0.21
    md = (tmp_path / "r.md").read_text()
    assert "| judge_replay | true |" in md  # the candidates report's SLO table: a replay was judged
    assert "| recipe | fingerprint | replay | SLO on your traffic | capacity at the SLO | fidelity |" in md
    assert (f"| w8a8-int8 | sha256:bbbbbbbbbbbb | faithful | {ON_YOUR_TRAFFIC} | serves at least 3.2x your "
            "recorded peak") in md


def _selected(tmp: Path, replay: dict[str, Any] | None) -> Path:
    """The real gates and select step on the report fixtures: the decision folder."""
    from shipyard.steps.select import select_champion

    gates(tmp, replay)
    select_champion([str(tmp / "gates")], "size", str(tmp / "decision"), str(tmp / "r.md"), str(tmp / "r.html"))
    return tmp / "decision"


def test_the_capacity_is_signed_into_the_slo_evidence_and_read_back_from_the_model(tmp_path: Path) -> None:
    """The SLO attestation carries the capacity and the fingerprint it rests on; ``shipyard watch
    --model`` rebuilds it from the verified evidence (issues 35 and 37)."""
    from shipyard.gates.evidence import SLO, evidence_statements

    decision = _selected(tmp_path, workload())
    stmts = evidence_statements("reg/repo", "sha256:" + "cd" * 32, str(decision))
    slo = next(s["predicate"] for s in stmts if s["predicateType"] == SLO)
    assert slo["workload"] == {"digest": {"sha256": "b" * 64}} and slo["capacity_reason"] is None
    cap = slo["capacity"]
    assert cap["x_recorded_peak"] == round(1.11 / 0.35, 4) and cap["x_recorded_mean"] == round(1.11 / 0.2, 4)
    assert cap["recorded_peak_rps"] == 0.35 and cap["window_s"] == 120 and cap["goodput_rps"] == 1.11
    assert cap["lower_bound"] is True and cap["time_scale"] == 2.0 and cap["level"] == "concurrent@2"
    assert cap["workload"] == {"digest": {"sha256": "b" * 64}} and cap["text"].startswith("serves at least 3.2x")
    envelope = _packaged_envelope(tmp_path, decision)
    assert envelope.capacity == {"goodput_rps": 1.11, "recorded_peak_rps": 0.35, "x_recorded_peak": round(1.11 / 0.35, 4),
                                 "window_s": 120, "lower_bound": True, "digest": DIGEST}


def test_the_replays_prefix_cache_hit_rate_is_signed_and_read_back_from_the_model(tmp_path: Path) -> None:
    """The server's prefix-cache hit rate during the replay (the fidelity check's ``hit_rate.server``)
    is kept in the champion's record and its signed SLO evidence, and ``shipyard watch --model`` holds
    production's against it (issue 38: the prefix-cache dimension had no qualified figure)."""
    from shipyard.gates.evidence import SLO, evidence_statements
    from shipyard.steps.select import select_champion

    replay = workload()
    replay["fidelity"] = {**replay["fidelity"], "checks": {"hit_rate": {"server": 0.62, "theoretical": 0.66}}}
    out = gates(tmp_path, replay)
    assert out["candidate"]["workload"]["prefix_hit_rate"] == 0.62
    select_dir = tmp_path / "decision"
    select_champion([str(tmp_path / "gates")], "size", str(select_dir), str(tmp_path / "r.md"), str(tmp_path / "r.html"))
    slo = next(s["predicate"] for s in evidence_statements("reg/repo", "sha256:" + "cd" * 32, str(select_dir))
               if s["predicateType"] == SLO)
    assert slo["workload"] == {"digest": {"sha256": "b" * 64}, "prefix_hit_rate": 0.62}
    envelope = _packaged_envelope(tmp_path, select_dir)
    assert envelope.prefix_hit_rate == 0.62
    # a replay whose fidelity check measured no server rate keeps none
    assert "prefix_hit_rate" not in gates(tmp_path / "none", workload())["candidate"]["workload"]


def test_the_replays_lengths_are_signed_and_are_the_envelope_the_model_carries(tmp_path: Path) -> None:
    """The replay of the recorded workload keeps its own per-request lengths (~128-token prompts, the
    user's traffic) beside the synthetic levels' 32-token prompts: the judge step writes them into the
    candidate record (``workload.replay_level``), the SLO evidence signs them, and the envelope ``shipyard
    watch --model`` reads back from the model holds production's lengths against them, saying so. A
    replay that kept no lengths leaves the knee level's (issue 38)."""
    from shipyard.gates.evidence import SLO, evidence_statements
    from shipyard.steps.select import select_champion

    prompts = [96] * 20 + [128] * 20 + [160] * 20
    measured = copy.deepcopy(REPLAY_OK)
    measured["samples"]["prompt_tokens"], measured["prompt_tokens_mean"] = prompts, 128.0
    out = gates(tmp_path, workload(measured=measured))
    kept = {"name": "replay", "requests_per_s": 0.21, "prompt_tokens_mean": 128.0, "output_tokens_mean": 16.0,
            "lengths": {"prompt_tokens": {"96": 20, "128": 20, "160": 20}, "output_tokens": {"16": 60}}}
    assert out["candidate"]["workload"]["replay_level"] == kept
    decision = tmp_path / "decision"
    select_champion([str(tmp_path / "gates")], "size", str(decision), str(tmp_path / "r.md"), str(tmp_path / "r.html"))
    slo = next(s["predicate"] for s in evidence_statements("reg/repo", "sha256:" + "cd" * 32, str(decision))
               if s["predicateType"] == SLO)
    assert slo["workload"] == {"digest": {"sha256": "b" * 64}, "replay_level": kept}
    envelope = _packaged_envelope(tmp_path, decision)
    assert envelope.prompt_tokens == 128.0 and envelope.prompt_lengths == tuple(prompts)
    assert envelope.lengths_from == f"the replay of workload {DIGEST[:19]}"
    # a replay whose level kept no per-request figures: no replay_level, the knee level's 32-token prompts
    assert "replay_level" not in gates(tmp_path / "old", workload())["candidate"]["workload"]


def _packaged_envelope(tmp_path: Path, decision: Path) -> Any:
    """A small model packaged, attested from ``decision`` (select_champion's folder) with a new key pair,
    and the envelope ``shipyard watch --model`` reads back from the image's signed evidence."""
    from shipyard.oci.attestation import generate_key_pair, read_key_file
    from shipyard.steps.attest import attest_package
    from shipyard.steps.package import package_model
    from shipyard.steps.watch import envelope_of_model

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    (model / "model.safetensors").write_bytes(b"weights" * 64)
    (model / "tokenizer.json").write_text('{"version": "1.0"}')
    private, public = generate_key_pair(tmp_path / "keys")
    car = package_model(str(model), str(tmp_path / "champion"))
    attest_package(str(tmp_path / "champion"), str(decision), key_file=str(private), model_dir=str(model))
    return envelope_of_model(car["uri"], read_key_file(public, "--key", private=False))[0]


def test_the_slo_evidence_says_why_the_peak_is_not_in_the_watchs_window(tmp_path: Path) -> None:
    """A Prometheus fingerprint at 300-s steps has no 120-s peak: the signed SLO evidence carries the
    capacity's ``window_note`` with Prometheus's reason, and ``shipyard watch`` rebuilt from the evidence
    alone (as ``--model`` does) prints that reason in its "not compared" line (issues 35, 37 and 38)."""
    from shipyard.gates.evidence import SLO, evidence_statements
    from shipyard.serving.watch import Live, capacity_row, envelope_from_record

    why = ("the 120-s peak is not computed: 120 s is not a whole number of the 300-s query steps (pass a --step "
           "dividing 120, no shorter than the scrape interval)")
    arrivals = {**ARRIVALS, "window_s": 300, "rate_series_rps": [0.1, 0.35, 0.15], "peaks_rps": {},
                "peaks_not_computed": {"10": why.replace("120", "10"), "60": why.replace("120", "60"), "120": why}}
    decision = _selected(tmp_path, workload(arrivals=arrivals))
    slo = next(s["predicate"] for s in evidence_statements("reg/repo", "sha256:" + "cd" * 32, str(decision))
               if s["predicateType"] == SLO)
    cap = slo["capacity"]
    assert cap["window_s"] == 300 and cap["recorded_peak_rps"] == 0.35
    assert cap["window_note"] == ("the recorded peak is counted in 300-s windows, not the 120-s windows shipyard "
                                  f"watch counts production's peak in ({why})")
    record = {"levels": slo["levels"], "slo": {"thresholds": slo["slo"], "capacity": cap}}
    env = envelope_from_record(record)
    assert env.capacity is not None and env.capacity["window_note"] == cap["window_note"]
    row = capacity_row(env, Live(prompt_tokens=40, output_tokens=10, rps=0.2, replicas=1, ttft_p99_ms=100,
                                 prefix_hit_rate=None, window_s=3600, peak_rps=0.4, peak_rps_per_replica=0.4,
                                 peak_window_s=120), 0.0)
    assert row["peak"]["alike"] is False
    assert ("not compared with your recorded peak of 0.35 req/s in 300-s windows: a peak over other windows is "
            f"another figure, and {cap['window_note']} (qualified") in row["note"]


def test_a_synthetic_benchmark_signs_no_capacity_and_says_why(tmp_path: Path) -> None:
    from shipyard.gates.evidence import SLO, evidence_statements
    from shipyard.serving.watch import envelope_from_record

    decision = _selected(tmp_path, None)
    slo = next(s["predicate"] for s in evidence_statements("reg/repo", "sha256:" + "cd" * 32, str(decision))
               if s["predicateType"] == SLO)
    assert slo["capacity"] is None and "workload" not in slo
    assert slo["capacity_reason"] == ("the benchmark's load was synthetic (no recorded workload replayed): "
                                      "no recorded peak to count in")
    record = {"levels": slo["levels"], "slo": {"thresholds": slo["slo"], "capacity": slo["capacity"]}}
    assert envelope_from_record(record).capacity is None


# --------------------------------------------------------------------------- the SLO on the replay itself
ON_YOUR_TRAFFIC = ("on your traffic (replay of sha256:bbbbbbbbbbbb, 60 requests at 2x time scale): TTFT p99 240 ms "
                   "(SLO <= 500), ITL p99 50 ms (SLO <= 200), error rate 0 (SLO <= 0), goodput 0.21 req/s (100% of "
                   "its requests within the TTFT and ITL SLO); meets the SLO: yes; the replay ran at 2x the recorded "
                   "rate (faster than your traffic arrived)")


def test_the_slo_is_judged_on_the_replay_itself(tmp_path: Path) -> None:
    out = gates(tmp_path, workload(measured=REPLAY_OK))
    rep = out["candidate"]["slo"]["replay"]
    assert rep["measured"] and rep["meets"] and rep["gating"] and rep["failures"] == []
    assert (rep["ttft_p99_ms"], rep["itl_p99_ms"], rep["error_rate"]) == (240.0, 50.0, 0.0)
    assert rep["goodput_share"] == 1.0 and rep["goodput_rps"] == 0.21 and rep["requests"] == 60
    # the throughput floor is not a check of a replay: its tok/s is the recorded traffic's rate
    assert [c["check"] for c in rep["checks"]] == ["TTFT p99", "ITL p99", "error rate"]
    assert rep["text"] == ON_YOUR_TRAFFIC and out["metrics"]["slo_passed"] == 1.0
    assert ON_YOUR_TRAFFIC in out["candidate"]["slo"]["reason"]
    assert "your traffic: the recorded workload's replay must meet" in out["candidate"]["slo"]["rule"]
    assert {k: v for k, v in out["metrics"].items() if k.startswith("replay.")} == {
        "replay.meets_slo": 1.0, "replay.error_rate": 0.0, "replay.goodput_rps": 0.21, "replay.ttft_p99_ms": 240.0,
        "replay.itl_p99_ms": 50.0}
    md = (tmp_path / "gates" / "slo.md").read_text()
    assert "| judge_replay | true |" in md  # a replay was judged: the SLO table says how
    assert "## SLO on your traffic (the recorded workload's replay)" in md and f"**Candidate:** {ON_YOUR_TRAFFIC}" in md
    assert "| candidate | TTFT p99 | 240 ms | <= 500 ms | 260 | pass |" in md
    assert "on your traffic (replay of sha256:bbbbbbbbbbbb" in (tmp_path / "gates" / "slo.html").read_text()


def test_a_replay_missing_the_slo_fails_the_gate_naming_the_figure(tmp_path: Path) -> None:
    out = gates(tmp_path / "gating", workload(time_scale=1.0, measured=REPLAY_SLOW))
    slo = out["candidate"]["slo"]
    missed = ("SLO missed on your traffic (replay of sha256:bbbbbbbbbbbb, 62 requests at 1x time scale): TTFT p99 "
              "900 ms > 500; error rate 0.0323 > 0 (2 errored, 0 incomplete of 62)")
    assert not out["passed"] and not slo["passed"] and slo["reason"].startswith(f"failed: {missed}; worst regression")
    assert slo["replay"]["meets"] is False and out["metrics"]["replay.meets_slo"] == 0.0
    assert slo["replay"]["text"].endswith("; meets the SLO: no (TTFT p99 900 ms > 500; error rate 0.0323 > 0 "
                                          "(2 errored, 0 incomplete of 62))")  # at 1x: no time-scale words
    # a replay at another pace says so next to the verdict and in the reason
    fast = gates(tmp_path / "fast", workload(time_scale=4.0, measured=REPLAY_SLOW))["candidate"]["slo"]
    assert fast["reason"].startswith("failed: SLO missed on your traffic (replay of sha256:bbbbbbbbbbbb, 62 requests "
                                     "at 4x time scale): TTFT p99 900 ms > 500; error rate 0.0323 > 0 (2 errored, 0 "
                                     "incomplete of 62); the replay ran at 4x the recorded rate (faster than your "
                                     "traffic arrived); worst regression")
    # slo.judge_replay false: reported, not gating
    loose = json.dumps({**json.loads(SLO), "judge_replay": False})
    shown = gates(tmp_path / "shown", workload(time_scale=0.5, measured=REPLAY_SLOW), slo=loose)["candidate"]["slo"]
    assert shown["passed"] and shown["replay"]["gating"] is False
    assert shown["replay"]["text"].endswith("; meets the SLO: no (TTFT p99 900 ms > 500; error rate 0.0323 > 0 (2 "
                                            "errored, 0 incomplete of 62)); the replay ran at 0.5x the recorded rate "
                                            "(slower than your traffic arrived); not gating: slo.judge_replay is false")
    assert shown["replay"]["text"] in shown["reason"] and "is reported against (slo.judge_replay false" in shown["rule"]


def test_no_replay_changes_nothing_and_a_replay_without_figures_is_not_judged(tmp_path: Path) -> None:
    from shipyard.gates.slo import compare, parse_slo

    synthetic = gates(tmp_path / "synthetic", None)
    assert synthetic["candidate"]["slo"]["replay"] is None and synthetic["passed"]
    assert not any(k.startswith("replay.") for k in synthetic["metrics"])
    assert "your traffic" not in synthetic["candidate"]["slo"]["reason"] + synthetic["candidate"]["slo"]["rule"]
    assert "on your traffic" not in (tmp_path / "synthetic" / "gates" / "slo.md").read_text()
    # the decision without a replay is the one before: same verdict, reason and rule as the load levels alone
    slo = parse_slo(SLO)
    plain = compare(BASE_BENCH, CAND_BENCH, slo)
    assert plain["replay"] is None and plain["base_replay"] is None
    # a benchmark recorded before the replay's figures were kept: said, not judged, not failed
    old = gates(tmp_path / "old", workload())["candidate"]["slo"]
    assert old["passed"] and old["replay"]["measured"] is False and old["replay"]["meets"] is None
    assert old["replay"]["text"].startswith("on your traffic (replay of sha256:bbbbbbbbbbbb): the replay kept no "
                                            "latency figures")


def test_the_slo_on_your_traffic_is_signed_into_the_slo_evidence(tmp_path: Path) -> None:
    from shipyard.gates.evidence import SLO as SLO_TYPE
    from shipyard.gates.evidence import evidence_statements

    def predicate(tmp: Path, replay: dict[str, Any] | None) -> dict[str, Any]:
        decision = _selected(tmp, replay)
        return next(s["predicate"] for s in evidence_statements("reg/repo", "sha256:" + "cd" * 32, str(decision))
                    if s["predicateType"] == SLO_TYPE)

    signed = predicate(tmp_path / "replayed", workload(measured=REPLAY_OK))
    rep = signed["replay"]
    assert signed["replay_reason"] is None and signed["capacity"] is not None  # beside the capacity
    assert rep["meets"] is True and rep["gating"] is True and rep["time_scale"] == 2.0 and rep["requests"] == 60
    assert (rep["ttft_p99_ms"], rep["itl_p99_ms"], rep["error_rate"], rep["goodput_rps"]) == (240.0, 50.0, 0.0, 0.21)
    assert rep["text"] == ON_YOUR_TRAFFIC and rep["workload"] == {"digest": {"sha256": "b" * 64}}
    synthetic = predicate(tmp_path / "synthetic", None)
    assert synthetic["replay"] is None and synthetic["replay_reason"] == (
        "the benchmark's load was synthetic (no recorded workload replayed): no SLO figures on your traffic")
    old = predicate(tmp_path / "old", workload())
    assert old["replay"] is None and old["replay_reason"].startswith("the replay of the recorded workload kept no latency")


def test_a_bad_judge_replay_is_one_line_naming_it() -> None:
    import pytest

    from shipyard.core.errors import ShipyardError
    from shipyard.gates.config import slo_config

    assert slo_config(None).judge_replay is True and slo_config({"judge_replay": False}).judge_replay is False
    for bad in ("no", 0, None):
        with pytest.raises(ShipyardError) as err:
            slo_config({"judge_replay": bad})
        assert err.value.field == "slo.judge_replay" and "must be true or false" in err.value.problem
        assert "\n" not in str(err.value)
