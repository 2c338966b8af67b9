"""The test session's ``mlflow server`` (sqlite backend, proxied artifacts) on 127.0.0.1.

:func:`shared_server` starts one :class:`shipyard.testing.services.MlflowServer` (the server the
container rehearsal uses too) however many modules ask for it, and stops it when the session ends.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from shipyard.core.net import free_port  # noqa: F401 - re-exported for the tests
from shipyard.testing.services import MlflowServer

_SERVER: MlflowServer | None = None


def _stop(server: MlflowServer) -> None:
    server.__exit__(None, None, None)
    shutil.rmtree(server.root, ignore_errors=True)


def shared_server() -> MlflowServer:
    """The session's server, started on first use (and again if it died)."""
    global _SERVER
    if _SERVER is None or _SERVER.proc is None or _SERVER.proc.poll() is not None:
        _SERVER = MlflowServer(Path(tempfile.mkdtemp(prefix="shipyard-mlflow-"))).__enter__()
        atexit.register(_stop, _SERVER)
    return _SERVER
