"""KFP wrappers of the track step (runtime: base). Logic: ``track.py`` and ``promote.py``.

Every wrapper takes ``tracking_uri``: an MLflow server URL, or empty for the KFP MLflow
plugin's endpoint (``KFP_MLFLOW_CONFIG``), else ``MLFLOW_TRACKING_URI``, else a local file
store ``mlruns`` in the run's work dir. Pass ``start_tracking``'s resolved ``tracking_uri``
output to the later steps so they all write to the same place.
"""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Input, Markdown, Metrics, Output

from shipyard.runtimes import runtime_image


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def start_tracking(
    tracking_uri: str,
    experiment: str,
    pipeline_name: str,
    kfp_run_id: str,
    params_json: str,
    tags_json: str,
) -> NamedTuple("Outputs", [("parent_run_id", str), ("tracking_uri", str), ("run_url", str)]):
    """Open the MLflow parent run of this pipeline run (nested under KFP's MLflow run if any).

    Args:
        tracking_uri: MLflow server URL; empty = KFP plugin endpoint, MLFLOW_TRACKING_URI or ./mlruns.
        experiment: MLflow experiment (ignored under the KFP MLflow plugin, which chose one).
        pipeline_name: Recorded as tag shipyard.pipeline.
        kfp_run_id: KFP run id (dsl.PIPELINE_JOB_ID_PLACEHOLDER); a retried step reuses the run.
        params_json: The pipeline's parameters as a JSON object (model URI, recipe, eval config...).
        tags_json: Extra tags as a JSON object (image digests...).
    """
    from collections import namedtuple

    from shipyard.runtimes import call_step

    out = call_step("base", "shipyard.components.track.track:start_tracking", tracking_uri=tracking_uri,
                    experiment=experiment, pipeline_name=pipeline_name, kfp_run_id=kfp_run_id,
                    params_json=params_json, tags_json=tags_json)
    print(f"MLflow run: {out['run_url']}")
    return namedtuple("Outputs", ["parent_run_id", "tracking_uri", "run_url"])(
        out["parent_run_id"], out["tracking_uri"], out["run_url"])


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def track_step(
    tracking_uri: str,
    parent_run_id: str,
    step: str,
    params_json: str,
    tags_json: str,
    record: Output[Artifact],
    metrics: Input[Metrics] = None,
    files: Input[Artifact] = None,
    report: Input[Artifact] = None,
    kfp_run_id: str = "",
    experiment: str = "",
) -> str:
    """Log one pipeline step as a nested MLflow run: params, metrics, tags, files; returns its run id.

    Args:
        tracking_uri: start_tracking's tracking_uri output.
        parent_run_id: start_tracking's parent_run_id output.
        step: Name of the step run (compress, evaluate, benchmark, package, deploy...).
        params_json: The step's parameters as a JSON object.
        tags_json: Tags as a JSON object (OCI digest, image digest...).
        record: What was logged (tracking_payload.json), kept even when MLflow is unreachable.
        metrics: The step's KFP Metrics (optional).
        files: The step's main output (file or folder: eval results, guidellm JSON, recipe...; optional).
            Figures in an evaluate summary.json / lm-eval JSON / metrics JSON are logged as metrics.
        report: The step's Markdown/HTML report or rendered manifest (optional).
        kfp_run_id: With an empty parent_run_id, find the parent run by this KFP run id (steps in loops).
        experiment: The experiment to look in with kfp_run_id.
    """
    from shipyard.runtimes import call_step

    figures = dict(metrics.metadata) if metrics is not None else {}
    paths = {}
    if files is not None:
        paths["files"] = files.path
    if report is not None:
        paths["report"] = report.path
    out = call_step("base", "shipyard.components.track.track:track_step", tracking_uri=tracking_uri,
                    parent_run_id=parent_run_id, step=step, out_dir=record.path, params_json=params_json,
                    tags_json=tags_json, metrics=figures, files=paths, kfp_run_id=kfp_run_id, experiment=experiment)
    return out["run_id"]


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def finish_tracking(tracking_uri: str, parent_run_id: str, status: str, tags_json: str) -> str:
    """Close the pipeline's MLflow run (FINISHED, FAILED or KILLED) with final tags.

    Args:
        tracking_uri: start_tracking's tracking_uri output.
        parent_run_id: start_tracking's parent_run_id output.
        status: FINISHED, FAILED or KILLED.
        tags_json: Final tags as a JSON object (gate decision, deployed URL...).
    """
    from shipyard.runtimes import call_step

    return call_step("base", "shipyard.components.track.track:finish_tracking", tracking_uri=tracking_uri,
                     parent_run_id=parent_run_id, status=status, tags_json=tags_json)


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def run_parameters(
    model_uri: str,
    recipes: list,
    eval_backend: str,
    eval_config: str,
    accuracy_thresholds: str,
    benchmark_config: str,
    slo: str,
    deploy_config: str,
    candidate_uri: str,
) -> str:
    """The pipeline parameters MLflow records on the parent run, as one JSON object.

    (A pipeline cannot build a JSON string from its parameters itself; this step does.)
    JSON-valued parameters are kept as given; an empty value means the step's defaults.
    """
    import json

    params = {
        "model_uri": model_uri,
        "recipes": ",".join(str(r) for r in recipes),
        "eval_backend": eval_backend,
        "eval_config": eval_config,
        "accuracy_thresholds": accuracy_thresholds,
        "benchmark_config": benchmark_config,
        "slo": slo,
        "deploy_config": deploy_config,
        "candidate_uri": candidate_uri,
    }
    return json.dumps({k: v for k, v in params.items() if v})


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def close_tracking(tracking_uri: str, experiment: str, kfp_run_id: str, status: dsl.PipelineTaskFinalStatus) -> str:
    """Exit handler: close the pipeline's MLflow run, FINISHED or FAILED with KFP's final state.

    An exit task may not consume other tasks' outputs, so the parent run is found by its
    shipyard.kfp_run_id tag (written by start_tracking).

    Args:
        tracking_uri: The pipeline's tracking_uri parameter (resolved the same way start_tracking does).
        experiment: The pipeline's experiment parameter.
        kfp_run_id: dsl.PIPELINE_JOB_ID_PLACEHOLDER.
        status: Filled in by KFP: the pipeline's final state and error.
    """
    from shipyard.runtimes import call_step

    return call_step("base", "shipyard.components.track.track:close_pipeline_run", tracking_uri=tracking_uri,
                     experiment=experiment, kfp_run_id=kfp_run_id, state=status.state,
                     error=status.error_message or "")


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def register_model(
    tracking_uri: str,
    model_name: str,
    source_uri: str,
    parent_run_id: str,
    tags_json: str,
    kfp_run_id: str = "",
    experiment: str = "",
) -> NamedTuple("Outputs", [("version", str)]):
    """Register a packaged candidate as a new model version with alias 'candidate'.

    Args:
        tracking_uri: start_tracking's tracking_uri output.
        model_name: Registered model name.
        source_uri: Where the packaged model is: oci://...@sha256:... or s3://...
        parent_run_id: The pipeline's MLflow run (lineage); may be empty.
        tags_json: Lineage tags as a JSON object (base model, recipe, OCI digest...).
    """
    from collections import namedtuple

    from shipyard.runtimes import call_step

    out = call_step("base", "shipyard.components.track.track:register_model", tracking_uri=tracking_uri,
                    model_name=model_name, source_uri=source_uri, parent_run_id=parent_run_id, tags_json=tags_json,
                    kfp_run_id=kfp_run_id, experiment=experiment)
    return namedtuple("Outputs", ["version"])(out["version"])


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def promotion_gate(
    tracking_uri: str,
    model_name: str,
    candidate_version: str,
    parent_run_id: str,
    slos_json: str,
    accuracy_metrics: str,
    min_recovery: float,
    champion_tolerance: float,
    candidate_eval: Input[Artifact],
    candidate_bench: Input[Artifact],
    base_eval: Input[Artifact],
    decision: Output[Artifact],
    decision_report: Output[Markdown],
    kfp_run_id: str = "",
    experiment: str = "",
) -> bool:
    """Champion/challenger gate: the candidate vs the base model and vs the 'production' version.

    Promotes only if no accuracy metric is worse (recovery >= min_recovery vs base; not below
    production's recorded value minus champion_tolerance) and every SLO holds. Fail-closed:
    missing figures refuse, with the reason.

    Args:
        tracking_uri: start_tracking's tracking_uri output.
        model_name: Registered model name.
        candidate_version: register_model's version output.
        parent_run_id: The pipeline's MLflow run (the gate logs a nested run); may be empty.
        slos_json: Bounds on benchmark figures, e.g. {"ttft_p95_ms": {"max": 500}}.
        accuracy_metrics: Comma-separated metrics to compare (empty: all eval figures; prefix - = lower is better).
        min_recovery: Fraction of the base score the candidate must keep (e.g. 0.99).
        champion_tolerance: Absolute drop allowed vs production (0 = not worse).
        candidate_eval: The candidate's eval output (Metrics, evaluate folder or lm-eval JSON).
        candidate_bench: The candidate's benchmark output (Metrics or JSON of figures).
        base_eval: The base model's eval output.
        decision: decision.json, decision.md, decision.html; metadata: passed, reason, champion_version.
        decision_report: The decision as Markdown.

    Returns:
        True to promote. A single bool so that dsl.If can branch on it (also under kfp.local);
        the reason is in the decision artifact's metadata, the report and the step log.
    """
    from shipyard.components.track.track import read_figures
    from shipyard.runtimes import call_step

    cand = read_figures(candidate_eval.path, candidate_eval.metadata)
    base = read_figures(base_eval.path, base_eval.metadata)
    bench = read_figures(candidate_bench.path, candidate_bench.metadata)
    out = call_step("base", "shipyard.components.track.promote:run_gate", tracking_uri=tracking_uri,
                    model_name=model_name, candidate_version=candidate_version,
                    candidate_eval=cand["metrics"], candidate_bench=bench["metrics"], base_eval=base["metrics"],
                    out_dir=decision.path, parent_run_id=parent_run_id, accuracy_metrics=accuracy_metrics,
                    slos=slos_json, min_recovery=min_recovery, champion_tolerance=champion_tolerance,
                    lower_better=sorted(set(cand["lower_better"]) | set(base["lower_better"])),
                    kfp_run_id=kfp_run_id, experiment=experiment)
    with open(f"{decision.path}/decision.md", encoding="utf-8") as src, \
            open(decision_report.path, "w", encoding="utf-8") as dst:
        dst.write(src.read())
    decision.metadata.update({"passed": out["passed"], "reason": out["reason"],
                              "champion_version": out["champion_version"]})
    print(("PASSED: " if out["passed"] else "REFUSED: ") + out["reason"])
    return bool(out["passed"])


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def set_production(tracking_uri: str, model_name: str, version: str, gate_passed: bool = True) -> str:
    """Give 'production' to a version whose deployment is Ready; the old one becomes 'previous'.

    Args:
        tracking_uri: start_tracking's tracking_uri output.
        model_name: Registered model name.
        version: The deployed version.
        gate_passed: promotion_gate's passed output; False leaves the aliases as they are (fail-closed).

    Returns the aliases afterwards as JSON.
    """
    import json

    from shipyard.runtimes import call_step

    if not gate_passed:
        print(f"promotion gate refused {model_name} v{version}: 'production' unchanged")
        return json.dumps(call_step("base", "shipyard.components.track.track:get_aliases",
                                    tracking_uri=tracking_uri, model_name=model_name))
    return json.dumps(call_step("base", "shipyard.components.track.track:promote_alias", tracking_uri=tracking_uri,
                                model_name=model_name, version=version))


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def rollback_production(tracking_uri: str, model_name: str, reason: str) -> str:
    """Move 'production' back to the version before it (after a deployment rollback).

    Args:
        tracking_uri: start_tracking's tracking_uri output.
        model_name: Registered model name.
        reason: Why (recorded on the rolled-back version).

    Returns the aliases afterwards as JSON.
    """
    import json

    from shipyard.runtimes import call_step

    return json.dumps(call_step("base", "shipyard.components.track.track:rollback_alias", tracking_uri=tracking_uri,
                                model_name=model_name, reason=reason))


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def set_alias(tracking_uri: str, model_name: str, alias: str, version: str) -> str:
    """Point any alias at a version; returns all aliases as JSON.

    Args:
        tracking_uri: start_tracking's tracking_uri output.
        model_name: Registered model name.
        alias: The alias (e.g. candidate).
        version: The version.
    """
    import json

    from shipyard.runtimes import call_step

    return json.dumps(call_step("base", "shipyard.components.track.track:set_alias", tracking_uri=tracking_uri,
                                model_name=model_name, alias=alias, version=version))


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def register_champion(
    model_name: str,
    source_uri: str,
    digest: str,
    base_model_uri: str,
    champion_tolerance: float,
    selection: Input[Artifact],
    decision: Output[Markdown],
    tracking_uri: str = "",
    experiment: str = "",
    kfp_run_id: str = "",
) -> bool:
    """Register the packaged champion as a model version (alias 'candidate') and gate it against
    the current 'production' version (champion/challenger).

    The version's tags and description carry the recipe, base model, OCI digest, the selection
    reason and the eval/benchmark headline; its accuracy figures are recorded on it for the
    next run's gate. Each accuracy metric may be at most champion_tolerance worse than
    production's; with no production version yet the champion passes.

    Args:
        model_name: Registered model name.
        source_uri: The package step's oci://...@sha256:... URI.
        digest: The package step's manifest digest.
        base_model_uri: The base model's URI (lineage).
        champion_tolerance: How much worse than production an accuracy metric may be (absolute).
        selection: select_champion's decision (selection.json with the champion's record).
        decision: The gate's report; metadata: version, passed, reason, recipe, headline.
        tracking_uri: MLflow tracking URI (the pipeline parameter).
        experiment: MLflow experiment.
        kfp_run_id: dsl.PIPELINE_JOB_ID_PLACEHOLDER.

    Returns True to deploy and promote (a single bool so dsl.If resolves under kfp.local).
    """
    import json

    from shipyard.components.track.steprun import StepRun
    from shipyard.runtimes import call_step

    with StepRun("register", "", tracking_uri=tracking_uri, experiment=experiment, kfp_run_id=kfp_run_id,
                 params={"model_name": model_name, "source_uri": source_uri,
                         "champion_tolerance": champion_tolerance}) as run:
        out = call_step("base", "shipyard.components.track.champion:register_champion", tracking_uri=tracking_uri,
                        experiment=experiment, kfp_run_id=kfp_run_id, model_name=model_name, source_uri=source_uri,
                        digest=digest, selection_dir=selection.path, base_model_uri=base_model_uri,
                        champion_tolerance=champion_tolerance, report_path=decision.path)
        decision.metadata.update({"version": out["version"], "passed": out["passed"], "reason": out["reason"],
                                  "recipe": out["recipe"], "headline": json.dumps(out["headline"])})
        run.log(params={"version": out["version"], "champion_version": out["champion_version"] or "none"},
                metrics={"gate.passed": float(out["passed"])},
                tags={"shipyard.candidate": out["recipe"][:250], "shipyard.gate.reason": out["reason"][:5000]},
                artifacts={"champion-gate.md": decision.path})
    print(("PASSED: " if out["passed"] else "REFUSED: ") + out["reason"], flush=True)
    return bool(out["passed"])


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def promote_production(
    model_name: str,
    decision: Input[Markdown],
    manifest: Input[Artifact],
    tracking_uri: str = "",
    experiment: str = "",
    kfp_run_id: str = "",
) -> str:
    """Give 'production' to the deployed champion (the old one becomes 'previous'), record the
    deployment in MLflow and put the champion's headline figures on the pipeline's run.

    Args:
        model_name: Registered model name.
        decision: register_champion's decision (its metadata names the version).
        manifest: The deploy step's rendered manifest.
        tracking_uri: MLflow tracking URI (the pipeline parameter).
        experiment: MLflow experiment.
        kfp_run_id: dsl.PIPELINE_JOB_ID_PLACEHOLDER.

    Returns the aliases afterwards as JSON.
    """
    import json

    from shipyard.components.track.steprun import StepRun
    from shipyard.runtimes import call_step

    version = str(decision.metadata["version"])
    with StepRun("deploy", "", tracking_uri=tracking_uri, experiment=experiment, kfp_run_id=kfp_run_id,
                 params={"model_name": model_name, "version": version,
                         "name": manifest.metadata.get("name", ""), "namespace": manifest.metadata.get("namespace", "")}) as run:
        run.log(tags={"shipyard.deploy.status": str(manifest.metadata.get("status", ""))},
                artifacts={"manifest.yaml": manifest.path})
        out = call_step("base", "shipyard.components.track.champion:promote_production", tracking_uri=tracking_uri,
                        experiment=experiment, kfp_run_id=kfp_run_id, model_name=model_name, version=version,
                        recipe=str(decision.metadata.get("recipe", "")),
                        headline_json=str(decision.metadata.get("headline", "{}")))
    return json.dumps(out["aliases"])
