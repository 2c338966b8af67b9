"""KFP wrappers of the benchmark step and the SLO gate (logic in benchmark.py, slo.py, report.py)."""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Input, Markdown, Metrics, Model, Output

from shipyard.runtimes import runtime_image


@dsl.component(base_image=runtime_image("vllm"), install_kfp_package=False)
def benchmark(
    model: Input[Model],
    benchmark_config: str,
    results: Output[Artifact],
    metrics: Output[Metrics],
    summary: Output[Markdown],
    candidate: str = "",
    tracking_uri: str = "",
    experiment: str = "",
    kfp_run_id: str = "",
):
    """Serve the model with vLLM on 127.0.0.1 and load it with guidellm; latency and throughput per load.

    benchmark_config: JSON, e.g. {"profile": "concurrent", "loads": [1, 4], "prompt_tokens": 32,
    "output_tokens": 16, "max_requests": 8, "max_seconds": 60, "warmup_requests": 1,
    "vllm_args": ["--max-model-len", "2048"]}; profiles synchronous, concurrent (loads = streams),
    constant and poisson (loads = requests/s), sweep and throughput (always capped by
    max_concurrency). Empty means the small local defaults. results: a folder with results.json
    (TTFT/ITL/TPOT/latency p50/p90/p99, requests/s, output tokens/s, errored/incomplete counts
    per load level; vLLM's memory log lines next to the memory planner's prediction),
    guidellm.json (raw), scenario.json, vllm.log, guidellm.log. The server is always stopped.
    candidate ("base" or the recipe), tracking_uri, experiment, kfp_run_id: the step logs its
    config, figures and summary into its MLflow run (see components/track/steprun.py).
    """
    from shipyard.components.track.steprun import PENDING_KEY, StepRun
    from shipyard.runtimes import call_step, record_outputs

    run = StepRun("benchmark", candidate, tracking_uri=tracking_uri, experiment=experiment, kfp_run_id=kfp_run_id,
                  params={"benchmark_config": benchmark_config})
    out = call_step(
        "vllm",
        "shipyard.components.benchmark.benchmark:benchmark_step",
        model_dir=model.path,
        benchmark_config=benchmark_config,
        out_dir=results.path,
        summary_path=summary.path,
    )
    record_outputs(out, metrics=metrics, artifact=results)
    run.log(metrics=out.get("metrics"), artifacts={"summary.md": summary.path,
                                                   "results.json": f"{results.path}/results.json"})
    run.finish()
    if run.payload():
        results.metadata[PENDING_KEY] = run.payload()


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def slo_gate(
    base_results: Input[Artifact],
    candidate_results: Input[Artifact],
    slo: str,
    report: Output[HTML],
    summary: Output[Markdown],
    metrics: Output[Metrics],
) -> bool:
    """Promote the candidate only if it meets the latency SLO under load (fails closed).

    slo: JSON, e.g. {"ttft_p99_ms": 500, "itl_p99_ms": 50, "min_output_tokens_per_s": 100,
    "max_error_rate": 0.01, "min_goodput": 0.9, "require": "base", "min_throughput_ratio": 0.9,
    "max_latency_ratio": 1.2}; empty means generous local defaults. require: "base" (meet the
    SLO wherever the base does), "all", "any" or a load value. Writes an HTML report with TTFT,
    ITL, throughput and goodput plots (base vs candidate, SLO lines drawn in) and a Markdown
    summary. Returns True to promote: drive dsl.If with gate.outputs["Output"] (one bool
    output, so the condition also resolves under kfp.local). The reason heads the report and
    the summary, and is in their metadata and the step log. Unreadable results, different
    benchmark configs or bad thresholds give False.
    """
    from shipyard.runtimes import call_step, record_outputs

    out = call_step(
        "base",
        "shipyard.components.benchmark.slo:run_slo_gate",
        base_results=base_results.path,
        candidate_results=candidate_results.path,
        slo=slo,
        report_path=report.path,
        summary_path=summary.path,
    )
    record_outputs(out, metrics=metrics)
    for artifact in (report, summary):
        artifact.metadata.update({"passed": bool(out["passed"]), "reason": str(out["reason"])})
    print(f"SLO gate: {out['reason']}", flush=True)
    return bool(out["passed"])


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
    candidate: str = "",
    tracking_uri: str = "",
    experiment: str = "",
    kfp_run_id: str = "",
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
        experiment: MLflow experiment.
        kfp_run_id: dsl.PIPELINE_JOB_ID_PLACEHOLDER.
    """
    from shipyard.components.track.steprun import PENDING_KEY, StepRun
    from shipyard.runtimes import call_step, record_outputs

    track = {"tracking_uri": tracking_uri, "experiment": experiment, "kfp_run_id": kfp_run_id}
    eval_run = StepRun("evaluate", candidate, params={"eval_config": eval_config, "backend": "vllm"}, **track)
    bench_run = StepRun("benchmark", candidate, params={"benchmark_config": benchmark_config}, **track)
    out = call_step("vllm", "shipyard.components.benchmark.measure:measure_step", model_dir=model.path,
                    eval_config=eval_config, benchmark_config=benchmark_config, eval_out=eval_results.path,
                    table_path=eval_table.path, bench_out=results.path, summary_path=summary.path)
    record_outputs(out["eval"], metrics=eval_metrics, artifact=eval_results)
    record_outputs(out["bench"], metrics=metrics, artifact=results)
    print(f"one vLLM server for eval and benchmark: started in {out['server']['startup_seconds']} s", flush=True)
    for run, artifact, figures, files in (
        (eval_run, eval_results, out["eval"]["metrics"], {"table.md": eval_table.path,
                                                          "summary.json": f"{eval_results.path}/summary.json"}),
        (bench_run, results, out["bench"]["metrics"], {"summary.md": summary.path,
                                                       "results.json": f"{results.path}/results.json"}),
    ):
        run.log(metrics=figures, params={"shared_server": True}, artifacts=files)
        run.finish()
        if run.payload():
            artifact.metadata[PENDING_KEY] = run.payload()
