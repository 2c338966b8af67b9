"""Orchestration overhead of a local run: the pipeline through kfp.local vs the same library calls made directly.

1. Runs optimize-and-deploy with ``shipyard run --local`` machinery (kfp.local, one subprocess
   per task, MLflow tracking steps, the exit handler) in a fresh work dir and cache.
2. Replays every step's logic call from that run's step log (same targets, same arguments, same
   runtimes, in the order they started), with paths moved to a second folder and a fresh cache:
   the "direct" path a user would script by hand, with no KFP.
3. Prints both wall times, the tasks the run executed, the time spent in tracking-only steps
   (none since pipeline v2: each step logs itself), pipeline/direct as a ratio, and the seconds
   ``shipyard run --local`` takes to reject a bad parameter; ``--json FILE`` writes the figures.

    .venvs/base/bin/python benchmarks/pipeline_overhead.py [--model embedded://smollm2-135m-instruct]

Without --model it builds the tiny test model first (seconds). The script uses only
``run_local`` and ``run_in_runtime``, so it also measures an older checkout: run it with that
checkout's venv from that checkout's folder (``--skip-direct`` for the wall time alone).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from shipyard.run.local import run_local
from shipyard.runtimes.runtime import run_in_runtime
from shipyard.testing.tinymodel import build_tiny_model


def _remap(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, dict):
        return {k: _remap(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_remap(v, old, new) for v in value]
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model URI (default: the tiny test model, built now)")
    parser.add_argument("--param", action="append", default=[], help="extra pipeline parameter k=v")
    parser.add_argument("--skip-direct", action="store_true", help="measure the pipeline run only")
    parser.add_argument("--json", help="write the figures to this JSON file")
    parser.add_argument("--skip-bad-param", action="store_true",
                        help="do not time the rejection of a bad parameter (an older checkout runs the whole pipeline)")
    args = parser.parse_args()
    figures: dict[str, Any] = {"bad_param_reject_s": None if args.skip_bad_param else bad_param_seconds()}
    root = Path(tempfile.mkdtemp(prefix="shipyard-overhead-"))
    model = args.model
    if not model:
        model = str(root / "tiny-model")
        run_in_runtime("compress", build_tiny_model, out_dir=model)

    os.environ["SHIPYARD_CACHE"] = fresh_cache(root / "cache-pipeline")
    work = root / "pipeline"
    started = time.perf_counter()
    summary = run_local("optimize-and-deploy", str(work), overrides=[f"model_uri={model}", *args.param])
    pipeline_s = time.perf_counter() - started
    if summary.status != "SUCCESS":
        raise SystemExit(f"the pipeline run failed; see {work}/run-summary.json")
    records = [json.loads(line) for line in (work / "steps.jsonl").read_text().splitlines() if line.strip()]
    records.sort(key=lambda r: r["started"])
    tracking_s = sum(r["seconds"] for r in records if ".track.track:" in r["target"])
    executed = [s for s in summary.steps if s.status != "NOT RUN"]
    figures.update(pipeline_s=round(pipeline_s, 1), tasks_executed=len(executed), tracking_only_s=round(tracking_s, 1),
                   tasks=[s.task for s in executed], steps_replayed=len(records))
    print(f"tasks executed:              {len(executed)}")
    print(f"pipeline (kfp.local) wall:   {pipeline_s:8.1f} s   (of which tracking-only steps {tracking_s:.1f} s)")
    rejected = figures["bad_param_reject_s"]
    if rejected is not None:
        print("bad parameter rejected in:   " + (f"{rejected:8.2f} s" if rejected >= 0 else "not rejected within 60 s"))
    if args.skip_direct:
        _write(args.json, figures)
        return

    os.environ["SHIPYARD_CACHE"] = fresh_cache(root / "cache-direct")
    os.environ.pop("SHIPYARD_STEP_LOG", None)
    direct = root / "direct"
    direct.mkdir()
    os.environ["SHIPYARD_WORK_DIR"] = str(direct)
    started = time.perf_counter()
    for record in records:
        kwargs = _remap(record["kwargs"], str(work), str(direct))
        for value in kwargs.values():
            if isinstance(value, str) and value.startswith(str(direct)):
                Path(value).parent.mkdir(parents=True, exist_ok=True)
        module, _, name = record["target"].partition(":")  # the step log's "module:function"
        run_in_runtime(record["runtime"], getattr(importlib.import_module(module), name), **kwargs)
    direct_s = time.perf_counter() - started

    figures.update(direct_s=round(direct_s, 1), overhead_ratio=round(pipeline_s / direct_s, 3))
    print(f"steps replayed:              {len(records)}")
    print(f"direct library calls wall:   {direct_s:8.1f} s")
    print(f"overhead ratio pipeline/direct: {pipeline_s / direct_s:.2f}x  (+{pipeline_s - direct_s:.1f} s)")
    _write(args.json, figures)


def fresh_cache(path: Path) -> str:
    """An empty eval cache (nothing reused between the two passes) that still has the embedded model."""
    default = Path(os.environ.get("SHIPYARD_CACHE_SOURCE", Path.home() / ".cache" / "shipyard"))
    path.mkdir(parents=True, exist_ok=True)
    for name in ("gguf", "models"):
        if (default / name).exists() and not (path / name).exists():
            (path / name).symlink_to(default / name)
    return str(path)


def bad_param_seconds() -> float:
    """Seconds from the start of ``shipyard run --local`` to its rejection of a malformed ``slo``."""
    with tempfile.TemporaryDirectory(prefix="shipyard-badparam-") as tmp:
        started = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-m", "shipyard.cli.main", "run", "--local", "--work-dir", f"{tmp}/w",
                                   "--param", 'slo={"ttft_p99_ms": 800'], capture_output=True, text=True,
                                  check=False, timeout=60)
        except subprocess.TimeoutExpired:
            return -1.0  # still running after 60 s: not rejected up front
        seconds = time.perf_counter() - started
    if proc.returncode == 0:
        return -1.0  # accepted
    return round(seconds, 2)


def _write(path: str | None, figures: dict[str, Any]) -> None:
    if path:
        Path(path).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
