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
from typing import Any, NoReturn

from shipyard import __version__
from shipyard.cli import commands
from shipyard.core.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    ShipyardError,
    cap_line,
    file_error,
)
from shipyard.core.interrupts import signal_name, sigterm_as_interrupt
from shipyard.core.redact import install_log_redaction, redact


class ShipyardArgumentParser(argparse.ArgumentParser):
    """argparse with one-line usage errors: ``shipyard: error: ... (fix: see shipyard CMD --help)``."""

    def _print_message(self, message: str, file: Any = None) -> None:
        """argparse's own printer swallows a closed stdout; here ``--help``/``--version`` into a
        closed pipe raise :class:`BrokenPipeError`, which :func:`main` turns into a silent 141."""
        if not message:
            return
        file = file or sys.stderr
        try:
            file.write(message)
            if file is sys.stdout:
                file.flush()
        except BrokenPipeError:
            if file is sys.stdout:
                raise
        except (AttributeError, OSError):
            pass

    def error(self, message: str) -> NoReturn:
        message = message.removeprefix("argument ")
        if "(fix: " not in message:
            message += f" (fix: see `{self.prog} --help`)"
        _print_error(message)
        sys.exit(EXIT_USAGE)


def _print_error(line: str) -> None:
    text = cap_line(" ".join(redact(line).split()))
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


def _reopen_closed_std_fds() -> None:
    """A closed stdin/stdout/stderr (``<&-``, ``>&-``) gets /dev/null, so the command runs (stdin is
    empty, output is dropped) and no file the command opens later takes descriptor 0, 1 or 2."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
            if getattr(sys, name) is not None:
                continue
        except OSError:
            try:
                devnull = os.open(os.devnull, os.O_RDWR)
            except OSError:
                continue
            if devnull != fd:
                os.dup2(devnull, fd)
                os.close(devnull)
        try:
            setattr(sys, name, open(fd, mode, closefd=False, encoding="utf-8", errors="replace"))  # noqa: SIM115
        except OSError:
            pass


#: credentials read from the environment by shipyard or its libraries (MLflow, huggingface_hub, minio)
_CREDENTIAL_ENV = ("KF_PIPELINES_TOKEN", "KF_PIPELINES_COOKIE", "MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME",
                   "MLFLOW_TRACKING_PASSWORD", "HF_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                   "AWS_SESSION_TOKEN", "SHIPYARD_REGISTRY_USERNAME", "SHIPYARD_REGISTRY_PASSWORD")


def _strip_credential_env() -> None:
    """A credential exported from a file saved on Windows ends in ``\\r\\n``: stripped before any
    library builds a header from it (a control character inside is reported where it is used)."""
    for name in _CREDENTIAL_ENV:
        value = os.environ.get(name)
        if value is not None and value != value.strip():
            os.environ[name] = value.strip()


def _debug() -> bool:
    """``SHIPYARD_DEBUG`` as a boolean (``0``/``false``/``no``/``off`` keep tracebacks off)."""
    from shipyard.core.env import env_bool

    try:
        return env_bool("SHIPYARD_DEBUG")
    except ShipyardError:
        return False


def _flush_stdout() -> int | None:
    """Flush stdout; a closed pipe is :data:`EXIT_BROKEN_PIPE`, silently."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except (OSError, ValueError, AttributeError):
        pass
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``shipyard`` script; returns the exit status (see :mod:`shipyard.core.errors`)."""
    sigterm_as_interrupt()
    _reopen_closed_std_fds()
    install_log_redaction()
    _strip_credential_env()
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as done:  # --help, --version: printed, then a closed pipe is 141, silently
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else EXIT_USAGE)
            broken = _flush_stdout()
            return broken if broken is not None else code
        if not getattr(args, "func", None):
            parser.print_help()
            return EXIT_USAGE
        if args.command in _BUILDS_PIPELINES or getattr(args, "requalify", False):
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
    except UnicodeDecodeError as err:  # a reader that missed shipyard.core.jsonargs.read_text
        _print_error(f"input: a file is not UTF-8 text ({err.reason} at byte {err.start}) "
                     "(fix: give a text file saved as UTF-8)")
        return EXIT_USAGE
    except Exception as err:
        if _debug():
            raise
        first = (str(err).splitlines() or [""])[0][:300]
        _print_error(f"internal: {type(err).__name__}: {first} (fix: rerun with SHIPYARD_DEBUG=1 for the traceback "
                     "and report it)")
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
