"""Champion/challenger promotion gate: pure decisions and against a real MLflow registry."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow_server import MlflowServer, shared_server

from shipyard.components.track import track
from shipyard.components.track.promote import evaluate_gate, parse_slos, run_gate
from shipyard.errors import ShipyardError

BASE = {"arc_easy/acc": 0.60, "wikitext/word_perplexity": 30.0, "eval_wall_time_s": 40.0}
SLOS = {"ttft_p95_ms": {"max": 500}, "output_tokens_per_s": {"min": 50}}
BENCH_OK = {"ttft_p95_ms": 300.0, "output_tokens_per_s": 80.0}


def test_passes_against_base_only_when_no_production() -> None:
    d = evaluate_gate({"arc_easy/acc": 0.598, "wikitext/word_perplexity": 30.2, "eval_wall_time_s": 9.0},
                      BENCH_OK, BASE, None, slos=SLOS, min_recovery=0.99)
    assert d.passed, d.reason
    assert "no production version yet" in d.reason
    assert {c.against for c in d.checks} == {"base", "slo"}
    # wall time is not an accuracy metric; perplexity is lower-is-better.
    assert {c.name for c in d.checks if c.against == "base"} == {"arc_easy/acc", "wikitext/word_perplexity"}


def test_refuses_accuracy_drop_vs_base_and_slo_miss() -> None:
    d = evaluate_gate({"arc_easy/acc": 0.50, "wikitext/word_perplexity": 36.0}, {"ttft_p95_ms": 900.0,
                      "output_tokens_per_s": 80.0}, BASE, None, slos=SLOS)
    assert not d.passed
    assert "arc_easy/acc 0.5 vs base 0.6" in d.reason
    assert "wikitext/word_perplexity 36 vs base 30" in d.reason
    assert "SLO ttft_p95_ms 900 not <= 500" in d.reason


def test_refuses_when_worse_than_champion_even_if_fine_vs_base() -> None:
    champion = {"arc_easy/acc": 0.62, "wikitext/word_perplexity": 29.0}
    d = evaluate_gate({"arc_easy/acc": 0.60, "wikitext/word_perplexity": 29.5}, BENCH_OK, BASE, champion,
                      champion_version="4", slos=SLOS)
    assert not d.passed
    assert "worse than production v4" in d.reason
    ok = evaluate_gate({"arc_easy/acc": 0.63, "wikitext/word_perplexity": 28.0}, BENCH_OK, BASE, champion,
                       champion_version="4", slos=SLOS)
    assert ok.passed and "production v4" in ok.reason


def test_fail_closed_on_missing_figures() -> None:
    d = evaluate_gate({"arc_easy/acc": 0.61}, BENCH_OK, BASE, {}, champion_version="2", slos=SLOS)
    assert not d.passed and d.reason.startswith("champion metrics missing")
    d = evaluate_gate({"arc_easy/acc": 0.61}, BENCH_OK, BASE, {"other/acc": 0.1}, champion_version="2")
    assert not d.passed and "champion metrics missing: arc_easy/acc" in d.reason
    d = evaluate_gate({"arc_easy/acc": 0.61}, {}, BASE, None, slos=SLOS)
    assert not d.passed and "SLO ttft_p95_ms missing" in d.reason
    d = evaluate_gate({}, BENCH_OK, BASE, None)
    assert not d.passed and "no accuracy metrics" in d.reason
    d = evaluate_gate({"mmlu/acc": 0.5}, BENCH_OK, BASE, None)
    assert not d.passed and "mmlu/acc: base figure missing" in d.reason


def test_bad_gate_settings_are_one_line() -> None:
    with pytest.raises(ShipyardError, match="slos"):
        parse_slos("{ttft")
    with pytest.raises(ShipyardError, match="slos"):
        parse_slos({"ttft": {"below": 3}})
    with pytest.raises(ShipyardError, match="min_recovery"):
        evaluate_gate({"a/acc": 1}, {}, {"a/acc": 1}, None, min_recovery=-0.5)


def test_min_recovery_zero_leaves_the_base_to_the_accuracy_gate() -> None:
    # the pipeline's accuracy gate already compared with the base (with its own stderr rule)
    decision = evaluate_gate({"a/acc": 0.5}, {}, {"a/acc": 0.9}, None, min_recovery=0)
    assert decision.passed, decision.reason
    assert "accuracy gate compared with the base" in decision.reason
    champion = {"a/acc": 0.6}
    assert not evaluate_gate({"a/acc": 0.5}, {}, {"a/acc": 0.9}, champion, min_recovery=0).passed


@pytest.fixture(scope="module")
def server() -> MlflowServer:
    return shared_server()


def test_champion_challenger_against_registry(server: MlflowServer, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KFP_MLFLOW_CONFIG", raising=False)
    name = f"gate-{uuid.uuid4().hex[:6]}"
    uri = server.url
    client = MlflowClient(uri)

    # First candidate: no production yet -> base only -> promoted, then deployed (production).
    p1 = track.start_tracking(uri, "gate", "optimize-deploy", "", "", "")["parent_run_id"]
    v1 = track.register_model(uri, name, "oci://reg.local/m@sha256:" + "1" * 64, p1, "")["version"]
    r1 = run_gate(tracking_uri=uri, model_name=name, candidate_version=v1,
                  candidate_eval={"arc_easy/acc": 0.60, "eval_wall_time_s": 3}, candidate_bench=BENCH_OK,
                  base_eval=BASE, out_dir=str(tmp_path / "g1"), parent_run_id=p1, slos=json.dumps(SLOS))
    assert r1["passed"] and r1["champion_version"] == ""
    assert json.loads((tmp_path / "g1" / "decision.json").read_text())["passed"] is True
    assert "PASSED" in (tmp_path / "g1" / "decision.md").read_text()
    assert "<table" in (tmp_path / "g1" / "decision.html").read_text()
    mv1 = client.get_model_version(name, v1)
    assert mv1.tags["shipyard.gate.passed"] == "true"
    assert float(mv1.tags["shipyard.metric.arc_easy/acc"]) == 0.60
    gate_run = client.get_run(r1["gate_run_id"])
    assert gate_run.data.tags["mlflow.parentRunId"] == p1 and gate_run.data.metrics["gate.passed"] == 1.0
    assert {a.path for a in client.list_artifacts(r1["gate_run_id"], "promotion-gate")} >= {
        "promotion-gate/decision.md", "promotion-gate/decision.html", "promotion-gate/decision.json"}
    track.promote_alias(uri, name, v1)

    # Challenger worse than the champion (but fine vs base): refused, production unchanged.
    p2 = track.start_tracking(uri, "gate", "requantize", "", "", "")["parent_run_id"]
    v2 = track.register_model(uri, name, "oci://reg.local/m@sha256:" + "2" * 64, p2, "")["version"]
    r2 = run_gate(tracking_uri=uri, model_name=name, candidate_version=v2,
                  candidate_eval={"arc_easy/acc": 0.595}, candidate_bench=BENCH_OK, base_eval=BASE,
                  out_dir=str(tmp_path / "g2"), parent_run_id=p2, slos=SLOS)
    assert not r2["passed"] and r2["champion_version"] == v1
    assert f"worse than production v{v1}" in r2["reason"]
    assert client.get_model_version(name, v2).tags["shipyard.gate.passed"] == "false"
    assert client.get_model_version_by_alias(name, "production").version == v1
    assert client.get_model_version_by_alias(name, "candidate").version == v2

    # Better challenger: promoted; after deployment it becomes production, v1 previous.
    v3 = track.register_model(uri, name, "oci://reg.local/m@sha256:" + "3" * 64, p2, "")["version"]
    r3 = run_gate(tracking_uri=uri, model_name=name, candidate_version=v3,
                  candidate_eval={"arc_easy/acc": 0.61}, candidate_bench=BENCH_OK, base_eval=BASE,
                  out_dir=str(tmp_path / "g3"), slos=SLOS)
    assert r3["passed"] and r3["champion_version"] == v1
    assert track.promote_alias(uri, name, v3) == {"candidate": v3, "production": v3, "previous": v1}


def test_champion_without_recorded_figures_fails_closed(server: MlflowServer, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KFP_MLFLOW_CONFIG", raising=False)
    name = f"gate-nometrics-{uuid.uuid4().hex[:6]}"
    # Production registered by hand (no gate ran, no run): its figures are unknown.
    v1 = track.register_model(server.url, name, "s3://models/legacy", "", "")["version"]
    track.promote_alias(server.url, name, v1)
    v2 = track.register_model(server.url, name, "s3://models/new", "", "")["version"]
    r = run_gate(tracking_uri=server.url, model_name=name, candidate_version=v2,
                 candidate_eval={"arc_easy/acc": 0.9}, candidate_bench=BENCH_OK, base_eval=BASE,
                 out_dir=str(tmp_path / "g"), slos=SLOS)
    assert not r["passed"]
    assert r["reason"].startswith("champion metrics missing") and f"version {v1}" in r["reason"]
    assert "REFUSED" in (tmp_path / "g" / "decision.md").read_text()
