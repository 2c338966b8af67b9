"""``shipyard verify-model URI``: does the model image carry signed evidence that its gates passed?

``URI`` is the package step's digest-pinned reference: ``oci://REGISTRY/REPO@sha256:...`` (a tag is
refused: it can name other weights tomorrow) or its OCI layout on disk, ``oci:///ABS/PATH@sha256:...``.
The attestations stored with the image (OCI 1.1 referrers, or the ``sha256-<hex>`` referrers tag of a
registry without the referrers API) are checked against ``--key`` (a PEM public key; default
``SHIPYARD_ATTESTATION_PUBLIC_KEY[_FILE]``): every envelope signed by it, every statement about this
digest, the provenance, accuracy, SLO, safety and verification-summary predicates present, the
summary naming the evidence by digest and its decision ``PASSED`` (:func:`shipyard.gates.evidence.verify_evidence`).
With ``--files DIR`` (a folder the model's files were extracted to, e.g. a node's ``/mnt/models``), the
model files' signature stored with the image (OpenSSF model signing, made by the package step with an
ECDSA key) is checked against them too: every file's sha256, none missing or extra
(:func:`shipyard.oci.model_signature.verify_model_files`).

Prints one line per check and the verdict (or ``-o json|yaml``). Exit status like ``shipyard
verify``: 0 passed, 1 failed (no attestations, a bad signature, another digest, a FAILED decision),
2 bad input (a tag, a missing or unreadable key, a path that is no layout), 3 the registry is
unreachable.
"""

from __future__ import annotations

import argparse

from shipyard.cli.output import add_output_option, emit
from shipyard.core.numbers import positive_float


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify-model", help="verify the signed gate evidence stored with a model image",
                       description="Check the in-toto attestations stored with a modelcar (OCI referrers): "
                                   "signatures, subjects, predicate types and the verification summary's decision.")
    p.add_argument("uri", help="oci://REGISTRY/REPO@sha256:... or oci:///ABS/LAYOUT@sha256:... (the package step's uri)")
    p.add_argument("--key", help="PEM public key the attestations must be signed with "
                                 "(default: SHIPYARD_ATTESTATION_PUBLIC_KEY or SHIPYARD_ATTESTATION_PUBLIC_KEY_FILE)")
    p.add_argument("--max-age", type=positive_float("30"), metavar="DAYS",
                   help="refuse a verification summary older than this many days")
    p.add_argument("--files", metavar="DIR",
                   help="also check this folder of extracted model files against the signed file list")
    p.add_argument("--insecure-tls", action="store_true", help="skip TLS verification (test registries only)")
    add_output_option(p, default_help="one line per check and the verdict")
    p.set_defaults(func=_verify_model)


def _verify_model(args: argparse.Namespace) -> int:
    from shipyard.core import contract
    from shipyard.core.errors import ShipyardError, refuse_credentials
    from shipyard.gates.evidence import verify_evidence
    from shipyard.oci.attestation import KEY_FIX, read_key_file, trust_key
    from shipyard.oci.reference import require_pinned

    refuse_credentials(args.uri, "uri")
    require_pinned(args.uri, "uri", how_to_allow="give the digest the package step printed")  # before any key or network
    key = read_key_file(args.key, "--key", private=False) if args.key else trust_key()
    if key is None:
        raise ShipyardError("--key", "is required (no SHIPYARD_ATTESTATION_PUBLIC_KEY is set)",
                            f"give --key public-key.pem (the Secret {contract.ATTESTATION_TRUST_SECRET}'s public-key.pem); "
                            + KEY_FIX)
    if args.files:
        from shipyard.oci.model_signature import files_folder

        files_folder(args.files)  # before any network
    out = verify_evidence(args.uri, key, field="uri", insecure_tls=args.insecure_tls, max_age_days=args.max_age)
    if args.files:
        _check_files(out, args.files, key)

    def text() -> str:
        lines = [f"  {'pass' if c['passed'] else 'FAIL':4} {c['name']}: {c['detail']}" for c in out["checks"]]
        verdict = ("PASSED: " if out["passed"] else "FAILED: ") + f"{out['uri']}: {out['reason']}"
        return "\n".join([*lines, verdict])

    emit(out, args.output, text)
    return 0 if out["passed"] else 1


def _check_files(out: dict, folder: str, key: object) -> None:
    """Add the ``model files`` check (the extracted files against the stored signature) to ``out``."""
    from shipyard.oci.model_signature import file_signing_problem, verify_model_files

    sig = out.get("model_signature")
    if sig is None:
        row = {"name": "model files", "passed": False, "detail": "no model files signature bound to this image to "
               "check them against" + (" (the key is not ECDSA)" if file_signing_problem(key) else "")}
    else:
        row = {"name": "model files", **verify_model_files(folder, sig["envelope"], key)}
    out["checks"].append(row)
    if not row["passed"] and out["passed"]:
        out["passed"], out["reason"] = False, f"model files: {row['detail']}"
