"""Keep-the-base: the base model is always a candidate, and the verdict compares with it.

A compressed candidate competes with the model it would replace. The base is one more entry in
the ranking, with its own measured figures (output tok/s at the highest load meeting the SLO,
size, KV-cache tokens) and recovery 1 by definition (it is the accuracy gate's reference). A
compressed candidate that the base **dominates** on (accuracy, the selection objective), at
least as good on both and better on one, is never champion. With an objective that states what
compression buys (``size``, ``kv_cache``), a candidate that is less accurate but smaller can
still win; the headline then names what was traded.

The **headline** is the first thing the console, the summary and the decision record say, e.g.
``champion w8a8-int8 vs base: accuracy -0.012 [-0.031, +0.006] (margin 0.02), 1.48x output tok/s
at the SLO, 1.65x smaller`` or ``kept the base: w8a8-int8 is 0.77x as fast at the SLO and loses
0.156 on opposites_mc acc_norm [+0.03, +0.28]``. The throughput ratio carries its 95% interval at
matched load (:mod:`shipyard.gates.noise`: ``1.02x output tok/s at the SLO (no difference within
noise [0.91, 1.14])``), and at matched load a throughput difference within noise counts as equal
for dominance. When the base's benchmark came from the base benchmark cache, the headline ends with
where and when it was measured. Pure Python (base runtime).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shipyard.core.records import CandidateRecord, slo_of
from shipyard.core.report import level_label
from shipyard.gates.noise import WITHIN_NOISE, find

#: the recipe label of the keep-the-base candidate (never a recipe name: recipes are compressions)
BASE = "base"

#: objective -> the figure's value for a candidate, as the selection ranks it
Value = Callable[[dict[str, Any], str], float | None]


def slo_level(cand: CandidateRecord) -> dict[str, Any] | None:
    """The level at the highest load that meets the SLO (from the SLO gate's figures)."""
    rps = slo_of(cand).get("metrics", {}).get("highest_load_meeting_slo_rps")
    levels = [lv for lv in cand.get("levels") or [] if lv.get("requests_per_s") is not None]
    if not rps or not levels:
        return None
    return min(levels, key=lambda lv: abs(float(lv["requests_per_s"]) - float(rps)))


def throughput_noise(base: CandidateRecord, cand: CandidateRecord) -> dict[str, Any] | None:
    """The output tok/s ratio at the SLO with its interval (:mod:`shipyard.gates.noise`) when base and
    candidate meet the SLO highest at the same load level (matched load); None otherwise."""
    b, c = slo_level(base), slo_level(cand)
    if b is None or c is None or b.get("name") != c.get("name"):
        return None
    row = find(slo_of(cand).get("comparison"), c.get("name"), "output_tokens_per_s")
    return row if row is not None and row.get("low") is not None else None


def throughput_text(base: CandidateRecord, cand: CandidateRecord, value: Value) -> str:
    """"1.48x output tok/s at the SLO [1.31, 1.66]" or "1.02x output tok/s at the SLO (no difference within
    noise [0.91, 1.14])"; the levels when base and candidate meet the SLO highest at different loads."""
    text = ratio_text("throughput", value(base, "throughput"), value(cand, "throughput"))
    if not text:
        return ""
    row = throughput_noise(base, cand)
    if row is not None:
        interval = f"[{row['low']:.2f}, {row['high']:.2f}]"
        return text + (f" ({WITHIN_NOISE} {interval})" if row["words"] == WITHIN_NOISE else f" {interval}")
    b, c = slo_level(base), slo_level(cand)
    if b is not None and c is not None and b.get("name") != c.get("name"):
        return text + f" (at {level_label(c)} vs the base's {level_label(b)}: no matched-load interval)"
    return text


def source_text(base: dict[str, Any] | None) -> str:
    """"" when the base's figures were measured in this run; else where and when (a cached base)."""
    source = (base or {}).get("benchmark_source") or {}
    return str(source.get("text") or "") if source.get("source") == "cache" else ""


def is_base(cand: CandidateRecord | None) -> bool:
    """Whether a candidate record is the keep-the-base candidate."""
    return bool(cand and cand.get("is_base"))


def accuracy_loss(cand: CandidateRecord) -> dict[str, Any] | None:
    """The candidate's worst gated metric against the base (lowest recovery, so metrics in different
    units compare): ``{"task", "metric", "loss", "low", "high", "margin"}`` (loss = base - candidate,
    flipped for lower-is-better metrics: > 0 is worse; ``low``/``high``: the paired interval when
    samples were logged, else None). None when no gated metric was compared."""
    for row in sorted((cand.get("accuracy") or {}).get("rows") or [],
                      key=lambda r: 1.0 if r.get("recovery") is None else float(r["recovery"])):
        if not row.get("gated", True) or row.get("base") is None or row.get("candidate") is None:
            continue
        paired = row.get("paired") or {}
        if paired.get("loss") is not None:
            loss, low, high = float(paired["loss"]), paired.get("loss_low"), paired.get("loss_high")
        else:
            diff = float(row["base"]) - float(row["candidate"])
            loss, low, high = (diff if row.get("higher_is_better", True) else -diff), None, None
        return {"task": row.get("task"), "metric": str(row.get("metric", "")).replace(",none", ""),
                "loss": loss, "low": low, "high": high, "margin": row.get("margin")}
    return None


def _compare(objective: str, base: float | None, cand: float | None) -> int | None:
    """+1 when the base's figure is better, -1 when the candidate's is, 0 when equal, None when unknown."""
    if base is None or cand is None:
        return None
    if base == cand:
        return 0
    better = base < cand if objective == "size" else base > cand
    return 1 if better else -1


def ratio_text(objective: str, base: float | None, cand: float | None) -> str:
    """The candidate's figure relative to the base's, in words ("1.48x output tok/s at the SLO", "1.65x smaller")."""
    if base is None or cand is None or base <= 0 or cand <= 0:
        return ""
    if objective == "throughput":
        return f"{cand / base:.2f}x output tok/s at the SLO"
    if objective == "size":
        return f"{base / cand:.2f}x smaller"
    if objective == "kv_cache":
        return f"{cand / base:.2f}x KV-cache tokens"
    return f"worst recovery {cand:.3f}"


def loss_text(loss: dict[str, Any] | None) -> str:
    """``loses 0.156 on opposites_mc acc_norm [+0.03, +0.28]`` (or "gains ..."); "" without a figure."""
    if loss is None:
        return ""
    interval = (f" [{loss['low']:+.3g}, {loss['high']:+.3g}]"
                if loss.get("low") is not None and loss.get("high") is not None else "")
    verb = "loses" if loss["loss"] > 0 else "gains"
    return f"{verb} {abs(loss['loss']):.3g} on {loss['task']} {loss['metric']}{interval}"


def dominance(base: CandidateRecord, cand: CandidateRecord, objective: str, value: Value) -> str | None:
    """Why the base dominates ``cand`` on (accuracy, ``objective``), or None when it does not.

    Accuracy: the base is better when the candidate's largest loss is > 0, equal at 0. The objective:
    the two measured figures (``recovery`` is accuracy itself, so accuracy alone decides). Unknown
    figures never make a candidate dominated."""
    loss = accuracy_loss(cand)
    if loss is None:
        return None
    acc = 1 if loss["loss"] > 0 else (0 if loss["loss"] == 0 else -1)
    obj = acc if objective == "recovery" else _compare(objective, value(base, objective), value(cand, objective))
    noise = throughput_noise(base, cand) if objective == "throughput" else None
    if noise is not None and noise["low"] <= 1 <= noise["high"]:
        obj = 0  # at matched load the two throughputs differ by no more than the noise: equal
    if obj is None or acc < 0 or obj < 0 or (acc == 0 and obj == 0):
        return None
    parts = []
    if objective != "recovery":
        ratio = (throughput_text(base, cand, value) if objective == "throughput"
                 else ratio_text(objective, value(base, objective), value(cand, objective)))
        parts.append(ratio.replace("output tok/s at the SLO", "as fast at the SLO") if objective == "throughput"
                     else ratio)
    if acc > 0:
        parts.append(loss_text(loss))
    return "dominated by the base: " + " and ".join(p for p in parts if p)


def traded(base: CandidateRecord, cand: CandidateRecord, value: Value) -> str:
    """The champion against the base: accuracy (the worst metric's loss, interval, margin), throughput, size."""
    loss = accuracy_loss(cand)
    parts = []
    if loss is not None:
        interval = (f" [{-loss['high']:+.3f}, {-loss['low']:+.3f}]"
                    if loss.get("low") is not None and loss.get("high") is not None else "")
        margin = f" (margin {loss['margin']:g})" if isinstance(loss.get("margin"), int | float) else ""
        parts.append(f"accuracy {-loss['loss']:+.3f}{interval}{margin} on {loss['task']} {loss['metric']}")
    for objective in ("throughput", "size"):
        text = (throughput_text(base, cand, value) if objective == "throughput"
                else ratio_text(objective, value(base, objective), value(cand, objective)))
        if text:
            parts.append(text)
    return ", ".join(parts)


def _short(text: str, width: int = 200) -> str:
    """``text`` in at most ``width`` characters, cut at a word boundary (a failed gate's whole reason
    stays in the candidates report; the headline is one line)."""
    if len(text) <= width:
        return text
    return text[: width - 1].rsplit(" ", 1)[0].rstrip(" ;,:") + "…"


def headline(winner: dict[str, Any] | None, base: dict[str, Any] | None, candidates: list[dict[str, Any]],
             decisions: dict[str, str], value: Value) -> str:
    """The verdict in one line, always against the base (see the module doc)."""
    others = [c for c in candidates if not is_base(c)]
    cached = source_text(base)
    if winner is None:
        return "no champion: " + "; ".join(f"{c['recipe']}: {decisions.get(c['recipe'], '')}" for c in candidates)
    if not is_base(winner):
        versus = traded(base, winner, value) if base is not None else ""
        return (f"champion {winner['recipe']} vs base" + (f": {versus}" if versus else " (the base was not measured)")
                + (f"; {cached}" if cached else ""))
    why = []
    for cand in others:
        said = decisions.get(cand["recipe"], "")
        if said.startswith("dominated by the base: "):
            why.append(f"{cand['recipe']} is {said.removeprefix('dominated by the base: ')}")
        elif said.startswith("not eligible: "):
            why.append(f"{cand['recipe']} {_short(said.removeprefix('not eligible: '))}")
        else:
            why.append(f"{cand['recipe']}: {traded(winner, cand, value) or said}")
    return ("kept the base" + (": " + "; ".join(why) if why else " (no compressed candidate)")
            + (f"; {cached}" if cached else ""))
