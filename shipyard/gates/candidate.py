"""The candidate record (``candidate.json``) the selection step ranks, and how its verdicts read.

:func:`shipyard.steps.judge.judge_candidate` writes it (the candidate gates step);
:func:`load_candidate` reads it back; :func:`verdict` and :func:`accuracy_caveat` say a gate's
verdict the way every surface shows it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shipyard.core.records import read_record

CANDIDATE_FILE = "candidate.json"
SCHEMA = "shipyard.candidate/v1"


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


def load_candidate(path: str | Path) -> dict[str, Any]:
    """Read a ``candidate.json`` (the file or its folder)."""
    return read_record(path, CANDIDATE_FILE, field="candidates", what="candidate record",
                       fix="pass candidate_gates' candidate outputs",
                       check=lambda data: None if data.get("schema") == SCHEMA else "is not a shipyard candidate record")
