"""The typed records (shipyard.core.records): the candidate record, its SLO section, the selection and
the decision record have one typed definition each, match what the steps write key for key, and load through one
loader each with a one-line error naming the file and the fix (issue 30 item 5)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import report_fixtures as fx

from shipyard.core.errors import ShipyardError
from shipyard.core.records import (
    CANDIDATE_FILE,
    CANDIDATE_SCHEMA,
    DECISION_RECORD,
    DECISION_SCHEMA,
    SELECTION_FILE,
    CandidateRecord,
    DecisionRecord,
    SelectionRecord,
    ServingChoice,
    SloSection,
    SloThresholds,
    load_candidate,
    load_decision,
    load_selection,
    slo_of,
    slo_thresholds,
)
from shipyard.gates.candidate import verdict
from shipyard.gates.config import SloConfig
from shipyard.gates.slo import parse_slo
from shipyard.gates.verification import load_recorded
from shipyard.run.local import StepSummary, outcome
from shipyard.steps.deploy import searched_args, write_decision_record
from shipyard.steps.select import select_champion


def keys(typed: type) -> set[str]:
    return set(typed.__annotations__)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real gates, select and deploy-record steps on the report fixtures: a candidate, the base,
    the select step's decision record and the deploy step's copy of it."""
    tmp = tmp_path_factory.mktemp("records")
    slow = copy.deepcopy(fx.CAND_BENCH)
    for lv in slow["levels"]:
        lv["output_tokens_per_s"] *= 0.5
    fx.judged(tmp, cand_bench=slow)
    select_champion([str(tmp / "w8a8-int8-gates")], "throughput", str(tmp / "sel"), str(tmp / "c.md"),
                    str(tmp / "c.html"), base_eval=str(tmp / "base-eval"), base_bench=str(tmp / "base-bench"),
                    base_model_uri="/models/base", slo=fx.SLO, base_uri="hf://org/base")
    write_decision_record(str(tmp / "sel"), str(tmp / "verify"), {"name": "svc", "status": "Ready"},
                          "oci://registry/m", True)
    return tmp


def test_the_candidate_records_the_steps_write_have_the_typed_shape(run: Path) -> None:
    for folder in (run / "w8a8-int8-gates", run / "sel" / "base"):
        raw = json.loads((folder / CANDIDATE_FILE).read_text())
        assert set(raw) <= keys(CandidateRecord), set(raw) - keys(CandidateRecord)
        assert set(raw["slo"]) == keys(SloSection)
        assert set(raw["slo"]["thresholds"]) == keys(SloThresholds)
        # the loader hands back the record as written: the same JSON, byte for byte
        loaded = load_candidate(folder)
        assert json.dumps(loaded, indent=2, default=str) == (folder / CANDIDATE_FILE).read_text()
        assert slo_of(loaded) is loaded["slo"] and slo_thresholds(loaded) == raw["slo"]["thresholds"]
    assert keys(CandidateRecord) - set(json.loads((run / "w8a8-int8-gates" / CANDIDATE_FILE).read_text())) == {
        "is_base", "benchmark_source", "eval_sets"}  # the base's keys, and eval_sets only in a run with sets


def test_the_slo_thresholds_are_the_slo_config_and_parse_slo_fills_every_one() -> None:
    assert keys(SloThresholds) == set(SloConfig.model_fields)
    assert set(parse_slo('{"ttft_p99_ms": 500}')) == keys(SloThresholds)
    assert slo_of({}) == {} and slo_thresholds({"slo": None}) == {}


def test_the_decision_records_have_the_typed_shape(run: Path) -> None:
    selected = json.loads((run / "sel" / DECISION_RECORD).read_text())
    assert selected["schema"] == DECISION_SCHEMA
    assert set(selected) == keys(DecisionRecord) - {"verification", "deployment"}
    deployed = load_decision(run / "verify")
    assert set(deployed) == keys(DecisionRecord)
    assert json.dumps(deployed, indent=2, default=str) == (run / "verify" / DECISION_RECORD).read_text()
    # a promoted candidate (no selection): the deploy step starts a record naming the champion
    write_decision_record(str(run / "w8a8-int8-gates"), str(run / "promoted"), {"name": "svc"}, "oci://r/m", True)
    promoted = load_decision(run / "promoted" / DECISION_RECORD)
    assert promoted["champion"] == "w8a8-int8" and set(promoted) <= keys(DecisionRecord)


def test_the_selection_the_select_step_writes_has_the_typed_shape(run: Path) -> None:
    raw = json.loads((run / "sel" / SELECTION_FILE).read_text())
    assert set(raw) == keys(SelectionRecord), set(raw) ^ keys(SelectionRecord)
    assert set(raw["serving"]) == keys(ServingChoice)
    for folder in (run / "sel", run / "sel" / SELECTION_FILE):  # the folder or the file
        loaded = load_selection(folder)
        assert json.dumps(loaded, indent=2, default=str) == (run / "sel" / SELECTION_FILE).read_text()
    assert load_selection(run / "sel")["winner"] == "base"  # the slower candidate is dominated


def test_the_selection_readers_go_through_its_loader(tmp_path: Path) -> None:
    """A missing or unreadable selection is one line naming the file; the deploy step's searched flags
    and the console's outcome read the selection through the loader and treat one that cannot be read
    as no search and no champion (a list where the object belongs was an AttributeError in outcome)."""
    with pytest.raises(ShipyardError) as err:
        load_selection(tmp_path)
    assert err.value.field == "selection" and str(tmp_path / SELECTION_FILE) in str(err.value)
    assert "\n" not in str(err.value)
    steps = [StepSummary(task="select-champion", status="SUCCESS", artifacts={"decision": str(tmp_path)})]
    for text in ("{not json", "[1, 2]"):
        (tmp_path / SELECTION_FILE).write_text(text)
        with pytest.raises(ShipyardError, match="cannot read|is not a JSON object"):
            load_selection(tmp_path)
        assert searched_args(str(tmp_path)) == {}
        assert outcome(steps, {"slo": ""})["champion"] == ""
    (tmp_path / SELECTION_FILE).write_text(json.dumps({"winner": "fp8", "headline": "fp8 wins", "candidates": [],
                                                       "serving": {"vllm_args": ["--max-num-seqs", "8", "--x"],
                                                                   "source": "tuning search"}}))
    assert searched_args(str(tmp_path)) == {"max-num-seqs": "8", "x": True}
    assert outcome(steps, {"slo": ""})["champion"] == "fp8"


@pytest.mark.parametrize("load, name, schema, field", [(load_candidate, CANDIDATE_FILE, CANDIDATE_SCHEMA, "candidates"),
                                                       (load_decision, DECISION_RECORD, DECISION_SCHEMA, "decision")])
def test_a_missing_or_foreign_record_is_one_line_naming_the_file_and_the_fix(tmp_path: Path, load: Any, name: str,
                                                                             schema: str, field: str) -> None:
    with pytest.raises(ShipyardError) as err:
        load(tmp_path)
    assert err.value.field == field and str(tmp_path / name) in str(err.value) and "\n" not in str(err.value)
    (tmp_path / name).write_text("{not json")
    with pytest.raises(ShipyardError, match="cannot read"):
        load(tmp_path)
    (tmp_path / name).write_text(json.dumps({"schema": "shipyard.golden/v1"}))
    with pytest.raises(ShipyardError, match=f"is not a shipyard .* record \\({schema}\\)") as err:
        load(tmp_path / name)
    assert err.value.fix and "\n" not in str(err.value)
    (tmp_path / name).write_text(json.dumps({"schema": schema, "recipe": "w4a16"}))
    assert load(tmp_path)["schema"] == schema


def test_the_readers_go_through_the_loaders(tmp_path: Path) -> None:
    """The verify step's recorded candidate refuses a candidate.json that is not one (it read any JSON
    object before), naming the file; the deploy step's record of a promoted candidate names no champion
    from such a file, as from an unreadable one."""
    (tmp_path / CANDIDATE_FILE).write_text(json.dumps({"recipe": "w4a16", "golden": {"answers": []}}))
    with pytest.raises(ShipyardError, match="is not a shipyard candidate record") as err:
        load_recorded(str(tmp_path))
    assert err.value.field == "candidate" and str(tmp_path / CANDIDATE_FILE) in str(err.value)
    write_decision_record(str(tmp_path), str(tmp_path / "v"), {"name": "svc"}, "oci://r/m", True)
    assert load_decision(tmp_path / "v")["champion"] == ""


def test_a_verdict_reads_the_same_on_every_surface() -> None:
    assert (verdict(True), verdict(True, "2 metrics inconclusive"), verdict(False), verdict(None)) == (
        "pass", "pass (2 metrics inconclusive)", "FAIL", "-")
