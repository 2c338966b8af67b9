"""What goes into a model image: the model folder's files, the base image and the annotations.

**Modelcar** (KServe ``oci://`` model URIs, :func:`build_modelcar`): the base image's layers plus
one layer holding the model files under ``/models``; the image runs as a non-root user
(``1001``) and carries OCI annotations/labels (source model, recipe, eval and benchmark
summaries, shipyard version, pipeline run, and ``io.shipyard.model.digest``: the model's tree
digest, :func:`shipyard.core.files.tree_digest`, the same identity the evaluation cache keys
on). The base needs ``sh``, ``ln`` and ``sleep``: KServe's modelcar sidecar runs
``ln -sf /proc/$$/root/models ...`` and sleeps. ``base_image`` is one of

* ``""`` / ``"builtin:busybox"``: a one-layer base built here from a static busybox binary
  (``SHIPYARD_BUSYBOX``, default ``/usr/bin/busybox`` from Debian's ``busybox-static``);
* an OCI image layout folder, ``PATH`` or ``oci:PATH[:TAG]``;
* a registry reference, ``[docker://]registry/repo[:tag|@sha256:...]`` (pulled here).

**ORAS artifact** (:func:`build_oras_artifact`): one blob per model file, titled with its path
relative to the model folder (``org.opencontainers.image.title``), so ``oras pull`` /
:func:`shipyard.oci.transfer.pull_model` rebuild the tree.

Everything is first written as an OCI image layout on disk (:mod:`shipyard.oci.layout`), which
:func:`shipyard.oci.transfer.push_layout` pushes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import platform
import struct
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from shipyard import __version__
from shipyard.core.env import env_str
from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_dir, tree_digest, tree_files
from shipyard.oci.client import RegistryClient
from shipyard.oci.layout import (
    ARTIFACT_TYPE,
    EMPTY_JSON,
    MODELS_DIR,
    MT_CONFIG,
    MT_DOCKER_LAYER,
    MT_DOCKER_LIST,
    MT_EMPTY,
    MT_INDEX,
    MT_LAYER_GZIP,
    MT_MANIFEST,
    MT_MODEL_FILE,
    REF_NAME,
    TITLE,
    Entry,
    Layout,
    canonical_json,
    check_tag,
    created_timestamp,
    write_layer,
)
from shipyard.oci.reference import parse as parse_reference

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


def model_files(model_dir: str | os.PathLike[str], field_name: str = "model") -> list[tuple[str, Path]]:
    """Sorted ``(relative posix path, path)`` of a model folder after checking it is complete.

    Complete means: ``config.json``, weights (every shard a ``*.index.json`` names), and a
    tokenizer. Symlinks (Hugging Face cache snapshots) are followed.
    """
    root = Path(model_dir)
    if not root.is_dir():
        raise ShipyardError(field_name, f"{root} is not a folder", "give the model folder from the compress step")
    files = tree_files(root)
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
    path = Path(busybox or env_str("SHIPYARD_BUSYBOX", "/usr/bin/busybox"))
    if not path.is_file():
        raise ShipyardError("base_image", f"no busybox binary at {path} for the built-in base",
                            "apt-get install -y busybox-static, set SHIPYARD_BUSYBOX, or give base_image")
    if not _elf_is_static(path):
        raise ShipyardError("base_image", f"{path} is dynamically linked; the base needs a static busybox",
                            "apt-get install -y busybox-static, or give base_image")
    passwd = f"root:x:0:0:root:/root:/bin/sh\nmodel:x:{user}:0:model:/models:/bin/sh\n".encode()
    entries = [
        Entry("bin", "dir", 0o755), Entry("etc", "dir", 0o755), Entry("tmp", "dir", 0o1777),
        Entry("bin/busybox", "file", 0o755, source=path),
        Entry("etc/passwd", "data", 0o644, data=passwd),
        Entry("etc/group", "data", 0o644, data=b"root:x:0:\n"),
    ] + [Entry(f"bin/{a}", "symlink", 0o777, target="busybox") for a in BUSYBOX_APPLETS]
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


def _base_from_registry(ref: str, layout: Layout, insecure_tls: bool) -> BaseImage:
    parsed = parse_reference(ref, "base_image")
    client = RegistryClient(parsed.registry, parsed.repository, insecure_tls=insecure_tls)
    data, media = client.get_manifest(parsed.reference)
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
    model_digest, hashes = tree_digest(files)
    tag = check_tag(tag or default_tag(model_digest))
    compression = compression or env_str("SHIPYARD_OCI_COMPRESSION", "gzip")
    with atomic_dir(layout_dir) as tmp:
        layout = Layout(tmp).init()
        base = load_base(base_image, layout, insecure_tls=insecure_tls, user=user)
        if base.layout is not None and base.layout.root != layout.root:
            for blob in base.layers:
                layout.put_file(base.layout.blob(blob["digest"]), blob["digest"])
        dirs = {str(PurePosixPath(rel).parent) for rel, _ in files} - {"."}
        for d in list(dirs):
            dirs |= {str(p) for p in PurePosixPath(d).parents if str(p) != "."}
        entries = [Entry(MODELS_DIR, "dir", 0o755)] + [Entry(f"{MODELS_DIR}/{d}", "dir", 0o755) for d in dirs]
        entries += [Entry(f"{MODELS_DIR}/{rel}", "file", 0o644, source=path) for rel, path in files]
        layer = write_layer(entries, layout, compression)
        notes = build_annotations(annotations, base.name, base.digest)
        notes.update({"io.shipyard.model.digest": model_digest, "io.shipyard.model.files": str(len(files)),
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
    result.update(mode="modelcar", model_digest=model_digest, files=hashes, base_image=base.name)
    return result


def build_oras_artifact(model_dir: str | os.PathLike[str], layout_dir: str | os.PathLike[str], *, tag: str = "",
                        annotations: dict[str, Any] | str | None = None) -> dict[str, Any]:
    """Write the model folder as an ORAS artifact (one titled blob per file) in an OCI layout.

    Blobs are hard links to the model files when on the same filesystem, else copies.
    """
    files = model_files(model_dir)
    model_digest, hashes = tree_digest(files)
    tag = check_tag(tag or default_tag(model_digest))
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
        notes.update({"io.shipyard.model.digest": model_digest, "io.shipyard.model.files": str(len(files))})
        manifest = {"schemaVersion": 2, "mediaType": MT_MANIFEST, "artifactType": ARTIFACT_TYPE, "config": config,
                    "layers": layers, "annotations": notes}
        result = _finish(layout, manifest, tag)
    result["layout"] = str(Path(layout_dir))
    result.update(mode="oras", model_digest=model_digest, files=hashes)
    return result


def build_base_layout(layout_dir: str | os.PathLike[str], tag: str = "busybox", busybox: str | None = None,
                      user: str = DEFAULT_USER) -> dict[str, Any]:
    """Write the static-busybox base (``sh``, ``ln``, ``sleep``; user ``user``) as an OCI layout."""
    with atomic_dir(layout_dir) as tmp:
        layout = Layout(tmp).init()
        base = busybox_base(layout, busybox, user=user)
        config = layout.put_bytes(MT_CONFIG, canonical_json(base.config))
        manifest = {"schemaVersion": 2, "mediaType": MT_MANIFEST, "config": config, "layers": base.layers,
                    "annotations": build_annotations(None)}
        result = _finish(layout, manifest, check_tag(tag))
    result["layout"] = str(Path(layout_dir))
    return result
