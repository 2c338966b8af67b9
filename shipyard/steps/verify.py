"""Verify a deployed service before ``production`` moves: does it serve the gated model, the same way?

The gates ran on a vLLM server the pipeline started itself; users get the deployed path
(LLMInferenceService, llm-d's prefill/decode pools, NIXL, the endpoint picker, the gateway).
``Ready`` only means the pods answer ``/health``. :func:`verify_service` asks the service itself,
through any OpenAI-compatible base URL, and compares it with the *recorded candidate* (its
``candidate.json``, or its benchmark results folder with ``golden.json``):

* **models**: ``GET /v1/models`` lists the served model name and every LoRA adapter asked for;
* **golden outputs**: the candidate's golden prompts (:mod:`shipyard.evaluation.golden`), greedy
  (temperature 0, the recorded ``max_tokens``), compared with the answers the candidate's own
  vLLM server gave in the measure step: the exact-match rate and the first divergence of each
  mismatch. Greedy decoding can differ across parallelism layouts (tensor/pipeline parallel,
  batch shapes, prefill/decode disaggregation change floating-point reduction order), so the
  rule is a tolerance: the match rate must be at least ``min_match_rate`` (default 0.75);
* **accuracy slice**: a few lm-eval tasks (default ``shipyard_capitals_gen``) through the
  service's ``/v1/completions`` (lm-eval's ``local-completions``, vllm runtime), each metric
  within ``stderr_k`` x the candidate's own stderr of the candidate's result (default 1);
* **SLO smoke**: a short guidellm load (``slo_requests`` requests, vllm runtime's guidellm) at
  the load level the SLO gate selected for the candidate; TTFT p99 and ITL p99 must be within
  the SLO x ``slo_tolerance`` (default 1.5);
* **P/D pools**: for each pool's vLLM ``/metrics`` URL given (``metrics_urls``), the counters
  before and after the traffic above: the prefill pool's ``vllm:prompt_tokens_total`` and
  ``vllm:request_success_total`` and the decode pool's ``vllm:generation_tokens_total`` must
  grow (both pools served the requests); NIXL's ``vllm:nixl_xfer_time_seconds_count`` must grow
  and ``vllm:nixl_num_failed_transfers_total`` must not (the KV transfers succeeded). A pool
  whose metrics cannot be reached is "not checked", never "passed".

The accuracy slice and the SLO smoke need the model's tokenizer (``model_dir``); without it
they are "not checked"; each runs within ``run_timeout_s`` in all (default 1800 s: lm-eval or
guidellm and what they start are stopped there, one line naming the setting). The verification passes when ``models`` and ``golden`` were compared
and passed and no other compared check failed. The report is :class:`~shipyard.core.report.GateReport`
(Markdown + JSON), with a table of the diverging outputs.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from shipyard.benchmarking.guidellm import (
    build_scenario,
    guidellm_tls_env,
    parse_benchmark_config,
    parse_guidellm_report,
    run_guidellm,
)
from shipyard.core.env import environ_set
from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_write_text
from shipyard.core.net import http_request, unreachable
from shipyard.core.records import slo_thresholds
from shipyard.core.report import Check, GateReport, level_label
from shipyard.evaluation.golden import ask_all, compare_golden
from shipyard.evaluation.lmeval import evaluate_model
from shipyard.gates.verification import (
    GATE,
    INSECURE_WARNING,
    PD_METRICS,
    REPORT_HTML,
    REPORT_JSON,
    REPORT_MD,
    GatewayAccess,
    api_root,
    gateway_access,
    load_recorded,
    parse_verify_config,
    report_html,
    report_markdown,
    selected_level,
)
from shipyard.runtimes.runtime import current_runtime, run_in_runtime, venv_python

#: the setting whose value bounds the accuracy slice and the SLO smoke, as their timeout error names it
RUN_TIMEOUT = "verify.run_timeout_s"


# --------------------------------------------------------------------------- HTTP
def _get(url: str, timeout: float, field: str, access: GatewayAccess | None = None) -> tuple[int, str]:
    """A GET that ends within ``timeout`` seconds in all, however slowly the service answers
    (``access``: the gateway's auth header and TLS context)."""
    access = access or GatewayAccess()
    try:
        status, body = http_request(url, deadline_s=timeout, field=field, headers=access.headers,
                                    context=access.context)
    except OSError as err:  # TimeoutError (the deadline) and URLError are OSErrors too
        raise unreachable(field, url, err, timeout) from None
    return status, body.decode("utf-8", errors="replace")


def served_models(url: str, timeout: float = 30.0, access: GatewayAccess | None = None) -> list[str]:
    """The ids ``GET /v1/models`` lists; one-line errors when unreachable, slow, not authorised
    (``access``: the gateway's auth header and TLS context) or not OpenAI-like."""
    root = api_root(url)
    code, text = _get(f"{root}/models", timeout, "url", access)
    if code in (401, 403):
        given = (access.describe()["auth"] if access else "none")
        raise ShipyardError("url", f"{root}/models answered HTTP {code} "
                            f"({'not authenticated' if code == 401 else 'forbidden'}; auth sent: {given})",
                            "give the gateway token through verify.auth_secret_env (--auth-secret-env): the "
                            "environment variable holding it, from a Secret; check that it is the right one")
    try:
        data = json.loads(text) if code == 200 else None
        ids = [str(m["id"]) for m in data["data"]]
    except (ValueError, KeyError, TypeError):
        raise ShipyardError("url", f"{root}/models answered HTTP {code} without a model list",
                            "point the URL at an OpenAI-compatible server") from None
    return ids


def check_served(url: str, served_model_name: str, lora_adapters: list[str], timeout: float,
                 access: GatewayAccess | None = None) -> list[str]:
    """Raise a one-line error naming ``served_model_name`` (or ``lora_adapters``) when /v1/models lacks it."""
    ids = served_models(url, timeout, access)
    if served_model_name not in ids:
        raise ShipyardError("served_model_name", f"{served_model_name!r} is not served at {api_root(url)} "
                            f"(it serves {ids})", "give the name the service serves the model under")
    missing = [a for a in lora_adapters if a not in ids]
    if missing:
        raise ShipyardError("lora_adapters", f"{missing} not served at {api_root(url)} (it serves {ids})",
                            "deploy the adapters, or drop them from the check")
    return ids


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)")


def scrape(url: str, timeout: float, access: GatewayAccess | None = None) -> dict[str, float] | None:
    """A Prometheus text page summed per metric name (labels summed over), None when unreachable.
    A pool's /metrics is not the gateway: it gets the TLS context, never the gateway's token."""
    tls_only = GatewayAccess(context=access.context) if access else None
    try:
        code, text = _get(url, timeout, "metrics", tls_only)
    except ShipyardError:
        return None
    if code != 200:
        return None
    out: dict[str, float] = {}
    for line in text.splitlines():
        if m := _SAMPLE.match(line):
            try:
                out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
            except ValueError:
                continue
    return out


# --------------------------------------------------------------------------- runtime parts
class RemoteService:
    """A running OpenAI-compatible service, with the surface lm-eval's and guidellm's runners use
    from :class:`~shipyard.serving.vllm_server.VLLMServer` (nothing to start or stop)."""

    def __init__(self, url: str, served_model_name: str, access: GatewayAccess | None = None) -> None:
        self.base_url = api_root(url)
        self.url = self.base_url[: -len("/v1")]
        self.served_model_name = served_model_name
        # how lm-eval's client checks the gateway's certificate (shipyard.evaluation.lmeval.local_completions_args)
        self.ca_bundle = access.ca_bundle if access else ""
        self.insecure_tls = bool(access and access.insecure_tls)
        self.startup_seconds = None
        self.command: list[str] = []

    def is_running(self) -> bool:
        return True

    def check_alive(self, what: str = "service") -> None:
        return None

    def engine_failure(self, during: str, *, probe: bool = True, log_name: str | None = None) -> None:
        return None  # a remote service's engine is not ours to watch: its failures show as failed requests

    def check_engine(self, during: str, *, probe: bool = True, log_name: str | None = None) -> None:
        return None

    def log_text(self) -> str:
        return ""

    def log_tail(self, lines: int = 0) -> str:
        return "(remote service: no log)"

    def memory_report(self) -> dict[str, Any]:
        return {}


#: where lm-eval 0.4.13's local-completions reads the bearer token (LocalCompletionsAPI.api_key); its
#: ``header`` model argument would be logged and recorded with the results
LMEVAL_TOKEN_ENV = "OPENAI_API_KEY"


def accuracy_slice(url: str, served_model_name: str, model_dir: str, tasks: list[str],
                   limit: int | float | None = None, gateway: dict[str, Any] | None = None) -> dict[str, Any]:
    """lm-eval ``tasks`` through the service (vllm runtime); returns lm-eval's scores per task and metric.
    ``gateway``: the TLS and auth settings (:meth:`GatewayAccess.settings`), resolved again here (the
    token from its environment variable, sent as lm-eval's ``Authorization: Bearer``)."""
    access = gateway_access(gateway or {})
    config = {"tasks": tasks, "cache": False, "batch_size": 8}
    if limit is not None:
        config["limit"] = limit
    with tempfile.TemporaryDirectory(prefix="shipyard-verify-eval-") as tmp, \
            environ_set({LMEVAL_TOKEN_ENV: access.token()}):
        summary = evaluate_model(model_dir, json.dumps(config), f"{tmp}/out", backend="openai",
                                 server=RemoteService(url, served_model_name, access))
    return {"scores": summary["scores"], "wall_time_s": summary.get("wall_time_s")}


def slo_smoke(url: str, served_model_name: str, model_dir: str, level: dict[str, Any], requests: int,
              prompt_tokens: int, output_tokens: int, timeout: float,
              gateway: dict[str, Any] | None = None) -> dict[str, Any]:
    """A short guidellm load at ``level`` (its profile and load) through the service; returns the parsed
    level. ``gateway``: the TLS and auth settings, resolved again here (:func:`smoke_scenario`)."""
    access = gateway_access(gateway or {})
    service = RemoteService(url, served_model_name, access)
    # a private folder (0700), removed at the end: the scenario holds the token (guidellm reads it from there)
    with tempfile.TemporaryDirectory(prefix="shipyard-verify-slo-") as tmp:
        scenario, env = smoke_scenario(service, model_dir, level, requests, prompt_tokens, output_tokens, timeout,
                                       f"{tmp}/guidellm.json", access)
        Path(tmp, "scenario.json").write_text(json.dumps(scenario))
        run_guidellm(Path(tmp, "scenario.json"), Path(tmp, "guidellm.log"), service,
                     timeout=120 + timeout + 120, levels=1, requests_per_level=int(requests), env=env)
        levels = parse_guidellm_report(json.loads(Path(tmp, "guidellm.json").read_text()))
    if not levels:
        raise ShipyardError("guidellm", "the SLO smoke test gave no load level", "see guidellm's output above")
    lv = levels[0]
    return {"name": lv["name"], "ttft_p99_ms": lv["ttft_ms"]["p99"], "itl_p99_ms": lv["itl_ms"]["p99"],
            "error_rate": lv["error_rate"], "total": lv["total"], "successful": lv["successful"]}


def smoke_scenario(service: RemoteService, model_dir: str, level: dict[str, Any], requests: int, prompt_tokens: int,
                   output_tokens: int, timeout: float, json_path: str,
                   access: GatewayAccess) -> tuple[dict[str, Any], dict[str, str]]:
    """The SLO smoke's guidellm scenario and the environment guidellm runs with. The gateway's TLS
    and auth go where guidellm 0.8.1's OpenAI backend takes them: ``verify`` (its default is *no*
    certificate check: set true unless ``insecure_tls``), the CA bundle as ``SSL_CERT_FILE`` (httpx,
    which it uses, reads it when ``verify`` is true; its ``verify`` field takes no path) and the
    token as ``api_key`` (a SecretStr it sends as ``Authorization: Bearer``)."""
    kind, _, load = str(level.get("name") or "").partition("@")
    if kind not in ("concurrent", "constant", "poisson") or not load:
        kind, load = "concurrent", "1"
    cfg = parse_benchmark_config({"profile": kind, "loads": [float(load) if kind != "concurrent" else int(float(load))],
                                  "max_requests": int(requests), "max_seconds": 120, "prompt_tokens": prompt_tokens,
                                  "output_tokens": output_tokens, "request_timeout": timeout})
    scenario = build_scenario(cfg, target=service.url, model_name=service.served_model_name, tokenizer=model_dir,
                              json_path=json_path, tls_verify=not access.insecure_tls,
                              api_key=access.token() or None)
    return scenario, guidellm_tls_env(access.ca_bundle)


# --------------------------------------------------------------------------- checks
def _no_vllm_runtime() -> str:
    """Why the vllm runtime (lm-eval, guidellm) cannot run here, or "" when it can (in-process or its venv)."""
    if current_runtime() == "vllm":
        return ""
    try:
        venv_python("vllm")
    except ShipyardError as err:
        return f"the vllm runtime (lm-eval, guidellm) is not installed where this runs ({err.problem})"
    return ""


def _golden_checks(url: str, name: str, golden: dict[str, Any], cfg: dict[str, Any],
                   access: GatewayAccess | None = None) -> tuple[Check, dict[str, Any]]:
    prompts = [a["prompt"] for a in golden["answers"]]
    access = access or GatewayAccess()
    answers = ask_all(api_root(url), name, prompts, max_tokens=int(golden.get("max_tokens") or 16),
                      timeout=cfg["timeout_s"], field="url", headers=access.headers, context=access.context)
    result = compare_golden(golden, answers)
    rate, need = result["match_rate"], cfg["min_match_rate"]
    note = f"{result['matched']} of {result['total']} identical"
    if result["mismatches"]:
        first = result["mismatches"][0]
        note += f"; first mismatch: prompt {first['index']} at char {first['divergence']['char_offset']}"
    check = Check("golden outputs (exact-match rate)", rate, 1.0, f">= {need:g}", round(rate - need, 4), rate >= need,
                  "greedy answers vs the candidate's own vLLM server (tolerance, see note)", note)
    return check, result


def _accuracy_checks(url: str, name: str, record: dict[str, Any], model_dir: str | None,
                     cfg: dict[str, Any]) -> list[Check]:
    label = "accuracy slice"
    if not model_dir:
        return [Check(label, None, None, "", None, False, "", "not checked: no model folder (tokenizer) given",
                      compared=False)]
    rows = [r for r in ((record.get("accuracy") or {}).get("rows") or [])
            if r.get("task") in cfg["accuracy_tasks"] and r.get("candidate") is not None]
    if not rows:
        return [Check(label, None, None, "", None, False, "",
                      f"not checked: the candidate record has no result for {cfg['accuracy_tasks']}", compared=False)]
    if missing := _no_vllm_runtime():
        return [Check(label, None, None, "", None, False, "", f"not checked: {missing}", compared=False)]
    out = run_in_runtime("vllm", accuracy_slice, deadline_s=cfg["run_timeout_s"], deadline_setting=RUN_TIMEOUT,
                         url=url, served_model_name=name,
                         model_dir=model_dir, tasks=sorted({r["task"] for r in rows}), limit=cfg["accuracy_limit"],
                         gateway=_gateway_settings(cfg))
    checks = []
    for r in rows:
        score = ((out["scores"].get(r["task"]) or {}).get(r["metric"]) or {}).get("value")
        stderr = float(r.get("candidate_stderr") or 0.0)
        allowed = cfg["stderr_k"] * stderr
        diff = None if score is None else abs(float(score) - float(r["candidate"]))
        ok = diff is not None and diff <= allowed + 1e-9
        checks.append(Check(f"accuracy {r['task']} {r['metric']}", score, r["candidate"],
                            f"|diff| <= {cfg['stderr_k']:g} x stderr ({allowed:.4g})",
                            None if diff is None else round(allowed - diff, 6), ok,
                            "lm-eval through the service vs the candidate's own result",
                            "" if score is not None else "the service's run gave no such metric"))
    return checks


def _slo_checks(url: str, name: str, record: dict[str, Any], model_dir: str | None, cfg: dict[str, Any]) -> list[Check]:
    thresholds = slo_thresholds(record)
    level = selected_level(record)
    why = ("no model folder (tokenizer) given" if not model_dir else
           "the candidate record has no SLO thresholds" if not thresholds.get("ttft_p99_ms") else
           "the SLO gate selected no load level" if level is None else _no_vllm_runtime())
    if why:
        return [Check("SLO smoke", None, None, "", None, False, "", f"not checked: {why}", compared=False)]
    out = run_in_runtime("vllm", slo_smoke, deadline_s=cfg["run_timeout_s"], deadline_setting=RUN_TIMEOUT,
                         url=url, served_model_name=name,
                         model_dir=model_dir, level=level, requests=cfg["slo_requests"],
                         prompt_tokens=cfg["prompt_tokens"], output_tokens=cfg["output_tokens"], timeout=cfg["timeout_s"],
                         gateway=_gateway_settings(cfg))
    tol = cfg["slo_tolerance"]
    at = f"at {level_label(level)}, {out['successful']} of {out['total']} requests"
    checks = []
    for key, label in (("ttft_p99_ms", "TTFT p99 ms"), ("itl_p99_ms", "ITL p99 ms")):
        limit = float(thresholds[key]) * tol
        value = out[key]
        checks.append(Check(f"SLO smoke {label}", value, level.get(key), f"<= {limit:g} (SLO x {tol:g})",
                            None if value is None else round(limit - value, 3), value is not None and value <= limit,
                            "short guidellm load at the gate-selected level", at))
    max_err = float(thresholds.get("max_error_rate") or 0.0)
    checks.append(Check("SLO smoke error rate", out["error_rate"], None, f"<= {max_err:g}",
                        round(max_err - out["error_rate"], 4), out["error_rate"] <= max_err, "", at))
    return checks


def _pd_checks(before: dict[str, dict[str, float] | None], after: dict[str, dict[str, float] | None]) -> list[Check]:
    if not before:
        return [Check("P/D pools", None, None, "", None, False, "",
                      "not checked: no pool metrics URL given (aggregated deployment, or unreachable from here)",
                      compared=False)]
    checks = []
    for pool, names in (("prefill", PD_METRICS["prefill"]), ("decode", PD_METRICS["decode"])):
        if pool not in before:
            continue
        b, a = before[pool], after.get(pool)
        if b is None or a is None:
            checks.append(Check(f"P/D {pool} pool served", None, None, "", None, False, "",
                                "not checked: its /metrics could not be reached", compared=False))
            continue
        for metric in names:
            grew = a.get(metric, 0.0) - b.get(metric, 0.0)
            checks.append(Check(f"P/D {pool} {metric}", grew, 0.0, "> 0 during verification", grew, grew > 0,
                                "the pool served the verification's requests"))
    decode_b, decode_a = before.get("decode"), after.get("decode")
    if decode_b is not None and decode_a is not None and "prefill" in before:
        for metric, must_grow in ((PD_METRICS["nixl_ok"], True), (PD_METRICS["nixl_failed"], False)):
            if metric not in decode_a:
                checks.append(Check(f"P/D KV transfer {metric}", None, None, "", None, False, "",
                                    "not checked: the decode pool exports no such metric", compared=False))
                continue
            grew = decode_a.get(metric, 0.0) - decode_b.get(metric, 0.0)
            ok = grew > 0 if must_grow else grew == 0
            checks.append(Check(f"P/D KV transfer {metric}", grew, 0.0, "> 0" if must_grow else "== 0",
                                grew if must_grow else -grew, ok, "NIXL moved the KV cache without failures"))
    return checks


def _gateway_settings(cfg: dict[str, Any]) -> dict[str, Any]:
    """The TLS and auth settings the lm-eval and guidellm runs resolve again in their own process (no token)."""
    return {k: cfg[k] for k in ("ca_bundle", "insecure_tls", "auth_secret_env", "auth_header")}


def _models_check(url: str, served_model_name: str, adapters: list[str], timeout_s: float,
                  strict_input: bool, access: GatewayAccess | None = None) -> Check:
    """The ``models`` check: ``/v1/models`` lists the model and every adapter (with ``strict_input``,
    a service that does not answer or serves another name raises instead)."""
    try:
        ids = check_served(url, served_model_name, adapters, timeout_s, access)
        return Check("models (/v1/models)", 1.0, 1.0, "lists the model and every adapter", None, True, "",
                     f"serves {ids}")
    except ShipyardError as err:
        if strict_input:
            raise
        return Check("models (/v1/models)", 0.0, 1.0, "lists the model and every adapter", None, False, "", str(err))


def _served_checks(url: str, served_model_name: str, record: dict[str, Any], model_dir: str | None,
                   cfg: dict[str, Any], log: Any, access: GatewayAccess) -> tuple[list[Check], dict[str, Any]]:
    """The checks of a service that serves the model: the golden outputs, then the accuracy slice and
    the SLO smoke when ``cfg["checks"]`` names them (one that cannot run is a failed, uncompared
    check). Returns the checks and the golden outputs' result."""
    root, golden = api_root(url), record["golden"]
    checks: list[Check] = []
    golden_result: dict[str, Any] = {}
    log(f"verify: {root}: golden outputs ({len(golden['answers'])} prompts, greedy)")
    try:
        check, golden_result = _golden_checks(url, served_model_name, golden, cfg, access)
        checks.append(check)
    except ShipyardError as err:
        checks.append(Check("golden outputs (exact-match rate)", None, 1.0, f">= {cfg['min_match_rate']:g}", None,
                            False, "", f"could not ask: {err}"))
    for name, run in (("accuracy", _accuracy_checks), ("slo", _slo_checks)):
        if name not in cfg["checks"]:
            continue
        log(f"verify: {root}: {'accuracy slice' if name == 'accuracy' else 'SLO smoke'}")
        try:
            checks += run(url, served_model_name, record, model_dir, cfg)
        except ShipyardError as err:
            label = "accuracy slice" if name == "accuracy" else "SLO smoke"
            checks.append(Check(label, None, None, "", None, False, "", f"failed to run: {err}"))
    return checks, golden_result


def _gateway(cfg: dict[str, Any], log: Any) -> GatewayAccess:
    """The gateway's TLS context and auth header (the CA file and the token's variable: one line,
    before anything is asked); an unverified TLS connection is announced in a WARNING line."""
    access = gateway_access(cfg)
    if access.insecure_tls:
        log(f"verify: {INSECURE_WARNING}")
    return access


def verify_service(
    url: str,
    served_model_name: str,
    candidate: str | dict[str, Any],
    *,
    model_dir: str | None = None,
    lora_adapters: list[str] | None = None,
    config: str | dict[str, Any] | None = None,
    report_dir: str | None = None,
    strict_input: bool = False,
    log: Any = print,
) -> dict[str, Any]:
    """Verify the service at ``url`` against the recorded ``candidate``; write ``verification.md``,
    ``verification.html`` and ``verification.json`` to ``report_dir`` when given.

    ``strict_input`` (the CLI): an unreachable URL, a timeout or a wrong served model name raise a
    one-line :class:`ShipyardError` instead of a failed ``models`` check. Returns ``{"passed",
    "reason", "failed_checks", "report", "golden"}`` (``report``: the GateReport as a dict).
    """
    cfg = parse_verify_config(config)
    adapters = list(lora_adapters or [])
    if not isinstance(served_model_name, str) or not served_model_name:
        raise ShipyardError("served_model_name", "is empty", "give the name the service serves the model under")
    root = api_root(url)
    record = load_recorded(candidate)
    access = _gateway(cfg, log)
    golden = record["golden"]
    started = time.monotonic()
    context = {"url": root, "served_model_name": served_model_name, "lora_adapters": adapters or "none",
               "candidate": record.get("recipe") or "(golden outputs only)", "golden prompts": len(golden["answers"]),
               "max_tokens": golden.get("max_tokens"), "min_match_rate": cfg["min_match_rate"],
               "checks": cfg["checks"], **access.describe()}
    checks, golden_result = [_models_check(url, served_model_name, adapters, cfg["timeout_s"], strict_input, access)], {}
    metrics_before = {pool: scrape(u, cfg["timeout_s"], access) for pool, u in cfg["metrics_urls"].items()} \
        if "pd" in cfg["checks"] else {}
    if checks[0].passed:
        served, golden_result = _served_checks(url, served_model_name, record, model_dir, cfg, log, access)
        checks += served
    else:
        checks.append(Check("golden outputs (exact-match rate)", None, 1.0, f">= {cfg['min_match_rate']:g}", None,
                            False, "", "not asked: the service does not serve the model"))
    if "pd" in cfg["checks"]:
        after = {pool: scrape(u, cfg["timeout_s"], access) for pool, u in cfg["metrics_urls"].items()}
        checks += _pd_checks(metrics_before, after)
    failed = [c.name for c in checks if c.compared and not c.passed]
    required_ok = all(any(c.name.startswith(p) and c.compared for c in checks) for p in ("models", "golden"))
    passed = not failed and required_ok
    not_checked = [c.name for c in checks if not c.compared]
    reason = ("passed: " + ", ".join(c.name for c in checks if c.compared) if passed
              else "failed: " + "; ".join(f"{c.name} ({c.note})" if c.note else c.name
                                         for c in checks if c.compared and not c.passed))
    if not_checked:
        reason += f"; not checked: {', '.join(not_checked)}"
    context["seconds"] = round(time.monotonic() - started, 1)
    report = GateReport(GATE, passed, reason, rule=(
        f"models and golden outputs must be compared and pass (exact-match rate >= {cfg['min_match_rate']:g}); "
        f"every other compared check must pass (accuracy within {cfg['stderr_k']:g} x stderr, TTFT/ITL p99 within "
        f"SLO x {cfg['slo_tolerance']:g}, both P/D pools served and no KV transfer failed); "
        "a check that could not run is 'not compared', never 'pass'"), checks=checks, context=context)
    out = {"passed": passed, "reason": reason, "failed_checks": failed, "report": report.to_dict(),
           "golden": golden_result}
    if report_dir:
        Path(report_dir).mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(report_dir) / REPORT_MD, report_markdown(report, golden_result))
        atomic_write_text(Path(report_dir) / REPORT_HTML, report_html(report, golden_result))
        atomic_write_text(Path(report_dir) / REPORT_JSON, json.dumps(out, indent=2, default=str))
    return out
