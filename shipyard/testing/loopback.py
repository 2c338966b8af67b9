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

import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackServer:
    """``handler`` served on 127.0.0.1 from a daemon thread between :meth:`start` and :meth:`stop`
    (or the ``with`` block, which gives the server itself)."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], *, tls: tuple[str, str] | None = None) -> None:
        """``tls``: (certificate PEM file, key PEM file): serve HTTPS with them (the handshake runs in
        the request's thread, so a client that fails it does not hold the server)."""
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.scheme = "https" if tls else "http"
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True,
                                                    do_handshake_on_connect=False)
            self.httpd.handle_error = self._handshake_error  # type: ignore[method-assign]
        self._thread: threading.Thread | None = None

    def _handshake_error(self, request: object, client_address: object) -> None:
        """A client that refused the certificate (what a TLS test expects) is no server error."""
        import sys

        if not isinstance(sys.exc_info()[1], ssl.SSLError | ConnectionError):
            ThreadingHTTPServer.handle_error(self.httpd, request, client_address)  # type: ignore[arg-type]

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT`` (a registry's address, no scheme)."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (``https://`` with ``tls``)."""
        return f"{self.scheme}://{self.address}"

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
