"""The one reader of a Prometheus HTTP API (``/api/v1/query``, ``/api/v1/query_range``).

What a live service did, as the Prometheus that scrapes its vLLM pods recorded it: ``shipyard
watch`` (:mod:`shipyard.serving.watch`) reads it to compare production with the envelope the
champion was qualified on. Every way a Prometheus can fail a caller is one line: no answer (exit
3), an answer that is not the API (an HTML login page, a proxy's error page), a query Prometheus
refuses (``status: error`` with its ``errorType``), and a query with no series (the metric or
label does not exist there, or the window is empty).
"""

from __future__ import annotations

import json
import math
import urllib.parse
from dataclasses import dataclass
from typing import Any

from shipyard.core.errors import ShipyardError, refuse_credentials
from shipyard.core.net import http_request, unreachable

#: how long one API call may take in all, connecting to the last byte (a range query over hours is still well under this)
TIMEOUT_S = 30.0
#: the largest answer taken (a range query is at most 11,000 points a series: some 0.4 MB each)
MAX_ANSWER_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class PrometheusAPI:
    """A Prometheus (or a Thanos/Mimir query front end) at ``url``; ``field``: the option that named it."""

    url: str
    field: str = "--prometheus"
    timeout_s: float = TIMEOUT_S
    token: str = ""

    def __post_init__(self) -> None:
        parsed = urllib.parse.urlsplit(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ShipyardError(self.field, f"{self.url[:200]!r} is not an http(s) URL",
                                "give the Prometheus base URL, e.g. http://prometheus-operated.monitoring:9090")
        refuse_credentials(self.url, self.field, "pass a bearer token with --prometheus-token-file instead")

    def _get(self, path: str, params: dict[str, str]) -> Any:
        url = self.url.rstrip("/") + path + "?" + urllib.parse.urlencode(params)
        headers = {"Accept": "application/json"} | ({"Authorization": f"Bearer {self.token}"} if self.token else {})
        answered: dict[str, str] = {}
        try:  # within timeout_s in all, however slowly Prometheus (or a proxy before it) answers
            status, body = http_request(url, deadline_s=self.timeout_s, headers=headers, field=self.field,
                                        response_headers=answered, max_bytes=MAX_ANSWER_BYTES)
        except OSError as err:  # TimeoutError (the deadline) and URLError are OSErrors too
            raise unreachable(self.field, self.url, err, self.timeout_s) from None
        kind = answered.get("Content-Type", "")
        if status >= 400 and "json" not in kind:  # 400/422: the API's own error document; else a proxy's page
            raise ShipyardError(self.field, f"{self.url} answered HTTP {status} ({kind or 'no content type'}), "
                                "not Prometheus's API", "give the Prometheus API's base URL (the path before "
                                "/api/v1), and a token if a proxy asks for one")
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or "status" not in doc:
            what = "an HTML page" if body.lstrip()[:1] == b"<" else f"{kind or 'something'} that is not its JSON"
            raise ShipyardError(self.field, f"{self.url} answered {what}, not Prometheus's API",
                                "give the Prometheus API's base URL (the path before /api/v1), and a token if a "
                                "login page answered")
        if doc["status"] != "success":
            raise ShipyardError(self.field, f"Prometheus refused the query ({doc.get('errorType', 'error')}: "
                                f"{str(doc.get('error', ''))[:300]})", "check the query's metric names and window")
        return doc.get("data") or {}

    def instant(self, query: str, at: float | None = None) -> list[dict[str, Any]]:
        """``/api/v1/query``: the vector's samples, each ``{"metric": labels, "value": float}``."""
        params = {"query": query} | ({"time": f"{at:.3f}"} if at is not None else {})
        data = self._get("/api/v1/query", params)
        if data.get("resultType") == "scalar":
            return [{"metric": {}, "value": _number(data["result"][1])}]
        return [{"metric": s.get("metric", {}), "value": _number(s["value"][1])} for s in data.get("result", [])]

    def range(self, query: str, start: float, end: float, step_s: float) -> list[dict[str, Any]]:
        """``/api/v1/query_range``: each series ``{"metric": labels, "values": [(t, float), ...]}``."""
        data = self._get("/api/v1/query_range", {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                                 "step": f"{step_s:g}s"})
        return [{"metric": s.get("metric", {}), "values": [(float(t), _number(v)) for t, v in s.get("values", [])]}
                for s in data.get("result", [])]

    def scalar(self, query: str, what: str, at: float | None = None) -> float | None:
        """One number (the query must return at most one series); None when the series exist but hold no
        finite value in the window (a rate of 0 over 0); one line when no series exist at all."""
        samples = self.instant(query, at)
        if not samples:
            raise ShipyardError(self.field, f"no series for {what} ({query[:200]})",
                                "check the model name label, that Prometheus scrapes the vLLM pods, and that the "
                                "window holds traffic")
        if len(samples) > 1:
            raise ShipyardError(self.field, f"{len(samples)} series for {what}, expected one ({query[:200]})",
                                "narrow the selector (model_name, namespace)")
        value = samples[0]["value"]
        return value if math.isfinite(value) else None

    def build_info(self) -> dict[str, Any]:
        """``/api/v1/status/buildinfo`` (its version), to say which Prometheus answered."""
        return dict(self._get("/api/v1/status/buildinfo", {}))


def _number(text: Any) -> float:
    """A sample value as Prometheus writes it (``"1.5"``, ``"NaN"``, ``"+Inf"``)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan
