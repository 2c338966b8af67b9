"""A tiny random-weight Llama with a locally trained tokenizer, built in seconds.

Tests and benchmarks use it so the real libraries (llmcompressor, lm-eval, vLLM, guidellm)
run end to end without a hub. Runs in the ``compress`` runtime (torch + transformers).
"""

from __future__ import annotations

import json
from pathlib import Path

from shipyard.core.files import atomic_dir

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _corpus() -> list[str]:
    words = (
        "the capital of france is paris berlin is in germany rome is in italy madrid spain "
        "a model answers questions about cities numbers colours animals one two three four five "
        "six seven eight nine ten red green blue cat dog bird fish question answer yes no true false "
        "what which who where when how many is are was were of to and in on for with by at from"
    ).split()
    lines = []
    for i in range(400):
        lines.append(" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(12)))
    lines.append("Question: What is the capital of France?\nAnswer: Paris")
    return lines


def build_tiny_model(out_dir: str, vocab_size: int = 1024, seed: int = 0) -> dict[str, object]:
    """Write a tiny Llama (2 layers, GQA 4/2 heads, head_dim 64) and its tokenizer to ``out_dir``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(seed)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        model_max_length=2048,
    )
    fast.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=2048,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        fast.save_pretrained(tmp)
        (tmp / "shipyard-model.json").write_text(json.dumps({"source": "shipyard.testing.tinymodel", "seed": seed}))
    return {"path": str(Path(out_dir)), "parameters": sum(p.numel() for p in model.parameters())}
