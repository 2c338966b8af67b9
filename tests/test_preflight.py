"""Pre-flight: every bad parameter is one line, names the parameter, and is found in seconds,
before anything starts (CLI and first pipeline task share check_parameters)."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from shipyard.core.errors import ShipyardError
from shipyard.params.checks import check_parameters

LOCAL = yaml.safe_load((Path(__file__).resolve().parents[1] / "pipelines" / "local-params.yaml").read_text())

BAD = [
    ({"slo": '{"ttft_p99_ms": 800'}, "slo"),
    ({"slo": '{"ttft_p99_ms": -1}'}, "slo.ttft_p99_ms"),
    ({"deploy_config": '{"replicaz": 2}'}, "deploy_config.replicaz"),
    ({"recipes": ["w3a3"]}, "recipes[0]"),
    ({"recipes": []}, "recipes"),
    ({"num_calibration_samples": "abc"}, "num_calibration_samples"),
    ({"max_seq_length": 0}, "max_seq_length"),
    ({"model_uri": "oci://reg.example/m:latest"}, "model_uri"),
    ({"model_uri": "ftp://x"}, "model_uri"),
    ({"registry": "user:hunter2@reg.example"}, "registry"),
    ({"eval_config": '{"tasks": 3}'}, "eval_config.tasks"),
    ({"eval_backend": "tgi"}, "eval_backend"),
    ({"accuracy_thresholds": '{"min_recovery": "high"}'}, "accuracy_thresholds.min_recovery"),
    ({"accuracy_thresholds": '{"recovery": 1}'}, "accuracy_thresholds"),
    ({"accuracy_thresholds": '{"rule": "superiority"}'}, "accuracy_thresholds.rule"),
    ({"accuracy_thresholds": '{"max_loss": -0.02}'}, "accuracy_thresholds.max_loss"),
    ({"accuracy_thresholds": '{"max_relative_loss": 2}'}, "accuracy_thresholds.max_relative_loss"),
    ({"accuracy_thresholds": '{"alpha": 0.5}'}, "accuracy_thresholds.alpha"),
    ({"accuracy_thresholds": '{"power": 0.3}'}, "accuracy_thresholds.power"),
    ({"accuracy_thresholds": '{"allow_inconclusive": "yes"}'}, "accuracy_thresholds.allow_inconclusive"),
    ({"accuracy_thresholds": '{"multiple_comparisons": "bonferroni"}'}, "accuracy_thresholds.multiple_comparisons"),
    ({"accuracy_thresholds": '{"metrics": {"acc": {"max_loss": "x"}}}'}, "accuracy_thresholds.metrics.acc.max_loss"),
    ({"accuracy_thresholds": '{"paired_max_loss": 0.02}'}, "accuracy_thresholds.paired_max_loss"),
    ({"accuracy_thresholds": '{"paired_confidence": 0.9}'}, "accuracy_thresholds.paired_confidence"),
    ({"benchmark_config": '{"output_tokens": -1}'}, "benchmark_config.output_tokens"),
    ({"selection": "fastest"}, "selection.objective"),
    ({"package_mode": "zip"}, "package_mode"),
    ({"namespace": "shipyard\n"}, "namespace"),  # a final newline: no name (`$` would match before it)
    ({"deploy_name": "shipyard-llm\n"}, "deploy_name"),
    ({"repository": "shipyard/models\n"}, "repository"),
    ({"champion_tolerance": -0.1}, "champion_tolerance"),
    ({"dry_run": "maybe"}, "dry_run"),
    ({"dry_run": False}, "registry"),  # LOCAL's registry is "": deploy would fail after the GPU work
    ({"dry_run": "false", "registry": "  "}, "registry"),
    ({"nonsense": 1}, "--param"),
]


def test_local_defaults_pass() -> None:
    typed = check_parameters("optimize-and-deploy", LOCAL)
    assert typed["recipes"] == ["w8a8-int8"] and typed["dry_run"] is True


@pytest.mark.parametrize(("override", "field"), BAD)
def test_bad_parameter_is_one_line_naming_it(override: dict, field: str) -> None:
    with pytest.raises(ShipyardError) as err:
        check_parameters("optimize-and-deploy", {**LOCAL, **override})
    assert err.value.field == field
    assert "\n" not in str(err.value)
    assert "hunter2" not in str(err.value)


def test_natural_spellings_are_accepted() -> None:
    typed = check_parameters("optimize-and-deploy", {**LOCAL, "recipes": "w8a8-int8, w4a16",
                                                     "num_calibration_samples": "32", "dry_run": "true"})
    assert typed["recipes"] == ["w8a8-int8", "w4a16"]
    assert typed["num_calibration_samples"] == 32 and typed["dry_run"] is True


def test_eval_config_is_judged_by_the_default_backend_when_eval_backend_is_not_given() -> None:
    """``submit``/``schedule`` check only the parameters given: an eval_config is judged by the backend
    the run will use, eval_backend's declared default (vllm: lm-eval's openai backend), not by hf."""
    openai = '{"tasks": ["arc_challenge"], "backend": "openai"}'
    assert check_parameters("optimize-and-deploy", {"dry_run": True, "eval_config": openai})["eval_backend"] == "vllm"
    with pytest.raises(ShipyardError, match="^eval_config.backend: the config asks for backend 'hf' but this step "
                                            "runs 'openai'"):
        check_parameters("optimize-and-deploy", {"dry_run": True, "eval_config": openai.replace("openai", "hf")})
    hf = {"dry_run": True, "eval_backend": "hf", "eval_config": openai.replace("openai", "hf")}
    assert check_parameters("optimize-and-deploy", hf)["eval_backend"] == "hf"
    with pytest.raises(ShipyardError, match="^eval_backend: unknown backend 'tgi'"):  # named, whatever the order
        check_parameters("optimize-and-deploy", {"dry_run": True, "eval_config": openai, "eval_backend": "tgi"})


def test_promote_needs_candidate_uri() -> None:
    with pytest.raises(ShipyardError, match="candidate_uri: is required"):
        check_parameters("promote", {})


def test_run_local_rejects_a_bad_parameter_in_seconds_and_leaves_nothing(tmp_path: Path) -> None:
    work = tmp_path / "work"
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "shipyard.cli.main", "run", "--local", "--work-dir", str(work),
         "--param", 'slo={"ttft_p99_ms": 800'],
        capture_output=True, text=True, timeout=120,
    )
    seconds = time.perf_counter() - started
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("shipyard: error: slo: is not valid JSON"), proc.stderr
    assert "Traceback" not in proc.stderr
    assert seconds < 10, seconds
    assert not work.exists()


def test_cluster_defaults_need_a_registry_unless_dry_run() -> None:
    """The cluster defaults (registry "", dry_run false) fail at pre-flight, naming registry; a
    registry or dry_run=true passes; promote (no registry parameter) is not affected."""
    with pytest.raises(ShipyardError) as err:
        check_parameters("optimize-and-deploy", {})
    assert err.value.field == "registry" and "dry_run" in str(err.value)
    assert check_parameters("optimize-and-deploy", {"registry": "quay.io"})["registry"] == "quay.io"
    assert check_parameters("requantize", {"dry_run": True})["registry"] == ""
    candidate = "oci://quay.io/org/m@sha256:" + "0" * 64
    assert check_parameters("promote", {"candidate_uri": candidate})["dry_run"] is False


def test_the_parent_run_shows_empty_parameters_and_the_slo_that_applied(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """slo left empty: the MLflow parent run records it as given ("") and, beside it, the rule that judged the run
    with every threshold (effective.slo) and the accuracy gate's config (effective.accuracy_thresholds)."""
    import json

    from mlflow import MlflowClient

    from shipyard.steps.preflight import preflight_step

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    store = f"file://{tmp_path / 'mlruns'}"
    params = {**LOCAL, "slo": "", "accuracy_thresholds": '{"max_loss": 0.05}'}
    run = preflight_step("optimize-and-deploy", params, tracking_uri=store, experiment="effective", kfp_run_id="kfp-eff")
    recorded = MlflowClient(store).get_run(run["parent_run_id"]).data.params
    assert recorded["slo"] == ""
    assert recorded["effective.slo"].startswith("a load level meets the SLO when TTFT p99 <= 10000 ms, ITL p99 <= ")
    assert "require=base" in recorded["effective.slo"]
    effective = json.loads(recorded["effective.accuracy_thresholds"])
    assert effective["rule"] == "non-inferiority" and effective["max_loss"] == 0.05 and effective["alpha"] == 0.05


@pytest.mark.parametrize("params", [{"model_uri": "s3://bucket/model"},
                                    {"calibration_dataset": "s3://bucket/calib.jsonl"},
                                    {"deploy_config": '{"template": "s3://bucket/llmisvc.yaml"}'}],
                         ids=["model", "calibration", "deploy-template"])
def test_the_preflight_refuses_an_s3_endpoint_that_carries_credentials(params: dict, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that reads s3:// with AWS_ENDPOINT_URL_S3 (the Secret shipyard-s3's) carrying the keys
    or a token: one line naming the variable and where the keys go, before the MLflow run is opened
    and before any step contacts the endpoint (pin-model failed on it with minio's "username in
    endpoint is not allowed" as "cannot reach S3"); a run that reads no s3:// input is not held up."""
    from shipyard.steps.preflight import preflight_step

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for name in ("AWS_ENDPOINT_URL", "SHIPYARD_S3_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://AKIAIOSFODNN7EXAMPLE:hunter2pw@127.0.0.1:9")
    store = f"file://{tmp_path / 'mlruns'}"
    with pytest.raises(ShipyardError) as err:
        preflight_step("optimize-and-deploy", {**LOCAL, **params}, tracking_uri=store, experiment="s3",
                       kfp_run_id="kfp-s3")
    line = str(err.value)
    assert line.startswith("AWS_ENDPOINT_URL_S3: http://... carries credentials (not shown)"), line
    assert "put the keys in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in line and "Secret shipyard-s3" in line
    assert "hunter2pw" not in line and "AKIAIOSFODNN7EXAMPLE" not in line and not (tmp_path / "mlruns").exists()
    run = preflight_step("optimize-and-deploy", LOCAL, tracking_uri=store, experiment="s3", kfp_run_id="kfp-s3")
    assert run["parent_run_id"]
