"""MLflow tracking: one parent run per pipeline run, one nested run per step.

The client side uses only ``mlflow-skinny`` APIs (:class:`mlflow.MlflowClient`), so the base
runtime needs no pandas, SQLAlchemy or server code.

Where runs go (:func:`resolve_tracking_uri`):

* an explicit ``tracking_uri`` (``http(s)://`` server, ``file://`` store or a plain folder);
* else the endpoint of the KFP MLflow plugin (``KFP_MLFLOW_CONFIG``), whose parent run then
  holds shipyard's pipeline run as a nested run;
* else ``MLFLOW_TRACKING_URI`` (in a cluster: Secret ``shipyard-mlflow``, see
  docs/cluster-contract.md);
* else, outside a cluster only, a local file store ``mlruns`` under the run's work dir (``SHIPYARD_WORK_DIR`` or the
  current folder), so a local run needs no server. To browse it:
  ``MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri file:///<work dir>/mlruns``
  (MLflow 3 keeps the file store behind that switch; shipyard sets it for its own calls).
  In a pipeline pod a file store would die with the pod, so there it is refused.

Artifacts go where the server or store puts them: a local file store keeps them next to the
runs; a tracking server started with ``--artifacts-destination s3://bucket/mlflow`` proxies
them to S3/MinIO (the server then needs ``MLFLOW_S3_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``; steps need nothing). A server started with
``--no-serve-artifacts --default-artifact-root s3://...`` makes each step write to S3 itself,
so the base image's steps then need those three variables as well.

Faults: when the tracking server cannot be reached, every call is retried with exponential
backoff (the one policy, :mod:`shipyard.core.retry`: ``SHIPYARD_MLFLOW_ATTEMPTS``, default 5;
``SHIPYARD_MLFLOW_BACKOFF_S``, default 2 s, doubling, capped at 30 s) and then fails with one :class:`~shipyard.core.errors.UnreachableError`
line (exit status 3). A tracker that has seen the server down fails every later call at once
(no second retry budget). :meth:`Tracker.probe` asks ``/health`` once without importing
MLflow, so a step can keep its payload in milliseconds when the server is down (see
``shipyard/tracking/steprun.py`` and ``shipyard/tracking/pending.py``).

Cost: ``import mlflow`` is most of what tracking costs a step (1.5-4 s on a loaded 2-core
machine), so the MLflow client is imported only when a call is made (:attr:`Tracker.client`),
and a step logging to an HTTP(S) server goes through :class:`RestLogger` (MLflow's REST API,
no import). Params, metrics and tags go in one ``log_batch``; a local run's steps find the
pipeline's parent run in a small cache file beside the pipeline root (``<work dir>/tracking/``,
written by the pre-flight task) instead of a tag search.

Experiments are created as classic ML experiments (tag ``mlflow.experimentKind`` =
``custom_model_development``), and every MLflow UI link shipyard prints carries
``?workflowType=machine_learning`` (:func:`ui_url`): in MLflow 3.17's UI the experiment page's view
is decided by the *workflow type* (the ``workflowType`` URL parameter, else the browser's saved
``mlflow.workflowType``, default ``genai``), and the ``mlflow.experimentKind`` tag is only read
when that switch is off (``mlflow/server/js/build``: ``n ? m(workflowType) : tag``). Without the
parameter an experiment opens in the GenAI "Traces" view.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from shipyard.core import contract
from shipyard.core.env import env_bool, env_float
from shipyard.core.errors import ShipyardError, UnreachableError, header_value, refuse_credentials
from shipyard.core.files import atomic_write_text
from shipyard.core.net import call_within, http_request
from shipyard.core.redact import redact, redact_obj
from shipyard.core.retry import Retry

ENV_KFP_MLFLOW_CONFIG = "KFP_MLFLOW_CONFIG"
ENV_WORK_DIR = "SHIPYARD_WORK_DIR"
#: the slowest upload the REST logger waits for (bytes/s): a request's deadline grows by its payload at this rate
UPLOAD_FLOOR_BYTES_PER_S = 256 * 1024
ENV_ATTEMPTS = "SHIPYARD_MLFLOW_ATTEMPTS"
ENV_BACKOFF = "SHIPYARD_MLFLOW_BACKOFF_S"
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"

TAG_PARENT = "mlflow.parentRunId"
TAG_RUN_NAME = "mlflow.runName"
TAG_STEP = "shipyard.step"
TAG_PIPELINE = "shipyard.pipeline"
TAG_KFP_RUN = "shipyard.kfp_run_id"
TAG_KIND = "shipyard.kind"
#: MLflow 3's experiment type tag, read by its UI (mlflow/server/js: ``mlflow.experimentKind``);
#: ``custom_model_development`` opens the classic ML (runs) view instead of GenAI traces.
TAG_EXPERIMENT_KIND = "mlflow.experimentKind"
EXPERIMENT_KIND_CLASSIC = "custom_model_development"
#: The UI's workflow switch (MLflow 3.17: URL ``workflowType`` wins over the tag above).
CLASSIC_VIEW_QUERY = "workflowType=machine_learning"


def ui_url(server: str, experiment_id: str, run_id: str = "") -> str:
    """The MLflow UI's page of an experiment (or one of its runs) in the classic ML view."""
    page = f"{server.rstrip('/')}/#/experiments/{experiment_id}" + (f"/runs/{run_id}" if run_id else "")
    return f"{page}?{CLASSIC_VIEW_QUERY}"
#: Where a local run keeps its parent run ids (``<work dir>/tracking/parent-<kfp run id>.json``).
CACHE_DIR = "tracking"

MAX_PARAM_LEN = 6000
MAX_KEY_LEN = 250
BATCH = 100  # params or tags per log_batch (MLflow's limit)
METRIC_BATCH = 1000  # entries per log_batch in all (MLflow's limit)
_KEY_BAD = re.compile(r"[^A-Za-z0-9_\-. /:]")

T = TypeVar("T")


class _Connections:
    """The owner of the MLflow client's connections (one requests session per process, pooled)."""


_MLFLOW_CONNECTIONS = _Connections()


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class KfpMlflowConfig:
    """What the KFP MLflow plugin injects as ``KFP_MLFLOW_CONFIG`` (JSON) into each step."""

    endpoint: str
    experiment_id: str = ""
    parent_run_id: str = ""
    workspace: str = ""
    workspaces_enabled: bool = False
    auth_type: str = "none"
    insecure_skip_verify: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> KfpMlflowConfig | None:
        """The plugin's config, or None when the variable is unset.

        A malformed value is a user error: the platform promised a parent run we cannot find.
        """
        raw = (environ if environ is not None else os.environ).get(ENV_KFP_MLFLOW_CONFIG, "").strip()
        if not raw:
            return None
        try:
            data = json.loads(raw)
            endpoint = str(data["endpoint"]).rstrip("/")
        except (ValueError, KeyError, TypeError) as err:
            raise ShipyardError(
                ENV_KFP_MLFLOW_CONFIG,
                f"is not the KFP MLflow plugin's JSON with an 'endpoint' ({err})",
                "fix the plugin config or unset the variable",
            ) from None
        tls = data.get("tls") or {}
        return cls(
            endpoint=endpoint,
            experiment_id=str(data.get("experimentId") or ""),
            parent_run_id=str(data.get("parentRunId") or ""),
            workspace=str(data.get("workspace") or ""),
            workspaces_enabled=bool(data.get("workspacesEnabled")),
            auth_type=str(data.get("authType") or "none"),
            insecure_skip_verify=bool(data.get("insecureSkipVerify") or tls.get("insecureSkipVerify")),
        )

    def apply_auth(self) -> None:
        """Export the credentials MLflow's client reads, as the KFP launcher does."""
        if self.auth_type == "kubernetes" and not os.environ.get("MLFLOW_TRACKING_TOKEN"):
            token_file = Path(SERVICE_ACCOUNT_TOKEN)
            if token_file.exists():
                os.environ["MLFLOW_TRACKING_TOKEN"] = token_file.read_text().strip()
        # "bearer" and "basic-auth": KFP already set MLFLOW_TRACKING_TOKEN or _USERNAME/_PASSWORD.
        if self.workspaces_enabled and self.workspace:
            os.environ.setdefault("MLFLOW_WORKSPACE", self.workspace)
        if self.insecure_skip_verify:
            os.environ.setdefault("MLFLOW_TRACKING_INSECURE_TLS", "true")


def default_work_dir() -> Path:
    """The run's work dir: ``SHIPYARD_WORK_DIR`` or the current folder."""
    return Path(os.environ.get(ENV_WORK_DIR) or os.getcwd()).resolve()


def local_work_dir() -> Path | None:
    """The work dir of a local run (``SHIPYARD_WORK_DIR``, set by ``shipyard run --local``), else None.

    Only a local run has a folder that outlives its steps; a pipeline pod has none.
    """
    raw = os.environ.get(ENV_WORK_DIR, "").strip()
    if not raw or contract.in_cluster():
        return None
    return Path(raw).resolve()


def _cache_name(kfp_run_id: str) -> str:
    return "parent-" + re.sub(r"[^A-Za-z0-9_.-]", "_", kfp_run_id)[:200] + ".json"


def write_parent_cache(kfp_run_id: str, record: Mapping[str, Any], work_dir: Path | None = None) -> Path | None:
    """Remember a local run's parent run (id, experiment, tags, tracking URI) for its steps."""
    work = work_dir or local_work_dir()
    if work is None or not kfp_run_id or kfp_run_id.startswith("{{"):
        return None
    path = work / CACHE_DIR / _cache_name(kfp_run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(dict(record), sort_keys=True))
    return path


def read_parent_cache(kfp_run_id: str, uri: str, work_dir: Path | None = None) -> dict[str, Any] | None:
    """The cached parent run of ``kfp_run_id`` when it was opened on ``uri`` (None: not cached)."""
    work = work_dir or local_work_dir()
    if work is None or not kfp_run_id:
        return None
    try:
        record = json.loads((work / CACHE_DIR / _cache_name(kfp_run_id)).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("tracking_uri") != uri or not record.get("run_id"):
        return None
    return record


def parent_caches(work_dir: Path) -> list[dict[str, Any]]:
    """Every parent run a local run in ``work_dir`` opened (for the replay)."""
    out = []
    for path in sorted((Path(work_dir) / CACHE_DIR).glob("parent-*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("run_id"):
            out.append(record)
    return out


#: the fix for a tracking URI that carries a user name, password or token (MLflow reads its credentials
#: from these variables; in a cluster the Secret shipyard-mlflow gives the pods the URI and the token)
TRACKING_CREDENTIALS_FIX = ("drop them from the URI and give them to MLflow as MLFLOW_TRACKING_USERNAME and "
                            "MLFLOW_TRACKING_PASSWORD, or a token as MLFLOW_TRACKING_TOKEN (in a cluster: the token "
                            "under the key MLFLOW_TRACKING_TOKEN of the Secret shipyard-mlflow)")


def resolve_tracking_uri(tracking_uri: str = "", work_dir: str | os.PathLike[str] | None = None) -> str:
    """The tracking URI to use (see the module docstring for the order). A URI that carries
    credentials (``http://TOKEN@host``, ``http://user:password@host``) is refused up front as one
    line naming where it came from (``tracking_uri`` or ``MLFLOW_TRACKING_URI``), never shown."""
    uri = (tracking_uri or "").strip()
    refuse_credentials(uri, "tracking_uri", TRACKING_CREDENTIALS_FIX)
    if not uri:
        kfp = KfpMlflowConfig.from_env()
        if kfp:
            return kfp.endpoint
        uri = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
        refuse_credentials(uri, "MLFLOW_TRACKING_URI", TRACKING_CREDENTIALS_FIX)
    if not uri and contract.in_cluster():
        raise contract.missing("MLFLOW_TRACKING_URI", "a pipeline pod has no MLflow server to track to "
                               "(a file:// store would be lost with the pod)")
    if not uri:
        uri = str(Path(work_dir).resolve() if work_dir else default_work_dir()) + "/mlruns"
    if "://" not in uri:
        uri = Path(uri).resolve().as_uri()
    scheme = uri.partition("://")[0].lower()
    if scheme not in ("http", "https", "file"):
        raise ShipyardError("tracking_uri", f"{scheme[:20]}:// is not an MLflow tracking URI",
                            "use an MLflow server's http(s)://host:port, or a file store's path")
    if uri.startswith("file:") and contract.in_cluster():
        raise ShipyardError("tracking_uri", f"{uri} is a file store inside a pipeline pod: its records are lost "
                            "with the pod", "point tracking_uri or MLFLOW_TRACKING_URI (Secret shipyard-mlflow) "
                            "at an MLflow server")
    return uri.rstrip("/")


@contextlib.contextmanager
def default_store(uri: str) -> Iterator[None]:
    """Point MLflow's *default* tracking URI at the file store ``uri`` while the block runs (and
    for the processes it starts).

    MLflow's file-store model registry reads a model version back through ``MlflowClient()``
    without a URI (mlflow/store/model_registry/file_store.py, ``_get_file_model_version_from_dir``),
    which opens the default ``sqlite:///mlflow.db`` in the current folder. With the default set to
    the store itself nothing is written outside the work dir. A server URI, an
    ``MLFLOW_TRACKING_URI`` or a KFP MLflow plugin config already set are left alone.
    """
    name = "MLFLOW_TRACKING_URI"
    if not uri.startswith("file:") or os.environ.get(name) or os.environ.get(ENV_KFP_MLFLOW_CONFIG):
        yield
        return
    os.environ[name] = uri
    try:
        yield
    finally:
        os.environ.pop(name, None)


def check_tracking_uri(tracking_uri: str = "", work_dir: str | os.PathLike[str] | None = None, *,
                       attempts: int = 2, timeout_s: float = 3.0) -> str:
    """The pre-flight check of MLflow: an HTTP(S) tracking server must answer within seconds.

    Returns the resolved URI; raises one :class:`~shipyard.core.errors.UnreachableError` line (exit
    status 3) naming ``tracking_uri`` and the fix. A file store is not touched (nothing is
    written before the run starts).
    """
    tracker = Tracker(tracking_uri, work_dir=work_dir, attempts=attempts, backoff_s=0.5)
    if not tracker.is_remote:
        return tracker.uri
    try:
        tracker.check_reachable(timeout_s=timeout_s)
    except UnreachableError:
        raise UnreachableError(
            "tracking_uri", f"the MLflow server {tracker.uri} does not answer ({tracker.down})",
            "start the MLflow server or point tracking_uri at one that answers (empty: MLFLOW_TRACKING_URI, "
            "or in a local run a file store in the work dir)",
        ) from None
    return tracker.uri


def _is_transient(err: BaseException) -> bool:
    """A connection problem or a server error worth retrying (not a rejected request)."""
    exceptions = sys.modules.get("mlflow.exceptions")  # never imported just to classify an error
    if exceptions is not None and isinstance(err, exceptions.MlflowException):
        code = getattr(err, "error_code", "") or ""
        return code in ("TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED") or "failed with exception" in str(err)
    if isinstance(err, urllib.error.HTTPError):
        return err.code >= 500 or err.code == 429
    return isinstance(err, (ConnectionError, TimeoutError, urllib.error.URLError, OSError)) and not isinstance(
        err, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
    )


def _batches(params: list[Any], metrics: list[Any], tags: list[Any]) -> list[dict[str, list[Any]]]:
    """Greedy ``log_batch`` payloads within MLflow's limits (100 params, 100 tags, 1000 entries)."""
    out: list[dict[str, list[Any]]] = []
    p, m, t = list(params), list(metrics), list(tags)
    while p or m or t:
        bp, p = p[:BATCH], p[BATCH:]
        bt, t = t[:BATCH], t[BATCH:]
        room = METRIC_BATCH - len(bp) - len(bt)
        bm, m = m[:room], m[room:]
        out.append({"params": bp, "metrics": bm, "tags": bt})
    return out


def tree_bytes(path: str | os.PathLike[str]) -> int:
    """The bytes an upload of ``path`` (a file or a folder) sends: what its deadline grows by."""
    root = Path(path)
    try:
        if root.is_file():
            return root.stat().st_size
        return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    except OSError:
        return 0


def _short(err: BaseException) -> str:
    text = " ".join(str(err).split())
    refused = re.search(r"(Connection refused|Name or service not known|timed out|Temporary failure[^'\"]*)", text)
    if refused:
        return refused.group(1)
    return text[:200]


# --------------------------------------------------------------------------- payload helpers


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def clean_key(key: str) -> str:
    """An MLflow-legal key: letters, digits and ``_-. /:``; at most 250 characters."""
    return _KEY_BAD.sub("_", str(key)).strip("/ ")[:MAX_KEY_LEN] or "_"


def to_params(params: Mapping[str, Any]) -> dict[str, str]:
    """Flattened, stringified params, credentials hidden (:func:`shipyard.core.redact.redact`, and the
    whole value under a secret-sounding key); values longer than MLflow's limit are cut with a marker."""
    out: dict[str, str] = {}
    for key, value in flatten(redact_obj(params)).items():
        if value is None:
            continue
        text = redact(value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str))
        if len(text) > MAX_PARAM_LEN:
            text = text[: MAX_PARAM_LEN - 20] + "...[truncated]"
        out[clean_key(key)] = text
    return out


def to_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Flattened numeric metrics; strings that parse as numbers count; NaN/inf are dropped."""
    out: dict[str, float] = {}
    for key, value in flatten(metrics).items():
        if isinstance(value, bool):
            value = float(value)
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                continue
        if isinstance(value, (int, float)) and math.isfinite(float(value)):
            out[clean_key(key)] = float(value)
    return out


def to_tags(tags: Mapping[str, Any]) -> dict[str, str]:
    """Stringified tags, credentials hidden as in :func:`to_params` (MLflow tag values may be long;
    keys follow the key rules)."""
    return {
        clean_key(k): redact(v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str))
        for k, v in flatten(redact_obj(tags)).items()
        if v is not None
    }


# --------------------------------------------------------------------------- the tracker


class Tracker:
    """An :class:`mlflow.MlflowClient` with retries, one-line errors and shipyard's run tree."""

    def __init__(
        self,
        tracking_uri: str = "",
        *,
        work_dir: str | os.PathLike[str] | None = None,
        attempts: int | None = None,
        backoff_s: float | None = None,
    ) -> None:
        self.kfp = KfpMlflowConfig.from_env()
        self.uri = resolve_tracking_uri(tracking_uri, work_dir)
        #: a local run's work dir (its parent-run cache); None in a pipeline pod
        self.work_dir: Path | None = Path(work_dir).resolve() if work_dir else local_work_dir()
        policy = Retry.from_env(ENV_ATTEMPTS, ENV_BACKOFF, attempts=5, backoff_s=2.0)
        self.retry = Retry(attempts if attempts is not None else policy.attempts,
                           backoff_s if backoff_s is not None else policy.backoff_s)
        if self.kfp and self.uri == self.kfp.endpoint:
            self.kfp.apply_auth()
        # MLflow's own HTTP retries would wait minutes per call; ours are the outer loop.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
        # Each set_terminated would read the run back only to print its URL to the step log, and
        # the client's usage telemetry would phone home from every step process.
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        if self.uri.startswith("file:"):
            # MLflow 3 keeps the file store in maintenance mode behind this switch; it is the
            # only local store mlflow-skinny can write (sqlite needs SQLAlchemy).
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        #: set once the server was seen down: every later call fails at once
        self.down: str = ""
        self._client: Any = None

    @property
    def client(self) -> Any:
        """The :class:`mlflow.MlflowClient` (imported on first use: the import costs seconds)."""
        if self._client is None:
            from mlflow import MlflowClient

            self._client = MlflowClient(tracking_uri=self.uri, registry_uri=self.uri)
        return self._client

    @property
    def is_remote(self) -> bool:
        return self.uri.startswith(("http://", "https://"))

    # ---- fault handling

    def _unreachable(self, what: str, detail: str, attempts: int) -> UnreachableError:
        tried = (f"after {attempts} attempt{'s' if attempts != 1 else ''} ({detail})" if attempts
                 else f"(seen down earlier: {detail})")
        return UnreachableError(
            "mlflow",
            f"cannot reach the tracking server {self.uri} to {what} {tried}",
            "start the MLflow server or pass a reachable tracking_uri (empty = local file "
            "store); the step's results remain in its KFP artifacts",
        )

    def call(self, what: str, fn: Callable[..., T], *args: Any, payload_bytes: int = 0, bounded: bool = False,
             **kwargs: Any) -> T:
        """Run one MLflow call; retry transient faults with backoff; then one clear line.

        Against a server each try ends within ``MLFLOW_HTTP_REQUEST_TIMEOUT`` seconds in all
        (default 30; MLflow's client applies it to each read only), plus ``payload_bytes`` (an
        upload's size) at :data:`UPLOAD_FLOOR_BYTES_PER_S`: past it the call is one
        :class:`~shipyard.core.errors.UnreachableError` line naming the setting, not retried.
        ``bounded``: ``fn`` ends within that deadline itself (:class:`RestLogger`'s ``http_request``).
        Once the server was seen down (here or by :meth:`probe`), calls fail at once.
        """
        if self.down:
            raise self._unreachable(what, self.down, 0)
        for attempt in self.retry.tries():
            try:
                with default_store(self.uri):  # a file store's registry reads back through MlflowClient()
                    if bounded or not self.is_remote:
                        return fn(*args, **kwargs)
                    return call_within(self.deadline_s(payload_bytes), fn, *args,
                                       on_timeout=lambda: self._late(what, payload_bytes), owner=_MLFLOW_CONNECTIONS,
                                       **kwargs)
            except Exception as err:
                if not _is_transient(err):
                    refused = self._refused(what, err)
                    if refused is not None:
                        raise refused from None
                    raise
                if self.retry.is_last(attempt):
                    if self.is_remote:
                        self.down = _short(err)
                    raise self._unreachable(what, _short(err), self.retry.attempts) from None
        raise AssertionError("unreachable")

    @staticmethod
    def deadline_s(payload_bytes: int = 0) -> float:
        """The most one MLflow client call may take: ``MLFLOW_HTTP_REQUEST_TIMEOUT`` (default 30 s)
        plus ``payload_bytes`` at :data:`UPLOAD_FLOOR_BYTES_PER_S`."""
        return env_float("MLFLOW_HTTP_REQUEST_TIMEOUT", 30.0) + max(payload_bytes, 0) / UPLOAD_FLOOR_BYTES_PER_S

    def _late(self, what: str, payload_bytes: int) -> UnreachableError:
        """The one line of a call past :meth:`deadline_s`; the server counts as down from then on."""
        seconds = self.deadline_s(payload_bytes)
        self.down = f"no whole answer within {round(seconds, 1):g} s"
        return UnreachableError("MLFLOW_HTTP_REQUEST_TIMEOUT",
                                f"the tracking server {self.uri} gave no whole answer to {what} within {round(seconds, 1):g} s",
                                "check the server (or a proxy before it) answers, or raise MLFLOW_HTTP_REQUEST_TIMEOUT "
                                "(seconds per call; an upload gets 256 KiB/s on top); the step's results remain in its "
                                "KFP artifacts")

    def _refused(self, what: str, err: BaseException) -> ShipyardError | None:
        """An answer that is not MLflow's API (a login page, another service's 404) or a refusal (401,
        403), as one line naming the tracking URI; None for MLflow's own errors (a missing model...)."""
        text = " ".join(str(err).split())
        code = re.search(r"error code (\d{3}) != 200", text)
        not_json = "response body was not in a valid JSON format" in text  # a 200 that is not MLflow's API
        if not self.is_remote or (code is None and not not_json):
            return None
        status = int(code.group(1)) if code else 200
        body = text.partition("Response body: ")[2].lstrip("'\"")
        if status in (401, 403):
            return ShipyardError("tracking_uri", f"{self.uri} refused to {what} (HTTP {status})",
                                 "give MLflow's credentials (MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and "
                                 "MLFLOW_TRACKING_PASSWORD; in a cluster the Secret shipyard-mlflow)")
        if body.startswith("<") or not body.startswith("{"):
            return ShipyardError("tracking_uri", f"{self.uri} is not an MLflow server: asked to {what}, it answered "
                                 f"HTTP {status} with {'an HTML page (a login page?)' if body.startswith('<') else 'no MLflow error'}",
                                 "point the tracking URI at the MLflow server (its API answers /api/2.0/mlflow/...)")
        return None

    def probe(self, timeout_s: float = 3.0) -> str:
        """Ask an HTTP server's ``/health`` once, without importing MLflow.

        Returns "" when it answers (or for a file store), else why not; a failed probe marks
        the tracker down.
        """
        if not self.is_remote:
            return ""
        if self.down:
            return self.down
        try:  # within timeout_s in all, however slowly the server (or a proxy before it) answers
            status, _ = http_request(f"{self.uri}/health", deadline_s=timeout_s, field="tracking_uri")
            if status >= 500:  # a 4xx: a proxy may not expose /health, or it wants auth: the server is reachable
                self.down = f"status code {status}"
        except ShipyardError:  # an answer over the size cap: something answers
            pass
        except (OSError, ValueError) as err:
            self.down = _short(err)
        return self.down

    def check_reachable(self, attempts: int | None = None, timeout_s: float = 10.0) -> None:
        """Fail (after ``attempts`` probes, default the tracker's) when an HTTP tracking server is
        down, with one :class:`~shipyard.core.errors.UnreachableError` line; a file store must be creatable."""
        if not self.is_remote:
            path = Path(self.uri.removeprefix("file://"))
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise ShipyardError("tracking_uri", f"cannot create the local store {path}: {err}") from None
            return
        policy = Retry(attempts, self.retry.backoff_s) if attempts is not None else self.retry
        reason = ""
        for _attempt in policy.tries():
            self.down = ""
            reason = self.probe(timeout_s)
            if not reason:
                return
        raise self._unreachable("check it is up", reason, policy.attempts)

    # ---- experiments and runs

    def experiment_id(self, name: str, *, classic: bool = False) -> str:
        """The id of experiment ``name``, created when missing (the KFP plugin's when set).

        shipyard creates its experiments as classic ML experiments (:data:`TAG_EXPERIMENT_KIND`);
        with ``classic`` an existing experiment without that tag gets it too.
        """
        if self.kfp and self.kfp.experiment_id and self.uri == self.kfp.endpoint:
            return self.kfp.experiment_id
        name = name or "shipyard"
        exp = self.call("look up the experiment", self.client.get_experiment_by_name, name)
        if exp is not None:
            if exp.lifecycle_stage == "deleted":
                raise ShipyardError("experiment", f"{name!r} is deleted in MLflow", "restore it or pick another name")
            if classic and TAG_EXPERIMENT_KIND not in (exp.tags or {}):
                self.call("tag the experiment", self.client.set_experiment_tag, exp.experiment_id,
                          TAG_EXPERIMENT_KIND, EXPERIMENT_KIND_CLASSIC)
            return exp.experiment_id
        from mlflow.exceptions import MlflowException

        try:
            return self.call("create the experiment", self.client.create_experiment, name,
                             tags={TAG_EXPERIMENT_KIND: EXPERIMENT_KIND_CLASSIC})
        except MlflowException:  # created concurrently by another step
            exp = self.call("look up the experiment", self.client.get_experiment_by_name, name)
            if exp is None:
                raise
            return exp.experiment_id

    def parent_record(self, kfp_run_id: str, experiment: str = "") -> dict[str, Any]:
        """The pipeline's parent run of ``kfp_run_id``: ``{"run_id", "experiment_id", "tags"}``.

        A local run's cache file answers without a call; else the run is found by its tag (one
        experiment lookup and one search) and read once.
        """
        cached = read_parent_cache(kfp_run_id, self.uri, self.work_dir)
        if cached is not None:
            return {**cached, "cached": True}
        run_id = self.resolve_parent("", kfp_run_id, experiment)
        run = self.call("read the pipeline run", self.client.get_run, run_id)
        return {"run_id": run_id, "experiment_id": run.info.experiment_id, "tracking_uri": self.uri,
                "tags": {k: v for k, v in run.data.tags.items() if k in (TAG_PIPELINE, TAG_KFP_RUN)}}

    def resolve_parent(self, parent_run_id: str, kfp_run_id: str = "", experiment: str = "") -> str:
        """``parent_run_id``, or else the pipeline run tagged with ``kfp_run_id`` (steps inside loops
        and exit handlers find their parent this way: a local run's cache file, else a tag
        search); empty when neither is known."""
        if parent_run_id or not kfp_run_id or kfp_run_id.startswith("{{"):
            return parent_run_id
        cached = read_parent_cache(kfp_run_id, self.uri, self.work_dir)
        if cached is not None:
            return str(cached["run_id"])
        found = self.find_run(self.experiment_id(experiment), {TAG_KFP_RUN: kfp_run_id, TAG_KIND: "pipeline"})
        if found is None:
            raise ShipyardError(
                "kfp_run_id", f"no MLflow pipeline run is tagged {TAG_KFP_RUN}={kfp_run_id}",
                "start_tracking must run first with the same tracking_uri and experiment",
            )
        return found

    def find_run(self, experiment_id: str, tags: Mapping[str, str]) -> str | None:
        """The id of the newest run of ``experiment_id`` carrying all ``tags``, or None."""
        clauses = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())
        runs = self.call(
            "search runs", self.client.search_runs, [experiment_id], filter_string=clauses, max_results=1
        )
        return runs[0].info.run_id if runs else None

    def start_pipeline_run(
        self,
        experiment: str,
        pipeline_name: str,
        *,
        kfp_run_id: str = "",
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, Any] | None = None,
        run_name: str = "",
    ) -> str:
        """Open (or, when this KFP run already has one, reuse) the pipeline's parent run.

        Nested under the KFP plugin's parent run when ``KFP_MLFLOW_CONFIG`` names one.
        """
        self.check_reachable()
        exp_id = self.experiment_id(experiment, classic=True)
        all_tags = {TAG_PIPELINE: pipeline_name, TAG_KIND: "pipeline"}
        run_id = ""
        if kfp_run_id and not kfp_run_id.startswith("{{"):
            all_tags[TAG_KFP_RUN] = kfp_run_id
            existing = self.find_run(exp_id, {TAG_KFP_RUN: kfp_run_id, TAG_KIND: "pipeline"})
            if existing:
                self.log(existing, params=params, tags=tags)
                run_id = existing
        if not run_id:
            if self.kfp and self.kfp.parent_run_id and self.uri == self.kfp.endpoint:
                all_tags[TAG_PARENT] = self.kfp.parent_run_id
            all_tags.update(to_tags(tags or {}))
            name = run_name or (f"{pipeline_name}-{all_tags[TAG_KFP_RUN][:8]}" if TAG_KFP_RUN in all_tags
                                else pipeline_name)
            run = self.call("create the pipeline run", self.client.create_run, exp_id, tags=all_tags, run_name=name)
            run_id = run.info.run_id
            self.log(run_id, params=params)
        if TAG_KFP_RUN in all_tags:
            write_parent_cache(kfp_run_id, work_dir=self.work_dir, record={
                "run_id": run_id, "experiment_id": exp_id, "tracking_uri": self.uri, "experiment": experiment,
                "kfp_run_id": kfp_run_id,
                "tags": {TAG_PIPELINE: pipeline_name, TAG_KFP_RUN: kfp_run_id}})
        return run_id

    def start_step_run(self, parent_run_id: str, step: str, tags: Mapping[str, Any] | None = None) -> str:
        """The nested run of ``step`` under ``parent_run_id`` (reused when the step is retried)."""
        parent = self.call("read the pipeline run", self.client.get_run, parent_run_id)
        exp_id = parent.info.experiment_id
        existing = self.find_run(exp_id, {TAG_PARENT: parent_run_id, TAG_STEP: step})
        if existing:
            return existing
        all_tags = {TAG_PARENT: parent_run_id, TAG_STEP: step, TAG_KIND: "step"}
        for key in (TAG_PIPELINE, TAG_KFP_RUN):
            if key in parent.data.tags:
                all_tags[key] = parent.data.tags[key]
        all_tags.update(to_tags(tags or {}))
        run = self.call("create the step run", self.client.create_run, exp_id, tags=all_tags, run_name=step)
        return run.info.run_id

    def log(
        self,
        run_id: str,
        *,
        params: Mapping[str, Any] | None = None,
        metrics: Mapping[str, Any] | None = None,
        tags: Mapping[str, Any] | None = None,
        artifacts: Mapping[str, str | os.PathLike[str]] | None = None,
        timestamp_ms: int | None = None,
    ) -> dict[str, int]:
        """Log params, metrics, tags and artifacts (metrics at ``timestamp_ms``, default now).

        ``artifacts`` maps a destination to a local path: a folder is uploaded under the
        destination folder; a file goes to the destination itself when its last part is the
        file's name (``"evaluate/report.md"``), else into the destination folder.

        Returns how many of each were logged.
        """
        from mlflow.entities import Metric, Param, RunTag

        now = int(timestamp_ms or time.time() * 1000)
        p = [Param(k, v) for k, v in to_params(params or {}).items()]
        m = [Metric(k, v, now, 0) for k, v in to_metrics(metrics or {}).items()]
        t = [RunTag(k, v) for k, v in to_tags(tags or {}).items()]
        for batch in _batches(p, m, t):  # one call for a step's params, metrics and tags
            self.call("log params, metrics and tags", self.client.log_batch, run_id, **batch)
        n_art = 0
        for dest, local in (artifacts or {}).items():
            path = Path(local)
            if not path.exists():
                continue
            dest_dir = dest.strip("/") or None
            if path.is_dir():
                if any(path.iterdir()):
                    self.call("upload artifacts", self.client.log_artifacts, run_id, str(path), dest_dir,
                              payload_bytes=tree_bytes(path))
                    n_art += sum(1 for f in path.rglob("*") if f.is_file())
            else:
                if dest_dir and Path(dest_dir).name == path.name:
                    dest_dir = str(Path(dest_dir).parent) if "/" in dest_dir else None
                self.call("upload an artifact", self.client.log_artifact, run_id, str(path), dest_dir,
                          payload_bytes=tree_bytes(path))
                n_art += 1
        return {"params": len(p), "metrics": len(m), "tags": len(t), "artifacts": n_art}

    def finish(self, run_id: str, status: str = "FINISHED") -> None:
        """Close a run (``FINISHED``, ``FAILED`` or ``KILLED``)."""
        self.call("close the run", self.client.set_terminated, run_id, status)

    def log_step(
        self,
        parent_run_id: str,
        step: str,
        *,
        params: Mapping[str, Any] | None = None,
        metrics: Mapping[str, Any] | None = None,
        tags: Mapping[str, Any] | None = None,
        artifacts: Mapping[str, str | os.PathLike[str]] | None = None,
        status: str = "FINISHED",
    ) -> tuple[str, dict[str, int]]:
        """One nested run for ``step`` with everything it produced; returns (run id, counts)."""
        self.check_reachable()
        run_id = self.start_step_run(parent_run_id, step)
        counts = self.log(run_id, params=params, metrics=metrics, tags=tags, artifacts=artifacts)
        self.finish(run_id, status)
        return run_id, counts

    def run_url(self, run_id: str) -> str:
        """Where the run is in the MLflow UI (for HTTP servers), else its store path."""
        run = self.call("read the run", self.client.get_run, run_id)
        if self.is_remote:
            return ui_url(self.uri, run.info.experiment_id, run_id)
        return f"{self.uri} run {run_id} (MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri {self.uri})"


# --------------------------------------------------------------------------- the step's fast path

#: MLflow client settings the REST fast path does not implement: with any of them set, steps use
#: the MLflow client (auth plugins, mutual TLS, custom CA bundles).
_CLIENT_ONLY_ENV = ("MLFLOW_TRACKING_AUTH", "MLFLOW_TRACKING_CLIENT_CERT_PATH", "MLFLOW_TRACKING_SERVER_CERT_PATH",
                    "MLFLOW_TRACKING_AWS_SIGV4")


class RestLogger:
    """The handful of MLflow REST calls a step makes, without importing MLflow.

    ``import mlflow`` costs a step process 1.5-4 s on a loaded 2-core machine, about 30 times the
    calls themselves. For an HTTP(S) server with no auth, a bearer token
    (``MLFLOW_TRACKING_TOKEN``) or basic auth (``MLFLOW_TRACKING_USERNAME``/``_PASSWORD``), and
    artifacts proxied by the server (``mlflow-artifacts:``), a step logs through MLflow's REST API
    2.0 directly (the same endpoints the client calls). :meth:`usable` says when; anything else
    goes through :class:`mlflow.MlflowClient`.
    """

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker
        self.base = tracker.uri.rstrip("/")
        self.timeout = env_float("MLFLOW_HTTP_REQUEST_TIMEOUT", 30.0)
        self.headers = {"Content-Type": "application/json", "User-Agent": "shipyard"}
        token = header_value(os.environ.get("MLFLOW_TRACKING_TOKEN"), "MLFLOW_TRACKING_TOKEN") or ""
        user, password = os.environ.get("MLFLOW_TRACKING_USERNAME", ""), os.environ.get("MLFLOW_TRACKING_PASSWORD", "")
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        elif user and password:
            import base64

            self.headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        workspace = os.environ.get("MLFLOW_WORKSPACE", "")
        if workspace:
            self.headers["X-MLFLOW-WORKSPACE"] = workspace
        self.context: ssl.SSLContext | None = None
        if env_bool("MLFLOW_TRACKING_INSECURE_TLS"):
            self.context = ssl._create_unverified_context()  # noqa: S323 - the user asked for it

    @staticmethod
    def usable(tracker: Tracker) -> bool:
        """Whether a step may log to ``tracker``'s server through :class:`RestLogger`."""
        if not tracker.is_remote or env_bool("SHIPYARD_MLFLOW_CLIENT"):
            return False
        return not any(os.environ.get(name) for name in _CLIENT_ONLY_ENV)

    def _request(self, method: str, path: str, body: Any = None, data: bytes | None = None,
                 headers: Mapping[str, str] | None = None) -> dict[str, Any]:
        raw = data if data is not None else (json.dumps(body).encode() if body is not None else None)
        # within self.timeout in all (MLFLOW_HTTP_REQUEST_TIMEOUT), however slowly the server answers, and
        # the time an upload takes at UPLOAD_FLOOR_BYTES_PER_S on top (a 50 MB artifact: 200 s more)
        deadline = self.timeout + (len(raw) / UPLOAD_FLOOR_BYTES_PER_S if raw else 0.0)
        status, answer = http_request(f"{self.base}{path}", deadline_s=deadline, data=raw, method=method,
                                      headers={**self.headers, **(headers or {})}, context=self.context,
                                      field="tracking_uri")
        text = answer.decode(errors="replace")
        if status >= 500 or status == 429:  # transient: the tracker's retries
            raise ConnectionError(f"HTTP {status} from {method} {path}")
        if status >= 400:
            try:
                detail = json.loads(text or "{}")
            except ValueError:
                detail = {}
            detail = detail if isinstance(detail, dict) else {}
            raise ShipyardError("mlflow", f"{method} {path} was refused ({status} "
                                f"{detail.get('error_code', '')}: {str(detail.get('message', ''))[:300]})",
                                "check the tracking server and its version (REST API 2.0)")
        return json.loads(text) if text.strip() else {}

    def call(self, what: str, method: str, path: str, body: Any = None, **kwargs: Any) -> dict[str, Any]:
        """One REST call with the tracker's retries and down-marking."""
        return self.tracker.call(what, self._request, method, path, body, bounded=True, **kwargs)

    def get_run(self, run_id: str) -> dict[str, Any]:
        """``{"info": {...}, "data": {"params": {...}, "metrics": {...}, "tags": {...}}}``."""
        run = self.call("read the run", "GET", "/api/2.0/mlflow/runs/get?" +
                        urllib.parse.urlencode({"run_id": run_id}))["run"]
        data = run.get("data") or {}
        return {"info": run["info"], "data": {
            "params": {p["key"]: p.get("value", "") for p in data.get("params") or []},
            "metrics": {m["key"]: m.get("value") for m in data.get("metrics") or []},
            "tags": {t["key"]: t.get("value", "") for t in data.get("tags") or []}}}

    def find_run(self, experiment_id: str, tags: Mapping[str, str]) -> str | None:
        """The newest run of ``experiment_id`` carrying all ``tags``, or None."""
        clauses = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())
        found = self.call("search runs", "POST", "/api/2.0/mlflow/runs/search",
                          {"experiment_ids": [experiment_id], "filter": clauses, "max_results": 1,
                           "order_by": ["attributes.start_time DESC"]})
        runs = found.get("runs") or []
        return runs[0]["info"]["run_id"] if runs else None

    def create_run(self, experiment_id: str, start_ms: int, tags: Mapping[str, str], run_name: str) -> dict[str, Any]:
        """Create a run; returns its ``info`` (``run_id``, ``artifact_uri``)."""
        out = self.call("create the step run", "POST", "/api/2.0/mlflow/runs/create", {
            "experiment_id": experiment_id, "start_time": int(start_ms), "run_name": run_name,
            "tags": [{"key": k, "value": v} for k, v in {**tags, TAG_RUN_NAME: run_name}.items()]})
        return out["run"]["info"]

    def log(self, run_id: str, params: Mapping[str, Any], metrics: Mapping[str, Any], tags: Mapping[str, Any],
            timestamp_ms: int | None = None) -> None:
        """Params, metrics and tags in as few ``log-batch`` calls as MLflow's limits allow (one, usually)."""
        now = int(timestamp_ms or time.time() * 1000)
        p = [{"key": k, "value": v} for k, v in to_params(params).items()]
        m = [{"key": k, "value": v, "timestamp": now, "step": 0} for k, v in to_metrics(metrics).items()]
        t = [{"key": k, "value": v} for k, v in to_tags(tags).items()]
        for batch in _batches(p, m, t):
            self.call("log params, metrics and tags", "POST", "/api/2.0/mlflow/runs/log-batch",
                      {"run_id": run_id, **batch})

    def terminate(self, run_id: str, status: str, end_ms: int | None) -> None:
        """Close a run with ``status`` at ``end_ms``."""
        self.call("close the step run", "POST", "/api/2.0/mlflow/runs/update",
                  {"run_id": run_id, "status": status, "end_time": int(end_ms or time.time() * 1000)})

    def can_upload(self, artifact_uri: str) -> bool:
        """Whether the server proxies this run's artifacts (``mlflow-artifacts:/...``)."""
        return artifact_uri.startswith("mlflow-artifacts:/") and not artifact_uri.startswith("mlflow-artifacts://")

    def upload(self, artifact_uri: str, root: Path) -> int:
        """PUT every file under ``root`` into the run's proxied artifact store; returns how many."""
        base = artifact_uri.removeprefix("mlflow-artifacts:").lstrip("/")
        count = 0
        for file in sorted(f for f in root.rglob("*") if f.is_file()):
            rel = file.relative_to(root).as_posix()
            path = "/api/2.0/mlflow-artifacts/artifacts/" + urllib.parse.quote(f"{base}/{rel}")
            self.call("upload an artifact", "PUT", path, data=file.read_bytes(),
                      headers={"Content-Type": "application/octet-stream"})
            count += 1
        return count
