"""Pre-flight: check every pipeline parameter before any model is loaded.

:func:`check_parameters` types each value, parses every JSON parameter and recipe with the
same validators the steps use (gates configs, eval config, benchmark config, deploy config,
recipes, model URIs), and raises the first problem as one
:class:`~shipyard.core.errors.ShipyardError` line naming the parameter and the fix. It runs:

* in ``shipyard run --local``, ``submit`` and ``schedule`` before anything starts or is sent;
* as the first task of every pipeline (the ``preflight`` component), which then checks that the
  MLflow tracking server answers (:func:`shipyard.tracking.tracker.check_tracking_uri`: one line within
  seconds when it does not) and opens the pipeline's MLflow run with the parameters.

Each parameter's own value check sits next to its declaration in :mod:`shipyard.params.pipeline`
(``Param.check``); this module runs them, after the credential refusal, the model URIs and the
registry. Pure Python (base runtime); checks that need a network or a model (hub datasets, eval tasks
from lm-eval's registry) are left to the steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shipyard.core.errors import ShipyardError, refuse_credentials
from shipyard.core.files import path_kind
from shipyard.models.resolve import parse_model_uri
from shipyard.oci.client import check_registry
from shipyard.params.pipeline import BY_NAME, REQUIRED, param_specs_for, params_for
from shipyard.params.specs import ParamSpec, coerce_params, param_specs


def _check(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """One parameter's checks, as its declaration names them: credentials refused first
    (:attr:`~shipyard.params.pipeline.Param.credential_fix`), then its value check
    (:attr:`~shipyard.params.pipeline.Param.check`)."""
    param = BY_NAME.get(name)
    if param is None:
        return
    if param.credential_fix:
        refuse_credentials(value, name, param.credential_fix)
    if param.check is not None:
        param.check(name, value, params)


def check_values(params: Mapping[str, Any]) -> None:
    """The pre-flight checks of typed values, each parameter's as its declaration names them
    (:func:`_check`): recipes, selection, eval/benchmark/deploy configs, thresholds, SLO, names and
    numbers. :func:`check_params` runs it after typing and the model URI and registry checks. They run in
    the order the parameters are declared, whatever order they were given in: a problem is named by the
    parameter it lies in (a bad ``deploy_name`` as itself, before ``deploy_config``'s check renders with it)."""
    order = {name: i for i, name in enumerate(BY_NAME)}
    for name in sorted(params, key=lambda n: order.get(n, len(order))):
        _check(name, params[name], params)


def check_parameters(pipeline: str, params: Mapping[str, Any], *, fill_defaults: bool = True) -> dict[str, Any]:
    """Type and check every parameter of ``pipeline`` given in ``params`` (:func:`check_params`);
    returns them typed, with ``fill_defaults`` the declared defaults of the others filled in.

    Unknown names, missing required ones, wrong types and bad JSON parameters raise the first
    problem as one ShipyardError line.
    """
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
