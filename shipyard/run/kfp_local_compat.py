"""A gap in ``kfp.local`` 2.17 that shipyard's pipelines need filled.

``dsl.OneOf`` picks the output of whichever ``dsl.If``/``dsl.Else`` branch ran. The KFP
backend supports it for parameters and artifacts; ``kfp.local`` 2.17 implements it only for
parameters and raises "Expected 1 artifact in ArtifactSelectorSpec" for artifacts. The
optimize-and-deploy pipeline chooses the eval backend (hf or vLLM) with If/Else and merges the
results artifact with OneOf, so :func:`enable_oneof_artifacts` teaches ``kfp.local`` the same
rule it already applies to parameters: exactly one branch must have produced the artifact.
Only the local runner calls it; compiled pipelines are unaffected.
"""

from __future__ import annotations

from typing import Any

_PATCHED = False


def enable_oneof_artifacts() -> None:
    """Let ``kfp.local`` resolve ``dsl.OneOf`` over artifacts (idempotent)."""
    global _PATCHED
    if _PATCHED:
        return
    from kfp.local.orchestrator import orchestrator_utils

    original = orchestrator_utils.OrchestratorUtils.get_dag_output_artifacts.__func__

    def get_dag_output_artifacts(cls: Any, dag_outputs_spec: Any, io_store: Any) -> dict[str, Any]:
        single = {k: v for k, v in dag_outputs_spec.artifacts.items() if len(v.artifact_selectors) == 1}
        outputs: dict[str, Any] = {}
        for key, spec in dag_outputs_spec.artifacts.items():
            if key in single:
                continue
            found = []
            for selector in spec.artifact_selectors:
                try:
                    found.append(io_store.get_task_output(selector.producer_subtask, selector.output_artifact_key))
                except (KeyError, ValueError):
                    continue  # that branch did not run
            if len(found) != 1:
                raise ValueError(f"dsl.OneOf output {key!r}: expected exactly one branch to produce it, got {len(found)}")
            outputs[key] = found[0]
        if single:
            trimmed = type(dag_outputs_spec)()
            for key in single:
                trimmed.artifacts[key].CopyFrom(dag_outputs_spec.artifacts[key])
            outputs.update(original(cls, trimmed, io_store))
        return outputs

    orchestrator_utils.OrchestratorUtils.get_dag_output_artifacts = classmethod(get_dag_output_artifacts)
    _PATCHED = True
