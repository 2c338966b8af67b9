"""promote: gate an already packaged candidate against the base and production, then deploy it.

For a candidate that exists as a digest-pinned OCI modelcar (from an earlier run, or built
elsewhere): evaluate and benchmark it against its base with the same configs, run the accuracy,
SLO and champion/challenger gates, and only then deploy it and move the ``production`` alias.
"""

from typing import Any

from kfp import dsl

from shipyard.components.resolve.component import resolve_model
from shipyard.pipelines.optimize_deploy import CLUSTER_BENCHMARK, CLUSTER_DEPLOY, CLUSTER_EVAL, CLUSTER_SLO
from shipyard.pipelines.platform import on_cpu
from shipyard.pipelines.stages import base_reference, gated, release, tracked

PIPELINE_NAME = "promote"


@dsl.pipeline(
    name=PIPELINE_NAME,
    description=(
        "Gate an existing packaged candidate (oci://...@sha256) against its base model and the current "
        "'production' version (accuracy, SLOs, champion/challenger), then deploy it as a KServe "
        "LLMInferenceService and give it the 'production' alias."
    ),
)
def promote(
    candidate_uri: str,
    model_uri: str = "hf://HuggingFaceTB/SmolLM2-135M-Instruct",
    eval_backend: str = "vllm",
    eval_config: str = CLUSTER_EVAL,
    accuracy_thresholds: str = '{"min_recovery": 0.99}',
    benchmark_config: str = CLUSTER_BENCHMARK,
    slo: str = CLUSTER_SLO,
    deploy_name: str = "shipyard-llm",
    namespace: str = "shipyard",
    deploy_config: str = CLUSTER_DEPLOY,
    dry_run: bool = False,
    tracking_uri: str = "",
    experiment: str = "shipyard",
    registered_model_name: str = "shipyard-llm",
    champion_tolerance: float = 0.0,
):
    """Gate and deploy a packaged candidate.

    Args:
        candidate_uri: The packaged candidate, pinned by digest: oci://registry/repo@sha256:... (or an s3:// model folder).
        model_uri: Its base model (the reference for accuracy recovery and latency).
        eval_backend: lm-eval backend for base and candidate: vllm or hf.
        eval_config: lm-eval config as JSON; the same for base and candidate.
        accuracy_thresholds: Accuracy gate as JSON: min_recovery, per-metric overrides, stderr_k.
        benchmark_config: guidellm load as JSON (profile, loads, prompt/output tokens, limits).
        slo: SLO gate as JSON: ttft_p99_ms, itl_p99_ms, min_output_tokens_per_s, max_error_rate, require.
        deploy_name: Name of the LLMInferenceService.
        namespace: Namespace to deploy into.
        deploy_config: Deployment as JSON (see components/deploy/README.md).
        dry_run: Render and validate the LLMInferenceService without applying it.
        tracking_uri: MLflow tracking server URL; empty uses the KFP MLflow plugin, MLFLOW_TRACKING_URI, or a local file store.
        experiment: MLflow experiment.
        registered_model_name: MLflow registered model; the candidate becomes a new version of it.
        champion_tolerance: How much worse than the current production version an accuracy metric may be.
    """
    p = dict(locals())

    def body(run: dict[str, Any]) -> None:
        _, base_eval, base_bench = base_reference(p, run)
        candidate = on_cpu(resolve_model(model_uri=candidate_uri).set_display_name("resolve candidate"))
        model = candidate.outputs["model"]
        gated(
            p, run, model, base_eval, base_bench,
            then=lambda cand_eval, cand_bench: release(p, run, candidate_uri, model, cand_eval, cand_bench, base_eval),
        )

    tracked(p, PIPELINE_NAME, body)
