"""Registry credentials: a docker config JSON (a Kubernetes ``.dockerconfigjson`` secret) or env.

Lookup order for a registry host (first match wins):

1. ``SHIPYARD_REGISTRY_USERNAME`` + ``SHIPYARD_REGISTRY_PASSWORD`` (e.g. ``valueFrom.secretKeyRef``).
2. The docker config JSON files, in order: ``SHIPYARD_REGISTRY_AUTH_FILE``, ``REGISTRY_AUTH_FILE``,
   ``$DOCKER_CONFIG/config.json``, ``/var/run/secrets/shipyard/registry/.dockerconfigjson``
   (a ``kubernetes.io/dockerconfigjson`` secret mounted there), ``~/.docker/config.json``.
   An entry matches on ``host[:port]`` with or without ``https://`` / ``http://`` and a path.

No credentials is fine for registries that allow anonymous access.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from shipyard.core.errors import ShipyardError

SECRET_MOUNT = Path("/var/run/secrets/shipyard/registry/.dockerconfigjson")
DOCKER_HUB_ALIASES = ("docker.io", "index.docker.io", "registry-1.docker.io", "https://index.docker.io/v1/")


def auth_files(env: dict[str, str] | None = None) -> list[Path]:
    """The docker config JSON files looked at, in order (existing or not)."""
    env = dict(os.environ if env is None else env)
    files: list[Path] = []
    for name in ("SHIPYARD_REGISTRY_AUTH_FILE", "REGISTRY_AUTH_FILE"):
        if env.get(name):
            files.append(Path(env[name]))
    if env.get("DOCKER_CONFIG"):
        files.append(Path(env["DOCKER_CONFIG"]) / "config.json")
    files.append(SECRET_MOUNT)
    files.append(Path(env.get("HOME", str(Path.home()))) / ".docker" / "config.json")
    return files


def _host_key(key: str) -> str:
    key = key.strip()
    for prefix in ("https://", "http://"):
        if key.startswith(prefix):
            key = key[len(prefix):]
    return key.split("/", 1)[0].lower()


def _entry_credentials(entry: dict, where: str, helper: bool = False) -> tuple[str, str]:
    """(user, password) of one ``auths`` entry; ``helper``: the file names a credential helper
    (``credsStore``/``credHelpers``), where ``docker login`` keeps the secret instead."""
    if entry.get("auth"):
        try:
            user, colon, password = base64.b64decode(entry["auth"]).decode().partition(":")
        except Exception:  # not base64 (binascii.Error, TypeError), not UTF-8
            user = colon = password = ""
        if not (user and colon and password):  # a token alone once read as a user with no password
            raise ShipyardError(where, "has an 'auth' value that is not base64 'user:password'",
                                "recreate the secret with `kubectl create secret docker-registry`")
        return user, password
    if entry.get("username") and entry.get("password"):
        return entry["username"], entry["password"]
    if helper:
        raise ShipyardError(where, "has no auth of its own: docker keeps it in a credential helper, which shipyard "
                            "does not run", "set SHIPYARD_REGISTRY_USERNAME and SHIPYARD_REGISTRY_PASSWORD")
    raise ShipyardError(where, "has an entry without auth or username/password",
                        "recreate the secret with `kubectl create secret docker-registry`")


def find_credentials(registry: str, env: dict[str, str] | None = None) -> tuple[str, str] | None:
    """(username, password) for ``registry`` (``host[:port]``), or None for anonymous access."""
    env = dict(os.environ if env is None else env)
    # a value read from a file saved on Windows ends in \r\n: never part of the credential
    user = (env.get("SHIPYARD_REGISTRY_USERNAME") or "").strip("\r\n")
    password = (env.get("SHIPYARD_REGISTRY_PASSWORD") or "").strip("\r\n")
    if user and password:
        return user, password
    host = _host_key(registry)
    wanted = {host}
    if host in {_host_key(a) for a in DOCKER_HUB_ALIASES}:
        wanted |= {_host_key(a) for a in DOCKER_HUB_ALIASES}
    for path in auth_files(env):
        if not path.is_file():
            continue
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise ShipyardError(str(path), f"is not readable docker config JSON ({type(err).__name__})",
                                "mount a kubernetes.io/dockerconfigjson secret or fix the file") from None
        # {"auths": {host: entry}}, or the legacy .dockercfg's {host: entry}
        auths = config.get("auths", config) if isinstance(config, dict) else None
        if not isinstance(auths, dict):
            raise ShipyardError(str(path), 'is not docker config JSON (want {"auths": {"<host>": {"auth": ...}}})',
                                "mount a kubernetes.io/dockerconfigjson secret or fix the file")
        for key, entry in auths.items():
            if isinstance(entry, dict) and _host_key(key) in wanted:
                helper = bool(config.get("credsStore") or config.get("credHelpers"))
                return _entry_credentials(entry, f"{path} [{key}]", helper)
    return None
