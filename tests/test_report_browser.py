"""The HTML reports in a real browser (headless Chromium from Debian): the plots decode, the tables,
thresholds and warnings are on the page, and nothing is loaded from the network.

The SLO/benchmark report and the candidates report are built by the real gates from the realistic
result dicts of tests/report_fixtures.py (no vLLM). Chromium renders each page with a small probe
script appended to a copy (the reports themselves carry no script): it reads every ``<img>``'s
``naturalWidth`` after the load event, every ``src``/``href`` and the resource-timing entries,
and writes them into the DOM that ``--dump-dom`` prints. Chromium's own net log then lists every
URL request the page made: only ``file:`` and ``data:`` are allowed (a control page with an
``http://`` image shows the check sees network loads). The same Chromium run takes a screenshot,
checked not to be blank, kept in ``tmp_path`` and copied to ``$SHIPYARD_SCREENSHOTS`` when set.
"""

from __future__ import annotations

import copy
import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import report_fixtures as fx

from shipyard.steps.select import select_champion

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (Debian: apt-get install --no-install-recommends chromium; .ci/setup does it as root)",
)

PROBE = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.images].map(i => ({alt: i.alt, w: i.naturalWidth, h: i.naturalHeight, complete: i.complete,
                                              scheme: i.currentSrc.split(':')[0]}));
  const urls = [...document.querySelectorAll('[src],[href]')].map(e => e.getAttribute('src') || e.getAttribute('href'));
  const resources = performance.getEntriesByType('resource').map(r => r.name);
  const pre = document.createElement('pre');
  pre.id = 'shipyard-probe';
  pre.style.display = 'none';
  pre.textContent = JSON.stringify({imgs, urls, resources, tables: document.querySelectorAll('table').length});
  document.body.appendChild(pre);
});
</script>"""

FLAGS = ["--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--disable-extensions",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def _chromium(tmp: Path, *args: str) -> str:
    profile = tmp / "chromium-profile"  # a private profile: other runs on the machine do not share state
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def page_requests(net_log: Path) -> list[str]:
    """The URLs the page itself requested (Chromium's net log: URL_REQUEST_START_JOB events whose
    network isolation key is the file:// page; the browser's own background requests have another)."""
    log = json.loads(net_log.read_text())
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = []
    for event in log.get("events", []):
        params = event.get("params") or {}
        if event.get("type") == start_job and "url" in params and str(params.get("network_isolation_key", "")).startswith("file://"):
            urls.append(params["url"])
    return urls


def render(page: Path, tmp: Path) -> tuple[dict[str, Any], list[str], str, Path]:
    """Open ``page`` (a copy with the probe, hidden) in Chromium once: the probe's findings, the URLs
    requested (net log), the DOM text and a screenshot (copied to ``$SHIPYARD_SCREENSHOTS`` when set)."""
    probed = tmp / f"probed-{page.name}"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    net_log = tmp / f"{page.stem}.netlog.json"
    shot = tmp / f"{page.stem}.png"
    dom = _chromium(tmp, "--virtual-time-budget=5000", f"--log-net-log={net_log}", "--window-size=1300,2600",
                    f"--screenshot={shot}", "--dump-dom", probed.as_uri())
    found = re.search(r"<pre id=\"shipyard-probe\"[^>]*>(.*?)</pre>", dom, re.S)
    assert found, "the probe did not run: " + dom[-500:]
    probe = json.loads(html.unescape(found.group(1)))
    if os.environ.get("SHIPYARD_SCREENSHOTS"):
        out = Path(os.environ["SHIPYARD_SCREENSHOTS"])
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, out / shot.name)
    return probe, page_requests(net_log), html.unescape(re.sub(r"<[^>]+>", " ", dom[: found.start()])), shot


def _not_blank(shot: Path) -> None:
    from PIL import Image

    with Image.open(shot) as im:
        small = im.convert("RGB").resize((130, 260))
        colors = small.getcolors(maxcolors=130 * 260) or []
        white = sum(n for n, rgb in colors if min(rgb) > 245)
    assert len(colors) > 50 and white < 0.97 * 130 * 260, f"{shot} looks blank"


def _assert_offline(page: Path, probe: dict[str, Any], requested: list[str]) -> None:
    source = page.read_text()
    assert "<script" not in source and not re.search(r"""(src|href)\s*=\s*['"]?(https?:)?//""", source)
    assert all(u.startswith(("data:", "#")) for u in probe["urls"]), probe["urls"]
    assert all(not r.startswith(("http:", "https:")) for r in probe["resources"]), probe["resources"]
    assert all(u.startswith(("file:", "data:")) for u in requested), requested


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("reports")
    fx.judged(tmp)
    slow = copy.deepcopy(fx.CAND_BENCH)
    slow["levels"][1]["ttft_ms"]["p99"] = 740.0
    fx.judged(tmp, recipe="w4a16", cand_bench=slow)
    select_champion([str(tmp / "w8a8-int8-gates"), str(tmp / "w4a16-gates")], "throughput", str(tmp / "sel"),
                    str(tmp / "candidates.md"), str(tmp / "candidates.html"))
    slo = tmp / "slo.html"
    shutil.copyfile(tmp / "w8a8-int8-gates" / "slo.html", slo)
    return {"slo": slo, "candidates": tmp / "candidates.html"}


def test_slo_report_in_chromium(reports: dict[str, Path], tmp_path: Path) -> None:
    probe, requested, text, shot = render(reports["slo"], tmp_path)
    alts = [i["alt"] for i in probe["imgs"]]
    assert alts[:3] == ["TTFT p50 and p99 vs achieved output tokens/s, base and candidate, SLO line",
                        "ITL p50 and p99 vs achieved output tokens/s, base and candidate, SLO line",
                        "output tokens/s vs load level, base and candidate, SLO minimum"]
    assert all(i["complete"] and i["w"] > 300 and i["h"] > 200 and i["scheme"] == "data" for i in probe["imgs"])
    assert probe["tables"] >= 8  # regression/gain, SLO, highest load, checks, 2 levels, ratios, 2 memory, config
    ttft = fx.CAND_BENCH["levels"][0]["ttft_ms"]["p99"] / fx.BASE_BENCH["levels"][0]["ttft_ms"]["p99"]
    for needle in ("SLO gate: PASS", f"worst regression: TTFT p99 x{ttft:.3g} at concurrency 1 (",
                   "TTFT p99 <= 500 ms", "fewer than 100 requests at 2 load levels", "concurrency 1: 8 requests",
                   "ttft_p99_ms", "not set", "SLO checks per load level", "Benchmark config"):
        assert needle in text, needle
    _assert_offline(reports["slo"], probe, requested)
    _not_blank(shot)


def test_candidates_report_in_chromium(reports: dict[str, Path], tmp_path: Path) -> None:
    probe, requested, text, shot = render(reports["candidates"], tmp_path)
    assert len(probe["imgs"]) == 4  # recovery bars, latency, throughput, the frontier
    assert all(i["complete"] and i["w"] > 300 and i["h"] > 200 and i["scheme"] == "data" for i in probe["imgs"])
    assert probe["tables"] >= 6
    for needle in ("Candidates: champion w8a8-int8", "the base is always a candidate",
                   "Frontier: accuracy and goodput on the same axes",
                   "passed the accuracy gate below min_recovery 0.99", "by the stderr rule (k = 2)",
                   "TTFT p99 x7.31 at concurrency 2 (740 vs", "fewer than 100 requests", "Accuracy thresholds", "ttft_p99_ms"):
        assert needle in text, needle
    _assert_offline(reports["candidates"], probe, requested)
    _not_blank(shot)


def test_the_network_check_sees_a_network_load(tmp_path: Path) -> None:
    """Control: a page that loads an http:// image is caught by the probe and by the net log."""
    page = tmp_path / "leaky.html"
    page.write_text("<!doctype html><html><body><img alt='x' src='http://127.0.0.1:9/x.png'></body></html>")
    probe, requested, _, _ = render(page, tmp_path)
    assert probe["imgs"][0]["w"] == 0
    assert "http://127.0.0.1:9/x.png" in requested
    with pytest.raises(AssertionError):
        _assert_offline(page, probe, requested)
