"""S3 round trips with the real minio client against moto's S3 server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.core.errors import ShipyardError
from shipyard.core.files import sha256_file
from shipyard.core.net import free_port
from shipyard.models import s3 as s3store


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture()
def s3_env(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    for name in ("SHIPYARD_S3_SECRET_DIR", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "SHIPYARD_S3_INSECURE_TLS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("SHIPYARD_S3_REGION", "us-east-1")
    monkeypatch.setenv("SHIPYARD_S3_BUCKET", "results")
    return s3_server


def _tree_hashes(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): sha256_file(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def _make_bucket(name: str) -> None:
    mc = s3store.client()
    if not mc.bucket_exists(name):
        mc.make_bucket(name)


def test_model_upload_download_round_trip(s3_env: str, tiny_model: Path, tmp_path: Path) -> None:
    _make_bucket("models")
    up = s3store.upload_dir(tiny_model, "s3://models/tiny/v1")
    assert up["objects"] == len(_tree_hashes(tiny_model)) and up["size_bytes"] > 0

    dest = tmp_path / "downloaded"
    down = s3store.download_prefix("s3://models/tiny/v1", dest)
    assert _tree_hashes(dest) == _tree_hashes(tiny_model)
    assert down["objects"] == up["objects"] and down["size_bytes"] == up["size_bytes"]
    assert {f["check"] for f in down["files"]} == {"sha256"}
    assert not list(tmp_path.glob(".downloaded.partial-*"))


def test_resolve_model_from_s3(s3_env: str, tiny_model: Path, tmp_path: Path) -> None:
    """The lead's resolve_model() goes through download_prefix for s3:// URIs."""
    from shipyard.models.resolve import resolve_model

    _make_bucket("models")
    s3store.upload_dir(tiny_model, "s3://models/tiny/resolve")
    meta = resolve_model("s3://models/tiny/resolve", str(tmp_path / "m"))
    assert meta["uri"] == "s3://models/tiny/resolve"
    assert _tree_hashes(tmp_path / "m") == _tree_hashes(tiny_model)


def test_objects_without_sha_metadata_use_md5_etag(s3_env: str, tmp_path: Path) -> None:
    _make_bucket("plain")
    mc = s3store.client()
    payload = b'{"architectures": ["X"]}'
    mc.put_object("plain", "m/config.json", io.BytesIO(payload), len(payload))
    down = s3store.download_prefix("s3://plain/m", tmp_path / "out")
    assert down["files"][0]["check"] == "md5"
    assert down["files"][0]["sha256"] == hashlib.sha256(payload).hexdigest()


def test_checksum_mismatch_leaves_nothing(s3_env: str, tmp_path: Path) -> None:
    _make_bucket("corrupt")
    mc = s3store.client()
    good = b"fine"
    bad = b"these bytes are not what the checksum says"
    mc.put_object("corrupt", "m/a.json", io.BytesIO(good), len(good), metadata={"sha256": hashlib.sha256(good).hexdigest()})
    mc.put_object("corrupt", "m/b.bin", io.BytesIO(bad), len(bad), metadata={"sha256": "0" * 64})
    dest = tmp_path / "out"
    with pytest.raises(ShipyardError) as err:
        s3store.download_prefix("s3://corrupt/m", dest)
    assert "s3://corrupt/m/b.bin" in str(err.value) and "sha256 mismatch" in str(err.value)
    assert "\n" not in str(err.value)
    assert not dest.exists()
    assert list(tmp_path.iterdir()) == []


def test_existing_dest_untouched_on_failure(s3_env: str, tmp_path: Path) -> None:
    dest = tmp_path / "keep"
    dest.mkdir()
    (dest / "old.txt").write_text("old")
    with pytest.raises(ShipyardError, match="NoSuchBucket"):
        s3store.download_prefix("s3://no-such-bucket/m", dest)
    assert [p.name for p in dest.iterdir()] == ["old.txt"]


def test_missing_bucket_and_empty_prefix(s3_env: str, tmp_path: Path) -> None:
    with pytest.raises(ShipyardError, match="NoSuchBucket") as err:
        s3store.download_prefix("s3://no-such-bucket/m", tmp_path / "x")
    assert "\n" not in str(err.value)
    _make_bucket("empty")
    with pytest.raises(ShipyardError, match="no objects under s3://empty/nothing"):
        s3store.download_prefix("s3://empty/nothing", tmp_path / "y")
    f = tmp_path / "r.json"
    f.write_text("{}")
    with pytest.raises(ShipyardError, match="NoSuchBucket"):
        s3store.upload_file(f, "s3://no-such-bucket/r.json")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_results_upload_to_configured_bucket(s3_env: str, tmp_path: Path) -> None:
    _make_bucket("results")
    results = tmp_path / "results"
    (results / "reports").mkdir(parents=True)
    (results / "eval.json").write_text('{"score": 0.5}')
    (results / "reports" / "report.md").write_text("# report")
    uri = s3store.results_uri("run-1", "evaluate")
    assert uri == "s3://results/run-1/evaluate"
    up = s3store.upload_dir(results, uri)
    assert up["objects"] == 2
    stat = s3store.client().stat_object("results", "run-1/evaluate/reports/report.md")
    assert stat.content_type == "text/markdown"
    back = s3store.download_prefix(uri, tmp_path / "back")
    assert _tree_hashes(tmp_path / "back") == _tree_hashes(results) and back["objects"] == 2


def test_unreachable_endpoint_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("SHIPYARD_S3_ACCESS_KEY", "a")
    monkeypatch.setenv("SHIPYARD_S3_SECRET_KEY", "b")
    monkeypatch.setenv("SHIPYARD_S3_REGION", "us-east-1")
    with pytest.raises(ShipyardError, match="cannot reach S3 at http://127.0.0.1") as err:
        s3store.download_prefix("s3://models/m", tmp_path / "out")
    assert "\n" not in str(err.value) and not (tmp_path / "out").exists()


def test_config_from_secret_dir(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "accesskey").write_text("minio\n")
    (secret / "secretkey").write_text("minio123\n")
    cfg = s3store.load_config({"SHIPYARD_S3_ENDPOINT": "minio-service.kubeflow:9000", "SHIPYARD_S3_SECRET_DIR": str(secret)})
    assert (cfg.endpoint, cfg.secure, cfg.access_key, cfg.secret_key, cfg.cert_check) == (
        "minio-service.kubeflow:9000", True, "minio", "minio123", True)
    cfg = s3store.load_config({"SHIPYARD_S3_ENDPOINT": "http://m:9000", "SHIPYARD_S3_INSECURE_TLS": "1"})
    assert (cfg.secure, cfg.cert_check) == (False, False)
    with pytest.raises(ShipyardError, match="AWS_ENDPOINT_URL_S3"):
        s3store.load_config({"SHIPYARD_S3_ENDPOINT": "ftp://x"})
    with pytest.raises(ShipyardError, match="lacks accesskey"):
        s3store.load_config({"SHIPYARD_S3_SECRET_DIR": str(tmp_path)})


KEY_ID, SECRET_KEY = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMIhunter2pw"


@pytest.mark.parametrize(("name", "userinfo", "scheme"), [
    ("AWS_ENDPOINT_URL_S3", f"{KEY_ID}:{SECRET_KEY}", "http://"),
    ("AWS_ENDPOINT_URL_S3", f"{KEY_ID}:it's{SECRET_KEY}", "https://"),  # a password with a ' in it
    ("AWS_ENDPOINT_URL_S3", SECRET_KEY, "http://"),  # a token as the user name, no password
    ("AWS_ENDPOINT_URL_S3", SECRET_KEY, ""),  # a bare host:port is https: the user name is a token too
    ("AWS_ENDPOINT_URL", f"{KEY_ID}:{SECRET_KEY}", "http://"),
    ("SHIPYARD_S3_ENDPOINT", f"{KEY_ID}:p@{SECRET_KEY}", ""),
], ids=["key-and-secret", "password-with-quote", "token-as-user", "bare-token-as-user", "aws-endpoint-url",
        "shipyard-endpoint-bare"])
def test_an_endpoint_that_carries_credentials_is_one_line_and_nothing_is_contacted(
        name: str, userinfo: str, scheme: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``AWS_ENDPOINT_URL_S3`` (the Secret shipyard-s3's in a cluster) or its alternatives with a key,
    secret or token in the URL: one line naming the variable and where the keys go, the value never
    shown and the endpoint never contacted. Before, every S3 client failed on it with minio's
    "username in endpoint is not allowed" as "cannot reach S3", or a ValueError traceback."""
    from http.server import BaseHTTPRequestHandler

    from shipyard.testing.loopback import LoopbackServer

    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            hits.append(self.path)
            self.send_response(500)
            self.end_headers()

        do_HEAD = do_PUT = do_GET  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    for other in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "SHIPYARD_S3_ENDPOINT", "SHIPYARD_S3_SECRET_DIR"):
        monkeypatch.delenv(other, raising=False)
    with LoopbackServer(Handler) as server:
        monkeypatch.setenv(name, f"{scheme}{userinfo}@{server.address}")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "a")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "b")
        calls = [lambda: s3store.download_prefix("s3://models/m", tmp_path / "out"), lambda: s3store.load_config()]
        for call in calls:
            with pytest.raises(ShipyardError) as err:
                call()
            line = str(err.value)
            assert line.startswith(f"{name}: http") and "carries credentials (not shown)" in line, line
            assert "put the keys in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in line and "\n" not in line, line
            assert SECRET_KEY not in line and KEY_ID not in line, line
    assert not hits and not (tmp_path / "out").exists()
    monkeypatch.setenv(name, "http://127.0.0.1:9000")
    assert s3store.endpoint_setting() == (name, "http://127.0.0.1:9000")
