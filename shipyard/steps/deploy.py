"""The deploy step: render -> validate -> write the manifest -> (apply, wait, roll back).

Shared by the KFP component and ``shipyard deploy``. A dry run stops after the manifest.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_write_text
from shipyard.core.records import (
    DECISION_RECORD,
    SELECTION_FILE,
    CandidateRecord,
    DecisionRecord,
    SloThresholds,
    load_candidate,
    load_decision,
    load_selection,
    slo_of,
    slo_thresholds,
)
from shipyard.core.report import level_label, markdown_html
from shipyard.gates.evidence import require_attested
from shipyard.gates.selection import champion_selection, with_verification
from shipyard.gates.served_adapters import champion_adapters, with_adapters
from shipyard.gates.verification import (
    DRY_RUN_VERIFY_HINT,
    REPORT_JSON,
    check_gateway_access,
    load_recorded,
    local_settings,
    selected_level,
)
from shipyard.oci.transfer import pull_model
from shipyard.params.deploy import parse_deploy_config
from shipyard.runtimes.runtime import call_step
from shipyard.serving.alerts import (
    CUSTOM_BUCKETS_FLAG,
    CUSTOM_BUCKETS_SINCE,
    alerts_markdown,
    custom_buckets,
    epp_monitor,
    pod_monitor,
    served_buckets,
    slo_rule,
    takes_custom_buckets,
)
from shipyard.serving.dashboard import dashboard_configmap
from shipyard.serving.kserve.apply import Kube, api_client, deploy
from shipyard.serving.kserve.config import (
    CONNECTOR_MODULES,
    PRESET_IMAGE,
    WVA_ACCELERATOR_LABEL,
    DeployConfig,
    is_image_reference,
    parse_config,
    wva_accelerator,
)
from shipyard.serving.kserve.render import link_metadata, load_model_config, render, to_yaml
from shipyard.serving.kserve.rollout import canary_names, canary_rollout
from shipyard.serving.kserve.validate import require_valid, upstream_dir
from shipyard.serving.sizing import (
    apply_sizing,
    derive_sizing,
    find_knee,
    knee_occupancy,
    scale_to_zero_warning,
    sizing_markdown,
)
from shipyard.serving.watch import qualified_hit_rate
from shipyard.steps.verify import verify_service
from shipyard.tracking.promotion import promote_production
from shipyard.tracking.steprun import StepRun


def refuse_local_layout(model_uri: str) -> None:
    """An ``oci:///path`` URI names an OCI layout on the pipeline's own disk (``registry`` was
    empty): the manifest validates, but no KServe node can pull it, so a real apply refuses it."""
    if model_uri.startswith("oci:///"):
        raise ShipyardError(
            "model_uri", f"{model_uri.split('@')[0]} is an OCI layout on the pipeline's disk, which KServe cannot pull",
            "set the registry parameter so the package step pushes to a registry, or deploy with dry_run=true",
        )


@dataclass
class _Serving:
    """What is deployed once the champion's record had its say: the parsed config, the parameters and
    overrides it was parsed from (a canary re-parses them), the sizing, the benchmarked engine, the
    image choice, why the SLO histogram edges are vLLM's defaults (empty when they are not) and the
    champion's record (what the gate measured: :func:`served_shape`)."""

    cfg: DeployConfig
    params: dict[str, Any]
    overrides: dict[str, Any]
    sizing: dict[str, Any] | None
    benchmarked: dict[str, Any] | None
    image: dict[str, Any]
    why_default: str
    champion: CandidateRecord | None = None


def _serving(candidate: str | None, params: dict[str, Any], overrides: dict[str, Any], dry_run: bool) -> _Serving:
    """The deployment's config: the champion's tuned arguments, adapters and sizing
    (:func:`_from_champion`), the image the SLO gate benchmarked (:func:`serving_image`) and vLLM's
    histogram edges at the SLO thresholds (:func:`slo_buckets`); warns of WVA without an accelerator."""
    params, overrides, sizing = _from_champion(candidate, params, overrides, dry_run) if candidate else \
        (params, overrides, None)
    cfg = parse_config(params, **overrides)
    champion = champion_record(candidate)
    benchmarked = champion.get("engine") if champion and isinstance(champion.get("engine"), dict) else None
    image = serving_image(cfg, benchmarked)
    if image["pin"] and not cfg.image:  # the default: serve the build the SLO gate measured
        cfg.image = params["image"] = image["pin"]  # params: a canary re-parses them
    buckets, why_default = slo_buckets(candidate, benchmarked, image) if candidate else ({}, "")
    if buckets:  # SLO thresholds as histogram edges: the alerts' SLIs are exact bucket ratios
        tuned = {**overrides.get("tuned_vllm_args", {}), CUSTOM_BUCKETS_FLAG: json.dumps(buckets, separators=(",", ":"))}
        overrides = {**overrides, "tuned_vllm_args": tuned}
        cfg = parse_config(params, **overrides)
        print(f"deploy: vLLM histogram edges at the SLO thresholds (--{CUSTOM_BUCKETS_FLAG} {', '.join(buckets)})",
              flush=True)
    if cfg.scaling is not None and cfg.scaling.mode == "wva" and not wva_accelerator(cfg):
        print(f"deploy: WARNING: WVA scaling without an accelerator name: KServe labels the VariantAutoscaling "
              f"{WVA_ACCELERATOR_LABEL}=unknown; set gpu_type (nvidia.com/gpu.product) or scaling.accelerator_name",
              flush=True)
    return _Serving(cfg, params, overrides, sizing, benchmarked, image, why_default, champion)


def _verification_plan(candidate: str | None, verify_opts: dict[str, Any],
                       dry_run: bool) -> tuple[bool, dict[str, Any] | None, dict[str, Any]]:
    """Whether a verification is wanted, the champion's record it checks against and the verification
    entry as it stands before anything ran (``{"ran": False, "why": ...}``).

    A real deploy needs the champion's golden outputs, and the gateway's CA bundle and token when
    ``verify`` names them, before anything is applied (fail closed); a dry run only the golden outputs,
    when it serves the package to verify it."""
    wanted = bool(candidate) and verify_opts["enabled"]
    record = _recorded(candidate) if candidate and wanted and (not dry_run or verify_opts["dry_run"]) else None
    if record is not None and not dry_run:  # the gateway's CA bundle and token too (a dry run serves the package)
        check_gateway_access(verify_opts["settings"])
    verification: dict[str, Any] = {"ran": False, "why": "no champion record given" if not candidate else
                                    "deploy_config.verify.enabled is false" if not wanted else
                                    "dry run" if dry_run else "the service was not verified"}
    return wanted, record, verification


def _write_manifest(candidate: str | None, cfg: DeployConfig, model_config: Any, report_url: str | None,
                    why_default: str, manifest_path: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                                   dict[str, Any] | None, str]:
    """Render the service and, with a champion record, its PrometheusRule, PodMonitor and dashboard
    (:func:`slo_alerts`); validate them all and write the manifest (``-``: stdout). Returns the
    service's objects, the monitoring objects, the alerts' description and the manifest text."""
    docs = render(cfg, model_config)
    alerts = slo_alerts(candidate, cfg, report_url, served_buckets(docs), why_default) if candidate else None
    rules = ([alerts.pop("doc"), alerts.pop("monitor"), alerts.pop("epp_monitor"), alerts.pop("dashboard")]
             if alerts else [])
    require_valid(docs + rules)
    text = to_yaml(docs + rules)
    if manifest_path == "-":
        print(text, end="")
    else:
        atomic_write_text(manifest_path, text)
    return docs, rules, alerts, text


def _dry_run_verification(cfg: DeployConfig, record: dict[str, Any] | None, wanted: bool, adapters: list[str],
                          verify_opts: dict[str, Any], verify_dir: str | None, verification: dict[str, Any]) -> None:
    """A dry run's verification: the package served locally and checked against the champion's record
    when ``deploy_config.verify.dry_run`` asks for it (raises when it fails), else the hint why
    nothing was verified. Updates ``verification``."""
    if record is not None and verify_opts["dry_run"]:
        out = verify_package(cfg.model_uri, cfg.served_name, record, adapters, verify_opts["settings"], verify_dir)
        verification.update(ran=True, passed=out["passed"], reason=out["reason"], where="the package, served locally")
        if not out["passed"]:
            raise ShipyardError("verification", f"the packaged model {out['reason']}",
                                "the package does not serve what was gated: see verification.md")
    elif wanted:
        verification["why"] = "dry run: " + DRY_RUN_VERIFY_HINT
        print(f"deploy: {DRY_RUN_VERIFY_HINT}", flush=True)


def _service_check(record: dict[str, Any] | None, served: str, adapters: list[str], model_dir: str | None,
                   verify_opts: dict[str, Any], verify_dir: str | None,
                   verification: dict[str, Any]) -> Callable[[str], None] | None:
    """The check of a Ready service against the champion's record
    (:func:`shipyard.steps.verify.verify_service`): records what ran in ``verification`` and raises
    when it fails (the deploy then rolls back). None without a record: nothing is verified."""
    if record is None:
        return None

    def check(url: str) -> None:
        out = verify_service(url, served, record, model_dir=model_dir, lora_adapters=adapters,
                             config=verify_opts["settings"], report_dir=verify_dir)
        verification.update(ran=True, passed=out["passed"], reason=out["reason"], where=url,
                            failed_checks=out["failed_checks"], golden=_golden_figures(out))
        if not out["passed"]:
            raise ShipyardError("verification", f"{url} {out['reason']}",
                                "the deployed service does not serve what was gated: see verification.md")

    return check


def _apply(serving: _Serving, docs: list[dict[str, Any]], rules: list[dict[str, Any]], text: str,
           result: dict[str, Any], *, check: Callable[[str], None] | None, options: dict[str, Any],
           rollout: dict[str, Any], kubeconfig: str | None, context: str | None, model_config: Any,
           manifest_path: str) -> tuple[list[dict[str, Any]], str]:
    """Apply the service and wait for it (replaced in place, or a canary beside the current one:
    :func:`_canary`), each Ready service verified with ``check``. Updates ``result`` (url, status,
    generation, rollout) and returns the objects applied and the manifest text."""
    if rules:  # the deployer Role has no monitoring.coreos.com or ConfigMap rights: in the manifest only
        named = ", ".join(f"{d['kind']} {d['metadata']['name']}" for d in rules)
        print(f"deploy: {named} are written to the manifest, not applied: apply them with the rights "
              "to monitoring.coreos.com prometheusrules and podmonitors, and configmaps", flush=True)
    kube = Kube(api_client(kubeconfig, context, timeout_s=options["api_timeout_s"]), timeout_s=options["api_timeout_s"])
    waits = {k: options[k] for k in ("wait_timeout_s", "poll_s", "false_grace_s")}
    try:
        if rollout["strategy"] == "canary":
            docs, text = _canary(kube, serving.cfg, docs, rules, result, params=serving.params,
                                 overrides=serving.overrides, model_config=model_config, manifest_path=manifest_path,
                                 rollout=rollout, check=check, waits=waits)
        else:
            outcome = deploy(docs, kube, **waits, verify=check)
            result.update(url=outcome.url, status=outcome.status, generation=outcome.generation)
    finally:
        kube.close()
    return docs, text


def run_deploy(
    *,
    deploy_config: str | dict[str, Any] | None,
    manifest_path: str,
    dry_run: bool = True,
    model_dir: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    summary_path: str | None = None,
    candidate: str | None = None,
    verify_dir: str | None = None,
    report_url: str | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Render and validate the deployment, write it to ``manifest_path`` and, unless
    ``dry_run``, apply it and wait. ``overrides`` (name, model_uri, namespace, replicas, ...)
    win over ``deploy_config``. ``summary_path``: also write a Markdown summary (objects, status,
    URL, the manifest) for the KFP UI. Returns url, status, name, namespace and the manifest path.

    ``candidate``: the champion's record (select_champion's selection folder, or a candidate.json):
    once the service is Ready it is verified against it (:func:`shipyard.steps.verify.verify_service`,
    reports in ``verify_dir``) before anything else; a failed or interrupted verification rolls
    back like a deployment that never became Ready and raises. ``result["verification"]`` says
    what ran (``{"ran": False, "why": ...}`` when nothing did). Passed, failed or not run, the
    verification goes into ``verify_dir/decision-record.json`` (:func:`write_decision_record`).

    With a champion record the manifest also holds the service's PrometheusRule (:func:`slo_alerts`:
    SLO recording rules, burn-rate and capacity alerts; ``report_url``, the champion's report, is
    their ``runbook_url``); ``result["alerts"]`` lists each alert and where its numbers came from."""
    settings = parse_deploy_config(deploy_config, **overrides)  # all of it checked before anything is rendered
    # production only for attested models: refused here, before anything is rendered or applied
    attested = check_attestation(settings.config.model_uri, settings.attestation)
    verify_opts = settings.verify
    serving = _serving(candidate, dict(settings.params), overrides, dry_run)
    cfg = serving.cfg
    wanted, record, verification = _verification_plan(candidate, verify_opts, dry_run)
    adapters = [str(a["name"]) for a in ((cfg.lora or {}).get("adapters") or [])]
    if not dry_run:
        refuse_local_layout(cfg.model_uri)
    model_config = load_model_config(model_dir) if model_dir else None
    docs, rules, alerts, text = _write_manifest(candidate, cfg, model_config, report_url, serving.why_default,
                                                manifest_path)
    result: dict[str, Any] = {"name": cfg.name, "namespace": cfg.namespace, "manifest": manifest_path,
                              "kinds": [d["kind"] for d in docs + rules], "mode": cfg.mode, "url": "",
                              "status": "DryRun", "planned": model_config is not None, "verification": verification,
                              "attestation": attested, "sizing": serving.sizing, "alerts": alerts,
                              "engine": serving_engine(docs, serving.benchmarked, serving.image)}
    result["engine"]["shape"] = served_shape(cfg, docs, serving.champion, result["engine"])
    if result["engine"]["warning"]:  # before anything is applied
        print(f"deploy: WARNING: {result['engine']['warning']}", flush=True)
    failure = ""
    try:
        if dry_run:
            _dry_run_verification(cfg, record, wanted, adapters, verify_opts, verify_dir, verification)
        else:
            docs, text = _apply(serving, docs, rules, text, result,
                                check=_service_check(record, cfg.served_name, adapters, model_dir, verify_opts,
                                                     verify_dir, verification),
                                options=settings.apply, rollout=settings.rollout, kubeconfig=kubeconfig,
                                context=context, model_config=model_config, manifest_path=manifest_path)
        if summary_path:
            atomic_write_text(summary_path, deployment_markdown(result, docs + rules, text))
        return result
    except BaseException as err:
        failure = f"{type(err).__name__}: {err}" if not isinstance(err, ShipyardError) else str(err)
        raise
    finally:
        write_decision_record(candidate, verify_dir, result, cfg.model_uri, dry_run, failure)


def _from_champion(candidate: str, params: dict[str, Any], overrides: dict[str, Any],
                   dry_run: bool) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]:
    """What the champion's record adds to the deployment: the vLLM arguments its serving-configuration
    search picked (tensor parallelism as the deployment's own setting), the LoRA adapters it was gated
    with, and the startup probe and autoscaling sized from its measurements (:func:`measured_sizing`).
    Returns the new ``params``, ``overrides`` and the sizing (None when the record holds none)."""
    tuned = searched_args(candidate)
    if tuned:
        # tensor parallelism is the deployment's own setting (replica shape, GPUs per pod), not a flag
        tp = tuned.pop("tensor-parallel-size", None)
        if tp is not None and "tensor_parallel" not in params and overrides.get("tensor_parallel") is None:
            overrides = {**overrides, "tensor_parallel": int(tp)}
        overrides = {**overrides, "tuned_vllm_args": tuned}
        print(f"deploy: from the champion's serving-configuration search: vLLM arguments {tuned}"
              + (f", tensor_parallel {tp}" if tp is not None else ""), flush=True)
    params, notes = with_adapters(params, champion_adapters(candidate), dry_run)  # served with it (spec.model.lora)
    for note in notes:
        print(f"deploy: {note}", flush=True)
    sizing = measured_sizing(candidate, params, overrides)
    if sizing is not None:  # the startup probe and autoscaling from the champion's measurements
        params = sizing.pop("params")
    return params, overrides, sizing


def _canary(kube: Any, cfg: DeployConfig, docs: list[dict[str, Any]], rules: list[dict[str, Any]],
            result: dict[str, Any], *, params: dict[str, Any], overrides: dict[str, Any], model_config: Any,
            manifest_path: str, rollout: dict[str, Any], check: Any,
            waits: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """Roll the new service out beside the current one (:func:`shipyard.serving.kserve.rollout.canary_rollout`):
    the new one under the next canary name with its own InferencePool, traffic moved by the route's
    weights, each step verified with ``check(url)`` when given. ``cfg`` and ``docs``: the service as
    configured and rendered (its current name). Updates ``result`` (name, url, status, rollout) and
    returns the new service's objects and the manifest text written."""
    svc_res = kube.resource(docs[0]["apiVersion"], docs[0]["kind"])
    current, new = canary_names(cfg.name, lambda n: kube.get(svc_res, n, cfg.namespace) is not None)
    new_cfg = parse_config(params, **{**overrides, "name": new})
    old_pool, new_pool = parse_config(params, **{**overrides, "name": current}).pool_name, new_cfg.pool_name
    if not old_pool or not new_pool or old_pool == new_pool:
        raise ShipyardError("deploy_config.rollout", "a canary needs each service's own InferencePool "
                            f"(router.scheduler managed), got {old_pool!r} and {new_pool!r}",
                            'use the managed scheduler, or {"strategy": "replace"}')
    docs = render(new_cfg, model_config)
    require_valid(docs)
    text = to_yaml(docs + rules)
    if manifest_path != "-":
        atomic_write_text(manifest_path, text)
    steps: list[dict[str, Any]] = []

    def check_step(url: str, weight: int) -> None:
        if check is not None:
            check(url)
        steps.append({"weight": weight, "verified": check is not None})

    out = canary_rollout(docs, kube, current=current, old_pool=old_pool, new_pool=new_pool,
                         route_name=rollout["route"]["name"],
                         route_namespace=rollout["route"]["namespace"] or cfg.namespace,
                         steps=rollout["steps"], check=check_step if check is not None else None,
                         deploy_options=waits)
    result.update(name=new, url=out["url"], status=out["status"], generation=out["generation"],
                  rollout={"strategy": "canary", "replaced": current, "route": out["route"],
                           "steps": out["steps"], "verified_steps": steps})
    return docs, text


def check_attestation(model_uri: str, options: dict[str, Any]) -> dict[str, Any]:
    """The deploy step's (and ``shipyard deploy``'s) refusal of a model whose verification summary is
    missing, unsigned, for another digest or not ``PASSED``
    (:func:`shipyard.gates.evidence.require_attested`; ``options``: ``deploy_config.attestation``).
    An ``oci:///`` layout on the pipeline's disk is checked like a registry image."""
    return require_attested(model_uri, options)


def write_decision_record(candidate: str | None, verify_dir: str | None, result: dict[str, Any], model_uri: str,
                          dry_run: bool, failure: str = "") -> str | None:
    """Write ``verify_dir/decision-record.json``: the champion's decision record (select_champion's
    ``decision-record.json`` in the ``candidate`` folder, or a new one for a promoted candidate) with
    this deploy's verification and outcome (:func:`shipyard.gates.selection.with_verification`),
    passed, failed or not run. ``failure``: the error the deploy ended with (a failed verification
    rolled back). Returns the path; None without a champion record or a report folder."""
    if not candidate or not verify_dir:
        return None
    path = Path(candidate)
    record: DecisionRecord | None = None
    champion = ""
    try:  # a record that cannot be read: a new one naming what it can (the deploy's outcome is still kept)
        if path.is_dir() and (path / DECISION_RECORD).is_file():
            record = load_decision(path)
        else:
            champion = str(load_candidate(path).get("recipe") or "")
    except ShipyardError:
        record = None
    report = Path(verify_dir) / REPORT_JSON
    checks = None
    if (result.get("verification") or {}).get("ran") and report.is_file():
        try:
            checks = json.loads(report.read_text())["report"]["checks"]
        except (OSError, ValueError, KeyError, TypeError):
            checks = None
    status = result.get("status", "") if not failure else ("failed (rolled back)" if not dry_run else "failed")
    deployment = {"champion": champion, "name": result.get("name"), "namespace": result.get("namespace"),
                  "model_uri": model_uri, "dry_run": dry_run, "status": status, "url": result.get("url", ""),
                  "error": failure, "rollout": result.get("rollout"), "engine": result.get("engine"),
                  "attestation": result.get("attestation")}
    out = Path(verify_dir) / DECISION_RECORD
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(with_verification(record, result.get("verification") or {}, deployment, checks),
                                      indent=2, default=str))
    return str(out)


def promotion_allowed(result: dict[str, Any], dry_run: bool) -> tuple[bool, str]:
    """May the deploy step move ``production`` after :func:`run_deploy` returned ``result``?

    Yes when the Ready service passed its verification; on a dry run (``production`` does not move
    there: the alias is ``dry-run``) and when the user switched verification off
    (``deploy_config.verify.enabled=false``). No when a verification that should have run did not
    (e.g. no champion record reached the step): nothing is promoted on a verification that did not run."""
    checks = result.get("verification") or {}
    if checks.get("ran"):
        return bool(checks.get("passed")), str(checks.get("reason", ""))
    why = str(checks.get("why", "no verification record"))
    return dry_run or why == "deploy_config.verify.enabled is false", f"verification did not run: {why}"


def searched_args(candidate: str) -> dict[str, Any]:
    """The champion's flags from the serving-configuration search (selection.json's ``serving``), as
    ``{flag: value}`` (a bare flag maps to True); empty when the run did not search."""
    try:
        serving = load_selection(candidate).get("serving") or {}
    except ShipyardError:
        return {}
    if not isinstance(serving, dict) or serving.get("source") != "tuning search":
        return {}
    args, out = [str(a) for a in serving.get("vllm_args") or []], {}
    i = 0
    while i < len(args):
        flag = args[i].lstrip("-")
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[flag], i = args[i + 1], i + 2
        else:
            out[flag], i = True, i + 1
    return out


def _recorded(candidate: str) -> dict[str, Any]:
    """The champion's record from a selection folder (selection.json) or a candidate.json, with its
    golden outputs checked (one line, before anything is applied, when they are missing)."""
    path = Path(candidate)
    if path.is_dir() and (path / SELECTION_FILE).is_file():
        return load_recorded(champion_selection(str(path))["champion"])
    return load_recorded(str(path))


def _golden_figures(out: dict[str, Any]) -> dict[str, Any]:
    golden = out.get("golden") or {}
    return {k: golden.get(k) for k in ("matched", "total", "match_rate")}


def verify_package(model_uri: str, served: str, record: dict[str, Any], adapters: list[str],
                   settings: dict[str, Any], report_dir: str | None) -> dict[str, Any]:
    """Serve the packaged model from the package itself (``model_uri``: the modelcar or ORAS
    artifact, a registry reference or an OCI layout) with a local vLLM and verify it against the
    champion's record: proves the package kept the model intact."""
    import tempfile

    from shipyard.serving.vllm_server import VLLMServer

    with tempfile.TemporaryDirectory(prefix="shipyard-verify-package-") as tmp:
        model = Path(tmp) / "model"
        pull_model(model_uri, model)
        print(f"deploy: serving the package {model_uri.split('@')[0]} locally to verify it", flush=True)
        with VLLMServer(model, served_model_name=served, log_path=Path(tmp) / "vllm.log") as server:
            return verify_service(server.url, served, record, model_dir=str(model), lora_adapters=adapters,
                                  config=local_settings(settings), report_dir=report_dir)


def champion_record(candidate: str | None) -> CandidateRecord | None:
    """The champion's record (its candidate.json content) from a selection folder or a
    candidate.json; None when there is none or it cannot be read."""
    if not candidate:
        return None
    path = Path(candidate)
    try:
        if path.is_dir() and (path / SELECTION_FILE).is_file():
            found = champion_selection(str(path)).get("champion")
        else:
            found = load_candidate(path)
    except ShipyardError:
        return None
    return found if isinstance(found, dict) else None


def serving_image(cfg: DeployConfig, benchmarked: dict[str, Any] | None) -> dict[str, Any]:
    """Which image the deployment's ``main`` containers run, and why: ``{"pin", "source", "warning"}``
    (``pin`` None: the image stays as the user, the template or KServe's preset sets it).

    By default the image the SLO gate benchmarked (the benchmark step's own image, recorded in its
    engine record), so production runs the build the gate measured. ``deploy_config.image`` wins
    (a different image is warned about); ``"preset"`` keeps KServe's preset image (llm-d's build).
    P/D with a KV connector whose library the benchmarked image lacks (NixlConnector: ``nixl``)
    keeps the preset image too, with a warning: vLLM could not start there. shipyard's GPU vllm
    image carries NIXL (images/vllm/requirements-gpu.in), so the default pd-nixl deploy serves the
    benchmarked image; a benchmark run elsewhere (the CPU flavor, a local venv) records no ``nixl``."""
    bench = (benchmarked or {}).get("image")
    if cfg.template is not None:
        return {"pin": None, "source": "template", "warning": ""}
    if cfg.image == PRESET_IMAGE:
        return {"pin": None, "source": f'KServe preset (deploy_config.image "{PRESET_IMAGE}")',
                "warning": f"deploy_config.image is {PRESET_IMAGE!r}: KServe's preset image serves, not the image the "
                           f"SLO gate benchmarked ({bench or 'not recorded'})"}
    if cfg.image:
        differs = bool(bench) and cfg.image != bench
        return {"pin": None, "source": "deploy_config.image",
                "warning": f"deploy_config.image {cfg.image} is not the image the SLO gate benchmarked ({bench}): "
                           "the gate's latency and throughput figures were measured on another build" if differs else ""}
    if not is_image_reference(bench):
        why = "no champion record" if benchmarked is None else "the benchmark recorded no container image (it ran " \
              "outside a compiled step's image, e.g. a local venv run)"
        return {"pin": None, "source": f"KServe preset ({why})",
                "warning": f"{why}: KServe's preset image serves, a vLLM build the SLO gate did not measure; "
                           "set deploy_config.image to pin one" if benchmarked is not None else ""}
    module = CONNECTOR_MODULES.get(cfg.kv_connector) if cfg.disaggregated else None
    if module and not ((benchmarked or {}).get("kv_modules") or {}).get(module):
        return {"pin": None, "source": f"KServe preset (the benchmarked image has no {module}, which P/D's "
                                       f"{cfg.kv_connector} needs)",
                "warning": f"the benchmarked image {bench} has no {module}, which P/D's {cfg.kv_connector} needs: "
                           "KServe's preset image serves, a vLLM build the SLO gate did not measure; set "
                           f"deploy_config.image to an image with vLLM {(benchmarked or {}).get('version')} and {module}"}
    return {"pin": str(bench), "source": "the image the SLO gate benchmarked", "warning": ""}


def _preset_images() -> list[str]:
    """The vLLM images KServe's presets (the vendored v0.20 ones) run the main container with."""
    import yaml

    images: set[str] = set()
    for path in sorted((upstream_dir() / "kserve" / "llmisvcconfig").glob("config-llm-*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            spec = (doc or {}).get("spec") or {}
            for pool in (spec, spec.get("prefill") or {}):
                for part in ("template", "worker"):
                    for c in ((pool.get(part) or {}).get("containers") or []):
                        if c.get("name") == "main" and c.get("image"):
                            images.add(str(c["image"]))
    return sorted(images)


def serving_engine(docs: list[dict[str, Any]], benchmarked: dict[str, Any] | None,
                   choice: dict[str, Any]) -> dict[str, Any]:
    """What serves and what was benchmarked, side by side (the summary, the decision record and
    the MLflow run): ``serving`` (the ``main`` image and where it came from, :func:`serving_image`),
    ``benchmarked`` (the champion's engine record), ``same_build`` (the served image is the one the
    SLO gate benchmarked) and ``warning`` (why not, when known)."""
    main = next((c for d in docs if d.get("kind") == "LLMInferenceService"
                 for c in (((d.get("spec") or {}).get("template") or {}).get("containers") or [])
                 if c.get("name") == "main"), {})
    preset = choice["source"] if choice["source"].startswith("KServe preset") else "KServe preset (the template sets none)"
    serving = {"image": main["image"], "source": choice["source"]} if main.get("image") else \
        {"image": ", ".join(_preset_images()) or "KServe's default", "source": preset}
    bench = (benchmarked or {}).get("image")
    same = bool(bench) and main.get("image") == bench
    warning = choice["warning"] or ("" if same or not bench else
                                    f"the deployment serves {serving['image']} ({serving['source']}), not the image "
                                    f"the SLO gate benchmarked ({bench})")
    return {"serving": serving, "benchmarked": benchmarked, "same_build": same, "warning": warning}


def _pools(docs: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """The rendered LLMInferenceService's pools: ``{"decode"|"prefill": (replicas, tensor parallel)}``
    (an aggregated service has only ``decode``, its one pool)."""
    spec = next(((d.get("spec") or {}) for d in docs if d.get("kind") == "LLMInferenceService"), {})
    out = {"decode": (int(spec.get("replicas", 1)), int((spec.get("parallelism") or {}).get("tensor") or 1))}
    prefill = spec.get("prefill") or {}
    if prefill:
        out["prefill"] = (int(prefill.get("replicas", 1)), int((prefill.get("parallelism") or {}).get("tensor") or 1))
    return out


def _measured_levels(record: dict[str, Any]) -> str:
    """The champion's benchmark levels in words, e.g. "3 load levels (concurrency 1, concurrency 4, ...)"."""
    levels = [lv for lv in record.get("levels") or [] if isinstance(lv, dict)]
    if not levels:
        return "load levels not recorded"
    return f"{len(levels)} load level{'s' if len(levels) != 1 else ''} (" + ", ".join(level_label(lv) for lv in levels) + ")"


def served_shape(cfg: DeployConfig, docs: list[dict[str, Any]], record: dict[str, Any] | None,
                 engine: dict[str, Any]) -> dict[str, Any] | None:
    """What the SLO gate measured (one aggregated vLLM server: its image, tensor parallelism and load
    levels) against what this deployment serves (its pools, KV connector and image), and what that
    means for the gate's figures: ``{"measured", "deployed", "same_shape", "meaning"}``; None without
    a champion record (nothing was measured)."""
    if record is None:
        return None
    bench = record.get("engine") if isinstance(record.get("engine"), dict) else {}
    tp = bench.get("tensor_parallel")
    image = f"image `{bench['image']}`" if bench.get("image") else "no container image recorded"
    selected = selected_level(record)
    measured = (f"one aggregated vLLM {bench.get('version') or '(version not recorded)'} server ({image}), "
                f"tensor parallel {tp if tp else 'not recorded'}, {_measured_levels(record)}; SLO gate "
                + ("passed" if slo_of(record).get("passed") else "not passed")
                + (f", highest load meeting the SLO {level_label(selected)}" if selected else ""))
    pools = _pools(docs)
    served = f"`{engine['serving']['image']}`" if engine.get("serving") else "not known"
    decode, prefill = pools["decode"], pools.get("prefill")
    if prefill:
        connector = cfg.kv_connector if cfg.template is None else "the template's KV connector"
        deployed = (f"P/D: {prefill[0]} prefill replica{'s' if prefill[0] != 1 else ''} (tensor parallel {prefill[1]}) + "
                    f"{decode[0]} decode replica{'s' if decode[0] != 1 else ''} (tensor parallel {decode[1]}), the KV "
                    f"cache moved by {connector}; image {served}")
        meaning = ("The SLO verdict was made on aggregated serving: each request's prefill and decode ran in the same "
                   "vLLM, with no KV transfer. Here they run in separate pods: TTFT adds the KV cache's transfer from "
                   "the prefill to the decode pod, while decode no longer waits behind other requests' prefills "
                   "(ITL under load is usually lower and steadier), and capacity is that of the pools, not of one "
                   "server. The gate's TTFT/ITL figures and its highest load are therefore not measurements of this "
                   "shape: the deploy's verification (the SLO smoke at the gate-selected level, and the P/D pool "
                   "counters when their metrics URLs are given) is the check on the deployed shape.")
        same = False
    else:
        deployed = (f"aggregated: {decode[0]} replica{'s' if decode[0] != 1 else ''} (tensor parallel {decode[1]}); "
                    f"image {served}")
        same = tp is not None and int(tp) == decode[1]
        meaning = ("Each replica serves as the benchmarked server did" + ("" if same else
                   " but at another tensor parallelism" if tp else ", tensor parallelism of the benchmark not recorded")
                   + ": the gate's figures describe one replica; the router spreads load over "
                   f"{decode[0]} replica{'s' if decode[0] != 1 else ''}. The deploy's verification (the SLO smoke) "
                   "checks the service as deployed.")
    build = serves_benchmarked(engine)
    if build == "NO":
        meaning += " The image differs from the benchmarked one as well (see the engine warning)."
    elif build != "yes":
        meaning += " Whether the image is the benchmarked build is unknown: the champion's record has no engine."
    return {"measured": measured, "deployed": deployed, "same_shape": same, "meaning": meaning}


def serves_benchmarked(engine: dict[str, Any]) -> str:
    """Whether the deployment serves the build the SLO gate benchmarked: "yes", "NO", or "unknown (...)"
    when the champion's record names no benchmarked engine (there is nothing to compare with)."""
    if (engine.get("benchmarked") or {}).get("version"):
        return "yes" if engine.get("same_build") else "NO"
    return "unknown (the champion's record has no engine)"


def _service_rows(docs: list[dict[str, Any]]) -> list[str]:
    """The deploy summary's rows for the LLMInferenceService: its model URI and replicas (decode, and
    prefill when disaggregated)."""
    lines: list[str] = []
    for doc in docs:
        spec = doc.get("spec") or {}
        if doc.get("kind") == "LLMInferenceService":
            model = spec.get("model") or {}
            lines.append(f"| model | `{model.get('uri', '')}` |")
            lines.append(f"| replicas (decode) | {spec.get('replicas', 1)} |")
            prefill = spec.get("prefill") or {}
            if prefill:
                lines.append(f"| replicas (prefill) | {prefill.get('replicas', 1)} |")
    return lines


def _engine_rows(engine: dict[str, Any]) -> list[str]:
    """The deploy summary's rows for the serving engine against the one the SLO gate benchmarked
    (none without an engine record)."""
    if not engine:
        return []
    bench = engine.get("benchmarked") or {}
    measured = (f"vLLM {bench.get('version')} ({bench.get('distribution')}, "
                + (f"image `{bench['image']}`)" if bench.get("image") else "no container image recorded)")
                if bench.get("version") else "not recorded")
    lines = [f"| serving engine | `{engine['serving']['image']}` ({engine['serving']['source']}) |",
             f"| engine the SLO gate benchmarked | {measured} |",
             f"| serves the benchmarked build | {serves_benchmarked(engine)} |"]
    if engine.get("warning"):
        lines.append(f"| engine warning | {str(engine['warning']).replace('|', '/')} |")
    return lines


def deployment_markdown(result: dict[str, Any], docs: list[dict[str, Any]], text: str) -> str:
    """The deploy step's Markdown summary: what was deployed where, its status and URL, each object,
    and the manifest itself (the KFP UI renders it inline)."""
    status = result["status"]
    head = ("Rendered and validated only (dry run): nothing was applied." if status == "DryRun"
            else f"Applied and **{status}**" + (f" at {result['url']}" if result.get("url") else "") + ".")
    lines = [f"# LLMInferenceService {result['namespace']}/{result['name']}", "", head, "",
             "| | |", "| --- | --- |", f"| mode | {result['mode']} |",
             f"| sized by the memory planner | {'yes' if result.get('planned') else 'no (no model config)'} |"]
    lines += _service_rows(docs)
    engine = result.get("engine") or {}
    lines += _engine_rows(engine)
    attested = result.get("attestation") or {}
    if attested:
        said = (f"verified: summary `{(attested.get('vsa') or {}).get('envelope_digest', '')}` "
                f"{(attested.get('vsa') or {}).get('result')}, key {str(attested.get('keyid', ''))[:16]}"
                if attested.get("checked") else f"NOT checked ({attested.get('why', '')})")
        lines.append(f"| attestations | {said.replace('|', '/')} |")
    check = result.get("verification") or {}
    if check:
        said = (("passed: " if check.get("passed") else "FAILED: ") + str(check.get("reason", ""))
                if check.get("ran") else f"not run ({check.get('why', '')})")
        lines.append(f"| verification | {said.replace('|', '/')} |")
    shape = engine.get("shape")
    if shape:
        lines += ["", "## What the SLO gate measured and what is deployed", "", "| | |", "| --- | --- |",
                  f"| benchmarked (the SLO gate) | {shape['measured'].replace('|', '/')} |",
                  f"| deployed | {shape['deployed'].replace('|', '/')} |", "", shape["meaning"]
                  + ("" if not check or check.get("ran") else f" Here the verification did not run ({check.get('why', '')}): the "
                     "deployed shape is unchecked.")]
    alerts = result.get("alerts")
    if alerts:
        lines += ["", alerts_markdown(alerts["rows"], alerts["name"]).rstrip(), "", alerts["note"]]
    sizing = result.get("sizing")
    if sizing:
        lines += ["", sizing_markdown(sizing["rows"], sizing["derived"], sizing["warning"]).rstrip()]
    lines += ["", "| kind | name | namespace |", "| --- | --- | --- |"]
    lines += [f"| {d['kind']} | {d['metadata']['name']} | {d['metadata'].get('namespace', '')} |" for d in docs]
    lines += ["", "```yaml", text.rstrip(), "```", ""]
    return "\n".join(lines)


def _champion_slo(candidate: str, quiet: bool = False) -> tuple[CandidateRecord, SloThresholds | dict[str, Any]] | None:
    """The champion's record and the SLO thresholds it was gated with; None (said unless ``quiet``)
    when there are none."""
    try:
        record = champion_selection(candidate)["champion"]
    except ShipyardError as err:
        if not quiet:
            print(f"deploy: no SLO alerts ({err})", flush=True)
        return None
    slo = slo_thresholds(record)
    if slo.get("ttft_p99_ms") is None or slo.get("itl_p99_ms") is None:
        if not quiet:
            print("deploy: no SLO alerts (the champion's record holds no SLO thresholds)", flush=True)
        return None
    return record, slo


def slo_buckets(candidate: str, benchmarked: dict[str, Any] | None,
                image: dict[str, Any]) -> tuple[dict[str, list[float]], str]:
    """The ``--custom-histogram-buckets`` that put the champion's SLO thresholds on vLLM's histogram
    edges (:func:`shipyard.serving.alerts.custom_buckets`), and why none are passed when they are not:
    only when the deployment serves the image the SLO gate benchmarked (``image["pin"]``) and that
    build's vLLM takes the flag."""
    found = _champion_slo(candidate, quiet=True) if image.get("pin") else None
    if not image.get("pin"):
        return {}, (f"shipyard passes --{CUSTOM_BUCKETS_FLAG} only to the vLLM build the SLO gate benchmarked; "
                    f"this deployment serves {image.get('source')}")
    version = (benchmarked or {}).get("version")
    if not takes_custom_buckets(version):
        return {}, (f"the benchmarked vLLM {version} is older than {'.'.join(map(str, CUSTOM_BUCKETS_SINCE))}, the "
                    f"first vLLM shipyard has checked --{CUSTOM_BUCKETS_FLAG} in")
    return (custom_buckets(found[1]) if found else {}), ""


def slo_alerts(candidate: str, cfg: DeployConfig, report_url: str | None, buckets: dict[str, list[float]],
               why_default: str = "") -> dict[str, Any] | None:
    """The service's PrometheusRule from the champion's record (:func:`shipyard.serving.alerts.slo_rule`:
    the SLO it was gated with, its error budget, the knee of its benchmark, the histogram edges the
    manifest passes vLLM) and its Grafana dashboard (:func:`shipyard.serving.dashboard.dashboard_configmap`):
    ``{"doc", "dashboard", "name", "rows", "note"}``; None when the record cannot be read
    (the deploy then says so and renders no rule). ``report_url``: the alerts' ``runbook_url``
    (default: the champion record's own location)."""
    found = _champion_slo(candidate)
    if found is None:
        return None
    record, slo = found
    found_knee = find_knee(list(record.get("levels") or []), slo)
    knee = ({**found_knee["level"], "reached": found_knee["reached"],
             "occupancy": knee_occupancy(found_knee["level"], record, {**cfg.tuned_vllm_args, **cfg.vllm_args})}
            if found_knee["level"] else None)
    labels, _ = link_metadata(cfg)
    doc, rows = slo_rule(name=cfg.name, namespace=cfg.namespace, model_name=cfg.served_name, slo=slo, knee=knee,
                         runbook_url=report_url or Path(candidate).resolve().as_uri(), labels=labels,
                         buckets=buckets, why_default=why_default)
    board = dashboard_configmap(name=cfg.name, namespace=cfg.namespace, model_name=cfg.served_name, slo=slo, knee=knee,
                                labels=labels, prefix_hit_rate=qualified_hit_rate(record))
    monitor = pod_monitor(name=cfg.name, namespace=cfg.namespace, labels=labels)
    gateway = epp_monitor(name=cfg.name, namespace=cfg.namespace, labels=labels)
    note = (f"Prometheus loads {doc['metadata']['name']} when its ruleSelector matches these labels "
            f"({', '.join(f'{k}={v}' for k, v in sorted(labels.items()))}; deploy_config labels adds more, e.g. "
            f"release for kube-prometheus-stack). The dashboard is the ConfigMap {board['metadata']['name']} "
            "(label grafana_dashboard=1, which the Grafana sidecar loads): live TTFT, ITL, requests/s per replica, "
            "budget burn, KV-cache, queue depth and prefix-cache hits per pod against the SLO lines and the knee, "
            "and the prefill/decode split and the canary members side by side. The PodMonitor "
            f"{monitor['metadata']['name']} scrapes the service's vLLM pods (and its canary's) and copies their "
            "llm-d.ai/role and app.kubernetes.io/name labels onto the series, which the per-role and per-member "
            "rules group by; Prometheus loads it when its podMonitorSelector matches the same labels. Under "
            "prefill/decode both pods count each request, so the per-model SLIs, the alerts on them and the "
            "per-member rules read the pods that answer the user only (llm_d_ai_role!=\"prefill\": decode and "
            "aggregated pods, and series without the label); the per-role rules show the prefill pods' own. "
            f"The PodMonitor {gateway['metadata']['name']} scrapes the service's endpoint picker (port metrics, with "
            "the token of Secret shipyard-metrics-reader-token: manifests/components/epp-metrics-reader) for the "
            "gateway's availability SLI, which counts requests that never reached vLLM.")
    return {"doc": doc, "monitor": monitor, "epp_monitor": gateway, "dashboard": board, "name": doc["metadata"]["name"], "rows": rows,
            "note": note}


def measured_sizing(candidate: str, params: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any] | None:
    """The startup probe, KEDA trigger and min_replicas derived from the champion's measurements
    (:mod:`shipyard.serving.sizing`): ``{"params", "rows", "derived", "warning"}`` with ``params``
    the deploy_config carrying the derived values where the user gave none; None when the record
    cannot be read (the deploy then keeps its defaults and says so)."""
    try:
        record = champion_selection(candidate)["champion"]
    except ShipyardError as err:
        print(f"deploy: not sized from measurements ({err})", flush=True)
        return None
    probes = params.get("probes") if isinstance(params.get("probes"), dict) else {}
    vllm_args = params.get("vllm_args") if isinstance(params.get("vllm_args"), dict) else {}
    derived = derive_sizing(record, gpu_type=params.get("gpu_type"),
                            tensor_parallel=int(overrides.get("tensor_parallel") or params.get("tensor_parallel") or 1),
                            vllm_args=vllm_args, period_seconds=int(probes.get("period_seconds") or 10))
    sized, rows = apply_sizing(params, derived)
    for row in rows:
        print(f"deploy: {row['name']} {row['used']} ({'user value' if row['user_given'] else 'derived'}: "
              f"{row['source']})", flush=True)
    return {"params": sized, "rows": rows, "derived": derived, "warning": scale_to_zero_warning(params, derived)}


def manifest_summary(path: str | Path) -> str:
    """A short Markdown description of a written manifest (for the KFP UI)."""
    import yaml

    docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d]
    lines = ["| kind | name | namespace |", "| --- | --- | --- |"]
    lines += [f"| {d['kind']} | {d['metadata']['name']} | {d['metadata'].get('namespace', '')} |" for d in docs]
    return "\n".join(lines) + "\n"


#: the deploy step's report files in its verification folder (``verify_dir``)
VERIFICATION_MD, VERIFICATION_JSON, DECISION_RECORD_JSON = "verification.md", "verification.json", DECISION_RECORD
#: the verification report as HTML (written beside the Markdown by :func:`shipyard.steps.verify.verify`)
VERIFICATION_HTML = "verification.html"
#: the deploy summary as HTML (in ``verify_dir``), for MLflow: its Markdown preview boxes each table in a
#: 420 px high scroll area with fixed-width columns, which hid rows such as "serves the benchmarked build"
DEPLOY_HTML = "deploy.html"


def _verification_files(verify_dir: str) -> dict[str, str]:
    """The verification report's files in ``verify_dir`` as the step logs them to MLflow (the HTML
    page when it was written)."""
    files = {name: os.path.join(verify_dir, name) for name in (VERIFICATION_MD, VERIFICATION_JSON)}
    if os.path.isfile(os.path.join(verify_dir, VERIFICATION_HTML)):
        files[VERIFICATION_HTML] = os.path.join(verify_dir, VERIFICATION_HTML)
    return files


def failed_deploy_outputs(verify_dir: str, verification_path: str) -> dict[str, Any]:
    """A failed deploy's outputs (rolled back or never applied): the verification report, when one was
    written, copied to ``verification_path`` and printed (it says why). Returns the step's MLflow
    record (``StepRun.log``'s tags and artifacts) that keeps it and the decision record."""
    report, record = os.path.join(verify_dir, VERIFICATION_MD), os.path.join(verify_dir, DECISION_RECORD_JSON)
    log: dict[str, Any] = {"tags": {}, "artifacts": {}}
    if os.path.isfile(report):
        shutil.copyfile(report, verification_path)
        print(Path(report).read_text(encoding="utf-8"), flush=True)
        log["tags"]["shipyard.verify.passed"] = "false"
        log["artifacts"].update(_verification_files(verify_dir))
    if os.path.isfile(record):
        log["artifacts"][DECISION_RECORD] = record
    return log


def deploy_outputs(result: dict[str, Any], verify_dir: str, *, manifest_path: str, summary_path: str,
                   verification_path: str, decision_record_path: str) -> dict[str, Any]:
    """A finished deploy's outputs from :func:`run_deploy`'s ``result``: the verification report and the
    decision record copied from ``verify_dir`` to their output paths (a 'not run' stand-in when there
    is none), the summary also written there as :data:`DEPLOY_HTML`, and the verification's line printed.
    Returns ``metadata`` (per output: ``manifest``, ``verification``, ``decision_record``) and ``log``,
    the step's MLflow record (tags, metrics, artifacts)."""
    report, record = os.path.join(verify_dir, VERIFICATION_MD), os.path.join(verify_dir, DECISION_RECORD_JSON)
    checks = result.get("verification") or {}
    metadata: dict[str, dict[str, Any]] = {
        "manifest": {k: result[k] for k in ("name", "namespace", "kinds", "mode", "status", "planned")},
        "verification": {k: checks[k] for k in ("ran", "passed", "reason", "why") if k in checks},
        "decision_record": {}}
    if os.path.isfile(report):
        shutil.copyfile(report, verification_path)
    else:
        atomic_write_text(verification_path, f"# deployment verification: not run\n\n{checks.get('why', '')}\n")
    files = {"manifest.yaml": manifest_path, "deploy.md": summary_path}
    if os.path.isfile(summary_path):
        page = os.path.join(verify_dir, DEPLOY_HTML)
        atomic_write_text(page, markdown_html(Path(summary_path).read_text(encoding="utf-8")))
        files[DEPLOY_HTML] = page
    if os.path.isfile(record):
        shutil.copyfile(record, decision_record_path)
        metadata["decision_record"]["verification"] = metadata["verification"].get("passed", "not run")
        files[DECISION_RECORD] = record
    else:
        atomic_write_text(decision_record_path, json.dumps(
            {"verification": {"outcome": "not run", "why": "no champion record reached the step"}}))
    figures: dict[str, float] = {}
    if checks.get("ran"):
        files.update(_verification_files(verify_dir))
        figures = {"verify.passed": float(bool(checks.get("passed")))}
        if (checks.get("golden") or {}).get("match_rate") is not None:
            figures["verify.golden_match_rate"] = float(checks["golden"]["match_rate"])
        print(f"verification: {'passed' if checks.get('passed') else 'FAILED'}: {checks.get('reason', '')}", flush=True)
    return {"metadata": metadata, "log": {"tags": _deploy_tags(result), "metrics": figures, "artifacts": files}}


def _deploy_tags(result: dict[str, Any]) -> dict[str, str]:
    """The deploy step's MLflow tags: the status, what serves and what was benchmarked, the verification."""
    checks = result.get("verification") or {}
    engine = result.get("engine") or {}
    serving, benchmarked = engine.get("serving") or {}, engine.get("benchmarked") or {}
    return {"shipyard.deploy.status": result["status"],
            "shipyard.serving_image": str(serving.get("image", "")),
            "shipyard.serving_image_source": str(serving.get("source", "")),
            "shipyard.benchmarked_engine": "vllm " + str(benchmarked.get("version")),
            "shipyard.benchmarked_image": str(benchmarked.get("image") or ""),
            "shipyard.serves_benchmarked_build": {"yes": "true", "NO": "false"}.get(serves_benchmarked(engine),
                                                                                   "unknown"),
            "shipyard.verify.passed": str(bool(checks.get("passed"))).lower() if checks.get("ran") else "not run"}


def deploy_task(*, model_uri: str, name: str, namespace: str, deploy_config: str, dry_run: bool,
                champion: dict[str, Any], manifest_path: str, summary_path: str, verification_path: str,
                decision_record_path: str, model_dir: str | None = None, selection_path: str | None = None,
                selection_uri: str | None = None, model_name: str = "", tracking_uri: str = "",
                experiment: str = "", kfp_run_id: str = "") -> dict[str, Any]:
    """The deploy step as its KFP wrapper runs it, with its outputs' paths: :func:`run_deploy` in the
    vllm runtime inside the step's MLflow run, the outputs and their record (:func:`deploy_outputs`;
    :func:`failed_deploy_outputs` when the deploy ends the step), then :func:`promote_verified`.

    ``champion`` is the decision's metadata ({} without one); ``model_uri`` "" deploys its ``uri``.
    Returns run_deploy's ``url`` and ``status``, and ``metadata`` per output (``manifest``,
    ``verification``, ``decision_record``)."""
    import tempfile

    model_uri = model_uri or str(champion.get("uri", ""))
    with StepRun("deploy", str(champion.get("recipe", "")), tracking_uri=tracking_uri, experiment=experiment,
                 kfp_run_id=kfp_run_id if champion else "",
                 params={"name": name, "namespace": namespace, "model_uri": model_uri, "dry_run": dry_run,
                         "model_name": model_name, "version": str(champion.get("version", ""))}) as run:
        checked = tempfile.mkdtemp(prefix="shipyard-verify-")
        try:
            result = call_step("vllm", run_deploy, deploy_config=deploy_config, manifest_path=manifest_path,
                               dry_run=dry_run, model_dir=model_dir, name=name, model_uri=model_uri,
                               namespace=namespace, summary_path=summary_path, candidate=selection_path,
                               verify_dir=checked, report_url=selection_uri)
        except SystemExit:
            # rolled back (or never applied): the verification report, when one was written, says why, and
            # the decision record keeps the failed deploy (and its verification) in MLflow
            run.log(**failed_deploy_outputs(checked, verification_path))
            raise
        recorded = deploy_outputs(result, checked, manifest_path=manifest_path, summary_path=summary_path,
                                  verification_path=verification_path, decision_record_path=decision_record_path)
        run.log(**recorded["log"])
        promote_verified(result, champion, dry_run=dry_run, model_name=model_name, tracking_uri=tracking_uri,
                         experiment=experiment, kfp_run_id=kfp_run_id)
    return {"url": result["url"], "status": result["status"], "metadata": recorded["metadata"]}


def promote_verified(result: dict[str, Any], champion: dict[str, Any], *, dry_run: bool, model_name: str,
                     tracking_uri: str, experiment: str, kfp_run_id: str) -> None:
    """After :func:`run_deploy` returned ``result``: the champion's model version gets ``production``
    in MLflow (a dry run: ``dry-run``) when :func:`promotion_allowed` says so, and only to the image
    whose attestations the deploy verified (``result["attestation"]``; its logged override
    ``deploy_config.attestation.require=false`` too; one line otherwise); when it does not, the
    step ends (exit 1) saying why, and ``production`` stays where it was. Nothing happens without a
    champion (the decision's metadata) and a ``model_name``."""
    # nothing is promoted on a verification that did not run, unless the user switched it off
    verified, why = promotion_allowed(result, dry_run)
    if champion and model_name and verified:
        out = call_step("vllm", promote_production, tracking_uri=tracking_uri,
                        experiment=experiment, kfp_run_id=kfp_run_id, model_name=model_name,
                        version=str(champion["version"]), recipe=str(champion.get("recipe", "")),
                        headline_json=str(champion.get("headline", "{}")), dry_run=dry_run,
                        attestation_json=json.dumps(result.get("attestation") or {}))
        print(f"{out.get('note') or 'production'}: aliases {json.dumps(out['aliases'])}", flush=True)
    elif champion and model_name:
        print(f"shipyard: verification: {why}; production unchanged", file=sys.stderr, flush=True)
        raise SystemExit(1)
