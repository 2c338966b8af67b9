"""A small OCI distribution (registry HTTP API v2) client: blobs and manifests, push and pull.

* TLS verification is on unless the registry is named insecure (``insecure_tls=True`` or
  listed in ``SHIPYARD_INSECURE_REGISTRIES``, comma separated). Insecure and loopback
  registries (127.0.0.1, localhost, ::1) may also be spoken to over plain HTTP, as Docker does;
  ``http://host:port`` forces plain HTTP.
* Authentication: HTTP Basic and Bearer token challenges, with credentials from
  :mod:`shipyard.oci.auth`.
* Transient failures (connection errors, timeouts, 429, 500, 502, 503, 504) are retried with
  the one retry policy (:mod:`shipyard.core.retry`): ``SHIPYARD_REGISTRY_RETRIES`` attempts
  (default 5), first wait ``SHIPYARD_REGISTRY_BACKOFF`` seconds (default 1, doubling, capped at 30).
* Deadline: each request ends within ``SHIPYARD_REGISTRY_TIMEOUT_S`` seconds in all (default 60),
  however slowly the registry answers; a blob's upload or download gets its bytes at 256 KiB/s on
  top (:func:`shipyard.core.net.transfer_deadline`). Past it: one line naming the setting, not retried.
"""

from __future__ import annotations

import base64
import hashlib
import re
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from shipyard.core.env import env_seconds, env_str
from shipyard.core.errors import ShipyardError, UnreachableError
from shipyard.core.net import call_within, transfer_deadline
from shipyard.core.retry import Retry
from shipyard.oci.auth import find_credentials

MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
TRANSIENT_STATUS = {429, 500, 502, 503, 504}
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
CHUNK = 1 << 20
ENV_ATTEMPTS = "SHIPYARD_REGISTRY_RETRIES"
ENV_BACKOFF = "SHIPYARD_REGISTRY_BACKOFF"
#: the setting that bounds each registry request (seconds in all; a blob's bytes at 256 KiB/s on top)
ENV_TIMEOUT = "SHIPYARD_REGISTRY_TIMEOUT_S"


class TransientError(Exception):
    """A failure worth retrying."""


def _parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    params = dict(re.findall(r'(\w+)="([^"]*)"', rest))
    return scheme.lower(), params


def _first_line(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}"
    reason = re.search(r"(Connection refused|Name or service not known|No route to host|timed out|"
                       r"certificate verify failed[^)'\"]*|wrong version number)", text)
    return reason.group(1) if reason else text.splitlines()[0][:200]


def _save(resp: requests.Response, dest: Path, digest: Any) -> int:
    """A streamed answer's body written to ``dest`` and fed to ``digest``: the bytes written."""
    count = 0
    with open(dest, "wb") as fh:
        for block in resp.iter_content(CHUNK):
            fh.write(block)
            digest.update(block)
            count += len(block)
    return count


def check_registry(registry: str, field: str = "registry") -> str:
    """``host[:port]`` (or ``http(s)://host[:port]``), stripped; refused without echoing any credentials.

    ``user:password@host`` is refused and the error never repeats the password (or the user):
    credentials belong in the registry auth file (the ``shipyard-registry`` Secret locally
    ``REGISTRY_AUTH_FILE``/``~/.docker/config.json``).
    """
    registry = (registry or "").strip().rstrip("/")
    host = re.sub(r"^https?://", "", registry)
    if "@" in host:  # user:pass@host, also with "/" or "@" inside the password
        shown = host.rsplit("@", 1)[1]
        raise ShipyardError(field, f"carries credentials (...@{shown}); they are never put in a parameter",
                            "give only host[:port] and put the credentials in the registry auth file "
                            "(Secret shipyard-registry; locally REGISTRY_AUTH_FILE or ~/.docker/config.json)")
    if not host or "/" in host or any(c.isspace() for c in host):
        raise ShipyardError(field, f"{registry!r} is not host[:port]", "write e.g. quay.io or 127.0.0.1:5000")
    return registry


class RegistryClient:
    """Talks to one repository in one registry."""

    def __init__(self, registry: str, repository: str, *, insecure_tls: bool = False,
                 credentials: tuple[str, str] | None = None, timeout: float | None = None) -> None:
        registry = check_registry(registry)
        forced_http = registry.startswith("http://")
        host = re.sub(r"^https?://", "", registry)
        if not re.fullmatch(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*", repository or ""):
            raise ShipyardError("repository", f"{repository!r} is not a valid repository name",
                                "use lowercase letters, digits, '.', '_', '-' and '/' (e.g. team/model)")
        self.host = host
        self.repository = repository
        listed = {h.strip() for h in env_str("SHIPYARD_INSECURE_REGISTRIES").split(",") if h.strip()}
        self.insecure = insecure_tls or host in listed
        hostname = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
        self.http_allowed = forced_http or self.insecure or hostname in LOOPBACK
        self.schemes = ["http"] if forced_http else (["https", "http"] if self.http_allowed else ["https"])
        self.scheme: str | None = None
        self.session = requests.Session()
        self.session.verify = not self.insecure
        if self.insecure:
            import urllib3

            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self.credentials = credentials if credentials is not None else find_credentials(host)
        if timeout is None:
            timeout = env_seconds(ENV_TIMEOUT, 60.0)
        #: each request's deadline in all (the bytes of a blob at 256 KiB/s on top)
        self.timeout_s = timeout
        # (connect, read): a registry that does not accept fails in 5 s, one that never answers in ``timeout``
        self.timeout: tuple[float, float] = (min(5.0, timeout), timeout)
        self.retry = Retry.from_env(ENV_ATTEMPTS, ENV_BACKOFF, attempts=5, backoff_s=1.0)
        self._auth_header: str | None = None

    # -- plumbing ---------------------------------------------------------------------------
    def within(self, what: str, fn: Callable[..., Any], *args: Any, size: int | None = None, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` ended at ``SHIPYARD_REGISTRY_TIMEOUT_S`` in all, plus ``size``
        bytes at 256 KiB/s: past it one :class:`~shipyard.core.errors.UnreachableError` line."""
        deadline = transfer_deadline(self.timeout_s, size)

        def late() -> UnreachableError:
            return UnreachableError(ENV_TIMEOUT, f"registry {self.host} gave no whole answer to {what} within "
                                    f"{round(deadline, 1):g} s", f"check that the registry answers, or raise {ENV_TIMEOUT} "
                                    "(seconds per request; a blob gets 256 KiB/s on top)")

        return call_within(deadline, fn, *args, on_timeout=late, owner=self, **kwargs)

    @property
    def base(self) -> str:
        if self.scheme is None:
            self._probe()
        return f"{self.scheme}://{self.host}"

    def _probe(self) -> None:
        """Find the scheme the registry speaks (``GET /v2/``) with retries."""
        last: BaseException | None = None
        for _attempt in self.retry.tries():
            for scheme in self.schemes:
                try:
                    resp = self.within("find its API (/v2/)", self.session.get, f"{scheme}://{self.host}/v2/",
                                       timeout=self.timeout)
                except requests.exceptions.SSLError as err:
                    last = err
                    if "certificate verify failed" in str(err) and not self.http_allowed:
                        raise ShipyardError(f"registry {self.host}", f"TLS certificate not trusted ({_first_line(err)})",
                                            "install the registry's CA, or set insecure_tls only for a test registry") from None
                    continue
                except requests.RequestException as err:
                    last = err
                    continue
                if resp.status_code in TRANSIENT_STATUS:
                    last = TransientError(f"HTTP {resp.status_code}")
                    continue
                self.scheme = scheme
                return
        raise UnreachableError(f"registry {self.host}", f"unreachable after {self.retry.attempts} attempts ({_first_line(last)})"
                            if last else "unreachable", "check the registry address, that it runs, and the network")

    def _authenticate(self, resp: requests.Response) -> bool:
        """Answer a 401 challenge; False when there is nothing more to try."""
        scheme, params = _parse_challenge(resp.headers.get("WWW-Authenticate", ""))
        if scheme == "basic":
            if not self.credentials:
                return False
            user, password = self.credentials
            header = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
            if self._auth_header == header:
                return False
            self._auth_header = header
            return True
        if scheme == "bearer" and params.get("realm"):
            query = {k: params[k] for k in ("service", "scope") if k in params}
            auth = self.credentials if self.credentials else None
            token_resp = self.within("get a token", self.session.get, params["realm"], params=query, auth=auth,
                                     timeout=self.timeout)
            if token_resp.status_code != 200:
                return False
            body = token_resp.json()
            token = body.get("token") or body.get("access_token")
            if not token or self._auth_header == f"Bearer {token}":
                return False
            self._auth_header = f"Bearer {token}"
            return True
        return False

    def request(self, method: str, path: str, *, what: str, ok: tuple[int, ...] = (200,),
                body: Callable[[], Any] | None = None, headers: dict[str, str] | None = None,
                stream: bool = False, url: str | None = None, size: int | None = None) -> requests.Response:
        """One API call with auth and retries; ``body`` makes a fresh request body per attempt of
        ``size`` bytes (its deadline grows by them). With ``stream`` the deadline covers the answer's
        headers: the caller reads its body within one of its own (:meth:`within`)."""
        target = url or f"{self.base}/v2/{self.repository}/{path}"
        last: BaseException | None = None
        for _attempt in self.retry.tries():
            hdrs = dict(headers or {})
            try:
                for _ in range(3):  # the first try, then answering up to two auth challenges
                    if self._auth_header:
                        hdrs["Authorization"] = self._auth_header
                    data = body() if body else None
                    try:
                        resp = self.within(what, self.session.request, method, target, data=data, headers=hdrs,
                                           stream=stream, timeout=self.timeout, allow_redirects=True, size=size)
                    finally:
                        if hasattr(data, "close"):
                            data.close()
                    if resp.status_code != 401 or not self._authenticate(resp):
                        break
                if resp.status_code in TRANSIENT_STATUS:
                    raise TransientError(f"HTTP {resp.status_code}")
                if resp.status_code in (401, 403):
                    has = "the configured credentials were refused" if self.credentials else "needs credentials"
                    raise ShipyardError(f"registry {self.host}", f"{what}: HTTP {resp.status_code}, {has}",
                                        "check SHIPYARD_REGISTRY_USERNAME/PASSWORD or the docker config secret "
                                        "(SHIPYARD_REGISTRY_AUTH_FILE)")
                if resp.status_code not in ok:
                    raise ShipyardError(f"registry {self.host}", f"{what}: HTTP {resp.status_code} {_error_text(resp)}",
                                        "check the repository name, tag and your permissions")
                return resp
            except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError,
                    TransientError) as err:
                last = err
        raise ShipyardError(f"registry {self.host}", f"{what}: failed after {self.retry.attempts} attempts ({_first_line(last)})",
                            "check that the registry is up and reachable; transient errors were retried")

    # -- blobs ------------------------------------------------------------------------------
    def has_blob(self, digest: str) -> bool:
        resp = self.request("HEAD", f"blobs/{digest}", what=f"check blob {digest[:19]}", ok=(200, 404))
        return resp.status_code == 200

    def push_blob(self, path: Path, digest: str, size: int) -> bool:
        """Upload a blob unless the registry has it; True when bytes were sent."""
        if self.has_blob(digest):
            return False

        def attempt() -> requests.Response:
            start = self.request("POST", "blobs/uploads/", what=f"start upload of {digest[:19]}", ok=(202,))
            location = urllib.parse.urljoin(f"{self.base}/", start.headers["Location"])
            sep = "&" if "?" in location else "?"
            return self.request("PUT", "", url=f"{location}{sep}digest={urllib.parse.quote(digest)}",
                                what=f"upload blob {digest[:19]} ({size} bytes)", ok=(201,),
                                body=lambda: open(path, "rb"), size=size,
                                headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)})

        try:
            attempt()
        except ShipyardError as err:
            if "HTTP 401" in err.problem or "HTTP 403" in err.problem:
                raise
            if self.has_blob(digest):  # the upload landed even though the answer got lost
                return True
            attempt()  # a fresh upload session: the old one may be spoilt by a half-sent body
        return True

    def fetch_blob(self, digest: str, dest: Path, size: int | None = None) -> None:
        """Download a blob to ``dest`` and verify its digest and size."""
        algo, _, want = digest.partition(":")
        if algo != "sha256":
            raise ShipyardError(f"blob {digest}", "unsupported digest algorithm", "use sha256 images")
        for attempt in self.retry.tries():
            what = f"fetch blob {digest[:19]}"
            resp = self.request("GET", f"blobs/{digest}", what=what, stream=True)
            length = resp.headers.get("Content-Length", "")
            expected = size if size is not None else (int(length) if length.isdigit() else None)
            h = hashlib.sha256()
            try:
                n = self.within(what, _save, resp, dest, h, size=expected)
            except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError):
                if not self.retry.is_last(attempt):
                    continue
                raise ShipyardError(f"registry {self.host}", f"download of {digest[:19]} interrupted",
                                    "retry when the registry is reachable") from None
            finally:
                resp.close()
            if h.hexdigest() != want or (size is not None and n != size):
                raise ShipyardError(f"blob {digest}", f"content does not match its digest/size (got sha256:{h.hexdigest()}, {n} bytes)",
                                    "the registry returned corrupt bytes; retry or check the registry storage")
            return

    # -- manifests --------------------------------------------------------------------------
    def put_manifest(self, reference: str, data: bytes, media_type: str) -> str:
        """PUT exact manifest bytes under a digest or a tag; return the registry's digest."""
        resp = self.request("PUT", f"manifests/{reference}", what=f"put manifest {reference}", ok=(201, 200),
                            body=lambda: data, headers={"Content-Type": media_type})
        return resp.headers.get("Docker-Content-Digest", "")

    def get_manifest(self, reference: str) -> tuple[bytes, str]:
        """The manifest bytes and media type for a tag or a digest."""
        resp = self.request("GET", f"manifests/{reference}", what=f"get manifest {reference}", ok=(200, 404),
                            headers={"Accept": ", ".join(MANIFEST_TYPES)})
        if resp.status_code == 404:
            raise ShipyardError(f"oci://{self.host}/{self.repository}", f"has no manifest {reference!r}",
                                "check the repository, tag or digest")
        return resp.content, resp.headers.get("Content-Type", "").split(";")[0]

    def tags(self) -> list[str]:
        resp = self.request("GET", "tags/list", what="list tags", ok=(200, 404))
        return sorted((resp.json().get("tags") or []) if resp.status_code == 200 else [])


def _error_text(resp: requests.Response) -> str:
    try:
        errors = resp.json().get("errors") or []
        return "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors)[:300]
    except ValueError:
        return resp.text.strip().splitlines()[0][:200] if resp.text.strip() else ""
