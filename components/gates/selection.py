"""Fan-in: rank the candidates that passed both gates by the declared objective, pick one
champion, and write the candidates report (Markdown and self-contained HTML with a plot).

Objectives (the ``selection`` parameter, see :class:`~shipyard.components.gates.config.SelectionConfig`):

* ``throughput``: output tokens/s at the highest load level that still meets the SLO;
* ``size``: the smallest model on disk;
* ``recovery``: the best worst-case accuracy recovery against the base;
* ``kv_cache``: the most KV-cache tokens the memory planner finds on the benchmark's GPU.

Ties go to the next objective in ``then``, then to the recipe listed first. Every candidate
gets a line saying why it won or lost.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

from shipyard.components.gates.config import SelectionConfig, selection_config
from shipyard.components.gates.report import fmt
from shipyard.fsutil import atomic_write_text

LABELS = {
    "throughput": "output tok/s at the highest load meeting the SLO",
    "size": "size on disk (smaller is better)",
    "recovery": "worst accuracy recovery vs base",
    "kv_cache": "KV-cache tokens (memory planner)",
}


def _slo_level(cand: dict[str, Any]) -> dict[str, Any] | None:
    """The level at the highest load that meets the SLO (from the SLO gate's figures)."""
    rps = (cand.get("slo") or {}).get("metrics", {}).get("highest_load_meeting_slo_rps")
    levels = [lv for lv in cand.get("levels") or [] if lv.get("requests_per_s") is not None]
    if not rps or not levels:
        return None
    return min(levels, key=lambda lv: abs(float(lv["requests_per_s"]) - float(rps)))


def objective_value(cand: dict[str, Any], objective: str) -> float | None:
    """The candidate's figure for ``objective`` (None when it has none)."""
    if objective == "throughput":
        level = _slo_level(cand)
        return None if level is None else level.get("output_tokens_per_s")
    if objective == "size":
        return cand.get("size_bytes")
    if objective == "recovery":
        return (cand.get("accuracy") or {}).get("worst_recovery")
    if objective == "kv_cache":
        return (cand.get("planner") or {}).get("kv_cache_tokens")
    raise ValueError(objective)


def _sort_key(cand: dict[str, Any], order: list[str]) -> tuple[float, ...]:
    key = []
    for objective in order:
        value = objective_value(cand, objective)
        if value is None:
            key.append(float("inf"))
        else:
            key.append(float(value) if objective == "size" else -float(value))
    return tuple(key)


def select(candidates: list[dict[str, Any]], selection: str | SelectionConfig = "") -> dict[str, Any]:
    """Rank the passing candidates; returns ``{"winner", "ranking", "decisions", "objective"}``.

    ``winner`` is the champion's record (None when no candidate passed both gates);
    ``decisions`` says for each recipe why it won or lost.
    """
    cfg = selection if isinstance(selection, SelectionConfig) else selection_config(selection)
    order = [cfg.objective] + [o for o in cfg.then if o != cfg.objective]
    indexed = list(enumerate(candidates))
    passing = [(i, c) for i, c in indexed if c.get("passed")]
    ranked = sorted(passing, key=lambda ic: (_sort_key(ic[1], order), ic[0]))
    winner = ranked[0][1] if ranked else None
    decisions: dict[str, str] = {}
    label = LABELS[cfg.objective]
    for rank, (_, cand) in enumerate(ranked, start=1):
        value = fmt(objective_value(cand, cfg.objective))
        if rank == 1:
            runner_up = ranked[1][1] if len(ranked) > 1 else None
            versus = (f" vs {fmt(objective_value(runner_up, cfg.objective))} for {runner_up['recipe']}"
                      if runner_up else " (the only candidate that passed both gates)")
            decisions[cand["recipe"]] = f"champion: {label} {value}{versus}"
        else:
            decisions[cand["recipe"]] = (f"rank {rank}: {label} {value} vs {fmt(objective_value(winner, cfg.objective))} "
                                         f"for the champion {winner['recipe']}")
    for _, cand in indexed:
        if not cand.get("passed"):
            decisions[cand["recipe"]] = f"not eligible: {cand.get('reason', 'a gate failed')}"
    if winner is None:
        reason = "no candidate passed both gates: " + "; ".join(f"{c['recipe']}: {c.get('reason', '')}" for c in candidates)
    else:
        reason = f"champion {winner['recipe']} by {cfg.objective}: {decisions[winner['recipe']].removeprefix('champion: ')}"
    return {
        "objective": cfg.objective,
        "order": order,
        "winner": winner,
        "reason": reason,
        "ranking": [c["recipe"] for _, c in ranked],
        "decisions": decisions,
    }


# --------------------------------------------------------------------------- report


def _level_names(candidates: list[dict[str, Any]]) -> list[str]:
    names: list[str] = []
    for cand in candidates:
        for lv in cand.get("base_levels", []) + cand.get("levels", []):
            if lv["name"] not in names:
                names.append(lv["name"])
    return names


def _mb(value: Any) -> str:
    return "–" if not value else f"{float(value) / 1e6:.1f} MB"


def report_markdown(result: dict[str, Any], candidates: list[dict[str, Any]]) -> str:
    """All candidates side by side, the winner and why."""
    levels = _level_names(candidates)
    lines = ["# Candidates", "", f"**{result['reason']}**", "",
             f"Objective: `{result['objective']}` ({LABELS[result['objective']]}); ties: {', '.join(result['order'][1:])}.", ""]
    head = ["recipe", "decision", "accuracy gate", "SLO gate", "worst recovery", "size", "ratio",
            "planner weights", "planner KV tokens"]
    for name in levels:
        head += [f"{name} TTFT p99 ms", f"{name} ITL p99 ms", f"{name} out tok/s"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base = candidates[0] if candidates else {}
    if base:
        row = ["base", "reference", "", "", "1", _mb(base.get("base_size_bytes")), "1",
               _mb((base.get("base_planner") or {}).get("weights_bytes")),
               fmt((base.get("base_planner") or {}).get("kv_cache_tokens"))]
        by_name = {lv["name"]: lv for lv in base.get("base_levels", [])}
        for name in levels:
            lv = by_name.get(name, {})
            row += [fmt(lv.get("ttft_p99_ms"), 1), fmt(lv.get("itl_p99_ms"), 1), fmt(lv.get("output_tokens_per_s"), 1)]
        lines.append("| " + " | ".join(row) + " |")
    for cand in candidates:
        acc, slo = cand.get("accuracy") or {}, cand.get("slo") or {}
        mark = "**champion**" if result["winner"] and cand["recipe"] == result["winner"]["recipe"] else (
            "passed" if cand.get("passed") else "failed")
        row = [f"`{cand['recipe'][:40]}`", mark, "pass" if acc.get("passed") else "FAIL",
               "pass" if slo.get("passed") else "FAIL", fmt(acc.get("worst_recovery")), _mb(cand.get("size_bytes")),
               fmt(cand.get("compression_ratio"), 2), _mb((cand.get("planner") or {}).get("weights_bytes")),
               fmt((cand.get("planner") or {}).get("kv_cache_tokens"))]
        by_name = {lv["name"]: lv for lv in cand.get("levels", [])}
        for name in levels:
            lv = by_name.get(name, {})
            row += [fmt(lv.get("ttft_p99_ms"), 1), fmt(lv.get("itl_p99_ms"), 1), fmt(lv.get("output_tokens_per_s"), 1)]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "## Why each candidate won or lost", ""]
    for recipe, why in result["decisions"].items():
        lines.append(f"- `{recipe[:60]}`: {why}")
    metrics = sorted({f"{r['task']}/{r['metric'].replace(',none', '')}" for c in candidates
                      for r in (c.get("accuracy") or {}).get("rows", [])})
    if metrics:
        lines += ["", "## Accuracy recovery per metric", "",
                  "| metric | base | " + " | ".join(f"`{c['recipe'][:30]}`" for c in candidates) + " |",
                  "|---|---:|" + "---:|" * len(candidates)]
        for metric in metrics:
            cells, base_value = [], None
            for cand in candidates:
                row = next((r for r in (cand.get("accuracy") or {}).get("rows", [])
                            if f"{r['task']}/{r['metric'].replace(',none', '')}" == metric), None)
                if row is None:
                    cells.append("–")
                    continue
                base_value = row["base"] if base_value is None else base_value
                cells.append(f"{fmt(row['candidate'])} ({fmt(row['recovery'])}{'' if row['passed'] else ' FAIL'})")
            lines.append(f"| {metric} | {fmt(base_value)} | " + " | ".join(cells) + " |")
        lines += ["", "Cells: candidate score (recovery = candidate/base, or base/candidate when lower is better)."]
    return "\n".join(lines) + "\n"


def plot_png(candidates: list[dict[str, Any]]) -> bytes:
    """Output tok/s and TTFT p99 per load level (base and every candidate), size and worst recovery."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = _level_names(candidates)
    series = []
    if candidates:
        series.append(("base", candidates[0].get("base_levels", []), candidates[0].get("base_size_bytes"), 1.0))
    for cand in candidates:
        series.append((cand["recipe"][:24], cand.get("levels", []), cand.get("size_bytes"),
                       (cand.get("accuracy") or {}).get("worst_recovery")))
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
    width = 0.8 / max(1, len(series))
    for k, (figure, title) in enumerate((("output_tokens_per_s", "output tok/s per load"),
                                         ("ttft_p99_ms", "TTFT p99 (ms) per load"))):
        ax = axes[k]
        for i, (name, lvls, _, _) in enumerate(series):
            by_name = {lv["name"]: lv for lv in lvls}
            values = [float(by_name.get(n, {}).get(figure) or 0.0) for n in levels]
            ax.bar([j + i * width for j in range(len(levels))], values, width, label=name)
        ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(levels))], levels, fontsize=7)
        ax.set_title(title, fontsize=9)
    axes[0].legend(fontsize=7)
    names = [s[0] for s in series]
    axes[2].bar(names, [float(s[2] or 0) / 1e6 for s in series], color="tab:gray")
    axes[2].set_title("size (MB)", fontsize=9)
    axes[3].bar(names, [float(s[3] or 0) for s in series], color="tab:green")
    axes[3].set_title("worst accuracy recovery", fontsize=9)
    for ax in axes[2:]:
        ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def report_html(result: dict[str, Any], candidates: list[dict[str, Any]], markdown: str) -> str:
    """A self-contained HTML page: the plot (inline PNG) and the tables (nothing loads from the network)."""
    png = base64.b64encode(plot_png(candidates)).decode()
    body = []
    in_table = False
    for line in markdown.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if set("".join(cells)) <= set("-:"):
                continue
            if not in_table:
                body.append("<table border='1' cellpadding='4' style='border-collapse:collapse;font-size:13px'>")
                in_table = True
                body.append("<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cells) + "</tr>")
                continue
            body.append("<tr>" + "".join(f"<td>{html.escape(c.replace('**', '').replace('`', ''))}</td>" for c in cells) + "</tr>")
            continue
        if in_table:
            body.append("</table>")
            in_table = False
        if line.startswith("# "):
            body.append(f"<h1>{html.escape(line[2:])}</h1><img alt='candidates plot' src='data:image/png;base64,{png}'>")
        elif line.startswith("## "):
            body.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("- "):
            body.append(f"<li>{html.escape(line[2:].replace('`', ''))}</li>")
        elif line.strip():
            body.append(f"<p>{html.escape(line.replace('**', '').replace('`', ''))}</p>")
    if in_table:
        body.append("</table>")
    return ("<!doctype html><html><head><meta charset='utf-8'><title>shipyard candidates</title></head>"
            "<body style='font-family:sans-serif'>" + "\n".join(body) + "</body></html>")


def select_champion(candidate_dirs: list[str], selection: str, out_dir: str, report_md: str, report_html_path: str) -> dict[str, Any]:
    """Read every candidate record, select, write ``selection.json`` and both reports.

    Returns ``{"winner", "winner_model_uri", "reason", "metrics", "decisions"}``; ``winner`` is
    the champion's recipe, or empty when no candidate passed both gates.
    """
    from shipyard.components.gates.candidate import load_candidate

    candidates = [load_candidate(path) for path in candidate_dirs]
    result = select(candidates, selection)
    markdown = report_markdown(result, candidates)
    atomic_write_text(report_md, markdown)
    atomic_write_text(report_html_path, report_html(result, candidates, markdown))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    winner = result["winner"] or {}
    doc = {k: v for k, v in result.items() if k != "winner"}
    doc["winner"] = winner.get("recipe", "")
    doc["candidates"] = candidates
    atomic_write_text(out / "selection.json", json.dumps(doc, indent=2, default=str))
    metrics = {"candidates": float(len(candidates)), "passed": float(sum(bool(c.get("passed")) for c in candidates))}
    value = objective_value(winner, result["objective"]) if winner else None
    if value is not None:
        metrics[f"champion.{result['objective']}"] = float(value)
    return {"winner": winner.get("recipe", ""), "winner_model_uri": winner.get("model_uri", ""), "reason": result["reason"],
            "metrics": metrics, "decisions": result["decisions"], "objective": result["objective"],
            "champion": winner}
