"""KFP wrappers of the track step (runtime: base). Logic: ``track.py``, ``champion.py``, ``steprun.py``.

There are no tracking-only tasks: every step logs itself into MLflow (``steprun.py``); the
pre-flight task opens the pipeline's parent run. These wrappers are the champion's path in the
registry (``register_champion`` for an already packaged candidate: the promote pipeline; the
deploy step gives the deployed champion ``production``), the exit handler that closes the
pipeline's run (``close_tracking``) and two operator tools (``rollback_production``,
``set_alias``). ``tracking_uri``: an MLflow server URL, or empty for the KFP MLflow plugin's
endpoint (``KFP_MLFLOW_CONFIG``), else ``MLFLOW_TRACKING_URI``, else a local file store
``mlruns`` in the run's work dir.
"""

from kfp import dsl
from kfp.dsl import Artifact, Input, Markdown, Output

from shipyard.runtimes.runtime import runtime_image


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def close_tracking(tracking_uri: str, experiment: str, kfp_run_id: str, status: dsl.PipelineTaskFinalStatus) -> str:
    """Exit handler: close the pipeline's MLflow run, FINISHED or FAILED with KFP's final state.

    An exit task may not consume other tasks' outputs, so the parent run is found by its
    shipyard.kfp_run_id tag (written by start_tracking).

    Args:
        tracking_uri: The pipeline's tracking_uri parameter (resolved the same way start_tracking does).
        experiment: The pipeline's experiment parameter.
        kfp_run_id: dsl.PIPELINE_JOB_ID_PLACEHOLDER.
        status: Filled in by KFP: the pipeline's final state and error.
    """
    from shipyard.runtimes.runtime import call_step
    from shipyard.tracking.pipeline_runs import close_pipeline_run

    return call_step("base", close_pipeline_run, tracking_uri=tracking_uri,
                     experiment=experiment, kfp_run_id=kfp_run_id, state=status.state,
                     error=status.error_message or "")



@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def register_champion(
    model_name: str,
    source_uri: str,
    digest: str,
    base_model_uri: str,
    champion_tolerance: float,
    selection: Input[Artifact],
    decision: Output[Markdown],
    tracking_uri: str = "",
    experiment: str = "",
    kfp_run_id: str = "",
) -> bool:
    """Register the packaged champion as a model version (alias 'candidate') and gate it against
    the current 'production' version (champion/challenger).

    The version's tags and description carry the recipe, base model, OCI digest, the selection
    reason and the eval/benchmark headline; its accuracy figures are recorded on it for the
    next run's gate. Each accuracy metric may be at most champion_tolerance worse than
    production's; with no production version yet the champion passes.

    Args:
        model_name: Registered model name.
        source_uri: The package step's oci://...@sha256:... URI.
        digest: The package step's manifest digest.
        base_model_uri: The base model's URI (lineage).
        champion_tolerance: How much worse than production an accuracy metric may be (absolute).
        selection: select_champion's decision (selection.json with the champion's record).
        decision: The gate's report; metadata: version, passed, reason, recipe, headline.
        tracking_uri: MLflow tracking URI (the pipeline parameter).
        experiment: MLflow experiment.
        kfp_run_id: dsl.PIPELINE_JOB_ID_PLACEHOLDER.

    Returns True to deploy and promote (a single bool so dsl.If resolves under kfp.local).
    """
    from shipyard.runtimes.runtime import call_step, name_output, record_outputs
    from shipyard.steps.register import register_champion
    from shipyard.tracking.steprun import StepRun

    # Markdown reports are stored and recorded with a .md name (KFP, the run folder)
    name_output(decision, ".md")

    with StepRun("register", "", tracking_uri=tracking_uri, experiment=experiment, kfp_run_id=kfp_run_id,
                 params={"model_name": model_name, "source_uri": source_uri,
                         "champion_tolerance": champion_tolerance}) as run:
        out = call_step("base", register_champion, tracking_uri=tracking_uri,
                        experiment=experiment, kfp_run_id=kfp_run_id, model_name=model_name, source_uri=source_uri,
                        digest=digest, selection_dir=selection.path, base_model_uri=base_model_uri,
                        champion_tolerance=champion_tolerance, report_path=decision.path)
        record_outputs(out, artifact=decision)
        run.log(**out["log"])
    print(("PASSED: " if out["passed"] else "REFUSED: ") + out["reason"], flush=True)
    return bool(out["passed"])
