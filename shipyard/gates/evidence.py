"""The gates' evidence as signed attestations on the modelcar, and the rule that checks them.

After packaging, the champion's gate records become five in-toto statements about the modelcar's
manifest digest (:mod:`shipyard.oci.attestation` signs and stores them as OCI 1.1 referrers):

* **SLSA provenance v1** (``https://slsa.dev/provenance/v1``): the base model (URI, revision, tree
  digest), the calibration set (name and digest when known), the recipe (its text's sha256), the tool
  and image versions, the KFP run id and the MLflow run id (:func:`provenance_predicate`);
* **accuracy evidence** (``https://shipyard.io/evidence/accuracy/v1``): per metric the paired loss with
  its interval, n, the margin declared before the run and the decision; the rule, alpha and
  correction; lm-eval's and each task's version (:func:`accuracy_predicate`);
* **SLO evidence** (``https://shipyard.io/evidence/slo/v1``): the SLO, the knee (highest load meeting
  it), goodput, TTFT and ITL p99 there, every level's load, latency and lengths (the envelope
  ``shipyard watch`` reads back), the hardware, the vLLM arguments and the engine, and, when the
  benchmark replayed a recorded workload, the fingerprint's digest and the capacity in its units
  (goodput at the SLO as N x the recorded peak, :func:`capacity_evidence`) and the SLO measured on
  the replay itself (TTFT and ITL p99, error rate, goodput, meets or not, :func:`replay_evidence`);
  each null with the reason otherwise (:func:`slo_predicate`);
* **safety evidence** (``https://shipyard.io/evidence/safety/v1``): per garak probe family the
  attack-success-rate difference with its interval, the tolerance and the decision
  (:func:`safety_predicate`);
* **one SLSA verification summary** (``https://slsa.dev/verification_summary/v1``): the gate decision
  (``PASSED``/``FAILED``) and the digests of the four envelopes above (:func:`vsa_predicate`).

:func:`verify_evidence` is the one check (``shipyard verify-model``, the deploy step's refusal): every
envelope signed by the trusted key, every subject this digest, the five predicate types present, the
summary covering the other four by digest and saying ``PASSED``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shipyard import __version__
from shipyard.core import contract
from shipyard.core.errors import ShipyardError, shown
from shipyard.core.records import CandidateRecord, slo_of
from shipyard.gates.selection import champion_selection
from shipyard.oci import attestation as att
from shipyard.oci.model_signature import MODEL_SIGNATURE_TYPE, signed_files
from shipyard.serving.sizing import find_knee

PROVENANCE = "https://slsa.dev/provenance/v1"
ACCURACY = "https://shipyard.io/evidence/accuracy/v1"
SLO = "https://shipyard.io/evidence/slo/v1"
SAFETY = "https://shipyard.io/evidence/safety/v1"
VSA = "https://slsa.dev/verification_summary/v1"
#: the evidence the summary covers, and everything a model must carry
EVIDENCE_TYPES = (PROVENANCE, ACCURACY, SLO, SAFETY)
REQUIRED_TYPES = (*EVIDENCE_TYPES, VSA)
BUILD_TYPE = "https://shipyard.io/build/optimize-and-deploy/v1"
BUILDER_ID = "https://shipyard.io/builder/kfp"
VERIFIER_ID = "https://shipyard.io/gates"
POLICY_URI = "https://shipyard.io/gates/accuracy-slo-safety/v1"
PASSED, FAILED = "PASSED", "FAILED"


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _read_json(folder: str, name: str) -> dict[str, Any] | None:
    """``folder/name`` (or ``folder`` itself when it is the file) as JSON; None when absent or unreadable."""
    if not folder:
        return None
    path = Path(folder)
    path = path / name if path.is_dir() else path
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


# ----------------------------------------------------------------------------- predicates


def provenance_predicate(champion: CandidateRecord, *, base_model_uri: str = "", base_eval: dict[str, Any] | None = None,
                         compress: dict[str, Any] | None = None, calibration_digest: str = "",
                         images: dict[str, str] | None = None, kfp_run_id: str = "", mlflow_run_id: str = "",
                         started_on: str = "") -> dict[str, Any]:
    """SLSA provenance v1 of the champion: how it was built from the base model.

    ``champion``: its candidate record (``recipe``, ``recipe_text``, ``engine``); ``base_eval``: the
    base's eval ``summary.json`` (``model_identity.sha256``: the base model's tree digest);
    ``compress``: the model folder's ``shipyard-compress.json`` (base model, calibration dataset,
    samples, seed, and ``calibration_sha256`` when it records one); ``calibration_digest``: sha256 of the
    calibration texts when known otherwise. A figure no
    record holds is left out, never guessed (``missing`` lists them)."""
    compress = compress or {}
    calibration_digest = calibration_digest or str(compress.get("calibration_sha256") or "")
    identity = ((base_eval or {}).get("model_identity") or {}).get("sha256")
    revision = base_model_uri.rpartition("@")[2] if base_model_uri.startswith("hf://") and "@" in base_model_uri else ""
    recipe_text = str(champion.get("recipe_text") or champion.get("recipe") or "")
    deps: list[dict[str, Any]] = []
    base = {"name": "base-model", "uri": base_model_uri or str(compress.get("base_model") or "")}
    if identity:
        base["digest"] = {"sha256": str(identity).removeprefix("sha256:")}
    if revision:
        base["annotations"] = {"revision": revision}
    deps.append(base)
    if compress.get("calibration_dataset") or calibration_digest:
        calib: dict[str, Any] = {"name": "calibration-set", "uri": str(compress.get("calibration_dataset") or "")}
        if calibration_digest:
            calib["digest"] = {"sha256": calibration_digest.removeprefix("sha256:")}
        calib["annotations"] = {"samples": compress.get("num_calibration_samples"), "seed": compress.get("seed")}
        deps.append(calib)
    deps.append({"name": "recipe", "digest": {"sha256": _sha256_text(recipe_text)},
                 "annotations": {"label": champion.get("recipe")}})
    engine = champion.get("engine") or {}
    versions = {"shipyard": __version__, **({str(engine.get("distribution")): str(engine.get("version"))}
                                            if engine.get("version") else {})}
    if (base_eval or {}).get("lm_eval_version"):
        versions["lm-eval"] = str(base_eval["lm_eval_version"])  # type: ignore[index]
    missing = [name for name, have in (("base model digest", identity), ("calibration-set digest", calibration_digest),
                                       ("KFP run id", kfp_run_id), ("MLflow run id", mlflow_run_id)) if not have]
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {"base_model": base_model_uri, "recipe": champion.get("recipe")},
            "internalParameters": {"max_seq_length": compress.get("max_seq_length"), "seed": compress.get("seed")},
            "resolvedDependencies": deps,
        },
        "runDetails": {
            "builder": {"id": BUILDER_ID, "version": versions},
            "metadata": {"invocationId": kfp_run_id, **({"startedOn": started_on} if started_on else {})},
            "byproducts": ([{"name": "mlflow-run", "uri": f"mlflow:runs/{mlflow_run_id}"}] if mlflow_run_id else [])
                          + [{"name": f"image:{k}", "uri": v} for k, v in sorted((images or {}).items()) if v]
                          + ([{"name": "image:benchmark", "uri": str(engine["image"])}] if engine.get("image") else []),
        },
        "missing": missing,
    }


def accuracy_predicate(champion: CandidateRecord, eval_summary: dict[str, Any] | None = None) -> dict[str, Any]:
    """The accuracy gate's evidence: per metric the paired loss (``paired.loss``) with its interval
    (``loss_low``, ``loss_high``), ``n``, the declared ``margin``, the decision; the rule; lm-eval's and
    each task's version (from the candidate's eval ``summary.json`` when given)."""
    acc = champion.get("accuracy") or {}
    metrics = []
    for row in acc.get("rows") or []:
        paired = row.get("paired") or {}
        metrics.append({
            "task": row.get("task"), "metric": row.get("metric"), "gated": row.get("gated"), "passed": row.get("passed"),
            "rule": row.get("rule"), "decision": row.get("decision"), "margin": row.get("margin"),
            "loss": paired.get("loss"), "loss_interval": [paired.get("loss_low"), paired.get("loss_high")]
            if paired else None, "confidence": paired.get("confidence"), "n": paired.get("n"),
            "base": row.get("base"), "candidate": row.get("candidate"), "recovery": row.get("recovery"),
            "p_adjusted": row.get("p_adjusted")})
    summary = eval_summary or {}
    return {"passed": bool(acc.get("passed")), "verdict": acc.get("verdict"), "reason": acc.get("reason"),
            "rule": acc.get("rule"), "alpha": acc.get("alpha"), "multiple_comparisons": acc.get("multiple_comparisons"),
            "thresholds": acc.get("thresholds"), "metrics": metrics,
            "harness": {"name": "lm-eval", "version": summary.get("lm_eval_version"),
                        "task_versions": summary.get("task_versions") or {},
                        "config_hash": summary.get("config_hash")}}


#: what the SLO evidence keeps of each benchmark level: the envelope ``shipyard watch`` compares
#: production with (:func:`shipyard.serving.watch.envelope_from_record`), carried by the model itself;
#: ``lengths``: the per-request prompt and output lengths as sparse histograms (the length distributions)
ENVELOPE_LEVEL_FIELDS = ("name", "nominal_load", "requests_per_s", "ttft_p99_ms", "itl_p99_ms", "error_rate",
                         "prompt_tokens_mean", "output_tokens_mean", "lengths")
#: what the SLO evidence keeps of the recorded workload's replay (``workload.replay_level``): its rate and
#: its lengths, the user's traffic, which :func:`shipyard.serving.watch.envelope_from_record` holds
#: production's lengths against instead of the knee level's
REPLAY_LEVEL_FIELDS = ("name", "requests_per_s", "prompt_tokens_mean", "output_tokens_mean", "lengths")


def slo_predicate(champion: CandidateRecord, serving: dict[str, Any] | None = None,
                  bench_results: dict[str, Any] | None = None, workload_digest: str = "") -> dict[str, Any]:
    """The SLO gate's evidence: the SLO, the knee (the highest load meeting it, :func:`find_knee`),
    goodput, TTFT and ITL p99 at the knee, every level's load, latency and lengths (the envelope
    ``shipyard watch`` reads back), the hardware, the vLLM arguments (the serving configuration
    the selection chose, else the benchmark's) and the engine; ``workload_digest`` (default: the
    champion record's ``workload.digest``) when a workload fingerprint exists, with the replay's own
    lengths (``workload.replay_level``, the lengths ``shipyard watch`` compares production's with instead
    of the knee level's) and prefix-cache hit rate when the record keeps them; ``capacity`` (goodput at
    the SLO as N x the recorded peak, :func:`capacity_evidence`), or null and ``capacity_reason`` saying why;
    ``replay`` (the SLO measured on the replay itself, :func:`replay_evidence`), or null and ``replay_reason``."""
    slo = slo_of(champion)
    thresholds = slo.get("thresholds") or {}
    levels = list(champion.get("levels") or [])
    knee = find_knee(levels, thresholds)["level"] if thresholds.get("ttft_p99_ms") is not None else None
    metrics = slo.get("metrics") or {}
    results = bench_results or {}
    hardware = (slo.get("base_source") or {}).get("hardware") or \
        ({"device": results.get("device"), "cpu": (results.get("cpu") or {}).get("model")} if results else None)
    at_knee = None
    if knee:
        at_knee = {"level": knee.get("name"), "load": knee.get("nominal_load"), "goodput": metrics.get(f"{knee['name']}.goodput"),
                   "ttft_p99_ms": knee.get("ttft_p99_ms"), "itl_p99_ms": knee.get("itl_p99_ms"),
                   "output_tokens_per_s": knee.get("output_tokens_per_s"), "error_rate": knee.get("error_rate")}
    out = {"passed": bool(slo.get("passed")), "reason": slo.get("reason"), "rule": slo.get("rule"), "slo": thresholds,
           "knee": at_knee, "levels": [{k: lv.get(k) for k in ENVELOPE_LEVEL_FIELDS} for lv in levels], "hardware": hardware,
           "vllm_args": list((serving or {}).get("vllm_args") or results.get("vllm_args") or []),
           "engine": champion.get("engine"), "worst_regression": slo.get("worst_regression")}
    workload_digest = workload_digest or str((champion.get("workload") or {}).get("digest") or "")
    if workload_digest:
        out["workload"] = {"digest": {"sha256": workload_digest.removeprefix("sha256:")}}
        hit = (champion.get("workload") or {}).get("prefix_hit_rate")
        if hit is not None:  # the server's prefix-cache hit rate during the replay (what shipyard watch compares)
            out["workload"]["prefix_hit_rate"] = hit
        replay = (champion.get("workload") or {}).get("replay_level")
        if isinstance(replay, dict):  # the replay's own lengths: what shipyard watch holds production's lengths against
            out["workload"]["replay_level"] = {k: replay.get(k) for k in REPLAY_LEVEL_FIELDS}
    out["capacity"], out["capacity_reason"] = capacity_evidence(champion)
    out["replay"], out["replay_reason"] = replay_evidence(champion)
    return out


#: what the SLO evidence keeps of the capacity in the user's units (:mod:`shipyard.gates.capacity`)
CAPACITY_FIELDS = ("x_recorded_peak", "x_recorded_mean", "lower_bound", "recorded_peak_rps", "recorded_mean_rps",
                   "window_s", "window_note", "goodput_rps", "level", "requests_per_s", "goodput_share", "time_scale",
                   "text")


def capacity_evidence(champion: CandidateRecord) -> tuple[dict[str, Any] | None, str | None]:
    """The capacity the SLO evidence carries, and why there is none: goodput at the SLO as N x the
    recorded peak (``slo.capacity`` of the champion's record, :mod:`shipyard.gates.capacity`) with the
    recorded peak and mean rates, the window the peak was counted in (``window_note``: when it is not
    ``shipyard watch``'s 120-s window, why, e.g. the Prometheus step that could not see it; "" when it
    is), the goodput at the SLO (one replica's, req/s) and the digest of the workload fingerprint it
    rests on, and None; or ``(None, why)`` (a synthetic benchmark, or a replay whose fingerprint holds
    no peak rate). ``shipyard watch`` reads it back (:func:`shipyard.steps.watch.envelope_of_model`)
    to compare the live peak, and says why when it cannot."""
    cap = slo_of(champion).get("capacity")
    if not isinstance(cap, dict) or cap.get("x_recorded_peak") is None:
        why = ("the benchmark replayed a recorded workload whose fingerprint holds no peak arrival rate"
               if champion.get("workload") else
               "the benchmark's load was synthetic (no recorded workload replayed): no recorded peak to count in")
        return None, why
    return {**{k: cap.get(k) for k in CAPACITY_FIELDS}, "workload": _workload_ref(cap, champion)}, None


def _workload_ref(section: dict[str, Any], champion: CandidateRecord) -> dict[str, Any] | None:
    """The in-toto digest of the workload fingerprint a figure rests on: the section's own ``digest``,
    else the champion record's workload's; None when neither names one."""
    digest = str(section.get("digest") or (champion.get("workload") or {}).get("digest") or "")
    return {"digest": {"sha256": digest.removeprefix("sha256:")}} if digest else None


#: what the SLO evidence keeps of the SLO measured on the replay of the user's traffic
#: (:func:`shipyard.gates.slo.replay_verdict`)
REPLAY_FIELDS = ("meets", "gating", "requests", "time_scale", "ttft_p99_ms", "itl_p99_ms", "error_rate", "goodput_rps",
                 "goodput_share", "requests_per_s", "failures", "text")


def replay_evidence(champion: CandidateRecord) -> tuple[dict[str, Any] | None, str | None]:
    """The SLO measured on the recorded workload's replay itself (``slo.replay`` of the champion's
    record: TTFT and ITL p99, error rate, goodput, whether it meets the SLO and gated, the time scale it
    ran at) with the digest of the fingerprint replayed, and None; or ``(None, why)``: a synthetic
    benchmark, or a replay that kept no latency figures."""
    rep = slo_of(champion).get("replay")
    if not isinstance(rep, dict) or not rep.get("measured"):
        why = ("the benchmark's load was synthetic (no recorded workload replayed): no SLO figures on your traffic"
               if not champion.get("workload") else
               "the replay of the recorded workload kept no latency figures (a benchmark recorded before shipyard "
               "kept them)")
        return None, why
    return {**{k: rep.get(k) for k in REPLAY_FIELDS}, "workload": _workload_ref(rep, champion)}, None


def safety_predicate(champion: CandidateRecord) -> dict[str, Any]:
    """The safety gate's evidence: per garak probe family the ASR difference (candidate - base) with
    its interval, the tolerance, attempts and the decision; ``enabled: false`` when no scan ran."""
    safety = champion.get("safety") or {}
    families = [{"family": f.get("family", name), "diff": f.get("diff"), "diff_interval": f.get("diff_ci"),
                 "tolerance": f.get("tolerance"), "asr": f.get("asr"), "base_asr": f.get("base_asr"),
                 "attempts": f.get("attempts"), "base_attempts": f.get("base_attempts"), "decision": f.get("decision")}
                for name, f in sorted((safety.get("families") or {}).items())]
    return {"enabled": bool(safety.get("enabled")), "passed": bool(safety.get("passed")), "verdict": safety.get("verdict"),
            "reason": safety.get("reason"), "families": families, "new_hits": safety.get("new_hits")}


def gate_decision(champion: CandidateRecord) -> tuple[str, str]:
    """``PASSED`` when the champion passed every gate it was judged by (accuracy, SLO, safety when
    enabled), else ``FAILED``; with the record's reason."""
    checks = [bool(champion.get("passed")), bool((champion.get("accuracy") or {}).get("passed")),
              bool(slo_of(champion).get("passed"))]
    safety = champion.get("safety") or {}
    if safety.get("enabled"):
        checks.append(bool(safety.get("passed")))
    return (PASSED if all(checks) else FAILED), str(champion.get("reason") or "")


def vsa_predicate(decision: str, reason: str, resource_uri: str, evidence: list[tuple[str, str]],
                  policy_text: str = "") -> dict[str, Any]:
    """SLSA verification summary v1: the gates (the verifier) checked ``resource_uri`` against their
    policy and decided ``decision``; ``inputAttestations`` names each evidence envelope by
    ``(predicate type, sha256 of the envelope's bytes)``."""
    return {
        "verifier": {"id": VERIFIER_ID, "version": {"shipyard": __version__}},
        "timeVerified": _now(),
        "resourceUri": resource_uri,
        "policy": {"uri": POLICY_URI, **({"digest": {"sha256": _sha256_text(policy_text)}} if policy_text else {})},
        "inputAttestations": [{"name": ptype, "digest": {"sha256": digest.removeprefix("sha256:")},
                               "mediaType": att.MT_DSSE} for ptype, digest in evidence],
        "verificationResult": decision,
        "verifiedLevels": ["SLSA_BUILD_LEVEL_1"] if decision == PASSED else [],
        "slsaVersion": "1.0",
        "reason": reason,
    }


def evidence_statements(subject_name: str, digest: str, selection: str, *, base_eval: str = "",
                        candidate_eval: str = "", candidate_bench: str = "", model_dir: str = "",
                        base_model_uri: str = "", calibration_digest: str = "", images: dict[str, str] | None = None,
                        kfp_run_id: str = "", mlflow_run_id: str = "", workload_digest: str = "") -> list[dict[str, Any]]:
    """The four evidence statements (provenance, accuracy, SLO, safety) about the image ``digest``
    from the records the steps wrote: ``selection`` (select_champion's folder or a candidate.json
    folder: the champion's record), the base's and the champion's eval folders (``summary.json``),
    the champion's benchmark folder (``results.json``) and the model folder
    (``shipyard-compress.json``); each optional record that is absent leaves its figures out."""
    doc = champion_selection(selection)
    champion = doc["champion"]
    return [
        att.statement(subject_name, digest, PROVENANCE, provenance_predicate(
            champion, base_model_uri=base_model_uri, base_eval=_read_json(base_eval, "summary.json"),
            compress=_read_json(model_dir, "shipyard-compress.json"), calibration_digest=calibration_digest,
            images=images, kfp_run_id=kfp_run_id, mlflow_run_id=mlflow_run_id)),
        att.statement(subject_name, digest, ACCURACY, accuracy_predicate(champion, _read_json(candidate_eval, "summary.json"))),
        att.statement(subject_name, digest, SLO, slo_predicate(champion, doc.get("serving"),
                                                               _read_json(candidate_bench, "results.json"), workload_digest)),
        att.statement(subject_name, digest, SAFETY, safety_predicate(champion)),
    ]


def sign_evidence(statements: list[dict[str, Any]], key: Any, resource_uri: str, selection: str,
                  signed: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The evidence statements signed with ``key``, then ``signed`` (envelopes signed already: the model
    files' signature, :mod:`shipyard.oci.model_signature`), followed by the signed verification summary
    that names each of their envelopes by digest and states the champion's gate decision."""
    champion = champion_selection(selection)["champion"]
    envelopes = [*(att.sign_statement(s, key) for s in statements), *(signed or [])]
    evidence = [(att.predicate_type_of(e), att.envelope_digest(e)) for e in envelopes]
    decision, reason = gate_decision(champion)
    policy = json.dumps({k: (champion.get(k) or {}).get("thresholds") for k in ("accuracy", "slo")}, sort_keys=True)
    subject = statements[0]["subject"][0]
    vsa = att.statement(subject["name"], "sha256:" + subject["digest"]["sha256"], VSA,
                        vsa_predicate(decision, reason, resource_uri, evidence, policy))
    return [*envelopes, att.sign_statement(vsa, key)]


# ----------------------------------------------------------------------------- verification


def _short(predicate_type: str) -> str:
    """``https://slsa.dev/provenance/v1`` -> ``provenance/v1``."""
    return "/".join(str(predicate_type).rstrip("/").split("/")[-2:])


def _check(name: str, passed: bool, detail: str) -> dict[str, Any]:
    return {"name": name, "passed": bool(passed), "detail": detail}


def _age_days(when: Any) -> float | None:
    try:
        stamp = dt.datetime.strptime(str(when), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return None
    return (dt.datetime.now(dt.UTC) - stamp).total_seconds() / 86400


def verify_evidence(uri: str, public_key: Any, *, field: str = "uri", insecure_tls: bool = False,
                    max_age_days: float | None = None) -> dict[str, Any]:
    """:func:`verified_evidence`'s verdict alone."""
    return verified_evidence(uri, public_key, field=field, insecure_tls=insecure_tls, max_age_days=max_age_days)[0]


def _read_entries(stored: list[Any], digest: str, public_key: Any) -> tuple[list[dict[str, Any]], list[str], list[str],
                                                                          list[tuple[str, str]]]:
    """Each stored attestation read: its entry (referrer, predicate type, envelope digest, whether the
    key signed it and it is about ``digest``, the statement), and what is wrong: unreadable envelopes,
    statements the key did not sign, statements about other subjects (short type, their digests)."""
    entries: list[dict[str, Any]] = []
    broken: list[str] = []
    unsigned: list[str] = []
    foreign: list[tuple[str, str]] = []
    for item in stored:
        entry: dict[str, Any] = {"referrer": item.manifest_digest, "predicate_type": item.predicate_type,
                                 "envelope_digest": item.envelope_digest, "signed": False, "subject_ok": False}
        entries.append(entry)
        if item.problem:
            broken.append(item.problem)
            continue
        try:
            env, payload = att.parse_envelope(item.envelope, f"envelope {item.envelope_digest[:19]}")
            stmt = att.parse_statement(payload, f"envelope {item.envelope_digest[:19]}")
        except ShipyardError as err:
            broken.append(str(err))
            continue
        entry["predicate_type"] = stmt["predicateType"]
        entry["signed"] = att.signed_by(env, payload, public_key)
        subjects = att.subject_digests(stmt)
        entry["subject_ok"] = digest in subjects
        entry["statement"] = stmt
        entry["envelope"] = env
        if not entry["signed"]:
            unsigned.append(f"{stmt['predicateType']} ({item.envelope_digest[:19]})")
        # the model files' signature is about the files (its subject: their manifest); the signed summary
        # binds it to this image by naming its envelope (:func:`_files_check`)
        if not entry["subject_ok"] and stmt["predicateType"] != MODEL_SIGNATURE_TYPE:
            foreign.append((_short(stmt["predicateType"]), ", ".join(s[:19] for s in subjects) or "nothing"))
    return entries, broken, unsigned, foreign


def verified_evidence(uri: str, public_key: Any, *, field: str = "uri", insecure_tls: bool = False,
                      max_age_days: float | None = None) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Check the attestations stored with the image ``uri`` (see
    :func:`shipyard.oci.attestation.find_attestations`) against ``public_key``.

    Checks, each a row ``{"name", "passed", "detail"}``: attestations found; every envelope readable;
    signed by the key; every subject this digest; the five predicate types present (counting only
    signed statements about this digest); the verification summary covers the four evidence
    envelopes by digest; its decision is ``PASSED``; and, with ``max_age_days``, it is not older.
    Returns ``{"passed", "reason", "uri", "digest", "where", "found_via", "checks", "attestations",
    "vsa"}``, and the predicates of the statements signed by the key about this digest, by predicate
    type (the last stored of each type). Bad input (a tag, an unreadable key) raises one line; a
    failed check does not."""
    found = att.find_attestations(uri, field=field, insecure_tls=insecure_tls)
    digest, stored = found["digest"], found["stored"]
    want = att.keyid(public_key)
    rows: list[dict[str, Any]] = []
    entries, broken, unsigned, foreign = _read_entries(stored, digest, public_key)
    rows.append(_check("attestations found", bool(stored), f"{len(stored)} in {found['where']} via {found['found_via']}"))
    if not stored:
        return _result(found, rows, entries, None, "carries no attestations"), {}
    rows.append(_check("envelopes readable", not broken, "; ".join(broken) or f"{len(stored)} DSSE envelopes"))
    rows.append(_check("signatures", not unsigned and not broken,
                       f"not signed by key {want[:16]}: {', '.join(unsigned)}" if unsigned else
                       f"every readable envelope signed by key {want[:16]}"))
    about = sorted({where for _, where in foreign})
    rows.append(_check("subjects", not foreign,
                       f"{len(foreign)} statement{'s are' if len(foreign) != 1 else ' is'} about {'; '.join(about)}, "
                       f"not {digest[:19]} ({', '.join(t for t, _ in foreign)})" if foreign else
                       f"every statement is about {digest[:19]}"))
    good = [e for e in entries if e["signed"] and e["subject_ok"]]
    predicates = {e["predicate_type"]: e["statement"].get("predicate") or {} for e in good}
    present = {e["predicate_type"] for e in good}
    absent = [t for t in REQUIRED_TYPES if t not in present]
    rows.append(_check("predicate types", not absent, f"missing {', '.join(absent)}" if absent else
                       f"all {len(REQUIRED_TYPES)} present"))
    summaries = [e for e in good if e["predicate_type"] == VSA]
    vsa = summaries[-1]["statement"]["predicate"] if summaries else None
    vsa_info = {"envelope_digest": summaries[-1]["envelope_digest"], "result": (vsa or {}).get("verificationResult"),
                "time_verified": (vsa or {}).get("timeVerified")} if summaries else None
    if vsa is None:
        rows.append(_check("verification summary", False, "no signed summary about this digest"))
        return _result(found, rows, entries, vsa_info, "has no signed verification summary for this digest"), predicates
    files_sig = _summary_rows(rows, vsa, good, entries, max_age_days)
    out = _result(found, rows, entries, vsa_info, "")
    out["model_signature"] = files_sig
    return out, predicates


def _summary_rows(rows: list[dict[str, Any]], vsa: dict[str, Any], good: list[dict[str, Any]],
                  entries: list[dict[str, Any]], max_age_days: float | None) -> dict[str, Any] | None:
    """Append the verification summary's checks to ``rows``: it covers the evidence envelopes, the model
    files' signature is bound by it, its decision, its age; return the bound files signature (or None)."""
    named = {f"sha256:{(i.get('digest') or {}).get('sha256')}" for i in vsa.get("inputAttestations") or []
             if isinstance(i, dict)}
    evidence = {e["envelope_digest"] for e in good if e["predicate_type"] in EVIDENCE_TYPES}
    uncovered = sorted(t for t in EVIDENCE_TYPES if not any(
        e["predicate_type"] == t and e["envelope_digest"] in named for e in good))
    rows.append(_check("summary covers the evidence", not uncovered and bool(evidence),
                       f"the summary names no signed {', '.join(uncovered)} envelope stored here" if uncovered else
                       f"names the {len(EVIDENCE_TYPES)} evidence envelopes by digest"))
    files_row, files_sig = _files_check(entries, named)
    rows.append(files_row)
    result = vsa.get("verificationResult")
    rows.append(_check("gate decision", result == PASSED, f"verificationResult {result}"
                       + (f" ({vsa.get('reason')})" if vsa.get("reason") else "")))
    if max_age_days is not None:
        age = _age_days(vsa.get("timeVerified"))
        rows.append(_check("summary age", age is not None and age <= max_age_days,
                           f"verified {vsa.get('timeVerified')}, " + (f"{age:.1f} days ago" if age is not None else
                                                                       "unreadable time") + f" (at most {max_age_days:g})"))
    return files_sig


def _files_check(entries: list[dict[str, Any]], named: set[str]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The check row of the model files' signature (:mod:`shipyard.oci.model_signature`) and, when one is
    stored, signed by the key and named by the summary, ``{"envelope_digest", "files", "envelope"}`` for
    ``verify-model --files``. None stored passes (an Ed25519 key signs the attestations only); one the
    summary does not name fails (a file list not bound to this image)."""
    sigs = [e for e in entries if e["predicate_type"] == MODEL_SIGNATURE_TYPE and e["signed"]]
    if not sigs:
        return _check("model files signed", True, "none stored (the attestations are signed; the files are "
                      "signed when the key is ECDSA)"), None
    bound = [e for e in sigs if e["envelope_digest"] in named]
    stray = [e for e in sigs if e["envelope_digest"] not in named]
    if stray or not bound:
        return _check("model files signed", False, f"{stray[-1]['envelope_digest'][:19]} is not named by the "
                      "verification summary (a file list not bound to this image)"), None
    files = signed_files(bound[-1]["envelope"])
    return (_check("model files signed", True, f"{len(files)} files signed with model-signing "
                   f"({bound[-1]['envelope_digest'][:19]}, named by the summary)"),
            {"envelope_digest": bound[-1]["envelope_digest"], "files": files, "envelope": bound[-1]["envelope"]})


def _result(found: dict[str, Any], rows: list[dict[str, Any]], entries: list[dict[str, Any]],
            vsa: dict[str, Any] | None, reason: str) -> dict[str, Any]:
    failed = [r for r in rows if not r["passed"]]
    if failed and (not reason or len(failed) > 1):  # the first thing that went wrong
        reason = f"{failed[0]['name']}: {failed[0]['detail']}"
    elif not failed:
        reason = "every attestation verifies and the gates PASSED"
    for e in entries:
        e.pop("statement", None)
        e.pop("envelope", None)
    return {"passed": not failed, "reason": reason, "uri": found["uri"], "digest": found["digest"],
            "where": found["where"], "found_via": found["found_via"], "checks": rows, "attestations": entries, "vsa": vsa}


# ----------------------------------------------------------------------------- deploy refusal

#: ``deploy_config.attestation``'s settings and defaults
ATTESTATION_DEFAULTS: dict[str, Any] = {"require": True, "key": "", "insecure_tls": False, "max_age_days": None}


def attestation_options(raw: Any) -> dict[str, Any]:
    """``deploy_config.attestation`` (``raw``: its value, None when absent): ``require`` (default true:
    refuse a model whose verification summary is missing, unsigned, for another digest or not
    ``PASSED``; false is an explicit override the deploy logs), ``key`` (a PEM public key file; default:
    ``SHIPYARD_ATTESTATION_PUBLIC_KEY`` from the Secret ``shipyard-attestation``), ``insecure_tls``
    and ``max_age_days`` (refuse an older summary). Read by :func:`shipyard.params.deploy.parse_deploy_config`."""
    raw = {} if raw is None else raw
    example = '{"require": true, "key": "/keys/public-key.pem"}'
    if not isinstance(raw, dict):
        raise ShipyardError("deploy_config.attestation", f"{shown(raw, 80)} is not an object", example)
    unknown = sorted(str(k) for k in set(raw) - set(ATTESTATION_DEFAULTS))
    if unknown:
        raise ShipyardError(f"deploy_config.attestation.{shown(unknown[0], 60).strip(chr(39))}", "is not an attestation setting",
                            f"use {sorted(ATTESTATION_DEFAULTS)}")
    out = {**ATTESTATION_DEFAULTS, **raw}
    for key in ("require", "insecure_tls"):
        if not isinstance(out[key], bool):
            raise ShipyardError(f"deploy_config.attestation.{key}", f"{shown(out[key], 80)} is not true or false",
                                "use true or false")
    if not isinstance(out["key"], str):
        raise ShipyardError("deploy_config.attestation.key", f"{shown(out['key'], 80)} is not a path", example)
    age = out["max_age_days"]
    if age is not None and (isinstance(age, bool) or not isinstance(age, int | float) or not math.isfinite(age)
                            or not age > 0):
        raise ShipyardError("deploy_config.attestation.max_age_days", f"{shown(age, 80)} is not a positive number "
                            "of days", "e.g. 30")
    return out


REFUSE_FIX = ("deploy the image the package step attested (its digest-pinned uri), or set "
              'deploy_config {"attestation": {"require": false}} to deploy it anyway (logged)')
#: the refusal's fix when ``production`` would move (``shipyard alias set|rollback``)
PRODUCTION_FIX = ("move production to a version whose model the package step attested (its digest-pinned uri), "
                  "or pass --no-attestation-check to move it anyway (logged)")


def require_attested(model_uri: str, options: dict[str, Any], log: Callable[[str], None] | None = None, *,
                     field: str = "attestation", fix: str = REFUSE_FIX, step: str = "deploy",
                     override: str = "deploy_config.attestation.require=false", outcome: str = "is deployed",
                     key_required: bool = False) -> dict[str, Any]:
    """The deploy step's refusal: raise one line (field ``attestation``) unless ``model_uri``'s
    attestations verify (:func:`verify_evidence`) with the trusted public key and its summary says
    ``PASSED``. ``options``: :func:`attestation_options`. Returns what was checked
    (``{"checked", "why"|"passed", "vsa", "uri", "digest", ...}``) for the deploy record and for
    ``production`` (:func:`shipyard.tracking.model_registry.promote` moves it only to the digest checked).

    ``require: false`` is the override: nothing is checked, a warning line says so and the result has
    ``overridden: true``. Without a public key (no ``key``, no ``SHIPYARD_ATTESTATION_PUBLIC_KEY``)
    nothing can be checked: in a cluster step compiled with the Secret that is one line naming the
    Secret and key; with ``key_required`` (moving ``production``: :func:`production_check`) one line
    asking for ``--key``; elsewhere the result says the model was not checked (the deploy summary and
    decision record show it). ``field``, ``fix``, ``step``, ``override`` and ``outcome`` word the
    refusal and the override's warning for the caller."""
    say = log or (lambda line: print(line, file=sys.stderr, flush=True))  # stdout may carry the manifest
    if not options.get("require", True):
        say(f"{step}: WARNING: attestation check overridden ({override}): "
            f"{model_uri.split('@')[0]} {outcome} without a verified summary")
        return {"checked": False, "overridden": True, "why": f"overridden: {override.replace('=', ' is ')}"}
    key_field = "--key" if key_required else "deploy_config.attestation.key"
    key = att.trust_key(options.get("key") or "", field=key_field)
    if key is None:
        if contract.source_of(contract.ENV_ATTESTATION_PUBLIC_KEY) is not None:
            raise contract.missing(contract.ENV_ATTESTATION_PUBLIC_KEY,
                                   "the deploy step refuses a model whose attestations it cannot verify")
        if key_required:
            raise ShipyardError(key_field, f"is required to check the attestations before {step} moves (no "
                                f"{contract.ENV_ATTESTATION_PUBLIC_KEY} is set)",
                                f"give --key public-key.pem (the Secret {contract.ATTESTATION_TRUST_SECRET}'s "
                                "public-key.pem), or pass --no-attestation-check to move it anyway (logged)")
        # recorded (the deploy's result, summary and decision record), not printed: an error line stays the only line
        return {"checked": False, "why": f"no public key configured (deploy_config.attestation.key, "
                                         f"{contract.ENV_ATTESTATION_PUBLIC_KEY} or Secret {contract.ATTESTATION_TRUST_SECRET})"}
    if not model_uri.startswith("oci://"):
        raise ShipyardError(field, f"{model_uri.split('://')[0]}:// models carry no attestations", fix)
    out = verify_evidence(model_uri, key, field="model_uri", insecure_tls=bool(options.get("insecure_tls")),
                          max_age_days=options.get("max_age_days"))
    if not out["passed"]:
        raise ShipyardError(field, f"{out['uri'].split('@')[0]}@{out['digest'][:19]} refused: {out['reason']}", fix)
    vsa = out["vsa"] or {}
    say(f"{step}: attestations verified: {len(out['attestations'])} signed by key {att.keyid(key)[:16]}, "
        f"summary {vsa.get('envelope_digest', '')[:19]} {vsa.get('result')}")
    return {"checked": True, "passed": True, "vsa": vsa, "found_via": out["found_via"], "keyid": att.keyid(key),
            "uri": out["uri"], "digest": out["digest"]}


def production_check(options: dict[str, Any], log: Callable[[str], None] | None = None) -> Callable[[Any], dict[str, Any]]:
    """The check ``production`` moves through when a person moves it (``shipyard alias set ... production``,
    ``shipyard alias rollback``): for a model version (:class:`shipyard.tracking.model_registry.VersionInfo`)
    :func:`require_attested` on its ``source`` (the package step's digest-pinned uri) with the trusted key
    (required: ``--key`` or ``SHIPYARD_ATTESTATION_PUBLIC_KEY``), refusing in one line (field
    ``production``) unless its verification summary verifies and says ``PASSED``; ``options``
    (:func:`attestation_options`) ``require: false`` is ``--no-attestation-check``, logged."""
    def check(info: Any) -> dict[str, Any]:
        return require_attested(str(info.source), options, log, field="production", fix=PRODUCTION_FIX,
                                step="production", override="--no-attestation-check",
                                outcome=f"({info.name} version {info.version}) becomes production", key_required=True)

    return check
