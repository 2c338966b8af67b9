"""Build the runtime images from ``images/<runtime>/Containerfile`` with podman (or buildah).

``shipyard images build [--runtime R] [--flavor cpu|gpu]`` tags each image exactly as
:func:`shipyard.runtimes.runtime.runtime_image` (and so ``shipyard compile``) names it. The **gpu**
flavor is the cluster image and uses the Containerfile's default base images. The **cpu** flavor
is what local container runs use: the same locks as the local venvs, on a Debian bookworm
Python base that this module makes with ``mmdebstrap`` and ``podman import`` when
``SHIPYARD_PYTHON_BASE`` names none (docker.io cannot be reached from every machine). A gpu
build takes its base by digest only (``SHIPYARD_GPU_BASE_IMAGE``); every Python distribution
comes from a hashed lock (``pip install --require-hashes``).

A build sees the host's pip settings (index URLs, find-links, CA bundle; ``pip config list`` and
``PIP_*``), mounted for the build only, and the host's pip cache, so the large torch and vLLM
wheels are not downloaded twice. Nothing of either stays in the image.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from shipyard.core.errors import ShipyardError
from shipyard.core.net import http_request
from shipyard.runtimes.lock_install import host_pip_settings
from shipyard.runtimes.runtime import FLAVORS, IMAGES_DIR, REPO_ROOT, RUNTIMES, get_runtime, runtime_image

#: The Debian bookworm Python base of the cpu flavor, made here when it is missing.
PYTHON_BASE = "localhost/shipyard-python-base:bookworm"
PYTHON_BASE_PACKAGES = ("python3.11", "python3.11-venv", "ca-certificates")
#: torch's CPU builds (``+cpu``, in the cpu flavor's locks and the garak lock) are only on PyTorch's
#: CPU index. A build (and ``shipyard setup``) adds torch's page there as find-links when it answers;
#: the lock's hash pins the file wherever it comes from (the host's find-links otherwise). Not in
#: the locks: pip would retry an unreachable page once per package.
TORCH_CPU_LINKS = "https://download.pytorch.org/whl/cpu/torch/"
#: The gpu flavor's base (every Containerfile's default), by tag: builds take it by digest only.
GPU_BASE = "docker.io/library/python:3.11-slim-bookworm"
#: Where a build sees the host's pip settings (read-only) and pip cache.
BUILD_MOUNT = "/run/shipyard-build"


@dataclass
class BuiltImage:
    """One image build: its reference, size and how long it took."""

    runtime: str
    flavor: str
    ref: str
    size_bytes: int
    seconds: float
    cached: bool = False


def engine() -> str:
    """The container engine: ``SHIPYARD_CONTAINER_ENGINE``, else podman, else buildah."""
    explicit = os.environ.get("SHIPYARD_CONTAINER_ENGINE")
    for name in ([explicit] if explicit else ["podman", "buildah"]):
        found = shutil.which(name)
        if found:
            return found
    raise ShipyardError("podman", "no container engine found", "run `bash .ci/podman-setup` (apt-get install podman runc)")


def image_exists(ref: str, tool: str | None = None) -> bool:
    """Whether the local image store has ``ref``."""
    tool = tool or engine()
    return subprocess.run([tool, "image", "exists", ref], capture_output=True).returncode == 0


def image_size(ref: str, tool: str | None = None) -> int:
    """Size in bytes of a local image (0 when unknown)."""
    tool = tool or engine()
    out = subprocess.run([tool, "image", "inspect", "--format", "{{.Size}}", ref], capture_output=True, text=True)
    try:
        return int(out.stdout.strip())
    except ValueError:
        return 0


def ensure_python_base(tool: str | None = None, rebuild: bool = False) -> str:
    """The cpu flavor's base image: ``SHIPYARD_PYTHON_BASE``, or a bookworm Python made with
    mmdebstrap (about 45 s) and imported once into the local image store."""
    explicit = os.environ.get("SHIPYARD_PYTHON_BASE")
    if explicit:
        return explicit
    tool = tool or engine()
    if image_exists(PYTHON_BASE, tool) and not rebuild:
        return PYTHON_BASE
    mmdebstrap = shutil.which("mmdebstrap")
    if mmdebstrap is None:
        raise ShipyardError("mmdebstrap", "not installed (needed for the cpu flavor's Python base image)",
                            "run `bash .ci/podman-setup`, or set SHIPYARD_PYTHON_BASE to a bookworm python:3.11 image")
    with tempfile.TemporaryDirectory(prefix="shipyard-base-") as tmp:
        tar = Path(tmp) / "base.tar"
        print(f"shipyard: building {PYTHON_BASE} with mmdebstrap", file=sys.stderr, flush=True)
        subprocess.run([mmdebstrap, "--quiet", "--variant=apt", "--include=" + ",".join(PYTHON_BASE_PACKAGES),
                        "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
                        "--dpkgopt=path-exclude=/usr/share/locale/*", "bookworm", str(tar)], check=True, stdout=sys.stderr)
        subprocess.run([tool, "import", "--change", 'CMD ["/bin/bash"]', str(tar), PYTHON_BASE],
                       check=True, stdout=subprocess.DEVNULL)
    return PYTHON_BASE


@functools.lru_cache(maxsize=1)
def torch_cpu_links() -> list[str]:
    """``[TORCH_CPU_LINKS]`` when that page answers within a few seconds in all (the name lookup
    included: an offline machine's resolver may wait longer), else ``[]``."""
    try:
        status, _ = http_request(TORCH_CPU_LINKS, deadline_s=5, method="HEAD", field="torch CPU wheels")
    except (OSError, ShipyardError):
        return []
    return [TORCH_CPU_LINKS] if status < 400 else []


def _host_python() -> Path:
    return Path(sys.executable)


def _local_paths(value: str) -> list[str]:
    """Local folders named by a pip option value (plain paths and ``file://`` URLs). A local
    ``.../simple`` index links to files beside it, so its parent folder is what a build needs."""
    paths = []
    for item in value.split():
        path = Path(item.removeprefix("file://"))
        if not path.is_absolute() or not path.exists():
            continue
        paths.append(str(path.parent if path.name == "simple" else path))
    return paths


def pip_cache_dir() -> Path:
    """The host's pip cache (shared with builds so wheels are fetched once)."""
    out = subprocess.run([str(_host_python()), "-m", "pip", "cache", "dir"], capture_output=True, text=True)
    return Path(out.stdout.strip() or Path.home() / ".cache" / "pip")


@contextlib.contextmanager
def pip_build_context() -> Iterator[list[str]]:
    """Engine arguments that give a build's RUN steps the host's pip settings and pip cache.

    The settings go into a pip.conf mounted read-only at ``/run/shipyard-build/conf`` (with the
    CA bundle beside it); the Containerfiles' ``ARG PIP_CONFIG_FILE`` points pip at it. Local
    index and find-links folders are mounted read-only at their own paths.
    """
    settings = host_pip_settings()
    volumes: list[str] = []
    cache = pip_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="shipyard-pip-") as tmp:
        conf_dir = Path(tmp)
        os.chmod(conf_dir, 0o755)
        lines = ["[global]"]
        links = " ".join([settings.get("find-links", ""), *torch_cpu_links()]).strip()
        if links:
            settings["find-links"] = links
        for name, value in settings.items():
            if name == "cert":
                shutil.copyfile(value, conf_dir / "ca.crt")
                value = f"{BUILD_MOUNT}/conf/ca.crt"
            elif name in ("index-url", "extra-index-url", "find-links"):
                volumes += [p for p in _local_paths(value) if p not in volumes]
            lines.append(f"{name} = {value}")
        lines += [f"cache-dir = {BUILD_MOUNT}/cache", "disable-pip-version-check = true", "progress-bar = off"]
        (conf_dir / "pip.conf").write_text("\n".join(lines) + "\n")
        args = ["--build-arg", f"PIP_CONFIG_FILE={BUILD_MOUNT}/conf/pip.conf",
                "--volume", f"{conf_dir}:{BUILD_MOUNT}/conf:ro", "--volume", f"{cache}:{BUILD_MOUNT}/cache:rw"]
        for path in volumes:
            args += ["--volume", f"{path}:{path}:ro"]
        yield args


def gpu_base_image() -> str:
    """The gpu flavor's base, pinned by digest: ``SHIPYARD_GPU_BASE_IMAGE`` (``<image>@sha256:<digest>``).
    The Containerfiles' default names a tag only, so a cluster build never takes a moving base."""
    value = os.environ.get("SHIPYARD_GPU_BASE_IMAGE", "")
    if not re.fullmatch(r"[^@\s]+@sha256:[0-9a-f]{64}", value):
        raise ShipyardError("SHIPYARD_GPU_BASE_IMAGE", f"{value or 'unset'}: the gpu images' base must be pinned by digest",
                            f"set it to {GPU_BASE}@sha256:<digest> (skopeo inspect --format '{{{{.Digest}}}}' docker://{GPU_BASE})")
    return value


def build_args(runtime: str, flavor: str, tool: str | None = None) -> list[str]:
    """``--build-arg`` pairs of one runtime and flavor (the Containerfile defaults are the gpu flavor)."""
    if flavor == "gpu":
        return ["--build-arg", f"BASE_IMAGE={gpu_base_image()}"]
    args = ["--build-arg", f"BASE_IMAGE={ensure_python_base(tool)}"]
    if runtime in ("compress", "vllm"):
        args += ["--build-arg", "FLAVOR=cpu"]
    if runtime == "vllm":  # no garak venv in the local image (the rehearsal runs without a safety scan)
        args += ["--build-arg", "GARAK=0"]
    return args


def build_context() -> Path:
    """The folder builds run from: the repository root (the Containerfiles COPY from there)."""
    if not (REPO_ROOT / "pyproject.toml").exists() or not (REPO_ROOT / "images").is_dir():
        raise ShipyardError("images build", f"{REPO_ROOT} is not a shipyard checkout",
                            "run it from a source checkout (the images COPY the source tree)")
    return REPO_ROOT


def _check_qualified(ref: str) -> None:
    """podman files ``team/img`` as ``localhost/team/img``; the compiled pipeline would then name an
    image the store lists under another name, so the registry part must be a host."""
    first = ref.split("/", 1)[0]
    if "/" not in ref or not ("." in first or ":" in first or first == "localhost"):
        raise ShipyardError("SHIPYARD_IMAGE_REGISTRY", f"{ref} does not start with a registry host",
                            "use a host such as localhost/shipyard, registry.example.com/team or 127.0.0.1:5000/team")


def build_image(runtime: str, flavor: str = "cpu", force: bool = False, no_cache: bool = False) -> BuiltImage:
    """Build one runtime image unless its tag is already in the local store (``force`` rebuilds;
    ``no_cache`` also ignores cached layers, as a fresh machine would)."""
    get_runtime(runtime)
    if flavor not in FLAVORS:
        raise ShipyardError("--flavor", f"unknown flavor {flavor!r}", f"use one of {', '.join(FLAVORS)}")
    tool = engine()
    ref = runtime_image(runtime, flavor).split("@", 1)[0]
    _check_qualified(ref)
    if image_exists(ref, tool) and not (force or no_cache):
        return BuiltImage(runtime, flavor, ref, image_size(ref, tool), 0.0, cached=True)
    context = build_context()
    started = time.perf_counter()
    with pip_build_context() as pip_args:
        cmd = [tool, "build", "--network", "host", "--layers", *(["--no-cache"] if no_cache else []), "-f", str(IMAGES_DIR / runtime / "Containerfile"),
               "-t", ref, *build_args(runtime, flavor, tool), *pip_args, str(context)]
        print("+", " ".join(cmd), file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, check=False, stdout=sys.stderr)  # stdout is for the result (-o json)
    if proc.returncode != 0:
        raise ShipyardError(f"image {ref}", f"build failed (exit {proc.returncode})", "see the build log above")
    return BuiltImage(runtime, flavor, ref, image_size(ref, tool), round(time.perf_counter() - started, 1))


def build_images(runtimes: list[str] | None = None, flavor: str = "cpu", force: bool = False,
                 no_cache: bool = False) -> list[BuiltImage]:
    """Build the named runtimes' images (default: all)."""
    return [build_image(rt, flavor, force, no_cache) for rt in (runtimes or list(RUNTIMES))]


def format_built(images: list[BuiltImage]) -> str:
    """The table ``shipyard images build`` prints."""
    lines = [f"{'runtime':<9} {'flavor':<6} {'size':>9} {'seconds':>8}  image"]
    for img in images:
        secs = "cached" if img.cached else f"{img.seconds:.1f}"
        lines.append(f"{img.runtime:<9} {img.flavor:<6} {img.size_bytes / 1e6:>7.0f}MB {secs:>8}  {img.ref}")
    return "\n".join(lines)
