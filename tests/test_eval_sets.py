"""User eval sets (issue 36): reading, schemas, pinning, the leak check, the lm-eval compiler (loaded by
lm-eval itself, and run by it on the tiny model), the pairwise judging maths and the per-set gate
(per-sample records: a candidate that answers a planted subset wrongly is refused on that set)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.core.errors import ShipyardError
from shipyard.evaluation.config import parse_eval_config, tree_sha256
from shipyard.evaluation.eval_set_tasks import (
    compile_eval_sets,
    eval_config_for,
    task_name,
    validate_task_folder,
)
from shipyard.evaluation.eval_set_utils import match_contains, match_exact, match_regex
from shipyard.evaluation.eval_sets import (
    SHIPPED,
    SetSpec,
    check_eval_sets,
    load_eval_set,
    load_labels,
    parse_eval_sets,
    shipped_eval_sets,
)
from shipyard.evaluation.judge import judge_requests, load_template, parse_verdict
from shipyard.evaluation.leakage import check_leaks, leak_check, refuse_leaks
from shipyard.gates.eval_sets import JudgedSet, gate_eval_sets, report_doc
from shipyard.gates.judging import Judged, calibrate, cohen_kappa, outcome, pairwise
from shipyard.gates.paired import load_samples
from shipyard.gates.recovery import parse_thresholds
from shipyard.runtimes.runtime import run_in_runtime


def write_set(folder: Path, name: str, rows: list[object]) -> str:
    path = folder / f"{name}.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def one(folder: Path, form: str, rows: list[object], **spec: object) -> str:
    return json.dumps([{"name": "s", "form": form, "uri": write_set(folder, "s", rows), **spec}])


QA = {"prompt": "Which city is the capital of Peru?", "reference": "Lima"}


# --------------------------------------------------------------------------- reading and schemas


def test_shipped_sets_load_pinned_one_of_each_form() -> None:
    from shipyard.core.files import package_dir

    config, sets = check_eval_sets(shipped_eval_sets())
    assert sorted(s.form for s in sets) == ["chat", "mcq", "qa", "rag", "rubric"]
    assert config.judge is not None and config.judge.labels_uri
    for eval_set, (_, _, file) in zip(sets, SHIPPED, strict=True):
        data = (package_dir("shipyard.evaluation.user_sets") / file).read_bytes()
        assert eval_set.sha256 == hashlib.sha256(data).hexdigest()
        assert len(eval_set.rows) == data.count(b"\n") >= 20 and eval_set.duplicates == 0
    labels = load_labels(config.judge.labels_uri)
    assert {r["label"] for r in labels} == {"A", "B", "tie"}


@pytest.mark.parametrize(("form", "row", "message"), [
    ("mcq", {"question": "q", "choices": ["a", "b"]}, "row 2: field 'answer' is missing"),
    ("mcq", {"question": "q", "choices": ["a"], "answer": 0}, "row 2: field 'choices' needs at least 2 item(s), got 1"),
    ("mcq", {"question": "q", "choices": ["a", "b"], "answer": "c"}, "row 2: field 'answer' is not one of the choices"),
    ("mcq", {"question": "q", "choices": ["a", "b"], "answer": 2}, "row 2: field 'answer' 2 is not the index"),
    ("qa", {"prompt": "p", "refrence": "r"}, "row 2: unknown field 'refrence' (fields: aliases, id, metadata, prompt, reference)"),
    ("qa", {"prompt": "p", "reference": "r", "extra": 1}, "row 2: unknown field 'extra'"),
    ("qa", {"prompt": "  ", "reference": "r"}, "row 2: field 'prompt' is empty"),
    ("qa", {"prompt": "p", "reference": 5}, "row 2: field 'reference' must be string, got int"),
    ("qa", [1, 2], "row 2: is a JSON list, not an object"),
    ("chat", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "reference": "r"},
     "row 2: field 'messages' ends with a assistant turn"),
    ("chat", {"messages": [{"role": "bot", "content": "hi"}], "reference": "r"},
     "row 2: field 'messages[0].role' must be one of ['system', 'user', 'assistant']"),
    ("rag", {"user_input": "q", "retrieved_contexts": [], "reference": "r"},
     "row 2: field 'retrieved_contexts' needs at least 1 item(s), got 0"),
    ("rag", {"user_input": "q", "reference": "r"}, "row 2: field 'retrieved_contexts' is missing"),
    ("rubric", {"prompt": "p"}, "row 2: field 'guideline' is missing"),
])
def test_a_bad_row_is_one_line_naming_set_row_and_field(tmp_path: Path, form: str, row: object, message: str) -> None:
    good = {"mcq": {"question": "q", "choices": ["a", "b"], "answer": 0}, "qa": QA,
            "chat": {"messages": [{"role": "user", "content": "hi"}], "reference": "r"},
            "rag": {"user_input": "q", "retrieved_contexts": ["c"], "reference": "r"},
            "rubric": {"prompt": "p", "guideline": "g"}}[form]
    judge = {"judge": {"model_uri": "embedded://smollm2-135m-instruct"}} if form == "rubric" else {}
    value = {"sets": json.loads(one(tmp_path, form, [good, row])), **judge}
    with pytest.raises(ShipyardError) as err:
        check_eval_sets(value)
    line = str(err.value)
    assert line.startswith("eval_sets.s: ") and message in line and "\n" not in line


def test_a_line_that_is_not_json_names_the_row(tmp_path: Path) -> None:
    with pytest.raises(ShipyardError, match=r"eval_sets.s: row 2 is not JSON"):
        check_eval_sets(one(tmp_path, "qa", [QA, "{not json"]))


def test_duplicates_are_dropped_and_counted_duplicate_ids_refused(tmp_path: Path) -> None:
    rows = [{**QA, "id": 1}, {**QA, "id": 2}, {"prompt": "Capital of Chile?", "reference": "Santiago"}, QA]
    _, (eval_set,) = check_eval_sets(one(tmp_path, "qa", rows))
    assert (eval_set.read_rows, len(eval_set.rows), eval_set.duplicates) == (4, 2, 2)
    assert eval_set.warnings == ["eval_sets.s: dropped 2 duplicate row(s) of 4"]
    with pytest.raises(ShipyardError, match="eval_sets.s: row 3: id 'a' is already used by row 1"):
        check_eval_sets(one(tmp_path, "qa", [{**QA, "id": "a"}, {**QA, "id": "b", "reference": "x"},
                                             {**QA, "id": "a", "reference": "y"}]))


@pytest.mark.parametrize(("value", "message"), [
    ([{"name": "s", "form": "qa", "uri": "EMPTY"}], "eval_sets.s: EMPTY holds no rows"),
    ([{"name": "s", "form": "qa", "uri": "QA3", "max_rows": 2}], "holds 3 rows, more than its cap max_rows=2"),
    ([{"name": "s", "form": "rubric", "uri": "QA3"}], "eval_sets.s: is a rubric set but eval_sets names no judge"),
    ([{"name": "s", "form": "qa", "uri": "s3://AKIAIOSFODNN7EXAMPLE:hunter2pw@bucket/s.jsonl"}],
     "eval_sets.s: s3://... carries credentials (not shown)"),
    ([{"name": "s", "form": "qa", "uri": "QA3", "sha256": "0" * 64}], "is not the pinned 0000000000000000..."),
    ([{"name": "s", "form": "qa", "uri": "ftp://host/s.jsonl"}], "eval_sets.s: unknown URI scheme 'ftp'"),
    ([{"name": "s", "form": "qa", "uri": "s3://bucket/sets/"}], "is not a .jsonl object"),
    ([{"name": "s", "form": "qa", "uri": "-"}], "eval_sets.s: '-' is not a .jsonl file"),
    ([{"name": "s", "form": "mcq", "uri": "QA3", "match": "exact"}], "'match' applies to qa, chat and rag sets"),
    ([{"name": "s", "form": "essay", "uri": "QA3"}], "eval_sets.sets[0].form: must be 'mcq', 'qa', 'chat', 'rag'"),
    ([{"name": "s", "form": "qa", "uri": "QA3"}, {"name": "s", "form": "qa", "uri": "QA3"}],
     "eval_sets.s: set 's' is given twice"),
    ([{"name": "Bad Name", "form": "qa", "uri": "QA3"}], "is not a set name"),
    # a final newline is no name and no digest (\Z, not $, which also matches before a final newline)
    ([{"name": "s\n", "form": "qa", "uri": "QA3"}], "eval_sets.sets[0].name: 's\\n' is not a set name"),
    ([{"name": "s", "form": "qa", "uri": "QA3", "sha256": "0" * 64 + "\n"}], "is not a sha256 digest"),
    ({"sets": [], "judge": {"model_uri": "hf://org/judge"}}, "eval_sets.judge.model_uri: an hf:// judge is not pinned"),
    ({"sets": [], "judge": {"model_uri": "oci://quay.io/org/judge:latest"}}, "eval_sets.judge.model_uri:"),
    ({"sets": [], "judge": {"model_uri": "embedded://smollm2-135m-instruct", "max_rows": 0}},
     "eval_sets.judge.max_rows: must be a whole number from 1 to 1000000, got 0 (fix: the rows the judge judges"),
    ({"sets": [], "judge": {"model_uri": "embedded://smollm2-135m-instruct", "concurrency": 65}},
     "eval_sets.judge.concurrency: must be a whole number from 1 to 64, got 65"),
    ({"sets": [], "judge": {"model_uri": "embedded://smollm2-135m-instruct", "ragas_max_tokens": 2.5}},
     "eval_sets.judge.ragas_max_tokens: must be a whole number from 16 to 8192, got 2.5"),
    ({"sets": [], "judge": {"model_uri": "embedded://smollm2-135m-instruct", "max_tokens": True}},
     "eval_sets.judge.max_tokens: must be a whole number from 1 to 1024, got True"),
    ("[{", "eval_sets: is not valid JSON"),
    ("5", "eval_sets: must be a JSON list of sets"),
])
def test_bad_specs_are_one_line(tmp_path: Path, value: object, message: str) -> None:
    qa3 = write_set(tmp_path, "qa3", [QA, {**QA, "reference": "x"}, {**QA, "reference": "y"}])
    empty = write_set(tmp_path, "empty", ["", "  "])
    if not isinstance(value, str):
        value = json.loads(json.dumps(value).replace('"QA3"', json.dumps(qa3)).replace('"EMPTY"', json.dumps(empty)))
    with pytest.raises(ShipyardError) as err:
        check_eval_sets(value)
    text = str(err.value).replace(empty, "EMPTY")
    assert message in text and "\n" not in text
    assert "hunter2pw" not in text and "AKIA" not in text


def test_regex_references_must_compile(tmp_path: Path) -> None:
    with pytest.raises(ShipyardError, match="row 1: field 'reference' is not a regular expression"):
        check_eval_sets(one(tmp_path, "qa", [{"prompt": "p", "reference": "(unclosed"}], match="regex"))


def test_pvc_set_is_read_from_the_mounted_claim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIPYARD_PVC_ROOT", str(tmp_path))
    (tmp_path / "evals").mkdir()
    write_set(tmp_path / "evals", "support", [QA])
    spec = SetSpec(name="support", form="qa", uri="pvc://evals/support.jsonl")
    assert load_eval_set(spec).rows == [QA]
    with pytest.raises(ShipyardError, match="eval_sets.x: claim 'other' is not mounted"):
        load_eval_set(SetSpec(name="x", form="qa", uri="pvc://other/support.jsonl"))


@pytest.fixture(scope="module")
def s3() -> Iterator[object]:
    from shipyard.testing.services import MotoS3

    with MotoS3() as server:
        server.make_bucket("team-evals")
        yield server


def test_s3_set_is_fetched_and_pinned(s3: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from shipyard.models.s3 import upload_file

    for key, value in s3.env.items():  # type: ignore[attr-defined]
        monkeypatch.setenv(key, value)
    path = Path(write_set(tmp_path, "support", [QA, {"prompt": "Capital of Chile?", "reference": "Santiago"}]))
    uri = upload_file(path, "s3://team-evals/sets/support.jsonl")["uri"]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    eval_set = load_eval_set(SetSpec(name="support", form="qa", uri=uri, sha256=digest), tmp_path / "dl")
    assert eval_set.sha256 == digest and len(eval_set.rows) == 2
    with pytest.raises(ShipyardError, match="eval_sets.gone: cannot read s3://team-evals/sets/gone.jsonl"):
        load_eval_set(SetSpec(name="gone", form="qa", uri="s3://team-evals/sets/gone.jsonl"), tmp_path / "dl2")


def test_the_pin_step_pins_an_s3_set_to_the_sha256_of_its_bytes(s3: object, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """pin-eval-sets against a real (moto) S3: the pin is the sha256 of the object's bytes, written into
    the value the prepare step gets; new bytes under the same key give a new pin (so a new KFP cache
    key), and the prepare step refuses bytes changed after the pin in one line naming the set."""
    from shipyard.models.s3 import upload_file
    from shipyard.steps.eval_sets import pin_step, prepare_step

    for key, value in s3.env.items():  # type: ignore[attr-defined]
        monkeypatch.setenv(key, value)
    rubric = [{"prompt": "What is 2 plus 2?", "guideline": "4; clearer wins."}]
    path = Path(write_set(tmp_path, "homework", rubric))
    uri = upload_file(path, "s3://team-evals/sets/homework.jsonl")["uri"]
    value = json.dumps({"sets": [{"name": "homework", "form": "rubric", "uri": uri}],
                        "judge": {"model_uri": "embedded://smollm2-135m-instruct"}})
    first = pin_step(value)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert first["sets"] == [{"name": "homework", "uri": uri, "sha256": digest}]
    pinned = parse_eval_sets(first["eval_sets"])
    assert pinned.sets[0].sha256 == digest and pinned.sets[0].uri == uri and pinned.judge is not None
    assert pin_step(value)["eval_sets"] == first["eval_sets"]  # same content, same input: a cache hit
    out = prepare_step(first["eval_sets"], str(tmp_path / "prepared"))
    assert out["sets"][0]["sha256"] == digest and out["sets"][0]["pinned"] is True

    write_set(tmp_path, "homework", [*rubric, {"prompt": "What is 3 plus 3?", "guideline": "6."}])
    upload_file(path, "s3://team-evals/sets/homework.jsonl")  # new bytes, same key
    second = pin_step(value)
    assert second["sets"][0]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest() != digest
    assert second["eval_sets"] != first["eval_sets"]
    with pytest.raises(ShipyardError) as err:  # the object changed between the pin and the prepare step
        prepare_step(first["eval_sets"], str(tmp_path / "stale"))
    line = str(err.value)
    assert line.startswith(f"eval_sets.homework: content sha256 {second['sets'][0]['sha256'][:16]}... is not the "
                           f"pinned {digest[:16]}...: it changed after it was pinned") and "\n" not in line
    assert "run the pipeline again" in line and not (tmp_path / "stale").exists()


def test_the_pin_step_pins_local_pvc_and_shipped_sets_and_refuses_a_wrong_given_digest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A local file, a file on a mounted claim and a shipped set are pinned the same way (in a cluster a
    local path is the step's own file, so it is pinned by what the step reads); the judge's labelled
    slice too. A digest given in eval_sets that the content does not match fails at the pin step, one
    line naming the set."""
    from shipyard.core.files import package_dir
    from shipyard.steps.eval_sets import pin_step

    monkeypatch.setenv("SHIPYARD_PVC_ROOT", str(tmp_path / "pvc"))
    (tmp_path / "pvc" / "evals").mkdir(parents=True)
    on_claim = write_set(tmp_path / "pvc" / "evals", "faq", [QA, {**QA, "reference": "Lima, Peru"}])
    local = write_set(tmp_path, "support", [QA])
    shipped = package_dir("shipyard.evaluation.user_sets")
    value = {"sets": [{"name": "support", "form": "qa", "uri": local},
                      {"name": "faq", "form": "qa", "uri": "pvc://evals/faq.jsonl"},
                      {"name": "desk", "form": "mcq", "uri": "builtin://travel_desk_mcq.jsonl"}],
             "judge": {"model_uri": "embedded://smollm2-135m-instruct",
                       "labels_uri": "builtin://homework_judge_labels.jsonl"}}
    out = pin_step(json.dumps(value))
    want = {"support": hashlib.sha256(Path(local).read_bytes()).hexdigest(),
            "faq": hashlib.sha256(Path(on_claim).read_bytes()).hexdigest(),
            "desk": hashlib.sha256((shipped / "travel_desk_mcq.jsonl").read_bytes()).hexdigest()}
    assert {s["name"]: s["sha256"] for s in out["sets"]} == want
    assert out["labels_sha256"] == hashlib.sha256((shipped / "homework_judge_labels.jsonl").read_bytes()).hexdigest()
    assert json.loads(out["eval_sets"])["judge"]["labels_sha256"] == out["labels_sha256"]
    given = dict(value, sets=[{**value["sets"][0], "sha256": "sha256:" + want["support"]}])
    assert pin_step(json.dumps(given))["sets"][0]["sha256"] == want["support"]  # a right given digest is kept
    for wrong, where in ((dict(value, sets=[{**value["sets"][0], "sha256": "f" * 64}]), "eval_sets.support"),
                         (dict(value, judge={**value["judge"], "labels_sha256": "f" * 64}), "eval_sets.judge.labels_uri")):
        with pytest.raises(ShipyardError) as err:
            pin_step(json.dumps(wrong))
        assert str(err.value).startswith(f"{where}: content sha256 ") and "ffffffffffffffff" in str(err.value)
        assert "\n" not in str(err.value)
    assert pin_step("  ") == {"eval_sets": "", "sets": [], "labels_sha256": ""}


# --------------------------------------------------------------------------- leak check


CALIBRATION = [
    "A small bakery celebrated the harbour. Q: Which city is the capital of Peru? A: Lima. Nobody expected it.",
    "The council wrote down the long schedule for the summer festival in the old town hall by the river bank "
    "before anyone else arrived.",
]


def test_a_planted_leak_is_reported_and_refused_over_the_threshold(tmp_path: Path) -> None:
    rows = [
        QA,  # exact: the question is quoted in a calibration text
        {"prompt": "When did the council write down the long schedule for the summer festival in the old town hall "
                   "by the river?", "reference": "before anyone arrived"},  # shares a 13-gram
        {"prompt": "Which city is the capital of Chile?", "reference": "Santiago"},
        {"prompt": "What is the opposite of cold?", "reference": "hot"},
    ]
    _, (eval_set,) = check_eval_sets(one(tmp_path, "qa", rows))
    (report,) = check_leaks([eval_set], CALIBRATION, calibration="calib.jsonl")
    assert report.exact == [1] and report.ngram == [2]
    assert report.line() == ("s: 2 of 4 rows overlap the calibration set (exact 1, n-gram 1): rows 1, 2")
    assert refuse_leaks([report]) == [report.line()]
    (strict,) = check_leaks([eval_set], CALIBRATION, max_leak_share=0.25)
    with pytest.raises(ShipyardError, match=r"eval_sets.s: s: 2 of 4 rows overlap the calibration set .*limit 25% "
                                            "EXCEEDED"):
        refuse_leaks([strict])


def test_short_prompts_and_shared_system_prompts_are_no_leak(tmp_path: Path) -> None:
    system = "You are the support assistant of the harbour bakery and you always answer in one short sentence."
    calibration = [f"{system} The council wrote the schedule.", "Opening hours", "The bakery is open. Opening hours"]
    rows = [{"prompt": "Opening hours", "reference": "9 to 5"},  # a whole calibration text: exact
            {"prompt": "The bakery", "reference": "open"}]  # 2 words inside a longer text: not a leak
    _, (qa,) = check_eval_sets(one(tmp_path, "qa", rows))
    assert check_leaks([qa], calibration)[0].exact == [1]
    chat = [{"messages": [{"role": "system", "content": system}, {"role": "user", "content": "When do you open?"}],
             "reference": "At nine."}]
    _, (chat_set,) = check_eval_sets(one(tmp_path, "chat", chat))
    assert check_leaks([chat_set], calibration)[0].overlapping == []


def test_leak_check_reads_the_calibration_file_and_skips_a_hub_dataset(tmp_path: Path) -> None:
    calib = tmp_path / "calib.jsonl"
    calib.write_text("".join(json.dumps({"text": t}) + "\n" for t in CALIBRATION))
    _, (eval_set,) = check_eval_sets(one(tmp_path, "qa", [QA]))
    reports, warnings = leak_check([eval_set], str(calib))
    assert reports[0].exact == [1] and reports[0].calibration_sha256 == hashlib.sha256(calib.read_bytes()).hexdigest()
    assert warnings == ["s: 1 of 1 rows overlap the calibration set (exact 1, n-gram 0): rows 1"]
    reports, warnings = leak_check([eval_set], "HuggingFaceH4/ultrachat_200k:train_sft")
    assert warnings == ["s: not checked (HuggingFaceH4/ultrachat_200k:train_sft is a hub dataset, not readable offline)"]


def test_shipped_sets_do_not_overlap_the_builtin_calibration_text() -> None:
    _, sets = check_eval_sets(shipped_eval_sets())
    reports, warnings = leak_check(sets, "")
    assert warnings == [] and all(r.checked and r.rows > 0 for r in reports)


# --------------------------------------------------------------------------- compiling for lm-eval


def test_match_filters() -> None:
    docs = [{"answer": "Buenos Aires", "aliases": ["BA"]}] * 3
    resps = [["buenos aires."], ["It is Buenos Aires!"], ["ba"]]
    assert match_exact(resps, docs) == [["Buenos Aires"], ["It is Buenos Aires!"], ["Buenos Aires"]]
    assert match_contains(resps, docs) == [["Buenos Aires"], ["Buenos Aires"], ["Buenos Aires"]]
    regex = [{"answer": r"\b(19|20)\d\d\b", "aliases": []}] * 2
    assert match_regex([["in 1999"], ["in 99"]], regex) == [[r"\b(19|20)\d\d\b"], ["in 99"]]


def test_compiled_folder_is_the_same_wherever_it_is_written(tmp_path: Path) -> None:
    _, sets = check_eval_sets(shipped_eval_sets())
    manifest = compile_eval_sets(sets, tmp_path / "a")
    compile_eval_sets(sets, tmp_path / "b")
    assert tree_sha256(tmp_path / "a") == tree_sha256(tmp_path / "b")
    assert sorted(manifest["sets"]) == ["travel-desk-mcq", "travel-desk-qa", "travel-notes-rag", "writing-help-chat"]
    docs = [json.loads(line) for line in (tmp_path / "a" / f"{task_name('travel-notes-rag')}.jsonl").open()]
    assert docs[0]["text"].startswith("Context:\n[1] Travel notes:") and docs[0]["answer"] == "Buenos Aires"
    mcq = json.loads((tmp_path / "a" / f"{task_name('travel-desk-mcq')}.jsonl").open().readline())
    assert mcq["choices"][mcq["label"]] == "Cairo"
    cfg = parse_eval_config(eval_config_for(tmp_path / "a", manifest, '{"limit": 4, "seed": 7}'))
    assert cfg.limit is None and cfg.seed == 7 and cfg.log_samples and cfg.task_dir == str((tmp_path / "a").resolve())
    assert sorted(cfg.tasks) == sorted(e["task"] for e in manifest["sets"].values())


def test_lm_eval_loads_the_compiled_tasks(tmp_path: Path) -> None:
    """lm-eval's own loader (TaskManager, get_task_dict: YAML, !function filters, the dataset)."""
    _, sets = check_eval_sets(shipped_eval_sets())
    compile_eval_sets(sets, tmp_path / "tasks")
    docs = run_in_runtime("compress", validate_task_folder, task_dir=str(tmp_path / "tasks"))
    assert docs == {task_name(s.name): len(s.rows) for s in sets if s.form != "rubric"}


def prepare_three(tmp_path: Path) -> dict[str, object]:
    """The shipped sets (their judge and labelled slice too) cut to their first 3 rows, as local
    files, prepared into ``tmp_path/prepared``; returns ``prepared.json``."""
    from shipyard.core.files import package_dir
    from shipyard.steps.eval_sets import prepare_eval_sets

    shipped = json.loads(shipped_eval_sets())
    for spec in shipped["sets"]:
        rows = (package_dir("shipyard.evaluation.user_sets") / spec["uri"].removeprefix("builtin://")).read_text()
        spec["uri"] = write_set(tmp_path, spec["name"], rows.splitlines()[:3])
    return prepare_eval_sets(json.dumps(shipped), str(tmp_path / "prepared"))


def test_each_form_runs_end_to_end_on_the_tiny_model(tiny_model: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The steps on 3 rows of each shipped form: prepare (read, leak check, compile, lm-eval's loader),
    real lm-eval (hf backend) on the tiny model with per-sample logs, then the per-set gate (the model
    against itself: no loss, but 3 rows cannot show a 0.02 margin: inconclusive, fails closed)."""
    from shipyard.steps.eval_sets import decide_eval_sets, evaluate_eval_sets

    monkeypatch.setenv("SHIPYARD_CACHE", str(tmp_path / "cache"))
    prepared = prepare_three(tmp_path)
    assert [s["rows"] for s in prepared["sets"]] == [3] * 5 and prepared["warnings"] == []
    assert [r["line"] for r in prepared["leaks"]][0] == "travel-desk-mcq: 0 of 3 rows overlap the calibration set"
    assert prepared["lm_eval_docs"] == {e["task"]: 3 for e in prepared["manifest"]["sets"].values()}
    assert (tmp_path / "prepared" / "rubric" / "homework-rubric.jsonl").is_file()
    assert (tmp_path / "prepared" / "rag" / "travel-notes-rag.jsonl").is_file()
    summary = run_in_runtime("compress", evaluate_eval_sets, model_dir=str(tiny_model),
                             prepared_dir=str(tmp_path / "prepared"), eval_config='{"batch_size": 4}',
                             out_dir=str(tmp_path / "base"), backend="hf")
    samples = load_samples(tmp_path / "base")
    for entry in prepared["manifest"]["sets"].values():
        metric, _, filt = entry["metric"].partition(",")
        assert entry["metric"] in summary["scores"][entry["task"]]
        rows = [r for (doc, f), r in samples[entry["task"]].items() if f == filt]
        assert len(rows) == 3 and all(r[metric] in (0, 0.0, 1, 1.0) for r in rows)
    base = str(tmp_path / "base")
    unjudged = decide_eval_sets(str(tmp_path / "prepared"), base, base)
    assert not unjudged["passed"] and "rubric set(s) ['homework-rubric'] were not judged" in unjudged["reason"]
    # verdicts written here (the judge model's run is the slow test below): candidate preferred 3 times
    judged = {"sets": {"homework-rubric": {"judged": [{"id": str(i), "base_first": "B", "candidate_first": "A"}
                                                      for i in range(3)], "unparsed": 0}},
              "labels": {"verdicts": [], "truth": []}}
    (tmp_path / "judged.json").write_text(json.dumps(judged))
    unscored = decide_eval_sets(str(tmp_path / "prepared"), base, base, judged_path=str(tmp_path / "judged.json"))
    assert not unscored["passed"] and "rag set(s) ['travel-notes-rag'] were not scored by Ragas" in unscored["reason"]
    # what Ragas scores: the rag rows and each model's raw generations from lm-eval's logs (before the match filter)
    from shipyard.steps.eval_sets import rag_inputs

    rag = rag_inputs(str(tmp_path / "prepared"), base, base)["travel-notes-rag"]
    assert [r["id"] for r in rag["rows"]] == ["rag-001", "rag-002", "rag-003"] and rag["base"] == rag["candidate"]
    raw = [r for (doc, f), r in sorted(samples["shipyard_set_travel_notes_rag"].items()) if f == "match"]
    assert rag["base"] == [r["resps"][0][0].strip() for r in raw]
    # Ragas' scores written here (its run with a vLLM-served judge is the slow test below): one NaN each side
    scores = {"base": [1.0, None, 0.5], "candidate": [1.0, 0.5, None]}
    judged["ragas"] = {"ragas_version": "0.4.3", "judge_model": "shipyard-judge", "metrics": ["faithfulness"],
                       "skipped": {"answer_relevancy": "needs an embedding model"},
                       "sets": {"travel-notes-rag": {"ids": ["rag-001", "rag-002", "rag-003"],
                                                     "scores": {"faithfulness": scores},
                                                     "errors": {"faithfulness": ["InstructorRetryException: bad"]}}}}
    (tmp_path / "judged.json").write_text(json.dumps(judged))
    out = decide_eval_sets(str(tmp_path / "prepared"), base, base, judged_path=str(tmp_path / "judged.json"),
                           report_path=str(tmp_path / "report.md"), records_path=str(tmp_path / "records.json"))
    records = json.loads((tmp_path / "records.json").read_text())
    assert records["columns"][:3] == ["set", "doc_id", "id"] and records["columns"][-1] == "metric"
    assert len(records["data"]) == 15  # 3 rows of each compiled set, and the rag set's 3 Ragas faithfulness scores
    scored = [r for r in records["data"] if r[-1] == "ragas_faithfulness"]
    assert [(r[2], r[7], r[8], r[9]) for r in scored] == [("rag-001", 1.0, 1.0, "both right"),
                                                          ("rag-002", None, 0.5, "not scored"),
                                                          ("rag-003", 0.5, None, "not scored")]
    assert [r[5] for r in scored] == rag["base"]
    mcq = [r for r in records["data"] if r[0] == "travel-desk-mcq"]
    assert {r[2] for r in mcq} == {"mcq-001", "mcq-002", "mcq-003"} and all(r[5] == r[6] for r in mcq)
    ragas_row = next(r for r in out["rows"] if r["metric"] == "ragas_faithfulness")
    assert ragas_row["task"] == "travel-notes-rag" and not ragas_row["gated"] and ragas_row["decision"] == "too few scores"
    assert "Ragas scored 1 of 3 rows on both sides" in ragas_row["note"] and ragas_row["note"].count("informs only") == 1
    lm_rows = [r for r in out["rows"] if r["metric"] not in ("judge_preference", "ragas_faithfulness")]
    assert [r["paired"]["n"] for r in lm_rows] == [3, 3, 3, 3]
    assert all(r["paired"]["loss"] == 0 and r["decision"] == "inconclusive" for r in lm_rows) and not out["passed"]
    rubric = next(r for r in out["rows"] if r["metric"] == "judge_preference")
    assert not rubric["gated"] and "informs only: no labelled slice" in rubric["note"]
    assert rubric["note"].count("informs only") == 1
    report = (tmp_path / "report.md").read_text()
    assert "travel-desk-mcq: 0 of 3 rows overlap the calibration set" in report and "Judge on homework-rubric" in report
    assert "travel-notes-rag faithfulness: 1 of 3 rows scored on both sides; not scored (NaN): 1 base, 1 candidate" \
        in report and "travel-notes-rag faithfulness: not scored because InstructorRetryException: bad" in report
    assert "skipped answer_relevancy: needs an embedding model" in report
    import shutil

    other = tmp_path / "other"  # results of another eval config: refused, as by the accuracy gate
    shutil.copytree(base, other)
    summary_file = other / "summary.json"
    summary_file.write_text(json.dumps({**json.loads(summary_file.read_text()), "config_hash": "f" * 64}))
    unlike = decide_eval_sets(str(tmp_path / "prepared"), base, str(other), judged_path=str(tmp_path / "judged.json"))
    assert not unlike["passed"] and "ran the sets with different eval configs" in unlike["reason"]


# --------------------------------------------------------------------------- judging maths


def test_outcomes_need_both_orders_to_agree() -> None:
    assert outcome(Judged("1", "B", "A")) == "win"  # candidate preferred in both orders
    assert outcome(Judged("2", "A", "B")) == "loss"
    assert outcome(Judged("3", "A", "A")) == "tie"  # always the first position: position bias, not a preference
    assert outcome(Judged("4", "tie", "A")) == "tie"
    with pytest.raises(ShipyardError, match="judge: 5: verdict 'C' is not one of"):
        outcome(Judged("5", "C", "A"))


def test_pairwise_counts_interval_and_flip_rate() -> None:
    judged = [Judged(str(i), "B", "A") for i in range(6)] + [Judged(str(i), "A", "B") for i in range(6, 8)] \
        + [Judged(str(i), "A", "A") for i in range(8, 10)]
    result = pairwise(judged, iters=500, seed=3)
    assert (result.wins, result.ties, result.losses, result.n) == (6, 2, 2, 10)
    assert result.flip_rate == pytest.approx(0.2)
    assert result.first_position_rate == pytest.approx(12 / 20)  # 6 + 2 + 4 of the 20 verdicts chose A
    est, low, high = result.net
    assert est == pytest.approx(0.4) and low < est < high and -1 <= low and high <= 1
    assert result.line().startswith("6 win / 2 tie / 2 loss (n=10); net +0.40 [")


def test_cohen_kappa_and_calibration() -> None:
    # 10 items: agree on 7 (4 A, 3 B); judge A x6 B x4, labels A x5 B x5: p_o 0.7, p_e 0.5, kappa 0.4
    judge = ["A"] * 4 + ["B"] * 3 + ["A", "A", "B"]
    labels = ["A"] * 4 + ["B"] * 3 + ["B", "B", "A"]
    assert cohen_kappa(judge, labels) == pytest.approx(0.4)
    assert cohen_kappa(["A", "A"], ["A", "A"]) == 1.0
    assert not calibrate(judge, labels, 0.6).gates and "informs only: Cohen's kappa 0.40 < 0.6" in \
        calibrate(judge, labels, 0.6).note
    assert calibrate(judge, labels, 0.4).gates
    assert "informs only: no labelled slice" in calibrate(None, None, 0.6).note
    assert "informs only: the judge did not judge the labelled slice" in calibrate([], labels, 0.6).note


def test_judge_prompt_is_data_both_orders_greedy() -> None:
    template = load_template()
    assert template.temperature == 0 and template.max_tokens > 0
    first, second = judge_requests(template, "What is 2 plus 2? {answer_b}", "4 is right.", "It is {prompt} 4.",
                                   "It is 5.")
    assert first.index("It is {prompt} 4.") < first.index("It is 5.")
    assert second.index("It is 5.") < second.index("It is {prompt} 4.")
    assert "4 is right." in first and first.endswith("Verdict:\n")
    assert parse_verdict(" B. Answer B is correct", template) == "B"
    assert parse_verdict("Tie", template) == "tie" and parse_verdict("neither", template) is None


# --------------------------------------------------------------------------- the gate per set


def samples(correct: list[int], metric: str = "exact_match", filt: str = "match") -> dict:
    return {(i, filt): {"doc_id": i, "filter": filt, metric: float(v)} for i, v in enumerate(correct)}


MANIFEST = {"sets": {
    "support": {"task": "shipyard_set_support", "metric": "exact_match,match", "margin": 0.05},
    "faq": {"task": "shipyard_set_faq", "metric": "acc,none", "margin": None},
}}


def test_a_candidate_wrong_on_a_planted_subset_is_refused_on_that_set() -> None:
    n = 300
    base = {"shipyard_set_support": samples([1] * n), "shipyard_set_faq": samples([1] * n, "acc", "none")}
    planted = [0 if i % 10 == 0 else 1 for i in range(n)]  # 30 rows answered wrongly: loss 0.10 > margin 0.05
    cand = {"shipyard_set_support": samples(planted), "shipyard_set_faq": samples([1] * n, "acc", "none")}
    gate = gate_eval_sets(MANIFEST, base, cand, parse_thresholds('{"max_loss": 0.05}'))
    rows = {r.task: r for r in gate.rows}
    assert rows["support"].decision == "inferior" and not rows["support"].passed
    assert rows["support"].margin == 0.05 and rows["support"].paired["mcnemar"]["base_only"] == 30
    assert rows["faq"].decision == "non-inferior" and rows["faq"].passed and rows["faq"].margin == 0.05
    assert rows["faq"].p_adjusted is not None and rows["faq"].p_adjusted >= rows["faq"].p_value  # Holm over 2
    assert not gate.passed and gate.reason.startswith("support: loss 0.1 [")
    assert gate.metrics()["eval_sets/support/loss"] == pytest.approx(0.1)
    md = report_doc(gate).to_markdown()
    assert "Your eval sets: FAIL" in md and "| support | exact_match,match | 300 |" in md


def test_identical_answers_pass_and_missing_samples_fail_closed() -> None:
    n = 400
    same = {"shipyard_set_support": samples([1] * n), "shipyard_set_faq": samples([i % 2 for i in range(n)], "acc",
                                                                                   "none")}
    assert gate_eval_sets(MANIFEST, same, same, parse_thresholds('{"max_loss": 0.05}')).passed
    partial = {"shipyard_set_support": same["shipyard_set_support"]}
    gate = gate_eval_sets(MANIFEST, same, partial, parse_thresholds('{"max_loss": 0.05}'))
    faq = next(r for r in gate.rows if r.task == "faq")
    assert not gate.passed and faq.decision == "no samples" and "on the candidate" in faq.note


def test_a_rubric_set_gates_only_with_a_calibrated_judge() -> None:
    losing = [Judged(str(i), "A", "B") for i in range(40)] + [Judged(str(i), "B", "A") for i in range(40, 50)]
    informs = JudgedSet(losing, calibrate(None, None, 0.6))
    gate = gate_eval_sets({"sets": {}}, {}, {}, parse_thresholds(""), judged={"homework": informs})
    (row,) = gate.rows
    assert gate.passed and not row.gated and row.decision == "inferior" and "informs only" in row.note
    assert gate.judged["homework"]["line"].startswith("10 win / 0 tie / 40 loss (n=50)")
    labels = ["A", "B", "tie"] * 10
    gates = JudgedSet(losing, calibrate(labels, labels, 0.6), margin=0.1)
    gate = gate_eval_sets({"sets": {}}, {}, {}, parse_thresholds(""), judged={"homework": gates})
    assert not gate.passed and gate.rows[0].gated and gate.rows[0].decision == "inferior"
    assert "Judge on homework" in report_doc(gate).to_markdown()


@pytest.mark.slow
def test_judge_and_ragas_served_by_vllm_on_lm_evals_answers(tiny_model: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The judge path end to end on one real vLLM server of the tiny model (base, candidate and judge
    at once: the path is tested, not the judge's quality): 3 rows of each shipped form prepared, real
    lm-eval answers (hf backend), the rubric answers judged in both orders and the labelled slice
    once, and real Ragas (garak runtime) scoring the rag set's lm-eval answers with that server;
    then the per-set gate: one row per Ragas metric, the report's Ragas lines, the verdict. Starts
    vLLM: slow."""
    import shutil

    from shipyard.steps.eval_sets import decide_eval_sets, evaluate_eval_sets
    from shipyard.testing.judge_path import judge_prepared_sets

    monkeypatch.setenv("SHIPYARD_CACHE", str(tmp_path / "cache"))
    prepare_three(tmp_path)
    prepared_dir, base, cand = str(tmp_path / "prepared"), tmp_path / "base", tmp_path / "candidate"
    run_in_runtime("compress", evaluate_eval_sets, model_dir=str(tiny_model), prepared_dir=prepared_dir,
                   eval_config='{"batch_size": 4}', out_dir=str(base), backend="hf")
    shutil.copytree(base, cand)
    judged = run_in_runtime("vllm", judge_prepared_sets, model_dir=str(tiny_model), prepared_dir=prepared_dir,
                            base_results=str(base), candidate_results=str(cand))
    rubric = judged["sets"]["homework-rubric"]["judged"]
    assert len(rubric) == 3 and all(j["base_first"] in ("A", "B", "tie") and j["candidate_first"] in ("A", "B", "tie")
                                    for j in rubric)
    labels = judged["labels"]
    assert len(labels["verdicts"]) == len(labels["truth"]) == 24
    assert pairwise([Judged(**j) for j in rubric], iters=100).n == 3
    ragas = judged["ragas"]
    assert ragas["ragas_version"] == "0.4.3" and ragas["judge_model"] == "judge"
    assert "answer_relevancy" in ragas["skipped"]
    notes = ragas["sets"]["travel-notes-rag"]
    assert notes["ids"] == ["rag-001", "rag-002", "rag-003"]
    for metric in ("faithfulness", "answer_correctness"):
        for side in ("base", "candidate"):  # a score per answer, or a NaN counted with its reason
            scores = notes["scores"][metric][side]
            assert len(scores) == 3 and all(s is None or 0.0 <= s <= 1.0 for s in scores)
            assert notes["unscored"][metric][side] == sum(s is None for s in scores)
        if any(notes["unscored"][metric].values()):
            assert notes["errors"][metric], metric
    (tmp_path / "judged.json").write_text(json.dumps(judged))
    out = decide_eval_sets(prepared_dir, str(base), str(cand), judged_path=str(tmp_path / "judged.json"),
                           report_path=str(tmp_path / "report.md"), records_path=str(tmp_path / "records.json"))
    records = json.loads((tmp_path / "records.json").read_text())["data"]
    for metric in ("faithfulness", "answer_correctness"):  # every Ragas score is a record, NaN as None
        mine = [r for r in records if r[-1] == f"ragas_{metric}"]
        assert [(r[7], r[8]) for r in mine] == list(zip(notes["scores"][metric]["base"],
                                                        notes["scores"][metric]["candidate"], strict=True))
    gates = calibrate(labels["verdicts"], labels["truth"], 0.6).gates
    rows = {r["metric"]: r for r in out["rows"] if r["task"] == "travel-notes-rag"}
    assert set(rows) == {"exact_match,match", "ragas_faithfulness", "ragas_answer_correctness"}
    for metric in ("faithfulness", "answer_correctness"):
        row = rows[f"ragas_{metric}"]
        both = sum(b is not None and c is not None for b, c in zip(notes["scores"][metric]["base"],
                                                                   notes["scores"][metric]["candidate"], strict=True))
        assert row["gated"] == gates and (row["paired"] or {}).get("n", both) == both
    report = (tmp_path / "report.md").read_text()
    assert "Ragas on the rag sets" in report and "Ragas 0.4.3 with the judge judge at temperature 0" in report
    assert re.search(r"travel-notes-rag faithfulness: \d of 3 rows scored on both sides; not scored \(NaN\): "
                     r"\d base, \d candidate", report)
    # 3 rows cannot show a 0.02 margin on the exact-match rows: inconclusive, the verdict fails closed
    assert not out["passed"] and "travel-notes-rag" in out["reason"]


def test_readme_rows_are_valid_rows_of_their_form() -> None:
    """The README's one row of each form passes its form's schema, and its eval_sets example parses."""
    from shipyard.evaluation.eval_sets import validate_rows

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Your own eval sets", 1)[1].split("\n## ", 1)[0]
    example = next(line for line in section.splitlines() if line.startswith("eval_sets="))
    assert parse_eval_sets(example.removeprefix("eval_sets=")).sets[0].form == "qa"
    rows = [line for line in section.splitlines() if re.match(r"^(mcq|qa|chat|rag|rubric):\s+\{", line)]
    assert [line.split(":", 1)[0] for line in rows] == ["mcq", "qa", "chat", "rag", "rubric"]
    for line in rows:
        form, _, text = line.partition(":")
        assert validate_rows(form, [(1, json.loads(text))], f"README {form}")
