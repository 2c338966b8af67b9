"""What the deploy identity must be allowed to do, derived from what a deploy config renders.

One table, :data:`ACCESS`: each kind the deploy step reads or writes, the deploy option that
brings it in, its API group and resource, and the verbs the deploy step uses on it. A deploy
config needs the rows of the kinds it renders (:func:`deploy_kinds`: the LLMInferenceService, the
KEDA ScaledObjects of ``scaling.mode keda``, the InferenceObjectives of ``objectives``) plus the
HTTPRoute a canary edits (``rollout.strategy canary``), in the namespaces they live in
(:func:`needed_access`).

Both sides of the permission come from this table, so they cannot drift apart:

* the Role ``shipyard-deployer`` in ``manifests/base/rbac/role.yaml`` holds exactly
  :func:`role_rules` (every row: a Role is installed once, for every option);
* ``shipyard check`` and the pipeline's pre-flight review each (verb, group, resource) of
  :func:`needed_access` for the deploy config they are given
  (:func:`shipyard.serving.cluster_check.permission_checks`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shipyard.serving.kserve.config import DeployConfig
from shipyard.serving.kserve.render import KIND, render


@dataclass(frozen=True)
class Access:
    """One row: ``kind`` (``resource`` in API ``group``) is touched with ``verbs`` when ``option`` is chosen."""

    kind: str
    group: str
    resource: str
    verbs: tuple[str, ...]
    option: str
    why: str


#: The one table. ``option`` "always": every deploy; otherwise the deploy option that renders the kind.
ACCESS: tuple[Access, ...] = (
    Access(KIND, "serving.kserve.io", "llminferenceservices", ("get", "list", "watch", "create", "patch", "delete"),
           "always", "server-side apply (patch; create the first time), get for the Ready wait, delete to remove a "
           "failed first deploy or the replaced service after a canary; list/watch for `kubectl get -w`"),
    Access(f"{KIND}/status", "serving.kserve.io", "llminferenceservices/status", ("get",),
           "always", "the conditions the Ready wait reports"),
    Access("LLMInferenceServiceConfig", "serving.kserve.io", "llminferenceserviceconfigs", ("get", "list"),
           "always", "read the presets named in baseRefs"),
    Access("Event", "", "events", ("get", "list", "watch"), "always", "diagnostics in the failure message"),
    Access("ScaledObject", "keda.sh", "scaledobjects", ("get", "create", "patch", "delete"),
           "scaling.mode keda", "applied once the service is Ready, deleted when anything after fails"),
    Access("InferenceObjective", "inference.networking.x-k8s.io", "inferenceobjectives",
           ("get", "create", "patch", "delete"), "objectives",
           "applied once the service is Ready, deleted when anything after fails"),
    Access("HTTPRoute", "gateway.networking.k8s.io", "httproutes", ("get", "patch"), "rollout.strategy canary",
           "read the user's route, then apply each step's weights (and restore it on a failure)"),
)
BY_KIND = {row.kind: row for row in ACCESS}
ALWAYS = tuple(row.kind for row in ACCESS if row.option == "always")
ROUTE_KIND = "HTTPRoute"


def deploy_kinds(cfg: DeployConfig, rollout: dict[str, Any] | None = None) -> list[str]:
    """The kinds a deploy of ``cfg`` writes: those :func:`~shipyard.serving.kserve.render.render`
    renders, then HTTPRoute when ``rollout`` is a canary. An ``s3://`` template (read only by the
    deploy step) renders the service and its objectives, as template mode always does."""
    if isinstance(cfg.template, str):
        kinds = [KIND] + (["InferenceObjective"] if cfg.objectives else [])
    else:
        kinds = [doc["kind"] for doc in render(cfg)]
    if (rollout or {}).get("strategy") == "canary":
        kinds.append(ROUTE_KIND)
    return list(dict.fromkeys(kinds))


def rows_for(kinds: list[str]) -> list[Access]:
    """The rows of ``kinds`` after the rows every deploy needs; a kind without a row is a bug here."""
    missing = [k for k in kinds if k not in BY_KIND]
    if missing:
        raise KeyError(f"shipyard.serving.kserve.access.ACCESS has no row for kind {missing[0]}")
    wanted = [*ALWAYS, *kinds]
    return [row for row in ACCESS if row.kind in wanted]


def needed_access(cfg: DeployConfig | None, rollout: dict[str, Any] | None = None,
                  namespace: str = "") -> list[tuple[str, str, str, str]]:
    """(verb, group, resource, namespace) the deploy step needs for ``cfg`` and ``rollout``, in the
    service's namespace (``namespace`` when given, else ``cfg.namespace``) and, for a canary, the
    HTTPRoute's verbs in the route's own namespace. ``cfg`` None: what every deploy needs."""
    kinds = deploy_kinds(cfg, rollout) if cfg is not None else []
    ns = namespace or (cfg.namespace if cfg is not None else "")
    route_ns = (((rollout or {}).get("route") or {}).get("namespace")) or ns
    return [(verb, row.group, row.resource, route_ns if row.kind == ROUTE_KIND else ns)
            for row in rows_for(kinds) for verb in row.verbs]


def role_rules() -> list[dict[str, Any]]:
    """The rules of the Role ``shipyard-deployer``: every row of :data:`ACCESS`, one rule each."""
    return [{"apiGroups": [row.group], "resources": [row.resource], "verbs": list(row.verbs)} for row in ACCESS]


def granted(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(group, resource, verb) a Role's ``rules`` grant (no wildcards: the shipped Role names each)."""
    return {(group, resource, verb) for rule in rules for group in rule.get("apiGroups") or []
            for resource in rule.get("resources") or [] for verb in rule.get("verbs") or []}
