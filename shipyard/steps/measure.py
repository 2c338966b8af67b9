"""One vLLM server per model: evaluate (lm-eval) and benchmark (guidellm) against the same server.

With the vLLM eval backend, evaluating and benchmarking a model used to start two servers, and
so load the model twice (two GPU pods in a cluster). :func:`measure_step` starts one server
with the benchmark's settings (memory planner flags, KV cache) and hands it to
:func:`~shipyard.evaluation.lmeval.evaluate_step` (backend ``openai``) and
:func:`~shipyard.benchmarking.guidellm.benchmark_step`. Outputs are the same as the two steps'. Runs in
the ``vllm`` runtime. The golden outputs (``golden.json`` in the benchmark results: the server's greedy
answers to a few eval prompts, which ``shipyard verify`` and the deploy step compare the deployed
service with) are recorded by ``benchmark_step`` on this same server. The user's eval sets
(``eval_sets_dir``: the prepared folder of :func:`shipyard.steps.eval_sets.prepare_step`) are
evaluated on this same server too, into ``eval_sets_out``. The safety scan (garak) runs beside the
evaluation, in a thread of its own against the same server: both only judge answers, nothing is
timed, and the scan is awaited before the benchmark's timed load levels start.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shipyard.benchmarking.guidellm import (
    ScannedSafety,
    benchmark_server,
    benchmark_step,
    parse_benchmark_config,
)
from shipyard.core.errors import ShipyardError
from shipyard.evaluation.garak_scan import run_scan, safety_config
from shipyard.evaluation.lmeval import evaluate_step
from shipyard.steps.benchmark import benchmark_record, tune_step
from shipyard.steps.eval_sets import evaluate_eval_sets, has_sets
from shipyard.steps.workload import workload_replay


def measure_step(
    model_dir: str,
    eval_config: str,
    benchmark_config: str,
    eval_out: str,
    table_path: str,
    bench_out: str,
    summary_path: str,
    safety: str = "",
    tuning: str = "",
    slo: str = "",
    eval_sets_dir: str = "",
    eval_sets_out: str = "",
) -> dict[str, Any]:
    """Serve ``model_dir`` once; evaluate and benchmark it (and, when ``safety`` names probes,
    scan it with garak, in the benchmark step's results; when ``eval_sets_dir`` holds sets, run
    them and answer the rubric prompts into ``eval_sets_out``); returns ``{"eval", "bench",
    "server", "eval_sets"}`` (the steps' results, the shared server's start-up seconds, the eval
    sets' summary or None without sets) and ``log``: the evaluate and benchmark runs' MLflow records
    (:meth:`shipyard.tracking.steprun.StepRun.log`'s arguments), both marked ``shared_server``."""
    cfg = parse_benchmark_config(benchmark_config)
    if tuning and cfg.get("workload"):
        raise ShipyardError("benchmark_config.workload", "is not replayed during a tuning search yet",
                            "drop tuning, or drop workload and replay it with the chosen settings")
    cfg, replay = workload_replay(cfg, model_dir)  # a bad trace: one line, before the server starts
    sets = bool(eval_sets_dir) and has_sets(eval_sets_dir)  # a bad prepared folder: one line, before the server
    own_sets = None
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="shipyard-measure-") as tmp:
        with benchmark_server(model_dir, cfg, Path(tmp) / "vllm.log") as server:
            beside = "" if tuning else safety  # a tuning search scans its first point instead
            with scan_beside(server.base_url, server.served_model_name, beside, Path(tmp) / "safety") as scanned:
                evaluated = evaluate_step(model_dir, eval_config, eval_out, table_path, backend="openai", server=server)
                if sets:
                    own_sets = evaluate_eval_sets(model_dir, eval_sets_dir, eval_config, eval_sets_out,
                                                  backend="openai", server=server)
            if not tuning:
                benched = benchmark_step(model_dir, cfg, bench_out, summary_path, shared=server,
                                         safety=safety, after_levels=replay, scanned=scanned.get("scan"))
            startup = server.startup_seconds
    if tuning:  # the search starts one server per point; the evaluation ran on the default one above
        benched = tune_step(model_dir, benchmark_config, tuning, slo, bench_out, summary_path, safety=safety)
    print(f"one vLLM server for eval and benchmark: started in {startup} s", flush=True)
    shared = {"shared_server": True}
    return {"eval": evaluated, "bench": benched, "eval_sets": own_sets,
            "server": {"startup_seconds": startup, "wall_seconds": round(time.monotonic() - started, 2)},
            "log": {"eval": {**evaluated["log"], "params": shared},
                    "bench": {**benchmark_record(benched, bench_out, summary_path), "params": shared}}}


@contextlib.contextmanager
def scan_beside(base_url: str, model: str, safety: str, folder: Path) -> Iterator[dict[str, ScannedSafety]]:
    """Scan the served model with garak (``safety``'s probes, into ``folder``) in a thread of its
    own while the block runs (the evaluation: answers judged, nothing timed); the scan is awaited
    when the block ends, also when it fails, and its error, if any, is raised then. Yields a dict
    that holds ``{"scan": ScannedSafety}`` once the scan ran; empty when ``safety`` names no probes."""
    out: dict[str, ScannedSafety] = {}
    if not safety_config(safety)["probes"]:
        yield out
        return
    failed: list[BaseException] = []

    def scan() -> None:
        try:
            out["scan"] = ScannedSafety(run_scan(base_url, model, safety, str(folder)), folder)
        except BaseException as err:  # handed to the step once the block is done
            failed.append(err)

    thread = threading.Thread(target=scan, name="shipyard-safety-scan", daemon=True)
    thread.start()
    try:
        yield out
    finally:
        thread.join()
    if failed:
        raise failed[0]
