"""KFP wrapper of the watch step (runtime: base). Logic: ``shipyard/steps/watch.py``."""

from kfp import dsl
from kfp.dsl import Artifact, Markdown, Output

from shipyard.runtimes.runtime import runtime_image


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def watch_production(
    served_model_uri: str,
    prometheus_url: str,
    watch_config: str,
    deploy_name: str,
    registered_model_name: str,
    report: Output[Markdown],
    comparison: Output[Artifact],
    tracking_uri: str = "",
    experiment: str = "",
    kfp_run_id: str = "",
) -> bool:
    """Is production still serving the traffic its model was qualified on?

    Reads the served model's signed SLO evidence (the benchmark levels and the SLO it passed),
    verified with the cluster's trust key, and the live traffic from Prometheus over the window:
    input and output lengths, load per replica, TTFT p99 at that load against the benchmark
    curve, the peak load per replica against the capacity a replayed recorded workload qualified
    (goodput at the SLO), the prefix-cache hit rate. A dimension outside its tolerance is a drift: the report
    names it and gives the re-qualification run on the traffic as measured.

    Args:
        served_model_uri: The served modelcar (oci://...@sha256:...); empty: MLflow's production version.
        prometheus_url: The Prometheus API base URL that scrapes the vLLM pods.
        watch_config: JSON: window, tolerance, selector, model_name.
        deploy_name: The LLMInferenceService's name (the default served model name).
        registered_model_name: MLflow registered model whose production version is watched.
        report: The verdict and one line per dimension (Markdown).
        comparison: The comparison as JSON (drift.json): live and qualified figures per dimension.
        tracking_uri: MLflow tracking URI (the pipeline parameter).
        experiment: MLflow experiment.
        kfp_run_id: dsl.PIPELINE_JOB_ID_PLACEHOLDER.

    Returns True when production drifted from the envelope.
    """
    from shipyard.runtimes.runtime import call_step, name_output, record_outputs
    from shipyard.steps.watch import watch_step
    from shipyard.tracking.steprun import StepRun

    name_output(report, ".md")
    name_output(comparison, ".json")
    with StepRun("watch", "", tracking_uri=tracking_uri, experiment=experiment, kfp_run_id=kfp_run_id,
                 params={"watch_config": watch_config, "prometheus_url": prometheus_url}) as run:
        out = call_step("base", watch_step, served_model_uri=served_model_uri, prometheus_url=prometheus_url,
                        watch_config=watch_config, deploy_name=deploy_name, report_path=report.path,
                        result_path=comparison.path, tracking_uri=tracking_uri,
                        registered_model_name=registered_model_name)
        record_outputs(out, artifact=report)
        run.log(**out["log"])
    return bool(out["drifted"])
