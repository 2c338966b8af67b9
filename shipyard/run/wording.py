"""How a local run's summary says things in words: a step's outputs without KFP's raw output names,
and why a step did not run (which branch was not taken, and why).

KFP names a step's return value ``Output`` and kfp.local reports a task that a condition skipped
the same way as one whose upstream failed; the console says neither. Pure functions of the
summary's data (no I/O).
"""

from __future__ import annotations

from typing import Any

from shipyard.run.console import component_of

#: a deploy step's status after a dry run (rendered and verified, nothing applied)
DRY_RUN_STATUS = "DryRun"


def _short(value: Any, width: int = 60) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width // 2 - 2] + "..." + text[-(width // 2 - 1):]


def outputs_text(task: str, parameters: dict[str, Any]) -> str:
    """A step's parameter outputs as a user reads them (never ``Output=...`` or ``url=, status=DryRun``)."""
    component = component_of(task)
    value = parameters.get("Output")
    if component == "preflight" and value:
        return f"MLflow run {str(value)[:12]}"
    if component == "close-tracking" and value:
        return f"MLflow run ended {value}"
    if component == "deploy" and "status" in parameters:
        if parameters["status"] == DRY_RUN_STATUS:
            return "dry run: rendered and checked, nothing applied"
        url = str(parameters.get("url") or "")
        return f"status {parameters['status']}" + (f", {url}" if url else "")
    if component == "pin-eval-sets" and value:
        return _pinned_sets(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    said = [f"{k}={_short(v)}" for k, v in parameters.items() if k != "Output" and v not in ("", None)]
    if value not in (None, ""):
        said.insert(0, _short(value))
    return ", ".join(said)


def _pinned_sets(value: Any) -> str:
    """pin-eval-sets' output (the pinned ``eval_sets``) as each set's name and content digest."""
    import json

    try:
        sets = json.loads(value).get("sets") or []
        return ", ".join(f"{s['name']} sha256:{str(s['sha256'])[:12]}" for s in sets)
    except (ValueError, AttributeError, KeyError, TypeError):
        return _short(value)


#: why the judge of eval_sets ran, or did not
JUDGED = "rubric sets, or rag sets and a judge, in eval_sets"
NOT_JUDGED = "no rubric set, nor a rag set with a judge, in eval_sets"


def _needs_judge(eval_sets: Any) -> bool:
    """Whether the ``eval_sets`` value (JSON text, a list or an object with ``sets``) needs the judge:
    a rubric set, or a rag set with a judge named (Ragas scores it with that judge)."""
    import json

    try:
        value = json.loads(eval_sets) if isinstance(eval_sets, str) and eval_sets.strip() else eval_sets
    except ValueError:
        return False
    sets = value.get("sets") if isinstance(value, dict) else value
    if not isinstance(sets, list):
        return False
    forms = {s.get("form") for s in sets if isinstance(s, dict)}
    return "rubric" in forms or ("rag" in forms and isinstance(value, dict) and bool(value.get("judge")))


def not_run_reason(component: str, params: dict[str, Any], answer: dict[str, Any], failed: bool) -> str:
    """Why ``component`` did not run, in words: the branch not taken and what decided it."""
    backend = str(params.get("eval_backend") or "")
    if component == "measure-vllm" and backend and backend != "vllm":
        return f"eval_backend={backend}: lm-eval ran in-process and a vLLM server ran the benchmark"
    if component in ("evaluate-hf", "benchmark") and backend == "vllm":
        return "eval_backend=vllm: one vLLM server evaluated and benchmarked each model"
    if component == "evaluate-adapters-hf":
        return ("no LoRA adapters: the empty record was written on a CPU node" if not params.get("lora_adapters")
                else "LoRA adapters set: they were evaluated on a GPU node")
    if component == "judge-eval-sets":
        return (f"{JUDGED}: the judge ran on a GPU node" if _needs_judge(params.get("eval_sets"))
                else f"{NOT_JUDGED}: nothing to judge, the empty record was written on a CPU node")
    if component == "no-judge-model":
        return f"{JUDGED}: the judge model was pinned and fetched once for the run"
    if failed:
        return "an upstream step failed"
    if component in ("pin-model", "resolve-model") and "eval_sets" in params:  # the base's always runs
        return f"{NOT_JUDGED}: no judge model to pin or fetch"
    if component in ("importer", "package-champion", "register-champion") and not answer.get("champion"):
        return "no champion: nothing passed its gates, the base included"
    if component == "deploy" and answer.get("champion"):
        return "the champion/challenger gate said no (see its row)"
    return "its condition was false"


def not_run_line(steps: list[Any], params: dict[str, Any], answer: dict[str, Any]) -> str:
    """One line for every step that did not run, grouped by the reason: ``not run (N steps): a, b
    (eval_backend=hf: ...); c (no champion: ...)``; "" when every step ran."""
    skipped = [s for s in steps if s.status == "NOT RUN"]
    if not skipped:
        return ""
    failed = any(s.status == "FAILURE" for s in steps)
    groups: dict[str, list[str]] = {}
    for step in skipped:
        why = not_run_reason(component_of(step.task), params, answer, failed)
        groups.setdefault(why, []).append(step.name or step.task)
    said = "; ".join(f"{', '.join(names)} ({why})" for why, names in groups.items())
    return f"not run ({len(skipped)} step{'s' if len(skipped) != 1 else ''}): {said}"
