"""The MLflow UI in a real browser (headless Chromium, the session's real ``mlflow server``): the
experiment page shipyard links to opens in the classic ML view (its runs table), not MLflow 3's
GenAI "Overview/Traces" view.

In MLflow 3.17's UI the experiment page's view follows the *workflow type* (URL parameter
``workflowType``, else the browser's saved choice, default ``genai``), not the experiment's
``mlflow.experimentKind`` tag (see :mod:`shipyard.tracking.tracker`). A control opens the same
experiment without the parameter and must land in the GenAI view, so the check can fail. The
screenshot is copied to ``$SHIPYARD_SCREENSHOTS`` when set.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow_server import shared_server

from shipyard.tracking import pipeline_runs as track
from shipyard.tracking.tracker import CLASSIC_VIEW_QUERY, Tracker, ui_url

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (Debian: apt-get install --no-install-recommends chromium; .ci/setup does it as root)",
)
FLAGS = ["--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--disable-extensions",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def open_page(url: str, tmp: Path, name: str) -> str:
    """Render ``url`` in a fresh profile (no saved workflow type), let the app load its data, and
    return the DOM; the screenshot is ``tmp/name.png`` (and in ``$SHIPYARD_SCREENSHOTS``)."""
    shot = tmp / f"{name}.png"
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp / ('profile-' + name)}",
                           "--virtual-time-budget=15000", "--window-size=1400,900", f"--screenshot={shot}",
                           "--dump-dom", url], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shot.stat().st_size > 10_000
    if os.environ.get("SHIPYARD_SCREENSHOTS"):
        Path(os.environ["SHIPYARD_SCREENSHOTS"]).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(os.environ["SHIPYARD_SCREENSHOTS"]) / shot.name)
    return proc.stdout


def test_the_experiment_shipyard_links_to_opens_in_the_classic_view(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    server = shared_server()
    name = f"classic-ui-{uuid.uuid4().hex[:6]}"
    opened = track.start_tracking(server.url, name, "optimize-and-deploy", "", "", "")
    Tracker(server.url).finish(opened["parent_run_id"], "FINISHED")
    experiment = MlflowClient(server.url).get_experiment_by_name(name).experiment_id
    assert opened["run_url"].endswith(f"/runs/{opened['parent_run_id']}?{CLASSIC_VIEW_QUERY}")  # what the run prints

    classic = open_page(ui_url(server.url, experiment), tmp_path, "mlflow-experiment-classic")
    assert "Run Name" in classic and "optimize-and-deploy" in classic and "matching run" in classic
    assert "Detect Issues" not in classic and "Tool calls" not in classic

    # control: the same experiment (tagged classic) without the parameter lands in the GenAI view
    genai = open_page(f"{server.url}/#/experiments/{experiment}", tmp_path, "mlflow-experiment-genai-control")
    assert "Detect Issues" in genai and "Run Name" not in genai
