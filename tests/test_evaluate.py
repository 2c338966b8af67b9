"""The evaluate step: real lm-eval on the tiny model (hf in the compress runtime, openai through
vLLM in the vllm runtime), the results layout, the base-result cache and bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from shipyard.core.errors import ShipyardError
from shipyard.evaluation import tasks as TASKS
from shipyard.evaluation.config import SUITE_DIR, parse_eval_config
from shipyard.evaluation.lmeval import evaluate_model, evaluate_step
from shipyard.gates.accuracy import run_gate
from shipyard.runtimes.runtime import run_in_runtime, venv_python

SUITE_TASKS = ["shipyard_arithmetic_gen", "shipyard_arithmetic_mc", "shipyard_capitals_gen", "shipyard_capitals_mc",
               "shipyard_opposites_gen", "shipyard_opposites_mc", "shipyard_prose_ppl"]
SMALL = {"limit": 4, "tasks": ["shipyard_capitals_mc", "shipyard_prose_ppl"]}


def evaluate(model: Path, config: dict, out: Path, backend: str = "hf") -> dict:
    runtime = "compress" if backend == "hf" else "vllm"
    return run_in_runtime(runtime, evaluate_model, model_dir=str(model), eval_config=json.dumps(config),
                          out_dir=str(out), backend=backend)


@pytest.fixture(scope="module")
def eval_cache(tmp_path_factory: pytest.TempPathFactory):
    """A private shipyard cache for this module (the step's child processes inherit it)."""
    root = tmp_path_factory.mktemp("shipyard-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHIPYARD_CACHE", str(root))
        yield root


@pytest.fixture(scope="module")
def base_run(tiny_model: Path, eval_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """The whole offline suite on the tiny model, with samples: evaluated once for the module."""
    out = tmp_path_factory.mktemp("eval") / "base"
    return evaluate(tiny_model, {"limit": 4, "log_samples": True}, out), out


def test_hf_backend_evaluates_the_offline_suite(base_run: tuple[dict, Path], tiny_model: Path) -> None:
    summary, out = base_run
    assert sorted(summary["scores"]) == SUITE_TASKS
    assert summary["backend"] == "hf" and summary["cached"] is False
    assert summary["config"]["backend"] == "hf" and summary["config"]["limit"] == 4
    assert summary["n_samples"] == dict.fromkeys(SUITE_TASKS, 4)
    mc = summary["scores"]["shipyard_capitals_mc"]["acc,none"]
    assert 0.0 <= mc["value"] <= 1.0 and mc["stderr"] is not None and mc["higher_is_better"] is True
    assert summary["scores"]["shipyard_capitals_gen"]["exact_match,contains"]["filter"] == "contains"
    ppl = summary["scores"]["shipyard_prose_ppl"]
    assert ppl["word_perplexity,none"]["higher_is_better"] is False and ppl["word_perplexity,none"]["value"] > 1.0
    assert len(summary["config_hash"]) == 64
    assert summary["model_identity"]["files"] >= 3
    # results layout: shipyard's summary, lm-eval's raw JSON, samples per task
    assert json.loads((out / "summary.json").read_text()) == summary
    raw = json.loads((out / "lm_eval_results.json").read_text())
    assert raw["results"]["shipyard_capitals_mc"]["acc,none"] == mc["value"]
    assert "samples" not in raw
    assert sorted(p.stem for p in (out / "samples").iterdir()) == SUITE_TASKS
    rows = [json.loads(line) for line in (out / "samples" / "shipyard_capitals_gen.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["filter"] == "contains" for r in rows)


def test_contains_filter_scores_a_generation_that_contains_the_answer() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("suite_utils", SUITE_DIR / "utils.py")
    assert spec and spec.loader
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    docs = [{"answer": "Paris"}, {"answer": "Rome", "aliases": ["Roma"]}, {"answer": "Oslo"}]
    resps = [[" The capital is paris."], ["Roma, of course"], ["Stockholm"]]
    assert utils.contains_answer(resps, docs) == [["Paris"], ["Rome"], ["Stockholm"]]


def test_the_step_returns_its_mlflow_record(base_run: tuple[dict, Path], tiny_model: Path, eval_cache: Path,
                                            tmp_path: Path) -> None:
    """What the evaluate and measure wrappers log as it is: the figures, the table, summary.json and the samples
    (the base's cached result here: no second evaluation)."""
    out = run_in_runtime("compress", evaluate_step, model_dir=str(tiny_model), backend="hf",
                         eval_config=json.dumps({"limit": 4, "log_samples": True}), out_dir=str(tmp_path / "ev"),
                         table_path=str(tmp_path / "table.md"))
    assert out["metadata"]["cached"] is True and out["log"]["metrics"] == out["metrics"] and out["metrics"]
    assert out["log"]["artifacts"] == {"table.md": str(tmp_path / "table.md"), "summary.json": f"{tmp_path}/ev/summary.json",
                                       "samples": f"{tmp_path}/ev/samples"}
    assert all(Path(p).exists() for p in out["log"]["artifacts"].values())


def test_base_result_is_cached_and_reused(base_run: tuple[dict, Path], tiny_model: Path, eval_cache: Path,
                                          tmp_path: Path) -> None:
    first, _ = base_run
    entry = eval_cache / "eval" / first["cache_key"]
    assert (entry / "summary.json").is_file()
    again = evaluate(tiny_model, {"limit": 4, "log_samples": True}, tmp_path / "again")
    assert again["cached"] is True
    assert again["evaluated_at"] == first["evaluated_at"]  # not re-run: the first run's record
    assert again["scores"] == first["scores"] and again["config_hash"] == first["config_hash"]
    assert (tmp_path / "again" / "lm_eval_results.json").is_file()
    # "cache": false forces a fresh run; it is not part of the config hash
    fresh = evaluate(tiny_model, {"limit": 4, "log_samples": True, "cache": False}, tmp_path / "fresh")
    assert fresh["cached"] is False and fresh["config_hash"] == first["config_hash"]
    assert fresh["evaluated_at"] >= first["evaluated_at"]
    assert fresh["scores"] == first["scores"]  # deterministic on CPU
    # different model content -> different identity -> no cache hit
    other = tmp_path / "other-model"
    shutil.copytree(tiny_model, other)
    (other / "shipyard-model.json").write_text(json.dumps({"source": "edited copy"}))
    changed = evaluate(other, {"limit": 4, "log_samples": True}, tmp_path / "changed")
    assert changed["cached"] is False
    assert changed["model_identity"]["sha256"] != first["model_identity"]["sha256"]


def test_gate_on_real_results(base_run: tuple[dict, Path], tmp_path: Path) -> None:
    """The same real results on both sides: the default rule (paired non-inferiority) cannot show a
    loss under 0.02 with 4 questions per task and says so (fails closed); the recovery rule passes
    them, and fails them against an impossible threshold."""
    _, base_dir = base_run
    default = run_gate(str(base_dir), str(base_dir), "", str(tmp_path / "default.md"))
    assert default["passed"] is False and "inconclusive: 4 questions cannot show a loss under 0.02" in default["reason"]
    decisions = {(r["task"], r["metric"]): r["decision"] for r in default["rows"]}
    assert decisions[("shipyard_capitals_gen", "exact_match,contains")] == "inconclusive"
    assert decisions[("shipyard_prose_ppl", "word_perplexity,none")] == "recovered"  # no per-sample values
    passed = run_gate(str(base_dir), str(base_dir), json.dumps({"rule": "recovery"}), str(tmp_path / "pass.md"))
    assert passed["passed"] is True, passed["reason"]
    failed = run_gate(str(base_dir), str(base_dir), json.dumps({"rule": "recovery", "min_recovery": 1.5}),
                      str(tmp_path / "fail.md"))
    assert failed["passed"] is False
    assert "recovery 1.0000 < 1.5" in failed["reason"]
    assert "| shipyard_prose_ppl | word_perplexity ↓ |" in (tmp_path / "fail.md").read_text()


def test_different_config_results_are_refused_by_the_gate(base_run: tuple[dict, Path], tiny_model: Path,
                                                          tmp_path: Path) -> None:
    _, base_dir = base_run
    other = evaluate(tiny_model, {"limit": 3, "tasks": ["shipyard_capitals_mc"]}, tmp_path / "other")
    assert other["config_hash"] != json.loads((base_dir / "summary.json").read_text())["config_hash"]
    out = run_gate(str(base_dir), str(tmp_path / "other"), "")
    assert out["passed"] is False
    assert "evaluated differently" in out["reason"] and "limit" in out["reason"]


def test_user_task_folder(tiny_model: Path, eval_cache: Path, tmp_path: Path) -> None:
    tasks = tmp_path / "my-tasks"
    tasks.mkdir()
    shutil.copy(SUITE_DIR / "utils.py", tasks / "utils.py")
    rows = [{"question": f"Is {n} even?", "choices": ["yes", "no"], "label": n % 2} for n in range(6)]
    (tasks / "even.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tasks / "even.yaml").write_text(
        "task: my_even\ncustom_dataset: !function utils.load_jsonl\ndataset_kwargs:\n  data_file: even.jsonl\n"
        "test_split: test\noutput_type: multiple_choice\ndoc_to_text: \"Question: {{question}}\\nAnswer:\"\n"
        "doc_to_choice: \"{{choices}}\"\ndoc_to_target: label\nmetric_list:\n  - metric: acc\n"
    )
    summary = evaluate(tiny_model, {"tasks": ["my_even", "shipyard_capitals_mc"], "limit": 3, "task_dir": str(tasks)},
                       tmp_path / "out")
    assert sorted(summary["scores"]) == ["my_even", "shipyard_capitals_mc"]
    assert summary["n_samples"]["my_even"] == 3
    # the task folder's content is part of the config hash
    before = parse_eval_config({"task_dir": str(tasks)}).config_hash()
    (tasks / "even.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:4]))
    assert parse_eval_config({"task_dir": str(tasks)}).config_hash() != before


# -- bad input: one line naming the field, and no half-written results folder --------------


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"limit": 0}, "eval_config.limit: must be > 0, got 0"),
        ({"limit": -3}, "eval_config.limit: must be > 0"),
        ({"tasks": []}, "eval_config.tasks: must be a non-empty list"),
        ({"num_fewshot": -1}, "eval_config.num_fewshot: must be a whole number >= 0"),
        ({"batch_size": 0}, "eval_config.batch_size"),
        ({"backend": "tgi"}, "eval_config.backend: unknown backend 'tgi'"),
        ({"task_dir": "/nonexistent/tasks"}, "eval_config.task_dir: /nonexistent/tasks is not a folder"),
        ({"taskz": ["x"]}, "eval_config: unknown key(s) ['taskz']"),
        ("{oops", "eval_config: is not valid JSON"),
    ],
)
def test_bad_config_is_one_line(config: dict | str, message: str) -> None:
    with pytest.raises(ShipyardError) as err:
        parse_eval_config(config if isinstance(config, str) else json.dumps(config))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_backend_mismatch_is_refused() -> None:
    with pytest.raises(ShipyardError, match="asks for backend 'openai' but this step runs 'hf'"):
        parse_eval_config('{"backend": "openai"}').with_backend("hf")


def test_unknown_task_names_the_task_and_lists_local_ones(tiny_model: Path, eval_cache: Path, tmp_path: Path) -> None:
    with pytest.raises(ShipyardError) as err:
        evaluate(tiny_model, {"tasks": ["shipyard_capitols_mc"], "limit": 2}, tmp_path / "out")
    text = str(err.value)
    assert text.startswith("eval_config.tasks: unknown task 'shipyard_capitols_mc'")
    assert "did you mean ['shipyard_capitals_mc'" in text and "shipyard_offline" in text
    assert "\n" not in text
    assert not (tmp_path / "out").exists()


def test_invalid_task_yaml_is_one_line(tiny_model: Path, eval_cache: Path, tmp_path: Path) -> None:
    tasks = tmp_path / "bad-tasks"
    tasks.mkdir()
    (tasks / "broken.yaml").write_text("task: broken\ndoc_to_text: [unclosed\n")
    with pytest.raises(ShipyardError) as err:
        evaluate(tiny_model, {"tasks": ["shipyard_capitals_mc"], "limit": 2, "task_dir": str(tasks)}, tmp_path / "out")
    assert str(err.value).startswith("eval_config.task_dir: broken.yaml is not a valid task YAML")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()
    (tasks / "broken.yaml").write_text("task: broken\ncustom_dataset: !function helpers.load\n")
    with pytest.raises(ShipyardError, match="references helpers.load but helpers.py is missing"):
        evaluate(tiny_model, {"tasks": ["broken"], "limit": 2, "task_dir": str(tasks)}, tmp_path / "out")


def _check_task_folders(*folders: Path | None) -> list[list[str] | str]:
    """``check_task_folder`` on each folder (None: the offline suite) in one compress-runtime
    interpreter (lm-eval's YAML loader): its task names, or its one-line error."""
    script = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        from shipyard.core.errors import ShipyardError
        from shipyard.evaluation.config import SUITE_DIR
        from {TASKS.__name__} import check_task_folder
        out = []
        for arg in sys.argv[1:]:
            try:
                out.append(check_task_folder(SUITE_DIR if arg == "suite" else Path(arg)))
            except ShipyardError as err:
                out.append(str(err))
        print(json.dumps(out))
    """)
    args = ["suite" if f is None else str(f) for f in folders]
    repo = str(Path(__file__).resolve().parents[1])
    proc = subprocess.run([str(venv_python("compress")), "-c", script, *args], capture_output=True, text=True,
                          timeout=120, check=True, env=dict(os.environ, PYTHONPATH=repo))
    return json.loads(proc.stdout.splitlines()[-1])


def _folder(root: Path, files: dict[str, str]) -> Path:
    root.mkdir()
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_task_folders_are_checked_as_lm_eval_reads_them(tmp_path: Path) -> None:
    """Names of tasks, groups and tags (nested folders, .yml too, __pycache__ skipped); a folder
    without YAML, a YAML without a task or group, and a ``!function`` whose module is missing, deep
    in a filter list, are each one line naming the file."""
    named = _folder(tmp_path / "named", {
        "a.yaml": "task: my_a\ntag: [my_tag, 7]\n",
        "sub/b.yml": "group: my_group\ntask: [my_a]\ntag: my_other_tag\n",
        "sub/__pycache__/junk.yaml": "not: [valid\n"})
    empty = _folder(tmp_path / "empty", {"README.md": "no tasks here\n"})
    nameless = _folder(tmp_path / "nameless", {"c.yaml": "dataset_path: json\n"})
    filt = ("task: my_f\nfilter_list:\n  - name: pick\n    filter:\n      - function: custom\n"
            "        filter_fn: !function helpers.pick\n")
    missing = _folder(tmp_path / "missing", {"f.yaml": filt})
    present = _folder(tmp_path / "present", {"f.yaml": filt, "helpers.py": "def pick(r, d):\n    return r\n"})
    suite, *results = _check_task_folders(None, named, empty, nameless, missing, present)
    assert {"shipyard_capitals_mc", "shipyard_prose_ppl", "shipyard_offline"} <= set(suite)
    assert results[0] == ["my_a", "my_group", "my_other_tag", "my_tag"]
    assert results[1] == f"eval_config.task_dir: {empty} holds no task YAML (*.yaml) (fix: add lm-eval task YAMLs to the folder)"
    assert results[2].startswith("eval_config.task_dir: c.yaml names no task or group")
    assert results[3].startswith("eval_config.task_dir: f.yaml references helpers.pick but helpers.py is missing")
    assert results[4] == ["my_f"]


def test_a_function_lm_eval_can_import_is_not_refused(tmp_path: Path) -> None:
    """lm-eval reads ``!function pkg.mod.fn`` as ``pkg/mod.py`` beside the YAML, else imports
    ``pkg.mod`` (an installed module); a check that looked only for ``pkg.mod.py`` refused both, and
    took any string starting with the folder's path (an absolute data file) for a function."""
    dotted = _folder(tmp_path / "dotted", {"d.yaml": "task: my_d\nprocess_docs: !function helpers.text.pick\n",
                                           "helpers/text.py": "def pick(docs):\n    return docs\n"})
    installed = _folder(tmp_path / "installed", {"i.yaml": "task: my_i\nprocess_docs: !function json.loads\n"})
    absent = _folder(tmp_path / "absent", {"x.yaml": "task: my_x\nprocess_docs: !function nowhere.at_all.fn\n"})
    # a plain path beside the YAML is no function reference, nor is one in a comment
    plain = _folder(tmp_path / "plain", {"p.yaml": f"task: my_p\ndataset_kwargs:\n  data_files: {tmp_path}/plain/"
                                                   "data.jsonl\n# was: !function gone.fn\n"})
    assert _check_task_folders(dotted, installed, plain, absent) == [
        ["my_d"], ["my_i"], ["my_p"],
        "eval_config.task_dir: x.yaml references nowhere.at_all.fn but nowhere/at_all.py is missing "
        "(fix: add nowhere/at_all.py next to x.yaml)"]


def test_model_folder_without_config_is_refused(tmp_path: Path, eval_cache: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ShipyardError, match=r"^model: .*has no config.json"):
        evaluate(tmp_path / "empty", {"limit": 2}, tmp_path / "out")


@pytest.mark.slow
def test_openai_backend_server_that_never_gets_healthy(tiny_model: Path, eval_cache: Path, tmp_path: Path,
                                                       monkeypatch) -> None:
    broken = tmp_path / "broken-model"
    shutil.copytree(tiny_model, broken)
    for weights in broken.glob("*.safetensors"):
        weights.write_bytes(b"not a safetensors file")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    with pytest.raises(ShipyardError) as err:
        evaluate(broken, {"limit": 2, "tasks": ["shipyard_capitals_mc"]}, tmp_path / "out", "openai")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()
