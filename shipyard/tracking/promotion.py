"""``production`` for a deployed champion: move the alias, record the headline on the parent run,
or keep the request for ``shipyard track replay`` when MLflow is down (the deployment stands)."""

from __future__ import annotations

import json
import sys
from typing import Any

from shipyard.core.errors import UnreachableError
from shipyard.tracking.model_registry import promote


def apply_promotion(tracker: Any, request: dict[str, Any]) -> dict[str, str]:
    """Give ``request["version"]`` the alias ``production`` and the parent run the headline
    figures (idempotent: a version already production stays so); returns the aliases."""
    aliases = promote(tracker, request["model_name"], request["version"])
    parent = tracker.resolve_parent("", request.get("kfp_run_id", ""), request.get("experiment", ""))
    if parent:
        head = request.get("headline") or {}
        tracker.log(parent, metrics={f"champion.{k}": v for k, v in head.items()},
                    tags={"shipyard.champion": str(request.get("recipe", ""))[:5000],
                          "shipyard.production_version": request["version"]})
    return aliases


def promote_production(tracking_uri: str, experiment: str, kfp_run_id: str, model_name: str, version: str,
                       recipe: str, headline_json: str = "{}") -> dict[str, Any]:
    """``production`` -> ``version`` (its deployment is Ready or was rendered in a dry run); the
    parent run gets the champion's headline figures. Returns the aliases.

    When MLflow is down (one probe, or a call that fails after its retries) the deployment
    stands and the alias request is kept (a ``promote`` payload, ``tracking-pending/`` in a local
    run) for ``shipyard track replay``; the result then has ``pending`` and no aliases.
    """
    from shipyard.tracking.tracker import Tracker

    tracker = Tracker(tracking_uri)
    request = {"kind": "promote", "tracking_uri": tracking_uri, "resolved_uri": tracker.uri, "experiment": experiment,
               "kfp_run_id": kfp_run_id, "model_name": model_name, "version": str(version), "recipe": recipe,
               "headline": json.loads(headline_json or "{}")}
    down = tracker.probe()
    if not down:
        try:
            return {"aliases": apply_promotion(tracker, request)}
        except UnreachableError as err:
            down = str(err)
    from shipyard.tracking.outbox import keep, replay_hint

    kept = keep(request)
    print(f"shipyard: MLflow {tracker.uri} is unreachable ({down}): the deployment stands, but version {version} "
          f"of {model_name} is not yet 'production'; the request is kept in {kept or 'this log: ' + json.dumps(request)}"
          f". {replay_hint(kept)}", file=sys.stderr, flush=True)
    return {"aliases": {}, "pending": request}
