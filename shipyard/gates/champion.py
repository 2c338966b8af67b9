"""The champion/challenger gate: the challenger against the current ``production`` version only.

The base model is the accuracy gate's business (recovery); this gate asks one question: is
the challenger at least as good as what runs now? Each accuracy figure both versions have is
compared with the direction rule of :mod:`~shipyard.gates.direction`; the
challenger may be worse by at most ``tolerance`` (absolute). With no ``production`` version
yet, the challenger passes and becomes the first champion. A champion without recorded
figures, or no figure in common, fails closed.
"""

from __future__ import annotations

from collections.abc import Mapping

from shipyard.core.report import Check, GateReport
from shipyard.gates.config import ChampionConfig
from shipyard.gates.direction import higher_is_better, is_accuracy, worse_by

GATE = "Champion/challenger gate"


def champion_gate(
    challenger: Mapping[str, float],
    champion: Mapping[str, float] | None,
    *,
    champion_version: str = "",
    config: ChampionConfig | None = None,
    declared: Mapping[str, bool] | None = None,
) -> GateReport:
    """Compare the challenger's accuracy figures with the champion's (None: no production yet)."""
    cfg = config or ChampionConfig()
    declared = declared or {}
    production = f"production v{champion_version}" if champion_version else "production"
    rule = (f"each accuracy metric at most {cfg.tolerance:g} worse than {production} (absolute; direction: "
            "lm-eval's higher_is_better, else the metric's name)")
    names = list(cfg.metrics) or sorted(k for k in challenger if is_accuracy(k))
    context = {"champion (alias production)": f"v{champion_version}" if champion_version else "none",
               "tolerance (absolute)": cfg.tolerance,
               "metrics compared": "the configured list" if cfg.metrics else "every accuracy figure of the challenger",
               "challenger's accuracy figures": len(names)}
    if champion is None:
        return GateReport(GATE, True, "passed: no production version yet, nothing to compare with; the challenger "
                          "becomes the first champion", rule, context=context)
    if not champion:
        return GateReport(GATE, False, f"failed closed: {production} has no recorded figures to compare with",
                          rule, context=context)
    checks: list[Check] = []
    for name in names:
        mine, theirs = challenger.get(name), champion.get(name)
        if mine is None or theirs is None:
            who = "the challenger" if mine is None else production
            checks.append(Check(name, mine, theirs, "–", None, True, rule="not compared",
                                note=f"{who} has no figure", compared=False))
            continue
        hib = higher_is_better(name, declared.get(name))
        worse = worse_by(name, mine, theirs, declared.get(name))
        ok = worse <= cfg.tolerance + 1e-12
        limit = theirs - cfg.tolerance if hib else theirs + cfg.tolerance
        bound = f"{'>=' if hib else '<='} {limit:.6g} ({production} {theirs:.6g} {'-' if hib else '+'} {cfg.tolerance:g})"
        checks.append(Check(name, mine, theirs, bound, round(cfg.tolerance - worse, 6), ok,
                            rule=("higher is better" if hib else "lower is better") + f": worse by at most {cfg.tolerance:g}",
                            note="" if ok else f"worse by {worse:.4g}"))
    report = GateReport(GATE, True, "", rule, checks, context)
    n = report.counts()
    failures = [c for c in checks if c.compared and not c.passed]
    skipped = f"; {n['not_compared']} not compared (a figure missing)" if n["not_compared"] else ""
    if not n["compared"]:
        report.passed = False
        report.reason = f"failed closed: the challenger and {production} share no accuracy figure{skipped}"
    elif failures:
        report.passed = False
        report.reason = (f"failed: {n['failed']} of {n['compared']} metrics worse than {production} by more than "
                         f"{cfg.tolerance:g}: " + "; ".join(
                             f"{c.name} {c.measured:.4g} vs {c.reference:.4g} ({c.note})" for c in failures) + skipped)
    else:
        worst = min((c for c in checks if c.compared), key=lambda c: c.margin if c.margin is not None else 0.0)
        report.reason = (f"passed: {n['compared']} of {n['compared']} accuracy metrics within {cfg.tolerance:g} of "
                         f"{production} (smallest margin {worst.margin:.4g} on {worst.name}){skipped}")
    return report
