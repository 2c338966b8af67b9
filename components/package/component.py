"""KFP wrapper of the package step (runtime ``base``)."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Input, Model, Output

from shipyard.runtimes import runtime_image


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
    (never the layout or the weights) into its MLflow run (see components/track/steprun.py).
    """
    from collections import namedtuple

    from shipyard.components.track.steprun import StepRun
    from shipyard.runtimes import call_step

    run = StepRun("package", candidate, tracking_uri=tracking_uri, experiment=experiment, kfp_run_id=kfp_run_id,
                  params={"registry": registry, "repository": repository, "mode": mode})
    result = call_step(
        "base",
        "shipyard.components.package.package:package_model",
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
    modelcar.metadata.update({
        "uri": result["uri"],
        "digest": result["digest"],
        "tag": result["tag"],
        "tag_ref": result["tag_ref"],
        "mode": result["mode"],
        "size_bytes": result["size_bytes"],
        "layers": result["layers"],
        "model_digest": result["model_digest"],
    })
    run.log(params={"uri": result["uri"]}, metrics={"size_bytes": result["size_bytes"]},
            tags={"shipyard.oci_digest": result["digest"]},
            artifacts={"package.json": f"{modelcar.path}/shipyard-package.json",
                       "package.md": f"{modelcar.path}/shipyard-package.md"})
    run.finish()
    print(f"packaged: {result['uri']}", flush=True)
    outputs = namedtuple("Outputs", ["uri", "digest"])
    return outputs(result["uri"], result["digest"])
