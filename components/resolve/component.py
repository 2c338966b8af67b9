"""KFP wrapper of the resolve step (runtime: compress)."""


from kfp import dsl
from kfp.dsl import Model, Output

from shipyard.runtimes.runtime import runtime_image


@dsl.component(base_image=runtime_image("compress"), install_kfp_package=False)
def resolve_model(model_uri: str, model: Output[Model]):
    """Fetch the base model into a pipeline artifact.

    Args:
        model_uri: Where the model is: hf://org/name[@rev], s3://bucket/prefix, oci://registry/repo@sha256:...,
            pvc://claim/path, a local folder, or embedded://smollm2-135m-instruct (the default local model).
        model: The model as a Hugging Face folder (config.json, weights, tokenizer).
    """
    from shipyard.runtimes.runtime import call_step

    info = call_step("compress", "shipyard.models.resolve:resolve_model", uri=model_uri, out_dir=model.path)
    model.metadata.update(info)
