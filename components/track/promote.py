"""Champion/challenger promotion gate.

The candidate (challenger) is compared with

* the **base** model it was compressed from: each accuracy metric must keep at least
  ``min_recovery`` of the base score (higher-is-better metrics) or stay within
  ``1 / min_recovery`` of it (lower-is-better ones, such as perplexity);
* the **champion**, the registry version that holds the alias ``production``: each accuracy
  metric must not be worse than the champion's recorded value by more than
  ``champion_tolerance`` (absolute). With no production version yet, only the base counts;
* the **SLOs**: absolute bounds on benchmark figures, e.g.
  ``{"ttft_p95_ms": {"max": 500}, "output_tokens_per_s": {"min": 50}}``.

It is fail-closed: a missing figure (candidate, base or champion) refuses the promotion and
says which one.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shipyard.errors import ShipyardError
from shipyard.fsutil import atomic_dir
from shipyard.tracking import to_metrics

LOWER_IS_BETTER_HINTS = ("perplexity", "loss", "error", "_ppl", "bits_per_byte", "byte_perplexity")
IGNORED_SUFFIXES = ("_stderr", ".stderr", "stderr")
NOT_ACCURACY_HINTS = ("wall_time", "time_s", "duration", "seconds", "size", "bytes")


@dataclass
class Check:
    """One comparison the gate made."""

    name: str
    against: str  # "base", "production" or "slo"
    candidate: float | None
    reference: float | None
    bound: str
    ok: bool
    detail: str = ""


@dataclass
class Decision:
    """The gate's verdict, with every check and the reason in one line."""

    passed: bool
    reason: str
    champion_version: str = ""
    checks: list[Check] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def lower_is_better(metric: str) -> bool:
    """Whether a smaller value of ``metric`` is better (perplexity, loss, ...)."""
    name = metric.lower()
    return any(hint in name for hint in LOWER_IS_BETTER_HINTS)


def parse_accuracy_metrics(spec: str | list[str] | None, candidate_eval: Mapping[str, float]) -> list[str]:
    """The accuracy metrics to compare: the ones named, or every numeric eval figure.

    A name may start with ``-`` to force lower-is-better (``-wikitext.word_perplexity``).
    """
    if isinstance(spec, str):
        names = [s.strip() for s in spec.split(",") if s.strip()]
    else:
        names = [s for s in (spec or []) if s]
    if names:
        return names
    return sorted(
        k
        for k in candidate_eval
        if not k.endswith(IGNORED_SUFFIXES) and not any(h in k.lower() for h in NOT_ACCURACY_HINTS)
    )


def parse_slos(slos: str | Mapping[str, Any] | None) -> dict[str, dict[str, float]]:
    """``{"metric": {"max": x} | {"min": y}}``; ``{"metric": x}`` means max x."""
    if slos is None or slos == "":
        return {}
    if isinstance(slos, str):
        try:
            slos = json.loads(slos)
        except ValueError as err:
            raise ShipyardError("slos", f"is not JSON ({err})", 'pass e.g. {"ttft_p95_ms": {"max": 500}}') from None
    if not isinstance(slos, Mapping):
        raise ShipyardError("slos", "must be a JSON object", 'pass e.g. {"ttft_p95_ms": {"max": 500}}')
    out: dict[str, dict[str, float]] = {}
    for name, bound in slos.items():
        if isinstance(bound, (int, float)) and not isinstance(bound, bool):
            bound = {"max": bound}
        if not isinstance(bound, Mapping) or not set(bound) <= {"min", "max"} or not bound:
            raise ShipyardError("slos", f"bound of {name!r} must be a number or {{'min'|'max': number}}")
        try:
            out[str(name)] = {k: float(v) for k, v in bound.items()}
        except (TypeError, ValueError):
            raise ShipyardError("slos", f"bound of {name!r} is not numeric") from None
    return out


def _fmt(value: float | None) -> str:
    return "missing" if value is None else f"{value:.6g}"


def evaluate_gate(
    candidate_eval: Mapping[str, Any],
    candidate_bench: Mapping[str, Any],
    base_eval: Mapping[str, Any] | None,
    champion: Mapping[str, Any] | None,
    *,
    champion_version: str = "",
    accuracy_metrics: str | list[str] | None = None,
    slos: str | Mapping[str, Any] | None = None,
    min_recovery: float = 0.99,
    champion_tolerance: float = 0.0,
    lower_better: set[str] | frozenset[str] = frozenset(),
) -> Decision:
    """Compare a challenger with the base, the champion (None = no production yet) and the SLOs."""
    if not 0 <= min_recovery <= 1.5:
        raise ShipyardError("min_recovery", f"{min_recovery} is out of range", "use a fraction such as 0.99 (0 = no base check)")
    if champion_tolerance < 0:
        raise ShipyardError("champion_tolerance", "must not be negative")
    cand = to_metrics(candidate_eval)
    bench = to_metrics(candidate_bench)
    base = to_metrics(base_eval or {})
    champ = to_metrics(champion) if champion is not None else None
    bounds = parse_slos(slos)
    names = parse_accuracy_metrics(accuracy_metrics, cand)
    checks: list[Check] = []
    failures: list[str] = []

    if not names:
        return Decision(False, "candidate has no accuracy metrics to compare (fail-closed)", champion_version)
    if champion is not None and not champ:
        return Decision(
            False,
            f"champion metrics missing: production version {champion_version or '?'} has no recorded figures "
            "(fail-closed)",
            champion_version,
        )

    for raw_name in names:
        lower = raw_name.startswith("-") or raw_name in lower_better or lower_is_better(raw_name)
        name = raw_name.lstrip("-")
        c = cand.get(name)
        # vs base (min_recovery 0: the accuracy gate upstream already compared with the base)
        b = base.get(name)
        if min_recovery == 0 and c is not None:
            pass
        elif c is None or b is None:
            who = "candidate" if c is None else "base"
            checks.append(Check(name, "base", c, b, f"recovery >= {min_recovery}", False, f"{who} figure missing"))
            failures.append(f"{name}: {who} figure missing")
        else:
            if lower:
                limit = b / min_recovery if b >= 0 else b * min_recovery
                ok = c <= limit + 1e-12
                bound = f"<= {limit:.6g} (base {b:.6g} / {min_recovery})"
            else:
                limit = b * min_recovery if b >= 0 else b / min_recovery
                ok = c >= limit - 1e-12
                bound = f">= {limit:.6g} (base {b:.6g} x {min_recovery})"
            recovery = (b / c if lower else c / b) if b and c else math.nan
            checks.append(Check(name, "base", c, b, bound, ok, f"recovery {recovery:.4f}" if recovery == recovery else ""))
            if not ok:
                failures.append(f"{name} {c:.6g} vs base {b:.6g} ({bound})")
        # vs champion
        if champ is not None:
            p = champ.get(name)
            if c is None or p is None:
                who = "candidate" if c is None else "champion"
                checks.append(Check(name, "production", c, p, "not worse", False, f"{who} figure missing"))
                failures.append(
                    f"champion metrics missing: {name}" if who == "champion" else f"{name}: candidate figure missing"
                )
            else:
                ok = c <= p + champion_tolerance + 1e-12 if lower else c >= p - champion_tolerance - 1e-12
                bound = f"{'<=' if lower else '>='} {p:.6g} {'+' if lower else '-'} {champion_tolerance:g}"
                checks.append(Check(name, "production", c, p, bound, ok, f"production v{champion_version}"))
                if not ok:
                    failures.append(f"{name} {c:.6g} worse than production v{champion_version} {p:.6g}")

    for name, bound in bounds.items():
        value = bench.get(name, cand.get(name))
        parts = []
        ok = value is not None
        if value is not None:
            if "max" in bound:
                parts.append(f"<= {bound['max']:g}")
                ok = ok and value <= bound["max"]
            if "min" in bound:
                parts.append(f">= {bound['min']:g}")
                ok = ok and value >= bound["min"]
        checks.append(Check(name, "slo", value, None, " and ".join(parts) or str(bound), ok,
                            "" if value is not None else "benchmark figure missing"))
        if not ok:
            failures.append(f"SLO {name} {_fmt(value)} not {' and '.join(parts) or bound}")

    if failures:
        return Decision(False, "refused: " + "; ".join(failures), champion_version, checks)
    sides = ([] if min_recovery == 0 else ["base"]) + ([f"production v{champion_version}"] if champ is not None else [])
    against = " and ".join(sides) if sides else "anything (no production version yet; the accuracy gate compared with the base)"
    if champ is None and sides:
        against += " (no production version yet)"
    slo_text = f", {len(bounds)} SLOs met" if bounds else ""
    return Decision(True, f"promoted: {len(names)} accuracy metrics not worse than {against}{slo_text}",
                    champion_version, checks)


def render_markdown(decision: Decision, model_name: str, version: str) -> str:
    """The decision as a Markdown table (KFP UI renders it)."""
    lines = [
        f"# Promotion gate: {model_name} v{version}",
        "",
        f"**{'PASSED' if decision.passed else 'REFUSED'}**: {decision.reason}",
        "",
        f"Champion (alias `production`): {('v' + decision.champion_version) if decision.champion_version else 'none'}",
        "",
        "| metric | against | candidate | reference | bound | ok | detail |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in decision.checks:
        lines.append(
            f"| {c.name} | {c.against} | {_fmt(c.candidate)} | {_fmt(c.reference)} | {c.bound} | "
            f"{'yes' if c.ok else 'NO'} | {c.detail} |"
        )
    return "\n".join(lines) + "\n"


def render_html(decision: Decision, model_name: str, version: str) -> str:
    """The decision as a small HTML page (KFP UI renders it)."""
    rows = "".join(
        "<tr style='background:{}'>{}</tr>".format(
            "#e8f5e9" if c.ok else "#ffebee",
            "".join(
                f"<td>{html.escape(str(x))}</td>"
                for x in (c.name, c.against, _fmt(c.candidate), _fmt(c.reference), c.bound, "yes" if c.ok else "NO",
                          c.detail)
            ),
        )
        for c in decision.checks
    )
    color = "#2e7d32" if decision.passed else "#c62828"
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Promotion gate</title></head><body "
        "style='font-family:sans-serif'>"
        f"<h1>Promotion gate: {html.escape(model_name)} v{html.escape(version)}</h1>"
        f"<p style='color:{color};font-weight:bold'>{'PASSED' if decision.passed else 'REFUSED'}: "
        f"{html.escape(decision.reason)}</p>"
        f"<p>Champion (alias <code>production</code>): "
        f"{html.escape('v' + decision.champion_version) if decision.champion_version else 'none'}</p>"
        "<table border='1' cellpadding='4' style='border-collapse:collapse'><tr><th>metric</th><th>against</th>"
        "<th>candidate</th><th>reference</th><th>bound</th><th>ok</th><th>detail</th></tr>"
        f"{rows}</table></body></html>"
    )


def write_decision(decision: Decision, out_dir: str | Path, model_name: str, version: str) -> Path:
    """``decision.json``, ``decision.md`` and ``decision.html`` in ``out_dir`` (all or nothing)."""
    with atomic_dir(out_dir) as tmp:
        (tmp / "decision.json").write_text(json.dumps(decision.to_json(), indent=2, default=str))
        (tmp / "decision.md").write_text(render_markdown(decision, model_name, version))
        (tmp / "decision.html").write_text(render_html(decision, model_name, version))
    return Path(out_dir)


def run_gate(
    *,
    tracking_uri: str,
    model_name: str,
    candidate_version: str,
    candidate_eval: Mapping[str, Any],
    candidate_bench: Mapping[str, Any],
    base_eval: Mapping[str, Any] | None,
    out_dir: str,
    parent_run_id: str = "",
    accuracy_metrics: str = "",
    slos: str | Mapping[str, Any] | None = None,
    min_recovery: float = 0.99,
    champion_tolerance: float = 0.0,
    lower_better: list[str] | None = None,
    kfp_run_id: str = "",
    experiment: str = "",
) -> dict[str, Any]:
    """The gate against the registry: read the champion, decide, record, report.

    Records the candidate's figures on its version (so it can be the next champion), tags the
    version with the decision, logs a nested ``promotion-gate`` run under ``parent_run_id``
    and writes the decision files to ``out_dir``. Returns ``{"passed", "reason", ...}``.
    """
    from shipyard import registry
    from shipyard.tracking import Tracker

    tracker = Tracker(tracking_uri)
    tracker.check_reachable()
    parent_run_id = tracker.resolve_parent(parent_run_id, kfp_run_id, experiment)
    candidate = registry.get_version(tracker, model_name, candidate_version)
    champion_info = registry.version_for_alias(tracker, model_name, registry.PRODUCTION)
    if champion_info is not None and champion_info.version == candidate.version:
        champion_info = None  # re-gating the version that already runs: compare with the base only
    champion_metrics: dict[str, float] | None = None
    if champion_info is not None:
        champion_metrics = champion_info.metrics
        if not champion_metrics and champion_info.run_id:
            # Versions registered before the gate recorded figures: fall back to their run's metrics.
            from mlflow.exceptions import MlflowException

            try:
                run = tracker.call("read the champion's run", tracker.client.get_run, champion_info.run_id)
                champion_metrics = dict(run.data.metrics)
            except MlflowException:
                champion_metrics = {}
    decision = evaluate_gate(
        candidate_eval,
        candidate_bench,
        base_eval,
        champion_metrics,
        champion_version=champion_info.version if champion_info else "",
        accuracy_metrics=accuracy_metrics,
        slos=slos,
        min_recovery=min_recovery,
        champion_tolerance=champion_tolerance,
        lower_better=frozenset(lower_better or ()),
    )
    out = write_decision(decision, out_dir, model_name, candidate.version)
    recorded = {**to_metrics(candidate_bench), **to_metrics(candidate_eval)}
    registry.record_metrics(tracker, model_name, candidate.version, recorded)
    registry.tag_version(
        tracker,
        model_name,
        candidate.version,
        {
            "shipyard.gate.passed": str(decision.passed).lower(),
            "shipyard.gate.reason": decision.reason[:5000],
            "shipyard.gate.champion_version": decision.champion_version or "none",
        },
    )
    run_id = ""
    if parent_run_id:
        run_id, _ = tracker.log_step(
            parent_run_id,
            "promotion-gate",
            params={
                "model_name": model_name,
                "candidate_version": candidate.version,
                "champion_version": decision.champion_version or "none",
                "min_recovery": min_recovery,
                "champion_tolerance": champion_tolerance,
                "slos": json.dumps(parse_slos(slos), sort_keys=True),
                "accuracy_metrics": accuracy_metrics or "all",
            },
            metrics={"gate.passed": float(decision.passed), **{f"candidate.{k}": v for k, v in recorded.items()}},
            tags={"shipyard.gate.passed": str(decision.passed).lower(), "shipyard.gate.reason": decision.reason[:5000]},
            artifacts={"promotion-gate": out},
        )
    return {
        "passed": decision.passed,
        "reason": decision.reason,
        "champion_version": decision.champion_version,
        "candidate_version": candidate.version,
        "gate_run_id": run_id,
    }
