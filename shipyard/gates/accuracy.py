"""The accuracy gate: promote a candidate only when it is shown to be no worse than the base.

By default (``rule`` ``non-inferiority``, :mod:`shipyard.gates.recovery`) every gated metric's
loss against the base, question by question, must be shown under a margin declared before the
run, with Holm's correction across the metrics; a gate too small to show it says
"inconclusive" and fails closed unless ``allow_inconclusive``. The report states the rule, the
margin, alpha, the method and the **minimum detectable loss** of the sample size.

``run_gate`` never raises: missing or unreadable results, results from different eval configs
and bad thresholds all give ``passed = False`` with the reason (fail closed), so a pipeline's
``dsl.If`` skips packaging and deployment and the run says why. Pure Python (base runtime).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_write_text
from shipyard.core.report import Doc
from shipyard.gates.recovery import (
    NON_INFERIORITY,
    Row,
    Thresholds,
    compare,
    comparisons,
    load_summary,
    loss_text,
    parse_thresholds,
)

#: how the default rule decides, in one paragraph (reports and the decision record)
METHOD = ("paired non-inferiority: per metric, the loss = base - candidate on the same questions (flipped when "
          "lower is better) against a margin declared before the run (max_loss, absolute, or max_relative_loss x "
          "|base|); one-sided H0: loss >= margin at alpha; 0/1 metrics: the larger p of the exact conditional test "
          "on the discordant pairs (McNemar-type) and the score test for paired proportions; other per-sample "
          "metrics: normal approximation with the paired differences' standard deviation; Holm's step-down "
          "correction across the gated metrics; interval: paired bootstrap at 1 - 2 x alpha (its upper bound is the "
          "one-sided bound). non-inferior = H0 rejected; inferior = the interval's lower bound above the margin; "
          "inconclusive = neither (fails unless allow_inconclusive). Metrics without per-sample values "
          "(perplexity, bits per byte) fall back to the recovery rule.")


def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "–"
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 1e5:
        return f"{value:.4g}"
    return f"{value:.{digits}f}"


def _stderr_of_difference(row: Row) -> float | None:
    if row.base_stderr is None or row.candidate_stderr is None:
        return None
    return math.sqrt(row.base_stderr**2 + row.candidate_stderr**2)


def decided_by(row: Row) -> str:
    """The rule that decided a row: "non-inferiority test", "no per-sample logs", "recovery >= min",
    "stderr rule", "recovery < min" or "missing"."""
    if row.candidate is None or row.recovery is None:
        return "missing"
    if row.decision == "no samples":
        return "no per-sample logs"
    if row.rule == NON_INFERIORITY:
        return "non-inferiority test"
    if row.recovery >= row.min_recovery:
        return "recovery >= min"
    if row.passed and row.gated:
        return "stderr rule"
    return "recovery < min"


def paired_text(row: Row) -> str:
    """The paired statistics of a row: loss and recovery intervals, McNemar's p; '–' without samples."""
    p = row.paired
    if not p:
        return "–"
    text = (f"loss {p['loss']:+.4g} [{p['loss_low']:+.4g}, {p['loss_high']:+.4g}], recovery "
            f"[{_fmt(p['recovery_low'])}, {_fmt(p['recovery_high'])}] ({p['confidence']:.0%}, n={p['n']})")
    if p.get("mcnemar"):
        m = p["mcnemar"]
        text += f"; McNemar b={m['base_only']} c={m['candidate_only']} p={m['p_value']:.3g}"
    return text


def stderr_text(row: Row) -> str:
    """The stderr rule's figures for a row: off, no stderr, or ``loss L vs k x se = bound``."""
    if row.stderr_k is None:
        return "off"
    se = _stderr_of_difference(row)
    if se is None or row.candidate is None or row.base is None:
        return f"k={row.stderr_k:g}, no stderr"
    loss = abs(row.candidate - row.base)
    return f"loss {loss:.4g} {'<=' if loss <= row.stderr_k * se else '>'} {row.stderr_k:g} x {se:.4g} = {row.stderr_k * se:.4g}"


def stderr_passes(rows: list[Row]) -> list[Row]:
    """Gated rows that passed below their ``min_recovery`` because of the stderr rule."""
    return [r for r in rows if r.gated and decided_by(r) == "stderr rule"]


def inconclusive_passes(rows: list[Row]) -> list[Row]:
    """Gated rows the test could not decide that passed only because of ``allow_inconclusive``."""
    return [r for r in rows if r.gated and r.passed and r.decision == "inconclusive"]


def _margins(rows: list[Row]) -> str:
    margins = sorted({r.margin for r in rows if r.margin is not None})
    if not margins:
        return ""
    return f"margin {margins[0]:g}" if len(margins) == 1 else f"margins {margins[0]:g}-{margins[-1]:g}"


def power_statement(rows: list[Row], rules: Thresholds) -> str:
    """What the sample size can show, e.g. "with n=400 per task the smallest loss this gate can rule
    out at alpha 0.05 (Holm over 6 metrics), power 0.8, is 0.041 (arith acc); margin 0.02"."""
    tested = [r for r in rows if r.gated and r.paired and r.mdl is not None and r.candidate is not None]
    if not tested:
        return "no gated metric has per-sample values: no power statement (evaluate with eval_config.log_samples)"
    ns = sorted({int(r.paired["n"]) for r in tested if r.paired})
    n_text = f"n={ns[0]}" if len(ns) == 1 else f"n={ns[0]}-{ns[-1]}"
    m = comparisons(rows, rules)
    correction = (f"Holm over {m} metric{'s' if m != 1 else ''}" if rules.multiple_comparisons == "holm"
                  else f"no correction over {len(tested)} metric{'s' if len(tested) != 1 else ''}")
    worst = max(tested, key=lambda r: float(r.mdl or 0.0))
    text = (f"with {n_text} per task the smallest loss this gate can rule out at alpha {rules.alpha:g} ({correction}), "
            f"power {rules.power:g}, is {float(worst.mdl or 0.0):.3g}")
    if len(tested) > 1:
        text += f" ({worst.task} {worst.metric.replace(',none', '')})"
    if rules.rule != NON_INFERIORITY:
        return text + " (what the non-inferiority rule could resolve; this gate uses rule recovery)"
    margins = _margins(tested)
    short = [r for r in tested if r.margin is not None and float(r.mdl or 0.0) > r.margin]
    if short:
        text += f"; {margins}, smaller than the minimum detectable loss of {len(short)} of {len(tested)} metrics"
    elif margins:
        text += f"; {margins}"
    return text


def _counts(gated: list[Row]) -> str:
    names = {"non-inferior": "non-inferior", "inferior": "inferior", "inconclusive": "inconclusive",
             "no samples": "without per-sample logs", "recovered": "recovered (recovery rule)",
             "within noise": "within noise (recovery rule, stderr_k)", "not recovered": "not recovered (recovery rule)",
             "missing": "missing"}
    parts = []
    for key, label in names.items():
        count = sum(r.decision == key for r in gated)
        if count:
            extra = f" ({_margins([r for r in gated if r.decision == key])})" if key == "non-inferior" else ""
            parts.append(f"{count} {label}{extra}")
    return ", ".join(parts)


def _why(r: Row) -> str:
    if r.candidate is None or r.decision in ("no samples", "inferior", "inconclusive", "non-inferior"):
        return f"{r.task} {r.metric}: {r.note}"
    return f"{r.task} {r.metric}: recovery {r.recovery:.4f} < {r.min_recovery:g} (base {_fmt(r.base)}, candidate {_fmt(r.candidate)})"


def _reason_noninferiority(rows: list[Row], rules: Thresholds) -> str:
    gated = [r for r in rows if r.gated]
    failed = [r for r in rows if not r.passed]
    of = f"of {len(gated)} gated metric{'s' if len(gated) != 1 else ''}"
    if failed:
        return f"failed: {len(failed)} {of}: " + "; ".join(_why(r) for r in failed) + f" ({_counts(gated)})"
    text = f"passed: {_counts(gated)} ({of}, {len(rows)} compared; alpha {rules.alpha:g}"
    text += f", Holm over {comparisons(rows, rules)})" if rules.multiple_comparisons == "holm" else ", no correction)"
    allowed = inconclusive_passes(rows)
    if allowed:
        text += "; allowed by allow_inconclusive: " + "; ".join(_why(r) for r in allowed)
    lenient = stderr_passes(rows)
    if lenient:
        text += "; below min_recovery, passed by the stderr rule: " + ", ".join(f"{r.task} {r.metric}" for r in lenient)
    return text


def _reason(rows: list[Row], rules: Thresholds | None = None) -> str:
    if rules is not None and rules.rule == NON_INFERIORITY:
        return _reason_noninferiority(rows, rules)
    failed = [r for r in rows if not r.passed]
    gated = [r for r in rows if r.gated]
    if not failed:
        lenient = stderr_passes(rows)
        if not lenient:
            return f"passed: all {len(gated)} gated metrics recovered (of {len(rows)} compared)"
        # never "all recovered" when some did not: those passed below min_recovery, within noise
        return (f"passed: {len(gated) - len(lenient)} of {len(gated)} gated metrics recovered, {len(lenient)} below "
                f"min_recovery passed by the stderr rule (of {len(rows)} compared): "
                + ", ".join(f"{r.task} {r.metric} recovery {r.recovery:.4f} < {r.min_recovery:g} "
                            f"(loss within {r.stderr_k:g} x stderr {_stderr_of_difference(r):.4g})" for r in lenient))
    return f"failed: {len(failed)} of {len(gated)} gated metrics below threshold: " + "; ".join(_why(r) for r in failed)


ROW_HEAD = ["task", "metric", "base ± stderr", "candidate ± stderr", "recovery", "min recovery", "margin",
            "stderr rule", "paired (base - candidate)", "decided by", "result"]
NI_HEAD = ["task", "metric", "base ± stderr", "candidate ± stderr", "recovery", "loss (base - candidate) [interval]",
           "margin", "p (raw / adjusted)", "min detectable loss", "McNemar (any difference)", "decision", "result"]


def _settings(rules: Thresholds) -> dict[str, Any]:
    if rules.rule == NON_INFERIORITY:
        settings: dict[str, Any] = {
            "rule": rules.rule, "max_loss (default)": "not set" if rules.max_loss is None else rules.max_loss,
            "max_relative_loss (default)": "not set" if rules.max_relative_loss is None else rules.max_relative_loss,
            "alpha (one-sided)": rules.alpha, "power": rules.power, "allow_inconclusive": rules.allow_inconclusive,
            "multiple_comparisons": rules.multiple_comparisons,
            "min_recovery (metrics without per-sample values)": rules.min_recovery,
            "stderr_k (metrics without per-sample values)": "off" if rules.stderr_k is None else rules.stderr_k}
    else:
        settings = {"rule": rules.rule, "min_recovery (default)": rules.min_recovery,
                    "stderr_k (default)": "off" if rules.stderr_k is None else rules.stderr_k}
    for key, override in (rules.metrics or {}).items():
        for name, value in override.items():
            settings[f"metrics.{key}.{name}"] = value
    return settings


def _cells(r: Row) -> list[str]:
    base = _fmt(r.base) + (f" ± {_fmt(r.base_stderr)}" if r.base_stderr is not None else "")
    cand = _fmt(r.candidate) + (f" ± {_fmt(r.candidate_stderr)}" if r.candidate_stderr is not None else "")
    return [r.task, f"{r.metric.replace(',none', '')} {'↑' if r.higher_is_better else '↓'}", base, cand, _fmt(r.recovery)]


def _verdict_cell(r: Row) -> str:
    return ("pass" if r.passed else "FAIL") if r.gated else "not gated"


def _ni_row(r: Row) -> list[str]:
    p = r.paired
    if r.rule == NON_INFERIORITY and p and r.p_value is not None:
        conf = f" ({p['confidence']:.0%}, n={p['n']})"
        adjusted = "–" if r.p_adjusted is None else f"{r.p_adjusted:.3g}"
        m = p.get("mcnemar")
        mcnemar = f"b={m['base_only']} c={m['candidate_only']} p={m['p_value']:.3g}" if m else "–"
        return [*_cells(r), loss_text(p).removeprefix("loss ") + conf, f"{r.margin:g}",
                f"{r.p_value:.3g} / {adjusted}", _fmt(r.mdl, 3), mcnemar, r.decision, _verdict_cell(r)]
    how = r.note
    margin = f"min recovery {r.min_recovery:g}" if r.candidate is not None and r.decision != "no samples" else "–"
    return [*_cells(r), "–", margin, "–", _fmt(r.mdl, 3), "–", how, _verdict_cell(r)]


def _recovery_row(r: Row) -> list[str]:
    margin = None if r.recovery is None else r.recovery - r.min_recovery
    noise = " (within noise)" if margin is not None and margin < 0 and r.passed and r.gated else ""
    return [*_cells(r), f"{r.min_recovery:g}", "–" if margin is None else f"{margin:+.4f}{noise}", stderr_text(r),
            paired_text(r), decided_by(r) + ("" if r.gated else " (not gated)"), _verdict_cell(r)]


def _rule_text(rules: Thresholds | None) -> str:
    if rules is not None and rules.rule == NON_INFERIORITY:
        return METHOD
    return ("recovery = candidate / base (base / candidate when lower is better, ↓); a gated metric passes when "
            "recovery >= its min recovery, or, with stderr_k set, when |candidate - base| <= k x "
            "sqrt(stderr_base² + stderr_candidate²). margin = recovery - min recovery: positive = room to spare, "
            "negative = short of the threshold (the SLO report's convention); a negative margin that passed says "
            "\"within noise\" (the stderr rule).")


def report_doc(passed: bool, reason: str, rows: list[Row], context: dict[str, Any],
               rules: Thresholds | None = None) -> Doc:
    """The accuracy gate's report: decision, rule, power, thresholds, warnings, counts, every metric."""
    verdict = "PASS" if passed else "FAIL"
    doc = Doc(f"Accuracy gate: {verdict}").h(1, f"Accuracy gate: {verdict}", "pass" if passed else "fail")
    doc.p(f"{'promote' if passed else 'do not promote'}. {reason}", "Decision:")
    doc.p(_rule_text(rules), "Rule:")
    noninferiority = rules is not None and rules.rule == NON_INFERIORITY
    if rules is not None and rows:
        doc.p(power_statement(rows, rules), "Power:")
    if rules is not None:
        doc.h(2, "Thresholds").config(_settings(rules))
    for r in stderr_passes(rows):
        doc.warn(f"{r.task} {r.metric.replace(',none', '')} passed below min_recovery {r.min_recovery:g} "
                 f"(recovery {r.recovery:.4f}) only because of the stderr rule: {stderr_text(r)} "
                 f"(k = {r.stderr_k:g}, stderr of the difference from base {_fmt(r.base_stderr)} and candidate "
                 f"{_fmt(r.candidate_stderr)}).")
    for r in inconclusive_passes(rows):
        doc.warn(f"{r.task} {r.metric.replace(',none', '')} passed only because allow_inconclusive is set: {r.note}.")
    if rows:
        gated = [r for r in rows if r.gated]
        if noninferiority:
            doc.p(f"{len(rows)} metrics compared, {len(gated)} gated: {_counts(gated) or 'none'}, "
                  f"{sum(not r.passed for r in gated)} failed; {len(rows) - len(gated)} not gated.", "Counts:")
            doc.h(2, "Metrics").table(NI_HEAD, [_ni_row(r) for r in rows])
        else:
            by_rule = {k: sum(decided_by(r) == k for r in gated) for k in ("recovery >= min", "stderr rule")}
            doc.p(f"{len(rows)} metrics compared, {len(gated)} gated: {by_rule['recovery >= min']} recovered, "
                  f"{by_rule['stderr rule']} passed by the stderr rule, {sum(not r.passed for r in gated)} failed; "
                  f"{len(rows) - len(gated)} not gated.", "Counts:")
            doc.h(2, "Metrics").table(ROW_HEAD, [_recovery_row(r) for r in rows])
    if context:
        doc.h(2, "Inputs").config(context)
    return doc


def report_markdown(passed: bool, reason: str, rows: list[Row], context: dict[str, Any],
                    rules: Thresholds | None = None) -> str:
    """The gate report the KFP UI renders: decision, rule, power, thresholds, counts and the metrics table."""
    return report_doc(passed, reason, rows, context, rules).to_markdown()


def _flat_metrics(passed: bool, rows: list[Row]) -> dict[str, float]:
    metrics: dict[str, float] = {"gate_passed": 1.0 if passed else 0.0}
    for r in rows:
        name = f"{r.task}/{r.metric.replace(',none', '')}"
        if r.recovery is not None:
            metrics[f"recovery/{name}"] = r.recovery
        if r.candidate is not None:
            metrics[f"candidate/{name}"] = r.candidate
        if r.base is not None:
            metrics[f"base/{name}"] = r.base
    return metrics


def run_gate(base_results: str, candidate_results: str, thresholds: str = "", report_path: str | None = None,
             html_path: str | None = None) -> dict[str, Any]:
    """Compare candidate with base results and decide; write the Markdown report to ``report_path``
    and the same report as HTML (it wraps to fit MLflow's artifact viewer) to ``html_path``.

    Returns ``{"passed", "reason", "rows", "metrics", "thresholds", "rule", "alpha",
    "multiple_comparisons", "comparisons", "power"}``: ``metrics`` are flat numbers for a KFP
    Metrics artifact (per-metric recovery, the decision as 1/0); each row carries ``rule``,
    ``margin``, ``decision``, ``p_value``, ``p_adjusted`` and ``mdl`` (minimum detectable loss).
    """
    rows: list[Row] = []
    context: dict[str, Any] = {}
    rules: Thresholds | None = None
    try:
        rules = parse_thresholds(thresholds)
        base = load_summary(base_results, "base_results")
        cand = load_summary(candidate_results, "candidate_results")
        context = {
            "config hash": str(base["config_hash"])[:16],
            "backend": base.get("backend"),
            "base model sha256": str(base.get("model_identity", {}).get("sha256", ""))[:16],
            "candidate model sha256": str(cand.get("model_identity", {}).get("sha256", ""))[:16],
        }
        rows = compare(base, cand, rules, base_results, candidate_results)
        passed = all(r.passed for r in rows)
        reason = _reason(rows, rules)
    except ShipyardError as err:
        passed, reason = False, f"failed closed: {err}"
    except Exception as err:  # noqa: BLE001 - any surprise still means "do not promote"
        passed, reason = False, f"failed closed: unexpected {type(err).__name__}: {err}".splitlines()[0]
    doc = report_doc(passed, reason, rows, context, rules)
    if report_path:
        atomic_write_text(Path(report_path), doc.to_markdown())
    if html_path:
        atomic_write_text(Path(html_path), doc.to_html())
    return {"passed": passed, "reason": reason, "metrics": _flat_metrics(passed, rows),
            "thresholds": None if rules is None else rules.to_dict(),
            "rule": None if rules is None else rules.rule,
            "alpha": None if rules is None else rules.alpha,
            "multiple_comparisons": None if rules is None else rules.multiple_comparisons,
            "comparisons": comparisons(rows, rules) if rules is not None and rows else None,
            "power": power_statement(rows, rules) if rules is not None and rows else "",
            "rows": [{**r.to_dict(), "decided_by": decided_by(r), "stderr_rule": stderr_text(r)} for r in rows]}
