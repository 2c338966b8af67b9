"""Tracking from inside a step: each step logs its own parameters, metrics and reports.

:class:`StepRun` wraps a step's work. When the step ends it logs what the step recorded:

* into the MLflow run KFP created for the task, when ``MLFLOW_RUN_ID`` is set (KFP's MLflow
  integration passes it with ``MLFLOW_TRACKING_URI``); KFP closes that run itself;
* otherwise into a nested run of the pipeline's parent run (found by its KFP run id tag),
  keyed by step and candidate (``shipyard.step``, ``shipyard.candidate``), with the step's
  real start and end time and status.

Artifacts keep their file extensions (``report.md``, ``report.html``) so MLflow previews
them. Only reports and small JSON files are logged, never model weights.

Tracking never fails the step's own work: when MLflow cannot be reached (or the image has no
MLflow client) the payload is returned by :meth:`StepRun.payload` so the step can keep it in
its outputs (artifact metadata ``shipyard.tracking``), and a later base step applies it with
:func:`apply_payload`.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from shipyard.errors import ShipyardError

TAG_CANDIDATE = "shipyard.candidate"
PENDING_KEY = "shipyard.tracking"
_MAX_ARTIFACT_BYTES = 50 * 1024 * 1024  # reports and JSON, never weights


class StepRun:
    """Collects one step's params, metrics, tags and report files and logs them at the end."""

    def __init__(self, step: str, candidate: str = "", *, tracking_uri: str = "", experiment: str = "",
                 kfp_run_id: str = "", params: dict[str, Any] | None = None) -> None:
        from shipyard.components.compress.recipes import recipe_label

        self.data: dict[str, Any] = {
            "step": step, "candidate": recipe_label(candidate) if candidate else "", "tracking_uri": tracking_uri, "experiment": experiment,
            "kfp_run_id": kfp_run_id, "params": dict(params or {}), "metrics": {}, "tags": {}, "artifacts": {},
            "started_ms": int(time.time() * 1000), "ended_ms": None, "status": "RUNNING",
        }
        self.run_id: str | None = None
        self.error: str | None = None

    def log(self, *, params: dict[str, Any] | None = None, metrics: dict[str, Any] | None = None,
            tags: dict[str, Any] | None = None, artifacts: dict[str, str] | None = None) -> None:
        """Add params, metrics, tags; ``artifacts`` maps a file name with extension (``report.md``)
        or a folder name to a local path."""
        self.data["params"].update(params or {})
        self.data["metrics"].update({k: v for k, v in (metrics or {}).items() if isinstance(v, int | float)})
        self.data["tags"].update(tags or {})
        self.data["artifacts"].update({k: str(v) for k, v in (artifacts or {}).items() if v})

    def __enter__(self) -> StepRun:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is not None and issubclass(kind, KeyboardInterrupt):  # Ctrl-C or SIGTERM (a cancelled run)
            self.finish("KILLED")
            return
        self.finish("FAILED" if kind is not None and not issubclass(kind, SystemExit) or
                    (kind is SystemExit and getattr(exc, "code", 0) not in (0, None)) else "FINISHED")

    def finish(self, status: str = "FINISHED") -> str | None:
        """Log everything now (once); returns the MLflow run id, or None when it was kept as a payload."""
        if self.data["ended_ms"] is not None:
            return self.run_id
        self.data["ended_ms"] = int(time.time() * 1000)
        self.data["status"] = status
        try:
            self.run_id = apply_payload(self.data)
        except ImportError:
            self.error = "no MLflow client in this image; the payload is kept for the next step"
        except ShipyardError as err:
            self.error = str(err)
        except Exception as err:  # noqa: BLE001 - tracking must not fail the step's work
            self.error = f"{type(err).__name__}: {err}".splitlines()[0]
        if self.error:
            print(f"shipyard: tracking of {self.data['step']} deferred: {self.error}", file=sys.stderr, flush=True)
        return self.run_id

    def payload(self) -> dict[str, Any] | None:
        """What could not be logged yet (None when it was)."""
        return None if self.run_id else dict(self.data)


def _run_name(step: str, candidate: str) -> str:
    return f"{step} [{candidate}]" if candidate else step


def _upload(tracker: Any, run_id: str, artifacts: dict[str, str]) -> int:
    """Upload each artifact under its own name (with its extension); skips anything too large."""
    count = 0
    with tempfile.TemporaryDirectory(prefix="shipyard-track-") as tmp:
        for dest, local in artifacts.items():
            path = Path(local)
            if not path.exists():
                continue
            if path.is_file():
                if path.stat().st_size > _MAX_ARTIFACT_BYTES:
                    continue
                named = Path(tmp) / str(count) / Path(dest).name
                named.parent.mkdir(parents=True)
                shutil.copyfile(path, named)
                parent = str(Path(dest).parent) if "/" in dest else None
                tracker.call("upload an artifact", tracker.client.log_artifact, run_id, str(named), parent)
                count += 1
            elif path.is_dir():
                size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
                if size and size <= _MAX_ARTIFACT_BYTES:
                    tracker.call("upload artifacts", tracker.client.log_artifacts, run_id, str(path), dest)
                    count += 1
    return count


def apply_payload(data: dict[str, Any]) -> str | None:
    """Log a step payload into MLflow (see the module doc); returns the run id (None: no pipeline run)."""
    from shipyard.tracking import TAG_KFP_RUN, TAG_KIND, TAG_PARENT, TAG_PIPELINE, TAG_STEP, Tracker

    step, candidate = data["step"], data.get("candidate", "")
    kfp_run = os.environ.get("MLFLOW_RUN_ID", "")
    if kfp_run:
        tracker = Tracker(os.environ.get("MLFLOW_TRACKING_URI", "") or data.get("tracking_uri", ""))
        tracker.log(kfp_run, params=data["params"], metrics=data["metrics"],
                    tags={**data["tags"], TAG_STEP: step, TAG_CANDIDATE: candidate})
        _upload(tracker, kfp_run, data["artifacts"])
        return kfp_run
    kfp_run_id = data.get("kfp_run_id", "")
    if not kfp_run_id or kfp_run_id.startswith("{{"):
        return None
    tracker = Tracker(data.get("tracking_uri", ""))
    parent_id = tracker.resolve_parent("", kfp_run_id, data.get("experiment", ""))
    parent = tracker.call("read the pipeline run", tracker.client.get_run, parent_id)
    exp_id = parent.info.experiment_id
    keys = {TAG_PARENT: parent_id, TAG_STEP: step, TAG_CANDIDATE: candidate}
    run_id = tracker.find_run(exp_id, keys)
    if run_id is None:
        tags = {**keys, TAG_KIND: "step"}
        for key in (TAG_PIPELINE, TAG_KFP_RUN):
            if key in parent.data.tags:
                tags[key] = parent.data.tags[key]
        run = tracker.call("create the step run", tracker.client.create_run, exp_id,
                           start_time=data["started_ms"], tags=tags, run_name=_run_name(step, candidate))
        run_id = run.info.run_id
    tracker.log(run_id, params=data["params"], metrics=data["metrics"], tags=data["tags"])
    _upload(tracker, run_id, data["artifacts"])
    tracker.call("close the step run", tracker.client.set_terminated, run_id, data.get("status") or "FINISHED",
                 data.get("ended_ms"))
    return run_id


def apply_pending(*metadatas: dict[str, Any] | None) -> list[str]:
    """Apply payloads that earlier steps kept in their artifacts' metadata; returns the run ids."""
    done = []
    for meta in metadatas:
        pending = (meta or {}).get(PENDING_KEY)
        if isinstance(pending, dict) and pending.get("step"):
            run_id = apply_payload(pending)
            if run_id:
                done.append(run_id)
    return done
