"""The deployment verification's rules: its settings (``deploy_config.verify``, ``shipyard verify
--config``), the recorded candidate it compares with, and its report.

:func:`shipyard.steps.verify.verify_service` runs the checks against the live service (the
module docstring there says what each check compares); this module holds what the deploy
step, the pre-flight checks and the CLI read without a service: :func:`parse_verify_config`,
:func:`verify_options`, :func:`load_recorded`, :func:`selected_level` and the report
(:func:`report_doc`, :func:`report_markdown`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError, refuse_credentials
from shipyard.core.jsonargs import json_object
from shipyard.core.records import CANDIDATE_FILE, CandidateRecord, load_candidate, slo_of
from shipyard.core.report import Doc, GateReport
from shipyard.evaluation.golden import check_golden, load_golden

GATE = "deployment verification"
#: the report as Markdown (KFP UI), as HTML that fits MLflow's artifact viewer, and as JSON
REPORT_MD, REPORT_HTML, REPORT_JSON = "verification.md", "verification.html", "verification.json"
CHECKS = ("models", "golden", "accuracy", "slo", "pd")
DEFAULTS: dict[str, Any] = {
    "checks": list(CHECKS),
    "min_match_rate": 0.75,
    "accuracy_tasks": ["shipyard_capitals_gen"],
    "accuracy_limit": None,
    "stderr_k": 1.0,
    "slo_tolerance": 1.5,
    "slo_requests": 8,
    "prompt_tokens": 32,
    "output_tokens": 8,
    "timeout_s": 60.0,  # each HTTP request's deadline in all (shipyard.core.net.http_request), not per read
    "run_timeout_s": 1800.0,  # the accuracy slice's and the SLO smoke's deadline each, in all (lm-eval, guidellm)
    "metrics_urls": {},
}
LAYOUT_NOTE = ("Greedy decoding is not guaranteed to give the same tokens across parallelism layouts "
               "(tensor/pipeline parallel, batch shapes, prefill/decode disaggregation change the order of "
               "floating-point reductions): the golden rule is a documented tolerance, not equality.")
#: vLLM's metric names (vllm 0.32: v1/metrics/loggers.py; kv_connector/v1/nixl/stats.py)
PD_METRICS = {
    "prefill": ("vllm:prompt_tokens_total", "vllm:request_success_total"),
    "decode": ("vllm:generation_tokens_total",),
    "nixl_ok": "vllm:nixl_xfer_time_seconds_count",
    "nixl_failed": "vllm:nixl_num_failed_transfers_total",
}


# --------------------------------------------------------------------------- config
def parse_verify_config(value: str | dict[str, Any] | None) -> dict[str, Any]:
    """The verification settings (JSON text or dict) over :data:`DEFAULTS`; one-line errors."""
    raw = json_object(value, "verify", '{"min_match_rate": 0.75}')
    unknown = sorted(set(raw) - set(DEFAULTS) - {"enabled"})
    if unknown:
        raise ShipyardError(f"verify.{unknown[0]}", "is not a verification setting", f"use {sorted(DEFAULTS)}")
    cfg = {**DEFAULTS, **{k: v for k, v in raw.items() if k != "enabled"}}
    checks = cfg["checks"]
    if not isinstance(checks, list) or not all(isinstance(c, str) for c in checks) or not set(checks) <= set(CHECKS) \
            or not {"models", "golden"} <= set(checks):
        raise ShipyardError("verify.checks", f"{checks!r} is not a list of {list(CHECKS)} holding models and golden",
                            'e.g. ["models", "golden", "accuracy"]')
    for key, low, high in (("min_match_rate", 0.0, 1.0), ("stderr_k", 0.0, 100.0), ("slo_tolerance", 1.0, 100.0),
                           ("timeout_s", 0.001, 86400.0), ("run_timeout_s", 1.0, 86400.0)):
        if isinstance(cfg[key], bool) or not isinstance(cfg[key], int | float) or not low <= float(cfg[key]) <= high:
            raise ShipyardError(key if key == "min_match_rate" else f"verify.{key}",
                                f"{cfg[key]!r} is outside {low:g}..{high:g}", f"give a number from {low:g} to {high:g}")
        cfg[key] = float(cfg[key])
    for key in ("slo_requests", "prompt_tokens", "output_tokens"):
        if isinstance(cfg[key], bool) or not isinstance(cfg[key], int) or cfg[key] < 1:
            raise ShipyardError(f"verify.{key}", f"{cfg[key]!r} is not a positive whole number", "e.g. 8")
    tasks = cfg["accuracy_tasks"]
    if not isinstance(tasks, list) or not all(isinstance(t, str) and t for t in tasks):
        raise ShipyardError("verify.accuracy_tasks", f"{tasks!r} is not a list of lm-eval task names",
                            '["shipyard_capitals_gen"]')
    urls = cfg["metrics_urls"]
    for pool, url in (urls.items() if isinstance(urls, dict) else ()):
        refuse_credentials(url, f"verify.metrics_urls.{pool}", URL_CREDENTIALS_FIX)
    if not isinstance(urls, dict) or not set(urls) <= {"prefill", "decode"} or not all(
            isinstance(u, str) and u.startswith(("http://", "https://")) for u in urls.values()):
        raise ShipyardError("verify.metrics_urls", f"{urls!r} is not {{'prefill': URL, 'decode': URL}}",
                            'e.g. {"prefill": "http://llm-prefill:8000/metrics", "decode": "http://llm:8000/metrics"}')
    return cfg


VERIFY_SWITCHES = {"enabled": True, "dry_run": False}
DRY_RUN_VERIFY_HINT = ("the packaged model was not served and verified on this dry run (it adds a vLLM start and "
                       "the checks: more than a minute on CPU): set deploy_config.verify.dry_run=true to serve the package itself "
                       "and verify it")


def verify_options(raw: Any) -> dict[str, Any]:
    """``deploy_config.verify`` (``raw``: its value, None when absent): ``enabled`` (default true:
    verify the Ready service against the recorded champion before any alias moves), ``dry_run``
    (default false: on a dry run, serve the packaged model from the package itself and verify it)
    and the verification settings of :mod:`shipyard.gates.verification` (checked here, before
    anything is applied). Read by :func:`shipyard.params.deploy.parse_deploy_config`."""
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ShipyardError("deploy_config.verify", f"{raw!r} is not an object", '{"min_match_rate": 0.75}')
    switches = {}
    for key, default in VERIFY_SWITCHES.items():
        value = raw.get(key, default)
        if not isinstance(value, bool):
            raise ShipyardError(f"deploy_config.verify.{key}", f"{value!r} is not true or false", "use true or false")
        switches[key] = value
    settings = {k: v for k, v in raw.items() if k not in VERIFY_SWITCHES}
    try:
        parse_verify_config(settings)
    except ShipyardError as err:
        name = err.field if err.field.startswith("verify.") else f"verify.{err.field}"
        raise ShipyardError(f"deploy_config.{name}", err.problem, err.fix) from None
    return {**switches, "settings": settings}


#: where the service's credentials go instead of its URL
URL_CREDENTIALS_FIX = ("give the URL without a user name, password or token; verify needs none (the service is "
                       "reached inside the cluster or through a port-forward)")


def api_root(url: str) -> str:
    """``http://host[:port][/path]/v1`` from a service URL with or without ``/v1``; a credential in it
    is refused without being shown."""
    refuse_credentials(url, "url", URL_CREDENTIALS_FIX)
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ShipyardError("url", f"{url!r} is not an http(s) URL", "give the service's base URL, e.g. http://host:8000")
    base = url.rstrip("/")
    return base if base.endswith("/v1") else f"{base}/v1"


# --------------------------------------------------------------------------- candidate
def load_recorded(candidate: str | dict[str, Any]) -> dict[str, Any]:
    """The recorded candidate: a ``candidate.json`` record (dict, file or folder), or a benchmark
    results folder / ``golden.json`` (golden outputs only). Returns the record with ``golden`` checked."""
    if isinstance(candidate, dict):
        record = dict(candidate)
        if record.get("schema") == "shipyard.golden/v1":
            record = {"golden": record}
    else:
        p = Path(candidate)
        if not p.exists():
            raise ShipyardError("candidate", f"{p} does not exist", "give a candidate.json, a results folder or golden.json")
        if (p.is_dir() and (p / CANDIDATE_FILE).is_file()) or p.name == CANDIDATE_FILE:
            record = dict(load_candidate(p, field="candidate", fix="give candidate_gates' candidate.json"))
        else:
            record = {"golden": load_golden(p)}
            results = (p if p.is_dir() else p.parent) / "results.json"
            if results.is_file():
                record["bench_results"] = str(results)
    if not record.get("golden"):
        raise ShipyardError("golden", "the recorded candidate holds no golden outputs (empty golden set)",
                            "re-run the measure step, which records golden.json")
    record["golden"] = check_golden(record["golden"], "the candidate's golden outputs")
    return record


def selected_level(record: CandidateRecord) -> dict[str, Any] | None:
    """The load level the SLO gate selected (the highest load meeting the SLO), from the record."""
    levels = record.get("levels") or []
    rps = (slo_of(record).get("metrics") or {}).get("highest_load_meeting_slo_rps")
    if not levels or not rps:
        return None
    return min(levels, key=lambda lv: abs(float(lv.get("requests_per_s") or 0.0) - float(rps)))


def report_doc(report: GateReport, golden_result: dict[str, Any]) -> Doc:
    """The verification report: the gate table, the layout note and every diverging golden output."""
    doc = report.doc()
    doc.note(LAYOUT_NOTE)
    mismatches = (golden_result or {}).get("mismatches") or []
    if golden_result:
        doc.h(2, f"Golden outputs: {golden_result['matched']} of {golden_result['total']} identical")
    if mismatches:
        doc.table(["#", "prompt", "token offset", "char offset", "expected (candidate)", "got (service)"],
                  [[str(m["index"]), m["prompt"], "–" if m["divergence"]["token_offset"] is None
                    else str(m["divergence"]["token_offset"]), str(m["divergence"]["char_offset"]),
                    repr(m["divergence"]["expected"]), repr(m["divergence"]["got"])] for m in mismatches])
    return doc


def report_markdown(report: GateReport, golden_result: dict[str, Any]) -> str:
    """:func:`report_doc` as Markdown (KFP UI, MLflow)."""
    return report_doc(report, golden_result).to_markdown()


def report_html(report: GateReport, golden_result: dict[str, Any]) -> str:
    """:func:`report_doc` as one HTML page in the reports' style (fits MLflow's artifact viewer)."""
    return report_doc(report, golden_result).to_html()
