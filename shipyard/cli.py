"""The ``shipyard`` command line.

Subcommands live in :mod:`shipyard.commands`, one module each; every module defines
``add_parser(subparsers)`` and registers its handler with ``parser.set_defaults(func=...)``.
A :class:`~shipyard.errors.ShipyardError` ends the command with one line and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from shipyard import __version__, commands
from shipyard.errors import ShipyardError
from shipyard.interrupts import sigterm_as_interrupt


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand of :mod:`shipyard.commands`."""
    parser = argparse.ArgumentParser(
        prog="shipyard",
        description="Compress, evaluate, benchmark, package, deploy and track LLMs with Kubeflow Pipelines.",
    )
    parser.add_argument("--version", action="version", version=f"shipyard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``shipyard`` script."""
    sigterm_as_interrupt()
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ShipyardError as err:
        print(f"shipyard: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("shipyard: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
