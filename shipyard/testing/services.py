"""Loopback services for the container rehearsal: podman's API socket, an ``mlflow server``
(sqlite backend), a moto S3 server and the Kubernetes API double served with a kubeconfig.

Each is a context manager that starts on 127.0.0.1 and stops (with its whole process group) on
exit. The registry is :class:`shipyard.testing.registry.LocalRegistry`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.net import free_port, http_ok, process_alive, wait_ready
from shipyard.core.processes import stop_group
from shipyard.models.s3 import client, load_config
from shipyard.testing.k8s_double import K8sDouble, ready_after
from shipyard.testing.mlflow_image import image_site


class PodmanSocket:
    """``podman system service`` on a private unix socket; ``docker_host`` is its ``DOCKER_HOST``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.socket = self.root / "podman.sock"
        self.docker_host = f"unix://{self.socket}"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PodmanSocket:
        podman = shutil.which("podman")
        if podman is None:
            raise ShipyardError("podman", "not installed", "run `bash .ci/podman-setup`")
        self.root.mkdir(parents=True, exist_ok=True)
        log = self.root / "podman-service.log"
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([podman, "system", "service", "--time=0", self.docker_host],
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

        def ready() -> bool:
            import docker

            if not self.socket.exists():
                return False
            client = docker.DockerClient(base_url=self.docker_host, timeout=5)
            try:
                return bool(client.ping())
            finally:
                client.close()

        wait_ready("podman system service", ready, timeout_s=30, alive=process_alive("podman system service", self.proc, log),
                   log=log)
        return self

    def __exit__(self, *exc: object) -> None:
        stop_group(self.proc)
        self.socket.unlink(missing_ok=True)


class MlflowServer:
    """``mlflow server`` with a sqlite database and proxied artifacts under ``root``; ``env`` adds
    server settings (e.g. ``MLFLOW_SERVER_ALLOWED_HOSTS`` as ``manifests/base/mlflow`` sets it);
    ``port`` chooses the loopback port (default: a free one); ``artifacts`` is its
    ``--artifacts-destination`` (default: ``root/artifacts``; an ``s3://`` one with
    ``MLFLOW_S3_ENDPOINT_URL`` and the keys in ``env``, as ``manifests/base/mlflow`` runs it);
    ``absent_modules`` are the modules its image lacks, unimportable in every process of the server
    (:mod:`shipyard.testing.mlflow_image`: boto3 and botocore for the plain ``ghcr.io/mlflow/mlflow``)."""

    def __init__(self, root: Path, env: dict[str, str] | None = None, port: int | None = None,
                 artifacts: str | None = None, absent_modules: tuple[str, ...] = ()) -> None:
        self.root = Path(root)
        self.env = dict(env or {})
        self.absent_modules = tuple(absent_modules)
        self.artifacts = artifacts or str(self.root / "artifacts")
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> MlflowServer:
        mlflow = Path(sys.executable).with_name("mlflow")
        if not mlflow.exists():
            raise ShipyardError("mlflow server", f"{mlflow} does not exist", "install the dev tools: bash .ci/setup")
        self.root.mkdir(parents=True, exist_ok=True)
        log = self.root / "mlflow-server.log"
        image: dict[str, str] = {}
        if self.absent_modules:
            image = image_site(self.root, self.absent_modules)
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(mlflow), "server", "--backend-store-uri", f"sqlite:///{self.root}/mlflow.db",
                 "--artifacts-destination", self.artifacts,
                 "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.root,
                env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **self.env, **image},
            )
        wait_ready("mlflow server", lambda: http_ok(f"{self.url}/health"), timeout_s=180,
                   alive=process_alive("mlflow server", self.proc, log), log=log)
        return self

    def __exit__(self, *exc: object) -> None:
        stop_group(self.proc, grace=20)


class MotoS3:
    """moto's S3 server on a free loopback port, with fixed test credentials."""

    ACCESS_KEY = "shipyard-rehearsal"
    SECRET_KEY = "shipyard-rehearsal-secret"

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.server: Any = None
        self._custom_before: str | None = None

    def __enter__(self) -> MotoS3:
        try:
            from moto.server import ThreadedMotoServer
        except ImportError:
            raise ShipyardError("moto", "not installed", "install the dev tools: bash .ci/setup") from None
        import logging

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one access line per S3 request otherwise
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()
        wait_ready("moto S3", lambda: urllib.request.urlopen(self.endpoint, timeout=2) is not None, timeout_s=20)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.stop()
        if self._custom_before is not None:
            _restore_env("MOTO_S3_CUSTOM_ENDPOINTS", self._custom_before or None)

    def also_named(self, endpoint: str) -> None:
        """Answer requests addressed to ``endpoint`` (another name of this server, e.g. a cluster
        Service name such as ``http://minio.minio.svc:PORT``) path-style, as MinIO does. moto
        otherwise reads the first label of a dotted host as a bucket (virtual-hosted style);
        ``MOTO_S3_CUSTOM_ENDPOINTS`` is its setting for S3-compatible endpoints (restored on exit)."""
        before = os.environ.get("MOTO_S3_CUSTOM_ENDPOINTS", "")
        if self._custom_before is None:
            self._custom_before = before
        os.environ["MOTO_S3_CUSTOM_ENDPOINTS"] = ",".join(e for e in (before, endpoint) if e)

    @property
    def env(self) -> dict[str, str]:
        """The S3 environment a step gets (the names of the cluster contract's ``shipyard-s3``)."""
        return {"AWS_ACCESS_KEY_ID": self.ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": self.SECRET_KEY,
                "AWS_ENDPOINT_URL_S3": self.endpoint}

    def make_bucket(self, name: str) -> None:
        """Create a bucket (idempotent)."""
        s3 = client(load_config(self.env))
        if not s3.bucket_exists(name):
            s3.make_bucket(name)


class KubeAPI:
    """The Kubernetes API double over HTTP, with a kubeconfig; LLMInferenceServices become Ready
    after a few polls, as KServe's controller would report them.

    ``users`` (token -> user) and ``enforce_rbac`` as :class:`~shipyard.testing.k8s_double.K8sDouble`;
    the kubeconfig authenticates with ``token`` (default: the double's admin), names ``namespace``
    as its context's, and reaches the server as ``http://<server_host>:<port>`` when ``server_host``
    is given (an in-cluster name such as ``kubernetes.default.svc`` that the steps map to the
    loopback) instead of ``127.0.0.1``.
    """

    def __init__(self, root: Path, ready_after_polls: int = 2, *, users: dict[str, str] | None = None,
                 enforce_rbac: bool = False, token: str = "test-token", namespace: str = "default",
                 server_host: str = "") -> None:
        self.root = Path(root)
        self.double = K8sDouble(users=users, enforce_rbac=enforce_rbac)
        self.ready_after_polls = ready_after_polls
        self.kubeconfig = self.root / "kubeconfig"
        self.token, self.namespace = token, namespace
        port = self.double.server.port
        self.server = f"http://{server_host}:{port}" if server_host else self.double.url

    def __enter__(self) -> KubeAPI:
        import yaml

        self.double.__enter__()
        self.root.mkdir(parents=True, exist_ok=True)
        self.double.kubeconfig(self.kubeconfig, namespace=self.namespace, token=self.token)
        config = yaml.safe_load(self.kubeconfig.read_text())
        config["clusters"][0]["cluster"]["server"] = self.server
        self.kubeconfig.write_text(yaml.safe_dump(config))
        self.kubeconfig.chmod(0o644)
        return self

    def __exit__(self, *exc: object) -> None:
        self.double.__exit__(*exc)

    def load(self, docs: list[dict[str, Any]]) -> None:
        """Store what ``kubectl apply`` would (an overlay's objects, Secrets) in their namespaces."""
        self.double.load(docs)

    def expect(self, name: str, namespace: str) -> None:
        """Make ``name`` become Ready (with a gateway URL) after a few status reads."""
        self.double.script(name, ready_after(self.ready_after_polls, f"http://gateway.local/{namespace}/{name}"))

    def get(self, name: str, namespace: str) -> dict[str, Any] | None:
        """The stored LLMInferenceService (as the API server holds it)."""
        return self.double.get("llminferenceservices", namespace, name)


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def private_dir(prefix: str) -> Path:
    """A fresh folder under the system temp dir that containers (uid 1001) can traverse."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path
