"""``shipyard track replay WORK_DIR``: apply the MLflow records a local run kept while MLflow was down."""

from __future__ import annotations

import argparse

from shipyard.cli.output import add_output_option, emit
from shipyard.core.errors import EXIT_FAILED, ShipyardError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("track", help="MLflow tracking of local runs (replay what was kept during an outage)",
                       description="MLflow tracking of local runs: `track replay WORK_DIR` logs what a run kept "
                                   "while MLflow was down.")
    group = p.add_subparsers(dest="track_command", metavar="SUBCOMMAND")
    replay = group.add_parser(
        "replay", help="apply the pending tracking payloads of a local run's work dir (idempotent)",
        description="Apply every payload in WORK_DIR/tracking-pending (step runs, the champion's registration, "
                    "the pipeline run's final state) once the MLflow server answers, and close parent runs "
                    "left RUNNING with their run's final state. Running it twice changes nothing.")
    replay.add_argument("work_dir", metavar="WORK_DIR", help="the --work-dir of a `shipyard run --local`")
    add_output_option(replay, default_help="one line per payload applied")
    replay.set_defaults(func=_replay)
    p.set_defaults(func=_usage)


def _usage(args: argparse.Namespace) -> int:
    raise ShipyardError("track", "needs a subcommand", "run `shipyard track replay WORK_DIR`; see `shipyard track --help`")


def _replay(args: argparse.Namespace) -> int:
    from shipyard.tracking.pending import replay

    quiet = args.output is not None
    result = replay(args.work_dir, echo=(lambda line: None) if quiet else print)
    if quiet:
        emit(result, args.output)
    elif not result["applied"] and not result["errors"]:
        print("nothing pending")
    return EXIT_FAILED if result["errors"] or result["pending"] else 0
