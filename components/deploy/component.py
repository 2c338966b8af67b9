"""KFP wrapper of the deploy step (runtime: vllm).

The vllm runtime, not base: the verification of the Ready service runs lm-eval (the accuracy slice)
and guidellm (the SLO smoke), which only the vllm runtime has, and a container cannot reach another
image's venv; the runtime also has the Kubernetes and MLflow clients the apply and the aliases use."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Input, Markdown, Output

from shipyard.runtimes.runtime import runtime_image


@dsl.component(base_image=runtime_image("vllm"), install_kfp_package=False)
def deploy(
    model_uri: str,
    name: str,
    namespace: str,
    deploy_config: str,
    dry_run: bool,
    manifest: Output[Artifact],
    summary: Output[Markdown],
    verification: Output[Markdown],
    decision_record: Output[Artifact],
    model_files: Input[Artifact] = None,
    decision: Input[Markdown] = None,
    selection: Input[Artifact] = None,
    model_name: str = "",
    tracking_uri: str = "",
    experiment: str = "",
    kfp_run_id: str = "",
) -> NamedTuple("Outputs", [("url", str), ("status", str)]):
    """Deploy the model as a KServe LLMInferenceService (llm-d prefill/decode), or write the manifest
    only; verify the Ready service against the champion's record, then give the champion's model
    version 'production' in MLflow (a dry run: 'dry-run', production unchanged). A failed
    verification rolls back and fails the run. components/deploy/README.md has the details.

    Args:
        model_uri: The model KServe loads ("" = the decision's uri): the package step's digest-pinned
            oci://REGISTRY/REPO@sha256:... (mutable tags are refused), or hf://, s3://, pvc://.
        name: Name of the LLMInferenceService (DNS-1035 label, at most 42 characters).
        namespace: Target namespace (the deploy ServiceAccount needs the shipyard-deployer Role there).
        deploy_config: JSON object of deploy parameters (mode, replicas, scaling, image, vllm_args,
            apply, verify, rollout, ...): the deploy_config table in components/deploy/README.md.
        dry_run: Only render and validate the manifest (no cluster needed; the default for local runs).
        manifest: The rendered, validated manifest (multi-document YAML).
        summary: What was deployed (objects, status, URL and the manifest).
        verification: The Ready service's verification against the champion's record, or why none ran.
        decision_record: The champion's decision record with this deploy's verification and outcome.
        model_files: The model's config.json and tokenizer, no weights (package-champion or
            resolve-model): they size vLLM and serve the verification; weights are never downloaded.
        decision: The champion/challenger decision (metadata: uri, version, recipe, headline); with
            model_name, the version gets 'production' once the deployment is Ready and verified.
        selection: The champion's record (select-champion's, or a candidate's gates output): the
            golden outputs and figures the service is verified against, the SLO its alerts watch.
        model_name: Registered model name in MLflow (with decision).
        tracking_uri: MLflow tracking URI (the pipeline parameter).
        experiment: MLflow experiment.
        kfp_run_id: dsl.PIPELINE_JOB_ID_PLACEHOLDER.

    Returns:
        url: status.url of the Ready service ('' on a dry run).
        status: Ready, or DryRun.
    """
    from shipyard.runtimes.runtime import metadata_of, name_output, path_of, record_metadata, uri_of
    from shipyard.steps.deploy import deploy_task

    # Markdown reports are stored and recorded with a .md name (KFP, the run folder)
    name_output(summary, ".md")
    name_output(verification, ".md")
    out = deploy_task(model_uri=model_uri, name=name, namespace=namespace, deploy_config=deploy_config,
                      dry_run=dry_run, champion=dict(metadata_of(decision)), manifest_path=manifest.path,
                      summary_path=summary.path, verification_path=verification.path,
                      decision_record_path=decision_record.path, model_dir=path_of(model_files) or None,
                      selection_path=path_of(selection) or None, selection_uri=uri_of(selection) or None,
                      model_name=model_name, tracking_uri=tracking_uri, experiment=experiment, kfp_run_id=kfp_run_id)
    record_metadata(out["metadata"], manifest=manifest, verification=verification, decision_record=decision_record)
    return out["url"], out["status"]  # the Outputs NamedTuple's fields, in order
