"""Compression recipes: named presets shipped as YAML data, or a user's llmcompressor recipe."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shipyard.core.errors import ShipyardError
from shipyard.core.files import package_dir, path_kind
from shipyard.core.jsonargs import load_yaml, read_text

PRESETS_DIR = package_dir("shipyard.compression") / "recipes"

#: llmcompressor's modifier registry (``ModifierFactory._main_registry`` of llmcompressor 0.14,
#: less the abstract ``Modifier``), vendored so pre-flight (base runtime, no llmcompressor) refuses a
#: misspelt modifier before any model is loaded. ``tests/test_recipe_modifiers.py`` checks, in the
#: compress venv, that it equals the installed llmcompressor's registry.
LLMCOMPRESSOR_MODIFIERS = frozenset({
    "AWQModifier", "AutoRoundModifier", "ConstantPruningModifier", "GPTQModifier", "LogarithmicEqualizationModifier",
    "MagnitudePruningModifier", "QuIPModifier", "QuantizationModifier", "REAPPruningModifier", "SmoothQuantModifier",
    "SparseGPTModifier", "SpinQuantModifier", "WandaPruningModifier",
})


def check_modifiers(body: Any, field: str) -> None:
    """Every modifier a recipe names is one llmcompressor has (:data:`LLMCOMPRESSOR_MODIFIERS`):
    the keys under each stage's ``*_modifiers`` group, and any capitalised key that looks like one."""
    import difflib

    stack: list[tuple[Any, str]] = [(body, "")]
    while stack:
        node, where = stack.pop()
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            name = str(key)
            path = f"{where}.{name}" if where else name
            group = where.rsplit(".", 1)[-1].endswith("_modifiers")
            if group or (name[:1].isupper() and "Modif" in name):
                if name not in LLMCOMPRESSOR_MODIFIERS:
                    close = difflib.get_close_matches(name, sorted(LLMCOMPRESSOR_MODIFIERS), n=1)
                    hint = f"did you mean {close[0]}? " if close else ""
                    raise ShipyardError(field, f"unknown llmcompressor modifier {name!r} at {path}"[:300],
                                        f"{hint}llmcompressor 0.14 has {', '.join(sorted(LLMCOMPRESSOR_MODIFIERS))}")
                continue  # a modifier's own arguments are llmcompressor's to check
            stack.append((value, path))


@dataclass(frozen=True)
class Recipe:
    """A resolved recipe: its name, the llmcompressor recipe as YAML text, and whether it calibrates."""

    name: str
    description: str
    yaml_text: str
    needs_calibration: bool


def preset_names() -> list[str]:
    """The shipped presets (``w8a8-int8``, ``fp8-dynamic``, ``w4a16`` ...)."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def _from_mapping(name: str, data: dict[str, Any], field: str) -> Recipe:
    body = data.get("recipe", data)
    if not isinstance(body, dict) or not body:
        raise ShipyardError(field, f"recipe {name!r} has no stages", "write llmcompressor stages, e.g. quant_stage: {quant_modifiers: {...}}")
    check_modifiers(body, field)
    text = yaml.safe_dump(body, sort_keys=False)
    needs = data.get("needs_calibration")
    if needs is None:
        needs = any(key in text for key in ("GPTQModifier", "SmoothQuantModifier", "AWQModifier"))
    return Recipe(name, str(data.get("description", name)), text, bool(needs))


def load_recipe(spec: str, field: str = "recipe") -> Recipe:
    """Resolve ``spec``: a preset name, a path to a recipe YAML file, or inline recipe YAML."""
    spec = (spec or "").strip()
    if not spec:
        raise ShipyardError(field, "is empty", f"use a preset ({', '.join(preset_names())}) or a recipe YAML file")
    if spec in preset_names():
        data = yaml.safe_load((PRESETS_DIR / f"{spec}.yaml").read_text())
        return _from_mapping(spec, data, field)
    path = Path(spec).expanduser()
    exists = path_kind(spec) != ""  # a long one-line recipe is not a path (and never an OSError)
    looks_like_path = "\n" not in spec and (spec.endswith((".yaml", ".yml")) or exists)
    if looks_like_path and not exists:
        raise ShipyardError(field, f"recipe file {spec} does not exist", "give an existing YAML file or a preset name")
    text = read_text(path, field) if looks_like_path else spec
    try:
        data = load_yaml(text, field)  # strict: a key given twice (two GPTQModifier blocks) is an error
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ShipyardError(field, f"malformed recipe YAML{where}", "fix the YAML syntax") from None
    if not isinstance(data, dict):
        if "\n" not in spec and not looks_like_path:
            raise ShipyardError(field, f"unknown preset {spec!r}", f"use one of {', '.join(preset_names())} or a recipe YAML")
        raise ShipyardError(field, "recipe YAML is not a mapping of stages", "write llmcompressor recipe stages")
    name = path.stem if looks_like_path else "custom"
    return _from_mapping(name, data, field)


def recipe_label(spec: str) -> str:
    """A short name for a recipe in reports and MLflow: the preset's name, a file's stem, or
    ``recipe-<8 hex of its text>`` for inline YAML."""
    import hashlib

    text = (spec or "").strip()
    if "\n" not in text and len(text) <= 64:
        return Path(text).stem if text.endswith((".yaml", ".yml")) else text
    return "recipe-" + hashlib.sha256(text.encode()).hexdigest()[:8]
