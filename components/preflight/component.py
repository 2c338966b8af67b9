"""KFP wrapper of the pre-flight step (runtime: base). Logic: ``preflight.py``."""

from kfp import dsl

from shipyard.runtimes.runtime import runtime_image


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def preflight(
    pipeline: str,
    kfp_run_id: str,
    candidate_uri: str = "",
    model_uri: str = "",
    recipes: list = [],  # noqa: B006 - KFP reads the default
    selection: str = "",
    calibration_dataset: str = "",
    text_column: str = "",
    num_calibration_samples: int = 0,
    max_seq_length: int = 0,
    seed: int = 0,
    eval_backend: str = "",
    eval_config: str = "",
    accuracy_thresholds: str = "",
    lora_adapters: str = "",
    eval_sets: str = "",
    benchmark_config: str = "",
    slo: str = "",
    safety: str = "",
    tuning: str = "",
    registry: str = "",
    repository: str = "",
    package_mode: str = "",
    modelcar_base_image: str = "",
    insecure_registry: bool = False,
    deploy_name: str = "",
    namespace: str = "",
    deploy_config: str = "",
    dry_run: bool = False,
    tracking_uri: str = "",
    experiment: str = "",
    registered_model_name: str = "",
    champion_tolerance: float = 0.0,
    served_model_uri: str = "",
    prometheus_url: str = "",
    watch_config: str = "",
) -> str:
    """Check every pipeline parameter in seconds, before any model is loaded; then open the
    pipeline's MLflow run with the parameters. A bad parameter fails the run here with one
    line naming the parameter and the fix.

    Args:
        pipeline: The pipeline's name (which parameters it has).
        kfp_run_id: dsl.PIPELINE_JOB_ID_PLACEHOLDER: later steps find the MLflow run by it.

    Returns the MLflow parent run id.
    """
    from shipyard.params.pipeline import params_for
    from shipyard.runtimes.runtime import call_step
    from shipyard.steps.preflight import preflight_step

    given = dict(locals())
    params = {p.name: given[p.name] for p in params_for(pipeline)}
    out = call_step("base", preflight_step, pipeline=pipeline,
                    params=params, tracking_uri=tracking_uri, experiment=experiment, kfp_run_id=kfp_run_id)
    print(f"pre-flight: {len(out['checked'])} parameters checked; MLflow run: {out['run_url']}", flush=True)
    return out["parent_run_id"]
