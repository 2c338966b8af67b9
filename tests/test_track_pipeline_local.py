"""Tracking inside the steps and the champion's path, in a real local KFP run (kfp.local)
against a real MLflow server: two candidates fan out, log into their own nested runs (keyed
by step and candidate), fan back in to one selection, and exactly one version is registered,
gated against production and given ``dry-run`` (never ``production``) by the dry-run deploy step.

No ``from __future__ import annotations``: KFP reads the components' annotations.
"""

import json
import uuid
from pathlib import Path

import pytest
from kfp import dsl, local
from kfp.dsl import Artifact, Output
from mlflow import MlflowClient
from mlflow_server import shared_server

from shipyard.components.deploy.component import deploy
from shipyard.components.gates.component import select_champion
from shipyard.components.track.component import close_tracking, register_champion
from shipyard.runtimes.runtime import runtime_image


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def open_run(tracking_uri: str, experiment: str, kfp_run_id: str) -> str:
    """Stands in for pre-flight: opens the pipeline's MLflow run."""
    from shipyard.tracking.pipeline_runs import start_tracking

    return start_tracking(tracking_uri, experiment, "track-local", kfp_run_id, '{"recipes": "a,b"}', "")["parent_run_id"]


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def fake_candidate(recipe: str, candidate: Output[Artifact], tracking_uri: str, experiment: str,
                   kfp_run_id: str):
    """Stands in for compress + evaluate + benchmark + gates: logs a step run, writes candidate.json."""
    import json
    import os

    from shipyard.tracking.steprun import StepRun

    with StepRun("compress", recipe, tracking_uri=tracking_uri, experiment=experiment, kfp_run_id=kfp_run_id,
                 params={"recipe": recipe}) as run:
        os.makedirs(candidate.path, exist_ok=True)
        level = {"name": "concurrent@1", "requests_per_s": 2.0, "output_tokens_per_s": 150.0 if recipe == "w4a16" else 100.0, "ttft_p99_ms": 40.0,
                 "itl_p99_ms": 9.0}
        record = {"schema": "shipyard.candidate/v1", "recipe": recipe, "model_uri": f"/models/{recipe}",
                  "passed": True, "reason": "passed both gates", "size_bytes": 1000, "levels": [level],
                  "base_levels": [level], "planner": {}, "base_planner": {},
                  "accuracy": {"passed": True, "worst_recovery": 1.0, "rows": [
                      {"task": "mc", "metric": "acc,none", "higher_is_better": True, "base": 0.5, "candidate": 0.5,
                       "recovery": 1.0, "min_recovery": 0.99, "gated": True, "passed": True, "note": ""}]},
                  "slo": {"passed": True, "metrics": {"highest_load_meeting_slo_rps": 2.0}}}
        with open(os.path.join(candidate.path, "candidate.json"), "w") as fh:
            json.dump(record, fh)
        run.log(metrics={"size_bytes": 1000}, artifacts={"summary.md": os.path.join(candidate.path, "candidate.json")})


@dsl.pipeline(name="track-local")
def track_local(tracking_uri: str, experiment: str, model_name: str, source_uri: str):
    track = {"tracking_uri": tracking_uri, "experiment": experiment, "kfp_run_id": dsl.PIPELINE_JOB_ID_PLACEHOLDER}
    finish = close_tracking(**track)
    with dsl.ExitHandler(finish):
        opened = open_run(**track)
        with dsl.ParallelFor(items=["w8a8", "w4a16"], parallelism=2) as recipe:
            cand = fake_candidate(recipe=recipe, **track).after(opened)
        chosen = select_champion(candidates=dsl.Collected(cand.outputs["candidate"]), selection="throughput", **track)
        with dsl.If(chosen.outputs["Output"] != ""):
            reg = register_champion(model_name=model_name, source_uri=source_uri, digest="sha256:" + "9" * 64,
                                    base_model_uri="embedded://tiny", champion_tolerance=0.0,
                                    selection=chosen.outputs["decision"], **track)
            with dsl.If(reg.outputs["Output"] == True):  # noqa: E712 - KFP condition
                deploy(model_uri="", name="tiny", namespace="shipyard", deploy_config='{"gpu_memory_gib": 80}',
                       dry_run=True, decision=reg.outputs["decision"], model_name=model_name, **track)


def test_fan_in_one_champion_and_runs_per_step_and_candidate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KFP_MLFLOW_CONFIG", raising=False)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    server = shared_server()
    experiment, name = f"track-local-{uuid.uuid4().hex[:6]}", f"tiny-{uuid.uuid4().hex[:6]}"
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    track_local(tracking_uri=server.url, experiment=experiment, model_name=name,
                source_uri="oci://reg.local/tiny@sha256:" + "9" * 64)
    client = MlflowClient(server.url)
    mv = client.get_model_version_by_alias(name, "dry-run")  # a dry run never moves production
    assert mv.version == "1" and set(mv.aliases) == {"candidate", "dry-run"}
    assert mv.tags["recipe"] == "w4a16" and mv.tags["oci_digest"].startswith("sha256:")
    assert "w4a16 of embedded://tiny" in mv.description
    assert len(client.search_model_versions(f"name = '{name}'")) == 1
    parent = client.get_run(mv.run_id)
    assert parent.info.status == "FINISHED" and parent.data.tags["shipyard.champion"] == "w4a16"
    assert parent.data.metrics["champion.output_tokens_per_s_at_slo"] == pytest.approx(150.0)
    # the pipeline run itself shows the decision: its record and the candidates report, beside the version
    kept = {a.path for a in client.list_artifacts(mv.run_id, "decision")}
    assert {f"decision/{n}" for n in ("decision-record.json", "selection.json", "frontier.json", "candidates.md",
                                      "candidates.html")} <= kept, kept
    children = client.search_runs([parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{mv.run_id}'")
    names = {r.info.run_name: r for r in children}
    assert {"compress [w8a8]", "compress [w4a16]", "select", "register", "deploy [w4a16]"} <= set(names)
    assert names["compress [w8a8]"].data.params["recipe"] == "w8a8"
    assert names["compress [w4a16]"].data.params["recipe"] == "w4a16"
    assert names["compress [w4a16]"].info.end_time >= names["compress [w4a16]"].info.start_time
    artifacts = {a.path for a in client.list_artifacts(names["select"].info.run_id)}
    assert {"candidates.md", "candidates.html", "selection.json"} <= artifacts
    assert {a.path for a in client.list_artifacts(names["deploy [w4a16]"].info.run_id)} == {"manifest.yaml", "deploy.md",
                                                                                        "deploy.html"}
    assert names["deploy [w4a16]"].data.params["model_uri"] == "oci://reg.local/tiny@sha256:" + "9" * 64
    decision = json.loads(Path(client.download_artifacts(names["select"].info.run_id, "selection.json", str(tmp_path)))
                          .read_text())
    assert decision["winner"] == "w4a16" and decision["decisions"]["w8a8"].startswith("rank 2")
