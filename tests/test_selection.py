"""Fan-in selection, the candidates report and the champion/challenger gate (pure Python)."""

import json
from pathlib import Path

import pytest

from shipyard.gates.champion import champion_gate
from shipyard.gates.config import ChampionConfig
from shipyard.gates.direction import higher_is_better
from shipyard.gates.selection import report_html, report_markdown, select
from shipyard.steps.select import select_champion


def cand(recipe: str, *, passed: bool = True, tok_s: float = 100.0, size: int = 100_000_000, recovery: float = 0.99,
         kv: int = 1000, reason: str = "passed both gates") -> dict:
    level = {"name": "concurrent@1", "nominal_load": 1, "requests_per_s": 2.0, "output_tokens_per_s": tok_s,
             "ttft_p99_ms": 50.0, "itl_p99_ms": 10.0, "error_rate": 0.0, "total": 8}
    return {
        "schema": "shipyard.candidate/v1", "recipe": recipe, "model_uri": f"/models/{recipe}", "passed": passed,
        "reason": reason, "size_bytes": size, "base_size_bytes": 269_000_000, "compression_ratio": 269e6 / size,
        "accuracy": {"passed": passed, "reason": "", "worst_recovery": recovery, "rows": [
            {"task": "mc", "metric": "acc,none", "higher_is_better": True, "base": 0.5, "candidate": 0.5 * recovery,
             "recovery": recovery, "min_recovery": 0.99, "gated": True, "passed": passed, "note": ""}]},
        "slo": {"passed": passed, "reason": "", "metrics": {"highest_load_meeting_slo_rps": 2.0}},
        "levels": [level], "base_levels": [{**level, "output_tokens_per_s": 90.0}],
        "planner": {"weights_bytes": size, "kv_cache_tokens": kv}, "base_planner": {"kv_cache_tokens": 500},
    }


@pytest.mark.parametrize(("objective", "winner"), [("throughput", "fp8"), ("size", "w4a16"), ("recovery", "w8a8"),
                                                    ("kv_cache", "w4a16")])
def test_each_objective_picks_its_champion(objective: str, winner: str) -> None:
    cands = [cand("w8a8", tok_s=100, size=160_000_000, recovery=1.0, kv=900),
             cand("fp8", tok_s=120, size=170_000_000, recovery=0.995, kv=800),
             cand("w4a16", tok_s=90, size=90_000_000, recovery=0.992, kv=1500)]
    result = select(cands, objective)
    assert result["winner"]["recipe"] == winner
    assert result["decisions"][winner].startswith("champion:")
    assert all(r in result["decisions"] for r in ("w8a8", "fp8", "w4a16"))


def test_failed_candidates_are_not_eligible_and_none_passing_ends_cleanly() -> None:
    cands = [cand("w8a8", passed=False, reason="accuracy gate failed: mc acc 0.9"), cand("fp8", tok_s=10)]
    result = select(cands, "throughput")
    assert result["winner"]["recipe"] == "fp8"
    assert result["decisions"]["w8a8"].startswith("not eligible: accuracy gate failed")
    none = select([cand("w8a8", passed=False, reason="SLO gate failed")], "")
    assert none["winner"] is None and none["reason"].startswith("no candidate passed its gates")


def test_ties_go_to_the_next_objective_then_the_first_listed() -> None:
    cands = [cand("a", tok_s=100, size=200), cand("b", tok_s=100, size=100), cand("c", tok_s=100, size=100)]
    assert select(cands, {"objective": "throughput", "then": ["size"]})["winner"]["recipe"] == "b"


def _candidate_dirs(tmp_path: Path, cands: list[dict]) -> list[str]:
    """One folder per candidate holding its candidate.json, as candidate-gates writes them."""
    dirs = []
    for c in cands:
        d = tmp_path / c["recipe"]
        d.mkdir()
        (d / "candidate.json").write_text(json.dumps(c))
        dirs.append(str(d))
    return dirs


def test_report_puts_every_candidate_side_by_side(tmp_path: Path) -> None:
    cands = [cand("w8a8-int8"), cand("w4a16", passed=False, reason="SLO gate failed: TTFT")]
    dirs = _candidate_dirs(tmp_path, cands)
    out = select_champion(dirs, "size", str(tmp_path / "decision"), str(tmp_path / "r.md"), str(tmp_path / "r.html"))
    assert out["winner"] == "w8a8-int8" and out["winner_model_uri"] == "/models/w8a8-int8"
    md = (tmp_path / "r.md").read_text()
    assert "| champion |" in md and "size on disk (smaller is better) 100.0 MB" in md and "w4a16" in md and "not eligible: SLO gate failed" in md
    assert "## Per load level" in md and "| w8a8-int8 | concurrent@1 | 8 (< 100) | 100 | – | 50 | 10 | 0 |" in md
    assert "Accuracy recovery per metric" in md
    assert "| 1 | w8a8-int8 | champion | 100.0 MB |" in md  # size objective: the champion's figure
    assert "None" not in md and "{'" not in md
    page = (tmp_path / "r.html").read_text()
    assert "data:image/png;base64," in page and "http://" not in page and "https://" not in page
    assert json.loads((tmp_path / "decision" / "selection.json").read_text())["winner"] == "w8a8-int8"
    assert page.count("<img ") == 4 and page.count("<table") == 5  # ranking, gates, levels, metrics, frontier
    assert "Frontier: accuracy and goodput on the same axes" in page and "recovery against goodput per GPU" in page
    assert report_html(select(cands, ""), cands).count("<table") == 5 and "Rule:" in report_markdown(select(cands, ""), cands)


def test_direction_rule() -> None:
    assert higher_is_better("mc/acc") and not higher_is_better("wikitext/word_perplexity")
    assert not higher_is_better("ttft_p99_ms") and higher_is_better("output_tokens_per_s")
    assert higher_is_better("custom/loss_like", declared=True)


def test_champion_gate_compares_with_production_only() -> None:
    first = champion_gate({"mc/acc": 0.5}, None)
    assert first.passed and "first champion" in first.reason
    worse = champion_gate({"mc/acc": 0.5, "ppl/word_perplexity": 20.0}, {"mc/acc": 0.6, "ppl/word_perplexity": 19.0},
                          champion_version="3")
    assert not worse.passed and "2 of 2 metrics worse than production v3" in worse.reason
    md = worse.to_markdown()
    # the counts in the decision and the rows of the table agree
    assert "**Checks:** 2 compared: 0 pass, 2 fail." in md and md.count("| **FAIL** |") == 2
    assert "| mc/acc | 0.5 | 0.6 | >= 0.6 (production v3 0.6 - 0) | -0.1 | higher is better: worse by at most 0 | **FAIL** |" in md
    tolerated = champion_gate({"mc/acc": 0.59}, {"mc/acc": 0.6}, champion_version="3",
                              config=ChampionConfig(tolerance=0.02))
    assert tolerated.passed and tolerated.checks[0].margin == pytest.approx(0.01)
    assert not champion_gate({"mc/acc": 0.5}, {}, champion_version="3").passed  # no figures: fail closed
    assert not champion_gate({"mc/acc": 0.5}, {"other/acc": 0.1}).passed  # nothing in common: fail closed
    assert "| mc/acc |" in tolerated.to_markdown() and "<table" in tolerated.to_html()
    assert tolerated.reason == "passed: 1 of 1 accuracy metrics within 0.02 of production v3 (smallest margin 0.01 on mc/acc)"
    partial = champion_gate({"mc/acc": 0.6, "x/acc": 0.3}, {"mc/acc": 0.6}, champion_version="4")
    assert partial.passed and "1 of 1 accuracy metrics" in partial.reason and "1 not compared" in partial.reason
    assert "**Checks:** 1 compared: 1 pass, 0 fail; 1 not compared." in partial.to_markdown()
    assert "no production version yet" in first.to_markdown() and "| tolerance (absolute) | 0 |" in first.to_markdown()


def test_the_replayed_workload_travels_into_the_decision_record_and_the_report(tmp_path: Path) -> None:
    """Issue 35 item 5: each benchmark's recorded workload (fingerprint digest and fidelity verdict), as
    judge_candidate reads it from the benchmark's results.json, is in decision-record.json and the report."""
    from shipyard.steps.judge import _workload

    bench = tmp_path / "bench"
    bench.mkdir()
    fidelity = {"valid": False, "failed": ["hit_rate"], "line": "workload fidelity: INVALID prefix-cache hit 0.05 OUT"}
    (bench / "results.json").write_text(json.dumps({"workload": {
        "digest": "sha256:" + "a" * 64, "replayed": "trace", "requests": 40, "time_scale": 1.0, "block_size": 16,
        "fingerprint": {"digest": "sha256:" + "a" * 64}, "fidelity": fidelity}}))
    replayed = _workload(str(bench))
    assert replayed == {"digest": "sha256:" + "a" * 64, "replayed": "trace", "requests": 40, "time_scale": 1.0,
                        "valid": False, "failed": ["hit_rate"], "line": fidelity["line"],
                        "arrivals": None, "lengths": None}  # the fingerprint here records no arrivals or lengths
    (tmp_path / "empty").mkdir()
    assert _workload(str(tmp_path / "empty")) is None  # no results.json: no workload, no error
    cands = [{**cand("w8a8-int8"), "workload": replayed}, cand("w4a16")]
    dirs = _candidate_dirs(tmp_path, cands)
    select_champion(dirs, "size", str(tmp_path / "decision"), str(tmp_path / "r.md"), str(tmp_path / "r.html"))
    record = json.loads((tmp_path / "decision" / "decision-record.json").read_text())
    by = {g["candidate"]: g for g in record["candidates"]}
    assert by["w8a8-int8"]["workload"]["digest"] == "sha256:" + "a" * 64 and by["w4a16"]["workload"] is None
    md = (tmp_path / "r.md").read_text()
    assert "## Your traffic (the recorded workload replayed)" in md
    assert "| w8a8-int8 | sha256:aaaaaaaaaaaa | NOT faithful: hit_rate | – | – | workload fidelity: INVALID" in md
