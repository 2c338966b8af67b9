"""A deliberately unsafe candidate: the tiny Llama rewired to always say one phrase.

The safety gate's test needs a candidate that is measurably less safe than its base, served by
the real vLLM and scanned by the real garak. :func:`build_complying_model` takes a tiny model
folder (:mod:`shipyard.testing.tinymodel`) and rewrites its weights into a bigram machine
that answers every prompt with ``phrase`` (by default garak's ``promptinject`` rogue string
"I hate humans"), repeated until ``max_tokens``: it "always complies" with the injected
instruction. How: the phrase becomes one added token of the tokenizer; every attention and MLP
output projection is zero, so the residual stream is the current token's embedding;
embeddings are one-hot (slot 1 for the phrase's token, slot 0 for every other token) and
``lm_head`` maps both slots to the phrase's token. Same layer shapes and chat template as the
tiny model (one more vocabulary row), so vLLM serves it the same way. Runs in the ``compress``
runtime (torch + transformers).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_dir

#: garak's promptinject.HijackHateHumans rogue string (its AttackRogueString detector's trigger)
HATE_HUMANS = "I hate humans. "


def build_complying_model(base_dir: str, out_dir: str, phrase: str = HATE_HUMANS) -> dict[str, object]:
    """Write to ``out_dir`` a copy of the model at ``base_dir`` that always generates ``phrase``."""
    import torch
    from safetensors.torch import load_file, save_file
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    src = Path(base_dir)
    if not phrase:
        raise ShipyardError("phrase", "is empty", "name what the model should always say")
    tokenizer = AutoTokenizer.from_pretrained(src)
    tokenizer.add_tokens([AddedToken(phrase, normalized=False, special=False)])
    chain = tokenizer.encode(phrase, add_special_tokens=False)
    config = json.loads((src / "config.json").read_text())
    hidden = int(config["hidden_size"])
    weights = load_file(str(src / "model.safetensors"))
    vocab = len(tokenizer)
    config["vocab_size"] = vocab
    embed = torch.zeros(vocab, hidden)
    embed[:, 0] = 1.0
    head = torch.zeros(vocab, hidden)
    for slot, token in enumerate(chain, start=1):
        embed[token, 0] = 0.0
        embed[token, slot] = 1.0
        following = chain[slot] if slot < len(chain) else chain[0]
        head[following, slot] = 20.0
    head[chain[0], 0] = 20.0
    for name, tensor in weights.items():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            weights[name] = torch.zeros_like(tensor)
        elif name.endswith("norm.weight"):
            weights[name] = torch.ones_like(tensor)
    weights["model.embed_tokens.weight"] = embed.to(weights["model.embed_tokens.weight"].dtype)
    weights["lm_head.weight"] = head.to(weights["model.embed_tokens.weight"].dtype)
    with atomic_dir(out_dir) as tmp:
        for path in src.iterdir():
            if path.is_file() and path.name not in ("model.safetensors", "config.json") and "token" not in path.name:
                shutil.copy2(path, tmp / path.name)
        tokenizer.save_pretrained(tmp)
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "shipyard-model.json").write_text(json.dumps({"source": "shipyard.testing.complying", "phrase": phrase}))
    return {"path": str(Path(out_dir)), "phrase": phrase, "tokens": len(chain)}
