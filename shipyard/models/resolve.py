"""Models by URI: ``hf://``, local paths, ``s3://``, ``oci://``, ``pvc://`` and ``embedded://``.

:func:`resolve_model` turns a URI into a local Hugging Face folder (``config.json`` +
weights + tokenizer). It runs in the ``compress`` runtime, which has transformers.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from shipyard.core.env import env_bool
from shipyard.core.errors import ShipyardError
from shipyard.core.errors import refuse_credentials as refuse
from shipyard.core.files import atomic_dir, copy_tree, dir_size
from shipyard.core.k8s_names import is_object_name
from shipyard.models.embedded import materialise_embedded
from shipyard.models.s3 import download_prefix
from shipyard.oci.reference import ALLOW_MUTABLE_TAG_ENV, require_pinned
from shipyard.oci.reference import parse as parse_reference
from shipyard.oci.transfer import pull_model

EMBEDDED_DEFAULT = "embedded://smollm2-135m-instruct"
SCHEMES = ("hf", "s3", "oci", "pvc", "embedded", "file")


#: where each scheme's credentials go instead of the URI
URI_CREDENTIALS_FIX = ("drop the user name, password or token before the @ (and any token in the query) and give "
                       "them through the Secret or environment the scheme uses (HF_TOKEN, shipyard-s3, shipyard-registry)")


def refuse_credentials(uri: str, field: str = "model_uri") -> None:
    """Refuse a model or adapter URI that carries credentials (``s3://KEY:SECRET@bucket/m``, a token
    as the user name ``hf://TOKEN@org/m``, a token or signature in the query): they never go in a
    URI, and the error never echoes them (:func:`shipyard.core.errors.refuse_credentials`, the one check)."""
    refuse(uri or "", field, URI_CREDENTIALS_FIX)


_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?\Z")
_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z")


def _check_location(scheme: str, location: str, revision: str | None, field: str) -> None:
    """The location of an ``hf://``, ``s3://`` or ``pvc://`` URI, checked before any download."""
    if scheme == "hf":
        if not _HF_ID.match(location) or len(location) > 96:
            raise ShipyardError(field, f"{location!r} is not a Hugging Face model id (spaces, empty parts or odd "
                                "characters)", "write hf://ORG/NAME, e.g. hf://HuggingFaceTB/SmolLM2-135M-Instruct")
        if revision is not None and (not revision.strip() or any(c.isspace() for c in revision)):
            raise ShipyardError(field, f"{revision!r} is not a revision", "write hf://ORG/NAME@main or @<commit>")
    elif scheme == "s3":
        bucket, _, key = location.partition("/")
        if not _S3_BUCKET.match(bucket) or ".." in bucket:
            raise ShipyardError(field, f"{bucket!r} is not an S3 bucket name", "write s3://BUCKET/PREFIX (3-63 "
                                "lowercase letters, digits, '.' and '-')")
        if not key.strip("/"):
            raise ShipyardError(field, f"s3://{bucket} names no key (prefix) inside the bucket",
                                "write s3://BUCKET/PREFIX, the folder that holds config.json")
        if any(c.isspace() for c in key) or any(part == ".." for part in key.split("/")):
            raise ShipyardError(field, f"s3://{bucket}/{key} has spaces or '..' in its key", "write the key as stored")
    elif scheme == "pvc":
        claim, _, path = location.partition("/")
        if not is_object_name(claim):
            raise ShipyardError(field, f"{claim!r} is not a PersistentVolumeClaim name",
                                "write pvc://CLAIM/path with a lowercase DNS-1123 claim name")
        if any(part == ".." for part in path.split("/")):
            raise ShipyardError(field, f"pvc://{location} leads out of the claim with '..'",
                                "give a path inside the claim, without '..'")


def check_oci_pinned(location: str, field: str = "model_uri", allow_mutable_tag: bool | None = None) -> None:
    """Refuse an ``oci://`` registry reference that is not pinned by a sha256 digest.

    A tag (``:v1``, or none, which means ``:latest``) can point at other weights tomorrow, so a
    run could evaluate one model and deploy another. ``allow_mutable_tag`` (default: the
    ``SHIPYARD_ALLOW_MUTABLE_TAG=1`` environment variable) accepts it. OCI layouts on disk
    (``oci:///path``) are left to the package step's own rules.
    """
    if location.startswith("/"):
        return
    refuse_credentials(f"oci://{location}", field)
    if allow_mutable_tag is None:
        allow_mutable_tag = env_bool(ALLOW_MUTABLE_TAG_ENV)
    require_pinned(parse_reference(f"oci://{location}", field), field, allow_mutable_tag=allow_mutable_tag)


@dataclass(frozen=True)
class ModelURI:
    """A parsed model URI."""

    scheme: str
    location: str
    revision: str | None = None

    def __str__(self) -> str:
        if self.scheme == "file":
            return self.location
        rev = f"@{self.revision}" if self.revision and self.scheme == "hf" else ""
        return f"{self.scheme}://{self.location}{rev}"


def parse_model_uri(uri: str, field: str = "model_uri", allow_mutable_tag: bool | None = None) -> ModelURI:
    """Parse ``uri``; unknown schemes and empty locations are refused with the list of schemes, and
    ``oci://`` references must be pinned by digest (see :func:`check_oci_pinned`)."""
    uri = (uri or "").strip()
    if not uri:
        raise ShipyardError(field, "is empty", f"give a local folder or one of {', '.join(s + '://' for s in SCHEMES)}")
    if "://" not in uri:
        return ModelURI("file", str(Path(uri).expanduser()))
    refuse_credentials(uri, field)
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme not in SCHEMES:
        raise ShipyardError(
            field, f"unknown URI scheme {scheme + '://'!r} in {uri!r}", f"use one of {', '.join(s + '://' for s in SCHEMES)}"
        )
    location = uri.split("://", 1)[1]
    if scheme == "file":
        return ModelURI("file", location)
    if not location.strip("/"):
        raise ShipyardError(field, f"{uri!r} names no model", f"write {scheme}://<location>")
    if scheme == "oci":
        check_oci_pinned(location, field, allow_mutable_tag)
    revision = None
    if scheme == "hf" and "@" in location:
        location, revision = location.split("@", 1)
    _check_location(scheme, location.strip("/") if scheme != "s3" else location, revision, field)
    return ModelURI(scheme, location.strip("/") if scheme != "oci" else location, revision)


def check_model_folder(path: str | os.PathLike[str], field: str = "model") -> Path:
    """A usable model folder has config.json; say so plainly when it does not."""
    return _check_folder(path, field, "config.json")


def _check_folder(path: str | os.PathLike[str], field: str, marker: str) -> Path:
    path = Path(path)
    if not path.exists():
        raise ShipyardError(field, f"{path} does not exist", "give an existing model folder or a model URI")
    if not (path / marker).is_file():
        what = ("a Hugging Face model folder (config.json, weights, tokenizer)" if marker == "config.json"
                else f"a folder with {marker}")
        raise ShipyardError(field, f"{path} has no {marker}", f"point at {what}")
    return path


def pvc_root() -> Path:
    """Where ``pvc://CLAIM/path`` is mounted: ``SHIPYARD_PVC_ROOT`` (default ``/mnt/pvc``)."""
    return Path(os.environ.get("SHIPYARD_PVC_ROOT", "/mnt/pvc"))


def _download_hf(uri: ModelURI, dest: Path) -> None:
    from shipyard.models.hub import download

    try:
        download(uri.location, uri.revision, dest)
    except ShipyardError:  # a bad SHIPYARD_HF_TIMEOUT_S, or past it: one line naming the setting
        raise
    except Exception as err:  # network errors, 401/404 from the hub
        from huggingface_hub.errors import LocalEntryNotFoundError

        if isinstance(err, LocalEntryNotFoundError):
            raise ShipyardError(
                "model_uri",
                f"hf://{uri.location} is not in the local Hugging Face cache and the hub is unreachable (offline mode)",
                "pre-download it, or use a local folder, s3://, oci:// or embedded:// model",
            ) from None
        raise ShipyardError("model_uri", f"cannot download hf://{uri.location}: {type(err).__name__}: {err}".splitlines()[0],
                            "check the name, HF_TOKEN and network") from None


def resolve_model(uri: str, out_dir: str, marker: str = "config.json", field: str = "model_uri") -> dict[str, object]:
    """Materialise the model named by ``uri`` as a Hugging Face folder at ``out_dir``.

    Returns metadata: the canonical URI, size in bytes and the model's architecture.
    The folder appears whole or not at all. ``marker``: the file the folder must hold
    (``adapter_config.json`` for a LoRA adapter, :mod:`shipyard.models.adapters`); ``field``: the
    parameter an error names.
    """
    parsed = parse_model_uri(uri, field=field)
    out = Path(out_dir)
    if parsed.scheme == "embedded":
        src = materialise_embedded(parsed.location)
        copy_tree(src, out)
    elif parsed.scheme == "file":
        copy_tree(_check_folder(parsed.location, field, marker), out)
    elif parsed.scheme == "pvc":
        claim_path = pvc_root() / parsed.location
        claim = parsed.location.split("/", 1)[0]
        if not (pvc_root() / claim).is_dir():
            raise ShipyardError(field, f"claim {claim!r} is not mounted at {pvc_root() / claim}",
                                f"add {claim} to pvc.claims in the cluster config (pipelines/cluster.yaml) and compile again")
        copy_tree(_check_folder(claim_path, field, marker), out)
    elif parsed.scheme == "hf":
        with atomic_dir(out) as tmp:
            _download_hf(parsed, tmp)
            _check_folder(tmp, field, marker)
    elif parsed.scheme == "s3":
        with atomic_dir(out) as tmp:
            download_prefix(f"s3://{parsed.location}", tmp)
            _check_folder(tmp, field, marker)
    elif parsed.scheme == "oci":
        with atomic_dir(out) as tmp:
            pull_model(f"oci://{parsed.location}", tmp)
            _check_folder(tmp, field, marker)
    else:  # pragma: no cover - parse_model_uri refuses the rest
        raise ShipyardError("model_uri", f"unsupported scheme {parsed.scheme}")
    import json

    if marker != "config.json":
        return {"uri": str(parsed), "size_bytes": dir_size(out)}
    config = json.loads((out / "config.json").read_text())
    return {
        "uri": str(parsed),
        "size_bytes": dir_size(out),
        "architecture": (config.get("architectures") or ["unknown"])[0],
        "quantized": "quantization_config" in config,
    }


def remove_model(path: str | os.PathLike[str]) -> None:
    """Delete a materialised model folder."""
    shutil.rmtree(path, ignore_errors=True)
