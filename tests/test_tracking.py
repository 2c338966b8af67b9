"""MLflow tracking and registry against a real ``mlflow server`` on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import mlflow
import pytest
from mlflow import MlflowClient
from mlflow_server import MlflowServer, free_port, shared_server

from shipyard.core.errors import ShipyardError
from shipyard.tracking import model_registry as registry
from shipyard.tracking import pipeline_runs as track
from shipyard.tracking.steprun import StepRun
from shipyard.tracking.tracker import (
    EXPERIMENT_KIND_CLASSIC,
    TAG_EXPERIMENT_KIND,
    Tracker,
    resolve_tracking_uri,
)


@pytest.fixture(scope="module")
def server() -> MlflowServer:
    return shared_server()


@pytest.fixture(autouse=True)
def _no_kfp_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KFP_MLFLOW_CONFIG", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def _step_files(tmp_path: Path) -> dict[str, str]:
    eval_dir = tmp_path / "eval"
    eval_dir.mkdir()
    (eval_dir / "lm_eval_results.json").write_text(json.dumps({
        "results": {"arc_easy": {"acc,none": 0.61, "acc_stderr,none": 0.01, "alias": "arc_easy"},
                    "wikitext": {"word_perplexity,none": 31.5}},
        "higher_is_better": {"arc_easy": {"acc": True}, "wikitext": {"word_perplexity": False}},
    }))
    report = tmp_path / "report.md"
    report.write_text("# Eval\n| task | acc |\n")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("quant_stage:\n  scheme: W4A16\n")
    return {"eval": str(eval_dir), "report": str(report), "recipe": str(recipe)}


def test_run_tree_params_metrics_artifacts(server: MlflowServer, tmp_path: Path) -> None:
    kfp_run = f"kfp-{uuid.uuid4().hex[:8]}"
    started = track.start_tracking(
        server.url, "tree-test", "optimize-deploy", kfp_run,
        json.dumps({"model_uri": "hf://org/tiny", "recipe": "w4a16", "vllm_args": ["--max-model-len", "512"]}),
        json.dumps({"image.base": "sha256:abc"}),
    )
    parent = started["parent_run_id"]
    assert started["tracking_uri"] == server.url
    assert started["run_url"].startswith(f"{server.url}/#/experiments/")

    files = _step_files(tmp_path)
    eval_out = track.track_step(
        server.url, parent, "evaluate", str(tmp_path / "out-eval"),
        json.dumps({"eval_config": "smoke", "tasks": "arc_easy,wikitext"}), json.dumps({"oci.digest": "sha256:def"}),
        metrics={"eval_wall_time_s": 12.5}, files={"results": files["eval"], "report": files["report"]},
    )
    bench_out = track.track_step(
        server.url, parent, "benchmark", str(tmp_path / "out-bench"), json.dumps({"profile": "sweep"}), "",
        metrics={"ttft_p95_ms": 120.0, "itl_p50_ms": 8.0, "throughput_tok_s": 900.0, "nan_is_dropped": float("nan")},
        files={"recipe": files["recipe"]},
    )
    # A retried step reuses its nested run instead of making a second one.
    again = track.track_step(server.url, parent, "benchmark", str(tmp_path / "out-bench2"), "", "",
                             metrics={"throughput_tok_s": 900.0})
    assert again["run_id"] == bench_out["run_id"]
    assert track.finish_tracking(server.url, parent, "finished", json.dumps({"shipyard.gate": "passed"})) == "FINISHED"

    client = MlflowClient(server.url)
    prun = client.get_run(parent)
    assert prun.info.status == "FINISHED"
    assert prun.data.params["model_uri"] == "hf://org/tiny"
    assert json.loads(prun.data.params["vllm_args"]) == ["--max-model-len", "512"]
    assert prun.data.tags["shipyard.kfp_run_id"] == kfp_run
    assert prun.data.tags["image.base"] == "sha256:abc"
    assert prun.data.tags["shipyard.gate"] == "passed"
    children = client.search_runs([prun.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent}'")
    assert sorted(r.data.tags["shipyard.step"] for r in children) == ["benchmark", "evaluate"]
    ev = client.get_run(eval_out["run_id"])
    assert ev.info.status == "FINISHED"
    assert ev.data.metrics["arc_easy/acc"] == pytest.approx(0.61)
    assert ev.data.metrics["wikitext/word_perplexity"] == pytest.approx(31.5)
    assert ev.data.metrics["eval_wall_time_s"] == 12.5
    assert "arc_easy/acc_stderr" not in ev.data.metrics
    assert ev.data.params["tasks"] == "arc_easy,wikitext"
    assert ev.data.tags["oci.digest"] == "sha256:def"
    listed = {a.path for a in client.list_artifacts(eval_out["run_id"], "evaluate")}
    assert listed == {"evaluate/results", "evaluate/report.md"}
    inner = {a.path for a in client.list_artifacts(eval_out["run_id"], "evaluate/results")}
    assert inner == {"evaluate/results/lm_eval_results.json"}
    downloaded = client.download_artifacts(eval_out["run_id"], "evaluate/report.md", str(tmp_path / "dl"))
    assert Path(downloaded).read_text().startswith("# Eval")
    bn = client.get_run(bench_out["run_id"])
    assert bn.data.metrics["ttft_p95_ms"] == 120.0 and "nan_is_dropped" not in bn.data.metrics
    assert {a.path for a in client.list_artifacts(bench_out["run_id"], "benchmark")} == {"benchmark/recipe.yaml"}
    # The payload each step was about to log stays in its own output.
    payload = json.loads((tmp_path / "out-eval" / track.PAYLOAD).read_text())
    assert payload["metrics"]["arc_easy/acc"] == pytest.approx(0.61)

    # The same KFP run id (a retried start step) reuses the parent run.
    assert track.start_tracking(server.url, "tree-test", "optimize-deploy", kfp_run, "", "")["parent_run_id"] == parent


def test_nested_under_kfp_plugin_parent(server: MlflowServer, monkeypatch: pytest.MonkeyPatch) -> None:
    client = MlflowClient(server.url)
    exp_id = client.create_experiment(f"kfp-plugin-{uuid.uuid4().hex[:6]}")
    kfp_parent = client.create_run(exp_id, run_name="kfp-run").info.run_id
    monkeypatch.setenv("KFP_MLFLOW_CONFIG", json.dumps({
        "endpoint": server.url + "/", "experimentId": exp_id, "parentRunId": kfp_parent, "authType": "none",
    }))
    started = track.start_tracking("", "ignored-when-plugin-set", "optimize-deploy", "run-xyz", "{}", "")
    assert started["tracking_uri"] == server.url
    run = client.get_run(started["parent_run_id"])
    assert run.info.experiment_id == exp_id
    assert run.data.tags["mlflow.parentRunId"] == kfp_parent
    step = track.track_step("", started["parent_run_id"], "compress", "/tmp/unused-" + uuid.uuid4().hex, "", "",
                            metrics={"size_ratio": 0.3})
    assert client.get_run(step["run_id"]).data.tags["mlflow.parentRunId"] == started["parent_run_id"]


def test_bad_plugin_config_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFP_MLFLOW_CONFIG", "{not json")
    with pytest.raises(ShipyardError, match="KFP_MLFLOW_CONFIG"):
        resolve_tracking_uri("")


@pytest.mark.parametrize("uri", ["http://hunter2pw@mlflow.example:5000", "https://bob:it's@hunter2pw@mlflow.example",
                                 "http://bob:p%40hunter2pw@127.0.0.1:9/"])
def test_a_tracking_uri_that_carries_credentials_is_refused_from_the_environment_too(
        uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """MLFLOW_TRACKING_URI (in a cluster the Secret shipyard-mlflow's) with a user name, password or
    token is refused as tracking_uri is: one line naming the variable and MLflow's own credential
    variables, the value not shown; before, it went to the network and came back "Name or service
    not known" after 5 attempts."""
    monkeypatch.delenv("KFP_MLFLOW_CONFIG", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    with pytest.raises(ShipyardError) as err:
        resolve_tracking_uri("")
    line = str(err.value)
    assert line.startswith("MLFLOW_TRACKING_URI: http") and "carries credentials (not shown)" in line, line
    assert "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD" in line and "Secret shipyard-mlflow" in line
    assert "hunter2pw" not in line and "bob" not in line
    with pytest.raises(ShipyardError, match="^tracking_uri: http"):  # the parameter, named as itself
        resolve_tracking_uri(uri)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000/")
    assert resolve_tracking_uri("") == "http://mlflow.example:5000"


def test_local_file_store_without_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIPYARD_WORK_DIR", str(tmp_path))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)  # the registry of a file store must not open ./mlflow.db (MLflow's default)
    started = track.start_tracking("", "local", "optimize-deploy", "", json.dumps({"recipe": "w8a8"}), "")
    assert started["tracking_uri"] == (tmp_path / "mlruns").as_uri()
    files = _step_files(tmp_path)
    out = track.track_step("", started["parent_run_id"], "evaluate", str(tmp_path / "o"), "", "",
                           files={"results": files["eval"]})
    track.finish_tracking("", started["parent_run_id"])
    client = MlflowClient(started["tracking_uri"])
    assert client.get_run(out["run_id"]).data.metrics["arc_easy/acc"] == pytest.approx(0.61)
    assert client.get_run(started["parent_run_id"]).info.status == "FINISHED"
    assert (tmp_path / "mlruns").is_dir()
    reg = track.register_model("", "local-model", "oci://registry.local/m@sha256:" + "a" * 64,
                               started["parent_run_id"], "")
    assert reg["aliases"] == ["candidate"]
    assert list(cwd.iterdir()) == []


def test_registry_versions_aliases_and_rollback(server: MlflowServer) -> None:
    name = f"tiny-w4a16-{uuid.uuid4().hex[:6]}"
    parent = track.start_tracking(server.url, "registry", "optimize-deploy", "", "", "")["parent_run_id"]
    v1 = track.register_model(server.url, name, "oci://reg.local/tiny@sha256:" + "1" * 64, parent,
                              json.dumps({"oci.digest": "sha256:" + "1" * 64, "base_model": "hf://org/tiny"}))
    assert v1["version"] == "1" and v1["aliases"] == ["candidate"]
    # A retried register step reuses the version.
    assert track.register_model(server.url, name, "oci://reg.local/tiny@sha256:" + "1" * 64, parent, "")["version"] == "1"
    client = MlflowClient(server.url)
    mv = client.get_model_version(name, "1")
    assert mv.source.startswith("oci://") and mv.run_id == parent
    assert mv.tags["base_model"] == "hf://org/tiny" and mv.tags["shipyard.pipeline_run_id"] == parent
    assert client.get_run(parent).data.tags["shipyard.registered_version"] == "1"

    with pytest.raises(ShipyardError, match="^production: .* version 1 was not moved: production moves only after"):
        track.promote_alias(server.url, name, "1", None)
    unchecked = registry.checked_by_deploy({"checked": False, "overridden": True, "why": "overridden: test"})
    assert track.promote_alias(server.url, name, "1", unchecked) == {"candidate": "1", "production": "1"}
    parent2 = track.start_tracking(server.url, "registry", "optimize-deploy", "", "", "")["parent_run_id"]
    v2 = track.register_model(server.url, name, "s3://models/tiny/v2", parent2, "")
    assert v2["version"] == "2"
    assert track.promote_alias(server.url, name, "2", unchecked) == {"candidate": "2", "production": "2", "previous": "1"}
    v3 = track.register_model(server.url, name, "s3://models/tiny/v3", "", "")["version"]
    assert track.promote_alias(server.url, name, v3, unchecked) == {"candidate": "3", "production": "3", "previous": "2"}

    with pytest.raises(ShipyardError, match="version 2 was not moved"):
        track.rollback_alias(server.url, name, "deployment not Ready")
    assert track.rollback_alias(server.url, name, "deployment not Ready", unchecked) == {
        "candidate": "3", "production": "2", "previous": "1"}
    assert client.get_model_version(name, "3").tags["shipyard.rollback_reason"] == "deployment not Ready"
    assert track.rollback_alias(server.url, name, check=unchecked) == {"candidate": "3", "production": "1"}
    with pytest.raises(ShipyardError, match="no earlier production version"):
        track.rollback_alias(server.url, name, check=unchecked)
    assert client.get_model_version_by_alias(name, "production").version == "1"


def test_register_rejects_bad_input(server: MlflowServer) -> None:
    with pytest.raises(ShipyardError, match="source_uri"):
        track.register_model(server.url, "m", "/local/folder", "", "")
    with pytest.raises(ShipyardError, match="model_version"):
        track.promote_alias(server.url, f"nope-{uuid.uuid4().hex[:6]}", "7", None)
    with pytest.raises(ShipyardError, match="params_json"):
        track.start_tracking(server.url, "x", "p", "", "[1, 2", "")


def test_unreachable_server_retries_then_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIPYARD_MLFLOW_ATTEMPTS", "3")
    monkeypatch.setenv("SHIPYARD_MLFLOW_BACKOFF_S", "0.05")
    dead = f"http://127.0.0.1:{free_port()}"
    files = _step_files(tmp_path)
    before = Path(files["eval"], "lm_eval_results.json").read_bytes()
    with pytest.raises(ShipyardError) as err:
        track.track_step(dead, "0" * 32, "evaluate", str(tmp_path / "out"), '{"a": 1}', "",
                         metrics={"x": 1.0}, files={"results": files["eval"]})
    line = str(err.value)
    assert "\n" not in line
    assert f"cannot reach the tracking server {dead}" in line and "after 3 attempts" in line
    assert "Connection refused" in line and "remain in its KFP artifacts" in line
    # Nothing lost: the inputs are untouched and what was to be logged is in the step's output.
    assert Path(files["eval"], "lm_eval_results.json").read_bytes() == before
    payload = json.loads((tmp_path / "out" / track.PAYLOAD).read_text())
    assert payload["metrics"]["arc_easy/acc"] == pytest.approx(0.61) and payload["params"] == {"a": 1}


def test_server_down_mid_call_is_retried_too(monkeypatch: pytest.MonkeyPatch) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    tracker = Tracker(dead, attempts=2, backoff_s=0.01)
    with pytest.raises(ShipyardError, match="to read the registered model after 2 attempts"):
        registry.aliases(tracker, "m")


def test_experiments_are_classic_ml(server: MlflowServer) -> None:
    """MLflow 3 opens an experiment without a kind in the GenAI view; shipyard's are classic ML."""
    # The tag and value are the ones the installed MLflow UI reads (its JS bundle), not a guess.
    bundle = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    text = "".join(p.read_text(errors="ignore") for p in bundle.glob("main.*.js"))
    assert f'"{TAG_EXPERIMENT_KIND}"' in text and f'CUSTOM_MODEL_DEVELOPMENT="{EXPERIMENT_KIND_CLASSIC}"' in text
    client = MlflowClient(server.url)
    name = f"classic-{uuid.uuid4().hex[:6]}"
    track.start_tracking(server.url, name, "optimize-deploy", "", "", "")
    assert client.get_experiment_by_name(name).tags[TAG_EXPERIMENT_KIND] == EXPERIMENT_KIND_CLASSIC
    older = f"older-{uuid.uuid4().hex[:6]}"  # made before shipyard set the kind
    client.create_experiment(older)
    track.start_tracking(server.url, older, "optimize-deploy", "", "", "")
    assert client.get_experiment_by_name(older).tags[TAG_EXPERIMENT_KIND] == EXPERIMENT_KIND_CLASSIC


def test_local_steps_find_the_parent_without_a_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIPYARD_WORK_DIR", str(tmp_path))
    monkeypatch.setenv("SHIPYARD_TRACK_FILE_STORE_AT_END", "0")  # the step logs itself
    kfp_run = f"kfp-{uuid.uuid4().hex[:8]}"
    parent = track.start_tracking("", "cached", "optimize-deploy", kfp_run, "", "")["parent_run_id"]
    assert len(list((tmp_path / "tracking").glob("parent-*.json"))) == 1
    # The step names another experiment: a tag search would look there and fail; the cache answers.
    with StepRun("compress", "w8a8-int8", experiment="elsewhere", kfp_run_id=kfp_run) as run:
        run.log(params={"recipe": "w8a8-int8"}, metrics={"size_ratio": 0.6})
    assert run.error is None and run.run_id
    client = MlflowClient((tmp_path / "mlruns").as_uri())
    logged = client.get_run(run.run_id)
    assert logged.data.tags["mlflow.parentRunId"] == parent and logged.data.metrics["size_ratio"] == 0.6
    assert logged.data.tags["shipyard.kfp_run_id"] == kfp_run and logged.info.status == "FINISHED"
    for cache in (tmp_path / "tracking").rglob("*"):
        if cache.is_file():
            cache.unlink()
    with StepRun("evaluate", "w8a8-int8", experiment="elsewhere", kfp_run_id=kfp_run) as run:
        run.log(metrics={"acc": 0.5})
    assert run.run_id is None and "no MLflow pipeline run is tagged" in (run.error or "")


@pytest.mark.parametrize("store", ["file", "server"])
def test_a_run_without_a_champion_keeps_its_decision_on_the_parent_run(store: str, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing passed its gates: no register step runs, yet the pipeline's parent run shows why, the
    decision record, the selection and the candidates report under ``decision/``, logged by the
    select step as its wrapper does (``run.log(**out["log"])``), into a file store and through a
    server's REST API."""
    from shipyard.steps.select import select_champion

    monkeypatch.setenv("SHIPYARD_WORK_DIR", str(tmp_path))
    monkeypatch.setenv("SHIPYARD_TRACK_FILE_STORE_AT_END", "0")  # the step logs itself
    uri = "" if store == "file" else shared_server().url
    experiment, kfp_run = f"no-champion-{uuid.uuid4().hex[:6]}", f"kfp-{uuid.uuid4().hex[:8]}"
    parent = track.start_tracking(uri, experiment, "optimize-deploy", kfp_run, "", "")["parent_run_id"]
    level = {"name": "concurrent@1", "requests_per_s": 2.0, "output_tokens_per_s": 100.0, "ttft_p99_ms": 40.0,
             "itl_p99_ms": 9.0}
    gates = tmp_path / "w8a8-gates"
    gates.mkdir()
    (gates / "candidate.json").write_text(json.dumps({
        "schema": "shipyard.candidate/v1", "recipe": "w8a8", "model_uri": "/models/w8a8", "passed": False,
        "reason": "accuracy gate: acc,none below its margin", "size_bytes": 1000, "levels": [level],
        "base_levels": [level], "planner": {}, "base_planner": {},
        "accuracy": {"passed": False, "worst_recovery": 0.8, "rows": []}, "slo": {"passed": True, "metrics": {}}}))
    out = select_champion([str(gates)], "throughput", str(tmp_path / "sel"), str(tmp_path / "c.md"),
                          str(tmp_path / "c.html"))
    assert out["winner"] == "" and out["headline"].startswith("no candidate passed its gates"), out["headline"]
    with StepRun("select", "", tracking_uri=uri, experiment=experiment, kfp_run_id=kfp_run) as run:
        run.log(**out["log"])
    assert run.error is None and run.run_id
    client = MlflowClient(uri or (tmp_path / "mlruns").as_uri())
    kept = {a.path for a in client.list_artifacts(parent, "decision")}
    assert kept == {f"decision/{n}" for n in ("decision-record.json", "selection.json", "frontier.json",
                                              "candidates.md", "candidates.html")}, kept
    record = json.loads(Path(client.download_artifacts(parent, "decision/decision-record.json", str(tmp_path / "dl")))
                        .read_text())
    assert record["headline"] == out["headline"]
    assert {a.path for a in client.list_artifacts(run.run_id)} >= {"candidates.md", "selection.json"}


def test_a_step_with_the_server_down_pays_one_probe_and_no_import(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    code = (
        "import sys, time\n"
        "from shipyard.tracking.steprun import StepRun\n"
        f"run = StepRun('evaluate', 'w8a8-int8', tracking_uri={dead!r}, kfp_run_id='kfp-1')\n"
        "run.log(metrics={'acc': 0.5})\n"
        "t = time.perf_counter(); run.finish(); t = time.perf_counter() - t\n"
        "print(t, 'mlflow' in sys.modules, run.payload() is not None)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "SHIPYARD_WORK_DIR": str(tmp_path)})
    seconds, imported, kept = out.stdout.split()
    assert float(seconds) < 2 and imported == "False" and kept == "True"
    assert "tracking of evaluate deferred" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    payload = json.loads(next((tmp_path / "tracking-pending").glob("step-evaluate-*.json")).read_text())
    assert payload["metrics"] == {"acc": 0.5} and payload["resolved_uri"] == dead


def test_local_file_store_is_logged_by_the_runner_at_the_end(tmp_path: Path) -> None:
    """A local run's steps keep their file store payloads (no mlflow import in the step); the
    runner's end-of-run replay logs them with each step's own times and status."""
    from shipyard.tracking import pending
    kfp_run = f"kfp-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "SHIPYARD_WORK_DIR": str(tmp_path)}
    opened = subprocess.run([sys.executable, "-c", "import sys\nfrom shipyard.tracking.pipeline_runs import "
                             "start_tracking\nprint(start_tracking('', 'at-end', 'p', sys.argv[1], '', '')"
                             "['parent_run_id'])", kfp_run], capture_output=True, text=True, check=True, env=env)
    parent = opened.stdout.split()[-1]
    code = (
        "import sys, time\n"
        "from shipyard.tracking.steprun import StepRun\n"
        f"run = StepRun('compress', 'w8a8-int8', experiment='at-end', kfp_run_id={kfp_run!r})\n"
        "run.log(params={'recipe': 'w8a8-int8'}, metrics={'size_ratio': 0.6})\n"
        "t = time.perf_counter(); run.finish('FAILED'); t = time.perf_counter() - t\n"
        "print(t, 'mlflow' in sys.modules, run.run_id)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    seconds, imported, run_id = out.stdout.split()
    assert float(seconds) < 1 and imported == "False" and run_id == "None" and out.stderr == ""
    kept_file = next((tmp_path / "tracking-pending").glob("step-compress-*.json"))
    kept = json.loads(kept_file.read_text())
    # As a payload handed on through KFP artifact metadata comes back: every number a float.
    kept_file.write_text(json.dumps({**kept, "started_ms": float(kept["started_ms"]),
                                     "ended_ms": float(kept["ended_ms"])}))
    (tmp_path / "run-summary.json").write_text(json.dumps({"status": "FAILURE", "mlflow_run": parent}))
    note = pending.after_local_run(tmp_path)
    assert len(note["replayed"]) == 2 and note["pending"] == [] and not (tmp_path / "tracking-pending").exists()
    client = MlflowClient((tmp_path / "mlruns").as_uri())
    exp = client.get_experiment_by_name("at-end").experiment_id
    runs = client.search_runs([exp], "tags.`shipyard.step` = 'compress'")
    assert len(runs) == 1 and runs[0].data.tags["mlflow.parentRunId"] == parent
    assert runs[0].info.status == "FAILED" and runs[0].info.start_time == kept["started_ms"]
    assert runs[0].info.end_time == kept["ended_ms"] and runs[0].data.metrics["size_ratio"] == 0.6
    # the parent was left RUNNING (no exit handler here): closed with the run's final state
    assert client.get_run(parent).info.status == "FAILED"
    assert pending.after_local_run(tmp_path) == {}


def test_replayed_file_store_registration_writes_nothing_outside_the_work_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from shipyard.tracking import outbox
    work, cwd = tmp_path / "work", tmp_path / "cwd"
    work.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("SHIPYARD_WORK_DIR", str(work))
    kfp_run = f"kfp-{uuid.uuid4().hex[:8]}"
    parent = track.start_tracking("", "replay-reg", "p", kfp_run, "", "")["parent_run_id"]
    source = "oci://127.0.0.1:5000/m@sha256:" + "d" * 64
    outbox.keep({"kind": "register", "tracking_uri": "", "resolved_uri": (work / "mlruns").as_uri(),
                  "experiment": "replay-reg", "kfp_run_id": kfp_run, "model_name": "replayed", "source_uri": source,
                  "digest": "sha256:" + "d" * 64, "tags": {"recipe": "w8a8-int8"}, "description": "d",
                  "alias": "candidate", "aliases": [], "metrics": {"acc": 0.5}})
    env = {k: v for k, v in os.environ.items() if k not in ("SHIPYARD_WORK_DIR", "MLFLOW_TRACKING_URI")}
    out = subprocess.run([str(Path(sys.executable).with_name("shipyard")), "track", "replay", str(work)], cwd=cwd,
                         capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"registered replayed version 1 ({source}), aliases candidate=1"
    assert list(cwd.iterdir()) == [], "no mlflow.db in the current folder"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (work / "mlruns").as_uri())  # this reader's own file-store quirk
    mv = MlflowClient().get_model_version("replayed", "1")
    assert mv.run_id == parent and mv.tags["shipyard.metric.acc"] == "0.5"


def test_wrapper_lifecycle_keeps_unlogged_payloads_in_the_artifact() -> None:
    """The one wrapper shape: ``with StepRun(...) as run`` ends the run (FINISHED, or FAILED when
    the step fails), then ``run.keep_in(artifact)`` hands on what could not be logged yet."""
    from shipyard.tracking.steprun import PENDING_KEY

    class Artifact:
        def __init__(self) -> None:
            self.metadata: dict[str, object] = {}

    server = shared_server()
    experiment = f"keep-{uuid.uuid4().hex[:8]}"
    with StepRun("benchmark", "w4a16", tracking_uri=server.url, experiment=experiment, params={"x": 1}) as run:
        run.log(metrics={"output_tokens_per_s": 42.0})
    kept = Artifact()
    run.keep_in(kept)  # no KFP run id (a GPU step): no parent run to join yet, so the payload travels on
    assert kept.metadata[PENDING_KEY] == run.payload() and run.payload()["status"] == "FINISHED"
    with pytest.raises(SystemExit), StepRun("benchmark", "w4a16", tracking_uri=server.url,
                                            experiment=experiment) as failed:
        raise SystemExit(1)  # what call_step raises on a user error
    assert failed.payload()["status"] == "FAILED"
    kfp_run = f"kfp-{uuid.uuid4().hex[:8]}"
    track.start_tracking(server.url, experiment, "optimize-and-deploy", kfp_run, "", "")
    with StepRun("package", "w4a16", tracking_uri=server.url, experiment=experiment, kfp_run_id=kfp_run) as logged:
        logged.log(metrics={"size_bytes": 1.0})
    nothing = Artifact()
    logged.keep_in(nothing)
    assert logged.run_id and nothing.metadata == {}


def test_a_markdown_report_with_a_wide_table_is_also_logged_as_html(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow's Markdown preview cuts a wide table's right-hand columns off (issue 33: the safety and
    champion gates' reports, the benchmark summary, lm-eval's table): each such report is also
    logged as its HTML rendering, whose cells wrap; an HTML report the step logs itself is kept as
    given, and a narrow report gets no copy."""
    from shipyard.core.report import Check, GateReport

    monkeypatch.setenv("SHIPYARD_WORK_DIR", str(tmp_path))
    monkeypatch.setenv("SHIPYARD_TRACK_FILE_STORE_AT_END", "0")
    kfp_run = f"kfp-{uuid.uuid4().hex[:8]}"
    track.start_tracking("", "wide-reports", "p", kfp_run, "", "")
    gate = GateReport("Champion/challenger gate", False, "the challenger is slower", checks=[
        Check("output tok/s", 9.4, 15.9, ">= 0.95 x champion", -0.36, False, "ratio", "serves the benchmarked build: NO")])
    files = {"champion-gate.md": gate.to_markdown(), "accuracy.md": gate.to_markdown(),
             "accuracy.html": "<p>the gate's own page</p>", "note.md": "| setting | value |\n|---|---|\n| a | b |\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with StepRun("package-champion", experiment="wide-reports", kfp_run_id=kfp_run) as run:
        run.log(artifacts={name: str(tmp_path / name) for name in files})
    assert run.run_id
    client = MlflowClient((tmp_path / "mlruns").as_uri())
    logged = {f.path for f in client.list_artifacts(run.run_id)}
    assert logged == {"champion-gate.md", "champion-gate.html", "accuracy.md", "accuracy.html", "note.md"}
    page = Path(client.download_artifacts(run.run_id, "champion-gate.html", str(tmp_path / "dl")))
    text = page.read_text()
    assert "<table class='wide'>" in text and "data-label='note'>serves the benchmarked build: NO</td>" in text
    assert "overflow-wrap:anywhere" in text
    own = Path(client.download_artifacts(run.run_id, "accuracy.html", str(tmp_path / "dl2"))).read_text()
    assert own == "<p>the gate's own page</p>"
