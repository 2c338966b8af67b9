"""Many candidates, one champion: a local run with two recipes that both pass the gates
deploys exactly once (a dry run: ``dry-run`` once, ``production`` untouched), and shows both candidates in the candidates
report and in MLflow."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from mlflow_server import shared_server
from test_local_pipeline import one, run_tiny, steps_named

pytestmark = pytest.mark.slow

# A second W8A8 recipe: GPTQ without SmoothQuant (inline recipe YAML, as the KFP UI takes it).
GPTQ_ONLY = "quant_stage:\n  quant_modifiers:\n    GPTQModifier:\n      targets: [Linear]\n      scheme: W8A8\n      ignore: [lm_head]\n"


def test_two_passing_recipes_one_champion_one_deploy(tiny_model: Path, tmp_path: Path) -> None:
    from mlflow import MlflowClient

    from shipyard.compression.recipes import recipe_label

    url = shared_server().url
    name = f"tiny-multi-{uuid.uuid4().hex[:6]}"
    summary = run_tiny(tmp_path, tiny_model, url, 'accuracy_thresholds={"rule": "recovery", "min_recovery": 0.0}',
                       f"recipes={json.dumps(['w8a8-int8', GPTQ_ONLY])}", "selection=size",
                       f"registered_model_name={name}")
    assert summary.status == "SUCCESS", [(s.task, s.status, s.error) for s in summary.steps]
    labels = {"w8a8-int8", recipe_label(GPTQ_ONLY)}
    assert len([s for s in steps_named(summary, "compress") if s.status == "SUCCESS"]) == 2
    gates = [s for s in steps_named(summary, "candidate-gates") if s.status == "SUCCESS"]
    assert len(gates) == 2 and all(s.parameters["Output"] is True for s in gates)
    for component in ("select-champion", "package-champion", "deploy"):
        assert one(summary, component).status == "SUCCESS", component
    report = Path(one(summary, "select-champion").artifacts["report"]).read_text()
    assert all(label in report for label in labels)
    assert sum(" | champion | " in line for line in report.splitlines() if line.startswith("| ")) == 1  # ranking
    assert "data:image/png;base64," in Path(one(summary, "select-champion").artifacts["report_html"]).read_text()

    client = MlflowClient(tracking_uri=url)
    versions = client.search_model_versions(f"name = '{name}'")
    assert len(versions) == 1  # one registration: the champion's
    assert "production" not in client.get_registered_model(name).aliases  # a dry run never moves it
    production = client.get_model_version_by_alias(name, "dry-run")
    assert production.version == "1" and production.tags["recipe"] in labels
    parent = client.get_run(production.run_id)
    runs = client.search_runs([parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    run_names = {r.info.run_name for r in runs}
    for label in labels:
        assert {f"compress [{label}]", f"gates [{label}]", f"evaluate [{label}]", f"benchmark [{label}]"} <= run_names
    assert sum(r.info.run_name.startswith("deploy") for r in runs) == 1
    summary_json = json.loads((tmp_path / "run-summary.json").read_text())
    assert summary_json["promoted"] is False and summary_json["champion"] == production.tags["recipe"]
