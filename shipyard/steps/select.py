"""The select-champion step: fan-in over every candidate's gates, with the base as one more candidate.

:func:`select_champion` reads every ``candidate.json``, builds the keep-the-base candidate from the
base's own eval and benchmark results (:func:`shipyard.steps.judge.judge_base`), ranks them by the
selection objective (:func:`shipyard.gates.selection.select`: a compressed candidate the base
dominates is never champion), and writes ``selection.json``, ``frontier.json``,
``decision-record.json`` and the candidates report (Markdown and HTML).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from shipyard.core.files import atomic_write_text
from shipyard.core.records import DECISION_RECORD, SELECTION_FILE, load_candidate
from shipyard.gates.baseline import is_base
from shipyard.gates.frontier import frontier
from shipyard.gates.selection import (
    base_model_record,
    decision_record,
    objective_value,
    report_html,
    report_markdown,
    select,
)
from shipyard.steps.judge import judge_base

#: the candidates report's copies in the selection folder (what the MLflow parent run shows beside the record)
REPORT_MD, REPORT_HTML = "candidates.md", "candidates.html"


def decision_artifacts(selection_dir: str) -> dict[str, str]:
    """The files of the selection folder the MLflow parent run keeps under ``decision/``: the
    decision record, the selection and frontier, and the candidates report (Markdown and HTML). The
    select step logs them there whatever it decided (no champion included); the register step again
    (the promote pipeline has no select step)."""
    names = (DECISION_RECORD, SELECTION_FILE, "frontier.json", REPORT_MD, REPORT_HTML)
    return {f"decision/{name}": str(Path(selection_dir) / name) for name in names
            if (Path(selection_dir) / name).is_file()}


def _base_size(candidates: list[dict[str, Any]]) -> int | None:
    """The base's size on disk as the compress step measured it (the same for every candidate)."""
    return next((int(c["base_size_bytes"]) for c in candidates if c.get("base_size_bytes")), None)


def select_champion(candidate_dirs: list[str], selection: str, out_dir: str, report_md: str, report_html_path: str,
                    base_eval: str = "", base_bench: str = "", base_model_uri: str = "", slo: str = "",
                    base_uri: str = "", base_pinned_uri: str = "", base_fingerprint: str = "") -> dict[str, Any]:
    """Read every candidate record, add the base (when ``base_bench`` is given), select, and write
    ``selection.json``, ``frontier.json``, ``decision-record.json`` and both reports (also copied
    into ``out_dir`` as :data:`REPORT_MD` and :data:`REPORT_HTML`).

    ``base_model_uri`` is the base's model artifact (the champion's URI when the base is kept);
    ``base_uri`` the base model as the user named it (the pipeline's ``model_uri``), recorded with
    what the pin step made of it (``base_pinned_uri``, ``base_fingerprint``) as ``base_model`` in
    ``selection.json`` and ``decision-record.json`` (:func:`shipyard.gates.selection.base_model_record`),
    so ``shipyard watch --champion --requalify`` knows the base to re-qualify from.

    Returns ``{"winner", "winner_model_uri", "reason", "headline", "metrics", "decisions", ...}``, with
    ``metadata`` (what the decision and both reports carry in KFP) and ``log`` (:func:`select_record`);
    ``winner`` is the champion's recipe (``base`` when the base is kept), or empty when no candidate,
    the base included, passed its gates.
    """
    base_model = base_model_record(base_uri, base_pinned_uri, base_fingerprint)  # a credential: refused first
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    candidates = [load_candidate(path) for path in candidate_dirs]
    if base_bench:
        base = judge_base(base_eval, base_bench, slo, str(out / "base"), model_uri=base_model_uri,
                          size_bytes=_base_size(candidates))
        candidates = [base, *candidates]
    result = select(candidates, selection)
    markdown, html = report_markdown(result, candidates), report_html(result, candidates)
    for path, text in ((report_md, markdown), (report_html_path, html), (out / REPORT_MD, markdown),
                       (out / REPORT_HTML, html)):  # a copy beside the record: the MLflow parent run gets both
        atomic_write_text(path, text)
    winner = result["winner"] or {}
    doc = {k: v for k, v in result.items() if k != "winner"}
    doc["winner"] = winner.get("recipe", "")
    doc["kept_base"] = is_base(winner)
    doc["base_model"] = base_model
    doc["candidates"] = candidates
    front = frontier(candidates, doc["winner"], lambda c: objective_value(c, "throughput"))
    doc["serving"] = {"vllm_args": front["champion"]["vllm_args"] or [],
                      "source": "tuning search" if (winner.get("tuning") or {}).get("points") else "benchmark defaults"}
    atomic_write_text(out / SELECTION_FILE, json.dumps(doc, indent=2, default=str))
    atomic_write_text(out / "frontier.json", json.dumps(front, indent=2, default=str))
    atomic_write_text(out / DECISION_RECORD, json.dumps(decision_record(result, candidates, front, doc),
                                                        indent=2, default=str))
    compressed = [c for c in candidates if not is_base(c)]
    metrics = {"candidates": float(len(compressed)), "passed": float(sum(bool(c.get("passed")) for c in compressed)),
               "kept_base": 1.0 if is_base(winner) else 0.0}
    value = objective_value(winner, result["objective"]) if winner else None
    if value is not None:
        metrics[f"champion.{result['objective']}"] = float(value)
    return {"winner": winner.get("recipe", ""), "winner_model_uri": winner.get("model_uri", ""), "reason": result["reason"],
            "headline": result["headline"], "metrics": metrics, "decisions": result["decisions"],
            "objective": result["objective"], "champion": winner, "serving": doc["serving"],
            "metadata": {"champion": doc["winner"], "reason": result["reason"], "headline": result["headline"]},
            "log": select_record(doc["winner"], result["headline"], metrics, out_dir, report_md, report_html_path)}


def select_record(winner: str, headline: str, metrics: dict[str, float], out_dir: str, report_md: str,
                  report_html_path: str) -> dict[str, Any]:
    """The select step's MLflow record (:meth:`shipyard.tracking.steprun.StepRun.log`'s arguments): its
    figures, the champion and the headline as tags, both reports and the selection folder's records;
    and for the pipeline's parent run the decision (:func:`decision_artifacts`), also when no
    champion was found (then no register step runs to put it there)."""
    return {"metrics": metrics, "tags": {"shipyard.champion": winner or "none", "shipyard.headline": headline[:5000]},
            "parent_artifacts": decision_artifacts(out_dir),
            "artifacts": {"candidates.md": report_md, "candidates.html": report_html_path,
                          SELECTION_FILE: os.path.join(out_dir, SELECTION_FILE),
                          "frontier.json": os.path.join(out_dir, "frontier.json"),
                          DECISION_RECORD: os.path.join(out_dir, DECISION_RECORD)}}
