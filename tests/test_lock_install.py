"""Installing a lock with uv (``shipyard.runtimes.lock_install``: what ``shipyard setup`` and
``.ci/setup``'s first step run): the real uv from the dev lock, a real venv, a wheel built here and
served from a local find-links folder (named through ``PIP_FIND_LINKS``, as a host's pip settings
would name it), hashes checked."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from shipyard.runtimes import lock_install
from shipyard.runtimes.lock_install import install_lock, uv_binary, uv_env, uv_index_args


def _wheel(folder: Path, name: str = "shipyard_probe", version: str = "1.0") -> Path:
    """A minimal pure-Python wheel with one module that says its version."""
    files = {f"{name}.py": f"VERSION = {version!r}\n",
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = f"{name}-{version}.dist-info/RECORD"

    def digest(text: str) -> str:
        return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()

    rows = [f"{path},{digest(text)},{len(text.encode())}" for path, text in files.items()] + [f"{record},,"]
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for member, text in [*files.items(), (record, "\n".join(rows) + "\n")]:
            whl.writestr(member, text)
    return path


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    return tmp_path / "venv" / "bin" / "python"


def test_uv_installs_the_hashed_lock_from_the_hosts_find_links_and_refuses_a_wrong_hash(
        tmp_path: Path, venv: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    if uv_binary() is None:
        pytest.fail("no uv beside the base venv's Python: bash .ci/setup installs it from requirements-dev.lock")
    links = tmp_path / "wheels"
    links.mkdir()
    sha = hashlib.sha256(_wheel(links).read_bytes()).hexdigest()
    (tmp_path / "simple").mkdir()  # an index that has nothing: the wheel comes from the find-links folder
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "simple").as_uri())
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    lock = tmp_path / "requirements.lock"
    lock.write_text(f"shipyard-probe==1.0 \\\n    --hash=sha256:{sha}\n")
    install_lock(venv, lock)
    printed = capsys.readouterr().out
    assert f"+ {uv_binary()} pip install" in printed and "--require-hashes" in printed, printed
    assert f"--find-links {links}" in printed, printed
    said = subprocess.run([str(venv), "-c", "import shipyard_probe; print(shipyard_probe.VERSION)"],
                          capture_output=True, text=True, check=True).stdout
    assert said.strip() == "1.0"
    # the same wheel under a hash the lock does not name: refused, nothing installed
    wrong = tmp_path / "wrong.lock"
    _wheel(links, version="2.0")
    wrong.write_text("shipyard-probe==2.0 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    with pytest.raises(subprocess.CalledProcessError):
        install_lock(venv, wrong)
    again = subprocess.run([str(venv), "-c", "import shipyard_probe; print(shipyard_probe.VERSION)"],
                           capture_output=True, text=True, check=True).stdout
    assert again.strip() == "1.0"


def test_pips_settings_become_uvs_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """With extra indexes, uv asks the main index first and takes the best match over all, as pip
    does (a local mirror's other wheel of the same release would fail the lock's hash); pip's CA
    bundle and timeout reach uv under its own names (unless uv's are set)."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("UV_HTTP_TIMEOUT", raising=False)
    settings = {"index-url": "https://mirror/simple", "extra-index-url": "file:///opt/a/simple file:///opt/b/simple",
                "find-links": "/opt/wheels", "cert": "/etc/ssl/ca.pem", "timeout": "180"}
    assert uv_index_args(settings, ["https://torch/cpu/"]) == [
        "--index", "https://mirror/simple", "--index", "file:///opt/a/simple", "--index", "file:///opt/b/simple",
        "--index-strategy", "unsafe-best-match", "--find-links", "/opt/wheels", "--find-links", "https://torch/cpu/"]
    # without pip's index-url, PyPI comes first: the locks' hashes are PyPI's files
    assert uv_index_args({"extra-index-url": "file:///opt/a/simple"})[:4] == [
        "--index", "https://pypi.org/simple", "--index", "file:///opt/a/simple"]
    assert uv_index_args({"find-links": "/opt/wheels"}) == ["--find-links", "/opt/wheels"]
    assert uv_index_args({"index-url": "https://mirror/simple"}) == ["--index-url", "https://mirror/simple"]
    env = uv_env(settings)
    assert env["UV_HTTP_TIMEOUT"] == "180" and env["SSL_CERT_FILE"] == "/etc/ssl/ca.pem"
    monkeypatch.setenv("SSL_CERT_FILE", "/mine.pem")
    assert uv_env(settings)["SSL_CERT_FILE"] == "/mine.pem"


def test_without_uv_the_lock_goes_through_pip_and_setup_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    links = tmp_path / "wheels"
    links.mkdir()
    sha = hashlib.sha256(_wheel(links).read_bytes()).hexdigest()
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True)
    python = tmp_path / "venv" / "bin" / "python"
    monkeypatch.setattr(lock_install, "uv_binary", lambda: None)
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    lock = tmp_path / "requirements.lock"
    lock.write_text(f"shipyard-probe==1.0 \\\n    --hash=sha256:{sha}\n")
    install_lock(python, lock)
    assert "installing with pip (slower)" in capsys.readouterr().out
    subprocess.run([str(python), "-c", "import shipyard_probe"], check=True)
