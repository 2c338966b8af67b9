"""Apply a rendered deployment, wait for it to become Ready, and roll back when it does not.

* Server-side apply (``application/apply-patch+yaml``, field manager ``shipyard``) through the
  kubernetes client's DynamicClient, which discovers the ``serving.kserve.io`` group first.
* Wait: poll the object until ``status.observedGeneration`` has caught up with the applied
  generation and condition ``Ready`` (KServe's rollup of PresetsCombined, WorkloadsReady and
  RouterReady) is True; every condition change is printed as it happens.
* Still starting vs failed (KServe v0.20, ``llm_inference_service_lifecycle.go`` and
  ``workload_single_node.go``): while a new Deployment is ``Available=False /
  MinimumReplicasUnavailable`` (image pull, model pull, load, CUDA-graph capture: minutes on
  GPUs) KServe sets ``MainWorkloadReady=False`` with that reason, rolled up into
  ``WorkloadsReady`` and ``Ready`` with the same reason; before the Deployment has conditions the
  reason is ``Progressing``. Such progressing reasons (:data:`PROGRESSING`) are waited for until
  the timeout. ``PresetsCombined=False`` and the reasons in :data:`FAILED` (a Deployment past its
  progress deadline, a stopped service, pod states such as CrashLoopBackOff or ImagePullBackOff)
  fail at once; any other ``False`` reason fails once it has lasted ``false_grace_s``.
  Conditions outside the Ready rollup (``OciImageVolumeCompatible``, ``GroupReady``,
  ``GroupDegraded``: advisory) are printed and never fail the deploy.
* Timeout: ``wait_timeout_s``, by default derived from the rendered startup probe, the same
  figure the sizing gives the probe (:func:`shipyard.serving.sizing.ready_wait_seconds`: probe
  seconds + an allowance for the image and model pulls the probe does not cover).
* Verify: with ``verify``, the Ready service is checked through its status URL (the deploy
  step's verification against the champion's record) before its spec becomes the last good one;
  a failed or interrupted verification rolls back exactly as a service that never became Ready.
* Rollback: the last spec that became Ready is kept on the object itself, in the annotation
  ``shipyard.io/last-good`` (labels, annotations and spec as JSON), and re-applied; an object
  that did not exist before is deleted. KEDA ScaledObjects are applied only once the service
  is Ready, and removed again if anything fails after they were applied.
* Faults (403, 422, 404, API server timeouts, unreachable server) end in one line; whatever
  was applied before the fault is rolled back first.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shipyard.core.errors import ShipyardError, UnreachableError, refuse_credentials
from shipyard.core.interrupts import shielded, signal_name
from shipyard.core.net import call_within
from shipyard.serving.kserve.config import API_TIMEOUT_S
from shipyard.serving.kserve.validate import require_valid
from shipyard.serving.sizing import PULL_ALLOWANCE_S, ready_wait_seconds

FIELD_MANAGER = "shipyard"
LAST_GOOD = "shipyard.io/last-good"
READY, PRESETS = "Ready", "PresetsCombined"
ROLLUP = ("PresetsCombined", "WorkloadsReady", "RouterReady", READY)
#: KServe v0.20's conditions that block Ready (llm_inference_service_lifecycle.go: the rollups, the
#: workload and router sub-conditions, and PresetsCombined, which blocks reconciliation); any
#: other type (OciImageVolumeCompatible, GroupReady, GroupDegraded) is advisory
BLOCKING = frozenset({*ROLLUP, "MainWorkloadReady", "WorkerWorkloadReady", "PrefillWorkloadReady",
                      "PrefillWorkerWorkloadReady", "ScalingReady", "PrefillScalingReady", "SchedulerWorkloadReady",
                      "GatewaysReady", "HTTPRoutesReady", "InferencePoolReady"})
#: False reasons of a rollout still in progress: a Deployment's (or LeaderWorkerSet's) start-up as
#: KServe v0.20 propagates it (workload_single_node.go, workload_multi_node.go, scheduler.go), and
#: an autoscaler not yet observed (scaling.go)
PROGRESSING = frozenset({"Progressing", "MinimumReplicasUnavailable", "NewReplicaSetCreated", "FoundNewReplicaSet",
                         "ReplicaSetUpdated", "HPAProgressing", "ScaledObjectProgressing"})
#: False reasons that do not go away by waiting
FAILED = frozenset({"ProgressDeadlineExceeded", "Stopped", "CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull",
                    "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
                    "FailedCreate", "ConfigNotFound", "CombineBaseError"})


@dataclass
class Outcome:
    """What happened: the URL once Ready, and the conditions seen."""

    name: str
    namespace: str
    status: str  # "Ready"
    url: str
    generation: int
    conditions: list[dict[str, Any]] = field(default_factory=list)
    events: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "namespace": self.namespace, "status": self.status, "url": self.url,
                "generation": self.generation, "conditions": self.conditions, "events": self.events}


class DeployFailed(ShipyardError):
    """The rollout failed and was rolled back (or deleted); carries what was done."""

    def __init__(self, field_name: str, problem: str, fix: str, *, action: str) -> None:
        self.action = action
        super().__init__(field_name, problem, fix)


# --- client ----------------------------------------------------------------------------------

#: an API server that does not accept the connection: this long per attempt, CONNECT_ATTEMPTS attempts
CONNECT_TIMEOUT_S = 5.0
CONNECT_ATTEMPTS = 3


def has_cluster_credentials(kubeconfig: str | None = None) -> bool:
    """Whether :func:`api_client` has anything to load: ``--kubeconfig``, ``$KUBECONFIG``,
    ``~/.kube/config`` or an in-cluster service account (``KUBERNETES_SERVICE_HOST``). A file that is
    named but broken still counts (loading it is the error that names it)."""
    return bool(kubeconfig or os.environ.get("KUBECONFIG") or os.path.exists(os.path.expanduser("~/.kube/config"))
                or os.environ.get("KUBERNETES_SERVICE_HOST"))


def connection_problem(err: BaseException) -> str:
    """A failed connection to an API server in words (``connection refused``, ``the host name does
    not resolve``, ``TLS failed: ...``, ``timed out``), never urllib3's ``MaxRetryError``."""
    import urllib3.exceptions as u3

    reason: BaseException = getattr(err, "reason", None) or err
    text = " ".join(str(reason).split()).lower()
    if isinstance(reason, u3.SSLError) or "certificate" in text or "ssl" in text:
        detail = str(getattr(reason, "args", [reason])[0] if getattr(reason, "args", None) else reason)
        return f"TLS failed: {' '.join(detail.split())[:160]}"
    if "refused" in text:
        return "connection refused"
    if any(s in text for s in ("name or service not known", "nodename nor servname", "name resolution",
                               "no address associated", "failed to resolve")):
        return "the host name does not resolve"
    if isinstance(reason, (u3.ConnectTimeoutError, u3.TimeoutError)) or "timed out" in text:
        return "timed out"
    if "unreachable" in text:
        return "network unreachable"
    return "the connection failed"


def api_client(kubeconfig: str | None = None, context: str | None = None, *,
               timeout_s: float = API_TIMEOUT_S) -> Any:
    """A kubernetes ``ApiClient`` from a kubeconfig (``--kubeconfig``, ``$KUBECONFIG``,
    ``~/.kube/config``) or the in-cluster service account, with default socket timeouts so that a
    hung API server ends in an error instead of a hang: connect within :data:`CONNECT_TIMEOUT_S`
    (:data:`CONNECT_ATTEMPTS` attempts), read within ``timeout_s`` (default
    :data:`~shipyard.serving.kserve.config.API_TIMEOUT_S`, above the API server's own 60 s)."""
    import urllib3
    import yaml
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    path = kubeconfig or os.environ.get("KUBECONFIG")
    default = os.path.expanduser("~/.kube/config")
    configuration = client.Configuration()
    given = path or (default if os.path.exists(default) else "")
    if given and os.pathsep not in given and os.path.exists(given) and not os.path.isfile(given):
        raise ShipyardError("kubeconfig", f"{given} is not a regular file (a FIFO or a folder would be read forever "
                            "or not at all)", "give the kubeconfig file itself")
    try:
        if path or os.path.exists(default):
            config.load_kube_config(config_file=path or default, context=context, client_configuration=configuration)
        else:
            config.load_incluster_config(client_configuration=configuration)
    except yaml.YAMLError as err:
        raise ShipyardError("kubeconfig", f"{path or default} is not YAML ({str(err).splitlines()[0]})",
                            "give a kubeconfig file (kubectl config view --raw > FILE)") from None
    except (ConfigException, OSError, TypeError, ValueError, AttributeError) as err:
        raise ShipyardError("kubeconfig", f"cannot load cluster credentials: {(str(err).splitlines() or [type(err).__name__])[0]}",
                            "give --kubeconfig, set KUBECONFIG, or run inside the cluster") from None
    refuse_credentials(configuration.host, "kubeconfig", "the cluster's server URL carries credentials: keep "
                       "them in the kubeconfig's user entry (token, client certificate), not in server")
    retries = CONNECT_ATTEMPTS - 1
    configuration.retries = urllib3.Retry(total=retries, connect=retries, read=0, status=0, backoff_factor=0.2)
    api = client.ApiClient(configuration)
    api.rest_client.pool_manager = _DefaultTimeout(api.rest_client.pool_manager,
                                                   urllib3.Timeout(connect=min(CONNECT_TIMEOUT_S, timeout_s), read=timeout_s))
    return api


class _DefaultTimeout:
    """Wrap urllib3's PoolManager so requests without ``_request_timeout`` (the client passes
    ``timeout=None``, which means "wait forever", e.g. during discovery) get ``timeout``."""

    def __init__(self, pool: Any, timeout: Any) -> None:
        self._pool = pool
        self._timeout = timeout

    def request(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = self._timeout
        return self._pool.request(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


def call_deadline_s(timeout_s: float) -> float:
    """The most one API call may take in all: its read timeout ``timeout_s`` and the connect attempts
    (:data:`CONNECT_ATTEMPTS` of up to :data:`CONNECT_TIMEOUT_S`) with their back-off (1 s)."""
    return timeout_s + CONNECT_ATTEMPTS * min(CONNECT_TIMEOUT_S, timeout_s) + 1.0


class Kube:
    """The few API calls a deploy makes, with every failure turned into one line; each ends within
    :func:`call_deadline_s` of ``timeout_s`` in all (``deploy_config.apply.api_timeout_s``, default
    :data:`~shipyard.serving.kserve.config.API_TIMEOUT_S`, plus the connect attempts: 91 s), however
    slowly the API server (or a proxy before it) answers: the client's own timeout bounds each read only."""

    def __init__(self, api: Any, *, timeout_s: float = API_TIMEOUT_S,
                 setting: str = "deploy_config.apply.api_timeout_s") -> None:
        self.api = api
        self.timeout_s = timeout_s
        self.setting = setting
        self.connect_timeout_s = min(CONNECT_TIMEOUT_S, timeout_s)
        self.host = api.configuration.host
        self._tmp = tempfile.TemporaryDirectory(prefix="shipyard-discovery-")
        self._dyn: Any = None

    def close(self) -> None:
        self._tmp.cleanup()
        self.api.close()

    @property
    def dynamic(self) -> Any:
        if self._dyn is None:
            from kubernetes.dynamic import DynamicClient

            self._dyn = self._call("discover the API", "", lambda: DynamicClient(
                self.api, cache_file=os.path.join(self._tmp.name, "discovery.json")))
        return self._dyn

    def resource(self, api_version: str, kind: str) -> Any:
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        dyn = self.dynamic
        try:
            return self._call(f"discover {kind}", "", lambda: dyn.resources.get(api_version=api_version, kind=kind))
        except ResourceNotFoundError:
            fix = ("install KServe v0.20 with the LLMInferenceService CRDs" if "kserve" in api_version
                   else f"install the CRD that serves {api_version} {kind} (e.g. KEDA) or drop that option")
            raise ShipyardError(f"cluster {self.host}", f"does not serve {api_version} {kind}", fix) from None

    def get(self, res: Any, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            obj = self._call(f"get {res.kind} {namespace}/{name}", namespace, lambda: res.get(
                name=name, namespace=namespace), not_found_ok=True)
        except _NotFound:
            return None
        return obj.to_dict()

    def apply(self, res: Any, body: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply; ``dry_run``: the API server checks it (schema, admission, RBAC) and
        answers the object as it would store it, storing nothing (``dryRun=All``)."""
        meta = body["metadata"]
        extra = {"dry_run": "All"} if dry_run else {}
        obj = self._call(f"{'dry-run ' if dry_run else ''}apply {res.kind} {meta['namespace']}/{meta['name']}",
                         meta["namespace"], lambda: res.server_side_apply(body=body, field_manager=FIELD_MANAGER,
                                                                          force_conflicts=True, **extra))
        return obj.to_dict()

    def delete(self, res: Any, name: str, namespace: str) -> None:
        try:
            self._call(f"delete {res.kind} {namespace}/{name}", namespace, lambda: res.delete(
                name=name, namespace=namespace), not_found_ok=True)
        except _NotFound:
            pass

    def _call(self, what: str, namespace: str, fn: Callable[[], Any], not_found_ok: bool = False) -> Any:
        import urllib3.exceptions
        from kubernetes.client.exceptions import ApiException
        from kubernetes.dynamic.exceptions import DynamicApiError

        deadline = call_deadline_s(self.timeout_s)

        def late() -> UnreachableError:
            return UnreachableError(f"kubernetes API {self.host}", f"timed out after {deadline:g}s trying to {what} "
                                    f"(no whole answer within it)", f"check the API server's health (and a proxy "
                                    f"before it), or raise {self.setting}")

        try:
            return call_within(deadline, fn, on_timeout=late, owner=self)
        except (ApiException, DynamicApiError) as err:
            status = getattr(err, "status", None)
            if status == 404 and not_found_ok:
                raise _NotFound() from None
            raise api_error(what, namespace, status, _message(err), self.host) from None
        except (urllib3.exceptions.TimeoutError, urllib3.exceptions.ProtocolError) as err:
            # no answer in time is an unreachable service: exit 3 (README), like a refused connection
            raise UnreachableError(f"kubernetes API {self.host}", f"timed out after {self.timeout_s:g}s trying to {what} "
                                f"({type(err).__name__})", "check the API server's health and retry") from None
        except urllib3.exceptions.MaxRetryError as err:
            reason = err.reason
            if isinstance(reason, urllib3.exceptions.ConnectTimeoutError) \
                    and not isinstance(reason, urllib3.exceptions.NewConnectionError):
                raise UnreachableError(f"kubernetes API {self.host}", f"did not accept a connection within "
                                       f"{self.connect_timeout_s:g}s ({CONNECT_ATTEMPTS} attempts) trying to {what}",
                                       "check the kubeconfig server address, the network path and the API server's "
                                       "health") from None
            if isinstance(reason, urllib3.exceptions.TimeoutError) \
                    and not isinstance(reason, urllib3.exceptions.NewConnectionError):
                raise UnreachableError(f"kubernetes API {self.host}", f"timed out after {self.timeout_s:g}s trying to "
                                       f"{what}", "check the API server's health and retry") from None
            raise UnreachableError(f"kubernetes API {self.host}", f"unreachable while trying to {what}: "
                                   f"{connection_problem(err)}", "check the kubeconfig server address and network") from None


class _NotFound(Exception):
    pass


def _message(err: Any) -> str:
    body = getattr(err, "body", None)
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    try:
        payload = json.loads(body) if body else {}
        return str(payload.get("message") or getattr(err, "reason", "") or err)
    except (TypeError, ValueError):
        return str(getattr(err, "reason", "") or body or err)


def api_error(what: str, namespace: str, status: int | None, message: str, host: str) -> ShipyardError:
    """One line for an API error, with the fix that usually applies."""
    message = " ".join(message.split())[:400]
    if status == 403:
        return ShipyardError("kubernetes RBAC", f"forbidden to {what} (403): {message}",
                             f"grant the deploy ServiceAccount the shipyard-deployer Role in namespace {namespace} "
                             "(kubectl apply -k manifests/base/rbac)")
    if status == 401:
        return ShipyardError("kubernetes credentials", f"unauthorized to {what} (401)", "refresh the kubeconfig token")
    if status == 422:
        return ShipyardError("kubernetes API", f"rejected the object ({what}): {message}",
                             "run `shipyard validate` on the manifest and fix the deploy parameters")
    if status == 404:
        return ShipyardError("kubernetes API", f"not found while trying to {what}: {message}",
                             f"check that namespace {namespace} exists")
    return ShipyardError(f"kubernetes API {host}", f"failed to {what} ({status}): {message}", "retry or check the cluster")


def server_dry_run(docs: list[dict[str, Any]], kube: Kube) -> list[dict[str, Any]]:
    """``deploy --dry-run=server``: each rendered object server-side applied with ``dryRun=All``
    (the API server's schema, admission webhooks and RBAC say yes or no; nothing is stored); the
    objects as the server answered them, in order. A refusal is the one line of :func:`api_error`."""
    return [kube.apply(kube.resource(doc["apiVersion"], doc["kind"]), doc, dry_run=True) for doc in docs]


# --- conditions --------------------------------------------------------------------------------

def conditions_of(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in ((obj.get("status") or {}).get("conditions") or []) if "type" in c}


def _describe(cond: dict[str, Any]) -> str:
    text = f"{cond['type']}={cond.get('status')}"
    if cond.get("reason"):
        text += f" ({cond['reason']}"
        text += f": {cond['message']})" if cond.get("message") else ")"
    return text


def starting(cond: dict[str, Any]) -> bool:
    """A False condition that reports a rollout still in progress (:data:`PROGRESSING`)."""
    return cond.get("reason") in PROGRESSING


def _false(conds: dict[str, dict[str, Any]], progressing: bool) -> dict[str, Any] | None:
    """The most specific blocking False condition (a sub-condition before its rollup) that is
    (``progressing``) or is not a rollout in progress; advisory conditions never count."""
    false = [c for c in conds.values() if c.get("status") == "False" and c["type"] in BLOCKING
             and starting(c) == progressing]
    if not false:
        return None
    order = {t: i for i, t in enumerate(ROLLUP)}
    return sorted(false, key=lambda c: (order.get(c["type"], -1), c["type"]))[0]


def _failing(conds: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The most specific blocking False condition that is not a rollout in progress."""
    return _false(conds, progressing=False)


def startup_seconds_of(svc: dict[str, Any]) -> float | None:
    """The longest startup probe the manifest renders (``initialDelaySeconds + failureThreshold x
    periodSeconds`` over the decode and prefill pods' containers), None when it renders none."""
    spec = svc.get("spec") or {}
    found: list[float] = []
    for part in (spec, spec.get("prefill") or {}, spec.get("worker") or {}, (spec.get("prefill") or {}).get("worker") or {}):
        pod = part.get("template") if "template" in part else part
        for container in (pod or {}).get("containers") or []:
            probe = container.get("startupProbe") or {}
            if probe:
                found.append(float(probe.get("initialDelaySeconds") or 0)
                             + float(probe.get("failureThreshold") or 3) * float(probe.get("periodSeconds") or 10))
    return max(found) if found else None


def url_of(obj: dict[str, Any]) -> str:
    status = obj.get("status") or {}
    if status.get("url"):
        return str(status["url"])
    for addr in status.get("addresses") or []:
        if addr.get("url"):
            return str(addr["url"])
    return str((status.get("address") or {}).get("url") or "")


# --- rollout -------------------------------------------------------------------------------------

def _snapshot(obj: dict[str, Any]) -> dict[str, Any]:
    """What shipyard re-applies on rollback: labels, annotations (minus last-good) and spec."""
    meta = obj.get("metadata") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if k != LAST_GOOD and not k.startswith("kubectl.kubernetes.io/")}
    return {"labels": dict(meta.get("labels") or {}), "annotations": annotations, "spec": obj.get("spec") or {}}


def _body(template: dict[str, Any], snapshot: dict[str, Any], last_good: str | None) -> dict[str, Any]:
    meta = template["metadata"]
    annotations = dict(snapshot["annotations"])
    if last_good:
        annotations[LAST_GOOD] = last_good
    return {"apiVersion": template["apiVersion"], "kind": template["kind"],
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": snapshot["labels"],
                         "annotations": annotations},
            "spec": snapshot["spec"]}


def _last_good(annotation: str | None) -> dict[str, Any] | None:
    """The snapshot in the last-good annotation, or None when it is absent or was edited out of shape."""
    try:
        snap = json.loads(annotation) if annotation else None
    except ValueError:
        return None
    ok = isinstance(snap, dict) and {"labels", "annotations", "spec"} <= set(snap)
    return snap if ok else None


def _size(spec: dict[str, Any] | None) -> int:
    par = (spec or {}).get("parallelism") or {}
    if par.get("data") or par.get("dataLocal"):
        return max(max(par.get("data") or 1, 1) // max(par.get("dataLocal") or 1, 1), 1)
    return par.get("pipeline") or 1


def _check_immutable(existing: dict[str, Any], new: dict[str, Any]) -> None:
    for path in ("", "prefill"):
        old_spec = existing.get("spec") or {}
        new_spec = new.get("spec") or {}
        if path:
            if not (old_spec.get(path) and new_spec.get(path)):
                continue
            old_spec, new_spec = old_spec[path], new_spec[path]
        if _size(old_spec) != _size(new_spec):
            where = f"spec.{path + '.' if path else ''}parallelism"
            raise ShipyardError(where, f"total parallelism size (pods per replica) is immutable: the running service "
                                f"has {_size(old_spec)}, the new spec {_size(new_spec)}",
                                "deploy under a new name, or delete the old service first")


def _keep_as_good(kube: Kube, res: Any, svc: dict[str, Any], new_snapshot: dict[str, Any],
                  extras: list[tuple[Any, dict[str, Any]]], applied_extra: list[tuple[Any, dict[str, Any]]],
                  log: Callable[[str], None]) -> None:
    """Once Ready (and verified): the new spec becomes the last good one (its annotation), then the
    extra documents (ScaledObjects) are applied, each noted in ``applied_extra`` first so a failure
    rolls back what was applied."""
    ns = svc["metadata"]["namespace"]
    good = json.dumps(new_snapshot, sort_keys=True, separators=(",", ":"))
    kube.apply(res, _body(svc, new_snapshot, good))
    for extra, doc in extras:
        applied_extra.append((extra, doc))
        kube.apply(extra, doc)
        log(f"{ns}/{doc['metadata']['name']}: applied {doc['kind']}")


def _checked_service(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The LLMInferenceService ``docs`` start with, every document valid against the vendored CRDs."""
    require_valid(docs)
    svc = docs[0]
    if svc.get("kind") != "LLMInferenceService":
        raise ShipyardError("manifest", "the first document must be the LLMInferenceService", "render it with shipyard")
    return svc


def deploy(
    docs: list[dict[str, Any]],
    kube: Kube,
    *,
    wait_timeout_s: float | None = None,
    poll_s: float = 5.0,
    false_grace_s: float = 120.0,
    log: Callable[[str], None] = print,
    verify: Callable[[str], None] | None = None,
) -> Outcome:
    """Apply ``docs`` (an LLMInferenceService, then optional ScaledObjects), wait for Ready,
    roll back on failure. Returns the :class:`Outcome`; raises a one-line error otherwise.

    ``verify(url)``: called once the service is Ready, with its status URL, before the new spec
    becomes the last good one; a :class:`ShipyardError` (or an interrupt) from it rolls back
    exactly as a deployment that never became Ready.

    ``wait_timeout_s``: None derives it from the manifest's startup probe
    (:func:`shipyard.serving.sizing.ready_wait_seconds`)."""
    svc = _checked_service(docs)
    name, ns = svc["metadata"]["name"], svc["metadata"]["namespace"]
    res = kube.resource(svc["apiVersion"], svc["kind"])
    extra_res = [kube.resource(d["apiVersion"], d["kind"]) for d in docs[1:]]
    previous, last_good = _previous_state(kube, res, svc, log)
    new_snapshot = _snapshot(svc)
    applied_extra: list[tuple[Any, dict[str, Any]]] = []

    def rollback(reason: ShipyardError) -> DeployFailed:
        return _rollback(kube, res, svc, previous, last_good, applied_extra, reason, log)

    def interrupted(err: KeyboardInterrupt, during: str) -> DeployFailed:
        # A cancelled KFP run (SIGTERM) or Ctrl-C: restore the previous state exactly as on a timeout.
        return rollback(ShipyardError(f"LLMInferenceService {ns}/{name}",
                                      f"interrupted by {signal_name(err)} during {during}", "run the deploy again"))

    try:
        applied = kube.apply(res, _body(svc, new_snapshot, last_good))
    except ShipyardError as err:
        # The request may have reached the server (timeout): restore the previous state.
        raise (rollback(err) if _maybe_applied(err) else err) from None
    except KeyboardInterrupt as err:
        raise interrupted(err, "the apply") from None
    generation = int((applied.get("metadata") or {}).get("generation") or 0)
    wait_timeout_s = _ready_wait(svc, generation, wait_timeout_s, log)
    during = "the Ready wait"
    try:
        obj, events = _wait(kube, res, name, ns, generation, wait_timeout_s, poll_s, false_grace_s, log)
        if verify is not None:
            during = "the verification"
            log(f"{ns}/{name}: Ready at {url_of(obj) or '(no URL reported)'}; verifying it before anything moves")
            verify(url_of(obj))
            during = "the Ready wait"
        _keep_as_good(kube, res, svc, new_snapshot, list(zip(extra_res, docs[1:], strict=True)), applied_extra, log)
    except ShipyardError as err:
        raise rollback(err) from None
    except KeyboardInterrupt as err:
        raise interrupted(err, during) from None
    url = url_of(obj)
    log(f"{ns}/{name}: Ready at {url or '(no URL reported)'}")
    return Outcome(name, ns, "Ready", url, generation, list(conditions_of(obj).values()), events)


def _previous_state(kube: Kube, res: Any, svc: dict[str, Any],
                    log: Callable[[str], None]) -> tuple[dict[str, Any] | None, str | None]:
    """The service's state to roll back to: ``(previous spec, its last-good annotation)``, both None
    when the service does not exist yet. An existing service's immutable fields are checked first;
    its last good spec is the annotation's, else its current spec."""
    name, ns = svc["metadata"]["name"], svc["metadata"]["namespace"]
    existing = kube.get(res, name, ns)
    previous: dict[str, Any] | None = None
    last_good: str | None = None
    if existing is not None:
        _check_immutable(existing, svc)
        last_good = ((existing.get("metadata") or {}).get("annotations") or {}).get(LAST_GOOD)
        previous = _last_good(last_good)
        if previous is None:
            previous = _snapshot(existing)
            last_good = json.dumps(previous, sort_keys=True, separators=(",", ":"))
        log(f"{ns}/{name}: updating (generation {existing['metadata'].get('generation')}); "
            "the last good spec is kept for rollback")
    else:
        log(f"{ns}/{name}: creating")
    return previous, last_good


def _rollback(kube: Kube, res: Any, svc: dict[str, Any], previous: dict[str, Any] | None, last_good: str | None,
              applied_extra: list[tuple[Any, dict[str, Any]]], reason: ShipyardError,
              log: Callable[[str], None]) -> DeployFailed:
    """Undo a failed deploy, shielded from a second interrupt: delete the extra objects applied so far,
    then restore the ``previous`` spec (or delete a service that did not exist). Returns the
    :class:`DeployFailed` to raise: ``reason`` with what the rollback did."""
    name, ns = svc["metadata"]["name"], svc["metadata"]["namespace"]
    with shielded():  # a second Ctrl-C or SIGTERM must not cut a rollback short
        for extra, doc in reversed(applied_extra):
            try:
                kube.delete(extra, doc["metadata"]["name"], doc["metadata"]["namespace"])
            except ShipyardError:
                pass
        try:
            if previous is not None:
                kube.apply(res, _body(svc, previous, last_good))
                action, done = "rolled-back", "rolled back to the previous spec"
            else:
                kube.delete(res, name, ns)
                action, done = "deleted", "deleted the new service"
        except ShipyardError as err:
            action, done = "rollback-failed", f"ROLLBACK FAILED ({err.problem}); check `kubectl get llmisvc -n {ns} {name}`"
        log(f"{ns}/{name}: {done}")
    return DeployFailed(reason.field, f"{reason.problem}; {done}", reason.fix, action=action)


def _ready_wait(svc: dict[str, Any], generation: int, wait_timeout_s: float | None,
                log: Callable[[str], None]) -> float:
    """How long to wait for Ready (None: from the manifest's startup probe plus the pull allowance,
    :func:`shipyard.serving.sizing.ready_wait_seconds`), logged with the applied generation."""
    name, ns = svc["metadata"]["name"], svc["metadata"]["namespace"]
    if wait_timeout_s is None:
        probe_s = startup_seconds_of(svc)
        wait_timeout_s = ready_wait_seconds(probe_s)
        basis = (f"startup probe {probe_s:g}s" if probe_s is not None
                 else f"KServe's default startup probe {wait_timeout_s - PULL_ALLOWANCE_S:g}s")
        log(f"{ns}/{name}: applied generation {generation}; waiting up to {wait_timeout_s:g}s for Ready "
            f"({basis} + {PULL_ALLOWANCE_S:g}s for the image and model pulls)")
    else:
        log(f"{ns}/{name}: applied generation {generation}; waiting up to {wait_timeout_s:g}s for Ready")
    return wait_timeout_s


def _maybe_applied(err: ShipyardError) -> bool:
    return "timed out" in err.problem or "unreachable" in err.problem


def _wait(kube: Kube, res: Any, name: str, ns: str, generation: int, timeout_s: float, poll_s: float,
          false_grace_s: float, log: Callable[[str], None]) -> tuple[dict[str, Any], list[str]]:
    start = time.monotonic()
    seen: dict[str, tuple[Any, ...]] = {}
    false_since: dict[str, float] = {}
    events: list[str] = []
    last: dict[str, Any] = {}
    while True:
        obj = kube.get(res, name, ns)
        now = time.monotonic() - start
        if obj is None:
            raise ShipyardError(f"LLMInferenceService {ns}/{name}", "disappeared while waiting", "check who deleted it")
        last = obj
        status = obj.get("status") or {}
        current = int(status.get("observedGeneration") or 0) >= generation
        conds = conditions_of(obj)
        for ctype, cond in conds.items():
            key = (cond.get("status"), cond.get("reason"), cond.get("message"))
            if seen.get(ctype) != key:
                seen[ctype] = key
                line = f"[{now:6.1f}s] {_describe(cond)}"
                if cond.get("status") == "False" and ctype not in BLOCKING:
                    line += " (advisory: not part of Ready)"
                elif cond.get("status") == "False" and starting(cond):
                    line += " (still starting)"
                events.append(line)
                log(f"{ns}/{name}: {line}")
        if current:
            ready = conds.get(READY)
            if ready and ready.get("status") == "True":
                return obj, events
            presets = conds.get(PRESETS)
            if presets and presets.get("status") == "False":
                raise _condition_error(name, ns, presets)
            failing = _failing(conds)
            for ctype, cond in conds.items():
                if cond.get("status") == "False" and ctype in BLOCKING and not starting(cond):
                    false_since.setdefault(ctype, now)
                else:
                    false_since.pop(ctype, None)
            if failing and (failing.get("reason") in FAILED
                            or now - false_since.get(failing["type"], now) >= false_grace_s):
                raise _condition_error(name, ns, failing)
        if now >= timeout_s:
            failing = _failing(conds) if current else None
            still = _false(conds, progressing=True) if current else None
            if failing is None and still is not None:
                raise ShipyardError(f"LLMInferenceService {ns}/{name}",
                                    f"still starting after {timeout_s:g}s (the Ready wait ran out): {_describe(still)}",
                                    "look at the pods' events (image and model pulls, load); if start-up really takes "
                                    "longer, raise probes.startup_seconds (the wait follows it) or apply.wait_timeout_s")
            detail = f"; last: {_describe(failing)}" if failing else (
                "" if current else f"; the controller has not observed generation {generation} yet")
            raise ShipyardError(f"LLMInferenceService {ns}/{name}", f"not Ready after {timeout_s:g}s{detail}",
                                "look at `kubectl describe llmisvc` and the pod events, or raise the wait timeout")
        time.sleep(min(poll_s, max(timeout_s - now, 0.01)))
    return last, events  # pragma: no cover


def _condition_error(name: str, ns: str, cond: dict[str, Any]) -> ShipyardError:
    reason = cond.get("reason") or "NoReason"
    message = " ".join(str(cond.get("message") or "").split())
    fix = ("check that every baseRefs preset exists in the namespace or in kserve"
           if cond["type"] == PRESETS else "look at `kubectl describe llmisvc` and the pod events")
    return ShipyardError(f"LLMInferenceService {ns}/{name}", f"{cond['type']}=False {reason}: {message}".rstrip(": "),
                         fix)


def deepcopy_docs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return copy.deepcopy(docs)
