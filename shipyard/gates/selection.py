"""Fan-in: rank the candidates that passed their gates by the declared objective, pick one
champion, and write the candidates report (Markdown and self-contained HTML with a plot).

The base is always a candidate (keep-the-base, :mod:`shipyard.gates.baseline`): ranked with its
own figures, and a compressed candidate it dominates on (accuracy, objective) is not eligible.

Objectives (the ``selection`` parameter, see :class:`~shipyard.gates.config.SelectionConfig`):

* ``throughput``: output tokens/s at the highest load level that still meets the SLO;
* ``size``: the smallest model on disk;
* ``recovery``: the best worst-case accuracy recovery against the base;
* ``kv_cache``: the most KV-cache tokens the memory planner finds on the benchmark's GPU.

Ties go to the next objective in ``then``, then to the recipe listed first. Every candidate
gets a line saying why it won or lost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from shipyard.benchmarking.report import png_bytes, replay_judged, slo_shown
from shipyard.core.errors import ShipyardError
from shipyard.core.records import (
    CANDIDATE_FILE,
    DECISION_SCHEMA,
    SELECTION_FILE,
    CandidateRecord,
    DecisionRecord,
    load_candidate,
    load_selection,
    slo_of,
)
from shipyard.core.report import MIN_SAMPLES, Doc, change_text, fmt, sample_count, sample_warnings
from shipyard.gates.accuracy import METHOD
from shipyard.gates.baseline import dominance, headline, is_base, slo_level
from shipyard.gates.candidate import accuracy_caveat, verdict
from shipyard.gates.config import OBJECTIVES, SelectionConfig, selection_config
from shipyard.gates.frontier import add_section, frontier
from shipyard.gates.noise import METHOD as NOISE_METHOD
from shipyard.gates.recovery import loss_text
from shipyard.models.resolve import refuse_credentials

LABELS = {
    "throughput": "output tok/s at the highest load meeting the SLO",
    "size": "size on disk (smaller is better)",
    "recovery": "worst accuracy recovery vs base",
    "kv_cache": "KV-cache tokens (memory planner)",
}


def objective_value(cand: dict[str, Any], objective: str) -> float | None:
    """The candidate's figure for ``objective`` (None when it has none)."""
    if objective == "throughput":
        level = slo_level(cand)
        return None if level is None else level.get("output_tokens_per_s")
    if objective == "size":
        return cand.get("size_bytes")
    if objective == "recovery":
        return (cand.get("accuracy") or {}).get("worst_recovery")
    if objective == "kv_cache":
        return (cand.get("planner") or {}).get("kv_cache_tokens")
    raise ValueError(objective)


def _throughput(cand: dict[str, Any]) -> float | None:
    return objective_value(cand, "throughput")


def _sort_key(cand: dict[str, Any], order: list[str]) -> tuple[float, ...]:
    key = []
    for objective in order:
        value = objective_value(cand, objective)
        if value is None:
            key.append(float("inf"))
        else:
            key.append(float(value) if objective == "size" else -float(value))
    return tuple(key)


def _ranked_decisions(ranked: list[dict[str, Any]], objective: str, dominated: list[str] = ()) -> dict[str, str]:
    """Why each eligible candidate won or lost, by the objective's figure (``dominated``: the
    recipes that passed their gates but the base dominates, so they are not ranked)."""
    label = LABELS[objective]
    winner = ranked[0] if ranked else None
    decisions: dict[str, str] = {}
    for rank, cand in enumerate(ranked, start=1):
        value = _objective_text(objective_value(cand, objective), objective)
        if rank == 1:
            runner_up = ranked[1] if len(ranked) > 1 else None
            alone = (f" ({', '.join(dominated)} also passed its gates, but the base dominates it)" if dominated
                     else " (the only candidate that passed its gates)")
            versus = (f" vs {_objective_text(objective_value(runner_up, objective), objective)} for {runner_up['recipe']}"
                      if runner_up else alone)
            decisions[cand["recipe"]] = f"champion: {label} {value}{versus}"
        else:
            decisions[cand["recipe"]] = (f"rank {rank}: {label} {value} vs "
                                         f"{_objective_text(objective_value(winner, objective), objective)} "
                                         f"for the champion {winner['recipe'] if winner else ''}")
    return decisions


def select(candidates: list[dict[str, Any]], selection: str | SelectionConfig = "") -> dict[str, Any]:
    """Rank the passing candidates; returns ``{"winner", "ranking", "decisions", "objective",
    "dominated", "headline"}``.

    With the keep-the-base candidate in ``candidates`` (:mod:`shipyard.gates.baseline`), it is ranked
    like the others, and a compressed candidate the base dominates on (accuracy, objective) is not
    eligible (``dominated``: recipe -> why). ``winner`` is the champion's record (None when nothing
    passed); ``decisions`` says for each recipe why it won or lost; ``headline`` compares the
    champion with the base in one line.
    """
    cfg = selection if isinstance(selection, SelectionConfig) else selection_config(selection)
    order = [cfg.objective] + [o for o in cfg.then if o != cfg.objective]
    base = next((c for c in candidates if is_base(c)), None)
    dominated: dict[str, str] = {}
    if base is not None:
        for cand in candidates:
            if not is_base(cand) and cand.get("passed"):
                why = dominance(base, cand, cfg.objective, objective_value)
                if why:
                    dominated[cand["recipe"]] = why
    indexed = list(enumerate(candidates))
    passing = [(i, c) for i, c in indexed if c.get("passed") and c["recipe"] not in dominated]
    ranked = [c for _, c in sorted(passing, key=lambda ic: (_sort_key(ic[1], order), ic[0]))]
    winner = ranked[0] if ranked else None
    decisions = _ranked_decisions(ranked, cfg.objective, sorted(dominated))
    decisions.update(dominated)
    for _, cand in indexed:
        if not cand.get("passed"):
            decisions[cand["recipe"]] = f"not eligible: {cand.get('reason', 'a gate failed')}"
    if winner is None:
        reason = "no candidate passed its gates: " + "; ".join(f"{c['recipe']}: {c.get('reason', '')}" for c in candidates)
    else:
        reason = f"champion {winner['recipe']} by {cfg.objective}: {decisions[winner['recipe']].removeprefix('champion: ')}"
    return {
        "objective": cfg.objective,
        "order": order,
        "winner": winner,
        "reason": reason,
        "headline": headline(winner, base, candidates, decisions, objective_value) if base is not None else reason,
        "ranking": [c["recipe"] for c in ranked],
        "decisions": decisions,
        "dominated": dominated,
    }


# --------------------------------------------------------------------------- report


def _mb(value: Any) -> str:
    return "–" if not value else f"{float(value) / 1e6:.1f} MB"


def _objective_text(value: float | None, objective: str) -> str:
    if value is None:
        return "–"
    return _mb(value) if objective == "size" else fmt(value)


def _first(candidates: list[dict[str, Any]], *path: str) -> Any:
    """The first candidate record that has ``path`` (the thresholds are the same for every candidate)."""
    for cand in candidates:
        value: Any = cand
        for key in path:
            value = (value or {}).get(key) if isinstance(value, dict) else None
        if value:
            return value
    return None


def _series(candidates: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    if any(is_base(c) for c in candidates):  # the base is a candidate: its record holds its own levels
        return [(c["recipe"][:24], c.get("levels") or []) for c in candidates]
    out: list[tuple[str, list[dict[str, Any]]]] = []
    if candidates and candidates[0].get("base_levels"):
        out.append(("base", candidates[0]["base_levels"]))
    out += [(c["recipe"][:24], c.get("levels") or []) for c in candidates]
    return out


def _stderr_rows(cand: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in (cand.get("accuracy") or {}).get("rows", []) if r.get("decided_by") == "stderr rule"]


def _ranking_rows(result: dict[str, Any], candidates: list[dict[str, Any]]) -> list[list[str]]:
    """The ranking table's rows: every candidate (the base among them) with its decision and figures."""
    winner = (result.get("winner") or {}).get("recipe")
    objective = result["objective"]
    champion_value = objective_value(result["winner"], objective) if result.get("winner") else None
    ranked = {recipe: i for i, recipe in enumerate(result.get("ranking") or [], start=1)}
    rows = []
    base = candidates[0] if candidates and not any(is_base(c) for c in candidates) else {}
    if base:
        rows.append(["–", "base", "reference", "–", "–", "–", "–", "–", "1", _mb(base.get("base_size_bytes")), "1",
                     fmt((base.get("base_planner") or {}).get("kv_cache_tokens"))])
    for cand in candidates:
        acc, slo = cand.get("accuracy") or {}, slo_of(cand)
        value = objective_value(cand, objective)
        diff = "–"
        if value is not None and champion_value is not None and cand["recipe"] != winner:
            delta = float(value) - float(champion_value)
            diff = _mb(delta) if objective == "size" else f"{delta:+.4g}"
        mark = "champion" if cand["recipe"] == winner else (
            "dominated by the base" if cand["recipe"] in (result.get("dominated") or {})
            else "passed" if cand.get("passed") else "not eligible")
        rows.append([str(ranked.get(cand["recipe"], "–")), cand["recipe"][:40], mark,
                     _objective_text(value, objective), diff, _accuracy_verdict(acc),
                     "pass" if slo.get("passed") else "FAIL", (cand.get("safety") or {}).get("verdict", "off"),
                     fmt(acc.get("worst_recovery")), _mb(cand.get("size_bytes")),
                     fmt(cand.get("compression_ratio"), 2), fmt((cand.get("planner") or {}).get("kv_cache_tokens"))])
    return rows


def _level_section(doc: Doc, candidates: list[dict[str, Any]]) -> None:
    """The per-load-level table of the base and every candidate."""
    level_rows = []
    for name, levels in _series(candidates):
        for lv in levels:
            n = sample_count(lv)
            level_rows.append([name, lv["name"], "–" if n is None else str(n) + (f" (< {MIN_SAMPLES})" if n < MIN_SAMPLES else ""),
                               fmt(lv.get("output_tokens_per_s"), 1), fmt(lv.get("ttft_p50_ms"), 1),
                               fmt(lv.get("ttft_p99_ms"), 1), fmt(lv.get("itl_p99_ms"), 1), fmt(lv.get("error_rate"))])
    if level_rows:
        doc.h(2, "Per load level")
        doc.table(["model", "load", "requests", "out tok/s", "TTFT p50 ms", "TTFT p99 ms", "ITL p99 ms", "error rate"],
                  level_rows)


def _workload_section(doc: Doc, candidates: list[dict[str, Any]]) -> None:
    """The recorded workload each benchmark replayed: its fingerprint's digest, the SLO measured on the
    replay itself (:func:`shipyard.gates.slo.replay_verdict`), the goodput at the SLO as N x the
    recorded peak (:mod:`shipyard.gates.capacity`) and the fidelity line (the SLO verdict stands only
    on a faithful replay of the same workload)."""
    replayed = [(c["recipe"][:40], c["workload"], (slo_of(c).get("capacity") or {}).get("text") or "–",
                 (slo_of(c).get("replay") or {}).get("text") or "–")
                for c in candidates if c.get("workload")]
    if not replayed:
        return
    doc.h(2, "Your traffic (the recorded workload replayed)")
    doc.table(["recipe", "fingerprint", "replay", "SLO on your traffic", "capacity at the SLO", "fidelity"],
              [[name, str(w.get("digest") or "–")[:19], "faithful" if w.get("valid") else
                "NOT faithful: " + (", ".join(w.get("failed") or []) or "unmeasured"), on_replay, capacity,
                w.get("line") or "–"]
               for name, w, capacity, on_replay in replayed])


def _accuracy_section(doc: Doc, candidates: list[dict[str, Any]]) -> None:
    """The per-metric table: each candidate's score and recovery, and how its row was decided."""
    metrics = sorted({f"{r['task']}/{r['metric'].replace(',none', '')}" for c in candidates
                      for r in (c.get("accuracy") or {}).get("rows", [])})
    if metrics:
        doc.h(2, "Accuracy recovery per metric")
        head = ["metric", "base", "min recovery"] + [c["recipe"][:30] for c in candidates]
        table = []
        for metric in metrics:
            cells, base_value, minimum = [], None, None
            for cand in candidates:
                row = next((r for r in (cand.get("accuracy") or {}).get("rows", [])
                            if f"{r['task']}/{r['metric'].replace(',none', '')}" == metric), None)
                if row is None:
                    cells.append("–")
                    continue
                base_value = row["base"] if base_value is None else base_value
                minimum = row.get("min_recovery") if minimum is None else minimum
                how = row.get("decided_by") or ""
                verdict = ("" if row["passed"] else " FAIL") if row.get("gated", True) else " not gated"
                cells.append(f"{fmt(row['candidate'])} (recovery {fmt(row['recovery'])}"
                             f"{'; ' + how if how and how != 'recovery >= min' else ''}){verdict}")
            table.append([metric, fmt(base_value), fmt(minimum)] + cells)
        doc.table(head, table)
        doc.p("candidate score (recovery = candidate / base, or base / candidate when lower is better; "
              "stderr rule = passed below min recovery, within k standard errors).", "Cells:")


def _eval_sets_section(doc: Doc, candidates: list[dict[str, Any]]) -> None:
    """The gate per user eval set (``eval_sets``): each candidate's verdict and, per set, base and
    candidate on the same rows, the paired loss with its interval, the margin and the decision.
    Absent when the run had no eval sets."""
    judged = [c for c in candidates if c.get("eval_sets") is not None]
    if not judged:
        return
    doc.h(2, "Your eval sets")
    doc.table(["recipe", "eval sets gate", "reason"],
              [[c["recipe"][:40], c["eval_sets"].get("verdict") or ("pass" if c["eval_sets"]["passed"] else "FAIL"),
                c["eval_sets"].get("reason") or "–"] for c in judged])
    rows = [[c["recipe"][:40], r["task"], str(r["metric"]).replace(",none", ""), fmt(r.get("base")),
             fmt(r.get("candidate")), loss_text(r["paired"]) if r.get("paired") else "–", fmt(r.get("margin")),
             r.get("decision") or "–", ("" if r.get("passed") else "FAIL") if r.get("gated", True) else "informs only"]
            for c in judged for r in c["eval_sets"].get("rows") or []]
    if rows:
        doc.table(["recipe", "set", "metric", "base", "candidate", "loss [interval]", "margin", "decision", "gate"],
                  rows)
    leaks = judged[0]["eval_sets"].get("leaks") or []
    if leaks:
        doc.p("; ".join(leaks), "Leak check against the calibration set:")


def report_doc(result: dict[str, Any], candidates: list[dict[str, Any]], with_plots: bool = True) -> Doc:
    """All candidates side by side: the selection rule, the champion and why, every gate's decision,
    the figures per load level and per metric, the thresholds, and warnings."""
    winner = (result.get("winner") or {}).get("recipe")
    objective = result["objective"]
    doc = Doc("shipyard candidates").h(1, f"Candidates: {'champion ' + winner if winner else 'no champion'}",
                                      "pass" if winner else "fail")
    if result.get("headline") and result["headline"] != result["reason"]:
        doc.p(result["headline"], "Verdict:")
    doc.p(result["reason"], "Decision:")
    doc.p("the base is always a candidate (no compression, its own measured figures, recovery 1); a compressed "
          "candidate the base dominates on (accuracy, the objective) is not eligible; the others that passed "
          f"their gates (accuracy, SLO, safety) are ranked with the base by {objective} ({LABELS[objective]}); ties "
          f"go to {', '.join(result['order'][1:]) or 'none'}, then to the candidate listed first.", "Rule:")
    for cand in candidates:
        for r in _stderr_rows(cand):
            doc.warn(f"{cand['recipe'][:40]}: {r['task']} {str(r['metric']).replace(',none', '')} passed the accuracy gate "
                     f"below min_recovery {fmt(r.get('min_recovery'))} (recovery {fmt(r.get('recovery'))}) by the "
                     f"stderr rule (k = {fmt(r.get('stderr_k'))}): {r.get('stderr_rule') or r.get('note')}")
    for name, levels in _series(candidates):
        for text in sample_warnings(levels, name):
            doc.warn(text)
    if with_plots:
        for alt, png in plot_pngs(candidates):
            doc.image(alt, png)
    rows = _ranking_rows(result, candidates)
    doc.h(2, "Ranking")
    doc.table(["rank", "recipe", "decision", f"{objective} ({LABELS[objective]})", "vs champion", "accuracy gate",
               "SLO gate", "safety gate", "worst recovery", "size", "ratio", "planner KV tokens"], rows)
    doc.h(2, "Why each candidate won or lost")
    doc.items(f"{recipe[:60]}: {why}" for recipe, why in result["decisions"].items())
    doc.h(2, "Gate decisions")
    doc.table(["recipe", "accuracy gate", "SLO gate", "safety gate", "worst regression", "best gain"],
              [[c["recipe"][:40], (c.get("accuracy") or {}).get("reason") or "–", slo_of(c).get("reason") or "–",
                (c.get("safety") or {}).get("reason") or "off",
                change_text(slo_of(c).get("worst_regression")),
                change_text(slo_of(c).get("best_gain"))] for c in candidates])
    _level_section(doc, candidates)
    _workload_section(doc, candidates)
    _accuracy_section(doc, candidates)
    _eval_sets_section(doc, candidates)
    add_section(doc, frontier(candidates, winner or "", _throughput), with_plot=with_plots)
    acc_cfg = _first(candidates, "accuracy", "thresholds")
    if acc_cfg:
        doc.h(2, "Accuracy thresholds").config(acc_cfg)
    slo_cfg = _first(candidates, "slo", "thresholds")
    if slo_cfg:
        judged = replay_judged(*(slo_of(c).get("replay") for c in candidates))
        doc.h(2, "SLO").config(slo_shown(slo_cfg, judged), ("threshold", "value"))
    return doc


def _accuracy_verdict(acc: dict[str, Any]) -> str:
    """The accuracy gate's verdict with its caveat ("pass (5 metrics below 0.99 within noise;
    worst 0.81)" when it passed only through the stderr rule); older records get it from their rows."""
    if acc.get("verdict") == "reference":
        return "reference"
    passed = bool(acc.get("passed"))
    caveat = acc.get("caveat")
    if caveat is None:
        caveat = accuracy_caveat(acc.get("rows") or []) if passed else ""
    return verdict(passed, str(caveat or ""))


def report_markdown(result: dict[str, Any], candidates: list[dict[str, Any]]) -> str:
    """All candidates side by side, the winner and why (Markdown, no plots)."""
    return report_doc(result, candidates, with_plots=False).to_markdown()


def _load_x(level: dict[str, Any]) -> float:
    value = level.get("nominal_load")
    return float(value if value is not None else level.get("requests_per_s") or 0.0)


def _ttft_plot(plt: Any, series: list[tuple[str, list[dict[str, Any]]]], slo: dict[str, Any]) -> bytes:
    """TTFT p99 vs achieved output tokens/s per series, hollow points for thin levels, the SLO line."""
    fig, ax = plt.subplots(figsize=(6.2, 4.0))
    few = False
    for name, levels in series:
        lv = sorted((x for x in levels if x.get("ttft_p99_ms") is not None), key=lambda x: x.get("output_tokens_per_s") or 0)
        if not lv:
            continue
        line = ax.plot([x.get("output_tokens_per_s") or 0 for x in lv], [x["ttft_p99_ms"] for x in lv], "-o", label=name)[0]
        for x in lv:
            n = sample_count(x)
            if n is not None and n < MIN_SAMPLES:
                few = True
                ax.plot([x.get("output_tokens_per_s") or 0], [x["ttft_p99_ms"]], "o", color=line.get_color(),
                        markerfacecolor="white")
            ax.annotate(str(x["name"]).replace("concurrent@", "c="), (x.get("output_tokens_per_s") or 0, x["ttft_p99_ms"]),
                        textcoords="offset points", xytext=(4, 4), fontsize=7, color=line.get_color())
    if slo.get("ttft_p99_ms"):
        ax.axhline(slo["ttft_p99_ms"], color="black", linestyle=":", label=f"SLO TTFT p99 <= {slo['ttft_p99_ms']:g} ms")
    values = [x["ttft_p99_ms"] for _, lv in series for x in lv if x.get("ttft_p99_ms")] + [slo.get("ttft_p99_ms") or 0]
    positive = [v for v in values if v and v > 0]
    if positive and max(positive) / min(positive) > 30:
        ax.set_yscale("log")
    ax.set_xlabel("achieved output tokens/s")
    ax.set_ylabel("TTFT p99 (ms)")
    ax.margins(x=0.12)  # room for the level labels at the right end, inside the axes
    ax.set_title("TTFT p99 vs achieved throughput" + (f"\nhollow: < {MIN_SAMPLES} requests" if few else ""), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return png_bytes(fig, plt)


def _throughput_plot(plt: Any, series: list[tuple[str, list[dict[str, Any]]]], slo: dict[str, Any]) -> bytes:
    """Achieved output tokens/s vs load level per series, the SLO minimum."""
    fig, ax = plt.subplots(figsize=(6.2, 4.0))
    for name, levels in series:
        lv = sorted(levels, key=_load_x)
        if lv:
            ax.plot([_load_x(x) for x in lv], [x.get("output_tokens_per_s") or 0 for x in lv], "-o", label=name)
    if slo.get("min_output_tokens_per_s"):
        ax.axhline(slo["min_output_tokens_per_s"], color="black", linestyle=":",
                   label=f"SLO min {slo['min_output_tokens_per_s']:g} tok/s")
    ax.set_xticks(sorted({_load_x(x) for _, levels in series for x in levels}))
    ax.set_xlabel("load level (concurrency, or offered requests/s)")
    ax.set_ylabel("achieved output tokens/s")
    ax.set_ylim(bottom=0)
    ax.set_title("throughput vs load", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return png_bytes(fig, plt)


def _size_recovery_plot(plt: Any, candidates: list[dict[str, Any]], acc: dict[str, Any]) -> bytes:
    """Size on disk and worst accuracy recovery per candidate (and the base), the min recovery line."""
    synthesized = bool(candidates) and not any(is_base(c) for c in candidates)  # older records: no base candidate
    names = (["base"] if synthesized else []) + [c["recipe"][:24] for c in candidates]
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.6))
    sizes = ([candidates[0].get("base_size_bytes")] if synthesized else []) + [c.get("size_bytes") for c in candidates]
    axes[0].bar(names, [float(v or 0) / 1e6 for v in sizes], color="tab:gray")
    axes[0].set_title("size on disk (MB)", fontsize=10)
    recov = ([1.0] if synthesized else []) + [(c.get("accuracy") or {}).get("worst_recovery") for c in candidates]
    heights = [float(v or 0) for v in recov]
    minimum = float(acc.get("min_recovery") or 0.0)
    # a bar below min recovery is never drawn as a plain pass: orange and hatched when the
    # stderr rule let it through, red when the gate failed
    passed = ([True] if synthesized else []) + [bool((c.get("accuracy") or {}).get("passed")) for c in candidates]
    colors = ["tab:green" if h >= minimum else ("tab:orange" if ok else "tab:red") for h, ok in zip(heights, passed, strict=False)]
    bars = axes[1].bar(names, heights, color=colors)
    for bar, h, ok in zip(bars, heights, passed, strict=False):
        if h < minimum and ok:
            bar.set_hatch("//")
    axes[1].bar_label(bars, [fmt(v, 3) + ("" if v >= minimum else " (within noise)" if ok else " FAIL")
                             for v, ok in zip(heights, passed, strict=False)], fontsize=7)
    floor = min([v for v in heights if v > 0] + [float(acc.get("min_recovery") or 1.0)])
    axes[1].set_ylim(max(0.0, floor - 0.1), max(heights + [1.0]) + 0.05)  # small differences stay visible
    if acc.get("min_recovery"):
        axes[1].axhline(acc["min_recovery"], color="black", linestyle=":", label=f"min recovery {acc['min_recovery']:g}")
        axes[1].legend(fontsize=7, loc="upper right")
    axes[1].set_title("worst accuracy recovery vs base", fontsize=10)
    for ax in axes:
        ax.tick_params(axis="x", labelrotation=20, labelsize=7)
    return png_bytes(fig, plt)


def plot_pngs(candidates: list[dict[str, Any]]) -> list[tuple[str, bytes]]:
    """TTFT p99 vs achieved output tok/s and output tok/s vs load (base and every candidate, SLO
    lines), size and worst recovery (with the min recovery line); ``(alt text, PNG)`` each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    slo = _first(candidates, "slo", "thresholds") or {}
    acc = _first(candidates, "accuracy", "thresholds") or {}
    series = _series(candidates)
    return [
        ("TTFT p99 vs achieved output tokens/s, base and every candidate, SLO line", _ttft_plot(plt, series, slo)),
        ("output tokens/s vs load level, base and every candidate, SLO minimum", _throughput_plot(plt, series, slo)),
        ("size on disk and worst accuracy recovery, base and every candidate", _size_recovery_plot(plt, candidates, acc)),
    ]


def report_html(result: dict[str, Any], candidates: list[dict[str, Any]], markdown: str | None = None) -> str:
    """A self-contained HTML page: the plots (inline PNGs) and the tables (nothing loads from the
    network). ``markdown`` is accepted for compatibility and ignored: both come from one document."""
    return report_doc(result, candidates).to_html()


#: what the decision record keeps of a candidate's eval-sets gate
DECISION_EVAL_SETS_KEYS = ("passed", "verdict", "reason", "method", "rows", "judged", "ragas", "judge_capped", "leaks",
                           "sets", "judge_model")


def _decision_eval_sets(own: dict[str, Any]) -> dict[str, Any]:
    """The gate per user eval set in the decision record (only in a run with eval_sets): the sets' pins
    and every row, and with rubric or rag sets judged the judge model that judged them (pinned URI,
    content fingerprint), Ragas on the rag sets and the sets the judge's max_rows cut short."""
    return {k: own.get(k) for k in DECISION_EVAL_SETS_KEYS if k != "judge_model" or own.get(k)}


def decision_record(result: dict[str, Any], candidates: list[CandidateRecord], front: dict[str, Any],
                    doc: dict[str, Any]) -> DecisionRecord:
    """One JSON per run: every candidate with every gate's inputs and outcome, the frontier, the
    objective, the champion and why, its serving configuration and the statistics used."""
    gates = []
    for c in candidates:
        acc, slo, safety = c.get("accuracy") or {}, slo_of(c), c.get("safety") or {}
        gates.append({
            "candidate": c.get("recipe"), "is_base": is_base(c), "model_uri": c.get("model_uri"),
            "passed": c.get("passed"), "reason": c.get("reason"),
            "dominated_by_base": (result.get("dominated") or {}).get(c.get("recipe", "")) if not is_base(c) else None,
            "figures": {o: objective_value(c, o) for o in OBJECTIVES},
            "accuracy": {"passed": acc.get("passed"), "verdict": acc.get("verdict"), "thresholds": acc.get("thresholds"),
                         "worst_recovery": acc.get("worst_recovery"),
                         **{k: acc.get(k) for k in ("rule", "alpha", "multiple_comparisons", "comparisons", "power")},
                         "metrics": [{k: r.get(k) for k in ("task", "metric", "base", "candidate", "recovery",
                                                            "min_recovery", "decided_by", "paired", "decision",
                                                            "margin", "p_value", "p_adjusted", "mdl")}
                                     for r in acc.get("rows") or []]},
            "slo": {"passed": slo.get("passed"), "thresholds": slo.get("thresholds"), "rule": slo.get("rule"),
                    "reason": slo.get("reason"),
                    # candidate / base per level: the ratio, its 95% interval and what it says (none for the base)
                    "comparison": [{k: r.get(k) for k in ("level", "load", "figure", "ratio", "low", "high", "words",
                                                          "note", "repeats")}
                                   for r in (slo.get("comparison") or {}).get("rows") or []],
                    "base_source": slo.get("base_source"),
                    # goodput at the SLO as N x the recorded peak (None without a replayed workload)
                    "capacity": slo.get("capacity"),
                    # TTFT/ITL p99, error rate and goodput measured on the replay itself (None without one)
                    "replay": slo.get("replay")},
            "benchmark_source": c.get("benchmark_source") if is_base(c) else None,
            "safety": {"enabled": safety.get("enabled"), "passed": safety.get("passed"), "verdict": safety.get("verdict"),
                       "reason": safety.get("reason")},
            "tuning": (c.get("tuning") or {}).get("best_vllm_args"),
            # the recorded workload its benchmark replayed: a later run can say "same workload" by the digest
            "workload": c.get("workload"),
            **({"eval_sets": _decision_eval_sets(c["eval_sets"])} if c.get("eval_sets") is not None else {}),
        })
    return {
        "schema": DECISION_SCHEMA,
        "objective": result["objective"],
        "champion": doc["winner"],
        "kept_base": bool(doc.get("kept_base")),
        "headline": result.get("headline", result["reason"]),
        "why": result["reason"],
        "base": next((g for g in gates if g["is_base"]), None),
        # the base model as the run named it and as the pin step pinned it (None: not given to the step)
        "base_model": doc.get("base_model"),
        "dominance": {"rule": "a compressed candidate is not eligible when the base is at least as good on both "
                              "accuracy (its largest loss > 0 is worse) and the objective, and better on one",
                      "dominated": dict(result.get("dominated") or {})},
        "serving": doc.get("serving"),
        "candidates": gates,
        "frontier": front,
        "statistics": {"accuracy": METHOD + " Evaluation parity is checked first; recovery = candidate / base is "
                                            "shown on every row.",
                       "slo": "per load level: TTFT p99, ITL p99, output tok/s, error rate, goodput; highest "
                              "load meeting the SLO",
                       "performance_comparison": NOISE_METHOD},
        "base_measured": _base_measured(candidates),
    }


def _base_measured(candidates: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the base's benchmark figures come from: ``{"source": "this run"}`` or the cache's record
    (``measured_at``, ``age_seconds``, ``origin``, ``hardware``, ``text``); ``unknown`` without a base."""
    base = next((c for c in candidates if is_base(c)), None)
    if base is not None and base.get("benchmark_source"):
        return dict(base["benchmark_source"])
    said = next((slo_of(c).get("base_source") for c in candidates if slo_of(c).get("base_source")),
                None)
    return dict(said) if said else {"source": "unknown"}


def with_verification(record: DecisionRecord | None, verification: dict[str, Any], deployment: dict[str, Any],
                      checks: list[dict[str, Any]] | None = None) -> DecisionRecord:
    """The decision record with the deploy step's outcome: ``verification`` (ran, passed, reason or why
    it did not run, where, the failed checks, the golden match and every check's row) and
    ``deployment`` (name, namespace, status, URL, rollout, and ``engine``: the image that serves and
    where it came from next to the engine the SLO gate benchmarked, and whether they are the same
    build). ``record`` is select_champion's
    decision-record.json, or None (the promote pipeline has no selection: a record naming the
    champion is started here). A check that was not compared keeps ``compared: false``."""
    out: DecisionRecord = cast(DecisionRecord, dict(record)) if record else {
        "schema": DECISION_SCHEMA, "champion": deployment.get("champion", ""),
        "why": "promoted candidate (no selection in this run)"}
    keep = ("ran", "passed", "reason", "why", "where", "failed_checks", "golden")
    section: dict[str, Any] = {k: verification[k] for k in keep if k in verification}
    section["outcome"] = ("passed" if verification.get("passed") else "failed") if verification.get("ran") \
        else "not run"
    if checks is not None:
        section["checks"] = [{k: c.get(k) for k in ("name", "measured", "reference", "threshold", "passed", "compared", "note")}
                             for c in checks]
    out["verification"] = section
    out["deployment"] = {k: v for k, v in deployment.items() if k != "champion"}
    return out


def champion_selection(path: str) -> dict[str, Any]:
    """``selection.json`` of the select step (its folder or the file) and the champion's record;
    a single candidate's ``candidate.json`` folder (the promote pipeline) is its own champion."""
    p = Path(path)
    if p.is_dir() and (p / CANDIDATE_FILE).is_file() and not (p / SELECTION_FILE).is_file():
        record = load_candidate(p)
        return {"objective": "gates", "winner": record["recipe"], "decisions": {record["recipe"]: record["reason"]},
                "candidates": [record], "champion": record}
    doc = load_selection(p)
    winner = next((c for c in doc.get("candidates", []) if c.get("recipe") == doc.get("winner")), None)
    if winner is None:
        raise ShipyardError("selection", "names no champion", "run register only when select_champion found one")
    return {**doc, "champion": winner}


def base_model_record(uri: str, pinned_uri: str = "", fingerprint: str = "") -> dict[str, str] | None:
    """The base model as the run named it, for ``selection.json`` and ``decision-record.json``:
    ``uri`` as the user gave it (the pipeline's ``model_uri``), ``pinned_uri`` what the pin step
    resolved it to (an ``hf://`` branch, tag or nothing pinned to its commit; any other URI
    unchanged), ``fingerprint`` the content the pin step recorded (the hub commit, the S3 objects'
    or a folder's digest, the OCI digest). None without ``uri``. A URI carrying credentials is
    refused (the pin step refuses it before anything runs), so the record never holds one."""
    uri, pinned_uri = uri.strip(), pinned_uri.strip()
    if not uri:
        return None
    refuse_credentials(uri, "model_uri")
    refuse_credentials(pinned_uri, "model_uri")
    return {"uri": uri, "pinned_uri": pinned_uri or uri, "fingerprint": fingerprint}


def recorded_base_uri(selection: dict[str, Any]) -> str:
    """The base model's URI a selection record names (``base_model.uri``, as the user gave it), or ""
    for a record that names none (a candidate.json, a record written before the select step kept it).
    A URI carrying credentials (a hand-edited record) is refused, never shown."""
    base = selection.get("base_model")
    uri = str(base.get("uri") or "").strip() if isinstance(base, dict) else ""
    refuse_credentials(uri, "base_model.uri")
    return uri
