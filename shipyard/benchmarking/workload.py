"""The workload fingerprint: what a user's traffic looks like, as one small JSON document.

A :class:`WorkloadFingerprint` (schema ``shipyard.workload/v1``) summarises a recorded workload so
that a benchmark can be run on traffic shaped like it, and checked afterwards against it
(:mod:`shipyard.benchmarking.workload_fidelity`). It never holds prompt or answer text, only
counts, times and block hashes' statistics. It holds:

* ``lengths``: the joint input x output token-length distribution (a sparse 2-D histogram: exact
  while there are at most 512 distinct lengths, else on quarter-octave edges) and each length's
  quantiles;
* ``arrivals``: the arrival process: duration, mean and peak request rate, the rate series per
  window (``rate_series_gaps``, where a source has them: the steps the series has no value for,
  :func:`shipyard.core.rates.rate_points`), burstiness (the coefficient of variation of inter-arrival gaps: 1 for Poisson
  arrivals, above 1 for bursty ones, 0 for a fixed pace) and ``peaks_rps``: the peak rate over
  sliding windows of each of :data:`PEAK_WINDOWS_S` seconds that fits in the trace (keyed by the
  window), the longest being the window ``shipyard watch`` counts live peaks in, so a recorded
  peak and a live one are counted alike (:func:`recorded_peak`);
* ``sessions``: turns per session and think time (the gap between a session's consecutive
  arrivals, or the recorded ``delay``), when the source names sessions;
* ``prefix``: prefix-tree statistics at the stated ``block_size``: the theoretical prefix-cache hit
  rate (the share of blocks whose hash was seen before, in arrival order: what an infinite cache
  would hit), the same in tokens as vLLM counts it (``vllm:prefix_cache_hits`` over queries: leading
  whole blocks within all but the prompt's last token), the reuse ratio (blocks used over distinct
  blocks), the per-request reused share of prompt tokens and the popularity of the first block
  (shared system prompts);
* ``slo_class``: the declared kind of traffic (``interactive``: latency-bound; ``batch``: throughput).

``digest`` is ``sha256:`` of the canonical JSON (sorted keys, no spaces) of everything else, so
two benchmarks on fingerprints with one digest ran "the same workload". Sources are read by
:mod:`shipyard.benchmarking.workload_sources` (Mooncake, Azure, BurstGPT, chat logs) and
:mod:`shipyard.benchmarking.workload_prometheus` (a cluster's vLLM metrics).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError, file_error
from shipyard.core.files import atomic_write_text
from shipyard.core.numbers import percentile
from shipyard.serving.watch import MIN_WINDOW_S

SCHEMA = "shipyard.workload/v1"
SLO_CLASSES = ("interactive", "batch")
#: the quantiles kept for every length and gap distribution
QUANTILES = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)
#: windows (seconds) the rate series may use: the smallest giving at most MAX_WINDOWS windows
WINDOW_CHOICES = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
MAX_WINDOWS = 120
#: the windows (seconds) whose peak rate a fingerprint records (``arrivals.peaks_rps``): bursts, a minute,
#: and the window ``shipyard watch`` counts live peaks in (``rate()`` over two scrapes: MIN_WINDOW_S)
PEAK_WINDOWS_S = (10, 60, MIN_WINDOW_S)
#: first blocks whose request shares are kept by name-free rank (the most shared system prompts)
TOP_ROOTS = 16
#: bins of the per-request reused share: exactly 0, (0, 0.1], ..., (0.9, 1), exactly 1
REUSE_BINS = 10


def reuse_bin(share: float) -> int:
    """The reused-share histogram's bin of ``share``: 0 for none, 1..10 for tenths, 11 for all."""
    if share <= 0:
        return 0
    if share >= 1:
        return REUSE_BINS + 1
    return min(REUSE_BINS, math.ceil(share * REUSE_BINS))


@dataclass(slots=True)
class TraceRequest:
    """One recorded request: arrival (seconds from any origin), token counts, prefix block hashes."""

    t: float
    input_len: int
    output_len: int
    hash_ids: list[int] | None = None
    session: str | None = None
    delay: float | None = None  # think time before this turn (seconds), where the source records it


@dataclass
class WorkloadFingerprint:
    """A workload's fingerprint (the JSON document ``data``, its ``digest``)."""

    data: dict[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return str(self.data["digest"])

    @property
    def block_size(self) -> int | None:
        return (self.data.get("prefix") or {}).get("block_size")

    def to_json(self) -> str:
        return json.dumps(self.data, indent=1, sort_keys=True) + "\n"

    def save(self, path: str | Path, field_name: str = "--out-file") -> None:
        atomic_write_text(path, self.to_json(), field=field_name)

    def summary(self) -> str:
        """One line: requests, rate, lengths, hit rate, digest."""
        return summary_line(self.data)


# --------------------------------------------------------------------------- digest
def canonical(data: dict[str, Any]) -> str:
    """The canonical JSON the digest is taken of: sorted keys, no spaces, the digest left out."""
    body = {k: v for k, v in data.items() if k != "digest"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)


def content_digest(data: dict[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(canonical(data).encode()).hexdigest()


def seal(data: dict[str, Any]) -> WorkloadFingerprint:
    """The fingerprint with its digest set."""
    data = {**data, "digest": content_digest(data)}
    return WorkloadFingerprint(data)


def load_fingerprint(path: str | Path, field_name: str = "workload.fingerprint") -> WorkloadFingerprint:
    """Read a fingerprint file; a wrong schema or a digest that does not match its content is one line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise file_error(err, field_name, path, action="read") from None
    try:
        data = json.loads(text)
    except ValueError:
        raise ShipyardError(field_name, f"{path} is not JSON", "pass a file written by shipyard workload fingerprint") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ShipyardError(field_name, f"{path} is not a {SCHEMA} document", "pass a file written by shipyard workload fingerprint")
    if data.get("digest") != content_digest(data):
        raise ShipyardError(field_name, f"{path}: its digest does not match its content (edited by hand?)",
                            "write it again with shipyard workload fingerprint")
    return WorkloadFingerprint(data)


# --------------------------------------------------------------------------- statistics
def quantiles(values: list[float]) -> dict[str, float] | None:
    """The :data:`QUANTILES` of ``values`` (``p0`` ... ``p100``) and the mean; None when empty."""
    if not values:
        return None
    ordered = sorted(float(v) for v in values)
    out = {f"p{round(q * 100)}": round(percentile(ordered, q), 6) for q in QUANTILES}
    out["mean"] = round(sum(ordered) / len(ordered), 6)
    return out


#: up to this many distinct lengths, the histogram keeps every length exactly (one bin each)
MAX_EXACT_LENGTHS = 512


def length_edges(largest: int, values: list[int] | None = None) -> list[int]:
    """Bin edges for token lengths. With at most :data:`MAX_EXACT_LENGTHS` distinct ``values``: a
    one-token bin ``[v, v + 1)`` for each (exact: the sampler and the KS distance see the recorded
    lengths themselves; the bins between are empty). Otherwise 0, then ceil(2^(k/4)) (quarter
    octaves, one bin per length below 8) up to the first edge above ``largest``."""
    distinct = sorted(set(values or []))
    if distinct and len(distinct) <= MAX_EXACT_LENGTHS:
        return sorted({v for d in distinct for v in (d, d + 1)})
    edges = [0]
    k = 0
    while edges[-1] <= largest:
        edge = math.ceil(2 ** (k / 4))
        if edge > edges[-1]:
            edges.append(edge)
        k += 1
    return edges


def bin_index(edges: list[int], value: int) -> int:
    """The bin ``[edges[i], edges[i + 1])`` holding ``value``."""
    lo, hi = 0, len(edges) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if edges[mid] <= value:
            lo = mid
        else:
            hi = mid
    return lo


def joint_histogram(pairs: list[tuple[int, int]]) -> dict[str, Any]:
    """The sparse joint histogram of (input, output) lengths: edges and ``[i, j, count]`` cells."""
    in_edges = length_edges(max(p[0] for p in pairs), [p[0] for p in pairs])
    out_edges = length_edges(max(p[1] for p in pairs), [p[1] for p in pairs])
    cells = Counter((bin_index(in_edges, a), bin_index(out_edges, b)) for a, b in pairs)
    return {"input_edges": in_edges, "output_edges": out_edges,
            "cells": [[i, j, n] for (i, j), n in sorted(cells.items())]}


def window_for(duration: float) -> int:
    """The rate series' window: the smallest of :data:`WINDOW_CHOICES` giving <= MAX_WINDOWS windows."""
    return next((w for w in WINDOW_CHOICES if duration / w <= MAX_WINDOWS), WINDOW_CHOICES[-1])


def window_peaks(rates: Sequence[float | None], slot_s: int) -> dict[str, float]:
    """The peak request rate over each window of :data:`PEAK_WINDOWS_S` that is a whole number of
    ``slot_s``-second slots and fits in the series ``rates`` (req/s per consecutive slot; None: a
    slot with no value, a gap no window spans): the highest mean over that many consecutive slots,
    keyed by the window in seconds (text: a JSON key). One computation for a trace (1-s slots of its
    arrivals) and for Prometheus's rate series."""
    out: dict[str, float] = {}
    for window in PEAK_WINDOWS_S:
        k = window // slot_s
        if window % slot_s or not 1 <= k <= len(rates):
            continue
        best: float | None = None
        run, n = 0.0, 0  # the sum and the count of the slots since the last gap
        for i, rate in enumerate(rates):
            if rate is None:
                run, n = 0.0, 0
                continue
            run, n = run + rate, n + 1
            if n > k:
                run -= rates[i - k] or 0.0
            if n >= k:
                best = run if best is None else max(best, run)
        if best is not None:
            out[str(window)] = round(best / k, 6)
    return out


def recorded_peak(arrivals: dict[str, Any]) -> tuple[float | None, float | None]:
    """``(peak req/s, window s)``: the recorded peak a capacity is counted against and the window it
    was counted in. The longest of ``peaks_rps`` (:data:`PEAK_WINDOWS_S`: the watch's window, or a
    shorter one when the trace is shorter than that); a fingerprint without ``peaks_rps`` (written
    before they were recorded) gives its rate series' peak over the series' own ``window_s``."""
    peaks = [(int(w), float(r)) for w, r in (arrivals.get("peaks_rps") or {}).items()
             if str(w).isdigit() and isinstance(r, int | float) and not isinstance(r, bool) and r > 0]
    if peaks:
        window, rate = max(peaks)
        return rate, window
    return arrivals.get("peak_rate_rps"), arrivals.get("window_s")


def arrival_stats(times: list[float]) -> dict[str, Any]:
    """The arrival process of sorted arrival times (seconds)."""
    start = times[0]
    rel = [t - start for t in times]
    duration = rel[-1]
    gaps = [b - a for a, b in zip(rel, rel[1:], strict=False)]
    mean_gap = sum(gaps) / len(gaps) if gaps else 0.0
    cv = None
    if gaps and mean_gap > 0:
        var = sum((g - mean_gap) ** 2 for g in gaps) / len(gaps)
        cv = round(math.sqrt(var) / mean_gap, 6)
    window = window_for(duration)
    n_windows = max(1, math.ceil(duration / window)) if duration > 0 else 1
    counts = [0] * n_windows
    for t in rel:
        counts[min(int(t // window), n_windows - 1)] += 1
    series = [round(c / window, 6) for c in counts]
    mean_rate = round(len(gaps) / duration, 6) if duration > 0 else None
    seconds = [0.0] * max(1, math.ceil(duration))
    for t in rel:
        seconds[min(int(t), len(seconds) - 1)] += 1
    return {
        "requests": len(times),
        "duration_s": round(duration, 6),
        "mean_rate_rps": mean_rate,
        "window_s": window,
        "rate_series_rps": series,
        "peak_rate_rps": max(series),
        "peak_to_mean": round(max(series) / mean_rate, 6) if mean_rate else None,
        "peaks_rps": window_peaks(seconds, 1),
        "interarrival_cv": cv,
        "interarrival_s": quantiles(gaps),
    }


def session_stats(requests: list[TraceRequest]) -> dict[str, Any] | None:
    """Turns per session and think time; None when the source names no sessions."""
    by_session: dict[str, list[TraceRequest]] = {}
    for req in requests:
        if req.session is not None:
            by_session.setdefault(req.session, []).append(req)
    if not by_session:
        return None
    turns = [len(v) for v in by_session.values()]
    think: list[float] = []
    for reqs in by_session.values():
        for prev, cur in zip(reqs, reqs[1:], strict=False):
            think.append(cur.delay if cur.delay is not None else cur.t - prev.t)
    return {"sessions": len(by_session), "turns": quantiles(turns), "think_time_s": quantiles(think),
            "multi_turn_share": round(sum(1 for n in turns if n > 1) / len(turns), 6)}


def prefix_stats(requests: list[TraceRequest], block_size: int) -> dict[str, Any] | None:
    """Prefix-tree statistics of the requests' block hashes, in arrival order (None without hashes).

    ``hit_rate_blocks``: blocks whose hash was seen before / all blocks. ``hit_rate_tokens``: what
    vLLM's ``prefix_cache_hits``/``queries`` counters would show with an unbounded cache and this
    block size: per request the tokens of its leading run of seen *full* blocks, cut to the whole
    blocks within ``input_len - 1`` tokens (vLLM always computes the last prompt token and caches
    block-aligned: ``kv_cache_manager.get_computed_blocks``), over all prompt tokens.
    """
    if not any(r.hash_ids for r in requests):
        return None
    seen: set[int] = set()
    blocks = hits = hit_tokens = tokens = 0
    reused_share: list[float] = []
    roots: Counter[int] = Counter()
    for req in requests:
        ids = req.hash_ids or []
        blocks += len(ids)
        tokens += req.input_len
        leading = 0
        run = True
        for k, h in enumerate(ids):
            was = h in seen
            hits += was
            full = (k + 1) * block_size <= req.input_len
            if run and was and full:
                leading += 1
            else:
                run = False
        for h in ids:
            seen.add(h)
        # vLLM hits whole blocks only, and at most input_len - 1 tokens (it computes the last one)
        reused = min(leading, max(req.input_len - 1, 0) // block_size) * block_size
        hit_tokens += reused
        reused_share.append(reused / req.input_len)
        if ids:
            roots[ids[0]] += 1
    n = len(requests)
    top = [round(c / n, 6) for _, c in roots.most_common(TOP_ROOTS)]
    hist = [0] * (REUSE_BINS + 2)
    for share in reused_share:
        hist[reuse_bin(share)] += 1
    return {
        "block_size": block_size,
        "blocks": blocks,
        "unique_blocks": len(seen),
        "hit_rate_blocks": round(hits / blocks, 6) if blocks else 0.0,
        "hit_rate_tokens": round(hit_tokens / tokens, 6) if tokens else 0.0,
        "reuse_ratio": round(blocks / len(seen), 6) if seen else 0.0,
        "reused_share": quantiles(reused_share),
        "reused_share_hist": hist,
        "roots": len(roots),
        "top_root_shares": top,
    }


# --------------------------------------------------------------------------- checks and building
def check_requests(requests: list[TraceRequest], *, field_name: str, block_size: int | None,
                   max_model_len: int | None) -> None:
    """The bad inputs a trace can carry, each one line naming the first offending row (1-based)."""
    if not requests:
        raise ShipyardError(field_name, "the trace has no requests", "pass a trace with at least one request")
    prev = -math.inf
    for row, req in enumerate(requests, 1):
        if not math.isfinite(req.t) or req.t < 0:
            raise ShipyardError(field_name, f"row {row}: timestamp {req.t!r} is negative or not a number",
                                "timestamps are times since the trace's start (ms for Mooncake), >= 0")
        if req.t < prev:
            raise ShipyardError(field_name, f"row {row}: timestamps are not sorted ({req.t:g} after {prev:g})",
                                "sort the trace by timestamp (e.g. sort -t: -k2 -n, or jq -s 'sort_by(.timestamp)[]')")
        prev = req.t
        if req.input_len < 1 or req.output_len < 0:
            raise ShipyardError(field_name, f"row {row}: input length {req.input_len} / output length {req.output_len}",
                                "every request needs >= 1 input token and >= 0 output tokens")
        if max_model_len is not None and req.input_len + req.output_len > max_model_len:
            raise ShipyardError("max_model_len", f"row {row}: {req.input_len} input + {req.output_len} output tokens "
                                f"exceed the model's context of {max_model_len}",
                                "drop or cut the longer requests, or serve with a longer --max-model-len")
        if block_size is not None and req.hash_ids is not None:
            want = math.ceil(req.input_len / block_size)
            if len(req.hash_ids) != want:
                raise ShipyardError("block_size", f"row {row}: {req.input_len} input tokens in blocks of {block_size} "
                                    f"are {want} blocks, the trace has {len(req.hash_ids)} hash_ids",
                                    "pass the block size the trace was hashed with (Mooncake's is 512)")


def build_fingerprint(requests: list[TraceRequest], *, source: str, block_size: int | None = None,
                      slo_class: str = "interactive", max_model_len: int | None = None,
                      time_unit_s: float = 1.0, field_name: str = "trace") -> WorkloadFingerprint:
    """The fingerprint of recorded requests (arrival order; ``t`` in units of ``time_unit_s`` seconds)."""
    if slo_class not in SLO_CLASSES:
        raise ShipyardError("slo_class", f"unknown class {slo_class!r}", f"use one of {list(SLO_CLASSES)}")
    if block_size is not None and (isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1):
        raise ShipyardError("block_size", f"must be a whole number >= 1, got {block_size!r}", "pass e.g. 16 (vLLM's) or 512 (Mooncake's)")
    check_requests(requests, field_name=field_name, block_size=block_size, max_model_len=max_model_len)
    if any(r.hash_ids for r in requests) and block_size is None:
        raise ShipyardError("block_size", "the trace has hash_ids but no block size was stated",
                            "pass the block size the trace was hashed with (Mooncake's is 512)")
    scaled = [TraceRequest(r.t * time_unit_s, r.input_len, r.output_len, r.hash_ids, r.session,
                           None if r.delay is None else r.delay * time_unit_s) for r in requests]
    pairs = [(r.input_len, r.output_len) for r in scaled]
    data: dict[str, Any] = {
        "schema": SCHEMA,
        "source": {"format": source, "requests": len(scaled)},
        "slo_class": slo_class,
        "lengths": {
            "input": quantiles([p[0] for p in pairs]),
            "output": quantiles([p[1] for p in pairs]),
            "joint": joint_histogram(pairs),
        },
        "arrivals": arrival_stats([r.t for r in scaled]),
        "sessions": session_stats(scaled),
        "prefix": prefix_stats(scaled, block_size) if block_size else None,
    }
    return seal(data)


def summary_line(data: dict[str, Any]) -> str:
    """``workload <digest12>: N requests over D s, mean R req/s (peak P in W-s windows, burstiness CV),
    input p50/p99 ..., output p50/p99 ..., theoretical prefix hit rate H at block B`` (the peak:
    :func:`recorded_peak`)."""
    arr, lengths, prefix = data.get("arrivals") or {}, data.get("lengths") or {}, data.get("prefix") or {}

    def q(part: str) -> str:
        d = lengths.get(part) or {}
        return f"p50 {d.get('p50', 0):g} / p99 {d.get('p99', 0):g}" if d else "unknown"

    parts = [f"workload {str(data.get('digest', ''))[7:19]}: {data.get('source', {}).get('requests', '?')} requests"]
    if arr.get("duration_s") is not None:
        parts[0] += f" over {arr['duration_s']:g} s"
    if arr.get("mean_rate_rps") is not None:
        cv = arr.get("interarrival_cv")
        peak, window = recorded_peak(arr)
        parts.append(f"mean {arr['mean_rate_rps']:.3g} req/s (peak {peak or 0:.3g}"
                     + (f" in {window:g}-s windows" if window else "")
                     + (f", burstiness CV {cv:.2g})" if cv is not None else ")"))
    parts.append(f"input {q('input')}, output {q('output')} tokens")
    if prefix.get("hit_rate_tokens") is not None:
        parts.append(f"theoretical prefix-cache hit rate {prefix['hit_rate_tokens']:.1%} of prompt tokens "
                     f"({prefix.get('hit_rate_blocks', 0):.1%} of blocks) at block size {prefix.get('block_size')}")
    return ", ".join(parts)
