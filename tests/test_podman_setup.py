"""``.ci/podman-setup`` respects the machine: podman's settings go into a drop-in
(``containers.conf.d/50-shipyard.conf``), a user's own ``containers.conf`` is left byte for byte,
and only a file an earlier version of the script wrote is replaced (and said so). Runs the real
script with ``SHIPYARD_CONTAINERS_ETC`` pointing at a temporary folder; podman itself reads the
drop-in it wrote."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("podman", "runc", "mmdebstrap", "uidmap")


def _installed(pkg: str) -> bool:
    return subprocess.run(["dpkg", "-s", pkg], capture_output=True, check=False).returncode == 0


pytestmark = pytest.mark.skipif(
    shutil.which("dpkg") is None or not all(_installed(p) for p in PACKAGES),
    reason="needs podman, runc, mmdebstrap and uidmap installed (bash .ci/podman-setup as root installs them)",
)


def setup(etc: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["bash", str(REPO / ".ci" / "podman-setup")], env=dict(os.environ, SHIPYARD_CONTAINERS_ETC=str(etc)),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def test_a_users_containers_conf_is_kept_and_the_settings_go_to_a_drop_in(tmp_path: Path) -> None:
    mine = '[engine]\nruntime = "crun"\nhelper_binaries_dir = ["/opt/mine"]\n'
    (tmp_path / "containers.conf").write_text(mine)
    out = setup(tmp_path).stdout
    assert (tmp_path / "containers.conf").read_text() == mine  # never replaced
    dropin = tmp_path / "containers.conf.d" / "50-shipyard.conf"
    text = dropin.read_text()
    assert 'runtime = "runc"' in text and 'netns = "host"' in text and 'cgroup_manager = "cgroupfs"' in text
    assert f"podman settings: {dropin}" in out and "kept your" in out
    # podman parses the drop-in as a containers.conf (CONTAINERS_CONF: that file alone)
    info = subprocess.run(["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"],
                          env=dict(os.environ, CONTAINERS_CONF=str(dropin)), capture_output=True, text=True,
                          timeout=120, check=False)
    assert info.returncode == 0 and info.stdout.strip() == "runc", info.stderr[-2000:]
    assert setup(tmp_path).stdout == out and (tmp_path / "containers.conf").read_text() == mine  # re-runnable


def test_a_containers_conf_written_by_an_earlier_setup_is_replaced_by_the_drop_in(tmp_path: Path) -> None:
    (tmp_path / "containers.conf").write_text('# Written by shipyard .ci/podman-setup\n[engine]\nruntime = "runc"\n')
    out = setup(tmp_path).stdout
    assert not (tmp_path / "containers.conf").exists() and "written by an earlier .ci/podman-setup" in out
    assert (tmp_path / "containers.conf.d" / "50-shipyard.conf").is_file()
    assert sorted(p.name for p in (tmp_path / "containers.conf.d").iterdir()) == ["50-shipyard.conf"]
