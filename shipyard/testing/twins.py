"""Forged twins of an attested modelcar in a registry (issue 37): the container rehearsal's proof
that the attestation check refuses what the package step did not attest, and passes what it did.

:func:`push_twins` pushes, beside the attested image and in the same registry, an ``unattested``
twin (its manifest and blobs under another repository: the same digest, no referrers there) and a
``tampered`` one (another image: the manifest with one more annotation, carrying the attested
image's signed envelopes as its referrers). :func:`attestation_refusals` runs verify-model's check
(:func:`shipyard.gates.evidence.verify_evidence`) and the deploy step's
(:func:`shipyard.steps.deploy.check_attestation`) on each with the trusted public key.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from shipyard.core.env import environ_set
from shipyard.core.errors import ShipyardError
from shipyard.oci import attestation as att
from shipyard.oci.layout import MT_MANIFEST, Layout, canonical_json

#: the annotation that makes the tampered twin another image (another manifest digest)
TWIN_ANNOTATION = "io.shipyard.twin"
TWINS = ("unattested", "tampered")


def registry_login(credentials: tuple[str, str] | None) -> contextlib.AbstractContextManager[None]:
    """``SHIPYARD_REGISTRY_USERNAME``/``PASSWORD`` set to ``credentials`` for the block (nothing when None)."""
    names = ("SHIPYARD_REGISTRY_USERNAME", "SHIPYARD_REGISTRY_PASSWORD")
    return environ_set(dict(zip(names, credentials, strict=True)) if credentials else {})


def _image_layout(folder: Path, data: bytes, media: str, blobs: dict[str, Path]) -> dict[str, Any]:
    """A layout in ``folder`` holding the manifest ``data`` and its ``blobs`` (hard links when it can)."""
    layout = Layout(folder).init()
    for digest, path in blobs.items():
        layout.put_file(path, digest, link=True)
    desc = layout.put_bytes(media, data)
    layout.write_index([desc])
    return desc


def push_twins(uri: str, work: Path) -> dict[str, str]:
    """Push the unattested and the tampered twin of the attested image ``uri``
    (``oci://REGISTRY/REPO@sha256:...``) as ``REPO-unattested-twin`` and ``REPO-tampered-twin``
    (tag ``twin``) in its registry, through a layout each in ``work``; returns their digest-pinned uris."""
    from shipyard.oci.client import RegistryClient
    from shipyard.oci.reference import require_pinned
    from shipyard.oci.transfer import push_layout

    ref = require_pinned(uri, "uri")
    if ref.is_layout:
        raise ShipyardError("uri", f"{uri} is an OCI layout, not a registry image", "give the registry uri the package step pushed")
    client = RegistryClient(ref.registry, ref.repository)
    data, media = client.get_manifest(ref.digest)
    media = media or MT_MANIFEST
    manifest = json.loads(data)
    stored, how = att.registry_attestations(ref.registry, ref.repository, ref.digest)
    envelopes = [json.loads(s.envelope) for s in stored if s.envelope and not s.problem]
    if not envelopes:
        raise ShipyardError("uri", f"{uri} carries no attestations to copy ({how})", "give the attested champion's uri")
    (work / "blobs").mkdir(parents=True, exist_ok=True)
    blobs = {}
    for blob in [manifest["config"], *manifest["layers"]]:
        blobs[blob["digest"]] = work / "blobs" / blob["digest"].replace(":", "-")
        if not blobs[blob["digest"]].is_file():
            client.fetch_blob(blob["digest"], blobs[blob["digest"]], blob["size"])
    _image_layout(work / "unattested", data, media, blobs)
    other = canonical_json({**manifest, "annotations": {**(manifest.get("annotations") or {}), TWIN_ANNOTATION: "tampered"}})
    tampered = _image_layout(work / "tampered", other, media, blobs)
    att.attach_to_layout(work / "tampered", tampered["digest"], envelopes)
    out = {name: push_layout(work / name, ref.registry, f"{ref.repository}-{name}-twin", "twin")["uri"] for name in TWINS}
    att.push_attestations(work / "tampered", tampered["digest"], ref.registry, f"{ref.repository}-tampered-twin")
    return out


def attestation_check(uri: str, public_key_file: str) -> dict[str, Any]:
    """verify-model's verdict line and the deploy step's (its one-line refusal, or ``passed``) on ``uri``
    with the public key in ``public_key_file``; ``refused``: both refused it, ``passed``: both passed it."""
    from shipyard.gates.evidence import attestation_options, verify_evidence
    from shipyard.steps.deploy import check_attestation

    out = verify_evidence(uri, att.read_key_file(public_key_file, "public key", private=False))
    verify_line = ("PASSED: " if out["passed"] else "FAILED: ") + f"{out['uri']}: {out['reason']}"
    try:
        deployed = check_attestation(uri, attestation_options({"key": public_key_file}))
        deploy_line, deploy_passed = f"passed: {deployed.get('uri')} verified", bool(deployed.get("passed"))
    except ShipyardError as err:
        deploy_line, deploy_passed = str(err), False
    return {"uri": uri, "refused": not out["passed"] and not deploy_passed, "passed": out["passed"] and deploy_passed,
            "verify_model": verify_line, "deploy": deploy_line}


def attestation_refusals(uri: str, public_key_file: str, work: Path,
                         credentials: tuple[str, str] | None = None) -> dict[str, Any]:
    """The champion ``uri`` and its two twins (:func:`push_twins`) through :func:`attestation_check`,
    logged in to the registry with ``credentials``: ``{"champion": ..., "unattested": ..., "tampered": ...,
    "problems": [...]}``, a problem for each twin not refused and for a champion not passed."""
    with registry_login(credentials):
        twins = push_twins(uri, work)
        out: dict[str, Any] = {"champion": attestation_check(uri, public_key_file)}
        out.update({name: attestation_check(twin, public_key_file) for name, twin in twins.items()})
    problems = [] if out["champion"]["passed"] else [
        f"the attested champion did not pass: {out['champion']['verify_model']} / {out['champion']['deploy']}"]
    problems += [f"the {name} twin was not refused: {out[name]['verify_model']} / {out[name]['deploy']}"
                 for name in TWINS if not out[name]["refused"]]
    out["problems"] = problems
    return out
