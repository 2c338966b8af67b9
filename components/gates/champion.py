"""The champion/challenger gate: the challenger against the current ``production`` version only.

The base model is the accuracy gate's business (recovery); this gate asks one question: is
the challenger at least as good as what runs now? Each accuracy figure both versions have is
compared with the direction rule of :mod:`~shipyard.components.gates.direction`; the
challenger may be worse by at most ``tolerance`` (absolute). With no ``production`` version
yet, the challenger passes and becomes the first champion. A champion without recorded
figures, or no figure in common, fails closed.
"""

from __future__ import annotations

from collections.abc import Mapping

from shipyard.components.gates.config import ChampionConfig
from shipyard.components.gates.direction import higher_is_better, is_accuracy, worse_by
from shipyard.components.gates.report import Check, GateReport

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
    rule = (f"each accuracy metric at most {cfg.tolerance:g} worse than production"
            f"{' v' + champion_version if champion_version else ''} (direction: lm-eval's higher_is_better, "
            "else the metric's name)")
    names = list(cfg.metrics) or sorted(k for k in challenger if is_accuracy(k))
    context = {"champion (alias production)": f"v{champion_version}" if champion_version else "none",
               "tolerance": cfg.tolerance}
    if champion is None:
        return GateReport(GATE, True, "passed: no production version yet; the challenger becomes the first champion",
                          rule, context=context)
    if not champion:
        return GateReport(GATE, False, f"failed closed: production v{champion_version or '?'} has no recorded figures",
                          rule, context=context)
    checks: list[Check] = []
    failures: list[str] = []
    for name in names:
        mine, theirs = challenger.get(name), champion.get(name)
        if mine is None or theirs is None:
            who = "challenger" if mine is None else "champion"
            checks.append(Check(name, mine, theirs, "not compared", None, True, rule="", note=f"{who} has no figure"))
            continue
        hib = higher_is_better(name, declared.get(name))
        worse = worse_by(name, mine, theirs, declared.get(name))
        ok = worse <= cfg.tolerance + 1e-12
        bound = f"{'>=' if hib else '<='} {theirs:.6g} {'-' if hib else '+'} {cfg.tolerance:g}"
        checks.append(Check(name, mine, theirs, bound, round(cfg.tolerance - worse, 6), ok,
                            rule="higher is better" if hib else "lower is better"))
        if not ok:
            failures.append(f"{name} {mine:.4g} vs production {theirs:.4g} (worse by {worse:.4g} > {cfg.tolerance:g})")
    compared = [c for c in checks if c.threshold != "not compared"]
    if not compared:
        return GateReport(GATE, False, "failed closed: the challenger and production share no accuracy figure",
                          rule, checks, context)
    if failures:
        return GateReport(GATE, False, f"failed: {len(failures)} of {len(compared)} metrics worse than production: "
                          + "; ".join(failures), rule, checks, context)
    return GateReport(GATE, True, f"passed: {len(compared)} accuracy metrics not worse than production v{champion_version}",
                      rule, checks, context)
