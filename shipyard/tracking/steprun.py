"""Tracking from inside a step: each step logs its own parameters, metrics and reports.

:class:`StepRun` wraps a step's work. When the step ends it logs what the step recorded:

* into the MLflow run KFP created for the task, when ``MLFLOW_RUN_ID`` is set (KFP's MLflow
  integration passes it with ``MLFLOW_TRACKING_URI``); KFP closes that run itself;
* otherwise into a nested run of the pipeline's parent run (found by its KFP run id tag),
  keyed by step and candidate (``shipyard.step``, ``shipyard.candidate``), with the step's
  real start and end time and status.

A step can also log files into the pipeline's parent run (``parent_artifacts``: the select step's
decision record and candidates report under ``decision/``), on the same paths.

Artifacts keep their file extensions (``report.md``, ``report.html``) so MLflow previews
them; a Markdown report with a wide table, which MLflow's Markdown preview cuts off, is also
logged as its HTML rendering (``report.html``, cells wrap). Only reports and small JSON files are
logged, never model weights.

Tracking never fails the step's own work: when MLflow cannot be reached (or the image has no
MLflow client) the payload is returned by :meth:`StepRun.payload` so the step can keep it in
its outputs (artifact metadata ``shipyard.tracking.tracker``), a local run also keeps it in
``<work dir>/tracking-pending/``, and a later base step (:func:`apply_pending`) or
``shipyard track replay WORK_DIR`` (:mod:`shipyard.tracking.pending`) applies it.

Cost per step (``import mlflow`` alone is 1.5-4 s on a loaded 2-core machine): a step never
imports MLflow on its usual paths. An HTTP(S) server is logged through its REST API
(:class:`shipyard.tracking.tracker.RestLogger`: create, one log-batch, one PUT per report, update); a
local run's file store payload is kept for the runner, which logs every step at the end in one
process (:func:`at_end_of_run`); a server seen down costs one ``/health`` probe. A local run's
steps read the parent run from the pre-flight's cache file instead of searching for it. Other
cases (auth plugins, non-proxied artifacts, the replay) use the MLflow client with one
``log_batch`` and one ``log_artifacts`` per step.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from types import TracebackType
from typing import Any

from shipyard.compression.recipes import recipe_label
from shipyard.core.env import env_bool
from shipyard.core.errors import ShipyardError
from shipyard.core.report import has_wide_table, markdown_html
from shipyard.tracking.outbox import keep, replay_hint
from shipyard.tracking.tracker import (
    CACHE_DIR,
    TAG_KFP_RUN,
    TAG_KIND,
    TAG_PARENT,
    TAG_PIPELINE,
    TAG_STEP,
    RestLogger,
    Tracker,
    local_work_dir,
    read_parent_cache,
    resolve_tracking_uri,
    to_metrics,
    to_params,
    to_tags,
    tree_bytes,
)

TAG_CANDIDATE = "shipyard.candidate"
PENDING_KEY = "shipyard.tracking"
ENV_AT_END = "SHIPYARD_TRACK_FILE_STORE_AT_END"
_MAX_ARTIFACT_BYTES = 50 * 1024 * 1024  # reports and JSON, never weights
_MAX_RENDERED_BYTES = 2 * 1024 * 1024  # a Markdown report rendered to HTML for MLflow's viewer


class StepRun:
    """Collects one step's params, metrics, tags and report files and logs them at the end."""

    def __init__(self, step: str, candidate: str = "", *, tracking_uri: str = "", experiment: str = "",
                 kfp_run_id: str = "", params: dict[str, Any] | None = None) -> None:
        self.data: dict[str, Any] = {
            "step": step, "candidate": recipe_label(candidate) if candidate else "", "tracking_uri": tracking_uri, "experiment": experiment,
            "kfp_run_id": kfp_run_id, "params": dict(params or {}), "metrics": {}, "tags": {}, "artifacts": {},
            "parent_artifacts": {},
            "started_ms": int(time.time() * 1000), "ended_ms": None, "status": "RUNNING",
        }
        self.run_id: str | None = None
        self.error: str | None = None

    def log(self, *, params: dict[str, Any] | None = None, metrics: dict[str, Any] | None = None,
            tags: dict[str, Any] | None = None, artifacts: dict[str, str] | None = None,
            parent_artifacts: dict[str, str] | None = None) -> None:
        """Add params, metrics, tags; ``artifacts`` maps a file name with extension (``report.md``)
        or a folder name to a local path; ``parent_artifacts`` likewise, for the pipeline's parent
        run (``decision/decision-record.json``): logged there with the step's own."""
        self.data["params"].update(params or {})
        self.data["metrics"].update({k: v for k, v in (metrics or {}).items() if isinstance(v, int | float)})
        self.data["tags"].update(tags or {})
        self.data["artifacts"].update({k: str(v) for k, v in (artifacts or {}).items() if v})
        self.data["parent_artifacts"].update({k: str(v) for k, v in (parent_artifacts or {}).items() if v})

    def __enter__(self) -> StepRun:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is not None and issubclass(kind, KeyboardInterrupt):  # Ctrl-C or SIGTERM (a cancelled run)
            self.finish("KILLED")
            return
        self.finish("FAILED" if kind is not None and not issubclass(kind, SystemExit) or
                    (kind is SystemExit and getattr(exc, "code", 0) not in (0, None)) else "FINISHED")

    def finish(self, status: str = "FINISHED") -> str | None:
        """Log everything now (once); returns the MLflow run id, or None when it was kept as a payload.

        A server seen down costs one quick probe (no MLflow import, no retries); the payload is
        then kept: in the step's output metadata by the wrapper (:meth:`payload`) and, in a local
        run, in ``<work dir>/tracking-pending/`` for ``shipyard track replay``. A local run's file
        store is written by the runner at the end of the run (:func:`at_end_of_run`).
        """
        if self.data["ended_ms"] is not None:
            return self.run_id
        self.data["ended_ms"] = int(time.time() * 1000)
        self.data["status"] = status
        if at_end_of_run(self.data):  # a local run's file store: the runner logs it, with the others
            return None
        try:
            self.run_id = apply_payload(self.data, quick=True)
        except ImportError:
            self.error = "no MLflow client in this image; the payload is kept for the next step"
        except ShipyardError as err:
            self.error = str(err)
        except Exception as err:  # noqa: BLE001 - tracking must not fail the step's work
            self.error = f"{type(err).__name__}: {err}".splitlines()[0]
        if self.error:
            kept = keep(self.data) if not self.error.startswith("no MLflow client") else None
            where = f"kept in {kept}; {replay_hint(kept)}" if kept else "kept in the step's outputs"
            print(f"shipyard: tracking of {self.data['step']} deferred: {self.error}; {where}",
                  file=sys.stderr, flush=True)
        return self.run_id

    def payload(self) -> dict[str, Any] | None:
        """What could not be logged yet (None when it was)."""
        return None if self.run_id else dict(self.data)

    def keep_in(self, artifact: Any) -> None:
        """Hand on what could not be logged yet: into ``artifact``'s metadata under
        :data:`PENDING_KEY`, for the candidate-gates step to log (:func:`apply_pending`). The one
        way a wrapper keeps a payload; call it after the ``with StepRun(...)`` block."""
        payload = self.payload()
        if payload:
            artifact.metadata[PENDING_KEY] = payload


def at_end_of_run(data: dict[str, Any], *, handed_on: bool = False) -> bool:
    """In a local run tracking into a file store, keep the payload for the runner and say True.

    ``import mlflow`` costs a step process 1.5-4 s on a loaded 2-core machine, ~100 times the file
    store calls themselves; ``shipyard run --local`` applies every kept payload at its end in one
    process (:func:`shipyard.tracking.pending.after_local_run`: one import per run, not
    one per step), with each step's own start and end time and status. A server is logged live
    by the step itself (:class:`shipyard.tracking.tracker.RestLogger`: no import). Off with
    ``SHIPYARD_TRACK_FILE_STORE_AT_END=0``. ``handed_on``: the payload came through another
    step's metadata (the step's own kept copy, if any, wins).
    """
    kfp_run_id = data.get("kfp_run_id", "")
    if (not env_bool(ENV_AT_END, True) or os.environ.get("MLFLOW_RUN_ID") or not kfp_run_id
            or kfp_run_id.startswith("{{")):
        return False
    work = local_work_dir()
    if work is None:
        return False
    try:
        uri = resolve_tracking_uri(data.get("resolved_uri") or data.get("tracking_uri", ""), work)
    except ShipyardError:
        return False
    if not uri.startswith("file:"):
        return False
    data["resolved_uri"] = uri
    data["at_end_of_run"] = True
    return keep(_normalize(data), work, overwrite=not handed_on) is not None


def _normalize(data: dict[str, Any]) -> dict[str, Any]:
    """Times back to integer milliseconds: a payload that crossed KFP's artifact metadata (a
    protobuf Struct) comes back with every number a float, which MLflow's stores refuse."""
    for key in ("started_ms", "ended_ms"):
        if isinstance(data.get(key), float):
            data[key] = int(data[key])
    return data


def _run_name(step: str, candidate: str) -> str:
    return f"{step} [{candidate}]" if candidate else step


def _stage(artifacts: dict[str, str], root: Path) -> int:
    """Copy every artifact under ``root`` at its destination name (with its extension); skips
    anything too large (reports and JSON only, never weights). A Markdown report with a table of
    more than a few columns, which MLflow's Markdown preview cuts off, also gets its HTML rendering
    beside it (wrapping cells, one block per row in a narrow frame) unless the step logs an HTML
    file of that name itself (:func:`_add_html_renderings`). Returns how many were staged."""
    count = 0
    reports: list[Path] = []
    for dest, local in artifacts.items():
        path = Path(local)
        target = (root / dest.strip("/")).resolve()
        if not path.exists() or root not in target.parents:
            continue
        if path.is_file():
            if path.stat().st_size > _MAX_ARTIFACT_BYTES:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            count += 1
            if target.suffix.lower() == ".md":
                reports.append(target)
        elif path.is_dir():
            size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            if size and size <= _MAX_ARTIFACT_BYTES:
                shutil.copytree(path, target, dirs_exist_ok=True)
                count += 1
    return count + _add_html_renderings(reports)


def _add_html_renderings(reports: list[Path]) -> int:
    """Write ``<name>.html`` beside each staged Markdown report that holds a wide table
    (:func:`shipyard.core.report.has_wide_table`) and has no staged HTML of that name;
    returns how many were written."""
    count = 0
    for report in reports:
        page = report.with_suffix(".html")
        if page.exists() or report.stat().st_size > _MAX_RENDERED_BYTES:
            continue
        text = report.read_text(encoding="utf-8", errors="replace")
        if has_wide_table(text):
            page.write_text(markdown_html(text), encoding="utf-8")
            count += 1
    return count


def _upload(tracker: Any, run_id: str, artifacts: dict[str, str], rest: Any = None, artifact_uri: str = "") -> int:
    """Upload every artifact in one go: the REST fast path's PUTs when the server proxies the
    run's artifacts, else one ``log_artifacts`` call of the MLflow client."""
    with tempfile.TemporaryDirectory(prefix="shipyard-track-") as tmp:
        root = Path(tmp).resolve()
        count = _stage(artifacts, root)
        if count and rest is not None and rest.can_upload(artifact_uri):
            rest.upload(artifact_uri, root)
        elif count:
            tracker.call("upload artifacts", tracker.client.log_artifacts, run_id, str(root),
                         payload_bytes=tree_bytes(root))
    return count


def _marker(tracker: Any, kfp_run_id: str, step: str, candidate: str) -> Path | None:
    """Where a local run remembers the step run it created (a retry or replay reuses it)."""
    if tracker.work_dir is None:
        return None
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{kfp_run_id}--{step}--{candidate or '-'}")[:240]
    return tracker.work_dir / CACHE_DIR / "steps" / f"{name}.run"


def _tracker(data: dict[str, Any], uri: str, quick: bool, work_dir: str | Path | None = None) -> Any:
    """A tracker for ``uri`` (recorded in ``data`` as ``resolved_uri`` for a replay); ``quick``:
    probe once and fail at once when the server is down."""
    tracker = Tracker(uri, work_dir=work_dir, attempts=2 if quick else None, backoff_s=0.5 if quick else None)
    data["resolved_uri"] = tracker.uri
    if quick:
        reason = tracker.probe()
        if reason:
            raise tracker._unreachable("log the step", reason, 1)
    return tracker


def _apply_to_kfp_run(data: dict[str, Any], kfp_run: str, *, quick: bool, replay: bool,
                      work_dir: str | Path | None) -> str:
    """Log the payload into KFP's own run for this task (``MLFLOW_RUN_ID``; KFP closes it)."""
    uri = data.get("resolved_uri") or os.environ.get("MLFLOW_TRACKING_URI", "") or data.get("tracking_uri", "")
    data["mlflow_run_id"] = kfp_run
    tracker = _tracker(data, uri, quick, work_dir)
    if not replay and RestLogger.usable(tracker):
        return _apply_rest(data, tracker, RestLogger(tracker), kfp_run)
    params, metrics = _unlogged(tracker, kfp_run, data) if replay else (data["params"], data["metrics"])
    tracker.log(kfp_run, params=params, metrics=metrics, timestamp_ms=data.get("ended_ms"),
                tags={**data["tags"], TAG_STEP: data["step"], TAG_CANDIDATE: data.get("candidate", "")})
    _upload(tracker, kfp_run, data["artifacts"])
    if data.get("parent_artifacts") and data.get("kfp_run_id"):
        _upload(tracker, tracker.resolve_parent("", data["kfp_run_id"], data.get("experiment", "")),
                data["parent_artifacts"])
    return kfp_run


def _create_step_run(tracker: Any, data: dict[str, Any], exp_id: str, keys: dict[str, str],
                     parent: dict[str, Any], marker: Path | None) -> str:
    """A new step run under the parent, its id kept in the payload and the marker file (so a retry
    finds it), with the payload's params and metrics logged."""
    tags = {**keys, TAG_KIND: "step", **parent.get("tags", {}), **to_tags(data["tags"])}
    run = tracker.call("create the step run", tracker.client.create_run, exp_id,
                       start_time=data["started_ms"], tags=tags,
                       run_name=_run_name(data["step"], data.get("candidate", "")))
    run_id = run.info.run_id
    data["run_id"] = run_id
    if marker is not None:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(run_id)
    tracker.log(run_id, params=data["params"], metrics=data["metrics"], timestamp_ms=data.get("ended_ms"))
    return run_id


def _log_existing_run(tracker: Any, data: dict[str, Any], run_id: str, *, replay: bool) -> bool:
    """Log the payload into the step run found (on replay only what it lacks); False when a replay
    finds it already terminated (left alone)."""
    data["run_id"] = run_id
    if replay:
        run = tracker.call("read the step run", tracker.client.get_run, run_id)
        if run.info.status != "RUNNING":
            return False
        params = {k: v for k, v in to_params(data["params"]).items() if k not in run.data.params}
        metrics = {k: v for k, v in to_metrics(data["metrics"]).items() if run.data.metrics.get(k) != v}
    else:
        params, metrics = data["params"], data["metrics"]
    tracker.log(run_id, params=params, metrics=metrics, tags=data["tags"], timestamp_ms=data.get("ended_ms"))
    return True


def apply_payload(data: dict[str, Any], *, quick: bool = False, replay: bool = False,
                  work_dir: str | Path | None = None) -> str | None:
    """Log a step payload into MLflow (see the module doc); returns the run id (None: no pipeline run).

    ``quick``: one ``/health`` probe first and a short retry budget (a step that finds the server
    down keeps its payload in milliseconds). ``replay``: applied later by ``shipyard track
    replay``; idempotent: a step run already terminated is left alone, params and metrics already
    there are not logged again.
    """
    _normalize(data)
    step, candidate = data["step"], data.get("candidate", "")
    kfp_run = data.get("mlflow_run_id", "") if replay else os.environ.get("MLFLOW_RUN_ID", "")
    if kfp_run:  # KFP's own run for this task (KFP closes it)
        return _apply_to_kfp_run(data, kfp_run, quick=quick, replay=replay, work_dir=work_dir)
    kfp_run_id = data.get("kfp_run_id", "")
    if not kfp_run_id or kfp_run_id.startswith("{{"):
        return None
    tracker = _tracker(data, data.get("resolved_uri") or data.get("tracking_uri", ""), quick, work_dir)
    if not replay and RestLogger.usable(tracker):
        return _apply_rest(data, tracker, RestLogger(tracker))
    parent = tracker.parent_record(kfp_run_id, data.get("experiment", ""))
    parent_id, exp_id = parent["run_id"], parent["experiment_id"]
    keys = {TAG_PARENT: parent_id, TAG_STEP: step, TAG_CANDIDATE: candidate}
    marker = _marker(tracker, kfp_run_id, step, candidate)
    run_id = data.get("run_id") or (marker.read_text().strip() if marker and marker.is_file() else None)
    if not run_id and (replay or not parent.get("cached")):  # a local run's first attempt needs no search
        run_id = tracker.find_run(exp_id, keys)
    if run_id is None:
        run_id = _create_step_run(tracker, data, exp_id, keys, parent, marker)
    elif not _log_existing_run(tracker, data, run_id, replay=replay):
        return run_id  # already terminated: left alone
    _upload(tracker, run_id, data["artifacts"])
    if data.get("parent_artifacts"):
        _upload(tracker, parent_id, data["parent_artifacts"])
    tracker.call("close the step run", tracker.client.set_terminated, run_id, data.get("status") or "FINISHED",
                 data.get("ended_ms"))
    return run_id


def _rest_parent(tracker: Any, rest: Any, kfp_run_id: str, experiment: str) -> dict[str, Any]:
    """The pipeline's parent run through the REST fast path (the local cache first)."""
    cached = read_parent_cache(kfp_run_id, tracker.uri, tracker.work_dir)
    if cached is not None:
        return {**cached, "cached": True}
    if tracker.kfp and tracker.kfp.experiment_id and tracker.uri == tracker.kfp.endpoint:
        exp_ids = [tracker.kfp.experiment_id]
    else:
        try:
            exp = rest.call("look up the experiment", "GET", "/api/2.0/mlflow/experiments/get-by-name?"
                            + urllib.parse.urlencode({"experiment_name": experiment or "shipyard"}))
            exp_ids = [exp["experiment"]["experiment_id"]]
        except ShipyardError:
            exp_ids = []
    run_id = rest.find_run(exp_ids[0], {TAG_KFP_RUN: kfp_run_id, TAG_KIND: "pipeline"}) if exp_ids else None
    if run_id is None:
        raise ShipyardError("kfp_run_id", f"no MLflow pipeline run is tagged {TAG_KFP_RUN}={kfp_run_id}",
                            "start_tracking must run first with the same tracking_uri and experiment")
    run = rest.get_run(run_id)
    return {"run_id": run_id, "experiment_id": run["info"]["experiment_id"],
            "tags": {k: v for k, v in run["data"]["tags"].items() if k in (TAG_PIPELINE, TAG_KFP_RUN)}}


def _apply_rest(data: dict[str, Any], tracker: Any, rest: Any, kfp_run: str = "") -> str:
    """:func:`apply_payload` through MLflow's REST API (no MLflow import; see
    :class:`shipyard.tracking.tracker.RestLogger`): a local run's step makes 4 calls (create, log-batch,
    one PUT per report, update)."""
    step, candidate = data["step"], data.get("candidate", "")
    if kfp_run:
        rest.log(kfp_run, data["params"], data["metrics"], {**data["tags"], TAG_STEP: step, TAG_CANDIDATE: candidate},
                 data.get("ended_ms"))
        if data["artifacts"]:
            _upload(tracker, kfp_run, data["artifacts"], rest, rest.get_run(kfp_run)["info"].get("artifact_uri", ""))
        if data.get("parent_artifacts") and data.get("kfp_run_id"):
            parent = _rest_parent(tracker, rest, data["kfp_run_id"], data.get("experiment", ""))["run_id"]
            _upload(tracker, parent, data["parent_artifacts"], rest, rest.get_run(parent)["info"].get("artifact_uri", ""))
        return kfp_run
    kfp_run_id = data["kfp_run_id"]
    parent = _rest_parent(tracker, rest, kfp_run_id, data.get("experiment", ""))
    parent_id, exp_id = parent["run_id"], parent["experiment_id"]
    keys = {TAG_PARENT: parent_id, TAG_STEP: step, TAG_CANDIDATE: candidate}
    marker = _marker(tracker, kfp_run_id, step, candidate)
    run_id = data.get("run_id") or (marker.read_text().strip() if marker and marker.is_file() else None)
    if not run_id and not parent.get("cached"):  # a local run's first attempt needs no search
        run_id = rest.find_run(exp_id, keys)
    if run_id is None:
        tags = {**keys, TAG_KIND: "step", **parent.get("tags", {}), **to_tags(data["tags"])}
        info = rest.create_run(exp_id, data["started_ms"], to_tags(tags), _run_name(step, candidate))
        run_id = data["run_id"] = info["run_id"]
        if marker is not None:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(run_id)
        rest.log(run_id, data["params"], data["metrics"], {}, data.get("ended_ms"))
    else:
        data["run_id"] = run_id
        info = rest.get_run(run_id)["info"]
        rest.log(run_id, data["params"], data["metrics"], data["tags"], data.get("ended_ms"))
    _upload(tracker, run_id, data["artifacts"], rest, info.get("artifact_uri", ""))
    if data.get("parent_artifacts"):
        _upload(tracker, parent_id, data["parent_artifacts"], rest, rest.get_run(parent_id)["info"].get("artifact_uri", ""))
    rest.terminate(run_id, data.get("status") or "FINISHED", data.get("ended_ms"))
    return run_id


def _unlogged(tracker: Any, run_id: str, data: dict[str, Any]) -> tuple[dict[str, str], dict[str, float]]:
    """The params and metrics of ``data`` that run ``run_id`` does not hold yet."""
    run = tracker.call("read the run", tracker.client.get_run, run_id)
    return ({k: v for k, v in to_params(data["params"]).items() if k not in run.data.params},
            {k: v for k, v in to_metrics(data["metrics"]).items() if run.data.metrics.get(k) != v})


def apply_pending(*metadatas: dict[str, Any] | None, context: dict[str, str] | None = None) -> list[str]:
    """Apply payloads that earlier steps kept in their artifacts' metadata; returns the run ids.

    ``context`` (the calling step's ``kfp_run_id``, ``tracking_uri``, ``experiment``) fills what a
    payload lacks: the GPU steps take no KFP run id (it would make their KFP cache key unique per
    run), so their records join the run of the step that applies them.
    A payload that cannot be applied now (MLflow down) is kept (``tracking-pending/`` in a local
    run) and does not fail the calling step; once the server is seen down the rest are kept
    without another try.
    """
    done: list[str] = []
    down = ""
    for meta in metadatas:
        pending = (meta or {}).get(PENDING_KEY)
        if not (isinstance(pending, dict) and pending.get("step")):
            continue
        pending = {**pending, **{k: v for k, v in (context or {}).items() if v and not pending.get(k)}}
        if at_end_of_run(pending, handed_on=True):
            continue
        if not down:
            try:
                run_id = apply_payload(pending, quick=True)
            except ShipyardError as err:
                down = str(err)
            else:
                if run_id:
                    done.append(run_id)
                continue
        kept = keep(pending, overwrite=False)
        print(f"shipyard: tracking of {pending['step']} still deferred: {down}; kept in "
              f"{kept or 'its step outputs'}", file=sys.stderr, flush=True)
    return done
