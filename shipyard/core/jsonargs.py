"""JSON-object parameters (eval_config, slo, deploy_config ...): parsed once, one-line errors."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from shipyard.core.errors import ShipyardError


def json_object(value: str | Mapping[str, Any] | None, field: str, example: str) -> dict[str, Any]:
    """``value`` as a dict: empty or None is ``{}``, a mapping is copied, a string must be a JSON
    object. ``example`` goes into the fix of the error, e.g. ``{"min_recovery": 0.99}``."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    try:
        data = json.loads(value)
    except json.JSONDecodeError as err:
        raise ShipyardError(field, f"is not valid JSON ({err.msg} at char {err.pos})", f"pass a JSON object, e.g. {example}") from None
    if not isinstance(data, dict):
        raise ShipyardError(field, f"must be a JSON object, got {type(data).__name__}", f"pass e.g. {example}")
    return data
