"""Paired accuracy statistics: base and candidate compared question by question.

Two aggregate scores with their standard errors (the stderr rule of :mod:`shipyard.gates.recovery`)
treat base and candidate as independent samples. They are not: both answered the same
questions, so most of the noise cancels when they are compared pair by pair. With lm-eval's
per-sample logs (``eval_config.log_samples``: ``samples/<task>.jsonl`` in an evaluate step's
results; one row per question **and filter**, e.g. gsm8k's ``strict-match`` and
``flexible-extract``) this module pairs the rows of a metric key ``<metric>,<filter>`` by
``(doc_id, filter)`` and gives, for every task metric:

* a **paired bootstrap** confidence interval for the candidate's recovery (candidate mean over
  base mean, resampling whole questions) and for its loss (base mean minus candidate mean, in
  the metric's own units; lower-is-better metrics are flipped so a loss is always "worse");
* **McNemar's test** for accuracy-type (0/1) metrics: ``b`` questions the base got right and the
  candidate wrong, ``c`` the other way round; the exact two-sided binomial p-value of ``b`` vs
  ``c`` (and the continuity-corrected chi-square statistic, as textbooks print it): evidence of
  *any* difference;
* the one-sided **non-inferiority** p-value for H0: loss >= margin (:func:`noninferiority_p`):
  exact and conditional on the discordant pairs for 0/1 metrics, a normal approximation with the
  paired differences' standard deviation otherwise; **Holm's** step-down correction across
  metrics (:func:`holm`); and the **minimum detectable loss** of the sample size
  (:func:`min_detectable_loss`).

The accuracy gate (:mod:`shipyard.gates.recovery`) decides with these. Pure Python, no scipy
(base runtime): the normal distribution from :func:`math.erf`, the binomial in log space.
Deterministic for a seed.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.numbers import percentile

SAMPLES_DIR = "samples"
#: a per-sample row's key: lm-eval logs one row per question and filter
SampleKey = tuple[Any, str]
Samples = dict[str, dict[SampleKey, dict[str, Any]]]


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
    confidence: float  # of the two-sided interval (1 - 2 x alpha: its upper bound is the one-sided bound)
    mcnemar: McNemar | None  # 0/1 metrics only
    sd: float = 0.0  # sample standard deviation of the per-question losses

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- distributions


def normal_cdf(x: float) -> float:
    """P(Z <= x) for a standard normal Z."""
    if x == math.inf:
        return 1.0
    if x == -math.inf:
        return 0.0
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


# Acklam's rational approximation of the normal quantile (relative error < 1.2e-9 after the Newton step)
_A = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
      -3.066479806614716e01, 2.506628277459239e00)
_B = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
      -1.328068155288572e01)
_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
      4.374664141464968e00, 2.938163982698783e00)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)


def _poly(coeffs: tuple[float, ...], x: float) -> float:
    out = 0.0
    for c in coeffs:
        out = out * x + c
    return out


def normal_quantile(p: float) -> float:
    """The x with P(Z <= x) = p (``p`` in (0, 1)): Acklam's approximation refined by one Newton step."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"normal_quantile needs 0 < p < 1, got {p}")
    low = 0.02425
    if p < low:
        q = math.sqrt(-2 * math.log(p))
        x = _poly(_C, q) / (_poly(_D, q) * q + 1)
    elif p <= 1 - low:
        q = p - 0.5
        r = q * q
        x = _poly(_A, r) * q / (_poly(_B, r) * r + 1)
    else:
        q = math.sqrt(-2 * math.log1p(-p))
        x = -_poly(_C, q) / (_poly(_D, q) * q + 1)
    density = math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    return x - (normal_cdf(x) - p) / density if density > 0 else x


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space (exact enough for any n)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    lgn = math.lgamma(n + 1)
    terms = [lgn - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q for i in range(k + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def mcnemar(base: list[float], candidate: list[float]) -> McNemar:
    """McNemar's test for paired binary outcomes (values 0 or 1, same order)."""
    b = sum(1 for x, y in zip(base, candidate, strict=True) if x >= 0.5 > y)
    c = sum(1 for x, y in zip(base, candidate, strict=True) if y >= 0.5 > x)
    n = b + c
    if n == 0:
        return McNemar(0, 0, None, 1.0)
    return McNemar(b, c, (abs(b - c) - 1) ** 2 / n, min(1.0, 2 * binomial_cdf(min(b, c), n, 0.5)))


# --------------------------------------------------------------------------- non-inferiority


def exact_noninferiority_p(base_only: int, candidate_only: int, n: int, margin: float) -> float:
    """One-sided p-value of H0: loss >= ``margin`` for a 0/1 metric on ``n`` paired questions.

    Conditional on the N = b + c discordant pairs (McNemar-type): at the boundary loss = margin,
    the share of base-only pairs among them is pi0 = 1/2 + margin x n / (2N), and p = P(X <= b)
    for X ~ Binomial(N, pi0). Edge cases: N = 0 (identical answers) shows any margin > 0 (p = 0)
    and no margin of 0 (p = 1); pi0 > 1 means even b = N is a loss under the margin (p = 0);
    pi0 = 1 leaves only b = N at the boundary (p = 1 there, else 0).
    """
    b, big_n = base_only, base_only + candidate_only
    if n <= 0 or b < 0 or candidate_only < 0 or big_n > n:
        raise ValueError(f"bad counts b={base_only} c={candidate_only} n={n}")
    if big_n == 0:
        return 0.0 if margin > 0 else 1.0
    boundary = margin * n  # the base-minus-candidate count a loss of exactly `margin` means
    if math.isclose(boundary, big_n, rel_tol=1e-12, abs_tol=1e-9):
        return 1.0 if b == big_n else 0.0
    if boundary > big_n:
        return 0.0
    return binomial_cdf(b, big_n, 0.5 + boundary / (2 * big_n))


def normal_noninferiority_p(loss: float, sd: float, n: int, margin: float) -> float:
    """One-sided p-value of H0: loss >= ``margin`` from the mean and standard deviation of ``n``
    paired differences (normal approximation; a zero ``sd`` decides by the sign of loss - margin)."""
    if sd <= 0 or n <= 1:
        return 0.0 if loss < margin else 1.0
    return normal_cdf((loss - margin) / (sd / math.sqrt(n)))


def score_noninferiority_p(base_only: int, candidate_only: int, n: int, margin: float) -> float:
    """One-sided p-value of H0: loss >= ``margin`` for a 0/1 metric: the score test for paired
    proportions (Nam 1997, Tango 1998), with the variance at the restricted maximum-likelihood
    estimate under the boundary loss = margin. Unlike the conditional test it counts the
    uncertainty of the discordance itself: 32 identical answers do not show a margin of 0.02."""
    b, c = base_only, candidate_only
    big_n = b + c
    if n <= 0 or b < 0 or c < 0 or big_n > n:
        raise ValueError(f"bad counts b={base_only} c={candidate_only} n={n}")
    loss = (b - c) / n
    if margin >= 1:
        return 1.0 if b == n else 0.0
    d = max(margin, 0.0)
    # the restricted MLE of P(candidate-only) under P(base-only) - P(candidate-only) = d
    lin = big_n - 2 * n * d + (b - c) * d
    q = (lin + math.sqrt(lin * lin + 8 * n * c * d * (1 - d))) / (4 * n)
    var = (2 * q + d - d * d) / n
    if var <= 0:
        return 0.0 if loss < d else 1.0
    return normal_cdf((loss - d) / math.sqrt(var))


def noninferiority_p(paired: Paired, margin: float) -> float:
    """The one-sided non-inferiority p-value of one metric. 0/1 metrics: the larger of the exact
    conditional test (:func:`exact_noninferiority_p`) and the score test
    (:func:`score_noninferiority_p`): the conditional test alone treats the number of differing
    answers as fixed and calls any margin shown when few answers differ. Other metrics: the
    normal approximation (:func:`normal_noninferiority_p`)."""
    m = paired.mcnemar
    if m is not None:
        return max(exact_noninferiority_p(m.base_only, m.candidate_only, paired.n, margin),
                   score_noninferiority_p(m.base_only, m.candidate_only, paired.n, margin))
    return normal_noninferiority_p(paired.loss, paired.sd, paired.n, margin)


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order: reject where adjusted <= alpha."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def loss_sd(paired: Paired) -> float:
    """The standard deviation the minimum detectable loss uses: sqrt(discordance rate) for a 0/1
    metric (the rate floored at 1/n), the paired differences' standard deviation otherwise."""
    if paired.mcnemar is not None and paired.n > 0:
        rate = (paired.mcnemar.base_only + paired.mcnemar.candidate_only) / paired.n
        return math.sqrt(max(rate, 1.0 / paired.n))
    return paired.sd


def min_detectable_loss(paired: Paired, alpha: float, power: float, comparisons: int = 1) -> float:
    """(z_{1 - alpha/m} + z_power) x sd / sqrt(n): how far under the margin the true loss must be
    for the test to show non-inferiority with probability ``power`` (m = ``comparisons``, Holm's
    strictest level)."""
    z = normal_quantile(1 - alpha / max(1, comparisons)) + normal_quantile(power)
    return z * loss_sd(paired) / math.sqrt(paired.n)


# --------------------------------------------------------------------------- pairing


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _sd(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    mean = _mean(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _ratio(num: float, den: float) -> float:
    if den == 0:
        return 1.0 if num >= den else 0.0
    return num / den


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
    return ((percentile(losses, alpha), percentile(losses, 1 - alpha)),
            (percentile(recoveries, alpha), percentile(recoveries, 1 - alpha)))


def metric_filter(metric_key: str) -> str:
    """The lm-eval filter of a metric key (``exact_match,strict-match`` -> ``strict-match``; ``none`` without one)."""
    return metric_key.partition(",")[2] or "none"


def load_samples(results: str | Path) -> Samples:
    """``{task: {(doc_id, filter): sample row}}`` from an evaluate step's results folder (empty
    without logs). lm-eval logs one row per question and filter; a row without ``filter`` is ``none``."""
    folder = Path(results)
    if folder.is_file():
        folder = folder.parent
    out: Samples = {}
    for path in sorted((folder / SAMPLES_DIR).glob("*.jsonl")):
        rows: dict[SampleKey, dict[str, Any]] = {}
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    row = json.loads(line)
                    rows[(row.get("doc_id"), str(row.get("filter") or "none"))] = row
        out[path.stem] = rows
    return out


def shared_keys(base_rows: dict[SampleKey, dict[str, Any]], candidate_rows: dict[SampleKey, dict[str, Any]],
                filt: str) -> list[SampleKey]:
    """The (doc_id, ``filt``) keys both sides logged, in a stable order."""
    return sorted((k for k in set(base_rows) & set(candidate_rows) if k[1] == filt), key=lambda k: str(k[0]))


def _values(rows: dict[SampleKey, dict[str, Any]], keys: list[SampleKey], metric_key: str) -> list[float] | None:
    metric = metric_key.split(",", 1)[0]
    values = []
    for key in keys:
        value = rows[key].get(metric)
        if isinstance(value, bool):
            value = float(value)
        if not isinstance(value, int | float) or not math.isfinite(value):
            return None  # a corpus-level metric (perplexity...) has no per-sample value
        values.append(float(value))
    return values


def compare_samples(base: Samples, candidate: Samples, metrics: dict[str, dict[str, bool]], *,
                    confidence: float = 0.90, iters: int = 2000, seed: int = 1234) -> dict[tuple[str, str], Paired]:
    """Paired statistics per (task, metric key) for ``metrics`` (``{task: {metric_key: higher_is_better}}``).

    A metric key ``<metric>,<filter>`` pairs that filter's rows by doc_id; only questions both
    logged are paired. A task without logs on either side, or a metric with no per-sample values,
    is left out (the gate then says which).
    """
    out: dict[tuple[str, str], Paired] = {}
    for task, keys in metrics.items():
        b_rows, c_rows = base.get(task) or {}, candidate.get(task) or {}
        for key, hib in keys.items():
            ids = shared_keys(b_rows, c_rows, metric_filter(key))
            if not ids:
                continue
            bv, cv = _values(b_rows, ids, key), _values(c_rows, ids, key)
            if bv is None or cv is None:
                continue
            (l_lo, l_hi), (r_lo, r_hi) = paired_bootstrap(bv, cv, higher_is_better=hib, iters=iters,
                                                          confidence=confidence, seed=seed)
            binary = all(v in (0.0, 1.0) for v in bv + cv)
            mb, mc = _mean(bv), _mean(cv)
            diffs = [x - y if hib else y - x for x, y in zip(bv, cv, strict=True)]
            out[(task, key)] = Paired(task, key, len(ids), mb, mc, mb - mc if hib else mc - mb, l_lo, l_hi,
                                      r_lo, r_hi, confidence, mcnemar(bv, cv) if binary else None, _sd(diffs))
    return out


def sampled_filters(samples: Samples, task: str) -> set[str]:
    """The filters a task's per-sample logs hold (empty without logs)."""
    return {k[1] for k in samples.get(task) or {}}
