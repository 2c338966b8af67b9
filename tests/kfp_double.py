"""An HTTP test double of the KFP v2beta1 REST API (the part shipyard's client uses).

What it checks in each request:

* ``POST /apis/v2beta1/recurringruns``: the body against ``v2beta1RecurringRun`` of the
  upstream ``recurring_run.swagger.json`` (KFP 2.17.0, vendored in ``shipyard/schemas/kfp/``),
  made strict: no unknown fields (grpc-gateway rejects them), proto3-JSON int64 as a string or
  a number, no output-only fields, exactly one trigger, a six-field robfig cron
  (seconds first) or a descriptor, ``max_concurrency`` in [1, 10] and mode ENABLE/DISABLE.
* ``POST /apis/v2beta1/runs``, ``/experiments``: KFP's run and experiment swaggers are not in
  ``shipyard/schemas``, so those bodies are checked against the field names and nested types
  of the installed ``kfp_server_api`` models (the client generated from those swaggers):
  every key must be a known field, nested objects recursively.
* ``POST /apis/v2beta1/pipelines/upload`` and ``/upload_version``: a multipart form with one
  ``uploadfile`` part holding a compiled pipeline (YAML with ``pipelineInfo.name``, ``root``,
  ``deploymentSpec``, ``schemaVersion``), the name in the query (``pipelineid`` for versions).
* ``GET /apis/v2beta1/runs/{id}``: the run, its ``state`` stepping through :attr:`KfpDouble.run_states`
  on each call (``shipyard submit --wait`` polls it).
* Every request: ``Authorization: Bearer <token>`` (or the session cookie) when the double
  was given one; otherwise 401 with a ``googleRpcStatus`` body, as KFP behind auth answers.

Everything accepted is recorded in :attr:`KfpDouble.requests` for the tests to inspect.
"""

from __future__ import annotations

import copy
import email.parser
import email.policy
import json
import re
import threading
import urllib.parse
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

import jsonschema
import kfp_server_api
import yaml

from shipyard.schemas import SCHEMAS_DIR
from shipyard.testing.loopback import LoopbackServer

SWAGGER = SCHEMAS_DIR / "kfp" / "recurring_run.swagger.json"
FREE_FORM = {"pipeline_spec", "parameters", "plugins_input", "details"}
OUTPUT_ONLY = {"recurring_run_id", "created_at", "updated_at", "status", "error"}
CRON_RANGES = [(0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 6)]
CRON_NAMES = [{}, {}, {}, {},
              {m: i + 1 for i, m in enumerate("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split())},
              {d: i for i, d in enumerate("SUN MON TUE WED THU FRI SAT".split())}]


class Rejected(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _strict(schema: Any) -> Any:
    """Close every object with declared properties; let int64 strings be numbers too."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        if out.get("type") == "string" and out.get("format") in ("int64", "uint64"):
            out = {"anyOf": [{"type": "string", "pattern": r"^-?\d+$"}, {"type": "integer"}],
                   "description": out.get("description", "")}
        if out.get("type") == "string" and out.get("format") == "date-time":
            out.pop("format")
            out["pattern"] = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$"
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def recurring_run_schema() -> dict[str, Any]:
    swagger = json.loads(SWAGGER.read_text())
    definitions = _strict(copy.deepcopy(swagger["definitions"]))
    body = swagger["paths"]["/apis/v2beta1/recurringruns"]["post"]["parameters"][0]["schema"]
    return {"definitions": definitions, **body}


def validate_cron(expr: str) -> None:
    """robfig/cron (v1, which KFP's ScheduledWorkflow uses): six fields, seconds first."""
    expr = expr.strip()
    if expr.startswith("@"):
        if expr in ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"):
            return
        if re.fullmatch(r"@every (\d+(\.\d+)?(ns|us|ms|s|m|h))+", expr):
            return
        raise Rejected(400, f"invalid cron descriptor {expr!r}")
    fields = expr.split()
    if len(fields) != 6:
        raise Rejected(400, f"Expected 6 fields in cron {expr!r}, found {len(fields)}")
    for i, (text, (lo, hi)) in enumerate(zip(fields, CRON_RANGES, strict=True)):
        for part in text.split(","):
            rng, _, step = part.partition("/")
            if step and not step.isdigit():
                raise Rejected(400, f"bad step in cron field {text!r}")
            if rng in ("*", "?"):
                continue
            bounds = rng.split("-")
            if len(bounds) > 2:
                raise Rejected(400, f"bad range in cron field {text!r}")
            for b in bounds:
                value = CRON_NAMES[i].get(b.upper(), int(b) if b.isdigit() else None)
                if value is None or not lo <= value <= hi:
                    raise Rejected(400, f"value {b!r} out of range [{lo}, {hi}] in cron field {text!r}")


def check_model(model: type, data: Any, where: str) -> None:
    """Keys and nested types of a request body against a ``kfp_server_api`` model."""
    if not isinstance(data, dict):
        raise Rejected(400, f"{where}: expected an object")
    by_json = {json_name: attr for attr, json_name in model.attribute_map.items()}
    for key, value in data.items():
        if key not in by_json:
            raise Rejected(400, f'{where}: unknown field "{key}" in {model.__name__}')
        kind = model.openapi_types[by_json[key]]
        nested = getattr(kfp_server_api.models, kind, None)
        if value is None:
            continue
        if isinstance(nested, type) and hasattr(nested, "attribute_map") and nested.attribute_map:
            check_model(nested, value, f"{where}.{key}")
        elif isinstance(nested, type) and hasattr(nested, "allowable_values"):
            if value not in nested.allowable_values:
                raise Rejected(400, f"{where}.{key}: {value!r} is not one of {nested.allowable_values}")
        elif kind == "str" and not isinstance(value, str):
            raise Rejected(400, f"{where}.{key}: expected a string")
        elif kind == "bool" and not isinstance(value, bool):
            raise Rejected(400, f"{where}.{key}: expected a boolean")


def check_pipeline_yaml(raw: bytes) -> dict[str, Any]:
    try:
        docs = [d for d in yaml.safe_load_all(raw.decode()) if d]
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise Rejected(400, f"uploadfile is not YAML: {err}") from None
    spec = docs[0] if docs else None
    if not isinstance(spec, dict) or "pipelineSpec" in spec:
        spec = (spec or {}).get("pipelineSpec") if isinstance(spec, dict) else None
    if not isinstance(spec, dict):
        raise Rejected(400, "uploadfile has no pipeline spec")
    for key in ("pipelineInfo", "root", "deploymentSpec", "schemaVersion"):
        if key not in spec:
            raise Rejected(400, f"uploadfile: pipeline spec lacks {key}")
    if not spec["pipelineInfo"].get("name"):
        raise Rejected(400, "uploadfile: pipelineInfo.name is empty")
    return spec


def parse_multipart(content_type: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    if not content_type.startswith("multipart/form-data"):
        raise Rejected(400, f"expected multipart/form-data, got {content_type!r}")
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    parts: dict[str, tuple[str | None, bytes]] = {}
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        parts[str(name)] = (part.get_filename(), part.get_payload(decode=True) or b"")
    return parts


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _matches(obj: dict[str, Any], filter_json: str | None) -> bool:
    if not filter_json:
        return True
    for pred in json.loads(filter_json).get("predicates", []):
        op = pred.get("operation")
        if op not in (1, "EQUALS"):
            raise Rejected(400, f"double supports EQUALS filters only, got {op!r}")
        key = pred["key"]
        if key == "name":
            key = "display_name"
        if str(obj.get(key)) != str(pred.get("string_value", pred.get("stringValue"))):
            return False
    return True


@dataclass
class KfpDouble:
    """State of the double: what exists and every accepted request."""

    token: str | None = None
    cookie: str | None = None
    pipelines: dict[str, dict[str, Any]] = field(default_factory=dict)
    versions: dict[str, dict[str, Any]] = field(default_factory=dict)
    experiments: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    recurring_runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    #: the text of every accepted upload (the whole file: the IR and its Kubernetes platform spec)
    uploaded: list[str] = field(default_factory=list)
    #: the states a run reports on each ``GET /runs/{id}`` after it was created (the last one stays)
    run_states: list[str] = field(default_factory=lambda: ["RUNNING", "SUCCEEDED"])
    rejected: list[tuple[str, str, str]] = field(default_factory=list)
    url: str = ""
    _server: LoopbackServer | None = None

    def __post_init__(self) -> None:
        self._rr_schema = recurring_run_schema()
        self._lock = threading.Lock()

    # ---- lifecycle

    def start(self) -> KfpDouble:
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self, method: str) -> None:
                parsed = urllib.parse.urlsplit(self.path)
                query = {k: v[-1] for k, v in urllib.parse.parse_qs(parsed.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                try:
                    double._authorize(self.headers)
                    with double._lock:
                        status, payload = double.route(method, parsed.path, query, self.headers, body)
                except Rejected as err:
                    double.rejected.append((method, parsed.path, err.message))
                    status, payload = err.code, {"code": {400: 3, 401: 16, 404: 5, 409: 6}.get(err.code, 2),
                                                 "message": err.message, "details": []}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._handle("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._handle("POST")

        self._server = LoopbackServer(Handler).start()
        self.url = self._server.url
        return self

    def stop(self) -> None:
        if self._server:
            self._server.stop()

    def _authorize(self, headers: Any) -> None:
        if self.token is None and self.cookie is None:
            return
        auth = headers.get("Authorization", "")
        cookie = headers.get("Cookie", "")
        if self.token is not None and auth == f"Bearer {self.token}":
            return
        if self.cookie is not None and self.cookie in [c.strip() for c in cookie.split(";")]:
            return
        raise Rejected(401, "Unauthenticated: the request has no valid credentials")

    # ---- routes

    def route(self, method: str, path: str, query: dict[str, str], headers: Any, body: bytes) -> tuple[int, Any]:
        api = "/apis/v2beta1"
        if method == "GET" and path == f"{api}/healthz":
            return 200, {"multi_user": False}
        if method == "POST" and path in (f"{api}/pipelines/upload", f"{api}/pipelines/upload_version"):
            return self._upload(path.endswith("upload_version"), query, headers, body)
        if method == "GET" and path == f"{api}/pipelines":
            found = [p for p in self.pipelines.values() if _matches(p, query.get("filter"))]
            return 200, {"pipelines": found, "total_size": len(found)} if found else {}
        m = re.fullmatch(rf"{api}/pipelines/([^/]+)/versions", path)
        if method == "GET" and m:
            found = [v for v in self.versions.values()
                     if v["pipeline_id"] == m.group(1) and _matches(v, query.get("filter"))]
            found.sort(key=lambda v: v["created_at"], reverse="desc" in query.get("sort_by", ""))
            return 200, {"pipeline_versions": found, "total_size": len(found)} if found else {}
        if path == f"{api}/experiments":
            if method == "GET":
                found = [e for e in self.experiments.values() if _matches(e, query.get("filter"))]
                return 200, {"experiments": found, "total_size": len(found)} if found else {}
            return self._create_experiment(body)
        if path == f"{api}/runs":
            if method == "GET":
                runs = sorted(({k: v for k, v in r.items() if not k.startswith("_")} for r in self.runs.values()),
                              key=lambda r: r["created_at"], reverse=True)
                if query.get("experiment_id"):
                    runs = [r for r in runs if r.get("experiment_id") == query["experiment_id"]]
                size = int(query.get("page_size") or 10)
                return 200, {"runs": runs[:size], "total_size": len(runs)} if runs else {}
            return self._create_run(body)
        m = re.fullmatch(rf"{api}/runs/([^/:]+)", path)
        if method == "GET" and m:
            run = self.runs.get(m.group(1))
            if run is None:
                raise Rejected(404, f"run {m.group(1)!r} not found")
            polled = run.setdefault("_polls", 0)
            run["_polls"] = polled + 1
            run["state"] = self.run_states[min(polled, len(self.run_states) - 1)] if self.run_states else run["state"]
            return 200, {k: v for k, v in run.items() if not k.startswith("_")}
        if path == f"{api}/recurringruns":
            if method == "GET":
                found = list(self.recurring_runs.values())
                return 200, {"recurringRuns": found, "total_size": len(found)} if found else {}
            return self._create_recurring_run(body)
        raise Rejected(404, f"double does not serve {method} {path}")

    def _json(self, body: bytes) -> dict[str, Any]:
        try:
            data = json.loads(body or b"{}")
        except ValueError:
            raise Rejected(400, "body is not JSON") from None
        if not isinstance(data, dict):
            raise Rejected(400, "body must be a JSON object")
        return data

    def _upload(self, version: bool, query: dict[str, str], headers: Any, body: bytes) -> tuple[int, Any]:
        parts = parse_multipart(headers.get("Content-Type", ""), body)
        if set(parts) != {"uploadfile"} or not parts["uploadfile"][0]:
            raise Rejected(400, f"form must have exactly one file part 'uploadfile', got {sorted(parts)}")
        allowed = {"name", "display_name", "description", "namespace", "tags"} | ({"pipelineid"} if version else set())
        unknown = set(query) - allowed
        if unknown:
            raise Rejected(400, f"unknown query parameters {sorted(unknown)}")
        spec = check_pipeline_yaml(parts["uploadfile"][1])
        name = query.get("name") or query.get("display_name") or spec["pipelineInfo"]["name"]
        now = _now()
        if version:
            pid = query.get("pipelineid")
            if pid not in self.pipelines:
                raise Rejected(404, f"pipeline {pid!r} not found")
            if any(v["pipeline_id"] == pid and v["display_name"] == name for v in self.versions.values()):
                raise Rejected(409, f"version {name!r} already exists")
        else:
            if any(p["display_name"] == name for p in self.pipelines.values()):
                raise Rejected(409, f"pipeline {name!r} already exists")
            pid = uuid.uuid4().hex
            self.pipelines[pid] = {"pipeline_id": pid, "display_name": name, "name": name, "created_at": now,
                                   "description": query.get("description", "")}
        vid = uuid.uuid4().hex
        ver = {"pipeline_id": pid, "pipeline_version_id": vid, "display_name": name, "name": name,
               "created_at": now, "pipeline_spec": spec}
        self.versions[vid] = ver
        self.requests.append(("upload_version" if version else "upload", name, spec))
        self.uploaded.append(parts["uploadfile"][1].decode())
        return 200, ver if version else self.pipelines[pid]

    def _create_experiment(self, body: bytes) -> tuple[int, Any]:
        data = self._json(body)
        check_model(kfp_server_api.V2beta1Experiment, data, "experiment")
        if not data.get("display_name"):
            raise Rejected(400, "experiment.display_name is required")
        eid = uuid.uuid4().hex
        exp = {**data, "experiment_id": eid, "created_at": _now(), "storage_state": "AVAILABLE"}
        self.experiments[eid] = exp
        self.requests.append(("experiment", eid, data))
        return 200, exp

    def _check_pipeline_source(self, data: dict[str, Any], what: str) -> None:
        ref = data.get("pipeline_version_reference")
        if bool(ref) == bool(data.get("pipeline_spec")):
            raise Rejected(400, f"{what} needs exactly one of pipeline_spec and pipeline_version_reference")
        if ref:
            vid = ref.get("pipeline_version_id")
            if vid not in self.versions or self.versions[vid]["pipeline_id"] != ref.get("pipeline_id"):
                raise Rejected(404, f"pipeline version {vid!r} of pipeline {ref.get('pipeline_id')!r} not found")
        if data.get("experiment_id") and data["experiment_id"] not in self.experiments:
            raise Rejected(404, f"experiment {data['experiment_id']!r} not found")

    def _create_run(self, body: bytes) -> tuple[int, Any]:
        data = self._json(body)
        check_model(kfp_server_api.V2beta1Run, data, "run")
        if not data.get("display_name"):
            raise Rejected(400, "run.display_name is required")
        self._check_pipeline_source(data, "run")
        rid = uuid.uuid4().hex
        run = {**data, "run_id": rid, "created_at": _now(), "state": "PENDING"}
        self.runs[rid] = run
        self.requests.append(("run", rid, data))
        return 200, run

    def _create_recurring_run(self, body: bytes) -> tuple[int, Any]:
        data = self._json(body)
        errors = sorted(jsonschema.Draft4Validator(self._rr_schema).iter_errors(data), key=str)
        if errors:
            e = errors[0]
            raise Rejected(400, f"recurring_run{''.join(f'.{p}' for p in e.absolute_path)}: {e.message}")
        present = OUTPUT_ONLY & set(data)
        if present:
            raise Rejected(400, f"output-only fields set: {sorted(present)}")
        if not data.get("display_name"):
            raise Rejected(400, "recurring_run.display_name is required")
        if data.get("mode") not in ("ENABLE", "DISABLE"):
            raise Rejected(400, "recurring_run.mode must be ENABLE or DISABLE")
        trigger = data.get("trigger") or {}
        if len([k for k in ("cron_schedule", "periodic_schedule") if trigger.get(k)]) != 1:
            raise Rejected(400, "recurring_run.trigger needs exactly one of cron_schedule and periodic_schedule")
        if "cron_schedule" in trigger:
            validate_cron(trigger["cron_schedule"].get("cron", ""))
        else:
            if int(trigger["periodic_schedule"].get("interval_second") or 0) <= 0:
                raise Rejected(400, "periodic_schedule.interval_second must be > 0")
        mc = int(data.get("max_concurrency") or 1)
        if not 1 <= mc <= 10:
            raise Rejected(400, f"max_concurrency {mc} is not in [1, 10]")
        self._check_pipeline_source(data, "recurring_run")
        rid = uuid.uuid4().hex
        rr = {**data, "recurring_run_id": rid, "created_at": _now(), "status": "ENABLED"}
        self.recurring_runs[rid] = rr
        self.requests.append(("recurring_run", rid, data))
        return 200, rr
