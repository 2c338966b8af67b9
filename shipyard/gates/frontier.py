"""The quality-aware goodput frontier: which quantization, with which vLLM settings.

Every measured serving configuration of every candidate is one point with two coordinates
that the gates already measure for the same model: **accuracy recovery** (the worst gated
metric's recovery, with its paired interval when sample logs exist) and **goodput per GPU**
(output tokens/s at the highest load meeting the SLO, divided by the GPUs of one replica). A
candidate without a search has one point (its benchmark). The **Pareto front** is the set of
points no other point beats on both axes; points of candidates that failed a gate are drawn grey
and never on the front. The champion is the selection's (its objective decides); this report
says where it sits, which configuration it serves with, and, for every dominated candidate,
which point dominates it.

``frontier.json`` (schema ``shipyard.frontier/v1``) holds the same, for machines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shipyard.core.report import Doc, fmt

SCHEMA = "shipyard.frontier/v1"


def _worst_row(cand: dict[str, Any]) -> dict[str, Any] | None:
    rows = [r for r in (cand.get("accuracy") or {}).get("rows", []) if r.get("gated") and r.get("recovery") is not None]
    return min(rows, key=lambda r: r["recovery"], default=None)


def _single_point(cand: dict[str, Any], throughput: Callable[[dict[str, Any]], float | None]) -> dict[str, Any]:
    """A candidate benchmarked once: its highest SLO-meeting level as the one point."""
    value = throughput(cand)
    return {"index": 0, "point": {}, "vllm_args": [], "value": value, "output_tokens_per_s_per_gpu": value,
            "status": "measured", "best": True, "changes_outputs": False, "seconds": None}


def points(candidates: list[dict[str, Any]], throughput: Callable[[dict[str, Any]], float | None]) -> list[dict[str, Any]]:
    """Every measured point of every candidate, with its recovery, goodput per GPU and gate status
    (``throughput``: a candidate's output tok/s at the highest load meeting the SLO, for one
    benchmarked without a search)."""
    out = []
    for cand in candidates:
        worst = _worst_row(cand)
        paired = (worst or {}).get("paired") or {}
        tuning = cand.get("tuning") or {}
        for p in tuning.get("points") or [_single_point(cand, throughput)]:
            if p.get("status") != "measured":
                continue
            out.append({
                "candidate": cand.get("recipe"),
                "config": p.get("vllm_args") or [],
                "point": p.get("point") or {},
                "recovery": (cand.get("accuracy") or {}).get("worst_recovery"),
                "recovery_low": paired.get("recovery_low"),
                "recovery_high": paired.get("recovery_high"),
                "worst_metric": f"{worst['task']} {worst['metric']}" if worst else None,
                "goodput_per_gpu": p.get("output_tokens_per_s_per_gpu"),
                "output_tokens_per_s": p.get("value"),
                "ttft_p99_ms": p.get("ttft_p99_ms"),
                "itl_p99_ms": p.get("itl_p99_ms"),
                "kv_cache_tokens": p.get("kv_cache_tokens"),
                "size_bytes": cand.get("size_bytes"),
                "passed_gates": bool(cand.get("passed")) and p.get("value") is not None,
                "changes_outputs": bool(p.get("changes_outputs")),
                "best_of_candidate": bool(p.get("best")),
                "search_seconds": p.get("seconds"),
            })
    return out


def _dominates(a: dict[str, Any], b: dict[str, Any]) -> bool:
    ax, ay, bx, by = a["goodput_per_gpu"], a["recovery"], b["goodput_per_gpu"], b["recovery"]
    if None in (ax, ay, bx, by):
        return False
    return ax >= bx and ay >= by and (ax > bx or ay > by)


def frontier(candidates: list[dict[str, Any]], champion: str,
             throughput: Callable[[dict[str, Any]], float | None]) -> dict[str, Any]:
    """The frontier document: every point, the Pareto front over the points that passed the
    gates, the champion's configuration, and what dominates each dominated candidate."""
    pts = points(candidates, throughput)
    eligible = [p for p in pts if p["passed_gates"] and not p["changes_outputs"]
                and p["goodput_per_gpu"] is not None and p["recovery"] is not None]
    for p in pts:
        p["on_front"] = p in eligible and not any(_dominates(q, p) for q in eligible)
    dominated = {}
    for cand in {p["candidate"] for p in eligible}:
        own = [p for p in eligible if p["candidate"] == cand]
        if any(p["on_front"] for p in own):
            continue
        best = max(own, key=lambda p: p["goodput_per_gpu"])
        by = next((q for q in eligible if _dominates(q, best)), None)
        if by is not None:
            dominated[cand] = {"by": by["candidate"], "config": by["config"], "goodput_per_gpu": by["goodput_per_gpu"],
                               "recovery": by["recovery"]}
    champ = next((p for p in pts if p["candidate"] == champion and p["best_of_candidate"]), None)
    return {"schema": SCHEMA, "axes": {"x": "output tok/s per GPU at the highest load meeting the SLO",
                                       "y": "worst gated accuracy recovery"},
            "points": pts, "front": [i for i, p in enumerate(pts) if p["on_front"]],
            "champion": {"candidate": champion, "vllm_args": champ["config"] if champ else None,
                         "on_front": bool(champ and champ["on_front"])},
            "dominated": dominated}


def _label(p: dict[str, Any]) -> str:
    cfg = " ".join(p["config"]) if p["config"] else "defaults"
    return f"{p['candidate']} [{cfg}]"


def plot_png(doc: dict[str, Any]) -> bytes | None:
    """Recovery against goodput per GPU, one marker per point, the front joined, grey = failed a gate."""
    pts = [p for p in doc["points"] if p["goodput_per_gpu"] is not None and p["recovery"] is not None]
    if not pts:
        return None
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.2), dpi=110)
    names = sorted({p["candidate"] for p in pts})
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for n, name in enumerate(names):
        mine = [p for p in pts if p["candidate"] == name]
        ok = [p for p in mine if p["passed_gates"]]
        bad = [p for p in mine if not p["passed_gates"]]
        if ok:
            ax.scatter([p["goodput_per_gpu"] for p in ok], [p["recovery"] for p in ok], s=46,
                       color=colours[n % len(colours)], label=name, zorder=3)
            for p in ok:
                if p["recovery_low"] is not None and p["recovery_high"] is not None:
                    ax.errorbar(p["goodput_per_gpu"], p["recovery"], color=colours[n % len(colours)], alpha=0.5,
                                yerr=[[max(0.0, p["recovery"] - p["recovery_low"])],
                                      [max(0.0, p["recovery_high"] - p["recovery"])]], capsize=3, zorder=2)
        if bad:
            ax.scatter([p["goodput_per_gpu"] for p in bad], [p["recovery"] for p in bad], s=46, color="#bbbbbb",
                       label=f"{name} (failed a gate)", zorder=2)
    front = sorted((p for p in pts if p.get("on_front")), key=lambda p: p["goodput_per_gpu"])
    if front:
        ax.plot([p["goodput_per_gpu"] for p in front], [p["recovery"] for p in front], "--", color="#444444",
                lw=1, label="Pareto front", zorder=1)
    champ = doc["champion"]
    for p in pts:
        if p["candidate"] == champ["candidate"] and p["config"] == (champ["vllm_args"] or []) and p["best_of_candidate"]:
            ax.scatter([p["goodput_per_gpu"]], [p["recovery"]], s=260, marker="*", color="#e6a700",
                       edgecolor="black", zorder=4, label="champion")
    for p in pts:
        ax.annotate(" ".join(p["config"]) or "defaults", (p["goodput_per_gpu"], p["recovery"]), fontsize=7,
                    xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel(doc["axes"]["x"])
    ax.set_ylabel(doc["axes"]["y"])
    ax.set_title("Accuracy and goodput on the same axes")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def add_section(doc_out: Doc, doc: dict[str, Any], with_plot: bool = True) -> None:
    """The frontier as a report section: the picture, every point, the champion's configuration."""
    doc_out.h(2, "Frontier: accuracy and goodput on the same axes")
    champ = doc["champion"]
    if champ["candidate"]:
        cfg = " ".join(champ["vllm_args"]) if champ["vllm_args"] else "the benchmark's defaults"
        doc_out.p(f"champion {champ['candidate']} serves with {cfg}"
                  + (" (on the Pareto front)" if champ["on_front"] else " (not on the Pareto front: the selection "
                     "objective preferred it)"), "Champion:")
    for cand, why in sorted(doc["dominated"].items()):
        doc_out.p(f"{cand} is dominated by {why['by']} [{' '.join(why['config']) or 'defaults'}]: "
                  f"{fmt(why['goodput_per_gpu'])} tok/s per GPU at recovery {fmt(why['recovery'])}.", "Dominated:")
    if with_plot and (png := plot_png(doc)):
        doc_out.image("recovery against goodput per GPU", png)
    rows = [[p["candidate"], " ".join(p["config"]) or "defaults", fmt(p["recovery"]),
             "–" if p["recovery_low"] is None else f"[{fmt(p['recovery_low'])}, {fmt(p['recovery_high'])}]",
             fmt(p["goodput_per_gpu"]), fmt(p["ttft_p99_ms"]), fmt(p["itl_p99_ms"]), fmt(p["kv_cache_tokens"]),
             "yes" if p["on_front"] else "", "pass" if p["passed_gates"] else "FAIL",
             "yes" if p["changes_outputs"] else ""] for p in doc["points"]]
    doc_out.table(["candidate", "vLLM settings", "worst recovery", "paired interval", "tok/s per GPU at SLO",
                   "TTFT p99 ms", "ITL p99 ms", "KV-cache tokens", "front", "gates", "changes outputs"], rows)
