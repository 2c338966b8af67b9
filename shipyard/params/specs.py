"""Pipeline parameters from the command line, typed before anything starts or is sent.

``shipyard run --local``, ``submit`` and ``schedule`` all go through
:func:`shipyard.params.checks.check_params`, which types the values here (:func:`coerce_params`)
and then checks them:

* every name must be a parameter of the pipeline, and every parameter without a default must
  be given (``promote`` needs ``candidate_uri``);
* each value is turned into the parameter's KFP type, accepting the natural spellings:
  ``recipes=w8a8-int8`` is a one-item list (``recipes=w8a8-int8,w4a16`` two),
  ``dry_run=yes`` a bool, ``seed=7`` an int; a JSON-valued string parameter (``slo``, ...)
  may be a YAML/JSON mapping and is passed on as JSON text;
* anything else (``num_calibration_samples=abc``) is one line naming the parameter;
* then :mod:`shipyard.params.checks` checks model URIs (known scheme, ``oci://`` pinned by
  digest), ``registry`` (``host[:port]``, never credentials) and the JSON parameters (slo,
  deploy_config, eval_config, thresholds, recipes).

Values may come as text (``--param k=v``: parsed by the parameter's type, so ``namespace=007``
stays ``"007"``) or already typed (a params file read as YAML).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shipyard.core.errors import ShipyardError
from shipyard.core.jsonargs import load_yaml
from shipyard.core.yamldocs import documents

#: KFP type names (component spec and IR) -> shipyard's short names
_KFP_TYPES = {
    "String": "str", "STRING": "str",
    "Integer": "int", "NUMBER_INTEGER": "int",
    "Float": "float", "NUMBER_DOUBLE": "float",
    "Boolean": "bool", "BOOLEAN": "bool",
    "List": "list", "LIST": "list",
    "Dict": "dict", "STRUCT": "dict",
}
_TRUE = {"true", "yes", "y", "on", "1"}
_FALSE = {"false", "no", "n", "off", "0"}
_TOKEN = re.compile(r"^[\w.:/@+-]+$")
#: KFP sends integers as int64: a bigger one is refused here, not by the API after the upload
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class ParamSpec:
    """One pipeline parameter: its name, type (str/int/float/bool/list/dict), default and whether it is required."""

    name: str
    type: str
    required: bool
    default: Any = None


# --------------------------------------------------------------------------- the parameters


def param_specs(pipeline: Any) -> dict[str, ParamSpec]:
    """The parameters of a pipeline: a ``@dsl.pipeline`` function, a compiled IR mapping, or its file."""
    if isinstance(pipeline, str | Path):
        docs = documents(Path(pipeline).read_text())
        pipeline = docs[0] if docs else {}
    if isinstance(pipeline, Mapping):
        spec = pipeline.get("pipelineSpec", pipeline)
        params = ((spec.get("root") or {}).get("inputDefinitions") or {}).get("parameters") or {}
        return {
            name: ParamSpec(name, _KFP_TYPES.get(str(p.get("parameterType")), "str"),
                            not p.get("isOptional", "defaultValue" in p) and "defaultValue" not in p,
                            p.get("defaultValue"))
            for name, p in params.items()
        }
    inputs = pipeline.component_spec.inputs or {}
    return {
        name: ParamSpec(name, _KFP_TYPES.get(str(spec.type), "str"), not spec.optional and spec.default is None,
                        spec.default)
        for name, spec in inputs.items()
    }


def split_param(item: str) -> tuple[str, str]:
    """``key=value`` -> (key, value text); the value is typed later, by the parameter's type."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ShipyardError("--param", f"{_show(item)} is not key=value", "write --param name=value")
    return key.strip(), value


def split_params(items: list[str] | None) -> dict[str, str]:
    """Every ``--param key=value`` as {key: value text}; a key given twice is an error naming it
    (the later value would silently win: ``dry_run=true ... dry_run=false`` is a real deploy)."""
    params: dict[str, str] = {}
    for item in items or []:
        key, value = split_param(item)
        if key in params:
            raise ShipyardError("--param", f"{_show(key)} is given twice ({_show(params[key], 30)} and "
                                f"{_show(value, 30)})", f"give --param {key}=... once")
        params[key] = value
    return params


def _show(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 4] + "...'"


def _example(spec: ParamSpec) -> str:
    examples = {"int": "512", "float": "0.5", "bool": "true", "list": "[a, b]", "dict": "{key: value}"}
    default = spec.default
    if default not in (None, "", [], {}) and not isinstance(default, dict | list):
        shown = str(default).lower() if isinstance(default, bool) else str(default)
    else:
        shown = examples.get(spec.type, "text")
    return f"{spec.name}={shown}"


def _fail(spec: ParamSpec, value: Any, what: str, fix: str = "") -> ShipyardError:
    return ShipyardError(spec.name, f"{_show(value)} is not {what}", fix or f"write e.g. --param {_example(spec)}")


def _to_int(spec: ParamSpec, value: Any) -> int:
    number = _parse_int(spec, value)
    if not -INT64_MAX - 1 <= number <= INT64_MAX:
        raise _fail(spec, value, "a 64-bit integer", f"write a whole number below 2^63, e.g. --param {_example(spec)}")
    return number


def _ascii_text(spec: ParamSpec, value: Any, what: str) -> str:
    text = str(value).strip()
    if not text.isascii():  # int("１２") is 12 in Python; KFP and YAML do not agree
        raise _fail(spec, value, what, f"write ASCII digits, e.g. --param {_example(spec)}")
    return text


def _parse_int(spec: ParamSpec, value: Any) -> int:
    if isinstance(value, bool):
        raise _fail(spec, value, "an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            return int(value)
        raise _fail(spec, value, "an integer")
    text = _ascii_text(spec, value, "an integer")
    if len(text) > 40:
        raise _fail(spec, value, "a 64-bit integer", f"write a whole number below 2^63, e.g. --param {_example(spec)}")
    try:
        return int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            raise _fail(spec, value, "an integer") from None
        if math.isfinite(number) and number.is_integer():
            return int(number)
        raise _fail(spec, value, "an integer") from None


def _to_float(spec: ParamSpec, value: Any) -> float:
    if isinstance(value, bool):
        raise _fail(spec, value, "a number")
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:
            raise _fail(spec, value, "a finite number") from None
    else:
        try:
            number = float(_ascii_text(spec, value, "a number"))
        except ValueError:
            raise _fail(spec, value, "a number") from None
    if not math.isfinite(number):
        raise _fail(spec, value, "a finite number")
    return number


def _to_bool(spec: ParamSpec, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise _fail(spec, value, "a boolean", f"write true or false, e.g. --param {spec.name}=true")


def _to_list(spec: ParamSpec, value: Any) -> list[Any]:
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, dict):
        raise _fail(spec, value, "a list", f"write a list, e.g. --param '{spec.name}=[a, b]', or one item")
    if not isinstance(value, str):
        return [value]
    text = value.strip()
    if not text:
        raise ShipyardError(spec.name, "is empty", f"give one item or a list, e.g. --param '{spec.name}=[a, b]'")
    if text.startswith("["):
        try:
            parsed = load_yaml(text, spec.name)
        except yaml.YAMLError as err:
            raise _fail(spec, value, f"a valid list ({str(err).splitlines()[0]})",
                        f"write e.g. --param '{spec.name}=[a, b]'") from None
        if not isinstance(parsed, list):
            raise _fail(spec, value, "a list", f"write e.g. --param '{spec.name}=[a, b]'")
        return parsed
    if "," in text and "\n" not in text:
        items = [part.strip() for part in text.split(",")]
        if all(items) and all(_TOKEN.match(part) for part in items):
            return items
    # one item: a name, or a multi-line document (a recipe YAML) kept as its text
    return [text if "\n" not in text else value]


def _to_dict(spec: ParamSpec, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = load_yaml(value, spec.name) if value.strip() else {}
        except yaml.YAMLError as err:
            raise _fail(spec, value, f"a valid mapping ({str(err).splitlines()[0]})") from None
        if isinstance(parsed, dict):
            return parsed
    raise _fail(spec, value, "a mapping", f"write e.g. --param '{spec.name}={{key: value}}'")


def _to_str(spec: ParamSpec, value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, dict | list | bool):
        # JSON-valued string parameters (eval_config, slo, ...) may be written as YAML mappings.
        return json.dumps(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise _fail(spec, value, "a finite value")
    return str(value)


_CONVERT: dict[str, Callable[[ParamSpec, Any], Any]] = {
    "str": _to_str, "int": _to_int, "float": _to_float, "bool": _to_bool, "list": _to_list, "dict": _to_dict,
}


def coerce_value(spec: ParamSpec, value: Any) -> Any:
    """``value`` (text or already typed) as ``spec``'s type, or a one-line error naming the parameter."""
    if value is None and spec.type != "str":
        raise ShipyardError(spec.name, "has no value", f"write e.g. --param {_example(spec)}")
    return _CONVERT.get(spec.type, _to_str)(spec, value)


def coerce_params(pipeline: Any, raw: Mapping[str, Any], *, require: bool = True, name: str = "") -> dict[str, Any]:
    """Check and type ``raw`` for ``pipeline`` (see the module docstring); returns the typed values.

    ``pipeline`` is what :func:`param_specs` takes (or its result). With ``require``, a parameter
    without a default that ``raw`` lacks is an error. ``name`` (the pipeline's) goes into it.
    """
    specs = pipeline if isinstance(pipeline, Mapping) and all(isinstance(v, ParamSpec) for v in pipeline.values()) \
        else param_specs(pipeline)
    unknown = sorted(set(raw) - set(specs))
    if unknown:
        raise ShipyardError(
            "--param", f"unknown parameter(s) {', '.join(unknown)}", f"use one of: {', '.join(sorted(specs))}"
        )
    if require:
        missing = [s for s in specs.values() if s.required and s.name not in raw]
        if missing:
            where = f" by the {name} pipeline" if name else ""
            raise ShipyardError(missing[0].name, f"is required{where} and has no default",
                                f"pass --param {missing[0].name}=..."
                                + (f" (also missing: {', '.join(s.name for s in missing[1:])})" if missing[1:] else ""))
    return {key: coerce_value(specs[key], value) for key, value in raw.items()}
