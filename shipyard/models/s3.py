"""MinIO/S3 storage: download models from ``s3://bucket/prefix``, upload step results.

Configuration: the cluster contract's names (docs/cluster-contract.md: Secret ``shipyard-s3``
with keys ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL_S3``, as the AWS
SDKs name them), first match wins; a local run needs none of it unless it uses ``s3://``:

* ``AWS_ENDPOINT_URL_S3`` (or ``AWS_ENDPOINT_URL``, or ``SHIPYARD_S3_ENDPOINT``):
  ``http://host:port`` or ``https://host:port`` (a bare ``host:port`` means HTTPS). Outside a
  cluster it defaults to ``https://s3.amazonaws.com``; in a pipeline step in a cluster a missing
  endpoint or key is an error naming the Secret and key, never a silent default. An endpoint that
  carries credentials (``http://KEY:SECRET@minio:9000``, a token as the user name) is refused as
  one line naming the variable, before anything is contacted and never shown
  (:func:`endpoint_setting`).
* ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (or ``SHIPYARD_S3_ACCESS_KEY`` /
  ``SHIPYARD_S3_SECRET_KEY``), or a mounted Kubernetes secret folder
  ``SHIPYARD_S3_SECRET_DIR`` holding files ``accesskey`` and ``secretkey`` (the keys of KFP's
  ``mlpipeline-minio-artifact`` secret; ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` file
  names work too).
* ``SHIPYARD_S3_REGION`` (or ``AWS_REGION`` / ``AWS_DEFAULT_REGION``), ``SHIPYARD_S3_BUCKET``
  (where step results go), ``SHIPYARD_S3_INSECURE_TLS=1`` to skip TLS verification (never the
  default).

Deadline: every call to the object store ends within ``SHIPYARD_S3_TIMEOUT_S`` seconds in all
(default 120; minio's own timeouts bound each read only), an object's download or upload getting
its bytes at 256 KiB/s on top: past it one line naming the setting (:class:`DeadlineMinio`).

Every downloaded object is checked against its size and checksum (the ``sha256`` user
metadata that :func:`upload_file` writes, else the MD5 ETag of a single-part upload); a failed
download leaves no partial model folder behind.
"""

from __future__ import annotations

import hashlib
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.core import contract
from shipyard.core.env import env_seconds
from shipyard.core.errors import ShipyardError, UnreachableError, refuse_credentials
from shipyard.core.files import atomic_dir, sha256_file
from shipyard.core.net import call_within, transfer_deadline

ENV_ENDPOINT = "AWS_ENDPOINT_URL_S3"
#: the variables the endpoint is read from, the first one set wins
ENDPOINT_VARS = (ENV_ENDPOINT, "AWS_ENDPOINT_URL", "SHIPYARD_S3_ENDPOINT")
#: the fix for an endpoint that carries a key, a secret or a token
ENDPOINT_CREDENTIALS_FIX = ("drop them from the URL and put the keys in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                            "(in a cluster: those keys of the Secret shipyard-s3)")
CHUNK = 1 << 20
SHA256_META = "sha256"


@dataclass(frozen=True)
class S3Config:
    """Where and how to reach the object store."""

    endpoint: str
    secure: bool
    access_key: str | None
    secret_key: str | None
    region: str | None
    bucket: str | None
    cert_check: bool = True


def _read_secret_file(folder: Path, *names: str) -> str | None:
    for name in names:
        path = folder / name
        if path.is_file():
            return path.read_text().strip()
    return None


def endpoint_setting(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """``(variable, value)`` of the S3 endpoint in ``env`` (default: this process's environment):
    the first of :data:`ENDPOINT_VARS` set, ``("", "")`` when none is. The one check of an endpoint
    that carries credentials: refused as one line naming the variable and
    :data:`ENDPOINT_CREDENTIALS_FIX`, the value never shown (the pre-flight, every S3 client and
    ``shipyard check`` come through here)."""
    env = os.environ if env is None else env
    for name in ENDPOINT_VARS:
        value = (env.get(name) or "").strip()
        if value:
            refuse_endpoint_credentials(value, name)
            return name, value
    return "", ""


def refuse_endpoint_credentials(value: str, field: str) -> None:
    """An S3 endpoint ``value`` that carries credentials, refused as one line naming ``field``
    (:func:`shipyard.core.errors.refuse_credentials` with :data:`ENDPOINT_CREDENTIALS_FIX`), read as
    :func:`load_config` reads it: a bare ``host[:port]`` is https, so a user name there is a token too."""
    text = value.strip()
    refuse_credentials(text if "://" in text or not text else f"https://{text}", field, ENDPOINT_CREDENTIALS_FIX)


def load_config(env: dict[str, str] | None = None) -> S3Config:
    """Read the S3 configuration from the environment (see the module docstring)."""
    env = dict(os.environ if env is None else env)
    cluster = contract.in_cluster(env)
    raw = endpoint_setting(env)[1]
    if not raw and cluster:
        raise contract.missing(ENV_ENDPOINT, "s3:// needs the object store's endpoint", env, contract.S3_SECRET)
    raw = raw or "https://s3.amazonaws.com"
    if "://" not in raw:
        raw = "https://" + raw
    parsed = urllib.parse.urlparse(raw)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ShipyardError(ENV_ENDPOINT, f"{raw!r} is not an http(s) endpoint", "write http://host:port or https://host")
    access = env.get("AWS_ACCESS_KEY_ID") or env.get("SHIPYARD_S3_ACCESS_KEY")
    secret = env.get("AWS_SECRET_ACCESS_KEY") or env.get("SHIPYARD_S3_SECRET_KEY")
    secret_dir = env.get("SHIPYARD_S3_SECRET_DIR")
    if secret_dir and not (access and secret):
        folder = Path(secret_dir)
        if not folder.is_dir():
            raise ShipyardError("SHIPYARD_S3_SECRET_DIR", f"{folder} is not a folder", "mount the S3 secret there or unset it")
        access = _read_secret_file(folder, "accesskey", "AWS_ACCESS_KEY_ID", "access_key")
        secret = _read_secret_file(folder, "secretkey", "AWS_SECRET_ACCESS_KEY", "secret_key")
        if not (access and secret):
            raise ShipyardError("SHIPYARD_S3_SECRET_DIR", f"{folder} lacks accesskey/secretkey files",
                                "mount a secret with keys accesskey and secretkey")
    if cluster and not (access and secret):
        raise contract.missing("AWS_SECRET_ACCESS_KEY" if access else "AWS_ACCESS_KEY_ID",
                               "s3:// needs the object store's credentials", env, contract.S3_SECRET)
    insecure = env.get("SHIPYARD_S3_INSECURE_TLS", "").lower() in ("1", "true", "yes")
    return S3Config(
        endpoint=parsed.netloc,
        secure=parsed.scheme == "https",
        access_key=access or None,
        secret_key=secret or None,
        region=env.get("SHIPYARD_S3_REGION") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
        bucket=env.get("SHIPYARD_S3_BUCKET") or None,
        cert_check=not insecure,
    )


def client(config: S3Config | None = None) -> DeadlineMinio:
    """A ``minio.Minio`` client for ``config`` (default: from the environment), with bounded
    timeouts: 10 s to connect and 120 s per read (minio's own default is 5 minutes each, retried),
    each call within ``SHIPYARD_S3_TIMEOUT_S`` in all (:class:`DeadlineMinio`), so an endpoint that
    accepts and never answers, or sends a byte every few seconds, ends in one line, not a long hang."""
    import certifi
    import urllib3
    from minio import Minio

    config = config or load_config()
    http = urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=S3_CONNECT_TIMEOUT_S, read=S3_READ_TIMEOUT_S),
        maxsize=10,
        cert_reqs="CERT_REQUIRED" if config.cert_check else "CERT_NONE",
        ca_certs=os.environ.get("SSL_CERT_FILE") or certifi.where(),
        retries=urllib3.Retry(total=3, connect=2, read=1, backoff_factor=0.5, status_forcelist=[500, 502, 503, 504]),
    )
    return DeadlineMinio(Minio(
        config.endpoint,
        access_key=config.access_key,
        secret_key=config.secret_key,
        secure=config.secure,
        region=config.region,
        cert_check=config.cert_check,
        http_client=http,
    ), config)


#: the setting that bounds each call to the object store (seconds in all; an object's bytes at 256 KiB/s on top)
ENV_TIMEOUT = "SHIPYARD_S3_TIMEOUT_S"


def s3_timeout_s() -> float:
    """The most one call to the object store may take before its bytes (``SHIPYARD_S3_TIMEOUT_S``, default 120)."""
    return env_seconds(ENV_TIMEOUT, 120.0)


class DeadlineMinio:
    """A ``minio.Minio`` whose every call ends within ``SHIPYARD_S3_TIMEOUT_S`` in all
    (:func:`shipyard.core.net.call_within`): ``list_objects`` answers a list; ``fget_object`` and
    ``fput_object`` get the object's bytes at 256 KiB/s on top; a streamed answer
    (``get_object``) is read inside :meth:`within` with its size."""

    def __init__(self, minio: Any, config: S3Config) -> None:
        self.minio = minio
        self.config = config
        self.timeout_s = s3_timeout_s()

    def within(self, what: str, fn: Any, *args: Any, size: int | None = None, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` within the deadline, plus ``size`` bytes at 256 KiB/s."""
        deadline = transfer_deadline(self.timeout_s, size)

        def late() -> UnreachableError:
            scheme = "https" if self.config.secure else "http"
            return UnreachableError(ENV_TIMEOUT, f"S3 at {scheme}://{self.config.endpoint} gave no whole answer to "
                                    f"{what} within {round(deadline, 1):g} s", f"check that the object store answers, or raise "
                                    f"{ENV_TIMEOUT} (seconds per call; an object gets 256 KiB/s on top)")

        return call_within(deadline, fn, *args, on_timeout=late, owner=self, **kwargs)

    def list_objects(self, *args: Any, **kwargs: Any) -> list[Any]:
        return self.within("list_objects", lambda: list(self.minio.list_objects(*args, **kwargs)))  # type: ignore[no-any-return]

    def fget_object(self, bucket: str, key: str, path: str, **kwargs: Any) -> Any:
        size = self.within("stat_object", self.minio.stat_object, bucket, key).size
        return self.within(f"fget_object s3://{bucket}/{key}", self.minio.fget_object, bucket, key, path, size=size,
                           **kwargs)

    def fput_object(self, bucket: str, key: str, path: str, *args: Any, **kwargs: Any) -> Any:
        return self.within(f"fput_object s3://{bucket}/{key}", self.minio.fput_object, bucket, key, path, *args,
                           size=os.path.getsize(path), **kwargs)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.minio, name)
        if not callable(attr):
            return attr
        return lambda *args, **kwargs: self.within(name, attr, *args, **kwargs)


#: S3 client timeouts (seconds): connect, and each read of a response
S3_CONNECT_TIMEOUT_S = 10.0
S3_READ_TIMEOUT_S = 120.0


def parse_s3_uri(uri: str, field: str = "uri") -> tuple[str, str]:
    """``s3://bucket/prefix`` -> ``(bucket, prefix)``."""
    if not uri.startswith("s3://"):
        raise ShipyardError(field, f"{uri!r} is not an s3:// URI", "write s3://bucket/prefix")
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    if not bucket:
        raise ShipyardError(field, f"{uri!r} names no bucket", "write s3://bucket/prefix")
    return bucket, prefix.strip("/")


def _s3_error(err: Exception, what: str, config: S3Config) -> ShipyardError:
    """Turn a minio/urllib3 failure into one line naming the object and the fix (a
    :class:`ShipyardError`, e.g. a call past its deadline, as it is)."""
    from minio.error import S3Error

    if isinstance(err, ShipyardError):
        return err

    if isinstance(err, S3Error):
        fixes = {
            "NoSuchBucket": "create the bucket or fix the URI",
            "NoSuchKey": "check the object key",
            "AccessDenied": "check the S3 credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, Secret shipyard-s3)",
            "InvalidAccessKeyId": "check AWS_ACCESS_KEY_ID (Secret shipyard-s3)",
            "SignatureDoesNotMatch": "check AWS_SECRET_ACCESS_KEY (Secret shipyard-s3)",
        }
        return ShipyardError(what, f"S3 error {err.code}: {err.message}", fixes.get(err.code, "check the bucket and credentials"))
    scheme = "https" if config.secure else "http"
    first = f"{type(err).__name__}: {err}".splitlines()[0][:300]
    return ShipyardError(what, f"cannot reach S3 at {scheme}://{config.endpoint} ({first})",
                         f"check {ENV_ENDPOINT} (Secret shipyard-s3) and that the object store is up")


def _expected_checksum(stat: Any) -> tuple[str, str] | None:
    """(algorithm, hex) to verify an object against, or None when the store gives none."""
    meta = {k.lower(): v for k, v in (stat.metadata or {}).items()}
    for key in (f"x-amz-meta-{SHA256_META}", SHA256_META):
        if meta.get(key):
            return "sha256", str(meta[key]).strip().lower()
    etag = (stat.etag or "").strip('"').lower()
    if len(etag) == 32 and "-" not in etag and all(c in "0123456789abcdef" for c in etag):
        return "md5", etag
    return None


def _save(mc: DeadlineMinio, bucket: str, key: str, target: Path, hashers: dict[str, Any]) -> int:
    """The object's bytes streamed into ``target`` and fed to ``hashers``: how many."""
    size = 0
    response = mc.minio.get_object(bucket, key)
    try:
        with open(target, "wb") as fh:
            for block in response.stream(CHUNK):
                fh.write(block)
                size += len(block)
                for h in hashers.values():
                    h.update(block)
    finally:
        response.close()
        response.release_conn()
    return size


def _download_object(mc: DeadlineMinio, config: Any, bucket: str, key: str, target: Path) -> dict[str, Any]:
    """One object streamed into ``target``, its size checked against the store's and its checksum
    (sha256 metadata, else a plain MD5 ETag) against the bytes: ``{"size", "sha256", "check"}``;
    within ``SHIPYARD_S3_TIMEOUT_S`` and the object's bytes at 256 KiB/s."""
    where = f"s3://{bucket}/{key}"
    try:
        stat = mc.stat_object(bucket, key)
        expected = _expected_checksum(stat)
        hashers = {"sha256": hashlib.sha256(), "md5": hashlib.md5(usedforsecurity=False)}
        size = mc.within(f"get_object {where}", _save, mc, bucket, key, target, hashers, size=stat.size)
    except ShipyardError:
        raise
    except Exception as err:
        raise _s3_error(err, where, config) from None
    if size != stat.size:
        raise ShipyardError(where, f"downloaded {size} bytes, the store says {stat.size}",
                            "retry; the object may have changed during the download")
    check = "size"
    if expected is not None:
        algo, want = expected
        got = hashers[algo].hexdigest()
        if got != want:
            raise ShipyardError(where, f"{algo} mismatch: expected {want}, got {got}",
                                "re-upload the object; the stored bytes or their checksum are corrupt")
        check = algo
    return {"size": size, "sha256": hashers["sha256"].hexdigest(), "check": check}


def download_prefix(uri: str, dest: str | Path) -> dict[str, Any]:
    """Download every object under ``s3://bucket/prefix`` into ``dest``, keeping the key tree.

    Each object's size and checksum are verified. ``dest`` appears whole or not at all: on
    any failure (missing bucket, empty prefix, checksum mismatch, network) it is left as it
    was and no partial folder remains. Returns ``{"uri", "objects", "size_bytes", "files"}``.
    """
    config = load_config()
    bucket, prefix = parse_s3_uri(uri, "model_uri")
    mc = client(config)
    list_prefix = f"{prefix}/" if prefix else ""
    files: list[dict[str, Any]] = []
    total = 0
    try:
        objects = [o for o in mc.list_objects(bucket, prefix=list_prefix, recursive=True) if not o.is_dir]
    except Exception as err:
        raise _s3_error(err, f"s3://{bucket}/{prefix}", config) from None
    if not objects:
        raise ShipyardError("model_uri", f"no objects under {uri}", "check the bucket and prefix (upload the model first)")
    with atomic_dir(dest) as tmp:
        for obj in objects:
            rel = obj.object_name[len(list_prefix):]
            target = (tmp / rel).resolve()
            if not rel or tmp.resolve() not in target.parents:
                raise ShipyardError(f"s3://{bucket}/{obj.object_name}", "object key escapes the target folder",
                                    "remove keys with '..' from the prefix")
            target.parent.mkdir(parents=True, exist_ok=True)
            entry = _download_object(mc, config, bucket, obj.object_name, target)
            files.append({"path": rel, **entry})
            total += entry["size"]
    return {"uri": uri, "objects": len(files), "size_bytes": total, "files": files}


def upload_file(path: str | Path, uri: str, content_type: str = "application/octet-stream") -> dict[str, Any]:
    """Upload one file to ``s3://bucket/key`` with its SHA-256 as user metadata."""
    config = load_config()
    bucket, key = parse_s3_uri(uri, "uri")
    path = Path(path)
    if not path.is_file():
        raise ShipyardError("path", f"{path} is not a file", "give an existing file")
    if not key:
        key = path.name
    digest = sha256_file(path)
    mc = client(config)
    try:
        result = mc.fput_object(bucket, key, str(path), content_type=content_type, metadata={SHA256_META: digest})
    except Exception as err:
        raise _s3_error(err, f"s3://{bucket}/{key}", config) from None
    return {"uri": f"s3://{bucket}/{key}", "size": path.stat().st_size, "sha256": digest, "etag": result.etag}


_CONTENT_TYPES = {
    ".json": "application/json",
    ".md": "text/markdown",
    ".html": "text/html",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".png": "image/png",
    ".txt": "text/plain",
}


def upload_dir(folder: str | Path, uri: str) -> dict[str, Any]:
    """Upload every file under ``folder`` to ``s3://bucket/prefix/<relative path>``.

    Used for step results (eval JSON, benchmark JSON, reports, rendered manifests) and for
    models. Returns ``{"uri", "objects", "size_bytes", "files"}``.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ShipyardError("folder", f"{folder} is not a folder", "give an existing folder")
    bucket, prefix = parse_s3_uri(uri, "uri")
    files = []
    total = 0
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        key = f"{prefix}/{rel}" if prefix else rel
        info = upload_file(path, f"s3://{bucket}/{key}", _CONTENT_TYPES.get(path.suffix.lower(), "application/octet-stream"))
        files.append({"path": rel, "size": info["size"], "sha256": info["sha256"]})
        total += info["size"]
    return {"uri": f"s3://{bucket}/{prefix}".rstrip("/"), "objects": len(files), "size_bytes": total, "files": files}


def results_uri(run_name: str, step: str) -> str | None:
    """``s3://$SHIPYARD_S3_BUCKET/<run>/<step>`` when a results bucket is configured, else None."""
    bucket = load_config().bucket
    if not bucket:
        return None
    return f"s3://{bucket}/{run_name.strip('/')}/{step.strip('/')}"
