"""Output files never replace what is not ours: ``--out-file`` onto devices, ``-``, symlinks.

As root (containers and CI run as root) an atomic write (a temporary file renamed over the
target) would replace ``/dev/null`` with a regular file for the whole machine. These tests run
the real CLI in a private mount namespace (``unshare -m``) with a throw-away ``/dev`` (a tmpfs
with its own ``null`` and ``full`` made by ``mknod``), so the machine's ``/dev`` is never touched;
they are skipped when not root or without ``unshare``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_write_text

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16,
         "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256,
         "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}
DIGEST = "sha256:" + "a" * 64

#: a private /dev: tmpfs over it, null (1,3), full (1,7), stdout -> /proc/self/fd/1, then the CLI,
#: then what became of them (written to $REPORT, outside /dev)
_SCRIPT = r"""
set -e
mount -t tmpfs -o size=1m tmpfs /dev
mknod -m 666 /dev/null c 1 3
mknod -m 666 /dev/full c 1 7
ln -s /proc/self/fd/1 /dev/stdout
set +e
"$@"
rc=$?
stat -c '%n %F' /dev/null /dev/full /dev/stdout > "$REPORT"
exit $rc
"""


def _can_unshare() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True, check=False)
    return done.returncode == 0


needs_private_dev = pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare -m (a private /dev)")


def _in_private_dev(tmp_path: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    report = tmp_path / "dev-after.txt"
    env = {**os.environ, "REPORT": str(report), "SHIPYARD_DEBUG": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", _SCRIPT, "sh",
                           sys.executable, "-m", "shipyard.cli.main", *argv],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    kinds = {}
    for line in report.read_text().splitlines():
        name, _, kind = line.partition(" ")
        kinds[name] = kind
    return proc, kinds


def _devices_intact(kinds: dict[str, str]) -> None:
    assert kinds == {"/dev/null": "character special file", "/dev/full": "character special file",
                     "/dev/stdout": "symbolic link"}, kinds


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    return path


@needs_private_dev
def test_out_file_dev_null_is_written_through(tmp_path: Path, config: Path) -> None:
    proc, kinds = _in_private_dev(tmp_path, "plan", str(config), "--out-file", "/dev/null")
    assert proc.returncode == 0, proc.stderr
    _devices_intact(kinds)


@needs_private_dev
def test_out_file_dev_full_is_one_line_and_stays_a_device(tmp_path: Path, config: Path) -> None:
    proc, kinds = _in_private_dev(tmp_path, "plan", str(config), "--out-file", "/dev/full")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("shipyard: error: --out-file: no space left on the device"), lines[0]
    _devices_intact(kinds)


@needs_private_dev
def test_out_file_dev_stdout_writes_to_stdout(tmp_path: Path, config: Path) -> None:
    proc, kinds = _in_private_dev(tmp_path, "plan", str(config), "--out-file", "/dev/stdout")
    assert proc.returncode == 0, proc.stderr
    assert '"fits"' in proc.stdout
    _devices_intact(kinds)


@needs_private_dev
def test_deploy_manifest_to_dev_null(tmp_path: Path) -> None:
    proc, kinds = _in_private_dev(tmp_path, "deploy", "--dry-run", "--name", "llm", "--model-uri",
                                  f"oci://quay.io/org/m@{DIGEST}", "--out-file", "/dev/null")
    assert proc.returncode == 0, proc.stderr
    _devices_intact(kinds)


def _cli(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SHIPYARD_DEBUG": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "shipyard.cli.main", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_out_file_dash_is_stdout(tmp_path: Path, config: Path) -> None:
    proc = _cli(tmp_path, "plan", str(config), "--out-file", "-")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["fits"] in (True, False)
    assert not (tmp_path / "-").exists()


def test_deploy_out_file_dash_is_stdout(tmp_path: Path) -> None:
    proc = _cli(tmp_path, "deploy", "--dry-run", "--name", "llm", "--model-uri", f"oci://quay.io/org/m@{DIGEST}",
                "--out-file", "-")
    assert proc.returncode == 0, proc.stderr
    assert "kind: InferenceService" in proc.stdout or "InferenceService" in proc.stdout
    assert not (tmp_path / "-").exists()


def test_symlinked_out_file_is_followed(tmp_path: Path, config: Path) -> None:
    """The file the link points to gets the document, atomically; the link itself stays a link."""
    real = tmp_path / "plans" / "plan.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(real)
    proc = _cli(tmp_path, "plan", str(config), "--out-file", str(link))
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and link.resolve() == real
    assert json.loads(real.read_text())["fits"] in (True, False)
    assert sorted(p.name for p in real.parent.iterdir()) == ["plan.json"]


def test_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "out.txt"
    link.symlink_to(tmp_path / "target.txt")
    atomic_write_text(link, "hello\n")
    assert link.is_symlink() and (tmp_path / "target.txt").read_text() == "hello\n"


def test_fifo_without_a_reader_is_one_line_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ShipyardError) as err:
        atomic_write_text(fifo, "x", field="--out-file")
    assert str(err.value).startswith("--out-file: ") and "\n" not in str(err.value)
    assert fifo.is_fifo()


def test_socket_is_refused(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        with pytest.raises(ShipyardError, match="not a regular file"):
            atomic_write_text(path, "x", field="--out-file")
    assert path.is_socket()
