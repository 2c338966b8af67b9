"""The recorded workload a benchmark replays (``benchmark_config.workload``, issue 35).

With ``{"workload": {"local": true}}`` (or a trace, or a fingerprint: see
:mod:`shipyard.benchmarking.workload_config`) in the benchmark config, the benchmark step serves the
model with prefix caching on at the workload's block size, runs its load levels as before, then
replays the workload's trace with guidellm on the same server and judges the replay's fidelity
(:mod:`shipyard.benchmarking.workload_fidelity`): lengths sent against the fingerprint's, the rate
achieved, and the prefix-cache hit rate the server measured against the fingerprint's theoretical
one. The SLO gate refuses a benchmark whose replay was not faithful (its figures would not describe
the workload), and judges the replay's own TTFT/ITL p99, error rate and goodput (``level``: the
replay parsed as a load level is) against the SLO (:func:`shipyard.gates.slo.replay_verdict`).
:func:`workload_replay` prepares everything before any server starts, so a bad
trace is one line before the GPU work.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shipyard.benchmarking.workload_prepare import prepare_workload
from shipyard.benchmarking.workload_replay import replay_on_server
from shipyard.core.errors import ShipyardError

#: what benchmark_step calls after its load levels: (server, results folder) -> results["workload"]
Replay = Callable[[Any, Path], dict[str, Any]]


def _max_model_len(cfg: dict[str, Any], model_dir: str) -> int | None:
    """The context the server will have: ``--max-model-len`` when the config sets it, else the model's."""
    args = [str(a) for a in cfg.get("vllm_args") or []]
    for i, arg in enumerate(args):
        if arg == "--max-model-len" and i + 1 < len(args):
            return int(args[i + 1])
        if arg.startswith("--max-model-len="):
            return int(arg.split("=", 1)[1])
    try:
        from shipyard.serving.planner import load_model_config

        value = load_model_config(model_dir).get("max_position_embeddings")
        return int(value) if value else None
    except (ShipyardError, OSError, ValueError):
        return None


def workload_replay(cfg: dict[str, Any], model_dir: str) -> tuple[dict[str, Any], Replay | None]:
    """``(cfg, replay)``: the parsed benchmark config with the vLLM flags the replay needs
    (``--enable-prefix-caching``, ``--block-size`` of the workload unless set), and the replay for
    ``benchmark_step(after_levels=...)``; ``(cfg, None)`` without a workload."""
    if not cfg.get("workload"):
        return cfg, None
    staging = Path(tempfile.mkdtemp(prefix="shipyard-workload-"))
    try:
        prepared = prepare_workload(cfg["workload"], str(staging), model_dir=model_dir,
                                    max_model_len=_max_model_len(cfg, model_dir))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    args = [str(a) for a in cfg.get("vllm_args") or []]
    if "--enable-prefix-caching" not in args and "--no-enable-prefix-caching" not in args:
        args.append("--enable-prefix-caching")
    if not any(a == "--block-size" or a.startswith("--block-size=") for a in args):
        args += ["--block-size", str(prepared["block_size"])]

    def replay(server: Any, results_dir: Path) -> dict[str, Any]:
        folder = Path(results_dir) / "workload"
        shutil.copytree(staging / "workload", folder, dirs_exist_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        record = replay_on_server(server, prepared["fingerprint"], str(folder / "trace.jsonl"), str(folder / "replay"),
                                  tokenizer=model_dir, cfg={k: v for k, v in cfg.items() if k != "workload"},
                                  time_scale=prepared["time_scale"], tolerance=prepared["tolerance"])
        record.pop("sent", None)  # per-request lengths and times stay in replay/guidellm.json
        level = record.pop("level", None)  # the replay's own latency figures: the SLO gate judges them
        print(record["line"], flush=True)
        return {"digest": prepared["digest"], "replayed": prepared["replayed"], "requests": prepared["requests"],
                "time_scale": prepared["time_scale"], "block_size": prepared["block_size"],
                "fingerprint": prepared["fingerprint"], "fidelity": record, "level": level}

    return {**cfg, "vllm_args": args}, replay
