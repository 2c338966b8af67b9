"""The HTML reports are KFP ``HTML`` artifacts whose stored file and recorded URI end in ``.html``,
and every ``Output[Markdown]`` report's ends in ``.md``.

The real gates components (``candidate_gates``, ``select_champion``) run under kfp.local on the
report fixtures, tracked by the session's real MLflow server. kfp's ``Artifact.path`` setter moves
the URI, the executor output carries it and kfp.local (like the cluster's launcher, which uploads
from the executor output's URI and records it in MLMD) hands that URI on: the task folder holds
``slo_report.html`` and ``report_html.html``, the executor output's URI names them, and the step
runs in MLflow hold ``slo.html`` and ``candidates.html``. The gates run carries every verdict as a
``shipyard.gate.*`` tag, the safety gate's included (the local run's scan: 4 attacks per model).
The select step's record names the base model from its ``base_model_uri`` input and the base
model artifact's metadata (the pinned URI resolve-model records).
"""

# no `from __future__ import annotations`: kfp reads the fixture component's annotations as types
import ast
import json
import uuid
from pathlib import Path

import report_fixtures as fx
from mlflow import MlflowClient
from mlflow_server import shared_server

from shipyard.tracking.pipeline_runs import start_tracking

ROOT = Path(__file__).resolve().parents[1]
PI = "promptinject.HijackHateHumans"
SAFETY = {"probes": [PI], "max_prompts": 4, "max_tokens": 32, "allow_inconclusive": True}


def _scan(hits: int, attempts: int = 4) -> dict:
    """A ``safety.json`` (shipyard.evaluation.garak_scan) of one promptinject probe."""
    from shipyard.evaluation.garak_scan import SCHEMA, safety_config

    stats = {"attempts": attempts, "hits": hits, "asr": hits / attempts}
    return {"schema": SCHEMA, "model": "m", "config": safety_config(SAFETY), "seconds": 1.0, "garak_version": "0.17.1",
            "missing_probes": [], "families": {"promptinject": {"family": "promptinject", "probes": [PI], **stats}},
            "probes": {PI: {"probe": PI, "family": "promptinject", "errors": 0, "detectors": {}, "hit_prompts": [],
                            **stats}}}


def _uri(task_dir: Path, name: str) -> str:
    out = json.loads((task_dir / "executor_output.json").read_text())
    return out["artifacts"][name]["artifacts"][0]["uri"]


def test_reports_are_stored_and_recorded_with_html_and_md_names(tmp_path: Path, monkeypatch) -> None:
    import kfp.local
    from kfp import dsl
    from kfp.dsl import Artifact, Model, Output

    from shipyard.components.gates.component import candidate_gates, select_champion

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    server = shared_server()
    experiment, kfp_run_id = f"html-names-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex[:8]
    start_tracking(server.url, experiment, "html-names", kfp_run_id)  # the parent run the steps nest under

    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def fixture(files: str, out: Output[Artifact]) -> None:
        import json
        import os

        for name, content in json.loads(files).items():
            os.makedirs(os.path.dirname(os.path.join(out.path, name)), exist_ok=True)
            with open(os.path.join(out.path, name), "w") as fh:
                fh.write(content)

    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def base_model(model: Output[Model]) -> None:  # what resolve-model hands on: the pinned URI in its metadata
        import os

        os.makedirs(model.path, exist_ok=True)
        model.metadata.update({"uri": "hf://org/base@" + "a" * 40, "fingerprint": "hf:" + "a" * 40})

    def made(name: str, data: dict, scan: dict | None = None) -> "dsl.PipelineTask":
        files = {name: json.dumps(data), **({"safety/safety.json": json.dumps(scan)} if scan else {})}
        return fixture(files=json.dumps(files))

    @dsl.pipeline(name="html-names")
    def pipeline(tracking_uri: str, experiment: str, kfp_run_id: str) -> None:
        base_eval = made("summary.json", fx.eval_summary(fx.BASE_SCORES, "ab"))
        cand_eval = made("summary.json", fx.eval_summary(fx.CAND_SCORES, "cd"))
        base_bench = made("results.json", fx.BASE_BENCH, _scan(0))
        cand_bench = made("results.json", fx.CAND_BENCH, _scan(0))
        with dsl.ParallelFor(["w8a8-int8"]) as recipe:
            judged = candidate_gates(recipe=recipe, base_eval=base_eval.output, candidate_eval=cand_eval.output,
                                     base_bench=base_bench.output, candidate_bench=cand_bench.output,
                                     thresholds=fx.THRESHOLDS, slo=fx.SLO, tracking_uri=tracking_uri,
                                     experiment=experiment, kfp_run_id=kfp_run_id, safety=json.dumps(SAFETY))
        select_champion(candidates=dsl.Collected(judged.outputs["candidate"]), selection="",
                        base_model=base_model().output, base_model_uri="hf://org/base",
                        tracking_uri=tracking_uri, experiment=experiment, kfp_run_id=kfp_run_id)

    kfp.local.init(runner=kfp.local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path))
    pipeline(tracking_uri=server.url, experiment=experiment, kfp_run_id=kfp_run_id)

    (gates,) = tmp_path.rglob("candidate-gates")
    (select,) = tmp_path.rglob("select-champion")
    for task_dir, name, heading in ((gates, "slo_report.html", "SLO gate: PASS"),
                                    (select, "report_html.html", "Candidates: champion w8a8-int8"),
                                    (gates, "accuracy_report.md", "Accuracy gate: "),
                                    (gates, "safety_report.md", "Safety gate"),
                                    (select, "report.md", "Candidates: champion w8a8-int8")):
        stored = task_dir / name
        name = name.rsplit(".", 1)[0]
        assert stored.is_file() and heading in stored.read_text(), sorted(p.name for p in task_dir.iterdir())
        assert not (task_dir / name).exists()  # nothing left under the old, extension-less name
        assert _uri(task_dir, name) == str(stored)  # the URI kfp.local hands on (the cluster records it in MLMD)
    # the record names the base as the user gave it and as resolve-model's metadata pinned it
    assert json.loads((select / "decision" / "selection.json").read_text())["base_model"] == {
        "uri": "hf://org/base", "pinned_uri": "hf://org/base@" + "a" * 40, "fingerprint": "hf:" + "a" * 40}

    client = MlflowClient(server.url)
    exp = client.get_experiment_by_name(experiment).experiment_id
    runs = {run.data.tags.get("shipyard.step"): run.info.run_id for run in client.search_runs([exp])}
    logged = {step: {a.path for a in client.list_artifacts(run)} for step, run in runs.items() if step}
    assert "slo.html" in logged["gates"] and "candidates.html" in logged["select"], logged
    assert all(path.endswith((".html", ".md", ".json")) for paths in logged.values() for path in paths), logged
    # every verdict is a tag of the gates run, the safety gate's with its caveat (4 attacks show nothing)
    gates_run = client.get_run(runs["gates"])
    tags, metrics = gates_run.data.tags, gates_run.data.metrics
    assert tags["shipyard.gate.accuracy"].startswith("pass") and tags["shipyard.gate.slo"] == "pass"
    assert tags["shipyard.gate.safety"] == "pass (inconclusive on promptinject, allowed; 4 attempts < min_attempts 30)"
    assert metrics["safety_passed"] == 1.0 and metrics["safety.promptinject.attempts"] == 4.0
    assert metrics["safety.promptinject.asr_diff_upper"] == 0.4899 and "safety.md" in logged["gates"]


def _markdown_outputs(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in fn.args.args if a.annotation is not None and ast.unparse(a.annotation) == "Output[Markdown]"]


def test_every_markdown_report_is_named_md_before_it_is_written() -> None:
    """Each step wrapper's ``Output[Markdown]`` goes through ``name_output(..., ".md")`` before
    anything else touches it, so the stored object (KFP, the run folder) and its recorded URI end
    in ``.md``: the test above runs two of the wrappers under kfp.local; this one reads them all."""
    seen = []
    for path in sorted((ROOT / "components").glob("*/component.py")):
        for fn in ast.parse(path.read_text()).body:
            if not isinstance(fn, ast.FunctionDef):
                continue
            for arg in _markdown_outputs(fn):
                seen.append(f"{path.parent.name}.{fn.name}.{arg}")
                uses = sorted((node.lineno, node.col_offset, node) for node in ast.walk(fn)
                              if isinstance(node, ast.Name) and node.id == arg)
                assert uses, f"{seen[-1]} is never written"
                first = uses[0][2]
                named = [call for call in ast.walk(fn) if isinstance(call, ast.Call)
                         and ast.unparse(call) == f"name_output({arg}, '.md')"]
                assert named and named[0].args[0] is first, f"{seen[-1]}: name_output({arg}, '.md') must come first"
    assert len(seen) >= 12, seen  # compress, measure (2), benchmark, evaluate (2), gates (3), package (2), track, deploy (2)
