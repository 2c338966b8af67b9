"""What in-step MLflow tracking costs: seconds per ``StepRun.finish`` in a fresh step process.

Each KFP step is its own process, so what a step pays for tracking is the import of the MLflow
client plus every call it makes. For each store (a local file store in a work dir, and a real
``mlflow server`` with a sqlite backend on 127.0.0.1) this script:

1. opens a pipeline's parent run the way the pre-flight task does
   (:func:`shipyard.tracking.pipeline_runs.start_tracking`), after ``--prior-runs`` earlier
   step runs in the same experiment (an experiment that has seen a few pipeline runs);
2. starts ``--reps`` fresh processes, each a step that records 8 params, 24 metrics, 3 tags and
   two small report files, and times ``StepRun.finish()`` (import of mlflow included: what a
   step pays), then a second step in the same process (the calls alone), and notes whether the
   step imported mlflow at all; where a local run's file store keeps the payloads for the runner
   (``shipyard run --local`` logs them at its end), times that end-of-run replay in a fresh
   process as well and reports the total per step;
3. prints the median seconds per store; ``--json FILE`` writes the figures.

    .venvs/base/bin/python benchmarks/step_tracking.py [--reps 5] [--prior-runs 30] [--no-server]

It uses only the public ``StepRun``/``start_tracking`` API, so the same script measures an older
checkout when run from that checkout's folder with its venv.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

STEP = r"""
import json, sys, time
t0 = time.perf_counter()
from shipyard.tracking.steprun import StepRun
cfg = json.loads(sys.argv[1])


def step(name):
    run = StepRun(f"{name}-{cfg['rep']}", "w8a8-int8", tracking_uri=cfg["uri"], experiment=cfg["experiment"],
                  kfp_run_id=cfg["kfp_run_id"], params={f"p{i}": f"value-{i}" for i in range(8)})
    run.log(metrics={f"task{i // 4}/metric{i % 4}": 0.5 + i / 100 for i in range(24)},
            tags={"shipyard.eval.backend": "hf", "a": "b", "c": "d"},
            artifacts={"report.md": cfg["report_md"], "summary.json": cfg["summary_json"]})
    started = time.perf_counter()
    run_id = run.finish()
    return time.perf_counter() - started, run_id, run.error


cold, run_id, error = step("evaluate")
t2 = time.perf_counter()
imported = "mlflow" in sys.modules
warm, _, _ = step("benchmark")  # the same process again: the calls alone, any import already paid
print(json.dumps({"finish_s": cold, "process_s": t2 - t0, "calls_s": warm, "run_id": run_id, "error": error,
                  "mlflow_imported": imported}))
"""


def _step(cfg: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", STEP, json.dumps(cfg)], capture_output=True, text=True, env=env,
                         check=False)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"step process failed: {out.stderr.strip()[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["error"]:
        raise SystemExit(f"the step did not log: {result['error']}")
    return {**result, "wall_s": wall}


def measure(uri: str, work: Path, reps: int, prior_runs: int) -> dict[str, Any]:
    """Median seconds per StepRun.finish (and per step process) against ``uri`` ("" = file store in ``work``)."""
    from shipyard.tracking.pipeline_runs import start_tracking
    from shipyard.tracking.tracker import Tracker

    env = dict(os.environ, SHIPYARD_WORK_DIR=str(work))
    os.environ["SHIPYARD_WORK_DIR"] = str(work)
    experiment = f"bench-{uuid.uuid4().hex[:6]}"
    if prior_runs:  # earlier pipeline runs' step runs in the same experiment
        tracker = Tracker(uri, work_dir=work)
        exp = tracker.experiment_id(experiment)
        old = tracker.client.create_run(exp, run_name="old-pipeline").info.run_id
        for i in range(prior_runs):
            tracker.client.create_run(exp, run_name=f"old-step-{i}", tags={"mlflow.parentRunId": old,
                                                                           "shipyard.step": f"s{i}"})
    kfp_run_id = f"bench-{uuid.uuid4().hex[:8]}"
    start_tracking(uri, experiment, "optimize-deploy", kfp_run_id, "{}", "")
    report = work / "report.md"
    report.write_text("# report\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    summary = work / "summary.json"
    summary.write_text(json.dumps({"scores": {"t": {"acc": 0.5}}}))
    cfg = {"uri": uri, "experiment": experiment, "kfp_run_id": kfp_run_id, "report_md": str(report),
           "summary_json": str(summary)}
    runs = [_step({**cfg, "rep": rep}, env) for rep in range(reps)]
    kept = list((work / "tracking-pending").glob("*.json"))
    runner_s = 0.0
    if kept:  # a local run's file store: the runner logs every kept step at the end, in one process
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import sys\nfrom shipyard.tracking.pending import replay\n"
                        "replay(sys.argv[1], echo=lambda line: None)", str(work)], check=True, env=env)
        runner_s = time.perf_counter() - started
        left = list((work / "tracking-pending").glob("*.json")) if (work / "tracking-pending").exists() else []
        if left:
            raise SystemExit(f"the runner left {len(left)} payloads unapplied")
    return {
        "kept_for_runner": len(kept),
        "runner_s": round(runner_s, 3),
        "per_step_s": round(statistics.median(r["finish_s"] for r in runs) + (runner_s / len(kept) if kept else 0), 3),
        "finish_s": round(statistics.median(r["finish_s"] for r in runs), 3),
        "calls_s": round(statistics.median(r["calls_s"] for r in runs), 3),
        "mlflow_imported": any(r.get("mlflow_imported") for r in runs),
        "process_s": round(statistics.median(r["process_s"] for r in runs), 3),
        "wall_s": round(statistics.median(r["wall_s"] for r in runs), 3),
        "all_finish_s": [round(r["finish_s"], 3) for r in runs],
    }


def _show(label: str, fig: dict[str, Any]) -> None:
    print(f"{label}: {fig['finish_s']:.3f} s per StepRun.finish in a fresh step process "
          f"({fig['calls_s']:.3f} s for the calls alone; mlflow imported: {fig['mlflow_imported']})"
          + (f"; {fig['kept_for_runner']} kept for the runner, logged at the end in {fig['runner_s']:.2f} s: "
             f"{fig['per_step_s']:.3f} s per step in all" if fig["kept_for_runner"] else ""), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--prior-runs", type=int, default=30)
    parser.add_argument("--no-server", action="store_true", help="measure the file store only")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    figures: dict[str, Any] = {"load_avg_1m": os.getloadavg()[0], "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="shipyard-bench-track-") as tmp:
        work = Path(tmp, "file-store")
        work.mkdir()
        figures["file_store"] = measure("", work, args.reps, args.prior_runs)
        _show("file store   ", figures["file_store"])
        if not args.no_server:
            from shipyard.testing.services import MlflowServer

            with MlflowServer(Path(tmp, "server")) as server:
                work = Path(tmp, "server-work")
                work.mkdir()
                figures["server"] = measure(server.url, work, args.reps, args.prior_runs)
            _show("mlflow server", figures["server"])
    figures["load_avg_1m_end"] = os.getloadavg()[0]
    print(json.dumps(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
