"""File-level signatures of a model folder: OpenSSF model signing (``model-signing`` 1.1), key-based.

The attestations (:mod:`shipyard.oci.attestation`) are about the modelcar's manifest digest: they hold
as long as the model is that image. Once a node has extracted the files (``/mnt/models``), or someone
copied them elsewhere, only a signature over the files themselves can say they are the ones that were
gated. :func:`sign_model_files` signs the model folder the way ``model_signing sign key`` does: an
in-toto statement (predicate type :data:`MODEL_SIGNATURE_TYPE`) listing every file's sha256, in a DSSE
envelope signed with the attestation key, written as a sigstore bundle (``model.sig``).

The package step stores that envelope with the modelcar like the other attestations (an OCI 1.1
referrer) and its verification summary names it by digest, so the file list is bound to the image.
``shipyard verify-model URI --files DIR`` then checks an extracted folder against it
(:func:`verify_model_files`), as ``model_signing verify key`` would with the bundle.

``model-signing`` 1.1 signs with ECDSA keys (P-256, P-384, P-521) only: with an Ed25519 attestation
key the files are not signed and the package summary says why (:func:`file_signing_problem`).
Runs in the ``base`` runtime.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.oci.attestation import PAYLOAD_TYPE, envelope_digest, public_pem

MODEL_SIGNATURE_TYPE = "https://model_signing/signature/v1.0"
SIGNATURE_FILE = "model.sig"
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
#: the curves model-signing 1.1's key signer accepts
SIGNING_CURVES = ("secp256r1", "secp384r1", "secp521r1")


KEY_FIX = "make an ECDSA P-256 key: openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out signing-key.pem"


def file_signing_problem(key: Any) -> str:
    """Why ``key`` (a private or public key) cannot sign or verify model files; "" when it can."""
    from cryptography.hazmat.primitives.asymmetric import ec

    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey) and key.curve.name in SIGNING_CURVES:
        return ""
    kind = type(key).__name__.removeprefix("_").replace("PrivateKey", "").replace("PublicKey", "")
    return f"is {kind}: model-signing 1.1 signs model files with ECDSA keys (P-256, P-384) only"


def _pem_file(folder: Path, name: str, key: Any, private: bool) -> Path:
    from cryptography.hazmat.primitives import serialization as s

    path = folder / name
    data = (key.private_bytes(s.Encoding.PEM, s.PrivateFormat.PKCS8, s.NoEncryption()) if private else
            public_pem(key).encode())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


def _hidden_paths(root: Path) -> list[str]:
    """The hidden entries of a model folder (``.cache/``, ``.gitattributes``): the modelcar leaves them
    out (:func:`shipyard.core.files.tree_files`), so the signature does too."""
    return sorted({p.relative_to(root).as_posix() for p in root.rglob(".*")})


def sign_model_files(model_dir: str | os.PathLike[str], key: Any, out_path: str | os.PathLike[str]) -> dict[str, Any]:
    """Sign every file of ``model_dir`` (hidden ones and ``model.sig`` left out, as in the modelcar) with
    the ECDSA private ``key``; write the sigstore bundle to ``out_path``. Returns ``{"signature": path,
    "files": n, "envelope": the DSSE envelope, "envelope_digest"}``. Raises one line for a key
    model-signing cannot use."""
    import model_signing

    problem = file_signing_problem(key)
    if problem:
        raise ShipyardError("attestation key", problem, KEY_FIX)
    root = Path(model_dir)
    with tempfile.TemporaryDirectory(prefix="shipyard-sign-") as tmp:
        pem = _pem_file(Path(tmp), "key.pem", key, private=True)
        hashing = model_signing.hashing.Config().set_ignored_paths(
            paths=[SIGNATURE_FILE, *_hidden_paths(root)]).set_allow_symlinks(True)
        model_signing.signing.Config().use_elliptic_key_signer(private_key=pem).set_hashing_config(hashing).sign(
            root, Path(out_path))
    envelope = envelope_of(json.loads(Path(out_path).read_text()))
    return {"signature": str(out_path), "files": len(signed_files(envelope)), "envelope": envelope,
            "envelope_digest": envelope_digest(envelope)}


def envelope_of(bundle: dict[str, Any]) -> dict[str, Any]:
    """The DSSE envelope inside a model-signing bundle, in the attestations' shape (``payloadType``,
    ``payload``, ``signatures`` of ``{"keyid", "sig"}``)."""
    env = bundle.get("dsseEnvelope") if isinstance(bundle, dict) else None
    if not isinstance(env, dict) or not env.get("payload") or not env.get("signatures"):
        raise ShipyardError("model signature", "is not a model-signing bundle (no DSSE envelope)", "sign the model again")
    return {"payloadType": env.get("payloadType", PAYLOAD_TYPE), "payload": env["payload"],
            "signatures": [{"keyid": s.get("keyid", ""), "sig": s.get("sig", "")} for s in env["signatures"]]}


def bundle_of(envelope: dict[str, Any], public_key: Any) -> dict[str, Any]:
    """The sigstore bundle model-signing verifies, rebuilt from a stored envelope and the public key
    (its ``hint``: the sha256 of the key's PEM, as model-signing writes it)."""
    pem = public_pem(public_key).encode()
    signatures = [{"sig": e["sig"], **({"keyid": e["keyid"]} if e.get("keyid") else {})}
                  for e in envelope["signatures"]]
    return {"mediaType": BUNDLE_MEDIA_TYPE,
            "verificationMaterial": {"publicKey": {"hint": hashlib.sha256(pem).hexdigest()}, "tlogEntries": []},
            "dsseEnvelope": {"payload": envelope["payload"], "payloadType": envelope["payloadType"],
                             "signatures": signatures}}


def signed_files(envelope: dict[str, Any]) -> list[str]:
    """The file names a model signature lists (its statement's resources)."""
    try:
        stmt = json.loads(base64.b64decode(envelope["payload"]))
        return [str(r["name"]) for r in stmt["predicate"]["resources"]]
    except (ValueError, KeyError, TypeError):
        return []


def _mismatch(err: Exception) -> str:
    """model-signing's refusal in one short line: which files differ, are extra or missing, or that
    the signature is not the key's."""
    text = str(err)
    changed = re.findall(r"Hash mismatch for \\?'([^'\\]+)\\?'", text)
    if changed:
        return f"{', '.join(changed[:5])} differ{'s' if len(changed) == 1 else ''} from the signed sha256"
    for pattern, what in ((r"Extra files found in model '[^']*': (.+?)[\"\]]", "files that were not signed"),
                          (r"Missing files in model '[^']*': (.+?)[\"\]]", "signed files missing")):
        found = re.search(pattern, text)
        if found:
            return f"{what}: {found.group(1)[:200]}"
    if "Key mismatch" in text or type(err).__name__ == "InvalidSignature":
        return "the signature does not verify with this key"
    return " ".join(text.split())[:300] or type(err).__name__


def files_folder(path: str | os.PathLike[str]) -> Path:
    """``--files``: a folder of extracted model files, else one line."""
    root = Path(path)
    if not root.is_dir():
        raise ShipyardError("--files", f"{root} is not a folder", "give the folder the model's files were extracted to")
    return root


def verify_model_files(model_dir: str | os.PathLike[str], envelope: dict[str, Any], public_key: Any) -> dict[str, Any]:
    """Check the files of ``model_dir`` against a stored model signature with ``public_key``, as
    ``model_signing verify key`` does: the signature, then every file's sha256, no file missing or
    extra. Returns ``{"passed", "detail"}``; a key model-signing cannot use or a folder that is not
    there is one line."""
    import model_signing

    root = files_folder(model_dir)
    problem = file_signing_problem(public_key)
    if problem:
        raise ShipyardError("--key", problem, "give the ECDSA public key the package step signed the files with")
    with tempfile.TemporaryDirectory(prefix="shipyard-verify-") as tmp:
        pem = _pem_file(Path(tmp), "public-key.pem", public_key, private=False)
        bundle = Path(tmp) / SIGNATURE_FILE
        bundle.write_text(json.dumps(bundle_of(envelope, public_key)))
        config = model_signing.verifying.Config().use_elliptic_key_verifier(public_key=pem)
        config.set_hashing_config(model_signing.hashing.Config().set_ignored_paths(
            paths=[SIGNATURE_FILE, *_hidden_paths(root)]).set_allow_symlinks(True))
        try:
            config.verify(root, bundle)
        except Exception as err:  # noqa: BLE001 - model-signing raises ValueError, InvalidSignature, ...
            return {"passed": False, "detail": f"{root}: {_mismatch(err)}"}
    return {"passed": True, "detail": f"{root}: the {len(signed_files(envelope))} signed files match, none missing or extra"}
