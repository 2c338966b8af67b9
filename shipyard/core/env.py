"""The one reader of shipyard's environment variables: a bad value is a one-line error naming it.

Unset or empty means the default. A value that does not parse (``SHIPYARD_REGISTRY_RETRIES=five``,
``SHIPYARD_DEBUG=maybe``) raises :class:`~shipyard.core.errors.ShipyardError` with the variable as
the field, before any work starts; it is never silently replaced by the default.

Booleans accept ``1/true/yes/on`` and ``0/false/no/off`` (any case).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Mapping

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


def hub_offline(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``HF_HUB_OFFLINE`` turns the Hugging Face Hub off, read as huggingface_hub reads it
    (``1/true/yes/on``, any case, is offline; anything else, unset included, is online). The one
    reading: a plan and a pin never disagree on what ``HF_HUB_OFFLINE=false`` means."""
    return _raw("HF_HUB_OFFLINE", environ).strip().lower() in TRUE


def _env_number(name: str, default: float, kind: type, minimum: float | None,
                environ: Mapping[str, str] | None) -> float:
    raw = _raw(name, environ)
    if not raw:
        return default
    noun = "a whole number" if kind is int else "a finite number"
    shown = f"{default:g}" if isinstance(default, float) else str(default)
    try:
        value = kind(raw)
    except ValueError:
        value = math.nan
    if isinstance(value, float) and not math.isfinite(value):
        raise ShipyardError(name, f"{raw!r} is not {noun}", f"unset it or give {noun} (default {shown})")
    if minimum is not None and value < minimum:
        raise ShipyardError(name, f"{value:g} is below {minimum:g}", f"give {noun} >= {minimum:g}, or unset it (default {shown})")
    return value


def env_int(name: str, default: int, *, minimum: int | None = None,
            environ: Mapping[str, str] | None = None) -> int:
    """``name`` read as a whole number (at least ``minimum`` when given), ``default`` when unset."""
    return int(_env_number(name, default, int, minimum, environ))


def env_float(name: str, default: float, *, minimum: float | None = None,
              environ: Mapping[str, str] | None = None) -> float:
    """``name`` read as a finite number (at least ``minimum`` when given), ``default`` when unset."""
    return float(_env_number(name, default, float, minimum, environ))


def env_seconds(name: str, default: float, *, most: float = 86400.0,
                environ: Mapping[str, str] | None = None) -> float:
    """``name`` read as a deadline in seconds, more than 0 and less than ``most`` (``default`` when
    unset): the one reader of the ``SHIPYARD_*_TIMEOUT_S`` settings, one line naming the setting."""
    seconds = env_float(name, default, environ=environ)
    if not 0 < seconds < most:
        raise ShipyardError(name, f"{seconds:g} is not a number of seconds in (0, {most:g})",
                            f"set {name} to e.g. {default:g} or unset it")
    return seconds


@contextlib.contextmanager
def environ_set(values: Mapping[str, str | None]) -> Iterator[None]:
    """Each non-empty value of ``values`` set in this process's environment for the block, then
    every variable put back as it was (unset again when it was unset); empty values are left alone."""
    chosen = {name: value for name, value in values.items() if value}
    before = {name: os.environ.get(name) for name in chosen}
    os.environ.update(chosen)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
