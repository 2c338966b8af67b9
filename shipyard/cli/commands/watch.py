"""``shipyard watch``: is production still inside the envelope the champion was qualified on?

Reads the live figures of a served model from the Prometheus that scrapes its vLLM pods over a
window (:mod:`shipyard.serving.watch`): input and output lengths, load per replica, TTFT p99 at that
load against the benchmark curve, the peak load per replica against the qualified capacity (when the
benchmark replayed a recorded workload: live peak / recorded peak, the headroom below the goodput at
the SLO), the prefix-cache hit rate; compares each with the champion's record, or with the
envelope the model image carries in its signed SLO evidence (``--model``: the
package step's ``oci://...@sha256:...``, verified with the cluster's trust key). Exit status: 0 within the envelope, 1 drifted (the dimensions are named and a
re-qualification run on the live traffic is proposed), 2 bad input, 3 Prometheus does not answer.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from shipyard.cli.output import add_output_option, emit
from shipyard.core.errors import ShipyardError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("watch", help="compare a served model's live traffic with the envelope it was qualified on",
                       description="Input and output lengths, load per replica, TTFT p99 at that load, the peak "
                                   "load per replica (against the capacity a replayed recorded workload qualified) "
                                   "and the prefix-cache hit rate, from Prometheus over a window, against the "
                                   "champion's benchmark. Exit 0 within the envelope, 1 drifted, 3 Prometheus "
                                   "unreachable.")
    p.add_argument("--prometheus", required=True, help="the Prometheus API base URL, e.g. http://prometheus:9090")
    p.add_argument("--prometheus-token-file", help="a file holding a bearer token for Prometheus (or a proxy)")
    p.add_argument("--model-name", required=True, help="the served model name (vLLM's model_name label)")
    qualified = p.add_mutually_exclusive_group(required=True)
    qualified.add_argument("--champion",
                           help="the champion's record: the select step's decision folder (selection.json) or a candidate.json")
    qualified.add_argument("--model", metavar="URI",
                           help="the served modelcar, oci://REGISTRY/REPO@sha256:...: its signed SLO evidence is the envelope")
    p.add_argument("--key", help="with --model: the PEM public key its attestations must be signed with "
                                 "(default: SHIPYARD_ATTESTATION_PUBLIC_KEY or SHIPYARD_ATTESTATION_PUBLIC_KEY_FILE)")
    p.add_argument("--insecure-tls", action="store_true", help="with --model: skip TLS verification (test registries only)")
    p.add_argument("--window", default="30m", help="how far back to look: 30m (default), 2h, 900s")
    p.add_argument("--selector", default="", help='more label matchers, e.g. namespace="llm"')
    p.add_argument("--tolerance", help='relative change per dimension as JSON, e.g. '
                                       '{"input_length": 0.3, "ttft": 0.5, "capacity": 0.1}')
    add_output_option(p, default_help="the verdict and one line per dimension")
    p.set_defaults(func=_watch)


def _token(path: str) -> str:
    """The bearer token in ``path`` (one line; ``-``: standard input)."""
    from shipyard.core.jsonargs import read_user_file

    return read_user_file(path, "--prometheus-token-file", "file holding the token (a mounted Secret's key)").strip()


def _envelope(args: argparse.Namespace) -> tuple[Any, str]:
    """The envelope to compare with, from ``--champion`` or ``--model``, and the base model (or "")."""
    from shipyard.gates.selection import load_selection
    from shipyard.serving.watch import envelope_from_record

    if args.model:
        from shipyard.core import contract
        from shipyard.core.errors import refuse_credentials
        from shipyard.oci.attestation import KEY_FIX, read_key_file, trust_key
        from shipyard.oci.reference import require_pinned
        from shipyard.steps.watch import envelope_of_model

        refuse_credentials(args.model, "--model")
        require_pinned(args.model, "--model", how_to_allow="give the digest the package step printed")
        key = read_key_file(args.key, "--key", private=False) if args.key else trust_key()
        if key is None:
            raise ShipyardError("--key", "is required with --model (no SHIPYARD_ATTESTATION_PUBLIC_KEY is set)",
                                f"give --key public-key.pem (the Secret {contract.ATTESTATION_TRUST_SECRET}'s "
                                "public-key.pem); " + KEY_FIX)
        return envelope_of_model(args.model, key, field="--model", insecure_tls=args.insecure_tls)
    try:
        champion = Path(args.champion)
        # a candidate.json file is read from its folder, as the promote pipeline's champion is
        record = load_selection(str(champion.parent if champion.name == "candidate.json" and champion.is_file()
                                    else champion))["champion"]
    except ShipyardError as err:  # said as the option the user gave
        raise ShipyardError("--champion", err.problem, "pass the select step's decision folder (selection.json) "
                            "or the champion's candidate.json") from None
    return envelope_from_record(record), ""


def _watch(args: argparse.Namespace) -> int:
    from shipyard.serving.prometheus import PrometheusAPI
    from shipyard.serving.watch import check_selector, format_report, parse_tolerance, parse_window
    from shipyard.steps.watch import watch_model

    check_selector(args.selector)
    window_s = parse_window(args.window)
    tolerance = parse_tolerance(args.tolerance)
    token = _token(args.prometheus_token_file) if args.prometheus_token_file else ""
    api = PrometheusAPI(args.prometheus, token=token)  # a bad URL: one line, before anything is read
    envelope, base = _envelope(args)
    result = watch_model(api, args.model_name, window_s, envelope, tolerance, selector=args.selector,
                         model_uri=args.model or "", base_model_uri=base)
    emit(result, args.output, lambda: format_report(result))
    return 1 if result["drifted"] else 0
