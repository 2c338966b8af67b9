"""The vendored list of llmcompressor modifiers (pre-flight runs in the base runtime, which has no
llmcompressor) equals the registry of the llmcompressor installed in the compress runtime, and a
misspelt modifier is refused at pre-flight in one line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from shipyard.compression.recipes import LLMCOMPRESSOR_MODIFIERS, load_recipe
from shipyard.core.errors import ShipyardError

COMPRESS_PYTHON = Path(__file__).resolve().parents[1] / ".venvs" / "compress" / "bin" / "python"

_REGISTRY = """
import json
from llmcompressor.modifiers.factory import ModifierFactory
ModifierFactory.refresh()
names = set(ModifierFactory._main_registry) | set(ModifierFactory._registered_registry)
print(json.dumps(sorted(names - {"Modifier"})))
"""


@pytest.mark.skipif(not COMPRESS_PYTHON.exists(), reason="needs the compress venv (shipyard setup --runtime compress)")
def test_vendored_modifiers_equal_llmcompressors_registry() -> None:
    done = subprocess.run([str(COMPRESS_PYTHON), "-c", _REGISTRY], capture_output=True, text=True, timeout=300,
                          check=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    registry = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(LLMCOMPRESSOR_MODIFIERS) == registry, "update LLMCOMPRESSOR_MODIFIERS in shipyard/compression/recipes.py"


@pytest.mark.parametrize("recipe", [
    "quant_stage:\n  quant_modifiers:\n    GPTQModifer: {scheme: W4A16, targets: [Linear]}\n",
    "quant_stage:\n  quant_modifiers:\n    gptq: {scheme: W4A16}\n",
    "SmoothQuantModifer:\n  smoothing_strength: 0.5\n",
])
def test_a_misspelt_modifier_is_one_line(recipe: str) -> None:
    with pytest.raises(ShipyardError, match="unknown llmcompressor modifier") as err:
        load_recipe(recipe, "recipes[0]")
    assert str(err.value).startswith("recipes[0]: ") and "\n" not in str(err.value)


def test_presets_and_real_recipes_pass() -> None:
    for name in ("w8a8-int8", "w4a16", "fp8-dynamic"):
        assert load_recipe(name).yaml_text
    text = ("sparsity_stage:\n  sparsity_modifiers:\n    SparseGPTModifier: {sparsity: 0.5}\n"
            "quant_stage:\n  quant_modifiers:\n    QuantizationModifier: {scheme: FP8_DYNAMIC, targets: [Linear]}\n")
    assert "SparseGPTModifier" in load_recipe(text).yaml_text
