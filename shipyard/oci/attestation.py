"""Signed attestations stored with an OCI image: in-toto Statements in DSSE envelopes, kept as OCI 1.1
referrers of the image's manifest.

**Statement** (in-toto Statement v1): ``{"_type": "https://in-toto.io/Statement/v1", "subject":
[{"name", "digest": {"sha256"}}], "predicateType", "predicate"}``; the subject is the image's manifest
digest, so the statement holds for exactly that image.

**Envelope** (DSSE v1): ``{"payloadType": "application/vnd.in-toto+json", "payload": base64(statement),
"signatures": [{"keyid", "sig"}]}``; the signature is over DSSE's pre-authentication encoding
(:func:`pae`), never over the JSON as re-serialised. Keys are PEM: Ed25519 by default (ECDSA P-256 and
P-384 are read too); ``keyid`` is the sha256 of the public key's DER SubjectPublicKeyInfo.

**Storage** (OCI 1.1 referrers): one manifest per envelope, ``artifactType``
``application/vnd.in-toto+json``, the OCI empty config, one layer (the envelope,
``application/vnd.dsse.envelope.v1+json``, cosign's DSSE media type), the annotation
``in-toto.io/predicate-type`` (buildkit's name) and ``subject`` = the image's manifest descriptor.

* In an OCI image layout each referrer manifest is listed in ``index.json`` (with its
  ``artifactType``; :meth:`shipyard.oci.layout.Layout.resolve` skips them when asked for "the" image).
* In a registry the manifest is pushed by digest. A registry with the referrers API answers the push
  with an ``OCI-Subject`` header and lists it under ``/v2/<repo>/referrers/<digest>``; one without
  (distribution 2.x, Debian's ``docker-registry``) gets the OCI 1.1 **referrers tag schema**: the
  tag ``sha256-<hex>`` holds an image index of the referrers, updated on each push. This is the
  distribution spec's fallback, which ``oras discover`` and regclient read.
* In a registry the same envelopes are also stored the way cosign stores attestations, which is
  what ``cosign verify-attestation --key`` and sigstore policy-controller read by default: the tag
  ``sha256-<hex>.att`` holds one image manifest whose layers are the envelopes (media type
  ``application/vnd.dsse.envelope.v1+json``, annotations ``dev.cosignproject.cosign/signature: ""``
  and ``predicateType``), its config an image config listing them as ``rootfs.diff_ids``
  (:func:`cosign_manifest`). Same blobs, a second index of them.

Where the keys come from (a Kubernetes Secret in the cluster, a file locally):
:func:`signing_key`, :func:`trust_key` and :mod:`shipyard.core.contract`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import tempfile
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.core import contract
from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_write_text
from shipyard.oci.client import RegistryClient
from shipyard.oci.layout import (
    ATTESTATION_ARTIFACT_TYPE,
    EMPTY_JSON,
    MT_CONFIG,
    MT_DSSE,
    MT_EMPTY,
    MT_INDEX,
    MT_MANIFEST,
    Layout,
    canonical_json,
    descriptor,
)
from shipyard.oci.reference import DIGEST_RE, require_pinned

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATE_ANNOTATION = "in-toto.io/predicate-type"
#: the registry's answer to a manifest push when it indexed the subject (OCI distribution 1.1)
SUBJECT_HEADER = "OCI-Subject"
#: the most bytes an envelope or a referrers listing may have (a statement is a few KiB)
MAX_ENVELOPE_BYTES = 4 << 20
KEY_FIX = ("give a PEM key: openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out signing-key.pem; "
           "openssl pkey -in signing-key.pem -pubout -out public-key.pem")


# ---------------------------------------------------------------------------------------- keys


def _crypto() -> Any:
    from cryptography.hazmat.primitives import serialization

    return serialization


def load_private_key(pem: bytes, field: str) -> Any:
    """A PEM private key (Ed25519, ECDSA P-256/P-384), unencrypted; one line naming ``field`` otherwise."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    try:
        key = _crypto().load_pem_private_key(pem, password=None)
    except TypeError:
        raise ShipyardError(field, "is an encrypted private key", "give the key unencrypted (a Secret keeps it)") from None
    except (ValueError, UnsupportedAlgorithm) as err:
        raise ShipyardError(field, f"is not a PEM private key ({type(err).__name__})", KEY_FIX) from None
    if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name not in ("secp256r1", "secp384r1"):
        raise ShipyardError(field, f"is an ECDSA key on {key.curve.name}", "use Ed25519 or ECDSA P-256")
    if not isinstance(key, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey):
        raise ShipyardError(field, f"is a {type(key).__name__.removeprefix('_')} key", "use Ed25519 (or ECDSA P-256)")
    return key


def load_public_key(pem: bytes, field: str) -> Any:
    """A PEM public key (Ed25519, ECDSA P-256/P-384); a PEM private key gives its public half."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    if b"PRIVATE KEY" in pem:
        return load_private_key(pem, field).public_key()
    try:
        key = _crypto().load_pem_public_key(pem)
    except (ValueError, UnsupportedAlgorithm) as err:
        raise ShipyardError(field, f"is not a PEM public key ({type(err).__name__})", KEY_FIX) from None
    if not isinstance(key, ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey):
        raise ShipyardError(field, f"is a {type(key).__name__.removeprefix('_')} key", "use Ed25519 (or ECDSA P-256)")
    return key


def read_key_file(path: str | os.PathLike[str], field: str, private: bool) -> Any:
    """The key in a PEM file (private for signing, public for verifying), one line when it cannot be read."""
    file = Path(path)
    if not file.is_file():
        raise ShipyardError(field, f"{path} is not a file", KEY_FIX)
    if file.stat().st_size > 64 << 10:
        raise ShipyardError(field, f"{path} is {file.stat().st_size} bytes, too large for a PEM key", KEY_FIX)
    try:
        pem = file.read_bytes()
    except OSError as err:
        raise ShipyardError(field, f"cannot read {path} ({err.strerror})", "give a readable PEM file") from None
    return load_private_key(pem, field) if private else load_public_key(pem, field)


def public_der(public_key: Any) -> bytes:
    s = _crypto()
    return public_key.public_bytes(s.Encoding.DER, s.PublicFormat.SubjectPublicKeyInfo)


def public_pem(public_key: Any) -> str:
    s = _crypto()
    return public_key.public_bytes(s.Encoding.PEM, s.PublicFormat.SubjectPublicKeyInfo).decode()


def keyid(public_key: Any) -> str:
    """The key's id in an envelope: sha256 (hex) of its DER SubjectPublicKeyInfo."""
    return hashlib.sha256(public_der(public_key)).hexdigest()


def _env_key(text_var: str, file_var: str, field: str, private: bool, env: Mapping[str, str]) -> Any | None:
    text = env.get(text_var, "").strip()
    if text:
        pem = text.encode()
        return load_private_key(pem, field) if private else load_public_key(pem, field)
    path = env.get(file_var, "").strip()
    if path:
        return read_key_file(path, file_var, private)
    return None


def signing_key(key_file: str = "", env: Mapping[str, str] | None = None) -> Any:
    """The private key the attestations are signed with: ``key_file`` (a PEM path) when given, else
    ``SHIPYARD_ATTESTATION_KEY`` (the PEM text, from the Secret ``shipyard-attestation`` in the
    cluster), else ``SHIPYARD_ATTESTATION_KEY_FILE``; none is one line naming the Secret and key."""
    env = os.environ if env is None else env
    if key_file:
        return read_key_file(key_file, "attestation key", private=True)
    key = _env_key(contract.ENV_ATTESTATION_KEY, contract.ENV_ATTESTATION_KEY_FILE, contract.ENV_ATTESTATION_KEY,
                   True, env)
    if key is None:
        raise contract.missing(contract.ENV_ATTESTATION_KEY, "the modelcar's attestations are signed with it "
                               f"(Secret {contract.ATTESTATION_SECRET}, key signing-key.pem; locally "
                               f"{contract.ENV_ATTESTATION_KEY_FILE}=PATH)", env)
    return key


def trust_key(key_file: str = "", env: Mapping[str, str] | None = None, field: str = "attestation public key") -> Any | None:
    """The public key attestations must verify with: ``key_file`` when given, else
    ``SHIPYARD_ATTESTATION_PUBLIC_KEY`` (PEM text, the Secret ``shipyard-attestation-trust``'s
    ``public-key.pem``), else
    ``SHIPYARD_ATTESTATION_PUBLIC_KEY_FILE``; None when none is configured."""
    env = os.environ if env is None else env
    if key_file:
        return read_key_file(key_file, field, private=False)
    return _env_key(contract.ENV_ATTESTATION_PUBLIC_KEY, contract.ENV_ATTESTATION_PUBLIC_KEY_FILE,
                    contract.ENV_ATTESTATION_PUBLIC_KEY, False, env)


def generate_key_pair(folder: str | os.PathLike[str]) -> tuple[Path, Path]:
    """A new ECDSA P-256 key pair (cosign's default, and a key model-signing signs the model files with)
    as ``folder/signing-key.pem`` (mode 0600) and ``folder/public-key.pem`` (the names of the Secret's
    keys), for a local run or a first setup; existing files are kept."""
    from cryptography.hazmat.primitives.asymmetric import ec

    s = _crypto()
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    private, public = root / "signing-key.pem", root / "public-key.pem"
    if private.is_file() and public.is_file():
        return private, public
    key = ec.generate_private_key(ec.SECP256R1())
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.private_bytes(s.Encoding.PEM, s.PrivateFormat.PKCS8, s.NoEncryption()))
    public.write_text(public_pem(key.public_key()))
    return private, public


def local_keys_env(folder: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> dict[str, str]:
    """For a local run (``shipyard run --local``, the container rehearsal): when no signing key is
    configured (none of the ``SHIPYARD_ATTESTATION_*`` variables), a key pair in ``folder``
    (:func:`generate_key_pair`, kept across runs) and the two variables that name it; ``{}`` when
    the user configured keys (theirs are used)."""
    env = os.environ if env is None else env
    names = (contract.ENV_ATTESTATION_KEY, contract.ENV_ATTESTATION_KEY_FILE, contract.ENV_ATTESTATION_PUBLIC_KEY,
             contract.ENV_ATTESTATION_PUBLIC_KEY_FILE)
    if any(env.get(name, "").strip() for name in names):
        return {}
    private, public = generate_key_pair(folder)
    return {contract.ENV_ATTESTATION_KEY_FILE: str(private.resolve()),
            contract.ENV_ATTESTATION_PUBLIC_KEY_FILE: str(public.resolve())}


def _sign(key: Any, data: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    if isinstance(key, ec.EllipticCurvePrivateKey):
        return key.sign(data, ec.ECDSA(hashes.SHA384() if key.curve.name == "secp384r1" else hashes.SHA256()))
    return key.sign(data)


def _verifies(public_key: Any, sig: bytes, data: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        if isinstance(public_key, ec.EllipticCurvePublicKey):
            algo = hashes.SHA384() if public_key.curve.name == "secp384r1" else hashes.SHA256()
            public_key.verify(sig, data, ec.ECDSA(algo))
        else:
            public_key.verify(sig, data)
    except (InvalidSignature, ValueError):
        return False
    return True


# ------------------------------------------------------------------------- statements, DSSE


def statement(subject_name: str, digest: str, predicate_type: str, predicate: dict[str, Any]) -> dict[str, Any]:
    """An in-toto Statement v1 about the image ``digest`` (``sha256:<hex>``)."""
    if not DIGEST_RE.match(digest or ""):
        raise ShipyardError("digest", f"{digest!r} is not a sha256 digest", "give the manifest digest sha256:<64 hex>")
    return {"_type": STATEMENT_TYPE,
            "subject": [{"name": subject_name, "digest": {"sha256": digest.removeprefix("sha256:")}}],
            "predicateType": predicate_type, "predicate": predicate}


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: ``DSSEv1 SP len(type) SP type SP len(body) SP body``."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def sign_statement(stmt: dict[str, Any], key: Any) -> dict[str, Any]:
    """The DSSE envelope of ``stmt`` signed with the private ``key``."""
    payload = canonical_json(stmt)
    sig = _sign(key, pae(PAYLOAD_TYPE, payload))
    return {"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(payload).decode(),
            "signatures": [{"keyid": keyid(key.public_key()), "sig": base64.b64encode(sig).decode()}]}


def envelope_bytes(envelope: dict[str, Any]) -> bytes:
    """The bytes an envelope is stored as (canonical JSON): its digest is what the VSA names."""
    return canonical_json(envelope)


def envelope_digest(envelope: dict[str, Any]) -> str:
    """``sha256:<hex>`` of :func:`envelope_bytes`: how the verification summary names an envelope."""
    return "sha256:" + hashlib.sha256(envelope_bytes(envelope)).hexdigest()


def predicate_type_of(envelope: dict[str, Any]) -> str:
    """The predicate type of the statement an envelope carries; one line when it carries none."""
    return parse_statement(_b64(envelope.get("payload"), "envelope", "payload"), "envelope")["predicateType"]


def _b64(text: Any, where: str, what: str) -> bytes:
    if not isinstance(text, str):
        raise ShipyardError(where, f"is not a DSSE envelope ({what} is not a base64 string)", "re-attest the image")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        pass
    if re.fullmatch(r"[A-Za-z0-9_-]+={0,2}", text):  # DSSE allows URL-safe base64 too
        try:
            return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError):
            pass
    raise ShipyardError(where, f"is not a DSSE envelope ({what} is not base64)", "re-attest the image")


def parse_envelope(data: bytes, where: str) -> tuple[dict[str, Any], bytes]:
    """The envelope and its decoded payload; one line naming ``where`` when it is not a DSSE envelope
    of an in-toto statement."""
    try:
        env = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise ShipyardError(where, "is not a DSSE envelope (not JSON)", "re-attest the image") from None
    if not isinstance(env, dict) or not isinstance(env.get("signatures"), list) or "payload" not in env:
        raise ShipyardError(where, "is not a DSSE envelope (no payload or signatures)", "re-attest the image")
    if env.get("payloadType") != PAYLOAD_TYPE:
        raise ShipyardError(where, f"has payloadType {str(env.get('payloadType'))[:80]!r}, not {PAYLOAD_TYPE}",
                            "attest with an in-toto statement")
    return env, _b64(env["payload"], where, "payload")


def signed_by(env: dict[str, Any], payload: bytes, public_key: Any) -> bool:
    """True when one of the envelope's signatures verifies with ``public_key`` over DSSE's PAE."""
    data = pae(str(env.get("payloadType")), payload)
    want = keyid(public_key)
    for entry in env.get("signatures") or []:
        if not isinstance(entry, dict) or (entry.get("keyid") and entry.get("keyid") != want):
            continue
        try:
            sig = _b64(entry.get("sig"), "signature", "sig")
        except ShipyardError:
            continue
        if _verifies(public_key, sig, data):
            return True
    return False


def parse_statement(payload: bytes, where: str) -> dict[str, Any]:
    """The in-toto Statement v1 in a payload; one line when it is not one."""
    try:
        stmt = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        raise ShipyardError(where, "holds no in-toto statement (payload is not JSON)", "re-attest the image") from None
    if not isinstance(stmt, dict) or stmt.get("_type") != STATEMENT_TYPE:
        raise ShipyardError(where, f"holds no in-toto statement (_type is not {STATEMENT_TYPE})", "re-attest the image")
    subjects = stmt.get("subject")
    if not isinstance(subjects, list) or not subjects or not all(
            isinstance(s, dict) and isinstance(s.get("digest"), dict) for s in subjects):
        raise ShipyardError(where, "holds a statement without subjects", "re-attest the image")
    if not isinstance(stmt.get("predicateType"), str) or not isinstance(stmt.get("predicate"), dict):
        raise ShipyardError(where, "holds a statement without predicateType/predicate", "re-attest the image")
    return stmt


def subject_digests(stmt: dict[str, Any]) -> list[str]:
    """The ``sha256:<hex>`` digests a statement is about."""
    return [f"sha256:{s['digest']['sha256']}" for s in stmt.get("subject") or []
            if isinstance(s, dict) and isinstance(s.get("digest"), dict) and isinstance(s["digest"].get("sha256"), str)]


# ------------------------------------------------------------------------------ OCI storage


def fallback_tag(digest: str) -> str:
    """The OCI 1.1 referrers tag schema's tag for ``digest``: ``sha256-<hex>``."""
    algo, _, hexd = digest.partition(":")
    return f"{algo}-{hexd}"


#: cosign's attestation storage: the tag suffix and the layer annotations it writes and reads
COSIGN_TAG_SUFFIX = ".att"
COSIGN_SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
COSIGN_PREDICATE_ANNOTATION = "predicateType"


def cosign_tag(digest: str) -> str:
    """cosign's attestation tag for the image ``digest``: ``sha256-<hex>.att``."""
    return fallback_tag(digest) + COSIGN_TAG_SUFFIX


def cosign_manifest(layers: list[dict[str, Any]]) -> tuple[bytes, bytes]:
    """cosign's attestation image over ``layers`` (DSSE envelope descriptors, each annotated with the
    predicate type): its config (an image config whose ``rootfs.diff_ids`` are the envelopes, the
    history one empty entry per layer, as go-containerregistry writes an image appended to an
    empty one) and its manifest."""
    zero = "0001-01-01T00:00:00Z"
    config = canonical_json({"architecture": "", "created": zero, "history": [{"created": zero} for _ in layers],
                             "os": "", "rootfs": {"type": "layers", "diff_ids": [la["digest"] for la in layers]},
                             "config": {}})
    manifest = canonical_json({"schemaVersion": 2, "mediaType": MT_MANIFEST,
                               "config": descriptor(MT_CONFIG, config), "layers": layers})
    return config, manifest


def _cosign_layer(envelope_desc: dict[str, Any], predicate_type: str) -> dict[str, Any]:
    return {"mediaType": MT_DSSE, "digest": envelope_desc["digest"], "size": envelope_desc["size"],
            "annotations": {COSIGN_SIGNATURE_ANNOTATION: "", COSIGN_PREDICATE_ANNOTATION: predicate_type}}


def referrer_manifest(envelope: bytes, subject: dict[str, Any], predicate_type: str) -> bytes:
    """The OCI 1.1 artifact manifest that stores ``envelope`` as a referrer of ``subject``."""
    return canonical_json({
        "schemaVersion": 2, "mediaType": MT_MANIFEST, "artifactType": ATTESTATION_ARTIFACT_TYPE,
        "config": descriptor(MT_EMPTY, EMPTY_JSON),
        "layers": [descriptor(MT_DSSE, envelope)],
        "subject": {k: subject[k] for k in ("mediaType", "digest", "size")},
        "annotations": {PREDICATE_ANNOTATION: predicate_type},
    })


def _index_descriptor(manifest: bytes) -> dict[str, Any]:
    doc = json.loads(manifest)
    return descriptor(MT_MANIFEST, manifest, artifactType=doc["artifactType"], annotations=doc["annotations"])


def attach_to_layout(layout_dir: str | os.PathLike[str], subject_digest: str,
                     envelopes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Store each envelope in the layout as a referrer of the image ``subject_digest``; returns the
    referrer manifests' descriptors (``digest``, ``artifactType``, ``annotations``). Adding the same
    envelope twice stores it once."""
    layout = Layout(layout_dir)
    subject = layout.resolve(subject_digest)
    index = layout.index()
    listed = {m["digest"] for m in index.get("manifests", [])}
    added = []
    for env in envelopes:
        predicate_type = predicate_type_of(env)
        data = envelope_bytes(env)
        layout.put_bytes(MT_EMPTY, EMPTY_JSON)
        layout.put_bytes(MT_DSSE, data)
        manifest = referrer_manifest(data, subject, predicate_type)
        layout.put_bytes(MT_MANIFEST, manifest)
        desc = _index_descriptor(manifest)
        if desc["digest"] not in listed:
            index["manifests"].append(desc)
            listed.add(desc["digest"])
        added.append(desc)
    atomic_write_text(layout.root / "index.json", canonical_json(index).decode())
    return added


@dataclass
class Stored:
    """One referrer as found: its manifest's digest, the predicate type its annotation names and the
    envelope's bytes (checked against the layer digest); ``problem`` when it could not be read."""

    manifest_digest: str
    predicate_type: str
    envelope: bytes = b""
    envelope_digest: str = ""
    problem: str = ""


def _read_referrer(manifest: bytes, get_blob: Any, where: str) -> Stored:
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    try:
        doc = json.loads(manifest)
        layer = next(la for la in doc.get("layers") or [] if la.get("mediaType") == MT_DSSE)
    except (ValueError, StopIteration, AttributeError, TypeError):
        return Stored(digest, "", problem=f"{where} {digest[:19]} has no DSSE envelope layer")
    ptype = str((doc.get("annotations") or {}).get(PREDICATE_ANNOTATION, ""))
    if int(layer.get("size") or 0) > MAX_ENVELOPE_BYTES:
        return Stored(digest, ptype, problem=f"{where} {digest[:19]}: the envelope is {layer.get('size')} bytes")
    data = get_blob(layer["digest"])
    if "sha256:" + hashlib.sha256(data).hexdigest() != layer["digest"]:
        return Stored(digest, ptype, problem=f"{where} {digest[:19]}: the envelope does not match its digest")
    return Stored(digest, ptype, data, layer["digest"])


def layout_attestations(layout_dir: str | os.PathLike[str], subject_digest: str) -> list[Stored]:
    """The referrers of ``subject_digest`` stored in an OCI layout (index.json entries whose manifest
    names it as ``subject``) that carry attestations."""
    layout = Layout(layout_dir)
    found = []
    for desc in layout.index().get("manifests", []):
        if desc.get("artifactType") != ATTESTATION_ARTIFACT_TYPE or not layout.blob(desc["digest"]).is_file():
            continue
        data = layout.blob(desc["digest"]).read_bytes()
        try:
            subject = (json.loads(data).get("subject") or {}).get("digest")
        except (ValueError, AttributeError):
            continue
        if subject == subject_digest:
            found.append(_read_referrer(data, lambda d: layout.blob(d).read_bytes() if layout.blob(d).is_file() else b"",
                                        f"layout {layout.root}"))
    return found


def _client(registry: str, repository: str, insecure_tls: bool) -> Any:
    return RegistryClient(registry, repository, insecure_tls=insecure_tls)


def _get_index(client: Any, path: str, what: str) -> dict[str, Any] | None:
    """An image index at ``path`` (``referrers/<digest>`` or ``manifests/<tag>``), None on 404."""
    resp = client.request("GET", path, what=what, ok=(200, 404), headers={"Accept": MT_INDEX})
    if resp.status_code == 404:
        return None
    if len(resp.content) > MAX_ENVELOPE_BYTES:
        raise ShipyardError(f"registry {client.host}", f"{what}: {len(resp.content)} bytes, too large", "check the registry")
    try:
        doc = json.loads(resp.content)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("manifests"), list) else None


def push_attestations(layout_dir: str | os.PathLike[str], subject_digest: str, registry: str, repository: str, *,
                      insecure_tls: bool = False) -> dict[str, Any]:
    """Push the layout's referrers of ``subject_digest`` to ``registry/repository`` (the image must be
    there already). Each referrer manifest goes by digest; when the registry does not answer with
    ``OCI-Subject`` (no referrers API), the tag ``sha256-<hex>`` gets an image index listing them.
    The envelopes also go under cosign's tag ``sha256-<hex>.att`` (:func:`cosign_manifest`; layers
    already there are kept). Returns ``{"referrers": [digest...], "referrers_api": bool,
    "fallback_tag": tag or "", "cosign_tag": tag or ""}``."""
    layout = Layout(layout_dir)
    client = _client(registry, repository, insecure_tls)
    pushed, api, layers = [], True, []
    for desc in layout.index().get("manifests", []):
        if desc.get("artifactType") != ATTESTATION_ARTIFACT_TYPE:
            continue
        data = layout.blob(desc["digest"]).read_bytes()
        doc = json.loads(data)
        if (doc.get("subject") or {}).get("digest") != subject_digest:
            continue
        for blob in [doc["config"], *doc["layers"]]:
            client.push_blob(layout.blob(blob["digest"]), blob["digest"], blob["size"])
        resp = client.request("PUT", f"manifests/{desc['digest']}", what=f"put attestation {desc['digest'][:19]}",
                              ok=(201, 200), body=lambda data=data: data, headers={"Content-Type": MT_MANIFEST})
        api = api and bool(resp.headers.get(SUBJECT_HEADER))
        pushed.append(_index_descriptor(data))
        layers.append(_cosign_layer(doc["layers"][0], str((doc.get("annotations") or {}).get(PREDICATE_ANNOTATION, ""))))
    tag = ""
    if pushed and not api:
        tag = fallback_tag(subject_digest)
        index = _get_index(client, f"manifests/{tag}", f"get referrers tag {tag}") or \
            {"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": []}
        have = {m.get("digest") for m in index["manifests"]}
        index["manifests"] += [d for d in pushed if d["digest"] not in have]
        client.put_manifest(tag, canonical_json(index), MT_INDEX)
    att_tag = _push_cosign_tag(client, subject_digest, layers) if layers else ""
    return {"referrers": [d["digest"] for d in pushed], "referrers_api": api and bool(pushed), "fallback_tag": tag,
            "cosign_tag": att_tag}


def _push_cosign_tag(client: Any, subject_digest: str, layers: list[dict[str, Any]]) -> str:
    """Put ``layers`` (and the ones the tag already holds) under cosign's ``sha256-<hex>.att``."""
    tag = cosign_tag(subject_digest)
    resp = client.request("GET", f"manifests/{tag}", what=f"get cosign tag {tag}", ok=(200, 404),
                          headers={"Accept": MT_MANIFEST})
    kept: list[dict[str, Any]] = []
    if resp.status_code == 200 and len(resp.content) <= MAX_ENVELOPE_BYTES:
        try:
            kept = [la for la in json.loads(resp.content).get("layers") or [] if isinstance(la, dict)]
        except (ValueError, AttributeError):
            kept = []
    have = {la.get("digest") for la in kept}
    config, manifest = cosign_manifest(kept + [la for la in layers if la["digest"] not in have])
    desc = descriptor(MT_CONFIG, config)
    with tempfile.TemporaryDirectory(prefix="shipyard-cosign-") as tmp:
        (Path(tmp) / "config.json").write_bytes(config)
        client.push_blob(Path(tmp) / "config.json", desc["digest"], desc["size"])
    client.put_manifest(tag, manifest, MT_MANIFEST)
    return tag


def registry_attestations(registry: str, repository: str, subject_digest: str, *,
                          insecure_tls: bool = False) -> tuple[list[Stored], str]:
    """The attestation referrers of ``subject_digest`` in a registry and how they were found: the
    referrers API (``/v2/<repo>/referrers/<digest>``), else the tag ``sha256-<hex>``; ``how`` says
    which, or that neither exists."""
    client = _client(registry, repository, insecure_tls)
    query = urllib.parse.quote(ATTESTATION_ARTIFACT_TYPE, safe="")
    index = _get_index(client, f"referrers/{subject_digest}?artifactType={query}",
                       "list referrers")
    how = "the referrers API"
    if index is None or not index["manifests"]:
        tag = fallback_tag(subject_digest)
        fallback = _get_index(client, f"manifests/{tag}", f"get referrers tag {tag}")
        if fallback is not None:
            index, how = fallback, f"the referrers tag {tag}"
        elif index is None:
            return [], f"no referrers API and no referrers tag {tag}"
    found = []
    for desc in index["manifests"] if index else []:
        if desc.get("artifactType") not in (ATTESTATION_ARTIFACT_TYPE, None):
            continue
        data, _ = client.get_manifest(desc["digest"])
        if "sha256:" + hashlib.sha256(data).hexdigest() != desc["digest"]:
            found.append(Stored(desc["digest"], "", problem=f"registry {client.host}: referrer {desc['digest'][:19]} "
                                                             "does not match its digest"))
            continue
        try:
            subject = (json.loads(data).get("subject") or {}).get("digest")
        except (ValueError, AttributeError):
            subject = None
        if subject != subject_digest:  # a tag index can list anything: only referrers of this image count
            continue

        def blob(digest: str) -> bytes:
            resp = client.request("GET", f"blobs/{digest}", what=f"fetch envelope {digest[:19]}")
            return resp.content[:MAX_ENVELOPE_BYTES + 1]

        found.append(_read_referrer(data, blob, f"registry {client.host}"))
    return found, how


def find_attestations(uri: str, *, field: str = "uri", insecure_tls: bool = False) -> dict[str, Any]:
    """The image an ``oci://`` reference names and the attestations stored with it.

    ``oci://REGISTRY/REPO@sha256:...`` (a tag is refused: it can name other weights tomorrow) or an
    OCI layout on disk, ``oci:///ABS/PATH[@sha256:...]`` as the package step writes it. Returns
    ``{"uri", "digest", "where", "found_via", "stored": [Stored, ...]}``; the image's own manifest
    is fetched and its digest checked first (a missing image is one line naming ``field``).
    """
    ref = require_pinned(uri, field)
    if ref.is_layout:
        layout = Layout(ref.repository)
        subject = layout.resolve(ref.digest or None)
        data = layout.blob(subject["digest"]).read_bytes()
        if "sha256:" + hashlib.sha256(data).hexdigest() != subject["digest"]:
            raise ShipyardError(field, f"the layout's manifest {subject['digest'][:19]} does not match its digest",
                                "rebuild the layout")
        stored = layout_attestations(layout.root, subject["digest"])
        return {"uri": str(ref), "digest": subject["digest"], "where": f"OCI layout {layout.root}",
                "found_via": "the layout's index.json" if stored else "no referrers in the layout's index.json",
                "stored": stored}
    client = _client(ref.registry, ref.repository, insecure_tls)
    data, _ = client.get_manifest(ref.digest)
    if "sha256:" + hashlib.sha256(data).hexdigest() != ref.digest:
        raise ShipyardError(field, f"the registry returned another manifest than {ref.digest[:19]}",
                            "check the registry; the pinned digest is what is verified")
    stored, how = registry_attestations(ref.registry, ref.repository, ref.digest, insecure_tls=insecure_tls)
    return {"uri": str(ref), "digest": ref.digest, "where": f"registry {client.host}/{ref.repository}",
            "found_via": how, "stored": stored}
