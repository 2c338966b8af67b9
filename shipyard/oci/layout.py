"""OCI image layouts on disk, built without a Docker engine: media types, descriptors, the
``Layout`` folder (``oci-layout``, ``index.json``, ``blobs/sha256``) and reproducible tar layers.

**Reproducible**: tar entries sorted, mtimes 0 (or ``SOURCE_DATE_EPOCH``), uid/gid 0, no user
names, gzip header without name or time, canonical JSON: the same bytes give the same layer,
config and manifest digests. A layout's own reference is ``oci:///ABSOLUTE/PATH@sha256:<manifest
digest>`` (:func:`layout_reference`; empty host = a layout on disk).

What goes into an image is :mod:`shipyard.oci.modelcar`; pushing and pulling is
:mod:`shipyard.oci.transfer`; references are :mod:`shipyard.oci.reference`.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from shipyard.core.env import env_int
from shipyard.core.errors import ShipyardError

MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
MT_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
MT_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MT_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MT_DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
MT_EMPTY = "application/vnd.oci.empty.v1+json"
MT_MODEL_FILE = "application/vnd.shipyard.model.file.v1"
ARTIFACT_TYPE = "application/vnd.shipyard.model.v1"
#: an attestation stored as an OCI 1.1 referrer (:mod:`shipyard.oci.attestation`): the manifest's
#: ``artifactType`` is the in-toto payload type, its one layer a DSSE envelope (cosign's media type)
ATTESTATION_ARTIFACT_TYPE = "application/vnd.in-toto+json"
MT_DSSE = "application/vnd.dsse.envelope.v1+json"
TITLE = "org.opencontainers.image.title"
REF_NAME = "org.opencontainers.image.ref.name"
EMPTY_JSON = b"{}"
MODELS_DIR = "models"


def canonical_json(obj: Any) -> bytes:
    """Deterministic JSON bytes: sorted keys, no spaces."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def descriptor(media_type: str, data: bytes, **extra: Any) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": "sha256:" + hashlib.sha256(data).hexdigest(), "size": len(data), **extra}


def epoch() -> int:
    """Fixed timestamp of every entry and of ``created``: ``SOURCE_DATE_EPOCH`` or 0."""
    return env_int("SOURCE_DATE_EPOCH", 0, minimum=0)


def created_timestamp() -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(epoch(), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_tag(tag: str) -> str:
    """``tag`` when it is a valid OCI tag, else a one-line error."""
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}", tag or ""):
        raise ShipyardError("tag", f"{tag!r} is not a valid OCI tag", "use letters, digits, '.', '_' and '-' (max 128)")
    return tag


def layout_reference(layout_dir: str | os.PathLike[str], digest: str) -> str:
    """The digest-pinned reference of a local layout: ``oci:///ABS/PATH@sha256:...``."""
    return f"oci://{Path(layout_dir).resolve()}@{digest}"


class Layout:
    """An OCI image layout folder (``oci-layout``, ``index.json``, ``blobs/sha256/...``)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def blob(self, digest: str) -> Path:
        algo, _, hexd = digest.partition(":")
        return self.root / "blobs" / algo / hexd

    def init(self) -> Layout:
        (self.root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        (self.root / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))
        if not (self.root / "index.json").exists():
            self.write_index([])
        return self

    def write_index(self, manifests: list[dict[str, Any]]) -> None:
        (self.root / "index.json").write_bytes(canonical_json({"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": manifests}))

    def put_bytes(self, media_type: str, data: bytes, **extra: Any) -> dict[str, Any]:
        desc = descriptor(media_type, data, **extra)
        path = self.blob(desc["digest"])
        if not path.exists():
            path.write_bytes(data)
        return desc

    def put_file(self, src: Path, digest: str, link: bool = False) -> None:
        path = self.blob(digest)
        if path.exists():
            return
        if link:
            try:
                os.link(src, path)
                return
            except OSError:
                pass
        shutil.copyfile(src, path)

    def read_json(self, digest: str) -> dict[str, Any]:
        return json.loads(self.blob(digest).read_bytes())

    def index(self) -> dict[str, Any]:
        path = self.root / "index.json"
        if not path.is_file() or not (self.root / "oci-layout").is_file():
            raise ShipyardError(str(self.root), "is not an OCI image layout (no index.json/oci-layout)",
                                "give a folder written by `skopeo copy ... oci:DIR` or by shipyard")
        return json.loads(path.read_text())

    def resolve(self, ref: str | None = None) -> dict[str, Any]:
        """The manifest descriptor for a tag (``ref.name``), a digest, or the only manifest."""
        manifests = self.index().get("manifests", [])
        if ref and ref.startswith("sha256:"):
            hits = [m for m in manifests if m["digest"] == ref]
            if not hits and self.blob(ref).is_file():
                data = self.blob(ref).read_bytes()
                return descriptor(json.loads(data).get("mediaType", MT_MANIFEST), data)
        elif ref:
            hits = [m for m in manifests if (m.get("annotations") or {}).get(REF_NAME) == ref]
        else:  # the image itself, not the attestations stored beside it (they name it as their subject)
            hits = [m for m in manifests if m.get("artifactType") != ATTESTATION_ARTIFACT_TYPE]
        if len(hits) != 1:
            names = sorted((m.get("annotations") or {}).get(REF_NAME, m["digest"]) for m in manifests)
            raise ShipyardError(str(self.root), f"has {len(hits)} manifests matching {ref or '(any)'}",
                                f"name one of {names}")
        return hits[0]


class _HashingWriter(io.RawIOBase):
    """Pass writes through to ``sink`` while hashing and counting them."""

    def __init__(self, sink: IO[bytes]) -> None:
        self.sink = sink
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, b: bytes) -> int:  # type: ignore[override]
        self.sha.update(b)
        self.size += len(b)
        self.sink.write(b)
        return len(b)


@dataclass
class Entry:
    """One tar entry: ``kind`` is ``dir``, ``file`` (from ``source``), ``data`` or ``symlink``."""

    name: str
    kind: str
    mode: int
    source: Path | None = None
    data: bytes = b""
    target: str = ""
    uid: int = 0
    gid: int = 0


@dataclass
class LayerInfo:
    descriptor: dict[str, Any]
    diff_id: str


def write_layer(entries: list[Entry], layout: Layout, compression: str = "gzip", level: int = 1) -> LayerInfo:
    """Write a reproducible tar layer into ``layout``; entries are sorted by name here."""
    if compression not in ("gzip", "none"):
        raise ShipyardError("compression", f"unknown compression {compression!r}", "use gzip or none")
    mtime = epoch()
    fd, tmp_name = tempfile.mkstemp(dir=layout.root / "blobs" / "sha256", prefix=".layer-")
    try:
        with os.fdopen(fd, "wb") as raw:
            outer = _HashingWriter(raw)
            gz = gzip.GzipFile(filename="", mode="wb", fileobj=outer, mtime=0, compresslevel=level) \
                if compression == "gzip" else None
            inner = _HashingWriter(gz if gz is not None else outer)  # type: ignore[arg-type]
            with tarfile.open(fileobj=inner, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
                for e in sorted(entries, key=lambda e: e.name):
                    info = tarfile.TarInfo(e.name)
                    info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = e.mode, mtime, e.uid, e.gid, "", ""
                    if e.kind == "dir":
                        info.type = tarfile.DIRTYPE
                        tar.addfile(info)
                    elif e.kind == "symlink":
                        info.type, info.linkname = tarfile.SYMTYPE, e.target
                        tar.addfile(info)
                    elif e.kind == "data":
                        info.size = len(e.data)
                        tar.addfile(info, io.BytesIO(e.data))
                    else:
                        assert e.source is not None
                        with open(e.source, "rb") as fh:
                            info.size = os.fstat(fh.fileno()).st_size
                            tar.addfile(info, fh)
            if gz is not None:
                gz.close()
        digest = "sha256:" + outer.sha.hexdigest()
        os.replace(tmp_name, layout.blob(digest))
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    media = MT_LAYER_GZIP if compression == "gzip" else MT_LAYER_TAR
    return LayerInfo({"mediaType": media, "digest": digest, "size": outer.size}, "sha256:" + inner.sha.hexdigest())
