"""The one reader of the JSON records steps leave in their output folders (``summary.json``,
``results.json``, ``candidate.json``, ``selection.json``, ``tuning.json``).

A step's output is a folder; the next step is handed that folder (or the file itself).
:func:`read_record` finds ``<folder>/<name>``, reads it and checks it, and says what is wrong in
one :class:`~shipyard.core.errors.ShipyardError` line naming ``field``: no record there, a file
that cannot be read or is not JSON, or a record of another kind (``check`` says why).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError


def record_path(path: str | os.PathLike[str], name: str) -> Path:
    """``path/name`` when ``path`` is a folder, else ``path`` itself."""
    p = Path(path)
    return p / name if p.is_dir() else p


def read_record(path: str | os.PathLike[str], name: str, *, field: str, what: str, fix: str,
                check: Callable[[dict[str, Any]], str | None] | None = None) -> dict[str, Any]:
    """The JSON object at ``path`` (a step's output folder holding ``name``, or the file).

    ``what`` names the record in the "no ... at PATH" line; ``check(record)`` returns why a record
    is not the kind wanted (the line then reads ``PATH <why>``), or None when it is.
    """
    p = record_path(path, name)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise ShipyardError(field, f"no {what} at {p}", fix) from None
    except (OSError, ValueError) as err:
        raise ShipyardError(field, f"cannot read {p}: {type(err).__name__}: {err}", fix) from None
    problem = "is not a JSON object" if not isinstance(data, dict) else (check(data) if check else None)
    if problem:
        raise ShipyardError(field, f"{p} {problem}", fix)
    return data


def read_optional_record(path: str | os.PathLike[str], name: str,
                         check: Callable[[dict[str, Any]], str | None] | None = None) -> dict[str, Any] | None:
    """Like :func:`read_record` for a record a step may or may not leave: None when it is
    missing, unreadable or not of the kind ``check`` wants."""
    try:
        return read_record(path, name, field=name, what=name, fix="", check=check)
    except ShipyardError:
        return None
