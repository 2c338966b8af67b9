"""KFP wrapper of the measure step: one vLLM server per model for lm-eval and guidellm (logic in measure.py)."""

from kfp import dsl
from kfp.dsl import Artifact, Input, Markdown, Metrics, Model, Output

from shipyard.runtimes.runtime import runtime_image


@dsl.component(base_image=runtime_image("vllm"), install_kfp_package=False)
def measure_vllm(
    model: Input[Model],
    eval_config: str,
    benchmark_config: str,
    eval_results: Output[Artifact],
    eval_metrics: Output[Metrics],
    eval_table: Output[Markdown],
    results: Output[Artifact],
    metrics: Output[Metrics],
    summary: Output[Markdown],
    eval_sets_results: Output[Artifact],
    candidate: str = "",
    tracking_uri: str = "",
    experiment: str = "",
    safety: str = "",
    tuning: str = "",
    slo: str = "",
    eval_sets: Input[Artifact] = None,
):
    """Serve the model once with vLLM and run both lm-eval (local-completions) and guidellm against
    that one server: one model load and one GPU pod per model instead of two.

    Args:
        model: The model folder.
        eval_config: lm-eval config as JSON (as evaluate_vllm).
        benchmark_config: guidellm load as JSON (as benchmark); its vLLM settings start the server.
        eval_results: As evaluate_vllm's results (summary.json, lm_eval_results.json).
        eval_metrics: The eval scores.
        eval_table: The eval scores as Markdown.
        results: As benchmark's results (results.json, guidellm.json, vllm.log, ...).
        metrics: The benchmark figures.
        summary: The benchmark summary as Markdown.
        candidate: "base" or the recipe (its MLflow runs are keyed by it).
        tracking_uri: MLflow tracking URI (the pipeline parameter).
        experiment: MLflow experiment. No KFP run id: it would make every run's cache key unique;
            the records travel in the results' metadata and candidate-gates logs them.
        safety: The safety parameter (JSON); when it names garak probes, the same server is scanned
            after the benchmark (results/safety/safety.json); empty or no probes: no scan.
        eval_sets: Your eval sets, prepared once for the run (prepare-eval-sets); when it holds sets they
            run on the same server with the same eval_config (every row, per-sample logs).
        eval_sets_results: Their results (summary.json, samples/, rubric_answers.json); empty without sets.
    """
    from shipyard.runtimes.runtime import call_step, name_output, path_of, record_outputs
    from shipyard.steps.measure import measure_step
    from shipyard.tracking.steprun import StepRun

    # Markdown reports are stored and recorded with a .md name (KFP, the run folder)
    name_output(eval_table, ".md")
    name_output(summary, ".md")

    track = {"tracking_uri": tracking_uri, "experiment": experiment}
    with StepRun("evaluate", candidate, params={"eval_config": eval_config, "backend": "vllm"}, **track) as eval_run, \
            StepRun("benchmark", candidate, params={"benchmark_config": benchmark_config, "safety": safety,
                                                     "tuning": tuning}, **track) as bench_run:
        out = call_step("vllm", measure_step, model_dir=model.path, eval_config=eval_config,
                        benchmark_config=benchmark_config, eval_out=eval_results.path, table_path=eval_table.path,
                        bench_out=results.path, summary_path=summary.path, safety=safety, tuning=tuning, slo=slo,
                        eval_sets_dir=path_of(eval_sets), eval_sets_out=eval_sets_results.path)
        record_outputs(out["eval"], metrics=eval_metrics, artifact=eval_results)
        record_outputs(out["bench"], metrics=metrics, artifact=results)
        if out.get("eval_sets") is not None:
            eval_sets_results.metadata.update({"scores": out["eval_sets"].get("scores") or {}})
        eval_run.log(**out["log"]["eval"])
        bench_run.log(**out["log"]["bench"])
    eval_run.keep_in(eval_results)
    bench_run.keep_in(results)
