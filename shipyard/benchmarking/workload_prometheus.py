"""A workload fingerprint from what a cluster already records: vLLM's metrics in Prometheus.

No logging change is needed: vLLM exports (names as vLLM 0.32 registers them) the histograms
``vllm:request_prompt_tokens`` and ``vllm:request_generation_tokens`` (one observation per finished
request) and the counters ``vllm:prefix_cache_hits_total`` / ``vllm:prefix_cache_queries_total``
(tokens). :func:`fingerprint_from_prometheus` reads them over a window ``[start, end]`` through
Prometheus's HTTP API (:mod:`shipyard.serving.prometheus`: ``/api/v1/query`` for the window's increases, ``/api/v1/query_range`` for the
request-rate series), with an optional label ``selector`` (``{model_name="llm",namespace="prod"}``).

What it can and cannot know: the length distributions are vLLM's bucket counts (the joint
histogram is their product: the metrics keep no pairing of input with output, said by
``lengths.joint.independent``), the arrival rate is a series of ``step``-second windows (no
per-request gaps, so ``interarrival_cv`` is None and the rate series' own coefficient of variation
is kept; ``peaks_rps`` holds the peak windows that are whole numbers of steps and fit in the series,
``peaks_not_computed`` each other window of :data:`~shipyard.benchmarking.workload.PEAK_WINDOWS_S`
with why: the default 15-s step cannot see a 10-s peak, a step over 120 s none of them, so the
capacity and ``shipyard watch`` say why the watch's 120-s peak is missing; a step Prometheus has no
finite value for is a gap no peak window spans, ``rate_series_rps`` keeps only the steps with
one and ``rate_series_gaps`` where the others were, :func:`~shipyard.core.rates.series_gaps`,
so the deploy's sizing and a render read the series with its gaps), there are no
sessions, and the prefix-cache hit rate is the one the server *measured* (``prefix.measured``), not
a theoretical one. An empty window (no request finished in it, or no
vLLM series under the selector) is one line.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from shipyard.benchmarking.workload import (
    PEAK_WINDOWS_S,
    QUANTILES,
    SLO_CLASSES,
    WorkloadFingerprint,
    seal,
    window_for,
    window_peaks,
)
from shipyard.core.errors import ShipyardError
from shipyard.core.rates import series_gaps
from shipyard.serving.prometheus import PrometheusAPI

PROMPT = "vllm:request_prompt_tokens"
GENERATION = "vllm:request_generation_tokens"
HITS = "vllm:prefix_cache_hits_total"
QUERIES = "vllm:prefix_cache_queries_total"


def parse_time(value: str | float | int, field: str) -> float:
    """A time as Unix seconds: a number, or an ISO 8601 date and time (UTC unless it says otherwise)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        text = str(value).strip()
        try:
            seconds = float(text)
        except ValueError:
            try:
                when = datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                raise ShipyardError(field, f"{text[:40]!r} is neither Unix seconds nor an ISO 8601 time",
                                    "pass e.g. 1767225600 or 2026-01-01T00:00:00Z") from None
            seconds = (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    if not math.isfinite(seconds) or seconds < 0:
        raise ShipyardError(field, f"{value!r} is not a time", "pass Unix seconds or an ISO 8601 time")
    return seconds


def _selector(selector: str) -> str:
    text = (selector or "").strip()
    if text and not (text.startswith("{") and text.endswith("}") and "\n" not in text):
        raise ShipyardError("--selector", f"{text[:60]!r} is not a label selector",
                            'pass labels in braces, e.g. {model_name="llm",namespace="prod"}')
    return text


def _scalar(api: PrometheusAPI, query: str, at: float) -> float | None:
    """The first sample's value, None when there is none or it is not finite."""
    result = api.instant(query, at)
    value = result[0]["value"] if result else math.nan
    return value if math.isfinite(value) else None


def _buckets(api: PrometheusAPI, metric: str, sel: str, window: int, at: float) -> list[tuple[float, float]]:
    """``(le, cumulative count)`` of a histogram's increase over the window, sorted by ``le``."""
    result = api.instant(f"sum by (le) (increase({metric}_bucket{sel}[{window}s]))", at)
    out = []
    for series in result:
        le, value = series["metric"].get("le"), series["value"]
        if le is None or not math.isfinite(value):
            continue
        out.append((math.inf if le == "+Inf" else float(le), max(value, 0.0)))
    return sorted(out)


def _bins(buckets: list[tuple[float, float]]) -> tuple[list[int], list[float]]:
    """Cumulative ``le`` buckets as whole-number bins ``[edges[i], edges[i + 1])`` and their counts:
    bucket ``(a, b]`` holds the whole numbers a+1..b. The +Inf bucket, empty when vLLM's buckets
    reach the context length, is given the width of the last finite one."""
    edges, counts, prev_c = [0], [], 0.0
    for le, cum in buckets:
        hi = int(math.floor(le)) + 1 if math.isfinite(le) else max(2 * edges[-1], edges[-1] + 1)
        if hi <= edges[-1]:
            continue
        edges.append(hi)
        counts.append(max(cum - prev_c, 0.0))
        prev_c = cum
    return edges, counts


def _quantiles(edges: list[int], counts: list[float]) -> dict[str, float] | None:
    total = sum(counts)
    if total <= 0:
        return None
    out: dict[str, float] = {}
    for q in QUANTILES:
        target, cum = q * total, 0.0
        for i, c in enumerate(counts):
            if c > 0 and cum + c >= target:
                lo, hi = edges[i], max(edges[i + 1] - 1, edges[i])
                out[f"p{round(q * 100)}"] = round(lo + (hi - lo) * ((target - cum) / c), 6)
                break
            cum += c
        else:
            out[f"p{round(q * 100)}"] = float(edges[-1] - 1)
    mids = [(edges[i] + max(edges[i + 1] - 1, edges[i])) / 2 for i in range(len(counts))]
    out["mean"] = round(sum(m * c for m, c in zip(mids, counts, strict=True)) / total, 6)
    return out


def _points(values: list[tuple[float, float]], first: float, step_s: int, end: float) -> list[float | None]:
    """The rate series at each query step from ``first`` to ``end``, by timestamp: None where
    Prometheus gave no point or a non-finite one (a gap, never closed up)."""
    out: list[float | None] = [None] * (int((end - first) // step_s) + 1 if end >= first else 0)
    for t, v in values:
        i = round((t - first) / step_s)
        if 0 <= i < len(out) and math.isfinite(v):
            out[i] = round(max(v, 0.0), 6)
    return out


def _longest_run(points: list[float | None]) -> int:
    """The most consecutive points with a value: the longest window the series can see."""
    best = n = 0
    for point in points:
        n = 0 if point is None else n + 1
        best = max(best, n)
    return best


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def peaks_not_computed(peaks: dict[str, float], step_s: int, points: int, gaps: int = 0) -> dict[str, str]:
    """Why each window of :data:`PEAK_WINDOWS_S` missing from ``peaks`` (:func:`window_peaks` of a
    rate series at ``step_s``-second steps whose longest run without a gap is ``points`` points,
    ``gaps`` steps having no point) has no peak, keyed like ``peaks_rps``."""
    out = {}
    held = (f"the longest run of the series without a gap holds {_count(points, 'point')} of {step_s} s "
            f"(Prometheus has no value at {_count(gaps, 'step')})" if gaps else
            f"the window holds {_count(points, 'point')} of {step_s} s")
    for window in PEAK_WINDOWS_S:
        if str(window) in peaks:
            continue
        out[str(window)] = (f"the {window}-s peak is not computed: {window} s is not a whole number of the {step_s}-s "
                            f"query steps (pass a --step dividing {window}, no shorter than the scrape interval)"
                            if window % step_s else
                            f"the {window}-s peak is not computed: {held}, fewer than {window // step_s}")
    return out


def _rate_cv(series: list[float]) -> float | None:
    """The coefficient of variation of the request-rate series (None for fewer than two steps or no traffic)."""
    if len(series) < 2 or sum(series) <= 0:
        return None
    m = sum(series) / len(series)
    return round(math.sqrt(sum((x - m) ** 2 for x in series) / len(series)) / m, 6)


def _measured_prefix(api: PrometheusAPI, sel: str, window: int, t1: float,
                     block_size: int | None) -> dict[str, Any] | None:
    """The prefix-cache hit rate vLLM's counters measured over the window (None when they are absent)."""
    hits = _scalar(api, f"sum(increase({HITS}{sel}[{window}s]))", t1)
    queries = _scalar(api, f"sum(increase({QUERIES}{sel}[{window}s]))", t1)
    if hits is None or not queries:
        return None
    return {"block_size": block_size, "measured": True, "hit_rate_tokens": round(hits / queries, 6),
            "hit_tokens": round(hits, 3), "query_tokens": round(queries, 3)}


def fingerprint_from_prometheus(url: str, *, start: str | float, end: str | float, selector: str = "",
                                block_size: int | None = None, slo_class: str = "interactive",
                                step: int | None = None, max_model_len: int | None = None) -> WorkloadFingerprint:
    """The fingerprint of the vLLM traffic Prometheus recorded between ``start`` and ``end`` (see module doc)."""
    api = PrometheusAPI(str(url), field="prometheus")  # an http(s) URL without credentials
    if slo_class not in SLO_CLASSES:
        raise ShipyardError("slo_class", f"unknown class {slo_class!r}", f"use one of {list(SLO_CLASSES)}")
    t0, t1 = parse_time(start, "--start"), parse_time(end, "--end")
    if t1 <= t0:
        raise ShipyardError("--end", "the window ends before it starts", "pass an --end after --start")
    sel = _selector(selector)
    window = max(1, int(round(t1 - t0)))
    prompt = _buckets(api, PROMPT, sel, window, t1)
    generation = _buckets(api, GENERATION, sel, window, t1)
    requests = prompt[-1][1] if prompt else 0.0
    if requests < 0.5:
        raise ShipyardError("prometheus", f"no vLLM request finished between {t0:.0f} and {t1:.0f} "
                            f"({PROMPT}_bucket{sel} did not increase)",
                            "widen --start/--end to a window with traffic, or fix --selector (the labels vLLM's series carry)")
    in_edges, in_counts = _bins(prompt)
    out_edges, out_counts = _bins(generation)
    if max_model_len is not None and in_counts and any(
            c > 0 and in_edges[i] + 1 > max_model_len for i, c in enumerate(in_counts)):
        raise ShipyardError("max_model_len", f"the window holds prompts longer than the model's context of {max_model_len}",
                            "serve with a longer --max-model-len, or fingerprint a window of traffic that fits")
    out_total = sum(out_counts) or 1.0
    cells = [[i, j, round(a * b / out_total, 6)] for i, a in enumerate(in_counts) if a > 0
             for j, b in enumerate(out_counts) if b > 0]
    step_s = int(step or max(window_for(t1 - t0), 15))
    series_data = api.range(f"sum(increase({PROMPT}_count{sel}[{step_s}s])) / {step_s}", t0 + step_s, t1, step_s)
    points = _points(series_data[0]["values"] if series_data else [], t0 + step_s, step_s, t1)
    series = [p for p in points if p is not None]
    mean_rate = requests / (t1 - t0)
    peaks = window_peaks(points, step_s)
    cv = _rate_cv(series)
    prefix = _measured_prefix(api, sel, window, t1, block_size)
    data: dict[str, Any] = {
        "schema": "shipyard.workload/v1",
        "source": {"format": "prometheus", "requests": int(round(requests)), "window_s": round(t1 - t0, 3),
                   "selector": sel},
        "slo_class": slo_class,
        "lengths": {"input": _quantiles(in_edges, in_counts), "output": _quantiles(out_edges, out_counts),
                    "joint": {"input_edges": in_edges, "output_edges": out_edges, "cells": cells, "independent": True}},
        "arrivals": {"requests": int(round(requests)), "duration_s": round(t1 - t0, 3),
                     "mean_rate_rps": round(mean_rate, 6), "window_s": step_s, "rate_series_rps": series,
                     "rate_series_gaps": series_gaps(points),
                     "peak_rate_rps": max(series) if series else round(mean_rate, 6),
                     "peak_to_mean": round(max(series) / mean_rate, 6) if series and mean_rate else None,
                     "peaks_rps": peaks, "peaks_not_computed": peaks_not_computed(peaks, step_s, _longest_run(points),
                                                                               len(points) - len(series)),
                     "interarrival_cv": None, "rate_series_cv": cv, "interarrival_s": None},
        "sessions": None,
        "prefix": prefix,
    }
    return seal(data)
