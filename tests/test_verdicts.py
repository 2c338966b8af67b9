"""Honest verdicts (issue 23): a dry run never moves ``production``, a gate that passed only through
a tolerance rule says so wherever its verdict appears, and the local run's console and
``run-summary.json`` say what happened. Real MLflow (the session's server), no pipeline run."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow_server import shared_server

from shipyard.run.local import RunSummary, StepSummary, format_summary, outcome
from shipyard.tracking import pipeline_runs as track
from shipyard.tracking.promotion import DRY_RUN_NOTE, promote_production


@pytest.fixture(autouse=True)
def _no_kfp_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def test_a_dry_run_never_moves_production() -> None:
    """A dry-run deploy gives the champion the alias ``dry-run``; ``production`` stays where it was
    (unset here, then on the version a real deploy promoted), and the parent run says so."""
    url = shared_server().url
    experiment, kfp_run = f"dry-{uuid.uuid4().hex[:6]}", f"run-{uuid.uuid4().hex[:6]}"
    name = f"tiny-dry-{uuid.uuid4().hex[:6]}"
    parent = track.start_tracking(url, experiment, "optimize-and-deploy", kfp_run, "", "")["parent_run_id"]
    track.register_model(url, name, "oci://reg.local/tiny@sha256:" + "1" * 64, parent, "")
    client = MlflowClient(url)

    out = promote_production(url, experiment, kfp_run, name, "1", "w8a8-int8", '{"accuracy": 0.5}', dry_run=True)
    assert out["note"] == DRY_RUN_NOTE == "dry run: production unchanged"
    assert out["aliases"] == {"candidate": "1", "dry-run": "1"}
    assert "production" not in client.get_registered_model(name).aliases
    tags = client.get_run(parent).data.tags
    assert tags["shipyard.production"] == DRY_RUN_NOTE and "shipyard.production_version" not in tags

    # a real deploy promotes; a later dry run of another version leaves production on it
    unchecked = json.dumps({"checked": False, "overridden": True, "why": "overridden: test"})
    assert promote_production(url, experiment, kfp_run, name, "1", "w8a8-int8",
                              attestation_json=unchecked)["aliases"]["production"] == "1"
    track.register_model(url, name, "s3://models/tiny/v2", parent, "")
    out = promote_production(url, experiment, kfp_run, name, "2", "w4a16", dry_run=True)
    assert out["aliases"]["production"] == "1" and out["aliases"]["dry-run"] == "2"
    assert "previous" not in out["aliases"]
    assert client.get_model_version_by_alias(name, "production").version == "1"


def _summary(steps: list[StepSummary], params: dict) -> RunSummary:
    return RunSummary(pipeline="optimize-and-deploy", status="SUCCESS", seconds=1.0, run_dir="/nonexistent",
                      parameters=params, steps=steps, **outcome(steps, params))


def test_the_run_summary_and_console_say_production_is_unchanged_after_a_dry_run(tmp_path: Path) -> None:
    gates = StepSummary(task="for-loop-2/candidate-gates", status="SUCCESS", parameters={"Output": True})
    deployed = StepSummary(task="deploy", status="SUCCESS", parameters={"status": "DryRun", "url": ""})
    summary = _summary([gates, deployed], {"dry_run": True})
    assert summary.promoted is False and summary.production == DRY_RUN_NOTE
    assert json.loads(json.dumps(summary.to_dict()))["production"] == "dry run: production unchanged"
    text = format_summary(summary, str(tmp_path))
    assert "champion: candidate (dry run: production unchanged)" in text and "promoted to production" not in text

    applied = StepSummary(task="deploy", status="SUCCESS", parameters={"status": "Ready", "url": "http://x"})
    summary = _summary([gates, applied], {"dry_run": False})
    assert summary.promoted is True and "promoted to production" in format_summary(summary, str(tmp_path))


def test_the_console_ends_with_the_parent_runs_mlflow_page_or_the_mlflow_ui_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33: the console names where the run is in MLflow. A file store: the ``mlflow ui``
    command that opens it; a server: the parent run's page in the classic ML view
    (``?workflowType=machine_learning``; without it MLflow 3 opens the GenAI Traces view)."""
    from shipyard.run.local import _mlflow_link
    from shipyard.tracking.tracker import ui_url

    monkeypatch.setenv("SHIPYARD_WORK_DIR", str(tmp_path))
    opened = track.start_tracking("", "console-link", "optimize-and-deploy", f"kfp-{uuid.uuid4().hex[:8]}", "", "")
    summary = _summary([StepSummary(task="deploy", status="SUCCESS", parameters={"status": "Ready", "url": "http://x"})],
                       {})
    summary.mlflow_link = _mlflow_link(opened["parent_run_id"], {}, tmp_path)
    store = (tmp_path / "mlruns").as_uri()
    assert (f"MLflow: {store} run {opened['parent_run_id']} (MLFLOW_ALLOW_FILE_STORE=true mlflow ui "
            f"--backend-store-uri {store})") in format_summary(summary, str(tmp_path)).splitlines()
    assert ui_url("http://mlflow.example:5000", "7", "abc") == \
        "http://mlflow.example:5000/#/experiments/7/runs/abc?workflowType=machine_learning"


CAVEAT = "1 metric below 0.99 within noise; worst 0.93"  # report_fixtures: arithmetic acc recovery 0.926


def _every_surface_says(tmp_path: Path, out: dict, caveat: str) -> None:
    """The gate result, candidate.json, the console row, run-summary.json's gates and the candidates
    report's ranking all say "pass (<caveat>)"."""
    from shipyard.run.console import key_figure
    from shipyard.run.local import gates_of
    from shipyard.steps.select import select_champion

    assert out["passed"] and out["accuracy_caveat"] == caveat
    assert out["accuracy_verdict"] == f"pass ({caveat})" and f"accuracy pass: {caveat}" in out["reason"]
    record = json.loads((tmp_path / "w8a8-int8-gates" / "candidate.json").read_text())
    assert record["accuracy"]["verdict"] == f"pass ({caveat})"

    # what the KFP step hands on (components/gates: candidate metadata) -> console and run-summary.json
    metadata = {"recipe": "w8a8-int8", "passed": True, "reason": out["reason"], "accuracy_caveat": out["accuracy_caveat"]}
    row = key_figure("for-loop-2-iteration-0/candidate-gates", {"Output": True}, out["metrics"], {"candidate": metadata})
    assert row == f"w8a8-int8: accuracy pass ({caveat}), SLO pass"
    task = tmp_path / "run" / "for-loop-2-iteration-0" / "candidate-gates"
    task.mkdir(parents=True)
    (task / "executor_output.json").write_text(json.dumps({"parameterValues": {"Output": True}, "artifacts": {
        "candidate": {"artifacts": [{"uri": str(task / "candidate"), "metadata": metadata}]},
        "metrics": {"artifacts": [{"uri": str(task / "metrics"), "metadata": out["metrics"]}]}}}))
    step = StepSummary(task="for-loop-2-iteration-0/candidate-gates", status="SUCCESS", parameters={"Output": True})
    (gate,) = gates_of([step], tmp_path / "run")["candidates"]
    assert gate["accuracy"]["verdict"] == f"pass ({caveat})" and gate["accuracy"]["caveat"] == caveat
    summary = _summary([step], {"recipes": ["w8a8-int8"]})
    summary.gates = {"candidates": [gate], "champion": None}
    text = format_summary(summary, str(tmp_path))
    assert f"accuracy pass ({caveat}), SLO pass" in text and "candidate-gates [w8a8-int8]" in text

    decision = select_champion([str(tmp_path / "w8a8-int8-gates")], "", str(tmp_path / "d"), str(tmp_path / "c.md"),
                               str(tmp_path / "c.html"))
    assert decision["winner"] == "w8a8-int8"
    ranking = [line for line in (tmp_path / "c.md").read_text().splitlines() if line.startswith("| 1 | w8a8-int8 |")]
    assert ranking and f"| pass ({caveat}) |" in ranking[0]


def test_a_pass_through_the_stderr_rule_carries_its_caveat_in_every_verdict(tmp_path: Path) -> None:
    """Under rule recovery the accuracy gate passes the fixtures only through the stderr rule
    (recovery 0.926 < 0.99): every verdict says "pass (1 metric below 0.99 within noise; worst 0.93)"."""
    from report_fixtures import judged

    _every_surface_says(tmp_path, judged(tmp_path), CAVEAT)


def _fixture_samples(tmp_path: Path) -> None:
    """32 questions per task for the report fixtures' 0/1 metrics: the candidate loses one
    arithmetic question; the rest answer alike."""
    def write(folder: Path, task: str, rows: list[dict]) -> None:
        (folder / "samples").mkdir(parents=True, exist_ok=True)
        (folder / "samples" / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    for folder, lost in ((tmp_path / "base-eval", 0), (tmp_path / "w8a8-int8-eval", 1)):
        write(folder, "shipyard_arithmetic_mc", [{"doc_id": i, "filter": "none", "acc": float(lost <= i < 15),
                                                  "acc_norm": float(i < 16), "prompt_hash": f"a{i}"} for i in range(32)])
        write(folder, "shipyard_capitals_mc", [{"doc_id": i, "filter": "none", "acc": float(i < 26),
                                                "prompt_hash": f"c{i}"} for i in range(32)])


def test_an_inconclusive_pass_carries_its_caveat_in_every_verdict(tmp_path: Path) -> None:
    """The default rule on 32 questions per task cannot show a loss under 0.02: every metric is
    inconclusive and the gate fails closed; with allow_inconclusive it passes, and every verdict
    says so ("pass (3 metrics inconclusive at margin 0.02, allowed; loss bound up to ...)");
    candidate.json carries the rule, alpha, correction, power statement and per-row decisions."""
    from report_fixtures import judged

    _fixture_samples(tmp_path)
    closed = judged(tmp_path, thresholds="")
    assert closed["passed"] is False and "inconclusive: 32 questions cannot show a loss under 0.02" in closed["reason"]
    out = judged(tmp_path, thresholds=json.dumps({"allow_inconclusive": True}))
    record = out["candidate"]["accuracy"]
    assert (record["rule"], record["alpha"], record["multiple_comparisons"], record["comparisons"]) == (
        "non-inferiority", 0.05, "holm", 3)
    assert record["power"].startswith("with n=32 per task the smallest loss this gate can rule out at alpha 0.05 "
                                      "(Holm over 3 metrics), power 0.8, is ")
    rows = {(r["task"], r["metric"]): r for r in record["rows"]}
    arith = rows[("shipyard_arithmetic_mc", "acc,none")]
    assert arith["decision"] == "inconclusive" and arith["margin"] == 0.02 and arith["mdl"] > 0.02
    assert arith["p_value"] <= arith["p_adjusted"] and arith["rule"] == "non-inferiority"
    assert rows[("shipyard_prose_ppl", "word_perplexity,none")]["decision"] == "recovered"
    bound = max(r["paired"]["loss_high"] for r in record["rows"] if r["paired"])
    _every_surface_says(tmp_path, out, f"3 metrics inconclusive at margin 0.02, allowed; loss bound up to {bound:.2g}")


def test_a_recovery_bar_below_the_threshold_is_not_drawn_as_a_plain_pass(tmp_path: Path) -> None:
    """The candidates report's recovery bar under min recovery is orange (passed within noise) or
    red (failed), never the green of a plain pass."""
    import io

    import matplotlib.image as mpimg
    import numpy as np
    from report_fixtures import judged

    from shipyard.gates.selection import plot_pngs

    record = judged(tmp_path)["candidate"]
    alt, png = plot_pngs([record])[-1]
    assert "worst accuracy recovery" in alt
    pixels = mpimg.imread(io.BytesIO(png))[..., :3]

    def has(rgb: tuple[float, float, float]) -> bool:
        return bool((np.abs(pixels - np.array(rgb)).sum(axis=-1) < 0.03).any())

    orange, green = (1.0, 0.498, 0.055), (0.173, 0.627, 0.173)
    assert has(orange)  # the candidate's 0.93 bar
    assert has(green)   # the base's 1.0 bar


def test_candidates_report_plots_keep_every_label_inside_the_picture(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The level label (``c=2``) next to the last point of the TTFT plot was cut at the plot's
    right edge; every label of every candidates plot now lies inside its axes when the figure is
    saved (measured by matplotlib's renderer)."""
    from matplotlib.figure import Figure
    from report_fixtures import judged

    from shipyard.gates.selection import plot_pngs

    outside: list[str] = []
    save = Figure.savefig

    def checked_save(fig: Figure, *args: object, **kwargs: object) -> None:
        renderer = fig.canvas.get_renderer()
        fig.draw(renderer)
        for ax in fig.axes:
            for text in ax.texts:
                box = text.get_window_extent(renderer)
                if box.x0 < ax.bbox.x0 or box.x1 > ax.bbox.x1 or box.y0 < ax.bbox.y0 or box.y1 > ax.bbox.y1:
                    outside.append(text.get_text())
        save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", checked_save)
    assert len(plot_pngs([judged(tmp_path)["candidate"]])) >= 3
    assert outside == [], f"labels cut at the plot's edge: {outside}"


def test_console_names_are_never_cut_mid_word_and_loop_tasks_carry_their_candidate() -> None:
    from shipyard.run.console import fit, key_figure, task_label

    name = "deploy LLMInferenceService and move the production alias"
    assert fit(name, 30) == "deploy LLMInferenceService…" and fit(name, 60) == name
    for width in (12, 20, 30, 40):
        shown = fit(name, width)
        assert len(shown) <= width and shown.endswith("…")
        assert all(word in name.split() for word in shown.rstrip("…").split())  # whole words only
    assert task_label("for-loop-5-iteration-1/candidate-gates", ["w8a8-int8", "w4a16"]) == "candidate-gates [w4a16]"
    assert task_label("for-loop-5-iteration-0/compress", []) == "compress [candidate 1]"
    assert task_label("condition-1/importer") == "champion model (import)"
    assert task_label("benchmark-2") == "benchmark-2"
    assert key_figure("some-step", {"Output": True}, {}, {}) == "yes"  # never KFP's "Output=True"


def test_the_deploy_task_name_is_true_on_a_dry_run_and_never_cut() -> None:
    """The deploy task runs on a dry run too, where it never moves ``production``: its name (KFP UI,
    console, README graph) says so, in every pipeline with a deploy, and fits the console's
    narrowest name column (the summary's 30 characters) whole."""
    from google.protobuf import json_format

    from shipyard.pipelines import PIPELINES, get_pipeline
    from shipyard.pipelines.stages import DEPLOY_TASK
    from shipyard.run.console import fit

    def deploy_names(dag: dict, components: dict) -> list[str]:
        found = []
        for task in (dag.get("tasks") or {}).values():
            ref = task["componentRef"]["name"]
            if ref == "comp-deploy":
                found.append(task["taskInfo"]["name"])
            found += deploy_names((components.get(ref) or {}).get("dag") or {}, components)
        return found

    names = []
    for pipeline in PIPELINES:
        spec = json_format.MessageToDict(get_pipeline(pipeline).pipeline_spec)
        names += deploy_names(spec["root"]["dag"], spec.get("components") or {})
    assert len(names) >= 2 and set(names) == {DEPLOY_TASK}, names  # optimize-and-deploy and promote
    assert "dry run" in DEPLOY_TASK and "alias production" not in DEPLOY_TASK
    assert fit(DEPLOY_TASK, 30) == DEPLOY_TASK


def test_every_subcommand_has_a_description() -> None:
    from shipyard.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    assert not [name for name, parser in sub.choices.items() if not parser.description]


def test_run_without_local_explains_the_two_ways_to_run(capsys: pytest.CaptureFixture) -> None:
    from shipyard.cli.main import main

    assert main(["run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "shipyard run --local" in err and "--runner container" in err
    assert "shipyard submit compiled/optimize-and-deploy.yaml --host URL" in err


def test_plan_takes_a_hub_id_from_the_local_cache(tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture) -> None:
    """A Hub id (``org/name`` or ``hf://org/name``) is read from the local Hugging Face cache; the
    layout is the one huggingface_hub itself reads (checked with the library in the compress venv)."""
    import os
    import subprocess

    from shipyard.cli.main import main

    cache = tmp_path / "hub"
    snapshot = cache / "models--tiny-org--tiny-llama" / "snapshots" / ("c0ffee" * 6 + "beef")
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text((tiny_model / "config.json").read_text())
    (cache / "models--tiny-org--tiny-llama" / "refs").mkdir()
    (cache / "models--tiny-org--tiny-llama" / "refs" / "main").write_text("c0ffee" * 6 + "beef")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub_python = Path(__file__).resolve().parents[1] / ".venvs" / "compress" / "bin" / "python"
    if hub_python.exists():
        found = subprocess.run([str(hub_python), "-c", "from huggingface_hub import try_to_load_from_cache as t; "
                                "print(t('tiny-org/tiny-llama', 'config.json'))"], capture_output=True, text=True,
                               env=dict(os.environ), timeout=60, check=False)
        assert found.stdout.strip() == str(snapshot / "config.json"), found.stderr[-2000:]
    for model in ("tiny-org/tiny-llama", "hf://tiny-org/tiny-llama"):
        assert main(["plan", model, "-o", "json"]) in (0, 1)
        assert json.loads(capsys.readouterr().out)["weights_bytes"] > 0
    assert main(["plan", "hf://tiny-org/not-cached"]) == 2
    err = capsys.readouterr().err
    assert "tiny-org/not-cached is not in the local Hugging Face cache" in err and "offline (HF_HUB_OFFLINE=1)" in err
    assert "hf:/" not in err.replace("hf://", "")


def test_headline_changes_come_from_levels_with_enough_requests(tmp_path: Path) -> None:
    """A x0.17 TTFT "gain" at a level of 12 requests is not the headline when a level of 150
    requests exists; with only small levels, the headline says how many requests it rests on."""
    import copy

    import report_fixtures as fx

    from shipyard.gates.slo import run_slo_gate

    def bench(ttft_small: float, ok_small: int, ok_big: int) -> dict:
        return fx.bench_results("m", [
            fx.level("concurrent@1", 1, 0.5, 10.0, (50.0, 55.0, ttft_small), (60.0, 62.0, 64.0), ok=ok_small),
            fx.level("concurrent@2", 2, 1.0, 16.0, (80.0, 95.0, 100.0), (95.0, 99.0, 104.0), ok=ok_big)])

    base, cand = bench(600.0, 12, 150), bench(100.0, 12, 150)  # the small level's p99: one cold base request
    cand["levels"][1]["output_tokens_per_s"] = 17.6  # a real x1.1 gain at the big level
    slo = json.dumps({"ttft_p99_ms": 1000, "itl_p99_ms": 200, "min_output_tokens_per_s": 5, "max_error_rate": 0.0})
    b = fx.write_json(tmp_path / "b", "results.json", base)
    c = fx.write_json(tmp_path / "c", "results.json", cand)
    out = run_slo_gate(b, c, slo, str(tmp_path / "slo.html"), str(tmp_path / "slo.md"))
    assert "best gain: output tok/s x1.1 [1.09, 1.11] at concurrency 2" in out["reason"] and "x0.167" not in out["reason"]

    small_b, small_c = copy.deepcopy(base), copy.deepcopy(cand)
    for res in (small_b, small_c):
        res["levels"] = res["levels"][:1]
    b = fx.write_json(tmp_path / "b2", "results.json", small_b)
    c = fx.write_json(tmp_path / "c2", "results.json", small_c)
    out = run_slo_gate(b, c, slo, str(tmp_path / "slo2.html"), str(tmp_path / "slo2.md"))
    # a p99 of 12 requests: the ratio, no interval (too few requests for one), and what it rests on
    assert "best gain: TTFT p99 x0.167 at concurrency 1 (100 vs 600 ms base; rests on 12 requests)" in out["reason"]


def test_a_request_without_timing_samples_is_counted_not_a_miss(tmp_path: Path) -> None:
    """11 of 12 successful requests have timing samples, all within the SLO: goodput is 1.0 (not
    0.9167) and the report counts the untimed request."""
    import report_fixtures as fx

    from shipyard.gates.slo import check_level

    lv = fx.level("concurrent@1", 1, 0.5, 10.0, (50.0, 55.0, 60.0), (60.0, 62.0, 64.0), ok=12)
    for key in ("ttft_ms", "itl_ms"):
        lv["samples"][key] = lv["samples"][key][:11]
    slo = {"ttft_p99_ms": 1000, "itl_p99_ms": 200, "min_output_tokens_per_s": 5, "max_error_rate": 0.0,
           "min_goodput": 0.95}
    verdict = check_level(lv, slo)
    assert verdict["goodput"] == 1.0 and verdict["untimed"] == 1 and verdict["meets"]
    errored = fx.level("concurrent@1", 1, 0.5, 10.0, (50.0, 55.0, 60.0), (60.0, 62.0, 64.0), ok=11, errored=1)
    assert check_level(errored, slo)["goodput"] == pytest.approx(11 / 12, abs=1e-4)  # an error is still a miss

    from shipyard.benchmarking.report import _level_rows

    (row,) = _level_rows({"levels": [lv]}, [verdict])
    assert "1 untimed, not judged" in row[-2]


def test_latency_plots_keep_the_data_readable_next_to_a_far_slo_line() -> None:
    """60-104 ms ITL figures under a 1,000 ms SLO line: a log axis spanning both (a linear one
    flattens the data at the bottom); a nearby line keeps the linear axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from shipyard.benchmarking.report import _maybe_log, latency_plot

    fig, ax = plt.subplots()
    assert _maybe_log(ax, [60.0, 64.5, 104.9], 1000.0) and ax.get_yscale() == "log"
    low, high = ax.get_ylim()
    assert low < 60.0 and high > 1000.0
    fig2, ax2 = plt.subplots()
    assert not _maybe_log(ax2, [60.0, 104.9], 200.0) and ax2.get_yscale() == "linear"
    plt.close(fig)
    plt.close(fig2)
    import report_fixtures as fx

    png = latency_plot("itl_ms", "ITL", 1000.0, fx.BASE_BENCH, fx.CAND_BENCH)
    assert png and png.startswith(b"\x89PNG")


def test_a_kept_dry_run_promotion_is_replayed_as_dry_run(tmp_path: Path) -> None:
    """A dry run's alias request kept while MLflow was down replays as ``dry-run``: the replay
    never moves ``production`` either."""
    from shipyard.tracking.pending import apply

    url = shared_server().url
    name = f"tiny-replay-{uuid.uuid4().hex[:6]}"
    parent = track.start_tracking(url, f"replay-{uuid.uuid4().hex[:6]}", "optimize-and-deploy", "", "", "")
    track.register_model(url, name, "oci://reg.local/tiny@sha256:" + "2" * 64, parent["parent_run_id"], "")
    line = apply({"kind": "promote", "tracking_uri": url, "resolved_uri": url, "experiment": "", "kfp_run_id": "",
                  "model_name": name, "version": "1", "recipe": "w8a8-int8", "headline": {}, "dry_run": True}, tmp_path)
    assert "is dry-run (production unchanged)" in line
    assert MlflowClient(url).get_registered_model(name).aliases == {"candidate": "1", "dry-run": "1"}
