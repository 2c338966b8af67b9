"""The benchmark report: one self-contained HTML page (plots inline) and the same content as Markdown.

Plots (matplotlib, PNG embedded as ``data:`` URLs so the KFP UI shows them without extra files
and nothing loads from the network), base and candidate on the same axes:

* TTFT p50/p99 against achieved output tokens/s, with the SLO's TTFT p99 line;
* ITL p50/p99 against achieved output tokens/s, with the SLO's ITL p99 line;
* output tokens/s against the load level (concurrency, or offered requests/s), with the SLO minimum;
* goodput per load level.

Each point is labelled with its load level; a hollow marker means its percentiles rest on fewer
than :data:`~shipyard.core.report.MIN_SAMPLES` requests, and the report says so in a
warning per level. The decision names the worst regression and the best gain; every SLO check
is a row with the measured value, the threshold and the margin; the SLO and the benchmark config
are tables.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from typing import Any

from shipyard.benchmarking.workload_fidelity import fidelity_markdown
from shipyard.core.report import (
    MIN_SAMPLES,
    Doc,
    cell,
    config_rows,
    sample_count,
    sample_warnings,
)

BASE_COLOR = "#1f77b4"
CAND_COLOR = "#d62728"


def _f(v: Any, digits: int = 4) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def png_bytes(fig: Any, plt: Any) -> bytes:
    """A matplotlib figure as PNG bytes (labels never clipped); the figure is closed."""
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", pad_inches=0.15)  # labels never clipped
    plt.close(fig)
    return buf.getvalue()


def _short(level: dict[str, Any]) -> str:
    name = str(level.get("name") or "?")
    kind, _, load = name.partition("@")
    return {"concurrent": f"c={load}", "constant": f"{load}/s", "poisson": f"{load}/s"}.get(kind, name[:6]) if load else name[:6]


def _series(base: dict[str, Any] | None, cand: dict[str, Any] | None) -> list[tuple[list[dict[str, Any]], str, str]]:
    return [(res["levels"], name, color) for res, name, color in ((base, "base", BASE_COLOR), (cand, "candidate", CAND_COLOR))
            if res and res.get("levels")]


def _few(level: dict[str, Any]) -> bool:
    n = sample_count(level)
    return n is not None and n < MIN_SAMPLES


def _maybe_log(ax: Any, values: list[float], limit: float | None = None) -> bool:
    """A log y axis when the figures span orders of magnitude, or when the SLO line sits far above
    them (a 1,000 ms ITL line over 60-100 ms figures would flatten them on a linear axis); then the
    axis spans the data and the line with a little room. Returns whether it went log."""
    positive = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not positive:
        return False
    shown = positive + ([limit] if limit and limit > 0 else [])
    if max(shown) / min(shown) > 30 or (limit and limit > 3 * max(positive)):
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

        ax.set_yscale("log")  # the SLO line and the measured figures can be orders apart
        ax.set_ylim(min(shown) / 1.4, max(shown) * 1.4)
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))  # 50, 100, 200, 500, 1000: plain numbers
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        return True
    return False


def latency_plot(key: str, label: str, limit: float | None, base: dict[str, Any] | None,
                 cand: dict[str, Any] | None) -> bytes | None:
    """``key`` (``ttft_ms`` or ``itl_ms``) p50 and p99 against achieved output tok/s, base and
    candidate on the same axes, the SLO p99 line drawn in (PNG bytes; None without data)."""
    plt = _pyplot()
    series = _series(base, cand)
    if plt is None or not series:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ys: list[float] = []
    few = False
    for levels, name, color in series:
        lv = sorted(levels, key=lambda x: x["output_tokens_per_s"])
        xs = [x["output_tokens_per_s"] for x in lv]
        for q, style in (("p99", "-"), ("p50", "--")):
            vals = [x[key][q] for x in lv]
            if all(v is None for v in vals):
                continue
            ax.plot(xs, [math.nan if v is None else v for v in vals], style, color=color, label=f"{name} {q}")
            for x, v, level in zip(xs, vals, lv, strict=True):
                if v is None:
                    continue
                hollow = _few(level)
                few = few or hollow
                ax.plot([x], [v], "o" if q == "p99" else "s", color=color, markersize=6 if q == "p99" else 4,
                        markerfacecolor="white" if hollow else color)
                ys.append(v)
                if q == "p99":
                    ax.annotate(_short(level), (x, v), textcoords="offset points", xytext=(4, 4), fontsize=7, color=color)
    if limit:
        ax.axhline(limit, color="black", linestyle=":", label=f"SLO p99 <= {limit:g} ms")
    logged = _maybe_log(ax, ys, limit)
    ax.margins(x=0.15)  # room for the level labels at both ends
    ax.set_xlabel("achieved output tokens/s")
    ax.set_ylabel(f"{label} (ms{', log scale' if logged else ''})")
    ax.set_title(f"{label} vs achieved throughput" + (f"\nhollow: < {MIN_SAMPLES} requests" if few else ""), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return png_bytes(fig, plt)


def _load_x(level: dict[str, Any]) -> float:
    for key in ("nominal_load", "concurrency_mean", "requests_per_s"):
        if level.get(key) is not None:
            return float(level[key])
    return 0.0


def _load_axis(levels: list[dict[str, Any]]) -> str:
    kinds = {str(lv.get("strategy") or str(lv.get("name", "")).partition("@")[0]) for lv in levels}
    if kinds <= {"concurrent", "synchronous"}:
        return "concurrency (streams)"
    if kinds <= {"constant", "poisson"}:
        return "offered load (requests/s)"
    return "load level"


def throughput_plot(minimum: float | None, base: dict[str, Any] | None, cand: dict[str, Any] | None) -> bytes | None:
    """Achieved output tok/s against the load level (concurrency or offered req/s), base and
    candidate, the SLO minimum drawn in (PNG bytes; None without data)."""
    plt = _pyplot()
    series = _series(base, cand)
    if plt is None or not series:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for levels, name, color in series:
        lv = sorted(levels, key=_load_x)
        ax.plot([_load_x(x) for x in lv], [x["output_tokens_per_s"] for x in lv], "-o", color=color, label=name)
        for level in lv:
            if _few(level):
                ax.plot([_load_x(level)], [level["output_tokens_per_s"]], "o", color=color, markerfacecolor="white")
    if minimum:
        ax.axhline(minimum, color="black", linestyle=":", label=f"SLO min {minimum:g} tok/s")
    ax.set_xticks(sorted({_load_x(lv) for levels, _, _ in series for lv in levels}))
    ax.set_xlabel(_load_axis([lv for levels, _, _ in series for lv in levels]))
    ax.set_ylabel("achieved output tokens/s")
    ax.set_title("throughput vs load", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return png_bytes(fig, plt)


def goodput_plot(decision: dict[str, Any]) -> bytes | None:
    """Goodput per load level (share of all requests meeting the TTFT and ITL SLO)."""
    bver = decision.get("base_levels") or []
    cver = decision.get("candidate_levels") or []
    plt = _pyplot()
    if plt is None or not (bver or cver):
        return None
    slo = decision.get("slo") or {}
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    names = [v["name"] for v in (cver or bver)]
    width = 0.4
    idx = list(range(len(names)))
    if bver:
        ax.bar([i - width / 2 for i in idx[: len(bver)]], [v["goodput"] for v in bver][: len(idx)], width,
               color=BASE_COLOR, label="base")
    if cver:
        ax.bar([i + width / 2 for i in idx], [v["goodput"] for v in cver], width, color=CAND_COLOR, label="candidate")
    if slo.get("min_goodput"):
        ax.axhline(slo["min_goodput"], color="black", linestyle=":", label=f"SLO min goodput {slo['min_goodput']:g}")
    ax.set_xticks(idx, names, rotation=20, fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of requests meeting the SLO")
    ax.set_title("goodput per load level", fontsize=10)
    ax.legend(fontsize=7)
    return png_bytes(fig, plt)


def plots(decision: dict[str, Any], base: dict[str, Any] | None, cand: dict[str, Any] | None) -> list[tuple[str, bytes]]:
    """Every plot of the report as ``(alt text, PNG)``."""
    slo = decision.get("slo") or {}
    out = [
        ("TTFT p50 and p99 vs achieved output tokens/s, base and candidate, SLO line",
         latency_plot("ttft_ms", "TTFT", slo.get("ttft_p99_ms"), base, cand)),
        ("ITL p50 and p99 vs achieved output tokens/s, base and candidate, SLO line",
         latency_plot("itl_ms", "ITL", slo.get("itl_p99_ms"), base, cand)),
        ("output tokens/s vs load level, base and candidate, SLO minimum",
         throughput_plot(slo.get("min_output_tokens_per_s"), base, cand)),
        ("goodput per load level", goodput_plot(decision)),
    ]
    return [(alt, png) for alt, png in out if png]


# --------------------------------------------------------------------------- tables

_LEVEL_HEAD = ["load", "requests (percentiles from)", "req/s", "out tok/s", "TTFT p50/p90/p99 ms", "ITL p50/p90/p99 ms",
               "TPOT p50/p99 ms", "latency p50/p99 s", "ok/err/incomplete", "goodput", "SLO"]


def _level_rows(res: dict[str, Any], verdicts: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for i, lv in enumerate(res["levels"]):
        v = verdicts[i] if i < len(verdicts) else {}
        n = sample_count(lv)
        rows.append([
            lv["name"], "–" if n is None else f"{n}" + (f" (< {MIN_SAMPLES})" if n < MIN_SAMPLES else ""),
            _f(lv["requests_per_s"]), _f(lv["output_tokens_per_s"]),
            f"{_f(lv['ttft_ms']['p50'])} / {_f(lv['ttft_ms']['p90'])} / {_f(lv['ttft_ms']['p99'])}",
            f"{_f(lv['itl_ms']['p50'])} / {_f(lv['itl_ms']['p90'])} / {_f(lv['itl_ms']['p99'])}",
            f"{_f(lv['tpot_ms']['p50'])} / {_f(lv['tpot_ms']['p99'])}",
            f"{_f(lv['latency_s']['p50'])} / {_f(lv['latency_s']['p99'])}",
            f"{lv['successful']} / {lv['errored']} / {lv['incomplete']}",
            _f(v.get("goodput")) + (f" ({v['untimed']} untimed, not judged)" if v.get("untimed") else ""),
            ("meets" if v.get("meets") else "misses: " + "; ".join(v.get("failures") or [])) if v else "–",
        ])
    return rows


def _check_rows(decision: dict[str, Any]) -> list[list[str]]:
    rows = []
    for who, key in (("candidate", "candidate_levels"), ("base", "base_levels")):
        for v in decision.get(key) or []:
            n = v.get("samples")
            for c in v.get("checks") or []:
                rows.append([who, v["name"], "–" if n is None else str(n), c["check"], _f(c["measured"]),
                             c["threshold"], "–" if c["margin"] is None else f"{c['margin']:+.4g}",
                             "pass" if c["passed"] else "FAIL", c.get("note", "")])
    return rows


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


SLO_MEANING = {
    "ttft_p99_ms": "time to first token, p99, per level (ms, at most)",
    "itl_p99_ms": "inter-token latency, p99, per level (ms, at most)",
    "min_output_tokens_per_s": "achieved output tokens/s per level (at least)",
    "max_error_rate": "errored + incomplete requests / all requests (at most)",
    "min_goodput": "share of requests meeting the TTFT and ITL SLO (at least)",
    "require": "which levels must meet the SLO",
    "min_throughput_ratio": "candidate / base output tok/s per level (at least)",
    "max_latency_ratio": "candidate / base TTFT p99 and ITL p99 per level (at most)",
    "judge_replay": "a replay of your recorded workload must meet the SLO too (false: reported only)",
}


def slo_shown(slo: dict[str, Any], replay_judged: bool) -> dict[str, Any]:
    """The SLO thresholds an SLO table shows: all but ``judge_replay``, which shows only when a replay
    of a recorded workload was judged (it says nothing of a benchmark without one)."""
    return {k: v for k, v in slo.items() if k != "judge_replay" or replay_judged}


def replay_judged(*replays: Mapping[str, Any] | None) -> bool:
    """Whether any of these replay verdicts (:func:`shipyard.gates.slo.replay_verdict`) judged a replay."""
    return any(bool((rep or {}).get("measured")) for rep in replays)


def _change_row(kind: str, change: dict[str, Any] | None) -> list[str]:
    if not change:
        return [kind, "none", "–", "–", "–", "–", "–"]
    return [kind, change["figure"], change["load"], f"{change['candidate']:.4g} {change['unit']}",
            f"{change['base']:.4g} {change['unit']}", f"x{change['ratio']:.3g}",
            "–" if change.get("samples") is None else
            str(change["samples"]) + (f" (< {MIN_SAMPLES})" if change["samples"] < MIN_SAMPLES else "")]


def _capacity_section(doc: Doc, decision: dict[str, Any]) -> None:
    """Goodput at the SLO in units of the recorded workload's peak (``capacity``, from
    :mod:`shipyard.gates.capacity`); nothing when the benchmark replayed no recorded workload."""
    cand, base = decision.get("capacity"), decision.get("base_capacity")
    caps = [(who, cap) for who, cap in (("candidate", cand), ("base", base if base != cand else None)) if cap]
    if not caps:
        return
    doc.h(2, "Capacity in your units (the recorded workload)")
    doc.table(["model", "x your recorded peak", "x your recorded mean", "goodput at the SLO (req/s)",
               "recorded peak (req/s)", "recorded mean (req/s)", "replay time scale"],
              [[who, ("at least " if cap.get("lower_bound") else "") + f"{cap['x_recorded_peak']:.3g}x",
                "–" if cap.get("x_recorded_mean") is None else f"{cap['x_recorded_mean']:.3g}x",
                _f(cap["goodput_rps"]),
                _f(cap["recorded_peak_rps"]) + (f" in {cap['window_s']:g}-s windows" if cap.get("window_s") else ""),
                _f(cap.get("recorded_mean_rps")),
                f"{cap.get('time_scale') or 1.0:g}x"] for who, cap in caps])
    for who, cap in caps:
        doc.p(str(cap["text"]), f"{who.capitalize()}:")


def _replay_section(doc: Doc, decision: dict[str, Any]) -> None:
    """The SLO measured on the recorded workload's replay itself (``replay``, ``base_replay``:
    :func:`shipyard.gates.slo.replay_verdict`), each check with its margin; nothing without a replay."""
    cand, base = decision.get("replay"), decision.get("base_replay")
    reps = [(who, rep) for who, rep in (("candidate", cand), ("base", base if base != cand else None)) if rep]
    if not reps:
        return
    doc.h(2, "SLO on your traffic (the recorded workload's replay)")
    rows = [[who, c["check"], _f(c["measured"]) + (f" {c['unit']}" if c["measured"] is not None and c["unit"] else ""),
             c["threshold"], _f(c["margin"]), "pass" if c["passed"] else "FAIL", c["note"]]
            for who, rep in reps for c in rep.get("checks") or []]
    if rows:
        doc.p("The replay's own requests, judged as a load level is; its output tok/s is your traffic's rate, "
              "not held to the SLO's floor.")
        doc.table(["model", "check", "measured", "threshold", "margin", "result", "note"], rows)
    for who, rep in reps:
        doc.p(str(rep["text"]), f"{who.capitalize()}:")


def _workload_section(doc: Doc, base: dict[str, Any] | None, cand: dict[str, Any] | None) -> None:
    """The recorded workload each model's benchmark replayed (its ``results.json`` ``workload``): the
    fingerprint and its digest, the fidelity line and the prefix-cache hit rate the vLLM server
    measured against the theoretical one; nothing when neither replayed one."""
    from shipyard.benchmarking.workload_fidelity import INVALID_NOTE, fidelity_lines

    shown = [(who, res["workload"]) for who, res in (("candidate", cand), ("base", base if base != cand else None))
             if res and isinstance(res.get("workload"), dict) and res["workload"].get("fingerprint")]
    if not shown:
        return
    doc.h(2, "Workload replayed (fingerprint and fidelity)")
    for who, replayed in shown:
        doc.h(3, who).items(fidelity_lines(replayed["fingerprint"], replayed.get("fidelity")))
        if replayed.get("fidelity") and not replayed["fidelity"].get("valid"):
            doc.warn(INVALID_NOTE)


def _decision_section(doc: Doc, decision: dict[str, Any], base: dict[str, Any] | None,
                      cand: dict[str, Any] | None) -> None:
    """The decision and its rule, the sample warnings, the worst regression and best gain, the SLO and
    the highest load each model met it at."""
    passed = bool(decision.get("passed"))
    doc.p(f"{'promote' if passed else 'do not promote'}. {decision.get('reason')}", "Decision:")
    if decision.get("rule"):
        doc.p(str(decision["rule"]), "Rule:")
    warnings = sample_warnings((cand or {}).get("levels") or [], "candidate") + sample_warnings(
        (base or {}).get("levels") or [], "base")
    for text in warnings:
        doc.warn(text)
    if "worst_regression" in decision:
        doc.h(2, "Candidate vs base: worst regression and best gain")
        doc.table(["", "figure", "load", "candidate", "base", "candidate / base", "requests"],
                  [_change_row("worst regression", decision.get("worst_regression")),
                   _change_row("best gain", decision.get("best_gain"))])
    slo = decision.get("slo")
    if slo:
        doc.h(2, "SLO")
        doc.table(["threshold", "value", "meaning"],
                  [[k, cell(v), SLO_MEANING.get(k, "")] for k, v in
                   slo_shown(slo, replay_judged(decision.get("replay"), decision.get("base_replay"))).items()])
    if "candidate_highest_load" in decision:
        cb, bb = decision.get("candidate_highest_load"), decision.get("base_highest_load")
        doc.table(["highest load meeting the SLO", "level", "req/s"],
                  [[who, best["name"] if best else "none", _f(best["requests_per_s"]) if best else "–"]
                   for who, best in (("candidate", cb), ("base", bb))])


def _ratio_sections(doc: Doc, decision: dict[str, Any]) -> None:
    """Candidate / base per level against the ratio thresholds, then with its noise (the intervals)."""
    slo = decision.get("slo")
    pairs = decision.get("pairs") or []
    if pairs:
        doc.h(2, "Candidate / base per level")
        tmin, lmax = (slo or {}).get("min_throughput_ratio"), (slo or {}).get("max_latency_ratio")
        doc.table(["load", "out tok/s", "req/s", "TTFT p99", "ITL p99", "latency p99", "ratio thresholds"],
                  [[p["name"], _f(p["output_tokens_per_s_ratio"]), _f(p["requests_per_s_ratio"]), _f(p["ttft_p99_ratio"]),
                    _f(p["itl_p99_ratio"]), _f(p["latency_p99_ratio"]),
                    ", ".join(t for t in ((f"out tok/s >= {tmin:g}" if tmin is not None else ""),
                                          (f"TTFT/ITL p99 <= {lmax:g}" if lmax is not None else "")) if t) or "none set"]
                   for p in pairs])
    comp = decision.get("comparison") or {}
    if comp.get("rows"):
        doc.h(2, "Candidate / base with its noise")
        doc.p(str(comp.get("method")), "Method:")
        if (decision.get("base_source") or {}).get("text"):
            doc.p(str(decision["base_source"]["text"]), "Base figures:")
        doc.table(["load", "figure", "candidate / base", f"{comp.get('confidence', 0.95):.0%} interval", "says",
                   "repeats (candidate / base)"],
                  [[r["load"], r["label"], _f(r["ratio"]),
                    f"[{_f(r['low'])}, {_f(r['high'])}]" if r.get("low") is not None else (r.get("note") or "–"),
                    r["words"], f"{r['repeats']['candidate']} / {r['repeats']['base']}"] for r in comp["rows"]])


def _memory_and_config_section(doc: Doc, base: dict[str, Any] | None, cand: dict[str, Any] | None) -> None:
    """vLLM's logged memory against the planner's, per model, and the benchmark config."""
    if base or cand:
        doc.h(2, "Memory: vLLM's log vs the planner")
        for res, label in ((cand, "candidate"), (base, "base")):
            if res:
                doc.h(3, label).table(["figure", "vLLM log", "planner"], _memory_rows(res))
        cfg = (cand or base or {}).get("config") or {}
        doc.h(2, "Benchmark config").table(["setting", "value"], config_rows(cfg))
        doc.p("guidellm.json in each benchmark results artifact.", "Raw guidellm JSON:")


def report_doc(decision: dict[str, Any], base: dict[str, Any] | None, cand: dict[str, Any] | None,
               with_plots: bool = True) -> Doc:
    """The SLO gate's (and benchmark's) report as a :class:`Doc`."""
    passed = bool(decision.get("passed"))
    verdict = "PASS" if passed else "FAIL"
    doc = Doc(f"shipyard SLO gate: {verdict}").h(1, f"SLO gate: {verdict}", "pass" if passed else "fail")
    _decision_section(doc, decision, base, cand)
    _capacity_section(doc, decision)
    _replay_section(doc, decision)
    _workload_section(doc, base, cand)
    if with_plots:
        for alt, png in plots(decision, base, cand):
            doc.image(alt, png)
    checks = _check_rows(decision)
    if checks:
        doc.h(2, "SLO checks per load level")
        doc.p("margin = threshold - measured for an upper bound, measured - threshold for a lower bound; "
              "negative means the check failed.")
        doc.table(["model", "load", "requests", "check", "measured", "threshold", "margin", "result", "note"], checks)
    for res, label, key in ((cand, "Candidate", "candidate_levels"), (base, "Base", "base_levels")):
        if res:
            doc.h(2, f"{label}: {res.get('model_name')}")
            doc.table(_LEVEL_HEAD, _level_rows(res, decision.get(key) or []))
    _ratio_sections(doc, decision)
    _memory_and_config_section(doc, base, cand)
    return doc


def html_report(decision: dict[str, Any], base: dict[str, Any] | None, cand: dict[str, Any] | None) -> str:
    """The gate's HTML artifact: decision, warnings, SLO table, plots, checks, per-level tables, configs."""
    return report_doc(decision, base, cand).to_html()


def markdown_summary(decision: dict[str, Any], base: dict[str, Any] | None, cand: dict[str, Any] | None) -> str:
    """The gate's Markdown summary: the same decisions, warnings and tables as the HTML (no plots)."""
    return report_doc(decision, base, cand, with_plots=False).to_markdown()


def benchmark_markdown(results: dict[str, Any]) -> str:
    """One model's benchmark (no gate) as Markdown: sample warnings, per-level table, memory,
    config as a table (a drop-in for the benchmark step's summary)."""
    doc = Doc(f"Benchmark: {results.get('model_name')}").h(1, f"Benchmark: {results.get('model_name')}")
    for text in sample_warnings(results.get("levels") or [], "this model"):
        doc.warn(text)
    doc.table(_LEVEL_HEAD[:-2], [row[:-2] for row in _level_rows(results, [])])
    doc.h(2, "Memory: vLLM's log vs the planner").table(["figure", "vLLM log", "planner"], _memory_rows(results))
    timing = {k: results.get(k) for k in ("server_startup_seconds", "benchmark_seconds", "wall_seconds", "device",
                                          "guidellm_version") if k in results}
    if timing:
        doc.h(2, "Run").config(timing)
    startup = results.get("startup") or {}
    if startup:
        labels = {"ready_seconds": "process start to /health (s)", "weights_load_seconds": "weight load, vLLM's figure (s)",
                  "engine_init_seconds": "engine init: profile, KV cache, warm-up (s)",
                  "load_start_at_s": "engine start: 'Starting to load model' at (s, vLLM's timestamps)",
                  "engine_ready_at_s": "engine ready at (s)", "server_bind_at_s": "API server bound at (s)"}
        doc.h(2, "Start-up (vLLM's log)").config({labels.get(k, k): v for k, v in startup.items()})
    doc.h(2, "Benchmark config").config(results.get("config") or {})
    text = doc.to_markdown()
    replayed = results.get("workload") or {}
    if replayed.get("fingerprint"):  # the recorded workload's replay: its fingerprint and fidelity line
        text += "\n" + fidelity_markdown(replayed["fingerprint"], replayed.get("fidelity"))
    return text
