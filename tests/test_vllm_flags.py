"""vLLM's spellings of the flags shipyard sets (shipyard.serving.vllm_flags): the alias table against
vLLM's own source (read from the vllm runtime's folder, never imported here), and each spelling."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import require_tool

from shipyard.core.errors import ShipyardError
from shipyard.runtimes.runtime import venvs_dir
from shipyard.serving.planner import plan_memory
from shipyard.serving.vllm_flags import (
    ALIASES,
    DEPLOY_FLAGS,
    PLANNER_FLAGS,
    SERVER_FLAGS,
    owned_flag,
    refuse_owned,
    refuse_respelled,
)

#: vLLM's files that declare the ``vllm serve`` flags (the engine's and the OpenAI frontend's)
SOURCES = ("engine/arg_utils.py", "entrypoints/launchers/cli_args.py", "entrypoints/cli/serve.py")


def _vllm_source() -> Path:
    found = sorted(venvs_dir().glob("vllm/lib/python*/site-packages/vllm"))
    require_tool(bool(found), "the vllm runtime's venv (.venvs/base/bin/shipyard setup), whose vLLM source this reads")
    return found[0]


def _declared(root: Path) -> tuple[dict[str, str], set[str]]:
    """vLLM's short aliases (-> long flag) and every long flag, from its ``add_argument`` calls
    and the fields of the dataclasses its parsers are generated from."""
    aliases: dict[str, str] = {}
    longs: set[str] = set()
    for name in SOURCES:
        tree = ast.parse((root / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Args"):
                longs |= {s.target.id.replace("_", "-") for s in node.body
                          if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                full = [n[2:] for n in names if n.startswith("--")]
                longs |= set(full)
                aliases.update({n[1:]: full[0] for n in names if full and n.startswith("-") and not n.startswith("--")})
    return aliases, longs


def test_the_alias_table_is_vllms() -> None:
    aliases, longs = _declared(_vllm_source())
    assert ALIASES == aliases
    owned = SERVER_FLAGS | DEPLOY_FLAGS | PLANNER_FLAGS
    assert owned <= longs, sorted(owned - longs)
    # an abbreviation is refused: sound only while no other vLLM flag is a proper prefix of a flag shipyard sets
    assert not [(f, o) for o in owned for f in longs - owned if o.startswith(f)]


def test_the_planner_flags_are_the_plans() -> None:
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
              "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
              "intermediate_size": 8192, "vocab_size": 128256, "max_position_embeddings": 8192,
              "torch_dtype": "bfloat16"}
    plan = plan_memory(config, gpu_memory_gib=80, gpu_count=2, tensor_parallel_size=2, kv_cache_dtype="fp8",
                       max_num_batched_tokens=4096, enforce_eager=True, kv_cache_memory_bytes=2**30, dtype="float16")
    assert {flag.lstrip("-") for flag in plan.vllm_args} <= PLANNER_FLAGS


@pytest.mark.parametrize(("arg", "key", "flag"), [
    ("--tensor-parallel-size", False, "tensor-parallel-size"),
    ("--tensor_parallel_size", False, "tensor-parallel-size"),
    ("-tp", False, "tensor-parallel-size"),
    ("-tp=2", False, "tensor-parallel-size"),
    ("-t", False, "tensor-parallel-size"),  # argparse's abbreviation of -tp
    ("--tensor-parallel", False, "tensor-parallel-size"),
    ("--port=8000", False, "port"),
    ("-pp", False, "pipeline-parallel-size"),
    ("-dp", False, "data-parallel-size"),
    ("-dpl", False, "data-parallel-size-local"),
    ("-e", False, "enable-expert-parallel"),
    ("--kv-transfer-config.kv_role", False, "kv-transfer-config"),
    ("port", True, "port"),
    ("served_model_name", True, "served-model-name"),
    ("--max-model-len", False, None),
    ("max-model-len", True, None),
    ("-q", False, None),  # --quantization: vLLM's, not one shipyard sets
    ("-qfp8", False, None),
    ("-O3", False, None),
    ("-1", False, None),  # a value
    ("port", False, None),  # a value in a command line
])
def test_every_spelling_of_a_deploy_flag(arg: str, key: bool, flag: str | None) -> None:
    assert owned_flag(arg, DEPLOY_FLAGS, key=key) == flag


def test_refusals_are_one_line_naming_the_spelling() -> None:
    with pytest.raises(ShipyardError) as err:
        refuse_owned(["--max-model-len", "512", "-tp", "2"], DEPLOY_FLAGS, "f", "the deployment", "drop it")
    assert str(err.value) == "f: '-tp' is vLLM's --tensor-parallel-size, which is set by the deployment itself " \
                             "(fix: drop it)"
    refuse_owned(["--max-model-len", "512", "--enforce-eager"], SERVER_FLAGS, "f", "x", "y")
    refuse_respelled(["--max-model-len=512", "--tensor-parallel-size", "2"], PLANNER_FLAGS, "f", "the planner")
    with pytest.raises(ShipyardError, match="f: '--max_model_len' is vLLM's --max-model-len, which the planner adds"):
        refuse_respelled(["--max_model_len", "512"], PLANNER_FLAGS, "f", "the planner")
