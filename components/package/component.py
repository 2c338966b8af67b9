"""KFP wrapper of the package step (runtime ``base``)."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Input, Markdown, Model, Output

from shipyard.runtimes.runtime import runtime_image


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def package_model(
    model: Input[Model],
    registry: str,
    repository: str,
    tag: str,
    mode: str,
    base_image: str,
    annotations: str,
    insecure_tls: bool,
    modelcar: Output[Artifact],
    candidate: str = "",
    tracking_uri: str = "",
    experiment: str = "",
    kfp_run_id: str = "",
) -> NamedTuple("Outputs", [("uri", str), ("digest", str)]):  # noqa: UP014 - KFP reads this form
    """Package the model as a digest-pinned OCI image and push it.

    mode: "modelcar" (an image with the model under /models, for KServe oci:// URIs) or "oras"
    (the model folder as an OCI artifact). registry: host[:port] to push to ("" keeps the OCI
    layout in the output artifact only). repository: e.g. "team/my-model". tag: the tag to push
    ("" = model-<model digest>). base_image: "" (built-in static busybox), an OCI layout path or
    a registry reference. annotations: JSON object, e.g. {"source_model": ..., "recipe": ...,
    "eval": {...}, "benchmark": {...}, "pipeline_run": ...}. insecure_tls: skip TLS verification
    (test registries only). Credentials: SHIPYARD_REGISTRY_USERNAME/PASSWORD or a mounted
    .dockerconfigjson secret (SHIPYARD_REGISTRY_AUTH_FILE).

    Returns uri: oci://REGISTRY/REPO@sha256:... (or oci:///LAYOUT@sha256:... without a registry)
    and digest: the manifest digest. The modelcar artifact holds the OCI layout and a report.
    candidate, tracking_uri, experiment, kfp_run_id: the step logs its URI, digest and report
    (never the layout or the weights) into its MLflow run (see shipyard/tracking/steprun.py).
    """
    from collections import namedtuple

    from shipyard.runtimes.runtime import call_step
    from shipyard.steps.package import artifact_metadata, package_model, package_record
    from shipyard.tracking.steprun import StepRun

    with StepRun("package", candidate, tracking_uri=tracking_uri, experiment=experiment, kfp_run_id=kfp_run_id,
                 params={"registry": registry, "repository": repository, "mode": mode}) as run:
        result = call_step(
            "base",
            package_model,
            model_dir=model.path,
            out_dir=modelcar.path,
            registry=registry,
            repository=repository,
            tag=tag,
            mode=mode,
            base_image=base_image,
            annotations=annotations,
            insecure_tls=insecure_tls,
        )
        modelcar.metadata.update(artifact_metadata(result))
        run.log(**package_record(result, modelcar.path))
    print(f"packaged: {result['uri']}", flush=True)
    outputs = namedtuple("Outputs", ["uri", "digest"])
    return outputs(result["uri"], result["digest"])


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def package_champion(
    model: Input[Model],
    selection: Input[Artifact],
    registry: str,
    repository: str,
    mode: str,
    base_image: str,
    insecure_tls: bool,
    model_name: str,
    base_model_uri: str,
    champion_tolerance: float,
    modelcar: Output[Artifact],
    package_summary: Output[Markdown],
    decision: Output[Markdown],
    model_files: Output[Artifact],
    tracking_uri: str = "",
    experiment: str = "",
    kfp_run_id: str = "",
) -> bool:
    """Package the selected champion as a digest-pinned OCI modelcar, register it in MLflow and
    gate it against the current 'production' version (champion/challenger), in one task.

    Args:
        model: The champion's model folder (select_champion's winner).
        selection: select_champion's decision (selection.json): the champion's record and why it won.
        registry: host[:port] to push to ("" keeps an OCI layout in the modelcar artifact only).
        repository: Repository in the registry, e.g. team/my-model.
        mode: modelcar (an image with the model under /models, for KServe oci:// URIs) or oras.
        base_image: "" (built-in static busybox), an OCI layout path or a registry reference.
        insecure_tls: Skip TLS verification (test registries only).
        model_name: Registered model name in MLflow.
        base_model_uri: The base model's URI (lineage on the model version).
        champion_tolerance: How much worse than production an accuracy metric may be (absolute).
        modelcar: The OCI layout (weights stay here; they are never copied into MLflow).
        package_summary: What was pushed (reference, digest, layers, annotations), shown inline by the KFP UI.
        decision: The champion/challenger report; metadata: uri, digest, version, passed, reason, recipe, headline.
        model_files: The model's config.json, tokenizer and chat template, without weights: what the deploy
            step needs (memory planner, the verification's tokenizer), so it never downloads the model.
        tracking_uri: MLflow tracking URI (the pipeline parameter).
        experiment: MLflow experiment.
        kfp_run_id: dsl.PIPELINE_JOB_ID_PLACEHOLDER.

    Returns True to deploy the champion and give it 'production'.
    """
    from shipyard.runtimes.runtime import name_output, record_metadata
    from shipyard.steps.package import package_champion_task

    # Markdown reports are stored and recorded with a .md name (KFP, the run folder)
    name_output(package_summary, ".md")
    name_output(decision, ".md")

    out = package_champion_task(
        model_dir=model.path, selection_dir=selection.path, modelcar_dir=modelcar.path,
        summary_path=package_summary.path, decision_path=decision.path, model_files_dir=model_files.path,
        registry=registry, repository=repository, mode=mode, base_image=base_image, insecure_tls=insecure_tls,
        model_name=model_name, base_model_uri=base_model_uri, champion_tolerance=champion_tolerance,
        tracking_uri=tracking_uri, experiment=experiment, kfp_run_id=kfp_run_id)
    record_metadata(out["metadata"], modelcar=modelcar, model_files=model_files, package_summary=package_summary,
                    decision=decision)
    return bool(out["passed"])
