"""How shipyard writes a number into PromQL and the alert reports that quote it."""

from __future__ import annotations


def number(value: float) -> str:
    """``value`` with at most ten significant digits and no float noise (``0.144``, not ``0.14400000000000002``)."""
    return format(value, ".10g")
