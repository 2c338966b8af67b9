"""The candidate gates step: one candidate's gates (accuracy, then SLO) and the record the selection step ranks.

:func:`judge_candidate` runs the accuracy gate (paired non-inferiority against the base by
default: :mod:`shipyard.gates.recovery`) and the SLO gate (latency and throughput against the
base, under load) on a candidate's eval and benchmark results, writes both reports, and returns
``candidate.json``: everything the candidates report puts side by side (per metric the recovery,
the loss interval, margin, p-values, minimum detectable loss and decision; the accuracy rule,
alpha, correction and power statement; TTFT/ITL p99 and output tok/s per load, size,
the planner's weights and KV-cache tokens, both gate decisions). Never raises for bad
results: a gate that cannot decide fails closed with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shipyard.benchmarking.guidellm import load_results
from shipyard.benchmarking.server_metrics import KNEE_FIGURES
from shipyard.benchmarking.tuning import load_tuning
from shipyard.compression.recipes import recipe_label
from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_write_text
from shipyard.core.records import CANDIDATE_FILE, CANDIDATE_SCHEMA, CandidateRecord, SloSection, slo_of
from shipyard.core.report import sample_count
from shipyard.evaluation.garak_scan import SAFETY_DIR
from shipyard.evaluation.golden import GOLDEN_FILE, load_golden
from shipyard.gates.accuracy import run_gate
from shipyard.gates.adapter_gates import run_adapter_gates
from shipyard.gates.baseline import BASE
from shipyard.gates.candidate import accuracy_caveat, verdict
from shipyard.gates.capacity import recorded_arrivals, recorded_lengths
from shipyard.gates.recovery import load_summary
from shipyard.gates.safety import run_safety_gate
from shipyard.gates.slo import run_slo_gate
from shipyard.runtimes.runtime import call_step
from shipyard.serving.watch import length_counts, replay_envelope_level
from shipyard.steps.eval_sets import JUDGED, decide_eval_sets, has_sets
from shipyard.tracking.steprun import StepRun, apply_pending


def _levels(bench_dir: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    try:
        results = load_results(bench_dir)
    except ShipyardError:
        return [], {}
    levels = [{
        "name": lv["name"],
        "strategy": lv.get("strategy"),
        "nominal_load": lv.get("nominal_load"),
        "requests_per_s": lv.get("requests_per_s"),
        "output_tokens_per_s": lv.get("output_tokens_per_s"),
        "ttft_p50_ms": (lv.get("ttft_ms") or {}).get("p50"),
        "ttft_p99_ms": (lv.get("ttft_ms") or {}).get("p99"),
        "itl_p50_ms": (lv.get("itl_ms") or {}).get("p50"),
        "itl_p99_ms": (lv.get("itl_ms") or {}).get("p99"),
        "error_rate": lv.get("error_rate"),
        "total": lv.get("total"),
        "samples": sample_count(lv),
        # the traffic it was measured on, for `shipyard watch` (shipyard.serving.watch)
        "prompt_tokens_mean": lv.get("prompt_tokens_mean"),
        "output_tokens_mean": lv.get("output_tokens_mean"),
        # the per-request lengths as sparse histograms, for the watch's length distributions
        "lengths": _length_counts(lv),
        # what the server held during the level (vLLM's /metrics), for the capacity alerts at the knee
        "server": {k: v for k, v in (lv.get("server") or {}).items() if k in KNEE_FIGURES} or None,
    } for lv in results.get("levels") or []]
    planner = ((results.get("memory") or {}).get("planner")) or {}
    return levels, {k: planner.get(k) for k in ("weights_bytes", "kv_cache_tokens", "max_concurrency", "fits")}


def _length_counts(level: Mapping[str, Any]) -> dict[str, Any] | None:
    """A level's per-request prompt and output token counts as ``{"<tokens>": requests}`` each
    (:func:`shipyard.serving.watch.length_counts`); None when the benchmark kept none."""
    samples = level.get("samples") if isinstance(level.get("samples"), Mapping) else {}
    got = {key: length_counts(samples.get(key)) for key in ("prompt_tokens", "output_tokens")}
    return got if any(got.values()) else None


def _golden(bench_dir: str) -> dict[str, Any] | None:
    """The candidate's golden outputs (``golden.json`` in its benchmark results), None when absent."""
    if not (Path(bench_dir) / GOLDEN_FILE).is_file():
        return None
    try:
        return load_golden(Path(bench_dir) / GOLDEN_FILE)
    except ShipyardError:
        return None


def _tuning(bench_dir: str) -> dict[str, Any] | None:
    """The serving-configuration search of the candidate's benchmark (``tuning.json``), if it searched."""
    doc = load_tuning(bench_dir)
    if doc is None:
        return None
    return {"points": doc["points"], "best": doc["best"], "best_vllm_args": doc["best_vllm_args"],
            "dropped": doc["dropped"], "skipped": doc["skipped"], "wall_seconds": doc["wall_seconds"]}


def _engine(bench_dir: str) -> dict[str, Any] | None:
    """The engine the candidate's benchmark measured (results.json ``engine``), if recorded."""
    try:
        return json.loads((Path(bench_dir) / "results.json").read_text()).get("engine")
    except (OSError, ValueError, AttributeError):
        return None


def _workload(bench_dir: str) -> dict[str, Any] | None:
    """The recorded workload the benchmark replayed (results.json ``workload``): its fingerprint's
    digest, what was replayed, the fidelity verdict (``valid``, ``failed``, the line), the recorded
    arrival process (``arrivals``: mean and peak rate, peak/mean, the rate series; what the deploy
    sizes its replicas and KEDA margin from), mean lengths (``lengths``), the server's prefix-cache
    hit rate during the replay (``prefix_hit_rate``) and the replay's own per-request lengths
    (``replay_level``: :func:`shipyard.serving.watch.replay_envelope_level`), what ``shipyard watch``
    holds production's against; None when the benchmark replayed none."""
    try:
        replayed = json.loads((Path(bench_dir) / "results.json").read_text()).get("workload")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(replayed, dict):
        return None
    fidelity = replayed.get("fidelity") or {}
    server_hit = ((fidelity.get("checks") or {}).get("hit_rate") or {}).get("server")
    return {"digest": replayed.get("digest"), "replayed": replayed.get("replayed"),
            "requests": replayed.get("requests"), "time_scale": replayed.get("time_scale"),
            "valid": fidelity.get("valid"), "failed": fidelity.get("failed"), "line": fidelity.get("line"),
            "arrivals": recorded_arrivals(replayed), "lengths": recorded_lengths(replayed),
            **({"prefix_hit_rate": server_hit} if isinstance(server_hit, int | float) else {}),
            **({"replay_level": kept} if (kept := replay_envelope_level(replayed.get("level"))) else {})}


def _startup(bench_dir: str) -> dict[str, Any]:
    """The candidate's measured vLLM start-up (``startup``) and benchmark load (``bench_config``):
    what the deploy step sizes its startup probe and autoscaling from (shipyard.serving.sizing)."""
    try:
        results = load_results(bench_dir)
    except ShipyardError:
        return {"startup": None, "bench_config": None}
    cfg = results.get("config") or {}
    return {"startup": results.get("startup") or {"ready_seconds": results.get("server_startup_seconds")},
            "bench_config": {k: cfg.get(k) for k in ("profile", "prompt_tokens", "output_tokens", "loads")}}


def judge_candidate(
    recipe: str,
    base_eval: str,
    candidate_eval: str,
    base_bench: str,
    candidate_bench: str,
    thresholds: str,
    slo: str,
    out_dir: str,
    compress_figures: dict[str, Any] | None = None,
    model_uri: str = "",
    safety: str = "",
    base_adapters: str = "",
    candidate_adapters: str = "",
    eval_sets: str = "",
    base_eval_sets: str = "",
    candidate_eval_sets: str = "",
    eval_sets_judged: str = "",
) -> dict[str, Any]:
    """Gate one candidate; write ``out_dir/{candidate.json, accuracy.md, accuracy.html, slo.html, slo.md, safety.md}``.

    ``safety``: the safety parameter; when it names probes, the safety gate
    (:mod:`shipyard.gates.safety`) compares the garak scans in both benchmark results and a
    blocking verdict fails the candidate like the other two gates. ``base_adapters`` /
    ``candidate_adapters``: per-adapter eval results (:mod:`shipyard.evaluation.lora`); each adapter
    gets the accuracy gate (:mod:`shipyard.gates.adapter_gates`), recorded under ``adapters``
    ({name: {passed, reason, worst_recovery, digest}}), and ``passed`` requires every one.
    ``eval_sets``: the prepared folder of the user's eval sets; when it holds sets, the per-set gate
    (:func:`shipyard.steps.eval_sets.decide_eval_sets` on ``base_eval_sets`` / ``candidate_eval_sets``
    and, for rubric sets, ``eval_sets_judged``) is recorded under ``eval_sets`` with
    ``eval_sets.md`` and ``eval_sets_records.json`` beside candidate.json, and ``passed`` requires it.

    Returns ``{"passed", "reason", "metrics", "candidate", "accuracy_caveat", "accuracy_verdict", ...}``:
    an accuracy pass that rests on ``allow_inconclusive`` or the stderr rule carries its caveat in the verdict.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    accuracy = run_gate(base_eval, candidate_eval, thresholds, report_path=str(out / "accuracy.md"),
                        html_path=str(out / "accuracy.html"))
    slo = run_slo_gate(base_bench, candidate_bench, slo, report_path=str(out / "slo.html"),
                       summary_path=str(out / "slo.md"))
    levels, planner = _levels(candidate_bench)
    base_levels, base_planner = _levels(base_bench)
    figures = compress_figures or {}
    safe = run_safety_gate(str(Path(base_bench) / SAFETY_DIR), str(Path(candidate_bench) / SAFETY_DIR), safety,
                           report_path=str(out / "safety.md"))
    # the accuracy gate once per LoRA adapter (candidate+adapter vs base+adapter): every one must pass
    lora = run_adapter_gates(base_adapters, candidate_adapters, thresholds, report_dir=str(out))
    own = _eval_sets(eval_sets, base_eval_sets, candidate_eval_sets, eval_sets_judged, thresholds, out)
    passed = bool(accuracy["passed"] and slo["passed"] and safe["passed"] and all(a["passed"] for a in lora.values())
                  and (own is None or own["passed"]))
    caveat = accuracy_caveat(accuracy["rows"]) if accuracy["passed"] else ""
    record: CandidateRecord = {
        "schema": CANDIDATE_SCHEMA,
        "recipe": recipe_label(recipe),
        "recipe_text": recipe,
        "model_uri": model_uri,
        "passed": passed,
        "reason": _reason(passed, accuracy, slo, safe, lora, caveat, own),
        "size_bytes": figures.get("size_after_bytes"),
        "base_size_bytes": figures.get("size_before_bytes"),
        "compression_ratio": figures.get("compression_ratio"),
        "accuracy": _accuracy_section(accuracy, caveat),
        "slo": _slo_section(slo),
        "adapters": lora,
        **({"eval_sets": own} if own is not None else {}),
        "safety": _safety_section(safe),
        **_bench_sections(candidate_bench, levels, planner, base_levels, base_planner),
    }
    atomic_write_text(out / CANDIDATE_FILE, json.dumps(record, indent=2, default=str))
    return {"passed": passed, "reason": record["reason"], "metrics": _metrics(record, accuracy, slo, safe, lora),
            "candidate": record, "accuracy_reason": accuracy["reason"], "slo_reason": slo["reason"],
            "accuracy_caveat": caveat, "accuracy_verdict": record["accuracy"]["verdict"],
            "slo_verdict": verdict(bool(slo["passed"])), "safety_reason": safe["reason"],
            "safety_verdict": safe["verdict"], "safety_caveat": safe["caveat"]}


def _safety_section(safe: dict[str, Any]) -> dict[str, Any]:
    """candidate.json's ``safety``: the safety gate's decision, its families and how many new hits."""
    return {"passed": bool(safe["passed"]), "enabled": safe["enabled"], "reason": safe["reason"],
            "families": safe["families"], "new_hits": len(safe["new_hits"]),
            "verdict": safe["verdict"], "caveat": safe["caveat"], "warnings": safe["warnings"]}


def _bench_sections(candidate_bench: str, levels: list[dict[str, Any]], planner: dict[str, Any],
                    base_levels: list[dict[str, Any]], base_planner: dict[str, Any]) -> dict[str, Any]:
    """candidate.json's figures from the benchmarks, in the record's order: the candidate's levels,
    start-up, golden outputs, serving-configuration search, engine and workload replay, then the
    base's levels and both planners' figures."""
    return {
        "levels": levels,
        **_startup(candidate_bench),
        "golden": _golden(candidate_bench),
        "tuning": _tuning(candidate_bench),
        "engine": _engine(candidate_bench),
        "workload": _workload(candidate_bench),
        "base_levels": base_levels,
        "planner": planner,
        "base_planner": base_planner,
    }


def _eval_sets(prepared: str, base: str, candidate: str, judged: str, thresholds: str,
               out: Path) -> dict[str, Any] | None:
    """The eval-sets gate's part of candidate.json (None when the run has no eval sets): its
    verdict, reason, rule, per-set rows, judge results, leak lines and the sets' pins."""
    if not prepared or not has_sets(prepared):
        return None
    gate = decide_eval_sets(prepared, base, candidate, accuracy_thresholds=thresholds, judged_path=judged,
                            report_path=str(out / "eval_sets.md"), records_path=str(out / "eval_sets_records.json"))
    return {**gate, "verdict": verdict(bool(gate["passed"]))}


def _reason(passed: bool, accuracy: dict[str, Any], slo: dict[str, Any], safe: dict[str, Any],
            lora: dict[str, Any], caveat: str, own: dict[str, Any] | None = None) -> str:
    """The candidate's one-line reason: its gates passed (with every caveat), or what failed."""
    if passed:
        reason = "passed its gates" + (f" (accuracy pass: {caveat})" if caveat else "")
        if lora:
            reason += f"; all {len(lora)} LoRA adapter accuracy gates passed"
        if own is not None:
            reason += f"; eval sets gate {own['reason']}"
        if safe["caveat"]:  # e.g. too few attacks to show anything: said wherever the verdict is
            reason += f"; safety pass: {safe['caveat']}"
        return reason
    failed = "; ".join(f"{name} gate {r['reason']}" for name, r in (("accuracy", accuracy), ("SLO", slo),
                                                                     ("safety", safe)) if not r["passed"])
    broken = [f"LoRA adapter {name} accuracy gate {a['reason']}" for name, a in lora.items() if not a["passed"]]
    if own is not None and not own["passed"]:
        broken.append(f"eval sets gate {own['reason']}")
    return "; ".join(part for part in (failed, *broken) if part)


#: what candidate.json keeps of each accuracy row
ACCURACY_ROW_KEYS = ("task", "metric", "higher_is_better", "base", "candidate", "recovery", "min_recovery", "gated",
                     "passed", "note", "base_stderr", "candidate_stderr", "stderr_k", "decided_by", "stderr_rule",
                     "paired", "rule", "decision", "margin", "p_value", "p_adjusted", "mdl")


def _accuracy_section(accuracy: dict[str, Any], caveat: str) -> dict[str, Any]:
    """The accuracy gate's part of candidate.json: its verdict, rule and every row."""
    gated = [r for r in accuracy["rows"] if r["gated"] and r["recovery"] is not None]
    return {
        "passed": bool(accuracy["passed"]),
        "reason": accuracy["reason"],
        "caveat": caveat,
        "verdict": verdict(bool(accuracy["passed"]), caveat),
        "worst_recovery": min((r["recovery"] for r in gated), default=None),
        "thresholds": accuracy.get("thresholds"),
        # the rule that decided, its one-sided alpha, the correction and the power statement
        **{k: accuracy.get(k) for k in ("rule", "alpha", "multiple_comparisons", "comparisons", "power")},
        "rows": [{k: r.get(k) for k in ACCURACY_ROW_KEYS} for r in accuracy["rows"]],
    }


def _slo_section(slo: dict[str, Any]) -> SloSection:
    """The SLO gate's part of candidate.json (the base's record uses the same)."""
    return {"passed": bool(slo["passed"]), "reason": slo["reason"], "metrics": slo["metrics"],
            "thresholds": slo.get("slo"), "rule": slo.get("rule"),
            "worst_regression": slo.get("worst_regression"), "best_gain": slo.get("best_gain"),
            # candidate / base per level with its interval and method; where the base's figures come from
            "comparison": slo.get("comparison"), "base_source": slo.get("base_source"),
            # goodput at the SLO as N x the recorded peak (shipyard.gates.capacity); None without a replayed workload
            "capacity": slo.get("capacity"),
            # the SLO measured on the replay itself (shipyard.gates.slo.replay_verdict); None without a replay
            "replay": slo.get("replay")}


def _metrics(record: CandidateRecord, accuracy: dict[str, Any], slo: dict[str, Any], safe: dict[str, Any],
             lora: dict[str, Any]) -> dict[str, float]:
    """The candidate's flat figures for a KFP Metrics artifact and its MLflow run."""
    metrics = {"passed": 1.0 if record["passed"] else 0.0, "accuracy_passed": 1.0 if accuracy["passed"] else 0.0,
               "slo_passed": 1.0 if slo["passed"] else 0.0, **safe["metrics"]}
    if lora:
        metrics["adapters_passed"] = 1.0 if all(a["passed"] for a in lora.values()) else 0.0
    if record.get("eval_sets") is not None:
        metrics.update(record["eval_sets"]["metrics"])
    if safe["enabled"]:
        metrics["safety_passed"] = 1.0 if safe["passed"] else 0.0
    if record["accuracy"]["worst_recovery"] is not None:
        metrics["worst_recovery"] = float(record["accuracy"]["worst_recovery"])
    for lv in record["levels"]:
        if lv["output_tokens_per_s"] is not None:
            metrics[f"{lv['name']}.output_tokens_per_s"] = float(lv["output_tokens_per_s"])
    if record["size_bytes"]:
        metrics["size_bytes"] = float(record["size_bytes"])
    for key, value in (slo.get("metrics") or {}).items():  # capacity in the recorded units; the SLO on the replay
        if key.startswith(("capacity_", "replay.")):
            metrics[key] = float(value)
    return metrics


def judge_base(base_eval: str, base_bench: str, slo: str, out_dir: str, model_uri: str = "",
               size_bytes: int | None = None) -> CandidateRecord:
    """The keep-the-base candidate (:mod:`shipyard.gates.baseline`): the base model as one more
    entry in the ranking, with its own measured figures; writes ``out_dir/{candidate.json, slo.html,
    slo.md}`` and returns the record.

    Its accuracy is the reference (every score its own, recovery 1); it must meet the absolute SLO
    like any candidate (its SLO gate compares it with itself, so ratio rules hold trivially); the
    safety gate's reference is the base itself. ``size_bytes``: the base's size on disk (the compress
    step measured it; None when unknown).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    slo_result = run_slo_gate(base_bench, base_bench, slo, report_path=str(out / "slo.html"),
                              summary_path=str(out / "slo.md"))
    try:
        scores = load_summary(base_eval, "base_eval")["scores"]
    except ShipyardError:
        scores = {}
    rows = [{"task": task, "metric": key, "higher_is_better": bool(s.get("higher_is_better", True)),
             "base": s.get("value"), "candidate": s.get("value"), "recovery": 1.0, "gated": True, "passed": True,
             "decided_by": "reference", "note": "the base is the reference"}
            for task, metrics in sorted(scores.items()) for key, s in sorted(metrics.items())
            if s.get("value") is not None]
    levels, planner = _levels(base_bench)
    passed = bool(slo_result["passed"])
    record: CandidateRecord = {
        "schema": CANDIDATE_SCHEMA,
        "recipe": BASE,
        "recipe_text": "",
        "is_base": True,
        "model_uri": model_uri,
        "passed": passed,
        "reason": "the base: no compression, the benchmark's serving settings" if passed
        else f"SLO gate {slo_result['reason']}",
        "size_bytes": size_bytes,
        "base_size_bytes": size_bytes,
        "compression_ratio": 1.0,
        "accuracy": {"passed": True, "reason": "the reference of the accuracy gate", "caveat": "",
                     "verdict": "reference", "worst_recovery": 1.0, "thresholds": None, "rows": rows},
        # against itself: no ratios; whether its benchmark ran in this run or came from the cache, in its own key
        "slo": {**_slo_section(slo_result), "worst_regression": None, "best_gain": None, "comparison": None},
        "benchmark_source": slo_result.get("base_source") or {"source": "unknown"},
        "adapters": {},
        "safety": {"passed": True, "enabled": False, "reason": "the reference of the safety gate",
                   "families": {}, "new_hits": 0, "verdict": "reference"},
        "levels": levels,
        **_startup(base_bench),
        "golden": _golden(base_bench),
        "tuning": _tuning(base_bench),
        "engine": _engine(base_bench),
        "workload": _workload(base_bench),
        "base_levels": levels,
        "planner": planner,
        "base_planner": planner,
    }
    atomic_write_text(out / CANDIDATE_FILE, json.dumps(record, indent=2, default=str))
    return record


def gate_outputs(out: dict[str, Any], recipe: str, out_dir: str) -> dict[str, Any]:
    """What the gates' KFP wrapper records from :func:`judge_candidate`'s ``out`` (``out_dir``: its
    ``candidate`` folder): ``metadata``, per output artifact (``candidate``, ``accuracy_report``,
    ``slo_report``, ``safety_report``) the entries its metadata gets, and ``log``, the step's MLflow
    record (``StepRun.log``'s params, metrics, tags and artifacts)."""
    own = out["candidate"].get("eval_sets")
    candidate = {"recipe": recipe, "passed": out["passed"], "reason": out["reason"],
                 "accuracy_caveat": out["accuracy_caveat"], "safety_verdict": out["safety_verdict"],
                 "safety_caveat": out["safety_caveat"]}
    capacity = slo_of(out["candidate"]).get("capacity")
    if capacity:  # the console's SLO figure: "3.2x your recorded peak"
        candidate["capacity"] = capacity["short"]
    params: dict[str, Any] = {}
    if own is not None:  # the user's eval sets: the verdict and each set's pin (the content evaluated)
        candidate.update({"eval_sets_verdict": own["verdict"], "eval_sets_reason": own["reason"]})
        params = {f"eval_sets.{s['name']}": f"{s['form']} {s['rows']} rows {s['uri'][:200]} sha256:{s['sha256']}"
                  for s in own["sets"]}
        if own.get("judge_model"):  # the judge of the rubric sets: the content that judged
            judge = own["judge_model"]
            params["eval_sets.judge"] = f"{str(judge.get('pinned_uri') or '')[:200]} {judge.get('fingerprint') or ''}".strip()
    own_files = {name: os.path.join(out_dir, name) for name in ("eval_sets.md", "eval_sets_records.json")
                 if os.path.isfile(os.path.join(out_dir, name))}
    tags = {"shipyard.gate.passed": str(out["passed"]).lower(),
            "shipyard.gate.accuracy": out["accuracy_verdict"],
            "shipyard.gate.slo": out["slo_verdict"],
            "shipyard.gate.safety": out["safety_verdict"],
            **{f"shipyard.gate.lora.{name}": "pass" if a["passed"] else "FAIL"
               for name, a in out["candidate"].get("adapters", {}).items()},
            **({"shipyard.gate.eval_sets": own["verdict"]} if own is not None else {})}
    artifacts = {name: os.path.join(out_dir, name) for name in ("accuracy.md", "accuracy.html", "slo.html", "slo.md",
                                                                "safety.md", CANDIDATE_FILE)}
    return {"metadata": {"candidate": candidate,
                         "accuracy_report": {"reason": out["accuracy_reason"], "caveat": out["accuracy_caveat"]},
                         "slo_report": {"reason": out["slo_reason"]},
                         "safety_report": {"reason": out["safety_reason"], "verdict": out["safety_verdict"]}},
            "log": {"params": params, "metrics": out["metrics"], "tags": tags, "artifacts": {**artifacts, **own_files}}}


#: the gates wrapper's report outputs -> the report in the candidate folder each is a copy of
REPORT_FILES = {"accuracy_report": "accuracy.md", "slo_report": "slo.html", "safety_report": "safety.md"}


def gates_task(recipe: str, *, base_eval: str, candidate_eval: str, base_bench: str, candidate_bench: str,
               thresholds: str, slo: str, safety: str, out_dir: str, report_paths: Mapping[str, str],
               compress_figures: Mapping[str, Any], compress_summary: Mapping[str, Any],
               base_adapters: str = "", candidate_adapters: str = "", eval_sets: str = "", base_eval_sets: str = "",
               candidate_eval_sets: str = "", eval_sets_judged: str = "", pending: Sequence[Mapping[str, Any]] = (),
               tracking_uri: str = "", experiment: str = "", kfp_run_id: str = "") -> dict[str, Any]:
    """The candidate gates step as its KFP wrapper runs it, with its outputs' paths: :func:`judge_candidate`
    (``out_dir``: the candidate folder) inside the step's MLflow run, its reports copied to
    ``report_paths`` (:data:`REPORT_FILES`' keys), its record logged (:func:`gate_outputs`), then the
    payloads of steps whose image has no MLflow client applied (``compress_summary`` and ``pending``:
    the inputs' metadata; see :func:`shipyard.tracking.steprun.apply_pending`).

    ``compress_figures``/``compress_summary``: the compress step's metrics and summary metadata ({} for
    a packaged candidate); the optional inputs' folders are "" without them (``eval_sets_judged``:
    judge-eval-sets' folder). Returns ``passed``, ``reason``, ``metrics`` and ``metadata`` per output."""
    with StepRun("gates", recipe, tracking_uri=tracking_uri, experiment=experiment, kfp_run_id=kfp_run_id,
                 params={"accuracy_thresholds": thresholds, "slo": slo, "safety": safety}) as run:
        out = call_step("base", judge_candidate, recipe=recipe,
                        base_eval=base_eval, candidate_eval=candidate_eval, base_bench=base_bench,
                        candidate_bench=candidate_bench, thresholds=thresholds, slo=slo, out_dir=out_dir,
                        compress_figures=dict(compress_figures), model_uri=str(compress_summary.get("model_uri", "")),
                        safety=safety, base_adapters=base_adapters, candidate_adapters=candidate_adapters,
                        eval_sets=eval_sets, base_eval_sets=base_eval_sets, candidate_eval_sets=candidate_eval_sets,
                        eval_sets_judged=os.path.join(eval_sets_judged, JUDGED) if eval_sets_judged else "")
        for key, file in REPORT_FILES.items():
            shutil.copyfile(os.path.join(out_dir, file), report_paths[key])
        outputs = gate_outputs(out, recipe, out_dir)
        run.log(**outputs["log"])
    try:  # payloads of steps whose image has no MLflow client (see tracking/steprun.py)
        apply_pending(compress_summary, *pending,
                      context={"kfp_run_id": kfp_run_id, "tracking_uri": tracking_uri, "experiment": experiment})
    except Exception as err:  # noqa: BLE001 - tracking never fails the gate
        print(f"shipyard: deferred tracking not applied: {err}", flush=True)
    print(f"{recipe}: {out['reason']}", flush=True)
    return {"passed": bool(out["passed"]), "reason": out["reason"], "metrics": out["metrics"],
            "metadata": outputs["metadata"]}
