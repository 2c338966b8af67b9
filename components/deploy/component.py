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
    only; with a champion's decision, then give its model version 'production' in MLflow (a dry
    run: 'dry-run', production unchanged).

    Args:
        model_uri: The model KServe loads ("" = the decision's uri): the digest-pinned
            oci://REGISTRY/REPO@sha256:... from the package step (mutable tags are refused unless deploy_config sets allow_mutable_tag), or
            hf://, s3://, pvc://.
        name: Name of the LLMInferenceService (DNS-1035 label, at most 42 characters).
        namespace: Target namespace (the deploy ServiceAccount needs the shipyard-deployer Role there).
        deploy_config: JSON object of deploy parameters: mode (aggregated|pd), replicas, prefill_replicas,
            tensor_parallel, data_parallel/data_local, gpus, gpu_type, gpu_memory_gib, router, scaling,
            base_refs, fast_start, vllm_args, planner, mlflow_model_version, pipeline_run_id, preset, and
            apply {wait_timeout_s, poll_s, false_grace_s, api_timeout_s}. See components/deploy/README.md.
        dry_run: Only render and validate the manifest (no cluster needed; the default for local runs).
        manifest: The rendered, validated manifest (multi-document YAML).
        summary: What was deployed (objects, status, URL and the manifest), shown inline by the KFP UI.
        model_files: The model's small files (config.json, tokenizer, chat template; no weights), from
            package-champion or resolve-model: config.json sizes vLLM through the memory planner, the
            tokenizer serves the verification's accuracy slice and SLO smoke. The step never downloads
            the model's weights.
        verification: The verification of the Ready service against the champion's record (golden outputs,
            accuracy slice, SLO smoke, P/D pool metrics), or why none ran. A failed verification rolls back
            and fails the run; 'production' then stays where it was.
        decision_record: The champion's decision record (select_champion's decision-record.json) with this
            deploy's verification (passed, failed or not run, every check) and outcome; also logged to the
            step's MLflow run, failed or not.
        decision: Optional champion/challenger decision (metadata: uri, version, recipe, headline); when
            given with model_name, the version gets 'production' (the old one 'previous') once the
            deployment is Ready, and the pipeline's MLflow run the champion's headline figures. A
            dry run never moves 'production': the version gets the alias 'dry-run' instead.
        selection: The champion's record (select_champion's selection, or a candidate's gates output): the
            golden outputs and figures the deployed service is verified against (deploy_config.verify), and the
            SLO, error budget and knee the manifest's PrometheusRule alerts on (its URI is their runbook_url).
        model_name: Registered model name in MLflow (with decision).
        tracking_uri: MLflow tracking URI (the pipeline parameter).
        experiment: MLflow experiment.
        kfp_run_id: dsl.PIPELINE_JOB_ID_PLACEHOLDER.

    Returns:
        url: status.url of the Ready service ('' on a dry run).
        status: Ready, or DryRun.
    """
    import json
    import sys
    import tempfile
    from collections import namedtuple

    from shipyard.runtimes.runtime import call_step, name_output
    from shipyard.steps.deploy import deploy_outputs, failed_deploy_outputs, promotion_allowed, run_deploy
    from shipyard.tracking.promotion import promote_production
    from shipyard.tracking.steprun import StepRun

    # Markdown reports are stored and recorded with a .md name (KFP, the run folder)
    name_output(summary, ".md")
    name_output(verification, ".md")

    champion = dict(decision.metadata) if decision is not None else {}
    model_uri = model_uri or str(champion.get("uri", ""))
    with StepRun("deploy", str(champion.get("recipe", "")), tracking_uri=tracking_uri, experiment=experiment,
                 kfp_run_id=kfp_run_id if champion else "",
                 params={"name": name, "namespace": namespace, "model_uri": model_uri, "dry_run": dry_run,
                         "model_name": model_name, "version": str(champion.get("version", ""))}) as run:
        checked = tempfile.mkdtemp(prefix="shipyard-verify-")
        try:
            result = call_step(
                "vllm",
                run_deploy,
                deploy_config=deploy_config,
                manifest_path=manifest.path,
                dry_run=dry_run,
                model_dir=model_files.path if model_files is not None else None,
                name=name,
                model_uri=model_uri,
                namespace=namespace,
                summary_path=summary.path,
                candidate=selection.path if selection is not None else None,
                verify_dir=checked,
                report_url=selection.uri if selection is not None else None,
            )
        except SystemExit:
            # rolled back (or never applied): the verification report, when one was written, says why, and
            # the decision record keeps the failed deploy (and its verification) in MLflow
            run.log(**failed_deploy_outputs(checked, verification.path))
            raise
        recorded = deploy_outputs(result, checked, manifest_path=manifest.path, summary_path=summary.path,
                                 verification_path=verification.path, decision_record_path=decision_record.path)
        for artifact, key in ((manifest, "manifest"), (verification, "verification"),
                              (decision_record, "decision_record")):
            artifact.metadata.update(recorded["metadata"][key])
        run.log(**recorded["log"])
        # nothing is promoted on a verification that did not run, unless the user switched it off
        verified, why = promotion_allowed(result, dry_run)
        if champion and model_name and verified:
            out = call_step("vllm", promote_production, tracking_uri=tracking_uri,
                            experiment=experiment, kfp_run_id=kfp_run_id, model_name=model_name,
                            version=str(champion["version"]), recipe=str(champion.get("recipe", "")),
                            headline_json=str(champion.get("headline", "{}")), dry_run=dry_run)
            print(f"{out.get('note') or 'production'}: aliases {json.dumps(out['aliases'])}", flush=True)
        elif champion and model_name:
            print(f"shipyard: verification: {why}; production unchanged", file=sys.stderr, flush=True)
            raise SystemExit(1)
    outputs = namedtuple("Outputs", ["url", "status"])
    return outputs(result["url"], result["status"])
