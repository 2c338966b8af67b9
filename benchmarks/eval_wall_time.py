"""Evaluate a base and a candidate model on the offline suite; print scores, recovery and wall time.

    .venvs/base/bin/python benchmarks/eval_wall_time.py \
        --base ~/.cache/shipyard/models/smollm2-135m-instruct --candidate /tmp/smol-w8a8 [--backend hf|openai]

Each evaluation runs fresh (``"cache": false``) so the times are real; "step wall" is the whole
step (process start, model load, lm-eval, writing results), "lm-eval" the harness run only.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from shipyard.evaluation.lmeval import evaluate_model
from shipyard.gates.accuracy import run_gate
from shipyard.runtimes.runtime import run_in_runtime


def evaluate(model: str, config: dict, out: Path, backend: str) -> tuple[dict, float]:
    """One fresh evaluation in the backend's runtime; returns the summary and the step wall time."""
    start = time.perf_counter()
    summary = run_in_runtime(
        "compress" if backend == "hf" else "vllm",
        evaluate_model,
        model_dir=model, eval_config=json.dumps(config), out_dir=str(out), backend=backend,
    )
    return summary, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--candidate", required=True)
    parser.add_argument("--backend", choices=["hf", "openai"], default="hf")
    parser.add_argument("--config", default="{}", help="eval_config JSON (cache is forced off)")
    parser.add_argument("--thresholds", default="")
    parser.add_argument("--report", default="", help="also write the gate's Markdown report here")
    args = parser.parse_args()
    config = dict(json.loads(args.config), cache=False)
    with tempfile.TemporaryDirectory(prefix="shipyard-eval-bench-") as tmp:
        base, base_wall = evaluate(args.base, config, Path(tmp) / "base", args.backend)
        cand, cand_wall = evaluate(args.candidate, config, Path(tmp) / "cand", args.backend)
        gate = run_gate(str(Path(tmp) / "base"), str(Path(tmp) / "cand"), args.thresholds, args.report or None)
    print(f"backend {args.backend}, config hash {base['config_hash'][:16]}, lm-eval {base['lm_eval_version']}")
    print(f"{'task':26} {'metric':22} {'base':>10} {'candidate':>10} {'recovery':>9}  result")
    for row in gate["rows"]:
        print(f"{row['task']:26} {row['metric'].replace(',none', ''):22} {row['base']:10.4f} "
              f"{row['candidate'] if row['candidate'] is not None else float('nan'):10.4f} "
              f"{row['recovery'] if row['recovery'] is not None else float('nan'):9.4f}  "
              f"{'pass' if row['passed'] else 'FAIL'}")
    print(f"gate: {gate['reason']}")
    for name, summary, wall in (("base", base, base_wall), ("candidate", cand, cand_wall)):
        items = sum(v or 0 for v in summary["n_samples"].values())
        print(f"{name:10} step wall {wall:7.1f} s, lm-eval {summary['wall_time_s']:7.1f} s, {items} items, "
              f"runtime {summary['runtime']}")


if __name__ == "__main__":
    main()
