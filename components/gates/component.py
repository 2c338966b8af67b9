"""KFP wrappers of the gates (runtime: base). Logic: ``candidate.py``, ``selection.py``, ``champion.py``."""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Input, Markdown, Metrics, Model, Output

from shipyard.runtimes.runtime import runtime_image


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def candidate_gates(
    recipe: str,
    base_eval: Input[Artifact],
    candidate_eval: Input[Artifact],
    base_bench: Input[Artifact],
    candidate_bench: Input[Artifact],
    thresholds: str,
    slo: str,
    candidate: Output[Artifact],
    accuracy_report: Output[Markdown],
    slo_report: Output[HTML],
    metrics: Output[Metrics],
    safety_report: Output[Markdown],
    compress_metrics: Input[Metrics] = None,
    compress_summary: Input[Markdown] = None,
    tracking_uri: str = "",
    experiment: str = "",
    kfp_run_id: str = "",
    safety: str = "",
    base_adapters: Input[Artifact] = None,
    candidate_adapters: Input[Artifact] = None,
    eval_sets: Input[Artifact] = None,
    base_eval_sets: Input[Artifact] = None,
    candidate_eval_sets: Input[Artifact] = None,
    eval_sets_judged: Input[Artifact] = None,
) -> bool:
    """The gates of one candidate against the base, each failing closed: accuracy (recovery), SLO (latency
    and throughput under load), safety (garak scans) and your eval sets. Rules, reports: components/gates/README.md.

    Args:
        recipe: The candidate's recipe (its name in reports and MLflow).
        base_eval: The base model's evaluate results.
        candidate_eval: The candidate's evaluate results (same eval config).
        base_bench: The base model's benchmark results.
        candidate_bench: The candidate's benchmark results (same benchmark config).
        thresholds: accuracy_thresholds JSON.
        slo: slo JSON.
        candidate: candidate.json: everything the candidates report shows for this candidate.
        accuracy_report: The accuracy gate's table (recovery per metric).
        slo_report: The SLO gate's HTML report with plots (stored as slo_report.html).
        safety_report: The safety gate's report (per garak probe family: attack success rates, decision).
        compress_metrics: The compress step's figures (size before/after); none for a packaged candidate.
        compress_summary: The compress step's summary (its metadata names the model artifact).
        tracking_uri: MLflow tracking URI (the pipeline parameter).
        experiment: MLflow experiment.
        kfp_run_id: dsl.PIPELINE_JOB_ID_PLACEHOLDER.
        safety: The safety parameter (JSON: garak probes, tolerance per family, require; empty: off).
        base_adapters: The base's per-LoRA-adapter results (evaluate_adapters_hf); none without adapters.
        candidate_adapters: The candidate's, with the same adapters: it passes only if every adapter does.
        eval_sets: Your eval sets, prepared once for the run (the gate's report: eval_sets.md beside candidate.json).
        base_eval_sets: The base's eval-set results (its measure step).
        candidate_eval_sets: The candidate's eval-set results (same prepared sets, same eval_config).
        eval_sets_judged: The judge's verdicts on the rubric sets (judge-eval-sets); none without rubric sets.

    Returns True when the candidate passed its gates (the reason is in candidate's metadata).
    """
    from shipyard.runtimes.runtime import metadata_of, name_output, path_of, record_metadata, record_outputs
    from shipyard.steps.judge import gates_task

    # the reports are stored and recorded under names a browser and MLflow know (KFP and the run folder)
    reports = {"accuracy_report": name_output(accuracy_report, ".md"), "slo_report": name_output(slo_report, ".html"),
               "safety_report": name_output(safety_report, ".md")}
    out = gates_task(recipe, base_eval=base_eval.path, candidate_eval=candidate_eval.path, base_bench=base_bench.path,
                     candidate_bench=candidate_bench.path, thresholds=thresholds, slo=slo, safety=safety,
                     out_dir=candidate.path, report_paths=reports, compress_figures=metadata_of(compress_metrics),
                     compress_summary=metadata_of(compress_summary), base_adapters=path_of(base_adapters),
                     candidate_adapters=path_of(candidate_adapters), eval_sets=path_of(eval_sets),
                     base_eval_sets=path_of(base_eval_sets), candidate_eval_sets=path_of(candidate_eval_sets),
                     eval_sets_judged=path_of(eval_sets_judged),
                     pending=[candidate_eval.metadata, candidate_bench.metadata, base_eval.metadata, base_bench.metadata],
                     tracking_uri=tracking_uri, experiment=experiment, kfp_run_id=kfp_run_id)
    record_outputs(out, metrics=metrics)
    record_metadata(out["metadata"], candidate=candidate, accuracy_report=accuracy_report, slo_report=slo_report,
                    safety_report=safety_report)
    return bool(out["passed"])


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def select_champion(
    candidates: Input[list[Artifact]],
    selection: str,
    decision: Output[Artifact],
    report: Output[Markdown],
    report_html: Output[HTML],
    metrics: Output[Metrics],
    base_model: Input[Model] = None,
    base_eval: Input[Artifact] = None,
    base_bench: Input[Artifact] = None,
    slo: str = "",
    base_model_uri: str = "",
    tracking_uri: str = "",
    experiment: str = "",
    kfp_run_id: str = "",
) -> str:
    """Fan-in: the base is always a candidate (keep-the-base). Rank the base and the compressed
    candidates that passed their gates by the selection objective and pick one champion; a compressed
    candidate the base dominates on (accuracy, objective) is never champion. Write the candidates
    report (every candidate side by side, Markdown and HTML with plots), why each won or lost, and
    the headline that compares the champion with the base.

    Args:
        candidates: Every candidate's candidate.json (dsl.Collected over the recipes).
        selection: throughput, size, recovery or kv_cache (or JSON with tie-breakers).
        base_model: The base model (its URI is the champion's when the base is kept). The pipelines
            always pass the base; without it only the compressed candidates are ranked.
        base_eval: The base model's evaluate results.
        base_bench: The base model's benchmark results (its own SLO gate and figures).
        slo: slo JSON (the base must meet the absolute SLO like any candidate).
        base_model_uri: The base model's URI as the user gave it (the pipeline's model_uri): recorded as
            base_model with what the pin step pinned it to (base_model's metadata) for `shipyard watch`.
        decision: selection.json: the ranking, the champion's record and every decision.
        report: The candidates report (Markdown).
        report_html: The candidates report with a plot (HTML, self-contained; stored as report_html.html).
        tracking_uri: MLflow tracking URI (the pipeline parameter).
        experiment: MLflow experiment.
        kfp_run_id: dsl.PIPELINE_JOB_ID_PLACEHOLDER.

    Returns the champion's model artifact URI (the base model's when the base is kept), or "" when
    nothing passed its gates, the base included (the run then ends cleanly: nothing is packaged or
    deployed).
    """
    from shipyard.runtimes.runtime import call_step, metadata_of, name_output, path_of, record_outputs, uri_of
    from shipyard.steps.select import select_champion
    from shipyard.tracking.steprun import StepRun

    # the reports are stored and recorded under names a browser and MLflow know (KFP and the run folder)
    name_output(report, ".md")
    name_output(report_html, ".html")
    pinned = metadata_of(base_model)  # the resolve step's: the pinned URI
    with StepRun("select", "", tracking_uri=tracking_uri, experiment=experiment, kfp_run_id=kfp_run_id,
                 params={"selection": selection or "throughput", "candidates": len(candidates)}) as run:
        out = call_step("base", select_champion,
                        candidate_dirs=[c.path for c in candidates], selection=selection, out_dir=decision.path,
                        report_md=report.path, report_html_path=report_html.path, base_eval=path_of(base_eval),
                        base_bench=path_of(base_bench), base_model_uri=uri_of(base_model),
                        slo=slo, base_uri=base_model_uri, base_pinned_uri=pinned.get("uri", ""),
                        base_fingerprint=pinned.get("fingerprint", ""))
        record_outputs(out, metrics=metrics, artifact=(decision, report, report_html))
        run.log(**out["log"])
    print(out["headline"], flush=True)
    return out["winner_model_uri"]
