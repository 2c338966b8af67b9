"""Workload fidelity: did the benchmark send and serve the traffic its fingerprint describes?

After a benchmark, :func:`check_fidelity` compares what was **sent** (each request's prompt and
output tokens and its send time, as guidellm's JSON report lists them: :func:`sent_from_guidellm`)
and what was **served** (vLLM's own prefix-cache counters, ``vllm:prefix_cache_hits_total`` and
``vllm:prefix_cache_queries_total`` read from ``/metrics`` before and after: :func:`server_hit_ratio`)
with the fingerprint (:mod:`shipyard.benchmarking.workload`):

* ``ks_input`` / ``ks_output``: the Kolmogorov-Smirnov distance (largest gap between the two
  cumulative distributions, 0..1) between the lengths sent and the fingerprint's marginal
  (its histogram, uniform inside each bin), with the Wasserstein-1 distance (the mean shift in
  tokens) and that shift relative to the fingerprint's mean; within tolerance when the KS
  distance or the relative W1 distance is;
* ``rate``: the achieved arrival rate against the recorded mean rate x ``time_scale``;
* ``hit_rate``: ``|delta hit rate|``, the server's measured prefix-cache hit ratio against the
  fingerprint's theoretical one in tokens.

Each is judged against the ``workload.tolerance`` (:mod:`shipyard.benchmarking.workload_config`):
the verdict is ``valid`` when every measured check is within it and every required check could be
measured; otherwise ``invalid``, and the SLO verdict of that benchmark must not be trusted.
:func:`fidelity_line` is the one line the reports print next to goodput.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from shipyard.benchmarking.workload import summary_line
from shipyard.benchmarking.workload_config import CHECKS, DEFAULT_TOLERANCE


# --------------------------------------------------------------------------- inputs
def sent_from_guidellm(report: dict[str, Any]) -> list[dict[str, float]]:
    """Every request guidellm sent (successful, errored, incomplete; all benchmarks of the report)
    as ``{"t": start (s, epoch), "input": prompt tokens, "output": output tokens}``; a request
    without a start time or token count keeps None there."""
    out: list[dict[str, Any]] = []
    for bench in report.get("benchmarks") or []:
        requests = bench.get("requests") or {}
        for part in ("successful", "errored", "incomplete"):
            for r in requests.get(part) or []:
                timings = (r.get("info") or {}).get("timings") or {}
                start = r.get("request_start_time")
                if start is None:
                    start = timings.get("request_start") or timings.get("targeted_start")
                out.append({"t": start, "input": r.get("prompt_tokens"),
                            "output": r.get("output_tokens") if part == "successful" else None})
    return out


def prefix_counters(metrics_text: str) -> tuple[float, float] | None:
    """``(hits, queries)`` summed over every series of vLLM's prefix-cache counters in a
    ``/metrics`` text (vLLM 0.32: ``vllm:prefix_cache_hits_total``, ``vllm:prefix_cache_queries_total``,
    in tokens); None when the server exports neither."""
    found = {"vllm:prefix_cache_hits_total": 0.0, "vllm:prefix_cache_queries_total": 0.0}
    seen = False
    for line in metrics_text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in found:
            try:
                found[name] += float(line.rsplit(" ", 1)[-1])
                seen = True
            except ValueError:
                continue
    return (found["vllm:prefix_cache_hits_total"], found["vllm:prefix_cache_queries_total"]) if seen else None


def server_hit_ratio(before: str, after: str) -> float | None:
    """The prefix-cache hit ratio of the traffic between two ``/metrics`` texts (None when the
    counters are missing or nothing was queried)."""
    a, b = prefix_counters(before), prefix_counters(after)
    if a is None or b is None or b[1] - a[1] <= 0:
        return None
    return round((b[0] - a[0]) / (b[1] - a[1]), 6)


# --------------------------------------------------------------------------- distances
def _marginal(fp: dict[str, Any], part: str) -> tuple[np.ndarray, np.ndarray]:
    """A length marginal of the joint histogram: the bins' edges and their counts."""
    joint = fp["lengths"]["joint"]
    edges = np.asarray(joint["input_edges" if part == "input" else "output_edges"], dtype=float)
    counts = np.zeros(len(edges) - 1)
    for i, j, n in joint["cells"]:
        counts[i if part == "input" else j] += float(n)
    return edges, counts


def _fp_cdf(edges: np.ndarray, counts: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """P(L <= x) for whole x, each bin ``[lo, hi)`` spread evenly over its whole numbers."""
    total = counts.sum()
    below = np.concatenate([[0.0], np.cumsum(counts)])  # counts in the bins before bin k
    k = np.clip(np.searchsorted(edges, xs, side="right") - 1, 0, len(counts) - 1)
    lo, hi = edges[k], edges[k + 1]
    inside = np.clip((xs - lo + 1) / np.maximum(hi - lo, 1.0), 0.0, 1.0)
    cdf = (below[k] + inside * counts[k]) / total
    return np.where(xs < edges[0], 0.0, np.where(xs >= edges[-1], 1.0, cdf))


def distances(values: list[float], fp: dict[str, Any], part: str) -> dict[str, float]:
    """KS and Wasserstein-1 distances between sent lengths and the fingerprint's marginal."""
    edges, counts = _marginal(fp, part)
    sent = np.sort(np.asarray(values, dtype=float))
    top = int(max(edges[-1], sent[-1] + 1))
    if top <= 2_000_000:
        xs = np.arange(0, top + 1, dtype=float)
    else:  # very long contexts: the sent values and the edges, with their neighbours
        pts = np.concatenate([sent, sent - 1, edges - 1, edges])
        xs = np.unique(np.clip(pts, 0, None))
    f_fp = _fp_cdf(edges, counts, xs)
    f_sent = np.searchsorted(sent, xs, side="right") / len(sent)
    gap = np.abs(f_sent - f_fp)
    ks = float(gap.max())
    step = np.diff(np.append(xs, xs[-1] + 1))
    w1 = float((gap * step).sum())
    mids = (edges[:-1] + np.maximum(edges[1:] - 1, edges[:-1])) / 2
    mean = float((mids * counts).sum() / counts.sum()) or 1.0
    return {"ks": round(ks, 4), "w1_tokens": round(w1, 3), "w1_relative": round(w1 / mean, 4),
            "sent_mean": round(float(sent.mean()), 3), "fingerprint_mean": round(mean, 3)}


def achieved_rate(times: list[float]) -> float | None:
    """Requests per second between the first and the last send."""
    ts = sorted(t for t in times if t is not None)
    if len(ts) < 2 or ts[-1] <= ts[0]:
        return None
    return (len(ts) - 1) / (ts[-1] - ts[0])


# --------------------------------------------------------------------------- the check
def check_fidelity(fingerprint: dict[str, Any], sent: list[dict[str, Any]], *, server_hit: float | None,
                   time_scale: float = 1.0, tolerance: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fidelity record: each check's figure, limit and outcome, the verdict and its line."""
    tol = {**DEFAULT_TOLERANCE, **(tolerance or {})}
    fp = fingerprint
    checks: dict[str, dict[str, Any]] = {}
    for part, key in (("input", "ks_input"), ("output", "ks_output")):
        values = [r[part] for r in sent if r.get(part) is not None]
        if values:
            d = distances(values, fp, part)
            ok = d["ks"] <= tol[key] or d["w1_relative"] <= tol["w1_relative"]
            checks[key] = {**d, "limit": tol[key], "w1_limit": tol["w1_relative"], "ok": ok, "requests": len(values)}
        else:
            checks[key] = {"ok": None, "why": f"no {part} token counts in the harness's report"}
    recorded = (fp.get("arrivals") or {}).get("mean_rate_rps")
    achieved = achieved_rate([r.get("t") for r in sent])
    if recorded is None:
        checks["rate"] = {"ok": None, "skipped": True, "why": "the fingerprint has no arrival rate"}
    elif achieved is None:
        checks["rate"] = {"ok": None, "why": "fewer than two send times"}
    else:
        target = recorded * time_scale
        off = abs(achieved / target - 1)
        checks["rate"] = {"achieved_rps": round(achieved, 4), "target_rps": round(target, 4),
                          "recorded_rps": recorded, "time_scale": time_scale, "relative_error": round(off, 4),
                          "limit": tol["rate_ratio"], "ok": off <= tol["rate_ratio"]}
    theoretical = (fp.get("prefix") or {}).get("hit_rate_tokens")
    if theoretical is None:
        checks["hit_rate"] = {"ok": None, "skipped": True, "why": "the fingerprint has no prefix statistics"}
    elif server_hit is None:
        checks["hit_rate"] = {"ok": None, "theoretical": theoretical,
                              "why": "the server's prefix-cache counters were not read"}
    else:
        delta = abs(server_hit - theoretical)
        checks["hit_rate"] = {"server": server_hit, "theoretical": theoretical, "delta": round(delta, 4),
                              "limit": tol["hit_rate_delta"], "ok": delta <= tol["hit_rate_delta"]}
    failed = [k for k in CHECKS if checks[k].get("ok") is False]
    unmeasured = [k for k in tol["require"] if checks[k].get("ok") is None and not checks[k].get("skipped")]
    valid = not failed and not unmeasured
    record = {"schema": "shipyard.workload-fidelity/v1", "fingerprint": fp.get("digest"), "valid": valid,
              "failed": failed, "unmeasured": unmeasured, "checks": checks, "tolerance": tol}
    record["line"] = fidelity_line(record)
    return record


def _mark(check: dict[str, Any]) -> str:
    return "" if check.get("ok") is not False else " OUT"


def fidelity_line(record: dict[str, Any]) -> str:
    """``workload fidelity: VALID (fingerprint 1a2b3c4d5e6f): input KS 0.04 (W1 3.1 tok), output KS 0.02,
    rate 0.98 x recorded (target 1.2 req/s), prefix hit 41.0% served vs 43.5% theoretical (|delta| 2.5 pts)``."""
    c = record["checks"]
    parts = []
    for key, name in (("ks_input", "input"), ("ks_output", "output")):
        if "ks" in c[key]:
            parts.append(f"{name} KS {c[key]['ks']:.3f} (W1 {c[key]['w1_tokens']:.3g} tok, "
                         f"{c[key]['w1_relative']:.1%}){_mark(c[key])}")
        else:
            parts.append(f"{name} not measured")
    rate = c["rate"]
    if "achieved_rps" in rate:
        parts.append(f"rate {rate['achieved_rps'] / rate['target_rps']:.2f} x target "
                     f"({rate['achieved_rps']:.3g} vs {rate['target_rps']:.3g} req/s){_mark(rate)}")
    else:
        parts.append(f"rate {'skipped' if rate.get('skipped') else 'not measured'}")
    hit = c["hit_rate"]
    if "server" in hit:
        parts.append(f"prefix-cache hit {hit['server']:.1%} served vs {hit['theoretical']:.1%} theoretical "
                     f"(|delta| {hit['delta'] * 100:.1f} pts){_mark(hit)}")
    else:
        parts.append(f"prefix-cache hit {'skipped' if hit.get('skipped') else 'not measured'}")
    verdict = "VALID" if record["valid"] else "INVALID"
    why = ""
    if not record["valid"]:
        why = " (" + ", ".join([f"{k} out of tolerance" for k in record["failed"]]
                               + [f"{k} not measured" for k in record["unmeasured"]]) + ")"
    digest = str(record.get("fingerprint") or "")[7:19]
    return f"workload fidelity: {verdict}{why}, fingerprint {digest}: " + ", ".join(parts)


def fidelity_metrics(record: dict[str, Any]) -> dict[str, float]:
    """Flat figures for KFP/MLflow metrics (``workload.*``)."""
    c = record["checks"]
    out: dict[str, float] = {"workload.fidelity_valid": 1.0 if record["valid"] else 0.0}
    for key in ("ks_input", "ks_output"):
        for fig in ("ks", "w1_tokens"):
            if isinstance(c[key].get(fig), int | float):
                out[f"workload.{key.split('_')[1]}_{fig}"] = float(c[key][fig])
    if isinstance(c["rate"].get("achieved_rps"), int | float):
        out["workload.achieved_rps"] = float(c["rate"]["achieved_rps"])
        out["workload.rate_relative_error"] = float(c["rate"]["relative_error"])
    if isinstance(c["hit_rate"].get("server"), int | float):
        out["workload.prefix_hit_server"] = float(c["hit_rate"]["server"])
    if isinstance(c["hit_rate"].get("theoretical"), int | float):
        out["workload.prefix_hit_theoretical"] = float(c["hit_rate"]["theoretical"])
    return {k: v for k, v in out.items() if math.isfinite(v)}


def fidelity_markdown(fingerprint: dict[str, Any], record: dict[str, Any] | None) -> str:
    """The SLO report's workload section: the fingerprint's line and digest, the fidelity line, the
    prefix-cache hit rate measured on the vLLM server against the theoretical one, and the verdict's
    consequence (an invalid workload makes the SLO verdict untrustworthy)."""
    lines = ["## Workload", "", f"- {summary_line(fingerprint)}", f"- fingerprint digest `{fingerprint.get('digest')}`"]
    if record is None:
        lines.append("- workload fidelity: not checked (the benchmark recorded no fidelity)")
        return "\n".join(lines) + "\n"
    lines.append(f"- {record['line']}")
    hit = record["checks"]["hit_rate"]
    if "server" in hit:
        lines.append(f"- prefix-cache hit rate measured on the vLLM server: {hit['server']:.1%} "
                     f"(theoretical at block size {(fingerprint.get('prefix') or {}).get('block_size')}: "
                     f"{hit['theoretical']:.1%})")
    if not record["valid"]:
        lines.append("- **the SLO verdict of this benchmark is invalid**: the traffic sent or served is outside "
                     "the workload tolerance, so it does not describe your workload")
    return "\n".join(lines) + "\n"
