"""The vLLM flags shipyard sets itself, and every spelling under which vLLM reads one of them.

vLLM's parser (``FlexibleArgumentParser``, an argparse parser; vllm 0.32) reads a flag in more
forms than its name: ``--tensor-parallel-size`` or ``--tensor_parallel_size``; a short alias
(``-tp``, :data:`ALIASES`); either with ``=value`` (``--port=8000``, ``-tp=2``); a one-letter alias
with its value attached (``-qfp8``); a key of a JSON flag (``--kv-transfer-config.kv_role``); and,
argparse's abbreviations being on, any prefix of a long flag or an alias (``--tensor-parallel``,
``-t``). A user's extra vLLM arguments (``deploy_config.vllm_args`` and its pools',
``benchmark_config.vllm_args``, the ``tuning`` space's flag sets) that set a flag shipyard sets
itself would override it or be overridden at start-up, after the GPU work: :func:`refuse_owned`
refuses them up front, in any of these forms, with one line; :func:`refuse_respelled` refuses a
flag shipyard fills in when it is missing (:data:`PLANNER_FLAGS`) written other than ``--flag``.

The flags shipyard sets: :data:`SERVER_FLAGS` on every vLLM server it starts
(:class:`shipyard.serving.vllm_server.VLLMServer`), :data:`DEPLOY_FLAGS` on a deployment
(:mod:`shipyard.serving.kserve.render` and KServe's presets). :data:`ALIASES` is read from vLLM's
source (``vllm/engine/arg_utils.py``, ``vllm/entrypoints/launchers/cli_args.py``);
``tests/test_vllm_flags.py`` reads that source again in the vllm runtime's folder and fails when
they differ. Whether the rest is what vLLM's own parser accepts (a known flag, its value, one of its
choices) is :func:`shipyard.serving.vllm_cli.check_vllm_args`'s.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

from shipyard.core.errors import ShipyardError, shown

#: vLLM's short aliases -> the long flag (vllm 0.32's ``add_argument`` calls)
ALIASES: dict[str, str] = {
    "q": "quantization",
    "pp": "pipeline-parallel-size",
    "n": "nnodes",
    "r": "node-rank",
    "tp": "tensor-parallel-size",
    "dcp": "decode-context-parallel-size",
    "pcp": "prefill-context-parallel-size",
    "dp": "data-parallel-size",
    "dpn": "data-parallel-rank",
    "dpr": "data-parallel-start-rank",
    "dpl": "data-parallel-size-local",
    "dpa": "data-parallel-address",
    "dpp": "data-parallel-rpc-port",
    "dpb": "data-parallel-backend",
    "dph": "data-parallel-hybrid-lb",
    "dpe": "data-parallel-external-lb",
    "dpm": "data-parallel-multi-port-external-lb",
    "ep": "enable-expert-parallel",
    "sc": "speculative-config",
    "dc": "diffusion-config",
    "cc": "compilation-config",
    "ac": "attention-config",
    "asc": "api-server-count",
}
#: the flags :class:`~shipyard.serving.vllm_server.VLLMServer` sets on every server shipyard starts
SERVER_FLAGS = frozenset({"model", "host", "port", "served-model-name"})
#: the flags a deployment sets: its parallelism (``tensor_parallel``, ``data_parallel``, ``data_local``,
#: ``pipeline_parallel``, ``expert_parallel``), the P/D KV transfer, and what KServe's presets pass
DEPLOY_FLAGS = frozenset({
    "tensor-parallel-size", "data-parallel-size", "data-parallel-size-local", "data-parallel-address",
    "data-parallel-rpc-port", "data-parallel-start-rank", "enable-expert-parallel", "pipeline-parallel-size",
    "port", "served-model-name", "model", "kv-transfer-config",
})
#: the flags the memory planner's ``plan.vllm_args`` holds (:func:`shipyard.serving.planner.plan_memory`): a
#: benchmark fills in those its ``vllm_args`` lack, found by their ``--flag`` spelling
PLANNER_FLAGS = frozenset({
    "tensor-parallel-size", "gpu-memory-utilization", "max-model-len", "max-num-seqs", "max-num-batched-tokens",
    "kv-cache-dtype", "dtype", "kv-cache-memory-bytes", "enforce-eager",
})
_NUMBER = re.compile(r"-\.?\d")


def owned_flag(arg: str, owned: Collection[str], *, key: bool = False) -> str | None:
    """The flag of ``owned`` (long names, no dashes) vLLM would set from the argument ``arg``, in
    any form it reads (see the module docstring); None when it sets none of them (a value, another
    flag). ``key``: ``arg`` is a key of a flag mapping, written as ``--key`` (a bare ``port`` counts)."""
    text = arg.strip()
    if key and not text.startswith("-"):
        text = "--" + text
    if len(text) < 2 or not text.startswith("-") or _NUMBER.match(text):
        return None
    name = text.split("=", 1)[0].split(".", 1)[0].rstrip("+")
    if name.startswith("--"):
        long = name[2:].replace("_", "-")
        hits = [long] if long in owned else sorted(o for o in owned if long and o.startswith(long))
    else:
        short = name[1:]
        meant = [ALIASES[short]] if short in ALIASES else [
            *([ALIASES[short[0]]] if short[:1] in ALIASES else []),  # -qfp8: a one-letter alias and its value
            *(full for alias, full in ALIASES.items() if short and alias.startswith(short))]  # -t: an abbreviation
        hits = sorted(flag for flag in meant if flag in owned)
    return hits[0] if hits else None


def refuse_owned(args: Iterable[str], owned: Collection[str], field: str, who: str, fix: str, *,
                 keys: bool = False) -> None:
    """Raise one line naming ``field`` when an argument of ``args`` (a command line's words, or with
    ``keys`` a flag mapping's keys) sets a flag of ``owned``, which ``who`` sets itself."""
    for arg in args:
        flag = owned_flag(str(arg), owned, key=keys)
        if flag is None:
            continue
        plain = str(arg).strip().lstrip("-").replace("_", "-") == flag
        said = f"--{flag}" if plain else f"{shown(str(arg).strip(), 60)} is vLLM's --{flag}, which"
        raise ShipyardError(field, f"{said} is set by {who} itself", fix)


def refuse_respelled(args: Iterable[str], flags: Collection[str], field: str, who: str) -> None:
    """Raise one line naming ``field`` when an argument of ``args`` sets a flag of ``flags``, which
    ``who`` fills in when the arguments lack it, in another spelling than ``--flag`` or
    ``--flag=value``: it would be missed, and the flag given twice (the last one winning)."""
    for arg in args:
        flag = owned_flag(str(arg), flags)
        if flag is not None and str(arg).strip().split("=", 1)[0] != f"--{flag}":
            raise ShipyardError(field, f"{shown(str(arg).strip(), 60)} is vLLM's --{flag}, which {who} adds when "
                                "the arguments lack it and would add again", f"write it as --{flag}")
