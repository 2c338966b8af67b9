"""The deploy step's decision record and summary (issue 22 §2): the verification, passed, failed or
not run, goes into the champion's decision-record.json; the summary names it once.

No ``from __future__ import annotations``: KFP reads the test component's annotations."""

import json
from pathlib import Path

from test_selection import cand

from shipyard.gates.selection import with_verification
from shipyard.steps.deploy import run_deploy
from shipyard.steps.select import select_champion


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


def test_the_deploy_component_outputs_the_decision_record_with_its_verification(tmp_path: Path) -> None:
    """The KFP wrapper (kfp.local): select_champion's record goes in as the selection, the updated record
    comes out as the decision_record output (and is what the step logs to MLflow)."""
    import kfp.local
    from kfp import dsl
    from kfp.dsl import Artifact, Markdown, Output

    from shipyard.components.deploy.component import deploy

    decision_dir = selection_dir(tmp_path)
    # the records (the reports' copies beside them would not fit in one command-line argument)
    files = {p.name: p.read_text() for p in decision_dir.iterdir() if p.suffix == ".json"}

    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def champion(files_json: str, selection: Output[Artifact], decision: Output[Markdown]):
        import json
        import os

        os.makedirs(selection.path, exist_ok=True)
        for name, text in json.loads(files_json).items():
            with open(os.path.join(selection.path, name), "w") as fh:
                fh.write(text)
        decision.metadata.update({"recipe": "w8a8-int8", "version": "2", "headline": "{}"})
        with open(decision.path, "w") as fh:
            fh.write("# champion\n")

    @dsl.pipeline(name="deploy-record")
    def pipeline(model_uri: str):
        made = champion(files_json=json.dumps(files))
        deploy(model_uri=model_uri, name="llm", namespace="serving", dry_run=True,
               deploy_config=json.dumps({"prefill_replicas": 1, "gpu_memory_gib": 80}),
               decision=made.outputs["decision"], selection=made.outputs["selection"])

    kfp.local.init(runner=kfp.local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    pipeline(model_uri="oci://registry.example/m@sha256:" + "2" * 64)
    (path,) = (tmp_path / "root").rglob("deploy/decision_record")
    record = json.loads(path.read_text())
    assert record["champion"] == "w8a8-int8" and record["candidates"]  # select_champion's record, kept
    assert record["verification"]["outcome"] == "not run" and record["deployment"]["status"] == "DryRun"
