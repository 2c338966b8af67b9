"""The serving-configuration search (pure parts), the frontier report, the decision record and the
champion's searched vLLM arguments reaching the rendered LLMInferenceService."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from shipyard.benchmarking.tuning import (
    PRESETS,
    changes_outputs,
    parse_tuning,
    plan_points,
    point_args,
    run_search,
)
from shipyard.core.errors import ShipyardError
from shipyard.gates.frontier import frontier
from shipyard.serving.kserve.config import parse_config
from shipyard.serving.kserve.render import render
from shipyard.steps.deploy import searched_args
from shipyard.steps.select import select_champion

URI = "oci://registry.example/models/tiny@sha256:" + "ab" * 32


def test_presets_parse_and_the_local_one_is_two_points() -> None:
    local = parse_tuning("local")
    assert plan_points(local, gpus=0, heads=4)[0] == [{"max_num_seqs": 1}, {"max_num_seqs": 8}]
    cluster = parse_tuning({"preset": "cluster"})
    keep, dropped = plan_points(cluster, gpus=1, heads=32)
    assert len(keep) == 12 and not dropped and cluster["max_points"] == 6
    assert parse_tuning("") is None and parse_tuning({}) is None
    assert set(PRESETS) == {"local", "cluster"}


@pytest.mark.parametrize(("value", "message"), [
    ({"space": {}}, "tuning.space: is empty"),
    ({"space": {"max_num_seq": [1]}}, "tuning.space.max_num_seq: is not a search dimension"),
    ({"space": {"max_num_seqs": []}}, "tuning.space.max_num_seqs: must be a non-empty list"),
    ({"space": {"max_num_seqs": [0]}}, "tuning.space.max_num_seqs: 0 is not a valid value"),
    ({"space": {"max_num_seqs": [1]}, "max_points": 0}, "tuning.max_points: 0 is not a whole number"),
    ({"space": {"max_num_seqs": [1]}, "strategy": "random"}, "tuning.strategy: unknown strategy"),
    ({"space": {"max_num_seqs": [1]}, "max_seconds": -1}, "tuning.max_seconds"),
    ({"space": {"enable_prefix_caching": ["yes"]}}, "tuning.space.enable_prefix_caching: 'yes' is not a valid value"),
    ({"space": {"gpu_memory_utilization": [1.5]}}, "tuning.space.gpu_memory_utilization"),
    ({"preset": "huge"}, "tuning.preset: unknown preset"),
    ({"space": {"max_num_seqs": [1]}, "budget": 3}, "tuning.budget: is not a tuning setting"),
    ('{"space": ', "tuning"),
    ({"space": {"max_num_seqs": list(range(1, 1001)), "max_num_batched_tokens": list(range(1, 1001))},
      "strategy": "budgeted"}, "tuning.space: has 1000000 points (1000 max_num_seqs x 1000 max_num_batched_tokens)"),
    ({"space": {"max_num_seqs": [1, 2, 3], "max_num_batched_tokens": [512, 1024, 2048]}},
     "tuning.max_points: the grid has 9 points, more than max_points 8"),
])
def test_bad_tuning_is_one_line(value, message: str) -> None:
    with pytest.raises(ShipyardError) as err:
        parse_tuning(value)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_points_the_hardware_cannot_run_are_ruled_out() -> None:
    tuning = parse_tuning({"space": {"tensor_parallel": [1, 2, 3], "max_num_seqs": [8]}})
    keep, dropped = plan_points(tuning, gpus=2, heads=8)
    assert keep == [{"max_num_seqs": 8, "tensor_parallel": 1}, {"max_num_seqs": 8, "tensor_parallel": 2}]
    assert "tensor_parallel 3 > the 2 GPU(s) present" in dropped[0]["reason"]
    with pytest.raises(ShipyardError, match="every one of its 2 points is ruled out"):
        plan_points(parse_tuning({"space": {"tensor_parallel": [2, 4]}}), gpus=0, heads=8)
    # a grid over max_points is refused where the parameter is read (the pre-flight), before any hardware counts
    with pytest.raises(ShipyardError, match="tuning.max_points: the grid has 3 points, more than max_points 2"):
        parse_tuning({"space": {"max_num_seqs": [1, 2, 3]}, "max_points": 2})


def test_point_flags_and_output_changes() -> None:
    tuning = parse_tuning({"space": {"enable_prefix_caching": [False], "kv_cache_dtype": ["fp8"],
                                     "vllm_args": {"eager": ["--enforce-eager"]}}})
    (point,), _ = plan_points(tuning, gpus=1, heads=8)
    assert point_args(point, tuning["vllm_args_sets"]) == ["--no-enable-prefix-caching", "--kv-cache-dtype", "fp8",
                                                           "--enforce-eager"]
    assert changes_outputs(point) and not changes_outputs({"max_num_seqs": 4, "kv_cache_dtype": "auto"})


def test_budgeted_search_stops_at_its_budget_and_picks_the_best(tmp_path: Path) -> None:
    """``measure`` stands in for vLLM + guidellm here (tests/test_tuning_vllm.py runs the real ones)."""
    tuning = parse_tuning({"space": {"max_num_seqs": [1, 4, 16]}, "strategy": "budgeted", "max_points": 2})
    seen = []

    def measure(args: list[str], folder: Path) -> None:
        folder.mkdir()
        seen.append(args)

    doc = run_search(tuning, ["--max-model-len", "512"], tmp_path, measure,
                     lambda folder: {"value": {"point-0": 5.0, "point-1": 9.0}.get(folder.name)}, gpus=0, heads=4)
    assert seen == [["--max-model-len", "512", "--max-num-seqs", "4"], ["--max-model-len", "512", "--max-num-seqs", "1"]]
    assert doc["best_vllm_args"] == ["--max-num-seqs", "1"] and len(doc["skipped"]) == 1
    assert json.loads((tmp_path / "tuning.json").read_text())["schema"] == "shipyard.tuning/v1"
    with pytest.raises(ShipyardError, match="no point of the search met the SLO"):
        run_search(tuning, [], tmp_path / "none", lambda a, f: f.mkdir(parents=True), lambda f: {"value": None},
                   gpus=0, heads=4)


def _cand(recipe: str, recovery: float, points: list[tuple[list[str], float]], passed: bool = True) -> dict:
    best = max(range(len(points)), key=lambda i: points[i][1])
    return {
        "schema": "shipyard.candidate/v1", "recipe": recipe, "model_uri": f"/m/{recipe}", "passed": passed,
        "reason": "passed both gates" if passed else "SLO gate failed", "size_bytes": 100,
        "accuracy": {"passed": True, "worst_recovery": recovery, "rows": [
            {"task": "mc", "metric": "acc,none", "higher_is_better": True, "base": 0.5, "candidate": 0.5 * recovery,
             "recovery": recovery, "min_recovery": 0.97, "gated": True, "passed": True, "note": "",
             "decided_by": "recovery >= min",
             "paired": {"recovery_low": recovery - 0.02, "recovery_high": min(1.0, recovery + 0.01)}}]},
        "slo": {"passed": passed}, "levels": [], "base_levels": [], "planner": {}, "base_planner": {},
        "tuning": {"best": best, "best_vllm_args": points[best][0], "points": [
            {"index": i, "vllm_args": a, "value": v, "output_tokens_per_s_per_gpu": v, "status": "measured",
             "best": i == best, "changes_outputs": False, "point": {}} for i, (a, v) in enumerate(points)]},
    }


CANDS = [
    _cand("w8a8", 0.99, [(["--max-num-seqs", "1"], 10.0), (["--max-num-seqs", "8"], 14.0)]),
    _cand("fp8", 0.995, [(["--max-num-seqs", "1"], 9.0), (["--max-num-seqs", "8"], 12.0)]),
    _cand("w4a16", 0.98, [(["--max-num-seqs", "8"], 13.0)]),
    _cand("bad", 0.999, [(["--max-num-seqs", "8"], 20.0)], passed=False),
]


def test_frontier_front_dominated_and_champion() -> None:
    doc = frontier(CANDS, "w8a8", lambda c: None)
    front = {(doc["points"][i]["candidate"], tuple(doc["points"][i]["config"])) for i in doc["front"]}
    assert front == {("w8a8", ("--max-num-seqs", "8")), ("fp8", ("--max-num-seqs", "8"))}  # "bad" failed a gate
    assert doc["dominated"] == {"w4a16": {"by": "w8a8", "config": ["--max-num-seqs", "8"], "goodput_per_gpu": 14.0,
                                          "recovery": 0.99}}
    assert doc["champion"] == {"candidate": "w8a8", "vllm_args": ["--max-num-seqs", "8"], "on_front": True}
    assert doc["schema"] == "shipyard.frontier/v1" and len(doc["points"]) == 6


def test_selection_writes_frontier_decision_record_and_deploy_serves_the_searched_flags(tmp_path: Path) -> None:
    dirs = []
    for c in CANDS:
        d = tmp_path / c["recipe"]
        d.mkdir()
        (d / "candidate.json").write_text(json.dumps(c))
        dirs.append(str(d))
    out = select_champion(dirs, "recovery", str(tmp_path / "sel"), str(tmp_path / "c.md"), str(tmp_path / "c.html"))
    assert out["winner"] == "fp8" and out["serving"] == {"vllm_args": ["--max-num-seqs", "8"],
                                                          "source": "tuning search"}
    record = json.loads((tmp_path / "sel" / "decision-record.json").read_text())
    assert record["schema"] == "shipyard.decision/v1" and record["champion"] == "fp8"
    assert {c["candidate"] for c in record["candidates"]} == {"w8a8", "fp8", "w4a16", "bad"}
    assert record["frontier"]["champion"]["vllm_args"] == ["--max-num-seqs", "8"]
    assert json.loads((tmp_path / "sel" / "frontier.json").read_text())["front"]
    assert "Frontier: accuracy and goodput on the same axes" in (tmp_path / "c.md").read_text()
    tuned = searched_args(str(tmp_path / "sel"))
    assert tuned == {"max-num-seqs": "8"}
    (svc,) = render(parse_config({"name": "llm", "model_uri": URI, "tuned_vllm_args": tuned}))
    env = {e["name"]: e["value"] for e in svc["spec"]["template"]["containers"][0].get("env", []) if "value" in e}
    args = shlex.split(env["VLLM_ADDITIONAL_ARGS"])
    assert args[args.index("--max-num-seqs") + 1] == "8"
    # a searched flag the deployment owns is refused in the args (the deploy step maps tensor parallelism)
    with pytest.raises(ShipyardError, match="tensor-parallel-size is set by the deployment itself"):
        render(parse_config({"name": "llm", "model_uri": URI, "tuned_vllm_args": {"tensor-parallel-size": "2"}}))
    # the user's own vllm_args still win over the search
    (svc,) = render(parse_config({"name": "llm", "model_uri": URI, "tuned_vllm_args": tuned,
                                  "vllm_args": {"max-num-seqs": 32}}))
    env = {e["name"]: e["value"] for e in svc["spec"]["template"]["containers"][0].get("env", []) if "value" in e}
    args = shlex.split(env["VLLM_ADDITIONAL_ARGS"])
    assert args[args.index("--max-num-seqs") + 1] == "32"


def test_kv_cache_dtypes_are_the_pinned_vllms() -> None:
    """The values tuning accepts for kv_cache_dtype are vLLM's own (its CacheDType literal, read from the
    vllm runtime's source): a value vLLM would refuse after the model loaded is refused at pre-flight."""
    import ast
    import subprocess

    from shipyard.runtimes.runtime import venv_python
    from shipyard.serving.planner import VLLM_KV_CACHE_DTYPES

    where = "import importlib.util as u; print(u.find_spec('vllm').submodule_search_locations[0])"  # no import of vllm
    package = subprocess.run([str(venv_python("vllm")), "-c", where], capture_output=True, text=True, timeout=120,
                             check=True).stdout.strip()
    tree = ast.parse((Path(package) / "config" / "cache.py").read_text())
    literal = next(node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                   and any(getattr(t, "id", "") == "CacheDType" for t in node.targets))
    assert tuple(elt.value for elt in literal.slice.elts) == VLLM_KV_CACHE_DTYPES
