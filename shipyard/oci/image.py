"""Models as OCI images ("modelcars") and ORAS artifacts, built without a Docker engine.

**Modelcar** (KServe ``oci://`` model URIs): the base image's layers plus one layer holding
the model files under ``/models``; the image runs as a non-root user (``1001``) and carries
OCI annotations/labels (source model, recipe, eval and benchmark summaries, shipyard version,
pipeline run). The base needs ``sh``, ``ln`` and ``sleep``: KServe's modelcar sidecar runs
``ln -sf /proc/$$/root/models ...`` and sleeps. ``base_image`` is one of

* ``""`` / ``"builtin:busybox"``: a one-layer base built here from a static busybox binary
  (``SHIPYARD_BUSYBOX``, default ``/usr/bin/busybox`` from Debian's ``busybox-static``);
* an OCI image layout folder, ``PATH`` or ``oci:PATH[:TAG]``;
* a registry reference, ``[docker://]registry/repo[:tag|@sha256:...]`` (pulled here).

**ORAS artifact**: one blob per model file, titled with its path relative to the model folder
(``org.opencontainers.image.title``), so ``oras pull`` / :func:`pull_model` rebuild the tree.

**Reproducible**: tar entries sorted, mtimes 0 (or ``SOURCE_DATE_EPOCH``), uid/gid 0, no user
names, gzip header without name or time, canonical JSON: the same model bytes give the same
layer, config and manifest digests. Everything is first written as an OCI image layout on disk
(``index.json``, ``oci-layout``, ``blobs/sha256``), which :func:`push_layout` pushes: blobs
first, then the manifest by digest, then the tag, so no tag ever names partial content.

**References**: a pushed image is ``oci://REGISTRY/REPO@sha256:<manifest digest>``. Without a
registry the layout on disk is the result and its reference is
``oci:///ABSOLUTE/LAYOUT/PATH@sha256:<manifest digest>`` (empty host = local layout), which
:func:`pull_model` also reads.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import struct
import tarfile
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from shipyard import __version__
from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_dir, sha256_file

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
TITLE = "org.opencontainers.image.title"
REF_NAME = "org.opencontainers.image.ref.name"
EMPTY_JSON = b"{}"
MODELS_DIR = "models"
DEFAULT_USER = "1001"
BUSYBOX_APPLETS = ("sh", "ln", "sleep", "ls", "cat", "mkdir", "rm", "readlink", "true", "env")
SHIPYARD_KEYS = {
    "source_model": "io.shipyard.model.source",
    "recipe": "io.shipyard.model.recipe",
    "eval": "io.shipyard.eval.summary",
    "benchmark": "io.shipyard.benchmark.summary",
    "pipeline_run": "io.shipyard.pipeline.run",
}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model", "vocab.txt")


def canonical_json(obj: Any) -> bytes:
    """Deterministic JSON bytes: sorted keys, no spaces."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def descriptor(media_type: str, data: bytes, **extra: Any) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": "sha256:" + hashlib.sha256(data).hexdigest(), "size": len(data), **extra}


def epoch() -> int:
    """Fixed timestamp of every entry and of ``created``: ``SOURCE_DATE_EPOCH`` or 0."""
    try:
        return int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    except ValueError:
        raise ShipyardError("SOURCE_DATE_EPOCH", "is not an integer", "unset it or give seconds since 1970") from None


def created_timestamp() -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(epoch(), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- OCI image layout -------------------------------------------------------------------------
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
        else:
            hits = manifests
        if len(hits) != 1:
            names = sorted((m.get("annotations") or {}).get(REF_NAME, m["digest"]) for m in manifests)
            raise ShipyardError(str(self.root), f"has {len(hits)} manifests matching {ref or '(any)'}",
                                f"name one of {names}")
        return hits[0]


# -- deterministic tar layers -----------------------------------------------------------------
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
class _Entry:
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


def write_layer(entries: list[_Entry], layout: Layout, compression: str = "gzip", level: int = 1) -> LayerInfo:
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


# -- model folders ----------------------------------------------------------------------------
def model_files(model_dir: str | os.PathLike[str], field_name: str = "model") -> list[tuple[str, Path]]:
    """Sorted ``(relative posix path, path)`` of a model folder after checking it is complete.

    Complete means: ``config.json``, weights (every shard a ``*.index.json`` names), and a
    tokenizer. Symlinks (Hugging Face cache snapshots) are followed.
    """
    root = Path(model_dir)
    if not root.is_dir():
        raise ShipyardError(field_name, f"{root} is not a folder", "give the model folder from the compress step")
    files = sorted((p.relative_to(root).as_posix(), p) for p in root.rglob("*") if p.is_file())
    names = {rel for rel, _ in files}
    missing: list[str] = []
    if "config.json" not in names:
        missing.append("config.json")
    if not any(rel.endswith(WEIGHT_SUFFIXES) for rel in names):
        missing.append("weights (*.safetensors)")
    for rel, path in files:
        if rel.endswith(".index.json") and rel.startswith(("model", "pytorch_model")):
            try:
                shards = set(json.loads(path.read_text()).get("weight_map", {}).values())
            except ValueError:
                raise ShipyardError(field_name, f"{rel} is not valid JSON", "re-export the model") from None
            missing += sorted(s for s in shards if s not in names)
    if not any(rel in names for rel in TOKENIZER_FILES):
        missing.append("tokenizer (tokenizer.json)")
    if missing:
        raise ShipyardError(field_name, f"{root} is missing {', '.join(missing)}",
                            "package the complete model folder (config, all weight shards, tokenizer)")
    return files


def model_tree_digest(files: list[tuple[str, Path]]) -> tuple[str, dict[str, str]]:
    """A digest over (path, sha256) of every file, and the per-file hashes."""
    hashes = {rel: sha256_file(path) for rel, path in files}
    return "sha256:" + hashlib.sha256(canonical_json(hashes)).hexdigest(), hashes


def build_annotations(extra: dict[str, Any] | str | None, base_name: str = "", base_digest: str = "") -> dict[str, str]:
    """OCI annotations: shipyard's own, the base image's and ``extra`` (short keys mapped)."""
    if isinstance(extra, str):
        try:
            extra = json.loads(extra) if extra.strip() else {}
        except ValueError as err:
            raise ShipyardError("annotations", f"is not JSON ({err.msg})", 'give a JSON object, e.g. {"recipe": "w4a16"}') from None
    if not isinstance(extra, dict | None):
        raise ShipyardError("annotations", "is not a JSON object", 'give a JSON object, e.g. {"recipe": "w4a16"}')
    out = {
        "org.opencontainers.image.created": created_timestamp(),
        "io.shipyard.version": __version__,
    }
    if base_name:
        out["org.opencontainers.image.base.name"] = base_name
    if base_digest:
        out["org.opencontainers.image.base.digest"] = base_digest
    for key, value in (extra or {}).items():
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
        out[SHIPYARD_KEYS.get(key, key)] = text
    return out


# -- base images ------------------------------------------------------------------------------
@dataclass
class BaseImage:
    """A base image: its config and layers, with the layout holding its blobs (if any)."""

    name: str
    config: dict[str, Any]
    layers: list[dict[str, Any]] = field(default_factory=list)
    layout: Layout | None = None
    digest: str = ""


def _elf_is_static(path: Path) -> bool:
    """True when the ELF file has no PT_INTERP (no dynamic loader)."""
    with open(path, "rb") as fh:
        head = fh.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:
            return False
        endian = "<" if head[5] == 1 else ">"
        phoff = struct.unpack_from(endian + "Q", head, 32)[0]
        phentsize, phnum = struct.unpack_from(endian + "HH", head, 54)
        fh.seek(phoff)
        table = fh.read(phentsize * phnum)
    return all(struct.unpack_from(endian + "I", table, i * phentsize)[0] != 3 for i in range(phnum))


def host_platform() -> tuple[str, str]:
    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64le",
            "s390x": "s390x"}.get(machine, machine)
    return "linux", arch


def busybox_base(layout: Layout, busybox: str | None = None, user: str = DEFAULT_USER) -> BaseImage:
    """A one-layer base from a static busybox: /bin/{busybox,sh,ln,sleep,...}, /etc/passwd, /tmp."""
    path = Path(busybox or os.environ.get("SHIPYARD_BUSYBOX") or "/usr/bin/busybox")
    if not path.is_file():
        raise ShipyardError("base_image", f"no busybox binary at {path} for the built-in base",
                            "apt-get install -y busybox-static, set SHIPYARD_BUSYBOX, or give base_image")
    if not _elf_is_static(path):
        raise ShipyardError("base_image", f"{path} is dynamically linked; the base needs a static busybox",
                            "apt-get install -y busybox-static, or give base_image")
    passwd = f"root:x:0:0:root:/root:/bin/sh\nmodel:x:{user}:0:model:/models:/bin/sh\n".encode()
    entries = [
        _Entry("bin", "dir", 0o755), _Entry("etc", "dir", 0o755), _Entry("tmp", "dir", 0o1777),
        _Entry("bin/busybox", "file", 0o755, source=path),
        _Entry("etc/passwd", "data", 0o644, data=passwd),
        _Entry("etc/group", "data", 0o644, data=b"root:x:0:\n"),
    ] + [_Entry(f"bin/{a}", "symlink", 0o777, target="busybox") for a in BUSYBOX_APPLETS]
    layer = write_layer(entries, layout)
    os_name, arch = host_platform()
    config = {
        "architecture": arch, "os": os_name, "created": created_timestamp(),
        "config": {"Env": ["PATH=/bin"], "Cmd": ["sh"], "User": user},
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
        "history": [{"created": created_timestamp(), "created_by": f"shipyard: static busybox base ({path.name})"}],
    }
    return BaseImage("builtin:busybox", config, [layer.descriptor], layout)


def _select_platform(index: dict[str, Any], where: str) -> dict[str, Any]:
    os_name, arch = host_platform()
    for m in index.get("manifests", []):
        p = m.get("platform") or {}
        if p.get("os") == os_name and p.get("architecture") == arch:
            return m
    raise ShipyardError("base_image", f"{where} has no {os_name}/{arch} image", "pick a base image for this platform")


def _normalise_layer_types(layers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for layer in layers:
        layer = dict(layer)
        if layer["mediaType"] == MT_DOCKER_LAYER:
            layer["mediaType"] = MT_LAYER_GZIP
        out.append(layer)
    return out


def _base_from_layout(root: Path, ref: str | None, name: str) -> BaseImage:
    layout = Layout(root)
    desc = layout.resolve(ref)
    manifest = layout.read_json(desc["digest"])
    if manifest.get("mediaType", desc.get("mediaType")) in (MT_INDEX, MT_DOCKER_LIST) or "manifests" in manifest:
        desc = _select_platform(manifest, name)
        manifest = layout.read_json(desc["digest"])
    for blob in [manifest["config"], *manifest["layers"]]:
        if not layout.blob(blob["digest"]).is_file():
            raise ShipyardError("base_image", f"{name} lacks blob {blob['digest']}", "copy the whole image into the layout")
    return BaseImage(name, layout.read_json(manifest["config"]["digest"]), _normalise_layer_types(manifest["layers"]),
                     layout, desc["digest"])


def parse_image_ref(ref: str) -> tuple[str, str, str]:
    """``registry/repo[:tag|@digest]`` -> (registry, repository, tag-or-digest); Docker Hub defaults."""
    ref = ref.removeprefix("docker://")
    if "@" in ref:
        name, reference = ref.split("@", 1)
    else:
        last = ref.rsplit("/", 1)[-1]
        name, reference = (ref.rsplit(":", 1) if ":" in last else (ref, "latest"))
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, repo = first, rest
    else:
        registry, repo = "registry-1.docker.io", name
        if "/" not in repo:
            repo = f"library/{repo}"
    return registry, repo, reference


def _base_from_registry(ref: str, layout: Layout, insecure_tls: bool) -> BaseImage:
    from shipyard.oci.client import RegistryClient

    registry, repo, reference = parse_image_ref(ref)
    client = RegistryClient(registry, repo, insecure_tls=insecure_tls)
    data, media = client.get_manifest(reference)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    manifest = json.loads(data)
    if media in (MT_INDEX, MT_DOCKER_LIST) or "manifests" in manifest:
        digest = _select_platform(manifest, ref)["digest"]
        data, media = client.get_manifest(digest)
        manifest = json.loads(data)
    for blob in [manifest["config"], *manifest["layers"]]:
        client.fetch_blob(blob["digest"], layout.blob(blob["digest"]), blob.get("size"))
    return BaseImage(ref, layout.read_json(manifest["config"]["digest"]), _normalise_layer_types(manifest["layers"]),
                     layout, digest)


def load_base(base_image: str, layout: Layout, insecure_tls: bool = False, user: str = DEFAULT_USER) -> BaseImage:
    """Resolve ``base_image`` (see the module docstring) into ``layout``."""
    spec = (base_image or "").strip()
    if spec in ("", "builtin:busybox", "busybox-static"):
        return busybox_base(layout, user=user)
    if spec.startswith("oci:"):
        path, _, tag = spec[4:].partition(":")
        return _base_from_layout(Path(path), tag or None, spec)
    if Path(spec).is_dir():
        return _base_from_layout(Path(spec), None, spec)
    if ":" in spec and Path(spec.rsplit(":", 1)[0]).is_dir():
        path, tag = spec.rsplit(":", 1)
        return _base_from_layout(Path(path), tag, spec)
    if spec.startswith(("/", "./", "../")):
        raise ShipyardError("base_image", f"{spec} is not an OCI layout folder", "give an existing layout or a registry ref")
    return _base_from_registry(spec, layout, insecure_tls)


# -- building ---------------------------------------------------------------------------------
def _finish(layout: Layout, manifest: dict[str, Any], tag: str) -> dict[str, Any]:
    data = canonical_json(manifest)
    desc = layout.put_bytes(MT_MANIFEST, data)
    if manifest.get("artifactType"):
        desc["artifactType"] = manifest["artifactType"]
    desc["annotations"] = {REF_NAME: tag}
    layout.write_index([desc])
    layers = [{"digest": la["digest"], "size": la["size"], "mediaType": la["mediaType"],
               **({"title": la["annotations"][TITLE]} if TITLE in la.get("annotations", {}) else {})}
              for la in manifest["layers"]]
    size = desc["size"] + manifest["config"]["size"] + sum(la["size"] for la in manifest["layers"])
    return {"layout": str(layout.root), "tag": tag, "digest": desc["digest"], "size_bytes": size, "layers": layers,
            "config_digest": manifest["config"]["digest"], "annotations": manifest.get("annotations", {})}


def _check_tag(tag: str) -> str:
    import re

    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}", tag or ""):
        raise ShipyardError("tag", f"{tag!r} is not a valid OCI tag", "use letters, digits, '.', '_' and '-' (max 128)")
    return tag


def default_tag(model_digest: str) -> str:
    """The tag used when none is given: ``model-<first 12 hex of the model tree digest>``."""
    return f"model-{model_digest.removeprefix('sha256:')[:12]}"


def build_modelcar(model_dir: str | os.PathLike[str], layout_dir: str | os.PathLike[str], *, tag: str = "",
                   base_image: str = "", annotations: dict[str, Any] | str | None = None, user: str = DEFAULT_USER,
                   compression: str | None = None, insecure_tls: bool = False) -> dict[str, Any]:
    """Build a modelcar image (model files under ``/models``) as an OCI layout at ``layout_dir``.

    ``compression``: ``gzip`` (default, level 1; ``SHIPYARD_OCI_COMPRESSION`` overrides) or
    ``none``. Returns tag, digest (manifest), size, layers, annotations and the layout path.
    """
    files = model_files(model_dir)
    tree_digest, hashes = model_tree_digest(files)
    tag = _check_tag(tag or default_tag(tree_digest))
    compression = compression or os.environ.get("SHIPYARD_OCI_COMPRESSION", "gzip")
    with atomic_dir(layout_dir) as tmp:
        layout = Layout(tmp).init()
        base = load_base(base_image, layout, insecure_tls=insecure_tls, user=user)
        if base.layout is not None and base.layout.root != layout.root:
            for blob in base.layers:
                layout.put_file(base.layout.blob(blob["digest"]), blob["digest"])
        dirs = {str(PurePosixPath(rel).parent) for rel, _ in files} - {"."}
        for d in list(dirs):
            dirs |= {str(p) for p in PurePosixPath(d).parents if str(p) != "."}
        entries = [_Entry(MODELS_DIR, "dir", 0o755)] + [_Entry(f"{MODELS_DIR}/{d}", "dir", 0o755) for d in dirs]
        entries += [_Entry(f"{MODELS_DIR}/{rel}", "file", 0o644, source=path) for rel, path in files]
        layer = write_layer(entries, layout, compression)
        notes = build_annotations(annotations, base.name, base.digest)
        notes.update({"io.shipyard.model.digest": tree_digest, "io.shipyard.model.files": str(len(files)),
                      "io.shipyard.model.path": f"/{MODELS_DIR}"})
        config = json.loads(json.dumps(base.config))
        config["created"] = created_timestamp()
        inner = config.setdefault("config", {})
        inner["User"] = user
        inner["Labels"] = {**(inner.get("Labels") or {}), **notes}
        config.setdefault("rootfs", {"type": "layers", "diff_ids": []})["diff_ids"].append(layer.diff_id)
        config.setdefault("history", []).append({"created": created_timestamp(),
                                                 "created_by": f"shipyard {__version__}: model files under /{MODELS_DIR}"})
        config_desc = layout.put_bytes(MT_CONFIG, canonical_json(config))
        manifest = {"schemaVersion": 2, "mediaType": MT_MANIFEST, "config": config_desc,
                    "layers": [*base.layers, layer.descriptor], "annotations": notes}
        result = _finish(layout, manifest, tag)
    result["layout"] = str(Path(layout_dir))
    result.update(mode="modelcar", model_digest=tree_digest, files=hashes, base_image=base.name)
    return result


def build_oras_artifact(model_dir: str | os.PathLike[str], layout_dir: str | os.PathLike[str], *, tag: str = "",
                        annotations: dict[str, Any] | str | None = None) -> dict[str, Any]:
    """Write the model folder as an ORAS artifact (one titled blob per file) in an OCI layout.

    Blobs are hard links to the model files when on the same filesystem, else copies.
    """
    files = model_files(model_dir)
    tree_digest, hashes = model_tree_digest(files)
    tag = _check_tag(tag or default_tag(tree_digest))
    with atomic_dir(layout_dir) as tmp:
        layout = Layout(tmp).init()
        layers = []
        for rel, path in files:
            digest = "sha256:" + hashes[rel]
            layout.put_file(path, digest, link=True)
            layers.append({"mediaType": MT_MODEL_FILE, "digest": digest, "size": path.stat().st_size,
                           "annotations": {TITLE: rel}})
        config = layout.put_bytes(MT_EMPTY, EMPTY_JSON)
        config["data"] = base64.b64encode(EMPTY_JSON).decode()
        notes = build_annotations(annotations)
        notes.update({"io.shipyard.model.digest": tree_digest, "io.shipyard.model.files": str(len(files))})
        manifest = {"schemaVersion": 2, "mediaType": MT_MANIFEST, "artifactType": ARTIFACT_TYPE, "config": config,
                    "layers": layers, "annotations": notes}
        result = _finish(layout, manifest, tag)
    result["layout"] = str(Path(layout_dir))
    result.update(mode="oras", model_digest=tree_digest, files=hashes)
    return result


def layout_reference(layout_dir: str | os.PathLike[str], digest: str) -> str:
    """The digest-pinned reference of a local layout: ``oci:///ABS/PATH@sha256:...``."""
    return f"oci://{Path(layout_dir).resolve()}@{digest}"


# -- pushing ----------------------------------------------------------------------------------
def push_layout(layout_dir: str | os.PathLike[str], registry: str, repository: str, tag: str, *,
                insecure_tls: bool = False, ref: str | None = None) -> dict[str, Any]:
    """Push the image in an OCI layout to ``registry/repository:tag``.

    Blobs first (skipping those the registry has), then the manifest by digest, then the tag:
    an interrupted push leaves no tag pointing at partial content. Returns the digest-pinned
    ``uri`` (``oci://REGISTRY/REPO@sha256:...``), tag, digest, size, layers and bytes sent.
    """
    from shipyard.oci.client import RegistryClient

    _check_tag(tag)
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


# -- pulling ----------------------------------------------------------------------------------
def parse_oci_uri(uri: str) -> tuple[str, str, str]:
    """``oci://REGISTRY/REPO@sha256:..`` or ``:tag`` -> (registry, repo, reference);
    ``oci:///ABS/LAYOUT@sha256:..`` -> ("", layout path, reference)."""
    if not uri.startswith("oci://"):
        raise ShipyardError("model_uri", f"{uri!r} is not an oci:// URI", "write oci://REGISTRY/REPO@sha256:...")
    rest = uri[len("oci://"):]
    if rest.startswith("/"):
        path, _, reference = rest.rpartition("@") if "@" in rest else (rest, "", "")
        return "", path, reference
    if "/" not in rest:
        raise ShipyardError("model_uri", f"{uri!r} names no repository", "write oci://REGISTRY/REPO@sha256:...")
    registry, _, name = rest.partition("/")
    if "@" in name:
        repo, _, reference = name.partition("@")
    elif ":" in name.rsplit("/", 1)[-1]:
        repo, _, reference = name.rpartition(":")
    else:
        repo, reference = name, "latest"
    return registry, repo, reference


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
    registry, repo, reference = parse_oci_uri(uri)
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
        from shipyard.oci.client import RegistryClient

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



def build_base_layout(layout_dir: str | os.PathLike[str], tag: str = "busybox", busybox: str | None = None,
                      user: str = DEFAULT_USER) -> dict[str, Any]:
    """Write the static-busybox base (``sh``, ``ln``, ``sleep``; user ``user``) as an OCI layout."""
    with atomic_dir(layout_dir) as tmp:
        layout = Layout(tmp).init()
        base = busybox_base(layout, busybox, user=user)
        config = layout.put_bytes(MT_CONFIG, canonical_json(base.config))
        manifest = {"schemaVersion": 2, "mediaType": MT_MANIFEST, "config": config, "layers": base.layers,
                    "annotations": build_annotations(None)}
        result = _finish(layout, manifest, _check_tag(tag))
    result["layout"] = str(Path(layout_dir))
    return result
