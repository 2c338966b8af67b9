"""Output conventions of every ``shipyard`` command (kubectl/kfp style), decided once:

* ``-o/--output FORMAT`` chooses how a command that prints objects prints them to stdout:
  ``json`` or ``yaml`` (machine-readable, the whole object), default a human table or text.
  ``-o`` takes only a format; a value that looks like a path is refused with a one-line error
  that names ``--out-file``.
* ``--out-file PATH`` writes the command's document (a manifest, a plan) to a file instead:
  atomically (a temporary file and a rename), with normal 0644 modes, and a read-only folder or
  a full disk is one line naming ``--out-file``. ``--out-file -`` means stdout. Only a regular
  file is replaced: a symlink is followed (the file it points to is replaced, the link stays), a
  character device or pipe (``/dev/null``, ``/dev/stdout``) is written through, never replaced,
  and ``/dev/full`` is the one-line "no space left" error.

Other command modules (``images build`` too) call :func:`add_output_option`,
:func:`add_out_file_option`, :func:`render` and :func:`emit`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import yaml

from shipyard.core.files import atomic_write_text
from shipyard.core.redact import redact

FORMATS = ("json", "yaml")


def _format_type(formats: Sequence[str]) -> Callable[[str], str]:
    def parse(value: str) -> str:
        text = value.strip().lower()
        if text in formats:
            return text
        if text in ("text", "table", "wide") and "text" in formats:
            return "text"
        looks_like_path = any(c in value for c in "/\\.") or value.strip() == "-"
        hint = f"; to write a file use --out-file {value}" if looks_like_path else ""
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an output format (fix: use one of {', '.join(formats)}{hint})")

    parse.__name__ = "format"
    return parse


def add_output_option(parser: argparse.ArgumentParser, formats: Sequence[str] = FORMATS,
                      default_help: str = "a human-readable table") -> None:
    """``-o/--output json|yaml``: print the command's object(s) to stdout in that format.

    Without it the command prints ``default_help``. ``--json`` stays as an alias of ``-o json``
    where a command had it.
    """
    parser.add_argument("-o", "--output", type=_format_type(formats), default=None, metavar="FORMAT",
                        choices=list(formats), help=f"print as {' or '.join(formats)} (default: {default_help})")


def add_out_file_option(parser: argparse.ArgumentParser, what: str = "the document") -> None:
    """``--out-file PATH``: write ``what`` to a file (atomic, mode 0644) instead of stdout."""
    parser.add_argument("--out-file", metavar="PATH", default=None,
                        help=f"write {what} to this file (atomically, mode 0644; - is stdout; a symlink is followed, "
                             "a device such as /dev/null written through)")


def render(obj: Any, fmt: str) -> str:
    """``obj`` as ``json`` (indented, keys in order) or ``yaml`` (block style), ending in a newline."""
    if fmt == "json":
        return json.dumps(obj, indent=2, default=str) + "\n"
    if fmt == "yaml":
        if isinstance(obj, list) and obj and all(isinstance(d, dict) and "kind" in d for d in obj):
            return yaml.safe_dump_all(obj, sort_keys=False)
        return yaml.safe_dump(json.loads(json.dumps(obj, default=str)), sort_keys=False)
    raise ValueError(f"unknown format {fmt!r}")


def emit(obj: Any, fmt: str | None, text: Callable[[], str] | None = None) -> None:
    """Print ``obj`` as ``fmt`` (json/yaml), or ``text()`` (the human form) when ``fmt`` is None;
    either way through :func:`shipyard.core.redact.redact`, so no credential is printed (a
    manifest, which holds Secret references by design, is printed by its command, not here)."""
    if fmt is None:
        out = text() if text is not None else render(obj, "yaml")
        sys.stdout.write(redact(out if out.endswith("\n") else out + "\n"))
    else:
        sys.stdout.write(redact(render(obj, fmt)))


#: ``--out-file -``: the document goes to stdout
STDOUT = "-"


def write_out_file(path: str, text: str) -> None:
    """Write ``text`` to ``--out-file PATH``: whole or not at all, mode 0644, one-line errors;
    ``-`` is stdout, a device is written through (see the module docstring)."""
    if path == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    atomic_write_text(path, text, field="--out-file")
