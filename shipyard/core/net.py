"""The one free-port picker and the one ready-poll, for every server shipyard starts on loopback.

:func:`free_port` asks the OS for a port nobody listens on; :func:`wait_ready` polls a
``ready()`` check until it holds, failing with one :class:`~shipyard.core.errors.ShipyardError`
line when the process dies first (``alive`` raises) or the time is up. :func:`http_ok` is the
usual check (a GET that answers with an accepted status). :func:`http_request` is one HTTP(S)
request with an overall deadline: from connecting to the answer's last byte, however slowly a
server sends it (a socket timeout alone bounds each read, so a server that sends a byte a second
would hold it forever).
"""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from shipyard.core.errors import ShipyardError, UnreachableError

HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    """A TCP port nobody listens on right now on ``host`` (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_free(port: int, host: str = HOST, *, reuse_addr: bool = True) -> bool:
    """Whether ``port`` on ``host`` can be bound now. With ``reuse_addr`` (``SO_REUSEADDR``, as most
    servers bind) the closed connections of a server that just stopped (TIME_WAIT) do not count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if reuse_addr:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def http_ok(url: str, *, timeout_s: float = 2.0, statuses: tuple[int, ...] = (200,)) -> bool:
    """Whether a GET of ``url`` answers with one of ``statuses`` (False when it cannot connect)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - loopback servers we started
            return resp.status in statuses
    except urllib.error.HTTPError as err:
        return err.code in statuses
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def process_alive(what: str, proc: subprocess.Popen[bytes] | None, log: Path | None) -> Callable[[], None]:
    """An ``alive`` check for :func:`wait_ready`: fails with the log's tail once ``proc`` has exited."""

    def alive() -> None:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-1500:] if log and log.exists() else ""
            raise ShipyardError(what, f"exited with status {proc.returncode}: {tail.strip()[-400:]}", f"see {log}")

    return alive


def wait_ready(what: str, ready: Callable[[], bool], *, timeout_s: float, interval_s: float = 0.2,
               alive: Callable[[], None] | None = None, started: float | None = None,
               timeout_error: Callable[[], ShipyardError] | None = None, log: Path | None = None) -> None:
    """Poll ``ready()`` every ``interval_s`` until it is true.

    Before each poll ``alive()`` (when given) may raise to stop early (the process died). An
    ``OSError`` from ``ready()`` counts as not ready yet. After ``timeout_s`` (counted from
    ``started``, a ``time.monotonic()`` value, default now) the error is ``timeout_error()``, or
    ``<what>: not ready within N s``.
    """
    deadline = (started if started is not None else time.monotonic()) + timeout_s
    while True:
        if alive is not None:
            alive()
        try:
            if ready():
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            if timeout_error is not None:
                raise timeout_error()
            raise ShipyardError(what, f"not ready within {timeout_s:.0f} s", f"see {log}" if log else "check the service")
        time.sleep(interval_s)


def unreachable(field: str, url: str, err: BaseException, timeout: float) -> UnreachableError:
    """One line (exit 3) for an HTTP request that got no answer: a timeout, a refused or unknown
    host, a broken connection. ``err``: the TimeoutError, URLError or OSError that ``urlopen`` raised."""
    reason = err.reason if isinstance(err, urllib.error.URLError) else err
    if isinstance(reason, TimeoutError | socket.timeout):
        return UnreachableError(field, f"{url} did not answer within {timeout:g} s (timeout)",
                                "check the service's health, or raise the timeout")
    what = reason if isinstance(err, urllib.error.URLError) else type(err).__name__
    return UnreachableError(field, f"{url} is unreachable ({what})", "check the URL, the port and that the service is up")


class _Deadline:
    """Shuts the request's connection down when the deadline passes: a read or write blocked on it
    ends at once, however slowly the server was sending."""

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def connection(self, cls: type[http.client.HTTPConnection]) -> type[http.client.HTTPConnection]:
        """``cls`` keeping its socket for the deadline (``urllib`` lets go of the connection's once
        the headers are in; the answer's body is read from the same socket)."""
        deadline = self

        class Watched(cls):  # type: ignore[valid-type, misc]
            def connect(self) -> None:
                super().connect()
                deadline._watch(self.sock)

        return Watched

    def _watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            expired = self.expired
        if expired:
            self._shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sock = self._sock
        if sock is not None:
            self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


def http_request(url: str, *, deadline_s: float, data: bytes | None = None, headers: Mapping[str, str] | None = None,
                 method: str | None = None, context: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    """One HTTP(S) request that ends within ``deadline_s`` seconds in all (connecting, sending, the
    status line, the headers and the body; a name lookup is the system resolver's): ``(status,
    body)``, an HTTP error status with its body too. Past the deadline: :class:`TimeoutError`; no
    connection: ``urllib.error.URLError`` or another ``OSError`` (:func:`unreachable` words both)."""
    deadline = _Deadline(deadline_s)

    class Http(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(deadline.connection(http.client.HTTPConnection), req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(deadline.connection(http.client.HTTPSConnection), req, context=self._context)

    opener = urllib.request.build_opener(Http, Https(context=context))
    request = urllib.request.Request(url, data=data, headers=dict(headers or {}), method=method)
    try:
        with deadline:
            try:
                with opener.open(request, timeout=deadline_s) as resp:
                    status, body = resp.status, resp.read()
            except urllib.error.HTTPError as err:
                status, body = err.code, err.read()
            if deadline.expired:
                raise TimeoutError(f"no whole answer within {deadline_s:g} s")
            return status, body
    except (OSError, http.client.HTTPException) as err:
        if deadline.expired:
            raise TimeoutError(f"no whole answer within {deadline_s:g} s") from None
        if isinstance(err, OSError):
            raise
        raise ConnectionError(f"{type(err).__name__}: {err}") from None
