"""Drift from the qualified envelope: is production still serving the traffic the champion was judged on?

The gates judged the champion once, on the benchmark's traffic: its prompt and output lengths,
the load levels up to the knee (the highest level meeting the SLO), the TTFT each level gave.
Production drifts: longer prompts, a heavier load per replica, answers that grow. ``shipyard
watch`` reads the live figures from the Prometheus that scrapes the vLLM pods
(:mod:`shipyard.serving.prometheus`, over a window) and compares each dimension with the envelope:

======================  =========================================================  ==================
dimension               live (PromQL over the window, vLLM 0.32's metric names)    qualified
======================  =========================================================  ==================
input length            ``vllm:request_prompt_tokens`` sum / count                 the lengths' level's
                                                                                   mean (below)
output length           ``vllm:request_generation_tokens`` sum / count             the lengths' level's
                                                                                   mean (below)
load per replica        ``vllm:request_success_total`` rate / vLLM instances       the knee's requests/s
TTFT p99 at that load   ``vllm:time_to_first_token_seconds`` buckets               the benchmark curve
peak load per replica   the highest ``request_success_total`` rate / instances     the goodput at the
                        over the window, in the recorded peak's windows            SLO (shown only
                                                                                   without a replay)
length distributions    ``..._tokens_bucket`` increase per ``le``                  the lengths' level's
                        (vLLM's own edges)                                          per-request counts
prefix-cache hit rate   ``vllm:prefix_cache_hits_total`` / ``..._queries_total``   the server's rate
                                                                                   during the replay
                                                                                   (shown only in a
                                                                                   synthetic run)
======================  =========================================================  ==================

**Which lengths.** The lengths (means and distributions) are the user's traffic when there is
one: when the champion's benchmark replayed a recorded workload, the judge step keeps the replay's
own per-request prompt and output lengths in the candidate record (``workload.replay_level``:
:func:`replay_envelope_level`) and the signed SLO evidence carries them (``workload.replay_level``),
so the watch compares production with the replay ("lengths qualified on the replay of workload
sha256:..."); the synthetic load levels' prompts are the benchmark's, not the user's. Otherwise (a
synthetic benchmark, or a record from before the replay's lengths were kept) they are the knee
level's ("on the synthetic level at concurrency N"). The load, the TTFT curve and the knee are the
synthetic levels' in both cases; the prefix-cache hit rate is the replay's (below), never a level's.
The report's second line and the result's ``lengths_from`` say which.

**Prefix cache.** When the champion's benchmark replayed a recorded workload, the server's own
prefix-cache hit rate during the replay (its fidelity check's ``hit_rate.server``) is kept in the
record (``workload.prefix_hit_rate``) and in the signed SLO evidence. A live rate lower than that by
more than the ``prefix_cache`` tolerance (in points of hit rate, default 0.1, the fidelity check's
own ``hit_rate_delta``) is a drift: more of each prompt is prefilled than was qualified, so TTFT
and the knee were measured on easier traffic. A higher live rate is not.

**Capacity.** When the champion's benchmark replayed a recorded workload, its record (and the SLO
evidence the model carries) holds the capacity in the user's units (``shipyard.gates.capacity``):
one replica's goodput at the SLO, the recorded peak rate and the multiple ("3.2x your recorded
peak"). The live peak is the highest request rate over the window, counted in windows as long as the
recorded peak's (``rate(...[W])``, at least :data:`MIN_WINDOW_S`: ``rate()`` needs two scrapes). A
fingerprint records its peak over :data:`MIN_WINDOW_S`-second windows too
(:data:`shipyard.benchmarking.workload.PEAK_WINDOWS_S`), so the two peaks are counted alike and the
row reports live peak / recorded peak, naming the window. A recorded peak counted in other windows (a
trace shorter than that, or a fingerprint from before per-window peaks, whose peak is over its rate
series' window, often 1 or 10 s) is not compared with the live one: a 10-s peak of the same traffic
is higher than its 120-s peak, so the multiple would read low; the row says so. The row also reports
the headroom below the goodput at the SLO, and drifts when a replica's peak load passes the goodput at
the SLO (which is the recorded peak x the qualified multiple): the mean load can sit below the knee
while the bursts pass what was qualified.

**Length distributions.** The means can hold while the shape moves (half the prompts twice as
long, half half as long). The benchmark keeps each measured request's prompt and output token
counts (a level's ``samples``) and the judge step writes them into the candidate record as sparse
histograms (a level's ``lengths``: :func:`length_counts`); the watch takes the replay's or the knee
level's (**Which lengths**), reads
vLLM's own histograms of the live lengths (``vllm:request_prompt_tokens_bucket``, ``vllm:request_generation_tokens_bucket``:
``increase()`` over the window, per ``le``) and compares, at each of the live server's edges
(vLLM's 1-2-5 series up to its ``max_model_len``), the share of requests longer than the edge,
live and benchmarked. No quantile is interpolated between those coarse edges (that would read a
drift into a bucket's width). The largest gap is the distance; it drifts past the
``input_distribution`` / ``output_distribution`` tolerance (a share of requests, default 0.1)
and past what that many requests give by chance (a two-sample Kolmogorov-Smirnov bound at 1%),
and the row names the edge. The signed SLO evidence carries the same ``lengths`` per level
(:data:`shipyard.gates.evidence.ENVELOPE_LEVEL_FIELDS`). A record or evidence without per-request
counts (from before they were kept) is "not compared", never a drift.

A dimension outside its tolerance is a drift; the verdict names each one and proposes the
re-qualification run on the traffic as measured (the optimize pipeline with the live lengths and
loads around the live rate), which the user submits (``shipyard submit``) or has
``shipyard watch --requalify`` submit (``requalify_run``: that pipeline and its parameters).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.jsonargs import json_object
from shipyard.core.numbers import check_number
from shipyard.core.records import slo_of, slo_thresholds
from shipyard.serving.prometheus import PrometheusAPI
from shipyard.serving.sizing import find_knee

#: relative change each dimension may show before it counts as drift (``--tolerance`` overrides)
DEFAULT_TOLERANCE = {"input_length": 0.25, "output_length": 0.25, "load": 0.0, "ttft": 0.5, "capacity": 0.0,
                     "prefix_cache": 0.1, "input_distribution": 0.1, "output_distribution": 0.1}
#: the tolerances in shares or points (0 to 1), not relative changes
_SHARES = ("prefix_cache", "input_distribution", "output_distribution")
#: the two-sample Kolmogorov-Smirnov coefficient at the 1% level: a distance below
#: ``KS_1PCT * sqrt((n + m) / (n m))`` is within what n benchmarked and m live requests of one
#: distribution differ by by chance (:func:`distribution_row`)
KS_1PCT = 1.628
#: the shortest window: Prometheus's rate() needs two scrapes in it (the default scrape interval is 1 min)
MIN_WINDOW_S = 120
#: the step of the subqueries over the window (replicas, the peak rate)
STEP_S = 30
_WINDOW = re.compile(r"^(\d+)([smh])$")


@dataclass(frozen=True)
class Envelope:
    """What the champion was qualified on, from its record (``candidate.json`` / ``selection.json``)."""

    recipe: str
    prompt_tokens: float
    output_tokens: float
    knee_rps: float
    curve: list[tuple[float, float]]  # (requests/s, TTFT p99 ms) per benchmark level, by load
    slo: dict[str, Any] = field(default_factory=dict)
    #: the capacity in the recorded workload's units (:func:`qualified_capacity`); None for a synthetic benchmark
    capacity: dict[str, Any] | None = None
    #: the server's prefix-cache hit rate during the replay of the recorded workload; None for a synthetic benchmark
    prefix_hit_rate: float | None = None
    #: the per-request prompt and output token counts the lengths are held against (the replay's when the
    #: benchmark replayed a recorded workload, else the knee level's); None in a record without them
    prompt_lengths: tuple[int, ...] | None = None
    output_lengths: tuple[int, ...] | None = None
    #: where the lengths (means and distributions) come from, in words (:func:`envelope_from_record`)
    lengths_from: str = ""


@dataclass(frozen=True)
class Live:
    """What production did over the window."""

    prompt_tokens: float | None
    output_tokens: float | None
    rps: float | None
    replicas: float  # on average over the window
    ttft_p99_ms: float | None
    prefix_hit_rate: float | None
    window_s: int
    peak_rps: float | None = None  # the highest request rate over the window, all replicas
    peak_rps_per_replica: float | None = None  # the highest request rate per serving replica over the window
    peak_window_s: int | None = None  # the rate() window both peaks were counted in
    #: requests per ``le`` edge of vLLM's token-count histograms over the window (cumulative, ``inf`` the total)
    prompt_buckets: dict[float, float] | None = None
    output_buckets: dict[float, float] | None = None


def envelope_from_record(record: Mapping[str, Any], field: str = "--champion") -> Envelope:
    """The envelope of a candidate record (its benchmark levels and the SLO it was gated with);
    ``field``: where the record came from, named in the error when it holds no levels. The load and
    the TTFT curve come from the synthetic load levels (the knee); the lengths (means and
    distributions) from the replay of the recorded workload when the benchmark replayed one and the
    record keeps it (``workload.replay_level``: that is the user's traffic), else from the knee level."""
    levels = [lv for lv in record.get("levels") or [] if lv.get("requests_per_s")]
    if not levels:
        raise ShipyardError(field, "the record holds no benchmark levels",
                            "pass the select step's decision folder or a candidate.json whose benchmark ran")
    slo = dict(slo_thresholds(record))
    found = find_knee(levels, slo)["level"] if slo else None
    knee = found or max(levels, key=lambda lv: lv["requests_per_s"])
    curve = sorted((float(lv["requests_per_s"]), float(lv.get("ttft_p99_ms") or math.nan)) for lv in levels)
    replay = _replay_of(record)
    if replay is not None:
        digest = str((record.get("workload") or {}).get("digest") or "")
        source, lengths_from = replay, f"the replay of workload {digest[:19] or '(no digest recorded)'}"
    else:
        source, lengths_from = knee, f"the synthetic level {_load_words(knee)} ({'the knee' if found else 'the highest load'})"
    prompt_lengths, output_lengths = _lengths(source, "prompt_tokens"), _lengths(source, "output_tokens")
    return Envelope(recipe=str(record.get("recipe") or "champion"),
                    prompt_tokens=_mean(source, "prompt_tokens", prompt_lengths),
                    output_tokens=_mean(source, "output_tokens", output_lengths),
                    knee_rps=float(knee["requests_per_s"]), curve=[p for p in curve if math.isfinite(p[1])], slo=slo,
                    capacity=qualified_capacity(record), prefix_hit_rate=qualified_hit_rate(record),
                    prompt_lengths=prompt_lengths, output_lengths=output_lengths, lengths_from=lengths_from)


def _load_words(level: Mapping[str, Any]) -> str:
    """A synthetic level's load in words: ``at concurrency 16`` or ``at 2 req/s``."""
    strategy = str(level.get("strategy") or str(level.get("name") or "").partition("@")[0])
    nominal = level.get("nominal_load")
    if strategy == "concurrent" and _positive(nominal):
        return f"at concurrency {nominal:g}"
    if strategy in ("constant", "poisson") and _positive(nominal):
        return f"at {nominal:g} req/s"
    return f"{level.get('name') or ''} at {float(level['requests_per_s']):.3g} req/s".strip()


def _mean(level: Mapping[str, Any], key: str, lengths: tuple[int, ...] | None) -> float:
    """A level's mean ``key`` (``prompt_tokens``, ``output_tokens``): its ``<key>_mean``, else the mean
    of its per-request counts; NaN when it holds neither."""
    kept = level.get(f"{key}_mean")
    if _positive(kept):
        return float(kept)
    return sum(lengths) / len(lengths) if lengths else math.nan


def replay_envelope_level(level: Any) -> dict[str, Any] | None:
    """What the candidate record keeps of the replay of a recorded workload (``results["workload"]["level"]``,
    parsed as a load level is): its rate, mean lengths and per-request lengths as sparse histograms
    (:func:`length_counts`); None without a replay level or without any length in it."""
    if not isinstance(level, Mapping):
        return None
    samples = level.get("samples") if isinstance(level.get("samples"), Mapping) else {}
    lengths = {key: length_counts(samples.get(key)) for key in ("prompt_tokens", "output_tokens")}
    kept = {"name": str(level.get("name") or "replay"), "requests_per_s": level.get("requests_per_s"),
            "prompt_tokens_mean": level.get("prompt_tokens_mean"), "output_tokens_mean": level.get("output_tokens_mean"),
            "lengths": lengths if any(lengths.values()) else None}
    return kept if _replay_lengths(kept) else None


def _replay_lengths(level: Mapping[str, Any]) -> bool:
    """Whether a kept replay level holds lengths: per-request counts or a mean."""
    return any(_lengths(level, key) is not None or _positive(level.get(f"{key}_mean"))
               for key in ("prompt_tokens", "output_tokens"))


def _replay_of(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The replay of the recorded workload a record keeps (``workload.replay_level``: a candidate
    record's, or the record rebuilt from the signed SLO evidence), when it holds lengths; None for a
    synthetic benchmark or a record from before the replay's lengths were kept."""
    workload = record.get("workload")
    level = workload.get("replay_level") if isinstance(workload, Mapping) else None
    return level if isinstance(level, Mapping) and _replay_lengths(level) else None


def length_counts(values: Any) -> dict[str, int] | None:
    """Per-request token counts (a level's ``samples["prompt_tokens"]`` or ``["output_tokens"]``) as
    a sparse histogram, ``{"<tokens>": requests}`` (what a candidate record keeps per level:
    ``lengths``); None without any."""
    if not isinstance(values, list):
        return None
    kept = [int(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)
            and math.isfinite(v) and v >= 0]
    counts: dict[str, int] = {}
    for v in sorted(kept):
        counts[str(v)] = counts.get(str(v), 0) + 1
    return counts or None


def _lengths(level: Mapping[str, Any], key: str) -> tuple[int, ...] | None:
    """A level's per-request token counts: its ``lengths[key]`` histogram (a candidate record) or its
    ``samples[key]`` (the benchmark's results); None when it holds neither (a benchmark from before
    they were kept: a candidate record's or the evidence's ``samples`` is a count)."""
    kept = (level.get("lengths") or {}).get(key) if isinstance(level.get("lengths"), Mapping) else None
    if isinstance(kept, Mapping):
        try:
            pairs = [(int(k), int(n)) for k, n in kept.items()]
        except (TypeError, ValueError):
            return None
        return tuple(v for v, n in sorted(pairs) if v >= 0 for _ in range(max(n, 0))) or None
    samples = level.get("samples")
    counts = length_counts(samples.get(key)) if isinstance(samples, Mapping) else None
    return tuple(int(k) for k, n in counts.items() for _ in range(n)) if counts else None


def qualified_hit_rate(record: Mapping[str, Any]) -> float | None:
    """The prefix-cache hit rate the server measured while the champion's benchmark replayed a
    recorded workload (``workload.prefix_hit_rate`` of a candidate record or of the record rebuilt
    from the signed SLO evidence); None without one."""
    rate = (record.get("workload") or {}).get("prefix_hit_rate")
    ok = isinstance(rate, int | float) and not isinstance(rate, bool) and math.isfinite(rate) and 0 <= rate <= 1
    return float(rate) if ok else None


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def qualified_capacity(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The capacity the champion was qualified for in its recorded workload's units: ``slo.capacity``
    of a candidate record (:mod:`shipyard.gates.capacity`) or of the record rebuilt from the signed SLO
    evidence (``capacity``: :func:`shipyard.gates.evidence.capacity_evidence`), as ``{"goodput_rps"``
    (one replica's goodput at the SLO), ``"recorded_peak_rps", "x_recorded_peak", "window_s",
    "lower_bound", "digest"}``; None without a replayed workload, or when no load met the SLO."""
    cap = slo_of(record).get("capacity")
    if not isinstance(cap, Mapping) or not _positive(cap.get("goodput_rps")) or not _positive(cap.get("recorded_peak_rps")):
        return None
    digest = cap.get("digest") or ((cap.get("workload") or {}).get("digest") or {}).get("sha256") \
        or (record.get("workload") or {}).get("digest")
    if digest and not str(digest).startswith("sha256:"):
        digest = f"sha256:{digest}"
    goodput, peak = float(cap["goodput_rps"]), float(cap["recorded_peak_rps"])
    return {"goodput_rps": goodput, "recorded_peak_rps": peak,
            "x_recorded_peak": float(cap.get("x_recorded_peak") or goodput / peak),
            "window_s": cap.get("window_s"), "lower_bound": bool(cap.get("lower_bound")), "digest": digest,
            **({"window_note": cap["window_note"]} if cap.get("window_note") else {})}


def peak_window(env: Envelope, window_s: int) -> int:
    """The ``rate()`` window the live peak is counted in: the recorded peak's window, at least
    :data:`MIN_WINDOW_S` (two scrapes), at most the watch window."""
    recorded = (env.capacity or {}).get("window_s")
    return min(window_s, max(MIN_WINDOW_S, int(recorded) if _positive(recorded) else 0))


def predicted_ttft(curve: list[tuple[float, float]], rps: float) -> float | None:
    """TTFT p99 the benchmark curve predicts at ``rps`` (linear between levels; held flat outside them,
    where the curve says nothing)."""
    if not curve:
        return None
    if rps <= curve[0][0]:
        return curve[0][1]
    for (r0, t0), (r1, t1) in zip(curve, curve[1:], strict=False):
        if rps <= r1:
            return t0 + (t1 - t0) * (rps - r0) / (r1 - r0) if r1 > r0 else t1
    return curve[-1][1]


def parse_window(text: str, field: str = "--window") -> int:
    """``30m``, ``2h``, ``900s`` as seconds (checked by :func:`check_window`)."""
    found = _WINDOW.match(str(text).strip())
    if not found:
        raise ShipyardError(field, f"{str(text)[:40]!r} is not a window", "write it like 30m, 2h or 900s")
    return check_window(int(found.group(1)) * {"s": 1, "m": 60, "h": 3600}[found.group(2)], field)


def check_window(window_s: int, field: str = "--window") -> int:
    """A window long enough for ``rate()`` (two scrapes at Prometheus's default 1 min interval)."""
    if window_s < MIN_WINDOW_S:
        raise ShipyardError(field, f"{window_s} s is shorter than two scrape intervals",
                            f"use at least {MIN_WINDOW_S // 60}m (rate() needs two scrapes in the window)")
    return window_s


_SELECTOR = re.compile(r'[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"[^"\\]*"'
                       r'(\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"[^"\\]*")*')


def check_selector(selector: str, field: str = "--selector") -> str:
    """More PromQL label matchers (``namespace="llm",pod=~"qwen-.*"``), or one line naming ``field``."""
    if selector and not _SELECTOR.fullmatch(selector):
        raise ShipyardError(field, f"{selector[:80]!r} is not a list of label matchers",
                            'write them as PromQL does: namespace="llm",pod=~"qwen-.*"')
    return selector


def check_scrapes(api: PrometheusAPI, sel: str, model_name: str, window_s: int, peak_window_s: int,
                  window_field: str = "--window") -> None:
    """One line when this Prometheus scrapes the served model's vLLM pods too seldom for ``rate()``
    (two samples of a series in the range): over the watch window (``window_field`` names the setting
    to widen), or over the peak windows (the scrape interval is the setting to shorten). Without
    this, a rate over too few scrapes has no series and reads as a model Prometheus does not know."""
    running = f"vllm:num_requests_running{{{sel}}}"
    held = api.scalar(f"max(count_over_time({running}[{window_s}s]))", f"vLLM instances serving {model_name}") or 0
    if held < 2:
        raise ShipyardError(window_field, f"{window_s} s holds {held:g} scrape of {model_name}'s vLLM pods: shorter "
                            "than two scrape intervals of this Prometheus (rate() needs two samples)",
                            "widen the window to more than twice the scrape interval of the vLLM pods")
    over = f"[{max(window_s - peak_window_s, STEP_S)}s:{STEP_S}s]"
    most = stepped(api, f"max_over_time(max(count_over_time({running}[{peak_window_s}s])){over})",
                   f"scrapes of {model_name}'s vLLM pods", peak_window_s) or 0
    if most < 2:
        every = window_s / max(held - 1, 1)
        raise ShipyardError(api.field, f"{api.url} scrapes {model_name}'s vLLM pods about every {every:.0f} s: the "
                            f"peak request rate is counted in {peak_window_s}-s windows, which then hold {most:g} "
                            "sample (rate() needs two)",
                            f"scrape the vLLM pods at least every {peak_window_s // 2} s (the PodMonitor's "
                            "interval, or Prometheus's scrape_interval)")


def stepped(api: PrometheusAPI, query: str, what: str, peak_window_s: int) -> float | None:
    """:meth:`PrometheusAPI.scalar` of a subquery at :data:`STEP_S`-second steps over the window; when it
    has no series though the window holds the scrapes (:func:`check_scrapes` counted them), one line
    saying why instead of "no series": no ``peak_window_s``-second window ending at a step holds enough
    of them (a series that began in about the last step, or ended at the window's start)."""
    if api.instant(query):
        return api.scalar(query, what)
    raise ShipyardError(api.field, f"no {what} at the window's {STEP_S}-s steps, though the window holds scrapes of "
                        f"the vLLM pods: no {peak_window_s}-s window ending at one of those steps holds enough of them "
                        f"(series that began in about the last {STEP_S} s, or ended at the window's start)",
                        "watch again in a minute (new series), or widen the window (series that ended at its start)")


def read_live(api: PrometheusAPI, model_name: str, window_s: int, selector: str = "",
              peak_window_s: int = MIN_WINDOW_S, window_field: str = "--window") -> Live:
    """The live figures over the last ``window_s`` seconds for the served ``model_name``; the peak
    request rates (all replicas, and per replica) are the highest over the window of rates counted
    in ``peak_window_s``-second windows (:func:`peak_window`). One line (:func:`check_scrapes`) when
    the vLLM pods are scraped too seldom for either window; ``window_field``: the setting that gave
    ``window_s``."""
    check_window(window_s, window_field)
    peak_window_s = min(window_s, max(MIN_WINDOW_S, int(peak_window_s)))
    sel = ",".join([f'model_name="{model_name}"', *([selector] if selector else [])])
    check_scrapes(api, sel, model_name, window_s, peak_window_s, window_field)
    w = f"{window_s}s"

    def ratio(num: str, den: str, what: str) -> float | None:
        return api.scalar(f"sum(rate({num}{{{sel}}}[{w}])) / sum(rate({den}{{{sel}}}[{w}]))", what)

    # the replicas that served over the window, on average (autoscaling moves them; a pod gone since still counts
    # for the time it served), as a subquery of the instance count at 30 s steps
    replicas = api.scalar(f"avg_over_time(count(vllm:num_requests_running{{{sel}}})[{w}:30s])",
                          f"vLLM instances serving {model_name}")
    ttft = api.scalar(f"histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{{{sel}}}[{w}])))",
                      "TTFT p99")
    # the rates of the peak windows that end inside the watch window, every STEP_S seconds
    rate = f"sum(rate(vllm:request_success_total{{{sel}}}[{peak_window_s}s]))"
    over = f"[{max(window_s - peak_window_s, STEP_S)}s:{STEP_S}s]"
    peak = stepped(api, f"max_over_time({rate}{over})", "the peak request rate", peak_window_s)
    peak_per = stepped(api, f"max_over_time(({rate} / count(vllm:num_requests_running{{{sel}}})){over})",
                       "the peak request rate per replica", peak_window_s)

    def buckets(name: str) -> dict[float, float] | None:
        # the requests per edge over the window, at the edges the live server declares (its max_model_len caps them)
        got = {float(r["metric"].get("le", "nan")): float(r["value"])
               for r in api.instant(f"sum by (le) (increase({name}_bucket{{{sel}}}[{w}]))")}
        got = {le: n for le, n in got.items() if not math.isnan(le) and math.isfinite(n)}
        return got if got.get(math.inf, 0.0) > 0 else None

    return Live(
        prompt_tokens=ratio("vllm:request_prompt_tokens_sum", "vllm:request_prompt_tokens_count", "prompt tokens"),
        output_tokens=ratio("vllm:request_generation_tokens_sum", "vllm:request_generation_tokens_count",
                            "generation tokens"),
        rps=api.scalar(f"sum(rate(vllm:request_success_total{{{sel}}}[{w}]))", "finished requests"),
        replicas=round(replicas, 2) if replicas else 0.0,
        ttft_p99_ms=None if ttft is None else ttft * 1000.0,
        prefix_hit_rate=ratio("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", "prefix-cache hits"),
        window_s=window_s, peak_rps=peak, peak_rps_per_replica=peak_per, peak_window_s=peak_window_s,
        prompt_buckets=buckets("vllm:request_prompt_tokens"), output_buckets=buckets("vllm:request_generation_tokens"),
    )


def parse_tolerance(text: str | None, field: str = "--tolerance") -> dict[str, float]:
    """The tolerance as JSON (``{"input_length": 0.3}``) over :data:`DEFAULT_TOLERANCE`: a relative change
    per dimension, but ``prefix_cache`` in points of hit rate and ``input_distribution`` /
    ``output_distribution`` in shares of requests (0 to 1); ``field``: the option or
    parameter that gave it."""
    out = dict(DEFAULT_TOLERANCE)
    if not text:
        return out
    try:
        given = json.loads(text)
    except ValueError as err:
        raise ShipyardError(field, f"is not JSON ({err.msg})", '{"input_length": 0.3, "ttft": 0.5}') from None
    if not isinstance(given, dict):
        raise ShipyardError(field, "is not a JSON object", '{"input_length": 0.3, "ttft": 0.5}')
    for key, value in given.items():
        if key not in DEFAULT_TOLERANCE:
            raise ShipyardError(f"{field}.{key}", "is not a dimension",
                                f"use {', '.join(sorted(DEFAULT_TOLERANCE))}")
        points = key in _SHARES  # a hit rate's drop or a share of requests, in points
        out[key] = float(check_number(value, f"{field}.{key}", minimum=0.0, maximum=1.0 if points else 10.0,
                                      fix=("points of hit rate between 0 and 1, e.g. 0.1" if key == "prefix_cache" else
                                           "a share of requests between 0 and 1, e.g. 0.1") if points
                                      else "a relative change between 0 and 10, e.g. 0.25"))
    return out


#: ``watch_config``'s keys and defaults (the watch pipeline's parameter)
WATCH_DEFAULTS: dict[str, Any] = {"window": "1h", "tolerance": {}, "selector": "", "model_name": ""}


def parse_watch_config(text: str, deploy_name: str = "") -> dict[str, Any]:
    """``watch_config`` (JSON: ``window``, ``tolerance``, ``selector``, ``model_name``) checked, with
    ``window_s`` and the full tolerance; ``model_name`` (vLLM's ``model_name`` label, the served
    model name) defaults to ``deploy_name``. One line naming the key when a value is wrong."""
    given = json_object(text, "watch_config", '{"window": "1h", "tolerance": {"input_length": 0.3}}')
    unknown = sorted(set(given) - set(WATCH_DEFAULTS))
    if unknown:
        raise ShipyardError(f"watch_config.{unknown[0]}", "is not a setting", f"use {', '.join(WATCH_DEFAULTS)}")
    cfg = {**WATCH_DEFAULTS, **given}
    for key in ("window", "selector", "model_name"):
        if not isinstance(cfg[key], str):
            raise ShipyardError(f"watch_config.{key}", f"must be a string, got {type(cfg[key]).__name__}",
                                {"window": 'write e.g. "window": "1h"', "selector": 'write PromQL label matchers',
                                 "model_name": 'write the served model name, e.g. "model_name": "llm"'}[key])
    if not isinstance(cfg["tolerance"], dict):
        raise ShipyardError("watch_config.tolerance", "is not a JSON object", 'write e.g. {"input_length": 0.3}')
    return {"window": cfg["window"], "window_s": parse_window(cfg["window"], "watch_config.window"),
            "tolerance": parse_tolerance(json.dumps(cfg["tolerance"]), "watch_config.tolerance"),
            "selector": check_selector(cfg["selector"], "watch_config.selector"),
            "model_name": cfg["model_name"] or deploy_name}


def compare(env: Envelope, live: Live, tolerance: Mapping[str, float], base_model_uri: str = "") -> dict[str, Any]:
    """One row per dimension (live, qualified, the change, drifted or not) and the verdict; the
    re-qualification it proposes starts from ``base_model_uri`` when known."""
    rows: list[dict[str, Any]] = []

    def row(dim: str, name: str, now: float | None, then: float | None, drifted: bool | None, note: str) -> None:
        change = (now / then) if (now is not None and then and math.isfinite(then)) else None
        rows.append({"dimension": dim, "name": name, "live": now, "qualified": then, "ratio": change,
                     "drifted": drifted, "note": note,
                     **({"qualified_on": env.lengths_from} if dim in ("input_length", "output_length") else {})})

    for dim, name, now, then in (("input_length", "input length (tokens)", live.prompt_tokens, env.prompt_tokens),
                                 ("output_length", "output length (tokens)", live.output_tokens, env.output_tokens)):
        tol = tolerance[dim]
        if now is None or not math.isfinite(then):
            row(dim, name, now, then, None, "no traffic in the window" if now is None else "not recorded")
        else:
            row(dim, name, now, then, abs(now / then - 1) > tol, f"within x{1 - tol:.2f}..x{1 + tol:.2f}")
    per_replica = live.rps / live.replicas if live.rps is not None and live.replicas else None
    tol = tolerance["load"]
    if per_replica is None:
        row("load", "load per replica (req/s)", None, env.knee_rps, None, "no traffic or no replica in the window")
    else:
        row("load", "load per replica (req/s)", per_replica, env.knee_rps, per_replica > env.knee_rps * (1 + tol),
            f"at most the knee x{1 + tol:.2f} ({live.replicas:g} replica{'s' if live.replicas != 1 else ''})")
    predicted = predicted_ttft(env.curve, per_replica) if per_replica is not None else None
    tol = tolerance["ttft"]
    if live.ttft_p99_ms is None or predicted is None:
        row("ttft", "TTFT p99 at that load (ms)", live.ttft_p99_ms, predicted, None, "no curve or no traffic")
    else:
        row("ttft", "TTFT p99 at that load (ms)", live.ttft_p99_ms, predicted, live.ttft_p99_ms > predicted * (1 + tol),
            f"at most the benchmark curve x{1 + tol:.2f}")
    for dim, what, lengths, counts in (("input_distribution", "prompt", env.prompt_lengths, live.prompt_buckets),
                                       ("output_distribution", "output", env.output_lengths, live.output_buckets)):
        rows.append({**distribution_row(dim, what, lengths, counts, tolerance.get(dim, DEFAULT_TOLERANCE[dim])),
                     "qualified_on": env.lengths_from})
    rows.append(capacity_row(env, live, tolerance.get("capacity", DEFAULT_TOLERANCE["capacity"])))
    rows.append(prefix_cache_row(env, live, tolerance.get("prefix_cache", DEFAULT_TOLERANCE["prefix_cache"])))
    drifted = [r["dimension"] for r in rows if r["drifted"]]
    peak = "capacity" in drifted
    return {"recipe": env.recipe, "window_s": live.window_s, "lengths_from": env.lengths_from, "rows": rows,
            "drifted": drifted,
            "verdict": "drifted" if drifted else "within the envelope",
            "requalify": requalify_command(live, base_model_uri, peak=peak) if drifted else None,
            "requalify_run": {"pipeline": REQUALIFY_PIPELINE, "params": requalify_params(live, base_model_uri, peak)}
            if drifted else None}


def distribution_row(dim: str, what: str, lengths: tuple[int, ...] | None, counts: Mapping[float, float] | None,
                     tol: float) -> dict[str, Any]:
    """The live token-length distribution against the benchmarked one, bucket-wise (the module
    docstring's **Length distributions**): at each edge ``le`` of vLLM's histogram (the edges the
    live server declares), the share of requests longer than ``le`` live (its bucket counts over the
    window) and in the qualified per-request counts ``lengths`` (the replay's or the knee level's:
    :func:`envelope_from_record`); drifted when the largest gap
    (a Kolmogorov-Smirnov distance at those edges) passes both ``tol`` and the chance gap of that
    many requests (:data:`KS_1PCT`). The row names the edge where the shares differ most."""
    out: dict[str, Any] = {"dimension": dim, "name": f"{what} length distribution",
                           "live": None, "qualified": None, "ratio": None, "drifted": None}
    if lengths is None:
        return {**out, "note": f"not compared: the record holds no per-request {what} lengths (a benchmark from "
                               "before they were kept)"}
    if not counts:
        return {**out, "note": "not compared: no finished requests in the window"}
    total = counts[math.inf]
    edges = sorted(le for le in counts if math.isfinite(le))
    if not edges:
        return {**out, "note": "not compared: the live histogram has no finite edge"}
    n = len(lengths)
    gaps = [(max(0.0, 1 - counts[le] / total), sum(1 for v in lengths if v > le) / n, le) for le in edges]
    now, then, edge = max(gaps, key=lambda g: abs(g[0] - g[1]))
    distance = abs(now - then)
    chance = KS_1PCT * math.sqrt((n + total) / (n * total))
    bar = max(tol, chance)
    where = (f"share above {edge:g} tokens, the widest gap" if distance > 0
             else "the same share above every edge")
    return {**out, "live": now, "qualified": then, "edge": edge, "distance": round(distance, 4),
            "chance": round(chance, 4), "drifted": distance > bar,
            "note": f"{where}; at most {bar:.2f} apart at every edge of vLLM's histogram ({n} benchmarked, "
                    f"{total:.0f} live requests: chance alone gives {chance:.2f})"}


def prefix_cache_row(env: Envelope, live: Live, tol: float) -> dict[str, Any]:
    """The live prefix-cache hit rate against the rate the server measured during the replay of the
    recorded workload (the module docstring's **Prefix cache**): drifted when lower by more than
    ``tol`` points."""
    now, then = live.prefix_hit_rate, env.prefix_hit_rate
    out: dict[str, Any] = {"dimension": "prefix_cache", "name": "prefix-cache hit rate", "live": now, "qualified": then,
                           "ratio": now / then if now is not None and then else None, "drifted": None}
    if then is None:
        return {**out, "note": "shown only: the qualifying benchmark recorded none"}
    if now is None:
        return {**out, "note": "no prefix-cache queries in the window"}
    return {**out, "drifted": now < then - tol,
            "note": f"at least the replay's rate - {tol:g} (less of each prompt found in the cache: more prefill)"}


def capacity_row(env: Envelope, live: Live, tol: float) -> dict[str, Any]:
    """The live peak against the qualified capacity (the module docstring's **Capacity**): the
    highest load a replica took over the window against one replica's goodput at the SLO, drifted
    above ``x(1 + tol)``; ``peak`` holds live peak / recorded peak (only when ``alike``: both counted in
    ``window_s``-second windows), the headroom and the figures."""
    out: dict[str, Any] = {"dimension": "capacity", "name": "peak load per replica (req/s)",
                           "live": live.peak_rps_per_replica, "qualified": None, "ratio": None, "drifted": None}
    cap, now = env.capacity, live.peak_rps_per_replica
    if cap is None:
        return {**out, "note": "shown only: the qualifying benchmark replayed no recorded workload (no capacity "
                               "in your traffic's units)"}
    goodput, recorded = cap["goodput_rps"], cap["recorded_peak_rps"]
    replicas = live.replicas or 0.0
    alike = _positive(cap.get("window_s")) and float(cap["window_s"]) == live.peak_window_s
    peak = {"live_peak_rps": live.peak_rps, "recorded_peak_rps": recorded, "window_s": live.peak_window_s,
            "recorded_window_s": cap.get("window_s"), "alike": alike,
            "qualified_x_recorded_peak": cap["x_recorded_peak"], "goodput_rps": goodput,
            "workload_digest": cap.get("digest"), **({"window_note": cap["window_note"]} if cap.get("window_note") else {}),
            "x_recorded_peak": round(live.peak_rps / recorded, 4) if live.peak_rps is not None and alike else None,
            "headroom": round(1 - now / goodput, 4) if now is not None else None}
    out.update(qualified=goodput, peak=peak)
    if now is None:
        return {**out, "note": "no traffic or no replica in the window"}
    fleet = f", {cap['x_recorded_peak'] * replicas:.2g}x at {replicas:g} replicas" if replicas else ""
    headroom = f"headroom {peak['headroom']:.0%}" if now <= goodput else f"{-peak['headroom']:.0%} past it"
    return {**out, "ratio": now / goodput, "drifted": now > goodput * (1 + tol),
            "note": f"at most the goodput at the SLO x{1 + tol:.2f}, {headroom}; {_peak_words(peak)} (qualified: "
                    f"{'at least ' if cap['lower_bound'] else ''}{cap['x_recorded_peak']:.2g}x a replica{fleet})"}


def _peak_words(peak: Mapping[str, Any]) -> str:
    """Live peak against recorded peak, both in ``window_s``-second windows; when the recorded one was
    counted in other windows, the two figures with their windows and why they are not compared."""
    live, recorded, window = fig(peak["live_peak_rps"]), peak["recorded_peak_rps"], peak["window_s"]
    if peak["alike"]:
        x_live = f"{peak['x_recorded_peak']:.2g}x" if peak["x_recorded_peak"] is not None else "-"
        return f"live peak {live} req/s = {x_live} your recorded peak of {recorded:.3g} req/s, both in {window}-s windows"
    other = f"{peak['recorded_window_s']:g}-s windows" if _positive(peak["recorded_window_s"]) else "unstated windows"
    fix = (f"a fingerprint of a trace of at least {window} s records its {window}-s peak" if window == MIN_WINDOW_S
           else "widen --window to at least the recorded peak's window")
    if peak.get("window_note") and window == MIN_WINDOW_S:  # the capacity's own reason (e.g. Prometheus's step)
        fix = peak["window_note"]
    return (f"live peak {live} req/s in {window}-s windows, not compared with your recorded peak of {recorded:.3g} "
            f"req/s in {other}: a peak over other windows is another figure, and {fix}")


def fig(v: float | None) -> str:
    """A figure as the report prints it: three significant digits, ``-`` for none."""
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.3g}"


#: the pipeline a re-qualification runs (``shipyard watch --requalify`` submits it)
REQUALIFY_PIPELINE = "optimize-and-deploy"


def requalify_params(live: Live, base_model_uri: str = "", peak: bool = False) -> dict[str, str]:
    """The parameters of the re-qualification run on the traffic as measured: ``benchmark_config``
    with the live lengths and loads around the live rate (and, with ``peak``, the live peak load per
    replica), and ``model_uri``, the base the champion was built from, when known."""
    cfg: dict[str, Any] = {}
    if live.prompt_tokens:
        cfg["prompt_tokens"] = max(1, round(live.prompt_tokens))
    if live.output_tokens:
        cfg["output_tokens"] = max(1, round(live.output_tokens))
    if live.rps and live.replicas:
        per = live.rps / live.replicas
        cfg["profile"] = "constant"
        loads = {round(per * f, 2) for f in (0.5, 1.0, 1.5, 2.0) if per * f > 0}
        if peak and live.peak_rps_per_replica:
            loads.add(round(live.peak_rps_per_replica, 2))
        cfg["loads"] = sorted(loads)
    return {**({"model_uri": base_model_uri} if base_model_uri else {}),
            "benchmark_config": json.dumps(cfg, separators=(",", ":"))}


def requalify_command(live: Live, base_model_uri: str = "", peak: bool = False) -> str:
    """:func:`requalify_params` as the ``shipyard submit`` command line that starts the run."""
    params = requalify_params(live, base_model_uri, peak)
    model = shlex.quote(params["model_uri"]) if "model_uri" in params else "<the base model's URI>"
    return (f"shipyard submit {REQUALIFY_PIPELINE} --param model_uri={model} "
            f"--param benchmark_config={shlex.quote(params['benchmark_config'])}")


def format_report(result: Mapping[str, Any]) -> str:
    """The console lines: the verdict, where the qualified lengths come from, one line per dimension, the proposal."""
    lines = [f"watch {result['recipe']} over {result['window_s'] // 60} min: {result['verdict']}"
             + (f" ({', '.join(result['drifted'])})" if result["drifted"] else "")]
    if result.get("lengths_from"):
        lines.append(f"  lengths qualified on {result['lengths_from']}")
    for r in result["rows"]:
        mark = {True: "DRIFT", False: "ok", None: "-"}[r["drifted"]]
        ratio = f" x{r['ratio']:.2f}" if r["ratio"] is not None else ""
        lines.append(f"  {r['name']}: {mark:<5} live {fig(r['live'])} vs qualified {fig(r['qualified'])}{ratio}"
                     f"  ({r['note']})")
    if result["requalify"]:
        lines.append(f"re-qualify on this traffic: {result['requalify']}")
    return "\n".join(lines)
