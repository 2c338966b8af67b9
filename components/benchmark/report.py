"""The benchmark report: one self-contained HTML page (plots inline) and a Markdown summary.

Plots (matplotlib, PNG embedded as base64 so the KFP UI shows them without extra files):
TTFT p50/p99, ITL p50/p99 and output tokens/s against load (achieved requests/s) for base vs
candidate, with the SLO thresholds drawn in, and goodput per load level.
"""

from __future__ import annotations

import base64
import html
import io
from typing import Any

BASE_COLOR = "#1f77b4"
CAND_COLOR = "#d62728"


def _f(v: Any, digits: int = 4) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def plot_png(decision: dict[str, Any], base: dict[str, Any] | None, cand: dict[str, Any] | None) -> bytes | None:
    """The four-panel comparison figure as PNG bytes (None without matplotlib or data)."""
    if not base and not cand:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    slo = decision.get("slo") or {}
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    panels = [
        (axes[0][0], "ttft_ms", "TTFT (ms)", slo.get("ttft_p99_ms")),
        (axes[0][1], "itl_ms", "inter-token latency (ms)", slo.get("itl_p99_ms")),
    ]
    series = [(base, "base", BASE_COLOR), (cand, "candidate", CAND_COLOR)]
    for ax, key, label, limit in panels:
        for res, name, color in series:
            if not res:
                continue
            lv = sorted(res["levels"], key=lambda x: x["requests_per_s"])
            xs = [x["requests_per_s"] for x in lv]
            for q, style in (("p99", "-o"), ("p50", "--.")):
                ys = [x[key][q] for x in lv]
                if any(y is not None for y in ys):
                    ax.plot(xs, [float("nan") if y is None else y for y in ys], style, color=color, label=f"{name} {q}")
        if limit:
            ax.axhline(limit, color="black", linestyle=":", label=f"SLO p99 {limit:g}")
        ax.set_yscale("log")  # the SLO line and the measured figures can be orders apart
        ax.set_xlabel("load (requests/s)")
        ax.set_ylabel(label)
        ax.set_title(f"{label} vs load")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax = axes[1][0]
    for res, name, color in series:
        if not res:
            continue
        lv = sorted(res["levels"], key=lambda x: x["requests_per_s"])
        ax.plot([x["requests_per_s"] for x in lv], [x["output_tokens_per_s"] for x in lv], "-o", color=color, label=name)
    if slo.get("min_output_tokens_per_s"):
        ax.axhline(slo["min_output_tokens_per_s"], color="black", linestyle=":", label="SLO min tok/s")
    ax.set_xlabel("load (requests/s)")
    ax.set_ylabel("output tokens/s")
    ax.set_title("throughput vs load")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax = axes[1][1]
    bver = decision.get("base_levels") or []
    cver = decision.get("candidate_levels") or []
    names = [v["name"] for v in (cver or bver)]
    width = 0.4
    idx = list(range(len(names)))
    if bver:
        ax.bar([i - width / 2 for i in idx[: len(bver)]], [v["goodput"] for v in bver][: len(idx)], width, color=BASE_COLOR, label="base")
    if cver:
        ax.bar([i + width / 2 for i in idx], [v["goodput"] for v in cver], width, color=CAND_COLOR, label="candidate")
    if slo.get("min_goodput"):
        ax.axhline(slo["min_goodput"], color="black", linestyle=":", label="SLO min goodput")
    ax.set_xticks(idx, names, rotation=20, fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("goodput (share of requests meeting the SLO)")
    ax.set_title("goodput per load level")
    if bver or cver:
        ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def _level_rows(res: dict[str, Any], verdicts: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for i, lv in enumerate(res["levels"]):
        v = verdicts[i] if i < len(verdicts) else {}
        rows.append([
            lv["name"], _f(lv["requests_per_s"]), _f(lv["output_tokens_per_s"]),
            f"{_f(lv['ttft_ms']['p50'])} / {_f(lv['ttft_ms']['p90'])} / {_f(lv['ttft_ms']['p99'])}",
            f"{_f(lv['itl_ms']['p50'])} / {_f(lv['itl_ms']['p90'])} / {_f(lv['itl_ms']['p99'])}",
            f"{_f(lv['tpot_ms']['p50'])} / {_f(lv['tpot_ms']['p99'])}",
            f"{_f(lv['latency_s']['p50'])} / {_f(lv['latency_s']['p99'])}",
            f"{lv['successful']} / {lv['errored']} / {lv['incomplete']}",
            _f(v.get("goodput")),
            ("meets" if v.get("meets") else "misses: " + "; ".join(v.get("failures") or [])) if v else "–",
        ])
    return rows


_LEVEL_HEAD = ["load", "req/s", "out tok/s", "TTFT p50/p90/p99 ms", "ITL p50/p90/p99 ms", "TPOT p50/p99 ms",
               "latency p50/p99 s", "ok/err/incomplete", "goodput", "SLO"]


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>")
    return "\n".join(out) + "</table>"


def _memory_rows(res: dict[str, Any] | None) -> list[list[str]]:
    mem = (res or {}).get("memory") or {}
    v, p = mem.get("vllm") or {}, mem.get("planner") or {}
    gib = 2**30
    return [
        ["KV cache tokens", _f(v.get("kv_cache_tokens")), _f(p.get("kv_cache_tokens"))],
        ["max concurrency at max-model-len", _f(v.get("max_concurrency")), _f(p.get("max_concurrency"))],
        ["KV cache GiB per GPU", _f(v.get("kv_cache_gib")),
         _f(p["kv_cache_bytes_per_gpu"] / gib) if p.get("kv_cache_bytes_per_gpu") is not None else "–"],
        ["weights GiB (vLLM: loaded, or checkpoint on CPU)", _f(v.get("weights_gib", v.get("checkpoint_gib"))),
         _f(p["weights_bytes"] / gib) if p.get("weights_bytes") is not None else "–"],
        ["max model len", _f(v.get("max_model_len")), _f(p.get("max_model_len"))],
    ]


def html_report(decision: dict[str, Any], base: dict[str, Any] | None, cand: dict[str, Any] | None) -> str:
    """The gate's HTML artifact: decision, plots, per-level tables, ratios, memory, configs."""
    passed = bool(decision.get("passed"))
    png = plot_png(decision, base, cand)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>shipyard SLO gate</title><style>",
        "body{font-family:sans-serif;margin:1.5em;max-width:1200px}table{border-collapse:collapse;margin:.5em 0 1.5em}"
        "td,th{border:1px solid #ccc;padding:3px 7px;font-size:13px;text-align:right}th{background:#f4f4f4}"
        "td:first-child{text-align:left}.pass{color:#17803d}.fail{color:#b3261e}code{background:#f4f4f4}",
        "</style></head><body>",
        f"<h1 class='{'pass' if passed else 'fail'}'>SLO gate: {'PASS' if passed else 'FAIL'}</h1>",
        f"<p><b>Decision:</b> {'promote' if passed else 'do not promote'}. {html.escape(str(decision.get('reason')))}</p>",
    ]
    slo = decision.get("slo")
    if slo:
        parts.append("<p><b>SLO:</b> <code>" + html.escape(str(slo)) + "</code></p>")
    for key, label in (("candidate_highest_load", "candidate"), ("base_highest_load", "base")):
        best = decision.get(key)
        if key in decision:
            parts.append(
                f"<p>Highest load meeting the SLO ({label}): "
                + (html.escape(f"{best['name']} at {best['requests_per_s']:.4g} requests/s") if best else "none")
                + "</p>"
            )
    if png:
        parts.append("<img alt='latency and throughput vs load' src='data:image/png;base64,"
                     + base64.b64encode(png).decode() + "'/>")
    for res, label, key in ((cand, "Candidate", "candidate_levels"), (base, "Base", "base_levels")):
        if res:
            parts.append(f"<h2>{label}: {html.escape(str(res.get('model_name')))}</h2>")
            parts.append(_html_table(_LEVEL_HEAD, _level_rows(res, decision.get(key) or [])))
    pairs = decision.get("pairs") or []
    if pairs:
        parts.append("<h2>Candidate / base</h2>")
        parts.append(_html_table(
            ["load", "out tok/s", "req/s", "TTFT p99", "ITL p99", "latency p99"],
            [[p["name"], _f(p["output_tokens_per_s_ratio"]), _f(p["requests_per_s_ratio"]), _f(p["ttft_p99_ratio"]),
              _f(p["itl_p99_ratio"]), _f(p["latency_p99_ratio"])] for p in pairs],
        ))
    if base or cand:
        parts.append("<h2>Memory: vLLM's log vs the planner</h2>")
        for res, label in ((cand, "candidate"), (base, "base")):
            if res:
                parts.append(f"<h3>{label}</h3>" + _html_table(["figure", "vLLM log", "planner"], _memory_rows(res)))
        cfg = (cand or base or {}).get("config")
        parts.append("<h2>Benchmark config</h2><p><code>" + html.escape(str(cfg)) + "</code></p>")
        parts.append("<p>Raw guidellm JSON: <code>guidellm.json</code> in each benchmark results artifact.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def markdown_summary(decision: dict[str, Any], base: dict[str, Any] | None, cand: dict[str, Any] | None) -> str:
    """The gate's Markdown summary: decision, per-level table of the candidate, ratios."""
    passed = bool(decision.get("passed"))
    lines = [
        f"# SLO gate: {'PASS' if passed else 'FAIL'}",
        "",
        f"**Decision:** {'promote' if passed else 'do not promote'}. {decision.get('reason')}",
        "",
    ]
    if "candidate_highest_load" in decision:
        cb, bb = decision.get("candidate_highest_load"), decision.get("base_highest_load")
        lines += [
            "Highest load meeting the SLO: candidate "
            + (f"{cb['name']} ({cb['requests_per_s']:.4g} req/s)" if cb else "none")
            + ", base "
            + (f"{bb['name']} ({bb['requests_per_s']:.4g} req/s)" if bb else "none"),
            "",
        ]
    for res, label, key in ((cand, "candidate", "candidate_levels"), (base, "base", "base_levels")):
        if not res:
            continue
        lines += [f"## {label}: {res.get('model_name')}", "",
                  "| " + " | ".join(_LEVEL_HEAD) + " |", "|" + "---|" * len(_LEVEL_HEAD)]
        for row in _level_rows(res, decision.get(key) or []):
            lines.append("| " + " | ".join(c.replace("|", "/") for c in row) + " |")
        lines.append("")
    pairs = decision.get("pairs") or []
    if pairs:
        lines += ["## candidate / base", "", "| load | out tok/s | TTFT p99 | ITL p99 |", "|---|---:|---:|---:|"]
        for p in pairs:
            lines.append(f"| {p['name']} | {_f(p['output_tokens_per_s_ratio'])} | {_f(p['ttft_p99_ratio'])} | "
                         f"{_f(p['itl_p99_ratio'])} |")
    return "\n".join(lines) + "\n"
