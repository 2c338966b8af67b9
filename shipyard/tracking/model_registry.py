"""MLflow model registry: one version per packaged candidate, and the aliases that say which runs.

* ``candidate``: set when a candidate is packaged and registered (:func:`register_candidate`).
* ``production``: set when its deployment is Ready (:func:`promote`); the version that held it
  before keeps the alias ``previous``.
* ``dry-run``: a champion whose deployment was only rendered (a dry run, e.g. every local run).
  ``production`` stays where it was: a dry run never served, so the next champion/challenger gate
  must not compare against it (:func:`shipyard.tracking.promotion.promote_production`).
* :func:`rollback` moves ``production`` back to the version before it (and ``previous`` one
  further back), following the history kept in the registered model's tag
  ``shipyard.production_history``.

``production`` moves only through a check of the version's attestations (an
:data:`AttestationCheck`: the trusted key's verification of the signed evidence stored with the
version's model, :func:`shipyard.gates.evidence.production_check`; after a deploy, the deploy step's
own check of the image it deployed, :func:`checked_by_deploy`), or its explicit override; the
version gets the tag ``shipyard.production_attestation`` saying which (:func:`attested`). A move
without a check is refused in one line.

A version's ``source`` is where the packaged model lives (``oci://...@sha256:...`` or
``s3://...``); its tags hold the lineage (pipeline run, KFP run, base model, recipe, digests)
and, once the promotion gate ran, ``shipyard.metric.<name>`` for each measured figure and
``shipyard.gate.*`` for the decision, so the next challenger can be compared with it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.oci.reference import parse as parse_reference
from shipyard.tracking.tracker import Tracker, to_metrics, to_tags

CANDIDATE = "candidate"
PRODUCTION = "production"
PREVIOUS = "previous"
DRY_RUN = "dry-run"
HISTORY_TAG = "shipyard.production_history"
METRIC_TAG_PREFIX = "shipyard.metric."
#: the version tag that says how its attestations were checked when ``production`` moved to it
ATTESTATION_TAG = "shipyard.production_attestation"


@dataclass
class VersionInfo:
    """What the gate and the CLI need to know about one model version."""

    name: str
    version: str
    source: str
    run_id: str
    aliases: list[str]
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def metrics(self) -> dict[str, float]:
        """The figures recorded on the version (``shipyard.metric.<name>`` tags)."""
        return to_metrics(
            {k[len(METRIC_TAG_PREFIX) :]: v for k, v in self.tags.items() if k.startswith(METRIC_TAG_PREFIX)}
        )


def _info(mv: Any) -> VersionInfo:
    return VersionInfo(
        name=mv.name,
        version=str(mv.version),
        source=mv.source or "",
        run_id=mv.run_id or "",
        aliases=list(getattr(mv, "aliases", []) or []),
        tags=dict(mv.tags or {}),
    )


def _validate_name(model_name: str) -> str:
    name = (model_name or "").strip()
    if not name or "/" in name or len(name) > 256:
        raise ShipyardError(
            "model_name", f"{model_name!r} is not a registered model name", "use a short name like 'llama-3-8b-w4a16'"
        )
    return name


def ensure_model(tracker: Tracker, model_name: str, description: str = "") -> None:
    """Create the registered model unless it exists."""
    from mlflow.exceptions import MlflowException

    name = _validate_name(model_name)
    try:
        tracker.call("read the registered model", tracker.client.get_registered_model, name)
        return
    except MlflowException as err:
        if getattr(err, "error_code", "") != "RESOURCE_DOES_NOT_EXIST":
            raise
    try:
        tracker.call(
            "create the registered model",
            tracker.client.create_registered_model,
            name,
            tags={"shipyard.managed": "true"},
            description=description or None,
        )
    except MlflowException as err:  # created concurrently
        if getattr(err, "error_code", "") != "RESOURCE_ALREADY_EXISTS":
            raise


def _registered_model(tracker: Tracker, model_name: str) -> Any:
    """The registered model called ``model_name``, or None when the store holds none."""
    from mlflow.exceptions import MlflowException

    try:
        return tracker.call("read the registered model", tracker.client.get_registered_model, model_name)
    except MlflowException as err:
        if getattr(err, "error_code", "") == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise


def aliases(tracker: Tracker, model_name: str) -> dict[str, str]:
    """``{alias: version}`` of a registered model (empty if the model does not exist)."""
    model = _registered_model(tracker, model_name)
    return {} if model is None else {alias: str(version) for alias, version in (model.aliases or {}).items()}


def model_exists(tracker: Tracker, model_name: str) -> bool:
    """Whether the store holds a registered model called ``model_name``."""
    return _registered_model(tracker, model_name) is not None


def get_version(tracker: Tracker, model_name: str, version: str) -> VersionInfo:
    """One model version, with a one-line error when it does not exist."""
    from mlflow.exceptions import MlflowException

    try:
        mv = tracker.call("read the model version", tracker.client.get_model_version, model_name, str(version))
    except MlflowException as err:
        if getattr(err, "error_code", "") in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            raise ShipyardError(
                "model_version", f"{model_name} version {version} is not in the registry", "register it first"
            ) from None
        raise
    return _info(mv)


def version_for_alias(tracker: Tracker, model_name: str, alias: str) -> VersionInfo | None:
    """The version holding ``alias``, or None."""
    version = aliases(tracker, model_name).get(alias)
    return get_version(tracker, model_name, version) if version else None


def register_candidate(
    tracker: Tracker,
    model_name: str,
    source_uri: str,
    *,
    run_id: str = "",
    tags: Mapping[str, Any] | None = None,
    description: str = "",
    alias: str = CANDIDATE,
) -> VersionInfo:
    """Register a packaged candidate as a new version and give it ``alias``.

    Idempotent for a retried step: a version with the same source and run is reused.
    """
    if "://" not in (source_uri or ""):
        raise ShipyardError(
            "source_uri",
            f"{source_uri!r} is not a location URI",
            "pass the packaged model's oci://...@sha256:... or s3://... URI",
        )
    name = _validate_name(model_name)
    ensure_model(tracker, name)
    found = None
    if run_id:
        existing = tracker.call(
            "search model versions", tracker.client.search_model_versions, f"name = '{name}' and run_id = '{run_id}'"
        )
        found = next((mv for mv in existing if mv.source == source_uri), None)
    all_tags = to_tags({"shipyard.registered_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    all_tags.update(to_tags(tags or {}))
    if found is None:
        found = tracker.call(
            "register the model version",
            tracker.client.create_model_version,
            name,
            source_uri,
            run_id=run_id or None,
            tags=all_tags,
            description=description or None,
        )
    else:
        for key, value in all_tags.items():
            tracker.call("tag the model version", tracker.client.set_model_version_tag, name, found.version, key, value)
    if alias:
        set_alias(tracker, name, alias, str(found.version))
    return get_version(tracker, name, str(found.version))


_ALIAS = re.compile(r"[A-Za-z0-9_-]{1,255}")


def check_alias(alias: str, field: str = "alias") -> str:
    """``alias`` as MLflow accepts one (it answers INVALID_PARAMETER_VALUE otherwise): letters, digits,
    '_' and '-', never 'latest' and never v<number> (both name versions); one line naming ``field``."""
    text = (alias or "").strip()
    if (not _ALIAS.fullmatch(text) or text.lower() == "latest"
            or (text.lower().startswith("v") and text[1:].isdigit())):
        raise ShipyardError(field, f"{str(alias)[:80]!r} is not a usable alias",
                            "use letters, digits, '_' and '-', e.g. 'candidate' or 'prod-eu' (MLflow reserves "
                            "v<number> and 'latest')")
    return text


#: how ``production`` may move to a version: called with the version, it returns what was checked
#: (:func:`shipyard.gates.evidence.require_attested`'s record: ``checked``, ``passed``, ``digest``, ``vsa``,
#: ``keyid``; or ``checked: false`` with ``overridden: true`` and ``why``) or raises the one-line refusal
AttestationCheck = Callable[[VersionInfo], Mapping[str, Any]]
PRODUCTION_FIX = ("move production with `shipyard alias set MODEL production VERSION` (it verifies the version's "
                  "attestations) or by a deploy that verified them")


def checked_by_deploy(record: Mapping[str, Any] | None) -> AttestationCheck:
    """The check of a deploy that verified the image it deployed already: ``record`` is the deploy's
    ``attestation`` (:func:`shipyard.gates.evidence.require_attested`'s result); :func:`attested`
    moves ``production`` only when it is about the version's own digest (or the deploy's logged override)."""
    return lambda info: dict(record or {})


def _image_of(uri: str) -> str:
    """``uri`` as :mod:`shipyard.oci.reference` writes a digest-pinned image (what a verification
    names), or "" when it is no such image (an ``s3://`` model, a tag)."""
    try:
        ref = parse_reference(uri, "source")
    except ShipyardError:
        return ""
    return str(ref) if ref.digest else ""


def attested(tracker: Tracker, info: VersionInfo, check: AttestationCheck | None) -> str:
    """Run ``check`` on the version ``production`` is to move to; return the note the version is
    tagged with (:data:`ATTESTATION_TAG`). One line (field ``production``) when there is no check,
    when its record says nothing was checked without the explicit override, or when what was
    verified is another image than the version's model (``source``)."""
    where = f"{info.name} version {info.version}"
    if check is None:
        raise ShipyardError("production", f"{where} was not moved: production moves only after the version's "
                            "attestations are checked", PRODUCTION_FIX)
    record = check(info)
    if record.get("checked"):
        want, got = _image_of(info.source), str(record.get("uri") or "")
        if not record.get("passed") or not want or got != want:
            raise ShipyardError("production", f"{where} was not moved: its model {info.source[:300]} is not the image "
                                f"whose attestations were verified ({got[:300] or 'none'})", PRODUCTION_FIX)
        vsa = record.get("vsa") or {}
        note = (f"verified: summary {vsa.get('envelope_digest', '')} {vsa.get('result', '')} of {got}, key "
                f"{str(record.get('keyid', ''))[:16]}")
    elif record.get("overridden"):
        note = f"not checked: {record.get('why', 'overridden')}"
    else:
        raise ShipyardError("production", f"{where} was not moved: its attestations were not checked "
                            f"({record.get('why') or 'no record of a check'})", PRODUCTION_FIX)
    tracker.call("tag the model version", tracker.client.set_model_version_tag, info.name, info.version,
                 ATTESTATION_TAG, note[:5000])
    return note


def set_alias(tracker: Tracker, model_name: str, alias: str, version: str,
              check: AttestationCheck | None = None) -> None:
    """Point ``alias`` at ``version`` (moving it if another version held it); ``production`` only
    through ``check`` (:func:`attested`)."""
    alias = check_alias(alias)
    info = get_version(tracker, model_name, version)
    if alias.lower() == PRODUCTION:
        attested(tracker, info, check)
    _point(tracker, model_name, alias, version)


def _point(tracker: Tracker, model_name: str, alias: str, version: str) -> None:
    tracker.call(
        "set the alias", tracker.client.set_registered_model_alias, model_name, alias, str(version)
    )


def _history(tracker: Tracker, model_name: str) -> list[str]:
    model = tracker.call("read the registered model", tracker.client.get_registered_model, model_name)
    raw = (model.tags or {}).get(HISTORY_TAG, "")
    try:
        return [str(v) for v in json.loads(raw)] if raw else []
    except ValueError:
        return []


def _set_history(tracker: Tracker, model_name: str, history: list[str]) -> None:
    tracker.call(
        "record the production history",
        tracker.client.set_registered_model_tag,
        model_name,
        HISTORY_TAG,
        json.dumps(history[-50:]),
    )


def promote(tracker: Tracker, model_name: str, version: str, check: AttestationCheck | None) -> dict[str, str]:
    """Make ``version`` production (call it once its deployment is Ready) when ``check`` passes it
    (:func:`attested`; a version already production stays so, unchecked again).

    The version that was production becomes ``previous``. Returns the aliases afterwards.
    """
    name = _validate_name(model_name)
    info = get_version(tracker, name, version)
    current = aliases(tracker, name)
    old = current.get(PRODUCTION)
    history = _history(tracker, name)
    if old == str(version):
        return current
    attested(tracker, info, check)
    if old:
        _point(tracker, name, PREVIOUS, old)
        if not history or history[-1] != old:
            history.append(old)
    _point(tracker, name, PRODUCTION, str(version))
    history.append(str(version))
    _set_history(tracker, name, history)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    tracker.call("tag the model version", tracker.client.set_model_version_tag, name, str(version),
                 "shipyard.promoted_at", stamp)
    return aliases(tracker, name)


def rollback(tracker: Tracker, model_name: str, reason: str = "", check: AttestationCheck | None = None) -> dict[str, str]:
    """Move ``production`` back to the version before it when ``check`` passes that version
    (:func:`attested`); ``previous`` moves one further back.

    Fails with one line when there is nothing to roll back to. Returns the aliases afterwards.
    """
    name = _validate_name(model_name)
    if not model_exists(tracker, name):
        raise ShipyardError("MODEL", f"{tracker.uri} holds no registered model {name!r}",
                            "check the name (the pipelines' registered_model_name parameter)")
    current = aliases(tracker, name)
    bad = current.get(PRODUCTION)
    history = _history(tracker, name)
    if bad and (not history or history[-1] != bad):
        history.append(bad)
    if not bad or len(history) < 2:
        raise ShipyardError(
            "production", f"{name} has no earlier production version to roll back to", "deploy a known-good version"
        )
    history.pop()
    target = history[-1]
    attested(tracker, get_version(tracker, name, target), check)
    _point(tracker, name, PRODUCTION, target)
    if len(history) >= 2:
        _point(tracker, name, PREVIOUS, history[-2])
    else:
        tracker.call("remove the alias", tracker.client.delete_registered_model_alias, name, PREVIOUS)
    _set_history(tracker, name, history)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    tracker.call("tag the model version", tracker.client.set_model_version_tag, name, bad,
                 "shipyard.rolled_back_at", stamp)
    if reason:
        tracker.call("tag the model version", tracker.client.set_model_version_tag, name, bad,
                     "shipyard.rollback_reason", reason[:5000])
    return aliases(tracker, name)


def record_metrics(tracker: Tracker, model_name: str, version: str, metrics: Mapping[str, Any]) -> int:
    """Store measured figures on the version (``shipyard.metric.<name>`` tags); returns how many."""
    clean = to_metrics(metrics)
    for key, value in clean.items():
        tracker.call(
            "tag the model version",
            tracker.client.set_model_version_tag,
            model_name,
            str(version),
            f"{METRIC_TAG_PREFIX}{key}",
            repr(value),
        )
    return len(clean)


def tag_version(tracker: Tracker, model_name: str, version: str, tags: Mapping[str, Any]) -> None:
    """Set tags on a version."""
    for key, value in to_tags(tags).items():
        tracker.call("tag the model version", tracker.client.set_model_version_tag, model_name, str(version), key, value)
