"""``shipyard verify``: does a deployed service serve the gated model, the same way?

Runs the deploy step's verification (:mod:`shipyard.steps.verify`) against any OpenAI-compatible
URL and a recorded candidate (its ``candidate.json`` or folder, or the benchmark results folder /
``golden.json`` the measure step wrote): ``/v1/models``, the golden outputs, an lm-eval accuracy
slice and a guidellm SLO smoke test through the service (both need ``--model-dir`` for the
tokenizer), and the P/D pools' vLLM metrics when ``--metrics-url`` names them. A gateway with TLS
and auth: ``--ca-bundle`` (the CA's PEM file), ``--insecure-tls`` (no certificate check: warned and
recorded), ``--auth-secret-env VAR`` (the variable holding the token, sent as ``Authorization:
Bearer``; never the token itself), ``--auth-header`` (another header, golden outputs only).

Prints the verdict and the checks (or ``-o json|yaml``); ``--report-dir`` keeps
``verification.md``, ``verification.html`` and ``verification.json``. Exit status (README, "CLI"): 0 passed, 1 failed,
2 bad input (a wrong served model name, an empty golden set, a tolerance outside 0..1), 3 the URL
is unreachable or does not answer in time.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from shipyard.cli.output import add_output_option, emit
from shipyard.core.errors import ShipyardError
from shipyard.core.numbers import number, positive_float
from shipyard.core.redact import redact


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="verify a deployed OpenAI-compatible service against a recorded candidate",
                       description="Golden outputs, an accuracy slice, an SLO smoke test and P/D pool metrics "
                                   "through the service, compared with what the candidate recorded when it was "
                                   "measured.")
    p.add_argument("--url", required=True, help="the service's base URL (http://HOST[:PORT][/PATH], with or without /v1)")
    p.add_argument("--served-model-name", required=True, help="the model name the service must serve")
    p.add_argument("--candidate", required=True,
                   help="the recorded candidate: candidate.json (or its folder), a benchmark results folder, or golden.json")
    p.add_argument("--lora", action="append", default=[], metavar="NAME", help="a LoRA adapter that must be served (repeat)")
    p.add_argument("--model-dir", help="the model folder (its tokenizer): enables the accuracy slice and the SLO smoke")
    p.add_argument("--min-match-rate", type=number(float, example="0.75"),
                   help="share of golden outputs that must match exactly, 0..1 (default 0.75)")
    p.add_argument("--timeout", type=positive_float("60"), help="seconds each HTTP request may take in all, connecting to the last byte (default 60)")
    p.add_argument("--checks", help="comma-separated subset of models,golden,accuracy,slo,pd (default: all)")
    p.add_argument("--metrics-url", action="append", default=[], metavar="POOL=URL",
                   help="a P/D pool's vLLM /metrics URL, e.g. prefill=http://llm-prefill:8000/metrics (repeat)")
    p.add_argument("--ca-bundle", metavar="PEM",
                   help="the CA bundle (PEM) that signed the gateway's TLS certificate (verify.ca_bundle)")
    p.add_argument("--insecure-tls", action="store_true",
                   help="do not verify the gateway's TLS certificate (test gateways only; warned and recorded)")
    p.add_argument("--auth-secret-env", metavar="VAR",
                   help="the environment variable holding the gateway's token, sent as 'Authorization: Bearer "
                        "<token>' (never the token itself; verify.auth_secret_env)")
    p.add_argument("--auth-header", metavar="NAME",
                   help="send the token under this header instead, as it is (golden outputs only: "
                        "lm-eval and guidellm send it as Authorization: Bearer)")
    p.add_argument("--config", help="more verification settings as JSON (see shipyard/gates/verification.py)")
    p.add_argument("--report-dir", help="write verification.md, .html and .json here")
    add_output_option(p, default_help="the verdict and one line per check")
    p.set_defaults(func=_verify)


def _config(args: argparse.Namespace) -> dict[str, Any]:
    cfg: dict[str, Any] = {}
    if args.config:
        try:
            cfg = json.loads(args.config)
        except ValueError as err:
            raise ShipyardError("--config", f"is not JSON ({err.msg})", '{"slo_tolerance": 2}') from None
        if not isinstance(cfg, dict):
            raise ShipyardError("--config", "is not a JSON object", '{"slo_tolerance": 2}')
    if args.min_match_rate is not None:
        cfg["min_match_rate"] = args.min_match_rate
    if args.timeout is not None:
        cfg["timeout_s"] = args.timeout
    if args.checks:
        cfg["checks"] = [c.strip() for c in args.checks.split(",") if c.strip()]
    urls = {}
    for item in args.metrics_url:
        pool, sep, url = item.partition("=")
        if not sep or pool not in ("prefill", "decode"):
            raise ShipyardError("--metrics-url", f"{item!r} is not prefill=URL or decode=URL",
                                "e.g. --metrics-url decode=http://llm:8000/metrics")
        urls[pool] = url
    if urls:
        cfg["metrics_urls"] = urls
    for key in ("ca_bundle", "auth_secret_env", "auth_header"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    if args.insecure_tls:
        cfg["insecure_tls"] = True
    return cfg


def _verify(args: argparse.Namespace) -> int:
    from shipyard.gates.verification import api_root, gateway_access, load_recorded, parse_verify_config
    from shipyard.steps.verify import verify_service

    cfg = parse_verify_config(_config(args))  # bad settings: one line, before anything is asked
    gateway_access(cfg)  # the CA file and the token's variable too
    api_root(args.url)
    record = load_recorded(args.candidate)  # an empty golden set: one line
    if args.model_dir:
        from shipyard.models.resolve import check_model_folder

        check_model_folder(args.model_dir, "--model-dir")
    out = verify_service(args.url, args.served_model_name, record, model_dir=args.model_dir, lora_adapters=args.lora,
                         config=cfg, report_dir=args.report_dir, strict_input=True,
                         log=lambda line: None if args.output else print(redact(line), flush=True))

    def text() -> str:
        lines = [("PASSED: " if out["passed"] else "FAILED: ") + out["reason"]]
        for c in out["report"]["checks"]:
            verdict = ("pass" if c["passed"] else "FAIL") if c["compared"] else "not checked"
            lines.append(f"  {verdict:11} {c['name']}: {c['measured']} ({c['threshold']}) {c['note']}".rstrip())
        for m in (out.get("golden") or {}).get("mismatches") or []:
            d = m["divergence"]
            lines.append(f"  golden #{m['index']} diverges at token {d['token_offset']}, char {d['char_offset']}: "
                         f"expected {d['expected']!r}, got {d['got']!r}")
        return "\n".join(lines)

    emit(out, args.output, text)
    return 0 if out["passed"] else 1
