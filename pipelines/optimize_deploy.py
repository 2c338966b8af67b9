"""The main pipeline: optimize-and-deploy (and requantize, the same graph for scheduled runs).

resolve the base model; evaluate and benchmark it once; for each recipe, in parallel: compress,
evaluate the candidate with the same eval config, accuracy gate, benchmark, SLO gate, and only
if both pass: package as a digest-pinned OCI modelcar, register in MLflow (alias ``candidate``),
champion/challenger gate against ``production``, deploy a KServe LLMInferenceService, and move
``production`` to it. Every step is recorded in MLflow under one parent run.
"""

from typing import Any

from kfp import dsl

from shipyard.components.compress.component import compress
from shipyard.components.package.component import package_model
from shipyard.pipelines.platform import on_cpu, on_gpu
from shipyard.pipelines.stages import Params, base_reference, gated, release, track, tracked

PIPELINE_NAME = "optimize-and-deploy"
REQUANTIZE_NAME = "requantize"

CLUSTER_EVAL = '{"tasks": ["arc_challenge", "hellaswag", "winogrande"], "limit": 1000, "batch_size": "auto"}'
CLUSTER_BENCHMARK = (
    '{"profile": "concurrent", "loads": [1, 8, 32, 64], "prompt_tokens": 512, "output_tokens": 256, '
    '"max_requests": 500, "max_seconds": 180, "warmup_requests": 10}'
)
CLUSTER_SLO = '{"ttft_p99_ms": 1000, "itl_p99_ms": 60, "max_error_rate": 0.01, "require": "base"}'
CLUSTER_DEPLOY = '{"preset": "pd-nixl", "gpu_memory_gib": 80}'


def build_optimize(p: Params, pipeline_name: str) -> None:
    """The graph of optimize-and-deploy and requantize."""

    def body(run: dict[str, Any]) -> None:
        base, base_eval, base_bench = base_reference(p, run)
        with dsl.ParallelFor(items=p["recipes"], name="candidates") as recipe:
            candidate = on_gpu(
                compress(
                    base_model=base.outputs["model"],
                    recipe=recipe,
                    calibration_dataset=p["calibration_dataset"],
                    text_column=p["text_column"],
                    num_calibration_samples=p["num_calibration_samples"],
                    max_seq_length=p["max_seq_length"],
                    seed=p["seed"],
                ).set_display_name("compress")
            )
            model = candidate.outputs["compressed_model"]
            track(run, "compress", metrics=candidate.outputs["metrics"], report=candidate.outputs["summary"])

            def then(cand_eval: dict[str, Any], cand_bench: Any) -> None:
                package = package_model(
                    model=model,
                    registry=p["registry"],
                    repository=p["repository"],
                    tag="",
                    mode=p["package_mode"],
                    base_image=p["modelcar_base_image"],
                    annotations="{}",
                    insecure_tls=p["insecure_registry"],
                ).set_display_name("package modelcar")
                on_cpu(package)
                track(run, "package", report=package.outputs["modelcar"])
                release(p, run, package.outputs["uri"], model, cand_eval, cand_bench, base_eval)

            gated(p, run, model, base_eval, base_bench, then)

    tracked(p, pipeline_name, body)


def _optimize_func(pipeline_name: str) -> Any:
    """The pipeline function of optimize-and-deploy and requantize (same graph, other name)."""

    def optimize(
        model_uri: str = "hf://HuggingFaceTB/SmolLM2-135M-Instruct",
        recipes: list = ["w8a8-int8"],  # noqa: B006 - KFP reads the default from the signature
        calibration_dataset: str = "",
        text_column: str = "text",
        num_calibration_samples: int = 512,
        max_seq_length: int = 2048,
        seed: int = 42,
        eval_backend: str = "vllm",
        eval_config: str = CLUSTER_EVAL,
        accuracy_thresholds: str = '{"min_recovery": 0.99}',
        benchmark_config: str = CLUSTER_BENCHMARK,
        slo: str = CLUSTER_SLO,
        registry: str = "",
        repository: str = "shipyard/models",
        package_mode: str = "modelcar",
        modelcar_base_image: str = "",
        insecure_registry: bool = False,
        deploy_name: str = "shipyard-llm",
        namespace: str = "shipyard",
        deploy_config: str = CLUSTER_DEPLOY,
        dry_run: bool = False,
        tracking_uri: str = "",
        experiment: str = "shipyard",
        registered_model_name: str = "shipyard-llm",
        champion_tolerance: float = 0.0,
    ):
        """Compress, evaluate, benchmark, gate, package, deploy and track an LLM.

        Args:
            model_uri: Base model: hf://org/name[@rev], s3://bucket/prefix, oci://registry/repo@sha256:..., pvc://claim/path, or embedded://smollm2-135m-instruct.
            recipes: Compression recipes to try, one candidate each, run in parallel: presets w8a8-int8, fp8-dynamic, w4a16, or llmcompressor recipe YAML text.
            calibration_dataset: Calibration data: hub dataset name[:split], s3://bucket/key.jsonl, or empty for shipyard's built-in text.
            text_column: Column of the calibration data that holds the text.
            num_calibration_samples: Calibration samples for GPTQ/SmoothQuant (512 is usual).
            max_seq_length: Calibration samples are truncated to this many tokens.
            seed: Random seed for calibration sampling.
            eval_backend: lm-eval backend for base and candidates: vllm (an OpenAI server started from the model) or hf (transformers in-process).
            eval_config: lm-eval config as JSON (tasks, num_fewshot, limit, batch_size, apply_chat_template, seed, gen_kwargs, task_dir). Base and candidate use the same one; the base result is cached per config.
            accuracy_thresholds: Accuracy gate as JSON: min_recovery (default 0.99 on every metric), per-metric overrides under "metrics", optional stderr_k.
            benchmark_config: guidellm load as JSON: profile (synchronous, concurrent, constant, poisson, sweep), loads, prompt_tokens, output_tokens, max_requests, max_seconds, warmup_requests, vllm_args.
            slo: SLO gate as JSON: ttft_p99_ms, itl_p99_ms, min_output_tokens_per_s, max_error_rate, min_goodput, require (base, all, any or a load level).
            registry: OCI registry to push the modelcar to (host[:port]); empty writes an OCI layout into the pipeline root instead.
            repository: Repository in the registry.
            package_mode: modelcar (an image KServe mounts) or oras (the model folder as an OCI artifact).
            modelcar_base_image: Base of the modelcar (needs sh, ln, sleep): a registry reference or OCI layout; empty builds one from busybox.
            insecure_registry: Skip TLS verification for the registry (never in production).
            deploy_name: Name of the LLMInferenceService.
            namespace: Namespace to deploy into (the deploy ServiceAccount needs the shipyard-deployer Role there).
            deploy_config: Deployment as JSON: preset (aggregated, pd-nixl, tp4-h100, ...), replicas, prefill_replicas, tensor_parallel, gpu_memory_gib, router, scaling ... (see components/deploy/README.md).
            dry_run: Render and validate the LLMInferenceService without applying it.
            tracking_uri: MLflow tracking server URL; empty uses the KFP MLflow plugin, MLFLOW_TRACKING_URI, or a local file store.
            experiment: MLflow experiment.
            registered_model_name: MLflow registered model that gets one version per packaged candidate.
            champion_tolerance: How much worse than the current production version an accuracy metric may be (0 = not worse).
        """
        params = dict(locals())
        params.pop("pipeline_name", None)  # the closure's, not a pipeline parameter
        build_optimize(params, pipeline_name)

    return optimize


optimize_and_deploy = dsl.pipeline(
    name=PIPELINE_NAME,
    description=(
        "Compress an LLM with llmcompressor, evaluate it against its base with lm-eval, benchmark it on vLLM "
        "with guidellm against SLOs, and only if every gate passes package it as a digest-pinned OCI modelcar, "
        "deploy a KServe LLMInferenceService (llm-d prefill/decode) and record everything in MLflow."
    ),
)(_optimize_func(PIPELINE_NAME))

requantize = dsl.pipeline(
    name=REQUANTIZE_NAME,
    description=(
        "Scheduled re-quantization: compress the base model again (new calibration data, a new llmcompressor), "
        "run the accuracy and SLO gates, and promote the candidate only if it also beats the current "
        "'production' model version in MLflow (champion/challenger). Schedule it with `shipyard schedule requantize`."
    ),
)(_optimize_func(REQUANTIZE_NAME))
