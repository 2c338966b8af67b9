"""The champion's registration: register it with its lineage and gate it against ``production``.

* :func:`register_champion` registers the packaged champion as a new model version (alias
  ``candidate``) whose tags and description carry the recipe, base model, OCI digest and the
  eval/benchmark headline; records its accuracy figures on the version (the next run's
  champion figures); runs the champion/challenger gate of :mod:`shipyard.gates.champion`.
  When MLflow is down it keeps the registration request (``tracking-pending/`` in a local run,
  ``pending`` in its result) for ``shipyard track replay`` and fails the gate closed (no deploy).
* after a Ready deployment :func:`shipyard.tracking.promotion.promote_production` moves
  ``production`` to it (the old one becomes ``previous``).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Any

from shipyard.core.errors import UnreachableError
from shipyard.core.files import atomic_write_text
from shipyard.gates.baseline import is_base
from shipyard.gates.champion import champion_gate
from shipyard.gates.config import ChampionConfig
from shipyard.gates.selection import champion_selection, objective_value
from shipyard.steps.attest import attestation_tags
from shipyard.steps.select import decision_artifacts
from shipyard.tracking import model_registry as registry
from shipyard.tracking.outbox import keep, replay_hint
from shipyard.tracking.tracker import Tracker


def headline(champion: dict[str, Any]) -> dict[str, float]:
    """The champion's headline figures: worst recovery, size, throughput at the SLO, KV-cache tokens."""
    out: dict[str, float] = {}
    for objective, key in (("recovery", "worst_recovery"), ("size", "size_bytes"),
                           ("throughput", "output_tokens_per_s_at_slo"), ("kv_cache", "kv_cache_tokens")):
        value = objective_value(champion, objective)
        if value is not None:
            out[key] = float(value)
    return out


def accuracy_figures(champion: dict[str, Any]) -> tuple[dict[str, float], dict[str, bool]]:
    """The champion's eval scores (``task/metric``) and lm-eval's direction of each."""
    figures, declared = {}, {}
    for row in (champion.get("accuracy") or {}).get("rows", []):
        if row.get("candidate") is None:
            continue
        name = f"{row['task']}/{row['metric'].replace(',none', '')}"
        figures[name] = float(row["candidate"])
        declared[name] = bool(row.get("higher_is_better", True))
    return figures, declared


def register_champion(
    tracking_uri: str, experiment: str, kfp_run_id: str, model_name: str, source_uri: str, digest: str,
    selection_dir: str, base_model_uri: str, champion_tolerance: float, report_path: str, attestation: str = "",
) -> dict[str, Any]:
    """Register the packaged champion and gate it against ``production``; returns
    ``{"passed", "reason", "version", "champion_version", "recipe", "headline"}`` with the gate report's
    ``metadata`` and ``log`` (:func:`register_record`). ``attestation``: the
    package folder :func:`shipyard.steps.attest.attest_package` wrote into (or its
    ``shipyard-attestations.json``): the verification summary's digest, decision, key id and the
    evidence envelopes' digests become tags of the model version (:func:`shipyard.steps.attest.attestation_tags`)."""
    out = _register(tracking_uri, experiment, kfp_run_id, model_name, source_uri, digest, selection_dir,
                    base_model_uri, champion_tolerance, report_path, attestation)
    return {**out, **register_record(out, source_uri, digest, report_path)}


def register_record(out: dict[str, Any], source_uri: str, digest: str, report_path: str) -> dict[str, Any]:
    """The register step's outputs beside its result: the gate report's ``metadata`` (the package, the
    version, the gate's verdict, the recipe, the headline as JSON) and ``log``, its MLflow record
    (:meth:`shipyard.tracking.steprun.StepRun.log`'s arguments)."""
    return {"metadata": {"uri": source_uri, "digest": digest, "version": out["version"], "passed": out["passed"],
                         "reason": out["reason"], "recipe": out["recipe"], "headline": json.dumps(out["headline"])},
            "log": {"params": {"version": out["version"], "champion_version": out["champion_version"] or "none"},
                    "metrics": {"gate.passed": float(out["passed"])},
                    "tags": {"shipyard.candidate": out["recipe"][:250], "shipyard.gate.reason": out["reason"][:5000]},
                    "artifacts": {"champion-gate.md": report_path}}}


def _register(tracking_uri: str, experiment: str, kfp_run_id: str, model_name: str, source_uri: str, digest: str,
              selection_dir: str, base_model_uri: str, champion_tolerance: float, report_path: str,
              attestation: str) -> dict[str, Any]:
    """:func:`register_champion`'s registration and gate, or the request kept while MLflow is down."""
    doc = champion_selection(selection_dir)
    champion = doc["champion"]
    figures, declared = accuracy_figures(champion)
    head = headline(champion)
    tags = {
        "recipe": champion["recipe"][:5000],
        "base_model": base_model_uri,
        "oci_digest": digest,
        "selection.objective": doc.get("objective", ""),
        "selection.reason": str(doc.get("decisions", {}).get(champion["recipe"], ""))[:5000],
        **{f"headline.{k}": v for k, v in head.items()},
        # the LoRA adapters it was gated with, pinned by content: served with it (deploy_config.lora)
        **{f"lora.{name}": f"{a.get('uri')} {a.get('digest')}"[:5000]
           for name, a in (champion.get("adapters") or {}).items()},
        **(attestation_tags(attestation) if attestation else {}),
    }
    description = (f"{champion['recipe'][:200]} of {base_model_uri}, packaged as {source_uri}. "
                   f"Chosen by {doc.get('objective', '')}: {doc.get('decisions', {}).get(champion['recipe'], '')}. "
                   + ", ".join(f"{k} {v:.4g}" for k, v in head.items()))
    tracker = Tracker(tracking_uri)
    request = {"kind": "register", "tracking_uri": tracking_uri, "resolved_uri": tracker.uri,
               "experiment": experiment, "kfp_run_id": kfp_run_id, "model_name": model_name,
               "source_uri": source_uri, "digest": digest, "tags": tags, "description": description,
               "alias": registry.CANDIDATE, "aliases": [], "metrics": {**figures, **head},
               "selection_dir": selection_dir}
    down = tracker.probe()
    if not down:
        try:
            return _register_and_gate(tracker, request, champion, figures, declared, head, champion_tolerance,
                                      report_path)
        except UnreachableError as err:
            down = str(err)
    return _deferred(request, down, champion, head, figures, report_path)


def _register_and_gate(tracker: Any, request: dict[str, Any], champion: dict[str, Any], figures: dict[str, float],
                       declared: dict[str, bool], head: dict[str, float], champion_tolerance: float,
                       report_path: str) -> dict[str, Any]:
    model_name = request["model_name"]
    parent = tracker.resolve_parent("", request["kfp_run_id"], request["experiment"])
    info = registry.register_candidate(tracker, model_name, request["source_uri"], run_id=parent,
                                       tags=request["tags"], description=request["description"])
    holder = registry.version_for_alias(tracker, model_name, registry.PRODUCTION)
    if holder is not None and holder.version == info.version:
        holder = None
    report = champion_gate(figures, holder.metrics if holder is not None else None,
                           champion_version=holder.version if holder else "",
                           config=ChampionConfig(tolerance=champion_tolerance), declared=declared)
    if is_base(champion) and holder is not None:  # keep-the-base with a production model: nothing moves
        report = replace(report, passed=False, reason=(
            f"kept the base: no compressed candidate beat the base, so production (v{holder.version}) stays where it "
            "is; nothing is deployed"))
    registry.record_metrics(tracker, model_name, info.version, {**figures, **head})
    registry.tag_version(tracker, model_name, info.version, {
        "shipyard.gate.passed": str(report.passed).lower(), "shipyard.gate.reason": report.reason[:5000],
        "shipyard.gate.champion_version": holder.version if holder else "none"})
    if parent:  # the pipeline run shows the decision: its record and the candidates report, beside the version
        tracker.log(parent, tags={"shipyard.registered_model": model_name, "shipyard.registered_version": info.version},
                    artifacts=decision_artifacts(request["selection_dir"]))
    atomic_write_text(report_path, report.to_markdown())
    return {"passed": report.passed, "reason": report.reason, "version": info.version,
            "champion_version": holder.version if holder else "", "recipe": champion["recipe"], "headline": head,
            "figures": figures}


def _deferred(request: dict[str, Any], down: str, champion: dict[str, Any], head: dict[str, float],
              figures: dict[str, float], report_path: str) -> dict[str, Any]:
    """MLflow is down: keep the registration request (``tracking-pending/`` in a local run, and
    the returned ``pending``) and fail the gate closed: nothing is deployed unregistered."""
    reason = (f"registration deferred: MLflow {request['resolved_uri']} is unreachable ({down}); the champion "
              "could not be registered or gated against production, so nothing is deployed")
    request["version_tags"] = {"shipyard.gate.passed": "false", "shipyard.gate.reason": reason[:5000],
                               "shipyard.registration": "replayed"}
    kept = keep(request)
    where = f"the request is kept in {kept}; {replay_hint(kept)}" if kept else \
        "the request is kept in this step's output (pending)"
    reason = f"{reason}; {where}"
    atomic_write_text(report_path, f"# Champion/challenger gate: not run\n\n{reason}\n\n"
                      f"Registration request:\n\n```json\n{json.dumps(request, indent=2, sort_keys=True)}\n```\n")
    print(f"shipyard: {reason}", file=sys.stderr, flush=True)
    return {"passed": False, "reason": reason, "version": "", "champion_version": "", "recipe": champion["recipe"],
            "headline": head, "figures": figures, "pending": request}
