"""The base benchmark from the base benchmark cache, re-checked on this machine before it is trusted.

A cached base figure (:mod:`shipyard.benchmarking.cache`) was measured at another time, perhaps on a
busier or a quieter machine of the same kind: a candidate measured now would be compared with a
figure this machine no longer gives. So a cache hit is not taken on trust. A server for the base
starts, one **short level** runs on it (the config's first load, at most
:data:`~shipyard.gates.noise.RECHECK_REQUESTS` requests), and its output tok/s is compared with
the cached level's (:func:`shipyard.gates.noise.recheck`: the ratio's 95% interval must cover 1):

* the figure **held**: the cached result is the step's, and ``results.json``'s ``cached.recheck``,
  the summary, the SLO decision's ``base_source`` and the headline say it was re-checked and how;
* it **did not hold** (or the config has no listed first load to run again: ``sweep``,
  ``throughput``): the base is benchmarked in full on the same server, the stale entry is
  replaced, and ``results.json``'s ``recheck`` says why it was measured again.

The short level costs one server start and a few requests, against a whole benchmark (every level,
every repeat, the safety scan) on a miss. Runs in the vllm runtime.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shipyard.benchmarking import cache
from shipyard.benchmarking.guidellm import (
    REPEATABLE,
    benchmark_server,
    benchmark_step,
    flat_metrics,
    load_results,
    parse_benchmark_config,
    summary_markdown,
    workload_metadata,
)
from shipyard.core.files import atomic_write_text
from shipyard.evaluation.cache import model_identity
from shipyard.evaluation.garak_scan import safety_config, scan_metrics
from shipyard.gates.noise import RECHECK_REQUESTS, recheck
from shipyard.runtimes.runtime import lock_file
from shipyard.serving.vllm_server import VLLMServer


def short_config(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """The one short level that re-checks a cached result of ``cfg``: its first load, at most
    :data:`RECHECK_REQUESTS` requests, no repeats; None for a profile without listed loads."""
    if cfg["profile"] not in REPEATABLE or not cfg.get("loads"):
        return None
    wanted = int(cfg.get("max_requests") or RECHECK_REQUESTS)
    return {**cfg, "loads": [cfg["loads"][0]], "max_requests": min(wanted, RECHECK_REQUESTS), "repeats": 1}


def _run_short(model_dir: str, short: dict[str, Any] | None, cached: dict[str, Any], server: VLLMServer,
               work: Path) -> dict[str, Any]:
    """The short level on ``server`` against the cached level of the same name (:func:`recheck`)."""
    if short is None:
        return {"held": False, "text": f"not re-checked: profile {cached['config']['profile']} has no listed first "
                                       "load to run again, so the base is measured again"}
    benchmark_step(model_dir, short, str(work / "short"), shared=server)
    fresh = load_results(work / "short")["levels"][0]
    same = next((lv for lv in cached["levels"] if lv["name"] == fresh["name"]), None)
    if same is None:
        return {"held": False, "text": f"not re-checked: the cached result has no level {fresh['name']}"}
    return recheck(same, fresh)


def _restored(entry: Path, out_dir: str, summary_path: str | None, cfg: dict[str, Any],
              check: dict[str, Any]) -> dict[str, Any]:
    """The cached result as the step's (marked cached, with its re-check)."""
    results = cache.restore(entry, out_dir, recheck=check)
    summary = cache.cached_note(results) + "\n\n" + summary_markdown(results)
    atomic_write_text(Path(out_dir) / "summary.md", summary)
    if summary_path:
        atomic_write_text(summary_path, summary)
    print(f"benchmark cache hit {str(results['cached']['key'])[:12]}: {cache.cached_note(results)}", flush=True)
    return {
        "metrics": flat_metrics(results) | scan_metrics(results.get("safety")),
        "summary": summary,
        "metadata": {"model_name": results.get("model_name"), "profile": cfg["profile"],
                     "levels": [lv["name"] for lv in results["levels"]], "cached": True,
                     "cached_from": results["cached"], **workload_metadata(results)},
    }


def _mark_remeasured(out_dir: str, summary_path: str | None, out: dict[str, Any], check: dict[str, Any]) -> None:
    """``results.json`` and the summary of a base measured again say why."""
    results_file = Path(out_dir) / "results.json"
    results = json.loads(results_file.read_text())
    results["recheck"] = check
    atomic_write_text(results_file, json.dumps(results, indent=2))
    note = f"**Measured again:** a cached result for this base did not hold on this machine ({check['text']})."
    out["summary"] = f"{note}\n\n{out['summary']}"
    atomic_write_text(Path(out_dir) / "summary.md", out["summary"])
    if summary_path:
        atomic_write_text(summary_path, out["summary"])
    print(f"benchmark cache: {check['text']}", flush=True)


def cached_benchmark(model_dir: str, benchmark_config: str | dict[str, Any] | None, out_dir: str,
                     summary_path: str | None = None, origin: str = "", safety: str | dict[str, Any] | None = None,
                     after_levels: Callable[[VLLMServer, Path], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Benchmark the base like :func:`~shipyard.benchmarking.guidellm.benchmark_step`, through the
    base benchmark cache: a miss measures and keeps the result (``origin`` names the run in the
    cache's record); a hit is re-checked with one short level first (see the module doc). The
    safety settings are part of the key when they name probes (the scan is cached with the result).
    Returns what ``benchmark_step`` returns, ``metadata.cached`` saying which."""
    cfg = parse_benchmark_config(benchmark_config)
    scan = safety_config(safety)
    keyed = {**cfg, "safety": scan} if scan["probes"] else cfg
    key, parts = cache.cache_key(model_identity(model_dir)["sha256"], keyed, lock_file("vllm"),
                                 cache.hardware_fingerprint())

    def measure(server: VLLMServer | None = None) -> dict[str, Any]:
        return benchmark_step(model_dir, cfg, out_dir, summary_path, shared=server, safety=safety,
                              after_levels=after_levels)

    entry = cache.lookup(key)
    if entry is None:
        out = measure()
        cache.store(key, parts, Path(out_dir), origin)
        out["metadata"]["cached"] = False
        return out
    with tempfile.TemporaryDirectory(prefix="shipyard-recheck-") as tmp:
        with benchmark_server(model_dir, cfg, Path(tmp) / "vllm.log") as server:
            check = _run_short(model_dir, short_config(cfg), cache.read(entry), server, Path(tmp))
            if check["held"]:
                return _restored(entry, out_dir, summary_path, cfg, check)
            out = measure(server)
    _mark_remeasured(out_dir, summary_path, out, check)
    cache.store(key, parts, Path(out_dir), origin, replace=True)
    out["metadata"].update(cached=False, recheck=check)
    return out
