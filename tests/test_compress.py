"""The compress step, for real: llmcompressor on the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shipyard.core.errors import ShipyardError
from shipyard.models.embedded import answer
from shipyard.runtimes.runtime import run_in_runtime
from shipyard.steps.compress import compress_model


def _compress(model: Path, out: Path, **kwargs) -> dict:
    kwargs.setdefault("num_calibration_samples", 8)
    kwargs.setdefault("max_seq_length", 64)
    return run_in_runtime("compress", compress_model, model_dir=str(model), out_dir=str(out), **kwargs)


@pytest.fixture(scope="module")
def w8a8(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("w8a8") / "model"
    summary = out.parent / "summary.md"
    result = _compress(tiny_model, out, recipe="w8a8-int8", summary_path=str(summary))
    return out, result


def test_w8a8_writes_compressed_tensors_folder(w8a8: tuple[Path, dict]) -> None:
    out, result = w8a8
    config = json.loads((out / "config.json").read_text())
    qconfig = config["quantization_config"]
    assert qconfig["quant_method"] == "compressed-tensors"
    group = next(iter(qconfig["config_groups"].values()))
    assert group["weights"]["num_bits"] == 8 and group["input_activations"]["num_bits"] == 8
    assert "lm_head" in qconfig["ignore"]
    recipe = (out / "recipe.yaml").read_text()
    assert "SmoothQuantModifier" in recipe and "GPTQModifier" in recipe
    assert result["metadata"]["scheme"] == "W8A8-INT8"
    metrics = result["metrics"]
    assert metrics["size_after_bytes"] < metrics["size_before_bytes"]
    assert metrics["compression_ratio"] > 1.5
    assert metrics["num_calibration_samples"] == 8
    assert "w8a8-int8" in (out.parent / "summary.md").read_text()
    # what the wrapper logs into MLflow, as the step returns it: its figures, the summary and the recipe
    assert result["log"] == {"metrics": metrics, "artifacts": {"summary.md": str(out.parent / "summary.md"),
                                                               "recipe.yaml": f"{out}/recipe.yaml"}}


def test_compressed_model_reloads_and_generates(w8a8: tuple[Path, dict]) -> None:
    out, _ = w8a8
    text = run_in_runtime("compress", answer, model_dir=str(out), prompt="the capital", max_new_tokens=5)
    assert isinstance(text, str) and text.strip()


def test_fp8_dynamic_is_data_free(tiny_model: Path, tmp_path: Path) -> None:
    result = _compress(tiny_model, tmp_path / "fp8", recipe="fp8-dynamic", calibration_dataset="/does/not/exist.jsonl")
    assert result["metrics"]["num_calibration_samples"] == 0
    group = next(iter(json.loads((tmp_path / "fp8" / "config.json").read_text())["quantization_config"]["config_groups"].values()))
    assert group["weights"]["type"] == "float"


def test_user_recipe_file_and_jsonl_calibration(tiny_model: Path, tmp_path: Path) -> None:
    recipe = tmp_path / "my-recipe.yaml"
    # GPTQ 4-bit weights in groups of 16: the tiny model's K (144, 720, 528) are not multiples of
    # the W4A16 preset's 128 (shipyard.testing.tinymodel keeps them off multiples of 32)
    recipe.write_text("quant_stage:\n  quant_modifiers:\n    GPTQModifier:\n      ignore: [lm_head]\n"
                      "      config_groups:\n        group_0:\n          targets: [Linear]\n          weights:\n"
                      "            {num_bits: 4, type: int, symmetric: true, strategy: group, group_size: 16}\n")
    calib = tmp_path / "calib.jsonl"
    calib.write_text("\n".join(json.dumps({"body": f"sample number {i} about cities and rivers"}) for i in range(6)))
    result = _compress(tiny_model, tmp_path / "out", recipe=str(recipe), calibration_dataset=str(calib), text_column="body",
                       num_calibration_samples=4)
    assert result["metadata"]["recipe"] == "my-recipe"
    assert result["metrics"]["num_calibration_samples"] == 4


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"recipe": "w3a3-magic"}, "recipe", "unknown preset"),
        ({"recipe": "quant_stage: [unclosed"}, "recipe", "malformed recipe YAML"),
        ({"recipe": "w8a8-int8", "num_calibration_samples": 0}, "num_calibration_samples", "must be > 0"),
        ({"recipe": "w8a8-int8", "calibration_dataset": "CALIB"}, "text_column", "no text column 'text'"),
        ({"recipe": "w8a8-int8", "calibration_dataset": "some-org/some-dataset"}, "calibration_dataset", "offline"),
    ],
)
def test_bad_input_is_one_line_and_leaves_nothing(
    tiny_model: Path, tmp_path: Path, kwargs: dict, field: str, words: str
) -> None:
    if kwargs.get("calibration_dataset") == "CALIB":
        calib = tmp_path / "calib.jsonl"
        calib.write_text(json.dumps({"content": "no text column here"}) + "\n")
        kwargs["calibration_dataset"] = str(calib)
    out = tmp_path / "out"
    with pytest.raises(ShipyardError) as err:
        _compress(tiny_model, out, **kwargs)
    message = str(err.value)
    assert message.startswith(field + ":"), message
    assert words in message
    assert "\n" not in message
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.partial")]


def test_model_folder_without_config(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ShipyardError, match=r"^model: .* has no config.json"):
        _compress(tmp_path / "empty", tmp_path / "out", recipe="w8a8-int8")
