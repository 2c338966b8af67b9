"""The HTML reports are KFP ``HTML`` artifacts whose stored file and recorded URI end in ``.html``.

The real gates components (``candidate_gates``, ``select_champion``) run under kfp.local on the
report fixtures, tracked by the session's real MLflow server. kfp's ``Artifact.path`` setter moves
the URI, the executor output carries it and kfp.local (like the cluster's launcher, which uploads
from the executor output's URI and records it in MLMD) hands that URI on: the task folder holds
``slo_report.html`` and ``report_html.html``, the executor output's URI names them, and the step
runs in MLflow hold ``slo.html`` and ``candidates.html``.
"""

# no `from __future__ import annotations`: kfp reads the fixture component's annotations as types
import json
import uuid
from pathlib import Path

import report_fixtures as fx
from mlflow import MlflowClient
from mlflow_server import shared_server

from shipyard.tracking.pipeline_runs import start_tracking


def _uri(task_dir: Path, name: str) -> str:
    out = json.loads((task_dir / "executor_output.json").read_text())
    return out["artifacts"][name]["artifacts"][0]["uri"]


def test_html_reports_are_stored_and_recorded_with_html_names(tmp_path: Path, monkeypatch) -> None:
    import kfp.local
    from kfp import dsl
    from kfp.dsl import Artifact, Output

    from shipyard.components.gates.component import candidate_gates, select_champion

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    server = shared_server()
    experiment, kfp_run_id = f"html-names-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex[:8]
    start_tracking(server.url, experiment, "html-names", kfp_run_id)  # the parent run the steps nest under

    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def fixture(name: str, content: str, out: Output[Artifact]) -> None:
        import os

        os.makedirs(out.path, exist_ok=True)
        with open(os.path.join(out.path, name), "w") as fh:
            fh.write(content)

    def made(name: str, data: dict) -> "dsl.PipelineTask":
        return fixture(name=name, content=json.dumps(data))

    @dsl.pipeline(name="html-names")
    def pipeline(tracking_uri: str, experiment: str, kfp_run_id: str) -> None:
        base_eval = made("summary.json", fx.eval_summary(fx.BASE_SCORES, "ab"))
        cand_eval = made("summary.json", fx.eval_summary(fx.CAND_SCORES, "cd"))
        base_bench = made("results.json", fx.BASE_BENCH)
        cand_bench = made("results.json", fx.CAND_BENCH)
        with dsl.ParallelFor(["w8a8-int8"]) as recipe:
            judged = candidate_gates(recipe=recipe, base_eval=base_eval.output, candidate_eval=cand_eval.output,
                                     base_bench=base_bench.output, candidate_bench=cand_bench.output,
                                     thresholds=fx.THRESHOLDS, slo=fx.SLO, tracking_uri=tracking_uri,
                                     experiment=experiment, kfp_run_id=kfp_run_id)
        select_champion(candidates=dsl.Collected(judged.outputs["candidate"]), selection="",
                        tracking_uri=tracking_uri, experiment=experiment, kfp_run_id=kfp_run_id)

    kfp.local.init(runner=kfp.local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path))
    pipeline(tracking_uri=server.url, experiment=experiment, kfp_run_id=kfp_run_id)

    (gates,) = tmp_path.rglob("candidate-gates")
    (select,) = tmp_path.rglob("select-champion")
    for task_dir, name, heading in ((gates, "slo_report", "SLO gate: PASS"),
                                    (select, "report_html", "Candidates: champion w8a8-int8")):
        stored = task_dir / f"{name}.html"
        assert stored.is_file() and heading in stored.read_text(), sorted(p.name for p in task_dir.iterdir())
        assert not (task_dir / name).exists()  # nothing left under the old, extension-less name
        assert _uri(task_dir, name) == str(stored)  # the URI kfp.local hands on (the cluster records it in MLMD)

    client = MlflowClient(server.url)
    exp = client.get_experiment_by_name(experiment).experiment_id
    runs = {run.data.tags.get("shipyard.step"): run.info.run_id for run in client.search_runs([exp])}
    logged = {step: {a.path for a in client.list_artifacts(run)} for step, run in runs.items() if step}
    assert "slo.html" in logged["gates"] and "candidates.html" in logged["select"], logged
    assert all(path.endswith((".html", ".md", ".json")) for paths in logged.values() for path in paths), logged
