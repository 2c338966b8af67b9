"""Candidate-vs-base performance ratios with their noise: a bootstrap interval per load level.

One benchmark is one draw from a noisy machine: the same README run measured a candidate at 1.2x
the base on a quiet machine and at 0.77x with other work beside it. So every candidate / base
ratio the SLO gate reports at matched load (the same level of the same benchmark config) comes with
a 95% interval from the per-request samples the benchmark keeps (``level["samples"]``,
:func:`shipyard.benchmarking.guidellm.parse_guidellm_report`):

* **TTFT p99, ITL p99**: the p99 of a resample (with replacement) of the level's requests, base and
  candidate resampled independently;
* **output tok/s**: by Little's law a level's output tok/s is its mean concurrency x the mean output
  tokens per request / the mean request latency; a resample recomputes the two means from its
  requests (the concurrency is the measured mean);
* **repeats** (``benchmark_config.repeats`` > 1: ``level["repeats"]`` and ``samples["repeat"]``): a
  two-stage bootstrap, the repeats resampled first and then the requests within each, so the
  interval counts the spread between repeats as well as within them (a little conservative by
  construction).

The interval is the percentile interval of (resampled ratio / full-sample ratio), applied to the
measured ratio, so its centre is the figure every report shows; :data:`RESAMPLES` resamples with a
fixed seed (the same results give the same interval). The plain percentile interval is too narrow
for small samples, so it is **expanded** (Hesterberg 2015, "What teachers should know about the
bootstrap"; :func:`expanded_tail`): for n requests (the smaller side) it reads the draws at the
normal tail beyond sqrt(n / (n - 1)) x t_{n-1, 0.975} instead of 1.96: the 1.1% and 98.9% draws at
12 requests, 2.3% and 97.7% at 100. A **p99 of fewer than** :data:`~shipyard.core.report.MIN_SAMPLES`
(100) requests on either side gets no interval ("too few requests for a p99 interval: 12 < 100"):
a p99 of 12 requests is about the slowest one, and the bootstrap of an extreme order statistic
fails (a resample never exceeds the sample's maximum), expanded or not. When the interval covers 1
the words are **"no difference within noise"**; otherwise faster/slower, lower/higher latency.

What the interval cannot see: the machine being busier during one of the two benchmarks as a whole
(a base measured at another time, a cached base: :func:`provenance` says which), and the
dependence between requests of one level (they share the server's queue; the resampling treats them
as independent). Repeats, interleaved by the benchmark step, are the remedy for both. A level whose
results keep no per-request latency (measured before shipyard kept it) gets no throughput interval,
said as such. Measured calibration (``benchmarks/interval_calibration.py``, one sitting, same-weights
pairs drawn from one latency distribution: lognormal TTFT and ITL with 3% slow outliers; the share
of pairs whose interval leaves out 1, target 5%, +- its binomial standard error): at 12 requests a
level (the local default, 1000 pairs) the plain percentile interval left out 1 for 9.0 +- 0.9%
(output tok/s), 15.1 +- 1.1% (TTFT p99) and 15.5 +- 1.1% (ITL p99); the expanded one 4.5 +- 0.7%
for output tok/s, and 9.2% / 9.6% for the p99s, still too narrow, hence no p99 interval there. At
100 requests (400 pairs) plain 5.2%, 6.8%, 6.8%; expanded 5.2 +- 1.1%, 6.0 +- 1.2%, 6.2 +- 1.2%. A x1.2
latency budget on noise alone: at 12 requests the point was over 1.2 for 30% (TTFT) and 23% (ITL) of
pairs, the plain interval's lower end for 0.6% (TTFT); at 100 requests the expanded lower end for one
ITL pair of 400. Pure Python (base runtime).
"""

from __future__ import annotations

import heapq
import math
import random
from statistics import NormalDist
from typing import Any

from shipyard.benchmarking.cache import age_text
from shipyard.core.numbers import percentile
from shipyard.core.report import MIN_SAMPLES, level_label

#: resamples per interval (1000 is the usual floor for a 95% percentile interval; a cluster-sized
#: benchmark, 5 levels of 500 requests, took 9.7 s of pure Python on a busy 2-core machine, load 7),
#: the interval's confidence, the resampling's seed
RESAMPLES = 1000
CONFIDENCE = 0.95
SEED = 20261202

#: the method in words (decision-record.json, the SLO report)
METHOD = ("candidate / base per load level at matched load; 95% expanded percentile bootstrap interval (Hesterberg: "
          "the percentile levels widened by sqrt(n/(n-1)) x t_{n-1} for n requests, the smaller side) from the "
          "per-request samples (TTFT p99 and ITL p99 of resampled requests; output tok/s = mean concurrency x mean "
          "output tokens / mean request latency, Little's law), base and candidate resampled independently; with "
          "repeats a two-stage bootstrap (repeats, then requests within each) so the spread between repeats counts; "
          "the interval is rescaled to the measured ratio. No p99 interval from fewer than 100 requests a side (the "
          "bootstrap of an extreme quantile fails there). 'no difference within noise' when it covers 1.")
WITHIN_NOISE = "no difference within noise"

#: (key, label, lower is better): the figures compared, as ``slo.compare``'s pairs name them
FIGURES = (("output_tokens_per_s", "output tok/s", False), ("ttft_p99", "TTFT p99", True),
           ("itl_p99", "ITL p99", True))

Group = dict[str, Any]


def _groups(level: dict[str, Any]) -> list[Group]:
    """The level's requests by repeat: per repeat the TTFT, ITL, latency and output-token samples
    (aligned by request) and the repeat's mean concurrency."""
    samples = level.get("samples") or {}
    ttft = list(samples.get("ttft_ms") or [])
    n = len(ttft)

    def column(key: str) -> list[Any]:
        values = list(samples.get(key) or [])
        return values if len(values) == n else [None] * n

    itl, lat, tok = column("itl_ms"), column("latency_s"), column("output_tokens")
    which = column("repeat") if samples.get("repeat") else [0] * n
    repeats = level.get("repeats") or [{"concurrency_mean": level.get("concurrency_mean")}]
    out: list[Group] = []
    for r, info in enumerate(repeats):
        idx = [i for i in range(n) if (which[i] or 0) == r]
        group = {"ttft": [_float(ttft[i]) for i in idx], "itl": [_float(itl[i]) for i in idx],
                 "lat": [_float(lat[i]) for i in idx], "tok": [_float(tok[i]) for i in idx],
                 "conc": info.get("concurrency_mean")}
        group["paired"] = None not in group["lat"] and None not in group["tok"]
        out.append(group)
    return [g for g in out if g["ttft"]]


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _p99(values: list[float]) -> float | None:
    """The p99 of ``values`` as :func:`~shipyard.core.numbers.percentile` gives it, from the few largest
    values only (a resample's p99 is needed thousands of times; a full sort is the slow part)."""
    n = len(values)
    if not n:
        return None
    pos = 0.99 * (n - 1)
    lo = math.floor(pos)
    tail = heapq.nlargest(n - lo, values)[::-1]  # sorted values lo .. n-1: all the interpolation reads
    return tail[0] + (tail[min(1, len(tail) - 1)] - tail[0]) * (pos - lo)


def _throughput(group: Group, idx: list[int]) -> float | None:
    """Little's law on the requests ``idx`` of one repeat: concurrency x mean tokens / mean latency."""
    tok, lat = group["tok"], group["lat"]
    if not group["conc"]:
        return None
    if group["paired"]:  # every request has both figures: the fast path
        tokens, seconds = sum(map(tok.__getitem__, idx)), sum(map(lat.__getitem__, idx))
    else:
        both = [i for i in idx if tok[i] is not None and lat[i] is not None]
        if not both:
            return None
        tokens, seconds = sum(float(tok[i]) for i in both), sum(float(lat[i]) for i in both)
    return float(group["conc"]) * tokens / seconds if seconds > 0 else None


def _column(values: list[Any], idx: list[int]) -> list[float]:
    return [v for v in map(values.__getitem__, idx) if v is not None]


def _figures(groups: list[Group], draws: list[tuple[Group, list[int]]]) -> dict[str, float | None]:
    """The three figures of one (re)sample: ``draws`` lists (repeat, request indices)."""
    tps = [_throughput(g, idx) for g, idx in draws]
    return {"output_tokens_per_s": None if not tps or None in tps else sum(t for t in tps if t is not None) / len(tps),
            "ttft_p99": _p99([v for g, idx in draws for v in _column(g["ttft"], idx)]),
            "itl_p99": _p99([v for g, idx in draws for v in _column(g["itl"], idx)])}


def _resample(groups: list[Group], rng: random.Random) -> dict[str, float | None]:
    k = len(groups)
    chosen = groups if k == 1 else [groups[rng.randrange(k)] for _ in range(k)]
    draw = rng.random
    return _figures(groups, [(g, [int(draw() * n) for _ in range(n)]) for g in chosen for n in (len(g["ttft"]),)])


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile (``p`` > 0.5, integer ``df`` >= 1) by bisection on the exact closed-form CDF
    (Abramowitz & Stegun 26.7.3-4); pure Python, 1e-9 close."""
    def inside(t: float) -> float:  # P(|T| < t)
        theta = math.atan(t / math.sqrt(df))
        c2, s = math.cos(theta) ** 2, math.sin(theta)
        if df % 2:  # odd: 2/pi (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...))
            term, total = 1.0, 1.0 if df > 1 else 0.0
            for k in range(1, (df - 1) // 2):
                term *= c2 * 2 * k / (2 * k + 1)
                total += term
            return 2 / math.pi * (theta + s * math.cos(theta) * total)
        term, total = 1.0, 1.0  # even: sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        return s * total

    target, lo, hi = 2 * p - 1, 0.0, 1.0
    while inside(hi) < target:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if inside(mid) < target else (lo, mid)
        if hi - lo < 1e-10:
            break
    return (lo + hi) / 2


def expanded_tail(n: int, confidence: float = CONFIDENCE) -> float:
    """The percentile of the bootstrap draws each end of the interval reads, for a sample of ``n``: Hesterberg's
    expanded percentile interval (``Hesterberg 2015, What teachers should know about the bootstrap``), the
    tail of the normal beyond sqrt(n / (n - 1)) x t_{n-1} instead of z. The percentile bootstrap is too narrow
    for small samples (its spread is the plug-in's, (n - 1) / n of the variance, and it knows no t); at 12
    requests the 95% interval reads the 1.1% and 98.9% draws instead of 2.5% and 97.5%."""
    tail = (1 - confidence) / 2
    if n < 2:
        return tail
    return NormalDist().cdf(-math.sqrt(n / (n - 1)) * t_quantile(1 - tail, n - 1))


def words(key: str, low: float | None, high: float | None) -> str:
    """The interval in words: "no difference within noise" when it covers 1, else which way it went."""
    if low is None or high is None:
        return "no interval"
    if low <= 1 <= high:
        return WITHIN_NOISE
    above = low > 1
    if key == "output_tokens_per_s":
        return "faster" if above else "slower"
    return "higher latency" if above else "lower latency"


def ratio_text(row: dict[str, Any]) -> str:
    """"TTFT p99 x1.03 [0.88, 1.21] at concurrency 1: no difference within noise" (the interval left
    out, with why, when there is none)."""
    interval = (f" [{row['low']:.3g}, {row['high']:.3g}]" if row.get("low") is not None
                else f" ({row.get('note') or 'no interval'})")
    said = f": {row['words']}" if row.get("low") is not None else ""
    return f"{row['label']} x{row['ratio']:.3g}{interval} at {row['load']}{said}"


def level_ratios(base: dict[str, Any], cand: dict[str, Any], measured: dict[str, float | None],
                 iters: int = RESAMPLES, seed: int = SEED) -> list[dict[str, Any]]:
    """Rows ``{"level", "load", "figure", "label", "ratio", "low", "high", "words", "note", "repeats"}``
    for one level pair; ``measured``: the ratios the reports show (``slo.compare``'s pair, keyed like
    :data:`FIGURES`), the centre of each interval."""
    bg, cg = _groups(base), _groups(cand)
    reps = {"base": len(bg), "candidate": len(cg)}
    rows = []
    boot: dict[str, list[float]] = {key: [] for key, _, _ in FIGURES}
    plug: dict[str, float | None] = {}
    if bg and cg and iters > 0:
        full_b = _figures(bg, [(g, list(range(len(g["ttft"])))) for g in bg])
        full_c = _figures(cg, [(g, list(range(len(g["ttft"])))) for g in cg])
        plug = {key: (full_c[key] / full_b[key] if full_c[key] and full_b[key] else None) for key, _, _ in FIGURES}
        rng = random.Random(seed)
        for _ in range(iters):
            rb, rc = _resample(bg, rng), _resample(cg, rng)
            for key, _, _ in FIGURES:
                if plug.get(key) and rb[key] and rc[key]:
                    boot[key].append(rc[key] / rb[key] / plug[key])  # type: ignore[operator]
    # the smaller side's number of requests sizes the expansion (base and candidate are resampled independently)
    fewest = min(sum(len(g["ttft"]) for g in bg), sum(len(g["ttft"]) for g in cg)) if bg and cg else 0
    tail = expanded_tail(fewest)
    for key, label, lower in FIGURES:
        ratio = measured.get(key)
        if ratio is None:
            continue
        low = high = None
        note = ""
        unresolved = False
        draws = sorted(boot[key])
        if iters <= 0:
            note = "not computed"
        elif key != "output_tokens_per_s" and bg and cg and fewest < MIN_SAMPLES:
            note, unresolved = f"too few requests for a p99 interval: {fewest} < {MIN_SAMPLES}", True
        elif len(draws) >= iters // 2:
            low, high = round(ratio * percentile(draws, tail), 4), round(ratio * percentile(draws, 1 - tail), 4)
        elif not (bg and cg):
            note = "no per-request samples"
        elif key == "output_tokens_per_s":
            note = "no per-request latency and output tokens in the results (measured before shipyard kept them)"
        else:
            note = "too few samples"
        rows.append({"level": cand.get("name"), "load": level_label(cand), "figure": key, "label": label,
                     "lower_is_better": lower, "ratio": ratio, "low": low, "high": high,
                     "words": words(key, low, high), "note": note, "unresolved": unresolved, "repeats": reps})
    return rows


def comparison(base_levels: list[dict[str, Any]], cand_levels: list[dict[str, Any]],
               pairs: list[dict[str, Any]], resamples: int | None = None) -> dict[str, Any]:
    """Every level's rows (:func:`level_ratios`), with the method, confidence and resample count
    (``resamples`` 0: the ratios without intervals)."""
    iters = RESAMPLES if resamples is None else resamples
    rows: list[dict[str, Any]] = []
    for b, c, p in zip(base_levels, cand_levels, pairs, strict=False):
        measured = {"output_tokens_per_s": p.get("output_tokens_per_s_ratio"), "ttft_p99": p.get("ttft_p99_ratio"),
                    "itl_p99": p.get("itl_p99_ratio")}
        rows += level_ratios(b, c, measured, iters=iters)
    return {"method": METHOD, "confidence": CONFIDENCE, "resamples": iters, "rows": rows}


def find(comp: dict[str, Any] | None, level: str | None, figure: str) -> dict[str, Any] | None:
    """The row of ``figure`` at ``level`` in a :func:`comparison` (None when absent)."""
    return next((r for r in (comp or {}).get("rows") or [] if r["level"] == level and r["figure"] == figure), None)


def beyond(row: dict[str, Any], budget: float, upper: bool) -> str:
    """How a ratio stands against a budget (``upper``: at most ``budget``, else at least): ``"fail"``
    when the interval lies wholly beyond it (lower end above an upper budget, upper end below a
    lower one), ``"within noise"`` when the point is beyond it but the interval reaches back, ``"ok"``
    when the point is within it. Without an interval the point decides (``"fail"`` or ``"ok"``), except for a
    p99 of too few requests to resolve (``row["unresolved"]``): a point beyond the budget is
    ``"inconclusive"``, since no interval from so few requests can tell it from noise either way, and a
    declared budget the benchmark cannot judge is not met (the accuracy gate's rule for an undecided
    metric; the row's note says why)."""
    ratio, low, high = row["ratio"], row.get("low"), row.get("high")
    over = ratio > budget if upper else ratio < budget
    if not over:
        return "ok"
    if row.get("unresolved"):
        return "inconclusive"
    if low is None or high is None:
        return "fail"
    sure = low > budget if upper else high < budget
    return "fail" if sure else "within noise"


#: requests in the short level that re-checks a cached base (fewer when the config asks for fewer)
RECHECK_REQUESTS = 30


def recheck(cached: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """Whether a cached base figure still holds on this machine: the fresh short level ``fresh`` (one
    level of a few requests, measured now) against the cached level of the same name, as the output
    tok/s ratio fresh / cached with its interval (:func:`level_ratios`). ``held``: the interval covers 1
    ("no difference within noise"); a level without per-request samples on either side cannot be
    re-checked, and does not hold (the base is measured again rather than trusted unseen).
    Returns ``{"level", "load", "requests", "cached_output_tokens_per_s", "fresh_output_tokens_per_s",
    "ratio", "low", "high", "words", "held", "text"}``."""
    c_tps, f_tps = cached.get("output_tokens_per_s"), fresh.get("output_tokens_per_s")
    ratio = round(float(f_tps) / float(c_tps), 4) if c_tps and f_tps else None
    row = next(iter(level_ratios(cached, fresh, {"output_tokens_per_s": ratio})), None) if ratio else None
    low, high = (row or {}).get("low"), (row or {}).get("high")
    held = low is not None and high is not None and low <= 1 <= high
    load = level_label(fresh)
    fresh_n = len((fresh.get("samples") or {}).get("ttft_ms") or [])
    if ratio is None:
        said = "no output tok/s to compare"
    elif low is None:
        said = f"output tok/s x{ratio:.3g} ({(row or {}).get('note') or 'no interval'})"
    else:
        said = f"output tok/s x{ratio:.3g} [{low:.3g}, {high:.3g}] ({(row or {}).get('words')})"
    verdict = "held" if held else "did not hold"
    return {"level": fresh.get("name"), "load": load, "requests": fresh_n, "cached_output_tokens_per_s": c_tps,
            "fresh_output_tokens_per_s": f_tps, "ratio": ratio, "low": low, "high": high,
            "words": (row or {}).get("words") or "no interval", "held": held,
            "text": f"re-checked with {fresh_n} requests at {load}: {said}: the cached figure {verdict}"}


def provenance(results: dict[str, Any] | None) -> dict[str, Any]:
    """Where a benchmark result's figures come from: ``{"source": "this run"}``, or ``{"source":
    "cache", "measured_at", "age_seconds", "origin", "key", "hardware"}`` for a result the base
    benchmark cache restored (:mod:`shipyard.benchmarking.cache`); ``text``: the same in words."""
    results = results or {}
    cached = results.get("cached")
    if not cached:
        found = {"source": "this run", **({"recheck": results["recheck"]} if results.get("recheck") else {})}
        return {**found, "text": provenance_text(found)}
    hardware = cached.get("hardware") or {"device": results.get("device"), "cpu": (results.get("cpu") or {}).get("model")}
    found = {"source": "cache", "measured_at": cached.get("measured_at"), "age_seconds": cached.get("age_seconds"),
             "origin": cached.get("origin") or "an earlier run", "key": cached.get("key"), "hardware": hardware,
             "recheck": cached.get("recheck")}
    return {**found, "text": provenance_text(found)}


def provenance_text(source: dict[str, Any] | None) -> str:
    """"base measured in this run", "base figures from cache (measured 2026-12-01T10:00:00Z by run-x, 3 h
    ago; re-checked with 12 requests at concurrency 1: ...: the cached figure held)", or "base measured
    in this run (a cached figure did not hold: re-checked ...)" (:func:`recheck`)."""
    check = (source or {}).get("recheck") or {}
    if not source or source.get("source") != "cache":
        return f"base measured in this run (the cached figure: {check['text']})" if check.get("text") \
            else "base measured in this run"
    return (f"base figures from cache (measured {source.get('measured_at')} by {source.get('origin')}, "
            f"{age_text(source.get('age_seconds'))} ago; "
            f"{check.get('text') or 'not re-checked in this run'})")
