"""What the container rehearsal costs: image sizes, build times cold and warm, and the
rehearsal's wall time against ``shipyard run --local`` on the same model, step by step.

1. ``shipyard images build --flavor cpu`` for every runtime, twice: cold (``--no-cache``: every
   layer built again, as on a fresh machine after ``.ci/setup``, which has filled the pip cache)
   unless ``--skip-cold``, then warm (the layer cache; what a rebuild after an unrelated change
   costs). Prints each image's size and both times.
2. Runs optimize-and-deploy with ``run --local`` (venvs, subprocesses) and with the container
   runner (images, registry, MLflow server, S3, API double) on the same model and parameters,
   and prints both wall times, their ratio and the steps whose time changed most.

    .venvs/base/bin/python benchmarks/container_rehearsal.py [--model embedded://smollm2-135m-instruct] [--skip-cold]

Without --model it builds the tiny test model first (seconds). Writes the figures as JSON to
``--out`` (default: the temp folder it prints).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from shipyard.run.container import run_container
from shipyard.run.local import RunSummary, run_local
from shipyard.runtimes.images import build_images, format_built
from shipyard.runtimes.runtime import run_in_runtime
from shipyard.testing.services import private_dir
from shipyard.testing.tinymodel import build_tiny_model

EVAL = json.dumps({"tasks": ["shipyard_capitals_mc", "shipyard_arithmetic_mc"], "limit": 8, "batch_size": 4})
BENCH = json.dumps({"profile": "concurrent", "loads": [1], "prompt_tokens": 16, "output_tokens": 8, "max_requests": 4})


def _steps(summary: RunSummary) -> dict[str, float]:
    return {s.task: s.seconds or 0.0 for s in summary.steps if s.seconds is not None}


def _timed(label: str, func: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = func(*args, **kwargs)
    seconds = round(time.perf_counter() - started, 1)
    print(f"{label}: {seconds:.1f} s", flush=True)
    return result, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model URI (default: the tiny test model, built now)")
    parser.add_argument("--skip-cold", action="store_true", help="skip the --no-cache image builds")
    parser.add_argument("--out", help="write the figures here (JSON)")
    args = parser.parse_args()
    root = private_dir("shipyard-rehearsal-bench-")
    figures: dict[str, Any] = {}
    if not args.skip_cold:
        cold, figures["build_cold_s"] = _timed("image builds, cold", build_images, no_cache=True)
        print(format_built(cold))
        figures["cold"] = [b.__dict__ for b in cold]
    warm, figures["build_warm_s"] = _timed("image builds, warm (layer cache)", build_images, force=True)
    print(format_built(warm))
    figures["warm"] = [b.__dict__ for b in warm]
    figures["image_sizes_mb"] = {b.runtime: round(b.size_bytes / 1e6) for b in warm}

    model = args.model
    params = [] if model else [f"eval_config={EVAL}", f"benchmark_config={BENCH}", "num_calibration_samples=8",
                               "max_seq_length=64", 'accuracy_thresholds={"rule": "recovery", "min_recovery": 0.0}']
    if not model:
        model = str(root / "tiny-model")
        run_in_runtime("compress", build_tiny_model, out_dir=model)
    params = [f"model_uri={model}", *params]
    os.environ["SHIPYARD_CACHE"] = str(root / "cache-local")
    local, local_s = _timed("run --local", run_local, "optimize-and-deploy", str(root / "local"), overrides=params)
    os.environ["SHIPYARD_CACHE"] = str(root / "cache-container")
    contained, container_s = _timed("run --local --runner container", run_container, "optimize-and-deploy",
                                    str(root / "container"), overrides=params)
    rehearsal = getattr(contained, "rehearsal", {})
    # The pipeline alone (kfp.local start to end) on both sides; the container side's wall time
    # also holds compiling, any image rebuild (tags hash the code) and starting the services.
    figures.update(local_s=local_s, container_s=container_s, local_pipeline_s=local.seconds,
                   container_pipeline_s=contained.seconds, ratio=round(contained.seconds / local.seconds, 2),
                   local_status=local.status, container_status=contained.status, rehearsal=rehearsal)
    a, b = _steps(local), _steps(contained)
    deltas = sorted(((b[t] - a[t], t, a[t], b[t]) for t in a.keys() & b.keys()), reverse=True)
    figures["step_seconds"] = [{"task": t, "local_s": x, "container_s": y} for _, t, x, y in deltas]
    steps_local, steps_container = sum(a.values()), sum(b.values())
    print(f"\npipeline: run --local {local.seconds:.1f} s ({local.status}), in containers {contained.seconds:.1f} s "
          f"({contained.status}): ratio {contained.seconds / local.seconds:.2f}")
    print(f"step logic (sum of the steps' own seconds): local {steps_local:.1f} s, containers {steps_container:.1f} s; "
          f"per-task overhead outside the logic: local {local.seconds - steps_local:.1f} s, "
          f"containers {contained.seconds - steps_container:.1f} s")
    print(f"whole command: run --local {local_s:.1f} s, container rehearsal {container_s:.1f} s "
          f"(compile, image check/rebuild {sum(x.get('seconds', 0) for x in rehearsal.get('images_built', [])):.1f} s, services)")
    print(f"{'task':<48} {'local s':>8} {'container s':>12}")
    for delta, task, x, y in deltas[:8]:
        print(f"{task[-48:]:<48} {x:>8.1f} {y:>12.1f}  ({delta:+.1f})")
    out = Path(args.out) if args.out else root / "figures.json"
    out.write_text(json.dumps(figures, indent=2, default=str))
    print(f"\nfigures: {out}")


if __name__ == "__main__":
    main()
