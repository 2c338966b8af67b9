"""The one OCI reference parser and the one mutable-tag rule.

:func:`parse` reads every way shipyard names an image:

* ``oci://REGISTRY/REPO@sha256:<64 hex>`` (a pushed modelcar or ORAS artifact), ``oci://REGISTRY/REPO:TAG``
  and ``oci://REGISTRY/REPO`` (tag ``latest``);
* ``oci:///ABSOLUTE/LAYOUT[@sha256:...]``: an OCI image layout on disk (empty registry);
* a plain image reference ``[docker://]REGISTRY/REPO[:TAG|@DIGEST]`` (a base image), with Docker
  Hub's defaults when the first part is no host (``busybox`` is
  ``registry-1.docker.io/library/busybox:latest``).

:func:`require_pinned` refuses a registry reference that is not pinned by a sha256 digest: a tag
can point at other weights tomorrow, so a run could evaluate one model and deploy another.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shipyard.core.errors import ShipyardError

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}\Z")
DOCKER_HUB = "registry-1.docker.io"
#: set to 1 to accept mutable tags in model URIs (tests, throwaway registries)
ALLOW_MUTABLE_TAG_ENV = "SHIPYARD_ALLOW_MUTABLE_TAG"
_PIN_FIX = "write oci://REGISTRY/REPO@sha256:<64 hex>"


@dataclass(frozen=True)
class Reference:
    """A parsed image reference: ``registry`` ("" for a layout on disk), ``repository`` (the
    layout's path for one on disk), and ``tag`` or ``digest`` (``sha256:...``)."""

    registry: str
    repository: str
    tag: str = ""
    digest: str = ""

    @property
    def reference(self) -> str:
        """What a registry's manifest endpoint takes: the digest when pinned, else the tag."""
        return self.digest or self.tag

    @property
    def pinned(self) -> bool:
        return bool(self.digest)

    @property
    def is_layout(self) -> bool:
        return not self.registry

    def __str__(self) -> str:
        at = f"@{self.digest}" if self.digest else (f":{self.tag}" if self.tag else "")
        if self.is_layout:
            return f"oci://{self.repository}{'@' + self.digest if self.digest else ''}"
        return f"oci://{self.registry}/{self.repository}{at}"


def _split_name(name: str, field: str, shown: str) -> tuple[str, str, str]:
    """``repo[:tag|@digest]`` -> (repo, tag, digest); no tag and no digest is ``latest``."""
    if "@" in name:
        repo, _, digest = name.partition("@")
        if not DIGEST_RE.match(digest):
            raise ShipyardError(field, f"{digest!r} is not a sha256 digest", _PIN_FIX)
        return repo, "", digest
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        repo, _, tag = name.rpartition(":")
        return repo, tag, ""
    return name, "latest", ""


def parse(text: str, field: str = "model_uri") -> Reference:
    """Parse an ``oci://`` URI or a plain image reference (see the module docstring).

    A digest that is not ``sha256:<64 hex>`` and an ``oci://`` URI with no repository are
    one-line errors naming ``field``.
    """
    text = (text or "").strip()
    if text.startswith("oci://"):
        rest = text[len("oci://"):]
        if rest.startswith("/"):  # a layout on disk: oci:///ABS/PATH[@sha256:...]
            path, at, digest = rest.rpartition("@") if "@" in rest else (rest, "", "")
            if at and not DIGEST_RE.match(digest):
                raise ShipyardError(field, f"{digest!r} is not a sha256 digest", _PIN_FIX)
            return Reference("", path, "", digest)
        registry, _, name = rest.partition("/")
        if not registry or not name:
            raise ShipyardError(field, f"{text!r} names no repository", _PIN_FIX)
        repo, tag, digest = _split_name(name, field, text)
        return Reference(registry, repo, tag, digest)
    if "://" in text and not text.startswith("docker://"):
        raise ShipyardError(field, f"{text!r} is not an oci:// URI", _PIN_FIX)
    name = text.removeprefix("docker://")
    if not name:
        raise ShipyardError(field, "is empty", "write REGISTRY/REPO[:TAG|@sha256:...]")
    repo, tag, digest = _split_name(name, field, text)
    first, _, rest = repo.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return Reference(first, rest, tag, digest)
    return Reference(DOCKER_HUB, repo if "/" in repo else f"library/{repo}", tag, digest)


def require_pinned(ref: Reference | str, field: str = "model_uri", *, allow_mutable_tag: bool = False,
                   how_to_allow: str = f"set {ALLOW_MUTABLE_TAG_ENV}=1 to accept tags") -> Reference:
    """The reference, refused (one line naming ``field``) when it names a registry image by a
    mutable tag and ``allow_mutable_tag`` is off. Layouts on disk are not registry images."""
    if isinstance(ref, str):
        ref = parse(ref, field)
    if ref.pinned or ref.is_layout or allow_mutable_tag:
        return ref
    raise ShipyardError(
        field, f"{ref} uses the mutable tag {ref.tag!r}: the weights behind it can change between runs",
        f"pin the digest (oci://REGISTRY/REPO@sha256:..., the package step prints it, `skopeo inspect` "
        f"shows it), or {how_to_allow}",
    )
