"""The main pipeline: optimize-and-deploy.

resolve the base model; evaluate and benchmark it once; for each recipe, in parallel: compress,
evaluate the candidate with the same eval config, accuracy gate, benchmark, SLO gate, and only
if both pass: package as a digest-pinned OCI modelcar, register in MLflow (alias ``candidate``),
champion/challenger gate against ``production``, deploy a KServe LLMInferenceService, and move
``production`` to it. Every step is recorded in MLflow under one parent run.
"""

from typing import Any

from kfp import dsl

from shipyard.components.benchmark.component import benchmark, slo_gate
from shipyard.components.compress.component import compress
from shipyard.components.deploy.component import deploy
from shipyard.components.evaluate.component import accuracy_gate, evaluate_hf, evaluate_vllm
from shipyard.components.package.component import package_model
from shipyard.components.resolve.component import resolve_model
from shipyard.components.track.component import (
    close_tracking,
    promotion_gate,
    register_model,
    set_production,
    start_tracking,
    track_step,
)
from shipyard.pipelines.platform import on_cpu, on_gpu, with_registry_credentials

PIPELINE_NAME = "optimize-and-deploy"

CLUSTER_EVAL = '{"tasks": ["arc_challenge", "hellaswag", "winogrande"], "limit": 1000, "batch_size": "auto"}'
CLUSTER_BENCHMARK = (
    '{"profile": "concurrent", "loads": [1, 8, 32, 64], "prompt_tokens": 512, "output_tokens": 256, '
    '"max_requests": 500, "max_seconds": 180, "warmup_requests": 10}'
)
CLUSTER_SLO = '{"ttft_p99_ms": 1000, "itl_p99_ms": 60, "max_error_rate": 0.01, "require": "base"}'
CLUSTER_DEPLOY = '{"preset": "pd-nixl", "gpu_memory_gib": 80}'


def evaluate(model: Any, eval_config: Any, eval_backend: Any, label: str) -> dict[str, Any]:
    """Evaluate ``model`` with the chosen backend; the outputs of whichever branch ran."""
    with dsl.If(eval_backend == "vllm", name=f"{label}-on-vllm"):
        on_vllm = on_gpu(evaluate_vllm(model=model, eval_config=eval_config)).set_display_name(f"{label} (vLLM)")
    with dsl.Else(name=f"{label}-on-hf"):
        on_hf = on_gpu(evaluate_hf(model=model, eval_config=eval_config)).set_display_name(f"{label} (hf)")
    return {
        name: dsl.OneOf(on_vllm.outputs[name], on_hf.outputs[name]) for name in ("results", "metrics", "table")
    }


def tracking(tracking_uri: Any, experiment: Any, start: Any) -> dict[str, Any]:
    """How later steps reach the pipeline's MLflow run: by the KFP run id it is tagged with.

    (Passing start_tracking's parent_run_id into a ParallelFor works on the KFP backend but
    not under kfp.local 2.17, which resolves such a parameter to the loop item.)
    """
    return {"tracking_uri": tracking_uri, "experiment": experiment, "kfp_run_id": dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            "_start": start}


def track(run: dict[str, Any], step: str, **artifacts: Any) -> Any:
    """Record one step's metrics and reports as a nested MLflow run."""
    task = track_step(
        tracking_uri=run["tracking_uri"], parent_run_id="", step=step, params_json="{}", tags_json="{}",
        kfp_run_id=run["kfp_run_id"], experiment=run["experiment"], **artifacts,
    )
    return on_cpu(task.set_display_name(f"track {step}").after(run["_start"]))


@dsl.pipeline(
    name=PIPELINE_NAME,
    description=(
        "Compress an LLM with llmcompressor, evaluate it against its base with lm-eval, benchmark it on vLLM "
        "with guidellm against SLOs, and only if every gate passes package it as a digest-pinned OCI modelcar, "
        "deploy a KServe LLMInferenceService (llm-d prefill/decode) and record everything in MLflow."
    ),
)
def optimize_and_deploy(
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
    finish = on_cpu(
        close_tracking(tracking_uri=tracking_uri, experiment=experiment, kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER)
    ).set_display_name("close MLflow run")
    with dsl.ExitHandler(finish, name="shipyard"):
        start = on_cpu(
            start_tracking(
                tracking_uri=tracking_uri,
                experiment=experiment,
                pipeline_name=PIPELINE_NAME,
                kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                params_json="{}",
                tags_json="{}",
            ).set_display_name("start MLflow run")
        )
        run = tracking(tracking_uri, experiment, start)
        base = on_cpu(resolve_model(model_uri=model_uri).set_display_name("resolve base model"))
        base_eval = evaluate(base.outputs["model"], eval_config, eval_backend, "evaluate base")
        track(run, "evaluate-base", metrics=base_eval["metrics"], files=base_eval["results"], report=base_eval["table"])
        base_bench = on_gpu(benchmark(model=base.outputs["model"], benchmark_config=benchmark_config))
        base_bench.set_display_name("benchmark base")
        track(run, "benchmark-base", metrics=base_bench.outputs["metrics"], report=base_bench.outputs["summary"])

        with dsl.ParallelFor(items=recipes, name="candidates") as recipe:
            candidate = on_gpu(
                compress(
                    base_model=base.outputs["model"],
                    recipe=recipe,
                    calibration_dataset=calibration_dataset,
                    text_column=text_column,
                    num_calibration_samples=num_calibration_samples,
                    max_seq_length=max_seq_length,
                    seed=seed,
                ).set_display_name("compress")
            )
            model = candidate.outputs["compressed_model"]
            track(run, "compress", metrics=candidate.outputs["metrics"], report=candidate.outputs["summary"])
            cand_eval = evaluate(model, eval_config, eval_backend, "evaluate candidate")
            accuracy = on_cpu(
                accuracy_gate(
                    base_results=base_eval["results"], candidate_results=cand_eval["results"], thresholds=accuracy_thresholds
                ).set_display_name("accuracy gate")
            )
            track(run, "accuracy-gate", metrics=accuracy.outputs["metrics"], files=cand_eval["results"],
                  report=accuracy.outputs["report"])

            with dsl.If(accuracy.outputs["Output"] == True, name="accuracy-passed"):  # noqa: E712 - KFP condition
                cand_bench = on_gpu(benchmark(model=model, benchmark_config=benchmark_config))
                cand_bench.set_display_name("benchmark candidate")
                slo_check = on_cpu(
                    slo_gate(
                        base_results=base_bench.outputs["results"], candidate_results=cand_bench.outputs["results"], slo=slo
                    ).set_display_name("SLO gate")
                )
                track(run, "slo-gate", metrics=slo_check.outputs["metrics"], report=slo_check.outputs["report"])

                with dsl.If(slo_check.outputs["Output"] == True, name="slo-passed"):  # noqa: E712
                    package = package_model(
                        model=model,
                        registry=registry,
                        repository=repository,
                        tag="",
                        mode=package_mode,
                        base_image=modelcar_base_image,
                        annotations="{}",
                        insecure_tls=insecure_registry,
                    ).set_display_name("package modelcar")
                    with_registry_credentials(on_cpu(package))
                    track(run, "package", report=package.outputs["modelcar"])
                    version = on_cpu(
                        register_model(
                            tracking_uri=tracking_uri,
                            model_name=registered_model_name,
                            source_uri=package.outputs["uri"],
                            parent_run_id="",
                            tags_json="{}",
                            kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                            experiment=experiment,
                        ).set_display_name("register model version")
                    )
                    promotion = on_cpu(
                        promotion_gate(
                            tracking_uri=tracking_uri,
                            model_name=registered_model_name,
                            candidate_version=version.outputs["version"],
                            parent_run_id="",
                            kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                            experiment=experiment,
                            slos_json="{}",
                            accuracy_metrics="",
                            min_recovery=0.0,
                            champion_tolerance=champion_tolerance,
                            candidate_eval=cand_eval["results"],
                            candidate_bench=cand_bench.outputs["metrics"],
                            base_eval=base_eval["results"],
                        ).set_display_name("champion/challenger gate")
                    )
                    with dsl.If(promotion.outputs["Output"] == True, name="promoted"):  # noqa: E712
                        rollout = on_cpu(
                            deploy(
                                model_uri=package.outputs["uri"],
                                name=deploy_name,
                                namespace=namespace,
                                deploy_config=deploy_config,
                                dry_run=dry_run,
                                model=model,
                            ).set_display_name("deploy LLMInferenceService")
                        )
                        track(run, "deploy", files=rollout.outputs["manifest"])
                        on_cpu(
                            set_production(
                                tracking_uri=tracking_uri,
                                model_name=registered_model_name,
                                version=version.outputs["version"],
                                gate_passed=promotion.outputs["Output"],
                            ).set_display_name("alias production").after(rollout)
                        )
