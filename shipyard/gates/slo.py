"""The SLO gate: promote a candidate only when it meets latency/throughput SLOs under load.

Per load level of the candidate's benchmark (and the base's, on the same profile) it checks
TTFT p99, ITL p99, output tokens/s and the error rate against the SLO, computes goodput (the
share of all requests, errored and incomplete ones included, whose own TTFT and ITL meet the
SLO) and finds the highest load (requests/s) that meets the SLO. The decision then follows
``require``:

* ``"base"`` (default): the candidate meets the SLO at every level where the base does, and
  at one level at least (no loss of SLO-compliant capacity);
* ``"all"`` / ``"any"``: at every level / at one level at least;
* a number: at the level whose nominal load (streams or requests/s) is that number;

plus the **regression budget against the base at matched load**, when declared:
``min_throughput_ratio`` (candidate/base output tokens/s per level, at least) and
``max_latency_ratio`` (candidate/base TTFT p99 and ITL p99 per level, at most). Every ratio carries
a 95% bootstrap interval from the per-request samples (:mod:`shipyard.gates.noise`), and a budget
fails a level only when the **interval lies wholly beyond it** (for ``max_latency_ratio`` its lower
end is above the budget; for ``min_throughput_ratio`` its upper end is below): a ratio beyond the
budget whose interval reaches back passes "within noise", said in the reason. A ratio without an
interval (results that keep no per-request samples) is judged by its point, except a p99 of fewer
requests than a p99 needs (:data:`~shipyard.core.report.MIN_SAMPLES`, 100, on either side): no
interval can tell it from noise either way, so a point beyond the budget fails as **inconclusive**,
the reason saying why ("too few requests for a p99 interval: 12 < 100") and what would decide it
(``benchmark_config.max_requests`` of at least 100 a level), as the accuracy gate fails a metric its
sample cannot decide. No budget is declared
by default, and the rule says "none declared": a default ``max_latency_ratio`` would fail a
same-weights candidate on a machine that was busier during its benchmark than during the base's
(a cached base was measured at another time), a shift the within-run interval cannot see. The rule
in words (:func:`rule_text`, printed by the console as "SLO applied") always names the budget.

**Your traffic.** When the benchmark replayed a recorded workload (``results["workload"]``, issue
35), the replay's own requests are judged by the same level rule (:func:`replay_verdict`:
:func:`check_level` without the throughput floor, since a replay's tok/s is the recorded traffic's
rate): TTFT p99, ITL p99, error rate and goodput (requests meeting the SLO per second). A replay
missing the SLO fails the gate, the reason naming the figure and the replay's time scale when it is
not 1 (``slo.judge_replay: false`` reports it without gating); without a replay nothing changes.

:func:`run_slo_gate` never raises: unreadable results, results of different benchmark
configs, bad SLO thresholds and missing figures all give ``passed = False`` with the reason
(fail closed), so ``dsl.If`` skips promotion and the report says why. Pure Python (base runtime).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, cast

from shipyard.benchmarking.guidellm import load_results
from shipyard.benchmarking.report import html_report, markdown_summary
from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_write_text
from shipyard.core.records import SloThresholds
from shipyard.core.report import MIN_SAMPLES, change_text, level_label, sample_count
from shipyard.gates.capacity import goodput_rps, peak_capacity
from shipyard.gates.config import SloConfig, slo_config
from shipyard.gates.noise import beyond, comparison, find, provenance, ratio_text

#: Used when the slo parameter is empty: generous figures that a CPU run of a small model meets.
DEFAULT_SLO: dict[str, Any] = SloConfig().model_dump()


def parse_slo(value: str | dict[str, Any] | None) -> SloThresholds:
    """The SLO parameter's one loader: validate SLO thresholds (JSON text or dict) with the typed
    config of :mod:`shipyard.gates.config` (one-line errors); missing keys take :data:`DEFAULT_SLO`.
    Returns :class:`~shipyard.core.records.SloThresholds`, the shape the candidate record keeps."""
    slo = cast(SloThresholds, slo_config(value).model_dump())
    if isinstance(slo["require"], float) and slo["require"].is_integer():
        slo["require"] = int(slo["require"])
    return slo


def untimed(level: dict[str, Any]) -> int:
    """Successful requests of a level that left no timing sample (guidellm kept no TTFT for them):
    they cannot be judged against the SLO, so goodput leaves them out and the reports count them."""
    timed = len((level.get("samples") or {}).get("ttft_ms") or [])
    ok = level.get("successful")
    if ok is None or not (level.get("samples") or {}).get("ttft_ms"):
        return 0
    return max(0, int(ok) - timed)


def goodput(level: dict[str, Any], slo: dict[str, Any]) -> float:
    """Share of a level's judged requests meeting the TTFT and ITL SLO: errored and incomplete
    requests count as misses; successful requests without timing samples (:func:`untimed`) are
    not judged, neither as a miss nor as a hit."""
    total = int(level.get("total") or 0) - untimed(level)
    if total <= 0:
        return 0.0
    samples = level.get("samples") or {}
    ttfts = samples.get("ttft_ms") or []
    itls = samples.get("itl_ms") or [None] * len(ttfts)
    good = 0
    for ttft, itl in zip(ttfts, itls, strict=False):
        if ttft is None or ttft > slo["ttft_p99_ms"]:
            continue
        if itl is not None and itl > slo["itl_p99_ms"]:  # None: a one-token output has no ITL
            continue
        good += 1
    return round(min(1.0, good / total), 4)


def _check(name: str, measured: float | None, op: str, limit: float, unit: str) -> dict[str, Any]:
    """One SLO check of a level: the measured value against the threshold, with the margin
    (positive: room to spare) and the verdict."""
    if measured is None:
        return {"check": name, "measured": None, "threshold": f"{op} {limit:g} {unit}".strip(), "margin": None,
                "unit": unit, "passed": name == "ITL p99", "note": "no figure" + (" (one-token outputs)" if name == "ITL p99" else "")}
    margin = limit - measured if op == "<=" else measured - limit
    return {"check": name, "measured": measured, "threshold": f"{op} {limit:g} {unit}".strip(),
            "margin": round(margin, 6), "unit": unit, "passed": margin >= 0, "note": ""}


def check_level(level: dict[str, Any], slo: dict[str, Any], throughput: bool = True) -> dict[str, Any]:
    """The SLO verdict of one load level: ``meets``, ``goodput``, the failed checks (text) and
    every check (``checks``: measured, threshold, margin, verdict). ``throughput``: hold the output
    tok/s to ``min_output_tokens_per_s`` (off for a recorded workload's replay, whose throughput is
    the recorded traffic's rate, not the server's: :func:`replay_verdict`)."""
    failures = []
    ttft, itl = level["ttft_ms"]["p99"], level["itl_ms"]["p99"]
    if ttft is None:
        failures.append("no TTFT figure")
    elif ttft > slo["ttft_p99_ms"]:
        failures.append(f"TTFT p99 {ttft:.4g} ms > {slo['ttft_p99_ms']:g}")
    if itl is not None and itl > slo["itl_p99_ms"]:
        failures.append(f"ITL p99 {itl:.4g} ms > {slo['itl_p99_ms']:g}")
    if throughput and level["output_tokens_per_s"] < slo["min_output_tokens_per_s"]:
        failures.append(f"output {level['output_tokens_per_s']:.4g} tok/s < {slo['min_output_tokens_per_s']:g}")
    if level["error_rate"] > slo["max_error_rate"]:
        failures.append(
            f"error rate {level['error_rate']:.3g} > {slo['max_error_rate']:g} "
            f"({level['errored']} errored, {level['incomplete']} incomplete of {level['total']})"
        )
    gp = goodput(level, slo)
    if slo.get("min_goodput") is not None and gp < slo["min_goodput"]:
        failures.append(f"goodput {gp:.3g} < {slo['min_goodput']:g}")
    checks = [
        _check("TTFT p99", ttft, "<=", slo["ttft_p99_ms"], "ms"),
        _check("ITL p99", itl, "<=", slo["itl_p99_ms"], "ms"),
        *([_check("output tok/s", level["output_tokens_per_s"], ">=", slo["min_output_tokens_per_s"], "tok/s")]
          if throughput else []),
        _check("error rate", level["error_rate"], "<=", slo["max_error_rate"], ""),
    ]
    if slo.get("min_goodput") is not None:
        checks.append(_check("goodput", gp, ">=", slo["min_goodput"], ""))
    return {"name": level["name"], "meets": not failures, "goodput": gp, "failures": failures, "checks": checks,
            "samples": sample_count(level), "untimed": untimed(level)}


#: Figures compared between candidate and base per level: (key, percentile, label, unit, lower is better).
CHANGE_FIGURES = (("ttft_ms", "p99", "TTFT p99", "ms", True), ("itl_ms", "p99", "ITL p99", "ms", True),
                  ("output_tokens_per_s", None, "output tok/s", "tok/s", False))


def changes(base_levels: list[dict[str, Any]], cand_levels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Candidate against base per level and figure: the ratio and how much worse (``worse`` > 1)
    or better (< 1) the candidate is, whichever way the figure is better."""
    out = []
    for b, c in zip(base_levels, cand_levels, strict=False):
        for key, pct, label, unit, lower in CHANGE_FIGURES:
            cv = c[key][pct] if pct else c.get(key)
            bv = b[key][pct] if pct else b.get(key)
            if cv is None or bv is None or cv <= 0 or bv <= 0:
                continue
            ratio = cv / bv
            out.append({"figure": label, "level": c["name"], "load": level_label(c), "candidate": cv, "base": bv,
                        "unit": unit, "ratio": round(ratio, 4), "worse": ratio if lower else 1 / ratio,
                        "samples": min((n for n in (sample_count(c), sample_count(b)) if n is not None), default=None)})
    return out


def worst_and_best(found: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The worst regression (largest ``worse`` > 1) and the best gain (smallest ``worse`` < 1), the
    headline figures: taken from levels with at least ``MIN_SAMPLES`` requests when there are any
    (a p99 of a dozen requests is one cold request); otherwise from all levels, and then the text
    says how many requests it rests on (:func:`shipyard.core.report.change_text`)."""
    enough = [c for c in found if c.get("samples") is not None and c["samples"] >= MIN_SAMPLES]
    pool = enough or found
    worse = [c for c in pool if c["worse"] > 1 + 1e-9]
    better = [c for c in pool if c["worse"] < 1 - 1e-9]
    return (max(worse, key=lambda c: c["worse"]) if worse else None,
            min(better, key=lambda c: c["worse"]) if better else None)


def rule_text(slo: dict[str, Any]) -> str:
    """The SLO gate's rule in words, with every threshold."""
    level = (f"a load level meets the SLO when TTFT p99 <= {slo['ttft_p99_ms']:g} ms, ITL p99 <= "
             f"{slo['itl_p99_ms']:g} ms, output >= {slo['min_output_tokens_per_s']:g} tok/s and error rate <= "
             f"{slo['max_error_rate']:g}" + (f" and goodput >= {slo['min_goodput']:g}" if slo.get("min_goodput") is not None else ""))
    req = slo["require"]
    if req == "base":
        gate = "require=base: the candidate meets it at every level where the base does, and at one level at least"
    elif req == "all":
        gate = "require=all: the candidate meets it at every level"
    elif req == "any":
        gate = "require=any: the candidate meets it at one level at least"
    else:
        gate = f"require={req:g}: the candidate meets it at the level with nominal load {req:g}"
    return f"{level}; {gate}; {budget_text(slo)}"


def budget_text(slo: dict[str, Any]) -> str:
    """The regression budget against the base at matched load in words ("none declared" without one)."""
    extra = []
    if slo.get("min_throughput_ratio") is not None:
        extra.append(f"output tok/s >= {slo['min_throughput_ratio']:g} x the base's")
    if slo.get("max_latency_ratio") is not None:
        extra.append(f"TTFT p99 and ITL p99 <= {slo['max_latency_ratio']:g} x the base's")
    if not extra:
        return "regression budget against the base at matched load: none declared"
    return ("regression budget against the base at matched load: " + " and ".join(extra) + " at every level "
            "(a level fails when the ratio's 95% interval lies wholly beyond the budget)")


def highest_load(levels: list[dict[str, Any]], verdicts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The level with the most requests/s among those meeting the SLO (None if none does)."""
    ok = [lv for lv, v in zip(levels, verdicts, strict=True) if v["meets"]]
    if not ok:
        return None
    best = max(ok, key=lambda lv: lv["requests_per_s"])
    return {"name": best["name"], "requests_per_s": best["requests_per_s"], "nominal_load": best.get("nominal_load")}


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 4)


#: the budgets: (SLO key, the figures it bounds, an upper bound)
BUDGETS = (("min_throughput_ratio", ("output_tokens_per_s",), False), ("max_latency_ratio", ("ttft_p99", "itl_p99"), True))


def budget_checks(pairs: list[dict[str, Any]], comp: dict[str, Any], slo: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The regression budget per level and figure (:func:`shipyard.gates.noise.beyond`): the
    failures (the interval wholly beyond the budget, or no interval and the point beyond it, or a p99
    of too few requests beyond it: inconclusive; a missing throughput ratio fails a throughput
    budget) and the levels over it only within noise."""
    fails: list[str] = []
    within: list[str] = []
    for key, figures, upper in BUDGETS:
        budget = slo.get(key)
        if budget is None:
            continue
        op = ">" if upper else "<"
        for p in pairs:
            for figure in figures:
                row = find(comp, p["name"], figure)
                if row is None:
                    if not upper:
                        fails.append(f"{p['name']}: no output tok/s ratio for the budget {budget:g}")
                    continue
                said = beyond(row, budget, upper)
                if said == "fail":
                    fails.append(f"{ratio_text(row)} {op} budget {budget:g}")
                elif said == "inconclusive":
                    fails.append(f"{ratio_text(row)} {op} budget {budget:g}, inconclusive (give benchmark_config "
                                 f"max_requests >= {MIN_SAMPLES} a level to judge a p99 budget)")
                elif said == "within noise":
                    within.append(f"{ratio_text(row)} {op} budget {budget:g}")
    return fails, within


def _pairs(blev: list[dict[str, Any]], clev: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each candidate level beside the base's at the same position: the candidate/base ratios of
    throughput, request rate and the p99 latencies (None where the base has no such level)."""
    pairs = []
    for i, c in enumerate(clev):
        b = blev[i] if i < len(blev) else None
        pairs.append({
            "name": c["name"],
            "base": b["name"] if b else None,
            "output_tokens_per_s_ratio": _ratio(c["output_tokens_per_s"], b["output_tokens_per_s"] if b else None),
            "requests_per_s_ratio": _ratio(c["requests_per_s"], b["requests_per_s"] if b else None),
            "ttft_p99_ratio": _ratio(c["ttft_ms"]["p99"], b["ttft_ms"]["p99"] if b else None),
            "itl_p99_ratio": _ratio(c["itl_ms"]["p99"], b["itl_ms"]["p99"] if b else None),
            "latency_p99_ratio": _ratio(c["latency_s"]["p99"], b["latency_s"]["p99"] if b else None),
        })
    return pairs


def _requirement_misses(req: Any, clev: list[dict[str, Any]], bver: list[dict[str, Any]],
                        cver: list[dict[str, Any]]) -> list[str]:
    """Where the candidate misses the SLO by ``slo.require`` (``all`` levels, every level the
    ``base`` meets, or one nominal load); a candidate meeting it at no level always fails."""
    reasons: list[str] = []
    failing = [f"{v['name']}: {'; '.join(v['failures'])}" for v in cver if not v["meets"]]
    if not any(v["meets"] for v in cver):
        reasons.append("the candidate meets the SLO at no load level (" + " | ".join(failing) + ")")
    elif req == "all" and failing:
        reasons.append("SLO missed at " + " | ".join(failing))
    elif req == "base":
        lost = [
            f"{cver[i]['name']}: {'; '.join(cver[i]['failures'])}"
            for i, bv in enumerate(bver) if bv["meets"] and i < len(cver) and not cver[i]["meets"]
        ]
        if lost:
            reasons.append("SLO met by the base but missed by the candidate at " + " | ".join(lost))
    elif isinstance(req, int | float) and not isinstance(req, bool):
        idx = [i for i, lv in enumerate(clev) if lv.get("nominal_load") is not None and math.isclose(lv["nominal_load"], req)]
        if not idx:
            reasons.append(f"no load level {req:g} in the candidate's benchmark")
        elif not cver[idx[0]]["meets"]:
            reasons.append(f"SLO missed at the required load {req:g}: {'; '.join(cver[idx[0]]['failures'])}")
    return reasons


def _worst_and_best_with_noise(blev: list[dict[str, Any]], clev: list[dict[str, Any]],
                               comp: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The worst regression and best gain of the candidate against the base, each with its
    comparison row's interval and words when the comparison has one."""
    worst, gain = worst_and_best(changes(blev, clev))
    for change in (worst, gain):
        row = next((r for r in comp["rows"] if change and r["level"] == change["level"] and r["label"] == change["figure"]),
                   None)
        if change is not None and row is not None:
            change.update(low=row["low"], high=row["high"], words=row["words"])
    return worst, gain


def _pass_reason(cbest: dict[str, Any] | None, bbest: dict[str, Any] | None, met: int, levels: int, versus: str,
                 within: list[str], replay: dict[str, Any] | None) -> str:
    """A pass in words: the levels meeting the SLO, the highest of each model, the worst regression
    and best gain, what was over the budget only within noise, the replay's verdict."""
    best = f"{cbest['name']} at {cbest['requests_per_s']:.3g} req/s" if cbest else "none"
    bbest_txt = f"{bbest['name']} at {bbest['requests_per_s']:.3g} req/s" if bbest else "none"
    reason = (f"passed: the candidate meets the SLO at {met} of {levels} load levels; highest load meeting it "
              f"{best} (base: {bbest_txt}); {versus}")
    if within:
        reason += "; over the regression budget only within noise: " + " | ".join(within)
    if replay and replay["measured"]:
        reason += f"; {replay['text']}"
    return reason


def compare(base: dict[str, Any], cand: dict[str, Any], slo: dict[str, Any], intervals: bool = True) -> dict[str, Any]:
    """Evaluate both results against the SLO and each other; returns the decision and every figure.
    ``intervals``: put a bootstrap interval on every candidate/base ratio (off when a result is
    compared with itself, as the base's own record is: every ratio is 1)."""
    reasons: list[str] = []
    if base.get("comparable") != cand.get("comparable"):
        diff = sorted(k for k in (cand.get("comparable") or {}) if (base.get("comparable") or {}).get(k) != cand["comparable"][k])
        reasons.append(f"base and candidate ran different benchmark configs (differ in {diff or 'all'})")
    blev, clev = base["levels"], cand["levels"]
    bver = [check_level(lv, slo) for lv in blev]
    cver = [check_level(lv, slo) for lv in clev]
    if len(blev) != len(clev):
        reasons.append(f"base has {len(blev)} load levels, the candidate {len(clev)}")
    pairs = _pairs(blev, clev)
    reasons += _requirement_misses(slo["require"], clev, bver, cver)
    comp = comparison(blev, clev, pairs, resamples=None if intervals else 0)
    budget_fails, within = budget_checks(pairs, comp, slo)
    reasons += budget_fails
    replay = replay_verdict(cand.get("workload"), slo)  # the SLO on the user's own traffic (None without a replay)
    reasons += replay_misses(replay)
    passed = not reasons
    cbest, bbest = highest_load(clev, cver), highest_load(blev, bver)
    met = sum(v["meets"] for v in cver)
    worst, gain = _worst_and_best_with_noise(blev, clev, comp)
    versus = f"worst regression: {change_text(worst)}; best gain: {change_text(gain)}"
    if passed:
        reason = _pass_reason(cbest, bbest, met, len(cver), versus, within, replay)
    else:
        reason = "failed: " + "; ".join(reasons) + f"; {versus}"
    return {
        "rule": rule_text(slo) + (replay_rule(slo) if replay else ""),
        "worst_regression": worst,
        "best_gain": gain,
        "passed": passed,
        "reason": reason,
        "reasons": reasons,
        "slo": slo,
        "base_levels": bver,
        "candidate_levels": cver,
        "pairs": pairs,
        "comparison": comp,
        "candidate_highest_load": cbest,
        "base_highest_load": bbest,
        # goodput at the SLO as N x the recorded peak (None without a replayed workload: shipyard.gates.capacity)
        "capacity": peak_capacity(clev, cver, cand.get("workload")),
        "base_capacity": peak_capacity(blev, bver, base.get("workload")),
        # TTFT/ITL p99, error rate and goodput measured on the recorded workload's replay itself
        "replay": replay,
        "base_replay": replay_verdict(base.get("workload"), slo),
    }


def gate_metrics(decision: dict[str, Any]) -> dict[str, float]:
    """KFP metrics of the gate decision."""
    out: dict[str, float] = {"passed": 1.0 if decision.get("passed") else 0.0}
    cver = decision.get("candidate_levels") or []
    out["levels_meeting_slo"] = float(sum(v["meets"] for v in cver))
    out["levels"] = float(len(cver))
    for v in cver:
        out[f"{v['name']}.goodput"] = v["goodput"]
    worst = decision.get("worst_regression")
    if worst:
        out["worst_regression_factor"] = round(float(worst["worse"]), 4)
    best = decision.get("candidate_highest_load")
    out["highest_load_meeting_slo_rps"] = float(best["requests_per_s"]) if best else 0.0
    cap = decision.get("capacity")
    if cap:  # the recorded workload's units: goodput at the SLO / the recorded peak (and mean) rate
        out["capacity_x_recorded_peak"] = float(cap["x_recorded_peak"])
        if cap.get("x_recorded_mean") is not None:
            out["capacity_x_recorded_mean"] = float(cap["x_recorded_mean"])
    out.update(replay_metrics(decision.get("replay")))
    for p in decision.get("pairs") or []:
        if p["output_tokens_per_s_ratio"] is not None:
            out[f"{p['name']}.throughput_ratio"] = p["output_tokens_per_s_ratio"]
        if p["ttft_p99_ratio"] is not None:
            out[f"{p['name']}.ttft_p99_ratio"] = p["ttft_p99_ratio"]
    return out


def replay_metrics(rep: dict[str, Any] | None) -> dict[str, float]:
    """KFP/MLflow metrics of the SLO measured on the replay (``replay.*``; none when not measured)."""
    if not rep or not rep.get("measured"):
        return {}
    out = {"replay.meets_slo": 1.0 if rep["meets"] else 0.0, "replay.error_rate": float(rep["error_rate"]),
           "replay.goodput_rps": float(rep["goodput_rps"])}
    for key in ("ttft_p99_ms", "itl_p99_ms"):
        if rep.get(key) is not None:
            out[f"replay.{key}"] = float(rep[key])
    return out


def workload_refusal(base: dict[str, Any], cand: dict[str, Any]) -> str:
    """Why the SLO verdict cannot stand on a recorded workload's replay ("" when it can): a replay
    whose fidelity check failed (:mod:`shipyard.benchmarking.workload_fidelity`), or base and
    candidate replaying different workloads."""
    replays = {who: res.get("workload") for who, res in (("base", base), ("candidate", cand))}
    for who, replay in replays.items():
        fidelity = (replay or {}).get("fidelity")
        if fidelity and not fidelity.get("valid"):
            return f"the {who}'s replay of the recorded workload was not faithful ({fidelity.get('line', '')})"
    digests = {who: (replay or {}).get("digest") for who, replay in replays.items()}
    if digests["base"] != digests["candidate"]:
        return (f"base and candidate replayed different workloads ({digests['base'] or 'none'} vs "
                f"{digests['candidate'] or 'none'})")
    return ""


def _scale_words(scale: float) -> str:
    """The replay's pace against the recorded one, next to its verdict ("" at the recorded rate)."""
    if scale == 1:
        return ""
    return (f"the replay ran at {scale:g}x the recorded rate "
            f"({'faster' if scale > 1 else 'slower'} than your traffic arrived)")


def replay_verdict(workload: dict[str, Any] | None, slo: dict[str, Any]) -> dict[str, Any] | None:
    """The SLO judged on the recorded workload's replay itself (issue 35): its per-request figures
    (``workload["level"]``, parsed as a load level is:
    :func:`shipyard.benchmarking.workload_replay.replay_level`) through :func:`check_level` without
    the throughput floor (a replay's output tok/s is the recorded traffic's rate, not the server's), and
    goodput as requests meeting the SLO per second (:func:`shipyard.gates.capacity.goodput_rps`).
    Returns the figures, ``meets``, ``failures``, ``checks``, ``gating`` (``slo.judge_replay``) and
    ``text``; None without a replayed workload; ``measured`` false (not judged, and said so) when the
    replay kept no figures, as a benchmark recorded before they were kept."""
    if not isinstance(workload, dict) or not workload:
        return None
    level, scale = workload.get("level"), float(workload.get("time_scale") or 1.0)
    digest = str(workload["digest"])[:19] if workload.get("digest") else "an unknown fingerprint"
    out: dict[str, Any] = {"digest": workload.get("digest"), "time_scale": scale,
                           "gating": bool(slo.get("judge_replay", True))}
    if not isinstance(level, dict):
        return {**out, "measured": False, "meets": None, "requests": workload.get("requests"),
                "text": f"on your traffic (replay of {digest}): the replay kept no latency figures (a benchmark "
                        "recorded before shipyard kept them), so it is not judged; rerun the benchmark to judge it"}
    verdict, total = check_level(level, slo, throughput=False), int(level.get("total") or 0)
    out.update(measured=True, meets=verdict["meets"], requests=total, ttft_p99_ms=level["ttft_ms"]["p99"],
               itl_p99_ms=level["itl_ms"]["p99"], error_rate=level["error_rate"], goodput_share=verdict["goodput"],
               goodput_rps=goodput_rps(level, verdict), requests_per_s=level.get("requests_per_s"),
               failures=verdict["failures"], checks=verdict["checks"], samples=verdict["samples"],
               head=f"on your traffic (replay of {digest}, {total} requests at {scale:g}x time scale)")
    out["text"] = replay_text(out, slo)
    return out


def replay_text(rep: dict[str, Any], slo: dict[str, Any]) -> str:
    """The replay's SLO figures and verdict in words (:func:`replay_verdict`'s ``text``)."""
    def ms(value: float | None) -> str:
        return "–" if value is None else f"{value:.4g} ms"

    figures = (f"TTFT p99 {ms(rep['ttft_p99_ms'])} (SLO <= {slo['ttft_p99_ms']:g}), ITL p99 {ms(rep['itl_p99_ms'])} "
               f"(SLO <= {slo['itl_p99_ms']:g}), error rate {rep['error_rate']:.3g} (SLO <= {slo['max_error_rate']:g}), "
               f"goodput {rep['goodput_rps']:.3g} req/s ({rep['goodput_share']:.0%} of its requests within the TTFT "
               "and ITL SLO)")
    verdict = "yes" if rep["meets"] else "no (" + "; ".join(rep["failures"]) + ")"
    notes = [n for n in (_scale_words(rep["time_scale"]),
                         "" if rep["meets"] or rep["gating"] else "not gating: slo.judge_replay is false") if n]
    return f"{rep['head']}: {figures}; meets the SLO: {verdict}" + "".join(f"; {n}" for n in notes)


def replay_rule(slo: dict[str, Any]) -> str:
    """What the rule adds when the benchmark replayed a recorded workload."""
    how = "must meet" if slo.get("judge_replay", True) else "is reported against (slo.judge_replay false, not gating)"
    return (f"; your traffic: the recorded workload's replay {how} the same TTFT p99, ITL p99, error rate"
            + (" and goodput" if slo.get("min_goodput") is not None else "")
            + " bounds on its own requests (its tok/s is your traffic's rate, not held to the floor)")


def replay_misses(rep: dict[str, Any] | None) -> list[str]:
    """The gate's reason when the replay of the user's traffic misses the SLO, naming the figures
    (none when no replay was measured, it meets the SLO, or ``slo.judge_replay`` is false)."""
    if not rep or not rep.get("measured") or rep["meets"] or not rep["gating"]:
        return []
    scale = _scale_words(rep["time_scale"])
    return [f"SLO missed {rep['head']}: " + "; ".join(rep["failures"]) + (f"; {scale}" if scale else "")]


def run_slo_gate(
    base_results: str,
    candidate_results: str,
    slo: str | dict[str, Any] | None,
    report_path: str,
    summary_path: str | None = None,
) -> dict[str, Any]:
    """Decide, write the HTML report (``report_path``) and Markdown summary; never raises.

    Returns ``{"passed", "reason", "metrics", "slo", "rule", "worst_regression", "best_gain", "comparison",
    "base_source", "capacity", "replay"}``: ``capacity`` is the goodput at the SLO in units of the recorded
    workload's peak (:mod:`shipyard.gates.capacity`; None without a replayed workload); ``replay`` the
    SLO measured on the replay itself (:func:`replay_verdict`; None without one); ``comparison``
    holds every candidate/base ratio with its interval and the method
    (:func:`shipyard.gates.noise.comparison`); ``base_source`` says whether the base's figures were
    measured in this run or restored from the base benchmark cache (when, by which run, on what
    hardware: :func:`shipyard.gates.noise.provenance`), and the reason says so for a cached base.
    """
    base = cand = None
    parsed: dict[str, Any] | None = None
    try:
        parsed = parse_slo(slo)
        base = load_results(base_results)
        cand = load_results(candidate_results)
        same = Path(base_results).resolve() == Path(candidate_results).resolve()  # the base's own record
        decision = compare(base, cand, parsed, intervals=not same)
        decision["base_source"] = provenance(base)
        if decision["base_source"]["source"] == "cache":  # a comparison with a figure from another time says so
            decision["reason"] += f"; {decision['base_source']['text']}"
        unfaithful = workload_refusal(base, cand)
        if unfaithful:  # figures measured on other traffic than the user's do not judge the user's SLO
            decision = {**decision, "passed": False, "reason": f"failed: {unfaithful}",
                        "reasons": [*decision.get("reasons", []), unfaithful]}
    except ShipyardError as err:
        decision = {"passed": False, "reason": f"failed: {err}", "reasons": [str(err)]}
    except Exception as err:  # fail closed on anything unexpected, with the reason
        decision = {"passed": False, "reason": f"failed: {type(err).__name__}: {err}", "reasons": [str(err)]}
    if parsed is not None and "slo" not in decision:
        decision["slo"], decision["rule"] = parsed, rule_text(parsed)
    try:
        atomic_write_text(report_path, html_report(decision, base, cand))
    except Exception as err:  # the decision stands; the report says what broke
        atomic_write_text(report_path, f"<html><body><h1>SLO gate: FAIL</h1><p>report error: {err}</p></body></html>")
        decision = {**decision, "passed": False, "reason": f"failed: report could not be written ({err})"}
    if summary_path:
        atomic_write_text(summary_path, markdown_summary(decision, base, cand))
    return {"passed": bool(decision["passed"]), "reason": decision["reason"], "metrics": gate_metrics(decision),
            "slo": decision.get("slo"), "rule": decision.get("rule"), "worst_regression": decision.get("worst_regression"),
            "best_gain": decision.get("best_gain"), "comparison": decision.get("comparison"),
            "base_source": decision.get("base_source"), "capacity": decision.get("capacity"),
            "replay": decision.get("replay")}
