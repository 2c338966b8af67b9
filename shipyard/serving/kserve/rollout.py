"""Progressive rollout (``deploy_config.rollout``): replace the service in place, or a canary.

* ``{"strategy": "replace"}`` (the default): the LLMInferenceService is updated in place
  (:func:`shipyard.serving.kserve.apply.deploy`: apply, wait, verify, roll back).
* ``{"strategy": "canary", "steps": [10, 50, 100], "route": {"name": R, "namespace": NS}}``: the new
  model is deployed as a **second** LLMInferenceService next to the running one (the two names
  alternate: ``NAME`` and ``NAME-canary``); once it is Ready, the user-managed Gateway API
  ``HTTPRoute`` ``R`` sends each step's weight (percent) to the new service's InferencePool and the
  rest to the old one, and each step runs ``check(url, weight)`` (the deploy step's verification
  and SLO smoke against the new service's own status URL). At 100 the route sends everything to
  the new pool and the old service is deleted. On a failure or an interrupt at any point the route
  is restored exactly as it was and the new service is deleted: the old one never stopped serving.

Only fields of the vendored CRDs are used (``HTTPRoute.spec.rules[].backendRefs[]`` with ``group:
inference.networking.k8s.io``, ``kind: InferencePool``, ``name``, ``weight``), and every object
is validated against them before it is applied.

A newer KServe (after v0.20, kserve #5725) has native weighted groups on the
LLMInferenceService: there, one service would list the two model versions with their weights and
KServe would write the route itself; the steps above map one to one onto changing those weights
(``steps`` -> the weight of the new group, the verification per step unchanged, cut-over ->
dropping the old group). The vendored v0.20 CRD has no such field, so shipyard edits the route.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.interrupts import shielded, signal_name
from shipyard.serving.kserve.apply import Outcome, deploy, url_of
from shipyard.serving.kserve.validate import require_valid

STRATEGIES = ("replace", "canary")
ROLLOUT_KEYS = {"strategy", "steps", "route"}
ROUTE_API, ROUTE_KIND = "gateway.networking.k8s.io/v1", "HTTPRoute"
POOL_GROUP, POOL_KIND = "inference.networking.k8s.io", "InferencePool"
CANARY_SUFFIX = "-canary"


def rollout_options(raw: Any) -> dict[str, Any]:
    """Check ``deploy_config.rollout`` (``raw``: its value, None when absent); one-line errors naming
    the field. Read by :func:`shipyard.params.deploy.parse_deploy_config`."""
    if raw is None:
        return {"strategy": "replace"}
    if not isinstance(raw, dict):
        raise ShipyardError("deploy_config.rollout", f"{raw!r} is not an object",
                            '{"strategy": "canary", "steps": [10, 50, 100], "route": {"name": "llm-route"}}')
    unknown = sorted(set(raw) - ROLLOUT_KEYS)
    if unknown:
        raise ShipyardError(f"deploy_config.rollout.{unknown[0]}", "is not a rollout option", f"use {sorted(ROLLOUT_KEYS)}")
    strategy = raw.get("strategy", "replace")
    if strategy not in STRATEGIES:
        raise ShipyardError("deploy_config.rollout.strategy", f"{strategy!r} is not a strategy", f"use {list(STRATEGIES)}")
    if strategy == "replace":
        if set(raw) - {"strategy"}:
            raise ShipyardError("deploy_config.rollout", "steps and route belong to strategy canary",
                                'add "strategy": "canary" or drop them')
        return {"strategy": "replace"}
    steps = raw.get("steps", [10, 50, 100])
    ok = (isinstance(steps, list) and steps and all(isinstance(s, int) and not isinstance(s, bool) and 0 < s <= 100
                                                    for s in steps)
          and all(a < b for a, b in zip(steps, steps[1:], strict=False)) and steps[-1] == 100)
    if not ok:
        raise ShipyardError("deploy_config.rollout.steps", f"{steps!r} is not a rising list of percents ending in 100",
                            "e.g. [10, 50, 100]")
    route = raw.get("route")
    if not isinstance(route, dict) or not isinstance(route.get("name"), str) or not route["name"] \
            or set(route) - {"name", "namespace"}:
        raise ShipyardError("deploy_config.rollout.route", f"{route!r} is not {{name, namespace}} of an HTTPRoute",
                            '{"name": "llm-route"} (the HTTPRoute your Gateway serves the model through)')
    return {"strategy": "canary", "steps": steps, "route": {"name": route["name"], "namespace": route.get("namespace")}}


def canary_names(name: str, exists: Callable[[str], bool]) -> tuple[str, str]:
    """(current, new): the running service is ``name`` or ``name-canary``; the new one takes the other."""
    plain, other = name, f"{name}{CANARY_SUFFIX}"
    found = [n for n in (plain, other) if exists(n)]
    if len(found) == 2:
        raise ShipyardError(f"LLMInferenceService {plain}", f"both {plain} and {other} exist (an unfinished rollout?)",
                            "delete the one the route does not serve, then deploy again")
    if not found:
        raise ShipyardError("deploy_config.rollout", f"no running LLMInferenceService {plain} (or {other}) to canary against",
                            'deploy the first version with {"strategy": "replace"}')
    return (plain, other) if found[0] == plain else (other, plain)


def weighted_route(route: dict[str, Any], old_pool: str, new_pool: str, weight: int) -> dict[str, Any]:
    """``route`` (an HTTPRoute as stored) with every rule that sends to ``old_pool`` (or already to both
    pools) sending ``100 - weight`` to ``old_pool`` and ``weight`` to ``new_pool`` (at 100: only the new one)."""
    meta = route["metadata"]
    body = {"apiVersion": route.get("apiVersion", ROUTE_API), "kind": ROUTE_KIND,
            "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                         **({"labels": meta["labels"]} if meta.get("labels") else {}),
                         **({"annotations": meta["annotations"]} if meta.get("annotations") else {})},
            "spec": copy.deepcopy(route.get("spec") or {})}
    touched = 0
    for rule in body["spec"].get("rules") or []:
        refs = rule.get("backendRefs") or []
        pools = [r for r in refs if r.get("kind") == POOL_KIND and r.get("name") in (old_pool, new_pool)]
        if not pools:
            continue
        touched += 1
        template = {k: v for k, v in pools[0].items() if k not in ("name", "weight")}
        template.setdefault("group", POOL_GROUP)
        others = [r for r in refs if r not in pools]
        mine = [{**template, "name": new_pool, "weight": weight}]
        if weight < 100:
            mine.insert(0, {**template, "name": old_pool, "weight": 100 - weight})
        rule["backendRefs"] = others + mine
    if not touched:
        raise ShipyardError(f"HTTPRoute {meta['namespace']}/{meta['name']}",
                            f"has no rule whose backendRefs send to InferencePool {old_pool}",
                            f"point the route at {old_pool} (group {POOL_GROUP}, kind {POOL_KIND}) first")
    return body


def weights_of(route: dict[str, Any]) -> dict[str, int]:
    """InferencePool name -> weight over the route's rules (for logs and tests)."""
    out: dict[str, int] = {}
    for rule in (route.get("spec") or {}).get("rules") or []:
        for ref in rule.get("backendRefs") or []:
            if ref.get("kind") == POOL_KIND:
                out[ref["name"]] = int(ref.get("weight", 1))
    return out


def _checked_route(kube: Any, route_res: Any, route_name: str, route_namespace: str, old_pool: str, new_pool: str,
                   steps: list[int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the route as stored, the body that restores it): the route exists, sends to ``old_pool``, and
    its body at every step's weight is valid against the vendored CRD, all before anything changes."""
    original = kube.get(route_res, route_name, route_namespace)
    if original is None:
        raise ShipyardError("deploy_config.rollout.route", f"HTTPRoute {route_namespace}/{route_name} does not exist",
                            "create the route your Gateway serves the model through (it is yours; shipyard edits its weights)")
    restore_body = weighted_route(original, old_pool, new_pool, 0)  # checks the route sends to the old pool
    restore_body["spec"] = copy.deepcopy(original.get("spec") or {})
    for weight in steps:
        require_valid([weighted_route(original, old_pool, new_pool, weight)], f"HTTPRoute at {weight}%")
    return original, restore_body


def _retire_old_service(kube: Any, svc_res: Any, current: str, name: str, ns: str, log: Callable[[str], None]) -> None:
    """After the cut-over: delete the old service ``current`` (a failure is logged, not raised: the
    route no longer sends to it), shielded from a second Ctrl-C."""
    with shielded():
        try:
            kube.delete(svc_res, current, ns)
            log(f"{ns}/{current}: deleted; {name} serves 100%")
        except ShipyardError as err:
            log(f"{ns}/{current}: could not delete the old service ({err.problem}); the route no longer sends to it")


def _undo_canary(kube: Any, route_res: Any, restore_body: dict[str, Any] | None, route: str, svc_res: Any, name: str,
                 ns: str, current: str, reason: ShipyardError, log: Callable[[str], None]) -> ShipyardError:
    """Undo a failed or interrupted canary: the route restored (``restore_body``; None when it never
    changed), the new service ``name`` deleted, shielded from a second Ctrl-C; returns ``reason``
    with what was done (or what could not be)."""
    with shielded():  # a second Ctrl-C must not cut the restore short
        done = []
        try:
            if restore_body is not None:
                kube.apply(route_res, restore_body)
                done.append(f"route {route} restored")
            kube.delete(svc_res, name, ns)
            done.append(f"deleted the new service {name}; {current} keeps serving")
        except ShipyardError as err:
            done.append(f"RESTORE FAILED ({err.problem}); check the route and `kubectl get llmisvc -n {ns}`")
        log(f"{ns}/{name}: " + "; ".join(done))
    return ShipyardError(reason.field, f"{reason.problem}; {'; '.join(done)}", reason.fix)


def canary_rollout(
    docs: list[dict[str, Any]],
    kube: Any,
    *,
    current: str,
    old_pool: str,
    new_pool: str,
    route_name: str,
    route_namespace: str,
    steps: list[int],
    check: Callable[[str, int], None] | None,
    deploy_options: dict[str, float],
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Deploy ``docs`` (the new service, rendered under its canary name) next to ``current``, step
    the route's weights, ``check(url, weight)`` at each step, cut over or restore. Returns the new
    service's outcome dict with ``steps`` (the weights applied)."""
    svc = docs[0]
    name, ns = svc["metadata"]["name"], svc["metadata"]["namespace"]
    route_res = kube.resource(ROUTE_API, ROUTE_KIND)
    svc_res = kube.resource(svc["apiVersion"], svc["kind"])
    original, restore_body = _checked_route(kube, route_res, route_name, route_namespace, old_pool, new_pool, steps)
    log(f"{ns}/{name}: canary next to {current}; route {route_namespace}/{route_name} weights {steps}")
    # Ready and verified before any traffic moves (a failure deletes the new service; the route is untouched)
    outcome: Outcome = deploy(docs, kube, log=log, verify=(lambda url: check(url, 0)) if check else None,
                              **deploy_options)
    applied: list[dict[str, Any]] = []
    state = {"route_changed": False}

    def undo(reason: ShipyardError) -> ShipyardError:
        restore = restore_body if state["route_changed"] else None
        return _undo_canary(kube, route_res, restore, f"{route_namespace}/{route_name}", svc_res, name, ns, current,
                            reason, log)

    try:
        for weight in steps:
            body = weighted_route(original, old_pool, new_pool, weight)
            kube.apply(route_res, body)
            state["route_changed"] = True
            applied.append({"weight": weight, "weights": weights_of(body)})
            log(f"{ns}/{name}: route {route_name}: {json.dumps(weights_of(body))}")
            obj = kube.get(svc_res, name, ns) or {}
            if check is not None:
                check(url_of(obj), weight)
    except ShipyardError as err:
        raise undo(err) from None
    except KeyboardInterrupt as err:
        raise undo(ShipyardError(f"LLMInferenceService {ns}/{name}", f"interrupted by {signal_name(err)} during the "
                                 f"canary at {applied[-1]['weight'] if applied else 0}%", "run the deploy again")) from None
    _retire_old_service(kube, svc_res, current, name, ns, log)
    result = outcome.to_dict()
    result.update(steps=applied, replaced=current, route=f"{route_namespace}/{route_name}")
    return result
