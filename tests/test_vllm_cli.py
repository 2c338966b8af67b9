"""vLLM's command line as data (shipyard.serving.vllm_cli): a user's vLLM arguments checked by vLLM's
parser's rules at the pre-flight, without vLLM. The quick tests use the shipped table; the slow one
builds the table again from vLLM's parser in the vllm runtime and compares every verdict with it."""

from __future__ import annotations

import pytest

from shipyard.core.errors import ShipyardError
from shipyard.serving.vllm_cli import check_vllm_args, mapping_words, table

#: command lines vLLM 0.32's parser of ``vllm serve`` accepts, in the spellings it reads
ACCEPTED = [
    ["--max-model-len", "2048"], ["--max_model_len", "2048"], ["--max-model-len=2048"], ["--max-model", "2048"],
    ["--kv-cache-dtype", "fp8"], ["--kv_cache_dtype", "auto"], ["--enforce-eager"], ["--no-enable-prefix-caching"],
    ["-tp", "2"], ["-tp=2"], ["-qfp8"], ["-q", "fp8"], ["-t", "2"], ["-O3"], ["-O", "3"], ["-Odecode"],
    ["--compilation-config.mode", "3"], ["--compilation-config", '{"mode": 3}'], ["-cc.mode=3"], ["--dtype", "half"],
    ["--served-model-name", "a", "b"], ["--lora-modules", "a=b"], ["--hf-token"], ["--hf-token", "x"],
    ["--seed", "-1"], ["--enable-lora", "--max-loras", "2"], ["--quantization", "fp9"], ["--load-format", "nope"],
    ["--prefix-caching-hash-algo", "sha256"], ["--speculative-config", "{}"],
]
#: and what it refuses: (command line, the line's start)
REFUSED = [
    (["--kv-cache-dtype", "fp9"], "--kv-cache-dtype 'fp9' is not one of vLLM 0.32"),
    (["--kv-cache-dtype=fp9"], "--kv-cache-dtype 'fp9' is not one of"),
    (["--dtype", "float17"], "--dtype 'float17' is not one of"),
    (["--prefix-caching-hash-algo", "md5"], "--prefix-caching-hash-algo 'md5'"),
    (["--uvicorn-log-level", "loud"], "--uvicorn-log-level 'loud'"),
    (["--enforce-eager=1"], "'--enforce-eager=1': --enforce-eager takes no value"),
    (["--enforce-eager", "true"], "'true' is neither a flag of vLLM 0.32"),
    (["--max-model-len"], "--max-model-len needs a value"),
    (["--max-model-len", "--enforce-eager"], "--max-model-len needs a value"),
    (["--frobnicate"], "'--frobnicate' is not a flag of vLLM 0.32"),
    (["--swap-space", "4"], "'--swap-space' is not a flag"),  # removed in vLLM 0.32
    (["--disable-log-requests"], "'--disable-log-requests' is not a flag"),
    (["-O"], "'-O' is not a flag"),
    (["--enable"], "'--enable' is ambiguous in vLLM 0.32.0: it could be --enable-"),
    (["--kv", "fp8"], "'--kv' is ambiguous"),
    (["-d", "2"], "'-d' is ambiguous"),
]


def test_the_table_is_vllm_0_32s() -> None:
    data = table()
    assert data["vllm"].startswith("0.32") and data["allow_abbrev"] is True
    assert data["flags"]["--kv-cache-dtype"]["choices"][:2] == ["auto", "bfloat16"]
    assert data["flags"]["--enforce-eager"] == {"value": False} and data["flags"]["-tp"] == {"value": True}


@pytest.mark.parametrize("line", ACCEPTED, ids=" ".join)
def test_what_vllm_accepts_passes(line: list[str]) -> None:
    check_vllm_args(line, "vllm_args")


@pytest.mark.parametrize(("line", "said"), REFUSED, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_what_vllm_refuses_is_one_line_naming_the_field(line: list[str], said: str) -> None:
    with pytest.raises(ShipyardError) as err:
        check_vllm_args(line, "benchmark_config.vllm_args")
    assert err.value.field == "benchmark_config.vllm_args" and err.value.problem.startswith(said), err.value.problem
    assert "\n" not in str(err.value)


def test_a_mapping_becomes_the_words_the_deployment_passes() -> None:
    assert mapping_words({"max_model_len": 2048, "enforce-eager": True, "--enable-prefix-caching": False,
                          "compilation-config": {"mode": 3}, "x": None}) == [
        "--max-model-len", "2048", "--enforce-eager", "--compilation-config", '{"mode":3}']


def test_the_pre_flight_checks_each_place_vllm_args_are_given() -> None:
    """deploy_config (and its pools; only with shipyard's own vllm image: another image has its own
    vLLM), benchmark_config, and the tuning space, through their one parser each."""
    from shipyard.benchmarking.guidellm import _vllm_args
    from shipyard.benchmarking.tuning import parse_tuning
    from shipyard.params.deploy import parse_deploy_config

    uri = "oci://quay.io/org/model@sha256:" + "a" * 64

    with pytest.raises(ShipyardError, match="deploy_config.vllm_args: --kv-cache-dtype 'fp9'"):
        parse_deploy_config({"name": "llm", "model_uri": uri, "vllm_args": {"kv-cache-dtype": "fp9"}})
    with pytest.raises(ShipyardError, match="deploy_config.decode.vllm_args: '--frobnicate'"):
        parse_deploy_config({"name": "llm", "model_uri": uri, "decode": {"vllm_args": {"frobnicate": 1}}})
    parse_deploy_config({"name": "llm", "model_uri": uri, "image": "preset", "vllm_args": {"frobnicate": 1}})  # KServe's vLLM decides
    with pytest.raises(ShipyardError, match="benchmark_config.vllm_args: --max-model-len needs a value"):
        _vllm_args(["--max-model-len"])
    with pytest.raises(ShipyardError, match="tuning.space.vllm_args.old: '--swap-space'"):
        parse_tuning({"space": {"vllm_args": {"old": ["--swap-space", "4"], "default": []}}})


@pytest.mark.slow  # imports vLLM's parser in the vllm runtime (seconds to a minute)
def test_the_table_and_every_verdict_match_vllms_own_parser() -> None:
    from shipyard.runtimes.runtime import run_in_runtime
    from shipyard.serving.vllm_cli import parser_table, parser_verdicts

    assert run_in_runtime("vllm", parser_table) == table(), "vLLM changed: python -m shipyard.serving.vllm_cli"
    lines = ACCEPTED + [line for line, _ in REFUSED]
    verdicts = run_in_runtime("vllm", parser_verdicts, lines=lines)
    for line, verdict in zip(lines, verdicts, strict=True):
        try:
            check_vllm_args(line, "vllm_args")
            mine = "ok"
        except ShipyardError as err:
            mine = f"error: {err.problem}"
        assert (mine == "ok") == (verdict == "ok"), (line, verdict, mine)
