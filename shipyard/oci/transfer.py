"""Moving model images: push an OCI layout to a registry, pull a model out of one.

:func:`push_layout` sends blobs first, then the manifest by digest, then the tag, so no tag ever
names partial content; the result is ``oci://REGISTRY/REPO@sha256:<manifest digest>``.
:func:`pull_model` materialises the model of a modelcar (the ``/models`` entries of its layers)
or of an ORAS artifact (one titled blob per file) from a registry or from a layout on disk
(``oci:///PATH@sha256:...``), checking every blob against its digest.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath
from typing import IO, Any

from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_dir, sha256_file
from shipyard.oci.client import RegistryClient
from shipyard.oci.layout import ARTIFACT_TYPE, MODELS_DIR, MT_EMPTY, MT_MANIFEST, TITLE, Layout, check_tag
from shipyard.oci.reference import parse as parse_reference


def push_layout(layout_dir: str | os.PathLike[str], registry: str, repository: str, tag: str, *,
                insecure_tls: bool = False, ref: str | None = None) -> dict[str, Any]:
    """Push the image in an OCI layout to ``registry/repository:tag``.

    Blobs first (skipping those the registry has), then the manifest by digest, then the tag:
    an interrupted push leaves no tag pointing at partial content. Returns the digest-pinned
    ``uri`` (``oci://REGISTRY/REPO@sha256:...``), tag, digest, size, layers and bytes sent.
    """
    check_tag(tag)
    layout = Layout(layout_dir)
    desc = layout.resolve(ref)
    data = layout.blob(desc["digest"]).read_bytes()
    manifest = json.loads(data)
    client = RegistryClient(registry, repository, insecure_tls=insecure_tls)
    sent = 0
    for blob in [*manifest["layers"], manifest["config"]]:
        path = layout.blob(blob["digest"])
        if not path.is_file():
            raise ShipyardError(str(layout.root), f"lacks blob {blob['digest']}", "rebuild the layout")
        if client.push_blob(path, blob["digest"], blob["size"]):
            sent += blob["size"]
    media = manifest.get("mediaType", MT_MANIFEST)
    got = client.put_manifest(desc["digest"], data, media)
    if got and got != desc["digest"]:
        raise ShipyardError(f"registry {client.host}", f"stored the manifest as {got}, expected {desc['digest']}",
                            "the registry rewrote the manifest; use an OCI-compliant registry")
    client.put_manifest(tag, data, media)
    host = client.host
    layers = [{"digest": la["digest"], "size": la["size"], "mediaType": la["mediaType"],
               **({"title": la["annotations"][TITLE]} if TITLE in (la.get("annotations") or {}) else {})}
              for la in manifest["layers"]]
    return {"uri": f"oci://{host}/{repository}@{desc['digest']}", "tag_ref": f"{host}/{repository}:{tag}", "tag": tag,
            "digest": desc["digest"], "size_bytes": len(data) + manifest["config"]["size"] + sum(la["size"] for la in layers),
            "layers": layers, "bytes_sent": sent}


def _safe_target(dest: Path, rel: str, where: str) -> Path:
    parts = PurePosixPath(rel).parts
    if not parts or rel.startswith("/") or ".." in parts:
        raise ShipyardError(where, f"entry {rel!r} escapes the model folder", "use an image built by shipyard")
    return dest.joinpath(*parts)


class _HashingReader(io.RawIOBase):
    def __init__(self, src: IO[bytes]) -> None:
        self.src, self.sha, self.size = src, hashlib.sha256(), 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self.src.readinto(b)  # type: ignore[attr-defined]
        self.sha.update(memoryview(b)[:n])
        self.size += n
        return n


def _extract_models(blob: Path, layer: dict[str, Any], dest: Path, where: str) -> int:
    """Extract the ``models/`` entries of one layer into ``dest``, verifying the layer digest."""
    try:
        count, reader = _extract_stream(blob, layer, dest, where)
    except (tarfile.TarError, zlib.error, EOFError, gzip.BadGzipFile) as err:
        raise ShipyardError(where, f"layer {layer['digest'][:19]} is corrupt ({type(err).__name__})",
                            "rebuild or re-push the image") from None
    if "sha256:" + reader.sha.hexdigest() != layer["digest"]:
        raise ShipyardError(where, f"layer {layer['digest'][:19]} does not match its digest", "rebuild or re-push the image")
    return count


def _extract_stream(blob: Path, layer: dict[str, Any], dest: Path, where: str) -> tuple[int, _HashingReader]:
    count = 0
    with open(blob, "rb") as raw:
        reader = _HashingReader(raw)
        buffered = io.BufferedReader(reader, 1 << 20)
        mode = "r|gz" if layer["mediaType"].endswith("gzip") else "r|"
        with tarfile.open(fileobj=buffered, mode=mode) as tar:  # type: ignore[call-overload]
            for member in tar:
                name = member.name.lstrip("./").lstrip("/")
                if not name.startswith(f"{MODELS_DIR}/") or PurePosixPath(name).name.startswith(".wh."):
                    continue
                rel = name[len(MODELS_DIR) + 1:].rstrip("/")
                if not rel:
                    continue
                target = _safe_target(dest, rel, where)
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                elif member.isfile():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    src = tar.extractfile(member)
                    assert src is not None
                    with open(target, "wb") as out:
                        shutil.copyfileobj(src, out, 1 << 20)
                    count += 1
        while buffered.read(1 << 20):
            pass
    return count, reader


def _materialise(manifest: dict[str, Any], get_blob: Any, dest: Path, where: str) -> dict[str, Any]:
    """Write the model files of a modelcar or ORAS manifest into ``dest``."""
    oras = manifest.get("artifactType") == ARTIFACT_TYPE or manifest["config"]["mediaType"] == MT_EMPTY or all(
        TITLE in (la.get("annotations") or {}) for la in manifest["layers"])
    count = 0
    if oras:
        for layer in manifest["layers"]:
            title = (layer.get("annotations") or {}).get(TITLE)
            if not title:
                continue
            target = _safe_target(dest, title, where)
            target.parent.mkdir(parents=True, exist_ok=True)
            get_blob(layer, target)
            count += 1
    else:
        with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".layers-") as tmp:
            for layer in manifest["layers"]:
                blob = get_blob(layer, Path(tmp) / "layer")
                count += _extract_models(blob, layer, dest, where)
                if blob.parent == Path(tmp):
                    blob.unlink()
    if count == 0:
        raise ShipyardError(where, f"has no model files{'' if oras else ' under /models'}",
                            "point at an image built by shipyard's package step")
    return {"mode": "oras" if oras else "modelcar", "files": count}


def pull_model(uri: str, dest: str | os.PathLike[str], *, insecure_tls: bool = False) -> dict[str, Any]:
    """Materialise the model of an ``oci://`` modelcar or ORAS artifact into ``dest``.

    Registry references use :mod:`shipyard.oci.client` (credentials, TLS, retries);
    ``oci:///PATH@sha256:...`` reads a local layout. Every blob is checked against its digest
    and a digest-pinned reference against the manifest. ``dest`` appears whole or not at all.
    """
    ref = parse_reference(uri, "model_uri")
    registry, repo, reference = ref.registry, ref.repository, ref.reference
    dest = Path(dest)
    if not registry:
        layout = Layout(repo)
        desc = layout.resolve(reference or None)
        data = layout.blob(desc["digest"]).read_bytes()

        def get_blob(layer: dict[str, Any], target: Path) -> Path:
            src = layout.blob(layer["digest"])
            if not src.is_file():
                raise ShipyardError(uri, f"layout lacks blob {layer['digest']}", "rebuild the layout")
            if target.name == "layer":
                return src
            shutil.copyfile(src, target)
            if "sha256:" + sha256_file(target) != layer["digest"]:
                raise ShipyardError(uri, f"blob {layer['digest'][:19]} does not match its digest", "rebuild the layout")
            return target
    else:
        client = RegistryClient(registry, repo, insecure_tls=insecure_tls)
        data, _ = client.get_manifest(reference)

        def get_blob(layer: dict[str, Any], target: Path) -> Path:
            client.fetch_blob(layer["digest"], target, layer.get("size"))
            return target
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    if reference.startswith("sha256:") and digest != reference:
        raise ShipyardError(uri, f"manifest digest is {digest}", "the registry returned other bytes than pinned")
    manifest = json.loads(data)
    if "manifests" in manifest:
        raise ShipyardError(uri, "is an image index, not a model image", "pin the digest of a single manifest")
    with atomic_dir(dest) as tmp:
        info = _materialise(manifest, get_blob, tmp, uri)
    return {"uri": uri, "digest": digest, **info}
