"""Paired accuracy statistics: base and candidate compared question by question.

Two aggregate scores with their standard errors (the stderr rule of :mod:`shipyard.gates.recovery`)
treat base and candidate as independent samples. They are not: both answered the same
questions, so most of the noise cancels when they are compared pair by pair. With lm-eval's
per-sample logs (``eval_config.log_samples``: ``samples/<task>.jsonl`` in an evaluate step's
results) this module gives, for every task metric:

* a **paired bootstrap** confidence interval for the candidate's recovery (candidate mean over
  base mean, resampling whole questions) and for its loss (base mean minus candidate mean, in
  the metric's own units; lower-is-better metrics are flipped so a loss is always "worse");
* **McNemar's test** for accuracy-type (0/1) metrics: ``b`` questions the base got right and the
  candidate wrong, ``c`` the other way round; the exact two-sided binomial p-value of ``b`` vs
  ``c`` (and the continuity-corrected chi-square statistic, as textbooks print it).

The accuracy gate's ``paired_max_loss`` rule passes a metric when the upper bound of its loss
interval is at most that tolerance. Pure Python (base runtime); deterministic for a seed.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError

SAMPLES_DIR = "samples"


@dataclass(frozen=True)
class McNemar:
    """McNemar's test on paired 0/1 outcomes."""

    base_only: int  # b: base right, candidate wrong
    candidate_only: int  # c: candidate right, base wrong
    chi2_corrected: float | None  # (|b - c| - 1)^2 / (b + c); None when b + c == 0
    p_value: float  # exact two-sided binomial test of b against Binomial(b + c, 1/2)


@dataclass(frozen=True)
class Paired:
    """The paired comparison of one task metric."""

    task: str
    metric: str
    n: int
    base_mean: float
    candidate_mean: float
    loss: float  # base - candidate, flipped for lower-is-better metrics: > 0 means worse
    loss_low: float
    loss_high: float
    recovery_low: float | None
    recovery_high: float | None
    confidence: float
    mcnemar: McNemar | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def mcnemar(base: list[float], candidate: list[float]) -> McNemar:
    """McNemar's test for paired binary outcomes (values 0 or 1, same order)."""
    b = sum(1 for x, y in zip(base, candidate, strict=True) if x >= 0.5 > y)
    c = sum(1 for x, y in zip(base, candidate, strict=True) if y >= 0.5 > x)
    n = b + c
    if n == 0:
        return McNemar(0, 0, None, 1.0)
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2**n
    return McNemar(b, c, (abs(b - c) - 1) ** 2 / n, min(1.0, 2 * tail))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _ratio(num: float, den: float) -> float:
    if den == 0:
        return 1.0 if num >= den else 0.0
    return num / den


def _percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of an already sorted list (q in [0, 1])."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def paired_bootstrap(base: list[float], candidate: list[float], *, higher_is_better: bool = True,
                     iters: int = 2000, confidence: float = 0.95, seed: int = 1234) -> tuple[tuple[float, float],
                                                                                           tuple[float, float]]:
    """Percentile intervals ``(loss_low, loss_high), (recovery_low, recovery_high)`` from
    ``iters`` resamples of whole pairs. Loss = base mean - candidate mean (flipped when lower is
    better); recovery as :func:`shipyard.gates.recovery.recovery`."""
    if len(base) != len(candidate) or not base:
        raise ShipyardError("samples", f"{len(base)} base vs {len(candidate)} candidate samples",
                            "evaluate base and candidate on the same questions with log_samples")
    rng = random.Random(seed)
    n = len(base)
    losses, recoveries = [], []
    for _ in range(iters):
        idx = [rng.randrange(n) for _ in range(n)]
        mb = _mean([base[i] for i in idx])
        mc = _mean([candidate[i] for i in idx])
        losses.append(mb - mc if higher_is_better else mc - mb)
        recoveries.append(_ratio(mc, mb) if higher_is_better else _ratio(mb, mc))
    losses.sort()
    recoveries.sort()
    alpha = (1 - confidence) / 2
    return ((_percentile(losses, alpha), _percentile(losses, 1 - alpha)),
            (_percentile(recoveries, alpha), _percentile(recoveries, 1 - alpha)))


def load_samples(results: str | Path) -> dict[str, dict[Any, dict[str, Any]]]:
    """``{task: {doc_id: sample row}}`` from an evaluate step's results folder (empty without logs)."""
    folder = Path(results)
    if folder.is_file():
        folder = folder.parent
    out: dict[str, dict[Any, dict[str, Any]]] = {}
    for path in sorted((folder / SAMPLES_DIR).glob("*.jsonl")):
        rows: dict[Any, dict[str, Any]] = {}
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    row = json.loads(line)
                    rows[row.get("doc_id")] = row
        out[path.stem] = rows
    return out


def _values(rows: dict[Any, dict[str, Any]], ids: list[Any], metric_key: str) -> list[float] | None:
    metric, _, filt = metric_key.partition(",")
    values = []
    for doc in ids:
        row = rows[doc]
        if filt and row.get("filter", filt) != filt:
            return None
        value = row.get(metric)
        if isinstance(value, bool):
            value = float(value)
        if not isinstance(value, int | float) or not math.isfinite(value):
            return None  # a corpus-level metric (perplexity...) has no per-sample value
        values.append(float(value))
    return values


def compare_samples(base: dict[str, dict[Any, dict[str, Any]]], candidate: dict[str, dict[Any, dict[str, Any]]],
                    metrics: dict[str, dict[str, bool]], *, confidence: float = 0.95, iters: int = 2000,
                    seed: int = 1234) -> dict[tuple[str, str], Paired]:
    """Paired statistics per (task, metric key) for ``metrics`` (``{task: {metric_key: higher_is_better}}``).

    Only questions both logged are paired; a task without logs on either side, or a metric with
    no per-sample values, is left out (the gate then says "no paired samples").
    """
    out: dict[tuple[str, str], Paired] = {}
    for task, keys in metrics.items():
        b_rows, c_rows = base.get(task) or {}, candidate.get(task) or {}
        ids = sorted(set(b_rows) & set(c_rows), key=str)
        if not ids:
            continue
        for key, hib in keys.items():
            bv, cv = _values(b_rows, ids, key), _values(c_rows, ids, key)
            if bv is None or cv is None:
                continue
            (l_lo, l_hi), (r_lo, r_hi) = paired_bootstrap(bv, cv, higher_is_better=hib, iters=iters,
                                                          confidence=confidence, seed=seed)
            binary = all(v in (0.0, 1.0) for v in bv + cv)
            mb, mc = _mean(bv), _mean(cv)
            out[(task, key)] = Paired(task, key, len(ids), mb, mc, mb - mc if hib else mc - mb, l_lo, l_hi,
                                      r_lo, r_hi, confidence, mcnemar(bv, cv) if binary else None)
    return out
