"""Install a lock into a venv with uv: exactly the pinned files, from where pip is told to look.

``shipyard setup`` and ``.ci/setup``'s first step install every runtime's lock this way:
``uv pip install --python VENV --no-deps -r LOCK`` (``--require-hashes`` when the lock is hashed:
nothing is resolved, each file's sha256 is checked, as ``pip install --no-deps -r LOCK`` does),
with the host's pip settings carried over (``pip config list``, then ``PIP_*``): ``index-url``,
``extra-index-url``, ``find-links``, ``cert`` (``SSL_CERT_FILE``) and ``timeout``
(``UV_HTTP_TIMEOUT``). Every lock's hashes are the files of pip's main index (PyPI: ``shipyard
setup --relock`` reads them there) or of torch's CPU page, so uv asks the main index first and the
extra indexes after it, over all of them (``--index-strategy unsafe-best-match``, pip's way); uv's
own default would ask the extra indexes first, and a local mirror holding another wheel of the same
release (``py310`` where PyPI also has ``py311``) then fails the hash check. uv installs the same wheels several times faster than pip and links the big ones (torch
is in three venvs) from its cache: ``benchmarks/setup_time.py`` measures the whole setup.

Without uv (shipyard installed some other way) the locks go through pip, and setup says so.
Standard library only: ``.ci/setup`` runs this module before the base lock is installed::

    .venvs/base/bin/python -m shipyard.runtimes.lock_install .venvs/base/bin/python LOCK [LOCK ...]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

#: Where every lock's hashes come from (pip's default index)
PYPI_INDEX = "https://pypi.org/simple"
#: pip options carried from the host (into a build's pip.conf, or over to uv)
PIP_KEYS = ("index-url", "extra-index-url", "find-links", "trusted-host", "cert", "timeout", "default-timeout")


def host_pip_settings() -> dict[str, str]:
    """The host's pip options that an install needs (``pip config list``, then ``PIP_*`` env)."""
    settings: dict[str, str] = {}
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        key, _, value = line.partition("=")
        name = key.split(".", 1)[-1]
        if name in PIP_KEYS:
            settings[name] = value.strip().strip("'\"")
    for name in PIP_KEYS:
        env = os.environ.get("PIP_" + name.upper().replace("-", "_"))
        if env:
            settings[name] = env
    if "default-timeout" in settings:
        settings["timeout"] = settings.pop("default-timeout")
    return settings


def uv_binary() -> Path | None:
    """uv beside this interpreter (the base venv's, from the dev lock), else on PATH."""
    beside = Path(sys.executable).with_name("uv")
    if beside.exists():
        return beside
    found = shutil.which("uv")
    return Path(found) if found else None


def uv_index_args(settings: dict[str, str], links: list[str] | tuple[str, ...] = ()) -> list[str]:
    """uv's flags for pip's ``index-url``, ``extra-index-url`` and ``find-links`` (plus ``links``):
    the main index first (the locks' hashes are its files), then the extra ones, best match over all."""
    args: list[str] = []
    extra = settings.get("extra-index-url", "").split()
    if extra:
        for url in [settings.get("index-url") or PYPI_INDEX, *extra]:
            args += ["--index", url]
        args += ["--index-strategy", "unsafe-best-match"]
    elif settings.get("index-url"):
        args += ["--index-url", settings["index-url"]]
    for link in [*settings.get("find-links", "").split(), *links]:
        args += ["--find-links", link]
    return args


def uv_env(settings: dict[str, str]) -> dict[str, str]:
    """The environment uv runs with: pip's CA bundle and timeout in uv's names."""
    env = dict(os.environ)
    if settings.get("cert") and "SSL_CERT_FILE" not in env:
        env["SSL_CERT_FILE"] = settings["cert"]
    if settings.get("timeout") and "UV_HTTP_TIMEOUT" not in env:
        env["UV_HTTP_TIMEOUT"] = str(int(float(settings["timeout"])))
    return env


def install_lock(python: Path, lock: Path, links: list[str] | tuple[str, ...] = ()) -> None:
    """Install ``lock`` into the venv of ``python`` (no dependencies resolved; hashes checked when
    the lock has them), with uv when there is one, else with pip."""
    settings = host_pip_settings()
    hashed = "--hash=" in lock.read_text()
    uv = uv_binary()
    if uv is not None:
        cmd = [str(uv), "pip", "install", "--quiet", "--python", str(python), "--no-deps",
               *(["--require-hashes"] if hashed else []), *uv_index_args(settings, links), "-r", str(lock)]
        env = uv_env(settings)
    else:
        print("setup: no uv beside this Python or on PATH: installing with pip (slower)", flush=True)
        cmd = [str(python), "-m", "pip", "--disable-pip-version-check", "install", "-q", "--no-deps",
               *[arg for link in links for arg in ("--find-links", link)], "-r", str(lock)]
        env = dict(os.environ)
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env)


def main(argv: list[str]) -> int:
    """``PYTHON LOCK [LOCK ...]``: install each lock into the venv of PYTHON, in order."""
    if len(argv) < 2:
        print("usage: python -m shipyard.runtimes.lock_install PYTHON LOCK [LOCK ...]", file=sys.stderr)
        return 2
    for lock in argv[1:]:
        install_lock(Path(argv[0]), Path(lock))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
