"""Capacity in your units: the SLO gate's goodput as "N x your recorded peak" (issue 35, item 4).

When a benchmark replayed a recorded workload (``results["workload"]``: :mod:`shipyard.steps.workload`),
its fingerprint's arrival process (``arrivals``: the mean request rate, the peak rates, peak/mean)
turns the SLO gate's figure into the user's own units::

    goodput at the SLO = requests/s x goodput share, at the highest load level meeting the SLO
    capacity           = goodput at the SLO / the recorded peak rate   (and / the recorded mean rate)

e.g. "serves 3.2x your recorded peak (1.9 req/s at the SLO vs a peak of 0.6 req/s in 120-s windows)".
The peak is counted in the windows ``shipyard watch`` counts production's peak in
(:func:`shipyard.benchmarking.workload.recorded_peak`: 120 s), so the recorded and the live peak
are counted alike; ``window_s`` names the window, and the text says so when it is another one (a
trace shorter than 120 s, or a fingerprint from before ``peaks_rps``, whose peak is its rate
series' over the series' own window). The recorded
rates are the trace's own, unscaled: ``workload.time_scale`` speeds up the replay (its fidelity
check compares the rate sent with recorded x time_scale) but never the user's peak; the text names
the scale the replay ran at. No level meeting the SLO gives 0x; every measured level meeting it
gives a lower bound ("at least"), since no measured load broke the SLO. The goodput is measured at
the benchmark's load levels, with their prompt and output lengths: when those differ from the
recorded mean lengths by more than :data:`LENGTH_GAP`, the text says so. Without a recorded
workload there is no capacity figure (None), never a made-up one. Pure Python (base runtime); the
deploy's sizing (:mod:`shipyard.serving.sizing`) reads the figure back from the champion's record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shipyard.benchmarking.workload import recorded_peak
from shipyard.serving.watch import MIN_WINDOW_S

#: the arrival figures the candidate record keeps of a replayed workload's fingerprint
ARRIVAL_KEYS = ("mean_rate_rps", "peak_rate_rps", "peak_to_mean", "window_s", "duration_s", "interarrival_cv",
                "rate_series_rps", "peaks_rps")
#: the relative gap between the load levels' mean tokens per request and the recorded ones that the text names
LENGTH_GAP = 0.25


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def recorded_arrivals(workload: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The recorded arrival figures (:data:`ARRIVAL_KEYS`) of a replayed workload: a benchmark's
    ``results["workload"]`` (its fingerprint's ``arrivals``) or a candidate record's ``workload``
    (the ``arrivals`` kept there); None without a workload or without a recorded peak rate."""
    if not isinstance(workload, Mapping):
        return None
    arrivals = workload.get("arrivals") or (workload.get("fingerprint") or {}).get("arrivals")
    if not isinstance(arrivals, Mapping) or not _positive(arrivals.get("peak_rate_rps")):
        return None
    kept = {k: arrivals.get(k) for k in ARRIVAL_KEYS}
    if arrivals.get("peaks_not_computed"):  # a Prometheus fingerprint's windows without a peak, and why
        kept["peaks_not_computed"] = arrivals["peaks_not_computed"]
    if arrivals.get("rate_series_gaps"):  # where the rate series has no value (a Prometheus step left out)
        kept["rate_series_gaps"] = arrivals["rate_series_gaps"]
    return kept


def recorded_lengths(workload: Mapping[str, Any] | None) -> dict[str, float] | None:
    """The recorded mean input and output tokens per request (``{"input_mean", "output_mean"}``) of a
    replayed workload, from its fingerprint or the candidate record's ``lengths``; None when unknown."""
    if not isinstance(workload, Mapping):
        return None
    kept = workload.get("lengths")
    if isinstance(kept, Mapping) and "input_mean" in kept:
        return {"input_mean": kept["input_mean"], "output_mean": kept.get("output_mean")}
    lengths = (workload.get("fingerprint") or {}).get("lengths") or {}
    inp, out = (lengths.get("input") or {}).get("mean"), (lengths.get("output") or {}).get("mean")
    return {"input_mean": inp, "output_mean": out} if _positive(inp) else None


def times(value: float) -> str:
    """A capacity multiple as people say it: ``3.2``, ``0.45``, ``15``."""
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def _length_note(level: Mapping[str, Any] | None, lengths: Mapping[str, Any] | None) -> str:
    """Words when the level's requests are much longer or shorter than the recorded ones ("" otherwise)."""
    if not level or not lengths:
        return ""
    bench = (level.get("prompt_tokens_mean") or 0) + (level.get("output_tokens_mean") or 0)
    recorded = (lengths.get("input_mean") or 0) + (lengths.get("output_mean") or 0)
    if not bench or not recorded or abs(bench / recorded - 1) <= LENGTH_GAP:
        return ""
    return (f"the load levels' requests ({bench:.0f} tokens on average) are "
            f"{'shorter' if bench < recorded else 'longer'} than your recorded ones ({recorded:.0f}): "
            f"the figure is {'optimistic' if bench < recorded else 'pessimistic'}")


def goodput_rps(level: Mapping[str, Any], verdict: Mapping[str, Any]) -> float:
    """Requests meeting the SLO per second: the level's completed requests/s x its goodput share (the
    SLO verdict's ``goodput``, :func:`shipyard.gates.slo.goodput`)."""
    return round(float(level.get("requests_per_s") or 0.0) * float(verdict.get("goodput") or 0.0), 4)


def peak_capacity(levels: list[Mapping[str, Any]], verdicts: list[Mapping[str, Any]],
                  workload: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The capacity at the SLO in units of the recorded traffic (see the module docstring): ``levels``
    the benchmark's load levels (``requests_per_s``), ``verdicts`` the SLO gate's per level
    (``meets``, ``goodput``), ``workload`` its ``results["workload"]``. None without a recorded workload."""
    arrivals = recorded_arrivals(workload)
    if arrivals is None:
        return None
    met = [(lv, v) for lv, v in zip(levels, verdicts, strict=False)
           if v.get("meets") and lv.get("requests_per_s") is not None]
    best = max(met, key=lambda p: float(p[0]["requests_per_s"])) if met else None
    rps = float(best[0]["requests_per_s"]) if best else 0.0
    at_slo = goodput_rps(best[0], best[1]) if best else 0.0
    broke = [lv for lv, v in zip(levels, verdicts, strict=False)
             if not v.get("meets") and float(lv.get("requests_per_s") or 0.0) >= rps]
    (peak, window), mean = recorded_peak(arrivals), arrivals.get("mean_rate_rps")
    peak = float(peak)
    cap: dict[str, Any] = {
        "goodput_rps": at_slo, "level": best[0].get("name") if best else None,
        "requests_per_s": rps if best else None, "goodput_share": best[1].get("goodput") if best else None,
        "lower_bound": bool(best) and not broke,
        "recorded_peak_rps": peak, "recorded_mean_rps": mean, "peak_to_mean": arrivals.get("peak_to_mean"),
        "window_s": window, "window_note": window_note(window, arrivals.get("peaks_rps") is not None,
                                                       (arrivals.get("peaks_not_computed") or {}).get(str(MIN_WINDOW_S))),
        "x_recorded_peak": round(at_slo / peak, 4),
        "x_recorded_mean": round(at_slo / float(mean), 4) if _positive(mean) else None,
        "time_scale": float((workload or {}).get("time_scale") or 1.0),
        "digest": (workload or {}).get("digest"),
        "note": _length_note(best[0] if best else None, recorded_lengths(workload)),
    }
    cap["short"] = capacity_short(cap)
    cap["text"] = capacity_text(cap)
    return cap


def window_note(window: float | None, recorded_peaks: bool, not_computed: str | None = None) -> str:
    """Words when the recorded peak is not counted in ``shipyard watch``'s
    :data:`~shipyard.serving.watch.MIN_WINDOW_S`-second windows (""
    when it is): a peak over shorter windows is higher than the watch's live peak of the same traffic.
    ``not_computed``: the fingerprint's own reason it has no peak in those windows (Prometheus's step)."""
    if window == MIN_WINDOW_S:
        return ""
    why = not_computed or (f"the trace is shorter than {MIN_WINDOW_S} s" if recorded_peaks else
                           "the fingerprint predates per-window peaks: rebuild it with shipyard workload fingerprint")
    shown = f"{window:g}-s windows" if window else "unstated windows"
    return (f"the recorded peak is counted in {shown}, not the {MIN_WINDOW_S}-s windows shipyard watch "
            f"counts production's peak in ({why})")


def capacity_short(cap: Mapping[str, Any]) -> str:
    """The console's words: ``3.2x your recorded peak`` (``at least`` when no measured load broke the SLO)."""
    return f"{'at least ' if cap.get('lower_bound') else ''}{times(cap['x_recorded_peak'])}x your recorded peak"


def capacity_text(cap: Mapping[str, Any]) -> str:
    """The reports' sentence: the multiple of the recorded peak (and mean), the figures it divides,
    the replay's time scale and, where it applies, that it is a lower bound or measured on other lengths."""
    peak = cap["recorded_peak_rps"]
    window = f" in {cap['window_s']:g}-s windows" if cap.get("window_s") else ""
    scale = cap.get("time_scale") or 1.0
    replay = ("the replay ran at the recorded rate" if scale == 1 else
              f"the replay ran at {scale:g}x the recorded rate; the peak here is the recorded, unscaled one")
    if cap.get("level") is None:
        text = (f"meets the SLO at no measured load: 0x your recorded peak of {peak:.3g} req/s{window}")
    else:
        mean = cap.get("recorded_mean_rps")
        text = (f"serves {capacity_short(cap)} ({cap['goodput_rps']:.3g} req/s at the SLO, at {cap['level']}, vs a "
                f"peak of {peak:.3g} req/s{window}"
                + (f"; {times(cap['x_recorded_mean'])}x the mean of {mean:.3g} req/s)" if cap.get("x_recorded_mean")
                   is not None else ")"))
        if cap.get("lower_bound"):
            text += "; no measured load broke the SLO, so this is a lower bound"
    text += f"; {replay}"
    return text + "".join(f"; {cap[k]}" for k in ("window_note", "note") if cap.get(k))
