"""``shipyard watch``: production against the envelope the champion was qualified on, read from a real
Prometheus (Debian's ``prometheus``) holding vLLM 0.32's series, backfilled with ``promtool tsdb
create-blocks-from openmetrics`` as a scrape of two replicas would have written them."""

from __future__ import annotations

import json
import math
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import require_tool
from kfp_double import KfpDouble

from shipyard.core.errors import ShipyardError
from shipyard.core.net import free_port, http_ok, wait_ready
from shipyard.serving.prometheus import PrometheusAPI
from shipyard.serving.watch import (
    Live,
    compare,
    envelope_from_record,
    format_report,
    parse_tolerance,
    peak_window,
    predicted_ttft,
)

#: the champion's benchmark: three load levels, the SLO met up to 2 req/s (the knee)
LEVELS = [{"name": f"constant@{rps:g}", "strategy": "constant", "nominal_load": rps, "requests_per_s": rps,
           "ttft_p50_ms": ttft / 2, "ttft_p99_ms": ttft, "itl_p50_ms": itl / 2, "itl_p99_ms": itl, "error_rate": 0.0,
           "prompt_tokens_mean": 200.0, "output_tokens_mean": 100.0,
           "samples": {"prompt_tokens": [200] * 100, "output_tokens": [100] * 100}}
          for rps, ttft, itl in ((1.0, 80.0, 20.0), (2.0, 120.0, 25.0), (4.0, 900.0, 60.0))]
SLO = {"ttft_p99_ms": 500.0, "itl_p99_ms": 50.0, "max_error_rate": 0.0}
RECORD = {"schema": "shipyard.candidate/v1", "recipe": "w8a8-int8", "passed": True, "reason": "passed", "levels": LEVELS, "slo": {"thresholds": SLO}}
WORKLOAD = "sha256:" + "b" * 64
#: the same champion had its benchmark replayed a recorded workload (shipyard.gates.capacity): one replica's
#: goodput at the SLO 2 req/s, twice the recorded peak of 1 req/s (in 120-s windows, as the watch counts it)
CAPACITY = {"goodput_rps": 2.0, "level": "constant@2", "requests_per_s": 2.0, "goodput_share": 1.0, "lower_bound": False,
            "recorded_peak_rps": 1.0, "recorded_mean_rps": 0.4, "window_s": 120, "x_recorded_peak": 2.0,
            "x_recorded_mean": 5.0, "time_scale": 1.0, "digest": WORKLOAD}
REPLAYED = {**RECORD, "slo": {**RECORD["slo"], "capacity": CAPACITY}, "workload": {"digest": WORKLOAD}}
#: TTFT histogram edges (vLLM's defaults start 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25 ...)
EDGES = (0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5)
#: the token-count histograms' edges (request_prompt_tokens, request_generation_tokens) of the pinned
#: vLLM serving a 2048-token model: its 1-2-5 series up to max_model_len (checked against its source below)
MAX_MODEL_LEN = 2048
TOKEN_EDGES = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)


def _series(model: str, replicas: int, rps: float, prompt: float, output: float, ttft_s: float,
            start: float, end: float, step: float = 15.0, burst: tuple[float, float, float] | None = None,
            prompt_mix: tuple[tuple[int, float], ...] | None = None) -> list[str]:
    """OpenMetrics lines of ``replicas`` vLLM instances serving ``rps`` requests/s each (``burst``:
    ``(from, to, rps)``, a higher rate between those times), every request with ``prompt``/``output``
    tokens (``prompt_mix``: ``(tokens, share)`` pairs of that mean instead), TTFT spread evenly below
    ``ttft_s`` (so p99 is just under it), and half of the prompt blocks found in the prefix cache."""
    mix = prompt_mix or ((round(prompt), 1.0),)
    lines = []
    t, n, extra = start, 0, 0.0
    while t <= end:
        if burst and burst[0] < t <= burst[1]:
            extra += (burst[2] - rps) * step
        done = rps * step * n + extra
        for i in range(replicas):
            lab = f'model_name="{model}",instance="10.0.0.{i}:8000"'
            lines += [f"vllm:request_success_total{{{lab},finished_reason=\"stop\"}} {done} {t:.3f}",
                      f"vllm:request_prompt_tokens_sum{{{lab}}} {done * prompt} {t:.3f}",
                      f"vllm:request_prompt_tokens_count{{{lab}}} {done} {t:.3f}",
                      f"vllm:request_generation_tokens_sum{{{lab}}} {done * output} {t:.3f}",
                      f"vllm:request_generation_tokens_count{{{lab}}} {done} {t:.3f}",
                      f"vllm:prefix_cache_queries_total{{{lab}}} {done * prompt} {t:.3f}",
                      f"vllm:prefix_cache_hits_total{{{lab}}} {done * prompt / 2} {t:.3f}",
                      f"vllm:num_requests_running{{{lab}}} 1 {t:.3f}"]
            for le in EDGES:
                below = done * min(1.0, le / ttft_s)
                lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lab},le="{le}"}} {below} {t:.3f}')
            lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lab},le="+Inf"}} {done} {t:.3f}')
            for le in (*TOKEN_EDGES, "+Inf"):
                below = done * sum(share for tokens, share in mix if le == "+Inf" or tokens <= le)
                lines.append(f'vllm:request_prompt_tokens_bucket{{{lab},le="{le}"}} {below} {t:.3f}')
                below = done if le == "+Inf" or output <= le else 0.0
                lines.append(f'vllm:request_generation_tokens_bucket{{{lab},le="{le}"}} {below} {t:.3f}')
        t += step
        n += 1
    return lines


#: when ``gone``'s first scrape was (set by :func:`prometheus`)
GONE_AT: list[float] = []


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Prometheus with 40 minutes of four served models, up to a minute ago: ``steady`` serves
    what the champion was qualified on, ``drifted`` prompts 2.5x longer at 3 req/s per replica,
    ``attested`` what the signed champion of :func:`attested` was qualified on, ``bursty`` the
    champion's lengths at 0.5 req/s per replica but 2.5 req/s for six minutes (from 16 minutes ago),
    ``sparse`` ``steady``'s traffic scraped every 5 minutes, ``reshaped`` ``steady``'s mean prompt of
    200 tokens as half 20-token and half 380-token prompts, ``gone`` two scrapes 3 s apart about 30
    minutes ago (:data:`GONE_AT`, 25 s past a 30-s boundary), then nothing."""
    require_tool(bool(shutil.which("prometheus")) and bool(shutil.which("promtool")), "apt-get install -y prometheus")
    root = tmp_path_factory.mktemp("prometheus")
    end = time.time() - 60
    start = end - 40 * 60
    GONE_AT[:] = [(end - 30 * 60) // 30 * 30 + 25]
    # the 15 s scrape: the output is about the curve's 1.5 req/s point (80..120 ms: TTFT p99 just under 100 ms)
    lines = (_series("steady", 2, 1.5, 200, 100, 0.1, start, end)
             + _series("drifted", 2, 3.0, 500, 100, 0.3, start, end)
             # what the attested champion (report_fixtures' w8a8-int8: 32/16 tokens, knee 1.11 req/s) was qualified on
             + _series("attested", 2, 0.5, 32, 16, 0.06, start, end)
             + _series("bursty", 2, 0.5, 200, 100, 0.1, start, end, burst=(end - 16 * 60, end - 10 * 60, 2.5))
             + _series("sparse", 2, 1.5, 200, 100, 0.1, start, end, step=300.0)
             + _series("reshaped", 2, 1.5, 200, 100, 0.1, start, end, prompt_mix=((20, 0.5), (380, 0.5)))
             + _series("gone", 1, 1.0, 200, 100, 0.1, GONE_AT[0], GONE_AT[0] + 3, step=3.0))
    (root / "data.om").write_text("\n".join(sorted(lines, key=lambda line: float(line.rsplit(" ", 1)[1])))
                                  + "\n# EOF\n")
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(root / "data.om"), str(root / "tsdb")],
                   check=True, capture_output=True, timeout=120)
    (root / "prometheus.yml").write_text("global: {scrape_interval: 15s}\n")
    port = free_port()
    proc = subprocess.Popen(["prometheus", f"--config.file={root / 'prometheus.yml'}",
                             f"--storage.tsdb.path={root / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--storage.tsdb.retention.time=30d"],
                            stdout=subprocess.DEVNULL, stderr=(root / "prometheus.log").open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready("prometheus", lambda: http_ok(f"{url}/-/ready"), timeout_s=60, log=root / "prometheus.log")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _watch(tmp_path: Path, *args: str, record: dict[str, Any] = RECORD) -> subprocess.CompletedProcess[str]:
    champion = tmp_path / "champion"
    champion.mkdir(exist_ok=True)
    (champion / "candidate.json").write_text(json.dumps(record))
    return subprocess.run([sys.executable, "-m", "shipyard.cli.main", "watch", "--champion", str(champion), *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_envelope_is_the_knee_and_the_curve() -> None:
    env = envelope_from_record(RECORD)
    assert env.knee_rps == 2.0 and env.prompt_tokens == 200.0 and env.output_tokens == 100.0  # 4 req/s breaks the SLO
    assert predicted_ttft(env.curve, 1.5) == pytest.approx(100.0)  # halfway between 80 and 120 ms
    assert predicted_ttft(env.curve, 0.5) == 80.0 and predicted_ttft(env.curve, 9.0) == 900.0  # held flat outside
    with pytest.raises(ShipyardError, match="holds no benchmark levels"):
        envelope_from_record({"recipe": "x", "levels": []})


def test_each_dimension_drifts_on_its_own() -> None:
    env, tol = envelope_from_record(RECORD), parse_tolerance(None)
    steady = Live(prompt_tokens=210, output_tokens=95, rps=3.0, replicas=2, ttft_p99_ms=110, prefix_hit_rate=0.4,
                  window_s=1800)
    out = compare(env, steady, tol)
    assert out["verdict"] == "within the envelope" and out["drifted"] == [] and out["requalify"] is None
    longer = compare(env, Live(**{**steady.__dict__, "prompt_tokens": 300}), tol)
    assert longer["drifted"] == ["input_length"]
    assert '"prompt_tokens":300' in longer["requalify"] and '"loads":[0.75,1.5,2.25,3.0]' in longer["requalify"]
    assert compare(env, Live(**{**steady.__dict__, "rps": 5.0}), tol)["drifted"] == ["load"]  # 2.5 req/s a replica
    # slower than the curve at the same load: the engine, not the traffic (a node, a noisy neighbour, a regression)
    assert compare(env, Live(**{**steady.__dict__, "ttft_p99_ms": 200}), tol)["drifted"] == ["ttft"]
    idle = compare(env, Live(None, None, None, 2, None, None, 1800), tol)
    assert idle["drifted"] == [] and all(r["drifted"] is None for r in idle["rows"])


def _cumulative(lengths: list[int], edges: tuple[int, ...] = TOKEN_EDGES) -> dict[float, float]:
    """vLLM's cumulative bucket counts of ``lengths`` at ``edges`` (``le``: at most the edge), and +Inf."""
    return {**{float(le): float(sum(1 for v in lengths if v <= le)) for le in edges}, math.inf: float(len(lengths))}


def test_the_same_mean_in_another_shape_is_a_drift_naming_the_edge() -> None:
    """Half the prompts ten times shorter, half nearly twice as long: the mean holds at 200, the
    distribution does not. The row names the edge whose share moved most; the same shape live, or
    a gap within what few requests give by chance, is no drift."""
    env, tol = envelope_from_record(RECORD), parse_tolerance(None)
    assert env.prompt_lengths == (200,) * 100 and env.output_lengths == (100,) * 100
    same = Live(200, 100, 3.0, 2, 110, None, 1800, prompt_buckets=_cumulative([200] * 4000),
                output_buckets=_cumulative([100] * 4000))
    out = compare(env, same, tol)
    rows = {r["dimension"]: r for r in out["rows"]}
    assert out["drifted"] == [] and rows["input_distribution"]["drifted"] is False
    assert rows["input_distribution"]["distance"] == 0.0
    reshaped = Live(**{**same.__dict__, "prompt_buckets": _cumulative([20] * 2000 + [380] * 2000)})
    out = compare(env, reshaped, tol)
    row = {r["dimension"]: r for r in out["rows"]}["input_distribution"]
    assert out["drifted"] == ["input_distribution"]  # the mean (input_length) did not move
    assert row["edge"] == 20.0 and row["live"] == 0.5 and row["qualified"] == 1.0 and row["distance"] == 0.5
    assert "  prompt length distribution: DRIFT live 0.5 vs qualified 1  (share above 20 tokens, the widest gap; " \
        in format_report(out)
    # a 10-point move over 20 live requests is what chance gives: no drift
    few = Live(**{**same.__dict__, "prompt_buckets": _cumulative([200] * 18 + [600] * 2)})
    row = {r["dimension"]: r for r in compare(env, few, tol)["rows"]}["input_distribution"]
    assert row["distance"] == 0.1 and row["chance"] > 0.1 and row["drifted"] is False
    # a fifth of the prompts past 500 tokens: past the default 0.1 and the chance gap of 100 benchmarked
    # requests (about 0.17), within a declared 0.25
    wider = Live(**{**same.__dict__, "prompt_buckets": _cumulative([200] * 3200 + [600] * 800)})
    row = {r["dimension"]: r for r in compare(env, wider, tol)["rows"]}["input_distribution"]
    assert row["drifted"] is True and row["edge"] == 200.0 and row["chance"] == pytest.approx(0.165, abs=0.005)
    assert compare(env, wider, parse_tolerance('{"input_distribution": 0.25}'))["drifted"] == []


def test_a_record_without_per_request_lengths_is_not_compared() -> None:
    """A candidate record or signed evidence from before the per-request lengths were kept (its
    levels' ``samples`` a count, no ``lengths``): the distributions are "not compared", with the
    reason, never a drift."""
    old = {**RECORD, "levels": [{**{k: v for k, v in lv.items() if k != "samples"}, "samples": 100} for lv in LEVELS]}
    env = envelope_from_record(old)
    assert env.prompt_lengths is None and env.output_lengths is None
    live = Live(200, 100, 3.0, 2, 110, None, 1800, prompt_buckets=_cumulative([20] * 50 + [380] * 50),
                output_buckets=_cumulative([100] * 100))
    out = compare(env, live, parse_tolerance(None))
    rows = {r["dimension"]: r for r in out["rows"]}
    assert out["drifted"] == []
    for dim in ("input_distribution", "output_distribution"):
        assert rows[dim]["drifted"] is None and rows[dim]["note"].startswith("not compared: the record holds no")
    idle = {r["dimension"]: r for r in compare(envelope_from_record(RECORD), Live(None, None, None, 2, None, None, 1800),
                                               parse_tolerance(None))["rows"]}
    assert idle["input_distribution"]["note"] == "not compared: no finished requests in the window"


#: a champion benchmarked on synthetic levels of 16-token prompts (concurrency 1, 2, 4; the knee at 2) that
#: then replayed a recorded workload of ~128-token prompts: ``workload.replay_level`` as the judge step keeps it
SYNTHETIC = [{"name": f"concurrent@{c}", "strategy": "concurrent", "nominal_load": c, "requests_per_s": c * 1.0,
              "ttft_p99_ms": ttft, "itl_p99_ms": 20.0, "error_rate": 0.0, "prompt_tokens_mean": 16.0,
              "output_tokens_mean": 16.0, "lengths": {"prompt_tokens": {"16": 100}, "output_tokens": {"16": 100}}}
             for c, ttft in ((1, 80.0), (2, 120.0), (4, 900.0))]
REPLAY_PROMPTS = [96] * 30 + [128] * 40 + [160] * 30


def test_a_replayed_workloads_lengths_are_the_envelope_not_the_synthetic_levels() -> None:
    """When the benchmark replayed the user's recorded workload, the lengths (means and distributions)
    are held against the replay's (the user's traffic), not the knee's synthetic prompts: live traffic
    like the replay is within the envelope, live traffic like the synthetic level drifts; the report
    says which. A record without the replay (before it was kept, or a synthetic benchmark) is as before."""
    from shipyard.serving.watch import replay_envelope_level

    replay = {"name": "replay", "requests_per_s": 0.5, "prompt_tokens_mean": 128.0, "output_tokens_mean": 16.0,
              "samples": {"prompt_tokens": REPLAY_PROMPTS, "output_tokens": [16] * 100, "ttft_ms": [100.0] * 100}}
    kept = replay_envelope_level(replay)
    assert kept == {"name": "replay", "requests_per_s": 0.5, "prompt_tokens_mean": 128.0, "output_tokens_mean": 16.0,
                    "lengths": {"prompt_tokens": {"96": 30, "128": 40, "160": 30}, "output_tokens": {"16": 100}}}
    old = {**RECORD, "levels": SYNTHETIC, "workload": {"digest": WORKLOAD}}
    record = {**old, "workload": {**old["workload"], "replay_level": kept}}
    env, tol = envelope_from_record(record), parse_tolerance(None)
    assert env.prompt_tokens == 128.0 and env.prompt_lengths == tuple(REPLAY_PROMPTS)
    assert env.knee_rps == 2.0  # the load and the curve stay the synthetic levels'
    assert env.lengths_from == "the replay of workload sha256:bbbbbbbbbbbb"
    like_replay = Live(128, 16, 3.0, 2, 110, None, 1800, prompt_buckets=_cumulative(REPLAY_PROMPTS * 40),
                       output_buckets=_cumulative([16] * 4000))
    like_synthetic = Live(**{**like_replay.__dict__, "prompt_tokens": 16, "prompt_buckets": _cumulative([16] * 4000)})
    ok = compare(env, like_replay, tol)
    assert ok["drifted"] == [] and ok["lengths_from"] == env.lengths_from
    assert {r["dimension"]: r.get("qualified_on") for r in ok["rows"]}["input_distribution"] == env.lengths_from
    assert format_report(ok).splitlines()[1] == "  lengths qualified on the replay of workload sha256:bbbbbbbbbbbb"
    assert compare(env, like_synthetic, tol)["drifted"] == ["input_length", "input_distribution"]
    # the record from before the replay's lengths were kept: the knee level's, as before
    before = envelope_from_record(old)
    assert before.prompt_tokens == 16.0 and before.prompt_lengths == (16,) * 100
    assert before.lengths_from == "the synthetic level at concurrency 2 (the knee)"
    assert compare(before, like_synthetic, tol)["drifted"] == []
    assert compare(before, like_replay, tol)["drifted"] == ["input_length", "input_distribution"]
    assert format_report(compare(before, like_replay, tol)).splitlines()[1] == \
        "  lengths qualified on the synthetic level at concurrency 2 (the knee)"
    # a replay that kept no lengths (or none at all) is no source: the knee level's
    assert replay_envelope_level({"name": "replay", "samples": {"ttft_ms": [1.0]}}) is None
    assert envelope_from_record({**old, "workload": {"digest": WORKLOAD, "replay_level": None}}).prompt_tokens == 16.0
    assert envelope_from_record(RECORD).lengths_from == "the synthetic level at 2 req/s (the knee)"


def test_the_judged_candidate_record_keeps_the_lengths_the_watch_compares(tmp_path: Path) -> None:
    """The real judge step writes each level's per-request lengths into ``candidate.json`` (a sparse
    histogram, ``lengths``): the envelope of that record holds the knee level's prompt and output
    lengths, so a champion judged today is compared by distribution, not only by mean."""
    from report_fixtures import judged

    from shipyard.core.records import CANDIDATE_FILE

    judged(tmp_path)
    record = json.loads((tmp_path / "w8a8-int8-gates" / CANDIDATE_FILE).read_text())
    assert all(lv["lengths"] == {"prompt_tokens": {"32": 8}, "output_tokens": {"16": 8}} for lv in record["levels"])
    env = envelope_from_record(record)
    assert env.prompt_lengths == (32,) * 8 and env.output_lengths == (16,) * 8


def test_the_token_edges_are_the_pinned_vllms() -> None:
    """The fixture's token-count edges are what the pinned vLLM declares for a 2048-token model: its
    own bucket functions, read from its source (``vllm/v1/metrics/buckets.py``, no import)."""
    import ast

    from conftest import require_tool

    from shipyard.runtimes.runtime import venvs_dir

    found = sorted((venvs_dir() / "vllm").glob("lib/python3*/site-packages/vllm/v1/metrics/buckets.py"))
    require_tool(bool(found), "the vllm runtime venv (.venvs/vllm: shipyard setup builds it)")
    tree = ast.parse(found[0].read_text())
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in ("build_buckets", "build_1_2_5_buckets")]
    space: dict[str, Any] = {}
    exec(compile(ast.Module(body=funcs, type_ignores=[]), str(found[0]), "exec"), space)  # noqa: S102
    assert tuple(space["build_1_2_5_buckets"](MAX_MODEL_LEN)) == TOKEN_EDGES
    family = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "histogram_buckets")
    assert "build_1_2_5_buckets(max_model_len)" in ast.unparse(family)  # the request_tokens family's default


def test_the_live_peak_is_held_against_the_qualified_capacity() -> None:
    """A replayed workload's capacity (one replica's goodput at the SLO, N x the recorded peak): the
    window's peak load per replica against it, live peak / recorded peak and the headroom."""
    env, tol = envelope_from_record(REPLAYED), parse_tolerance(None)
    assert env.capacity == {"goodput_rps": 2.0, "recorded_peak_rps": 1.0, "x_recorded_peak": 2.0, "window_s": 120,
                            "lower_bound": False, "digest": WORKLOAD}
    assert peak_window(env, 1800) == 120  # rate(...[120s]): the recorded peak's window
    steady = Live(prompt_tokens=210, output_tokens=95, rps=3.0, replicas=2, ttft_p99_ms=110, prefix_hit_rate=0.4,
                  window_s=1800, peak_rps=3.2, peak_rps_per_replica=1.6, peak_window_s=120)
    out = compare(env, steady, tol)
    row = next(r for r in out["rows"] if r["dimension"] == "capacity")
    assert out["drifted"] == [] and row["drifted"] is False and row["live"] == 1.6 and row["qualified"] == 2.0
    assert row["peak"]["x_recorded_peak"] == 3.2 and row["peak"]["headroom"] == 0.2  # 1.6 of 2 req/s a replica
    assert row["peak"]["alike"] is True
    assert row["note"] == ("at most the goodput at the SLO x1.00, headroom 20%; live peak 3.2 req/s = 3.2x your recorded "
                           "peak of 1 req/s, both in 120-s windows (qualified: 2x a replica, 4x at 2 replicas)")
    # the mean load per replica stays below the knee, the bursts pass the goodput at the SLO: the capacity drifts alone
    burst = compare(env, Live(**{**steady.__dict__, "peak_rps": 5.0, "peak_rps_per_replica": 2.5}), tol)
    assert burst["drifted"] == ["capacity"] and '"loads":[0.75,1.5,2.25,2.5,3.0]' in burst["requalify"]
    assert "25% past it; live peak 5 req/s = 5x your recorded peak" in next(
        r["note"] for r in burst["rows"] if r["dimension"] == "capacity")
    assert compare(env, Live(**{**steady.__dict__, "peak_rps_per_replica": 2.5}),
                   parse_tolerance('{"capacity": 0.3}'))["drifted"] == []
    # a synthetic benchmark: the peak is shown, never judged
    synthetic = next(r for r in compare(envelope_from_record(RECORD), steady, tol)["rows"] if r["dimension"] == "capacity")
    assert synthetic["drifted"] is None and synthetic["live"] == 1.6 and synthetic["qualified"] is None
    assert synthetic["note"].startswith("shown only: the qualifying benchmark replayed no recorded workload")


def test_a_prefix_cache_hit_rate_below_the_replays_is_a_drift() -> None:
    """A champion whose benchmark replayed a recorded workload keeps the server's prefix-cache hit rate
    during the replay (``workload.prefix_hit_rate``): live more than 0.1 below it drifts (more of each
    prompt is prefilled than was qualified); above it, or within 0.1, does not. Before, the row was
    shown only, whatever the record held."""
    env, tol = envelope_from_record({**REPLAYED, "workload": {**REPLAYED["workload"], "prefix_hit_rate": 0.7}}), \
        parse_tolerance(None)
    assert env.prefix_hit_rate == 0.7 and tol["prefix_cache"] == 0.1
    steady = Live(prompt_tokens=210, output_tokens=95, rps=3.0, replicas=2, ttft_p99_ms=110, prefix_hit_rate=0.65,
                  window_s=1800, peak_rps=3.2, peak_rps_per_replica=1.6, peak_window_s=120)
    ok = compare(env, steady, tol)
    row = next(r for r in ok["rows"] if r["dimension"] == "prefix_cache")
    assert ok["drifted"] == [] and row["drifted"] is False and row["qualified"] == 0.7
    assert row["note"] == "at least the replay's rate - 0.1 (less of each prompt found in the cache: more prefill)"
    colder = compare(env, Live(**{**steady.__dict__, "prefix_hit_rate": 0.5}), tol)
    assert colder["drifted"] == ["prefix_cache"] and colder["requalify"]
    assert compare(env, Live(**{**steady.__dict__, "prefix_hit_rate": 0.95}), tol)["drifted"] == []
    assert compare(env, Live(**{**steady.__dict__, "prefix_hit_rate": 0.5}),
                   parse_tolerance('{"prefix_cache": 0.25}'))["drifted"] == []
    idle = next(r for r in compare(env, Live(**{**steady.__dict__, "prefix_hit_rate": None}), tol)["rows"]
                if r["dimension"] == "prefix_cache")
    assert idle["drifted"] is None and idle["note"] == "no prefix-cache queries in the window"
    # a synthetic benchmark, or a rate that is not one: shown only
    for record in (RECORD, {**REPLAYED, "workload": {"prefix_hit_rate": 1.5}},
                   {**REPLAYED, "workload": {"prefix_hit_rate": True}}):
        row = next(r for r in compare(envelope_from_record(record), steady, tol)["rows"] if r["dimension"] == "prefix_cache")
        assert row["drifted"] is None and row["note"] == "shown only: the qualifying benchmark recorded none"

def test_a_recorded_peak_counted_in_other_windows_is_not_compared_with_the_live_one() -> None:
    """A capacity from a fingerprint written before per-window peaks (its peak over the rate series'
    10-s windows) or from a trace shorter than 120 s: the watch still counts 120-s windows, names both
    windows and gives no live / recorded multiple (a 10-s peak is higher than the 120-s peak of the same
    traffic); the drift against the goodput at the SLO does not depend on it and still holds."""
    old = envelope_from_record({**REPLAYED, "slo": {**REPLAYED["slo"], "capacity": {**CAPACITY, "window_s": 10}}})
    assert peak_window(old, 1800) == 120
    steady = Live(prompt_tokens=210, output_tokens=95, rps=3.0, replicas=2, ttft_p99_ms=110, prefix_hit_rate=0.4,
                  window_s=1800, peak_rps=3.2, peak_rps_per_replica=1.6, peak_window_s=120)
    row = next(r for r in compare(old, steady, parse_tolerance(None))["rows"] if r["dimension"] == "capacity")
    assert row["drifted"] is False and row["peak"]["alike"] is False and row["peak"]["x_recorded_peak"] is None
    assert row["peak"]["recorded_window_s"] == 10 and row["peak"]["window_s"] == 120
    assert row["note"] == ("at most the goodput at the SLO x1.00, headroom 20%; live peak 3.2 req/s in 120-s windows, "
                           "not compared with your recorded peak of 1 req/s in 10-s windows: a peak over other windows "
                           "is another figure, and a fingerprint of a trace of at least 120 s records its 120-s peak "
                           "(qualified: 2x a replica, 4x at 2 replicas)")
    burst = compare(old, Live(**{**steady.__dict__, "peak_rps": 5.0, "peak_rps_per_replica": 2.5}), parse_tolerance(None))
    assert burst["drifted"] == ["capacity"]


@pytest.mark.parametrize("text, said", [("{", "--tolerance: is not JSON"), ("[1]", "--tolerance: is not a JSON object"),
                                        ('{"ttft": -1}', "--tolerance.ttft"), ('{"latency": 1}', "is not a dimension"),
                                        ('{"prefix_cache": -0.1}', "--tolerance.prefix_cache: must be a finite number in [0, 1]"),
                                        ('{"prefix_cache": 2}', "points of hit rate between 0 and 1"),
                                        ('{"input_distribution": 1.5}', "a share of requests between 0 and 1"),
                                        ('{"output_distribution": -0.1}', "--tolerance.output_distribution")])
def test_bad_tolerance_is_one_line(text: str, said: str) -> None:
    with pytest.raises(ShipyardError, match=re.escape(said)):
        parse_tolerance(text)


def test_steady_traffic_is_within_the_envelope(prometheus: str, tmp_path: Path) -> None:
    proc = _watch(tmp_path, "--prometheus", prometheus, "--model-name", "steady", "-o", "json")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out = json.loads(proc.stdout)
    rows = {r["dimension"]: r for r in out["rows"]}
    assert out["verdict"] == "within the envelope"
    assert rows["input_length"]["live"] == pytest.approx(200.0) and rows["output_length"]["live"] == pytest.approx(100.0)
    assert rows["load"]["live"] == pytest.approx(1.5, rel=0.05)  # 3 req/s over 2 replicas
    assert rows["ttft"]["live"] < 100.0 and rows["ttft"]["qualified"] == pytest.approx(100.0, rel=0.05)
    assert rows["prefix_cache"]["live"] == pytest.approx(0.5)
    assert rows["input_distribution"]["drifted"] is False and rows["input_distribution"]["distance"] == pytest.approx(0)


def test_longer_prompts_at_a_heavier_load_are_named_and_a_requalification_proposed(prometheus: str,
                                                                                 tmp_path: Path) -> None:
    proc = _watch(tmp_path, "--prometheus", prometheus, "--model-name", "drifted", "--window", "20m")
    print(proc.stdout)
    assert proc.returncode == 1, proc.stderr + proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("watch w8a8-int8 over 20 min: drifted (input_length, load")
    assert any(line.startswith("  input length (tokens): DRIFT live 500 vs qualified 200 x2.50") for line in lines)
    assert lines[-1].startswith("re-qualify on this traffic: shipyard submit optimize-and-deploy ")
    assert '"prompt_tokens":500' in lines[-1]


def test_a_reshaped_prompt_distribution_is_read_from_vllms_buckets_and_named(prometheus: str, tmp_path: Path) -> None:
    """``reshaped`` serves the qualified mean prompt (200 tokens) as half 20- and half 380-token prompts:
    the mean row holds, the distribution row drifts at the 20-token edge of vLLM's histogram."""
    proc = _watch(tmp_path, "--prometheus", prometheus, "--model-name", "reshaped", "-o", "json")
    assert proc.returncode == 1, proc.stderr + proc.stdout
    out = json.loads(proc.stdout)
    rows = {r["dimension"]: r for r in out["rows"]}
    assert out["drifted"] == ["input_distribution"]
    assert rows["input_length"]["live"] == pytest.approx(200.0) and rows["input_length"]["drifted"] is False
    assert rows["input_distribution"]["edge"] == 20.0 and rows["input_distribution"]["live"] == pytest.approx(0.5)
    assert rows["output_distribution"]["drifted"] is False


def test_bursts_past_the_qualified_capacity_are_named_though_the_mean_load_is_within(prometheus: str,
                                                                                     tmp_path: Path) -> None:
    """``bursty`` averages 0.9 req/s a replica over 30 minutes (the knee is 2) but took 2.5 for six
    minutes: past the goodput at the SLO the replayed workload qualified (2 req/s a replica)."""
    proc = _watch(tmp_path, "--prometheus", prometheus, "--model-name", "bursty", "-o", "json", record=REPLAYED)
    assert proc.returncode == 1, proc.stderr + proc.stdout
    out = json.loads(proc.stdout)
    rows = {r["dimension"]: r for r in out["rows"]}
    assert out["drifted"] == ["capacity"] and rows["load"]["drifted"] is False
    assert rows["load"]["live"] == pytest.approx(0.9, rel=0.1)
    cap = rows["capacity"]
    assert cap["live"] == pytest.approx(2.5, rel=0.02) and cap["qualified"] == 2.0
    assert cap["peak"]["live_peak_rps"] == pytest.approx(5.0, rel=0.02) and cap["peak"]["window_s"] == 120
    assert cap["peak"]["x_recorded_peak"] == pytest.approx(5.0, rel=0.02) and cap["peak"]["headroom"] < 0
    assert cap["peak"]["workload_digest"] == WORKLOAD
    text = _watch(tmp_path, "--prometheus", prometheus, "--model-name", "bursty", record=REPLAYED)
    print(text.stdout)
    assert text.returncode == 1 and text.stdout.startswith("watch w8a8-int8 over 30 min: drifted (capacity)")
    assert "  peak load per replica (req/s): DRIFT live 2.5 vs qualified 2 x1.25  (at most the goodput at the SLO " \
           "x1.00, 25% past it; live peak 5 req/s = 5x your recorded peak of 1 req/s" in text.stdout
    # the qualified load, steady at 1.5 req/s a replica: within the capacity, with its headroom
    steady = _watch(tmp_path, "--prometheus", prometheus, "--model-name", "steady", "-o", "json", record=REPLAYED)
    assert steady.returncode == 0, steady.stderr + steady.stdout
    row = next(r for r in json.loads(steady.stdout)["rows"] if r["dimension"] == "capacity")
    assert row["drifted"] is False and row["peak"]["headroom"] == pytest.approx(0.25, abs=0.02)
    # without a replayed workload the peak is shown only
    plain = _watch(tmp_path, "--prometheus", prometheus, "--model-name", "bursty", "-o", "json")
    assert plain.returncode == 0, plain.stderr + plain.stdout
    assert next(r for r in json.loads(plain.stdout)["rows"] if r["dimension"] == "capacity")["drifted"] is None


def test_a_model_prometheus_has_no_series_for_is_one_line(prometheus: str, tmp_path: Path) -> None:
    proc = _watch(tmp_path, "--prometheus", prometheus, "--model-name", "nope")
    assert proc.returncode == 2 and proc.stderr.startswith("shipyard: error: --prometheus: no series for "), proc.stderr
    assert len(proc.stderr.splitlines()) == 1


def test_a_window_or_peak_window_shorter_than_two_scrapes_is_one_line_naming_it(prometheus: str,
                                                                                tmp_path: Path) -> None:
    """``sparse`` is scraped every 5 minutes: a 4-minute window holds one scrape, and the 120-s windows
    the peak is counted in hold one whatever the window. Before, rate() over them had no series and
    the watch said the model had none ("check the model name label")."""
    short = _watch(tmp_path, "--prometheus", prometheus, "--model-name", "sparse", "--window", "4m")
    assert short.returncode == 2, short.stderr + short.stdout
    assert short.stderr.startswith("shipyard: error: --window: 240 s holds 1 scrape of sparse's vLLM pods: shorter "
                                   "than two scrape intervals"), short.stderr
    peak = _watch(tmp_path, "--prometheus", prometheus, "--model-name", "sparse", "--window", "30m")
    assert peak.returncode == 2, peak.stderr + peak.stdout
    assert peak.stderr.startswith(f"shipyard: error: --prometheus: {prometheus} scrapes sparse's vLLM pods about "
                                  "every 3"), peak.stderr
    assert "counted in 120-s windows, which then hold 1 sample" in peak.stderr
    assert "scrape the vLLM pods at least every 60 s" in peak.stderr
    assert len(short.stderr.splitlines()) == len(peak.stderr.splitlines()) == 1
    # the watch pipeline names its own settings
    from shipyard.serving.watch import read_live

    with pytest.raises(ShipyardError) as err:
        read_live(PrometheusAPI(prometheus, field="prometheus_url"), "sparse", 240, window_field="watch_config.window")
    assert err.value.field == "watch_config.window"
    with pytest.raises(ShipyardError) as err:
        read_live(PrometheusAPI(prometheus, field="prometheus_url"), "sparse", 1800, window_field="watch_config.window")
    assert err.value.field == "prometheus_url"
    # the same traffic scraped every 15 s reads
    assert _watch(tmp_path, "--prometheus", prometheus, "--model-name", "steady", "--window", "4m").returncode == 0


def test_scrapes_outside_the_windows_steps_are_named_not_no_series(prometheus: str) -> None:
    """``gone``'s two scrapes lie inside the watch window but before its first 120-s peak window at a
    30-s step (they ended at the window's start; a series that began after the last step reads
    alike): one line saying so, not "no series", which reads as a model Prometheus does not know."""
    from shipyard.serving.watch import read_live

    window = math.ceil(time.time() - GONE_AT[0]) + 20  # its start 20 s before the first scrape: the first step
    with pytest.raises(ShipyardError) as err:  # (aligned to 30 s) is then 5 s past the second, plus 120 s
        read_live(PrometheusAPI(prometheus), "gone", window)
    assert str(err.value).startswith("--prometheus: no scrapes of gone's vLLM pods at the window's 30-s steps, though "
                                     "the window holds scrapes of the vLLM pods: no 120-s window ending at one of "
                                     "those steps holds enough of them"), str(err.value)
    assert "widen the window" in str(err.value)


def test_every_vllm_series_the_watch_reads_is_one_the_pinned_vllm_serves(prometheus: str) -> None:
    """Each query the watch sends names only series the pinned vLLM's /metrics serves (its stat logger's
    declarations, :func:`conftest.vllm_series`): a name vLLM does not serve reads as no traffic."""
    from conftest import vllm_series

    from shipyard.serving.watch import read_live

    sent: list[str] = []

    class Recorded(PrometheusAPI):
        def instant(self, query: str, at: float | None = None) -> list[dict[str, Any]]:
            sent.append(query)
            return super().instant(query, at)

    read_live(Recorded(prometheus), "steady", 1800)
    used = {n for q in sent for n in re.findall(r"vllm:[a-zA-Z0-9_:]+", q)}
    assert {"vllm:request_prompt_tokens_sum", "vllm:time_to_first_token_seconds_bucket",
            "vllm:request_prompt_tokens_bucket", "vllm:request_generation_tokens_bucket",
            "vllm:prefix_cache_queries_total", "vllm:request_success_total"} <= used
    assert sorted(used - set(vllm_series())) == []


def test_a_page_that_is_not_the_api_and_a_silent_port_are_one_line(prometheus: str, tmp_path: Path) -> None:
    page = _watch(tmp_path, "--prometheus", f"{prometheus}/graph", "--model-name", "steady")
    assert page.returncode == 2 and "not Prometheus's API" in page.stderr, page.stderr
    silent = _watch(tmp_path, "--prometheus", f"http://127.0.0.1:{free_port()}", "--model-name", "steady")
    assert silent.returncode == 3 and "is unreachable" in silent.stderr, silent.stderr
    assert len(page.stderr.splitlines()) == len(silent.stderr.splitlines()) == 1


def test_prometheus_values_are_numbers_or_nan() -> None:
    from shipyard.serving.prometheus import _number

    assert _number("1.5") == 1.5 and _number("+Inf") == math.inf and math.isnan(_number("NaN"))
    with pytest.raises(ShipyardError, match="is not an http"):
        PrometheusAPI("prometheus:9090")


# --------------------------------------------------------------- the envelope the model carries


#: the base model the champion was built from, as the user named it
BASE = "hf://HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def attested(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A modelcar (OCI layout) signed by the real package and attest steps over the real candidate
    gates' champion (report_fixtures' w8a8-int8: knee concurrent@2 at 1.11 req/s, 32/16 tokens): its ``uri``,
    the public key (``key``) and another key (``other``); ``selection``: the select step's folder, which
    names the base (:data:`BASE`, pinned to a commit)."""
    from report_fixtures import judged

    from shipyard.oci.attestation import generate_key_pair
    from shipyard.steps.attest import attest_package
    from shipyard.steps.package import package_model
    from shipyard.steps.select import select_champion

    tmp = tmp_path_factory.mktemp("attested")
    assert judged(tmp)["passed"]
    select_champion([str(tmp / "w8a8-int8-gates")], "size", str(tmp / "selection"), str(tmp / "r.md"), str(tmp / "r.html"),
                    base_uri=BASE, base_pinned_uri=f"{BASE}@{'c' * 40}", base_fingerprint=f"hf:{'c' * 40}")
    model = tmp / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    (model / "model.safetensors").write_bytes(b"weights" * 64)
    (model / "tokenizer.json").write_text('{"version": "1.0"}')
    private, public = generate_key_pair(tmp / "keys")
    _, other = generate_key_pair(tmp / "other-keys")
    car = package_model(str(model), str(tmp / "champion"))
    attest_package(str(tmp / "champion"), str(tmp / "selection"), key_file=str(private), model_dir=str(model),
                   base_model_uri="hf://HuggingFaceTB/SmolLM2-135M-Instruct")
    return {"uri": car["uri"], "key": str(public), "other": str(other), "selection": str(tmp / "selection")}


def _watch_model(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shipyard.cli.main", "watch", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_envelope_travels_with_the_model(prometheus: str, attested: dict[str, str]) -> None:
    """No run folder: the served model's signed SLO evidence is the envelope; a drift proposes the
    re-qualification from the base model its signed provenance names."""
    steady = _watch_model("--prometheus", prometheus, "--model-name", "attested", "--model", attested["uri"],
                          "--key", attested["key"], "-o", "json")
    assert steady.returncode == 0, steady.stderr + steady.stdout
    out = json.loads(steady.stdout)
    rows = {r["dimension"]: r for r in out["rows"]}
    assert out["verdict"] == "within the envelope" and out["model_uri"] == attested["uri"]
    assert rows["input_length"]["qualified"] == 32.0 and rows["output_length"]["qualified"] == 16.0
    # the signed evidence carries the per-request lengths: the distributions are compared, not skipped
    assert rows["input_distribution"]["drifted"] is False and rows["output_distribution"]["drifted"] is False
    assert rows["input_distribution"]["distance"] == pytest.approx(0)
    assert rows["load"]["qualified"] == 1.11 and rows["load"]["live"] == pytest.approx(0.5, rel=0.05)
    # the signed curve between its levels (0.3623 req/s: 312 ms, 1.11 req/s: 110.5 ms) at the live load
    live = rows["load"]["live"]
    assert rows["ttft"]["qualified"] == pytest.approx(312 + (110.5 - 312) * (live - 0.3623) / (1.11 - 0.3623))
    drifted = _watch_model("--prometheus", prometheus, "--model-name", "drifted", "--model", attested["uri"],
                           "--key", attested["key"])
    assert drifted.returncode == 1, drifted.stderr + drifted.stdout
    print(drifted.stdout)
    assert "drifted (input_length, output_length, load, ttft, input_distribution, output_distribution)" \
        in drifted.stdout.splitlines()[0]
    last = drifted.stdout.splitlines()[-1]
    assert last.startswith("re-qualify on this traffic: shipyard submit optimize-and-deploy "
                           "--param model_uri=hf://HuggingFaceTB/SmolLM2-135M-Instruct "), last


def test_evidence_another_key_signed_is_no_envelope(prometheus: str, attested: dict[str, str]) -> None:
    proc = _watch_model("--prometheus", prometheus, "--model-name", "attested", "--model", attested["uri"],
                        "--key", attested["other"])
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("shipyard: error: --model: its evidence does not verify (signatures: not signed by key ")
    tag = _watch_model("--prometheus", prometheus, "--model-name", "attested", "--model",
                       "oci://registry.example.com/shipyard/models:latest", "--key", attested["key"])
    assert tag.returncode == 2 and "--model" in tag.stderr and len(tag.stderr.splitlines()) == 1, tag.stderr


def test_the_watch_step_writes_the_report_and_names_what_drifted(prometheus: str, attested: dict[str, str],
                                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch pipeline's step, with the trust key from the cluster contract's variable."""
    from shipyard.steps.watch import watch_step

    monkeypatch.setenv("SHIPYARD_ATTESTATION_PUBLIC_KEY", Path(attested["key"]).read_text())
    out = watch_step(attested["uri"], prometheus, '{"window": "20m", "model_name": "drifted"}', "shipyard-llm",
                     str(tmp_path / "drift.md"), str(tmp_path / "drift.json"))
    assert out["drifted"][:3] == ["input_length", "output_length", "load"], out["drifted"]  # 500/100 tokens at 1.5 req/s
    assert json.loads((tmp_path / "drift.json").read_text())["verdict"] == "drifted"
    report = (tmp_path / "drift.md").read_text()
    assert report.startswith("# Drift watch: drifted\n") and f"Model: `{attested['uri']}`" in report
    assert "re-qualify on this traffic: " in report
    # the report's metadata and the MLflow record the wrapper sets and logs as they are (not in drift.json)
    drifted = ", ".join(out["drifted"])
    assert out["metadata"] == {"verdict": "drifted", "drifted": drifted.replace(", ", ","), "model_uri": attested["uri"],
                               "reason": f"drifted: {drifted}"}
    assert out["log"]["params"] == {"served_model_uri": attested["uri"], "model_name": "drifted"}
    assert out["log"]["metrics"]["drifted"] == 1.0 and out["log"]["metrics"]["load.qualified"] > 0
    assert out["log"]["tags"]["shipyard.watch.requalify"] == out["requalify"][:5000]
    assert out["log"]["artifacts"] == {"drift.md": str(tmp_path / "drift.md"), "drift.json": str(tmp_path / "drift.json")}
    assert not {"log", "metadata"} & set(json.loads((tmp_path / "drift.json").read_text()))
    # served_model_uri empty and no production version in MLflow: one line, nothing written
    with pytest.raises(ShipyardError, match="served_model_uri: is empty and shipyard-llm has no 'production' version"):
        watch_step("", prometheus, "", "shipyard-llm", str(tmp_path / "n.md"), str(tmp_path / "n.json"),
                   tracking_uri=f"file://{tmp_path / 'mlruns'}", registered_model_name="shipyard-llm")
    assert not (tmp_path / "n.md").exists() and not (tmp_path / "n.json").exists()


@pytest.mark.parametrize("config, said", [
    ('{"window": "5m", "tolerance": {"ttft": 0.2}}', None),
    ('{"window": "half an hour"}', "watch_config.window"),
    ('{"window": "30s"}', "watch_config.window: 30 s is shorter than two scrape intervals"),
    ('{"tolerance": {"latency": 1}}', "watch_config.tolerance.latency: is not a dimension"),
    ('{"selector": "namespace=llm"}', "watch_config.selector"),
    ('{"model": "x"}', "watch_config.model: is not a setting"),
    ('{"model_name": 3}', "watch_config.model_name: must be a string"),
])
def test_watch_config_is_checked_key_by_key(config: str, said: str | None) -> None:
    from shipyard.serving.watch import parse_watch_config

    if said is None:
        cfg = parse_watch_config(config, "shipyard-llm")
        assert cfg["window_s"] == 300 and cfg["tolerance"]["ttft"] == 0.2 and cfg["model_name"] == "shipyard-llm"
        return
    with pytest.raises(ShipyardError, match=said.replace(".", r"\.")):
        parse_watch_config(config, "shipyard-llm")


def test_the_watch_pipeline_runs_locally_and_its_report_names_the_drift(prometheus: str, attested: dict[str, str],
                                                                         tmp_path: Path) -> None:
    """``shipyard run --local watch``: pre-flight, the watch step (kfp.local), the MLflow run; a drift
    is the run's finding, not its failure."""
    import os

    env = {**os.environ, "SHIPYARD_ATTESTATION_PUBLIC_KEY_FILE": attested["key"]}
    proc = subprocess.run([sys.executable, "-m", "shipyard.cli.main", "run", "--local", "watch", "--work-dir",
                           str(tmp_path / "work"), "--param", f"prometheus_url={prometheus}",
                           "--param", f"served_model_uri={attested['uri']}",
                           "--param", 'watch_config={"window": "20m", "model_name": "drifted"}'],
                          capture_output=True, text=True, timeout=600, check=False, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "work" / "run-summary.json").read_text())
    assert summary["status"] == "SUCCESS", summary["steps"]
    steps = {s["task"].rsplit("/", 1)[-1]: s for s in summary["steps"]}
    assert steps["watch-production"]["status"] == "SUCCESS", steps
    report = next((tmp_path / "work").rglob("report.md")).read_text()
    assert report.startswith("# Drift watch: drifted") and "input length (tokens): DRIFT live 500 vs qualified 32" in report
    assert [line for line in proc.stdout.splitlines() if "SUCCESS  watch production" in line
            and line.endswith("drifted (input_length,output_length,load,ttft,input_distribution,output_distribution)")], \
        proc.stdout
    # the run's summary table
    assert "> drifted: input_length, output_length, load, ttft, input_distribution, output_distribution" in proc.stdout


# --- --requalify: the proposed run, submitted through `shipyard submit`'s client to the KFP double -------------

KFP_TOKEN = "s3cret-kfp-token"
#: the run's own parameters (the modelcar's registry) and the base the champion was built from
RUN = ("--param", "registry=quay.io", "--param", "repository=your-org/models",
       "--param", "model_uri=hf://HuggingFaceTB/SmolLM2-135M-Instruct")


@pytest.fixture()
def kfp() -> Iterator[KfpDouble]:
    double = KfpDouble(token=KFP_TOKEN).start()
    yield double
    double.stop()


def test_requalify_submits_exactly_the_proposed_run(prometheus: str, tmp_path: Path, kfp: KfpDouble) -> None:
    """``watch --requalify`` on a drift: the proposed pipeline with the proposed parameters (and the
    user's registry) reaches KFP, and the run id and URL are printed; the exit stays 1 (drifted)."""
    proc = _watch(tmp_path, "--prometheus", prometheus, "--model-name", "drifted", "--requalify", "--host", kfp.url,
                  "--token", KFP_TOKEN, "--experiment", "requalify", *RUN, "-o", "json")
    assert proc.returncode == 1, proc.stderr + proc.stdout
    out = json.loads(proc.stdout)
    proposed = out["requalify_run"]
    # a candidate.json names no base: the proposal starts from the user's --param model_uri
    assert proposed["pipeline"] == "optimize-and-deploy" and set(proposed["params"]) == {"benchmark_config", "model_uri"}
    assert proposed["params"]["model_uri"] == BASE and f"--param model_uri={BASE} " in out["requalify"]
    assert f"--param benchmark_config={shlex.quote(proposed['params']['benchmark_config'])}" in out["requalify"]
    assert [kind for kind, _, _ in kfp.requests] == ["upload", "experiment", "run"] and not kfp.rejected
    (ir,) = kfp.uploaded
    assert next(yaml.safe_load_all(ir))["pipelineInfo"]["name"] == "optimize-and-deploy"
    ((run_id, run),) = kfp.runs.items()
    assert run["runtime_config"]["parameters"] == {
        "benchmark_config": proposed["params"]["benchmark_config"], "registry": "quay.io",
        "repository": "your-org/models", "model_uri": "hf://HuggingFaceTB/SmolLM2-135M-Instruct"}
    assert run["display_name"] == "requalify drifted: input_length, load, input_distribution"
    assert kfp.experiments[run["experiment_id"]]["display_name"] == "requalify"
    record = out["requalification"]
    assert record["submitted"] is True and record["run_id"] == run_id and record["url"].endswith(run_id)
    # the text: the verdict and the proposal, then the run's id and URL
    text = _watch(tmp_path, "--prometheus", prometheus, "--model-name", "drifted", "--requalify", "--host", kfp.url,
                  "--token", KFP_TOKEN, *RUN)
    print(text.stdout)
    assert text.returncode == 1, text.stderr + text.stdout
    (second,) = set(kfp.runs) - {run_id}
    lines = text.stdout.splitlines()
    assert lines[-3].startswith("re-qualify on this traffic: shipyard submit optimize-and-deploy ")
    assert lines[-2].startswith(f"re-qualification run {second} submitted (optimize-and-deploy-")
    assert lines[-1] == f"run: {kfp.url}/#/runs/details/{second}"


def test_requalify_within_the_envelope_submits_nothing(prometheus: str, tmp_path: Path, kfp: KfpDouble) -> None:
    proc = _watch(tmp_path, "--prometheus", prometheus, "--model-name", "steady", "--requalify", "--host", kfp.url,
                  "--token", KFP_TOKEN, *RUN)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert proc.stdout.splitlines()[-1] == "within the envelope: no re-qualification run submitted"
    assert kfp.requests == [] and kfp.runs == {}


@pytest.mark.parametrize("how", ["refused", "unreachable"])
def test_a_requalification_kfp_refuses_or_cannot_be_reached_is_one_line(prometheus: str, tmp_path: Path,
                                                                        kfp: KfpDouble, how: str) -> None:
    """The verdict is printed; the submit's failure is one line with exit 4 (not 3: that is Prometheus)."""
    host, token = (kfp.url, "wrong") if how == "refused" else (f"http://127.0.0.1:{free_port()}", KFP_TOKEN)
    proc = _watch(tmp_path, "--prometheus", prometheus, "--model-name", "drifted", "--requalify", "--host", host,
                  "--token", token, *RUN)
    assert proc.returncode == 4, proc.stderr + proc.stdout
    assert proc.stdout.startswith("watch w8a8-int8 over 30 min: drifted (input_length, load")
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr
    said = "refused the credentials (401" if how == "refused" else "cannot reach"
    assert proc.stderr.startswith("shipyard: error: --host: ") and said in proc.stderr, proc.stderr
    assert "wrong" not in proc.stderr and kfp.runs == {}


def test_requalify_starts_from_the_base_the_model_provenance_names(prometheus: str, attested: dict[str, str],
                                                                   kfp: KfpDouble) -> None:
    """With ``--model`` the run's ``model_uri`` is the signed provenance's base; another one given is
    one line before Prometheus is read, and nothing reaches KFP."""
    run = ("--requalify", "--host", kfp.url, "--token", KFP_TOKEN, "--param", "registry=quay.io")
    proc = _watch_model("--prometheus", prometheus, "--model-name", "drifted", "--model", attested["uri"],
                        "--key", attested["key"], *run, "-o", "json")
    assert proc.returncode == 1, proc.stderr + proc.stdout
    out = json.loads(proc.stdout)
    ((run_id, submitted),) = kfp.runs.items()
    assert out["requalification"]["run_id"] == run_id
    assert submitted["runtime_config"]["parameters"] == {**out["requalify_run"]["params"], "registry": "quay.io"}
    assert out["requalify_run"]["params"]["model_uri"] == "hf://HuggingFaceTB/SmolLM2-135M-Instruct"
    other = _watch_model("--prometheus", prometheus, "--model-name", "drifted", "--model", attested["uri"],
                         "--key", attested["key"], *run, "--param", "model_uri=hf://org/another")
    assert other.returncode == 2 and other.stdout == "" and len(other.stderr.splitlines()) == 1, other.stderr
    assert other.stderr.startswith("shipyard: error: --param model_uri: is not the base the model's provenance names")
    assert len(kfp.runs) == 1


def test_requalify_starts_from_the_base_the_champion_record_names(prometheus: str, attested: dict[str, str],
                                                                  kfp: KfpDouble, tmp_path: Path) -> None:
    """With ``--champion`` the select step's record names the base (as the user gave it): the proposal
    and the submitted run start from it without ``--param model_uri``; one given wins, with a note; an
    older record that names none still needs it (one line, nothing reaches KFP)."""
    run = ("--requalify", "--host", kfp.url, "--token", KFP_TOKEN, "--param", "registry=quay.io",
           "--param", "repository=your-org/models")
    watch = ("--prometheus", prometheus, "--model-name", "drifted", "--champion")
    proc = _watch_model(*watch, attested["selection"], *run)
    assert proc.returncode == 1 and proc.stderr == "", proc.stderr + proc.stdout
    assert f"--param model_uri={BASE} --param benchmark_config=" in proc.stdout.splitlines()[-3]
    ((run_id, submitted),) = kfp.runs.items()
    assert submitted["runtime_config"]["parameters"]["model_uri"] == BASE
    other = _watch_model(*watch, attested["selection"], *run, "--param", "model_uri=hf://org/another", "-o", "json")
    assert other.returncode == 1, other.stderr + other.stdout
    assert other.stderr == f"note: --param model_uri overrides the base the champion's record names ({BASE})\n"
    assert json.loads(other.stdout)["requalify_run"]["params"]["model_uri"] == "hf://org/another"
    (second,) = set(kfp.runs) - {run_id}
    assert kfp.runs[second]["runtime_config"]["parameters"]["model_uri"] == "hf://org/another"
    older = tmp_path / "older"
    older.mkdir()
    doc = json.loads((Path(attested["selection"]) / "selection.json").read_text())
    (older / "selection.json").write_text(json.dumps({k: v for k, v in doc.items() if k != "base_model"}))
    old = _watch_model(*watch, str(older), *run)
    assert old.returncode == 2 and old.stdout == "" and len(old.stderr.splitlines()) == 1, old.stderr
    assert old.stderr.startswith("shipyard: error: --requalify: needs the base model, which a champion's record "
                                 "does not name")
    assert len(kfp.runs) == 2
