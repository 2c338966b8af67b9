"""The ``shipyard`` command line.

Subcommands live in :mod:`shipyard.cli.commands`, one module each; every module defines
``add_parser(subparsers)`` and registers its handler with ``parser.set_defaults(func=...)``.

Every error ends the command with one line on stderr, ``shipyard: error: FIELD: PROBLEM (fix:
FIX)``, and the exit status of :mod:`shipyard.core.errors` (0 ok, 1 a run or gate said no, 2 bad
input or usage, 3 a service unreachable, 70 a bug, 130 interrupted, 141 stdout closed early).
Output flags follow :mod:`shipyard.cli.output` (``-o json|yaml``, ``--out-file PATH``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence
from typing import NoReturn

from shipyard import __version__
from shipyard.cli import commands
from shipyard.core.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    ShipyardError,
    file_error,
    redact,
)
from shipyard.core.interrupts import signal_name, sigterm_as_interrupt


class ShipyardArgumentParser(argparse.ArgumentParser):
    """argparse with one-line usage errors: ``shipyard: error: ... (fix: see shipyard CMD --help)``."""

    def error(self, message: str) -> NoReturn:
        message = message.removeprefix("argument ")
        if "(fix: " not in message:
            message += f" (fix: see `{self.prog} --help`)"
        _print_error(message)
        sys.exit(EXIT_USAGE)


def _print_error(line: str) -> None:
    text = " ".join(redact(line).split())
    try:
        print(f"shipyard: error: {text}", file=sys.stderr, flush=True)
    except (BrokenPipeError, OSError):
        pass


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand of :mod:`shipyard.cli.commands`."""
    parser = ShipyardArgumentParser(
        prog="shipyard",
        description="Compress, evaluate, benchmark, package, deploy and track LLMs with Kubeflow Pipelines.",
        epilog="exit status: 0 ok, 1 a run/gate/check said no, 2 bad input or usage, 3 a service unreachable, "
               "70 internal error, 130 interrupted, 141 stdout closed (see README, CLI)",
    )
    parser.add_argument("--version", action="version", version=f"shipyard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.add_parser(sub)
    return parser


#: commands that build pipeline graphs (and so gain from :mod:`shipyard.run.kfp_speed`)
_BUILDS_PIPELINES = frozenset({"run", "submit", "schedule", "compile"})


def _quiet_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null so the interpreter's final flush is silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``shipyard`` script; returns the exit status (see :mod:`shipyard.core.errors`)."""
    sigterm_as_interrupt()
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return EXIT_USAGE
        if args.command in _BUILDS_PIPELINES:
            from shipyard.run.kfp_speed import install

            install()  # pipelines build in ~1 s instead of ~10 s of inspect.stack() (see shipyard.run.kfp_speed)
        code = int(args.func(args) or 0)
        sys.stdout.flush()
        return code
    except ShipyardError as err:
        _print_error(str(err))
        return err.exit_code
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt as err:
        _print_error(f"interrupted by {signal_name(err)} (fix: run the command again; finished outputs are kept, "
                     "partial ones removed)")
        return EXIT_INTERRUPTED
    except OSError as err:
        _print_error(str(file_error(err, action="use")))
        return EXIT_USAGE
    except Exception as err:
        if os.environ.get("SHIPYARD_DEBUG"):
            raise
        first = (str(err).splitlines() or [""])[0][:300]
        _print_error(f"internal: {type(err).__name__}: {first} (fix: rerun with SHIPYARD_DEBUG=1 for the traceback "
                     "and report it)")
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
