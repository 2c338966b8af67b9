"""The main pipeline: optimize-and-deploy (and requantize, the same graph for scheduled runs).

pre-flight (every parameter, then the MLflow run); prepare your eval sets once; resolve the base
model, evaluate and benchmark it once (and run your eval sets on it); for each recipe, in parallel: compress, evaluate and benchmark the
candidate with the same configs, accuracy and SLO gates; then one selection ranks the
candidates that passed by the ``selection`` objective and writes the candidates report; only
its champion is packaged as a digest-pinned OCI modelcar, registered in MLflow, gated against
``production``, deployed as a KServe LLMInferenceService and given ``production``. When no
candidate passes, the run ends there with the reasons. Every step logs itself into MLflow.

No ``from __future__ import annotations``: KFP reads the pipeline's annotations.
"""

from typing import Any

from kfp import dsl

from shipyard.params.pipeline import (  # noqa: F401 - the cluster defaults, re-exported
    CLUSTER_BENCHMARK,
    CLUSTER_DEPLOY,
    CLUSTER_EVAL,
    CLUSTER_SLO,
    pipeline_function,
)
from shipyard.pipelines.stages import (
    base_reference,
    candidates,
    checked,
    lora_reference,
    prepare_sets,
    release,
)

PIPELINE_NAME = "optimize-and-deploy"
REQUANTIZE_NAME = "requantize"


def build_optimize(p: dict[str, Any], pipeline_name: str) -> None:
    """The graph of optimize-and-deploy and requantize."""

    def body(check: Any) -> None:
        prepared = prepare_sets(p, check)
        base, base_eval, base_bench, base_sets = base_reference(p, check, prepared)
        adapters, base_lora = lora_reference(p, base, check)
        release(p, candidates(p, base, base_eval, base_bench, adapters, base_lora, prepared, base_sets))

    checked(p, pipeline_name, body)


optimize_and_deploy = dsl.pipeline(
    name=PIPELINE_NAME,
    description=(
        "Compress an LLM with every recipe given, evaluate each candidate against its base with lm-eval and "
        "benchmark it on vLLM with guidellm against SLOs, select one champion among those that pass, and only "
        "that one is packaged as a digest-pinned OCI modelcar, gated against production, deployed as a KServe "
        "LLMInferenceService (llm-d prefill/decode) and recorded in MLflow."
    ),
)(pipeline_function(PIPELINE_NAME, "Compress, evaluate, benchmark, select, package, deploy and track an LLM.",
                    lambda p: build_optimize(p, PIPELINE_NAME)))

requantize = dsl.pipeline(
    name=REQUANTIZE_NAME,
    description=(
        "Scheduled re-quantization: compress the base model again (new calibration data, a new llmcompressor), "
        "run the accuracy and SLO gates, select a champion, and promote it only if it also beats the current "
        "'production' model version in MLflow (champion/challenger). Schedule it with `shipyard schedule requantize`."
    ),
)(pipeline_function(REQUANTIZE_NAME, "Re-quantize, gate and promote an LLM when it beats production.",
                    lambda p: build_optimize(p, REQUANTIZE_NAME)))
