"""The main pipeline: optimize-and-deploy.

resolve the base model -> for each recipe (in parallel): compress -> ...
Steps that run on GPUs carry the accelerator, node selector, tolerations and /dev/shm from
``pipelines/cluster.yaml``.
"""


from kfp import dsl

from shipyard.components.compress.component import compress
from shipyard.components.resolve.component import resolve_model
from shipyard.pipelines.platform import on_cpu, on_gpu

PIPELINE_NAME = "optimize-and-deploy"


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
):
    """Compress, evaluate, benchmark, gate, package, deploy and track an LLM.

    Args:
        model_uri: Base model: hf://org/name[@rev], s3://bucket/prefix, oci://registry/repo@sha256:..., pvc://claim/path, or embedded://smollm2-135m-instruct.
        recipes: Compression recipes to try, one candidate each, run in parallel: presets w8a8-int8, fp8-dynamic, w4a16, or llmcompressor recipe YAML text.
        calibration_dataset: Calibration data: hub dataset name[:split], s3://bucket/key.jsonl, or empty for shipyard's built-in text.
        text_column: Column of the calibration data that holds the text.
        num_calibration_samples: Calibration samples for GPTQ/SmoothQuant (512 is usual).
        max_seq_length: Calibration samples are truncated to this many tokens.
        seed: Random seed for calibration sampling and evaluation.
    """
    base = on_cpu(resolve_model(model_uri=model_uri).set_display_name("resolve base model"))
    with dsl.ParallelFor(items=recipes, name="candidates") as recipe:
        candidate = compress(
            base_model=base.outputs["model"],
            recipe=recipe,
            calibration_dataset=calibration_dataset,
            text_column=text_column,
            num_calibration_samples=num_calibration_samples,
            max_seq_length=max_seq_length,
            seed=seed,
        ).set_display_name("compress")
        on_gpu(candidate)
