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
