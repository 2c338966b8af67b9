"""The serving-configuration search with the real vLLM CPU build and guidellm on the tiny model:
a two-point search measures both points (each on its own server, both stopped), picks the one
with the most output tok/s at the highest load meeting the SLO, and hands its results on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shipyard.runtimes.runtime import run_in_runtime
from shipyard.steps.benchmark import tune_step

pytestmark = pytest.mark.slow


def test_two_point_search_picks_the_better_point(tiny_model: Path, tmp_path: Path) -> None:
    bench = json.dumps({"loads": [1, 4], "max_requests": 6, "output_tokens": 8, "warmup_requests": 1})
    out = run_in_runtime("vllm", tune_step, model_dir=str(tiny_model), benchmark_config=bench,
                         tuning="local", slo="", out_dir=str(tmp_path / "bench"), summary_path=str(tmp_path / "s.md"))
    doc = json.loads((tmp_path / "bench" / "tuning.json").read_text())
    measured = [p for p in doc["points"] if p["status"] == "measured"]
    assert [p["vllm_args"] for p in doc["points"]] == [["--max-num-seqs", "1"], ["--max-num-seqs", "8"]]
    assert len(measured) == 2 and all(p["seconds"] > 0 for p in measured)
    best = next(p for p in doc["points"] if p["best"])
    assert best["value"] == max(p["value"] for p in measured if p["value"] is not None)
    assert out["metadata"]["tuning"]["best_vllm_args"] == best["vllm_args"] == doc["best_vllm_args"]
    results = json.loads((tmp_path / "bench" / "results.json").read_text())
    best_results = json.loads((tmp_path / "bench" / "points" / best["folder"] / "results.json").read_text())
    assert results["levels"] == best_results["levels"]
    assert best["vllm_args"][1] in " ".join(results["vllm_args"])
    assert (tmp_path / "s.md").read_text().startswith("**Tuning:** best of 2 measured configurations")
