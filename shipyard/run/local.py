"""``shipyard run --local``: run a pipeline on this machine with ``kfp.local``.

Every step's thin wrapper runs in the base environment (kfp's SubprocessRunner) and hands its
logic to the step's runtime venv (see :mod:`shipyard.runtimes.runtime`). After the run, the task folders
under ``WORK_DIR/pipeline-root`` and the step timing log are read back into
``WORK_DIR/run-summary.json``: each step's status, runtime, seconds, metrics and artifact paths,
and at the top the answer (``champion``, ``promoted``, ``production``, ``model_uri``, ``mlflow_run``, ``gates``).

The console stays short (:mod:`shipyard.run.console`): one line per task as it starts and ends,
then :func:`format_summary`. kfp.local's own logging and every step's stdout/stderr go to
``WORK_DIR/kfp-local.log``. Nothing is written outside the work dir: every MLflow call on a file
store points MLflow's default store at it (:func:`shipyard.tracking.tracker.default_store`, in
``Tracker.call``), so the file-store registry never opens a ``mlflow.db`` in the current folder.
"""

from __future__ import annotations

import builtins
import contextlib
import inspect
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from shipyard.compression.recipes import recipe_label
from shipyard.core.env import environ_set
from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_write_text, cache_dir, package_dir
from shipyard.core.interrupts import shielded, signal_name
from shipyard.core.jsonargs import load_mapping_file
from shipyard.core.processes import interrupt_children
from shipyard.core.records import load_selection, slo_of
from shipyard.gates.candidate import verdict
from shipyard.oci.attestation import local_keys_env
from shipyard.params.checks import check_params
from shipyard.params.input_secrets import check_s3_endpoint
from shipyard.params.pipeline import PIPELINE_PARAMS, param_specs_for
from shipyard.params.specs import split_params
from shipyard.pipelines import DEFAULT_PIPELINE, get_pipeline
from shipyard.run.console import (
    KFP_LOG,
    RunConsole,
    component_of,
    fit,
    quiet_kfp,
    read_executor_output,
    task_label,
)
from shipyard.run.kfp_local_compat import enable_oneof_artifacts
from shipyard.run.wording import not_run_line, not_run_reason, outputs_text
from shipyard.tracking.pending import after_local_run
from shipyard.tracking.promotion import DRY_RUN_NOTE
from shipyard.tracking.tracker import Tracker, check_tracking_uri

#: Local overrides, shipped in the package (``shipyard/pipelines/local-params.yaml`` in a wheel).
LOCAL_PARAMS = package_dir("shipyard.pipelines") / "local-params.yaml"


@dataclass
class StepSummary:
    """One task of a local run."""

    task: str
    status: str
    name: str = ""
    runtime: str = ""
    seconds: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    parameters: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    decision: str | None = None


@dataclass
class RunSummary:
    """What ``run-summary.json`` holds."""

    pipeline: str
    status: str
    seconds: float
    run_dir: str
    parameters: dict[str, Any]
    steps: list[StepSummary]
    champion: str = ""
    #: the verdict against the base in one line ("champion w8a8-int8 vs base: ..." or "kept the base: ...")
    headline: str = ""
    #: the SLO every candidate and the base were judged on, in words (the default's when ``slo`` was empty)
    slo: str = ""
    promoted: bool = False
    production: str = "unchanged"
    model_uri: str = ""
    mlflow_run: str = ""
    #: where to look at it: the MLflow UI's page (classic ML view) or, for a file store, the ``mlflow ui`` command
    mlflow_link: str = ""
    gates: dict[str, Any] = field(default_factory=dict)
    interrupted_by: str = ""
    log: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def outcome(steps: list[StepSummary], params: dict[str, Any]) -> dict[str, Any]:
    """The run's answer: the champion (if any), whether it was promoted (``production`` says what
    happened to the alias: "dry run: production unchanged" after a dry-run deploy), where it is,
    the MLflow run."""
    def last(component: str) -> StepSummary | None:
        found = [s for s in steps if s.task.rsplit("/", 1)[-1] == component and s.status == "SUCCESS"]
        return found[-1] if found else None

    out: dict[str, Any] = {"champion": "", "headline": "", "slo": "", "promoted": False, "production": "unchanged",
                           "model_uri": "", "mlflow_run": ""}
    if (check := last("preflight")) is not None:
        out["mlflow_run"] = str(check.parameters.get("Output", ""))
    select = last("select-champion")
    if select is not None and select.artifacts.get("decision"):
        try:
            chosen = load_selection(select.artifacts["decision"])
            out["champion"], out["headline"] = chosen["winner"], str(chosen.get("headline") or "")
            rule = next((slo_of(c)["rule"] for c in chosen.get("candidates") or [] if slo_of(c).get("rule")), "")
            default = " (the default: the slo parameter was empty)" if not str(params.get("slo") or "").strip() else ""
            out["slo"] = f"{rule}{default}" if rule else ""
        except (ShipyardError, KeyError):
            pass
    elif (gates := last("candidate-gates")) is not None and gates.parameters.get("Output") is True:
        out["champion"] = "candidate"
    deployed = last("deploy")  # runs only for a champion that beat production
    if deployed is not None:
        dry = str(deployed.parameters.get("status", "")) == "DryRun" or bool(params.get("dry_run"))
        out["promoted"] = not dry  # a dry run never moves production (the version gets 'dry-run')
        out["production"] = DRY_RUN_NOTE if dry else "moved to the champion"
    if (package := last("package-champion")) is not None:
        out["model_uri"] = str(package.parameters.get("uri", ""))
    elif out["champion"] and params.get("candidate_uri"):
        out["model_uri"] = str(params["candidate_uri"])
    return out


def gates_of(steps: list[StepSummary], run_dir: Path) -> dict[str, Any]:
    """Every gate's answer: per candidate the accuracy and SLO gates, and the champion/challenger gate.

    ``{"candidates": [{"recipe", "task", "passed", "accuracy": {"passed", "verdict", "caveat", "reason"},
    "slo": {...}, "safety": {...}}],`` (``verdict``: "pass", "FAIL" or "pass (5 metrics below 0.99 within
    noise; worst 0.81)" when the accuracy gate passed only through its stderr rule; the safety gate's
    "pass (inconclusive on promptinject, allowed; 4 attempts < min_attempts 30)", "FAIL (inconclusive)"
    or "off"),
    ``"champion": {"task", "passed", "reason", "version"} or None when it did not run}``.
    """
    def flag(value: Any) -> bool | None:
        return None if value is None else bool(value)

    candidates: list[dict[str, Any]] = []
    champion: dict[str, Any] | None = None
    for step in steps:
        if step.status != "SUCCESS":
            continue
        component = component_of(step.task)
        if component == "candidate-gates":
            params, metrics, arts = read_executor_output(run_dir / step.task)
            candidate = arts.get("candidate") or {}
            caveat = str(candidate.get("accuracy_caveat") or (arts.get("accuracy_report") or {}).get("caveat") or "")
            candidates.append({
                "recipe": recipe_label(str(candidate.get("recipe", ""))),  # an inline recipe by its label, not its YAML
                "task": step.task,
                "passed": flag(candidate.get("passed", metrics.get("passed", params.get("Output")))),
                "accuracy": {"passed": flag(metrics.get("accuracy_passed")),
                             "verdict": verdict(flag(metrics.get("accuracy_passed")), caveat),
                             "caveat": caveat,
                             "reason": (arts.get("accuracy_report") or {}).get("reason", "")},
                "slo": {"passed": flag(metrics.get("slo_passed")), "verdict": verdict(flag(metrics.get("slo_passed"))),
                        "reason": (arts.get("slo_report") or {}).get("reason", "")},
                "safety": safety_of(metrics, candidate, arts.get("safety_report") or {}),
            })
        elif component in ("package-champion", "register-champion"):
            params, _, arts = read_executor_output(run_dir / step.task)
            decision = arts.get("decision") or {}
            champion = {"task": step.task, "passed": flag(decision.get("passed", params.get("Output"))),
                        "reason": decision.get("reason", ""), "version": decision.get("version", "")}
    return {"candidates": candidates, "champion": champion}


def safety_of(metrics: dict[str, Any], candidate: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """The safety gate's answer from a candidate-gates step: ``{"passed", "verdict", "caveat",
    "reason"}``; no ``safety_passed`` metric means the gate was off (``passed`` None, verdict "off")."""
    ran = metrics.get("safety_passed")
    passed = None if ran is None else bool(ran)
    said = candidate.get("safety_verdict") or report.get("verdict")
    return {"passed": passed, "verdict": str(said or ("off" if passed is None else verdict(passed))),
            "caveat": str(candidate.get("safety_caveat") or ""), "reason": str(report.get("reason", ""))}


def parse_param(text: str) -> tuple[str, Any]:
    """``k=v`` with ``v`` read as YAML (numbers, booleans, ``[a, b]`` lists, strings)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ShipyardError("--param", f"{text!r} is not key=value", "write --param name=value")
    try:
        parsed = yaml.safe_load(value) if value.strip() else ""
    except yaml.YAMLError:
        parsed = value
    return key.strip(), parsed


def load_params_file(path: str) -> dict[str, Any]:
    """A YAML or JSON mapping of pipeline parameters (UTF-8, with or without a BOM, or UTF-16 as
    PowerShell writes it); a key given twice, a binary file or an alias bomb is one line
    (:func:`shipyard.core.jsonargs.load_mapping_file`)."""
    return load_mapping_file(path, "--params-file")


def _signature(pipeline_func: Any) -> dict[str, inspect.Parameter]:
    func = getattr(pipeline_func, "pipeline_func", None) or pipeline_func.python_func
    return dict(inspect.signature(func).parameters)


def pipeline_parameters(pipeline_func: Any) -> dict[str, Any]:
    """Parameter names of a pipeline and their defaults."""
    return {
        name: (None if p.default is inspect.Parameter.empty else p.default)
        for name, p in _signature(pipeline_func).items()
    }


def resolve_params(pipeline: Any, params_file: str | dict[str, Any] | None, overrides: list[str],
                   local_defaults: bool = True) -> dict[str, Any]:
    """Merge local defaults < params file < ``--param``, then check and type them
    (:func:`shipyard.params.checks.check_params`: names, required parameters, types, URIs, and the
    pre-flight checks of every JSON parameter and recipe). ``pipeline``: its name (checked in
    well under a second, before the pipeline is built) or the pipeline function. ``params_file``:
    its path, or its mapping as :func:`load_params_file` read it (a file read once, even ``-``)."""
    if isinstance(pipeline, str):
        if pipeline not in PIPELINE_PARAMS:
            get_pipeline(pipeline)  # the one-line "unknown pipeline" error
        specs, name = param_specs_for(pipeline), pipeline
        known = dict.fromkeys(specs)
    else:
        specs, name = pipeline, getattr(pipeline, "name", "")
        known = pipeline_parameters(pipeline)
    merged: dict[str, Any] = {}
    if local_defaults:
        if not LOCAL_PARAMS.is_file():
            raise ShipyardError("local-params.yaml", f"{LOCAL_PARAMS} is missing from the installed shipyard",
                                "reinstall shipyard (the wheel ships it) or pass every parameter with --params-file")
        merged.update({k: v for k, v in load_params_file(str(LOCAL_PARAMS)).items() if k in known})
    if params_file:
        merged.update(load_params_file(params_file) if isinstance(params_file, str) else params_file)
    merged.update(split_params(overrides))  # a --param given twice is an error, never last-wins
    return check_params(specs, merged, name=name)


def _component_runtimes(pipeline_func: Any) -> dict[str, str]:
    """Task folder name -> runtime, read from the compiled pipeline's executor images."""
    spec = pipeline_func.pipeline_spec
    images: dict[str, str] = {}
    deployment = _struct_to_dict(spec.deployment_spec)
    for name, executor in (deployment.get("executors") or {}).items():
        images[name] = (executor.get("container") or {}).get("image", "")
    result = {}
    for comp_name, comp in spec.components.items():
        label = comp.executor_label
        if not label:
            continue
        image = images.get(label, "")
        if not image:
            continue  # an importer (the champion's model): no step code of its own
        runtime = image.rsplit("/", 1)[-1].split(":")[0].split("@")[0].removeprefix("shipyard-")
        result[comp_name.removeprefix("comp-")] = runtime
    return result


def _display_names(pipeline_func: Any) -> dict[str, str]:
    """Task folder name -> the task's display name (``set_display_name``), through nested DAGs."""
    spec = pipeline_func.pipeline_spec
    names: dict[str, str] = {}
    dags = [spec.root.dag] + [comp.dag for comp in spec.components.values() if comp.HasField("dag")]
    for dag in dags:
        for task in dag.tasks.values():
            names[task.component_ref.name.removeprefix("comp-")] = task.task_info.name
    return names


def _struct_to_dict(struct: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    return json_format.MessageToDict(struct)


def collect_steps(run_dir: Path, step_log: Path, runtimes: dict[str, str]) -> list[StepSummary]:
    """Read each task folder (and the timing log) of a finished local run."""
    records = []
    if step_log.exists():
        records = [json.loads(line) for line in step_log.read_text().splitlines() if line.strip()]
    steps: list[tuple[float, StepSummary]] = []
    seen_components: set[str] = set()
    task_dirs = sorted(
        p for p in run_dir.rglob("*")
        if p.is_dir() and p.name.removeprefix("comp-") in runtimes and p.parent.name not in runtimes
    )
    for task_dir in task_dirs:
        rel = task_dir.relative_to(run_dir).as_posix()
        component = task_dir.name
        seen_components.add(component)
        step = StepSummary(task=rel, status="SUCCESS" if (task_dir / "executor_output.json").exists() else "FAILURE",
                           runtime=runtimes.get(component, ""))
        if (task_dir / "executor_output.json").exists():
            out = json.loads((task_dir / "executor_output.json").read_text())
            step.parameters = dict(out.get("parameterValues") or {})
            for name, group in (out.get("artifacts") or {}).items():
                for art in group.get("artifacts", []):
                    uri = art.get("uri", "")
                    step.artifacts[name] = uri
                    meta = art.get("metadata") or {}
                    if isinstance(meta.get("reason"), str):
                        step.decision = meta["reason"]
                    for key in ("uri", "digest"):  # the champion's package reference (package-champion)
                        if name == "package_summary" and isinstance(meta.get(key), str):
                            step.parameters.setdefault(key, meta[key])
                    if name == "metrics" or name.endswith("_metrics"):
                        step.metrics.update({k: v for k, v in meta.items() if isinstance(v, int | float)})
        mine = [r for r in records if r.get("task_dir") == str(task_dir)]
        if mine:
            step.seconds = round(sum(r["seconds"] for r in mine), 2)
            step.runtime = mine[-1]["runtime"]
            errors = [r["error"] for r in mine if r.get("error")]
            if errors:
                step.error = errors[-1]
                step.status = "FAILURE"
        step_started = min((r["started"] for r in mine), default=(task_dir / "executor_output.json").stat().st_mtime
                           if (task_dir / "executor_output.json").exists() else float("inf"))
        steps.append((step_started, step))
    steps.sort(key=lambda item: item[0])
    ordered = [step for _, step in steps]
    for component in sorted(set(runtimes) - seen_components):
        ordered.append(StepSummary(task=component, status="NOT RUN", runtime=runtimes[component],
                                 error="not run"))
    return ordered


def candidate_labels(params: dict[str, Any]) -> list[str]:
    """The label of each recipe in the ``recipes`` loop, in loop order (the console names a loop
    task by its candidate instead of KFP's ``for-loop-N-iteration-I``)."""
    recipes = params.get("recipes")
    if isinstance(recipes, str):
        recipes = [recipes]
    labels = []
    for recipe in recipes if isinstance(recipes, list) else []:
        try:
            labels.append(recipe_label(recipe if isinstance(recipe, str) else json.dumps(recipe)))
        except (ShipyardError, ValueError, TypeError):
            labels.append(str(recipe)[:24])
    return labels


def run_local(
    pipeline: str = DEFAULT_PIPELINE,
    work_dir: str = "shipyard-run",
    params_file: str | None = None,
    overrides: list[str] | None = None,
) -> RunSummary:
    """Run ``pipeline`` with kfp.local in ``work_dir``; write and return the run summary."""

    params = resolve_params(pipeline, params_file, overrides or [])  # pre-flight, before anything is built
    pipeline_func = get_pipeline(pipeline)
    work = Path(work_dir).resolve()
    check_s3_endpoint(params)  # no credentials in the S3 endpoint the steps would use
    check_tracking_uri(str(params.get("tracking_uri") or ""), work)  # MLflow answers, before anything is written
    root = work / "pipeline-root"
    root.mkdir(parents=True, exist_ok=True)
    step_log = work / "steps.jsonl"
    step_log.unlink(missing_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ["SHIPYARD_STEP_LOG"] = str(step_log)
    os.environ["SHIPYARD_WORK_DIR"] = str(work)
    with local_attestation_keys():  # the package step signs the champion's evidence with this machine's key
        return _run_local(pipeline, pipeline_func, params, work, root, step_log)


@contextlib.contextmanager
def local_attestation_keys() -> Iterator[None]:
    """For this run only: this machine's local signing and public key (``$SHIPYARD_CACHE/attestation``,
    made once and shared by every local run, so that a later run, e.g. the promote pipeline, can verify
    what an earlier one packaged), unless the user configured keys
    (:func:`shipyard.oci.attestation.local_keys_env`)."""
    with environ_set(local_keys_env(cache_dir() / "attestation")):
        yield


def _drive_pipeline(pipeline_func: Any, params: dict[str, Any], log_path: Path, console: Any, root: Path,
                    before: set[str], step_log: Path) -> KeyboardInterrupt | None:
    """Run the pipeline under kfp.local with the console watching its steps (kfp.local's own output
    goes to ``log_path``); returns the interrupt that stopped it (its running step unwound), if any."""
    interrupted: KeyboardInterrupt | None = None
    with open(log_path, "a", encoding="utf-8", buffering=1) as log:
        watcher = RunConsole(console, log, root, before, step_log, _display_names(pipeline_func),
                             candidate_labels(params))
        print_before = builtins.print
        try:
            with quiet_kfp(watcher):
                pipeline_func(**params)
            watcher.settle()
        except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM (shipyard.core.interrupts)
            interrupted = err
            interrupt_children()  # the running step unwinds: servers stopped, partial folders removed
        finally:
            # kfp.local indents output by swapping builtins.print per task; two loop iterations
            # running in parallel threads restore each other's swap and leave print indented
            builtins.print = print_before
    return interrupted


def _run_local(pipeline: str, pipeline_func: Any, params: dict[str, Any], work: Path, root: Path,
               step_log: Path) -> RunSummary:
    """The run itself (see :func:`run_local`)."""
    from kfp import local

    before = {p.name for p in root.iterdir()}
    enable_oneof_artifacts()
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root), raise_on_error=False)
    log_path = work / KFP_LOG
    console = sys.stdout
    print(f"shipyard: running {pipeline} locally; kfp.local's log and every step's output: {log_path}",
          file=console, flush=True)
    started = time.perf_counter()
    interrupted = _drive_pipeline(pipeline_func, params, log_path, console, root, before, step_log)
    seconds = round(time.perf_counter() - started, 2)
    new_runs = sorted(p for p in root.iterdir() if p.name not in before and p.is_dir())
    if not new_runs:
        if interrupted is not None:
            raise interrupted
        raise ShipyardError("pipeline", f"{pipeline} produced no run folder under {root}", "see the log above")
    run_dir = new_runs[-1]
    steps = collect_steps(run_dir, step_log, _component_runtimes(pipeline_func))
    display = _display_names(pipeline_func)
    for step in steps:
        step.name = display.get(step.task.rsplit("/", 1)[-1], "")
    failed = [s for s in steps if s.status == "FAILURE"]
    summary = RunSummary(
        pipeline=pipeline,
        status="INTERRUPTED" if interrupted is not None else "FAILURE" if failed else "SUCCESS",
        seconds=seconds,
        run_dir=str(run_dir),
        parameters=params,
        steps=steps,
        **outcome(steps, params),
    )
    summary.gates = gates_of(steps, run_dir)
    for step in steps:  # run-summary.json says why, as the console does
        if step.status == "NOT RUN":
            step.error = "not run: " + not_run_reason(component_of(step.task), params, {"champion": summary.champion},
                                                      bool(failed))
    summary.log = str(log_path)
    if interrupted is not None:
        summary.interrupted_by = signal_name(interrupted)
        _kill_mlflow_run(summary.mlflow_run, params, work)
    summary.mlflow_link = _mlflow_link(summary.mlflow_run, params, work) if interrupted is None else ""
    atomic_write_text(work / "run-summary.json", json.dumps(summary.to_dict(), indent=2, default=str))
    after_local_run(work)  # MLflow records kept for the end (file store) or in an outage: logged now, or said
    if interrupted is not None:
        raise interrupted
    return summary


def _mlflow_link(run_id: str, params: dict[str, Any], work: Path) -> str:
    """The parent run's page in the MLflow UI (``?workflowType=machine_learning``), or the ``mlflow ui``
    command for a file store; "" when there is no run or MLflow does not answer."""
    if not run_id:
        return ""
    try:
        return Tracker(str(params.get("tracking_uri") or ""), work_dir=work, attempts=1, backoff_s=0.1).run_url(run_id)
    except ShipyardError:
        return ""


def _kill_mlflow_run(run_id: str, params: dict[str, Any], work: Path) -> None:
    """End an interrupted run's MLflow parent run as KILLED (never left RUNNING)."""
    if not run_id:
        return
    try:
        with shielded():
            Tracker(str(params.get("tracking_uri") or ""), work_dir=work, attempts=2, backoff_s=0.5).finish(run_id, "KILLED")
    except ShipyardError as err:
        print(f"shipyard: warning: MLflow run {run_id} could not be marked KILLED: {err}", file=sys.stderr)


def _where(path: str, base: Path) -> str:
    """``path`` relative to ``base`` when inside it, else as given."""
    try:
        return Path(path).resolve().relative_to(base).as_posix()
    except (ValueError, OSError):
        return path


def format_summary(summary: RunSummary, work_dir: str) -> str:
    """The summary printed at the end of a local run (after the task start/end lines).

    One row per task that ran; the tasks that did not run on one line; a failed run names its
    first failing task once, with its error line; only artifacts that exist are listed.
    """
    work = Path(work_dir).resolve()
    lines = [f"\nshipyard: {summary.pipeline} {summary.status} in {summary.seconds:.1f} s", ""]
    if summary.headline:
        lines += [summary.headline, ""]
    if summary.slo:
        lines += [f"SLO applied: {summary.slo}", ""]
    if summary.champion:
        verdict = "promoted to production" if summary.promoted else (
            summary.production if summary.production == DRY_RUN_NOTE else "not promoted")
        lines += [f"champion: {summary.champion} ({verdict})"
                  + (f", {summary.model_uri}" if summary.model_uri else ""), ""]
    failed = [s for s in summary.steps if s.status == "FAILURE"]
    if failed:
        first = failed[0]
        lines += [f"first failure: {first.name or first.task} [{first.task}]: {first.error or 'no error line; see the log'}", ""]
    ran = [s for s in summary.steps if s.status != "NOT RUN"]
    labels = candidate_labels(summary.parameters)
    gate_rows = {c.get("task"): c for c in (summary.gates or {}).get("candidates", [])}
    lines.append(f"{'step':<30} {'task':<36} {'status':<8} {'runtime':<9} {'seconds':>7}  key figures")
    for step in ran:
        secs = f"{step.seconds:.1f}" if step.seconds is not None else "-"
        metrics = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in list(step.metrics.items())[:3])
        params = outputs_text(step.task, step.parameters)  # never KFP's "Output=..." or "url=, status=DryRun"
        task = fit(task_label(step.task, labels), 36)
        gate = gate_rows.get(step.task)
        figure = (f"accuracy {gate['accuracy'].get('verdict') or '-'}, SLO {gate['slo'].get('verdict') or '-'}"
                  + (f", safety {gate['safety']['verdict']}" if gate.get("safety") else "")
                  if gate else metrics or params)
        lines.append(f"{fit(step.name or '-', 30):<30} {task:<36} {step.status:<8} {step.runtime:<9} {secs:>7}  {figure}")
        if step.decision:
            lines.append(f"{'':<30} > {step.decision}")
        if step.error and step is not failed[0] and step.error != failed[0].error:
            lines.append(f"{'':<30} ! {step.error}")
    answer = {"champion": summary.champion}
    if line := not_run_line(summary.steps, summary.parameters, answer):
        lines.append(line)
    run_dir = Path(summary.run_dir)
    kept = [(step, name, uri) for step in ran for name, uri in step.artifacts.items() if uri and Path(uri).exists()]
    lines.append(f"\nartifacts under {run_dir}:" + ("" if kept else " none"))
    # named by step and candidate ("compress [w8a8-int8] compressed_model: ..."), not by KFP's loop folders
    lines += [f"  {task_label(step.task, labels)} {name}: {_where(uri, run_dir)}" for step, name, uri in kept]
    lines.append(f"\nlog: {summary.log or work / KFP_LOG} (kfp.local and every step's output)")
    lines.append(f"summary: {work / 'run-summary.json'}")
    if summary.mlflow_link:
        lines.append(f"MLflow: {summary.mlflow_link}")
    return "\n".join(lines)
