"""KFP wrapper of the benchmark step (logic: shipyard.benchmarking.guidellm; its report: shipyard.benchmarking.report)."""

from kfp import dsl
from kfp.dsl import Artifact, Input, Markdown, Metrics, Model, Output

from shipyard.runtimes.runtime import runtime_image


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
    safety: str = "",
    tuning: str = "",
    slo: str = "",
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
    candidate ("base" or the recipe), tracking_uri, experiment: the step's config, figures and
    summary travel in results' metadata and candidate-gates logs them into the pipeline's MLflow
    run (no KFP run id here: it would make every run's cache key unique).
    The base ("base") is reused from the base benchmark cache when its content, the config, the
    vllm runtime and the hardware are unchanged (results.json "cached" says when it was measured).
    safety: the safety parameter (JSON); when it names garak probes, garak scans the same server
    after the benchmark (results/safety/safety.json and garak's report; the base benchmark cache
    keys its result by the safety settings too).
    tuning: the serving-configuration search (JSON or a preset name, empty = off): one benchmark per
    point, each on its own vLLM server, scored by slo (output tok/s at the highest load meeting
    it); results are the best point's, and results/tuning.json lists every point.
    """
    from shipyard.runtimes.runtime import call_step, name_output, record_outputs
    from shipyard.steps.benchmark import tune_step
    from shipyard.tracking.steprun import StepRun

    # Markdown reports are stored and recorded with a .md name (KFP, the run folder)
    name_output(summary, ".md")

    with StepRun("benchmark", candidate, tracking_uri=tracking_uri, experiment=experiment,
                 params={"benchmark_config": benchmark_config, "safety": safety, "tuning": tuning}) as run:
        out = call_step("vllm", tune_step, model_dir=model.path, benchmark_config=benchmark_config, tuning=tuning,
                        slo=slo, out_dir=results.path, summary_path=summary.path, safety=safety,
                        cache=candidate == "base",  # the base benchmark cache: a re-quantization run measures the base once
                        origin=f"KFP artifact {results.uri}")  # names the run (no kfp_run_id: it would defeat the KFP cache)
        record_outputs(out, metrics=metrics, artifact=results)
        run.log(**out["log"])
    run.keep_in(results)
