"""Deploy sizing from measurements (shipyard.serving.sizing) and its wiring into the deploy step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from shipyard.serving.sizing import (
    apply_sizing,
    derive_sizing,
    find_knee,
    predicted_ready_seconds,
    scale_to_zero_warning,
    sizing_markdown,
)

GIB = 1024**3
SLO = {"ttft_p99_ms": 1000.0, "itl_p99_ms": 60.0, "max_error_rate": 0.01}


def level(load: int, ttft: float, itl: float, err: float = 0.0) -> dict[str, Any]:
    return {"name": f"concurrent@{load}", "strategy": "concurrent", "nominal_load": load, "requests_per_s": load / 2,
            "ttft_p50_ms": ttft / 2, "ttft_p99_ms": ttft, "itl_p50_ms": itl / 2, "itl_p99_ms": itl, "error_rate": err}


RECORD = {
    "recipe": "w8a8-int8", "passed": True,
    "levels": [level(1, 80, 20), level(8, 200, 30), level(32, 700, 55), level(64, 2400, 90)],
    "slo": {"thresholds": SLO},
    "planner": {"weights_bytes": 15 * GIB, "kv_cache_tokens": 200_000, "max_concurrency": 48},
    "startup": {"ready_seconds": 52.3, "weights_load_seconds": 0.3},
    "bench_config": {"profile": "concurrent", "prompt_tokens": 512, "output_tokens": 256},
}


def test_predicted_ready_matches_the_cited_8b_figures() -> None:
    # the seed: an 8B model (~15 GiB bf16) on an A10G, ~66 s default loader, 23-35 s with the Run:ai streamer
    assert predicted_ready_seconds(15 * GIB) == pytest.approx(66, abs=1)
    assert 23 <= predicted_ready_seconds(15 * GIB, runai=True) <= 35
    assert predicted_ready_seconds(None) is None


def test_knee_is_the_last_level_within_the_slo() -> None:
    knee = find_knee(RECORD["levels"], SLO)
    assert knee["level"]["nominal_load"] == 32 and knee["broke_at"]["nominal_load"] == 64 and knee["reached"]
    # an error rate over the SLO breaks it too; every level within: a lower bound
    assert find_knee([level(1, 80, 20), level(8, 200, 30, err=0.5)], SLO)["level"]["nominal_load"] == 1
    assert find_knee([level(1, 80, 20)], SLO)["reached"] is False


def test_derived_numbers_name_their_measurements_and_margins() -> None:
    sized = derive_sizing(RECORD, gpu_type="NVIDIA-A10G", tensor_parallel=1)
    probe = sized["startup_probe"]
    # max(52.3 measured, 66.0 predicted) x 2, rounded up to the 10 s probe period
    assert probe["predicted_ready_seconds"] == 66.0 and probe["startup_seconds"] == 140
    assert "measured 52.3 s" in probe["source"] and "x 2" in probe["source"]
    keda = sized["keda"]
    # 32 in flight at the knee, below max_num_seqs (256): no queue, so the trigger is on running requests;
    # margin: max(20 %, growth over 66 s at 10 %/min = 9.9 %) -> floor(32 x 0.8) = 25
    assert keda["metric"] == "vllm:num_requests_running" and keda["threshold"] == 25
    assert keda["margin"] == 0.2 and keda["knee_level"] == "concurrent@32" and keda["broke_at"] == "concurrent@64"
    assert keda["kv_cache_usage_at_knee"] == pytest.approx(32 * (512 + 128) / 200_000, abs=1e-4)
    assert sized["min_replicas"]["value"] == 1  # a 66 s cold start against a 1 s TTFT SLO
    decode = sized["wva"]["perfParms"]["decodeParms"]
    assert decode["beta"] > 0 and sized["wva"]["maxBatchSize"] == 48 and sized["wva"]["acc"] == "NVIDIA-A10G"
    # with max_num_seqs 16 a queue forms at the knee: the trigger moves to waiting requests
    queued = derive_sizing(RECORD, vllm_args={"max-num-seqs": 16})["keda"]
    assert queued["metric"] == "vllm:num_requests_waiting" and queued["waiting_at_knee"] == 16
    assert queued["threshold"] == 12


def test_the_probe_source_names_only_the_figures_there_are() -> None:
    unmeasured = {**RECORD, "startup": {}}
    source = derive_sizing(unmeasured)["startup_probe"]["source"]
    assert source == "predicted 66.0 s for 15.0 GiB of weights, default loader x 2", source
    nothing = {**RECORD, "startup": {}, "planner": {}}
    assert derive_sizing(nothing)["startup_probe"]["source"] == "no measured or predicted start-up: the 1 s floor x 2"


def test_user_values_win_and_the_rows_say_so() -> None:
    sized = derive_sizing(RECORD)
    params, rows = apply_sizing({"probes": {"startup_seconds": 900}, "scaling": {"mode": "keda", "threshold": 3}}, sized)
    assert params["probes"]["startup_seconds"] == 900
    assert params["scaling"]["threshold"] == 3 and params["scaling"]["metric"] == "vllm:num_requests_running"
    by_name = {r["name"]: r for r in rows}
    assert by_name["startup probe (seconds)"]["user_given"] and by_name["startup probe (seconds)"]["derived"] == 140
    assert by_name["KEDA threshold"]["user_given"] and not by_name["KEDA metric"]["user_given"]
    # nothing given: derived values; no scaling configured: autoscaling stays off
    params, rows = apply_sizing({}, sized)
    assert params == {"probes": {"startup_seconds": 140}} and len(rows) == 1
    # the report says so in words, explains the knee and writes the WVA fit as its formulas (issue 33)
    text = sizing_markdown(rows, sized)
    assert "**Autoscaling: not configured** (`deploy_config.scaling` is unset)" in text
    assert "The knee is the highest measured load level that meets the SLO" in text
    assert "decode ITL (ms) = alpha + beta x batch" in text and "{'decodeParms'" not in text
    _, rows = apply_sizing({"scaling": {"mode": "keda"}}, sized)
    assert "not configured" not in sizing_markdown(rows, sized)
    warn = scale_to_zero_warning({"scaling": {"mode": "keda", "min_replicas": 0}}, sized)
    assert warn.startswith("scale-to-zero breaks the SLO") and "66 s" in warn


def test_deploy_sizes_its_probe_and_keda_trigger_from_the_champion(tmp_path: Path) -> None:
    from shipyard.steps.deploy import run_deploy

    selection = tmp_path / "selection"
    selection.mkdir()
    (selection / "selection.json").write_text(json.dumps({"winner": "w8a8-int8", "candidates": [RECORD]}))
    config = {"preset": "aggregated", "scaling": {"mode": "keda", "max_replicas": 4}, "verify": {"enabled": False}}
    out = run_deploy(deploy_config=config, manifest_path=str(tmp_path / "m.yaml"), dry_run=True, name="llm",
                     namespace="team", model_uri="oci://quay.io/org/m@sha256:" + "a" * 64,
                     candidate=str(selection), summary_path=str(tmp_path / "summary.md"))
    docs = list(yaml.safe_load_all((tmp_path / "m.yaml").read_text()))
    text = json.dumps(docs)
    assert '"failureThreshold": 14' in text  # 140 s / 10 s period
    scaled = next(d for d in docs if d["kind"] == "ScaledObject")
    trigger = scaled["spec"]["triggers"][0]["metadata"]
    assert trigger["threshold"] == "25" and "vllm:num_requests_running" in trigger["query"]
    summary = (tmp_path / "summary.md").read_text()
    assert "## Sized from measurements" in summary and "max(measured 52.3 s" in summary
    assert "user value wins" not in summary and out["sizing"]["rows"][0]["used"] == 140


def test_oci_native_delivery_renders_an_image_volume_uri(tmp_path: Path) -> None:
    """KServe v0.20 (the vendored CRDs) takes oci+native:// (kserve#5558): an image volume instead of
    the modelcar sidecar; the rendered object still validates against the vendored schema."""
    from shipyard.core.errors import ShipyardError
    from shipyard.serving.kserve.config import parse_config
    from shipyard.serving.kserve.render import render
    from shipyard.serving.kserve.validate import require_valid

    uri = "oci://quay.io/org/m@sha256:" + "a" * 64
    docs = render(parse_config({"preset": "aggregated", "oci_delivery": "native"}, name="llm", model_uri=uri))
    require_valid(docs)
    assert docs[0]["spec"]["model"]["uri"] == "oci+native://quay.io/org/m@sha256:" + "a" * 64
    assert render(parse_config({"preset": "aggregated"}, name="llm", model_uri=uri))[0]["spec"]["model"]["uri"] == uri
    with pytest.raises(ShipyardError, match="oci_delivery"):
        parse_config({"oci_delivery": "native"}, name="llm", model_uri="s3://bucket/model")
    with pytest.raises(ShipyardError, match="oci_delivery"):
        parse_config({"oci_delivery": "volume"}, name="llm", model_uri=uri)


#: the champion's record after replaying a recorded workload (issue 35, item 4): the fingerprint's arrivals
#: (judge keeps them in workload.arrivals) and one replica's goodput at the SLO (slo.capacity, gates.capacity)
ARRIVALS = {"mean_rate_rps": 0.3, "peak_rate_rps": 0.6, "peak_to_mean": 2.0, "window_s": 10, "duration_s": 100.0,
            "interarrival_cv": 1.4, "rate_series_rps": [0.2, 0.3, 0.3, 0.6, 0.3, 0.2, 0.3, 0.25, 0.3, 0.35]}


def recorded(per_replica: float, arrivals: dict[str, Any] = ARRIVALS) -> dict[str, Any]:
    """The record as the gates write it: ``slo.capacity`` divides by the recorded peak of ``arrivals``
    (shipyard.benchmarking.workload.recorded_peak: here, without ``peaks_rps``, the rate series' 0.6 in 10-s windows)."""
    from shipyard.benchmarking.workload import recorded_peak

    peak, window = recorded_peak(arrivals)
    return {**RECORD, "workload": {"digest": "sha256:" + "c" * 64, "arrivals": arrivals},
            "slo": {"thresholds": SLO, "capacity": {"goodput_rps": per_replica, "x_recorded_peak": per_replica / peak,
                                                    "recorded_peak_rps": peak, "window_s": window}}}


def test_the_default_sizing_is_unchanged_without_a_recorded_workload() -> None:
    """No workload (or no level meeting the SLO, so no per-replica goodput): today's numbers exactly."""
    default = derive_sizing(RECORD)
    assert default["keda"] == {
        "margin": 0.2, "growth_per_minute": 0.1, "time_to_ready_seconds": 66.0, "metric": "vllm:num_requests_running",
        "threshold": 25, "knee_load": 32, "knee_level": "concurrent@32", "in_flight_at_knee": 32.0,
        "running_at_knee": 32.0, "waiting_at_knee": 0.0, "reached": True, "broke_at": "concurrent@64",
        "kv_cache_usage_at_knee": 0.1024,
        "source": "knee at concurrent@32 (TTFT p99 700 ms, ITL p99 55 ms within the SLO; concurrent@64 is not)"}
    assert default["min_replicas"] == {"value": 1, "time_to_ready_seconds": 66.0, "ttft_p99_slo_seconds": 1.0,
                                       "source": "a cold start takes about 66 s against a TTFT p99 SLO of 1 s"}
    assert "max_replicas" not in default and "recorded" not in default
    assert derive_sizing(recorded(0.0)) == default  # a workload but no goodput at the SLO: nothing to divide by
    params, rows = apply_sizing({"scaling": {"mode": "keda"}}, default)
    assert params["scaling"] == {"mode": "keda", "metric": "vllm:num_requests_running", "threshold": 25,
                                 "min_replicas": 1}
    assert [r["name"] for r in rows] == ["startup probe (seconds)", "KEDA metric", "KEDA threshold", "min_replicas"]
    assert "traffic growth assumed 10%/min over 66 s to ready" in sizing_markdown(rows, default)


def test_replicas_and_the_keda_margin_come_from_the_recorded_arrivals() -> None:
    sized = derive_sizing(recorded(0.5))
    keda = sized["keda"]
    # within 66 s (7 windows of 10 s) the rate rose from 0.2 (counted from the mean, 0.3) to the peak 0.6: x2,
    # so the margin is 1 - 1/2 = 50 % instead of 20 %, and the trigger fires at floor(32 x 0.5) = 16
    assert keda["recorded_rise"] == 2.0 and keda["margin"] == 0.5 and keda["threshold"] == 16
    assert "growth_per_minute" not in keda and "your recorded traffic, whose rate rose at most x2 within 66 s" in keda["source"]
    assert sized["min_replicas"]["value"] == 1 and sized["max_replicas"]["value"] == 2
    assert sized["max_replicas"]["source"] == "recorded peak 0.6 req/s in 10-s windows / 0.5 req/s per replica at the SLO -> 2 replicas"
    assert sized["min_replicas"]["source"].startswith("recorded mean 0.3 req/s / 0.5 req/s per replica at the SLO "
                                                      "-> 1 replica; a cold start takes about 66 s")
    params, rows = apply_sizing({"scaling": {"mode": "keda"}}, sized)
    assert params["scaling"] == {"mode": "keda", "metric": "vllm:num_requests_running", "threshold": 16,
                                 "max_replicas": 2, "min_replicas": 1}
    text = sizing_markdown(rows, sized)
    assert "| max_replicas | 2 | 2 | recorded peak 0.6 req/s in 10-s windows / 0.5 req/s per replica at the SLO -> 2 replicas |" in text
    assert "traffic growth from your recorded traffic, whose rate rose at most x2" in text and "growth assumed 10%/min" not in text
    assert "Replicas from your recorded traffic: one replica serves 0.5 req/s at the SLO" in text
    # a slower replica: the mean needs 2, the peak 3 (0.6 / 0.25 = 2.4); a user's max_replicas wins and caps min
    slow = derive_sizing(recorded(0.25))
    assert slow["min_replicas"]["value"] == 2 and slow["max_replicas"]["value"] == 3
    params, rows = apply_sizing({"scaling": {"mode": "keda", "max_replicas": 1}}, slow)
    assert params["scaling"]["max_replicas"] == 1 and params["scaling"]["min_replicas"] == 1
    assert next(r for r in rows if r["name"] == "max_replicas")["user_given"]


def test_max_replicas_divide_the_recorded_peak_the_capacity_divided() -> None:
    """The capacity counts the recorded peak in 120-s windows (shipyard.gates.capacity, the window
    shipyard watch counts); max_replicas divides that same peak, named with its window, not the rate
    series' 10-s peak (0.6, higher)."""
    record = recorded(0.25)
    record["slo"]["capacity"].update(recorded_peak_rps=0.4, window_s=120)
    sized = derive_sizing(record)
    assert sized["max_replicas"]["value"] == 2 and sized["max_replicas"]["recorded_peak_rps"] == 0.4  # 0.4 / 0.25
    assert sized["max_replicas"]["source"] == ("recorded peak 0.4 req/s in 120-s windows / 0.25 req/s per replica at "
                                               "the SLO -> 2 replicas")
    _, rows = apply_sizing({"scaling": {"mode": "keda"}}, sized)
    assert "the recorded peak 0.4 req/s in 120-s windows sets max_replicas" in sizing_markdown(rows, sized)


def test_the_keda_margin_rises_to_the_recorded_peak_the_capacity_divided_not_the_rate_series() -> None:
    """The rate series' 10-s windows rise x2 (0.3 -> 0.6) but the capacity's recorded peak is counted in
    60-s windows (peaks_rps; 0.333 req/s, 1.11x the mean): the margin's rise is counted in those windows and
    never passes that peak over the mean, so the trigger stays at the 20 % floor (25), not 50 % below the knee (16)."""
    from shipyard.benchmarking.workload import window_peaks

    arrivals = {**ARRIVALS, "peaks_rps": window_peaks(ARRIVALS["rate_series_rps"], 10)}
    assert arrivals["peaks_rps"] == {"10": 0.6, "60": 0.333333}
    sized = derive_sizing(recorded(0.5, arrivals))
    keda, traffic = sized["keda"], sized["recorded"]
    assert traffic["peak_rps"] == 0.333333 and traffic["peak_window_s"] == 60 and traffic["peak_to_mean"] == 1.11111
    # sliding 60-s means 0.317, 0.333, 0.325, 0.325, 0.283: the largest rise within 66 s is 0.333 / 0.317
    assert keda["recorded_rise"] == 1.0526 and keda["margin"] == 0.2 and keda["threshold"] == 25
    assert "counted like the recorded peak 0.333 req/s in 60-s windows" in keda["source"]
    assert "at most peak/mean 1.11" in keda["source"] and sized["max_replicas"]["value"] == 1
    # the rise is capped at the recorded peak over the mean even when the windows cannot be averaged
    capped = derive_sizing(recorded(0.5, {**ARRIVALS, "peaks_rps": {"10": 0.45}}))
    assert capped["keda"]["recorded_rise"] == 1.5 and capped["keda"]["margin"] == 0.333
    # one recorded peak: a record whose capacity names none is not sized from the rate series' own peak
    bare = recorded(0.5)
    del bare["slo"]["capacity"]["recorded_peak_rps"]
    assert "recorded" not in derive_sizing(bare) and derive_sizing(bare)["keda"]["margin"] == 0.2


def test_deploy_renders_the_replicas_of_the_recorded_traffic(tmp_path: Path) -> None:
    from shipyard.steps.deploy import run_deploy

    selection = tmp_path / "selection"
    selection.mkdir()
    (selection / "selection.json").write_text(json.dumps({"winner": "w8a8-int8", "candidates": [recorded(0.5)]}))
    run_deploy(deploy_config={"preset": "aggregated", "scaling": {"mode": "keda"}, "verify": {"enabled": False}},
               manifest_path=str(tmp_path / "m.yaml"), dry_run=True, name="llm", namespace="team",
               model_uri="oci://quay.io/org/m@sha256:" + "a" * 64, candidate=str(selection),
               summary_path=str(tmp_path / "summary.md"))
    scaled = next(d for d in yaml.safe_load_all((tmp_path / "m.yaml").read_text()) if d and d["kind"] == "ScaledObject")
    assert scaled["spec"]["minReplicaCount"] == 1 and scaled["spec"]["maxReplicaCount"] == 2
    assert scaled["spec"]["triggers"][0]["metadata"]["threshold"] == "16"
    assert "recorded peak 0.6 req/s in 10-s windows / 0.5 req/s per replica at the SLO -> 2 replicas" in (tmp_path / "summary.md").read_text()
