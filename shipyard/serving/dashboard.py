"""The deployed service's Grafana dashboard: live vLLM series against the envelope it was qualified on.

:func:`dashboard_configmap` renders a ConfigMap ``<name>-dashboard`` labelled ``grafana_dashboard:
"1"`` (the label the Grafana sidecar of kube-prometheus-stack watches by default) holding one
dashboard JSON. Each panel draws the live series from the metrics vLLM 0.32 exports (and the
recording rules of :mod:`shipyard.serving.alerts`) beside the envelope as constant series: the SLO
lines, the figures the benchmark measured at the knee (p99 TTFT and ITL, requests/s per replica),
the thresholds of the queue-depth and KV-cache alerts at the knee
(:func:`shipyard.serving.alerts.occupancy_limits`), the prefix-cache hit rate the server had while the
benchmark replayed a recorded workload, and the burn-rate lines of the alerts. Series are split by ``instance`` (one per vLLM pod); four
panels (:func:`split_panels`) draw the prefill/decode split (by :data:`ROLE_LABEL`) and the canary
members side by side (by :data:`SERVICE_LABEL`, the LLMInferenceService's name) from the per-role and
per-service recording rules (``model_name_role:...``, ``model_name_service:...``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from shipyard.serving.alerts import (
    BURN_WINDOWS,
    DEFAULT_ERROR_BUDGET,
    ROLE_LABEL,
    SERVICE_LABEL,
    occupancy_limits,
)

SIDECAR_LABEL = "grafana_dashboard"


def _const(value: float, legend: str) -> dict[str, str]:
    return {"expr": f"vector({format(round(value, 10), '.10g')})", "legendFormat": legend}


def _panel(pid: int, title: str, unit: str, targets: list[dict[str, str]]) -> dict[str, Any]:
    return {"id": pid, "type": "timeseries", "title": title, "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * ((pid - 1) % 2), "y": 8 * ((pid - 1) // 2)},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [{**t, "refId": chr(ord("A") + i)} for i, t in enumerate(targets)]}


def split_panels(first_id: int, sel: str, budget: float) -> list[dict[str, Any]]:
    """The P/D split and the canary members side by side: requests/s and the 5-minute SLO-miss ratios
    per role and per service, from the per-role and per-service recording rules, with the error
    budget as a constant line."""
    out = []
    for i, (level, label, what) in enumerate((("model_name_role", ROLE_LABEL, "P/D split (per role)"),
                                              ("model_name_service", SERVICE_LABEL, "Canary members side by side"))):
        legend = f"{{{{{label}}}}}"
        out.append(_panel(first_id + 2 * i, f"{what}: requests/s", "reqps",
                          [{"expr": f"{level}:shipyard_availability_requests:rate5m{{{sel}}}",
                            "legendFormat": f"{legend}"}]))
        out.append(_panel(first_id + 2 * i + 1, f"{what}: share of requests missing the SLO (5m)", "percentunit",
                          [*({"expr": f"{level}:shipyard_{sli}_errors:ratio_rate5m{{{sel}}}",
                              "legendFormat": f"{sli} {legend}"} for sli in ("ttft", "itl", "availability")),
                           _const(budget, f"error budget ({format(budget, '.10g')})")]))
    return out


def dashboard(*, name: str, model_name: str, slo: Mapping[str, Any], knee: Mapping[str, Any] | None,
              prefix_hit_rate: float | None = None) -> dict[str, Any]:
    """The Grafana dashboard JSON (schema of Grafana 10+ ``timeseries`` panels, a ``datasource`` variable);
    ``prefix_hit_rate``: the server's prefix-cache hit rate while the benchmark replayed the recorded
    workload (the champion record's ``workload.prefix_hit_rate``), drawn on the hit-rate panel."""
    sel = f'model_name="{model_name}"'
    knee = knee or {}
    budget = float(slo.get("error_budget", DEFAULT_ERROR_BUDGET))

    def p99(metric: str) -> dict[str, str]:
        return {"expr": f"histogram_quantile(0.99, sum by (instance, le) (rate({metric}_bucket{{{sel}}}[5m])))",
                "legendFormat": "p99 {{instance}}"}

    def envelope(key: str, label: str) -> list[dict[str, str]]:
        out = [_const(float(slo[key]) / 1000.0, f"SLO ({label} {slo[key]:g} ms)")]
        if knee.get(key) is not None:
            out.append(_const(float(knee[key]) / 1000.0, f"p99 at the knee ({knee.get('name')}, {knee[key]:g} ms)"))
        return out

    knee_rps = [_const(float(knee["requests_per_s"]), f"knee ({knee.get('name')})")] if knee.get("requests_per_s") else []
    limits = occupancy_limits(knee)
    at_knee = {key: [_const(limits[key], f"alert above ({label} at the knee, {knee.get('name')})")] if key in limits else []
               for key, label in (("waiting", "waiting"), ("kv_cache_usage", "KV-cache share"))}
    panels = [
        _panel(1, "TTFT p99 per pod", "s", [p99("vllm:time_to_first_token_seconds"), *envelope("ttft_p99_ms", "TTFT p99")]),
        _panel(2, "ITL p99 per pod (mean per request)", "s",
               [p99("vllm:request_time_per_output_token_seconds"), *envelope("itl_p99_ms", "ITL p99")]),
        _panel(3, "Requests/s per ready replica", "reqps",
               [{"expr": f"model_name:shipyard_requests_per_replica:rate5m{{{sel}}}", "legendFormat": "per replica"},
                {"expr": f"sum by (instance) (rate(vllm:request_success_total{{{sel}}}[5m]))",
                 "legendFormat": "{{instance}}"}, *knee_rps]),
        _panel(4, "Error-budget burn rate (x budget)", "none",
               [*({"expr": f"model_name:shipyard_{sli}_errors:ratio_rate1h{{{sel}}} / {format(budget, '.10g')}",
                   "legendFormat": f"{sli} 1h"} for sli in ("ttft", "itl", "availability", "gateway")),
                *(_const(factor, f"{severity} ({long_w}/{short_w})") for long_w, short_w, factor, severity, _ in BURN_WINDOWS)]),
        _panel(5, "KV-cache usage per pod", "percentunit",
               [{"expr": f"max by (instance) (vllm:kv_cache_usage_perc{{{sel}}})", "legendFormat": "{{instance}}"},
                *at_knee["kv_cache_usage"]]),
        _panel(6, "Queue depth per pod", "none",
               [{"expr": f"sum by (instance) (vllm:num_requests_waiting{{{sel}}})", "legendFormat": "waiting {{instance}}"},
                {"expr": f"sum by (instance) (vllm:num_requests_running{{{sel}}})", "legendFormat": "running {{instance}}"},
                *at_knee["waiting"]]),
        _panel(7, "Prefix-cache hit rate per pod", "percentunit",
               [{"expr": f"sum by (instance) (rate(vllm:prefix_cache_hits_total{{{sel}}}[5m])) / "
                         f"sum by (instance) (rate(vllm:prefix_cache_queries_total{{{sel}}}[5m]))",
                 "legendFormat": "{{instance}}"},
                *([_const(prefix_hit_rate, f"during the replay of your recorded workload ({prefix_hit_rate:.2g})")]
                  if prefix_hit_rate is not None else [])]),
        _panel(8, "At the gateway: requests/s and errors by code (llm-d endpoint picker)", "reqps",
               [{"expr": f"model_name:shipyard_gateway_requests:rate5m{{{sel}}}", "legendFormat": "requests"},
                {"expr": f"sum by (error_code) (rate(inference_objective_request_error_total{{{sel}}}[5m]))",
                 "legendFormat": "{{error_code}}"}]),
        *split_panels(9, sel, budget),  # odd: each pair on a row of its own (gridPos from the id)
    ]
    return {"title": f"shipyard: {name}", "uid": f"shipyard-{name}"[:40], "schemaVersion": 39, "editable": False,
            "tags": ["shipyard", "vllm", "slo"], "time": {"from": "now-6h", "to": "now"}, "refresh": "30s",
            "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus"}]},
            "panels": panels}


def dashboard_configmap(*, name: str, namespace: str, model_name: str, slo: Mapping[str, Any],
                        knee: Mapping[str, Any] | None, labels: Mapping[str, str] | None = None,
                        prefix_hit_rate: float | None = None) -> dict[str, Any]:
    """The ConfigMap ``<name>-dashboard`` the Grafana sidecar loads (label ``grafana_dashboard: "1"``)."""
    board = dashboard(name=name, model_name=model_name, slo=slo, knee=knee, prefix_hit_rate=prefix_hit_rate)
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"{name}-dashboard", "namespace": namespace,
                         "labels": {**dict(labels or {}), SIDECAR_LABEL: "1"}},
            "data": {f"{name}.json": json.dumps(board, indent=1, sort_keys=True)}}


def expressions(configmap: Mapping[str, Any]) -> list[str]:
    """Every PromQL expression of the ConfigMap's dashboard (for checking them with promtool)."""
    exprs: list[str] = []
    for text in (configmap.get("data") or {}).values():
        for panel in json.loads(text).get("panels", []):
            exprs += [t["expr"] for t in panel.get("targets", [])]
    return exprs
