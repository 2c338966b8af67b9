"""KFP wrappers of the resolve step (runtime: compress): pin the URI (never cached), then fetch it
(cached by the pinned URI and the content fingerprint). Logic: shipyard.models.resolve, ``pin.py``."""


from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Model, Output

from shipyard.runtimes.runtime import runtime_image


@dsl.component(base_image=runtime_image("compress"), install_kfp_package=False)
def pin_model(model_uri: str, field: str = "model_uri") -> NamedTuple("Pinned", [("uri", str), ("fingerprint", str)]):
    """Pin the model URI to what it names now, so that the cached resolve step (and every step
    downstream of its model) reruns exactly when the model changes. Never cached.

    Args:
        model_uri: As resolve_model's. hf://org/name[@branch] becomes hf://org/name@<commit the hub serves now>.
        field: The parameter an error names: model_uri for the base model, eval_sets.judge.model_uri for the
            judge of your rubric sets.

    Returns uri (the pinned URI) and fingerprint (hub commit, sha256 over S3 keys/ETags/sizes or
    over a folder's names/sizes/mtimes, OCI digest).
    """
    from collections import namedtuple

    from shipyard.runtimes.runtime import call_step
    from shipyard.steps.pin import pin_model

    out = call_step("compress", pin_model, uri=model_uri, field=field)
    moved = f" (was @{out['moved_from']})" if out["moved_from"] else ""
    print(f"model: {out['uri']}{moved}; content {out['fingerprint']}", flush=True)
    return namedtuple("Pinned", ["uri", "fingerprint"])(out["uri"], out["fingerprint"])


@dsl.component(base_image=runtime_image("compress"), install_kfp_package=False)
def resolve_model(model_uri: str, model: Output[Model], model_files: Output[Artifact], fingerprint: str = "",
                  field: str = "model_uri", check_disk: bool = True):
    """Fetch the base model (or the judge of your rubric sets) into a pipeline artifact.

    Args:
        model_uri: Where the model is: hf://org/name[@rev], s3://bucket/prefix, oci://registry/repo@sha256:...,
            pvc://claim/path, a local folder, or embedded://smollm2-135m-instruct (the default local model).
        model: The model as a Hugging Face folder (config.json, weights, tokenizer).
        model_files: The model's config.json, tokenizer and chat template without the weights, for a step
            that needs only those (the promote pipeline's deploy): KFP downloads a whole Model artifact.
        fingerprint: pin_model's content fingerprint: part of KFP's cache key, so a cached model is
            reused only while the content it names is unchanged (recorded in the model's metadata).
        field: The parameter an error names: model_uri for the base model, eval_sets.judge.model_uri for the judge.
        check_disk: Check the model against package-champion's disk (below); off for the judge, which is never
            packaged.

    In a cluster the step fails here, before any GPU work, when package-champion could not hold
    the model in the ephemeral storage it requests (ephemeral_storage in the cluster config); the
    error names the size to set.
    """
    import os

    from shipyard.core.contract import ENV_EPHEMERAL_STORAGE, check_model_fits_disk
    from shipyard.models.resolve import resolve_model
    from shipyard.runtimes.runtime import call_step

    info = call_step("compress", resolve_model, uri=model_uri, out_dir=model.path, field=field)
    if check_disk and os.environ.get(ENV_EPHEMERAL_STORAGE):  # compiled for a cluster
        call_step("compress", check_model_fits_disk, model_bytes=int(info["size_bytes"]))
    model.metadata.update(info)
    from shipyard.serving.kserve.render import copy_model_files

    model_files.metadata.update(copy_model_files(model.path, model_files.path))
    if fingerprint:
        model.metadata["fingerprint"] = fingerprint


@dsl.component(base_image=runtime_image("compress"), install_kfp_package=False)
def fetch_adapters(lora_adapters: str, adapters: Output[Artifact]):
    """Fetch the LoRA adapters of the lora_adapters parameter into one artifact, each pinned by content.

    Args:
        lora_adapters: JSON {"name": "URI"} or [{"name", "uri"}] (hf://, s3://, pvc:// or a folder; not oci://,
            kserve#6094). Empty: no adapters (an empty record, and every adapter step does nothing).
        adapters: One folder per adapter (adapter_config.json + weights) and adapters.json: name, URI,
            content digest (sha256 tree digest) and rank of each; the same list is in the metadata.
    """
    from shipyard.models.adapters import fetch_adapters
    from shipyard.runtimes.runtime import call_step

    records = call_step("compress", fetch_adapters, lora_adapters=lora_adapters,
                        out_dir=adapters.path)
    adapters.metadata["adapters"] = [{k: r.get(k) for k in ("name", "uri", "digest", "rank")} for r in records]
    for r in records:
        print(f"LoRA adapter {r['name']}: {r['uri']} (rank {r.get('rank')}, content {r['digest']})", flush=True)
