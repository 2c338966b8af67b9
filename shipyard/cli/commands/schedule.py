"""``shipyard schedule PIPELINE --host URL (--cron EXPR | --every DURATION)``: a KFP recurring run."""

from __future__ import annotations

import argparse

from shipyard.cli.commands.submit import (
    add_kfp_options,
    add_pipeline_options,
    compiled_package,
    connect,
    pipeline_params,
    raw_params,
)
from shipyard.core.numbers import number
from shipyard.run.kfp_client import parse_duration, to_kfp_cron


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "schedule", help="create a KFP recurring run (e.g. re-quantize nightly)",
        description="Upload a compiled pipeline (or compile one by name with your --cluster-config and "
                    "--image-registry) and create a KFP recurring run of it. KFP's cron has six fields, seconds "
                    "first; a five-field expression gets a leading 0 and is echoed back.",
    )
    add_pipeline_options(p)
    add_kfp_options(p)
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help="cron expression: five fields ('0 3 * * *'), six with seconds first, or @daily")
    when.add_argument("--every", help="interval: 30m, 6h, 1d, 1w, 1h30m or seconds")
    p.add_argument("--max-concurrency", type=number(int, minimum=1, maximum=10, example="1"), default=1, help="runs allowed at once, 1-10 (default 1)")
    p.add_argument("--no-catchup", action="store_true", help="do not backfill missed intervals after a pause")
    p.add_argument("--name", default="", help="display name of the recurring run")
    p.set_defaults(func=_schedule)


def _schedule(args: argparse.Namespace) -> int:
    # Validate the schedule before touching the network.
    cron = to_kfp_cron(args.cron) if args.cron else None
    if cron is not None:
        print(f"cron (KFP, seconds first): {cron}")
    else:
        print(f"every {parse_duration(args.every)} s")
    raw = raw_params(args)
    package, tmp = compiled_package(args)
    with tmp:
        params = pipeline_params(raw, package)
        kfp = connect(args)
        result = kfp.schedule(package, args.experiment, params, cron=args.cron, every=args.every,
                              max_concurrency=args.max_concurrency, no_catchup=args.no_catchup, name=args.name,
                              service_account=args.service_account)
    print(f"recurring run {result['recurring_run_id']} of {package.name} ({package.version_name}), "
          f"max concurrency {args.max_concurrency}, catchup {'off' if args.no_catchup else 'on'}")
    return 0
