"""The accuracy gate's rules, per task and metric: paired non-inferiority (the default) and recovery.

recovery = candidate / base for higher-is-better metrics (accuracy) and base / candidate for
lower-is-better ones (perplexity, bits per byte), so recovery < 1 always means "the candidate
is worse". When the denominator is 0 the ratio is undefined: recovery is 1.0 if the candidate
is at least as good as the base and 0.0 otherwise. Every row shows it, whatever the rule.

``rule`` ``non-inferiority`` (the default): per metric with per-sample logs, the loss (base -
candidate on the same questions, :mod:`shipyard.gates.paired`) is tested against a margin
declared before the run (``max_loss``, absolute, default 0.02; or ``max_relative_loss`` x |base|):
a one-sided test of H0: loss >= margin at ``alpha``, with Holm's correction across the gated
metrics. A row is "non-inferior" (H0 rejected: pass), "inferior" (the lower bound of the loss
interval is above the margin: fail) or "inconclusive" (neither: fails unless
``allow_inconclusive``). Metrics without per-sample values (perplexity, bits per byte: corpus-level)
fall back to the recovery rule; a per-sample metric whose task has no logs fails closed.

``rule`` ``recovery``: a metric passes when recovery >= its minimum (default 0.99) or, with the
optional ``stderr_k`` rule, when the candidate's loss is within k standard errors of the
difference (sqrt(se_base^2 + se_candidate^2)). Before anything is compared,
:mod:`shipyard.gates.parity` refuses unlike evaluations.

Pure Python: runs in the base runtime.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.records import read_record
from shipyard.gates.config import (
    DEFAULT_ALPHA,
    DEFAULT_MAX_LOSS,
    DEFAULT_MIN_RECOVERY,
    DEFAULT_POWER,
    accuracy_config,
)
from shipyard.gates.paired import (
    McNemar,
    Paired,
    Samples,
    compare_samples,
    holm,
    load_samples,
    metric_filter,
    min_detectable_loss,
    noninferiority_p,
    sampled_filters,
)
from shipyard.gates.parity import check_parity

SUMMARY_FILE = "summary.json"
NON_INFERIORITY = "non-inferiority"
RECOVERY = "recovery"
#: lm-eval metrics aggregated over the whole corpus: no per-sample value to pair (their per-sample
#: log holds pieces such as (loglikelihood, words)); they fall back to the recovery rule
CORPUS_METRICS = ("perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte", "bleu", "chrf", "ter")


@dataclass(frozen=True)
class Thresholds:
    """Gate thresholds, parsed from the ``thresholds`` JSON string (:class:`shipyard.gates.config.AccuracyConfig`).

    ``metrics``: ``{"<task>:<metric>" | "<metric>" | "<task>": 0.95 | {"min_recovery": 0.95, "stderr_k":
    2, "max_loss": 0.03, "max_relative_loss": 0.05, "gate": false}}``. The most specific key wins;
    metric names may omit lm-eval's ``,none`` filter suffix. The margin comes from the most
    specific level that sets ``max_loss`` or ``max_relative_loss``; a level that sets both
    takes the smaller margin.
    """

    min_recovery: float = DEFAULT_MIN_RECOVERY
    stderr_k: float | None = None
    metrics: dict[str, dict[str, Any]] | None = None
    rule: str = NON_INFERIORITY
    max_loss: float | None = DEFAULT_MAX_LOSS
    max_relative_loss: float | None = None
    alpha: float = DEFAULT_ALPHA
    power: float = DEFAULT_POWER
    allow_inconclusive: bool = False
    multiple_comparisons: str = "holm"

    def rule_for(self, task: str, metric_key: str) -> dict[str, Any]:
        """The effective ``min_recovery``, ``stderr_k``, ``max_loss``, ``max_relative_loss`` and ``gate`` of one task metric."""
        metric = metric_key.split(",", 1)[0]
        rule: dict[str, Any] = {"min_recovery": self.min_recovery, "stderr_k": self.stderr_k, "gate": True,
                                "max_loss": self.max_loss, "max_relative_loss": self.max_relative_loss}
        overrides = self.metrics or {}
        for key in (task, metric, metric_key, f"{task}:{metric}", f"{task}:{metric_key}"):
            if key in overrides:
                override = dict(overrides[key])
                if "max_loss" in override or "max_relative_loss" in override:
                    override = {"max_loss": None, "max_relative_loss": None, **override}
                rule.update(override)
        return rule

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "metrics": self.metrics or {}}


def margin_for(rule: dict[str, Any], base: float) -> float:
    """The non-inferiority margin of a row: ``max_loss``, ``max_relative_loss`` x |base|, or the
    smaller of the two when both apply."""
    margins = [float(rule["max_loss"])] if rule.get("max_loss") is not None else []
    if rule.get("max_relative_loss") is not None:
        margins.append(float(rule["max_relative_loss"]) * abs(base))
    return min(margins) if margins else DEFAULT_MAX_LOSS


def parse_thresholds(text: str | dict[str, Any] | None, field: str = "thresholds") -> Thresholds:
    """Parse the gate's ``thresholds`` JSON (empty: paired non-inferiority, margin 0.02, alpha 0.05,
    Holm) with the typed config of :mod:`shipyard.gates.config` (one-line errors)."""
    cfg = accuracy_config(text, field)
    relative_only = cfg.max_relative_loss is not None and "max_loss" not in cfg.model_fields_set
    return Thresholds(
        min_recovery=cfg.min_recovery,
        stderr_k=cfg.stderr_k,
        metrics={key: rule.model_dump(exclude_unset=True) for key, rule in cfg.metrics.items()},
        rule=cfg.rule,
        max_loss=None if relative_only else cfg.max_loss,
        max_relative_loss=cfg.max_relative_loss,
        alpha=cfg.alpha,
        power=cfg.power,
        allow_inconclusive=cfg.allow_inconclusive,
        multiple_comparisons=cfg.multiple_comparisons,
    )


def recovery(base: float, candidate: float, higher_is_better: bool) -> float:
    """candidate/base (higher is better) or base/candidate (lower is better); see the module doc for 0."""
    num, den = (candidate, base) if higher_is_better else (base, candidate)
    if den == 0:
        better_or_equal = candidate >= base if higher_is_better else candidate <= base
        return 1.0 if better_or_equal else 0.0
    return num / den


@dataclass
class Row:
    """One task metric of the comparison.

    ``rule``: the rule that decided it (``non-inferiority`` or ``recovery``, also on a row that fell
    back to it); ``decision``: ``non-inferior`` / ``inferior`` / ``inconclusive`` / ``no samples``
    (non-inferiority), ``recovered`` / ``within noise`` / ``not recovered`` (recovery), ``missing``.
    """

    task: str
    metric: str
    higher_is_better: bool
    base: float | None
    candidate: float | None
    base_stderr: float | None
    candidate_stderr: float | None
    recovery: float | None
    min_recovery: float
    stderr_k: float | None
    gated: bool
    passed: bool
    note: str
    paired: dict[str, Any] | None = None  # shipyard.gates.paired.Paired as a dict, when samples were logged
    rule: str = RECOVERY
    decision: str = ""
    margin: float | None = None  # the non-inferiority margin, in the metric's units
    p_value: float | None = None  # one-sided, H0: loss >= margin
    p_adjusted: float | None = None  # Holm-adjusted across the gated metrics (= p_value with "none")
    mdl: float | None = None  # minimum detectable loss of this sample size
    settings: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("settings")
        return out


def _diff_stderr(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    return math.sqrt(a * a + b * b)


def compare_metric(task: str, key: str, base: dict[str, Any], cand: dict[str, Any] | None, rule: dict[str, Any],
                   paired: Paired | None = None) -> Row:
    """Compare one metric by the recovery rule; a metric missing from the candidate fails (fail closed)."""
    hib = bool(base.get("higher_is_better", True))
    row = Row(task, key, hib, base["value"], None, base.get("stderr"), None, None,
              rule["min_recovery"], rule["stderr_k"], rule["gate"], False, "",
              paired.to_dict() if paired else None, settings=rule)
    if cand is None or cand.get("value") is None:
        row.note, row.decision = "missing in candidate results", "missing"
        row.passed = not row.gated
        return row
    row.candidate = float(cand["value"])
    row.candidate_stderr = cand.get("stderr")
    row.recovery = recovery(float(base["value"]), row.candidate, hib)
    if row.recovery >= row.min_recovery:
        row.passed, row.note, row.decision = True, "recovered", "recovered"
        return row
    se = _diff_stderr(row.base_stderr, row.candidate_stderr)
    loss = abs(row.candidate - float(base["value"]))
    if row.stderr_k is not None and se is not None and loss <= row.stderr_k * se:
        row.passed, row.decision = True, "within noise"
        row.note = (f"recovery {row.recovery:.4f} < {row.min_recovery:g}, passed by the stderr rule: loss "
                    f"{loss:.4g} <= {row.stderr_k:g} x stderr {se:.4g}")
    else:
        row.note, row.decision = f"recovery {row.recovery:.4f} < {row.min_recovery:g}", "not recovered"
        row.passed = not row.gated
        if not row.gated:
            row.note += " (not gated)"
    return row


def _g(value: float) -> str:
    return f"{value:.3g}"


def loss_text(p: dict[str, Any]) -> str:
    """``loss 0.05 [0.032, 0.068]`` from a row's paired statistics."""
    return f"loss {_g(p['loss'])} [{_g(p['loss_low'])}, {_g(p['loss_high'])}]"


def decide(row: Row, alpha: float, allow_inconclusive: bool, comparisons: int) -> None:
    """Set a tested row's decision, note and pass flag from its (adjusted) p-value and loss interval."""
    p, margin = row.paired or {}, float(row.margin or 0.0)
    p_adj = row.p_adjusted if row.p_adjusted is not None else row.p_value
    holm = f", Holm over {comparisons}" if comparisons > 1 and row.p_adjusted is not None else ""
    if p_adj is not None and p_adj <= alpha:
        row.decision, row.passed = "non-inferior", True
        row.note = f"non-inferior: {loss_text(p)} under the margin {margin:g} (p {p_adj:.3g}{holm})"
    elif p["loss_low"] > margin:
        row.decision, row.passed = "inferior", False
        row.note = f"{loss_text(p)} exceeds the margin {margin:g}"
    else:
        row.decision, row.passed = "inconclusive", allow_inconclusive
        if row.mdl is not None and row.mdl > margin:
            row.note = (f"inconclusive: {p['n']} questions cannot show a loss under {margin:g} (minimum detectable "
                        f"loss {_g(row.mdl)})")
        elif p["loss_high"] <= margin:
            row.note = (f"inconclusive: {loss_text(p)} lies under the margin {margin:g} but p {p_adj:.3g}{holm} > "
                        f"alpha {alpha:g}")
        else:
            row.note = f"inconclusive: {loss_text(p)} straddles the margin {margin:g}"
        if allow_inconclusive:
            row.note += " (allowed: allow_inconclusive)"
    if not row.gated:
        row.passed = True
        row.note += " (not gated)"


def _untested(row: Row, base_samples: Samples, cand_samples: Samples) -> None:
    """A row without paired statistics under the non-inferiority rule: corpus-level metrics fall
    back to the recovery rule (already applied); a per-sample metric without logs fails closed."""
    filt = metric_filter(row.metric)
    logged = filt in sampled_filters(base_samples, row.task) and filt in sampled_filters(cand_samples, row.task)
    if logged or row.metric.split(",", 1)[0] in CORPUS_METRICS:
        row.note = f"{row.note} (no per-sample values: recovery rule)"
        return
    missing = [side for side, samples in (("base", base_samples), ("candidate", cand_samples))
               if filt not in sampled_filters(samples, row.task)]
    which = f" (filter {filt})" if any(sampled_filters(s, row.task) for s in (base_samples, cand_samples)) else ""
    row.rule, row.decision, row.passed = NON_INFERIORITY, "no samples", not row.gated
    row.note = (f"no per-sample logs for {row.task}{which} on the {' and '.join(missing)}: evaluate with "
                "eval_config.log_samples (the default)") + ("" if row.gated else " (not gated)")


def comparisons(rows: list[Row], thresholds: Thresholds) -> int:
    """How many tests the multiple-comparison correction spans: the gated rows with paired statistics."""
    tested = [r for r in rows if r.gated and r.paired and r.candidate is not None]
    return max(1, len(tested)) if thresholds.multiple_comparisons == "holm" else 1


def apply_noninferiority(rows: list[Row], thresholds: Thresholds, base_samples: Samples,
                         cand_samples: Samples) -> None:
    """Decide every row by the non-inferiority rule: p-values, Holm across the gated tested rows,
    minimum detectable losses, decisions; the rest fall back or fail closed (:func:`_untested`)."""
    tested = []
    for row in rows:
        if row.candidate is None or row.base is None:
            row.rule = NON_INFERIORITY
            continue
        if not row.paired:
            _untested(row, base_samples, cand_samples)
            continue
        row.rule = NON_INFERIORITY
        row.margin = margin_for(row.settings, float(row.base))
        row.p_value = noninferiority_p(_paired(row.paired), row.margin)
        tested.append(row)
    gated = [r for r in tested if r.gated]
    adjusted = holm([float(r.p_value or 0.0) for r in gated]) if thresholds.multiple_comparisons == "holm" \
        else [float(r.p_value or 0.0) for r in gated]
    for row, p_adj in zip(gated, adjusted, strict=True):
        row.p_adjusted = p_adj
    m = comparisons(rows, thresholds)
    for row in tested:
        decide(row, thresholds.alpha, thresholds.allow_inconclusive, m)


def _paired(data: dict[str, Any]) -> Paired:
    return Paired(**{**data, "mcnemar": McNemar(**data["mcnemar"]) if data.get("mcnemar") else None})


def add_mdl(rows: list[Row], thresholds: Thresholds) -> None:
    """The minimum detectable loss of every row with paired statistics (any rule)."""
    m = comparisons(rows, thresholds)
    for row in rows:
        if row.paired:
            row.mdl = min_detectable_loss(_paired(row.paired), thresholds.alpha, thresholds.power, m)


def load_summary(results: str | Path, field: str) -> dict[str, Any]:
    """Read an evaluate step's ``summary.json`` (a results folder or the file itself)."""
    def check(summary: dict[str, Any]) -> str | None:
        if not isinstance(summary.get("scores"), dict) or not summary.get("config_hash"):
            return "is not an evaluate summary (no scores or config_hash)"
        return None

    return read_record(results, SUMMARY_FILE, field=field, what="evaluation summary",
                       fix="pass the results artifact of an evaluate step (re-run it if it is damaged)", check=check)


def _check_config_hash(base: dict[str, Any], candidate: dict[str, Any]) -> None:
    if base["config_hash"] == candidate["config_hash"]:
        return
    diff = sorted(
        k for k in set(base.get("config", {})) | set(candidate.get("config", {}))
        if base.get("config", {}).get(k) != candidate.get("config", {}).get(k)
    )
    what = f"differing keys {diff}" if diff else "same keys, different task data or lm-eval version"
    raise ShipyardError(
        "eval_config",
        f"base and candidate were evaluated with different configs (hash {base['config_hash'][:12]} vs "
        f"{candidate['config_hash'][:12]}; {what})",
        "evaluate both with the same eval_config and backend",
    )


def compare(base: dict[str, Any], candidate: dict[str, Any], thresholds: Thresholds,
            base_dir: str | Path | None = None, candidate_dir: str | Path | None = None) -> list[Row]:
    """Rows for every metric of the base, decided by ``thresholds.rule``; unlike evaluations are
    refused (:mod:`shipyard.gates.parity`).

    With both results folders and their per-sample logs, each row also carries its paired
    statistics (:mod:`shipyard.gates.paired`, interval at 1 - 2 x alpha) and minimum detectable loss.
    """
    base_samples = load_samples(base_dir) if base_dir else {}
    cand_samples = load_samples(candidate_dir) if candidate_dir else {}
    check_parity(base, candidate, base_samples, cand_samples)
    _check_config_hash(base, candidate)
    wanted = {task: {key: bool(s.get("higher_is_better", True)) for key, s in metrics.items()}
              for task, metrics in base["scores"].items()}
    paired = compare_samples(base_samples, cand_samples, wanted, confidence=1 - 2 * thresholds.alpha) \
        if base_samples and cand_samples else {}
    rows = []
    for task, metrics in sorted(base["scores"].items()):
        cand_task = candidate["scores"].get(task) or {}
        for key, score in sorted(metrics.items()):
            rows.append(compare_metric(task, key, score, cand_task.get(key), thresholds.rule_for(task, key),
                                       paired.get((task, key))))
    if not rows:
        raise ShipyardError("base_results", "holds no scores to compare", "re-run the evaluate step")
    add_mdl(rows, thresholds)
    if thresholds.rule == NON_INFERIORITY:
        apply_noninferiority(rows, thresholds, base_samples, cand_samples)
    return rows
