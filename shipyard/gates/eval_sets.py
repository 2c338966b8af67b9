"""The gate per user eval set: the accuracy gate's paired non-inferiority rule, one row per set.

Each set compiled for lm-eval (:mod:`shipyard.evaluation.eval_set_tasks`) is one row: its gated
metric (``acc`` for mcq, ``exact_match`` after the match filter for qa/chat/rag), paired row by
row from base's and candidate's logged samples (:func:`shipyard.gates.paired.compare_samples`),
tested against the set's ``margin`` (declared in ``eval_sets`` before the run; default the
accuracy gate's ``max_loss``) with :func:`shipyard.gates.recovery.apply_noninferiority`: the same
one-sided test, the same Holm correction, here across the sets. A set without logs on either
side fails closed.

A ``rubric`` set is one row too: the judge's per-prompt outcome (:mod:`shipyard.gates.judging`:
candidate 1 / 0.5 / 0 for win / tie / loss, base the complement) is the paired metric
``judge_preference``. It is gated (and counted in Holm) only when the judge is calibrated
(kappa >= ``min_kappa``); otherwise the row informs and the report says so.

A ``rag`` set also gets one row per Ragas metric (``ragas_faithfulness``, ``ragas_answer_correctness``:
:mod:`shipyard.evaluation.ragas_scoring`), the per-answer scores of base and candidate paired row by
row (only rows scored on both sides: a score Ragas could not produce is counted and reported, never
dropped silently) with the paired bootstrap, under the same margin. Ragas' scores come from the
same judge model as the rubric sets, so they too gate only when that judge is calibrated; without a
judge in ``eval_sets`` Ragas does not run and the report says so (the set is still gated on its
exact/contains match).

``gate_eval_sets`` never raises on a comparison problem: it fails closed with the reason, as the
accuracy gate does. Pure Python (base runtime).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.report import Doc
from shipyard.evaluation.ragas_scoring import generated_text
from shipyard.gates.judging import Calibration, Judged, PairwiseResult, pairwise, scores
from shipyard.gates.paired import Paired, Samples, compare_samples, paired_bootstrap
from shipyard.gates.recovery import (
    NON_INFERIORITY,
    Row,
    Thresholds,
    add_mdl,
    apply_noninferiority,
    compare_metric,
    loss_text,
)

JUDGE_METRIC = "judge_preference"
#: the prefix of the gate's Ragas metrics (``ragas_faithfulness``, ``ragas_answer_correctness``)
RAGAS_PREFIX = "ragas_"
#: why Ragas did not score the rag sets when eval_sets names no judge
RAGAS_NO_JUDGE = ("Ragas not run: eval_sets names no judge (add \"judge\": {\"model_uri\": ...} to score the rag "
                  "sets' faithfulness and answer correctness; they are gated on exact/contains match alone)")
METHOD = ("per eval set, the paired non-inferiority rule of the accuracy gate: loss = base - candidate on the same "
          "rows against the set's margin (declared in eval_sets before the run), one-sided at alpha, Holm across the "
          "gated sets; a rubric set counts only when its judge is calibrated (Cohen's kappa >= min_kappa)")


@dataclass
class JudgedSet:
    """A rubric set's judgements in both orders and the judge's calibration."""

    judgements: list[Judged]
    calibration: Calibration
    margin: float | None = None
    #: the set's rows (None: as many as judged); fewer judged: ``eval_sets.judge.max_rows`` cut it short
    rows: int | None = None


@dataclass
class RagasSet:
    """A rag set's Ragas scores per metric (``{metric: {"base": [...], "candidate": [...]}}``, None
    where Ragas produced no score), the judge's calibration and the set's margin."""

    scores: dict[str, dict[str, list[float | None]]]
    calibration: Calibration
    margin: float | None = None
    #: the set's rows (None: as many as scored); fewer scored: ``eval_sets.judge.max_rows`` cut it short
    rows: int | None = None


@dataclass
class EvalSetsGate:
    """The decision over every eval set."""

    passed: bool
    reason: str
    rows: list[Row]
    judged: dict[str, dict[str, Any]] = field(default_factory=dict)
    leaks: list[str] = field(default_factory=list)
    #: Ragas on the rag sets: ``{"sets": {name: {"lines", "judge"}}, "notes": [...]}`` (empty: no rag set)
    ragas: dict[str, Any] = field(default_factory=dict)
    #: the sets the judge's ``max_rows`` cut short: ``{set: {"judged": n, "rows": m, "by": "pairwise judge" | "Ragas"}}``
    judge_capped: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "reason": self.reason, "method": METHOD, "judged": self.judged,
                "leaks": self.leaks, "ragas": self.ragas, "judge_capped": self.judge_capped,
                "rows": [r.to_dict() for r in self.rows]}

    def metrics(self) -> dict[str, float]:
        """Flat numbers for a KFP Metrics artifact and MLflow: per set base, candidate, loss and the decision."""
        out = {"eval_sets_passed": 1.0 if self.passed else 0.0}
        for r in self.rows:
            prefix = f"eval_sets/{r.task}/{r.metric}" if r.metric.startswith(RAGAS_PREFIX) else f"eval_sets/{r.task}"
            for key, value in (("base", r.base), ("candidate", r.candidate)):
                if value is not None:
                    out[f"{prefix}/{key}"] = float(value)
            if r.paired:
                out[f"{prefix}/loss"] = float(r.paired["loss"])
        for name, cut in self.judge_capped.items():
            out[f"eval_sets/{name}/judged_rows"] = float(cut["judged"])
        return out


def capped_line(name: str, cut: dict[str, Any]) -> str:
    """How many rows of a set the judge's cap let it judge: "homework: judged 2 of 4 rows (...)"."""
    return (f"{name}: {cut['by']} judged {cut['judged']} of {cut['rows']} rows (the first {cut['judged']}: "
            "eval_sets.judge.max_rows)")


def _rule(margin: float | None, thresholds: Thresholds, gate: bool) -> dict[str, Any]:
    return {"min_recovery": thresholds.min_recovery, "stderr_k": None, "gate": gate,
            "max_loss": margin if margin is not None else thresholds.max_loss,
            "max_relative_loss": None if margin is not None else thresholds.max_relative_loss}


def _missing_row(name: str, metric: str, thresholds: Thresholds, margin: float | None, sides: list[str]) -> Row:
    row = Row(name, metric, True, None, None, None, None, None, thresholds.min_recovery, None, True, False,
              f"no per-sample logs for set {name} on the {' and '.join(sides)}: evaluate the compiled sets with "
              "log_samples (the default)", rule=NON_INFERIORITY, decision="no samples",
              settings=_rule(margin, thresholds, True))
    return row


def _set_row(name: str, entry: dict[str, Any], base: Samples, cand: Samples, thresholds: Thresholds) -> Row:
    task, metric, margin = entry["task"], entry["metric"], entry.get("margin")
    sides = [side for side, samples in (("base", base), ("candidate", cand)) if not samples.get(task)]
    if sides:
        return _missing_row(name, metric, thresholds, margin, sides)
    paired = compare_samples(base, cand, {task: {metric: True}}, confidence=1 - 2 * thresholds.alpha).get((task, metric))
    if paired is None:
        return _missing_row(name, metric, thresholds, margin, ["base and candidate (no shared rows for "
                                                               f"{metric})"])
    paired = Paired(**{**paired.to_dict(), "task": name, "mcnemar": paired.mcnemar})
    return compare_metric(name, metric, {"value": paired.base_mean, "higher_is_better": True},
                          {"value": paired.candidate_mean}, _rule(margin, thresholds, True), paired)


def _scores_row(name: str, metric: str, b: list[float], c: list[float], margin: float | None, gate: bool,
                thresholds: Thresholds) -> Row:
    """A row of per-row scores in [0, 1] (judge outcomes, Ragas scores) paired with the bootstrap."""
    (l_lo, l_hi), (r_lo, r_hi) = paired_bootstrap(b, c, confidence=1 - 2 * thresholds.alpha)
    mb, mc = sum(b) / len(b), sum(c) / len(c)
    diffs = [x - y for x, y in zip(b, c, strict=True)]
    mean = sum(diffs) / len(diffs)
    sd = (sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)) ** 0.5 if len(diffs) > 1 else 0.0
    paired = Paired(name, metric, len(b), mb, mc, mb - mc, l_lo, l_hi, r_lo, r_hi, 1 - 2 * thresholds.alpha, None, sd)
    return compare_metric(name, metric, {"value": mb, "higher_is_better": True}, {"value": mc},
                          _rule(margin, thresholds, gate), paired)


def _judged_row(name: str, judged: JudgedSet, thresholds: Thresholds) -> tuple[Row, PairwiseResult]:
    result = pairwise(judged.judgements, confidence=1 - 2 * thresholds.alpha)
    b, c = scores(judged.judgements)
    return _scores_row(name, JUDGE_METRIC, b, c, judged.margin, judged.calibration.gates, thresholds), result


def unscored(scores: list[float | None]) -> int:
    """How many scores of one side are None (NaN: Ragas could not produce them)."""
    return sum(s is None for s in scores)


def pair_scores(base: list[float | None], candidate: list[float | None]) -> tuple[list[float], list[float], int]:
    """The rows scored on both sides, paired (base, candidate), and how many rows were left out
    because either side has no score (None: NaN)."""
    if len(base) != len(candidate):
        raise ShipyardError("eval_sets", f"Ragas scored {len(base)} base and {len(candidate)} candidate rows",
                            "score both models' answers to the same rows")
    pairs = [(b, c) for b, c in zip(base, candidate, strict=True) if b is not None and c is not None]
    return [b for b, _ in pairs], [c for _, c in pairs], len(base) - len(pairs)


def _ragas_rows(name: str, ragas: RagasSet, thresholds: Thresholds) -> tuple[list[Row], list[str]]:
    """One row per Ragas metric of a rag set, paired on the rows scored on both sides, and the lines
    the report prints on the rows left out."""
    rows, lines = [], []
    gate = ragas.calibration.gates
    for metric, sides in ragas.scores.items():
        key = RAGAS_PREFIX + metric
        b, c, left_out = pair_scores(sides["base"], sides["candidate"])
        n = len(sides["base"])
        lines.append(f"{name} {metric}: {len(b)} of {n} rows scored on both sides; not scored (NaN): "
                     f"{unscored(sides['base'])} base, {unscored(sides['candidate'])} candidate")
        if len(b) < 2:
            row = _missing_row(name, key, thresholds, ragas.margin, ["base and candidate"])
            row.gated, row.passed, row.decision = gate, not gate, "too few scores"
            row.note = (f"Ragas scored {len(b)} of {n} rows on both sides, too few to pair (the NaNs' reasons are "
                        "under 'Ragas on the rag sets')")
            rows.append(row)
            continue
        row = _scores_row(name, key, b, c, ragas.margin, gate, thresholds)
        row.settings["left_out"] = left_out, n
        rows.append(row)
    return rows, lines


def judge_capped(judged: dict[str, JudgedSet] | None, ragas: dict[str, RagasSet] | None) -> dict[str, dict[str, Any]]:
    """The sets the judge's ``max_rows`` cut short: ``{set: {"judged": n, "rows": m, "by": ...}}``."""
    capped: dict[str, dict[str, Any]] = {}
    for name, rs in sorted((ragas or {}).items()):
        done = len(next(iter(rs.scores.values()))["base"]) if rs.scores else 0
        if rs.rows is not None and done < rs.rows:
            capped[name] = {"judged": done, "rows": rs.rows, "by": "Ragas"}
    for name, js in sorted((judged or {}).items()):
        if js.rows is not None and len(js.judgements) < js.rows:
            capped[name] = {"judged": len(js.judgements), "rows": js.rows, "by": "the pairwise judge"}
    return capped


def gate_eval_sets(manifest: dict[str, Any], base_samples: Samples, candidate_samples: Samples,
                   thresholds: Thresholds, judged: dict[str, JudgedSet] | None = None,
                   leaks: list[str] | None = None, ragas: dict[str, RagasSet] | None = None,
                   ragas_notes: list[str] | None = None) -> EvalSetsGate:
    """Decide every set of ``manifest`` (:func:`shipyard.evaluation.eval_set_tasks.compile_eval_sets`)
    from per-sample records, every judged rubric set and every rag set's Ragas scores (``ragas``);
    Holm across the gated rows. ``ragas_notes``: lines the report prints under Ragas (why it did
    not run, the metrics it skipped)."""
    rows: list[Row] = []
    judged_out: dict[str, dict[str, Any]] = {}
    ragas_out: dict[str, dict[str, Any]] = {}
    capped = judge_capped(judged, ragas)
    compiled = manifest.get("sets") or {}
    for name in sorted(set(compiled) | set(ragas or {})):  # a rag set's Ragas rows right after its match row
        if name in compiled:
            rows.append(_set_row(name, compiled[name], base_samples, candidate_samples, thresholds))
        if ragas and name in ragas:
            ragas_rows, lines = _ragas_rows(name, ragas[name], thresholds)
            rows.extend(ragas_rows)
            if name in capped:
                lines.append(capped_line(name, capped[name]))
            ragas_out[name] = {"lines": lines, "judge": ragas[name].calibration.to_dict()}
    for name, js in sorted((judged or {}).items()):
        row, result = _judged_row(name, js, thresholds)
        rows.append(row)
        judged_out[name] = {"pairwise": result.to_dict(), "line": result.line(), "judge": js.calibration.to_dict()}
        if name in capped:
            judged_out[name]["line"] += "; " + capped_line(name, capped[name])
    ragas_info = {"sets": ragas_out, "notes": list(ragas_notes or [])} if ragas_out or ragas_notes else {}
    if not rows:
        return EvalSetsGate(False, "failed closed: no eval set to decide", [], judged_out, leaks or [], ragas_info,
                            capped)
    add_mdl(rows, thresholds)
    apply_noninferiority(rows, thresholds, base_samples, candidate_samples)
    for row in rows:
        if row.metric == JUDGE_METRIC and not row.gated:  # the calibration's note starts "informs only: ..."
            row.note = f"{row.note}; {judged_out[row.task]['judge']['note']}"
        left_out, n = row.settings.get("left_out") or (0, 0)
        if left_out:  # decided on the rows scored on both sides: the rest is said, not dropped silently
            row.note = f"{row.note}; {left_out} of {n} rows not scored on both sides (NaN), left out of the pairing"
        if row.metric.startswith(RAGAS_PREFIX) and not row.gated:
            row.note = f"{row.note}; {ragas_out[row.task]['judge']['note']}"
        if row.task in capped and (row.metric == JUDGE_METRIC or row.metric.startswith(RAGAS_PREFIX)):
            cut = capped[row.task]  # a set is of one form: its judge's rows, not its match row
            row.note = f"{row.note}; judged on {cut['judged']} of {cut['rows']} rows (eval_sets.judge.max_rows)"
    failed = [r for r in rows if not r.passed]
    if failed:
        reason = "; ".join(f"{r.task}{' ' + r.metric if r.metric.startswith(RAGAS_PREFIX) else ''}: {r.note}"
                           for r in failed)
    else:
        gated = sum(r.gated for r in rows)
        reason = f"all {gated} gated eval set(s) non-inferior" + (
            f" ({len(rows) - gated} informing only)" if gated < len(rows) else "")
    if capped:  # never silently: the verdict says how much of each set the judge saw
        reason += "; judge cap: " + ", ".join(f"{name} {cut['judged']} of {cut['rows']} rows judged"
                                             for name, cut in sorted(capped.items()))
    return EvalSetsGate(not failed, reason, rows, judged_out, list(leaks or []), ragas_info, capped)


def _interval(r: Row) -> str:
    return loss_text(r.paired) if r.paired else "–"


def report_doc(gate: EvalSetsGate, sets: list[dict[str, Any]] | None = None,
               judge_model: dict[str, Any] | None = None) -> Doc:
    """The eval-sets report: decision, rule, the sets (pinned digests, duplicates), leak lines, one
    row per set, and the judge's win/tie/loss, position bias and calibration per rubric set (with
    ``judge_model``, which judge: its pinned URI and content fingerprint), and Ragas on the rag
    sets: the rows it scored on both sides, the answers it could not score, the metrics it skipped
    and why, or why it did not run."""
    verdict = "PASS" if gate.passed else "FAIL"
    doc = Doc(f"Your eval sets: {verdict}").h(1, f"Your eval sets: {verdict}", "pass" if gate.passed else "fail")
    doc.p(gate.reason, "Decision:")
    doc.p(METHOD, "Rule:")
    if sets:
        doc.h(2, "Sets").table(("set", "form", "rows", "duplicates dropped", "match", "sha256"),
                               [(s["name"], s["form"], str(s["rows"]), str(s["duplicates_dropped"]),
                                 s.get("match") or "–", s["sha256"][:16]) for s in sets])
    if gate.leaks:
        doc.h(2, "Leak check against the calibration set").items(gate.leaks)
    doc.h(2, "Per set").table(
        ("set", "metric", "n", "base", "candidate", "loss [interval]", "margin", "min. detectable loss", "p (Holm)",
         "decision", "note"),
        [(r.task, r.metric, str((r.paired or {}).get("n", "–")), r.base, r.candidate, _interval(r), r.margin, r.mdl,
          r.p_adjusted if r.p_adjusted is not None else r.p_value, r.decision or "–", r.note) for r in gate.rows])
    judge = [] if not judge_model else [f"judge model {str(judge_model.get('pinned_uri') or '')[:200]} "
                                        f"(content {judge_model.get('fingerprint') or 'not recorded'})"]
    for name, info in gate.judged.items():
        doc.h(3, f"Judge on {name}").items([info["line"], info["judge"]["note"], *judge])
    if gate.ragas:
        lines = [line for info in gate.ragas["sets"].values() for line in info["lines"]]
        notes = [info["judge"]["note"] for info in list(gate.ragas["sets"].values())[:1]]
        doc.h(3, "Ragas on the rag sets").items([*lines, *notes, *gate.ragas["notes"], *(judge if lines else [])])
    return doc


RECORD_COLUMNS = ("set", "doc_id", "id", "prompt", "reference", "base_answer", "candidate_answer", "base_score",
                  "candidate_score", "outcome", "metric")
#: characters of a prompt or answer a record keeps
RECORD_TEXT = 500


def _answer(row: dict[str, Any]) -> str:
    """The answer a sample row shows: a generation's filtered text, or an mcq's chosen option."""
    resps = row.get("filtered_resps") or []
    doc = row.get("doc") or {}
    if resps and isinstance(resps[0], list | tuple) and doc.get("choices"):  # loglikelihood per choice
        best = max(range(len(resps)), key=lambda i: float(resps[i][0]))
        return str(doc["choices"][best])
    return str(resps[0] if resps else "")[:RECORD_TEXT]


def _outcome(b: float, c: float) -> str:
    if b == c:
        return "both right" if b >= 1 else ("both wrong" if b <= 0 else "same")
    return "base only" if b > c else "candidate only"


def _ragas_records(name: str, b_rows: dict[Any, Any], c_rows: dict[Any, Any],
                   ragas: RagasSet) -> list[list[Any]]:
    """A rag set's Ragas scores as records, one per row and metric (None and ``not scored`` where
    Ragas produced no score on either side)."""
    docs = {doc: row for (doc, filt), row in b_rows.items() if filt == "match"}
    cands = {doc: row for (doc, filt), row in c_rows.items() if filt == "match"}
    out = []
    for metric, sides in ragas.scores.items():
        for i, (bs, cs) in enumerate(zip(sides["base"], sides["candidate"], strict=True)):
            b, c = docs.get(i) or {}, cands.get(i) or {}
            doc = b.get("doc") or {}
            outcome = _outcome(bs, cs) if bs is not None and cs is not None else "not scored"
            out.append([name, i, doc.get("id"), str(doc.get("text", ""))[:RECORD_TEXT], b.get("target"),
                        generated_text(b)[:RECORD_TEXT], generated_text(c)[:RECORD_TEXT], bs, cs, outcome, RAGAS_PREFIX + metric])
    return out


def paired_records(manifest: dict[str, Any], base: Samples, candidate: Samples,
                   ragas: dict[str, RagasSet] | None = None) -> dict[str, Any]:
    """Per-sample records of every compiled set, base and candidate side by side, as MLflow's table
    format (``{"columns": [...], "data": [[...]]}``: what ``mlflow.log_table`` writes and the run's
    artifact view shows as a table): set, row, prompt, reference, both answers, both scores,
    whether the row changed ("base only": the candidate lost it) and the metric; a rag set's Ragas
    scores (``ragas``) are records too, one per row and metric."""
    data: list[list[Any]] = []
    for name, entry in sorted((manifest.get("sets") or {}).items()):
        task, metric = entry["task"], entry["metric"]
        key, _, filt = metric.partition(",")
        b_rows, c_rows = base.get(task) or {}, candidate.get(task) or {}
        for doc_key in sorted(set(b_rows) & set(c_rows), key=lambda k: str(k[0])):
            if doc_key[1] != filt:
                continue
            b, c = b_rows[doc_key], c_rows[doc_key]
            doc = b.get("doc") or {}
            reference = doc["choices"][doc["label"]] if doc.get("choices") else b.get("target")
            bs, cs = float(b.get(key, 0.0)), float(c.get(key, 0.0))
            data.append([name, doc_key[0], doc.get("id"), str(doc.get("text", ""))[:RECORD_TEXT], reference,
                         _answer(b), _answer(c), bs, cs, _outcome(bs, cs), metric])
        if ragas and name in ragas:
            data.extend(_ragas_records(name, b_rows, c_rows, ragas[name]))
    return {"columns": list(RECORD_COLUMNS), "data": data}
