"""One report format for every gate: a decision, the rule that decided, and one row per check
with the measured value, the threshold and the margin (Markdown for the KFP UI, HTML, JSON)."""

from __future__ import annotations

import html
import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Check:
    """One comparison a gate made."""

    name: str
    measured: float | None
    reference: float | None
    threshold: str
    margin: float | None
    passed: bool
    rule: str = ""
    note: str = ""


@dataclass
class GateReport:
    """A gate's decision: passed, the one-line reason, the rule, every check and some context."""

    gate: str
    passed: bool
    reason: str
    rule: str = ""
    checks: list[Check] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_markdown(self) -> str:
        lines = [f"# {self.gate}: {'PASS' if self.passed else 'FAIL'}", "", f"**Decision:** {self.reason}", ""]
        if self.rule:
            lines += [f"**Rule:** {self.rule}", ""]
        for key, value in self.context.items():
            lines.append(f"- {key}: `{value}`")
        if self.checks:
            lines += ["", "| check | measured | reference | threshold | margin | result | note |",
                      "|---|---:|---:|---|---:|---|---|"]
            for c in self.checks:
                lines.append(f"| {c.name} | {fmt(c.measured)} | {fmt(c.reference)} | {c.threshold} | {fmt(c.margin)} "
                             f"| {'pass' if c.passed else '**FAIL**'} | {c.note} |")
        return "\n".join(lines) + "\n"

    def to_html(self) -> str:
        color = "#2e7d32" if self.passed else "#c62828"
        rows = "".join(
            f"<tr style='background:{'#e8f5e9' if c.passed else '#ffebee'}'>"
            + "".join(f"<td>{html.escape(str(x))}</td>" for x in (
                c.name, fmt(c.measured), fmt(c.reference), c.threshold, fmt(c.margin), "pass" if c.passed else "FAIL",
                c.note))
            + "</tr>"
            for c in self.checks
        )
        context = "".join(f"<li>{html.escape(str(k))}: <code>{html.escape(str(v))}</code></li>" for k, v in self.context.items())
        return (
            "<!doctype html><html><head><meta charset='utf-8'><title>" + html.escape(self.gate) + "</title></head>"
            "<body style='font-family:sans-serif'>"
            f"<h1>{html.escape(self.gate)}: <span style='color:{color}'>{'PASS' if self.passed else 'FAIL'}</span></h1>"
            f"<p><b>Decision:</b> {html.escape(self.reason)}</p>"
            + (f"<p><b>Rule:</b> {html.escape(self.rule)}</p>" if self.rule else "")
            + (f"<ul>{context}</ul>" if context else "")
            + "<table border='1' cellpadding='4' style='border-collapse:collapse'><tr><th>check</th><th>measured</th>"
            "<th>reference</th><th>threshold</th><th>margin</th><th>result</th><th>note</th></tr>"
            f"{rows}</table></body></html>"
        )


def fmt(value: float | None, digits: int = 4) -> str:
    """A number for a report: '–' when missing, short otherwise."""
    if value is None:
        return "–"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if abs(value) >= 1e5:
        return f"{value:.4g}"
    return f"{value:.{digits}f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)
