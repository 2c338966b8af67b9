"""How the candidate record's verdicts read: :func:`verdict` and :func:`accuracy_caveat` say a
gate's verdict the way every surface shows it.

The record itself (``candidate.json``, :class:`shipyard.core.records.CandidateRecord`) is written by
:func:`shipyard.steps.judge.judge_candidate` (the candidate gates step) and read back by
:func:`shipyard.core.records.load_candidate`.
"""

from __future__ import annotations

from typing import Any


def accuracy_caveat(rows: list[dict[str, Any]]) -> str:
    """What a passing accuracy verdict must not hide: the gated metrics that passed without being
    shown no worse than the base. Under the non-inferiority rule, the inconclusive ones that passed
    through ``allow_inconclusive``, e.g. "2 metrics inconclusive at margin 0.02, allowed; loss bound
    up to 0.21"; under the recovery rule (also on the rows that fall back to it), the ones below
    ``min_recovery`` that passed through the stderr rule, e.g. "5 metrics below 0.99 within noise;
    worst 0.81". "" when there are none."""
    passed = [r for r in rows if r.get("gated") and r.get("passed")]
    parts = []
    undecided = [r for r in passed if r.get("decision") == "inconclusive"]
    if undecided:
        margins = sorted({float(r["margin"]) for r in undecided if r.get("margin") is not None})
        at = f" at margin {margins[0]:g}" if len(margins) == 1 else ""
        bounds = [float((r.get("paired") or {})["loss_high"]) for r in undecided
                  if (r.get("paired") or {}).get("loss_high") is not None]
        bound = f"; loss bound up to {max(bounds):.2g}" if bounds else ""
        parts.append(f"{len(undecided)} metric{'s' if len(undecided) != 1 else ''} inconclusive{at}, allowed{bound}")
    lenient = [r for r in passed if r.get("rule", "recovery") == "recovery" and r.get("recovery") is not None
               and r.get("min_recovery") is not None and float(r["recovery"]) < float(r["min_recovery"])]
    if lenient:
        floors = sorted({float(r["min_recovery"]) for r in lenient})
        below = f"below {floors[0]:g}" if len(floors) == 1 else "below their min_recovery"
        worst = min(float(r["recovery"]) for r in lenient)
        parts.append(f"{len(lenient)} metric{'s' if len(lenient) != 1 else ''} {below} within noise; worst {worst:.2f}")
    return "; ".join(parts)


def verdict(passed: bool | None, caveat: str = "") -> str:
    """A gate's verdict as every surface shows it: "pass", "FAIL", or "pass (caveat)"."""
    if passed is None:
        return "-"
    return ("pass" + (f" ({caveat})" if caveat else "")) if passed else "FAIL"

