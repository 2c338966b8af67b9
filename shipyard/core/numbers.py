"""The one number check: :func:`check_number` for values (a config field, a function argument)
and :func:`number` for argparse ``type=`` functions built on it.

``float("inf")``, ``float("nan")``, negative and zero values are what a typo or a unit mix-up
gives; each check names what it accepts: ``must be a finite number > 0, got nan``, ``must be a
whole number >= 1, got 0``. argparse prints ``shipyard: error: --flag: ...``; :func:`check_number`
raises :class:`~shipyard.core.errors.ShipyardError` naming the field.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from shipyard.core.errors import ShipyardError


def number_problem(value: Any, kind: type = float, *, minimum: float | None = None, exclusive: bool = False,
                   maximum: float | None = None) -> str | None:
    """Why ``value`` is not a finite ``kind`` in ``[minimum, maximum]`` (``(minimum, ...`` when
    ``exclusive``), or None when it is. Booleans are not numbers; an int is a float."""
    noun = "a whole number" if kind is int else "a finite number"
    if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and not isinstance(value, int)):
        return f"must be {noun}, got {value!r}"
    low_ok = minimum is None or (value > minimum if exclusive else value >= minimum)
    if not math.isfinite(value) or not low_ok or (maximum is not None and value > maximum):
        if minimum is not None and maximum is not None:
            rng = f" in {'(' if exclusive else '['}{minimum:g}, {maximum:g}]"
        elif minimum is not None:
            rng = f" {'>' if exclusive else '>='} {minimum:g}"
        elif maximum is not None:
            rng = f" <= {maximum:g}"
        else:
            rng = ""
        return f"must be {noun}{rng}, got {value}"
    return None


def check_number(value: Any, field: str, kind: type = float, *, minimum: float | None = None, exclusive: bool = False,
                 maximum: float | None = None, fix: str = "", optional: bool = False) -> Any:
    """``value`` when it is a finite ``kind`` within the bounds (None passes when ``optional``),
    else a one-line :class:`ShipyardError` naming ``field``."""
    if value is None and optional:
        return None
    problem = number_problem(value, kind, minimum=minimum, exclusive=exclusive, maximum=maximum)
    if problem:
        raise ShipyardError(field, problem, fix)
    return value


def _shown_bound(bound: float | None, kind: type) -> str:
    """A bound as an error line writes it: whole for an ``int`` parameter (2147483647, not 2.14748e+09)."""
    return f"{int(bound)}" if kind is int and bound is not None and math.isfinite(bound) else f"{bound:g}"


def number(kind: type, *, minimum: float | None = None, exclusive: bool = False,
           maximum: float | None = None, example: str = "") -> Callable[[str], float | int]:
    """A parser for a finite ``int`` or ``float`` in ``[minimum, maximum]`` (``(minimum, ...`` when
    ``exclusive``)."""
    noun = "a whole number" if kind is int else "a number"

    def parse(text: str) -> float | int:
        fix = f" (fix: e.g. {example})" if example else ""
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}{fix}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number{fix}")
        if number_problem(value, kind, minimum=minimum, exclusive=exclusive, maximum=maximum):
            bound, low = (">" if exclusive else ">="), _shown_bound(minimum, kind)
            rng = f"{bound} {low}" if maximum is None else \
                f"in {'(' if exclusive else '['}{low}, {_shown_bound(maximum, kind)}]"
            raise argparse.ArgumentTypeError(f"{text} must be {rng}{fix}")
        return value

    parse.__name__ = kind.__name__
    return parse


def positive_float(example: str = "") -> Callable[[str], float | int]:
    """A finite float > 0."""
    return number(float, minimum=0, exclusive=True, example=example)


def positive_int(example: str = "") -> Callable[[str], float | int]:
    """An int >= 1."""
    return number(int, minimum=1, example=example)


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of an already sorted, non-empty list (q in [0, 1]; numpy's default)."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)
