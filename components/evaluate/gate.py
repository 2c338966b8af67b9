"""The accuracy gate: promote a candidate only when it recovers the base's scores.

``run_gate`` never raises: missing or unreadable results, results from different eval configs
and bad thresholds all give ``passed = False`` with the reason (fail closed), so a pipeline's
``dsl.If`` skips packaging and deployment and the run says why. Pure Python (base runtime).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from shipyard.components.evaluate.recovery import Row, compare, load_summary, parse_thresholds
from shipyard.errors import ShipyardError
from shipyard.fsutil import atomic_write_text


def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "–"
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 1e5:
        return f"{value:.4g}"
    return f"{value:.{digits}f}"


def _reason(rows: list[Row]) -> str:
    failed = [r for r in rows if not r.passed]
    gated = [r for r in rows if r.gated]
    if not failed:
        return f"passed: all {len(gated)} gated metrics recovered (of {len(rows)} compared)"
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


def report_markdown(passed: bool, reason: str, rows: list[Row], context: dict[str, Any]) -> str:
    """The gate report the KFP UI renders: decision, reason and the recovery table."""
    lines = [
        f"# Accuracy gate: {'PASS' if passed else 'FAIL'}",
        "",
        f"**Decision:** {'promote' if passed else 'do not promote'}. {reason}",
        "",
    ]
    for key, value in context.items():
        lines.append(f"- {key}: `{value}`")
    if rows:
        lines += [
            "",
            "| task | metric | base | candidate | recovery | min | pass/fail | note |",
            "|---|---|---:|---:|---:|---:|---|---|",
        ]
        for r in rows:
            base = _fmt(r.base) + (f" ± {_fmt(r.base_stderr)}" if r.base_stderr is not None else "")
            cand = _fmt(r.candidate) + (f" ± {_fmt(r.candidate_stderr)}" if r.candidate_stderr is not None else "")
            arrow = "↑" if r.higher_is_better else "↓"
            verdict = ("pass" if r.passed else "**FAIL**") if r.gated else "not gated"
            lines.append(
                f"| {r.task} | {r.metric.replace(',none', '')} {arrow} | {base} | {cand} | {_fmt(r.recovery)} "
                f"| {r.min_recovery:g} | {verdict} | {r.note} |"
            )
    return "\n".join(lines) + "\n"


def run_gate(base_results: str, candidate_results: str, thresholds: str = "", report_path: str | None = None) -> dict[str, Any]:
    """Compare candidate with base results and decide; write the Markdown report to ``report_path``.

    Returns ``{"passed", "reason", "rows", "metrics"}``; ``metrics`` are flat numbers for a
    KFP Metrics artifact (per-metric recovery, the decision as 1/0).
    """
    rows: list[Row] = []
    context: dict[str, Any] = {}
    try:
        rules = parse_thresholds(thresholds)
        base = load_summary(base_results, "base_results")
        cand = load_summary(candidate_results, "candidate_results")
        context = {
            "config hash": str(base["config_hash"])[:16],
            "backend": base.get("backend"),
            "base model sha256": str(base.get("model_identity", {}).get("sha256", ""))[:16],
            "candidate model sha256": str(cand.get("model_identity", {}).get("sha256", ""))[:16],
            "default min recovery": rules.min_recovery,
            "stderr rule k": rules.stderr_k,
        }
        rows = compare(base, cand, rules)
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
        atomic_write_text(Path(report_path), report_markdown(passed, reason, rows, context))
    return {"passed": passed, "reason": reason, "rows": [r.to_dict() for r in rows], "metrics": metrics}
