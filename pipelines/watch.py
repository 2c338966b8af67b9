"""watch: is production still inside the envelope its model was qualified on? (schedule it)

pre-flight (every parameter, then the MLflow run); then one step reads the served model's signed
SLO evidence (the benchmark levels and the SLO the gates judged it on, carried by the modelcar
itself) and the live traffic from Prometheus over a window, and names each dimension that left the
envelope: input and output lengths, load per replica, TTFT p99 at that load against the benchmark
curve. A drift does not fail the run: the report, the step's output and the MLflow run say what
drifted and give the re-qualification run on the traffic as measured. Schedule it with
``shipyard schedule watch --every 1h``.

No ``from __future__ import annotations``: KFP reads the pipeline's annotations.
"""

from typing import Any

from kfp import dsl

from shipyard.components.watch.component import watch_production
from shipyard.params.pipeline import pipeline_function
from shipyard.pipelines.platform import on_cpu
from shipyard.pipelines.stages import checked, tracking

PIPELINE_NAME = "watch"


def build_watch(p: dict[str, Any]) -> None:
    """The graph of watch."""

    def body(check: Any) -> None:
        task = on_cpu(watch_production(served_model_uri=p["served_model_uri"], prometheus_url=p["prometheus_url"],
                                       watch_config=p["watch_config"], deploy_name=p["deploy_name"],
                                       registered_model_name=p["registered_model_name"], **tracking(p)))
        task.set_display_name("watch production").after(check)

    checked(p, PIPELINE_NAME, body)


watch = dsl.pipeline(
    name=PIPELINE_NAME,
    description=(
        "Compare production's live traffic (Prometheus) with the envelope its model was qualified on (the "
        "signed SLO evidence the modelcar carries): input and output lengths, load per replica, TTFT p99 at "
        "that load. Names each drifted dimension and the re-qualification run on the traffic as measured. "
        "Schedule it with `shipyard schedule watch`."
    ),
)(pipeline_function(PIPELINE_NAME, "Watch production against the envelope its model was qualified on.", build_watch))
