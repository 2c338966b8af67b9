"""The base benchmark cache: a hit reuses a measured result (marked as cached, with its age and
origin); a change of model content, config, runtime lock or hardware misses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from report_fixtures import BASE_BENCH

from shipyard.benchmarking import cache
from shipyard.benchmarking.guidellm import benchmark_step, parse_benchmark_config
from shipyard.evaluation.cache import model_identity
from shipyard.runtimes.runtime import lock_file

RESULTS = BASE_BENCH  # a benchmark step's results.json, as the reports' tests use it


@pytest.fixture
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SHIPYARD_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _measured(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(RESULTS))
    (folder / "vllm.log").write_text("vllm: ready\n")
    return folder


def test_second_base_benchmark_is_a_cache_hit(tiny_model: Path, tmp_path: Path, isolated_cache: Path) -> None:
    cfg = parse_benchmark_config("")
    hardware = cache.hardware_fingerprint()
    key, parts = cache.cache_key(model_identity(tiny_model)["sha256"], cfg, lock_file("vllm"), hardware)
    assert cache.lookup(key) is None
    cache.store(key, parts, _measured(tmp_path / "first"), origin="KFP run first-run")
    assert cache.lookup(key) is not None
    out = benchmark_step(str(tiny_model), "", str(tmp_path / "again"), str(tmp_path / "summary.md"), cache=True,
                         origin="KFP run second-run")  # no vLLM starts: the measured result is reused
    assert out["metadata"]["cached"] is True
    results = json.loads((tmp_path / "again" / "results.json").read_text())
    assert results["cached"]["origin"] == "KFP run first-run" and results["cached"]["age_seconds"] >= 0
    assert (tmp_path / "again" / "vllm.log").read_text() == "vllm: ready\n"
    assert not (tmp_path / "again" / cache.META).exists()
    summary = (tmp_path / "summary.md").read_text()
    assert summary.startswith("**Cached:** measured ") and "KFP run first-run" in summary
    assert out["metrics"]["cached_result"] == 1.0


def test_a_change_misses(tiny_model: Path, tmp_path: Path, isolated_cache: Path) -> None:
    cfg = parse_benchmark_config("")
    sha = model_identity(tiny_model)["sha256"]
    hw = cache.hardware_fingerprint()
    key, _ = cache.cache_key(sha, cfg, lock_file("vllm"), hw)
    other_lock = tmp_path / "requirements.lock"
    shutil.copy(lock_file("vllm"), other_lock)
    with open(other_lock, "a") as fh:
        fh.write("\n# vllm bumped\n")
    assert cache.cache_key(sha, cfg, other_lock, hw)[0] != key  # a runtime lock change
    assert cache.cache_key("0" * 64, cfg, lock_file("vllm"), hw)[0] != key  # other model content
    assert cache.cache_key(sha, {**cfg, "loads": [1, 8]}, lock_file("vllm"), hw)[0] != key  # other load
    assert cache.cache_key(sha, cfg, lock_file("vllm"), {**hw, "cores": 999})[0] != key  # other hardware
    assert cache.cache_key(sha, {**cfg, "port": 12345}, lock_file("vllm"), hw)[0] == key  # a port changes nothing


def test_parsed_config_parses_the_same() -> None:
    """The cache's miss path measures with the already parsed config."""
    cfg = parse_benchmark_config('{"loads": [1, 2], "vllm_args": {"max-model-len": 512}}')
    assert parse_benchmark_config(cfg) == cfg
