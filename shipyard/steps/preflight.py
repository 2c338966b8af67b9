"""The pre-flight step: every parameter checked (:mod:`shipyard.params.checks`), MLflow reachable,
the MLflow parent run opened. The pipeline's first task, so bad input fails before any GPU work."""

from __future__ import annotations

import json
from typing import Any

from shipyard.core.contract import ENV_CONTRACT, ENV_STEP_SECRETS
from shipyard.core.errors import ShipyardError
from shipyard.gates.config import accuracy_config
from shipyard.gates.slo import parse_slo, rule_text
from shipyard.params.checks import check_parameters, record_for_mlflow
from shipyard.params.deploy import parse_deploy_config
from shipyard.params.input_secrets import check_input_secrets, check_s3_endpoint, parse_step_secrets
from shipyard.params.pipeline import BY_NAME, PLACEHOLDER_OCI
from shipyard.serving.cluster_check import FAIL, pod_checks
from shipyard.serving.kserve.apply import api_client


def preflight_step(pipeline: str, params: dict[str, Any], tracking_uri: str, experiment: str, kfp_run_id: str) -> dict[str, Any]:
    """The pipeline's first task: check everything and that MLflow answers (one line within
    seconds, exit status 3, when it does not), then open the MLflow parent run with the
    parameters."""
    typed = check_parameters(pipeline, params, fill_defaults=False)
    _input_secrets(typed)
    from shipyard.tracking.pipeline_runs import start_tracking
    from shipyard.tracking.tracker import check_tracking_uri

    resolved = check_tracking_uri(tracking_uri)
    _cluster_checks(resolved, typed)

    recorded = {**record_for_mlflow(typed), **effective_params(typed)}
    run = start_tracking(tracking_uri=tracking_uri, experiment=experiment, pipeline_name=pipeline,
                         kfp_run_id=kfp_run_id, params_json=json.dumps(recorded), tags_json="{}")
    return {"checked": sorted(typed), **run}


def effective_params(typed: dict[str, Any]) -> dict[str, str]:
    """What the gates apply, defaults filled in, as the MLflow parent run records it beside the
    parameters as given: ``effective.slo`` (the SLO rule in words, every threshold) and
    ``effective.accuracy_thresholds`` (the accuracy gate's config as JSON), so a run whose ``slo``
    was left empty still says which SLO judged it."""
    out: dict[str, str] = {}
    if "slo" in typed:
        out["effective.slo"] = rule_text(parse_slo(typed["slo"]))
    if "accuracy_thresholds" in typed:
        config = accuracy_config(typed["accuracy_thresholds"]).model_dump(mode="json", exclude_none=True)
        out["effective.accuracy_thresholds"] = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return out


def _input_secrets(typed: dict[str, Any]) -> None:
    """In a cluster, every step that reads one of this run's s3:// inputs (an s3:// deploy template,
    model, adapters, calibration data) was compiled with Secret shipyard-s3 (``SHIPYARD_STEP_SECRETS``,
    set by ``shipyard compile``): otherwise one line naming the parameter and the cluster config's
    entry, before any GPU work (the deploy step would fail after it). An S3 endpoint in this
    environment that carries credentials is refused when the run reads s3:// (``check_s3_endpoint``)."""
    import os

    given = parse_step_secrets(os.environ.get(ENV_STEP_SECRETS, "")) if os.environ.get(ENV_CONTRACT) else None
    if given is not None:
        check_input_secrets(typed, given)
    check_s3_endpoint(typed)


def _cluster_checks(tracking_uri: str, typed: dict[str, Any]) -> None:
    """In a cluster, the checks a pod can make (:func:`shipyard.serving.cluster_check.pod_checks`):
    MLflow's API by the in-cluster name (its Host check answers 403 while /health passes), an
    artifact round-trip (an artifact store that cannot write answers 500 while the API passes) and,
    when the run deploys, this identity's permissions in the target namespace. The first failure
    ends the run here, in seconds, as one line."""
    import os

    if not os.environ.get(ENV_CONTRACT):
        return
    api = None
    if typed.get("dry_run") is False and "namespace" in typed:
        try:
            api = api_client(timeout_s=10.0)
        except ShipyardError:
            api = None
    deploy, rollout = None, None
    if api is not None:  # what the deploy config makes the deploy step do decides the verbs reviewed
        settings = parse_deploy_config(typed.get("deploy_config", BY_NAME["deploy_config"].default),
                                       name=typed.get("deploy_name") or "shipyard-llm",
                                       namespace=str(typed.get("namespace") or "") or None, model_uri=PLACEHOLDER_OCI)
        deploy, rollout = settings.config, settings.rollout
    for check in pod_checks(tracking_uri=tracking_uri, namespace=str(typed.get("namespace") or ""),
                            dry_run=bool(typed.get("dry_run", True)), api=api,
                            token=os.environ.get("MLFLOW_TRACKING_TOKEN", ""), deploy=deploy, rollout=rollout):
        print(f"pre-flight: {check.line()}", flush=True)
        if check.status == FAIL:
            raise ShipyardError(check.name, check.detail, check.fix)
