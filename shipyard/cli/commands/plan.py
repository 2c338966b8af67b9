"""``shipyard plan MODEL``: GPU memory figures and vLLM arguments for a Hugging Face config.

Exit status 0 when the model fits (with the wanted concurrency), 1 when it does not (the
output says by how much), 2 on bad input. ``-o json|yaml`` prints every figure; ``--out-file``
writes them (JSON, or YAML with ``-o yaml``) and prints the summary.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from shipyard.cli.output import add_out_file_option, add_output_option, emit, render, write_out_file
from shipyard.core.env import hub_offline
from shipyard.core.errors import ShipyardError
from shipyard.core.numbers import number, positive_float, positive_int
from shipyard.serving.planner import load_model_config, plan_memory


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="size vLLM for a model: weights, KV cache tokens, max concurrency, recommended vLLM args",
        description="Plan GPU memory for vLLM from a model folder, its config.json or a Hub id in the local "
                    "Hugging Face cache (no weights or GPU needed).",
    )
    p.add_argument("model", metavar="MODEL",
                   help="a Hugging Face model folder, its config.json, or a Hub id (org/name or hf://org/name) "
                        "whose config.json is in the local Hugging Face cache (offline: only the cache is read)")
    p.add_argument("--gpu-memory-gib", type=positive_float("80"), default=80.0,
                   help="memory of one GPU in GiB (default 80)")
    p.add_argument("--gpu-count", type=positive_int("8"), default=1,
                   help="GPUs available for tensor parallelism (default 1)")
    p.add_argument("--gpu-memory-utilization", type=number(float, minimum=0, exclusive=True, maximum=1, example="0.9"),
                   default=0.9, help="vLLM's share of GPU memory (0.9)")
    p.add_argument("--max-model-len", type=positive_int("8192"), help="context length (default: the config's, lowered to fit)")
    p.add_argument("--max-num-seqs", type=positive_int("256"), default=256, help="vLLM --max-num-seqs (default 256)")
    p.add_argument("--max-num-batched-tokens", type=positive_int("8192"),
                   help="vLLM --max-num-batched-tokens (default: vLLM's)")
    p.add_argument("--kv-cache-dtype", default="auto", choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2"),
                   help="auto, fp8, fp8_e4m3 or fp8_e5m2 (default auto)")
    p.add_argument("--dtype", default="auto", help="model dtype: auto, bfloat16, float16, float32")
    p.add_argument("--concurrency", type=positive_int("4"),
                   help="sequences of max-model-len tokens the KV cache must hold (default 1)")
    p.add_argument("--tensor-parallel-size", type=positive_int("2"),
                   help="force this TP size instead of the smallest that fits")
    p.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs (no graph memory reserved)")
    add_output_option(p, default_help="a summary")
    p.add_argument("--json", dest="output", action="store_const", const="json", help=argparse.SUPPRESS)
    add_out_file_option(p, "every figure (JSON, or YAML with -o yaml)")
    p.set_defaults(func=_plan)


def _hub_id(model: str) -> str:
    """``org/name`` when ``model`` names a Hub repository (``org/name`` or ``hf://org/name[@rev]``)
    rather than a local folder or file, else ""."""
    text = model.removeprefix("hf://").split("@", 1)[0].strip("/")
    if model.startswith("hf://") or (not Path(model).exists() and not model.startswith((".", "/", "~"))
                                     and text.count("/") == 1 and not text.endswith(".json")):
        return text
    return ""


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, as huggingface_hub finds it: ``HF_HUB_CACHE``, else
    ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``."""
    import os

    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def model_config_path(model: str) -> str:
    """The config.json (or folder) to plan from: a local path as given, or a Hub id's config.json
    from the local Hugging Face cache (``models--ORG--NAME/snapshots/<refs/main or @rev>/``).
    shipyard plan never downloads: the base install has no Hub client, and this machine may be offline."""
    repo = _hub_id(model)
    if not repo:
        return model

    revision = model.removeprefix("hf://").split("@", 1)[1] if "@" in model else "main"
    folder = hub_cache_dir() / ("models--" + repo.replace("/", "--"))
    ref = folder / "refs" / revision
    try:
        commit = ref.read_text().strip() if ref.is_file() else revision
    except OSError:
        commit = revision
    config = folder / "snapshots" / commit / "config.json"
    if config.is_file():
        return str(config)
    offline = hub_offline()
    raise ShipyardError(
        "MODEL", f"{repo} is not in the local Hugging Face cache ({hub_cache_dir()})"
                 + (" and this machine is offline (HF_HUB_OFFLINE=1)" if offline else ""),
        f"download it where the Hub is reachable (huggingface-cli download {repo} config.json), "
        "or pass a model folder or its config.json")


def _plan(args: argparse.Namespace) -> int:
    config = load_model_config(model_config_path(args.model))
    plan = plan_memory(
        config,
        gpu_memory_gib=args.gpu_memory_gib,
        gpu_count=args.gpu_count,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        kv_cache_dtype=args.kv_cache_dtype,
        wanted_concurrency=args.concurrency,
        dtype=args.dtype,
        max_num_batched_tokens=args.max_num_batched_tokens,
        enforce_eager=args.enforce_eager,
        tensor_parallel_size=args.tensor_parallel_size,
    )
    if plan.estimated:
        print(f"shipyard: warning: {plan.estimated_reason}", file=sys.stderr)
    if args.out_file:
        write_out_file(args.out_file, render(plan.to_dict(), args.output or "json"))
        if args.out_file != "-":  # "-" is stdout: the document alone
            print(plan.summary())
            print(f"wrote {args.out_file}")
    else:
        emit(plan.to_dict(), args.output, plan.summary)
    return 0 if plan.fits else 1
