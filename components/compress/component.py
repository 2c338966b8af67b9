"""KFP wrapper of the compress step (runtime: compress)."""


from kfp import dsl
from kfp.dsl import Input, Markdown, Metrics, Model, Output

from shipyard.runtimes.runtime import runtime_image


@dsl.component(base_image=runtime_image("compress"), install_kfp_package=False)
def compress(
    base_model: Input[Model],
    recipe: str,
    calibration_dataset: str,
    text_column: str,
    num_calibration_samples: int,
    max_seq_length: int,
    seed: int,
    compressed_model: Output[Model],
    metrics: Output[Metrics],
    summary: Output[Markdown],
    tracking_uri: str = "",
    experiment: str = "",
):
    """Compress a model with llmcompressor (one-shot post-training quantization).

    Args:
        base_model: The model to compress (Hugging Face folder).
        recipe: A preset (w8a8-int8, fp8-dynamic, w4a16) or an llmcompressor recipe (YAML text or file path).
        calibration_dataset: Hub dataset name[:split], a local JSONL/Parquet file, or s3://bucket/key.
            Empty: shipyard's built-in calibration text.
        text_column: Column holding the calibration text (rows with chat 'messages' are rendered with the chat template).
        num_calibration_samples: Number of calibration samples (512 is usual on a GPU).
        max_seq_length: Truncate calibration samples to this many tokens.
        seed: Random seed for sample selection.
        compressed_model: The compressed-tensors folder (config.json has quantization_config; recipe.yaml inside).
        metrics: Size before/after, compression ratio, wall time.
        summary: A Markdown summary (metadata model_uri: where compressed_model is).
        tracking_uri: MLflow tracking URI; the step logs its params, figures and summary into its MLflow run.
        experiment: MLflow experiment. No KFP run id: it would make every run's cache key unique;
            the record travels in summary's metadata and candidate-gates logs it into the run.
    """
    from shipyard.runtimes.runtime import call_step, name_output, record_outputs
    from shipyard.steps.compress import compress_model
    from shipyard.tracking.steprun import StepRun

    # Markdown reports are stored and recorded with a .md name (KFP, the run folder)
    name_output(summary, ".md")

    with StepRun("compress", recipe, tracking_uri=tracking_uri, experiment=experiment,
                 params={"recipe": recipe, "calibration_dataset": calibration_dataset,
                         "num_calibration_samples": num_calibration_samples, "max_seq_length": max_seq_length,
                         "seed": seed}) as run:
        result = call_step("compress", compress_model, model_dir=base_model.path, out_dir=compressed_model.path,
                           recipe=recipe, calibration_dataset=calibration_dataset, text_column=text_column,
                           num_calibration_samples=num_calibration_samples, max_seq_length=max_seq_length,
                           seed=seed, summary_path=summary.path)
        record_outputs(result, metrics=metrics, artifact=compressed_model)
        compressed_model.metadata["base_model"] = base_model.metadata.get("uri", "")
        summary.metadata["model_uri"] = compressed_model.uri
        run.log(**result["log"])
    run.keep_in(summary)
