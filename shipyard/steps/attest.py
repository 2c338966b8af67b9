"""Attest the packaged champion: its gate evidence, signed, stored with the modelcar by digest.

:func:`attest_package` runs after :func:`shipyard.steps.package.package_model` on the same output
folder: it builds the evidence statements from the champion's records
(:func:`shipyard.gates.evidence.evidence_statements`) and the verification summary, signs them
(:func:`shipyard.oci.attestation.signing_key`: the Secret ``shipyard-attestation`` in a cluster, a
PEM file locally), stores them as OCI 1.1 referrers in the package's OCI layout and, when the package
was pushed, in the registry (the referrers API, else the ``sha256-<hex>`` tag), then verifies what it
stored exactly as ``shipyard verify-model`` and the deploy step will, and writes
``shipyard-attestations.{json,md}`` beside the package summary, whose JSON and Markdown
(``shipyard-package.{json,md}``, what the KFP UI shows) gain an ``attestation`` section with the
verification summary's digest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shipyard.core import contract
from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_write_text
from shipyard.gates.evidence import VSA, evidence_statements, sign_evidence, verify_evidence
from shipyard.oci import attestation as att
from shipyard.oci.layout import layout_reference
from shipyard.oci.model_signature import SIGNATURE_FILE, file_signing_problem, sign_model_files
from shipyard.oci.reference import parse

SUMMARY_JSON = "shipyard-attestations.json"
SUMMARY_MD = "shipyard-attestations.md"
PACKAGE_JSON = "shipyard-package.json"
PACKAGE_MD = "shipyard-package.md"


def _package(package_dir: str) -> dict[str, Any]:
    path = Path(package_dir) / PACKAGE_JSON
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        raise ShipyardError("package", f"{path} is missing or not JSON", "give the package step's output folder") from None
    if not isinstance(doc, dict) or not doc.get("digest") or not doc.get("uri"):
        raise ShipyardError("package", f"{path} names no digest", "give the package step's output folder")
    return doc


def _markdown(out: dict[str, Any]) -> str:
    lines = [f"# Attestations of `{out['uri']}`", "",
             f"- **Gate decision (verification summary):** {out['decision']}",
             f"- **Verification summary (VSA) envelope digest:** `{out['vsa_digest']}`",
             f"- **Signed by key:** `{out['keyid']}`",
             f"- **Stored:** {', '.join(out['stored'])}",
             f"- **Model files:** {out['model_signature']['note']}"
             + (f", envelope `{out['model_signature']['envelope_digest']}`" if out["model_signature"]["signed"] else ""),
             "",
             "| predicate type | envelope digest | referrer manifest |", "|---|---|---|"]
    lines += [f"| {s['predicate_type']} | `{s['envelope_digest']}` | `{s['referrer']}` |" for s in out["statements"]]
    lines += ["", "## Verification", ""]
    lines += [f"- {'pass' if c['passed'] else 'FAIL'} {c['name']}: {c['detail']}" for c in out["verification"]["checks"]]
    return "\n".join(lines) + "\n"


def _statement_rows(envelopes: list[dict[str, Any]], descs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per stored envelope: its predicate type, referrer manifest and envelope digest."""
    return [{"predicate_type": att.predicate_type_of(env), "referrer": desc["digest"],
             "envelope_digest": att.envelope_digest(env)} for env, desc in zip(envelopes, descs, strict=True)]


def _sign_files(model_dir: str, key: Any, package_dir: str) -> dict[str, Any]:
    """The model files signed with ``key`` (OpenSSF model signing: :mod:`shipyard.oci.model_signature`),
    the bundle written as ``model.sig`` in ``package_dir``: ``{"signed", "note", "files",
    "envelope_digest", "signature", "envelope"}``; not signed (and why) without a model folder or with
    a key model-signing cannot use (Ed25519)."""
    if not model_dir:
        return {"signed": False, "note": "not signed: no model folder was given"}
    problem = file_signing_problem(key)
    if problem:
        return {"signed": False, "note": f"not signed: the attestation key {problem}"}
    done = sign_model_files(model_dir, key, Path(package_dir) / SIGNATURE_FILE)
    return {"signed": True, "note": f"{done['files']} files signed with model-signing ({SIGNATURE_FILE})", **done}


def attest_package(package_dir: str, selection: str, *, key_file: str = "", base_eval: str = "",
                   candidate_eval: str = "", candidate_bench: str = "", model_dir: str = "", base_model_uri: str = "",
                   calibration_digest: str = "", images: dict[str, str] | None = None, kfp_run_id: str = "",
                   mlflow_run_id: str = "", insecure_tls: bool = False) -> dict[str, Any]:
    """Sign the champion's evidence and store it with the package in ``package_dir``.

    ``selection``: select_champion's folder (or a candidate.json folder); ``key_file``: a PEM private
    key (default: ``SHIPYARD_ATTESTATION_KEY`` from the Secret). The other arguments name the records
    the evidence is built from (see :func:`shipyard.gates.evidence.evidence_statements`). Raises when
    what was stored does not verify. Returns ``{"uri", "digest", "decision", "vsa_digest", "keyid",
    "statements", "stored", "referrers_api", "fallback_tag", "cosign_tag", "model_signature", "verification"}``
    (``model_signature``: the model files' signature, :func:`_sign_files`, without its envelope)."""

    pkg = _package(package_dir)
    key = att.signing_key(key_file)
    digest, uri = pkg["digest"], pkg["uri"]
    name = uri.partition("@")[0].removeprefix("oci://")
    statements = evidence_statements(name, digest, selection, base_eval=base_eval, candidate_eval=candidate_eval,
                                     candidate_bench=candidate_bench, model_dir=model_dir, base_model_uri=base_model_uri,
                                     calibration_digest=calibration_digest, images=images, kfp_run_id=kfp_run_id,
                                     mlflow_run_id=mlflow_run_id)
    files_sig = _sign_files(model_dir, key, package_dir)
    envelopes = sign_evidence(statements, key, uri, selection, signed=[files_sig["envelope"]] if files_sig["signed"] else [])
    descs = att.attach_to_layout(package_dir, digest, envelopes)
    layout_uri = layout_reference(package_dir, digest)
    stored = [f"OCI layout {Path(package_dir).resolve()}"]
    pushed: dict[str, Any] = {"referrers_api": False, "fallback_tag": "", "cosign_tag": ""}
    ref = parse(uri, "uri")
    if not ref.is_layout:
        pushed = att.push_attestations(package_dir, digest, ref.registry, ref.repository, insecure_tls=insecure_tls)
        stored.append(f"registry {ref.registry}/{ref.repository} (" + (
            "referrers API" if pushed["referrers_api"] else f"referrers tag {pushed['fallback_tag']}") + ")")
    checks = [verify_evidence(layout_uri, key.public_key())]
    if not ref.is_layout:
        checks.append(verify_evidence(uri, key.public_key(), insecure_tls=insecure_tls))
    for check in checks:  # a FAILED decision is recorded as such (the deploy refuses it); anything else must hold
        broken = [c for c in check["checks"] if not c["passed"] and c["name"] != "gate decision"]
        if broken:
            raise ShipyardError("attestation", f"what was stored in {check['where']} does not verify: "
                                f"{broken[0]['name']}: {broken[0]['detail']}",
                                "check the registry (it must keep manifests with a subject) and the key")
    rows = _statement_rows(envelopes, descs)
    vsa = next(r for r in rows if r["predicate_type"] == VSA)
    out = {"uri": uri, "digest": digest, "decision": (checks[-1]["vsa"] or {}).get("result"),
           "vsa_digest": vsa["envelope_digest"], "keyid": att.keyid(key.public_key()), "statements": rows,
           "stored": stored, "referrers_api": pushed["referrers_api"], "fallback_tag": pushed["fallback_tag"],
           "cosign_tag": pushed["cosign_tag"], "model_signature": {k: v for k, v in files_sig.items() if k != "envelope"},
           "verification": {"passed": checks[-1]["passed"], "checks": checks[-1]["checks"],
                            "found_via": checks[-1]["found_via"]}}
    atomic_write_text(Path(package_dir) / SUMMARY_JSON, json.dumps(out, indent=2, sort_keys=True))
    md = _markdown(out)
    atomic_write_text(Path(package_dir) / SUMMARY_MD, md)
    # the package summary (what the KFP UI shows for the package step) carries the attestations too
    pkg["attestation"] = {k: out[k] for k in ("decision", "vsa_digest", "keyid", "stored", "fallback_tag",
                                              "model_signature")}
    pkg["attestation"]["referrers"] = [r["referrer"] for r in rows]
    atomic_write_text(Path(package_dir) / PACKAGE_JSON, json.dumps(pkg, indent=2, sort_keys=True))
    summary = Path(package_dir) / PACKAGE_MD
    if summary.is_file():
        head = summary.read_text().split("\n## Attestations\n", 1)[0].rstrip("\n")
        atomic_write_text(summary, head + "\n\n## Attestations\n\n" + md.split("\n", 2)[2])
    return out


def attestation_tags(path: str) -> dict[str, str]:
    """The MLflow model-version tags of a package's attestations (``path``: the package folder or its
    ``shipyard-attestations.json``): ``attestation.vsa_digest``, ``attestation.decision``,
    ``attestation.keyid`` and ``attestation.<predicate>`` (each evidence envelope's digest); one line
    when the summary is missing."""
    file = Path(path)
    file = file / SUMMARY_JSON if file.is_dir() else file
    try:
        doc = json.loads(file.read_text())
        rows = doc["statements"]
        tags = {"attestation.vsa_digest": str(doc["vsa_digest"]), "attestation.decision": str(doc["decision"]),
                "attestation.keyid": str(doc["keyid"]), "attestation.uri": str(doc["uri"])}
    except (OSError, ValueError, KeyError, TypeError):
        raise ShipyardError("attestation", f"{file} is missing or not an attestation summary",
                            "pass the package folder the attest step wrote into") from None
    for row in rows:
        short = str(row["predicate_type"]).rstrip("/").split("/")[-2:]  # e.g. provenance/v1, accuracy/v1
        tags[f"attestation.{'.'.join(short)}"] = str(row["envelope_digest"])
    return tags


def attest_if_keyed(package_dir: str, selection: str, **records: Any) -> dict[str, Any]:
    """The package step's attestation: :func:`attest_package` when a signing key is configured (the
    Secret ``shipyard-attestation`` in the cluster, the local run's own key pair), else a record that
    says the model was not attested and why (the deploy then refuses it where attestations are
    required). ``{"attested": bool, "note": str, ...attest_package's result}``."""
    import os

    names = (contract.ENV_ATTESTATION_KEY, contract.ENV_ATTESTATION_KEY_FILE)
    if not any(os.environ.get(name, "").strip() for name in names):
        note = (f"not attested: no signing key (Secret {contract.ATTESTATION_SECRET}, key signing-key.pem; "
                f"locally {contract.ENV_ATTESTATION_KEY_FILE}=PATH)")
        print(f"package: {note}", flush=True)
        return {"attested": False, "note": note}
    out = attest_package(package_dir, selection, **records)
    note = f"attested: {out['decision']} (VSA {out['vsa_digest']})"
    print(f"package: {note}", flush=True)
    return {"attested": True, "note": note, **out}
