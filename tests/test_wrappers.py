"""Thin KFP wrappers (issue 30 item 4): a step returns what MLflow records (``log``: StepRun.log's
arguments) and the wrapper logs it as it is; the helpers the wrappers share set the outputs. Real kfp
artifacts, real steps on the report fixtures; the wrappers themselves run in the pipeline tests."""

from __future__ import annotations

import json
from pathlib import Path

import report_fixtures as fx
from kfp.dsl import Artifact, Markdown

from shipyard.core.records import DECISION_RECORD, SELECTION_FILE
from shipyard.evaluation.garak_scan import SAFETY_DIR, SAFETY_FILE
from shipyard.runtimes.runtime import metadata_of, path_of, record_metadata, record_outputs, uri_of
from shipyard.steps.benchmark import benchmark_record
from shipyard.steps.select import select_champion


def test_the_select_step_returns_its_mlflow_record_and_its_outputs_metadata(tmp_path: Path) -> None:
    fx.judged(tmp_path)
    out = select_champion([str(tmp_path / "w8a8-int8-gates")], "throughput", str(tmp_path / "sel"),
                          str(tmp_path / "c.md"), str(tmp_path / "c.html"), base_eval=str(tmp_path / "base-eval"),
                          base_bench=str(tmp_path / "base-bench"), base_model_uri="/models/base", slo=fx.SLO)
    json.dumps(out)  # what call_step hands back from another runtime's process
    assert out["metadata"] == {"champion": out["winner"], "reason": out["reason"], "headline": out["headline"]}
    log = out["log"]
    assert log["metrics"] == out["metrics"] and log["tags"] == {"shipyard.champion": out["winner"] or "none",
                                                                "shipyard.headline": out["headline"][:5000]}
    assert list(log["artifacts"]) == ["candidates.md", "candidates.html", SELECTION_FILE, "frontier.json",
                                      DECISION_RECORD]
    assert log["artifacts"]["candidates.md"] == str(tmp_path / "c.md")
    assert all(Path(p).is_file() for p in log["artifacts"].values()), log["artifacts"]


def test_a_benchmark_record_names_its_summary_results_and_the_safety_scans_files(tmp_path: Path) -> None:
    out = {"metrics": {"output_tokens_per_s": 12.5}}
    assert benchmark_record(out, str(tmp_path), str(tmp_path / "summary.md")) == {
        "metrics": {"output_tokens_per_s": 12.5},
        "artifacts": {"summary.md": str(tmp_path / "summary.md"), "results.json": f"{tmp_path}/results.json"}}
    (tmp_path / SAFETY_DIR).mkdir()
    (tmp_path / SAFETY_DIR / SAFETY_FILE).write_text("{}")
    assert benchmark_record(out, str(tmp_path), None)["artifacts"]["safety.json"] == str(tmp_path / SAFETY_DIR / SAFETY_FILE)


def test_the_wrapper_helpers_set_kfp_outputs_and_read_optional_inputs(tmp_path: Path) -> None:
    given = Artifact(uri=str(tmp_path / "in"), metadata={"uri": "hf://org/m"})
    assert (path_of(None), metadata_of(None), uri_of(None)) == ("", {}, "")
    assert (path_of(given), metadata_of(given), uri_of(given)) == (given.path, {"uri": "hf://org/m"}, given.uri)
    decision, report = Artifact(uri=str(tmp_path / "d")), Markdown(uri=str(tmp_path / "r"))
    record_outputs({"metadata": {"champion": "fp8"}}, artifact=(decision, report))
    assert decision.metadata == report.metadata == {"champion": "fp8"}
    record_metadata({"decision": {"passed": True}, "report": {"recipe": "fp8"}}, decision=decision, report=report)
    assert decision.metadata == {"champion": "fp8", "passed": True} and report.metadata == {"champion": "fp8",
                                                                                          "recipe": "fp8"}


def test_the_adapters_step_keys_its_record_apart_from_adapter_names(tmp_path: Path) -> None:
    """An adapter may be called ``log`` or ``metadata``: the step's result keeps the adapters under
    ``adapters``, so neither collides with the MLflow record or the results' metadata."""
    from shipyard.evaluation.lora import adapters_record

    def summary(digest: str, value: float) -> dict:
        return {"adapter": {"digest": digest}, "cached": False, "wall_time_s": 2.0,
                "scores": {"shipyard_capitals_mc": {"acc,none": {"value": value}}}}

    summaries = {"log": summary("sha256:aa", 0.5), "metadata": summary("sha256:bb", 0.75)}
    out = adapters_record(summaries, str(tmp_path))
    json.dumps(out)  # what call_step hands back from the compress runtime's process
    assert out["adapters"] == summaries
    assert out["metadata"] == {"adapters": {"log": {"digest": "sha256:aa", "cached": False},
                                            "metadata": {"digest": "sha256:bb", "cached": False}}}
    assert out["log"] == {
        "metrics": {"lora/log/shipyard_capitals_mc/acc": 0.5, "lora/log/eval_wall_time_s": 2.0,
                    "lora/metadata/shipyard_capitals_mc/acc": 0.75, "lora/metadata/eval_wall_time_s": 2.0},
        "tags": {"shipyard.lora.log.digest": "sha256:aa", "shipyard.lora.metadata.digest": "sha256:bb"},
        "artifacts": {"lora-log-summary.json": f"{tmp_path}/log/summary.json",
                      "lora-metadata-summary.json": f"{tmp_path}/metadata/summary.json"}}
    artifact = Artifact(uri=str(tmp_path / "results"))
    record_outputs(out, artifact=artifact)
    assert artifact.metadata == out["metadata"]
    assert adapters_record({}, str(tmp_path)) == {"adapters": {}, "metadata": {"adapters": {}},
                                                 "log": {"metrics": {}, "tags": {}, "artifacts": {}}}
