"""``shipyard runs --host URL``: the latest KFP runs, as a table or ``-o json|yaml``."""

from __future__ import annotations

import argparse
from typing import Any

from shipyard.cli.commands.submit import add_kfp_options, connect
from shipyard.cli.output import add_output_option, emit
from shipyard.core.numbers import number


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("runs", help="list the latest runs on a KFP server",
                       description="List the latest runs on a Kubeflow Pipelines server (name, state, created).")
    add_kfp_options(p)
    p.add_argument("--experiment", default="", help="only runs of this experiment")
    p.add_argument("--limit", type=number(int, minimum=1, maximum=1000, example="20"), default=20,
                   help="how many runs, 1-1000 (default 20)")
    add_output_option(p, default_help="a table")
    p.set_defaults(func=_runs)


def format_runs(runs: list[dict[str, Any]]) -> str:
    """The human table: run id, state, creation time, name."""
    if not runs:
        return "no runs"
    width = max(len(r["name"] or "") for r in runs)
    lines = [f"{'RUN ID':<36}  {'STATE':<10} {'CREATED':<26} NAME"]
    lines += [f"{r['run_id']:<36}  {r['state'] or '-':<10} {r['created_at']:<26} {r['name'] or '':<{width}}".rstrip()
              for r in runs]
    return "\n".join(lines)


def _runs(args: argparse.Namespace) -> int:
    runs = connect(args).runs(args.experiment, args.limit)
    emit(runs, args.output, lambda: format_runs(runs))
    return 0
