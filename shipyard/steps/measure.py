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
evaluated on this same server too, into ``eval_sets_out``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from shipyard.benchmarking.guidellm import benchmark_server, benchmark_step, parse_benchmark_config
from shipyard.core.errors import ShipyardError
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
            evaluated = evaluate_step(model_dir, eval_config, eval_out, table_path, backend="openai", server=server)
            if sets:
                own_sets = evaluate_eval_sets(model_dir, eval_sets_dir, eval_config, eval_sets_out, backend="openai",
                                              server=server)
            if not tuning:
                benched = benchmark_step(model_dir, cfg, bench_out, summary_path, shared=server,
                                         safety=safety, after_levels=replay)
            startup = server.startup_seconds
    if tuning:  # the search starts one server per point; the evaluation ran on the default one above
        benched = tune_step(model_dir, benchmark_config, tuning, slo, bench_out, summary_path, safety=safety)
    print(f"one vLLM server for eval and benchmark: started in {startup} s", flush=True)
    shared = {"shared_server": True}
    return {"eval": evaluated, "bench": benched, "eval_sets": own_sets,
            "server": {"startup_seconds": startup, "wall_seconds": round(time.monotonic() - started, 2)},
            "log": {"eval": {**evaluated["log"], "params": shared},
                    "bench": {**benchmark_record(benched, bench_out, summary_path), "params": shared}}}
