"""The tests' own web server (shipyard.testing.loopback): served between start and stop, on the port
bound when it was made; stopping one that never started does not wait for a serving loop."""

from __future__ import annotations

import urllib.request
from http.server import BaseHTTPRequestHandler

import pytest

from shipyard.testing.loopback import LoopbackServer


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_serves_in_the_block_on_the_port_known_before_it_started() -> None:
    server = LoopbackServer(_Hello)
    url = server.url
    assert url == f"http://{server.address}" == f"http://127.0.0.1:{server.port}"
    with server:
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as answer:
            assert answer.read() == b"/metrics"
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{url}/metrics", timeout=5)


def test_stop_without_start_only_closes_the_socket() -> None:
    LoopbackServer(_Hello).stop()
