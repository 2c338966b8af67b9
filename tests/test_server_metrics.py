"""What the vLLM server held during each load level: vLLM's /metrics read while guidellm runs, and
each level's maxima and means over its own measured windows (every repeat)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from shipyard.benchmarking.guidellm import _level_name
from shipyard.benchmarking.server_metrics import (
    MetricsSampler,
    level_server_stats,
    parse_gauges,
    window_stats,
)
from shipyard.testing.loopback import LoopbackServer

#: a vLLM 0.32 /metrics answer, abridged (two engines: waiting and running add up, the KV share is the fuller one)
METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="model"} 3.0
vllm:num_requests_running{engine="1",model_name="model"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="model"} 2.0
vllm:num_requests_waiting{engine="1",model_name="model"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="model"} 0.125
vllm:kv_cache_usage_perc{engine="1",model_name="model"} 0.5
vllm:num_preemptions_total{engine="0",model_name="model"} 7.0
"""


def test_gauges_are_read_from_vllms_prometheus_text() -> None:
    assert parse_gauges(METRICS) == {"running": 4.0, "waiting": 2.0, "kv_cache_usage": 0.5}
    assert parse_gauges("# nothing here\nother_metric 1\n") == {}
    assert parse_gauges("vllm:num_requests_waiting{engine=\"0\"} NaN-ish\n") == {}


def test_each_level_gets_the_reads_inside_its_own_windows_every_repeat() -> None:
    reads = [(100.5, {"running": 1.0, "waiting": 0.0, "kv_cache_usage": 0.01}),
             (101.5, {"running": 1.0, "waiting": 0.0, "kv_cache_usage": 0.03}),
             (103.0, {"running": 9.0, "waiting": 9.0, "kv_cache_usage": 0.9}),  # between levels: nobody's
             (105.0, {"running": 4.0, "waiting": 1.0, "kv_cache_usage": 0.2}),
             (110.0, {"running": 2.0, "waiting": 0.0, "kv_cache_usage": 0.04})]  # concurrent@1's second repeat
    report = {"benchmarks": [
        {"config": {"strategy": {"type_": "concurrent", "streams": 1}}, "start_time": 100.0, "end_time": 102.0},
        {"config": {"strategy": {"type_": "concurrent", "streams": 4}}, "start_time": 104.0, "end_time": 106.0},
        {"config": {"strategy": {"type_": "concurrent", "streams": 1}}, "start_time": 109.0, "end_time": 111.0},
        {"config": {"strategy": {"type_": "concurrent", "streams": 8}}, "start_time": 120.0, "end_time": 121.0},
        {"config": {"strategy": {"type_": "concurrent", "streams": 2}}}]}  # no window: no figures
    held = level_server_stats(report, reads, lambda strategy: _level_name(strategy)[0])
    assert held == {
        "concurrent@1": {"reads": 3, "running_max": 2.0, "running_mean": 1.3333, "waiting_max": 0.0, "waiting_mean": 0.0,
                         "kv_cache_usage_max": 0.04, "kv_cache_usage_mean": 0.0267},
        "concurrent@4": {"reads": 1, "running_max": 4.0, "running_mean": 4.0, "waiting_max": 1.0, "waiting_mean": 1.0,
                         "kv_cache_usage_max": 0.2, "kv_cache_usage_mean": 0.2}}
    assert window_stats(reads, [(200.0, 201.0)]) is None


class _Metrics(BaseHTTPRequestHandler):
    answers: list[int] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.answers.append(1)
        if len(self.answers) == 2:  # one failed read is counted and skipped
            self.send_response(503)
            self.end_headers()
            return
        body = METRICS.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def metrics_server() -> Iterator[str]:
    _Metrics.answers = []
    with LoopbackServer(_Metrics) as server:
        yield server.url


def test_the_sampler_reads_metrics_while_the_block_runs_and_stops_after(metrics_server: str) -> None:
    with MetricsSampler(metrics_server, interval_s=0.05) as sampler:
        deadline = time.monotonic() + 10
        while len(sampler.reads) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    seen = len(_Metrics.answers)
    time.sleep(0.2)
    assert len(_Metrics.answers) == seen  # stopped with the block
    assert len(sampler.reads) >= 3 and sampler.failed == 1
    assert all(g == {"running": 4.0, "waiting": 2.0, "kv_cache_usage": 0.5} for _, g in sampler.reads)


def test_a_server_that_does_not_answer_costs_reads_not_the_benchmark() -> None:
    with MetricsSampler("http://127.0.0.1:9", interval_s=0.05, timeout_s=0.5) as sampler:
        time.sleep(0.3)
    assert sampler.reads == [] and sampler.failed >= 1
