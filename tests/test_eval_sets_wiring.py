"""The pipeline wiring of the user's eval sets (issue 36): the compiled graph runs them, the verdict
lands in candidate.json, the candidates report and the decision record, and an empty ``eval_sets``
changes nothing. The step logic itself is tested in tests/test_eval_sets.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from report_fixtures import BASE_BENCH, BASE_SCORES, CAND_BENCH, CAND_SCORES, SLO, eval_summary, write_json

from shipyard.evaluation.eval_set_tasks import task_name
from shipyard.steps.eval_sets import has_sets, prepare_step
from shipyard.steps.judge import judge_candidate
from shipyard.steps.select import select_champion

ROWS = 300  # enough rows for the paired test to tell a 0.10 loss from a 0.05 margin
SET = "support"
THRESHOLDS = json.dumps({"rule": "recovery", "min_recovery": 0.99, "stderr_k": 2})


@pytest.fixture(scope="module")
def ir(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    from shipyard.run.compile import compile_pipelines

    out = tmp_path_factory.mktemp("ir")
    return {path.stem: next(yaml.safe_load_all(path.read_text()))
            for path in compile_pipelines(out, ["optimize-and-deploy", "promote"])}


def _tasks(dag: dict[str, Any], components: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every task of a compiled pipeline by name, through loops and conditions."""
    found = {}
    for name, task in (dag.get("tasks") or {}).items():
        found[name] = task
        inner = components.get(task["componentRef"]["name"], {}).get("dag")
        if inner:
            found.update(_tasks(inner, components))
    return found


def _artifact_from(task: dict[str, Any], name: str) -> str:
    ref = task["inputs"]["artifacts"][name]
    return ref.get("componentInputArtifact") or ref["taskOutputArtifact"]["producerTask"]


def test_the_compiled_pipeline_prepares_evaluates_judges_and_gates_the_sets(ir: dict[str, dict[str, Any]]) -> None:
    spec = ir["optimize-and-deploy"]
    tasks = _tasks(spec["root"]["dag"], spec["components"])
    # pinned first (never cached), then prepared once per run, outside the loop over recipes, from
    # the pinned value: KFP's cache key of the prepare step follows each set's content
    pin = tasks["pin-eval-sets"]
    assert pin["inputs"]["parameters"]["eval_sets"] == {"componentInputParameter": "pipelinechannel--eval_sets"}
    assert pin["dependentTasks"] == ["preflight"] and not pin["cachingOptions"].get("enableCache")
    prepare = tasks["prepare-eval-sets"]
    assert prepare["inputs"]["parameters"]["eval_sets"] == {
        "taskOutputParameter": {"outputParameterKey": "Output", "producerTask": "pin-eval-sets"}}
    assert prepare["cachingOptions"]["enableCache"] is True and "pin-eval-sets" in prepare["dependentTasks"]
    assert {"pin-eval-sets", "prepare-eval-sets"} <= set(spec["components"]["comp-exit-handler-1"]["dag"]["tasks"])
    # every model's measure step (both eval backends, base and candidate) reads the prepared sets
    measuring = [n for n in tasks if n.startswith(("measure-vllm", "evaluate-hf"))]
    assert len(measuring) == 4
    assert all(_artifact_from(tasks[n], "eval_sets") == "pipelinechannel--prepare-eval-sets-prepared"
               for n in measuring)
    # the judge: one GPU and one CPU branch, decided by the prepare step's answer (the judge's URI)
    judges = sorted(n for n in tasks if n.startswith("judge-eval-sets"))
    assert judges == ["judge-eval-sets", "judge-eval-sets-2"]
    conditions = [t.get("triggerPolicy", {}).get("condition", "") for t in tasks.values()
                  if set(((spec["components"].get(t["componentRef"]["name"]) or {}).get("dag") or {}).get("tasks", {}))
                  & set(judges)]
    assert any("prepare-eval-sets-Output" in c and "!= ''" in c for c in conditions), conditions
    gates = tasks["candidate-gates"]
    assert {"eval_sets", "base_eval_sets", "candidate_eval_sets", "eval_sets_judged"} <= set(gates["inputs"]["artifacts"])
    assert _artifact_from(gates, "eval_sets") == "pipelinechannel--prepare-eval-sets-prepared"
    # promote has no eval_sets parameter: none of the steps
    promote = ir["promote"]
    assert not any("eval-sets" in n for n in _tasks(promote["root"]["dag"], promote["components"]))
    assert "eval_sets" not in promote["root"]["inputDefinitions"]["parameters"]


def _located(dag: dict[str, Any], components: dict[str, Any], chain: tuple[str, ...] = ()) -> dict[str, tuple[str, ...]]:
    """Every task of a compiled pipeline by name -> the tasks (loops, conditions, exit handler) it is nested in."""
    found = {}
    for name, task in (dag.get("tasks") or {}).items():
        found[name] = chain
        inner = components.get(task["componentRef"]["name"], {}).get("dag")
        if inner:
            found.update(_located(inner, components, (*chain, name)))
    return found


def _producers(spec: dict[str, Any], chain: tuple[str, ...], kind: str, ref: dict[str, Any]) -> set[str]:
    """The executing tasks an input ``ref`` (of a task nested in ``chain``) comes from, through the
    loops and conditions around it and the dsl.OneOf selectors of condition branches (``kind``:
    "artifacts" or "parameters")."""
    comps, root = spec["components"], spec["root"]["dag"]
    outer = "componentInputArtifact" if kind == "artifacts" else "componentInputParameter"
    if outer in ref:  # handed in by the enclosing task: look where it got it
        parent_dag = root
        for name in chain[:-1]:
            parent_dag = comps[parent_dag["tasks"][name]["componentRef"]["name"]]["dag"]
        parent = parent_dag["tasks"][chain[-1]]
        return _producers(spec, chain[:-1], kind, parent["inputs"][kind][ref[outer]])
    source = ref["taskOutputArtifact" if kind == "artifacts" else "taskOutputParameter"]
    dag = root
    for name in chain:
        dag = comps[dag["tasks"][name]["componentRef"]["name"]]["dag"]
    return _outputs(spec, dag["tasks"][source["producerTask"]], source["producerTask"], kind,
                    source["outputArtifactKey" if kind == "artifacts" else "outputParameterKey"])


def _outputs(spec: dict[str, Any], task: dict[str, Any], name: str, kind: str, key: str) -> set[str]:
    """The executing tasks behind output ``key`` of ``task`` (a step, or a group selecting its subtasks' outputs)."""
    comp = spec["components"][task["componentRef"]["name"]]
    if not comp.get("dag"):
        return {name}
    out = comp["dag"]["outputs"][kind][key]
    selectors = out.get("artifactSelectors") or (out.get("valueFromOneof") or {}).get("parameterSelectors") \
        or [out["valueFromParameter"]]
    key_name = "outputArtifactKey" if kind == "artifacts" else "outputParameterKey"
    return set().union(*(_outputs(spec, comp["dag"]["tasks"][s["producerSubtask"]], s["producerSubtask"], kind,
                                  s[key_name]) for s in selectors))


def test_the_judge_model_is_resolved_once_before_the_loop_and_handed_to_each_judge(
        ir: dict[str, dict[str, Any]]) -> None:
    """The judge model is pinned (never cached) and fetched (cached by the pinned URI and content
    fingerprint) by the base model's own steps, once per run, outside the loop over recipes and only
    on the rubric branch; every judge task (GPU and CPU branch) gets that one artifact and the
    pinned fingerprint (in its cache key); without a rubric set one CPU step hands an empty folder on."""
    spec = ir["optimize-and-deploy"]
    comps = spec["components"]
    tasks, where = _tasks(spec["root"]["dag"], comps), _located(spec["root"]["dag"], comps)
    pins = sorted(n for n in tasks if re.sub(r"-\d+$", "", n) == "pin-model")
    fetches = sorted(n for n in tasks if re.sub(r"-\d+$", "", n) == "resolve-model")
    assert pins == ["pin-model", "pin-model-2"] and fetches == ["resolve-model", "resolve-model-2"]  # base, judge
    pin, fetch = tasks["pin-model-2"], tasks["resolve-model-2"]
    assert pin["inputs"]["parameters"]["model_uri"] == {
        "componentInputParameter": "pipelinechannel--prepare-eval-sets-Output"}  # prepare's answer: the judge URI
    assert pin["inputs"]["parameters"]["field"]["runtimeValue"]["constant"] == "eval_sets.judge.model_uri"
    assert not (pin.get("cachingOptions") or {}).get("enableCache") and fetch["cachingOptions"]["enableCache"]
    assert {k: v["taskOutputParameter"] for k, v in fetch["inputs"]["parameters"].items()
            if "taskOutputParameter" in v} == {"model_uri": {"outputParameterKey": "uri", "producerTask": "pin-model-2"},
                                               "fingerprint": {"outputParameterKey": "fingerprint",
                                                               "producerTask": "pin-model-2"}}
    assert fetch["inputs"]["parameters"]["check_disk"]["runtimeValue"]["constant"] is False  # never packaged
    # outside the loop, under the rubric condition; its Else is the no-op CPU step
    assert where["pin-model-2"] == where["resolve-model-2"] and where["pin-model-2"][0] == "exit-handler-1"
    assert not any(n.startswith("for-loop") for n in where["resolve-model-2"])
    condition = tasks[where["resolve-model-2"][-1]]["triggerPolicy"]["condition"]
    assert "prepare-eval-sets-Output" in condition and "!= ''" in condition
    assert where["no-judge-model"][:-1] == where["resolve-model-2"][:-1] and "no-judge-model" in tasks
    judges = sorted(n for n in tasks if n.startswith("judge-eval-sets"))
    assert judges == ["judge-eval-sets", "judge-eval-sets-2"]
    for name in judges:
        assert any(n.startswith("for-loop") for n in where[name])  # per candidate
        judge = tasks[name]
        assert _producers(spec, where[name], "artifacts", judge["inputs"]["artifacts"]["judge_model"]) == \
            {"resolve-model-2", "no-judge-model"}
        assert _producers(spec, where[name], "parameters", judge["inputs"]["parameters"]["judge_fingerprint"]) == \
            {"pin-model-2", "no-judge-model"}
    # the base model still comes from the first pin/resolve pair
    assert _producers(spec, where["compress"], "artifacts", tasks["compress"]["inputs"]["artifacts"]["base_model"]) \
        == {"resolve-model"}


def _qa_set(folder: Path) -> str:
    """The eval_sets value of one qa set of ROWS rows, written in ``folder``."""
    path = folder / f"{SET}.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"Which desk handles ticket {i}?",
                                        "reference": f"desk {i}"}) + "\n" for i in range(ROWS)))
    return json.dumps([{"name": SET, "form": "qa", "uri": str(path), "margin": 0.05}])


def _set_results(folder: Path, correct: list[int], sha: str) -> str:
    """A measure step's eval-set results: summary.json and the per-sample log of the set's task."""
    task = task_name(SET)
    summary = {**eval_summary({task: {"exact_match,match": {"value": sum(correct) / len(correct), "stderr": 0.01,
                                                             "higher_is_better": True}}}, sha),
               "config_hash": "5e75" * 16}
    write_json(folder, "summary.json", summary)
    (folder / "samples").mkdir()
    (folder / "samples" / f"{task}.jsonl").write_text("".join(
        json.dumps({"doc_id": i, "filter": "match", "exact_match": float(v)}) + "\n" for i, v in enumerate(correct)))
    return str(folder)


def _gate(tmp: Path, recipe: str, **eval_sets: str) -> dict[str, Any]:
    """The real candidate gates on the report fixtures (which pass accuracy, SLO and safety) plus ``eval_sets``."""
    return judge_candidate(
        recipe=recipe, base_eval=write_json(tmp / "base-eval", "summary.json", eval_summary(BASE_SCORES, "ab")),
        candidate_eval=write_json(tmp / f"{recipe}-eval", "summary.json", eval_summary(CAND_SCORES, "cd")),
        base_bench=write_json(tmp / "base-bench", "results.json", BASE_BENCH),
        candidate_bench=write_json(tmp / f"{recipe}-bench", "results.json", CAND_BENCH),
        thresholds=THRESHOLDS, slo=SLO, out_dir=str(tmp / f"{recipe}-gates"), model_uri=f"/models/{recipe}",
        compress_figures={"size_before_bytes": 269_060_552, "size_after_bytes": 163_226_688}, **eval_sets)


def test_a_candidate_that_fails_an_eval_set_is_not_eligible_with_the_reason(tmp_path: Path) -> None:
    """prepare_step (real lm-eval loader), then the candidate gates with per-sample logs: the candidate
    wrong on a planted tenth of the set fails the set's gate, so its candidate.json fails and the
    selection does not rank it; the one answering like the base passes. The report and the decision
    record carry the set's row; the metrics are what the step logs into MLflow."""
    from shipyard.steps.eval_sets import pin_step
    from shipyard.steps.judge import gate_outputs

    prepared = str(tmp_path / "prepared")
    pinned = pin_step(_qa_set(tmp_path))  # as the pipeline's steps: pinned, then prepared from the pinned value
    out = prepare_step(pinned["eval_sets"], prepared, validate_runtime="vllm")
    digest = pinned["sets"][0]["sha256"]
    assert out["sets"][0]["sha256"] == digest and out["sets"][0]["pinned"] is True
    assert out["judge_model_uri"] == "" and [s["name"] for s in out["sets"]] == [SET] and has_sets(prepared)
    base = _set_results(tmp_path / "base-sets", [1] * ROWS, "ab")
    planted = _set_results(tmp_path / "planted-sets", [0 if i % 10 == 0 else 1 for i in range(ROWS)], "cd")
    same = _set_results(tmp_path / "same-sets", [1] * ROWS, "ef")
    bad = _gate(tmp_path, "w4a16", eval_sets=prepared, base_eval_sets=base, candidate_eval_sets=planted)
    good = _gate(tmp_path, "w8a8-int8", eval_sets=prepared, base_eval_sets=base, candidate_eval_sets=same)

    record = json.loads((tmp_path / "w4a16-gates" / "candidate.json").read_text())
    assert not record["passed"] and not bad["passed"]
    assert record["accuracy"]["passed"] and record["slo"]["passed"]  # only the eval set failed it
    assert record["eval_sets"]["verdict"] == "FAIL"
    assert record["reason"].startswith(f"eval sets gate {SET}: loss 0.1 [")
    row = record["eval_sets"]["rows"][0]
    assert row["task"] == SET and row["decision"] == "inferior" and row["paired"]["n"] == ROWS
    assert [(s["sha256"], s["pinned"]) for s in record["eval_sets"]["sets"]] == [(digest, True)]
    assert "judge_model" not in record["eval_sets"]  # no rubric set: no judge, nothing said of one
    logged = gate_outputs(bad, "w4a16", str(tmp_path / "w4a16-gates"))["log"]["params"]  # the gates' MLflow params
    assert logged == {f"eval_sets.{SET}": f"qa {ROWS} rows {pinned['sets'][0]['uri']} sha256:{digest}"}
    assert bad["metrics"]["eval_sets_passed"] == 0.0 and bad["metrics"][f"eval_sets/{SET}/loss"] == pytest.approx(0.1)
    assert (tmp_path / "w4a16-gates" / "eval_sets.md").read_text().startswith("# Your eval sets: FAIL")
    assert good["passed"] and good["candidate"]["eval_sets"]["verdict"] == "pass"
    assert "eval sets gate all 1 gated eval set(s) non-inferior" in good["reason"]

    result = select_champion([str(tmp_path / "w4a16-gates"), str(tmp_path / "w8a8-int8-gates")], "size",
                             str(tmp_path / "decision"), str(tmp_path / "r.md"), str(tmp_path / "r.html"))
    assert result["winner"] != "w4a16"
    decision = json.loads((tmp_path / "decision" / "decision-record.json").read_text())
    by = {g["candidate"]: g for g in decision["candidates"]}
    assert by["w4a16"]["eval_sets"]["verdict"] == "FAIL" and by["w4a16"]["eval_sets"]["rows"][0]["task"] == SET
    assert by["w8a8-int8"]["eval_sets"]["passed"] is True
    assert by["w4a16"]["eval_sets"]["sets"][0]["sha256"] == digest  # which content was evaluated
    assert "judge_model" not in by["w4a16"]["eval_sets"]  # no rubric set: the record as before
    report = (tmp_path / "r.md").read_text()
    assert "## Your eval sets" in report and f"| w4a16 | {SET} | exact_match,match | 1 | 0.9 | loss 0.1 [" in report
    assert "Your eval sets" in (tmp_path / "r.html").read_text()


def test_an_empty_eval_sets_adds_nothing(tmp_path: Path) -> None:
    """``eval_sets`` empty: the prepare step writes an empty folder without starting a runtime, and the
    candidate gates write the same candidate.json, metrics and files as without the inputs."""
    prepared = str(tmp_path / "prepared")
    out = prepare_step("", prepared)
    assert out["sets"] == [] and out["judge_model_uri"] == "" and not has_sets(prepared)
    assert sorted(p.name for p in Path(prepared).iterdir()) == ["prepared.json"]
    empty = tmp_path / "empty-results"
    empty.mkdir()
    with_inputs = _gate(tmp_path / "a", "w8a8-int8", eval_sets=prepared, base_eval_sets=str(empty),
                        candidate_eval_sets=str(empty), eval_sets_judged=str(empty / "judged.json"))
    without = _gate(tmp_path / "b", "w8a8-int8")
    assert with_inputs["metrics"] == without["metrics"] and with_inputs["reason"] == without["reason"]
    assert "eval_sets" not in with_inputs["candidate"]
    a = json.loads((tmp_path / "a" / "w8a8-int8-gates" / "candidate.json").read_text())
    b = json.loads((tmp_path / "b" / "w8a8-int8-gates" / "candidate.json").read_text())
    assert a == b
    assert sorted(p.name for p in (tmp_path / "a" / "w8a8-int8-gates").iterdir()) == \
        sorted(p.name for p in (tmp_path / "b" / "w8a8-int8-gates").iterdir())


def test_the_readme_local_run_of_the_shipped_sets_is_valid() -> None:
    """The README's ``shipyard run --local --param 'eval_sets=...'`` names the shipped set of each form,
    each readable and valid, with the judge of the rubric and rag sets and its cap on the rows judged."""
    import re

    from shipyard.evaluation.eval_sets import check_eval_sets

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Your own eval sets", 1)[1].split("\n## ", 1)[0]
    command = re.search(r"shipyard run --local --param 'eval_sets=(.*?)'", section, re.S)
    assert command is not None
    config, sets = check_eval_sets(command.group(1))
    assert sorted(s.form for s in sets) == ["chat", "mcq", "qa", "rag", "rubric"] and all(len(s.rows) >= 20 for s in sets)
    assert config.judge is not None and config.judge.labels_uri and config.judge.max_rows == 10


def test_steps_that_read_eval_sets_get_their_secrets() -> None:
    """An s3:// set, an hf:// judge and s3:// calibration data make the prepare and judge steps need the
    Secrets; the shipped cluster config gives them (no contract gap), and pre-flight names a missing one."""
    from shipyard.core.errors import ShipyardError
    from shipyard.params.input_secrets import check_input_secrets, contract_gaps, needed_secrets
    from shipyard.pipelines.platform import load_cluster_config

    params = {"eval_sets": json.dumps({"sets": [{"name": "s", "form": "rubric", "uri": "s3://evals/s.jsonl"}],
                                       "judge": {"model_uri": "hf://org/judge@" + "a" * 40}}),
              "calibration_dataset": "s3://data/calib.jsonl"}
    needed = needed_secrets(params)
    assert needed["prepare-eval-sets"] == {"shipyard-s3": ["calibration_dataset", "eval_sets"]}
    assert needed["pin-eval-sets"]["shipyard-s3"] == ["eval_sets"]  # the pin step reads the s3:// set first
    # the judge model is pinned and fetched once by the base model's steps; the judge step reads no URI
    judge = "eval_sets.judge.model_uri"
    assert needed["pin-model"] == needed["resolve-model"] == {"hf-token": [judge]} and "judge-eval-sets" not in needed
    assert needed_secrets({**params, "eval_sets": params["eval_sets"].replace("hf://org/judge@" + "a" * 40,
                                                                              "s3://models/judge")})[
        "resolve-model"] == {"shipyard-s3": [judge]}
    assert not [gap for gap in contract_gaps(load_cluster_config()) if "eval-sets" in gap[1] or judge in gap[2]]
    with pytest.raises(ShipyardError, match="step pin-eval-sets reads"):
        check_input_secrets(params, {"compress": ["shipyard-s3"], "prepare-eval-sets": ["shipyard-s3"],
                                     "judge-eval-sets": ["shipyard-s3"]})
    with pytest.raises(ShipyardError, match="step prepare-eval-sets reads"):
        check_input_secrets(params, {"compress": ["shipyard-s3"], "pin-eval-sets": ["shipyard-s3"],
                                     "judge-eval-sets": ["shipyard-s3"]})


def test_the_judge_step_runs_only_for_rubric_sets(tmp_path: Path) -> None:
    """prepare_step returns the judge model's URI only when a rubric set needs it (the pipeline's condition
    for the GPU branch); without a rubric set judge_step writes nothing and starts no server."""
    from shipyard.steps.eval_sets import judge_step

    rubric = json.dumps({"sets": [{"name": "homework", "form": "rubric", "uri": "builtin://homework_rubric.jsonl"}],
                         "judge": {"model_uri": "embedded://smollm2-135m-instruct",
                                   "labels_uri": "builtin://homework_judge_labels.jsonl"}})
    out = prepare_step(rubric, str(tmp_path / "rubric"))
    assert out["judge_model_uri"] == "embedded://smollm2-135m-instruct" and out["manifest"] is None
    assert (tmp_path / "rubric" / "rubric" / "homework.jsonl").is_file() and (tmp_path / "rubric" / "labels.jsonl").is_file()
    qa = prepare_step(_qa_set(tmp_path), str(tmp_path / "qa"), validate_runtime="vllm")
    assert qa["judge_model_uri"] == ""
    assert judge_step(str(tmp_path / "qa"), str(tmp_path / "none"), str(tmp_path / "none"), str(tmp_path / "judged")) == {}
    assert list((tmp_path / "judged").iterdir()) == []


class _Server:
    """vLLM's place in the judge step: records the folder it is asked to serve."""

    served: list[Path] = []

    def __init__(self, model_dir: Path, served_model_name: str) -> None:
        self.served.append(Path(model_dir))
        self.base_url, self.served_model_name = "http://127.0.0.1:9", served_model_name

    def __enter__(self) -> _Server:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def test_the_judge_step_serves_the_handed_model_and_fetches_nothing(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Given the judge model resolve-model fetched for the run, the judge step serves that folder:
    the judge's URI (a folder that does not exist: fetching it fails) is never fetched nor pinned again. Its pinned URI and fingerprint go into judged.json, candidate.json's eval_sets,
    the report and the gates' MLflow params. A missing folder or another model's is one line."""
    import shipyard.evaluation.judge as judge_mod
    import shipyard.models.resolve as resolve_mod
    import shipyard.serving.vllm_server as vllm_mod
    import shipyard.steps.pin as pin_mod
    from shipyard.core.errors import ShipyardError
    from shipyard.steps.eval_sets import JUDGED, judge_step
    from shipyard.steps.judge import gate_outputs

    uri, digest = str(tmp_path / "no-such-judge"), "sha256:" + "0" * 64
    with pytest.raises(ShipyardError, match="eval_sets.judge.model_uri"):  # what fetching it would do
        resolve_mod.resolve_model(uri, str(tmp_path / "fetched"), field="eval_sets.judge.model_uri")

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the judge step fetched or pinned the judge model")

    monkeypatch.setattr(resolve_mod, "resolve_model", never)
    monkeypatch.setattr(pin_mod, "pin_model", never)
    monkeypatch.setattr(vllm_mod, "VLLMServer", _Server)
    monkeypatch.setattr(judge_mod, "judge_set", lambda url, model, rows, b, c, **caps: (
        [{"id": r["id"], "base_first": "tie", "candidate_first": "tie"} for r in rows], 0))
    monkeypatch.setattr(judge_mod, "judge_labels", lambda url, model, labels, **caps: [r["label"] for r in labels])
    rubric = json.dumps({"sets": [{"name": "homework", "form": "rubric", "uri": "builtin://homework_rubric.jsonl"}],
                         "judge": {"model_uri": uri, "labels_uri": "builtin://homework_judge_labels.jsonl"}})
    prepared = str(tmp_path / "prepared")
    assert prepare_step(rubric, prepared)["judge_model_uri"] == uri
    rows = len((tmp_path / "prepared" / "rubric" / "homework.jsonl").read_text().splitlines())
    for side in ("base", "cand"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "rubric_answers.json").write_text(json.dumps({"homework": ["an answer"] * rows}))
    model = tmp_path / "judge-model"  # resolve-model's artifact
    model.mkdir()
    (model / "config.json").write_text("{}")
    _Server.served.clear()
    out = judge_step(prepared, str(tmp_path / "base"), str(tmp_path / "cand"), str(tmp_path / "judged"),
                     model_dir=str(model), pinned_uri=uri, fingerprint=digest)
    assert _Server.served == [model]
    assert out["judge_model"] == {"uri": uri, "pinned_uri": uri, "fingerprint": digest}
    assert json.loads((tmp_path / "judged" / JUDGED).read_text())["judge_model"] == out["judge_model"]
    assert len(out["sets"]["homework"]["judged"]) == rows

    gated = _gate(tmp_path, "w8a8-int8", eval_sets=prepared, base_eval_sets=str(tmp_path / "base"),
                  candidate_eval_sets=str(tmp_path / "cand"), eval_sets_judged=str(tmp_path / "judged" / JUDGED))
    assert gated["candidate"]["eval_sets"]["judge_model"] == out["judge_model"]
    logged = gate_outputs(gated, "w8a8-int8", str(tmp_path / "w8a8-int8-gates"))["log"]["params"]
    assert logged["eval_sets.judge"] == f"{uri} {digest}"
    assert f"judge model {uri} (content {digest})" in (tmp_path / "w8a8-int8-gates" / "eval_sets.md").read_text()
    select_champion([str(tmp_path / "w8a8-int8-gates")], "size", str(tmp_path / "decision"), str(tmp_path / "r.md"),
                    str(tmp_path / "r.html"))
    decision = json.loads((tmp_path / "decision" / "decision-record.json").read_text())
    assert {g["candidate"]: g for g in decision["candidates"]}["w8a8-int8"]["eval_sets"]["judge_model"] == \
        out["judge_model"]

    with pytest.raises(ShipyardError, match="not handed to the judge step"):
        judge_step(prepared, str(tmp_path / "base"), str(tmp_path / "cand"), str(tmp_path / "j2"),
                   model_dir=str(tmp_path / "empty"))
    with pytest.raises(ShipyardError, match="is embedded://smollm2-135m-instruct, not /"):
        judge_step(prepared, str(tmp_path / "base"), str(tmp_path / "cand"), str(tmp_path / "j3"),
                   model_dir=str(model), pinned_uri="embedded://smollm2-135m-instruct")


def test_with_empty_eval_sets_the_real_steps_do_nothing_under_kfp_local(tmp_path: Path) -> None:
    """The added KFP steps with ``eval_sets`` empty, wired as the pipeline wires them (the stages' judge
    model before a loop of two candidates, each with its judge): pin answers "", prepare writes only an
    empty prepared.json and answers "", so the judge model is neither pinned nor fetched (its Else step
    hands on an empty folder) and each candidate's judge runs its CPU branch, writing nothing; none
    starts a runtime (each well under the time of starting one)."""
    import time

    from kfp import dsl, local

    from shipyard.components.eval_sets.component import pin_eval_sets, prepare_eval_sets
    from shipyard.pipelines.stages import judge_model, judge_sets
    from shipyard.run.kfp_local_compat import enable_oneof_artifacts

    @dsl.pipeline(name="empty-eval-sets")
    def pipeline():  # no return annotation: KFP reads it, and this module's annotations are strings
        pinned = pin_eval_sets(eval_sets="")
        prepared = prepare_eval_sets(eval_sets=pinned.output)
        judge = judge_model(prepared)  # once, before the loop
        with dsl.ParallelFor(items=["a", "b"], name="candidates"):
            judge_sets(prepared, prepared.outputs["prepared"], prepared.outputs["prepared"], judge)

    enable_oneof_artifacts()  # as `shipyard run --local` does
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    started = time.monotonic()
    pipeline()
    took = time.monotonic() - started
    run = next((tmp_path / "root").iterdir())
    assert json.loads((run / "pin-eval-sets" / "executor_output.json").read_text())["parameterValues"] == \
        {"Output": ""}
    prepared = json.loads((run / "prepare-eval-sets" / "prepared" / "prepared.json").read_text())
    assert prepared["sets"] == [] and prepared["manifest"] is None
    assert json.loads((run / "prepare-eval-sets" / "executor_output.json").read_text())["parameterValues"] == \
        {"Output": ""}
    assert json.loads((run / "no-judge-model" / "executor_output.json").read_text())["parameterValues"] == \
        {"Output": ""}
    assert list((run / "no-judge-model" / "model").iterdir()) == []
    ran = sorted(p.parent.relative_to(run).as_posix() for p in run.rglob("executor_output.json"))
    assert not [r for r in ran if "pin-model" in r or "resolve-model" in r]  # no judge model pinned or fetched
    judges = [r for r in ran if r.endswith("/judge-eval-sets-2")]  # each candidate's CPU branch
    assert len(judges) == 2 and not [r for r in ran if r.endswith("/judge-eval-sets")]
    assert all(list((run / r / "judged").iterdir()) == [] for r in judges if (run / r / "judged").exists())
    print(f"the empty eval-sets steps of a run with two candidates under kfp.local: {took:.1f} s")
