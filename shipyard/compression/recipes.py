"""Compression recipes: named presets shipped as YAML data, or a user's llmcompressor recipe."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shipyard.core.errors import ShipyardError
from shipyard.core.files import package_dir

PRESETS_DIR = package_dir("shipyard.compression") / "recipes"


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
    looks_like_path = "\n" not in spec and (spec.endswith((".yaml", ".yml")) or path.exists())
    if looks_like_path and not path.exists():
        raise ShipyardError(field, f"recipe file {spec} does not exist", "give an existing YAML file or a preset name")
    text = path.read_text() if looks_like_path else spec
    try:
        data = yaml.safe_load(text)
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
