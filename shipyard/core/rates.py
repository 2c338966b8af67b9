"""A request-rate series step by step, with its gaps.

A workload fingerprint's ``arrivals.rate_series_rps`` holds the request rate of consecutive
``window_s``-second steps. A Prometheus fingerprint
(:mod:`shipyard.benchmarking.workload_prometheus`) can have steps without a value (a scrape
Prometheus left out, or gave as NaN); it keeps only the values, and ``arrivals.rate_series_gaps``
says where the others were (:func:`series_gaps`). Every reader of the series (the deploy's sizing,
a render) reads it through :func:`rate_points` or :func:`rate_runs`, so no window spans a gap and no
replay joins the steps either side of one. A fingerprint without the field (a trace's, whose
series has no gaps, or one written before gaps were recorded) reads as it is. Here, below both the
fingerprint (``benchmarking``) and the sizing (``serving``), because both read it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shipyard.core.errors import ShipyardError

#: the most steps one gap may hold (a day of 1-s steps and more: a fingerprint's gap is never that long)
MAX_GAP_STEPS = 1_000_000

def series_gaps(points: Sequence[float | None]) -> list[list[int]]:
    """Where a rate series aligned by time has no value: ``[[index, steps], ...]``, ``steps``
    consecutive steps without a value before the ``index``-th value kept (``index`` = the number of
    values kept for a gap at the end). ``arrivals.rate_series_gaps``: with ``rate_series_rps`` (the
    values alone, as before) it gives the series back with its gaps, :func:`rate_points`."""
    out: list[list[int]] = []
    kept = missing = 0
    for point in points:
        if point is None:
            missing += 1
            continue
        if missing:
            out.append([kept, missing])
            missing = 0
        kept += 1
    if missing:
        out.append([kept, missing])
    return out


def rate_points(arrivals: Mapping[str, Any], field_name: str = "workload.arrivals") -> list[float | None]:
    """The rate series step by step, None at each step it has no value for: ``rate_series_rps`` with
    ``rate_series_gaps`` (:func:`series_gaps`) put back; a fingerprint without gaps (a trace's, or one
    written before gaps were recorded) is its series as it is. Every reader of the series goes
    through here or :func:`rate_runs`, so no window and no replay joins the steps either side of a gap."""
    series = [float(x) for x in arrivals.get("rate_series_rps") or []]
    gaps = arrivals.get("rate_series_gaps") or []
    if not isinstance(gaps, list):
        raise ShipyardError(f"{field_name}.rate_series_gaps", f"must be a list of [index, steps], got {str(gaps)[:40]}",
                            "rebuild the fingerprint with shipyard workload fingerprint")
    out: list[float | None] = []
    kept = 0
    for gap in gaps:
        ok = (isinstance(gap, list | tuple) and len(gap) == 2
              and all(isinstance(x, int) and not isinstance(x, bool) for x in gap) and kept <= gap[0] <= len(series)
              and 1 <= gap[1] <= MAX_GAP_STEPS)
        if not ok:
            raise ShipyardError(f"{field_name}.rate_series_gaps", f"{str(gap)[:40]} is not [index, steps] in order "
                                f"within the {len(series)} values of rate_series_rps",
                                "rebuild the fingerprint with shipyard workload fingerprint")
        out += series[kept:gap[0]] + [None] * gap[1]
        kept = gap[0]
    return out + series[kept:]


def rate_runs(arrivals: Mapping[str, Any], field_name: str = "workload.arrivals") -> list[list[float]]:
    """The rate series split at its gaps (:func:`rate_points`): the runs of consecutive steps with a value."""
    runs: list[list[float]] = [[]]
    for point in rate_points(arrivals, field_name):
        if point is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append(point)
    return [run for run in runs if run]
