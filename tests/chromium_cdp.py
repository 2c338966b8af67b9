"""Headless Chromium driven through the DevTools protocol, in real time, for the browser tests.

``chromium --screenshot --virtual-time-budget=N`` takes its picture when the main frame's virtual
time runs out, whether or not a sandboxed iframe (a separate renderer) has painted: MLflow's
artifact viewer shows an HTML artifact in such an iframe (a ``blob:`` URL, ``sandbox="allow-scripts"``),
and one such screenshot in eight came out blank for a report that paints every time in real time
(2-5 s on a 2-core machine). :class:`Chromium` instead polls real screenshots until the page
paints what the test waits for, within a bounded time, and can scroll with the mouse wheel (which
reaches into the iframe, whose document a sandbox keeps from scripts).

websocket-client comes with the kubernetes client (a base runtime dependency).
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import websocket
from PIL import Image

from shipyard.core.net import free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--disable-extensions",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


class Chromium:
    """One headless Chromium with a fresh profile and one page (``with Chromium(tmp) as browser``)."""

    def __init__(self, profile: Path, width: int = 1400, height: int = 900) -> None:
        self.profile, self.size = profile, (width, height)
        self.proc: subprocess.Popen[bytes] | None = None
        self.ws: websocket.WebSocket | None = None
        self.ids = itertools.count(1)

    def __enter__(self) -> Chromium:
        assert CHROMIUM, "chromium is not installed"
        port = free_port()
        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--remote-debugging-port={port}",
                                      f"--user-data-dir={self.profile}", f"--window-size={self.size[0]},{self.size[1]}",
                                      "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=2) as resp:
                    page = next(t for t in json.load(resp) if t["type"] == "page")
                break
            except (OSError, StopIteration, ValueError):
                assert time.monotonic() < deadline and self.proc.poll() is None, "chromium's DevTools never answered"
                time.sleep(0.2)
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60)
        self.call("Page.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=self.size[0], height=self.size[1],
                  deviceScaleFactor=1, mobile=False)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.ws is not None:
            self.ws.close()
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def call(self, method: str, session_id: str = "", **params: Any) -> dict[str, Any]:
        """One DevTools command (to the attached target ``session_id`` when given, e.g. an iframe's);
        its result (events in between are skipped)."""
        assert self.ws is not None
        ident = next(self.ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params,
                                 **({"sessionId": session_id} if session_id else {})}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                assert "error" not in message, (method, message["error"])
                return message.get("result", {})

    def open(self, url: str, seconds: float = 30) -> None:
        """Navigate and wait for the page's load event (the app then fetches its data itself)."""
        assert self.ws is not None
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if json.loads(self.ws.recv()).get("method") == "Page.loadEventFired":
                return
        raise AssertionError(f"{url} did not load in {seconds} s")

    def frame_eval(self, expression: str, seconds: float = 30) -> Any:
        """The value of ``expression`` evaluated in the page's ``blob:`` iframe (MLflow's viewer of an
        HTML artifact: a sandboxed frame, out of the page's process, that the page's scripts cannot
        reach but DevTools can), polled until it is not null (the frame's document still loading)."""
        deadline = time.monotonic() + seconds
        while True:
            frames = [t for t in self.call("Target.getTargets")["targetInfos"]
                      if t["type"] == "iframe" and t["url"].startswith("blob:")]
            if frames:
                session = self.call("Target.attachToTarget", targetId=frames[0]["targetId"], flatten=True)["sessionId"]
                value = self.call("Runtime.evaluate", session_id=session, expression=expression,
                                  returnByValue=True)["result"].get("value")
                self.call("Target.detachFromTarget", sessionId=session)
                if value is not None:
                    return value
            assert time.monotonic() < deadline, f"no blob: iframe answered in {seconds} s"
            time.sleep(0.25)

    def screenshot(self) -> np.ndarray:
        """The viewport as an RGB array (height x width x 3)."""
        data = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        return np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(int)

    def wait_for(self, painted: Callable[[np.ndarray], bool], seconds: float = 40) -> np.ndarray:
        """Poll real screenshots until ``painted(pixels)``; the last screenshot when time runs out."""
        deadline = time.monotonic() + seconds
        while True:
            pixels = self.screenshot()
            if painted(pixels) or time.monotonic() > deadline:
                return pixels
            time.sleep(0.3)

    def wheel(self, x: int, y: int, delta: int) -> None:
        """Scroll ``delta`` pixels down at (x, y): into whatever frame is under the pointer."""
        self.call("Input.dispatchMouseEvent", type="mouseWheel", x=x, y=y, deltaX=0, deltaY=delta)

    def save(self, pixels: np.ndarray, path: Path) -> None:
        Image.fromarray(pixels.astype("uint8")).save(path)


def ink(pixels: np.ndarray) -> float:
    """Share of pixels that are not (near) white: text, tables and plots; 0 for a blank frame."""
    return float((np.abs(pixels - 255).sum(axis=-1) > 60).mean())


def has_colour(pixels: np.ndarray, rgb: tuple[int, int, int], tolerance: int = 40, least: int = 50) -> bool:
    """Whether at least ``least`` pixels are within ``tolerance`` of ``rgb``."""
    return int((np.abs(pixels - np.array(rgb)).sum(axis=-1) < tolerance).sum()) >= least
