"""Recovery of a candidate against its base, per task and metric, and the pass/fail rule.

recovery = candidate / base for higher-is-better metrics (accuracy) and base / candidate for
lower-is-better ones (perplexity, bits per byte), so recovery < 1 always means "the candidate
is worse". When the denominator is 0 the ratio is undefined: recovery is 1.0 if the candidate
is at least as good as the base and 0.0 otherwise.

A metric passes when recovery >= its minimum (default 0.99) or, with the optional
``paired_max_loss`` rule, when the upper bound of its paired loss interval (question by question,
:mod:`shipyard.gates.paired`) is at most that tolerance, or, with the optional ``stderr_k``
rule, when the candidate's loss is within k standard errors of the difference
(sqrt(se_base^2 + se_candidate^2)), which keeps small eval sets from failing on noise. Before
anything is compared, :mod:`shipyard.gates.parity` refuses unlike evaluations.

Pure Python: runs in the base runtime.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.records import read_record
from shipyard.gates.config import DEFAULT_MIN_RECOVERY, accuracy_config
from shipyard.gates.paired import Paired, compare_samples, load_samples
from shipyard.gates.parity import check_parity

SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class Thresholds:
    """Gate thresholds, parsed from the ``thresholds`` JSON string.

    ``{"min_recovery": 0.99, "stderr_k": null, "metrics": {"<task>:<metric>" | "<metric>" | "<task>":
    0.95 | {"min_recovery": 0.95, "stderr_k": 2, "gate": false}}}``. The most specific key wins;
    metric names may omit lm-eval's ``,none`` filter suffix.
    """

    min_recovery: float = DEFAULT_MIN_RECOVERY
    stderr_k: float | None = None
    metrics: dict[str, dict[str, Any]] | None = None
    paired_max_loss: float | None = None
    paired_confidence: float = 0.95

    def rule_for(self, task: str, metric_key: str) -> dict[str, Any]:
        """The effective ``min_recovery``, ``stderr_k``, ``paired_max_loss`` and ``gate`` flag for one task metric."""
        metric = metric_key.split(",", 1)[0]
        rule: dict[str, Any] = {"min_recovery": self.min_recovery, "stderr_k": self.stderr_k,
                                "paired_max_loss": self.paired_max_loss, "gate": True}
        overrides = self.metrics or {}
        for key in (task, metric, metric_key, f"{task}:{metric}", f"{task}:{metric_key}"):
            if key in overrides:
                rule.update(overrides[key])
        return rule


def parse_thresholds(text: str | dict[str, Any] | None, field: str = "thresholds") -> Thresholds:
    """Parse the gate's ``thresholds`` JSON (empty: 0.99 recovery on every metric) with the typed
    config of :mod:`shipyard.gates.config` (one-line errors)."""
    cfg = accuracy_config(text, field)
    return Thresholds(
        min_recovery=cfg.min_recovery,
        stderr_k=cfg.stderr_k,
        metrics={key: rule.model_dump(exclude_unset=True) for key, rule in cfg.metrics.items()},
        paired_max_loss=cfg.paired_max_loss,
        paired_confidence=cfg.paired_confidence,
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
    """One task metric of the comparison."""

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
    paired_max_loss: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _diff_stderr(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    return math.sqrt(a * a + b * b)


def compare_metric(task: str, key: str, base: dict[str, Any], cand: dict[str, Any] | None, rule: dict[str, Any],
                   paired: Paired | None = None) -> Row:
    """Compare one metric; a metric missing from the candidate fails (fail closed)."""
    hib = bool(base.get("higher_is_better", True))
    row = Row(task, key, hib, base["value"], None, base.get("stderr"), None, None,
              rule["min_recovery"], rule["stderr_k"], rule["gate"], False, "",
              paired.to_dict() if paired else None, rule.get("paired_max_loss"))
    if cand is None or cand.get("value") is None:
        row.note = "missing in candidate results"
        row.passed = not row.gated
        return row
    row.candidate = float(cand["value"])
    row.candidate_stderr = cand.get("stderr")
    row.recovery = recovery(float(base["value"]), row.candidate, hib)
    if row.recovery >= row.min_recovery:
        row.passed = True
        row.note = "recovered"
    elif row.paired_max_loss is not None and paired is not None and paired.loss_high <= row.paired_max_loss:
        row.passed = True
        row.note = (f"recovery {row.recovery:.4f} < {row.min_recovery:g}, passed by the paired rule: loss upper bound "
                    f"{paired.loss_high:.4g} <= {row.paired_max_loss:g} ({paired.confidence:.0%} paired bootstrap, "
                    f"n={paired.n})")
    else:
        se = _diff_stderr(row.base_stderr, row.candidate_stderr)
        loss = abs(row.candidate - float(base["value"]))
        if row.stderr_k is not None and se is not None and loss <= row.stderr_k * se:
            row.passed = True
            row.note = (f"recovery {row.recovery:.4f} < {row.min_recovery:g}, passed by the stderr rule: loss "
                        f"{loss:.4g} <= {row.stderr_k:g} x stderr {se:.4g}")
        else:
            row.note = f"recovery {row.recovery:.4f} < {row.min_recovery:g}"
            row.passed = not row.gated
            if not row.gated:
                row.note += " (not gated)"
    return row


def load_summary(results: str | Path, field: str) -> dict[str, Any]:
    """Read an evaluate step's ``summary.json`` (a results folder or the file itself)."""
    def check(summary: dict[str, Any]) -> str | None:
        if not isinstance(summary.get("scores"), dict) or not summary.get("config_hash"):
            return "is not an evaluate summary (no scores or config_hash)"
        return None

    return read_record(results, SUMMARY_FILE, field=field, what="evaluation summary",
                       fix="pass the results artifact of an evaluate step (re-run it if it is damaged)", check=check)


def compare(base: dict[str, Any], candidate: dict[str, Any], thresholds: Thresholds,
            base_dir: str | Path | None = None, candidate_dir: str | Path | None = None) -> list[Row]:
    """Rows for every metric of the base; unlike evaluations are refused (:mod:`shipyard.gates.parity`).

    With both results folders and their per-sample logs, each row also carries its paired
    statistics (:mod:`shipyard.gates.paired`), which the ``paired_max_loss`` rule uses.
    """
    base_samples = load_samples(base_dir) if base_dir else {}
    cand_samples = load_samples(candidate_dir) if candidate_dir else {}
    check_parity(base, candidate, base_samples, cand_samples)
    if base["config_hash"] != candidate["config_hash"]:
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
    wanted = {task: {key: bool(s.get("higher_is_better", True)) for key, s in metrics.items()}
              for task, metrics in base["scores"].items()}
    paired = compare_samples(base_samples, cand_samples, wanted, confidence=thresholds.paired_confidence) \
        if base_samples and cand_samples else {}
    rows = []
    for task, metrics in sorted(base["scores"].items()):
        cand_task = candidate["scores"].get(task) or {}
        for key, score in sorted(metrics.items()):
            rows.append(compare_metric(task, key, score, cand_task.get(key), thresholds.rule_for(task, key),
                                       paired.get((task, key))))
    if not rows:
        raise ShipyardError("base_results", "holds no scores to compare", "re-run the evaluate step")
    return rows
