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


def open_page(url: str, tmp: Path, name: str, budget_ms: int = 15000) -> str:
    """Render ``url`` in a fresh profile (no saved workflow type), let the app load its data, and
    return the DOM; the screenshot is ``tmp/name.png`` (and in ``$SHIPYARD_SCREENSHOTS``)."""
    shot = tmp / f"{name}.png"
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp / ('profile-' + name)}",
                           f"--virtual-time-budget={budget_ms}", "--window-size=1400,900", f"--screenshot={shot}",
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


def test_every_html_report_previews_in_the_mlflow_run_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SLO report and the candidates report, logged as run artifacts, render in MLflow's
    artifact viewer (its sandboxed iframe): the preview area of the screenshot is not blank and
    holds the report's green PASS heading / champion colour."""
    import numpy as np
    import report_fixtures as fx
    from PIL import Image

    from shipyard.gates.selection import select_champion

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    fx.judged(tmp_path)
    select_champion([str(tmp_path / "w8a8-int8-gates")], "", str(tmp_path / "d"), str(tmp_path / "c.md"),
                    str(tmp_path / "candidates.html"))
    server = shared_server()
    client = MlflowClient(server.url)
    experiment = client.create_experiment(f"previews-{uuid.uuid4().hex[:6]}")
    run = client.create_run(experiment).info.run_id
    client.log_artifact(run, str(tmp_path / "w8a8-int8-gates" / "slo.html"))
    client.log_artifact(run, str(tmp_path / "candidates.html"))
    for name in ("slo.html", "candidates.html"):
        open_page(f"{ui_url(server.url, experiment, run).split('?')[0]}/artifacts/{name}?{CLASSIC_VIEW_QUERY}",
                  tmp_path, f"mlflow-preview-{name.removesuffix('.html')}", budget_ms=40000)
        pixels = np.asarray(Image.open(tmp_path / f"mlflow-preview-{name.removesuffix('.html')}.png").convert("RGB"))
        preview = pixels[200:900, 420:980].astype(int)  # the artifact viewer's iframe (1400x900 window)
        ink = (np.abs(preview - 255).sum(axis=-1) > 60).mean()
        assert ink > 0.05, (name, ink)  # text, tables, plots: not a blank frame
