"""The one free-port picker and the one ready-poll, for every server shipyard starts on loopback.

:func:`free_port` asks the OS for a port nobody listens on; :func:`wait_ready` polls a
``ready()`` check until it holds, failing with one :class:`~shipyard.core.errors.ShipyardError`
line when the process dies first (``alive`` raises) or the time is up. :func:`http_ok` is the
usual check (a GET that answers with an accepted status). :func:`http_request` is one HTTP(S)
request with an overall deadline: from the name lookup, connecting and the TLS handshake to the
answer's last byte, however slowly a server sends it (a socket timeout alone bounds each read, so
a server that sends a byte a second would hold it forever), and an answer no larger than
:data:`MAX_ANSWER_BYTES` (a bigger one is refused before it is read whole). :func:`call_within`
gives the same overall deadline to a client library's call (KFP, MLflow, minio, Kubernetes,
requests), its own retries included; :func:`transfer_deadline` grows a deadline with the bytes moved.

A call's scope covers the threads it starts too (a library that downloads in a pool of its own:
``datasets.load_dataset``, s3transfer, huggingface_hub's parallel files): once any call has run,
``threading.Thread.start`` is wrapped process-wide (with the audit hook, once), and a thread
started while a scope is current runs with that scope, its sockets shut at the deadline like the
call's own. A thread started outside any scope runs exactly as before (the wrapper only reads a
thread-local). Python code only: a library's native threads stay unseen (hf_xet's Rust runtime: shipyard's Hub
calls go over plain HTTP instead, :func:`shipyard.models.hub.plain_http`).
"""

from __future__ import annotations

import contextvars
import http.client
import ipaddress
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from shipyard.core.errors import ShipyardError, UnreachableError

HOST = "127.0.0.1"
T = TypeVar("T")


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
    """Whether a GET of ``url`` answers with one of ``statuses`` within ``timeout_s`` in all
    (:func:`http_request`; False when it cannot connect, is too slow or answers too much)."""
    try:
        status, _ = http_request(url, deadline_s=timeout_s)
    except (OSError, ValueError, ShipyardError):
        return False
    return status in statuses


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
    if isinstance(reason, ssl.SSLCertVerificationError):
        return UnreachableError(field, f"{url}: its TLS certificate is not trusted "
                                f"({reason.verify_message or reason.reason})",
                                "give the CA bundle that signed it (ca_bundle), or skip the check for a test "
                                "service only (insecure_tls)")
    if isinstance(reason, TimeoutError | socket.timeout):
        return UnreachableError(field, f"{url} did not answer within {timeout:g} s (timeout)",
                                "check the service's health, or raise the timeout")
    what = reason if isinstance(err, urllib.error.URLError) else type(err).__name__
    return UnreachableError(field, f"{url} is unreachable ({what})", "check the URL, the port and that the service is up")


#: the most bytes :func:`http_request` takes as an answer's body by default (JSON answers, a /metrics page)
MAX_ANSWER_BYTES = 8 * 1024 * 1024


class _Deadline:
    """Ends the request when the deadline passes, wherever it waits: the name lookup (run aside,
    given up on at the deadline), connecting, the TLS handshake, sending and every read (the
    connection is shut down: a call blocked on it ends at once, however slowly the server sent)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._end = time.monotonic() + seconds
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def remaining(self) -> float:
        """Seconds left (0 once past the deadline)."""
        return max(0.0, self._end - time.monotonic())

    def _timeout(self) -> TimeoutError:
        self.expired = True
        return TimeoutError(f"no whole answer within {self.seconds:g} s")

    def resolve(self, host: str, port: int) -> list[tuple[int, int, int, str, tuple[object, ...]]]:
        """``getaddrinfo`` within the time left: the system resolver has no timeout of its own
        (a dead DNS server holds it for its retries), so it runs in a daemon thread given up on
        at the deadline."""
        try:
            ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            pass
        else:  # a literal address: nothing to look up
            return socket.getaddrinfo(host.strip("[]"), port, 0, socket.SOCK_STREAM)
        outcome: dict[str, object] = {}

        def lookup() -> None:
            try:
                outcome["infos"] = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
            except OSError as err:
                outcome["error"] = err

        thread = threading.Thread(target=lookup, name="shipyard-resolve", daemon=True)
        thread.start()
        thread.join(self.remaining())
        if thread.is_alive():
            raise self._timeout()
        if "error" in outcome:
            raise outcome["error"]  # type: ignore[misc]
        return outcome["infos"]  # type: ignore[return-value]

    def create_connection(self, address: tuple[str, int], timeout: object = None,
                          source_address: tuple[str, int] | None = None, *args: object) -> socket.socket:
        """``socket.create_connection`` with the lookup and each connect inside the deadline
        (the socket is watched before it connects: the deadline's shutdown aborts the connect)."""
        host, port = address
        error: OSError | None = None
        for family, kind, proto, _, where in self.resolve(host, port):
            sock = socket.socket(family, kind, proto)
            try:
                self._watch(sock)
                sock.settimeout(self.remaining() or 0.001)
                if source_address:
                    sock.bind(source_address)
                sock.connect(where)
                return sock
            except OSError as err:
                sock.close()
                if self.expired:
                    raise self._timeout() from None
                error = err
        raise error if error is not None else OSError(f"getaddrinfo gave no address for {host}")

    def connection(self, cls: type[http.client.HTTPConnection]) -> type[http.client.HTTPConnection]:
        """``cls`` connecting through :meth:`create_connection`, its TLS handshake watched too, and
        keeping its socket for the deadline (``urllib`` lets go of the connection's once the
        headers are in; the answer's body is read from the same socket)."""
        deadline = self

        class Watched(cls):  # type: ignore[valid-type, misc]
            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, **kwargs)
                self._create_connection = deadline.create_connection

            def connect(self) -> None:
                if not isinstance(self, http.client.HTTPSConnection):
                    super().connect()
                    return
                http.client.HTTPConnection.connect(self)  # TCP (and a proxy's tunnel); then TLS, watched
                hostname = self._tunnel_host or self.host
                self.sock = self._context.wrap_socket(self.sock, server_hostname=hostname,
                                                      do_handshake_on_connect=False)
                deadline._watch(self.sock)
                self.sock.do_handshake()

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
        try:  # the plain socket's shutdown (an SSLSocket's own would drop its TLS state under a reader)
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:
            pass

    def __enter__(self) -> _Deadline:
        self._end = time.monotonic() + self.seconds
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


def _capped(resp: http.client.HTTPResponse, url: str, max_bytes: int, field: str) -> bytes:
    """The answer's body, refused once it is larger than ``max_bytes`` (by its Content-Length
    before reading, else after reading one byte more than the cap: never more than that in memory)."""
    def too_large(size: str) -> ShipyardError:
        return ShipyardError(field, f"{url} answered {size}, more than the {_size(max_bytes)} an answer may be",
                             "check that the URL points at the service (not a download), or ask for less")

    length = (resp.headers.get("Content-Length") or "").strip()
    if length.isdigit() and int(length) > max_bytes:
        raise too_large(f"{_size(int(length))} (Content-Length)")
    body = resp.read(max_bytes + 1)
    if len(body) > max_bytes:
        raise too_large(f"more than {_size(max_bytes)}")
    return body


def _size(count: int) -> str:
    return f"{count / 1024 / 1024:.1f} MiB" if count >= 1024 * 1024 else f"{count} bytes"


def http_request(url: str, *, deadline_s: float, data: bytes | None = None, headers: Mapping[str, str] | None = None,
                 method: str | None = None, context: ssl.SSLContext | None = None,
                 max_bytes: int = MAX_ANSWER_BYTES, field: str = "url",
                 response_headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One HTTP(S) request that ends within ``deadline_s`` seconds in all (the name lookup,
    connecting, the TLS handshake, sending, the status line, the headers and the body): ``(status,
    body)``, an HTTP error status with its body too. Past the deadline: :class:`TimeoutError`; no
    connection: ``urllib.error.URLError`` or another ``OSError`` (:func:`unreachable` words both).
    A body larger than ``max_bytes`` is a :class:`ShipyardError` naming ``field``, refused without
    reading more than ``max_bytes + 1`` bytes of it. ``response_headers``, when given, is filled
    with the answer's headers (``Content-Type``...)."""
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
                    answer: http.client.HTTPResponse = resp
                    status, body = resp.status, _capped(resp, url, max_bytes, field)
            except urllib.error.HTTPError as err:
                with err:
                    answer = err  # type: ignore[assignment]
                    status, body = err.code, _capped(err, url, max_bytes, field)  # type: ignore[arg-type]
            if response_headers is not None:
                response_headers.update(answer.headers.items())
            if deadline.expired:
                raise TimeoutError(f"no whole answer within {deadline_s:g} s")
            return status, body
    except (OSError, http.client.HTTPException) as err:
        if deadline.expired or deadline.remaining() <= 0:  # the timer, or a socket timeout at the deadline
            raise TimeoutError(f"no whole answer within {deadline_s:g} s") from None
        if isinstance(err, OSError):
            raise
        raise ConnectionError(f"{type(err).__name__}: {err}") from None


# --------------------------------------------------------------------------- a client library's call within a deadline

#: the slowest transfer a streamed body is given time for (bytes/s): :func:`transfer_deadline`
TRANSFER_FLOOR_BYTES_PER_S = 256 * 1024
#: how long a call past its deadline has to unwind once its sockets are shut, before it is left behind
UNWIND_S = 0.5


def transfer_deadline(base_s: float, size: int | None) -> float:
    """The deadline of a request that moves ``size`` bytes: ``base_s`` plus the bytes at
    :data:`TRANSFER_FLOOR_BYTES_PER_S` (256 KiB/s), so a big blob is given time for its bytes."""
    return base_s + max(int(size or 0), 0) / TRANSFER_FLOOR_BYTES_PER_S


class DeadlinePassed(Exception):
    """Raised in a call past its deadline when it makes a socket or connects again (no OSError:
    a library's retry loop does not catch it), so its retries end at once."""


class _Scope:
    """The sockets one :func:`call_within` call made (seen through the ``socket.__new__`` audit
    event, TLS-wrapped ones included), in its own thread and in the threads it started (see
    :func:`_start`), with those of its owner's earlier calls (a client's pooled connections, which
    a later call reuses): shut down at the deadline, so whatever waits on them ends.

    A call that ends in time closes its scope (:meth:`finish`): a pool worker it started and a
    later call reuses is then unwatched again, as if started outside. A call past its deadline
    leaves its scope expired for good: a worker it started goes on refusing sockets
    (:class:`DeadlinePassed`), so a pool kept past such a call fails its later work at once
    rather than wait (shipyard's own pools live for one call). A worker started before the call
    (a pool made outside it) is not in the scope."""

    def __init__(self, owner: object | None) -> None:
        self.expired = False
        self.finished = False
        self._lock = threading.Lock()
        if owner is None:
            self._socks: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        else:
            with _owned_lock:
                self._socks = _owned.setdefault(owner, weakref.WeakSet())

    def saw(self, event: str, args: tuple[object, ...]) -> None:
        with self._lock:
            if self.finished:  # a thread the call started, outliving a call that ended in time
                return
            if self.expired:
                raise DeadlinePassed(f"{event} past the deadline")
        if event == "socket.__new__" and isinstance(args[0], socket.socket):
            with _owned_lock:
                self._socks.add(args[0])

    def finish(self) -> None:
        """The call ended: in time, its threads are free of the scope; past its deadline, not."""
        with self._lock:
            if not self.expired:
                self.finished = True

    def expire(self) -> None:
        with self._lock:
            if self.finished:
                return
            self.expired = True
        with _owned_lock:
            socks = list(self._socks)
        for sock in socks:
            if sock.fileno() != -1:  # a socket handed to TLS is detached (-1): its SSLSocket is in the set
                _Deadline._shut(sock)


_scope = threading.local()
#: the sockets each owner's calls made (weakly: a client that goes takes its entry with it)
_owned: weakref.WeakKeyDictionary[object, weakref.WeakSet[socket.socket]] = weakref.WeakKeyDictionary()
_owned_lock = threading.Lock()
_hook_lock = threading.Lock()
_hooked = False
_WATCHED_EVENTS = frozenset({"socket.__new__", "socket.connect", "socket.getaddrinfo"})


def _audit(event: str, args: tuple[object, ...]) -> None:
    if event in _WATCHED_EVENTS:
        scope = getattr(_scope, "current", None)
        if scope is not None:
            scope.saw(event, args)


_thread_start = threading.Thread.start


def _start(self: threading.Thread) -> None:
    """``threading.Thread.start`` that hands the starting thread's scope, when it has one, to the
    new thread (for its whole run: a pool worker keeps it across tasks, see :class:`_Scope`)."""
    scope = getattr(_scope, "current", None)
    if scope is not None:
        run = self.run

        def run_in_scope() -> None:
            _scope.current = scope
            try:
                run()
            finally:
                _scope.current = None

        self.run = run_in_scope  # type: ignore[method-assign]
    _thread_start(self)


def _install_hook() -> None:
    global _hooked
    with _hook_lock:
        if not _hooked:
            sys.addaudithook(_audit)  # once per process; it only looks at socket events in a watched call
            threading.Thread.start = _start  # type: ignore[method-assign]  # threads started in a call join its scope
            _hooked = True


def call_within(deadline_s: float, fn: Callable[..., T], /, *args: Any, on_timeout: Callable[[], BaseException],
                owner: object | None = None, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` (a client library's call: KFP, MLflow, minio, Kubernetes, requests)
    ended at ``deadline_s`` seconds in all, however it waits: a name lookup, connecting, TLS,
    a server that sends a byte every few seconds (a per-read timeout never fires), the library's
    own retries and their back-off.

    The call runs in a thread of its own (with the caller's context variables); at the deadline
    the sockets it made, and those of the threads it started (a library's download pool), are
    shut down (whatever blocks on them ends), any socket it or they make or connect after that
    raises :class:`DeadlinePassed`, and the caller gets ``on_timeout()``
    (one line naming the setting that gave the deadline) at once: a call stuck where no socket
    reaches (the system resolver) is left behind in its daemon thread. Its value or exception
    otherwise, as if called directly. ``owner`` (the client object, weakly held): the sockets its
    earlier calls made are shut at the deadline too, as a pooled connection they left is reused."""
    _install_hook()
    scope = _Scope(owner)
    done = threading.Event()
    outcome: dict[str, Any] = {}
    context = contextvars.copy_context()

    def work() -> None:
        _scope.current = scope
        try:
            outcome["value"] = context.run(fn, *args, **kwargs)
        except BaseException as err:  # handed to the caller as it is
            outcome["error"] = err
        finally:
            _scope.current = None
            scope.finish()
            done.set()

    worker = threading.Thread(target=work, name="shipyard-call-within", daemon=True)
    worker.start()
    try:
        finished = done.wait(max(deadline_s, 0.0))
    except BaseException:  # Ctrl-C or a stop signal while waiting: the call ends with it
        scope.expire()
        raise
    if not finished:
        scope.expire()
        done.wait(UNWIND_S)
        raise on_timeout()
    if "error" in outcome:
        error: BaseException = outcome["error"]
        raise error
    return outcome["value"]  # type: ignore[no-any-return]
