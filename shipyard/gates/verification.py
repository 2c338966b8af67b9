"""The deployment verification's rules: its settings (``deploy_config.verify``, ``shipyard verify
--config``), the recorded candidate it compares with, and its report.

:func:`shipyard.steps.verify.verify_service` runs the checks against the live service (the
module docstring there says what each check compares); this module holds what the deploy
step, the pre-flight checks and the CLI read without a service: :func:`parse_verify_config`,
:func:`verify_options`, :func:`load_recorded`, :func:`selected_level` and the report
(:func:`report_doc`, :func:`report_markdown`), and how the requests reach a gateway with TLS and
auth (:data:`GATEWAY_KEYS`: ``ca_bundle``, ``insecure_tls``, ``auth_secret_env``, ``auth_header``;
:func:`gateway_access` resolves them where the requests are sent: the CA file read, the token
taken from its environment variable, never from the config).
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError, refuse_credentials, shown
from shipyard.core.jsonargs import json_object
from shipyard.core.records import CANDIDATE_FILE, CandidateRecord, load_candidate, slo_of
from shipyard.core.redact import looks_like_token
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
    # the gateway's TLS and auth (GATEWAY_KEYS): a CA bundle file, or no certificate check at all, and
    # the environment variable holding the token (never the token itself), sent as `auth_header`
    "ca_bundle": "",
    "insecure_tls": False,
    "auth_secret_env": "",
    "auth_header": "Authorization",
}
#: the settings that say how the gateway is reached (TLS, auth): a local server the deploy step serves
#: itself (``verify.dry_run``) is reached without them
GATEWAY_KEYS = ("ca_bundle", "insecure_tls", "auth_secret_env", "auth_header")
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
    _check_gateway_settings(cfg)
    return cfg


# --------------------------------------------------------------------------- the gateway's TLS and auth
#: an environment variable's name (what ``auth_secret_env`` holds; never the token)
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")
#: an HTTP header's name (RFC 9110 token)
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
#: the clients that cannot send a token under another header name without logging it
#: (lm-eval 0.4.13 takes other headers only through its ``header`` model argument, which it logs and
#: records verbatim; guidellm 0.8.1 only through the request extras, which its report records)
CUSTOM_HEADER_CLIENTS = {"accuracy": "lm-eval 0.4.13 (accuracy slice)", "slo": "guidellm 0.8.1 (SLO smoke)"}
CA_BUNDLE_FIX = ("give the PEM file of the CA that signed the gateway's certificate (in the cluster: a Secret or "
                 "ConfigMap mounted into the deploy step, see components/deploy/README.md)")
AUTH_ENV_FIX = ("name the environment variable that holds the token, e.g. GATEWAY_TOKEN, and give it to the step "
                "from a Kubernetes Secret (cluster.yaml's secrets: <name>: {env: {token: GATEWAY_TOKEN}, "
                "steps: [deploy]}); the token itself never goes into the config")
#: the warning line an unverified TLS connection prints, and the report records
INSECURE_WARNING = ("WARNING: verify.insecure_tls is true: the gateway's TLS certificate is NOT verified (anyone on "
                    "the path can impersonate it); for a test gateway only: give verify.ca_bundle instead")


def _check_gateway_settings(cfg: dict[str, Any]) -> None:
    """``ca_bundle``, ``insecure_tls``, ``auth_secret_env`` and ``auth_header`` checked for shape and
    for what the clients can take: one line each. The CA file and the variable are checked where
    the requests are sent (:func:`gateway_access`): the pre-flight's pod mounts neither."""
    ca, insecure = cfg["ca_bundle"], cfg["insecure_tls"]
    if not isinstance(insecure, bool):
        raise ShipyardError("verify.insecure_tls", f"{shown(insecure)} is not true or false", "use true or false")
    if not isinstance(ca, str):
        raise ShipyardError("verify.ca_bundle", f"{shown(ca)} is not a file path", CA_BUNDLE_FIX)
    if ca and insecure:
        raise ShipyardError("verify.insecure_tls", "is true while verify.ca_bundle is given (verify with the CA, or "
                            "not at all?)", "drop one of them: keep ca_bundle to verify the gateway's certificate")
    name, header = cfg["auth_secret_env"], cfg["auth_header"]
    if not isinstance(name, str) or (name and (looks_like_token(name) or not _ENV_NAME.fullmatch(name))):
        # never echoed: what does not look like a variable's name may be the token itself
        raise ShipyardError("verify.auth_secret_env", "is not the name of an environment variable (upper-case "
                            "letters, digits and _; the value is not shown: it may be a pasted token)", AUTH_ENV_FIX)
    if not isinstance(header, str) or not _HEADER_NAME.fullmatch(header) or looks_like_token(header):
        raise ShipyardError("verify.auth_header", f"{shown(header)} is not an HTTP header name",
                            "e.g. Authorization (sent as 'Bearer <token>') or X-Api-Key (the token as it is)")
    if name and header.lower() != "authorization":
        clients = [CUSTOM_HEADER_CLIENTS[c] for c in cfg["checks"] if c in CUSTOM_HEADER_CLIENTS]
        if clients:
            raise ShipyardError("verify.auth_header", f"{header!r}: {' and '.join(clients)} can send the token only "
                                "as 'Authorization: Bearer' without writing it to its logs",
                                "use auth_header Authorization, or drop accuracy and slo from verify.checks")


@dataclass(frozen=True)
class GatewayAccess:
    """How the verification's requests reach the gateway: ``context`` (the TLS context for https
    URLs: the CA bundle's, none to verify, or None for the system's CAs), ``headers`` (the auth
    header; never printed: :meth:`describe` says where it came from) and the settings the lm-eval and
    guidellm runs rebuild it from (:func:`gateway_access` in their own process)."""

    ca_bundle: str = ""
    insecure_tls: bool = False
    auth_secret_env: str = ""
    auth_header: str = "Authorization"
    context: ssl.SSLContext | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)

    def token(self) -> str:
        """The token as sent (without ``Bearer``), "" without auth."""
        value = self.headers.get(self.auth_header, "") if self.auth_secret_env else ""
        return value[len("Bearer "):] if self.auth_header.lower() == "authorization" else value

    def describe(self) -> dict[str, str]:
        """What the report records: the TLS check (and :data:`INSECURE_WARNING` when there is none) and
        where the auth header came from (never its value)."""
        tls = ("NOT verified (verify.insecure_tls)" if self.insecure_tls else
               f"verified with the CA bundle {self.ca_bundle}" if self.ca_bundle else "verified with the system CAs")
        # worded so that redact() leaves it whole: no "Authorization:" and no "Bearer <word>"
        bearer = " (bearer)" if self.auth_header.lower() == "authorization" else ""
        auth = (f"the token from ${self.auth_secret_env} in the {self.auth_header} header{bearer}"
                if self.auth_secret_env else "none")
        return {"tls": tls, "auth": auth, **({"tls warning": INSECURE_WARNING} if self.insecure_tls else {})}

    def settings(self) -> dict[str, Any]:
        """The settings alone (JSON-able: what a child process rebuilds this from, no token)."""
        return {"ca_bundle": self.ca_bundle, "insecure_tls": self.insecure_tls,
                "auth_secret_env": self.auth_secret_env, "auth_header": self.auth_header}


def _ca_context(path: str) -> ssl.SSLContext:
    p = Path(path)
    if not p.is_file():
        raise ShipyardError("verify.ca_bundle", f"{path} {'is not a file' if p.exists() else 'does not exist'}",
                            CA_BUNDLE_FIX)
    try:
        head = p.read_bytes()[: 4 * 1024 * 1024]
    except OSError as err:
        raise ShipyardError("verify.ca_bundle", f"{path} cannot be read ({err.strerror})", CA_BUNDLE_FIX) from None
    if b"-----BEGIN CERTIFICATE-----" not in head:
        raise ShipyardError("verify.ca_bundle", f"{path} is not a PEM CA bundle (no -----BEGIN CERTIFICATE----- "
                            "block)", CA_BUNDLE_FIX + "; a DER file converts with: openssl x509 -inform der -in CA.der "
                            "-out ca.pem")
    try:
        return ssl.create_default_context(cafile=str(p))
    except (ssl.SSLError, ValueError) as err:
        raise ShipyardError("verify.ca_bundle", f"{path} is not a PEM CA bundle OpenSSL can read "
                            f"({getattr(err, 'reason', None) or err})", CA_BUNDLE_FIX) from None


def gateway_access(cfg: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> GatewayAccess:
    """The TLS context and auth header the settings ask for (parsed by :func:`parse_verify_config`),
    resolved here: the CA bundle is read (a missing or non-PEM file is one line) and the token is
    taken from the environment variable ``auth_secret_env`` names (unset or empty: one line; the
    token is never shown). ``environ``: default ``os.environ``."""
    import os

    env = os.environ if environ is None else environ
    ca, insecure = str(cfg.get("ca_bundle") or ""), bool(cfg.get("insecure_tls"))
    name, header = str(cfg.get("auth_secret_env") or ""), str(cfg.get("auth_header") or "Authorization")
    context = None
    if ca:
        context = _ca_context(ca)
    elif insecure:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    headers: dict[str, str] = {}
    if name:
        token = (env.get(name) or "").strip()
        if not token:
            raise ShipyardError("verify.auth_secret_env", f"${name} is {'empty' if name in env else 'not set'} in "
                                "this step's environment", AUTH_ENV_FIX)
        if any(c in token for c in "\r\n\0"):
            raise ShipyardError("verify.auth_secret_env", f"${name} holds a line break (not shown)",
                                "store the token alone in the Secret, without a trailing newline")
        headers[header] = f"Bearer {token}" if header.lower() == "authorization" else token
    return GatewayAccess(ca, insecure, name, header, context, headers)


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


def check_gateway_access(settings: dict[str, Any]) -> GatewayAccess:
    """The deploy step's check, before anything is applied, that the verification can reach the
    gateway as ``deploy_config.verify`` says (the CA bundle readable, the token's variable set):
    :func:`gateway_access`, its one line naming ``deploy_config.verify.<setting>``."""
    try:
        return gateway_access(parse_verify_config(settings))
    except ShipyardError as err:
        name = err.field if err.field.startswith("verify.") else f"verify.{err.field}"
        raise ShipyardError(f"deploy_config.{name}", err.problem, err.fix) from None


def local_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` without the gateway's TLS and auth (:data:`GATEWAY_KEYS`): for a vLLM server the
    step serves itself on loopback (``verify.dry_run``), which has neither."""
    return {k: v for k, v in settings.items() if k not in GATEWAY_KEYS}


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
