"""Pre-flight: check every pipeline parameter before any model is loaded.

:func:`check_parameters` types each value, parses every JSON parameter and recipe with the
same validators the steps use (gates configs, eval config, benchmark config, deploy config,
recipes, model URIs), and raises the first problem as one
:class:`~shipyard.errors.ShipyardError` line naming the parameter and the fix. It runs:

* in ``shipyard run --local``, ``submit`` and ``schedule`` before anything starts or is sent;
* as the first task of every pipeline (the ``preflight`` component), which then opens the
  pipeline's MLflow run with the parameters.

Pure Python (base runtime); checks that need a network or a model (hub datasets, eval tasks
from lm-eval's registry) are left to the steps.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from shipyard.errors import ShipyardError
from shipyard.pipelines.params import BY_NAME, REQUIRED, params_for

_CREDENTIALS = re.compile(r"^[^/@]+:[^/@]*@")
_PLACEHOLDER_OCI = "oci://preflight.invalid/model@sha256:" + "0" * 64


def coerce(name: str, value: Any) -> Any:
    """``value`` as parameter ``name``'s type; natural spellings are accepted where unambiguous
    (``recipes=w8a8-int8`` is a one-item list, ``"16"`` an int, ``"true"`` a bool)."""
    kind = BY_NAME[name].type
    if kind is list:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    value = json.loads(text)
                except ValueError:
                    raise ShipyardError(name, "is not a valid JSON list", 'write ["w8a8-int8", "w4a16"]') from None
            else:
                value = [v.strip() for v in text.split(",") if v.strip()] if "\n" not in text else [text]
        if not isinstance(value, list | tuple):
            raise ShipyardError(name, f"must be a list, got {type(value).__name__}", 'write ["w8a8-int8", "w4a16"]')
        return list(value)
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.strip().lower() in ("true", "yes", "1")
        raise ShipyardError(name, f"must be true or false, got {value!r}", f"write {name}=true or {name}=false")
    if kind is int:
        if isinstance(value, bool):
            raise ShipyardError(name, f"must be a whole number, got {value!r}", f"write e.g. {name}={BY_NAME[name].default}")
        try:
            number = int(value) if not isinstance(value, float) or value.is_integer() else None
        except (TypeError, ValueError):
            number = None
        if number is None:
            raise ShipyardError(name, f"must be a whole number, got {value!r}", f"write e.g. {name}={BY_NAME[name].default}")
        return number
    if kind is float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ShipyardError(name, f"must be a number, got {value!r}", f"write e.g. {name}=0.0") from None
        if isinstance(value, bool) or number != number or number in (float("inf"), float("-inf")):
            raise ShipyardError(name, f"must be a finite number, got {value!r}", f"write e.g. {name}=0.0")
        return number
    if isinstance(value, Mapping | list):
        return json.dumps(value)
    return "" if value is None else str(value)


def _model_uri(name: str, uri: str) -> None:
    from shipyard.models import parse_model_uri

    parsed = parse_model_uri(uri, name)
    if parsed.scheme == "oci" and "@sha256:" not in uri:
        raise ShipyardError(name, f"{uri!r} uses a mutable tag", "pin it by digest: oci://registry/repo@sha256:<64 hex>")


def _positive(name: str, value: int) -> None:
    if value <= 0:
        raise ShipyardError(name, f"must be > 0, got {value}", f"write e.g. {name}={BY_NAME[name].default}")


def _check(name: str, value: Any, params: Mapping[str, Any]) -> None:
    if name in ("model_uri", "candidate_uri"):
        _model_uri(name, value)
    elif name == "recipes":
        from shipyard.components.compress.recipes import load_recipe

        if not value:
            raise ShipyardError("recipes", "is empty", "name at least one recipe, e.g. [w8a8-int8]")
        for i, recipe in enumerate(value):
            load_recipe(str(recipe), f"recipes[{i}]")
        if len(set(map(str, value))) != len(value):
            raise ShipyardError("recipes", "names the same recipe twice", "list each recipe once")
    elif name == "selection":
        from shipyard.components.gates.config import selection_config

        selection_config(value)
    elif name in ("num_calibration_samples", "max_seq_length"):
        _positive(name, value)
    elif name == "eval_backend":
        if value not in ("vllm", "hf"):
            raise ShipyardError(name, f"unknown backend {value!r}", "use vllm or hf")
    elif name == "eval_config":
        from shipyard.components.evaluate.config import parse_eval_config

        backend = {"vllm": "openai", "hf": "hf"}.get(params.get("eval_backend", "hf"), "hf")
        parse_eval_config(value).with_backend(backend)
    elif name == "accuracy_thresholds":
        from shipyard.components.gates.config import accuracy_config

        accuracy_config(value, name)
    elif name == "benchmark_config":
        from shipyard.components.benchmark.benchmark import parse_benchmark_config

        parse_benchmark_config(value)
    elif name == "slo":
        from shipyard.components.gates.config import slo_config

        slo_config(value, name)
    elif name == "deploy_config":
        from shipyard.components.deploy.config import parse_config

        parse_config(value, name=params.get("deploy_name") or "shipyard-llm", model_uri=_PLACEHOLDER_OCI)
    elif name == "package_mode":
        if value not in ("modelcar", "oras"):
            raise ShipyardError(name, f"unknown mode {value!r}", "use modelcar or oras")
    elif name == "registry":
        if _CREDENTIALS.match(value):
            raise ShipyardError(name, "holds credentials (user:password@host)",
                                "give host[:port] only; credentials come from the shipyard-registry secret")
    elif name == "registered_model_name":
        if not value.strip() or "/" in value or len(value) > 256:
            raise ShipyardError(name, f"{value!r} is not a registered model name", "use a short name like 'llama-3-8b-w4a16'")
    elif name == "champion_tolerance":
        if value < 0:
            raise ShipyardError(name, f"must not be negative, got {value}", "use 0.0 (not worse) or e.g. 0.01")
    elif name == "tracking_uri":
        if value and not re.match(r"^(https?|file)://", value) and not value.startswith("/"):
            raise ShipyardError(name, f"{value!r} is not an MLflow tracking URI", "use http(s)://host:port or leave empty")


def check_parameters(pipeline: str, params: Mapping[str, Any], *, fill_defaults: bool = True) -> dict[str, Any]:
    """Type and check every parameter of ``pipeline``; returns them typed (defaults filled in).

    Unknown names, missing required ones, wrong types and bad JSON parameters raise the first
    problem as one ShipyardError line.
    """
    spec = params_for(pipeline)
    known = {p.name for p in spec}
    unknown = sorted(set(params) - known)
    if unknown:
        raise ShipyardError("--param", f"unknown parameter(s) {', '.join(unknown)} for {pipeline}",
                            f"use one of: {', '.join(sorted(known))}")
    typed: dict[str, Any] = {}
    for p in spec:
        if p.name in params:
            typed[p.name] = coerce(p.name, params[p.name])
        elif p.default is REQUIRED:
            raise ShipyardError(p.name, f"is required by {pipeline}", f"pass --param {p.name}=...")
        elif fill_defaults:
            typed[p.name] = p.default
    for name, value in typed.items():
        _check(name, value, typed)
    return typed


def record_for_mlflow(params: Mapping[str, Any]) -> dict[str, str]:
    """The parameters as the MLflow parent run records them (lists joined, empty values left out)."""
    out = {}
    for key, value in params.items():
        if value in ("", None, []):
            continue
        out[key] = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return out


def preflight_step(pipeline: str, params: dict[str, Any], tracking_uri: str, experiment: str, kfp_run_id: str) -> dict[str, Any]:
    """The pipeline's first task: check everything, then open the MLflow parent run with the parameters."""
    typed = check_parameters(pipeline, params, fill_defaults=False)
    from shipyard.components.track.track import start_tracking

    run = start_tracking(tracking_uri=tracking_uri, experiment=experiment, pipeline_name=pipeline,
                         kfp_run_id=kfp_run_id, params_json=json.dumps(record_for_mlflow(typed)), tags_json="{}")
    return {"checked": sorted(typed), **run}
