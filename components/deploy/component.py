"""KFP wrapper of the deploy step (runtime: base)."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Input, Model, Output

from shipyard.runtimes import runtime_image


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def deploy(
    model_uri: str,
    name: str,
    namespace: str,
    deploy_config: str,
    dry_run: bool,
    manifest: Output[Artifact],
    model: Input[Model] = None,
) -> NamedTuple("Outputs", [("url", str), ("status", str)]):
    """Deploy the model as a KServe LLMInferenceService (llm-d prefill/decode), or write the manifest only.

    Args:
        model_uri: The model KServe loads: the digest-pinned oci://REGISTRY/REPO@sha256:... from the
            package step (mutable tags are refused unless deploy_config sets allow_mutable_tag), or
            hf://, s3://, pvc://.
        name: Name of the LLMInferenceService (DNS-1035 label, at most 42 characters).
        namespace: Target namespace (the deploy ServiceAccount needs the shipyard-deployer Role there).
        deploy_config: JSON object of deploy parameters: mode (aggregated|pd), replicas, prefill_replicas,
            tensor_parallel, data_parallel/data_local, gpus, gpu_type, gpu_memory_gib, router, scaling,
            base_refs, fast_start, vllm_args, planner, mlflow_model_version, pipeline_run_id, preset, and
            apply {wait_timeout_s, poll_s, false_grace_s, api_timeout_s}. See components/deploy/README.md.
        dry_run: Only render and validate the manifest (no cluster needed; the default for local runs).
        manifest: The rendered, validated manifest (multi-document YAML).
        model: Optional model folder; its config.json sizes vLLM through the memory planner.

    Returns:
        url: status.url of the Ready service ('' on a dry run).
        status: Ready, or DryRun.
    """
    from collections import namedtuple

    from shipyard.runtimes import call_step

    model_dir = model.path if model is not None else None
    result = call_step(
        "base",
        "shipyard.components.deploy.step:run_deploy",
        deploy_config=deploy_config,
        manifest_path=manifest.path,
        dry_run=dry_run,
        model_dir=model_dir,
        name=name,
        model_uri=model_uri,
        namespace=namespace,
    )
    manifest.metadata.update({k: result[k] for k in ("name", "namespace", "kinds", "mode", "status", "planned")})
    outputs = namedtuple("Outputs", ["url", "status"])
    return outputs(result["url"], result["status"])
