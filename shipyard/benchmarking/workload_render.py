"""One workload spec, rendered to the harness: a synthetic trace sampled from a fingerprint.

:func:`sample_trace` draws requests from a :mod:`~shipyard.benchmarking.workload` fingerprint,
seeded: (input, output) lengths from the **empirical joint histogram** (a cell by its count, then a
length uniformly inside the cell's bounds: exact below 8 tokens, a quarter octave above), arrival
gaps from the recorded gap quantiles (so the mean rate and the burstiness follow the recording;
a fingerprint without them, from Prometheus, has its arrivals follow its rate series step by step
instead, :func:`series_arrivals`, gaps kept in place),
and shared prefixes rebuilt from the prefix-tree statistics: each request reuses a leading share
of its blocks drawn from the recorded per-request reused-share histogram, from a prefix chain
picked by the recorded popularity of first blocks (shared system prompts); a request that reused
nothing gets fresh blocks. Every other block is fresh. A fingerprint with a measured hit rate but
no tree (from Prometheus) gives every request that share of one common chain. Sessions are not rebuilt (each request
stands alone; their reuse is in the reused share), and the branching of the recorded prefix tree
collapses to one chain per first block, so the rendered trace's cache footprint is a lower bound.
:func:`render_check` fingerprints the rendered trace itself, so the two can be compared before
anything is sent.

:func:`write_trace` writes it as a **Mooncake JSONL trace** (``timestamp`` ms, ``input_length``,
``output_length``, ``hash_ids``), which guidellm 0.8.1 replays: :func:`guidellm_parts` gives the
scenario's ``data`` (``{"kind": "mooncake", "source": {"kind": "json_file", "path": ...},
"hash_id_block_size": B, "time_scale": 0.001}``: guidellm builds one token block per hash id and
joins them, so equal ids give equal prompt prefixes; the 0.001 reads Mooncake's milliseconds as
seconds) and ``profile`` (``{"kind": "replay", "time_scale": 1 / N, "schedule_turn": "timestamp"}``:
guidellm sends each row at ``start + time_scale * timestamp``, so ``time_scale = N`` here replays at
N x the recorded rate). :mod:`shipyard.benchmarking.workload_replay` runs it.

Other harnesses read the same trace file (documented mapping, not dependencies):

* **AIPerf** (0.13): ``aiperf profile --input-file trace.jsonl --custom-dataset-type mooncake_trace
  --fixed-schedule`` (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids`` with its
  ``--isl-block-size B``); ``--fixed-schedule-speedup N`` is ``time_scale``.
* **inference-perf** (0.7) replays no Mooncake trace (its replays read OpenTelemetry traces), so
  the fingerprint maps onto its config instead: ``data.type: shared_prefix`` with ``num_groups`` =
  ``prefix.roots``, ``system_prompt_len`` = the median reused share x the median input length,
  ``question_distribution`` / ``output_distribution`` ``{min: p0, max: p100, mean, std_dev: (p90 -
  p10) / 2.56}`` from ``lengths``, and ``load.type: poisson`` with one stage per point of
  ``arrivals.rate_series_rps`` (``rate`` x ``time_scale``, ``duration`` = ``window_s`` /
  ``time_scale``: :func:`inference_perf_loads`): the arrival process as a rate series, the lengths
  as a normal shape (its generator's limit). A series with gaps (a Prometheus step with no value,
  ``arrivals.rate_series_gaps``) gives one load per run between gaps: inference-perf runs a load's
  stages back to back, so one load across a gap would join the steps either side of it.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

from shipyard.benchmarking.workload import (
    QUANTILES,
    REUSE_BINS,
    TraceRequest,
    WorkloadFingerprint,
    build_fingerprint,
)
from shipyard.benchmarking.workload_sources import write_mooncake
from shipyard.core.errors import ShipyardError
from shipyard.core.rates import rate_points, rate_runs

#: most requests a rendered trace may hold
MAX_REQUESTS = 1_000_000


def _inverse_cdf(q: dict[str, float] | None, u: float) -> float:
    """The value at probability ``u`` of a distribution kept as :data:`QUANTILES` (linear in between)."""
    if not q:
        return 0.0
    points = [(p, q[f"p{round(p * 100)}"]) for p in QUANTILES]
    for (p0, v0), (p1, v1) in zip(points, points[1:], strict=False):
        if u <= p1:
            return v0 + (v1 - v0) * ((u - p0) / (p1 - p0) if p1 > p0 else 0.0)
    return points[-1][1]


def _lengths(fp: dict[str, Any], rng: random.Random, max_model_len: int | None) -> tuple[int, int]:
    joint = fp["lengths"]["joint"]
    cells, ie, oe = joint["cells"], joint["input_edges"], joint["output_edges"]
    weights = [c[2] for c in cells]
    for _ in range(100):
        i, j, _n = rng.choices(cells, weights=weights)[0]
        n_in = rng.randrange(max(ie[i], 1), max(ie[i + 1], ie[i] + 1, 2))
        n_out = rng.randrange(oe[j], max(oe[j + 1], oe[j] + 1))
        if max_model_len is None or n_in + n_out <= max_model_len:
            return n_in, n_out
    raise ShipyardError("max_model_len", f"the fingerprint's lengths do not fit a context of {max_model_len}",
                        "serve with a longer --max-model-len, or fingerprint traffic that fits")


def series_arrivals(arrivals: dict[str, Any], requests: int, seed: int = 0) -> list[float] | None:
    """``requests`` arrival times (seconds from the start of the first step with traffic) following the
    recorded rate series: Poisson within each ``window_s``-second step at that step's rate, the series
    repeated when more requests are asked than it holds. A gap (:func:`shipyard.core.rates.rate_points`: a step Prometheus left out)
    keeps its place in time, at the rate the window's request count leaves for it (the requests the
    series' steps do not hold, spread over the gaps' steps; vLLM's counter spans the gap), so the
    steps either side are never joined. None for a fingerprint with inter-arrival gaps (a trace's:
    those are drawn instead), without a series, or with no traffic in it."""
    window = arrivals.get("window_s")
    if arrivals.get("interarrival_s") or isinstance(window, bool) or not isinstance(window, int | float) \
            or not window > 0:
        return None
    points = rate_points(arrivals, "workload.fingerprint.arrivals")
    known = [p for p in points if p is not None]
    if len(known) < len(points):
        left = float(arrivals.get("requests") or 0) - sum(known) * window
        gap_rate = max(left, 0.0) / ((len(points) - len(known)) * window)
        points = [gap_rate if p is None else p for p in points]
    if not points or sum(points) <= 0:
        return None
    rng = random.Random(f"arrivals-{seed}")
    out: list[float] = []
    step = 0
    while len(out) < requests:
        rate, start = points[step % len(points)], step * float(window)
        t = start
        while rate > 0 and len(out) < requests:
            t += rng.expovariate(rate)
            if t >= start + window:
                break
            out.append(t)
        step += 1
    skip = math.floor(out[0] / window) * window  # leading steps without traffic are not waited out
    return [round(t - skip, 3) for t in out]


def sample_trace(fingerprint: WorkloadFingerprint | dict[str, Any], *, requests: int | None = None, seed: int = 0,
                 block_size: int | None = None, max_model_len: int | None = None) -> list[TraceRequest]:
    """A synthetic trace drawn from ``fingerprint`` (see module doc); ``t`` in seconds from 0."""
    fp = fingerprint.data if isinstance(fingerprint, WorkloadFingerprint) else fingerprint
    n = int(requests or fp["source"]["requests"])
    if not 1 <= n <= MAX_REQUESTS:
        raise ShipyardError("workload.requests", f"must be 1..{MAX_REQUESTS}, got {n}", "pass a smaller number")
    prefix = fp.get("prefix") or {}
    bs = int(block_size or prefix.get("block_size") or 16)
    rng = random.Random(seed)
    gaps = (fp.get("arrivals") or {}).get("interarrival_s")
    mean_rate = (fp.get("arrivals") or {}).get("mean_rate_rps")
    hist = prefix.get("reused_share_hist") or [1] + [0] * (REUSE_BINS + 1)
    tops = list(prefix.get("top_root_shares") or [])
    measured = prefix.get("hit_rate_tokens") if not prefix.get("reused_share_hist") else None
    if measured:  # a hit rate without the tree (Prometheus): every request reuses that share of one chain
        tops = [1.0]
    minor = max(int(prefix.get("roots") or 0) - len(tops), 0)
    rest = max(1.0 - sum(tops), 0.0)
    group_weights = tops + ([rest / minor] * minor if minor and rest > 0 else [])
    chains: dict[int, list[int]] = {}
    next_id = 0
    t = 0.0
    times = None if gaps else series_arrivals(fp.get("arrivals") or {}, n, seed)
    out: list[TraceRequest] = []
    for k in range(n):
        if times is not None:
            t = times[k]
        elif k:
            if gaps:
                t += max(_inverse_cdf(gaps, rng.random()), 0.0)
            elif mean_rate:
                t += rng.expovariate(float(mean_rate))
        n_in, n_out = _lengths(fp, rng, max_model_len)
        n_blocks = math.ceil(n_in / bs)
        full = n_in // bs
        b = rng.choices(range(len(hist)), weights=hist)[0] if sum(hist) else 0
        share = 0.0 if b == 0 else 1.0 if b > REUSE_BINS else rng.uniform((b - 1) / REUSE_BINS, b / REUSE_BINS)
        if measured:
            share = float(measured)
        # the reused tokens, in blocks, rounded at random so that the expected reuse is the share
        reuse = min(full, math.floor(share * n_in / bs + rng.random())) if group_weights and share > 0 else 0
        ids: list[int] = []
        if reuse > 0:
            g = rng.choices(range(len(group_weights)), weights=group_weights)[0]
            chain = chains.setdefault(g, [])
            while len(chain) < reuse:
                chain.append(next_id)
                next_id += 1
            ids = chain[:reuse]
        while len(ids) < n_blocks:
            ids.append(next_id)
            next_id += 1
        out.append(TraceRequest(t=round(t, 3), input_len=n_in, output_len=n_out, hash_ids=ids))
    return out


def render_check(requests: list[TraceRequest], block_size: int, slo_class: str = "interactive") -> WorkloadFingerprint:
    """The fingerprint of a rendered trace (compare its hit rate and lengths with the source's)."""
    return build_fingerprint(requests, source="rendered", block_size=block_size, slo_class=slo_class)


def write_trace(requests: list[TraceRequest], path: str | Path, field: str = "workload.trace") -> None:
    """The trace as Mooncake JSONL (``timestamp`` in whole ms), the file guidellm and AIPerf replay."""
    write_mooncake(requests, path, field=field)


def check_time_scale(value: Any) -> float:
    """``time_scale``: replay at this many times the recorded rate (> 0, at most 1000)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or not 0 < value <= 1000:
        raise ShipyardError("workload.time_scale", f"must be a number in (0, 1000], got {value!r}",
                            "pass e.g. 1 (as recorded) or 2 (twice the recorded rate)")
    return float(value)


def guidellm_parts(trace_path: str, block_size: int, *, time_scale: float = 1.0, requests: int | None = None) -> dict[str, Any]:
    """The guidellm 0.8.1 scenario parts that replay the Mooncake trace at ``trace_path``.

    ``data``: ``{"kind": "mooncake", "source": {"kind": "json_file", "path": ...},
    "hash_id_block_size": B, "time_scale": 0.001}``: guidellm's trace reader takes the relative
    timestamps as they are written, and Mooncake's are milliseconds, so the data-side scale turns
    them into seconds; ``session_id`` is not named as guidellm's ``conversation_id_column``, so every
    row is its own request on the trace's timeline (shared prefixes come from the hash ids).
    ``profile``: ``{"kind": "replay", "time_scale": 1 / N, "schedule_turn": "timestamp"}``: each row
    is sent at ``start + time_scale x timestamp`` (open loop: a slow server does not slow the
    arrivals), so ``time_scale`` = N here replays at N x the recorded rate. ``constraints``: one
    request per row (``requests``).
    """
    scale = check_time_scale(time_scale)
    parts: dict[str, Any] = {
        "data": {"kind": "mooncake", "source": {"kind": "json_file", "path": str(trace_path)},
                 "hash_id_block_size": int(block_size), "time_scale": 0.001},
        "profile": {"kind": "replay", "time_scale": round(1.0 / scale, 9), "schedule_turn": "timestamp"},
        "constraints": [],
    }
    if requests:
        parts["constraints"].append({"kind": "max_requests", "count": int(requests)})
    return parts


def inference_perf_loads(fingerprint: WorkloadFingerprint | dict[str, Any], *, time_scale: float = 1.0) -> list[dict[str, Any]]:
    """inference-perf's ``load`` for the fingerprint's arrival process (the module doc's mapping): a
    ``poisson`` load with one stage per step of ``arrivals.rate_series_rps`` (``rate`` x ``time_scale``
    req/s for ``window_s`` / ``time_scale`` s), one load per run of the series between its gaps
    (:func:`shipyard.core.rates.rate_runs`), so no load joins the steps either side of a gap; ``[]``
    for a fingerprint without a rate series."""
    fp = fingerprint.data if isinstance(fingerprint, WorkloadFingerprint) else fingerprint
    scale = check_time_scale(time_scale)
    arrivals = fp.get("arrivals") or {}
    window = arrivals.get("window_s")
    if isinstance(window, bool) or not isinstance(window, int | float) or not window > 0:
        return []
    duration = round(float(window) / scale, 6)
    return [{"type": "poisson", "stages": [{"rate": round(rate * scale, 6), "duration": duration} for rate in run]}
            for run in rate_runs(arrivals, "workload.fingerprint.arrivals")]
