"""The benchmark step with a serving-configuration search scored by the SLO rule (``tuning``): one guidellm benchmark per
point of the search, each on its own vLLM server, scored by the SLO; the best point's results
are the step's results (so the gates compare base and candidate at their best settings), and
``tuning.json`` beside them keeps every point for the frontier report. Runs in the vllm runtime.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from shipyard.benchmarking.guidellm import benchmark_step, gpu_inventory, load_results, parse_benchmark_config
from shipyard.benchmarking.tuning import TUNING_FILE, parse_tuning, run_search
from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_dir, atomic_write_text
from shipyard.evaluation.garak_scan import SAFETY_DIR, safety_files
from shipyard.gates.slo import check_level, highest_load, parse_slo
from shipyard.serving.planner import load_model_config
from shipyard.steps.base_benchmark import cached_benchmark
from shipyard.steps.workload import workload_replay


def score_point(results_dir: Path, slo: dict[str, Any], gpus: int) -> dict[str, Any]:
    """A point's figures at the highest load meeting the SLO: output tok/s (the value searched
    for), per GPU, goodput, TTFT and ITL p99, and the KV-cache tokens vLLM reported."""
    results = load_results(results_dir)
    levels = results["levels"]
    verdicts = [check_level(lv, slo) for lv in levels]
    top = highest_load(levels, verdicts)
    memory = (results.get("memory") or {}).get("vllm") or {}
    out: dict[str, Any] = {"value": None, "slo_level": None, "kv_cache_tokens": memory.get("kv_cache_tokens"),
                           "levels_meeting_slo": sum(v["meets"] for v in verdicts), "levels": len(levels)}
    if top is None:
        return out
    level, verdict = next((lv, v) for lv, v in zip(levels, verdicts, strict=True) if lv["name"] == top["name"])
    out.update(value=level["output_tokens_per_s"], slo_level=level["name"], requests_per_s=level["requests_per_s"],
               output_tokens_per_s_per_gpu=level["output_tokens_per_s"] / max(gpus, 1), goodput=verdict["goodput"],
               ttft_p99_ms=level["ttft_ms"]["p99"], itl_p99_ms=level["itl_ms"]["p99"], samples=verdict["samples"])
    return out


def benchmark_record(out: dict[str, Any], out_dir: str, summary_path: str | None) -> dict[str, Any]:
    """A benchmark's MLflow record (:meth:`shipyard.tracking.steprun.StepRun.log`'s arguments): its
    figures, its summary, ``results.json`` and the safety scan's files (none without a scan)."""
    return {"metrics": out.get("metrics"), "artifacts": {"summary.md": summary_path,
                                                         "results.json": f"{out_dir}/results.json",
                                                         **safety_files(out_dir)}}


def tune_step(model_dir: str, benchmark_config: str, tuning: str, slo: str, out_dir: str,
              summary_path: str | None = None, cache: bool = False, origin: str = "", safety: str = "") -> dict[str, Any]:
    """Search ``tuning`` (see :mod:`shipyard.benchmarking.tuning`); without one, the plain benchmark.

    Returns what :func:`~shipyard.benchmarking.guidellm.benchmark_step` returns for the best
    point, with ``metadata.tuning`` (best flags, points measured, seconds) and ``log`` (the step's
    MLflow record: :func:`benchmark_record`). A safety scan (``safety``) runs once, on the first
    point measured: it judges the model's answers, which scheduling settings do not change.
    """
    out = _tune(model_dir, benchmark_config, tuning, slo, out_dir, summary_path, cache, origin, safety)
    return {**out, "log": benchmark_record(out, out_dir, summary_path)}


def _tune(model_dir: str, benchmark_config: str, tuning: str, slo: str, out_dir: str, summary_path: str | None,
          cache: bool, origin: str, safety: str) -> dict[str, Any]:
    search = parse_tuning(tuning)
    cfg = parse_benchmark_config(benchmark_config)
    if search is None:
        cfg, replay = workload_replay(cfg, model_dir)  # a bad trace: one line, before the server starts
        if cache:
            return cached_benchmark(model_dir, cfg, out_dir, summary_path, origin=origin, safety=safety,
                                    after_levels=replay)
        return benchmark_step(model_dir, cfg, out_dir, summary_path, safety=safety, after_levels=replay)
    if cfg.get("workload"):
        raise ShipyardError("benchmark_config.workload", "is not replayed during a tuning search yet",
                            "drop tuning, or drop workload and replay it with the chosen settings")
    thresholds = parse_slo(slo)
    gpus, heads = _gpus_and_heads(model_dir)
    results: dict[str, Any] = {}
    with atomic_dir(out_dir) as tmp:
        points = tmp / "points"
        points.mkdir()

        def measure(args: list[str], folder: Path) -> None:
            scan = safety if not results else ""
            point = {**cfg, "vllm_args": args}
            results[folder.name] = (cached_benchmark(model_dir, point, str(folder), origin=origin, safety=scan) if cache
                                    else benchmark_step(model_dir, point, str(folder), safety=scan))

        doc = run_search(search, list(cfg["vllm_args"]), points, measure,
                         lambda folder: score_point(folder, thresholds, gpus), gpus=gpus, heads=heads)
        best = next(p for p in doc["points"] if p["best"])
        _keep_best_point(tmp, points, doc, best)
        out = results[best["folder"]]
    return _with_tuning(out, doc, best, summary_path)


def _gpus_and_heads(model_dir: str) -> tuple[int, int | None]:
    """(the GPUs here, the model's attention heads or None): what the search prunes tensor-parallel
    sizes by."""
    gpu = gpu_inventory()
    gpus = int(gpu[1]) if gpu else 0
    try:
        heads = int(load_model_config(model_dir).get("num_attention_heads") or 0) or None
    except Exception:  # noqa: BLE001 - pruning by heads is a nicety; the benchmark reports a bad model
        heads = None
    return gpus, heads


def _keep_best_point(tmp: Path, points: Path, doc: dict[str, Any], best: dict[str, Any]) -> None:
    """The best point's results become the step's (``tmp``), with the search's record and the one
    safety scan (run on the first point measured)."""
    for item in (points / best["folder"]).iterdir():
        (shutil.copytree if item.is_dir() else shutil.copy2)(item, tmp / item.name)
    shutil.move(str(points / TUNING_FILE), tmp / TUNING_FILE)
    scanned = next((points / p["folder"] / SAFETY_DIR for p in doc["points"]
                    if (points / p["folder"] / SAFETY_DIR).is_dir()), None)
    if scanned is not None and not (tmp / SAFETY_DIR).exists():
        shutil.copytree(scanned, tmp / SAFETY_DIR)


def _with_tuning(out: dict[str, Any], doc: dict[str, Any], best: dict[str, Any],
                 summary_path: str | None) -> dict[str, Any]:
    """The best point's result with the search told: a tuning line above its summary (written to
    ``summary_path``), ``metadata.tuning`` and the ``tuning.*`` metrics."""
    summary = (f"**Tuning:** best of {len(doc['points'])} measured configurations: {best['vllm_args'] or 'defaults'} "
               f"({best['value']:.4g} output tok/s at {best['slo_level']}, the highest load meeting the SLO); "
               f"{len(doc['dropped'])} ruled out, {len(doc['skipped'])} over budget; search took "
               f"{doc['wall_seconds']} s.\n\n" + out["summary"])
    if summary_path:
        atomic_write_text(summary_path, summary)
    out["summary"] = summary
    out["metadata"]["tuning"] = {"best_vllm_args": best["vllm_args"], "points": len(doc["points"]),
                                 "seconds": doc["wall_seconds"]}
    out["metrics"]["tuning.points"] = float(len(doc["points"]))
    out["metrics"]["tuning.seconds"] = float(doc["wall_seconds"])
    return out
