"""``production`` for a deployed champion: move the alias, record the headline on the parent run,
or keep the request for ``shipyard track replay`` when MLflow is down (the deployment stands).

A dry run (the manifest rendered, nothing applied) never moves ``production``: the version gets the
alias ``dry-run`` instead and the parent run the tag ``shipyard.production`` = "dry run: production
unchanged"."""

from __future__ import annotations

import json
import sys
from typing import Any

from shipyard.core.errors import UnreachableError
from shipyard.tracking.model_registry import DRY_RUN, checked_by_deploy, promote, set_alias
from shipyard.tracking.model_registry import aliases as read_aliases
from shipyard.tracking.outbox import keep, replay_hint
from shipyard.tracking.tracker import Tracker

#: what the console, run-summary.json and the parent run say after a dry run
DRY_RUN_NOTE = "dry run: production unchanged"


def apply_promotion(tracker: Any, request: dict[str, Any]) -> dict[str, str]:
    """Give ``request["version"]`` the alias ``production`` (``dry-run`` when ``request["dry_run"]``:
    ``production`` is left where it was) and the parent run the headline figures (idempotent: a
    version already production stays so); returns the aliases. ``production`` moves only to the
    image whose attestations the deploy verified, ``request["attestation"]``
    (:func:`shipyard.tracking.model_registry.checked_by_deploy`), or by its logged override."""
    dry_run = bool(request.get("dry_run"))
    if dry_run:
        set_alias(tracker, request["model_name"], DRY_RUN, request["version"])
        aliases = read_aliases(tracker, request["model_name"])
    else:
        aliases = promote(tracker, request["model_name"], request["version"],
                          checked_by_deploy(request.get("attestation")))
    parent = tracker.resolve_parent("", request.get("kfp_run_id", ""), request.get("experiment", ""))
    if parent:
        head = request.get("headline") or {}
        where = {"shipyard.production": DRY_RUN_NOTE, "shipyard.dry_run_version": request["version"]} if dry_run \
            else {"shipyard.production_version": request["version"]}
        tracker.log(parent, metrics={f"champion.{k}": v for k, v in head.items()},
                    tags={"shipyard.champion": str(request.get("recipe", ""))[:5000], **where})
    return aliases


def promote_production(tracking_uri: str, experiment: str, kfp_run_id: str, model_name: str, version: str,
                       recipe: str, headline_json: str = "{}", dry_run: bool = False,
                       attestation_json: str = "{}") -> dict[str, Any]:
    """``production`` -> ``version`` once its deployment is Ready; the parent run gets the
    champion's headline figures. Returns the aliases. ``attestation_json``: what the deploy checked
    (its ``attestation`` record, :func:`shipyard.gates.evidence.require_attested`): ``production`` moves
    only when it verified this version's image or is the deploy's logged override; otherwise one line
    (:func:`shipyard.tracking.model_registry.attested`). ``dry_run`` (the manifest was only rendered):
    ``production`` stays where it was; the version gets the alias ``dry-run`` (``note`` in the
    result says "dry run: production unchanged").

    When MLflow is down (one probe, or a call that fails after its retries) the deployment
    stands and the alias request is kept (a ``promote`` payload, ``tracking-pending/`` in a local
    run) for ``shipyard track replay``; the result then has ``pending`` and no aliases.
    """
    tracker = Tracker(tracking_uri)
    request = {"kind": "promote", "tracking_uri": tracking_uri, "resolved_uri": tracker.uri, "experiment": experiment,
               "kfp_run_id": kfp_run_id, "model_name": model_name, "version": str(version), "recipe": recipe,
               "headline": json.loads(headline_json or "{}"), "dry_run": bool(dry_run),
               "attestation": json.loads(attestation_json or "{}")}
    down = tracker.probe()
    if not down:
        try:
            result: dict[str, Any] = {"aliases": apply_promotion(tracker, request)}
            if dry_run:
                result["note"] = DRY_RUN_NOTE
            return result
        except UnreachableError as err:
            down = str(err)
    kept = keep(request)
    alias = DRY_RUN if dry_run else "production"
    print(f"shipyard: MLflow {tracker.uri} is unreachable ({down}): the deployment stands, but version {version} "
          f"of {model_name} is not yet {alias!r}; the request is kept in {kept or 'this log: ' + json.dumps(request)}"
          f". {replay_hint(kept)}", file=sys.stderr, flush=True)
    return {"aliases": {}, "pending": request}
