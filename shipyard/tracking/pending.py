"""Tracking payloads kept while MLflow was down, and their replay (``shipyard track replay``).

A local run keeps what it could not log in ``<work dir>/tracking-pending/``, one JSON file per
payload, each with its ``kind``:

* ``step``: a step's params, metrics, tags, artifact list, status and times (a
  :class:`~shipyard.tracking.steprun.StepRun` payload);
* ``register``: the champion's registration request (model name, source OCI URI, digest,
  version tags and description, the figures to record, the alias to set);
* ``promote``: ``production`` for the deployed champion's version (the deployment stood while
  MLflow was down), with the headline figures for the parent run;
* ``close``: the pipeline's final state for its parent run (the exit handler's).

A local run that tracks into a file store keeps every step's payload here by design
(:func:`shipyard.tracking.steprun.at_end_of_run`): the runner logs them all at the end
in one process instead of importing MLflow in every step.

:func:`replay` applies them once the server answers, idempotently: a step run already
terminated is left alone, params and metrics already logged are not logged again, a version
with the same source and pipeline run is reused. A file is removed once applied, so a second
replay finds nothing to do. It then closes every parent run of the work dir still RUNNING
whose run has ended (``run-summary.json``), with that run's final state.

:func:`after_local_run` is what ``shipyard run --local`` calls at its end: replay when payloads
are pending and the server answers; otherwise say what is pending and the exact replay command
on the console and in ``run-summary.json`` (``tracking_pending``).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError, UnreachableError
from shipyard.core.files import atomic_write_text
from shipyard.tracking import model_registry as registry
from shipyard.tracking.outbox import PENDING_DIR, corrupt, describe, load, replay_command
from shipyard.tracking.promotion import apply_promotion
from shipyard.tracking.steprun import apply_payload
from shipyard.tracking.tracker import Tracker, parent_caches

SUMMARY = "run-summary.json"
#: run-summary.json status -> MLflow run status
FINAL_STATUS = {"SUCCESS": "FINISHED", "FAILURE": "FAILED", "INTERRUPTED": "KILLED"}


def _tracker(payload: dict[str, Any], work: Path) -> Any:
    return Tracker(payload.get("resolved_uri") or payload.get("tracking_uri", ""), work_dir=work)


def _parent(tracker: Any, payload: dict[str, Any]) -> str:
    kfp_run_id = payload.get("kfp_run_id", "")
    if not kfp_run_id or kfp_run_id.startswith("{{"):
        return ""
    return str(tracker.parent_record(kfp_run_id, payload.get("experiment", ""))["run_id"])


def _apply_register(payload: dict[str, Any], work: Path) -> str:
    return _register(_tracker(payload, work), payload)


def _register(tracker: Any, payload: dict[str, Any]) -> str:
    parent = _parent(tracker, payload)
    name, source = payload["model_name"], payload["source_uri"]
    info = registry.register_candidate(tracker, name, source, run_id=parent, tags=payload.get("tags") or {},
                                       description=payload.get("description", ""),
                                       alias=payload.get("alias", registry.CANDIDATE))
    registry.record_metrics(tracker, name, info.version, payload.get("metrics") or {})
    registry.tag_version(tracker, name, info.version, payload.get("version_tags") or {})
    for alias in payload.get("aliases") or []:
        registry.set_alias(tracker, name, alias, info.version)
    if parent:
        tracker.log(parent, tags={"shipyard.registered_model": name, "shipyard.registered_version": info.version})
    aliases = sorted(registry.aliases(tracker, name).items())
    return (f"registered {name} version {info.version} ({source})"
            + (f", aliases {', '.join(f'{a}={v}' for a, v in aliases if v == info.version)}" if aliases else ""))


def _close(tracker: Any, run_id: str, status: str, tags: dict[str, str] | None = None) -> bool:
    run = tracker.call("read the pipeline run", tracker.client.get_run, run_id)
    if run.info.status != "RUNNING":
        return False
    if tags:
        tracker.log(run_id, tags=tags)
    tracker.finish(run_id, status)
    return True


def _apply_close(payload: dict[str, Any], work: Path) -> str:
    tracker = _tracker(payload, work)
    run_id = _parent(tracker, payload)
    status = payload.get("status") or "FAILED"
    tags = {"shipyard.kfp_state": payload.get("state", "")}
    if payload.get("error"):
        tags["shipyard.kfp_error"] = str(payload["error"])[:5000]
    if _close(tracker, run_id, status, tags):
        return f"closed pipeline run {run_id} {status}"
    return f"pipeline run {run_id} was already closed"


def _apply_promote(payload: dict[str, Any], work: Path) -> str:
    aliases = apply_promotion(_tracker(payload, work), payload)
    alias = "dry-run (production unchanged)" if payload.get("dry_run") else "production"
    return f"{payload['model_name']} version {payload['version']} is {alias} (aliases {json.dumps(aliases)})"


def apply(payload: dict[str, Any], work: Path) -> str:
    """Apply one payload (idempotent); returns the line to print."""
    kind = payload.get("kind", "step")
    if kind == "register":
        return _apply_register(payload, work)
    if kind == "promote":
        return _apply_promote(payload, work)
    if kind == "close":
        return _apply_close(payload, work)
    run_id = apply_payload(payload, replay=True, work_dir=work)
    return f"logged {describe(payload)} {payload.get('status', '')} as run {run_id}"


def _final_states(work: Path) -> dict[str, str]:
    """Parent run id -> MLflow status of the local run that ended with it (run-summary.json)."""
    try:
        summary = json.loads((work / SUMMARY).read_text())
    except (OSError, ValueError):
        return {}
    run_id, status = str(summary.get("mlflow_run") or ""), FINAL_STATUS.get(str(summary.get("status")))
    return {run_id: status} if run_id and status else {}


def close_parents(work: Path) -> list[str]:
    """Close the parent runs of ``work`` left RUNNING whose local run has ended; returns the lines."""
    lines = []
    states = _final_states(work)
    for record in parent_caches(work):
        status = states.get(str(record["run_id"]))
        if not status:
            continue  # its run has not ended (or another work dir's summary): not ours to close
        tracker = Tracker(record["tracking_uri"], work_dir=work)
        if tracker.probe():
            continue
        if _close(tracker, str(record["run_id"]), status, {"shipyard.closed_by": "replay"}):
            lines.append(f"closed pipeline run {record['run_id']} {status} (left RUNNING)")
    return lines


def replay(work_dir: str | Path, echo: Callable[[str], None] = print) -> dict[str, list[str]]:
    """Apply every pending payload of ``work_dir`` and close parent runs left RUNNING.

    Returns ``{"applied": lines, "pending": names still pending, "errors": lines}``; each applied
    payload is echoed as one line. Raises :class:`~shipyard.core.errors.UnreachableError` when the
    server still does not answer (nothing is changed then).
    """
    work = Path(work_dir).resolve()
    if not work.is_dir():
        raise ShipyardError("WORK_DIR", f"{work} is not a folder", "give the --work-dir of a local run")
    logging.getLogger("mlflow").setLevel(logging.WARNING)  # one line per payload, not MLflow's INFO chatter
    items = load(work)
    for uri in sorted({p.get("resolved_uri") or p.get("tracking_uri", "") for _, p in items}):
        tracker = Tracker(uri, work_dir=work)
        if tracker.probe():
            raise UnreachableError("tracking_uri", f"the MLflow server {tracker.uri} still does not answer "
                                   f"({tracker.down}); {len(items)} payload(s) stay pending in {work / PENDING_DIR}",
                                   f"start the server, then run `{replay_command(work)}` again")
    applied, errors = [], []
    # steps first, then registrations, then closing: a run's records land before its final state
    order = {"step": 0, "register": 1, "promote": 2, "close": 3}
    for path, payload in sorted(items, key=lambda item: order.get(item[1].get("kind", "step"), 0)):
        try:
            line = apply(payload, work)
        except Exception as err:  # noqa: BLE001 - one payload's problem is reported, the others still go
            text = str(err) if isinstance(err, ShipyardError) else \
                f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:300]}"
            errors.append(f"{describe(payload)} ({path.name}): {text}")
            echo(f"not applied: {describe(payload)} ({path.name}): {text}")
            if isinstance(err, UnreachableError):
                break
            continue
        path.unlink(missing_ok=True)
        applied.append(line)
        echo(line)
    for line in close_parents(work):
        applied.append(line)
        echo(line)
    for path, why in corrupt(work):  # kept: they may be repaired by hand; never "nothing pending"
        errors.append(f"corrupt payload ({path.name}): {why}; kept in {path.parent}")
        echo(f"not applied: corrupt payload ({path.name}): {why}; kept in {path.parent} (fix it or remove it)")
    folder = work / PENDING_DIR
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
    return {"applied": applied, "pending": [p.name for p, _ in load(work)], "errors": errors}


def after_local_run(work_dir: str | Path) -> dict[str, Any]:
    """End of ``shipyard run --local``: replay pending payloads when the server answers, else
    say what is pending and the replay command (console and ``run-summary.json``).

    Never fails the run: whatever goes wrong leaves the payloads pending and says so.
    """
    try:
        return _after_local_run(work_dir)
    except Exception as err:  # noqa: BLE001 - the run's own outcome stands; the payloads stay kept
        first = (str(err).splitlines() or [""])[0][:300]
        print(f"shipyard: warning: tracking records kept in {Path(work_dir).resolve() / PENDING_DIR} were not "
              f"logged ({type(err).__name__}: {first}); retry with: {replay_command(work_dir)}",
              file=sys.stderr, flush=True)
        return {"error": f"{type(err).__name__}: {first}"}


def _after_local_run(work_dir: str | Path) -> dict[str, Any]:
    work = Path(work_dir).resolve()
    items = load(work)
    if not items:
        return {}
    applied: list[str] = []
    uris = {p.get("resolved_uri") or p.get("tracking_uri", "") for _, p in items}
    outage = sum(1 for _, p in items if not p.get("at_end_of_run"))
    if all(not Tracker(uri, work_dir=work).probe() for uri in uris):
        try:
            applied = replay(work, echo=lambda line: None)["applied"]
        except ShipyardError as err:
            print(f"shipyard: warning: tracking replay stopped: {err}", file=sys.stderr, flush=True)
        if applied:
            print(f"shipyard: MLflow: {len(applied)} record(s) logged into {', '.join(sorted(uris))} at the end of "
                  f"the run" + (f" ({outage} kept while it was down)" if outage else ""), file=sys.stderr, flush=True)
    left = load(work)
    note: dict[str, Any] = {"replayed": applied, "pending": [describe(p) for _, p in left],
                            "files": [str(p) for p, _ in left], "replay": replay_command(work) if left else ""}
    if left:
        print(f"shipyard: MLflow ({', '.join(sorted(uris))}) did not answer: {len(left)} tracking payload(s) pending "
              f"({'; '.join(note['pending'])}) in {work / PENDING_DIR}; once it is back: {note['replay']}",
              file=sys.stderr, flush=True)
    summary_path = work / SUMMARY
    try:
        summary = json.loads(summary_path.read_text())
        summary["tracking_pending"] = note
        atomic_write_text(summary_path, json.dumps(summary, indent=2, default=str))
    except (OSError, ValueError):
        pass
    return note
