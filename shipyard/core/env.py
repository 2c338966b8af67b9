"""The one reader of shipyard's environment variables: a bad value is a one-line error naming it.

Unset or empty means the default. A value that does not parse (``SHIPYARD_REGISTRY_RETRIES=five``,
``SHIPYARD_DEBUG=maybe``) raises :class:`~shipyard.core.errors.ShipyardError` with the variable as
the field, before any work starts; it is never silently replaced by the default.

Booleans accept ``1/true/yes/on`` and ``0/false/no/off`` (any case).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from shipyard.core.errors import ShipyardError

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


def _raw(name: str, environ: Mapping[str, str] | None) -> str:
    return (environ if environ is not None else os.environ).get(name, "").strip()


def env_str(name: str, default: str = "", *, environ: Mapping[str, str] | None = None) -> str:
    """The stripped value of ``name``, or ``default`` when unset or empty."""
    return _raw(name, environ) or default


def env_bool(name: str, default: bool = False, *, environ: Mapping[str, str] | None = None) -> bool:
    """``name`` read as a boolean (``1/true/yes/on``, ``0/false/no/off``), ``default`` when unset."""
    raw = _raw(name, environ)
    if not raw:
        return default
    if raw.lower() in TRUE:
        return True
    if raw.lower() in FALSE:
        return False
    raise ShipyardError(name, f"{raw!r} is not a boolean", "set it to 1 or 0 (true/false, yes/no), or unset it")


def env_int(name: str, default: int, *, minimum: int | None = None,
            environ: Mapping[str, str] | None = None) -> int:
    """``name`` read as a whole number (at least ``minimum`` when given), ``default`` when unset."""
    raw = _raw(name, environ)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ShipyardError(name, f"{raw!r} is not a whole number", f"unset it or give a whole number (default {default})") from None
    if minimum is not None and value < minimum:
        raise ShipyardError(name, f"{value} is below {minimum}", f"give a whole number >= {minimum}, or unset it (default {default})")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None,
              environ: Mapping[str, str] | None = None) -> float:
    """``name`` read as a finite number (at least ``minimum`` when given), ``default`` when unset."""
    raw = _raw(name, environ)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ShipyardError(name, f"{raw!r} is not a finite number", f"unset it or give a number (default {default:g})")
    if minimum is not None and value < minimum:
        raise ShipyardError(name, f"{value:g} is below {minimum:g}", f"give a number >= {minimum:g}, or unset it (default {default:g})")
    return value
