"""Modelcar and ORAS packaging against a real registry (Debian docker-registry) on 127.0.0.1."""

from __future__ import annotations

import base64
import http.server
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from conftest import require_tool

from shipyard.core.errors import ShipyardError
from shipyard.core.files import sha256_file
from shipyard.core.net import free_port
from shipyard.oci import layout as oci_layout
from shipyard.oci import modelcar, transfer
from shipyard.oci.client import RegistryClient
from shipyard.testing.loopback import LoopbackServer
from shipyard.testing.registry import LocalRegistry

pytestmark = pytest.mark.usefixtures("registry_tools")


def tree_hashes(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): sha256_file(p) for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def registry() -> Iterator[LocalRegistry]:
    with LocalRegistry() as reg:
        yield reg


@pytest.fixture(scope="module")
def auth_registry() -> Iterator[LocalRegistry]:
    require_tool(bool(shutil.which("htpasswd")), "apt-get install -y apache2-utils (htpasswd)")
    with LocalRegistry(users={"shipper": "s3cret"}) as reg:
        yield reg


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIPYARD_REGISTRY_RETRIES", "3")
    monkeypatch.setenv("SHIPYARD_REGISTRY_BACKOFF", "0.05")
    for name in ("SHIPYARD_REGISTRY_USERNAME", "SHIPYARD_REGISTRY_PASSWORD", "REGISTRY_AUTH_FILE", "DOCKER_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SHIPYARD_REGISTRY_AUTH_FILE", "/nonexistent/auth.json")


@pytest.fixture(scope="module")
def base_layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A base image layout built from Debian's busybox-static."""
    out = tmp_path_factory.mktemp("base") / "busybox"
    modelcar.build_base_layout(out, tag="1")
    return out


def skopeo(*args: str) -> str:
    return subprocess.run(["skopeo", *args], check=True, capture_output=True, text=True).stdout


def test_modelcar_is_reproducible(tiny_model: Path, tmp_path: Path, base_layout: Path) -> None:
    notes = {"source_model": "embedded://tiny", "recipe": "w4a16", "eval": {"acc": 0.5}}
    first = modelcar.build_modelcar(tiny_model, tmp_path / "a", tag="v1", base_image=str(base_layout), annotations=notes)
    copy = tmp_path / "copy"
    shutil.copytree(tiny_model, copy)  # new inodes, new mtimes, same bytes
    for p in copy.rglob("*"):
        os.utime(p, (1_700_000_000, 1_700_000_000))
    second = modelcar.build_modelcar(copy, tmp_path / "b", tag="v1", base_image=str(base_layout), annotations=notes)
    assert first["digest"] == second["digest"]
    assert first["layers"] == second["layers"] and first["config_digest"] == second["config_digest"]
    assert first["annotations"]["io.shipyard.model.recipe"] == "w4a16"
    assert json.loads(first["annotations"]["io.shipyard.eval.summary"]) == {"acc": 0.5}

    base_manifest = oci_layout.Layout(base_layout).read_json(oci_layout.Layout(base_layout).resolve("1")["digest"])
    assert first["layers"][0]["digest"] == base_manifest["layers"][0]["digest"]  # base reused as is

    # One changed byte changes only the model layer.
    (copy / "config.json").write_text((copy / "config.json").read_text() + " ")
    third = modelcar.build_modelcar(copy, tmp_path / "c", tag="v1", base_image=str(base_layout), annotations=notes)
    assert third["layers"][0] == first["layers"][0] and third["layers"][1]["digest"] != first["layers"][1]["digest"]
    assert third["digest"] != first["digest"]


def test_push_pull_unpack_modelcar(tiny_model: Path, tmp_path: Path, registry: LocalRegistry, base_layout: Path) -> None:
    built = modelcar.build_modelcar(tiny_model, tmp_path / "layout", tag="v1", base_image=str(base_layout),
                               annotations={"pipeline_run": "run-42"})
    pushed = transfer.push_layout(tmp_path / "layout", registry.address, "team/tiny", "v1")
    assert pushed["uri"] == f"oci://{registry.address}/team/tiny@{built['digest']}"
    assert pushed["bytes_sent"] > 0 and pushed["layers"] == built["layers"]

    # The manifest read back from the registry is byte-identical and pinned by the same digest.
    client = RegistryClient(registry.address, "team/tiny")
    raw, media = client.get_manifest("v1")
    assert media == oci_layout.MT_MANIFEST
    assert raw == (tmp_path / "layout" / "blobs" / "sha256" / built["digest"][7:]).read_bytes()
    assert json.loads(skopeo("inspect", "--tls-verify=false", f"docker://{registry.address}/team/tiny:v1"))["Digest"] == built["digest"]
    assert client.tags() == ["v1"]

    # Pushing the same bytes again sends nothing and keeps the digest.
    again = transfer.push_layout(tmp_path / "layout", registry.address, "team/tiny", "v1")
    assert again["bytes_sent"] == 0 and again["digest"] == built["digest"]

    # Copy back with skopeo, unpack the rootfs with umoci: /models holds the model, the base has sh/ln/sleep.
    skopeo("copy", "--src-tls-verify=false", f"docker://{registry.address}/team/tiny@{built['digest']}", f"oci:{tmp_path / 'back'}:v1")
    subprocess.run(["umoci", "unpack", "--rootless", "--image", f"{tmp_path / 'back'}:v1", str(tmp_path / "bundle")],
                   check=True, capture_output=True)
    rootfs = tmp_path / "bundle" / "rootfs"
    assert tree_hashes(rootfs / "models") == tree_hashes(tiny_model)
    for tool in ("sh", "ln", "sleep"):
        assert (rootfs / "bin" / tool).is_symlink()
    config = json.loads((tmp_path / "bundle" / "config.json").read_text())
    assert config["process"]["user"]["uid"] == 1001
    labels = json.loads(skopeo("inspect", "--tls-verify=false", "--config", f"docker://{registry.address}/team/tiny:v1"))
    assert labels["config"]["Labels"]["io.shipyard.pipeline.run"] == "run-42"
    assert labels["config"]["User"] == "1001"
    if os.geteuid() == 0 and shutil.which("chroot"):
        # What KServe's modelcar sidecar does, run with the image's own busybox.
        out = subprocess.run(["chroot", str(rootfs), "/bin/sh", "-c", "ln -sf /models /tmp/m && ls /tmp/m/ && sleep 0"],
                             check=True, capture_output=True, text=True).stdout.split()
        assert "config.json" in out


def test_pull_model_and_resolve(tiny_model: Path, tmp_path: Path, registry: LocalRegistry) -> None:
    from shipyard.models.resolve import resolve_model

    built = modelcar.build_modelcar(tiny_model, tmp_path / "layout")
    assert built["tag"].startswith("model-")
    pushed = transfer.push_layout(tmp_path / "layout", registry.address, "team/resolve", built["tag"])
    meta = resolve_model(pushed["uri"], str(tmp_path / "resolved"))
    assert tree_hashes(tmp_path / "resolved") == tree_hashes(tiny_model)
    assert meta["uri"] == pushed["uri"]

    # The local-layout reference works too.
    local = oci_layout.layout_reference(tmp_path / "layout", built["digest"])
    assert local == f"oci://{(tmp_path / 'layout').resolve()}@{built['digest']}"
    info = transfer.pull_model(local, tmp_path / "from-layout")
    assert info["mode"] == "modelcar" and tree_hashes(tmp_path / "from-layout") == tree_hashes(tiny_model)


def test_base_image_from_registry(tiny_model: Path, tmp_path: Path, registry: LocalRegistry, base_layout: Path) -> None:
    transfer.push_layout(base_layout, registry.address, "base/busybox", "1")
    from_registry = modelcar.build_modelcar(tiny_model, tmp_path / "r", tag="v1", base_image=f"{registry.address}/base/busybox:1")
    from_layout = modelcar.build_modelcar(tiny_model, tmp_path / "l", tag="v1", base_image=f"oci:{base_layout}:1")
    assert from_registry["layers"] == from_layout["layers"]
    assert from_registry["annotations"]["org.opencontainers.image.base.digest"] == \
        from_layout["annotations"]["org.opencontainers.image.base.digest"]


def test_oras_round_trip(tiny_model: Path, tmp_path: Path, registry: LocalRegistry) -> None:
    import oras.provider

    built = modelcar.build_oras_artifact(tiny_model, tmp_path / "layout", tag="v1", annotations={"recipe": "none"})
    assert {la["title"] for la in built["layers"]} == set(tree_hashes(tiny_model))
    assert modelcar.build_oras_artifact(tiny_model, tmp_path / "again", tag="v1")["layers"] == built["layers"]
    pushed = transfer.push_layout(tmp_path / "layout", registry.address, "team/tiny-oras", "v1")

    # The oras client pulls it back with the folder tree.
    client = oras.provider.Registry(hostname=registry.address, insecure=True)
    manifest = client.get_manifest(f"{registry.address}/team/tiny-oras@{built['digest']}")
    assert manifest["artifactType"] == oci_layout.ARTIFACT_TYPE
    client.pull(target=f"{registry.address}/team/tiny-oras:v1", outdir=str(tmp_path / "oras-pull"))
    assert tree_hashes(tmp_path / "oras-pull") == tree_hashes(tiny_model)

    info = transfer.pull_model(pushed["uri"], tmp_path / "shipyard-pull")
    assert info["mode"] == "oras" and tree_hashes(tmp_path / "shipyard-pull") == tree_hashes(tiny_model)


# -- faults -----------------------------------------------------------------------------------
def test_registry_unreachable(tiny_model: Path, tmp_path: Path) -> None:
    modelcar.build_modelcar(tiny_model, tmp_path / "layout", tag="v1")
    with pytest.raises(ShipyardError, match="unreachable after 3 attempts") as err:
        transfer.push_layout(tmp_path / "layout", f"127.0.0.1:{free_port()}", "team/x", "v1")
    assert "\n" not in str(err.value) and "Connection refused" in str(err.value)
    with pytest.raises(ShipyardError, match="unreachable"):
        transfer.pull_model(f"oci://127.0.0.1:{free_port()}/team/x@sha256:{'0' * 64}", tmp_path / "p")
    assert not (tmp_path / "p").exists()


def test_tls_is_verified_by_default() -> None:
    client = RegistryClient("registry.example.com", "team/x")
    assert client.session.verify is True and client.schemes == ["https"]
    assert RegistryClient("registry.example.com", "team/x", insecure_tls=True).session.verify is False
    with pytest.raises(ShipyardError, match="repository"):
        RegistryClient("registry.example.com", "Team/X")


def test_credentials(tiny_model: Path, tmp_path: Path, auth_registry: LocalRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    modelcar.build_modelcar(tiny_model, tmp_path / "layout", tag="v1")
    with pytest.raises(ShipyardError, match="needs credentials") as err:
        transfer.push_layout(tmp_path / "layout", auth_registry.address, "team/secure", "v1")
    assert "\n" not in str(err.value)

    monkeypatch.setenv("SHIPYARD_REGISTRY_USERNAME", "shipper")
    monkeypatch.setenv("SHIPYARD_REGISTRY_PASSWORD", "wrong")
    with pytest.raises(ShipyardError, match="credentials were refused"):
        transfer.push_layout(tmp_path / "layout", auth_registry.address, "team/secure", "v1")

    # A Kubernetes dockerconfigjson secret mounted as a file.
    monkeypatch.delenv("SHIPYARD_REGISTRY_USERNAME")
    monkeypatch.delenv("SHIPYARD_REGISTRY_PASSWORD")
    secret = tmp_path / ".dockerconfigjson"
    token = base64.b64encode(b"shipper:s3cret").decode()
    secret.write_text(json.dumps({"auths": {f"http://{auth_registry.address}": {"auth": token}}}))
    monkeypatch.setenv("SHIPYARD_REGISTRY_AUTH_FILE", str(secret))
    pushed = transfer.push_layout(tmp_path / "layout", auth_registry.address, "team/secure", "v1")
    info = transfer.pull_model(pushed["uri"], tmp_path / "pulled")
    assert info["mode"] == "modelcar" and tree_hashes(tmp_path / "pulled") == tree_hashes(tiny_model)


def test_incomplete_model_folder(tiny_model: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model, broken)
    weights = sorted(broken.glob("*.safetensors"))
    assert weights
    for w in weights:
        w.unlink()
    with pytest.raises(ShipyardError, match=r"missing weights") as err:
        modelcar.build_modelcar(broken, tmp_path / "out")
    assert "\n" not in str(err.value) and not (tmp_path / "out").exists()
    with pytest.raises(ShipyardError, match="missing config.json"):
        shutil.rmtree(broken)
        broken.mkdir()
        (broken / "model.safetensors").write_bytes(b"x")
        (broken / "tokenizer.json").write_text("{}")
        modelcar.build_oras_artifact(broken, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_corrupt_layout_blob_is_caught(tiny_model: Path, tmp_path: Path) -> None:
    built = modelcar.build_modelcar(tiny_model, tmp_path / "layout", tag="v1")
    model_layer = tmp_path / "layout" / "blobs" / "sha256" / built["layers"][-1]["digest"][7:]
    data = bytearray(model_layer.read_bytes())
    data[-20] ^= 0xFF  # inside the gzip trailer area: bytes change, the digest no longer matches
    model_layer.write_bytes(bytes(data))
    with pytest.raises(ShipyardError, match="is corrupt|does not match its digest") as err:
        transfer.pull_model(oci_layout.layout_reference(tmp_path / "layout", built["digest"]), tmp_path / "out")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


class FaultProxy:
    """A real HTTP proxy in front of the registry that fails requests chosen by ``rule``.

    ``rule(method, path)`` returns None (forward), an HTTP status to answer instead, or
    "drop" to close the connection without an answer.
    """

    def __init__(self, upstream: str, rule: Callable[[str, str], int | str | None]) -> None:
        self.upstream, self.rule, self.seen = upstream, rule, []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                proxy.seen.append((self.command, self.path))
                verdict = proxy.rule(self.command, self.path)
                if verdict == "drop":
                    self.close_connection = True
                    return
                if isinstance(verdict, int):
                    self.send_response(verdict)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("content-length", "connection")}
                resp = requests.request(self.command, f"http://{proxy.upstream}{self.path}", headers=headers,
                                        data=body, allow_redirects=False, timeout=30)
                self.send_response(resp.status_code)
                for k, v in resp.headers.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                        self.send_header(k, v)
                payload = b"" if self.command == "HEAD" else resp.content
                self.send_header("Content-Length", str(len(payload) if self.command != "HEAD" else
                                                       resp.headers.get("Content-Length", "0")))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self.server = LoopbackServer(Handler)
        self.address = self.server.address

    def __enter__(self) -> FaultProxy:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


def test_transient_errors_are_retried(tiny_model: Path, tmp_path: Path, registry: LocalRegistry) -> None:
    built = modelcar.build_modelcar(tiny_model, tmp_path / "layout", tag="v1")
    failures = {"left": 2}

    def flaky(method: str, path: str) -> int | None:
        if method == "PUT" and "/blobs/uploads/" in path and failures["left"] > 0:
            failures["left"] -= 1
            return 503
        return None

    with FaultProxy(registry.address, flaky) as proxy:
        pushed = transfer.push_layout(tmp_path / "layout", proxy.address, "team/flaky", "v1")
    assert failures["left"] == 0 and pushed["digest"] == built["digest"]
    assert RegistryClient(registry.address, "team/flaky").get_manifest("v1")[0]


def test_interrupted_push_leaves_no_tag(tiny_model: Path, tmp_path: Path, registry: LocalRegistry) -> None:
    modelcar.build_modelcar(tiny_model, tmp_path / "layout", tag="v1")

    def cut_after_first_blob(method: str, path: str) -> str | None:
        puts = [p for m, p in proxy.seen if m == "PUT"]
        return "drop" if method == "PUT" and len(puts) > 1 else None

    with FaultProxy(registry.address, cut_after_first_blob) as proxy:
        with pytest.raises(ShipyardError, match="failed after 3 attempts") as err:
            transfer.push_layout(tmp_path / "layout", proxy.address, "team/cut", "v1")
    assert "\n" not in str(err.value)
    client = RegistryClient(registry.address, "team/cut")
    assert client.tags() == []
    with pytest.raises(ShipyardError, match="has no manifest 'v1'"):
        client.get_manifest("v1")


def test_eval_cache_and_modelcar_name_the_same_model(tiny_model: Path, tmp_path: Path, base_layout: Path) -> None:
    """One tree digest: the eval cache's model identity is the modelcar's io.shipyard.model.digest,
    also for a Hugging Face cache snapshot (a folder of symlinks) with download bookkeeping in it."""
    from shipyard.evaluation.cache import model_identity

    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    for path in tiny_model.iterdir():
        if path.is_file():
            (snapshot / path.name).symlink_to(path.resolve())
    (snapshot / ".cache" / "huggingface").mkdir(parents=True)
    (snapshot / ".cache" / "huggingface" / "download.lock").write_text("bookkeeping, not the model")
    identity = model_identity(snapshot)
    assert identity["sha256"] == model_identity(tiny_model)["sha256"] and identity["files"] >= 3
    car = modelcar.build_modelcar(snapshot, tmp_path / "car", tag="v1", base_image=str(base_layout))
    oras = modelcar.build_oras_artifact(tiny_model, tmp_path / "oras", tag="v1")
    for built in (car, oras):
        assert built["annotations"]["io.shipyard.model.digest"] == "sha256:" + identity["sha256"]
        assert built["model_digest"] == "sha256:" + identity["sha256"]
        assert int(built["annotations"]["io.shipyard.model.files"]) == identity["files"]
    assert ".cache/huggingface/download.lock" not in car["files"]
    (tmp_path / "changed").mkdir()
    shutil.copytree(tiny_model, tmp_path / "changed", dirs_exist_ok=True)
    (tmp_path / "changed" / "config.json").write_text((tiny_model / "config.json").read_text() + " ")
    assert model_identity(tmp_path / "changed")["sha256"] != identity["sha256"]


D = "sha256:" + "ab" * 32


@pytest.mark.parametrize(("text", "want"), [
    (f"oci://quay.io/org/m@{D}", ("quay.io", "org/m", "", D)),
    ("oci://127.0.0.1:5000/team/m:v1", ("127.0.0.1:5000", "team/m", "v1", "")),
    ("oci://quay.io/org/m", ("quay.io", "org/m", "latest", "")),
    (f"oci:///abs/layout@{D}", ("", "/abs/layout", "", D)),
    ("oci:///abs/layout", ("", "/abs/layout", "", "")),
    ("busybox", ("registry-1.docker.io", "library/busybox", "latest", "")),
    ("docker://ghcr.io/org/base:1.2", ("ghcr.io", "org/base", "1.2", "")),
    (f"localhost:5000/base@{D}", ("localhost:5000", "base", "", D)),
    ("org/base:2", ("registry-1.docker.io", "org/base", "2", "")),
])
def test_one_reference_parser(text: str, want: tuple[str, str, str, str]) -> None:
    from shipyard.oci.reference import parse

    ref = parse(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == want
    assert ref.reference == (want[3] or want[2])


@pytest.mark.parametrize(("text", "problem"), [
    ("oci://quay.io", "'oci://quay.io' names no repository"),
    ("oci://quay.io/org/m@sha256:abc", "'sha256:abc' is not a sha256 digest"),
    ("oci:///abs/layout@md5:00", "'md5:00' is not a sha256 digest"),
    ("s3://bucket/m", "'s3://bucket/m' is not an oci:// URI"),
])
def test_reference_parser_bad_input(text: str, problem: str) -> None:
    from shipyard.oci.reference import parse

    with pytest.raises(ShipyardError) as info:
        parse(text, "model_uri")
    assert (info.value.field, info.value.problem) == ("model_uri", problem)


def test_require_pinned_one_message() -> None:
    from shipyard.models.resolve import parse_model_uri
    from shipyard.oci.reference import require_pinned
    from shipyard.serving.kserve.config import check_model_uri

    assert require_pinned(f"oci://quay.io/org/m@{D}").digest == D
    assert require_pinned("oci:///abs/layout").is_layout
    assert require_pinned("oci://quay.io/org/m:v1", allow_mutable_tag=True).tag == "v1"
    with pytest.raises(ShipyardError) as pipeline:
        parse_model_uri("oci://quay.io/org/m:v1", allow_mutable_tag=False)
    with pytest.raises(ShipyardError) as deploy:
        check_model_uri("oci://quay.io/org/m:v1", allow_mutable_tag=False)
    assert pipeline.value.problem == deploy.value.problem == (
        "oci://quay.io/org/m:v1 uses the mutable tag 'v1': the weights behind it can change between runs")
    assert "SHIPYARD_ALLOW_MUTABLE_TAG=1" in pipeline.value.fix and "allow_mutable_tag" in deploy.value.fix
    assert check_model_uri(f"oci://quay.io/org/m@{D}", allow_mutable_tag=False) == D
