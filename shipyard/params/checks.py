"""Pre-flight: check every pipeline parameter before any model is loaded.

:func:`check_parameters` types each value, parses every JSON parameter and recipe with the
same validators the steps use (gates configs, eval config, benchmark config, deploy config,
recipes, model URIs), and raises the first problem as one
:class:`~shipyard.core.errors.ShipyardError` line naming the parameter and the fix. It runs:

* in ``shipyard run --local``, ``submit`` and ``schedule`` before anything starts or is sent;
* as the first task of every pipeline (the ``preflight`` component), which then checks that the
  MLflow tracking server answers (:func:`shipyard.tracking.tracker.check_tracking_uri`: one line within
  seconds when it does not) and opens the pipeline's MLflow run with the parameters.

Pure Python (base runtime); checks that need a network or a model (hub datasets, eval tasks
from lm-eval's registry) are left to the steps.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from shipyard.core.errors import ShipyardError, refuse_credentials, shown
from shipyard.core.files import path_kind
from shipyard.params.pipeline import BY_NAME
from shipyard.params.specs import ParamSpec, coerce_params, param_specs

PLACEHOLDER_OCI = "oci://preflight.invalid/model@sha256:" + "0" * 64


#: the URI-like parameters and where their credentials go instead (checked before anything else:
#: a credential in a parameter is shown in the KFP UI, the MLflow run and every log that prints it)
CREDENTIAL_FIXES = {
    "tracking_uri": "drop them; MLflow's credentials go in the Secret shipyard-mlflow (MLFLOW_TRACKING_TOKEN)",
    "calibration_dataset": "drop them; S3 credentials go in the Secret shipyard-s3 (AWS_ACCESS_KEY_ID, "
                           "AWS_SECRET_ACCESS_KEY), the Hub's in HF_TOKEN",
    "eval_sets": "drop them; S3 credentials go in the Secret shipyard-s3 (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)",
    "modelcar_base_image": "drop them; registry credentials go in the Secret shipyard-registry (locally "
                           "REGISTRY_AUTH_FILE or ~/.docker/config.json)",
}

#: upper bounds of the counts (far above any real run, far below what overflows a step)
_MAX_INT = {"num_calibration_samples": 10_000_000, "max_seq_length": 1_048_576, "seed": 2**32 - 1}
_DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_OCI_REPOSITORY = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")


def _bounded(name: str, value: int) -> None:
    """Counts and seeds: positive (a seed may be 0) and at most :data:`_MAX_INT`."""
    low = 0 if name == "seed" else 1
    if not low <= value <= _MAX_INT[name]:
        raise ShipyardError(name, f"must be between {low} and {_MAX_INT[name]}, got {value}",
                            f"write e.g. {name}={BY_NAME[name].default}")


def _name(name: str, value: str, rule: re.Pattern[str] | None, what: str, example: str) -> None:
    """A name that must not be empty (or only spaces) and, with ``rule``, must match it."""
    if not value.strip():
        raise ShipyardError(name, "is empty", f"give {what}, e.g. {name}={example}")
    if rule is not None and not rule.match(value):
        raise ShipyardError(name, f"{value!r} is not {what}", f"write e.g. {name}={example}")


#: what a namespace is, in the words of the error line
NAMESPACE_RULE = "a Kubernetes namespace (lowercase letters, digits and '-', at most 63)"


def check_namespace(value: str, field: str = "namespace", example: str = "namespace=shipyard") -> str:
    """``value`` as a Kubernetes namespace (a DNS-1123 label), or one line naming ``field``: checked
    before a namespace goes into an API path, a URL or a manifest."""
    if not value.strip():
        raise ShipyardError(field, "is empty", f"give {NAMESPACE_RULE}, e.g. {example}")
    if not _DNS_1123_LABEL.match(value):
        raise ShipyardError(field, f"{value[:100]!r} is not {NAMESPACE_RULE}", f"write e.g. {example}")
    return value


#: what most object names (Secrets, Services, Deployments, ServiceAccounts) are, in the words of the error line
OBJECT_NAME_RULE = "a Kubernetes object name (lowercase letters, digits, '-' and '.', at most 253)"


def check_object_name(value: str, field: str, example: str) -> str:
    """``value`` as a Kubernetes object name (a DNS-1123 subdomain, what the API server requires of
    Secrets, Services, Deployments and ServiceAccounts), or one line naming ``field``: checked before
    a name goes into an API path. A pasted token is not echoed (:func:`~shipyard.core.errors.shown`)."""
    if not value.strip():
        raise ShipyardError(field, "is empty", f"give {OBJECT_NAME_RULE}, e.g. {example}")
    if len(value) > 253 or not _DNS_1123_SUBDOMAIN.match(value):
        raise ShipyardError(field, f"{shown(value, 100)} is not {OBJECT_NAME_RULE}", f"write e.g. {example}")
    return value


def _check_recipes(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """Recipes: at least one, each loadable, none named twice."""
    from shipyard.compression.recipes import load_recipe

    if not value:
        raise ShipyardError("recipes", "is empty", "name at least one recipe, e.g. [w8a8-int8]")
    for i, recipe in enumerate(value):
        load_recipe(str(recipe), f"recipes[{i}]")
    if len(set(map(str, value))) != len(value):
        raise ShipyardError("recipes", "names the same recipe twice", "list each recipe once")


def _check_selection(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The champion selection config."""
    from shipyard.gates.config import selection_config

    selection_config(value)


def _check_bounded(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """Counts and seeds (:func:`_bounded`)."""
    _bounded(name, value)


def _check_namespace(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The Kubernetes namespace (:func:`check_namespace`)."""
    check_namespace(value)


def _check_deploy_name(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The deployed service's name: a Kubernetes object name."""
    _name(name, value, _DNS_1123_LABEL, "a Kubernetes object name (lowercase letters, digits and '-', at most "
          "63, starting with a letter or digit)", "shipyard-llm")


def _check_repository(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The modelcar's registry repository name."""
    _name(name, value, _OCI_REPOSITORY, "a registry repository name (lowercase letters, digits, '.', '_', '-', "
          "'/')", "team/model")


def _check_plain_name(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """A free-form name (the MLflow experiment, the dataset's text column): not empty, no surrounding
    spaces, no control characters."""
    _name(name, value, None, "a name", BY_NAME[name].default or "text")
    if value != value.strip() or any(c in value for c in "\n\r\t"):
        raise ShipyardError(name, f"{value!r} has surrounding spaces or control characters", "write the name alone")


def _check_eval_backend(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The evaluation backend: vllm or hf."""
    if value not in ("vllm", "hf"):
        raise ShipyardError(name, f"unknown backend {value!r}", "use vllm or hf")


def _check_eval_config(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The eval config, with the backend ``eval_backend`` implies."""
    from shipyard.evaluation.config import parse_eval_config

    backend = {"vllm": "openai", "hf": "hf"}.get(params.get("eval_backend", "hf"), "hf")
    parse_eval_config(value).with_backend(backend)


def _check_accuracy_thresholds(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The accuracy gate's thresholds."""
    from shipyard.gates.config import accuracy_config

    accuracy_config(value, name)


def _check_lora_adapters(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The LoRA adapters: parseable, and none a local folder unless the run is a dry run."""
    from shipyard.models.adapters import parse_adapters

    for adapter in parse_adapters(value):
        if "://" not in adapter.uri and params.get("dry_run", BY_NAME["dry_run"].default) is False:
            raise ShipyardError(f"lora_adapters.{adapter.name}", f"{adapter.uri} is a local folder: the gated "
                                "champion is deployed with its adapters and KServe cannot load a local folder",
                                "publish the adapter to hf://, s3:// or a pvc://, or set dry_run=true")


def _check_eval_sets(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The user's eval sets: valid, a rubric set only with a server, no leak into the calibration data."""
    from shipyard.evaluation.eval_sets import check_eval_sets
    from shipyard.evaluation.leakage import leak_check

    config, readable = check_eval_sets(value)
    rubric = [s.name for s in config.sets if s.form == "rubric"]
    if rubric and params.get("eval_backend", BY_NAME["eval_backend"].default) == "hf":
        raise ShipyardError(f"eval_sets.{rubric[0]}", "is a rubric set, whose answers come from the served model, "
                            "but eval_backend is hf (no server)", "set eval_backend=vllm, or drop the rubric set")
    if readable:  # a leak over max_leak_share is refused here; s3 calibration data is checked by the step
        leak_check(readable, str(params.get("calibration_dataset") or ""),
                   text_column=str(params.get("text_column") or "text"), max_leak_share=config.max_leak_share,
                   remote=False)


def _check_tuning(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The serving-configuration search."""
    from shipyard.benchmarking.tuning import parse_tuning

    parse_tuning(value)


def _check_benchmark_config(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The benchmark config."""
    from shipyard.benchmarking.guidellm import parse_benchmark_config

    parse_benchmark_config(value)


def _check_slo(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The SLO config."""
    from shipyard.gates.config import slo_config

    slo_config(value, name)


def _check_safety(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The safety scan's config."""
    from shipyard.evaluation.garak_scan import safety_config

    safety_config(value, name)


def _check_deploy_config(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The deploy config, by the deploy step's own parser: render parameters, apply, verify and rollout."""
    from shipyard.params.deploy import parse_deploy_config

    parse_deploy_config(value, name=params.get("deploy_name") or "shipyard-llm", model_uri=PLACEHOLDER_OCI)


def _check_served_model_uri(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The served modelcar (empty: MLflow's production version): a pinned ``oci://`` URI, no credentials."""
    if value:
        from shipyard.oci.reference import require_pinned

        refuse_credentials(value, name, "drop them; registry credentials go in the Secret shipyard-registry")
        if not value.startswith("oci://"):
            raise ShipyardError(name, f"{value[:100]!r} is not a modelcar", "give the package step's "
                                "oci://registry/repo@sha256:... URI, or leave it empty for MLflow's production version")
        require_pinned(value, name, how_to_allow="give the digest the package step printed")


def _check_prometheus_url(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The Prometheus URL: http(s) with a host, no credentials in it."""
    from shipyard.serving.prometheus import PrometheusAPI

    PrometheusAPI(value, field=name)


def _check_watch_config(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The watch config, for the service ``deploy_name`` names."""
    from shipyard.serving.watch import parse_watch_config

    parse_watch_config(value, str(params.get("deploy_name") or BY_NAME["deploy_name"].default))


def _check_package_mode(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The package mode: modelcar or oras."""
    if value not in ("modelcar", "oras"):
        raise ShipyardError(name, f"unknown mode {value!r}", "use modelcar or oras")


def _check_registered_model_name(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The registered model's name: short, no '/', no surrounding spaces."""
    if not value.strip() or "/" in value or len(value) > 256 or value != value.strip():
        raise ShipyardError(name, f"{value!r} is not a registered model name", "use a short name like 'llama-3-8b-w4a16'")


def _check_champion_tolerance(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The champion tolerance: not negative."""
    if value < 0:
        raise ShipyardError(name, f"must not be negative, got {value}", "use 0.0 (not worse) or e.g. 0.01")


def _check_tracking_uri(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The MLflow tracking URI (empty: none): http(s), file or an absolute path."""
    if value and not re.match(r"^(https?|file)://", value) and not value.startswith("/"):
        raise ShipyardError(name, f"{value!r} is not an MLflow tracking URI", "use http(s)://host:port or leave empty")


#: a parameter's checker: ``(name, value, params)``, raising the first problem as one ShipyardError line
Checker = Callable[[str, Any, Mapping[str, Any]], None]

#: the value check of each parameter that has one (a parameter not named here is only typed)
CHECKERS: dict[str, Checker] = {
    "recipes": _check_recipes,
    "selection": _check_selection,
    **{name: _check_bounded for name in _MAX_INT},
    "namespace": _check_namespace,
    "deploy_name": _check_deploy_name,
    "repository": _check_repository,
    "experiment": _check_plain_name,
    "text_column": _check_plain_name,
    "eval_backend": _check_eval_backend,
    "eval_config": _check_eval_config,
    "accuracy_thresholds": _check_accuracy_thresholds,
    "lora_adapters": _check_lora_adapters,
    "eval_sets": _check_eval_sets,
    "tuning": _check_tuning,
    "benchmark_config": _check_benchmark_config,
    "slo": _check_slo,
    "safety": _check_safety,
    "deploy_config": _check_deploy_config,
    "served_model_uri": _check_served_model_uri,
    "prometheus_url": _check_prometheus_url,
    "watch_config": _check_watch_config,
    "package_mode": _check_package_mode,
    "registered_model_name": _check_registered_model_name,
    "champion_tolerance": _check_champion_tolerance,
    "tracking_uri": _check_tracking_uri,
}


def _check(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """One parameter's checks: credentials refused first (:data:`CREDENTIAL_FIXES`), then its
    checker in :data:`CHECKERS`, if it has one."""
    if name in CREDENTIAL_FIXES:
        refuse_credentials(value, name, CREDENTIAL_FIXES[name])
    checker = CHECKERS.get(name)
    if checker is not None:
        checker(name, value, params)


def check_values(params: Mapping[str, Any]) -> None:
    """The pre-flight checks of typed values (what ``shipyard.params.specs`` registers as a validator):
    recipes, selection, eval/benchmark/deploy configs, thresholds, SLO, names and numbers."""
    for name, value in params.items():
        _check(name, value, params)


def check_parameters(pipeline: str, params: Mapping[str, Any], *, fill_defaults: bool = True) -> dict[str, Any]:
    """Type and check every parameter of ``pipeline`` (:func:`shipyard.params.specs.coerce_params` with
    its validators, this module's among them); returns them typed (defaults filled in).

    Unknown names, missing required ones, wrong types and bad JSON parameters raise the first
    problem as one ShipyardError line.
    """
    from shipyard.params.pipeline import REQUIRED, param_specs_for, params_for
    typed = check_params(param_specs_for(pipeline), params, name=pipeline)
    if fill_defaults:
        for p in params_for(pipeline):
            if p.name not in typed and p.default is not REQUIRED:
                typed[p.name] = p.default
    return typed


def record_for_mlflow(params: Mapping[str, Any]) -> dict[str, str]:
    """The parameters as the MLflow parent run records them: lists joined, an empty value as ``""``
    (the run shows it was left empty; the pre-flight adds what applied instead as ``effective.*``)."""
    out = {}
    for key, value in params.items():
        if value is None:
            continue
        out[key] = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return out


#: parameters that name a model (checked as model URIs when given and not empty)
MODEL_URI_PARAMS = ("model_uri", "candidate_uri")


def check_model_uris(specs: Mapping[str, ParamSpec], params: dict[str, Any]) -> None:
    """``model_uri``/``candidate_uri``: a known scheme, and ``oci://`` pinned by digest."""
    from shipyard.models.resolve import parse_model_uri

    for name in MODEL_URI_PARAMS:
        value = params.get(name)
        if name in specs and isinstance(value, str):
            uri = parse_model_uri(value, field=name)
            if uri.scheme == "file" and not path_kind(uri.location):  # (a name too long counts as missing)
                raise ShipyardError(name, f"{uri.location!r} does not exist"[:300], "give an existing model folder, "
                                    "or a model URI (hf://, s3://, oci://, pvc://, embedded://)")


def check_registry_param(specs: Mapping[str, ParamSpec], params: dict[str, Any]) -> None:
    """``registry``: ``host[:port]`` with no credentials in it (they are never echoed)."""
    value = params.get("registry")
    if "registry" in specs and isinstance(value, str) and value.strip():
        from shipyard.oci.client import check_registry

        check_registry(value, "registry")


def check_registry_for_deploy(specs: Mapping[str, ParamSpec], params: dict[str, Any]) -> None:
    """``registry=""`` writes the modelcar into the pipeline root as an OCI layout, which KServe
    cannot pull: with ``dry_run=false`` the deploy step would refuse it after every GPU step ran.
    Given values win; the pipeline's defaults fill the rest."""
    if "registry" not in specs or "dry_run" not in specs:
        return
    registry = params.get("registry", specs["registry"].default)
    dry_run = params.get("dry_run", specs["dry_run"].default)
    if dry_run is False and isinstance(registry, str) and not registry.strip():
        raise ShipyardError("registry", "is empty while dry_run is false: the modelcar would stay an OCI layout in "
                            "the pipeline root, which KServe cannot pull, and deploy would fail after the GPU work",
                            "set registry=host[:port] (and repository), or dry_run=true")


def check_params(pipeline: Any, raw: Mapping[str, Any], *, require: bool = True, name: str = "") -> dict[str, Any]:
    """Type ``raw`` for ``pipeline`` (:func:`shipyard.params.specs.coerce_params`), then run every
    check on the typed values: model URIs, the registry, and :func:`check_values`. What the CLI
    (``run --local``, ``submit``, ``schedule``) and the pipeline's first task both run."""
    specs = pipeline if isinstance(pipeline, Mapping) and all(isinstance(v, ParamSpec) for v in pipeline.values()) \
        else param_specs(pipeline)
    typed = coerce_params(specs, raw, require=require, name=name)
    check_model_uris(specs, typed)
    check_registry_param(specs, typed)
    check_registry_for_deploy(specs, typed)
    check_values(typed)
    return typed
