"""Production against the envelope its model was qualified on, with the envelope read from the model.

The package step signs the champion's gate evidence into the modelcar's registry (in-toto
attestations, :mod:`shipyard.gates.evidence`); its SLO statement holds every benchmark level (load,
TTFT and ITL p99, prompt and output lengths), the SLO and, when the benchmark replayed a recorded
workload, the capacity in its units (goodput at the SLO, the recorded peak and the multiple). So
the model deployed is enough to know what it was qualified on, wherever the run that built it kept
its files: :func:`envelope_of_model` verifies the attestations with the cluster's trust key and
rebuilds the envelope from the signed SLO statement; :func:`watch_model` reads the live traffic from
Prometheus (:func:`shipyard.serving.watch.read_live`) and compares; :func:`watch_step` is the
scheduled ``watch`` pipeline's step: it writes the verdict as ``drift.json`` and ``drift.md`` and
logs it to MLflow.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shipyard.core import contract
from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_write_text
from shipyard.gates.evidence import PROVENANCE, SLO, verified_evidence
from shipyard.oci.attestation import trust_key
from shipyard.oci.reference import require_pinned
from shipyard.serving.prometheus import PrometheusAPI
from shipyard.serving.watch import (
    compare,
    envelope_from_record,
    format_report,
    parse_watch_config,
    peak_window,
    read_live,
)
from shipyard.tracking.model_registry import PRODUCTION, version_for_alias
from shipyard.tracking.tracker import Tracker


def envelope_of_model(uri: str, public_key: Any, *, field: str = "model_uri",
                      insecure_tls: bool = False) -> tuple[Any, str]:
    """The envelope in the signed SLO evidence of the model image ``uri`` (a digest-pinned
    ``oci://`` reference) and the base model its provenance names (``""`` when it names none).

    The whole evidence must verify (:func:`shipyard.gates.evidence.verify_evidence`): an envelope
    from a statement nobody can vouch for would make every later verdict unfounded. One line when
    it does not, or when the SLO statement holds no benchmark levels (a model packaged before the
    evidence carried them: re-package it, or pass its run's decision folder to ``--champion``)."""
    verdict, predicates = verified_evidence(uri, public_key, field=field, insecure_tls=insecure_tls)
    if not verdict["passed"]:
        raise ShipyardError(field, f"its evidence does not verify ({verdict['reason']})",
                            f"see `shipyard verify-model {uri}`; watch a model the pipeline packaged and signed")
    slo = predicates.get(SLO) or {}
    if not slo.get("levels"):
        raise ShipyardError(field, "its signed SLO evidence holds no benchmark levels (packaged by an older shipyard)",
                            "package it again, or give the run's decision folder (--champion)")
    provenance = predicates.get(PROVENANCE) or {}
    recipe = ((provenance.get("buildDefinition") or {}).get("externalParameters") or {}).get("recipe")
    base = ((provenance.get("buildDefinition") or {}).get("externalParameters") or {}).get("base_model") or ""
    # the capacity in the recorded workload's units, when the benchmark replayed one (null otherwise), the
    # replay's prefix-cache hit rate and lengths (the lengths production's are held against)
    workload = slo.get("workload") or {}
    digest = (workload.get("digest") or {}).get("sha256")
    record = {"recipe": recipe or "champion", "levels": slo["levels"],
              "slo": {"thresholds": slo.get("slo") or {}, "capacity": slo.get("capacity")},
              "workload": {"prefix_hit_rate": workload.get("prefix_hit_rate"), "replay_level": workload.get("replay_level"),
                           "digest": f"sha256:{digest}" if digest else None}}
    return envelope_from_record(record, field=field), str(base)


def watch_model(api: Any, model_name: str, window_s: int, envelope: Any, tolerance: dict[str, float], *,
                selector: str = "", model_uri: str = "", base_model_uri: str = "",
                window_field: str = "--window") -> dict[str, Any]:
    """The comparison of :func:`shipyard.serving.watch.compare`, with the model it judged: ``model_uri``
    (its image) and the re-qualification command on the base model the provenance names;
    ``window_field``: the setting that gave ``window_s``, named when it is too short."""
    live = read_live(api, model_name, window_s, selector, peak_window_s=peak_window(envelope, window_s),
                     window_field=window_field)
    result = compare(envelope, live, tolerance, base_model_uri=base_model_uri)
    return {**result, "model_name": model_name, "model_uri": model_uri}


def production_model_uri(tracking_uri: str, model_name: str) -> str:
    """The modelcar URI of ``model_name``'s ``production`` version in MLflow's registry, or one line."""
    version = version_for_alias(Tracker(tracking_uri), model_name, PRODUCTION)
    if version is None:
        raise ShipyardError("served_model_uri", f"is empty and {model_name} has no '{PRODUCTION}' version in MLflow",
                            "give the served modelcar's oci://...@sha256 URI, or deploy a champion first")
    if not version.source.startswith("oci://"):
        raise ShipyardError("served_model_uri", f"is empty and {model_name}'s '{PRODUCTION}' version {version.version} "
                            f"is not a modelcar ({version.source[:120]})", "give the served modelcar's oci://...@sha256 URI")
    return version.source


def watch_step(served_model_uri: str, prometheus_url: str, watch_config: str, deploy_name: str, report_path: str,
               result_path: str, tracking_uri: str = "", registered_model_name: str = "") -> dict[str, Any]:
    """The ``watch`` pipeline's step: is production still inside the envelope its model was qualified on?

    The model is ``served_model_uri``, or (empty) the ``production`` version of
    ``registered_model_name`` in MLflow; its envelope comes from its signed SLO evidence, verified
    with the trust key of the cluster contract (``SHIPYARD_ATTESTATION_PUBLIC_KEY``). Writes the
    comparison to ``result_path`` (JSON) and the report to ``report_path`` (Markdown) and returns the
    comparison with the report's ``metadata`` and ``log`` (:func:`watch_record`). Bad input, evidence that does not verify and an unreachable Prometheus raise one
    line; a drift does not (the run succeeds, and its report and MLflow run say what drifted)."""
    cfg = parse_watch_config(watch_config, deploy_name)
    api = PrometheusAPI(prometheus_url, field="prometheus_url")
    uri = served_model_uri or production_model_uri(tracking_uri, registered_model_name)
    require_pinned(uri, "served_model_uri", how_to_allow="give the digest the package step printed")
    key = trust_key()
    if key is None:
        raise ShipyardError("served_model_uri", "cannot be checked: no trust key to verify its evidence with",
                            f"create the Secret {contract.ATTESTATION_TRUST_SECRET} (public-key.pem) for the watch step")
    envelope, base = envelope_of_model(uri, key, field="served_model_uri")
    result = watch_model(api, cfg["model_name"], cfg["window_s"], envelope, cfg["tolerance"],
                         selector=cfg["selector"], model_uri=uri, base_model_uri=base,
                         window_field="watch_config.window")
    report = format_report(result)
    atomic_write_text(Path(result_path), json.dumps(result, indent=2, sort_keys=True, default=str))
    atomic_write_text(Path(report_path), f"# Drift watch: {cfg['model_name']}\n\nModel: `{uri}`\n\n```\n{report}\n```\n")
    print(report, flush=True)
    return {**result, **watch_record(result, report_path, result_path)}


def watch_record(result: dict[str, Any], report_path: str, result_path: str) -> dict[str, Any]:
    """The watch step's outputs beside its comparison: the report's ``metadata`` (the verdict, what
    drifted, the model, the reason) and ``log``, its MLflow record
    (:meth:`shipyard.tracking.steprun.StepRun.log`'s arguments: each dimension's live and qualified figures,
    the verdict and the re-qualification command as tags, the report and the comparison)."""
    figures = {f"{r['dimension']}.{k}": r[k] for r in result["rows"] for k in ("live", "qualified")
               if isinstance(r.get(k), int | float)}
    said = result["verdict"] + (f": {', '.join(result['drifted'])}" if result["drifted"] else "")
    return {"metadata": {"verdict": result["verdict"], "drifted": ",".join(result["drifted"]),
                         "model_uri": result["model_uri"], "reason": said},
            "log": {"params": {"served_model_uri": result["model_uri"], "model_name": result["model_name"]},
                    "metrics": {"drifted": float(bool(result["drifted"])), **figures},
                    "tags": {"shipyard.watch.verdict": result["verdict"],
                             "shipyard.watch.drifted": ",".join(result["drifted"]),
                             **({"shipyard.watch.requalify": result["requalify"][:5000]} if result["requalify"] else {})},
                    "artifacts": {"drift.md": report_path, "drift.json": result_path}}}
