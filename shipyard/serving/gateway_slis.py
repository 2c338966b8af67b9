"""Availability as the user meets it at the gateway: the llm-d endpoint picker's own request counters.

vLLM counts the requests that reach it. A request the gateway refuses or cannot place never does:
the endpoint picker (EPP) sheds it under load (``ResourceExhausted``), finds no ready endpoint
(``ServiceUnavailable``), or fails itself (``Internal``); a canary whose pods never became ready
shows nothing at all on vLLM's side. The EPP KServe v0.20 runs for an LLMInferenceService (preset
``kserve-config-llm-scheduler``: ``llm-d-router-endpoint-picker`` v0.9.0, built on Gateway API
Inference Extension v1.5.0, which KServe v0.20 pins) counts every request it handles
(``pkg/epp/metrics/metrics.go``, ``pkg/epp/handlers/server.go``):

* ``inference_objective_request_total{model_name, target_model_name, priority}``;
* ``inference_objective_request_error_total{model_name, target_model_name, error_code}``, the codes
  of ``pkg/common/error/error.go``. :data:`SERVER_ERRORS` burn the error budget; the client's own
  (``BadRequest``, ``Unauthorized``, ``Forbidden``, ``NotFound``) do not.

``model_name`` is the model the request named (the served model name); ``target_model_name`` the one
it was routed to. (The EPP's TTFT histogram is recorded only by its latency-predictor plugin, off
in KServe's preset, so latency SLIs stay on vLLM's side: :mod:`shipyard.serving.alerts`.)

:func:`gateway_rules` gives the PrometheusRule of :func:`shipyard.serving.alerts.slo_rule` recording
rules per model and per LLMInferenceService (canary member) over the same windows, and the same
multi-window burn-rate alerts as vLLM's availability SLI. :func:`epp_pod_monitor` scrapes the EPP:
port ``metrics`` (9090) of the pods KServe labels as the service's scheduler (``SchedulerLabels``
in ``pkg/controller/v1alpha2/llmisvc/scheduler.go``), plain HTTP behind controller-runtime's
authentication and authorization filter (GIE's ``--metrics-endpoint-auth``, on by default; KServe
binds the EPP's ServiceAccount to ``system:auth-delegator`` for it). Prometheus therefore sends a
bearer token of an identity allowed ``get`` on the non-resource URL ``/metrics``: the token Secret
:data:`READER_SECRET` in the serving namespace, which ``manifests/components/epp-metrics-reader``
creates with its ServiceAccount and ClusterRole.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shipyard.serving.promql import number

#: KServe v0.20's labels on an LLMInferenceService's scheduler (EPP) pods: SchedulerLabels
#: (pkg/constants/constants.go LLMComponentRouterScheduler, KubernetesComponentLabelKey)
EPP_COMPONENT = "llminferenceservice-router-scheduler"
COMPONENT_POD_LABEL = "app.kubernetes.io/component"
#: the EPP container's metrics port, by name (config-llm-scheduler.yaml: containerPort 9090 "metrics")
EPP_METRICS_PORT = "metrics"
#: the Secret (type kubernetes.io/service-account-token) whose ``token`` Prometheus sends to the EPP
READER_SECRET = "shipyard-metrics-reader-token"
READER_KEY = "token"
#: error codes that are the service's fault and burn the budget (GIE v1.5.0 pkg/common/error/error.go);
#: BadRequest, Unauthorized, Forbidden and NotFound are the client's and do not
SERVER_ERRORS = ("Internal", "ServiceUnavailable", "ModelServerError", "ResourceExhausted", "Unknown")
REQUESTS = "inference_objective_request_total"
ERRORS = "inference_objective_request_error_total"


def epp_pod_monitor(*, name: str, namespace: str, labels: Mapping[str, str] | None = None,
                    service_pod_label: str, canary_suffix: str) -> dict[str, Any]:
    """The PodMonitor ``<name>-epp`` (``monitoring.coreos.com/v1``) that scrapes the endpoint pickers of
    the service ``name`` and of its canary (``name`` + ``canary_suffix``), copying the pod label
    ``service_pod_label`` (the service's name) onto the series: the per-member rules group by it."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": f"{name}-epp", "namespace": namespace, "labels": dict(labels or {})},
        "spec": {
            "selector": {
                "matchLabels": {"app.kubernetes.io/part-of": "llminferenceservice", COMPONENT_POD_LABEL: EPP_COMPONENT},
                "matchExpressions": [{"key": service_pod_label, "operator": "In",
                                      "values": [name, f"{name}{canary_suffix}"]}],
            },
            "podTargetLabels": [service_pod_label],
            "podMetricsEndpoints": [{
                "port": EPP_METRICS_PORT, "path": "/metrics", "scheme": "http",
                "authorization": {"type": "Bearer", "credentials": {"name": READER_SECRET, "key": READER_KEY}},
            }],
        },
    }


def _records(model: str, window: str, levels: Mapping[str, str]) -> list[dict[str, str]]:
    """Requests, server errors and their ratio over ``window``, per level (record prefix -> ``by``)."""
    codes = "|".join(SERVER_ERRORS)
    out: list[dict[str, str]] = []
    for level, by in levels.items():
        sel = f'model_name="{model}"'
        total = f"sum by ({by}) (rate({REQUESTS}{{{sel}}}[{window}]))"
        # no error series until the first error: count zero errors then, not no ratio
        errors = (f'sum by ({by}) (rate({ERRORS}{{{sel},error_code=~"{codes}"}}[{window}])) or 0 * {total}')
        out += [
            {"record": f"{level}:shipyard_gateway_requests:rate{window}", "expr": total},
            {"record": f"{level}:shipyard_gateway_errors:rate{window}", "expr": errors},
            {"record": f"{level}:shipyard_gateway_errors:ratio_rate{window}",
             "expr": f"{level}:shipyard_gateway_errors:rate{window}{{{sel}}} / "
                     f"{level}:shipyard_gateway_requests:rate{window}{{{sel}}}"},
        ]
    return out


def gateway_rules(*, name: str, model_name: str, budget: float, budget_from: str, runbook_url: str,
                  common: Mapping[str, str], windows: tuple[str, ...], service_label: str,
                  burn_windows: tuple[tuple[str, str, float, str, str], ...]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The gateway's recording rules (per model and per member, every window), its burn-rate alerts
    (one per ``burn_windows`` row, against the error ``budget``) and their deploy-report rows."""
    levels = {"model_name": "model_name", "model_name_service": f"model_name, {service_label}"}
    records = [rule for window in windows for rule in _records(model_name, window, levels)]
    sel, ratio = f'model_name="{model_name}"', "model_name:shipyard_gateway_errors:ratio_rate"
    alerts: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for long_w, short_w, factor, severity, spent in burn_windows:
        limit = number(factor * budget)
        alert = f"ShipyardGatewayAvailabilityBudgetBurn{'Fast' if severity == 'critical' else 'Slow'}"
        alerts.append({
            "alert": alert,
            "expr": f"{ratio}{long_w}{{{sel}}} > {limit} and {ratio}{short_w}{{{sel}}} > {limit}",
            "labels": {**common, "severity": severity},
            "annotations": {
                "summary": f"{name}: requests the gateway refused or lost burn the error budget at {factor:g}x",
                "description": f"Over {long_w} and {short_w} a share above {limit} of {model_name}'s requests at "
                               "the gateway ended in a server-side error (shed under load, no ready endpoint, "
                               f"an error of the endpoint picker or the model server); error budget {number(budget)}, "
                               f"{factor:g}x burn: {spent}. vLLM's own SLIs do not see requests that never reached it.",
                "runbook_url": runbook_url,
            },
        })
        rows.append({"alert": alert, "severity": severity, "sli": "gateway availability",
                     "condition": f"error ratio at the gateway over {long_w} and {short_w} > {limit}",
                     "from": f"{factor:g} x error budget {number(budget)} ({budget_from})",
                     "edge": f"bad = {ERRORS} with error_code in {', '.join(SERVER_ERRORS)} (the endpoint picker's; "
                             "scraped by the PodMonitor " f"{name}-epp)"})
    return records, alerts, rows
