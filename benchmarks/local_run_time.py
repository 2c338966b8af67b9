"""The README local run, timed per configuration in one sitting: whole run, per step, eval alone, ratios.

    .venvs/base/bin/python benchmarks/local_run_time.py \
        --config 'before={"@suite": "7e3871e", "eval_backend": "hf", "benchmark_config": ""}' \
        --config 'vllm-bf16={"benchmark_config": ""}' --config 'local-params={}' \
        [--json local-run.json] [--keep]

Each ``--config NAME=JSON`` runs ``shipyard run --local`` (the optimize-and-deploy pipeline with
``pipelines/local-params.yaml``) with the JSON object's parameters on top, in a fresh work dir
and a fresh cache (nothing reused: the embedded model is linked in, the eval and benchmark caches
start empty), one run after another. The key ``"@suite": REV`` runs that config on the offline
suite as it was at git revision ``REV`` (its task YAMLs and data, passed as ``eval_config``'s
``task_dir`` with that suite's own task list, and that revision's ``eval_config`` and
``accuracy_thresholds`` from its local-params.yaml unless the config sets them), so an old and a
new suite are timed in the same sitting. Prints per configuration: the run's wall time, each
step's seconds (with the vLLM backend the measure step holds the server start-up, the evaluation,
the benchmark and the safety scan), lm-eval's own seconds and items per evaluation, and the ratio
of each run to the first. ``/proc/loadavg`` before and after each run says what else ran.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from shipyard.core.jsonargs import load_json
from shipyard.run.local import run_local

REPO = Path(__file__).resolve().parents[1]
SUITE_PATH = "shipyard/evaluation/suite"


def fresh_cache(path: Path) -> str:
    """An empty shipyard cache that still has the embedded model (linked from the default cache)."""
    source = Path(os.environ.get("SHIPYARD_CACHE_SOURCE", Path.home() / ".cache" / "shipyard"))
    path.mkdir(parents=True, exist_ok=True)
    for name in ("gguf", "models"):
        if (source / name).exists() and not (path / name).exists():
            (path / name).symlink_to(source / name)
    return str(path)


def git_show(rev: str, path: str) -> bytes:
    return subprocess.run(["git", "show", f"{rev}:{path}"], cwd=REPO, check=True, capture_output=True).stdout


def old_suite(rev: str, folder: Path, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` for a run on the suite of ``rev``: its task list and, unless given, its local eval
    config's other keys and its accuracy thresholds."""
    import yaml

    tasks = suite_at(rev, folder)
    local = yaml.safe_load(git_show(rev, "pipelines/local-params.yaml"))
    evaluation = {**load_json(local.get("eval_config") or "{}", "eval_config"), "tasks": tasks,
                  "task_dir": str(folder)}
    return {"eval_config": json.dumps(evaluation), "accuracy_thresholds": local.get("accuracy_thresholds", ""),
            **params}


def suite_at(rev: str, folder: Path) -> list[str]:
    """Write the offline suite as of ``rev`` into ``folder``; return its task names."""
    folder.mkdir(parents=True)
    names = subprocess.run(["git", "ls-tree", "--name-only", f"{rev}:{SUITE_PATH}"], cwd=REPO, check=True,
                           capture_output=True, text=True).stdout.split()
    tasks = []
    for name in names:
        data = git_show(rev, f"{SUITE_PATH}/{name}")
        (folder / name).write_bytes(data)
        if name.endswith(".yaml"):
            task = next((line.split(":", 1)[1].strip() for line in data.decode().splitlines()
                         if line.startswith("task:")), None)
            if task:
                tasks.append(task)
    return sorted(tasks)


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def eval_figures(run_dir: Path) -> list[dict[str, Any]]:
    """Every fresh evaluation under the run's pipeline root: lm-eval wall time, items, backend."""
    found = []
    for summary in sorted(run_dir.rglob("summary.json")):
        try:
            data = json.loads(summary.read_text())
        except (OSError, ValueError):
            continue
        if data.get("format") != "shipyard.eval/v1" or "adapter" in data:
            continue
        found.append({"path": str(summary.parent.relative_to(run_dir)), "backend": data.get("backend"),
                      "cached": data.get("cached"), "wall_time_s": data.get("wall_time_s"),
                      "items": sum(v or 0 for v in (data.get("n_samples") or {}).values()),
                      "model": Path(str(data.get("model_path") or "")).name})
    return found


def run_one(name: str, params: dict[str, Any], root: Path, keep: bool) -> dict[str, Any]:
    """One local run in a fresh work dir and cache; its figures."""
    os.environ["SHIPYARD_CACHE"] = fresh_cache(root / f"cache-{name}")
    work = root / f"run-{name}"
    overrides = [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in params.items()]
    load_before = loadavg()
    started = time.perf_counter()
    summary = run_local("optimize-and-deploy", str(work), overrides=overrides)
    wall = time.perf_counter() - started
    steps = [{"task": s.task, "name": s.name, "status": s.status, "runtime": s.runtime, "seconds": s.seconds}
             for s in summary.steps if s.status != "NOT RUN"]
    figures = {"name": name, "params": params, "status": summary.status, "wall_s": round(wall, 1),
               "run_seconds": summary.seconds, "champion": summary.champion, "steps": steps,
               "evaluations": eval_figures(work), "loadavg_before": load_before, "loadavg_after": loadavg(),
               "gates": summary.gates, "work_dir": str(work) if keep else None}
    return figures


def print_figures(runs: list[dict[str, Any]]) -> None:
    first = runs[0]["wall_s"]
    for run in runs:
        print(f"\n== {run['name']}: {run['status']}, {run['wall_s']:.1f} s ({run['wall_s'] / first:.2f}x the first), "
              f"champion {run['champion'] or '-'}, loadavg {run['loadavg_before']} -> {run['loadavg_after']}")
        for step in sorted(run["steps"], key=lambda s: -(s["seconds"] or 0)):
            if (step["seconds"] or 0) >= 1:
                print(f"   {step['seconds']:7.1f} s  {step['name'] or step['task']}  [{step['runtime']}]")
        for ev in run["evaluations"]:
            print(f"   eval {ev['backend']:7} {ev['model']:28} lm-eval {ev['wall_time_s'] or 0:7.1f} s, "
                  f"{ev['items']} items{' (cached)' if ev['cached'] else ''}")
    if len(runs) > 1:
        print("\nratios to the first configuration:")
        for run in runs[1:]:
            print(f"   {run['name']:28} run {run['wall_s'] / first:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", default=[], metavar="NAME=JSON",
                        help='a configuration: parameters on top of local-params, e.g. \'vllm={"eval_backend": "vllm"}\'')
    parser.add_argument("--json", help="write the figures to this JSON file")
    parser.add_argument("--keep", action="store_true", help="keep the work dirs (printed) instead of deleting them")
    args = parser.parse_args()
    configs: list[tuple[str, dict[str, Any]]] = []
    for text in args.config or ["local-params={}"]:
        name, _, body = text.partition("=")
        params = load_json(body or "{}", f"--config {name}")
        if not name or not isinstance(params, dict):
            raise SystemExit(f"--config {text!r}: write NAME=JSON-object")
        configs.append((name, params))
    root = Path(tempfile.mkdtemp(prefix="shipyard-local-time-"))
    for i, (name, params) in enumerate(configs):
        if "@suite" in params:
            rest = {k: v for k, v in params.items() if k != "@suite"}
            configs[i] = (name, old_suite(str(params["@suite"]), root / f"suite-{name}", rest))
    runs = []
    for name, params in configs:
        print(f"-- {name}: {json.dumps(params)}", flush=True)
        runs.append(run_one(name, params, root, args.keep))
        print(f"   {runs[-1]['status']} in {runs[-1]['wall_s']:.1f} s", flush=True)
    print_figures(runs)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=2))
    if not args.keep:
        subprocess.run(["rm", "-rf", str(root)], check=False)
    else:
        print(f"\nwork dirs kept under {root}")


if __name__ == "__main__":
    main()
