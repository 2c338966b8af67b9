"""``shipyard watch``: is production still inside the envelope the champion was qualified on?

Reads the live figures of a served model from the Prometheus that scrapes its vLLM pods over a
window (:mod:`shipyard.serving.watch`): input and output lengths, load per replica, TTFT p99 at that
load against the benchmark curve, the prefix-cache hit rate; compares each with the champion's
record. Exit status: 0 within the envelope, 1 drifted (the dimensions are named and a
re-qualification run on the live traffic is proposed), 2 bad input, 3 Prometheus does not answer.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from shipyard.cli.output import add_output_option, emit
from shipyard.core.errors import ShipyardError

_WINDOW = re.compile(r"^(\d+)([smh])$")


def _window(text: str) -> int:
    """``30m``, ``2h``, ``900s`` as seconds."""
    found = _WINDOW.match(text.strip())
    if not found:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a window like 30m, 2h or 900s")
    return int(found.group(1)) * {"s": 1, "m": 60, "h": 3600}[found.group(2)]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("watch", help="compare a served model's live traffic with the envelope it was qualified on",
                       description="Input and output lengths, load per replica, TTFT p99 at that load and the "
                                   "prefix-cache hit rate, from Prometheus over a window, against the champion's "
                                   "benchmark. Exit 0 within the envelope, 1 drifted, 3 Prometheus unreachable.")
    p.add_argument("--prometheus", required=True, help="the Prometheus API base URL, e.g. http://prometheus:9090")
    p.add_argument("--prometheus-token-file", help="a file holding a bearer token for Prometheus (or a proxy)")
    p.add_argument("--model-name", required=True, help="the served model name (vLLM's model_name label)")
    p.add_argument("--champion", required=True,
                   help="the champion's record: the select step's decision folder (selection.json) or a candidate.json")
    p.add_argument("--window", type=_window, default=1800, help="how far back to look: 30m (default), 2h, 900s")
    p.add_argument("--selector", default="", help='more label matchers, e.g. namespace="llm"')
    p.add_argument("--tolerance", help='relative change per dimension as JSON, e.g. {"input_length": 0.3, "ttft": 0.5}')
    add_output_option(p, default_help="the verdict and one line per dimension")
    p.set_defaults(func=_watch)


def _token(path: str) -> str:
    """The bearer token in ``path`` (one line; ``-``: standard input)."""
    from shipyard.core.jsonargs import read_user_file

    return read_user_file(path, "--prometheus-token-file", "file holding the token (a mounted Secret's key)").strip()


def _watch(args: argparse.Namespace) -> int:
    from shipyard.gates.selection import load_selection
    from shipyard.serving.prometheus import PrometheusAPI
    from shipyard.serving.watch import (
        check_window,
        compare,
        envelope_from_record,
        format_report,
        parse_tolerance,
        read_live,
    )

    if args.selector and not re.fullmatch(r'[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"[^"\\]*"'
                                          r'(\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"[^"\\]*")*', args.selector):
        raise ShipyardError("--selector", f"{args.selector[:80]!r} is not a list of label matchers",
                            'write them as PromQL does: namespace="llm",pod=~"qwen-.*"')
    check_window(args.window)
    tolerance = parse_tolerance(args.tolerance)
    token = _token(args.prometheus_token_file) if args.prometheus_token_file else ""
    api = PrometheusAPI(args.prometheus, token=token)  # a bad URL: one line, before anything is read
    try:
        champion = Path(args.champion)
        # a candidate.json file is read from its folder, as the promote pipeline's champion is
        record = load_selection(str(champion.parent if champion.name == "candidate.json" and champion.is_file()
                                    else champion))["champion"]
    except ShipyardError as err:  # said as the option the user gave
        raise ShipyardError("--champion", err.problem, "pass the select step's decision folder (selection.json) "
                            "or the champion's candidate.json") from None
    envelope = envelope_from_record(record)
    result = compare(envelope, read_live(api, args.model_name, args.window, args.selector), tolerance)
    emit(result, args.output, lambda: format_report(result))
    return 1 if result["drifted"] else 0
