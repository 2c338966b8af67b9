"""The track step's logic: the pipeline's run tree in MLflow and the registry aliases.

Everything here takes plain paths and JSON-able values, so the KFP wrappers in
``component.py`` stay thin and the functions can be called from tests and scripts.
Artifacts from other steps arrive as generic files or folders:

* a KFP ``Metrics`` artifact: its metadata (``{name: value}``), or a JSON file of that shape;
* the evaluate step's folder (``summary.json`` with per-task scores and ``higher_is_better``,
  ``lm_eval_results.json``): scores become ``<task>/<metric>`` figures;
* any other file or folder (reports, recipe.yaml, guidellm JSON, rendered manifests): logged
  as artifacts of the step's run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError, UnreachableError
from shipyard.core.files import atomic_write_text
from shipyard.core.jsonargs import json_object
from shipyard.tracking import model_registry as registry
from shipyard.tracking.outbox import keep, replay_hint
from shipyard.tracking.tracker import Tracker, resolve_tracking_uri, to_metrics

PAYLOAD = "tracking_payload.json"


def parse_json_arg(name: str, text: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """A JSON-object argument (empty = ``{}``), with a one-line error when it is not one."""
    return json_object(text, name, '{"key": "value"}')


def _lm_eval_figures(raw: Mapping[str, Any]) -> tuple[dict[str, float], set[str]]:
    figures: dict[str, float] = {}
    lower: set[str] = set()
    hib_all = raw.get("higher_is_better") or {}
    for task, res in (raw.get("results") or {}).items():
        for key, value in (res or {}).items():
            if "," not in key or "_stderr," in key:
                continue
            metric, filt = key.split(",", 1)
            name = f"{task}/{metric}" if filt == "none" else f"{task}/{key}"
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                figures[name] = float(value)
                if not (hib_all.get(task) or {}).get(metric, True):
                    lower.add(name)
    return figures, lower


def read_figures(path: str | os.PathLike[str] | None, metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Numeric figures of an upstream artifact, and which of them are lower-is-better.

    Returns ``{"metrics": {...}, "lower_better": [...]}``.
    """
    figures: dict[str, float] = to_metrics(
        {k: v for k, v in (metadata or {}).items() if k not in ("display_name", "uri")}
    )
    lower: set[str] = set()
    candidates: list[Path] = []
    if path:
        p = Path(path)
        if p.is_file():
            candidates = [p]
        elif p.is_dir():
            candidates = [p / n for n in ("summary.json", "lm_eval_results.json", "metrics.json") if (p / n).is_file()]
    for file in candidates:
        try:
            data = json.loads(file.read_text())
        except (ValueError, UnicodeDecodeError):
            continue
        if not isinstance(data, dict):
            continue
        if "scores" in data and isinstance(data["scores"], dict):  # shipyard evaluate summary.json
            for task, metrics in data["scores"].items():
                for key, score in (metrics or {}).items():
                    if isinstance(score, dict) and "value" in score:
                        name = f"{task}/{key.replace(',none', '')}"
                        figures.setdefault(name, float(score["value"]))
                        if score.get("higher_is_better") is False:
                            lower.add(name)
            break
        if "results" in data:  # raw lm-eval output
            lm, lm_lower = _lm_eval_figures(data)
            for k, v in lm.items():
                figures.setdefault(k, v)
            lower |= lm_lower
            break
        for k, v in to_metrics(data).items():  # a Metrics-shaped JSON file
            figures.setdefault(k, v)
    return {"metrics": figures, "lower_better": sorted(lower)}


def start_tracking(
    tracking_uri: str, experiment: str, pipeline_name: str, kfp_run_id: str = "", params_json: str = "",
    tags_json: str = "",
) -> dict[str, str]:
    """Open the pipeline run's parent run. Returns its id, the resolved tracking URI and its URL."""
    tracker = Tracker(tracking_uri)
    run_id = tracker.start_pipeline_run(
        experiment or "shipyard",
        pipeline_name,
        kfp_run_id=kfp_run_id,
        params=parse_json_arg("params_json", params_json),
        tags=parse_json_arg("tags_json", tags_json),
    )
    return {"parent_run_id": run_id, "tracking_uri": tracker.uri, "run_url": tracker.run_url(run_id)}


def track_step(
    tracking_uri: str,
    parent_run_id: str,
    step: str,
    out_dir: str,
    params_json: str = "",
    tags_json: str = "",
    metrics: Mapping[str, Any] | None = None,
    files: Mapping[str, str] | None = None,
    status: str = "FINISHED",
    kfp_run_id: str = "",
    experiment: str = "",
) -> dict[str, Any]:
    """Log one pipeline step as a nested run: params, figures, tags and its files.

    ``files`` maps an artifact folder name to a local file/folder (an upstream artifact's
    path); figures found in them (evaluate summary, lm-eval JSON, Metrics JSON) join
    ``metrics``. What is about to be logged is first written to ``out_dir/tracking_payload.json``
    so it survives an unreachable server.
    """
    if not parent_run_id and kfp_run_id:
        parent_run_id = Tracker(tracking_uri).resolve_parent("", kfp_run_id, experiment)
    if not parent_run_id:
        raise ShipyardError("parent_run_id", "is empty", "wire start_tracking's parent_run_id (or kfp_run_id) into this step")
    params = parse_json_arg("params_json", params_json)
    tags = parse_json_arg("tags_json", tags_json)
    figures = to_metrics(metrics or {})
    artifacts: dict[str, str] = {}
    for name, local in (files or {}).items():
        if not local or not Path(local).exists():
            continue
        artifacts[f"{step}/{Path(local).name}" if Path(local).is_file() else f"{step}/{name}"] = str(local)
        for k, v in read_figures(local)["metrics"].items():
            figures.setdefault(k, v)
    payload = {
        "tracking_uri": tracking_uri,
        "parent_run_id": parent_run_id,
        "step": step,
        "params": params,
        "metrics": figures,
        "tags": tags,
        "artifacts": artifacts,
        "status": status,
    }
    atomic_write_text(Path(out_dir) / PAYLOAD, json.dumps(payload, indent=2, sort_keys=True))
    tracker = Tracker(tracking_uri)
    run_id, counts = tracker.log_step(
        parent_run_id, step, params=params, metrics=figures, tags=tags, artifacts=artifacts, status=status
    )
    return {"run_id": run_id, **counts}


def finish_tracking(tracking_uri: str, parent_run_id: str, status: str = "FINISHED", tags_json: str = "") -> str:
    """Close the pipeline's parent run with a status and final tags; returns the status."""
    status = status.upper()
    if status not in ("FINISHED", "FAILED", "KILLED"):
        raise ShipyardError("status", f"{status!r} is not FINISHED, FAILED or KILLED")
    tracker = Tracker(tracking_uri)
    tracker.log(parent_run_id, tags=parse_json_arg("tags_json", tags_json))
    tracker.finish(parent_run_id, status)
    return status


def close_pipeline_run(tracking_uri: str, experiment: str, kfp_run_id: str, state: str, error: str = "") -> str:
    """Close the parent run of KFP run ``kfp_run_id`` (found by its tag) from the pipeline's exit
    handler: FINISHED when the pipeline succeeded, FAILED otherwise; returns the status.

    When MLflow does not answer (one quick probe) the final state is kept as a ``close`` payload
    (``tracking-pending/`` in a local run) for ``shipyard track replay``, and ``PENDING`` is
    returned: the exit handler does not spend its retries on a server seen down.
    """
    status = "FINISHED" if state.upper() in ("SUCCEEDED", "SUCCESS", "FINISHED") else "FAILED"
    tracker = Tracker(tracking_uri)
    down = tracker.probe()
    if down:
        kept = keep({"kind": "close", "tracking_uri": tracking_uri, "resolved_uri": tracker.uri,
                     "experiment": experiment, "kfp_run_id": kfp_run_id, "state": state, "status": status,
                     "error": error[:5000]})
        print(f"shipyard: MLflow {tracker.uri} does not answer ({down}): the pipeline run stays RUNNING until "
              f"its final state {status} is replayed; kept in {kept or 'this log'}. {replay_hint(kept)}", flush=True)
        return "PENDING"
    run_id = tracker.resolve_parent("", kfp_run_id, experiment)
    if not run_id:
        raise ShipyardError("kfp_run_id", f"{kfp_run_id!r} is not a KFP run id", "pass dsl.PIPELINE_JOB_ID_PLACEHOLDER")
    tags = {"shipyard.kfp_state": state}
    if error:
        tags["shipyard.kfp_error"] = error[:5000]
    tracker.log(run_id, tags=tags)
    tracker.finish(run_id, status)
    return status


def register_model(
    tracking_uri: str, model_name: str, source_uri: str, parent_run_id: str = "", tags_json: str = "",
    alias: str = registry.CANDIDATE, kfp_run_id: str = "", experiment: str = "",
) -> dict[str, Any]:
    """Register a packaged candidate (alias ``candidate``); tags: lineage from the parent run."""
    tracker = Tracker(tracking_uri)
    tracker.check_reachable()
    parent_run_id = tracker.resolve_parent(parent_run_id, kfp_run_id, experiment)
    tags = parse_json_arg("tags_json", tags_json)
    if parent_run_id:
        tags.setdefault("shipyard.pipeline_run_id", parent_run_id)
        run = tracker.call("read the pipeline run", tracker.client.get_run, parent_run_id)
        for key in ("shipyard.kfp_run_id", "shipyard.pipeline"):
            if key in run.data.tags:
                tags.setdefault(key, run.data.tags[key])
        tracker.log(parent_run_id, tags={"shipyard.registered_model": model_name})
    info = registry.register_candidate(tracker, model_name, source_uri, run_id=parent_run_id, tags=tags, alias=alias)
    if parent_run_id:
        tracker.log(parent_run_id, tags={"shipyard.registered_version": info.version})
    return {"version": info.version, "aliases": info.aliases, "source": info.source}


def promote_alias(tracking_uri: str, model_name: str, version: str,
                  check: registry.AttestationCheck | None) -> dict[str, str]:
    """``production`` -> version (deployment Ready) when ``check`` passes its attestations
    (:func:`shipyard.tracking.model_registry.attested`); the old production becomes ``previous``."""
    return registry.promote(Tracker(tracking_uri), model_name, version, check)


def answering_tracker(tracking_uri: str) -> Tracker:
    """The tracker of a command a person waits on (``shipyard alias``): an MLflow server that does not
    answer one probe of ``/health`` within 3 s (a dead or silent host) is one line at once, exit 3, and
    each call is tried twice; a step's tracker retries 5 times with backoff (40 s against a dead host),
    because a pipeline rides out an MLflow restart."""
    tracker = Tracker(tracking_uri, attempts=2, backoff_s=0.5)
    down = tracker.probe()
    if down:
        raise UnreachableError("tracking_uri", f"the MLflow server {tracker.uri} does not answer ({down})",
                               "start the MLflow server, or pass a reachable --tracking-uri (or MLFLOW_TRACKING_URI)")
    return tracker


def rollback_alias(tracking_uri: str, model_name: str, reason: str = "",
                   check: registry.AttestationCheck | None = None) -> dict[str, str]:
    """Move ``production`` back to the version before it, when ``check`` passes that version's attestations."""
    return registry.rollback(answering_tracker(tracking_uri), model_name, reason, check)


def set_alias(tracking_uri: str, model_name: str, alias: str, version: str,
              check: registry.AttestationCheck | None = None) -> dict[str, str]:
    """Point any alias at a version (``production`` only when ``check`` passes its attestations);
    returns all aliases."""
    tracker = answering_tracker(tracking_uri)
    registry.set_alias(tracker, model_name, alias, version, check)
    return registry.aliases(tracker, model_name)


def get_aliases(tracking_uri: str, model_name: str) -> dict[str, str]:
    """All aliases of a registered model, for a person asking (``shipyard alias show``): a read never
    creates a store (a file store that is not there is an error naming it), and a model the store
    does not hold is an error, not "no aliases"."""
    from urllib.parse import unquote, urlparse

    uri = resolve_tracking_uri(tracking_uri)
    if uri.startswith("file:") and not Path(unquote(urlparse(uri).path)).is_dir():
        raise ShipyardError("--tracking-uri", f"there is no MLflow store at {uri}",
                            "pass --tracking-uri (an MLflow server, or a run's <work dir>/mlruns) or set "
                            "MLFLOW_TRACKING_URI")
    tracker = answering_tracker(uri)
    if not registry.model_exists(tracker, model_name):
        raise ShipyardError("MODEL", f"{tracker.uri} holds no registered model {model_name!r}",
                            "check the name (the pipelines' registered_model_name parameter)")
    return registry.aliases(tracker, model_name)
