"""A test's web server: a ``ThreadingHTTPServer`` on 127.0.0.1 (a free port) serving one handler
class from a daemon thread, shut down and closed after.

The one way the tests and doubles start a web server of their own (a fake ``/metrics``, a proxy
that injects faults, the Kubernetes and KFP API doubles)::

    with LoopbackServer(Handler) as server:
        requests.get(server.url + "/metrics")

or ``start()`` and ``stop()`` where the server lives longer than one block. The port is bound when
the object is made, so ``url`` and ``address`` are known before the server starts.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackServer:
    """``handler`` served on 127.0.0.1 from a daemon thread between :meth:`start` and :meth:`stop`
    (or the ``with`` block, which gives the server itself)."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT`` (a registry's address, no scheme)."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{self.address}"

    def start(self) -> LoopbackServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (when started: ``shutdown`` waits for the serving loop) and close the socket."""
        if self._thread is not None:
            self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
