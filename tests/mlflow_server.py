"""A real ``mlflow server`` (sqlite backend, proxied artifacts) on 127.0.0.1 for the tests.

Started once per test session however many modules ask for it (:func:`shared_server`), and
stopped when the session ends.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path


@dataclass
class MlflowServer:
    url: str
    root: Path
    proc: subprocess.Popen

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(timeout_s: float = 120) -> MlflowServer:
    """Start ``mlflow server`` and wait until ``/health`` answers."""
    mlflow_bin = Path(sys.executable).with_name("mlflow")
    root = Path(tempfile.mkdtemp(prefix="shipyard-mlflow-"))
    port = free_port()
    log = open(root / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(
        [
            str(mlflow_bin), "server",
            "--backend-store-uri", f"sqlite:///{root}/mlflow.db",
            "--artifacts-destination", str(root / "artifacts"),
            "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
        ],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=root,
        env=dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false"),
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited: {(root / 'server.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return MlflowServer(url, root, proc)
        except OSError:
            time.sleep(0.5)
    server = MlflowServer(url, root, proc)
    server.stop()
    raise RuntimeError(f"mlflow server did not answer within {timeout_s} s")


_SERVER: MlflowServer | None = None


def shared_server() -> MlflowServer:
    """The session's server, started on first use."""
    global _SERVER
    if _SERVER is None or _SERVER.proc.poll() is not None:
        _SERVER = start_server()
        atexit.register(_SERVER.stop)
    return _SERVER
