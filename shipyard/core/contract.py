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


def missing(name: str, why: str, env: Mapping[str, str] | None = None) -> ShipyardError:
    """The one-line error for a variable this step needs and does not have."""
    step = _contract(env).get("step") or "this step"
    src = source_of(name, env)
    if src:
        secret, key = src
        return ShipyardError(
            f"secret {secret}", f"key {key} ({name}) is missing in step {step}; {why}",
            f"create it: kubectl -n <namespace> create secret generic {secret} --from-literal={key}=... "
            f"(see {CONTRACT_DOC})",
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
