"""Submit, schedule and list shipyard pipelines on a Kubeflow Pipelines server (``kfp.Client``).

``PIPELINE`` is a name from :data:`shipyard.pipelines.PIPELINES` (compiled on the fly) or a
compiled pipeline file (``.yaml``/``.yml``/``.json``). Uploading is idempotent: the pipeline is
created on first use, and each distinct compiled content becomes one version named after its
hash, reused when it is already there.

Auth, as KFP users expect: ``--token`` (``KF_PIPELINES_TOKEN``) is sent as
``Authorization: Bearer``; ``--cookie`` (``KF_PIPELINES_COOKIE``, e.g.
``authservice_session=...`` or ``oauth2_proxy_kubeflow=...``) as ``Cookie``; the host may also
come from ``KF_PIPELINES_ENDPOINT``. A host that refuses the credentials ends with one line.

Deadline: each call to the KFP API (the reachability check, then each of kfp.Client's calls with
its own retries) ends within ``SHIPYARD_KFP_TIMEOUT_S`` seconds in all (default 60), however
slowly the server or a proxy before it answers: then one line naming the setting (exit 3).

Cron: KFP's ScheduledWorkflow uses robfig/cron with six fields, seconds first
(``sec min hour day-of-month month day-of-week``). A usual five-field expression gets a
leading ``0`` and is echoed back; descriptors (``@daily``...) are expanded to six fields.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.core.env import env_seconds
from shipyard.core.errors import ShipyardError, UnreachableError, header_value, refuse_credentials
from shipyard.core.net import call_within
from shipyard.core.yamldocs import documents
from shipyard.params.specs import param_specs, split_params
from shipyard.pipelines import PIPELINES
from shipyard.run.compile import compile_pipeline

CRON_FIELDS = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")
CRON_RANGES = ((0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
MONTHS = {m: i + 1 for i, m in enumerate("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split())}
DAYS = {d: i for i, d in enumerate("SUN MON TUE WED THU FRI SAT".split())}
DESCRIPTORS = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@midnight": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
#: the setting that bounds each call to the KFP API (seconds in all, default :data:`KFP_TIMEOUT_S`)
ENV_KFP_TIMEOUT = "SHIPYARD_KFP_TIMEOUT_S"
KFP_TIMEOUT_S = 60.0


def kfp_timeout_s() -> float:
    """The most one call to the KFP API may take, in seconds (``SHIPYARD_KFP_TIMEOUT_S``)."""
    return env_seconds(ENV_KFP_TIMEOUT, KFP_TIMEOUT_S)


# --------------------------------------------------------------------------- schedules


def _cron_value(text: str, index: int) -> int:
    names = MONTHS if index == 4 else DAYS if index == 5 else {}
    if text.upper() in names:
        return names[text.upper()]
    if not (text.isascii() and text.isdigit()):  # "１２" is a digit to Python, not to KFP
        raise ValueError(f"{text!r} is not a number")
    value = int(text)
    lo, hi = CRON_RANGES[index]
    if index == 5 and value == 7:
        raise ValueError("day-of-week 7 is not allowed in KFP's cron (Sunday is 0)")
    if not lo <= value <= hi:
        raise ValueError(f"{value} is outside {lo}-{hi}")
    return value


def _cron_set(text: str, index: int) -> set[int] | None:
    """The values a checked cron field allows (None for ``*``/``?``: every value)."""
    lo, hi = CRON_RANGES[index]
    out: set[int] = set()
    for part in text.split(","):
        rng, _, step = part.partition("/")
        if rng in ("*", "?"):
            if not step:
                return None
            first, last = lo, hi
        else:
            bounds = [_cron_value(b, index) for b in rng.split("-")]
            first, last = bounds[0], bounds[-1] if len(bounds) == 2 or step else bounds[0]
            if step and len(bounds) == 1:
                last = hi
        out.update(range(first, last + 1, int(step) if step else 1))
    return out


#: the most days each month has (February: 29)
_MONTH_DAYS = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}


def _check_fires(fields: list[str], expr: str) -> None:
    """Refuse a schedule whose day-of-month never occurs in its months (``0 0 30 2 *``: never)."""
    days, months, weekdays = _cron_set(fields[3], 3), _cron_set(fields[4], 4), _cron_set(fields[5], 5)
    if days is None or weekdays is not None:
        return  # every day, or a weekday rule that can fire on its own
    months = months if months is not None else set(_MONTH_DAYS)
    if not any(day <= _MONTH_DAYS[month] for day in days for month in months):
        raise ShipyardError("--cron", f"{expr!r} never fires (day {min(days)} does not occur in month(s) "
                            f"{', '.join(map(str, sorted(months)))})", "pick a day that exists in those months")


def _check_cron_field(text: str, index: int) -> None:
    if not text:
        raise ValueError("empty field")
    for part in text.split(","):
        rng, slash, step = part.partition("/")
        if slash and (not (step.isascii() and step.isdigit()) or int(step) == 0):
            raise ValueError(f"step {step!r} must be a positive number")
        if rng == "?":
            if index not in (3, 5):
                raise ValueError("'?' is only allowed in day-of-month and day-of-week")
            continue
        if rng == "*":
            continue
        bounds = rng.split("-")
        if len(bounds) > 2:
            raise ValueError(f"{rng!r} is not a range")
        values = [_cron_value(b, index) for b in bounds]
        if len(values) == 2 and values[0] > values[1]:
            raise ValueError(f"range {rng!r} runs backwards")


def to_kfp_cron(expr: str) -> str:
    """A cron expression as KFP wants it (six fields, seconds first); one-line error if invalid."""
    text = " ".join((expr or "").split())
    if text.lower() in DESCRIPTORS:
        return DESCRIPTORS[text.lower()]
    if text.startswith("@"):
        raise ShipyardError(
            "--cron", f"{text!r} is not a cron descriptor KFP knows", "use @hourly/@daily/@weekly/@monthly/@yearly, "
            "five fields, or --every for intervals"
        )
    fields = text.split(" ") if text else []
    if len(fields) == 5:
        fields = ["0", *fields]
    if len(fields) != 6:
        raise ShipyardError(
            "--cron", f"{expr!r} has {len(fields)} fields", "give five fields (min hour dom month dow) or six with "
            "seconds first, e.g. '0 3 * * *'"
        )
    for index, value in enumerate(fields):
        try:
            _check_cron_field(value, index)
        except ValueError as err:
            raise ShipyardError(
                "--cron", f"{CRON_FIELDS[index]} field {value!r} in {expr!r} is invalid: {err}",
                "fields are sec min hour dom month dow with *, ?, lists, ranges and /steps",
            ) from None
    _check_fires(fields, expr)
    return " ".join(fields)


def parse_duration(text: str) -> int:
    """``90s``, ``30m``, ``6h``, ``1d``, ``1w``, ``1h30m`` or plain seconds -> seconds (> 0)."""
    raw = (text or "").strip().lower()
    if not raw.isascii() or len(raw) > 40:
        raise ShipyardError("--every", f"{text!r}"[:60] + " is not a duration", "use e.g. 30m, 6h, 1d, 1w or 1h30m "
                            "(ASCII digits)")
    if raw.isdigit():
        seconds = int(raw)
    else:
        parts = re.findall(r"([0-9]+)([smhdw])", raw)
        if not parts or "".join(n + u for n, u in parts) != raw:
            raise ShipyardError("--every", f"{text!r} is not a duration", "use e.g. 30m, 6h, 1d, 1w or 1h30m")
        seconds = sum(int(n) * DURATION_UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ShipyardError("--every", "must be longer than zero")
    if seconds > 2**63 - 1:  # KFP's interval_second is an int64
        raise ShipyardError("--every", f"{seconds} s is beyond what KFP can store (int64)", "use e.g. 1d or 1w")
    return seconds


# --------------------------------------------------------------------------- pipelines


@dataclass(frozen=True)
class PipelinePackage:
    """A compiled pipeline ready to upload."""

    path: Path
    name: str
    digest: str

    @property
    def version_name(self) -> str:
        return f"{self.name}-{self.digest[:12]}"


def load_pipeline(pipeline: str, work_dir: str | os.PathLike[str], *, cluster_config: str | None = None,
                  image_registry: str | None = None) -> PipelinePackage:
    """Compile a registered pipeline (or take a compiled file) into ``work_dir``, through the one
    compile path (:mod:`shipyard.run.compile`: the cluster config and image registry in force now)."""
    path = Path(pipeline)
    if path.suffix in (".yaml", ".yml", ".json") or path.exists():
        if not path.is_file():
            raise ShipyardError("PIPELINE", f"file {pipeline} does not exist", "give a compiled pipeline file or a name")
        import yaml

        try:
            doc = documents(path.read_text(encoding="utf-8"))[0]
            name = (doc.get("pipelineSpec", doc))["pipelineInfo"]["name"]
        except (IndexError, KeyError, TypeError, AttributeError, yaml.YAMLError, UnicodeDecodeError):
            raise ShipyardError(
                "PIPELINE", f"{pipeline} is not a compiled KFP pipeline (no pipelineInfo.name)",
                "compile it with `kfp dsl compile` or pass a pipeline name",
            ) from None
        data = path.read_bytes()
        return PipelinePackage(path, name, hashlib.sha256(data).hexdigest())
    if pipeline not in PIPELINES:
        known = ", ".join(sorted(PIPELINES)) or "none registered yet"
        raise ShipyardError("PIPELINE", f"{pipeline!r} is neither a pipeline name nor a file", f"use one of: {known}")
    out = compile_pipeline(pipeline, work_dir, cluster_config=cluster_config, image_registry=image_registry)
    name = documents(out.read_text())[0]["pipelineInfo"]["name"]
    return PipelinePackage(out, name, hashlib.sha256(out.read_bytes()).hexdigest())


def parse_params(items: list[str] | None) -> dict[str, str]:
    """``k=v`` pairs as text; :func:`shipyard.params.specs.coerce_params` types them by the pipeline's
    parameter types (so ``namespace=007`` stays text and ``recipes=w8a8-int8`` becomes a list)."""
    return split_params(items)  # a key given twice is an error, never last-wins


def check_params(package: PipelinePackage, raw: dict[str, Any]) -> dict[str, Any]:
    """``--param`` values (from :func:`parse_params`) for a compiled pipeline, checked and typed
    before anything is sent."""
    from shipyard.params.checks import check_params

    return check_params(param_specs(package.path), raw, name=package.name)


# --------------------------------------------------------------------------- the client


def _api_error(err: Exception, host: str, what: str) -> ShipyardError:
    status = getattr(err, "status", None)
    body = getattr(err, "body", "") or ""
    try:
        message = json.loads(body).get("message", "") if body else ""
    except (ValueError, AttributeError):
        message = str(body)[:200]
    if status in (401, 403):
        return ShipyardError(
            "--host", f"{host} refused the credentials ({status} {message or getattr(err, 'reason', '')})".strip(),
            "pass a valid --token (KF_PIPELINES_TOKEN) or --cookie (KF_PIPELINES_COOKIE)",
        )
    if status is None or status in (502, 503, 504):
        reason = str(err).splitlines()[0][:200] if status is None else f"{status} {message}".strip()
        return UnreachableError("--host", f"cannot reach {host} to {what} ({reason})",
                                "check the URL and that the KFP API is reachable (kubectl port-forward ...)")
    return ShipyardError("kfp", f"{host} rejected the request to {what}: {status} {message}".strip(),
                         "see the message; check the pipeline and parameters")


@contextlib.contextmanager
def _api(host: str, what: str) -> Iterator[None]:
    import kfp_server_api
    import urllib3

    try:
        yield
    except kfp_server_api.ApiException as err:
        raise _api_error(err, host, what) from None
    except (urllib3.exceptions.HTTPError, OSError) as err:
        raise _api_error(err, host, what) from None


def kfp_settings(host: str | None, token: str | None = None,
                 cookie: str | None = None) -> tuple[str, str | None, str | None]:
    """The KFP host, token and cookie (the options, else ``KF_PIPELINES_*``), checked without a
    request: a host that is missing, not http(s) or carries credentials, or a token or cookie with a
    control character, is one line."""
    host = (host or os.environ.get("KF_PIPELINES_ENDPOINT") or "").strip().rstrip("/")
    if not host:
        raise ShipyardError("--host", "no KFP host given", "pass --host URL or set KF_PIPELINES_ENDPOINT")
    refuse_credentials(host, "--host", "drop them; pass --token or --cookie (KF_PIPELINES_TOKEN, "
                       "KF_PIPELINES_COOKIE)")
    if not re.match(r"^https?://[^/\s]+", host):
        raise ShipyardError("--host", f"{host!r} is not an http(s) URL", "e.g. --host http://localhost:8080")
    # a token file saved on Windows ends in \r\n: stripped; a control character inside is one line
    return (host, header_value(token or os.environ.get("KF_PIPELINES_TOKEN"), "--token (KF_PIPELINES_TOKEN)"),
            header_value(cookie or os.environ.get("KF_PIPELINES_COOKIE"), "--cookie (KF_PIPELINES_COOKIE)"))


class Kfp:
    """A :class:`kfp.Client` for one host, with one-line errors."""

    def __init__(self, host: str | None, token: str | None = None, cookie: str | None = None,
                 namespace: str | None = None, verify_ssl: bool = True) -> None:
        self.host, self.token, self.cookie = kfp_settings(host, token, cookie)
        self.namespace = namespace or None
        self.timeout_s = kfp_timeout_s()
        self._preflight(verify_ssl)
        import kfp

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.client = self.call("connect", kfp.Client, host=self.host, existing_token=self.token,
                                    cookies=self.cookie, namespace=self.namespace or "kubeflow", verify_ssl=verify_ssl)

    def _late(self, what: str) -> UnreachableError:
        return UnreachableError(ENV_KFP_TIMEOUT, f"{self.host} gave no whole answer to {what} within "
                                f"{self.timeout_s:g} s", f"check that the KFP API (or a proxy before it) answers, or "
                                f"raise {ENV_KFP_TIMEOUT} (seconds per call)")

    def call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` (a kfp.Client call) within ``SHIPYARD_KFP_TIMEOUT_S`` in all, its
        printing silenced, a failure one line."""
        def mapped() -> Any:
            with _api(self.host, what):
                return fn(*args, **kwargs)

        with self.quiet():  # here, not in the call's thread: stdout comes back even when the call is left behind
            return call_within(self.timeout_s, mapped, on_timeout=lambda: self._late(what), owner=self)

    def _preflight(self, verify_ssl: bool) -> None:
        """One quick authenticated call, so a refused token fails at once (kfp.Client would retry 5x5 s)."""
        import urllib3

        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.cookie:
            headers["Cookie"] = self.cookie
        pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED" if verify_ssl else "CERT_NONE")
        try:
            # connect: 5 s (retried twice); read: 10 s once, so a server that accepts and never answers
            # ends in ~10 s with exit 3, not ~45 s; in all within SHIPYARD_KFP_TIMEOUT_S (a slow drip)
            resp = call_within(self.timeout_s, pool.request, "GET", f"{self.host}/apis/v2beta1/healthz",
                               headers=headers, timeout=urllib3.Timeout(connect=5.0, read=10.0),
                               retries=urllib3.Retry(total=2, connect=2, read=0, status=2, backoff_factor=0.5,
                                                     status_forcelist=(502, 503, 504), raise_on_status=False),
                               on_timeout=lambda: self._late("connect"), owner=self)
        except urllib3.exceptions.MaxRetryError as err:
            reason = err.reason
            if isinstance(reason, urllib3.exceptions.NewConnectionError):  # (a subclass of ConnectTimeoutError)
                why = "connection refused" if "refused" in str(reason).lower() else "cannot connect"
            elif isinstance(reason, urllib3.exceptions.ReadTimeoutError):
                why = "no answer within 10 s"
            elif isinstance(reason, urllib3.exceptions.ConnectTimeoutError):
                why = "connection timed out"
            else:
                why = type(reason).__name__
            raise UnreachableError("--host", f"cannot reach {self.host} to connect ({why})",
                                   "check the URL and that the KFP API is reachable (kubectl port-forward ...)") from None
        except urllib3.exceptions.HTTPError as err:
            raise _api_error(err, self.host, "connect") from None
        if resp.status in (502, 503, 504):
            raise UnreachableError("--host", f"cannot reach {self.host} to connect (HTTP {resp.status})",
                                   "check that the KFP API server runs")
        if resp.status in (401, 403):
            class _Err(Exception):
                status = resp.status
                body = resp.data.decode(errors="replace")
                reason = resp.reason

            raise _api_error(_Err(), self.host, "connect")
        self._check_is_kfp(resp)

    def _check_is_kfp(self, resp: Any) -> None:
        """The healthz answer must be KFP's JSON: an auth proxy's login page (200 HTML to every
        path) or another service (404) is one line, never 'no runs' or a page of tracebacks."""
        data = resp.data or b""
        try:
            body = json.loads(data) if data.strip() else None
        except ValueError:
            body = None
        if resp.status == 200 and isinstance(body, dict):
            return
        kind = str(resp.headers.get("Content-Type", "")).split(";")[0].strip()
        looks_html = "html" in kind.lower() or data.lstrip()[:1] == b"<"
        what = (f"an HTML page (HTTP {resp.status}; a login page?)" if looks_html
                else f"HTTP {resp.status} {kind or 'without JSON'}".strip())
        raise ShipyardError("--host", f"{self.host} is not a KFP API: /apis/v2beta1/healthz answered {what}",
                            "point --host at the KFP API (kubectl port-forward svc/ml-pipeline 8888:8888); behind "
                            "an auth proxy pass --cookie or --token")

    # ---- pieces

    def quiet(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.redirect_stdout(io.StringIO())

    def experiment_id(self, name: str) -> str:
        return str(self.call("find or create the experiment", self.client.create_experiment, name or "shipyard",
                             namespace=self.namespace).experiment_id)

    def ensure_pipeline(self, package: PipelinePackage) -> tuple[str, str, bool]:
        """Upload the pipeline or a new version of it; returns (pipeline id, version id, created)."""
        what = "upload the pipeline"
        pipeline_id = self.call(what, self.client.get_pipeline_id, package.name)
        if pipeline_id is None:
            # The first upload creates the pipeline and its first version.
            pipeline = self.call(what, self.client.upload_pipeline, str(package.path), pipeline_name=package.name,
                                 namespace=self.namespace)
            pipeline_id = pipeline.pipeline_id
            versions = self.call(what, self.client.list_pipeline_versions, pipeline_id,
                                 page_size=1).pipeline_versions or []
            if not versions:
                raise ShipyardError("kfp", f"{self.host} created pipeline {pipeline_id} without a version")
            return pipeline_id, versions[0].pipeline_version_id, True
        flt = json.dumps({"predicates": [{"operation": 1, "key": "display_name",
                                          "stringValue": package.version_name}]})
        found = self.call(what, self.client.list_pipeline_versions, pipeline_id, filter=flt,
                          page_size=1).pipeline_versions or []
        if found:
            return pipeline_id, found[0].pipeline_version_id, False
        version = self.call(what, self.client.upload_pipeline_version, str(package.path), package.version_name,
                            pipeline_id=pipeline_id)
        return pipeline_id, version.pipeline_version_id, True

    def submit(self, package: PipelinePackage, experiment: str, params: dict[str, Any],
               run_name: str = "", service_account: str = "") -> dict[str, Any]:
        pipeline_id, version_id, created = self.ensure_pipeline(package)
        exp_id = self.experiment_id(experiment)
        run = self.call("create the run", self.client.run_pipeline,
                        experiment_id=exp_id, job_name=run_name or package.version_name, params=params,
                        pipeline_id=pipeline_id, version_id=version_id, service_account=service_account or None)
        return {"run_id": run.run_id, "pipeline_id": pipeline_id, "version_id": version_id,
                "version_created": created, "experiment_id": exp_id,
                "url": f"{self.host}/#/runs/details/{run.run_id}"}

    def schedule(self, package: PipelinePackage, experiment: str, params: dict[str, Any], *,
                 cron: str | None = None, every: str | None = None, max_concurrency: int = 1,
                 no_catchup: bool = False, name: str = "", service_account: str = "") -> dict[str, Any]:
        if bool(cron) == bool(every):
            raise ShipyardError("schedule", "give exactly one of --cron and --every")
        kfp_cron = to_kfp_cron(cron) if cron else None
        interval = parse_duration(every) if every else None
        if not 1 <= max_concurrency <= 10:
            raise ShipyardError("--max-concurrency", f"{max_concurrency} is not in 1-10", "KFP allows 1 to 10")
        pipeline_id, version_id, created = self.ensure_pipeline(package)
        exp_id = self.experiment_id(experiment)
        rr = self.call("create the recurring run", self.client.create_recurring_run,
                       experiment_id=exp_id, job_name=name or f"{package.name}-scheduled", cron_expression=kfp_cron,
                       interval_second=interval, max_concurrency=max_concurrency, no_catchup=no_catchup, params=params,
                       pipeline_id=pipeline_id, version_id=version_id, service_account=service_account or None)
        return {"recurring_run_id": rr.recurring_run_id, "cron": kfp_cron, "interval_second": interval,
                "pipeline_id": pipeline_id, "version_id": version_id, "version_created": created,
                "experiment_id": exp_id}

    def runs(self, experiment: str = "", page_size: int = 20) -> list[dict[str, Any]]:
        exp_id = None
        if experiment:
            try:
                exp_id = self.call("find the experiment", self.client.get_experiment, experiment_name=experiment,
                                   namespace=self.namespace).experiment_id
            except ValueError:
                raise ShipyardError("--experiment", f"no experiment named {experiment!r}") from None
        resp = self.call("list runs", self.client.list_runs, page_size=page_size, sort_by="created_at desc",
                         experiment_id=exp_id, namespace=self.namespace)
        out = []
        for run in resp.runs or []:
            out.append({"run_id": run.run_id, "name": run.display_name, "state": run.state or "",
                        "created_at": str(run.created_at or ""), "experiment_id": run.experiment_id or ""})
        return out


def compile_to_temp(pipeline: str) -> tuple[PipelinePackage, tempfile.TemporaryDirectory[str]]:
    """:func:`load_pipeline` into a temporary folder the caller keeps alive."""
    tmp = tempfile.TemporaryDirectory(prefix="shipyard-pipeline-")
    return load_pipeline(pipeline, tmp.name), tmp
