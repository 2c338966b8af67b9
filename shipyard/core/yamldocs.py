"""Read and write trusted multi-document YAML (compiled pipelines, rendered manifests) with PyYAML's C parser.

A compiled shipyard pipeline is some 15,000 YAML nodes; PyYAML's pure-Python parser takes about a
second per read, the C one (libyaml, in PyYAML's wheels) a tenth of that. Files a user wrote go
through :func:`shipyard.core.jsonargs.load_yaml` instead (duplicate keys refused, one-line errors).
"""

from __future__ import annotations

from typing import Any

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def documents(text: str) -> list[Any]:
    """The non-empty documents of ``text``, as ``yaml.safe_load_all`` reads them."""
    return [doc for doc in yaml.load_all(text, Loader=_LOADER) if doc]


def dump_documents(docs: list[Any]) -> str:
    """``docs`` as multi-document YAML, keys in their order (``yaml.safe_dump_all(..., sort_keys=False)``)."""
    return yaml.dump_all(docs, Dumper=_DUMPER, sort_keys=False)
