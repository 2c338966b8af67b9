"""promote: gate an already packaged candidate against its base and production, then deploy it.

For a candidate that exists as a digest-pinned OCI modelcar (from an earlier run, or built
elsewhere): evaluate and benchmark it against its base with the same configs, run the accuracy
and SLO gates and the champion/challenger gate, and only then deploy it and move the
``production`` alias. The same stages as optimize-and-deploy, with one candidate and no
packaging.

No ``from __future__ import annotations``: KFP reads the pipeline's annotations.
"""

from typing import Any

from kfp import dsl

from shipyard.params.pipeline import pipeline_function
from shipyard.pipelines.stages import base_reference, checked, gates, measure, promote_champion, resolved

PIPELINE_NAME = "promote"


def build_promote(p: dict[str, Any]) -> None:
    """The graph of promote."""

    def body(check: Any) -> None:
        _, base_eval, base_bench, _ = base_reference(p, check)
        candidate = resolved(p["candidate_uri"], "candidate", check)  # after pre-flight, like the base
        cand_eval, cand_bench, _ = measure(p, candidate.outputs["model"], "candidate", "candidate")
        judged = gates(p, "candidate", base_eval, base_bench, cand_eval, cand_bench)
        with dsl.If(judged.outputs["Output"] == True, name="gates-passed"):  # noqa: E712 - KFP condition
            promote_champion(p, judged.outputs["candidate"], candidate.outputs["model_files"], p["candidate_uri"], "")

    checked(p, PIPELINE_NAME, body)


promote = dsl.pipeline(
    name=PIPELINE_NAME,
    description=(
        "Gate an existing packaged candidate (oci://...@sha256) against its base model and the current "
        "'production' version (accuracy, SLOs, champion/challenger), then deploy it as a KServe "
        "LLMInferenceService and give it the 'production' alias."
    ),
)(pipeline_function(PIPELINE_NAME, "Gate and deploy a packaged candidate.", build_promote))
