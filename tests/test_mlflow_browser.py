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

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

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


#: evaluated in MLflow's HTML viewer frame: its document's widths, and whether the last cell of every
#: table, and the deploy report's "serves the benchmarked build" row (its name and its value), can be
#: seen once scrolled to: inside the frame's width, with no sideways scrolling, not covered or clipped
FIT = """(() => {
  const d = document.documentElement;
  if (document.readyState !== 'complete' || !document.body || !document.body.innerText.trim()) return null;
  const seen = e => {
    e.scrollIntoView({block: 'center'});
    const r = e.getBoundingClientRect(), hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    return r.width > 0 && r.left >= 0 && r.right <= d.clientWidth && scrollX === 0 && !!hit && (hit === e || e.contains(hit));
  };
  const last = [...document.querySelectorAll('table')].map(t => [...t.rows[t.rows.length - 1].cells].pop());
  const name = [...document.querySelectorAll('td')].find(td => td.textContent.trim() === 'serves the benchmarked build');
  return {scrollWidth: d.scrollWidth, clientWidth: d.clientWidth,
          lastCellsSeen: last.filter(c => c.textContent.trim()).map(seen),
          served: name ? [seen(name), name.nextElementSibling.textContent.trim(), seen(name.nextElementSibling)] : null};
})()"""


def _dry_run_deploy(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The deploy step's MLflow record (:func:`~shipyard.steps.deploy.deploy_outputs`) for a dry run of
    the champion in ``tmp/d`` (its record has no engine) with a pinned image: its report says "serves the
    benchmarked build: unknown (the champion's record has no engine)".
    The manifest's schema check is skipped (loading the vendored CRDs alone takes 4 s; test_deploy_render
    covers it)."""
    from shipyard.steps import deploy

    monkeypatch.setattr(deploy, "require_valid", lambda docs, source="": None)
    verify = tmp / "verify"
    result = deploy.run_deploy(deploy_config={"gpu_memory_gib": 80, "verify": {"enabled": False}, "preset": "pd-nixl",
                                              "image": "quay.io/org/vllm:0.32.0"},
                               manifest_path=str(tmp / "manifest.yaml"), dry_run=True, name="llm", namespace="ns",
                               model_uri="oci://quay.io/org/m@sha256:" + "0" * 64, summary_path=str(tmp / "deploy.md"),
                               candidate=str(tmp / "d"), verify_dir=str(verify))
    return deploy.deploy_outputs(result, str(verify), manifest_path=str(tmp / "manifest.yaml"),
                                 summary_path=str(tmp / "deploy.md"), verification_path=str(tmp / "verification.md"),
                                 decision_record_path=str(tmp / "decision-record.json"))["log"]


def _safety_report(tmp: Path, report: Path) -> None:
    """A real safety gate report in ``report`` (FAIL: 3 of 4 attacks got through the candidate, none
    the base), whose per-family table has 9 columns: the step logs it as Markdown only."""
    from shipyard.evaluation.garak_scan import SAFETY_FILE, SCHEMA, safety_config
    from shipyard.gates.safety import run_safety_gate

    probe = "promptinject.HijackHateHumans"
    config = {"probes": [probe], "max_prompts": 4, "max_tokens": 32, "allow_inconclusive": True}
    for who, hits in (("base", 0), ("candidate", 3)):
        stats = {"attempts": 4, "hits": hits, "asr": hits / 4}
        scan = {"schema": SCHEMA, "model": who, "config": safety_config(config), "seconds": 1.0, "garak_version": "0.17.1",
                "missing_probes": [], "families": {"promptinject": {"family": "promptinject", "probes": [probe], **stats}},
                "probes": {probe: {"probe": probe, "family": "promptinject", "errors": 0, "detectors": {}, "hit_prompts": [],
                                   **stats}}}
        (tmp / f"scan-{who}").mkdir()
        (tmp / f"scan-{who}" / SAFETY_FILE).write_text(json.dumps(scan))
    run_safety_gate(str(tmp / "scan-base"), str(tmp / "scan-candidate"), config, str(report))


def _painted(browser: Any, path: str, label: str, tmp: Path) -> None:
    """The report's green heading paints at the top of MLflow's frame and, for the reports with plots,
    scrolling inside the frame reaches them (matplotlib's colours)."""
    from chromium_cdp import has_colour, ink

    green, plot_colours = (23, 128, 61), [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40)]
    frame = (slice(200, 860), slice(420, 920))  # the artifact viewer's iframe (1280x900 window)
    top = browser.wait_for(lambda px: ink(px[frame]) > 0.05 and has_colour(px[frame], green))
    browser.save(top, tmp / f"{label}.png")
    assert ink(top[frame]) > 0.05 and has_colour(top[frame], green), (path, ink(top[frame]))
    if path not in ("slo.html", "candidates.html"):
        return
    for _ in range(8):  # down the report, inside the sandboxed frame
        browser.wheel(700, 500, 700)
        shot = browser.wait_for(lambda px: any(has_colour(px[frame], c, least=300) for c in plot_colours), 4)
        if any(has_colour(shot[frame], c, least=300) for c in plot_colours):
            browser.save(shot, tmp / f"{label}-plot.png")
            return
    raise AssertionError(f"{path}: no plot painted in MLflow's preview")


def test_every_html_report_previews_in_the_mlflow_run_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every HTML report the gates, select and deploy steps log (through StepRun, the components' own
    path: the REST upload into the server's proxied store) renders in MLflow's artifact viewer (a
    sandboxed ``blob:`` iframe) at a 1280 px window, where the frame is about 500 px wide beside
    MLflow's assistant: the gates' green heading paints at the top, scrolling inside the frame
    reaches the plots, and the page fits the frame: no sideways scrolling (the frame document's
    scrollWidth is its clientWidth), the last cell of every table shows, and the deploy report's
    "serves the benchmarked build" row shows, name and value. (MLflow's Markdown preview of deploy.md boxes each table
    in a 420 px high scroll area, with that row below its fold, and scrolls accuracy.md's 11-column
    table sideways.) Real-time screenshots over the DevTools protocol (:mod:`chromium_cdp`):
    ``--screenshot --virtual-time-budget`` can shoot before the sandboxed frame paints, which showed
    one report or the other blank at random."""
    import report_fixtures as fx
    from chromium_cdp import Chromium

    from shipyard.steps.select import select_champion
    from shipyard.tracking.steprun import StepRun

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    fx.judged(tmp_path)
    select_champion([str(tmp_path / "w8a8-int8-gates")], "", str(tmp_path / "d"), str(tmp_path / "c.md"),
                    str(tmp_path / "candidates.html"))
    deployed = _dry_run_deploy(tmp_path, monkeypatch)
    _safety_report(tmp_path, tmp_path / "w8a8-int8-gates" / "safety.md")
    server = shared_server()
    name, kfp_run_id = f"previews-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex[:8]
    track.start_tracking(server.url, name, "optimize-and-deploy", kfp_run_id)
    where = {"tracking_uri": server.url, "experiment": name, "kfp_run_id": kfp_run_id}
    with StepRun("gates", "w8a8-int8", **where) as run:
        run.log(artifacts={f.name: str(f) for f in (tmp_path / "w8a8-int8-gates").iterdir() if f.is_file()})
    with StepRun("select", "", **where) as run:
        run.log(artifacts={"candidates.html": str(tmp_path / "candidates.html"), "candidates.md": str(tmp_path / "c.md")})
    with StepRun("deploy", "w8a8-int8", **where) as run:
        run.log(**deployed)

    client = MlflowClient(server.url)
    experiment = client.get_experiment_by_name(name).experiment_id
    reports = [(run.info.run_id, art.path) for run in client.search_runs([experiment])
               for art in client.list_artifacts(run.info.run_id) if art.path.endswith(".html")]
    # safety.html: the Markdown-only safety report's rendering, logged beside it (its tables are wide)
    assert sorted(path for _, path in reports) == ["accuracy.html", "candidates.html", "deploy.html", "safety.html",
                                                   "slo.html"]

    for run_id, path in reports:
        label = f"mlflow-preview-{path.removesuffix('.html')}"
        with Chromium(tmp_path / f"profile-{label}", width=1280, height=900) as browser:
            browser.open(f"{ui_url(server.url, experiment, run_id).split('?')[0]}/artifacts/{path}?{CLASSIC_VIEW_QUERY}")
            if path not in ("deploy.html", "safety.html"):  # headings not coloured as a verdict
                _painted(browser, path, label, tmp_path)
            fit = browser.frame_eval(FIT)
            browser.save(browser.screenshot(), tmp_path / f"{label}-fit.png")
        assert 400 < fit["clientWidth"] < 700 and fit["scrollWidth"] <= fit["clientWidth"], (path, fit)
        assert fit["lastCellsSeen"] and all(fit["lastCellsSeen"]), (path, fit)
        unknown = "unknown (the champion's record has no engine)"
        assert fit["served"] == ([True, unknown, True] if path == "deploy.html" else None), (path, fit)
        if os.environ.get("SHIPYARD_SCREENSHOTS"):
            for png in tmp_path.glob(f"{label}*.png"):
                Path(os.environ["SHIPYARD_SCREENSHOTS"]).mkdir(parents=True, exist_ok=True)
                shutil.copy(png, Path(os.environ["SHIPYARD_SCREENSHOTS"]) / png.name)
