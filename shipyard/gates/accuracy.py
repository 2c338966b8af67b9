"""The accuracy gate: promote a candidate only when it recovers the base's scores.

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
from shipyard.gates.recovery import Row, Thresholds, compare, load_summary, parse_thresholds


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
    """The rule that decided a row: "recovery >= min", "paired rule", "stderr rule", "recovery < min", "missing"."""
    if row.candidate is None or row.recovery is None:
        return "missing"
    if row.recovery >= row.min_recovery:
        return "recovery >= min"
    if row.passed and row.gated:
        return "paired rule" if "paired rule" in row.note else "stderr rule"
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


def _reason(rows: list[Row]) -> str:
    failed = [r for r in rows if not r.passed]
    gated = [r for r in rows if r.gated]
    if not failed:
        lenient = stderr_passes(rows)
        extra = ""
        if lenient:
            extra = (f"; {len(lenient)} of them below min_recovery, passed by the stderr rule: "
                     + ", ".join(f"{r.task} {r.metric} recovery {r.recovery:.4f} < {r.min_recovery:g} "
                                 f"(loss within {r.stderr_k:g} x stderr {_stderr_of_difference(r):.4g})"
                                 for r in lenient))
        return f"passed: all {len(gated)} gated metrics recovered (of {len(rows)} compared){extra}"
    parts = []
    for r in failed:
        if r.candidate is None:
            parts.append(f"{r.task} {r.metric}: {r.note}")
        else:
            parts.append(
                f"{r.task} {r.metric}: recovery {r.recovery:.4f} < {r.min_recovery:g} "
                f"(base {_fmt(r.base)}, candidate {_fmt(r.candidate)})"
            )
    return f"failed: {len(failed)} of {len(gated)} gated metrics below threshold: " + "; ".join(parts)


ROW_HEAD = ["task", "metric", "base ± stderr", "candidate ± stderr", "recovery", "min recovery", "margin",
            "stderr rule", "paired (base - candidate)", "decided by", "result"]


def report_doc(passed: bool, reason: str, rows: list[Row], context: dict[str, Any],
               rules: Thresholds | None = None) -> Doc:
    """The accuracy gate's report: decision, rules, counts, the stderr-rule warnings, every metric."""
    verdict = "PASS" if passed else "FAIL"
    doc = Doc(f"Accuracy gate: {verdict}").h(1, f"Accuracy gate: {verdict}", "pass" if passed else "fail")
    doc.p(f"{'promote' if passed else 'do not promote'}. {reason}", "Decision:")
    doc.p("recovery = candidate / base (base / candidate when lower is better, ↓); a gated metric passes when "
          "recovery >= its min recovery, or, with stderr_k set, when |candidate - base| <= k x "
          "sqrt(stderr_base² + stderr_candidate²), or, with paired_max_loss set and per-sample logs, when the upper "
          "bound of the paired bootstrap interval of base - candidate is <= paired_max_loss. "
          "margin = recovery - min recovery: positive = room to spare, negative = short of the threshold (the "
          "SLO report's convention); a negative margin that passed says \"within noise\" (the stderr rule).", "Rule:")
    if rules is not None:
        settings: dict[str, Any] = {"min_recovery (default)": rules.min_recovery,
                                    "stderr_k (default)": "off" if rules.stderr_k is None else rules.stderr_k,
                                    "paired_max_loss (default)": "off" if rules.paired_max_loss is None
                                    else rules.paired_max_loss}
        for key, override in (rules.metrics or {}).items():
            for name, value in override.items():
                settings[f"metrics.{key}.{name}"] = value
        doc.h(2, "Thresholds").config(settings)
    for r in stderr_passes(rows):
        doc.warn(f"{r.task} {r.metric.replace(',none', '')} passed below min_recovery {r.min_recovery:g} "
                 f"(recovery {r.recovery:.4f}) only because of the stderr rule: {stderr_text(r)} "
                 f"(k = {r.stderr_k:g}, stderr of the difference from base {_fmt(r.base_stderr)} and candidate "
                 f"{_fmt(r.candidate_stderr)}).")
    if rows:
        gated = [r for r in rows if r.gated]
        by_rule = {k: sum(decided_by(r) == k for r in gated) for k in ("recovery >= min", "stderr rule")}
        failed = sum(not r.passed for r in gated)
        doc.p(f"{len(rows)} metrics compared, {len(gated)} gated: {by_rule['recovery >= min']} recovered, "
              f"{by_rule['stderr rule']} passed by the stderr rule, {failed} failed; "
              f"{len(rows) - len(gated)} not gated.", "Counts:")
        table = []
        for r in rows:
            base = _fmt(r.base) + (f" ± {_fmt(r.base_stderr)}" if r.base_stderr is not None else "")
            cand = _fmt(r.candidate) + (f" ± {_fmt(r.candidate_stderr)}" if r.candidate_stderr is not None else "")
            arrow = "↑" if r.higher_is_better else "↓"
            verdict_cell = ("pass" if r.passed else "FAIL") if r.gated else "not gated"
            margin = None if r.recovery is None else r.recovery - r.min_recovery
            table.append([r.task, f"{r.metric.replace(',none', '')} {arrow}", base, cand, _fmt(r.recovery),
                          f"{r.min_recovery:g}", "–" if margin is None else f"{margin:+.4f}" + (" (within noise)" if margin < 0 and r.passed and r.gated
                                                             else ""), stderr_text(r),
                          paired_text(r), decided_by(r) + ("" if r.gated else " (not gated)"), verdict_cell])
        doc.h(2, "Metrics").table(ROW_HEAD, table)
    if context:
        doc.h(2, "Inputs").config(context)
    return doc


def report_markdown(passed: bool, reason: str, rows: list[Row], context: dict[str, Any],
                    rules: Thresholds | None = None) -> str:
    """The gate report the KFP UI renders: decision, thresholds, counts and the recovery table."""
    return report_doc(passed, reason, rows, context, rules).to_markdown()


def run_gate(base_results: str, candidate_results: str, thresholds: str = "", report_path: str | None = None) -> dict[str, Any]:
    """Compare candidate with base results and decide; write the Markdown report to ``report_path``.

    Returns ``{"passed", "reason", "rows", "metrics"}``; ``metrics`` are flat numbers for a
    KFP Metrics artifact (per-metric recovery, the decision as 1/0).
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
        reason = _reason(rows)
    except ShipyardError as err:
        passed, reason = False, f"failed closed: {err}"
    except Exception as err:  # noqa: BLE001 - any surprise still means "do not promote"
        passed, reason = False, f"failed closed: unexpected {type(err).__name__}: {err}".splitlines()[0]
    metrics: dict[str, float] = {"gate_passed": 1.0 if passed else 0.0}
    for r in rows:
        name = f"{r.task}/{r.metric.replace(',none', '')}"
        if r.recovery is not None:
            metrics[f"recovery/{name}"] = r.recovery
        if r.candidate is not None:
            metrics[f"candidate/{name}"] = r.candidate
        if r.base is not None:
            metrics[f"base/{name}"] = r.base
    if report_path:
        atomic_write_text(Path(report_path), report_markdown(passed, reason, rows, context, rules))
    thresholds_used = None if rules is None else {"min_recovery": rules.min_recovery, "stderr_k": rules.stderr_k,
                                                  "paired_max_loss": rules.paired_max_loss,
                                                  "metrics": rules.metrics or {}}
    return {"passed": passed, "reason": reason, "metrics": metrics, "thresholds": thresholds_used,
            "rows": [{**r.to_dict(), "decided_by": decided_by(r), "stderr_rule": stderr_text(r)} for r in rows]}
