"""The one Kubernetes name check: :func:`check_namespace` (a DNS-1123 label) and
:func:`check_object_name` (a DNS-1123 subdomain), each one line naming the field and the fix;
:func:`is_label`, :func:`is_dns1035_label` and :func:`is_object_name` for the callers that word
their own error (``shipyard.serving.kserve.config``, ``shipyard.serving.kserve.validate``).

A name is checked before it goes into an API path, a URL or a manifest: the ``namespace``
pipeline parameter, ``-n/--namespace`` (``shipyard.cli.options``), and the cluster config's
namespaces, Secrets and ServiceAccounts (``shipyard check``).
"""

from __future__ import annotations

import re

from shipyard.core.errors import ShipyardError, shown

#: a DNS-1123 label: namespaces, and the names Kubernetes allows at most 63 characters (``\Z``, not ``$``,
#: which also matches before a final newline: ``"shipyard\n"`` is no name)
DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
#: a DNS-1035 label (a DNS-1123 label that starts with a letter): Service names, and so the names KServe derives them from
_DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
_DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")


def is_label(value: str) -> bool:
    """Whether ``value`` is a DNS-1123 label: lowercase letters, digits and '-', at most 63 characters
    (namespaces, and the names shipyard keeps to a label's 63 characters)."""
    return bool(DNS_1123_LABEL.match(value))


def is_dns1035_label(value: str, most: int = 63) -> bool:
    """Whether ``value`` is a DNS-1035 label of at most ``most`` characters: a DNS-1123 label that starts
    with a letter (a Service name; a shorter ``most`` leaves room for the suffixes KServe appends)."""
    return len(value) <= most and bool(_DNS_1035_LABEL.match(value))


#: what a namespace is, in the words of the error line
NAMESPACE_RULE = "a Kubernetes namespace (lowercase letters, digits and '-', at most 63)"


def check_namespace(value: str, field: str = "namespace", example: str = "namespace=shipyard") -> str:
    """``value`` as a Kubernetes namespace (a DNS-1123 label), or one line naming ``field``: checked
    before a namespace goes into an API path, a URL or a manifest."""
    if not value.strip():
        raise ShipyardError(field, "is empty", f"give {NAMESPACE_RULE}, e.g. {example}")
    if not DNS_1123_LABEL.match(value):
        raise ShipyardError(field, f"{value[:100]!r} is not {NAMESPACE_RULE}", f"write e.g. {example}")
    return value


#: what most object names (Secrets, Services, Deployments, ServiceAccounts) are, in the words of the error line
OBJECT_NAME_RULE = "a Kubernetes object name (lowercase letters, digits, '-' and '.', at most 253)"


def is_object_name(value: str) -> bool:
    """Whether ``value`` is a Kubernetes object name: a DNS-1123 subdomain, at most 253 characters
    (Secrets, Services, Deployments, ServiceAccounts, PersistentVolumeClaims)."""
    return len(value) <= 253 and bool(_DNS_1123_SUBDOMAIN.match(value))


def check_object_name(value: str, field: str, example: str) -> str:
    """``value`` as a Kubernetes object name (a DNS-1123 subdomain, what the API server requires of
    Secrets, Services, Deployments and ServiceAccounts), or one line naming ``field``: checked before
    a name goes into an API path. A pasted token is not echoed (:func:`~shipyard.core.errors.shown`)."""
    if not value.strip():
        raise ShipyardError(field, "is empty", f"give {OBJECT_NAME_RULE}, e.g. {example}")
    if not is_object_name(value):
        raise ShipyardError(field, f"{shown(value, 100)} is not {OBJECT_NAME_RULE}", f"write e.g. {example}")
    return value
