"""The cluster contract, as a running step sees it.

``pipelines/cluster.yaml`` says which Secret and key feed each environment variable of a step
(docs/cluster-contract.md is the same table). At compile time every step gets a pod annotation
``shipyard.io/contract`` with that mapping, exposed to the container through the downward API
as ``SHIPYARD_CONTRACT``. So a step knows that it runs in a cluster, and a variable it needs but
did not get is reported as the Secret and key to create, in one line, instead of a silent
fallback (an S3 client talking to s3.amazonaws.com, an MLflow store dying with the pod).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from shipyard.core.errors import ShipyardError

ENV_CONTRACT = "SHIPYARD_CONTRACT"
CONTRACT_ANNOTATION = "shipyard.io/contract"
CONTRACT_DOC = "docs/cluster-contract.md"


def _contract(env: Mapping[str, str] | None = None) -> dict[str, object]:
    raw = (os.environ if env is None else env).get(ENV_CONTRACT, "").strip()
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        return {"step": "?", "env": {}}
    return data if isinstance(data, dict) else {}


def in_cluster(env: Mapping[str, str] | None = None) -> bool:
    """True in a step compiled by ``shipyard compile`` and run by KFP in a cluster."""
    return bool(_contract(env))


def source_of(name: str, env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """(secret, key) that feeds environment variable ``name`` in this step, if any."""
    where = (_contract(env).get("env") or {}).get(name)  # type: ignore[union-attr]
    if not isinstance(where, str) or "/" not in where:
        return None
    secret, _, key = where.partition("/")
    return secret, key


#: the contract Secrets a step's inputs can need (pipelines/cluster.yaml's ``secrets``)
S3_SECRET = "shipyard-s3"
HF_SECRET = "hf-token"
#: set by ``shipyard compile`` on the pre-flight: JSON ``{step: [Secret, ...]}``, the Secrets each
#: step of this pipeline was compiled with, so the pre-flight can tell a step whose input needs a
#: Secret it is not given (:func:`shipyard.params.input_secrets.check_input_secrets`)
ENV_STEP_SECRETS = "SHIPYARD_STEP_SECRETS"


def missing(name: str, why: str, env: Mapping[str, str] | None = None, secret: str = "") -> ShipyardError:
    """The one-line error for a variable this step needs and does not have. ``secret``: the
    contract Secret that holds it, named when this step is not given that Secret at all (the fix
    is then the cluster config's ``secrets.<secret>.steps``, not creating the Secret)."""
    step = _contract(env).get("step") or "this step"
    src = source_of(name, env)
    if src:
        secret, key = src
        return ShipyardError(
            f"secret {secret}", f"key {key} ({name}) is missing in step {step}; {why}",
            f"Secret {secret} in the namespace the pipeline pods run in is absent or lacks key {key} (it is mounted "
            f"optional): create it (kubectl -n <namespace> create secret generic {secret} --from-literal={key}=...) "
            f"or add the key (kubectl -n <namespace> patch secret {secret} --type merge -p "
            f"'{{\"stringData\": {{\"{key}\": \"...\"}}}}'); shipyard check says which (see {CONTRACT_DOC})",
        )
    if secret:
        return ShipyardError(
            f"secret {secret}", f"step {step} is not given Secret {secret} ({name} is unset); {why}",
            f"add {step} to secrets.{secret}.steps in the cluster config and compile again; creating the Secret "
            f"does not help, this step does not mount it (see {CONTRACT_DOC})",
        )
    return ShipyardError(
        name, f"is not set in step {step}; {why}",
        f"give the step the secret that holds it (secrets.<name>.steps in the cluster config; see {CONTRACT_DOC})",
    )


def require(name: str, why: str, env: Mapping[str, str] | None = None) -> str:
    """The value of ``name`` or :func:`missing`'s error."""
    value = (os.environ if env is None else env).get(name, "").strip()
    if not value:
        raise missing(name, why, env)
    return value


#: the Secret that holds the attestation signing key (``pipelines/cluster.yaml``'s ``secrets``): its
#: key ``signing-key.pem`` (PEM, Ed25519 or ECDSA private key) feeds :data:`ENV_ATTESTATION_KEY` in
#: the package step only, which signs the modelcar's attestations.
ATTESTATION_SECRET = "shipyard-attestation"
#: the trust root, a Secret of its own so that nothing that verifies can sign: its key
#: ``public-key.pem`` feeds :data:`ENV_ATTESTATION_PUBLIC_KEY` in the deploy step, which refuses a
#: model whose verification summary does not verify with it; the admission policies read it too.
ATTESTATION_TRUST_SECRET = "shipyard-attestation-trust"
ENV_ATTESTATION_KEY = "SHIPYARD_ATTESTATION_KEY"
ENV_ATTESTATION_PUBLIC_KEY = "SHIPYARD_ATTESTATION_PUBLIC_KEY"
#: a local alternative to the PEM text in the variables above: the path of the PEM file
ENV_ATTESTATION_KEY_FILE = "SHIPYARD_ATTESTATION_KEY_FILE"
ENV_ATTESTATION_PUBLIC_KEY_FILE = "SHIPYARD_ATTESTATION_PUBLIC_KEY_FILE"


#: set by ``shipyard compile`` on every step: the image reference the step's container runs (the
#: compiled task's own image, as the cluster's KFP driver and the container rehearsal start it).
#: The benchmark records it as the engine the SLO gate measured; the deploy step serves that image.
ENV_IMAGE = "SHIPYARD_IMAGE"


# -- disk: the ephemeral storage of the steps that hold a whole model on a CPU node ---------------

#: set by ``shipyard compile`` on resolve-model: JSON ``{step: bytes}`` of the ephemeral storage
#: each listed step requests (``ephemeral_storage`` in the cluster config)
ENV_EPHEMERAL_STORAGE = "SHIPYARD_EPHEMERAL_STORAGE"
#: copies of the model a step keeps on its node's disk: KFP's launcher downloads every input
#: artifact and writes every output under /minio, /s3 or /gcs (emptyDirs), so package-champion
#: holds the model and its modelcar layout, deploy the model it was handed
MODEL_COPIES = {"package-champion": 2, "deploy": 1}
#: room for the rest of the pod's disk use (logs, the container's writable layer, reports)
DISK_MARGIN_BYTES = 2 * 1024**3
GIB = 1024**3


def disk_needed(step: str, model_bytes: int) -> int:
    """Bytes of ephemeral storage ``step`` needs for a model of ``model_bytes``."""
    return MODEL_COPIES.get(step, 1) * model_bytes + DISK_MARGIN_BYTES


def check_model_fits_disk(model_bytes: int, env: Mapping[str, str] | None = None) -> None:
    """Fail at once, before any GPU work, when a later step's compiled ephemeral-storage request
    cannot hold this model: the kubelet would evict that pod hours later. Nothing to check
    outside a cluster (``SHIPYARD_EPHEMERAL_STORAGE`` unset)."""
    raw = (os.environ if env is None else env).get(ENV_EPHEMERAL_STORAGE, "").strip()
    try:
        sizes = json.loads(raw) if raw else {}
    except ValueError:
        sizes = {}
    short = sorted((disk_needed(step, int(model_bytes)), step, limit)
                   for step, limit in (sizes.items() if isinstance(sizes, dict) else [])
                   if isinstance(limit, int) and disk_needed(step, int(model_bytes)) > limit)
    if short:  # the step that needs the most: the size named fits every step
        need, step, limit = short[-1]
        copies = MODEL_COPIES.get(step, 1)
        raise ShipyardError(
            "ephemeral_storage.size",
            f"the model is {model_bytes / GIB:.1f} GiB; {step} keeps {copies} cop{'y' if copies == 1 else 'ies'} "
            f"of it on its node's disk and requests {limit / GIB:.0f} GiB, so the kubelet would evict it",
            f"set ephemeral_storage.size in the cluster config to at least {-(-need // GIB)}Gi and compile again "
            f"(see {CONTRACT_DOC})",
        )
