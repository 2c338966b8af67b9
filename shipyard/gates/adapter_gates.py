"""The accuracy gate per LoRA adapter: a quantization that breaks an adapter does not ship.

For each adapter the base was evaluated with (``<base_adapters>/<name>/``, written by
:func:`shipyard.evaluation.lora.evaluate_adapters`), the candidate's evaluation with the same
adapter (``<candidate_adapters>/<name>/``) is compared by the accuracy gate itself
(:func:`shipyard.gates.accuracy.run_gate`: the same thresholds, recovery rules, parity checks,
which include the adapter's content digest, and fail-closed behaviour). An adapter the candidate
was not evaluated with fails closed. Pure Python (base runtime).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shipyard.gates.accuracy import run_gate
from shipyard.models.adapters import load_adapters


def adapter_names(base_adapters: str, candidate_adapters: str) -> list[str]:
    """Every adapter either side was evaluated with, in the base's order (then the candidate's)."""
    names: list[str] = []
    for folder in (base_adapters, candidate_adapters):
        if folder and Path(folder).is_dir():
            names += [r["name"] for r in load_adapters(folder) if r.get("name") not in names]
    return names


def run_adapter_gates(base_adapters: str, candidate_adapters: str, thresholds: str = "",
                      report_dir: str | None = None) -> dict[str, dict[str, Any]]:
    """One accuracy gate per adapter; ``{name: {passed, reason, worst_recovery, digest, uri}}`` (``{}`` when
    neither side has adapters). Reports go to ``report_dir/accuracy-lora-<name>.md``."""
    out: dict[str, dict[str, Any]] = {}
    base_records = {r["name"]: r for r in (load_adapters(base_adapters) if base_adapters else [])}
    digests = {name: r.get("digest") for name, r in base_records.items()}
    for name in adapter_names(base_adapters, candidate_adapters):
        report = str(Path(report_dir) / f"accuracy-lora-{name}.md") if report_dir else None
        missing = [side for side, folder in (("base", base_adapters), ("candidate", candidate_adapters))
                   if not folder or not (Path(folder) / name).is_dir()]
        if missing:
            out[name] = {"passed": False, "worst_recovery": None, "digest": digests.get(name),
                         "uri": (base_records.get(name) or {}).get("uri"),
                         "reason": f"failed closed: the {' and '.join(missing)} {'was' if len(missing) == 1 else 'were'}"
                                   f" not evaluated with adapter {name!r}"}
            continue
        gate = run_gate(str(Path(base_adapters) / name), str(Path(candidate_adapters) / name), thresholds,
                        report_path=report)
        gated = [r["recovery"] for r in gate["rows"] if r.get("gated") and r.get("recovery") is not None]
        out[name] = {"passed": bool(gate["passed"]), "reason": gate["reason"],
                     "worst_recovery": min(gated, default=None), "digest": digests.get(name),
                     "uri": (base_records.get(name) or {}).get("uri")}
    return out
