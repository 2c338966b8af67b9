"""The compress step: one-shot post-training quantization with llmcompressor.

Runs in the ``compress`` runtime. Reads a Hugging Face model folder, applies a recipe (a preset
such as ``w8a8-int8``, ``fp8-dynamic``, ``w4a16`` or a user's llmcompressor YAML) with
calibration data, and writes a compressed-tensors folder (``config.json`` carries
``quantization_config``; ``recipe.yaml`` records what was done). The folder appears whole or
not at all.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from shipyard.compression.calibration import load_calibration_texts
from shipyard.compression.recipes import load_recipe
from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_dir, atomic_write_text, dir_size
from shipyard.models.resolve import check_model_folder


def _weights_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors")) or sum(p.stat().st_size for p in folder.glob("*.bin"))


def _check_lengths(max_seq_length: int, num_calibration_samples: int) -> None:
    """Both calibration sizes are > 0 (checked before torch and the model load)."""
    if max_seq_length <= 0:
        raise ShipyardError("max_seq_length", f"must be > 0, got {max_seq_length}", "use e.g. 2048 on a GPU, 512 on a CPU")
    if num_calibration_samples <= 0:
        raise ShipyardError(
            "num_calibration_samples", f"must be > 0, got {num_calibration_samples}", "use e.g. 512 on a GPU, 16 on a CPU"
        )


def _save_compressed(tmp: Path, model: Any, tokenizer: Any, resolved: Any, dataset: Any, samples: int,
                     max_seq_length: int) -> dict[str, Any]:
    """Apply the recipe to ``model`` and save it compressed into ``tmp`` with its tokenizer and
    ``recipe.yaml``; returns its ``config.json``, which must carry ``quantization_config``."""
    recipe_file = tmp / "recipe.yaml"
    recipe_file.write_text(resolved.yaml_text)
    _oneshot(model, tokenizer, resolved, recipe_file, dataset, samples, max_seq_length)
    model.save_pretrained(tmp, save_compressed=True)
    tokenizer.save_pretrained(tmp)
    if not (tmp / "recipe.yaml").exists():
        recipe_file.write_text(resolved.yaml_text)
    config = json.loads((tmp / "config.json").read_text())
    if "quantization_config" not in config:
        raise ShipyardError("recipe", f"recipe {resolved.name!r} produced no quantization_config", "add a quantization modifier")
    return config


def compress_model(
    model_dir: str,
    out_dir: str,
    recipe: str = "w8a8-int8",
    calibration_dataset: str = "",
    text_column: str = "text",
    num_calibration_samples: int = 16,
    max_seq_length: int = 512,
    seed: int = 42,
    summary_path: str = "",
) -> dict[str, Any]:
    """Compress the model at ``model_dir`` into ``out_dir``; return metrics, metadata and ``log`` (the
    step's MLflow record: :meth:`shipyard.tracking.steprun.StepRun.log`'s arguments). Every input is checked, and the calibration set read, before torch and the model are loaded."""
    source = check_model_folder(model_dir, "model")
    resolved = load_recipe(recipe)
    _check_lengths(max_seq_length, num_calibration_samples)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source)
    dataset, samples = _calibration_set(resolved, tokenizer, calibration_dataset, text_column, num_calibration_samples,
                                        max_seq_length, seed)
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(source, dtype="auto")
    started = time.perf_counter()
    with atomic_dir(out_dir) as tmp:
        config = _save_compressed(tmp, model, tokenizer, resolved, dataset, samples, max_seq_length)
        seconds = time.perf_counter() - started
        size_before = _weights_size(source)
        size_after = _weights_size(tmp)
        provenance = {
            "base_model": str(source),
            "recipe": resolved.name,
            "recipe_description": resolved.description,
            "calibration_dataset": calibration_dataset or "shipyard default (shipyard/compression/calibration/default.jsonl)",
            "num_calibration_samples": samples,
            "max_seq_length": max_seq_length,
            "seed": seed,
        }
        (tmp / "shipyard-compress.json").write_text(json.dumps(provenance, indent=2))
    metrics = {
        "size_before_bytes": size_before,
        "size_after_bytes": size_after,
        "compression_ratio": round(size_before / size_after, 4) if size_after else 0.0,
        "wall_seconds": round(seconds, 2),
        "num_calibration_samples": samples,
    }
    scheme = _scheme_name(config["quantization_config"])
    if summary_path:
        atomic_write_text(summary_path, render_summary(resolved.name, resolved.description, scheme, metrics, provenance))
    return {
        "metrics": metrics,
        "metadata": {"recipe": resolved.name, "scheme": scheme, "quantization_format": config["quantization_config"].get("format", "")},
        "output_size_bytes": dir_size(out_dir),
        "log": {"metrics": metrics, "artifacts": {"summary.md": summary_path, "recipe.yaml": f"{out_dir}/recipe.yaml"}},
    }


def _calibration_set(resolved: Any, tokenizer: Any, calibration_dataset: str, text_column: str, num_samples: int,
                     max_seq_length: int, seed: int) -> tuple[Any, int]:
    """The tokenized calibration dataset and its size (None, 0 when the recipe needs no calibration)."""
    if not resolved.needs_calibration:
        return None, 0
    from datasets import Dataset

    texts = load_calibration_texts(
        calibration_dataset, text_column=text_column, num_samples=num_samples, seed=seed, tokenizer=tokenizer
    )
    dataset = Dataset.from_list(
        [dict(tokenizer(t, truncation=True, max_length=max_seq_length, add_special_tokens=False)) for t in texts]
    )
    return dataset, len(texts)


def _oneshot(model: Any, tokenizer: Any, resolved: Any, recipe_file: Path, dataset: Any, samples: int,
             max_seq_length: int) -> None:
    """llmcompressor's ``oneshot`` with the recipe file; a recipe it rejects is one line."""
    from llmcompressor import oneshot

    kwargs: dict[str, Any] = {}
    if dataset is not None:
        kwargs.update(dataset=dataset, num_calibration_samples=samples, max_seq_length=max_seq_length)
    try:
        oneshot(model=model, tokenizer=tokenizer, recipe=str(recipe_file), **kwargs)
    except ShipyardError:
        raise
    except (ValueError, KeyError, TypeError) as err:
        raise ShipyardError("recipe", f"llmcompressor rejected recipe {resolved.name!r}: {err}".splitlines()[0],
                            "check modifier names and arguments") from None


def _scheme_name(qconfig: dict[str, Any]) -> str:
    groups = qconfig.get("config_groups", {})
    for group in groups.values():
        weights = group.get("weights") or {}
        acts = group.get("input_activations") or {}
        kind = "FP" if weights.get("type") == "float" else "INT"
        act_bits = acts.get("num_bits", 16) if acts else 16
        return f"W{weights.get('num_bits', '?')}A{act_bits}-{kind}{weights.get('num_bits', '')}"
    return qconfig.get("quant_method", "unknown")


def render_summary(name: str, description: str, scheme: str, metrics: dict[str, Any], provenance: dict[str, Any]) -> str:
    """The Markdown the KFP UI shows for a compress step."""
    mib = 1024 * 1024
    rows = [
        ("Recipe", f"`{name}`: {description}"),
        ("Scheme", scheme),
        ("Weights before", f"{metrics['size_before_bytes'] / mib:.1f} MiB"),
        ("Weights after", f"{metrics['size_after_bytes'] / mib:.1f} MiB"),
        ("Compression ratio", f"{metrics['compression_ratio']:.2f}x"),
        ("Calibration", f"{metrics['num_calibration_samples']} samples from {provenance['calibration_dataset']}"),
        ("Max sequence length", str(provenance["max_seq_length"])),
        ("Wall time", f"{metrics['wall_seconds']:.1f} s"),
    ]
    lines = [f"## Compressed with `{name}`", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(lines) + "\n"
