"""A tiny peft LoRA adapter for the tiny model (and a damaged copy of a model), built in seconds.

The LoRA tests (``tests/test_lora.py``) evaluate a model plus an adapter with lm-eval's hf
backend and gate candidate+adapter against base+adapter. peft initialises ``lora_B`` to zero (an
adapter that changes nothing); :func:`build_tiny_adapter` uses random ``lora_B`` so the adapter
moves the outputs, and ``scale`` multiplies it to make an adapter that breaks them.
:func:`damage_model` writes a copy of a model with noise added to its weights: a stand-in for a
quantization that went wrong. Runs in the ``compress`` runtime (torch, transformers, peft).
:func:`build_lora_fixtures` and :func:`evaluate_adapters_each` do several of these in one runtime
process (each process imports torch, transformers and lm-eval again).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from shipyard.core.files import atomic_dir
from shipyard.evaluation.lora import evaluate_adapters


def build_tiny_adapter(model_dir: str, out_dir: str, rank: int = 8, scale: float = 1.0, seed: int = 0) -> dict[str, Any]:
    """A LoRA adapter (q/k/v/o projections, rank ``rank``) for ``model_dir``, saved by peft into ``out_dir``."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(r=rank, lora_alpha=rank, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                        init_lora_weights=False, task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, config)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.mul_(scale)
    with atomic_dir(Path(out_dir)) as tmp:
        peft_model.save_pretrained(str(tmp))
    return {"rank": rank, "scale": scale, "files": sorted(p.name for p in Path(out_dir).iterdir())}


def damage_model(model_dir: str, out_dir: str, noise: float = 0.5, seed: int = 1) -> dict[str, Any]:
    """A copy of ``model_dir`` with Gaussian noise (``noise`` x each weight's std) added to every
    attention and MLP projection: outputs that a gate must catch."""
    import torch
    from safetensors.torch import load_file, save_file

    src = Path(model_dir)
    torch.manual_seed(seed)
    with atomic_dir(Path(out_dir)) as tmp:
        shutil.copytree(src, tmp, dirs_exist_ok=True)
        for path in sorted(tmp.glob("*.safetensors")):
            tensors = load_file(str(path))
            for name, t in tensors.items():
                if name.endswith("proj.weight") and t.is_floating_point():
                    tensors[name] = (t + torch.randn_like(t) * t.float().std().to(t.dtype) * noise).contiguous()
            save_file(tensors, str(path), metadata={"format": "pt"})
    return {"noise": noise}


def build_lora_fixtures(model_dir: str, out_root: str) -> dict[str, Any]:
    """In one process: ``good`` (an adapter that moves the outputs), ``broken`` (the same adapter with
    ``lora_B`` x50) and ``damaged`` (``model_dir`` with noise 2.0) under ``out_root``."""
    root = Path(out_root)
    return {"good": build_tiny_adapter(model_dir, str(root / "good")),
            "broken": build_tiny_adapter(model_dir, str(root / "broken"), scale=50.0),
            "damaged": damage_model(model_dir, str(root / "damaged"), noise=2.0)}


def evaluate_adapters_each(runs: list[dict[str, str]], eval_config: str) -> list[dict[str, Any]]:
    """:func:`shipyard.evaluation.lora.evaluate_adapters` for each of ``runs`` (``model_dir``,
    ``adapters_dir``, ``out_dir``), in order, in one process."""
    return [evaluate_adapters(run["model_dir"], eval_config, run["adapters_dir"], run["out_dir"]) for run in runs]
