"""One-recipe local runs of two checkouts side by side, on the tiny model with the tests' small configs.

    .venvs/base/bin/python benchmarks/side_by_side.py OLD_CHECKOUT NEW_CHECKOUT

Each checkout runs ``shipyard run --local`` with its own ``.venvs`` and a fresh eval cache, both
at once (so both meet the same load). Prints per run: wall seconds, tasks executed, seconds in
library calls (tracking-only steps counted apart) and the time outside them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

EVAL = '{"tasks": ["shipyard_capitals_mc", "shipyard_arithmetic_mc"], "limit": 8, "batch_size": 4}'
BENCH = '{"profile": "concurrent", "loads": [1, 2], "prompt_tokens": 16, "output_tokens": 8, "max_requests": 4}'
TRACKING_ONLY = ("track-step", "start-tracking", "run-parameters")


def main() -> None:
    checkouts = [Path(p).resolve() for p in sys.argv[1:3]]
    root = Path(tempfile.mkdtemp(prefix="shipyard-side-by-side-"))
    model = root / "tiny-llama"
    subprocess.run([str(checkouts[-1] / ".venvs/base/bin/python"), "-c",
                    "from shipyard.runtimes.runtime import run_in_runtime; from shipyard.testing.tinymodel import build_tiny_model; "
                    f"run_in_runtime('compress', build_tiny_model, out_dir='{model}')"], cwd=checkouts[-1], check=True)
    procs = []
    for i, checkout in enumerate(checkouts):
        env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", SHIPYARD_CACHE=str(root / f"cache-{i}"))
        cmd = [str(checkout / ".venvs/base/bin/python"), "-m", "shipyard.cli.main", "run", "--local", "--work-dir",
               str(root / f"run-{i}"), "--param", f"model_uri={model}", "--param", "num_calibration_samples=8",
               "--param", "max_seq_length=64", "--param", f"eval_config={EVAL}", "--param", f"benchmark_config={BENCH}",
               "--param", 'accuracy_thresholds={"rule": "recovery", "min_recovery": 0.0}', "--param", f"registered_model_name=tiny-{i}"]
        procs.append(subprocess.Popen(cmd, cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    for proc in procs:
        proc.wait()
    for i, checkout in enumerate(checkouts):
        summary = json.loads((root / f"run-{i}" / "run-summary.json").read_text())
        ran = [s for s in summary["steps"] if s["status"] != "NOT RUN"]
        calls = sum(s["seconds"] or 0 for s in ran)
        tracking = sum(s["seconds"] or 0 for s in ran if s["task"].rsplit("/", 1)[-1].startswith(TRACKING_ONLY))
        library = calls - tracking
        print(f"{checkout.name}: {summary['status']} wall {summary['seconds']:.1f} s, {len(ran)} tasks, "
              f"library calls {library:.1f} s, tracking-only steps {tracking:.1f} s, "
              f"outside library calls {summary['seconds'] - library:.1f} s ({summary['seconds'] / library:.2f}x)")


if __name__ == "__main__":
    main()
