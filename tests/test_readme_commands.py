"""Every command the README shows is exercised, so the README cannot drift.

Each command of the README's ``bash`` blocks must appear in :data:`EXERCISED`, which says how it
is exercised:

* ``here``: this test runs it verbatim through bash (the KFP host ``https://kfp.example.com`` is
  swapped for a schema-checking KFP double on 127.0.0.1, and ``my-cluster.yaml`` is the shipped
  ``pipelines/cluster.yaml``);
* ``ci:FILE``: the CI scripts run it (the test checks that FILE contains the command);
* ``test:FILE::NAME``: that test runs the same command (the function it calls) with test-sized
  parameters: the tiny model instead of SmolLM2 (checked to exist);
* several, joined by `` + ``: ``bash .ci/setup`` in CI, the run in a test;
* ``cluster:...``: it needs a Kubernetes cluster, a GPU or your own registry; the reason is given
  and the test checks the part that can run here.

A command added to the README without an entry fails :func:`test_every_readme_command_is_exercised`.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import require_tool
from kfp_double import KfpDouble

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venvs" / "base" / "bin"

EXERCISED: dict[str, str] = {
    "bash .ci/setup && .venvs/base/bin/shipyard run --local --work-dir shipyard-run": (
        "ci:.ci/run + test:tests/test_local_pipeline.py::test_passing_run_goes_all_the_way"),
    "bash .ci/test": "ci:.ci/run",
    "kubectl kustomize manifests/overlays/prod | shipyard validate -": "here",
    "kubectl apply -k manifests/overlays/prod": (
        "cluster: needs a Kubernetes API; what it applies is built by `kubectl kustomize` and validated "
        "against the vendored CRDs by the command above and tests/test_manifests.py"),
    "shipyard check --layout kfp-standalone --kfp-host https://kfp.example.com --registry quay.io": (
        "cluster: needs a Kubernetes API, KFP and a registry; tests/test_check.py runs the same command against the "
        "Kubernetes API double loaded with the overlay, a real MLflow, registry and S3"),
    ("export SHIPYARD_GPU_BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm@$(skopeo inspect --format "
     "'{{.Digest}}' docker://docker.io/library/python:3.11-slim-bookworm)"): (
        "cluster: needs docker.io, which this machine cannot reach; tests/test_images.py checks that a gpu build "
        "refuses a base that is not pinned by digest"),
    "shipyard images build --flavor gpu": (
        "cluster: the gpu flavor pulls CUDA base images this machine cannot reach; the same build code "
        "runs in CI for the cpu flavor (.ci/setup) and tests/test_container_rehearsal.py checks the tags"),
    "podman push ghcr.io/shipyard-llm/shipyard-base:<tag>": "cluster: needs your registry and its credentials",
    "shipyard compile --out compiled/ --image-registry quay.io/your-org --cluster-config my-cluster.yaml": "here",
    (
        "shipyard submit compiled/optimize-and-deploy.yaml --host https://kfp.example.com --param registry=quay.io "
        "--param repository=your-org/models"
    ): "here",
    ('shipyard schedule compiled/requantize.yaml --host https://kfp.example.com --cron "0 3 * * 1" '
     "--param registry=quay.io --param repository=your-org/models"): "here",
    ("shipyard schedule compiled/watch.yaml --host https://kfp.example.com --every 1h --param "
     "prometheus_url=http://prometheus-operated.monitoring:9090 --param registered_model_name=qwen-w4a16 "
     """--param 'watch_config={"window": "1h", "model_name": "qwen"}'"""): "here",
    ("shipyard watch --prometheus http://prometheus-operated.monitoring:9090 --model-name qwen --champion decision/ "
     "--requalify --host https://kfp.example.com --param registry=quay.io --param repository=your-org/models"):
        "test:tests/test_watch.py::test_requalify_starts_from_the_base_the_champion_record_names",
    "bash .ci/podman-setup": "ci:.ci/test",
    ".venvs/base/bin/shipyard images build --flavor cpu": "ci:.ci/setup",
    ".venvs/base/bin/shipyard run --local --runner container --work-dir rehearsal":
        "test:tests/test_container_rehearsal.py::test_rehearsal_runs_the_whole_pipeline_in_containers",
}


def readme_commands() -> list[str]:
    """The commands of the README's ``bash`` blocks, without comments."""
    text = (REPO / "README.md").read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def test_every_readme_command_is_exercised() -> None:
    commands = readme_commands()
    assert len(commands) >= 10
    missing = [c for c in commands if c not in EXERCISED]
    assert not missing, f"README commands with no test or CI step: add them to EXERCISED: {missing}"
    stale = [c for c in EXERCISED if c not in commands]
    assert not stale, f"EXERCISED lists commands the README no longer shows: {stale}"


#: what a test's source holds when it runs the command: the function, or the CLI's own argv
_CALLS = {"--runner container": ("run_container(", '"--runner", "container"'),
          "run --local": ("run_local(", '"run", "--local"'),
          "--requalify": ('"--requalify", "--host"',)}


@pytest.mark.parametrize("command", [c for c, how in EXERCISED.items() if how.startswith(("ci:", "test:"))])
def test_ci_and_test_references_hold(command: str) -> None:
    hows = EXERCISED[command].split(" + ")
    parts = [p.strip().replace(".venvs/base/bin/", "") for p in command.split("&&")]
    for part in parts:
        covered = []
        for how in hows:
            if how.startswith("ci:"):
                script = (REPO / how.removeprefix("ci:")).read_text()
                covered.append(any(all(w in line for w in part.split()) for line in script.splitlines()))
            else:
                path, _, name = how.removeprefix("test:").partition("::")
                source = (REPO / path).read_text()
                assert f"def {name}(" in source, how
                calls = next((c for flag, c in _CALLS.items() if flag in part), ())
                covered.append(any(call in source for call in calls))
        assert any(covered), f"{part!r} is run by none of {hows}"


def _code(script: str) -> list[str]:
    """The lines of a CI script that run something (no comments, no blank lines)."""
    return [line.strip() for line in (REPO / script).read_text().splitlines() if line.strip()
            and not line.strip().startswith("#")]


def test_setup_installs_what_the_run_needs_and_the_test_command_what_the_tests_need() -> None:
    """Issue 33: the first command installs no test-only packages (Chromium, prometheus; podman only
    for CI's image builds) and ends with its time and the next command; the test command installs
    them before its first pytest."""
    setup, test = _code(".ci/setup"), _code(".ci/test")
    assert not any("test-tools" in line for line in setup)
    podman = [i for i, line in enumerate(setup) if "bash .ci/podman-setup" in line]
    images = next(i for i, line in enumerate(setup) if 'SHIPYARD_BUILD_IMAGES:-}" = 1' in line)
    assert podman and all(i > images for i in podman)  # inside the CI-only image block
    assert "setup took" in setup[-2] and ".venvs/base/bin/shipyard run --local --work-dir shipyard-run" in setup[-2]
    first_pytest = next(i for i, line in enumerate(test) if '"$PYTEST"' in line)
    for tool in ("bash .ci/podman-setup", "bash .ci/test-tools"):
        assert any(tool in line for line in test[:first_pytest]), tool


@pytest.fixture()
def kfp_host() -> KfpDouble:
    double = KfpDouble().start()
    yield double
    double.stop()


def _bash(command: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", HF_HUB_OFFLINE="1")
    return subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_validate_the_kustomized_prod_overlay() -> None:
    require_tool(shutil.which("kubectl") is not None, "kubectl with kustomize (Debian/Google Cloud SDK kubectl)")
    command = next(c for c, how in EXERCISED.items() if how == "here" and c.startswith("kubectl kustomize"))
    proc = _bash(command, REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("ok"), proc.stdout[-2000:]


@pytest.mark.slow
def test_compile_submit_and_schedule_as_the_readme_shows(tmp_path: Path, kfp_host: KfpDouble) -> None:
    """The README's cluster commands, verbatim: what is submitted and scheduled carries the user's
    cluster settings (a node selector of their own) and image registry, never the defaults."""
    cluster = (REPO / "pipelines" / "cluster.yaml").read_text()
    assert '  node_selector:\n    nvidia.com/gpu.present: "true"\n' in cluster
    (tmp_path / "my-cluster.yaml").write_text(cluster.replace(
        '  node_selector:\n    nvidia.com/gpu.present: "true"\n',
        '  node_selector:\n    nvidia.com/gpu.present: "true"\n    shipyard.example/pool: my-h100-pool\n'))
    here = [c for c, how in EXERCISED.items() if how == "here" and c.startswith("shipyard ")]
    assert len(here) == 4
    for command in here:
        proc = _bash(command.replace("https://kfp.example.com", kfp_host.url), tmp_path)
        assert proc.returncode == 0, (command, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr
    compiled = sorted(p.name for p in (tmp_path / "compiled").glob("*.yaml"))
    assert {"optimize-and-deploy.yaml", "requantize.yaml", "promote.yaml"} <= set(compiled)
    assert "quay.io/your-org/shipyard-" in (tmp_path / "compiled" / "optimize-and-deploy.yaml").read_text()
    assert kfp_host.runs, "submit created no run"
    run = next(iter(kfp_host.runs.values()))
    assert run["runtime_config"]["parameters"]["registry"] == "quay.io"
    assert run["runtime_config"]["parameters"]["repository"] == "your-org/models"
    assert kfp_host.recurring_runs, "schedule created no recurring run"
    assert len(kfp_host.uploaded) == 3  # optimize-and-deploy, requantize and watch
    assert len(kfp_host.recurring_runs) == 2  # re-quantize weekly, watch hourly
    for ir in kfp_host.uploaded:  # the user's settings reached the cluster (watch has no GPU step to pin)
        assert "quay.io/your-org/shipyard-" in ir and "ghcr.io/shipyard-llm" not in ir
        assert ("my-h100-pool" in ir) is ("# Name: watch\n" not in ir)
    assert not kfp_host.rejected, kfp_host.rejected
