"""Round 2 of the reliability work (issue 20): services that misbehave, closed pipes and
descriptors, the debug switch, log redaction, corrupt pending payloads, duplicate manifest keys.

Servers run for real on 127.0.0.1: a port that accepts and never answers, an auth proxy's login
page (200 HTML to every path) and a wrong service (404). Each command must end in one line
within a bound and with the README's exit code (3 for a service that does not answer).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shipyard.core.errors import ShipyardError, header_value
from shipyard.testing.loopback import LoopbackServer

SECRET = "hunter2pw"
DIGEST = "sha256:" + "a" * 64


def _cli(cwd: Path, *argv: str, env: dict[str, str] | None = None, **kwargs: object) -> tuple[subprocess.CompletedProcess[str], float]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("KF_PIPELINES_")}
    full.update(HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore", SHIPYARD_DEBUG="1", **(env or {}))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "shipyard.cli.main", *argv], cwd=cwd, env=full, text=True,
                          timeout=120, check=False, **kwargs)  # type: ignore[call-overload]
    return proc, time.monotonic() - started


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1, stderr
    assert lines[0].startswith("shipyard: error: "), lines[0]
    return lines[0]


@contextlib.contextmanager
def _black_hole() -> Iterator[str]:
    """A port that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        server.close()


@contextlib.contextmanager
def _web(status: int, body: bytes, content_type: str) -> Iterator[str]:
    """A web server that answers every path with the same page."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer  # noqa: N815 - http.server's names

        def log_message(self, *args: object) -> None:
            pass

    with LoopbackServer(Handler) as server:
        yield server.url


@contextlib.contextmanager
def _slow_drip(where: str) -> Iterator[str]:
    """A web server that sends one byte a second forever: after whole headers (``body``: a long
    Content-Length it never reaches) or from the status line on (``headers``). Each byte resets a
    per-read socket timeout, so only an overall deadline ends a request to it."""
    stop = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _drip(self) -> None:
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"
            if where == "body":
                self.wfile.write(head)
            first = head if where == "headers" else b'{"data": [' + b" " * 1000000
            with contextlib.suppress(OSError):
                for byte in first:
                    if stop.is_set():
                        return
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    stop.wait(1.0)

        do_GET = do_POST = do_HEAD = _drip  # noqa: N815 - http.server's names

        def log_message(self, *args: object) -> None:
            pass

    try:
        with LoopbackServer(Handler) as server:
            yield server.url
    finally:
        stop.set()


# --------------------------------------------------------------------------- misbehaving services


def test_runs_against_a_port_that_never_answers_is_exit_3_within_seconds(tmp_path: Path) -> None:
    with _black_hole() as url:
        proc, seconds = _cli(tmp_path, "runs", "--host", url, capture_output=True)
    line = _one_line(proc.stderr)
    assert proc.returncode == 3 and "--host: cannot reach" in line and "no answer" in line, line
    assert seconds < 25, f"runs held {seconds:.0f} s"


@pytest.mark.parametrize("where", ["body", "headers"])
def test_verify_against_a_slow_drip_server_ends_at_its_deadline(tmp_path: Path, where: str) -> None:
    """``--timeout`` is each request's deadline in all: a byte a second (each read well within the
    socket timeout) held ``shipyard verify`` forever; it ends within the deadline, exit 3."""
    (tmp_path / "golden.json").write_text(json.dumps({"schema": "shipyard.golden/v1",
                                                      "answers": [{"prompt": "p", "text": "t"}]}))
    with _slow_drip(where) as url:
        proc, seconds = _cli(tmp_path, "verify", "--url", url, "--served-model-name", "llm", "--candidate",
                             "golden.json", "--timeout", "3", capture_output=True)
    line = _one_line(proc.stderr)
    assert proc.returncode == 3 and "/v1/models did not answer within 3 s" in line, (proc.returncode, line)
    assert seconds < 15, f"verify held {seconds:.0f} s against a 3 s deadline"


@pytest.mark.parametrize("where", ["body", "headers"])
def test_every_verification_request_has_an_overall_deadline(where: str) -> None:
    """The requests verification makes (GET /v1/models and /metrics, the golden prompts' POSTs)
    and the one helper under them end within their deadline against a slow-drip server."""
    from shipyard.core.net import http_request
    from shipyard.evaluation.golden import complete
    from shipyard.steps.verify import scrape, served_models

    with _slow_drip(where) as url:
        for call in (lambda: http_request(url, deadline_s=1.5), lambda: served_models(url, timeout=1.5),
                     lambda: complete(url + "/v1", "llm", "p", timeout=1.5),
                     lambda: scrape(url + "/metrics", timeout=1.5)):
            outcome: dict[str, object] = {}

            def run(call: Callable[[], object] = call, outcome: dict[str, object] = outcome) -> None:
                try:
                    outcome["value"] = call()
                except (TimeoutError, ShipyardError) as err:
                    outcome["error"] = err

            waiting = threading.Thread(target=run, daemon=True)  # a request without a deadline never returns
            waiting.start()
            waiting.join(3.0)
            assert not waiting.is_alive(), "still waiting 3 s into a 1.5 s deadline"
            assert "within 1.5 s" in str(outcome["error"]) if "error" in outcome else outcome["value"] is None


def _ends_within(call: Callable[[], object], deadline_s: float, wait_s: float) -> object:
    """``call()``'s value or error, failing the test when it is still running ``wait_s`` in."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except (OSError, ShipyardError) as err:
            outcome["error"] = err

    waiting = threading.Thread(target=run, daemon=True)  # a request without a deadline never returns
    waiting.start()
    waiting.join(wait_s)
    assert not waiting.is_alive(), f"still waiting {wait_s:g} s into a {deadline_s:g} s deadline"
    return outcome.get("error", outcome.get("value"))


@pytest.mark.parametrize("where", ["body", "headers"])
def test_prometheus_calls_have_an_overall_deadline(where: str) -> None:
    """``shipyard watch`` and the Prometheus workload reader (:class:`PrometheusAPI`) timed out per
    read: a Prometheus (or a proxy before it) that sends a byte a second held them without end."""
    from shipyard.serving.prometheus import PrometheusAPI

    with _slow_drip(where) as url:
        got = _ends_within(lambda: PrometheusAPI(url, timeout_s=1.5).instant("up"), 1.5, 4.0)
    assert isinstance(got, ShipyardError) and got.exit_code == 3 and "did not answer within 1.5 s" in str(got), got


@pytest.mark.parametrize("where", ["body", "headers"])
def test_shipyard_checks_http_calls_have_an_overall_deadline(where: str) -> None:
    """``shipyard check``'s MLflow API and artifact checks, registry check and KFP healthz timed
    out per read: a service that sends a byte a second held each without end. Each is a failed
    check line within its deadline."""
    from shipyard.run.check import kfp_healthz
    from shipyard.serving import cluster_check as cc

    with _slow_drip(where) as url:
        calls: list[Callable[[], object]] = [
            lambda: cc.mlflow_api_check(url, timeout_s=1.5),
            lambda: cc.mlflow_artifact_check(url, timeout_s=1.5),
            lambda: cc.registry_check(url.removeprefix("http://"), None, insecure=True, timeout_s=1.5),
            lambda: kfp_healthz(url, timeout_s=1.5),
        ]
        for call in calls:
            check = _ends_within(call, 1.5, 6.0)
            assert isinstance(check, cc.Check) and check.status == cc.FAIL, check


@pytest.mark.parametrize("where", ["body", "headers"])
def test_mlflow_rest_calls_and_the_health_probe_have_an_overall_deadline(where: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A step's REST logging to MLflow (:class:`RestLogger`) and the tracker's ``/health`` probe
    timed out per read: an MLflow (or a proxy before it) that sends a byte a second held them
    without end. Each ends within its deadline (``MLFLOW_HTTP_REQUEST_TIMEOUT``, the probe's)."""
    from shipyard.tracking.tracker import RestLogger, Tracker

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1.5")
    with _slow_drip(where) as url:
        got = _ends_within(lambda: RestLogger(Tracker(url, attempts=1)).get_run("r1"), 1.5, 5.0)
        assert isinstance(got, ShipyardError) and got.exit_code == 3 and "within 1.5 s" in str(got), got
        got = _ends_within(lambda: Tracker(url, attempts=1).probe(timeout_s=1.5), 1.5, 5.0)
        assert isinstance(got, str) and "within 1.5 s" in got, got


@pytest.mark.parametrize("where", ["body", "headers"])
def test_vllm_metrics_reads_have_an_overall_deadline(where: str) -> None:
    """The benchmark's ``/metrics`` reads (the sampler beside each load level, the replay's
    before/after) timed out per read: a server that sends a byte a second held them without end."""
    from shipyard.benchmarking.server_metrics import MetricsSampler
    from shipyard.benchmarking.workload_replay import metrics_text

    with _slow_drip(where) as url:
        got = _ends_within(lambda: metrics_text(url, timeout=1.5), 1.5, 5.0)
        assert isinstance(got, ShipyardError) and "within 1.5 s" in str(got), got
        sampler = MetricsSampler(url, timeout_s=1.5)
        _ends_within(sampler._read, 1.5, 5.0)
        assert sampler.failed == 1 and not sampler.reads


@pytest.mark.parametrize("where", ["body", "headers"])
def test_the_ready_check_has_an_overall_deadline(where: str) -> None:
    """``http_ok`` (every ready-poll, vLLM's ``/health``) timed out per read: a server that sends
    its headers a byte a second held it without end. It is False within its timeout."""
    from shipyard.core.net import http_ok

    with _slow_drip(where) as url:
        assert _ends_within(lambda: http_ok(url + "/health", timeout_s=1.5), 1.5, 5.0) is False


@pytest.mark.parametrize("where", ["body", "headers"])
def test_the_benchmark_warm_up_has_an_overall_deadline(where: str) -> None:
    """The benchmark's warm-up completions timed out per read (``request_timeout``): a server that
    sends a byte a second held the step before its first level."""
    from shipyard.benchmarking.guidellm import warm_up_server
    from shipyard.steps.verify import RemoteService

    with _slow_drip(where) as url:
        _ends_within(lambda: warm_up_server(RemoteService(url, "llm"), {"request_timeout": 1.5}, 1), 1.5, 5.0)


def test_the_torch_wheel_index_probe_has_an_overall_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """``shipyard setup`` and image builds ask whether PyTorch's CPU wheel page answers "within a few
    seconds": a page (or a proxy) sending its headers a byte a second held them without end."""
    from shipyard.runtimes import images

    with _slow_drip("headers") as url:
        monkeypatch.setattr(images, "TORCH_CPU_LINKS", url + "/whl/cpu")
        images.torch_cpu_links.cache_clear()
        try:
            assert _ends_within(images.torch_cpu_links, 5.0, 9.0) == []
        finally:
            images.torch_cpu_links.cache_clear()


def test_a_large_artifact_upload_gets_time_for_its_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The REST logger's deadline covers the upload too, so it grows with the payload
    (``UPLOAD_FLOOR_BYTES_PER_S``): a 2 MB artifact to a server reading ~0.6 MB/s takes ~3 s
    and must not fail against a 1 s request timeout."""
    from shipyard.tracking.tracker import UPLOAD_FLOOR_BYTES_PER_S, RestLogger, Tracker

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_PUT(self) -> None:  # noqa: N802 - http.server's name
            left = int(self.headers["Content-Length"])
            while left:
                left -= len(self.rfile.read(min(left, 65536)))
                time.sleep(0.1)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")
    payload = b"x" * 2_000_000
    assert 1 + len(payload) / UPLOAD_FLOOR_BYTES_PER_S > 6  # the deadline this upload gets
    with LoopbackServer(Handler) as server:
        started = time.monotonic()
        logger = RestLogger(Tracker(server.url, attempts=1))
        assert logger.call("upload an artifact", "PUT", "/api/2.0/mlflow-artifacts/artifacts/x", data=payload,
                           headers={"Content-Type": "application/octet-stream"}) == {}
        assert time.monotonic() - started > 1.5  # slower than the request timeout alone allows


@contextlib.contextmanager
def _huge_answer(declared: bool) -> Iterator[tuple[str, list[int]]]:
    """A web server whose answer never ends: 64 KiB chunks of JSON-ish padding until the client
    hangs up, after a Content-Length of 1 GiB (``declared``) or none (the body ends at close).
    Yields its URL and the bytes it managed to send."""
    sent = [0]
    stop = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _flood(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if declared:
                self.send_header("Content-Length", str(1 << 30))
            else:
                self.send_header("Connection", "close")
            self.end_headers()
            chunk = b" " * 65536
            with contextlib.suppress(OSError):
                while not stop.is_set():
                    self.wfile.write(chunk)
                    sent[0] += len(chunk)

        do_GET = do_POST = _flood  # noqa: N815 - http.server's names

        def log_message(self, *args: object) -> None:
            pass

    try:
        with LoopbackServer(Handler) as server:
            yield server.url, sent
    finally:
        stop.set()


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "until-close"])
def test_an_answer_larger_than_the_cap_is_refused_without_reading_it_all(declared: bool) -> None:
    """An answer with no end (a download, a misrouted URL) was read whole into memory until the
    deadline; ``http_request`` refuses it past ``max_bytes`` with one line naming the field, at
    once when the Content-Length says so, else after reading one byte more than the cap."""
    from shipyard.core.net import MAX_ANSWER_BYTES, http_request

    with _huge_answer(declared) as (url, sent):
        started = time.monotonic()
        with pytest.raises(ShipyardError) as info:
            http_request(url + "/v1/models", deadline_s=60, field="url")
        seconds = time.monotonic() - started
    line = str(info.value)
    assert info.value.field == "url" and "more than the 8.0 MiB an answer may be" in line and "\n" not in line, line
    assert ("1024.0 MiB (Content-Length)" in line) == declared, line
    assert seconds < 20, f"held {seconds:.0f} s against a 60 s deadline"
    assert MAX_ANSWER_BYTES == 8 * 1024 * 1024 and sent[0] < 4 * MAX_ANSWER_BYTES  # not read to the end


def test_verify_against_a_service_that_answers_without_end_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "golden.json").write_text(json.dumps({"schema": "shipyard.golden/v1",
                                                      "answers": [{"prompt": "p", "text": "t"}]}))
    with _huge_answer(False) as (url, _):
        proc, seconds = _cli(tmp_path, "verify", "--url", url, "--served-model-name", "llm", "--candidate",
                             "golden.json", "--timeout", "60", capture_output=True)
    line = _one_line(proc.stderr)
    assert proc.returncode == 2 and "url: " in line and "more than the 8.0 MiB an answer may be" in line, line
    assert seconds < 30, f"verify held {seconds:.0f} s"


@contextlib.contextmanager
def _tls_stall(drip: bool) -> Iterator[str]:
    """A TCP port that accepts and reads the client's TLS hello, then never answers it (``drip``
    False) or starts a handshake record of 16 KiB and sends one byte of it every 0.3 s (each read
    well within a per-read timeout: only an overall deadline ends it)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn = server.accept()[0]
            except OSError:
                continue
            held.append(conn)
            with contextlib.suppress(OSError):
                conn.settimeout(5)
                conn.recv(65536)  # the ClientHello
                if drip:
                    conn.sendall(b"\x16\x03\x03\x40\x00")  # a handshake record of 16,384 bytes...
                    while not stop.wait(0.3):
                        conn.sendall(b"\x00")  # ... a byte at a time

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


def test_an_https_request_verifies_the_server_through_the_watched_handshake(tmp_path: Path) -> None:
    """``http_request`` makes the TLS handshake itself (to watch it): a real HTTPS server on
    loopback still answers, its certificate checked against the name in the URL."""
    import ssl

    from shipyard.core.net import http_request

    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=loopback",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(tmp_path / "key.pem"),
                    "-out", str(tmp_path / "cert.pem")], check=True, capture_output=True, timeout=60)
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    trusted = ssl.create_default_context(cafile=str(tmp_path / "cert.pem"))

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Length", "12")
            self.end_headers()
            self.wfile.write(b'{"data": []}')

        def log_message(self, *args: object) -> None:
            pass

    server = LoopbackServer(Handler)
    server.httpd.socket = served.wrap_socket(server.httpd.socket, server_side=True)
    with server:
        url = f"https://127.0.0.1:{server.port}"
        assert http_request(url + "/v1/models", deadline_s=10, context=trusted) == (200, b'{"data": []}')
        with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):  # the default trust store does not know it
            http_request(url + "/v1/models", deadline_s=10)


@pytest.mark.parametrize("drip", [False, True], ids=["silent", "drip"])
def test_a_stalled_tls_handshake_ends_at_the_deadline(drip: bool) -> None:
    """The TLS handshake is inside ``http_request``'s deadline (its socket is watched like every
    read). A guard more than a reproduction: Python 3.11's ``ssl`` already ends one handshake at
    the socket timeout, counted from the handshake's start rather than the request's."""
    from shipyard.core.net import http_request

    with _tls_stall(drip) as url:
        outcome: dict[str, object] = {}

        def run() -> None:
            try:
                outcome["value"] = http_request(url + "/v1/models", deadline_s=1.5)
            except OSError as err:
                outcome["error"] = err

        started = time.monotonic()
        waiting = threading.Thread(target=run, daemon=True)
        waiting.start()
        waiting.join(6.0)
        seconds = time.monotonic() - started
    assert not waiting.is_alive(), "still in the TLS handshake 6 s into a 1.5 s deadline"
    assert isinstance(outcome.get("error"), TimeoutError) and "within 1.5 s" in str(outcome["error"]), outcome
    assert seconds < 4, seconds


def test_a_name_lookup_that_never_returns_ends_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The system resolver has no timeout of its own (a dead DNS server holds ``getaddrinfo`` for
    its retries); ``http_request`` gives it up at the deadline. The dead DNS server is played by a
    ``getaddrinfo`` that blocks for that one name (the test cannot reach a real resolver)."""
    from shipyard.core.net import http_request

    real, release = socket.getaddrinfo, threading.Event()

    def getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
        if host == "dead-dns.invalid":
            release.wait(30)
        return real(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = http_request("http://dead-dns.invalid:8000/v1/models", deadline_s=1.0)
        except OSError as err:
            outcome["error"] = err

    waiting = threading.Thread(target=run, daemon=True)
    waiting.start()
    waiting.join(4.0)
    release.set()
    assert not waiting.is_alive(), "still resolving 4 s into a 1 s deadline"
    assert isinstance(outcome.get("error"), TimeoutError) and "within 1 s" in str(outcome["error"]), outcome


def test_deploy_against_an_api_server_that_never_answers_is_exit_3(tmp_path: Path) -> None:
    with _black_hole() as url:
        (tmp_path / "kubeconfig").write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
            f"clusters: [{{name: c, cluster: {{server: '{url}'}}}}]\n"
            "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n")
        (tmp_path / "deploy.yaml").write_text("apply: {api_timeout_s: 3}\n")
        proc, seconds = _cli(tmp_path, "deploy", "--name", "llm", "--model-uri", f"oci://quay.io/o/m@{DIGEST}",
                             "--out-file", "applied.yaml", "--kubeconfig", "kubeconfig", "--params-file", "deploy.yaml",
                             capture_output=True)
    line = _one_line(proc.stderr)
    assert proc.returncode == 3, (proc.returncode, line)  # README: 3 for an unreachable service
    assert "kubernetes API" in line and "timed out" in line, line
    assert seconds < 30, f"deploy held {seconds:.0f} s"
    assert not (tmp_path / "applied.yaml").exists()


@pytest.mark.parametrize(("status", "body", "kind", "said"), [
    (200, b"<html><body><form>Sign in</form></body></html>", "text/html; charset=utf-8", "an HTML page"),
    (404, b"404 page not found", "text/plain", "HTTP 404"),
    (200, b'{"status": "ok"', "application/json", "HTTP 200"),
], ids=["login-page", "wrong-service-404", "broken-json"])
def test_runs_against_a_wrong_service_is_one_line(tmp_path: Path, status: int, body: bytes, kind: str,
                                                  said: str) -> None:
    """Not "no runs", not 216 lines with 5 tracebacks: one line saying it is not a KFP API."""
    with _web(status, body, kind) as url:
        proc, seconds = _cli(tmp_path, "runs", "--host", url, capture_output=True)
    line = _one_line(proc.stderr)
    assert proc.returncode == 2 and "is not a KFP API" in line and said in line, line
    assert proc.stdout == "" and seconds < 15


@pytest.mark.parametrize(("status", "body", "kind", "said"), [
    (200, b"<html><body><form>Sign in</form></body></html>", "text/html; charset=utf-8", "is not an MLflow server"),
    (404, b"<!DOCTYPE HTML><title>404 Not Found</title>", "text/html", "is not an MLflow server"),
    (403, b"<html>Forbidden</html>", "text/html", "refused to read the registered model (HTTP 403)"),
], ids=["login-page", "wrong-service-404", "forbidden"])
@pytest.mark.parametrize("sub", ["show", "rollback"])
def test_alias_against_a_wrong_service_is_one_line(tmp_path: Path, status: int, body: bytes, kind: str, said: str,
                                                   sub: str) -> None:
    """MLflow's client raises its own exception for a page that is not its API (exit 70 before): one
    line naming the tracking URI, the answer and the fix."""
    with _web(status, body, kind) as url:
        # a rollback moves production: the attestation check (refused before MLflow without a key) is waived here
        waive = ("--no-attestation-check",) if sub == "rollback" else ()
        proc, seconds = _cli(tmp_path, "alias", sub, "tiny", "--tracking-uri", url, *waive, capture_output=True)
    line = _one_line(proc.stderr)
    assert proc.returncode == 2 and line.startswith(f"shipyard: error: tracking_uri: {url} ") and said in line, line
    assert seconds < 60


@pytest.mark.parametrize("argv", [("show", "tiny"), ("set", "tiny", "production", "3"), ("rollback", "tiny")],
                         ids=["show", "set", "rollback"])
@pytest.mark.parametrize("host", ["dead", "never-answers"])
def test_alias_against_an_mlflow_that_does_not_answer_is_exit_3_within_seconds(tmp_path: Path, argv: tuple[str, ...],
                                                                              host: str) -> None:
    """A person at a terminal: a tracking server that refuses connections or accepts and never answers
    is one line naming it within seconds, exit 3, nothing written (alias held 40 s against a dead host:
    5 attempts with backoff, the policy of a pipeline step riding out an MLflow restart)."""
    with contextlib.ExitStack() as stack:
        url = "http://127.0.0.1:9" if host == "dead" else stack.enter_context(_black_hole())
        waive = ("--no-attestation-check",) if argv[0] in ("set", "rollback") else ()  # moves production
        proc, seconds = _cli(tmp_path, "alias", *argv, "--tracking-uri", url, *waive, capture_output=True)
    line = _one_line(proc.stderr)
    assert proc.returncode == 3 and line.startswith(f"shipyard: error: tracking_uri: the MLflow server {url} does "
                                                    "not answer ("), line
    assert seconds < 15, f"alias {argv[0]} held {seconds:.0f} s"
    assert not any(tmp_path.iterdir())


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    return path


@pytest.mark.parametrize(("status", "body", "kind", "said"), [
    (200, b"<html><body><form>Sign in</form></body></html>", "text/html; charset=utf-8", "200 with an HTML page"),
    (404, b"404 page not found", "text/plain", "404 with a body that is not JSON"),
    (200, b'{"status": "ok"}', "application/json", "200 with JSON that has no kind or apiVersion"),
    (200, b'{"status": "ok"', "application/json", "200 with a body that is not JSON"),
    (404, b'{"kind": "Error", "message": "no route"}', "application/json", "404 with JSON of kind Error"),
], ids=["login-page", "wrong-service-404", "json-without-kind", "broken-json", "other-json-404"])
def test_check_against_a_web_server_is_one_not_an_api_server_line(tmp_path: Path, status: int, body: bytes, kind: str,
                                                                   said: str) -> None:
    """Issue 34, class 6: a kubeconfig pointing at a plain web server is named once as not an API
    server and the Kubernetes part stops there (exit 1), instead of listing every component as
    missing (or exit 70 on a login page)."""
    with _web(status, body, kind) as url:
        config = _kubeconfig(tmp_path / "kubeconfig", url)
        proc, seconds = _cli(tmp_path, "check", "--kubeconfig", str(config), "--no-s3", capture_output=True)
    assert "Traceback" not in proc.stderr and proc.stderr == "", proc.stderr
    assert proc.returncode == 1 and seconds < 60
    lines = proc.stdout.splitlines()
    (kube,) = [line for line in lines if line.startswith("FAIL kubernetes: ")]
    assert kube.startswith(f"FAIL kubernetes: not a Kubernetes API server at {url}: GET /api answered {said}: "), kube
    assert "(fix: point the kubeconfig's cluster server at the API server" in kube
    for wrong in ("CRD is missing", "no Deployment", "does not exist", "is missing", "not allowed"):
        assert wrong not in proc.stdout, proc.stdout


@pytest.mark.parametrize(("status", "body", "kind", "said"), [
    (200, b"<html><body><form>Sign in</form></body></html>", "text/html; charset=utf-8", "is not a review"),
    (404, b"404 page not found", "text/plain", "answered 404 to a SelfSubjectAccessReview"),
    (500, b'{"kind": "Status", "message": "etcdserver: request timed out"}', "application/json",
     "answered 500 to a SelfSubjectAccessReview: etcdserver: request timed out"),
    (403, b'{"kind": "Status", "message": "forbidden by policy"}', "application/json", "403 Forbidden: forbidden by"),
    (401, b'{"kind": "Status", "message": "Unauthorized"}', "application/json", "rejects the credentials"),
], ids=["login-page", "wrong-service-404", "server-error", "review-forbidden", "unauthorized"])
def test_the_pre_flight_never_reads_an_unanswered_review_as_allowed(tmp_path: Path, status: int, body: bytes,
                                                                    kind: str, said: str) -> None:
    """Issue 34, class 6, in the pipeline's pre-flight: a SelfSubjectAccessReview the API server
    refuses (401, 403), fails (500) or a web server answers (a login page, a 404) is one FAIL line
    "cannot check permissions", never "may apply" (a 404 or a 403 passed, a login page was exit 70)."""
    from shipyard.serving import cluster_check as cc
    from shipyard.serving.kserve.apply import api_client

    with _web(status, body, kind) as url:
        api = api_client(str(_kubeconfig(tmp_path / "kubeconfig", url)), timeout_s=5.0)
        (check,) = cc.pod_checks(tracking_uri="", namespace="shipyard", dry_run=False, api=api)
    assert check.name == "deploy permissions" and check.status == "fail", check.line()
    assert check.detail.startswith("cannot check permissions: ") and said in check.detail, check.line()
    assert "\n" not in check.line() and check.fix


# --------------------------------------------------------------------------- pipes, descriptors, debug


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["plan", "--help"], ["deploy", "--help"]])
def test_help_and_version_into_a_closed_pipe_exit_141_silently(tmp_path: Path, argv: list[str]) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written (`shipyard --help | true`)
    try:
        proc, _ = _cli(tmp_path, *argv, stdout=write, stderr=subprocess.PIPE)
    finally:
        os.close(write)
    assert proc.returncode == 141 and proc.stderr == "", (proc.returncode, proc.stderr)


def test_closed_stdout_and_stdin_are_not_internal_errors(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
                                  "num_hidden_layers": 4, "num_attention_heads": 8, "vocab_size": 1000}))
    closed_out = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -m shipyard.cli.main plan "{config}" >&-'],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False, env={**os.environ, "SHIPYARD_DEBUG": "1"})
    assert closed_out.returncode in (0, 1) and "Traceback" not in closed_out.stderr, closed_out.stderr
    closed_in = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -m shipyard.cli.main validate - <&-'],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False, env={**os.environ, "SHIPYARD_DEBUG": "1"})
    assert closed_in.returncode == 1 and "Traceback" not in closed_in.stderr, closed_in.stderr
    assert "holds no objects" in closed_in.stdout + closed_in.stderr


@pytest.mark.parametrize(("value", "traceback"), [("0", False), ("false", False), ("no", False), ("", False),
                                                  ("maybe", False), ("1", True), ("true", True)])
def test_shipyard_debug_is_a_boolean(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                     value: str, traceback: bool) -> None:
    """``SHIPYARD_DEBUG=0`` keeps the one-line internal error; only a true value shows the traceback."""
    import argparse

    from shipyard.cli import main as cli

    def broken(_args: argparse.Namespace) -> int:
        raise RuntimeError(f"a bug (token={SECRET})")

    parser = argparse.ArgumentParser()
    parser.set_defaults(func=broken, command="bug")
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    monkeypatch.setenv("SHIPYARD_DEBUG", value)
    if traceback:
        with pytest.raises(RuntimeError):
            cli.main([])
        return
    assert cli.main([]) == 70
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("shipyard: error: internal: RuntimeError") and SECRET not in err


# --------------------------------------------------------------------------- secrets in logs and headers


def test_log_records_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    from shipyard.core.redact import install_log_redaction

    install_log_redaction()
    with caplog.at_level(logging.INFO):
        logging.getLogger("some.library").warning("GET %s with %s", f"https://bob:p/{SECRET}@host/x",
                                                  {"Authorization": f"Bearer {SECRET}"})
        logging.getLogger("other").info("cookie: authservice_session=%s", SECRET)
    text = caplog.text
    assert SECRET not in text and "//***@host/x" in text and text.count("***") >= 3, text


@pytest.mark.parametrize("raw", [f"{SECRET}\r\n", f"{SECRET}\n", f"  {SECRET}\t"])
def test_header_values_are_stripped(raw: str) -> None:
    assert header_value(raw, "--token") == SECRET


@pytest.mark.parametrize("raw", [f"abc\n{SECRET}", f"abc\r{SECRET}", f"abc\x00{SECRET}", f"\u2603{SECRET}"])
def test_header_values_with_control_characters_are_one_line_without_the_value(raw: str) -> None:
    with pytest.raises(ShipyardError) as err:
        header_value(raw, "--token")
    assert str(err.value).startswith("--token: ") and SECRET not in str(err.value) and "\n" not in str(err.value)


def test_redact_covers_every_credential_form() -> None:
    from shipyard.core.redact import redact, redact_obj

    for text in (f"registry=bob:{SECRET}/x@quay.io", f"http://user:p@ss{SECRET}@host/path",
                 f"s3://AKIAIOSFODNN7EXAMPLE:{SECRET}/abc+def@bucket/model", f"Authorization: Bearer {SECRET}",
                 f"b'Bearer {SECRET}\\r\\n'", f"Cookie: authservice_session={SECRET}", f"--token {SECRET}",
                 f"password={SECRET}", f'{{"aws_secret_access_key": "{SECRET}"}}',
                 f"https://b.s3.amazonaws.com/k?X-Amz-Signature={SECRET}&a=1", "AKIAIOSFODNN7EXAMPLE"):
        shown = redact(text)
        assert SECRET not in shown and "AKIAIOSFODNN7EXAMPLE" not in shown, shown
    for text in (f"oci://quay.io/org/m@{DIGEST}", f"oci://quay.io:5000/org/m@{DIGEST}", "hf://org/m@main",
                 "cannot reach http://127.0.0.1:9", "pass --cookie or --token"):
        assert redact(text) == text
    assert redact_obj({"token": SECRET, "env": [f"http://u:{SECRET}@h"]}) == {"token": "***", "env": ["http://***@h"]}


# --------------------------------------------------------------------------- wrong answers with exit 0


def test_validate_refuses_a_manifest_with_a_key_twice(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  name: b\n")
    proc, _ = _cli(tmp_path, "validate", "m.yaml", capture_output=True)
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "key 'name' is given twice" in proc.stdout + proc.stderr


def test_track_replay_reports_a_corrupt_payload_and_keeps_it(tmp_path: Path) -> None:
    from shipyard.tracking.outbox import PENDING_DIR

    pending = tmp_path / "work" / PENDING_DIR
    pending.mkdir(parents=True)
    (pending / "0001-step.json").write_text('{"kind": "step", "trunc')
    (pending / "0002-step.json").write_text("[1, 2]")
    proc, _ = _cli(tmp_path, "track", "replay", "work", capture_output=True)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "nothing pending" not in proc.stdout
    assert "corrupt payload (0001-step.json)" in proc.stdout and "corrupt payload (0002-step.json)" in proc.stdout
    assert sorted(p.name for p in pending.iterdir()) == ["0001-step.json", "0002-step.json"]


def test_s3_endpoint_that_never_answers_is_one_line_within_the_read_timeout(monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path: Path) -> None:
    """The S3 client has bounded timeouts (minio's default is 5 minutes per read, retried)."""
    from shipyard.models import s3

    monkeypatch.setattr(s3, "S3_READ_TIMEOUT_S", 1.0)  # the default (120 s) is too long for a test
    with _black_hole() as url:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", url)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
        started = time.monotonic()
        with pytest.raises(ShipyardError) as err:
            s3.download_prefix("s3://models/llama", tmp_path / "out")
        seconds = time.monotonic() - started
    line = str(err.value)
    assert "\n" not in line and SECRET not in line and "AKIAIOSFODNN7EXAMPLE" not in line, line
    assert seconds < 20, f"S3 held {seconds:.0f} s"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["KF_PIPELINES_TOKEN", "KF_PIPELINES_COOKIE"])
def test_a_credential_from_a_windows_file_in_the_environment(tmp_path: Path, name: str) -> None:
    """``export KF_PIPELINES_TOKEN=$(cat token.txt)`` of a file saved on Windows ends in \\r: it is
    stripped, never an internal error that prints the whole bearer token."""
    proc, _ = _cli(tmp_path, "runs", "--host", "http://127.0.0.1:9", env={name: f"{SECRET}\r\n"}, capture_output=True)
    line = _one_line(proc.stderr)
    assert proc.returncode == 3 and "cannot reach" in line and SECRET not in proc.stderr + proc.stdout, line
    proc, _ = _cli(tmp_path, "runs", "--host", "http://127.0.0.1:9", env={name: f"abc\n{SECRET}"}, capture_output=True)
    line = _one_line(proc.stderr)
    assert proc.returncode == 2 and "control character" in line and SECRET not in proc.stderr + proc.stdout, line


@pytest.mark.parametrize("fmt", [None, "json", "yaml"])
def test_printed_objects_are_redacted(capsys: pytest.CaptureFixture[str], fmt: str | None) -> None:
    from shipyard.cli.output import emit

    emit({"url": f"https://bob:{SECRET}@kfp.example/#/runs", "note": f"Bearer {SECRET}"}, fmt,
         lambda: f"run at https://bob:{SECRET}@kfp.example")
    out = capsys.readouterr().out
    assert SECRET not in out and "https://***@kfp.example" in out, out


# --------------------------------------------------------------------------- client libraries' calls (issue 34)
# Each client library (kfp, mlflow, requests for the registry, minio, kubernetes) sets a timeout per
# read at most: a server that sends a byte a second held each of them for as long as it dripped.
# Each call now ends at its documented deadline (shipyard.core.net.call_within), the real library
# against a real slow-drip server on 127.0.0.1.


@contextlib.contextmanager
def _drip_except(fast: dict[str, bytes], every_s: float = 0.5) -> Iterator[str]:
    """A web server that answers the paths in ``fast`` at once (200, JSON) and drips every
    other answer one byte every ``every_s`` after whole headers (a long Content-Length it never reaches)."""
    stop = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            path = self.path.split("?")[0]
            if path in fast:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(fast[path])))
                self.end_headers()
                self.wfile.write(fast[path])
                return
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
            with contextlib.suppress(OSError):
                while not stop.is_set():
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    stop.wait(every_s)
            self.close_connection = True

        do_GET = do_POST = do_PUT = do_HEAD = do_PATCH = do_DELETE = _answer  # noqa: N815 - http.server's names

        def log_message(self, *args: object) -> None:
            pass

    try:
        with LoopbackServer(Handler) as server:
            yield server.url
    finally:
        stop.set()


def _late_line(error: object, setting: str) -> str:
    assert isinstance(error, ShipyardError), error
    line = str(error)
    assert "\n" not in line and setting in line and "within" in line, line
    return line


def test_kfp_calls_end_at_shipyard_kfp_timeout_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reachability check (urllib3 with retries) and each kfp.Client call end within
    ``SHIPYARD_KFP_TIMEOUT_S`` against a KFP API that drips its answers."""
    from shipyard.run.kfp_client import Kfp

    monkeypatch.setenv("SHIPYARD_KFP_TIMEOUT_S", "1.5")
    for name in ("KF_PIPELINES_ENDPOINT", "KF_PIPELINES_TOKEN", "KF_PIPELINES_COOKIE"):
        monkeypatch.delenv(name, raising=False)
    with _drip_except({}) as url:  # the reachability check drips
        _late_line(_ends_within(lambda: Kfp(url), 1.5, 5.0), "SHIPYARD_KFP_TIMEOUT_S")
    with _drip_except({"/apis/v2beta1/healthz": b'{"commit_sha": "x"}'}) as url:  # then the client's calls
        kfp = Kfp(url)
        _late_line(_ends_within(lambda: kfp.experiment_id("shipyard"), 2.0, 6.0), "SHIPYARD_KFP_TIMEOUT_S")


def test_mlflow_client_calls_end_at_mlflow_http_request_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow's client applies MLFLOW_HTTP_REQUEST_TIMEOUT to each read; the tracker's calls
    through it end within it in all, and the server counts as down from then on."""
    from shipyard.core.errors import UnreachableError
    from shipyard.tracking.tracker import Tracker

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")  # MLflow reads an int
    with _drip_except({}) as url:
        tracker = Tracker(url, attempts=2, backoff_s=0.1)
        assert tracker.client is not None  # the import (seconds) before the clock starts
        error = _ends_within(lambda: tracker.call("look up the experiment", tracker.client.get_experiment_by_name,
                                                  "shipyard"), 2.0, 6.0)
        assert isinstance(error, UnreachableError)
        _late_line(error, "MLFLOW_HTTP_REQUEST_TIMEOUT")
        assert tracker.down  # a later call fails at once


def test_registry_requests_and_blob_downloads_end_at_shipyard_registry_timeout_s(monkeypatch: pytest.MonkeyPatch,
                                                                                 tmp_path: Path) -> None:
    """requests' timeout is per read: a manifest or a blob that drips ends within
    ``SHIPYARD_REGISTRY_TIMEOUT_S`` (a blob's bytes at 256 KiB/s on top), not retried."""
    from shipyard.oci.client import RegistryClient

    monkeypatch.setenv("SHIPYARD_REGISTRY_TIMEOUT_S", "1.5")
    monkeypatch.setenv("SHIPYARD_REGISTRY_BACKOFF", "0.1")
    with _drip_except({"/v2/": b"{}"}) as url:
        client = RegistryClient(url, "team/model")
        _late_line(_ends_within(lambda: client.request("GET", "manifests/v1", what="read the manifest"), 1.5, 5.0),
                   "SHIPYARD_REGISTRY_TIMEOUT_S")
        _late_line(_ends_within(lambda: client.fetch_blob(DIGEST, tmp_path / "blob", 100), 1.5, 5.0),
                   "SHIPYARD_REGISTRY_TIMEOUT_S")


def test_s3_calls_and_object_downloads_end_at_shipyard_s3_timeout_s(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    """minio's timeouts are per read: a listing or an object that drips ends within
    ``SHIPYARD_S3_TIMEOUT_S`` (an object's bytes at 256 KiB/s on top), and no partial folder stays."""
    from shipyard.models import s3

    monkeypatch.setenv("SHIPYARD_S3_TIMEOUT_S", "1.5")
    monkeypatch.setenv("SHIPYARD_S3_REGION", "us-east-1")  # no location lookup first
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    with _drip_except({}) as url:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", url)
        line = _late_line(_ends_within(lambda: s3.download_prefix("s3://models/llama", tmp_path / "out"), 1.5, 5.0),
                          "SHIPYARD_S3_TIMEOUT_S")
        assert SECRET not in line and "AKIAIOSFODNN7EXAMPLE" not in line
        assert not (tmp_path / "out").exists()
        # a HEAD answers at once (100,000 bytes), the object's GET drips: 1.5 s + its bytes at 256 KiB/s
        mc = s3.client()
        _late_line(_ends_within(lambda: mc.fget_object("models", "data.jsonl", str(tmp_path / "data.jsonl")),
                                1.9, 5.5), "SHIPYARD_S3_TIMEOUT_S")


def test_an_upload_in_s3transfers_pool_ends_at_the_deadline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """boto3's ``upload_file`` (MLflow's client with an ``s3://`` artifact store) sends the bytes
    from s3transfer's own thread pool: against an endpoint that drips its answer, the call ends at
    its deadline and the pool's threads end with it (before, they waited on, past the call)."""
    import boto3

    from shipyard.core.net import call_within

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    (tmp_path / "artifact").write_bytes(b"x" * 1000)
    before = set(threading.enumerate())
    with _drip_except({}) as url:
        s3 = boto3.client("s3", endpoint_url=url)
        error = _ends_within(lambda: call_within(1.5, s3.upload_file, str(tmp_path / "artifact"), "bucket", "key",
                                                 on_timeout=lambda: TimeoutError("late")), 1.5, 5.0)
        assert isinstance(error, TimeoutError), error

        def left() -> list[str]:  # the call's thread and s3transfer's (not the server's, named Thread-N)
            return [t.name for t in threading.enumerate() if t not in before and not t.name.startswith("Thread-")]

        started = time.monotonic()
        while left() and time.monotonic() - started < 5:
            time.sleep(0.05)
        assert not left(), f"still alive 5 s past the deadline: {left()}"


def test_kubernetes_calls_end_at_their_deadline(tmp_path: Path) -> None:
    """The kubernetes client's timeout is per read: the deploy's calls (discovery, get, apply)
    end within ``apply.api_timeout_s`` and ``shipyard check``'s within its 15 s (here 1.5 s),
    against an API server that drips."""
    from shipyard.run.check import _Kube
    from shipyard.serving.kserve.apply import Kube, api_client

    with _drip_except({}, every_s=0.1) as url:  # a read timeout of 0.5 s: a deadline of 0.5 + 3 connect attempts of 0.5 + 1 s
        config = str(_kubeconfig(tmp_path / "kubeconfig", url))
        kube = Kube(api_client(config, timeout_s=0.5), timeout_s=0.5)
        line = _late_line(_ends_within(lambda: kube.dynamic, 3.0, 5.0), "apply.api_timeout_s")
        assert "timed out after 3s" in line  # "may have reached the server": the deploy restores the previous state
        checking = _Kube(api_client(config, timeout_s=0.5), timeout_s=0.5)
        _late_line(_ends_within(lambda: checking.call("GET", "/api"), 3.0, 5.0), "shipyard check gives each API call")


def test_shipyard_check_ends_at_shipyard_check_api_timeout_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``SHIPYARD_CHECK_API_TIMEOUT_S`` sets ``shipyard check``'s read timeout (default 15 s, 31 s per
    call): against an API server that drips, 0.5 s gives 3 s in all, and the line names the setting."""
    from shipyard.run.check import cluster_checks

    monkeypatch.setenv("SHIPYARD_CHECK_API_TIMEOUT_S", "0.5")
    with _drip_except({}, every_s=0.1) as url:
        config = str(_kubeconfig(tmp_path / "kubeconfig", url))
        checks = _ends_within(lambda: cluster_checks(kubeconfig=config, check_s3=False), 3.0, 8.0)
    assert isinstance(checks, list), checks
    (kube,) = [check for check in checks if check.name == "kubernetes"]
    assert kube.status == "fail" and "within 3 s" in kube.line() and "SHIPYARD_CHECK_API_TIMEOUT_S=0.5" in kube.line()


#: the Python of the compress runtime, which has huggingface_hub (the base venv does not)
HUB_PYTHON = Path(__file__).resolve().parents[2] / ".venvs" / "compress" / "bin" / "python"
HUB_COMMIT = "c0ffee" * 6 + "beef"
HUB_CALL = ("import sys\nfrom shipyard.core.errors import ShipyardError\n"
            "from shipyard.models.resolve import resolve_model\nfrom shipyard.steps.pin import pin_model\n"
            "try:\n    pin_model(sys.argv[2]) if sys.argv[1] == 'pin' else resolve_model(sys.argv[2], sys.argv[3])\n"
            "except ShipyardError as err:\n    print(err)\n    sys.exit(3)\n")


def _drip_body(handler: http.server.BaseHTTPRequestHandler, length: int, stop: threading.Event,
               every_s: float) -> None:
    """A fake hub's answer whose whole headers come at once and whose body of ``length`` bytes
    drips one byte every ``every_s`` until ``stop`` (a per-read timeout never fires)."""
    handler.wfile.write(f"HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n\r\n".encode())
    with contextlib.suppress(OSError):
        while not stop.is_set():
            handler.wfile.write(b" ")
            handler.wfile.flush()
            stop.wait(every_s)
    handler.close_connection = True


@contextlib.contextmanager
def _dripping_hub(drip: str, every_s: float = 0.5) -> Iterator[str]:
    """A Hugging Face Hub on loopback with one model, ``tiny-org/tiny`` (one file, config.json):
    its model info drips (``drip="info"``) or the file's bytes do (``drip="file"``), one byte every
    ``every_s`` after whole headers; the rest answers at once, as the hub does (any other path: 404)."""
    stop = threading.Event()
    body = b'{"model_type": "llama"}' + b" " * 4000
    info = json.dumps({"id": "tiny-org/tiny", "sha": HUB_COMMIT,
                       "siblings": [{"rfilename": "config.json", "size": len(body)}]}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _drip(self, length: int) -> None:
            _drip_body(self, length, stop, every_s)

        def _answer(self, payload: bytes, head: bool = False) -> None:
            self.send_response(200)
            for name, value in (("Content-Type", "application/json"), ("Content-Length", str(len(payload))),
                                ("X-Repo-Commit", HUB_COMMIT), ("ETag", '"config-etag"')):
                self.send_header(name, value)
            self.end_headers()
            if not head:
                self.wfile.write(payload)

        def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
            self._answer(body, head=True)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.startswith("/api/models/"):
                self._drip(len(info) + 100000) if drip == "info" else self._answer(info)
            elif self.path.startswith("/tiny-org/tiny/resolve/"):
                self._drip(len(body)) if drip == "file" else self._answer(body)
            else:  # huggingface_hub's other asks (/api/agent-harnesses): not on this hub
                self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    try:
        with LoopbackServer(Handler) as server:
            yield server.url
    finally:
        stop.set()


@pytest.mark.skipif(not HUB_PYTHON.exists(), reason="needs the compress venv (huggingface_hub)")
@pytest.mark.parametrize("drip", ["info", "file", "none"])
def test_hub_pins_and_downloads_end_at_shipyard_hf_timeout_s(drip: str, tmp_path: Path) -> None:
    """huggingface_hub's timeouts are per read: pinning ``hf://`` (the model info drips) and
    resolving it (the file's bytes drip) end within ``SHIPYARD_HF_TIMEOUT_S`` (a file's bytes at
    256 KiB/s on top) with one line naming it, with the real library (the compress venv's: the
    calls run there) against a hub on loopback; a hub that answers at once gives the model folder
    as ``snapshot_download`` laid it out."""
    from shipyard.models.hub import ENV_TIMEOUT

    env = {name: value for name, value in os.environ.items()
           if not name.startswith("HF_") and name not in ("TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
           and name.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    with _dripping_hub(drip) as url:
        env.update(PYTHONPATH=str(Path(__file__).resolve().parents[2]), HF_ENDPOINT=url, HF_HOME=str(tmp_path / "hf"),
                   **{ENV_TIMEOUT: "1"}, NO_PROXY="127.0.0.1")
        argv = ["pin", "hf://tiny-org/tiny"] if drip == "info" else ["resolve", "hf://tiny-org/tiny", str(tmp_path / "m")]
        started = time.monotonic()
        try:
            proc = subprocess.run([str(HUB_PYTHON), "-c", HUB_CALL, *argv], env=env, capture_output=True, text=True,
                                  timeout=40, check=False)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{argv[0]} still waiting 40 s into a 1 s SHIPYARD_HF_TIMEOUT_S")
        took = time.monotonic() - started
    if drip == "none":
        assert proc.returncode == 0 and json.loads((tmp_path / "m" / "config.json").read_text()) == \
            {"model_type": "llama"}, proc.stdout + proc.stderr[-2000:]
        return
    assert proc.returncode == 3, proc.stdout + proc.stderr[-2000:]
    _late_line(ShipyardError.from_line(proc.stdout.strip()), ENV_TIMEOUT)
    assert took < 20, f"{argv[0]} took {took:.1f} s"  # the imports (seconds) and 1 s
    assert not (tmp_path / "m").exists()


@contextlib.contextmanager
def _silent_xet_cas() -> Iterator[str]:
    """A Xet CAS server on loopback that takes connections and never answers (the kernel completes
    the handshakes; nothing reads): hf_xet's Rust sockets wait on it for their own read timeout and
    retries, unseen by Python. Yields its URL."""
    cas = socket.socket()
    try:
        cas.bind(("127.0.0.1", 0))
        cas.listen(16)
        yield f"http://127.0.0.1:{cas.getsockname()[1]}"
    finally:
        cas.close()


XET_TOKEN_ROUTE = "/xet-read-token/"


def _xet_headers(handler: http.server.BaseHTTPRequestHandler, cas: str) -> tuple[tuple[str, str], ...]:
    """The headers a hub sends with a Xet-stored file (its hash and token route, what makes
    huggingface_hub use hf_xet), or with the token route's answer (the CAS server and a token)."""
    if XET_TOKEN_ROUTE in handler.path:
        return (("X-Xet-Cas-Url", cas), ("X-Xet-Access-Token", "xet-read"),
                ("X-Xet-Token-Expiration", str(int(time.time()) + 3600)))
    host = f"http://127.0.0.1:{handler.server.server_address[1]}"
    return (("X-Xet-Hash", "ab" * 32), ("X-Xet-Refresh-Route", f"{host}/api/models/tiny-org/tiny{XET_TOKEN_ROUTE}x"))


@contextlib.contextmanager
def _xet_hub() -> Iterator[tuple[str, list[str]]]:
    """A Hugging Face Hub on loopback whose one model, ``tiny-org/tiny`` (config.json), is stored in
    Xet, as most of the hub's are: the file check (HEAD) names its Xet hash and token route, the
    token route names a Xet CAS server that takes connections and never answers (hf_xet's Rust
    sockets wait on it for their own read timeout and retries, unseen by Python), and the file's
    bytes also come at once over plain HTTP from ``/resolve/``. Yields the URL and the paths asked."""
    body = b'{"model_type": "llama"}' + b" " * 4000
    info = json.dumps({"id": "tiny-org/tiny", "sha": HUB_COMMIT,
                       "siblings": [{"rfilename": "config.json", "size": len(body)}]}).encode()
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self, payload: bytes, head: bool = False, extra: tuple[tuple[str, str], ...] = ()) -> None:
            self.send_response(200)
            for name, value in (("Content-Type", "application/json"), ("Content-Length", str(len(payload))),
                                ("X-Repo-Commit", HUB_COMMIT), ("ETag", '"config-etag"'), *extra):
                self.send_header(name, value)
            self.end_headers()
            if not head:
                self.wfile.write(payload)

        def _route(self, head: bool) -> None:
            asked.append(f"{self.command} {self.path}")
            if XET_TOKEN_ROUTE in self.path:
                self._answer(b"{}", head, _xet_headers(self, cas))
            elif self.path.startswith("/api/models/"):
                self._answer(info, head)
            elif self.path.startswith("/tiny-org/tiny/resolve/"):
                self._answer(body, head, _xet_headers(self, cas))
            else:
                self.send_error(404)

        def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
            self._route(head=True)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self._route(head=False)

        def log_message(self, *args: object) -> None:
            pass

    with _silent_xet_cas() as cas, LoopbackServer(Handler) as server:
        yield server.url, asked


@pytest.mark.skipif(not HUB_PYTHON.exists(), reason="needs the compress venv (huggingface_hub, hf_xet)")
def test_hub_download_of_a_xet_file_comes_over_http_within_shipyard_hf_timeout_s(tmp_path: Path) -> None:
    """hf_xet (installed beside huggingface_hub) moves a Xet-stored file in Rust threads and sockets
    that shipyard's deadline cannot see or shut: past ``SHIPYARD_HF_TIMEOUT_S`` the call gave up but
    the transfer (and the process's exit) went on for hf_xet's own timeouts and retries (minutes).
    Shipyard's hub calls go over plain HTTP instead: against a hub on loopback whose Xet CAS never
    answers, resolving ``hf://`` gives the file from ``/resolve/`` within the deadline, and the
    Xet token route is never asked."""
    from shipyard.models.hub import ENV_TIMEOUT

    env = {name: value for name, value in os.environ.items()
           if not name.startswith("HF_") and name not in ("TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
           and name.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    with _xet_hub() as (url, asked):
        env.update(PYTHONPATH=str(Path(__file__).resolve().parents[2]), HF_ENDPOINT=url, HF_HOME=str(tmp_path / "hf"),
                   **{ENV_TIMEOUT: "10"}, NO_PROXY="127.0.0.1")
        started = time.monotonic()
        try:
            proc = subprocess.run([str(HUB_PYTHON), "-c", HUB_CALL, "resolve", "hf://tiny-org/tiny",
                                   str(tmp_path / "m")], env=env, capture_output=True, text=True, timeout=40,
                                  check=False)
        except subprocess.TimeoutExpired:
            pytest.fail(f"resolve still waiting 40 s into a 10 s SHIPYARD_HF_TIMEOUT_S (asked: {asked})")
        took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert json.loads((tmp_path / "m" / "config.json").read_text()) == {"model_type": "llama"}
    assert not [ask for ask in asked if XET_TOKEN_ROUTE in ask], asked
    assert took < 10, f"took {took:.1f} s"  # the imports (seconds); the file comes at once


DATASET_FILES = [f"data/train-{number:05d}-of-00016.jsonl" for number in range(16)]  # 16: datasets downloads in a pool
DATASET_CALL = ("import sys, threading, time\nfrom shipyard.core.errors import ShipyardError\n"
                "from shipyard.compression.calibration import load_calibration_texts\n"
                "try:\n    texts = load_calibration_texts(sys.argv[1], text_column='text', num_samples=4, seed=0,"
                " tokenizer=None)\n    print(len(texts))\n"
                "except ShipyardError as err:\n    print(err)\n"
                "    def held():  # what keeps the process from exiting: non-daemon and pool threads (joined at exit)\n"
                "        return [t.name for t in threading.enumerate() if t is not threading.main_thread() and\n"
                "                (not t.daemon or t.name.startswith(('ThreadPoolExecutor', 'shipyard-call-within')))]\n"
                "    started = time.monotonic()\n"
                "    while held() and time.monotonic() - started < 5:\n        time.sleep(0.1)\n"
                "    print('alive:', held())\n    sys.exit(3)\n")


@contextlib.contextmanager
def _dripping_dataset_hub(drip: bool, every_s: float = 0.5, *, xet: list[str] | None = None) -> Iterator[str]:
    """A Hugging Face Hub on loopback with one dataset, ``tiny-org/calib``: 16 JSONL files of a
    train split (``datasets`` downloads 16 or more in a thread pool of its own), each file's bytes
    dripping one byte every ``every_s`` after whole headers when ``drip``; the listing, the file
    checks (HEAD) and the README answer at once (any other path: 404, as the hub says it). With
    ``xet`` (a list: the Xet token asks are added to it), the files are Xet-stored, on a CAS server
    that never answers (:func:`_silent_xet_cas`), their bytes also over plain HTTP."""
    stop = threading.Event()
    body = b'{"text": "calibration text"}\n' * 4
    repo = "tiny-org/calib"

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, payload: bytes, head: bool = False) -> None:
            self.send_response(200)
            path = self.path.split("?")[0]
            stored = _xet_headers(self, cas) if xet is not None and (path.endswith(".jsonl") or XET_TOKEN_ROUTE in path) else ()
            for name, value in (("Content-Type", "application/json"), ("Content-Length", str(len(payload))),
                                ("X-Repo-Commit", HUB_COMMIT), ("ETag", f'"{abs(hash(path.split("/")[-1]))}"'),
                                *stored):
                self.send_header(name, value)
            self.end_headers()
            if not head:
                self.wfile.write(payload)

        def _file(self, path: str) -> dict[str, object]:
            kind = "directory" if path == "data" else "file"
            return {"type": kind, "path": path, "size": len(body) if path.endswith(".jsonl") else 5, "oid": "ab" * 20}

        def do_POST(self) -> None:  # noqa: N802 - http.server's name; paths-info
            import urllib.parse

            form = urllib.parse.parse_qs(self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode())
            self._send(json.dumps([self._file(path) for path in form.get("paths", [])]).encode())

        def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
            self.do_GET(head=True)

        def do_GET(self, head: bool = False) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?")[0]
            if XET_TOKEN_ROUTE in path and xet is not None:
                xet.append(path)
                self._send(b"{}", head)
                return
            if path.startswith(f"/api/datasets/{repo}/tree/"):
                listed = DATASET_FILES if path.endswith("/data") else ["data", "README.md"]
                self._send(json.dumps([self._file(name) for name in listed]).encode(), head)
            elif path.startswith(f"/api/datasets/{repo}"):
                self._send(json.dumps({"id": repo, "sha": HUB_COMMIT, "siblings": [
                    {"rfilename": name, "size": len(body)} for name in DATASET_FILES]}).encode(), head)
            elif path.startswith(f"/datasets/{repo}/resolve/") and path.endswith(".jsonl"):
                if not drip or head:
                    self._send(body, head)
                    return
                _drip_body(self, len(body), stop, every_s)
            elif path.startswith(f"/datasets/{repo}/resolve/") and path.endswith("/README.md"):
                self._send(b"# calib", head)
            else:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    try:
        with _silent_xet_cas() as cas, LoopbackServer(Handler) as server:
            yield server.url
    finally:
        stop.set()


@pytest.mark.skipif(not HUB_PYTHON.exists(), reason="needs the compress venv (datasets)")
@pytest.mark.parametrize(("drip", "xet"), [(True, False), (False, False), (False, True)])
def test_hub_calibration_dataset_ends_at_shipyard_hf_timeout_s(drip: bool, xet: bool, tmp_path: Path) -> None:
    """``datasets.load_dataset`` downloads a split of 16 files or more in a thread pool of its own:
    a hub whose files drip held those threads (and the process's exit) forever, past the call's
    deadline. The real ``datasets`` (the compress venv's) against a hub on loopback: the
    calibration load ends within ``SHIPYARD_HF_TIMEOUT_S`` (the files' bytes at 256 KiB/s on top)
    with one line naming ``calibration_dataset`` and the setting, no thread left, and the process
    exits; a hub that answers at once gives the texts, its Xet-stored files too (over plain HTTP,
    never through hf_xet, whose Rust sockets the deadline cannot shut: the Xet token is never asked)."""
    from shipyard.models.hub import ENV_TIMEOUT

    env = {name: value for name, value in os.environ.items()
           if not name.startswith("HF_") and name not in ("TRANSFORMERS_OFFLINE",)
           and name.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    xet_asks: list[str] = []
    with _dripping_dataset_hub(drip, xet=xet_asks if xet else None) as url:
        env.update(PYTHONPATH=str(Path(__file__).resolve().parents[2]), HF_ENDPOINT=url, HF_HOME=str(tmp_path / "hf"),
                   HF_DATASETS_CACHE=str(tmp_path / "datasets"), HF_HUB_OFFLINE="0", HF_DATASETS_OFFLINE="0",
                   **{ENV_TIMEOUT: "1" if drip else "10"}, NO_PROXY="127.0.0.1")  # 10: a load on a busy machine
        started = time.monotonic()
        try:
            proc = subprocess.run([str(HUB_PYTHON), "-c", DATASET_CALL, "tiny-org/calib"], env=env,
                                  capture_output=True, text=True, timeout=40, check=False)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the calibration load (or the process's exit) still waiting 40 s into a {env[ENV_TIMEOUT]} s "
                        "SHIPYARD_HF_TIMEOUT_S")
        took = time.monotonic() - started
    if not drip:
        assert proc.returncode == 0 and proc.stdout.strip() == "4", proc.stdout + proc.stderr[-2000:]
        assert xet_asks == [] and took < 20, (xet_asks, took)
        return
    assert proc.returncode == 3, proc.stdout + proc.stderr[-2000:]
    line, alive = proc.stdout.strip().splitlines()
    error = ShipyardError.from_line(line)
    assert error.field == "calibration_dataset" and ENV_TIMEOUT in line and "within" in line, line
    assert alive == "alive: []", alive  # the pool's threads ended with their shut sockets
    assert took < 20, f"took {took:.1f} s"  # the imports (seconds), 1 s and the files' bytes at 256 KiB/s
