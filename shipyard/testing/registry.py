"""A throwaway OCI registry on 127.0.0.1 (the Debian ``docker-registry`` binary, distribution v2).

Used by the tests, the push benchmark and ``shipyard run --local`` when a real registry is
wanted without Docker: ``with LocalRegistry() as reg: print(reg.address)``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from shipyard.core.errors import ShipyardError
from shipyard.core.net import free_port, http_ok, wait_ready

BINARY_CANDIDATES = ("docker-registry", "registry")


def registry_binary() -> str:
    """Path of the registry server binary (``SHIPYARD_REGISTRY_BINARY`` or the Debian package's)."""
    explicit = os.environ.get("SHIPYARD_REGISTRY_BINARY")
    if explicit:
        return explicit
    for name in BINARY_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    raise ShipyardError("docker-registry", "no registry binary found",
                        "apt-get install -y docker-registry (or set SHIPYARD_REGISTRY_BINARY)")


def htpasswd_line(user: str, password: str) -> str:
    """A bcrypt htpasswd line (what the registry's htpasswd auth accepts)."""
    tool = shutil.which("htpasswd")
    if tool is None:
        raise ShipyardError("htpasswd", "not installed", "apt-get install -y apache2-utils")
    out = subprocess.run([tool, "-nbB", user, password], check=True, capture_output=True, text=True).stdout
    return out.strip() + "\n"


class LocalRegistry:
    """Start a registry on a free loopback port with its own storage; stop and clean up on exit.

    ``users`` (name -> password) turns on htpasswd (HTTP Basic) authentication.
    """

    def __init__(self, users: dict[str, str] | None = None, root: str | Path | None = None) -> None:
        self.users = users or {}
        self._own_root = root is None
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="shipyard-registry-"))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def _config(self) -> Path:
        storage = self.root / "storage"
        storage.mkdir(parents=True, exist_ok=True)
        lines = [
            "version: 0.1",
            "log:",
            "  level: warn",
            "  accesslog:",
            "    disabled: true",
            "storage:",
            "  filesystem:",
            f"    rootdirectory: {storage}",
            "  delete:",
            "    enabled: true",
            "http:",
            f"  addr: {self.address}",
        ]
        if self.users:
            htpasswd = self.root / "htpasswd"
            htpasswd.write_text("".join(htpasswd_line(u, p) for u, p in sorted(self.users.items())))
            lines += ["auth:", "  htpasswd:", "    realm: shipyard-test", f"    path: {htpasswd}"]
        config = self.root / "config.yml"
        config.write_text("\n".join(lines) + "\n")
        return config

    def start(self, timeout: float = 20.0) -> LocalRegistry:
        """Start the server and wait until ``/v2/`` answers."""
        config = self._config()
        log = open(self.root / "registry.log", "wb")  # noqa: SIM115 - kept open for the child's lifetime
        self.proc = subprocess.Popen([registry_binary(), "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
        proc = self.proc

        def alive() -> None:
            if proc.poll() is not None:
                raise ShipyardError("docker-registry", f"exited with status {proc.returncode}",
                                    f"see {self.root / 'registry.log'}")

        def timed_out() -> ShipyardError:
            self.stop()
            return ShipyardError("docker-registry", f"did not answer on {self.address} within {timeout:.0f}s",
                                 f"see {self.root / 'registry.log'}")

        wait_ready("docker-registry", lambda: http_ok(f"http://{self.address}/v2/", timeout_s=1, statuses=(200, 401)),
                   timeout_s=timeout, interval_s=0.1, alive=alive, timeout_error=timed_out)
        return self

    def stop(self) -> None:
        """Stop the server (and remove its storage when this object created it)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
