"""``shipyard workload``: fingerprint your traffic, render a trace from it, check a benchmark against it.

* ``shipyard workload fingerprint SRC --format mooncake|azure|burstgpt|chat|prometheus``: the
  :mod:`~shipyard.benchmarking.workload` fingerprint of a recorded trace, a chat log (``--privacy
  tokenize --model DIR``: tokenized locally, no text kept) or a Prometheus server's vLLM metrics
  (``SRC`` is its URL; ``--start``/``--end`` the window, ``--selector`` the labels). ``--block-size``
  is the size the trace's ``hash_ids`` were made at (Mooncake's own traces: 512; vLLM's on GPUs: 16);
  ``--max-model-len`` refuses requests longer than the model's context. Prints the summary line
  (or ``-o json|yaml``); ``--out-file`` writes the fingerprint.
* ``shipyard workload render FINGERPRINT --out-file trace.jsonl``: a seeded synthetic Mooncake
  trace sampled from the fingerprint (:mod:`~shipyard.benchmarking.workload_render`), for
  guidellm's ``replay`` profile, AIPerf or inference-perf; prints its own fingerprint's summary.
* ``shipyard workload fidelity FINGERPRINT --guidellm guidellm.json [--metrics-before F --metrics-after F]``:
  the workload fidelity line and verdict (:mod:`~shipyard.benchmarking.workload_fidelity`) of a
  benchmark: exit 0 valid, 1 invalid.

Every bad input (unsorted or negative timestamps, lengths beyond ``--max-model-len``, a block size
the trace's hash_ids do not match, an empty Prometheus window, text under ``--privacy strict``) is
one line naming the field, before anything runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from shipyard.cli.output import add_out_file_option, add_output_option, emit, write_out_file
from shipyard.core.errors import ShipyardError
from shipyard.core.numbers import number, positive_int


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("workload", help="fingerprint your own traffic, render a trace from it, check a benchmark's fidelity",
                       description="A workload fingerprint (lengths, arrivals, sessions, prefix sharing) from a recorded "
                                   "trace, chat logs or vLLM's Prometheus metrics; a synthetic trace sampled from it; "
                                   "and the check that a benchmark sent and served what it describes.")
    group = p.add_subparsers(dest="workload_command", metavar="SUBCOMMAND")

    fp = group.add_parser("fingerprint", help="the fingerprint of a trace, a chat log or a Prometheus window")
    fp.add_argument("source", metavar="SRC", help="the trace or chat-log file, or the Prometheus URL (--format prometheus)")
    fp.add_argument("--format", required=True, choices=("mooncake", "azure", "burstgpt", "chat", "prometheus"),
                    help="mooncake (JSON lines with hash_ids), azure (CSV TIMESTAMP,ContextTokens,GeneratedTokens), "
                         "burstgpt (its CSV), chat (JSON lines of messages/output/timestamp/session) or prometheus")
    fp.add_argument("--block-size", type=positive_int("16"),
                    help="tokens per hash id in the trace (Mooncake's: 512), or vLLM's block size for chat logs (16)")
    fp.add_argument("--max-model-len", type=positive_int("2048"), help="refuse requests longer than this context")
    fp.add_argument("--slo-class", default="interactive", choices=("interactive", "batch"),
                    help="interactive (latency-bound, default) or batch (throughput-bound)")
    fp.add_argument("--privacy", default="strict", choices=("strict", "tokenize"),
                    help="strict (default): refuse any text in the input; tokenize: tokenize chat logs locally, keep no text")
    fp.add_argument("--model", help="chat logs: the model folder whose tokenizer and chat template count the tokens")
    fp.add_argument("--start", help="prometheus: the window's start (Unix seconds or ISO 8601)")
    fp.add_argument("--end", help="prometheus: the window's end (Unix seconds or ISO 8601)")
    fp.add_argument("--selector", default="", help='prometheus: the series\' labels, e.g. {model_name="llm"}')
    fp.add_argument("--step", type=positive_int("60"), help="prometheus: seconds per point of the rate series")
    add_output_option(fp, default_help="the summary line")
    add_out_file_option(fp, "the fingerprint (JSON)")
    fp.set_defaults(func=_fingerprint)

    rd = group.add_parser("render", help="a synthetic Mooncake trace sampled from a fingerprint")
    rd.add_argument("fingerprint", metavar="FINGERPRINT", help="a fingerprint file")
    rd.add_argument("--requests", type=positive_int("200"), help="requests in the trace (default: the fingerprint's)")
    rd.add_argument("--seed", type=number(int, minimum=0, example="0"), default=0, help="the sampler's seed (default 0)")
    rd.add_argument("--block-size", type=positive_int("16"), help="tokens per hash id (default: the fingerprint's)")
    rd.add_argument("--max-model-len", type=positive_int("2048"), help="draw only requests that fit this context")
    rd.add_argument("--out-file", metavar="PATH", required=True, help="the trace to write (Mooncake JSON lines)")
    rd.set_defaults(func=_render)

    fd = group.add_parser("fidelity", help="did a benchmark send and serve what the fingerprint describes?")
    fd.add_argument("fingerprint", metavar="FINGERPRINT", help="the fingerprint the benchmark replayed")
    fd.add_argument("--guidellm", required=True, metavar="REPORT", help="guidellm's JSON report of the run")
    fd.add_argument("--metrics-before", metavar="FILE", help="vLLM's /metrics text saved before the run")
    fd.add_argument("--metrics-after", metavar="FILE", help="vLLM's /metrics text saved after the run")
    fd.add_argument("--time-scale", type=number(float, minimum=0, exclusive=True, maximum=1000, example="1"), default=1.0,
                    help="the replay ran at this many times the recorded rate (default 1)")
    fd.add_argument("--tolerance", help='JSON limits, e.g. {"ks_input": 0.1, "hit_rate_delta": 0.1}')
    add_output_option(fd, default_help="the fidelity line")
    fd.set_defaults(func=_fidelity)


def _fingerprint(args: argparse.Namespace) -> int:
    if args.format == "prometheus":
        from shipyard.benchmarking.workload_prometheus import fingerprint_from_prometheus

        if not args.start or not args.end:
            raise ShipyardError("--start", "a Prometheus fingerprint needs a window", "pass --start and --end")
        fp = fingerprint_from_prometheus(args.source, start=args.start, end=args.end, selector=args.selector,
                                         block_size=args.block_size, slo_class=args.slo_class, step=args.step,
                                         max_model_len=args.max_model_len)
    else:
        from shipyard.benchmarking.workload_sources import fingerprint_file

        fp = fingerprint_file(args.source, args.format, block_size=args.block_size, slo_class=args.slo_class,
                              max_model_len=args.max_model_len, privacy=args.privacy, model_dir=args.model,
                              field="SRC")
    if args.out_file:
        write_out_file(args.out_file, fp.to_json())
    emit(fp.data, args.output, fp.summary)
    return 0


def _render(args: argparse.Namespace) -> int:
    from shipyard.benchmarking.workload import load_fingerprint
    from shipyard.benchmarking.workload_render import render_check, sample_trace, write_trace

    fp = load_fingerprint(args.fingerprint, "FINGERPRINT")
    rows = sample_trace(fp, requests=args.requests, seed=args.seed, block_size=args.block_size,
                        max_model_len=args.max_model_len)
    write_trace(rows, args.out_file, field="--out-file")
    block = int(args.block_size or fp.block_size or 16)
    print(f"{args.out_file}: {render_check(rows, block, fp.data.get('slo_class', 'interactive')).summary()}")
    return 0


def _read(path: str | None, field: str) -> str:
    """A file's text (guidellm's report may pass the 8 MiB bound of parameter files)."""
    from shipyard.core.errors import file_error

    if not path:
        return ""
    if not Path(path).is_file():
        raise ShipyardError(field, f"{path} is not a file", "pass the file's path")
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise file_error(err, field, path, action="read") from None


def _fidelity(args: argparse.Namespace) -> int:
    from shipyard.benchmarking.workload import load_fingerprint
    from shipyard.benchmarking.workload_config import parse_workload_config
    from shipyard.benchmarking.workload_fidelity import check_fidelity, sent_from_guidellm, server_hit_ratio

    fp = load_fingerprint(args.fingerprint, "FINGERPRINT")
    tolerance = None
    if args.tolerance:
        try:
            raw = json.loads(args.tolerance)
        except ValueError as err:
            raise ShipyardError("--tolerance", f"is not JSON ({err.msg})", '{"hit_rate_delta": 0.1}') from None
        tolerance = parse_workload_config({"local": True, "tolerance": raw})["tolerance"]
    text = _read(args.guidellm, "--guidellm")
    try:
        report = json.loads(text)
    except ValueError:
        raise ShipyardError("--guidellm", f"{args.guidellm} is not JSON", "pass guidellm's JSON report (guidellm.json)") from None
    sent = sent_from_guidellm(report if isinstance(report, dict) else {})
    if not sent:
        raise ShipyardError("--guidellm", f"{args.guidellm} lists no requests", "pass guidellm's JSON report of the run")
    if bool(args.metrics_before) != bool(args.metrics_after):
        raise ShipyardError("--metrics-after", "the server hit ratio needs both /metrics texts",
                            "pass --metrics-before and --metrics-after, or neither")
    hit = server_hit_ratio(_read(args.metrics_before, "--metrics-before"), _read(args.metrics_after, "--metrics-after")) \
        if args.metrics_before else None
    record = check_fidelity(fp.data, sent, server_hit=hit, time_scale=args.time_scale, tolerance=tolerance)
    emit(record, args.output, lambda: record["line"])
    return 0 if record["valid"] else 1

