"""The CLI gives one-line errors for bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shipyard.local_run import parse_param, resolve_params


def _shipyard(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shipyard.cli", *args], capture_output=True, text=True, check=False)


def test_unknown_pipeline_parameter_is_one_line(tmp_path: Path) -> None:
    proc = _shipyard("run", "--local", "--work-dir", str(tmp_path), "--param", "no_such_param=1")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("shipyard: error: --param: unknown parameter(s) no_such_param")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


def test_run_requires_local(tmp_path: Path) -> None:
    proc = _shipyard("run", "--work-dir", str(tmp_path))
    assert proc.returncode == 2 and "--local" in proc.stderr


def test_unknown_pipeline(tmp_path: Path) -> None:
    proc = _shipyard("run", "--local", "nope", "--work-dir", str(tmp_path))
    assert proc.returncode == 2
    assert "pipeline: unknown pipeline 'nope'" in proc.stderr


def test_params_are_read_as_yaml_and_merged(tmp_path: Path) -> None:
    assert parse_param("recipes=[w8a8-int8, w4a16]") == ("recipes", ["w8a8-int8", "w4a16"])
    assert parse_param("num_calibration_samples=8") == ("num_calibration_samples", 8)
    params_file = tmp_path / "p.yaml"
    params_file.write_text("seed: 7\nmax_seq_length: 128\n")
    merged = resolve_params("optimize-and-deploy", str(params_file), ["seed=9"])
    assert merged["seed"] == 9 and merged["max_seq_length"] == 128
    assert merged["model_uri"] == "embedded://smollm2-135m-instruct"
    with pytest.raises(Exception, match="is not key=value"):
        parse_param("novalue")


def test_bad_params_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    proc = _shipyard("run", "--local", "--work-dir", str(tmp_path), "--params-file", str(bad))
    assert proc.returncode == 2 and "--params-file" in proc.stderr and "Traceback" not in proc.stderr
