"""``shipyard runs --host URL``: the latest KFP runs."""

from __future__ import annotations

import argparse

from shipyard.commands.submit import add_kfp_options, connect


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("runs", help="list the latest runs on a KFP server")
    add_kfp_options(p)
    p.add_argument("--experiment", default="", help="only runs of this experiment")
    p.add_argument("--limit", type=int, default=20, help="how many runs (default 20)")
    p.set_defaults(func=_runs)


def _runs(args: argparse.Namespace) -> int:
    runs = connect(args).runs(args.experiment, args.limit)
    if not runs:
        print("no runs")
        return 0
    width = max(len(r["name"] or "") for r in runs)
    for r in runs:
        print(f"{r['run_id']}  {r['state'] or '-':<10} {r['created_at']:<26} {r['name']:<{width}}")
    return 0
