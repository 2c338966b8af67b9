"""The track wrappers in a real local KFP run (kfp.local) against a real MLflow server."""

import json
from pathlib import Path

import pytest
from kfp import dsl, local
from kfp.dsl import Artifact, Metrics, Output
from mlflow import MlflowClient
from mlflow_server import shared_server

from shipyard.components.track import component as track


@dsl.component(base_image="python:3.11")
def fake_eval(acc: float, metrics: Output[Metrics], results: Output[Artifact]):
    import json
    import os

    metrics.log_metric("arc_easy/acc", acc)
    os.makedirs(results.path, exist_ok=True)
    with open(os.path.join(results.path, "lm_eval_results.json"), "w") as fh:
        json.dump({"results": {"arc_easy": {"acc,none": acc}}}, fh)


@dsl.component(base_image="python:3.11")
def fake_bench(metrics: Output[Metrics]):
    metrics.log_metric("ttft_p95_ms", 120.0)


@dsl.pipeline(name="track-local")
def track_local(tracking_uri: str, model_name: str, source_uri: str, slos_json: str):
    start = track.start_tracking(tracking_uri=tracking_uri, experiment="local-kfp", pipeline_name="track-local",
                                 kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, params_json='{"recipe": "w4a16"}',
                                 tags_json="{}")
    uri, parent = start.outputs["tracking_uri"], start.outputs["parent_run_id"]
    base = fake_eval(acc=0.60)
    cand = fake_eval(acc=0.605)
    bench = fake_bench()
    track.track_step(tracking_uri=uri, parent_run_id=parent, step="evaluate", params_json="{}", tags_json="{}",
                     metrics=cand.outputs["metrics"], files=cand.outputs["results"])
    reg = track.register_model(tracking_uri=uri, model_name=model_name, source_uri=source_uri,
                               parent_run_id=parent, tags_json='{"recipe": "w4a16"}')
    gate = track.promotion_gate(tracking_uri=uri, model_name=model_name, candidate_version=reg.outputs["version"],
                                parent_run_id=parent, slos_json=slos_json, accuracy_metrics="", min_recovery=0.99,
                                champion_tolerance=0.0, candidate_eval=cand.outputs["metrics"],
                                candidate_bench=bench.outputs["metrics"], base_eval=base.outputs["metrics"])
    prod = track.set_production(tracking_uri=uri, model_name=model_name, version=reg.outputs["version"],
                                gate_passed=gate.outputs["Output"])
    track.finish_tracking(tracking_uri=uri, parent_run_id=parent, status="FINISHED",
                          tags_json='{"shipyard.gate": "passed"}').after(prod)

def test_local_pipeline_run_tree_and_alias(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KFP_MLFLOW_CONFIG", raising=False)
    server = shared_server()
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    name = "tiny-local"
    run = track_local(tracking_uri=server.url, model_name=name, source_uri="oci://reg.local/tiny@sha256:" + "9" * 64,
                      slos_json=json.dumps({"ttft_p95_ms": {"max": 500}}))
    del run
    client = MlflowClient(server.url)
    mv = client.get_model_version_by_alias(name, "production")
    assert mv.version == "1" and set(mv.aliases) == {"candidate", "production"}
    assert mv.tags["shipyard.gate.passed"] == "true" and mv.tags["recipe"] == "w4a16"
    parent = client.get_run(mv.run_id)
    assert parent.info.status == "FINISHED" and parent.data.params["recipe"] == "w4a16"
    children = client.search_runs([parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{mv.run_id}'")
    steps = {r.data.tags["shipyard.step"]: r for r in children}
    assert set(steps) == {"evaluate", "promotion-gate"}
    assert steps["evaluate"].data.metrics["arc_easy/acc"] == pytest.approx(0.605)
