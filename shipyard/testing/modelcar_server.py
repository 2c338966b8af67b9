"""A KServe stand-in for the Kubernetes API double: an applied LLMInferenceService is served by
a real vLLM container that runs from the pushed modelcar, and the double reports it Ready with
that server's URL.

What KServe does with ``spec.model.uri: oci://REGISTRY/REPO@sha256:...`` (its modelcar path):
the pod pulls the modelcar image, which holds the model under ``/models``, and the vLLM
container reads it from there. Here :class:`ModelcarServers` does the same with podman:

1. ``podman pull`` of the digest-pinned reference from the (plain HTTP, loopback) registry with
   the given credentials (an auth file, not a command-line argument);
2. ``podman run -d --network host`` of the vllm runtime image with the pulled modelcar mounted as
   an image volume (``--mount type=image``: the image's own files, not a local folder) at
   :data:`MOUNT`, serving ``MOUNT/models`` under ``spec.model.name`` (the name the deploy renders;
   the service's name when absent) on a free loopback port;
3. the status, as KServe v0.20 reports a new Deployment (:func:`~shipyard.testing.k8s_double.kserve_conditions`):
   ``MainWorkloadReady=False / Progressing`` on the first read, ``False / MinimumReplicasUnavailable``
   (rolled up into ``WorkloadsReady`` and ``Ready``) while it pulls and starts and for at least
   ``min_start_s`` (the rehearsal holds it past the deploy's 120 s grace, as a GPU start-up lasts
   minutes), ``Ready`` with ``url`` (``url_for``) once ``/v1/models`` answers, ``MainWorkloadReady=False``
   with the container's log tail when the pull fails, the server exits or it never answers.

vLLM runs as the measure step starts it on a CPU (:class:`shipyard.serving.vllm_server.VLLMServer`:
``--enforce-eager``, ``VLLM_CPU_KVCACHE_SPACE``), so greedy answers are the ones the candidate's
golden outputs recorded. Of the object's own vLLM arguments (``VLLM_ADDITIONAL_ARGS`` of container
``main``) only those that change what the model answers and that a CPU server can honour are used
(:data:`KEPT_FLAGS`); the GPU sizing, parallelism and P/D (NIXL) flags are left out: one
aggregated CPU server stands for the deployment, prefill and decode pools alike. LoRA adapters in
``spec.model.lora`` are not served (the verification's ``/v1/models`` check then names them).

A changed ``spec.model.uri`` (a new version, or a rollback to the previous spec) replaces the
server; :meth:`ModelcarServers.watch` stops the server of a deleted object (a rolled-back new
deployment); :meth:`ModelcarServers.close` removes every container. Use::

    with ModelcarServers(registry.address, "user", "secret", runtime_image("vllm", "cpu")) as servers:
        servers.watch(double)
        double.script("llm", servers.script)
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from shipyard.core.errors import ShipyardError
from shipyard.core.net import free_port, http_ok
from shipyard.oci.layout import MODELS_DIR
from shipyard.oci.reference import parse
from shipyard.serving.vllm_server import cpu_dtype_args
from shipyard.testing.k8s_double import kserve_conditions

#: where the modelcar image is mounted in the vLLM container; the model is under ``MOUNT/models``
MOUNT = "/mnt/modelcar"
HOST = "127.0.0.1"
#: label on every container this module starts (``podman ps --filter label=...`` finds leftovers)
LABEL = "io.shipyard.modelcar-server"
#: the object's vLLM flags that are kept: they change what the model answers and run on a CPU
KEPT_FLAGS = frozenset({"dtype", "max-model-len", "quantization", "chat-template", "tokenizer-mode",
                        "generation-config", "override-generation-config", "trust-remote-code", "seed",
                        "max-logprobs", "revision", "tokenizer-revision"})
#: the flags the measure step's CPU server always has (``VLLMServer.build_command``)
CPU_FLAGS = ("--enforce-eager", "--disable-uvicorn-access-log")
LOG_TAIL_LINES = 12
#: an error line: a Python exception, argparse's "error:", vLLM's ERROR/CRITICAL log prefix, podman's "Error:"
_ERROR_LINE = re.compile(r"\w*(?:Error|Exception)\b: |\berror: |(?:^|\) )(?:ERROR|CRITICAL) \d")

UrlFor = Callable[[str, str, int], str]


class ObjectStore(Protocol):
    """What :meth:`ModelcarServers.watch` reads: the double's ``get(plural, namespace, name)``."""

    def get(self, plural: str, ns: str, name: str) -> dict[str, Any] | None: ...


def loopback_url(name: str, namespace: str, port: int) -> str:
    """The default status URL: the server itself on 127.0.0.1."""
    return f"http://{HOST}:{port}"


def model_of(obj: dict[str, Any]) -> tuple[str, str]:
    """``(spec.model.uri, served model name)`` of an LLMInferenceService; the name defaults to the
    object's name, as KServe's does. ``oci+native://`` (KServe's image volume) reads as ``oci://``."""
    model = (obj.get("spec") or {}).get("model") or {}
    uri = str(model.get("uri") or "")
    if uri.startswith("oci+native://"):
        uri = "oci://" + uri.removeprefix("oci+native://")
    return uri, str(model.get("name") or (obj.get("metadata") or {}).get("name") or "model")


def object_vllm_args(obj: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The object's ``VLLM_ADDITIONAL_ARGS`` (container ``main`` of ``spec.template``) split into
    ``(kept, dropped)``: flags in :data:`KEPT_FLAGS` with their values, and the others' names."""
    containers = ((obj.get("spec") or {}).get("template") or {}).get("containers") or []
    main = next((c for c in containers if isinstance(c, dict) and c.get("name") == "main"), {})
    value = next((str(e.get("value") or "") for e in main.get("env") or []
                  if isinstance(e, dict) and e.get("name") == "VLLM_ADDITIONAL_ARGS"), "")
    tokens = shlex.split(value)
    kept: list[str] = []
    dropped: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        flag, has_value, _ = token.partition("=")
        group = [token]
        if not has_value and i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            group.append(tokens[i + 1])
        i += len(group)
        name = flag.removeprefix("--")
        if flag.startswith("--") and name in KEPT_FLAGS:
            kept += group
        else:
            dropped.append(flag)
    return kept, dropped


def podman_ref(uri: str) -> str:
    """``REGISTRY/REPO@sha256:...`` from a digest-pinned ``oci://`` registry URI; a one-line error otherwise."""
    ref = parse(uri, "spec.model.uri")
    if ref.is_layout or not ref.pinned:
        raise ShipyardError("spec.model.uri", f"{uri!r} is not a digest-pinned registry reference",
                            "deploy the package step's oci://REGISTRY/REPO@sha256:... reference")
    return f"{ref.registry}/{ref.repository}@{ref.digest}"


def log_tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    """The last log lines on one line (the error lines when there are any)."""
    rows = [r.strip() for r in text.splitlines() if r.strip()]
    errors = [r for r in rows if _ERROR_LINE.search(r)]
    picked = errors[-3:] if errors else rows[-lines:]
    return " | ".join(r[-300:] for r in picked)


def _conditions(ready: str, reason: str = "", message: str = "") -> list[dict[str, Any]]:
    """KServe v0.20's conditions: ``True`` (Ready) or ``False`` with the failure's reason and message."""
    return kserve_conditions("ready") if ready == "True" else kserve_conditions("failed", reason, message)


class ModelcarServer:
    """One LLMInferenceService's server: pull, run and watch in a background thread.

    ``phase``: ``pulling``, ``starting``, ``ready``, ``failed`` or ``stopped``. Timings:
    ``pull_seconds`` and ``start_seconds`` (``podman run`` to ``/v1/models`` answering).
    """

    def __init__(self, owner: ModelcarServers, namespace: str, name: str, uri: str, served_name: str,
                 args: list[str], serial: int) -> None:
        self.owner = owner
        self.namespace, self.name, self.uri, self.served_name = namespace, name, uri, served_name
        self.args = args
        self.ref = podman_ref(uri)
        digest = self.ref.rsplit(":", 1)[-1][:12]
        self.container = re.sub(r"[^a-zA-Z0-9_.-]", "-", f"shipyard-modelcar-{namespace}-{name}-{digest}-{serial}")
        self.port = free_port()
        self.url = owner.url_for(name, namespace, self.port)
        self.phase = "pulling"
        self.reason = ""
        self.message = f"pulling the modelcar {self.ref}"
        self.pull_seconds: float | None = None
        self.start_seconds: float | None = None
        self.exit_code: int | None = None
        self.command: list[str] = []
        self._started = self._created = time.monotonic()
        self._reads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"modelcar-{name}", daemon=True)

    # -- status -----------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The LLMInferenceService status KServe would report for this server now."""
        self._reads += 1
        if self.phase in ("failed", "stopped"):
            return {"conditions": _conditions("False", self.reason or "Stopped", self.message)}
        if self._reads == 1:  # the Deployment has no conditions yet
            return {"conditions": kserve_conditions("created")}
        if self.phase == "ready" and time.monotonic() - self._created >= self.owner.min_start_s:
            return {"url": self.url, "conditions": _conditions("True")}
        return {"conditions": kserve_conditions("starting")}

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> ModelcarServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop and remove the container (the thread ends at its next check)."""
        self._stop.set()
        if self.phase != "failed":
            self.phase, self.reason, self.message = "stopped", "Stopped", "the server was stopped"
        self.owner.podman("rm", "--force", "--time", "5", self.container, check=False, timeout=60)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _fail(self, reason: str, message: str) -> None:
        if not self._stop.is_set():
            self.phase, self.reason, self.message = "failed", reason, " ".join(message.split())

    def _run(self) -> None:
        try:
            if self._pull() and self._launch():
                self._wait_serving()
        except Exception as err:  # noqa: BLE001 - the status carries it; the double's thread must not die
            self._fail("ServerError", f"{type(err).__name__}: {err}")

    def _pull(self) -> bool:
        started = time.monotonic()
        done = self.owner.podman("pull", "--quiet", f"--tls-verify={str(self.owner.tls_verify).lower()}",
                                 "--authfile", str(self.owner.authfile), self.ref, check=False,
                                 timeout=self.owner.pull_timeout_s)
        self.pull_seconds = round(time.monotonic() - started, 2)
        if done.returncode == 0:
            self.owner.pulled.add(self.ref)
        if done.returncode != 0:
            self._fail("ModelcarPullFailed", f"podman pull {self.ref} failed: {log_tail(done.stderr or done.stdout)}")
            return False
        return not self._stop.is_set()

    def _launch(self) -> bool:
        self.owner.podman("rm", "--force", "--time", "0", self.container, check=False, timeout=60)
        env = {"VLLM_CPU_KVCACHE_SPACE": str(self.owner.cpu_kv_cache_gib), "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1"}
        extra = [*self.args, *self.owner.vllm_args]
        extra += [f for f in CPU_FLAGS if f not in extra]
        extra += cpu_dtype_args(extra)  # the container runs on this machine's CPU: the measure step's dtype
        self.command = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", f"{MOUNT}/{MODELS_DIR}",
                        "--host", HOST, "--port", str(self.port), "--served-model-name", self.served_name, *extra]
        run = ["run", "--detach", "--name", self.container, "--network", "host", "--shm-size", "1g",
               "--label", f"{LABEL}={self.namespace}.{self.name}",
               "--mount", f"type=image,source={self.ref},destination={MOUNT}"]
        for key, value in sorted(env.items()):
            run += ["--env", f"{key}={value}"]
        self.phase, self.message = "starting", f"starting vLLM in container {self.container}"
        self._started = time.monotonic()
        done = self.owner.podman(*run, self.owner.image, *self.command, check=False, timeout=120)
        if done.returncode != 0:
            self._fail("ServerStartFailed", f"podman run failed: {log_tail(done.stderr or done.stdout)}")
            return False
        if self._stop.is_set():  # stopped while ``podman run`` started it: stop() removed nothing yet
            self.owner.podman("rm", "--force", "--time", "0", self.container, check=False, timeout=60)
            return False
        threading.Thread(target=self._wait_exit, name=f"modelcar-wait-{self.name}", daemon=True).start()
        return True

    def _wait_exit(self) -> None:
        """``podman wait``: one idle process until the container stops; its exit code."""
        done = self.owner.podman("wait", self.container, check=False, timeout=None)
        text = (done.stdout or "").strip().splitlines()
        if done.returncode == 0 and text and text[-1].lstrip("-").isdigit():
            self.exit_code = int(text[-1])

    def _logs(self) -> str:
        done = self.owner.podman("logs", "--tail", "200", self.container, check=False, timeout=30)
        return (done.stdout or "") + (done.stderr or "")

    def _wait_serving(self) -> None:
        deadline = self._started + self.owner.startup_timeout_s
        models = f"http://{HOST}:{self.port}/v1/models"
        while not self._stop.is_set():
            if self.exit_code is not None:
                self._fail("ServerExited", f"vLLM exited with status {self.exit_code}: {log_tail(self._logs())}")
                return
            if self.phase == "starting" and http_ok(models, timeout_s=2):
                self.start_seconds = round(time.monotonic() - self._started, 2)
                self.phase, self.reason, self.message = "ready", "", ""
            elif self.phase == "starting" and time.monotonic() > deadline:
                self._fail("ServerNotReady", f"{models} did not answer within {self.owner.startup_timeout_s:g} s: "
                           f"{log_tail(self._logs())}")
                return
            self._stop.wait(0.5 if self.phase == "starting" else 2.0)


class ModelcarServers:
    """The double's KServe: a :data:`~shipyard.testing.k8s_double.Script` (``script``) that serves
    each applied LLMInferenceService from its pushed modelcar; a context manager (``close``).

    Args:
        registry: the registry's ``host:port`` (the rehearsal's :class:`~shipyard.testing.registry.LocalRegistry`).
        user, password: its credentials ("" for an anonymous registry).
        image: the vllm runtime image (``runtime_image("vllm", "cpu")``), in podman's local store.
        url_for: ``(name, namespace, port) -> status URL`` (default ``http://127.0.0.1:PORT``);
            the rehearsal maps a cluster name (``http://NAME.NS.svc.cluster.local:PORT``) to 127.0.0.1.
        podman_env: environment for every podman command (added to this process's).
        tls_verify: podman's ``--tls-verify`` for the pull (False: the loopback registry speaks HTTP).
        vllm_args: more vLLM flags (e.g. the benchmark config's ``vllm_args``, as the measure step used).
        cpu_kv_cache_gib: ``VLLM_CPU_KVCACHE_SPACE`` (the benchmark config's ``cpu_kv_cache_gib``).
        startup_timeout_s, pull_timeout_s: after these a server reports ``MainWorkloadReady=False``.
        min_start_s: the shortest start-up reported (``MinimumReplicasUnavailable`` until then).
        remove_images: ``close`` also removes the modelcar images it pulled from podman's store.
    """

    def __init__(self, registry: str, user: str, password: str, image: str, *, url_for: UrlFor = loopback_url,
                 podman_env: Mapping[str, str] | None = None, tls_verify: bool = False,
                 vllm_args: Sequence[str] = (), cpu_kv_cache_gib: int = 1, startup_timeout_s: float = 900.0,
                 pull_timeout_s: float = 600.0, remove_images: bool = True, min_start_s: float = 0.0) -> None:
        self.binary = shutil.which("podman") or ""
        if not self.binary:
            raise ShipyardError("podman", "not installed", "run `bash .ci/podman-setup`")
        self.registry, self.image, self.url_for = registry, image, url_for
        self.env = {**os.environ, **dict(podman_env or {})}
        self.tls_verify = tls_verify
        self.vllm_args = [str(a) for a in vllm_args]
        self.cpu_kv_cache_gib = int(cpu_kv_cache_gib)
        self.startup_timeout_s, self.pull_timeout_s = float(startup_timeout_s), float(pull_timeout_s)
        self.min_start_s = float(min_start_s)
        self._dir = Path(tempfile.mkdtemp(prefix="shipyard-modelcar-"))
        self.authfile = self._dir / "auth.json"
        auths = {registry: {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}} if user else {}
        self.authfile.write_text(json.dumps({"auths": auths}))
        self.authfile.chmod(0o600)
        self.remove_images = remove_images
        self.pulled: set[str] = set()
        self.servers: dict[tuple[str, str], ModelcarServer] = {}
        self.retired: list[ModelcarServer] = []
        self.log: list[str] = []
        self._serial = itertools.count(1)
        self._lock = threading.Lock()
        self._closed = threading.Event()

    # -- podman -----------------------------------------------------------------------------------
    def podman(self, *args: str, check: bool = True, timeout: float | None = 120) -> subprocess.CompletedProcess[str]:
        """Run one podman command with ``podman_env``; a one-line error on failure when ``check``."""
        try:
            done = subprocess.run([self.binary, *args], capture_output=True, text=True, env=self.env, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            done = subprocess.CompletedProcess([self.binary, *args], 124, "", f"timed out after {timeout} s")
        if check and done.returncode != 0:
            raise ShipyardError("podman", f"`podman {args[0]}` failed: {log_tail(done.stderr)}", "see podman's message")
        return done

    # -- the double's script ----------------------------------------------------------------------
    def script(self, obj: dict[str, Any], n: int) -> dict[str, Any]:
        """The status of ``obj`` (``Script(obj, polls)``): its server is started on first sight and
        replaced when ``spec.model.uri`` changes. Fast: the slow parts run in the server's thread."""
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        uri, served = model_of(obj)
        with self._lock:
            if self._closed.is_set():
                return {"conditions": _conditions("False", "Stopped", "the modelcar servers were closed")}
            server = self.servers.get(key)
            if server is not None and server.uri != uri:
                self._retire(key)
                server = None
            if server is None:
                try:
                    server = self._start(key, obj, uri, served)
                except ShipyardError as err:
                    return {"conditions": _conditions("False", "UnsupportedModelURI", str(err))}
            return server.status()

    def _start(self, key: tuple[str, str], obj: dict[str, Any], uri: str, served: str) -> ModelcarServer:
        kept, dropped = object_vllm_args(obj)
        server = ModelcarServer(self, key[0], key[1], uri, served, kept, next(self._serial))
        lora = ((obj.get("spec") or {}).get("model") or {}).get("lora")
        self.log.append(f"{key[0]}/{key[1]}: serving {server.ref} as {served!r} on port {server.port}"
                        + (f"; object flags kept {kept}" if kept else "")
                        + (f"; left out (GPU/P-D) {dropped}" if dropped else "")
                        + ("; LoRA adapters are not served" if lora else ""))
        self.servers[key] = server.start()
        return server

    def _retire(self, key: tuple[str, str]) -> None:
        server = self.servers.pop(key, None)
        if server is not None:
            self.retired.append(server)
            threading.Thread(target=server.stop, name=f"modelcar-stop-{server.name}", daemon=True).start()

    # -- deletion ---------------------------------------------------------------------------------
    def watch(self, store: ObjectStore, interval_s: float = 1.0) -> None:
        """Stop the server of an object that was deleted (or whose model URI changed) in ``store``
        (the double), as KServe removes the pods of a deleted LLMInferenceService."""

        def loop() -> None:
            while not self._closed.wait(interval_s):
                with self._lock:
                    for key, server in list(self.servers.items()):
                        obj = store.get("llminferenceservices", *key)
                        if obj is None or model_of(obj)[0] != server.uri:
                            self._retire(key)

        threading.Thread(target=loop, name="modelcar-watch", daemon=True).start()

    def close(self) -> None:
        """Remove every container this object started, the images it pulled (``remove_images``)
        and its auth file."""
        self._closed.set()
        with self._lock:
            servers = [*self.servers.values(), *self.retired]
            self.servers.clear()
        for server in servers:
            server.stop()
        for server in servers:
            server.join(timeout=30)
        if self.remove_images and self.pulled:
            self.podman("rmi", *sorted(self.pulled), check=False, timeout=120)
        shutil.rmtree(self._dir, ignore_errors=True)

    def timings(self) -> list[dict[str, Any]]:
        """Per server: reference, phase, pull and start seconds (for a run summary)."""
        with self._lock:
            servers = [*self.retired, *self.servers.values()]
        return [{"service": f"{s.namespace}/{s.name}", "ref": s.ref, "phase": s.phase, "pull_seconds": s.pull_seconds,
                 "start_seconds": s.start_seconds} for s in servers]

    def __enter__(self) -> ModelcarServers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
