"""Keep-the-base (shipyard.gates.baseline, shipyard.steps.select): the base is always a candidate, a
compressed candidate the base dominates is never champion, and the headline compares with the base."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import report_fixtures as fx

from shipyard.core.errors import ShipyardError
from shipyard.gates.baseline import accuracy_loss, dominance
from shipyard.gates.selection import objective_value, select
from shipyard.steps.select import select_champion

#: the base model as the user named it (the pipeline's model_uri)
BASE = "hf://HuggingFaceTB/SmolLM2-135M-Instruct"


def record(recipe: str, *, tok_s: float, size: int, base_acc: float = 0.80, acc: float = 0.80,
           interval: tuple[float, float] | None = None, passed: bool = True, is_base: bool = False) -> dict:
    level = {"name": "concurrent@1", "nominal_load": 1, "requests_per_s": 2.0, "output_tokens_per_s": tok_s,
             "ttft_p99_ms": 50.0, "itl_p99_ms": 10.0, "error_rate": 0.0, "total": 8}
    loss = base_acc - acc
    paired = None if interval is None else {"loss": loss, "loss_low": interval[0], "loss_high": interval[1]}
    return {
        "schema": "shipyard.candidate/v1", "recipe": recipe, "is_base": is_base, "model_uri": f"/models/{recipe}",
        "passed": passed, "reason": "passed" if passed else "accuracy gate failed: inferior", "size_bytes": size,
        "accuracy": {"passed": passed, "worst_recovery": acc / base_acc, "rows": [
            {"task": "opposites_mc", "metric": "acc_norm,none", "higher_is_better": True, "base": base_acc,
             "candidate": acc, "recovery": acc / base_acc, "gated": True, "passed": passed, "paired": paired,
             "margin": 0.05}]},
        "slo": {"passed": True, "metrics": {"highest_load_meeting_slo_rps": 2.0}},
        "levels": [level], "planner": {"kv_cache_tokens": 1000},
    }


def base(tok_s: float = 37.1) -> dict:
    return record("base", tok_s=tok_s, size=269_000_000, is_base=True)


def test_a_slower_less_accurate_candidate_is_dominated_and_the_base_is_kept() -> None:
    """The README run on this CPU: W8A8 at 28.5 tok/s against the base's 37.1, with a real loss."""
    w8a8 = record("w8a8-int8", tok_s=28.5, size=163_000_000, acc=0.688, base_acc=0.844, interval=(0.03, 0.28))
    result = select([base(), w8a8], "throughput")
    assert result["winner"]["recipe"] == "base"
    assert result["dominated"]["w8a8-int8"] == ("dominated by the base: 0.77x as fast at the SLO and loses 0.156 on "
                                                "opposites_mc acc_norm [+0.03, +0.28]")
    assert result["headline"] == ("kept the base: w8a8-int8 is 0.77x as fast at the SLO and loses 0.156 on "
                                  "opposites_mc acc_norm [+0.03, +0.28]")
    assert result["ranking"] == ["base"]
    # the base won because it dominates, not because it was the only candidate to pass
    assert result["reason"].endswith("(w8a8-int8 also passed its gates, but the base dominates it)"), result["reason"]


def test_a_faster_candidate_without_loss_is_champion_and_the_headline_says_what_it_buys() -> None:
    w8a8 = record("w8a8-int8", tok_s=55.0, size=163_000_000, acc=0.79, base_acc=0.80, interval=(-0.02, 0.04))
    result = select([base(), w8a8], "throughput")
    assert result["winner"]["recipe"] == "w8a8-int8" and not result["dominated"]
    assert result["headline"] == ("champion w8a8-int8 vs base: accuracy -0.010 [-0.040, +0.020] (margin 0.05) on "
                                  "opposites_mc acc_norm, 1.48x output tok/s at the SLO, 1.65x smaller")
    assert result["decisions"]["base"].startswith("rank 2:")


def test_a_size_objective_states_what_compression_buys_and_names_the_trade() -> None:
    """Slower and less accurate, but smaller: the base never dominates it on (accuracy, size)."""
    w8a8 = record("w8a8-int8", tok_s=28.5, size=163_000_000, acc=0.79, base_acc=0.80)
    result = select([base(), w8a8], "size")
    assert result["winner"]["recipe"] == "w8a8-int8" and not result["dominated"]
    assert "0.77x output tok/s at the SLO" in result["headline"] and "1.65x smaller" in result["headline"]
    assert "accuracy -0.010" in result["headline"]


def test_equal_figures_are_not_domination_and_unknown_figures_never_are() -> None:
    same = record("same", tok_s=37.1, size=269_000_000)
    assert dominance(base(), same, "throughput", objective_value) is None
    unknown = record("unknown", tok_s=10.0, size=1, acc=0.5)
    unknown["levels"] = []  # no level meeting the SLO: no throughput figure
    assert dominance(base(), unknown, "throughput", objective_value) is None
    worse_only_on_accuracy = record("acc", tok_s=37.1, size=269_000_000, acc=0.7)
    assert dominance(base(), worse_only_on_accuracy, "throughput", objective_value).endswith("loses 0.1 on "
                                                                                             "opposites_mc acc_norm")


def test_the_worst_metric_is_the_lowest_recovery_whatever_its_units() -> None:
    cand = record("w8a8", tok_s=30, size=1)
    cand["accuracy"]["rows"].append({"task": "prose_ppl", "metric": "word_perplexity,none", "higher_is_better": False,
                                     "base": 20.0, "candidate": 20.5, "recovery": 20 / 20.5, "gated": True})
    cand["accuracy"]["rows"][0].update(candidate=0.6, recovery=0.75)
    assert accuracy_loss(cand)["task"] == "opposites_mc"  # 0.2 accuracy points weigh more than 0.5 perplexity


def test_nothing_passes_when_the_base_fails_its_slo_too() -> None:
    failing_base = {**base(), "passed": False, "reason": "SLO gate TTFT p99"}
    result = select([failing_base, record("w8a8", tok_s=20, size=1, passed=False)], "throughput")
    assert result["winner"] is None and result["headline"].startswith("no champion: base: not eligible: SLO gate")


def test_the_step_builds_the_base_from_its_own_results_and_records_it(tmp_path: Path) -> None:
    """The select step on real gate records: the base from its eval summary and benchmark results, a
    slower candidate dominated, the base packaged from its own model URI; the decision record, the
    frontier and the report hold the base point."""
    slow = copy.deepcopy(fx.CAND_BENCH)
    for lv in slow["levels"]:
        lv["output_tokens_per_s"] *= 0.5
    fx.judged(tmp_path, cand_bench=slow)
    out = select_champion([str(tmp_path / "w8a8-int8-gates")], "throughput", str(tmp_path / "sel"),
                          str(tmp_path / "c.md"), str(tmp_path / "c.html"), base_eval=str(tmp_path / "base-eval"),
                          base_bench=str(tmp_path / "base-bench"), base_model_uri="/models/base", slo=fx.SLO,
                          base_uri=BASE, base_pinned_uri=f"{BASE}@{'e' * 40}", base_fingerprint=f"hf:{'e' * 40}")
    assert out["winner"] == "base" and out["winner_model_uri"] == "/models/base" and out["metrics"]["kept_base"] == 1.0
    # the base model as the user named it and as the pin step pinned it, in both records
    named = {"uri": BASE, "pinned_uri": f"{BASE}@{'e' * 40}", "fingerprint": f"hf:{'e' * 40}"}
    assert json.loads((tmp_path / "sel" / "selection.json").read_text())["base_model"] == named
    # the throughput ratio at matched load (both meet the SLO highest at concurrency 2) with its 95% interval
    assert out["headline"].startswith("kept the base: w8a8-int8 is 0.59x as fast at the SLO [0.54, 0.64] and loses "
                                      "0.0348 on shipyard_arithmetic_mc acc")
    assert "cache" not in out["headline"]  # both measured in this run: nothing to say
    record_ = json.loads((tmp_path / "sel" / "decision-record.json").read_text())
    assert record_["base_measured"] == {"source": "this run", "text": "base measured in this run"}
    cand = next(g for g in record_["candidates"] if g["candidate"] == "w8a8-int8")
    row = next(r for r in cand["slo"]["comparison"] if r["level"] == "concurrent@2" and r["figure"] == "output_tokens_per_s")
    assert row["words"] == "slower" and row["low"] < row["ratio"] < row["high"] < 1 and row["repeats"] == {"base": 1, "candidate": 1}
    assert "bootstrap" in record_["statistics"]["performance_comparison"]
    assert record_["kept_base"] is True and record_["headline"] == out["headline"]
    assert record_["base_model"] == named
    assert record_["base"]["figures"]["throughput"] == 15.9 and record_["base"]["figures"]["size"] == 269_060_552
    assert record_["dominance"]["dominated"]["w8a8-int8"].startswith("dominated by the base: 0.59x as fast")
    front = json.loads((tmp_path / "sel" / "frontier.json").read_text())
    assert {p["candidate"] for p in front["points"]} == {"base", "w8a8-int8"}
    assert front["champion"]["candidate"] == "base"
    md = (tmp_path / "c.md").read_text()
    assert "**Verdict:** kept the base: w8a8-int8" in md and "| dominated by the base |" in md
    assert "| 1 | base | champion | 15.9 |" in md  # the base's own throughput at the SLO, never "–"
    assert (tmp_path / "sel" / "base" / "slo.md").is_file()  # the base met the absolute SLO on its own figures


def test_a_base_uri_with_credentials_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    fx.judged(tmp_path)
    secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
    with pytest.raises(ShipyardError, match=r"model_uri: s3://\.\.\. carries credentials") as err:
        select_champion([str(tmp_path / "w8a8-int8-gates")], "size", str(tmp_path / "sel"), str(tmp_path / "c.md"),
                        str(tmp_path / "c.html"), base_uri=f"s3://AKIAEXAMPLE:{secret}@bucket/base")
    assert secret not in str(err.value) and not (tmp_path / "sel").exists()


def test_a_kept_base_moves_nothing_when_production_exists(tmp_path: Path) -> None:
    """First run: the base becomes the first champion (no production yet). With a production version,
    a run that keeps the base leaves it where it is: the champion/challenger gate says so and fails."""
    import uuid

    from mlflow import MlflowClient
    from mlflow_server import shared_server

    from shipyard.core.records import CANDIDATE_SCHEMA as SCHEMA
    from shipyard.steps.register import register_champion
    from shipyard.tracking.pipeline_runs import start_tracking

    url, name = shared_server().url, f"keep-base-{uuid.uuid4().hex[:8]}"

    def register(recipe: str, is_base: bool) -> dict:
        folder = tmp_path / recipe
        folder.mkdir()
        rows = [{"task": "mc", "metric": "acc,none", "higher_is_better": True, "base": 0.8, "candidate": 0.8}]
        (folder / "candidate.json").write_text(json.dumps({"schema": SCHEMA, "recipe": recipe, "is_base": is_base,
                                                           "passed": True, "reason": "passed",
                                                           "accuracy": {"rows": rows}}))
        run_id = uuid.uuid4().hex
        start_tracking(url, name, "optimize-and-deploy", run_id, "{}", "")
        return register_champion(tracking_uri=url, experiment=name, kfp_run_id=run_id, model_name=name,
                                 source_uri=f"oci://registry/{recipe}@sha256:{'a' * 64}", digest="sha256:" + "a" * 64,
                                 selection_dir=str(folder), base_model_uri="hf://org/base", champion_tolerance=0.0,
                                 report_path=str(tmp_path / f"{recipe}.md"))

    first = register("w8a8-int8", is_base=False)
    assert first["passed"] is True
    MlflowClient(url).set_registered_model_alias(name, "production", str(first["version"]))
    kept = register("base", is_base=True)
    assert kept["passed"] is False
    assert kept["reason"] == (f"kept the base: no compressed candidate beat the base, so production "
                              f"(v{first['version']}) stays where it is; nothing is deployed")
    assert "kept the base" in (tmp_path / "base.md").read_text()
    # what the register wrapper sets on its gate report and logs into MLflow, as the step returns it
    assert kept["metadata"] == {"uri": f"oci://registry/base@sha256:{'a' * 64}", "digest": "sha256:" + "a" * 64,
                                "version": kept["version"], "passed": False, "reason": kept["reason"], "recipe": "base",
                                "headline": json.dumps(kept["headline"])}
    assert kept["log"] == {"params": {"version": kept["version"], "champion_version": kept["champion_version"] or "none"},
                           "metrics": {"gate.passed": 0.0},
                           "tags": {"shipyard.candidate": "base", "shipyard.gate.reason": kept["reason"]},
                           "artifacts": {"champion-gate.md": str(tmp_path / "base.md")}}


def test_the_console_summary_opens_with_the_headline_and_the_slo_that_applied(tmp_path: Path) -> None:
    from shipyard.run.local import RunSummary, StepSummary, format_summary, outcome

    fx.judged(tmp_path)
    select_champion([str(tmp_path / "w8a8-int8-gates")], "throughput", str(tmp_path / "sel"), str(tmp_path / "c.md"),
                    str(tmp_path / "c.html"), base_eval=str(tmp_path / "base-eval"),
                    base_bench=str(tmp_path / "base-bench"), base_model_uri="/models/base", slo="")
    steps = [StepSummary(task="select-champion", status="SUCCESS", artifacts={"decision": str(tmp_path / "sel")})]
    said = outcome(steps, {"slo": ""})
    assert said["champion"] == "w8a8-int8" and said["headline"].startswith("champion w8a8-int8 vs base: accuracy ")
    assert said["slo"].startswith("a load level meets the SLO when TTFT p99 <= 10000 ms")
    assert said["slo"].endswith("(the default: the slo parameter was empty)")
    # the regression budget against the base is always stated, also when none was declared
    assert "; regression budget against the base at matched load: none declared (the default" in said["slo"]
    text = format_summary(RunSummary(pipeline="optimize-and-deploy", status="SUCCESS", seconds=1.0,
                                     run_dir=str(tmp_path), parameters={}, steps=steps, **said), str(tmp_path))
    lines = text.splitlines()
    assert lines[1].startswith("shipyard: optimize-and-deploy SUCCESS") and lines[3] == said["headline"]
    assert lines[5] == f"SLO applied: {said['slo']}"
