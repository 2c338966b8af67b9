"""The pre-flight step: every parameter checked (:mod:`shipyard.params.checks`), MLflow reachable,
the MLflow parent run opened. The pipeline's first task, so bad input fails before any GPU work."""

from __future__ import annotations

import json
from typing import Any

from shipyard.params.checks import check_parameters, record_for_mlflow


def preflight_step(pipeline: str, params: dict[str, Any], tracking_uri: str, experiment: str, kfp_run_id: str) -> dict[str, Any]:
    """The pipeline's first task: check everything and that MLflow answers (one line within
    seconds, exit status 3, when it does not), then open the MLflow parent run with the
    parameters."""
    typed = check_parameters(pipeline, params, fill_defaults=False)
    from shipyard.tracking.pipeline_runs import start_tracking
    from shipyard.tracking.tracker import check_tracking_uri

    check_tracking_uri(tracking_uri)

    run = start_tracking(tracking_uri=tracking_uri, experiment=experiment, pipeline_name=pipeline,
                         kfp_run_id=kfp_run_id, params_json=json.dumps(record_for_mlflow(typed)), tags_json="{}")
    return {"checked": sorted(typed), **run}
