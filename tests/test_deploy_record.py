"""The deploy step's decision record and summary (issue 22 §2): the verification, passed, failed or
not run, goes into the champion's decision-record.json; the summary names it once."""

from __future__ import annotations

import json
from pathlib import Path

from test_selection import cand

from shipyard.components.deploy.deploy import run_deploy
from shipyard.gates.selection import select_champion, with_verification


def selection_dir(tmp_path: Path) -> Path:
    """select_champion's real output folder (selection.json, decision-record.json) for two candidates."""
    dirs = []
    for c in (cand("w8a8-int8"), cand("w4a16", passed=False, reason="SLO gate failed: TTFT")):
        d = tmp_path / c["recipe"]
        d.mkdir()
        (d / "candidate.json").write_text(json.dumps(c))
        dirs.append(str(d))
    select_champion(dirs, "size", str(tmp_path / "decision"), str(tmp_path / "r.md"), str(tmp_path / "r.html"))
    return tmp_path / "decision"


def test_a_dry_run_records_its_unrun_verification_in_the_decision_record_and_names_it_once(tmp_path: Path) -> None:
    decision = selection_dir(tmp_path)
    before = json.loads((decision / "decision-record.json").read_text())
    result = run_deploy(deploy_config={"prefill_replicas": 1, "gpu_memory_gib": 80}, manifest_path=str(tmp_path / "m.yaml"),
                        dry_run=True, candidate=str(decision), verify_dir=str(tmp_path / "v"),
                        summary_path=str(tmp_path / "deploy.md"), name="llm", namespace="serving",
                        model_uri="oci://registry.example/m@sha256:" + "1" * 64)
    assert result["status"] == "DryRun"
    summary = (tmp_path / "deploy.md").read_text()
    assert summary.count("| verification |") == 1, summary
    record = json.loads((tmp_path / "v" / "decision-record.json").read_text())
    # the selection's record, whole, plus what the deploy step did
    assert {k: record[k] for k in before} == before and record["champion"] == "w8a8-int8"
    assert record["verification"]["outcome"] == "not run" and record["verification"]["ran"] is False
    assert record["verification"]["why"].startswith("dry run: ")
    assert record["deployment"]["status"] == "DryRun" and record["deployment"]["name"] == "llm"
    assert record["deployment"]["model_uri"].endswith("1" * 64) and record["deployment"]["error"] == ""


def test_a_failed_verification_is_recorded_with_its_checks_and_error() -> None:
    checks = [{"name": "models (/v1/models)", "measured": 1.0, "reference": 1.0, "threshold": "", "margin": None,
               "passed": True, "rule": "", "note": "", "compared": True},
              {"name": "golden outputs (exact-match rate)", "measured": 0.25, "reference": 1.0, "threshold": ">= 0.75",
               "margin": -0.5, "passed": False, "rule": "", "note": "2 of 8 identical", "compared": True},
              {"name": "P/D pools", "measured": None, "reference": None, "threshold": "", "margin": None,
               "passed": False, "rule": "", "note": "not checked", "compared": False}]
    verification = {"ran": True, "passed": False, "reason": "failed: golden outputs (exact-match rate)",
                    "where": "http://llm.serving", "failed_checks": ["golden outputs (exact-match rate)"],
                    "golden": {"matched": 2, "total": 8, "match_rate": 0.25}}
    record = with_verification(None, verification, {"champion": "candidate", "status": "failed (rolled back)"}, checks)
    assert record["schema"] == "shipyard.decision/v1" and record["champion"] == "candidate"
    assert record["verification"]["outcome"] == "failed" and record["verification"]["golden"]["match_rate"] == 0.25
    assert [c["compared"] for c in record["verification"]["checks"]] == [True, True, False]
    assert record["deployment"] == {"status": "failed (rolled back)"}
