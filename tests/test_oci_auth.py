"""Registry credentials (shipyard.oci.auth): the environment, then docker config JSON files in their
order; a broken file or entry is one line that names the file and never the secret."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from shipyard.core.errors import ShipyardError
from shipyard.oci.auth import SECRET_MOUNT, auth_files, find_credentials

SECRET = "s3cr3t-Pa55word"


def _config(path: Path, auths: object) -> Path:
    """A docker config JSON at ``path`` holding ``{"auths": auths}``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"auths": auths}))
    return path


def _auth(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def test_auth_files_are_looked_at_in_their_documented_order(tmp_path: Path) -> None:
    env = {"SHIPYARD_REGISTRY_AUTH_FILE": "/a.json", "REGISTRY_AUTH_FILE": "/b.json", "DOCKER_CONFIG": "/c",
           "HOME": str(tmp_path)}
    assert auth_files(env) == [Path("/a.json"), Path("/b.json"), Path("/c/config.json"), SECRET_MOUNT,
                               tmp_path / ".docker" / "config.json"]
    assert auth_files({"HOME": str(tmp_path)}) == [SECRET_MOUNT, tmp_path / ".docker" / "config.json"]


def test_environment_credentials_win_and_lose_a_windows_line_end(tmp_path: Path) -> None:
    config = _config(tmp_path / "auth.json", {"ghcr.io": {"auth": _auth("file-user", "file-pass")}})
    env = {"SHIPYARD_REGISTRY_USERNAME": "env-user\r\n", "SHIPYARD_REGISTRY_PASSWORD": f"{SECRET}\r\n",
           "SHIPYARD_REGISTRY_AUTH_FILE": str(config), "HOME": str(tmp_path)}
    assert find_credentials("ghcr.io", env) == ("env-user", SECRET)
    # a username alone is not a credential: the file answers
    del env["SHIPYARD_REGISTRY_PASSWORD"]
    assert find_credentials("ghcr.io", env) == ("file-user", "file-pass")


@pytest.mark.parametrize(("key", "registry"), [
    ("ghcr.io", "ghcr.io"),
    ("https://GHCR.io/v2/", "ghcr.io"),
    ("http://localhost:5000", "localhost:5000"),
    ("quay.io", "https://quay.io/org/repo"),
    ("https://index.docker.io/v1/", "docker.io"),
    ("docker.io", "registry-1.docker.io"),
])
def test_an_entry_matches_its_host_however_written(tmp_path: Path, key: str, registry: str) -> None:
    config = _config(tmp_path / "auth.json", {key: {"auth": _auth("u", SECRET)}})
    env = {"REGISTRY_AUTH_FILE": str(config), "HOME": str(tmp_path)}
    assert find_credentials(registry, env) == ("u", SECRET)


def test_no_entry_for_the_host_is_anonymous(tmp_path: Path) -> None:
    config = _config(tmp_path / "auth.json", {"ghcr.io": {"auth": _auth("u", SECRET)},
                                               "localhost:5000": {"username": "u", "password": SECRET}})
    env = {"REGISTRY_AUTH_FILE": str(config), "HOME": str(tmp_path)}
    assert find_credentials("localhost:5001", env) is None  # another port is another registry
    assert find_credentials("quay.io", env) is None
    assert find_credentials("quay.io", {"HOME": str(tmp_path)}) is None  # no file at all


def test_the_first_file_with_the_host_wins(tmp_path: Path) -> None:
    first = _config(tmp_path / "first.json", {"quay.io": {"auth": _auth("q", "x")}})
    docker = _config(tmp_path / "docker" / "config.json", {"ghcr.io": {"username": "d", "password": "p"}})
    home = _config(tmp_path / "home" / ".docker" / "config.json", {"ghcr.io": {"auth": _auth("h", "p")}})
    env = {"SHIPYARD_REGISTRY_AUTH_FILE": str(first), "DOCKER_CONFIG": str(docker.parent),
           "HOME": str(home.parent.parent)}
    assert find_credentials("ghcr.io", env) == ("d", "p")
    assert find_credentials("quay.io", env) == ("q", "x")
    del env["DOCKER_CONFIG"]
    assert find_credentials("ghcr.io", env) == ("h", "p")


def test_a_password_with_a_colon_is_kept_whole(tmp_path: Path) -> None:
    config = _config(tmp_path / "auth.json", {"ghcr.io": {"auth": _auth("u", "a:b:c")}})
    assert find_credentials("ghcr.io", {"REGISTRY_AUTH_FILE": str(config), "HOME": str(tmp_path)}) == ("u", "a:b:c")


@pytest.mark.parametrize(("content", "problem"), [
    ("{not json " + SECRET, "is not readable docker config JSON (JSONDecodeError)"),
    ("", "is not readable docker config JSON (JSONDecodeError)"),
    (json.dumps({"auths": {"ghcr.io": {"auth": SECRET + "!!"}}}), "has an 'auth' value that is not base64"),
    (json.dumps({"auths": {"ghcr.io": {"auth": base64.b64encode(b"\xff\xfe" + SECRET.encode()).decode()}}}),
     "has an 'auth' value that is not base64"),
    (json.dumps({"auths": {"ghcr.io": {"username": "u"}}}), "has an entry without auth or username/password"),
    (json.dumps({"auths": {"ghcr.io": {"password": SECRET}}}), "has an entry without auth or username/password"),
])
def test_a_broken_file_or_entry_is_one_line_without_the_secret(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "auth.json"
    path.write_text(content)
    with pytest.raises(ShipyardError) as info:
        find_credentials("ghcr.io", {"SHIPYARD_REGISTRY_AUTH_FILE": str(path), "HOME": str(tmp_path)})
    message = str(info.value)
    assert problem in message and str(path) in info.value.field and info.value.fix
    assert "\n" not in message and SECRET not in message


@pytest.mark.parametrize("content", ["[]", '"ghcr.io"', "null", '{"auths": null}', '{"auths": ["ghcr.io"]}'])
def test_a_config_that_is_not_an_object_of_entries_is_one_line(tmp_path: Path, content: str) -> None:
    """Valid JSON of the wrong shape (a list, a string, ``"auths": null``) is refused like invalid
    JSON, not an AttributeError traceback."""
    path = tmp_path / "auth.json"
    path.write_text(content)
    with pytest.raises(ShipyardError) as info:
        find_credentials("ghcr.io", {"SHIPYARD_REGISTRY_AUTH_FILE": str(path), "HOME": str(tmp_path)})
    assert str(path) in info.value.field and "is not docker config JSON" in info.value.problem
    assert "\n" not in str(info.value)


def test_the_legacy_dockercfg_shape_without_auths_is_read(tmp_path: Path) -> None:
    path = tmp_path / "auth.json"
    path.write_text(json.dumps({"https://ghcr.io": {"auth": _auth("u", SECRET)}}))
    assert find_credentials("ghcr.io", {"REGISTRY_AUTH_FILE": str(path), "HOME": str(tmp_path)}) == ("u", SECRET)


@pytest.mark.parametrize("decoded", ["justauser", ":" + SECRET, "u:"])
def test_an_auth_value_that_is_not_user_colon_password_is_refused(tmp_path: Path, decoded: str) -> None:
    """base64 of a token alone (no ``user:``) once gave a user and an empty password: a 401 later
    with no word of the file."""
    config = _config(tmp_path / "auth.json", {"ghcr.io": {"auth": base64.b64encode(decoded.encode()).decode()}})
    with pytest.raises(ShipyardError) as info:
        find_credentials("ghcr.io", {"REGISTRY_AUTH_FILE": str(config), "HOME": str(tmp_path)})
    assert "not base64 'user:password'" in info.value.problem and SECRET not in str(info.value)


@pytest.mark.parametrize("helper", [{"credsStore": "desktop"}, {"credHelpers": {"ghcr.io": "ecr-login"}}])
def test_an_entry_kept_in_a_credential_helper_says_how_to_pass_it(tmp_path: Path, helper: dict[str, object]) -> None:
    """``docker login`` with a credential helper leaves ``"auths": {"ghcr.io": {}}`` in
    ~/.docker/config.json; shipyard runs no helper, so the fix is the environment, not a Secret."""
    path = tmp_path / "home" / ".docker" / "config.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"auths": {"ghcr.io": {}}, **helper}))
    with pytest.raises(ShipyardError) as info:
        find_credentials("ghcr.io", {"HOME": str(tmp_path / "home")})
    assert "credential helper" in info.value.problem and "SHIPYARD_REGISTRY_PASSWORD" in info.value.fix
