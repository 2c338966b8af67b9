"""argparse ``type=`` functions that refuse bad numbers at parse time, as one line.

``float("inf")``, ``float("nan")``, negative and zero values are what a typo or a unit mix-up
gives; each type names what it accepts, and the parser prints ``shipyard: error: --flag: ...``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def number(kind: type, *, minimum: float | None = None, exclusive: bool = False,
           maximum: float | None = None, example: str = "") -> Callable[[str], float | int]:
    """A parser for a finite ``int`` or ``float`` in ``[minimum, maximum]`` (``(minimum, ...`` when
    ``exclusive``)."""
    noun = "a whole number" if kind is int else "a number"

    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}" + (f" (fix: e.g. {example})" if example else "")) from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number" + (f" (fix: e.g. {example})" if example else ""))
        low_ok = minimum is None or (value > minimum if exclusive else value >= minimum)
        if not low_ok or (maximum is not None and value > maximum):
            bound = ">" if exclusive else ">="
            rng = f"{bound} {minimum:g}" if maximum is None else f"in {'(' if exclusive else '['}{minimum:g}, {maximum:g}]"
            raise argparse.ArgumentTypeError(f"{text} must be {rng}" + (f" (fix: e.g. {example})" if example else ""))
        return value

    parse.__name__ = kind.__name__
    return parse


def positive_float(example: str = "") -> Callable[[str], float | int]:
    """A finite float > 0."""
    return number(float, minimum=0, exclusive=True, example=example)


def positive_int(example: str = "") -> Callable[[str], float | int]:
    """An int >= 1."""
    return number(int, minimum=1, example=example)
