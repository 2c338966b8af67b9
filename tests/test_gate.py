"""Recovery math and the accuracy gate (pure Python, base runtime).

The summaries here are written in the evaluate step's format by hand, without per-sample logs, so
the recovery rule (``"rule": "recovery"``, the rule before paired non-inferiority became the
default) is checked against known numbers, and the default rule is shown to fail closed without
logs; tests/test_paired.py checks the default rule on per-sample logs (made up and real), and
tests/test_evaluate.py runs the gate on real lm-eval results.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shipyard.core.errors import ShipyardError
from shipyard.gates.accuracy import run_gate
from shipyard.gates.recovery import compare, parse_thresholds, recovery

RECOVERY = json.dumps({"rule": "recovery"})


def score(value: float, stderr: float | None = None, hib: bool = True) -> dict:
    return {"value": value, "stderr": stderr, "higher_is_better": hib, "metric": "m", "filter": "none"}


def summary(scores: dict, config_hash: str = "c0ffee" * 4, sha: str = "ab" * 32) -> dict:
    return {
        "format": "shipyard.eval/v1",
        "config": {"tasks": ["t"], "limit": None},
        "config_hash": config_hash,
        "model_identity": {"sha256": sha, "files": 3, "bytes": 10},
        "backend": "hf",
        "scores": scores,
    }


def write(tmp_path: Path, name: str, data: dict) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(data))
    return str(folder)


BASE = {
    "mc": {"acc,none": score(0.80, 0.04), "acc_norm,none": score(0.70, 0.05)},
    "ppl": {"word_perplexity,none": score(20.0, None, hib=False), "bits_per_byte,none": score(1.0, None, hib=False)},
}


def test_recovery_higher_is_better() -> None:
    assert recovery(0.80, 0.76, True) == pytest.approx(0.95)
    assert recovery(0.80, 0.88, True) == pytest.approx(1.10)


def test_recovery_lower_is_better_inverts_the_ratio() -> None:
    # perplexity 20 -> 25 is worse: recovery 0.8, not 1.25
    assert recovery(20.0, 25.0, False) == pytest.approx(0.8)
    assert recovery(20.0, 16.0, False) == pytest.approx(1.25)


def test_recovery_zero_denominator() -> None:
    assert recovery(0.0, 0.0, True) == 1.0
    assert recovery(0.0, 0.3, True) == 1.0
    assert recovery(0.5, 0.0, False) == 1.0  # lower is better: 0.5 -> 0 is an improvement
    assert recovery(0.0, 0.5, False) == 0.0
    assert recovery(0.0, 0.0, False) == 1.0


def test_recovery_rule_passes_a_candidate_that_recovers(tmp_path: Path) -> None:
    cand = {
        "mc": {"acc,none": score(0.795, 0.04), "acc_norm,none": score(0.71, 0.05)},
        "ppl": {"word_perplexity,none": score(20.1, None, False), "bits_per_byte,none": score(1.005, None, False)},
    }
    report = tmp_path / "report.md"
    out = run_gate(write(tmp_path, "b", summary(BASE)), write(tmp_path, "c", summary(cand)), RECOVERY, str(report))
    assert out["passed"] is True, out["reason"]
    assert out["reason"].startswith("passed: all 4 gated metrics")
    assert out["metrics"]["gate_passed"] == 1.0
    assert out["metrics"]["recovery/mc/acc"] == pytest.approx(0.795 / 0.80)
    assert out["metrics"]["recovery/ppl/word_perplexity"] == pytest.approx(20.0 / 20.1)
    text = report.read_text()
    assert "# Accuracy gate: PASS" in text
    assert ("| task | metric | base ± stderr | candidate ± stderr | recovery | min recovery | margin | stderr rule | paired (base - candidate) "
            "| decided by | result |") in text
    assert "| mc | acc ↑ | 0.8000 ± 0.0400 | 0.7950 ± 0.0400 | 0.9938 | 0.99 | +0.0038 | off | – | recovery >= min | pass |" in text
    assert "| ppl | word_perplexity ↓ |" in text
    assert "| min_recovery (default) | 0.99 |" in text and "| stderr_k (default) | off |" in text
    assert "| rule | recovery |" in text and out["rule"] == "recovery" and out["rows"][0]["decision"] == "recovered"
    assert "4 metrics compared, 4 gated: 4 recovered, 0 passed by the stderr rule, 0 failed; 0 not gated" in text
    assert "None" not in text and "{'" not in text


def test_recovery_rule_fails_on_a_lower_is_better_regression_and_names_it(tmp_path: Path) -> None:
    cand = {
        "mc": {"acc,none": score(0.80, 0.04), "acc_norm,none": score(0.70, 0.05)},
        "ppl": {"word_perplexity,none": score(30.0, None, False), "bits_per_byte,none": score(1.0, None, False)},
    }
    out = run_gate(write(tmp_path, "b", summary(BASE)), write(tmp_path, "c", summary(cand)), RECOVERY,
                   str(tmp_path / "r.md"))
    assert out["passed"] is False
    assert "ppl word_perplexity,none: recovery 0.6667 < 0.99 (base 20.0000, candidate 30.0000)" in out["reason"]
    assert "1 of 4 gated" in out["reason"]
    failed = [r for r in out["rows"] if not r["passed"]]
    assert [(r["task"], r["metric"]) for r in failed] == [("ppl", "word_perplexity,none")]
    assert "**FAIL**" in (tmp_path / "r.md").read_text()


def test_overrides_most_specific_wins_and_ungated_metrics_do_not_fail(tmp_path: Path) -> None:
    cand = {
        "mc": {"acc,none": score(0.72, 0.04), "acc_norm,none": score(0.56, 0.05)},
        "ppl": {"word_perplexity,none": score(40.0, None, False), "bits_per_byte,none": score(1.0, None, False)},
    }
    thresholds = json.dumps({
        "rule": "recovery",
        "min_recovery": 0.99,
        "metrics": {"acc": 0.5, "mc:acc_norm": {"min_recovery": 0.9}, "ppl:word_perplexity": {"gate": False}},
    })
    out = run_gate(write(tmp_path, "b", summary(BASE)), write(tmp_path, "c", summary(cand)), thresholds)
    rows = {(r["task"], r["metric"]): r for r in out["rows"]}
    assert rows[("mc", "acc,none")]["min_recovery"] == 0.5 and rows[("mc", "acc,none")]["passed"]
    assert rows[("mc", "acc_norm,none")]["min_recovery"] == 0.9  # 0.56/0.70 = 0.8 < 0.9
    assert not rows[("mc", "acc_norm,none")]["passed"]
    assert rows[("ppl", "word_perplexity,none")]["passed"] and not rows[("ppl", "word_perplexity,none")]["gated"]
    assert out["passed"] is False
    assert out["reason"].startswith("failed: 1 of 3 gated metrics") and "mc acc_norm,none" in out["reason"]


def test_stderr_rule_passes_a_loss_within_k_standard_errors(tmp_path: Path) -> None:
    base = {"mc": {"acc,none": score(0.80, 0.04)}}
    cand = {"mc": {"acc,none": score(0.75, 0.045)}}  # loss 0.05, se of the difference 0.0602
    b, c = write(tmp_path, "b", summary(base)), write(tmp_path, "c", summary(cand))
    assert run_gate(b, c, RECOVERY)["passed"] is False
    report = tmp_path / "r.md"
    out = run_gate(b, c, json.dumps({"rule": "recovery", "stderr_k": 1}), str(report))
    assert out["passed"] is True
    assert "passed by the stderr rule: loss 0.05 <= 1 x stderr 0.06021" in out["rows"][0]["note"]
    assert out["rows"][0]["decided_by"] == "stderr rule"
    # the decision and the report say the metric passed below min_recovery, with the stderr and k
    assert out["reason"].startswith("passed: 0 of 1 gated metrics recovered, 1 below min_recovery passed by the stderr "
                                    "rule (of 1 compared): mc acc,none recovery 0.9375 < 0.99"), out["reason"]
    text = report.read_text()
    assert ("**Warning:** mc acc passed below min_recovery 0.99 (recovery 0.9375) only because of the stderr rule: "
            "loss 0.05 <= 1 x 0.06021 = 0.06021 (k = 1, stderr of the difference from base 0.0400 and candidate 0.0450)") in text
    assert "| 0.9375 | 0.99 | -0.0525 (within noise) | loss 0.05 <= 1 x 0.06021 = 0.06021 | – | stderr rule | pass |" in text
    assert "1 passed by the stderr rule" in text
    # a larger loss is outside 1 stderr even with the rule
    far = write(tmp_path, "far", summary({"mc": {"acc,none": score(0.60, 0.05)}}))
    assert run_gate(b, far, json.dumps({"rule": "recovery", "stderr_k": 1}))["passed"] is False


def test_different_configs_are_refused(tmp_path: Path) -> None:
    other = summary(BASE, config_hash="deadbeef" * 3)
    other["config"] = {"tasks": ["t"], "limit": 10}
    with pytest.raises(ShipyardError, match=r"evaluated differently: eval_config.limit: None vs 10"):
        compare(summary(BASE), other, parse_thresholds(""))
    out = run_gate(write(tmp_path, "b", summary(BASE)), write(tmp_path, "c", other), "", str(tmp_path / "r.md"))
    assert out["passed"] is False
    assert out["reason"].startswith("failed closed: eval parity: base and candidate were evaluated differently")
    assert "FAIL" in (tmp_path / "r.md").read_text()


@pytest.mark.parametrize(
    ("make_candidate", "expected"),
    [
        (lambda tmp: str(tmp / "nowhere"), "failed closed: candidate_results: no evaluation summary"),
        (lambda tmp: _raw(tmp, "c", "{not json"), "failed closed: candidate_results: cannot read"),
        (lambda tmp: _raw(tmp, "c", json.dumps({"scores": {}})), "is not an evaluate summary"),
        (lambda tmp: write(tmp, "c", summary({"mc": {"acc,none": score(0.8, 0.04)}})), "missing in candidate results"),
    ],
    ids=["missing", "unreadable", "not-a-summary", "metric-missing"],
)
def test_gate_fails_closed(tmp_path: Path, make_candidate, expected: str) -> None:
    base = write(tmp_path, "b", summary(BASE))
    out = run_gate(base, make_candidate(tmp_path), "", str(tmp_path / "r.md"))
    assert out["passed"] is False
    assert expected in out["reason"]
    assert out["metrics"]["gate_passed"] == 0.0
    assert (tmp_path / "r.md").read_text().startswith("# Accuracy gate: FAIL")


def _raw(tmp: Path, name: str, text: str) -> str:
    folder = tmp / name
    folder.mkdir()
    (folder / "summary.json").write_text(text)
    return str(folder)


def test_missing_base_fails_closed(tmp_path: Path) -> None:
    cand = write(tmp_path, "c", summary(BASE))
    out = run_gate(str(tmp_path / "no-base"), cand, "")
    assert out["passed"] is False and "base_results: no evaluation summary" in out["reason"]


@pytest.mark.parametrize(
    ("thresholds", "message"),
    [
        ("{", "thresholds: is not valid JSON"),
        ("[1]", "thresholds: must be a JSON object"),
        ('{"min_recovery": "high"}', "thresholds.min_recovery: must be a number"),
        ('{"min_recovery": -1}', "thresholds.min_recovery: must be between 0.0 and 10.0"),
        ('{"recovery": 0.9}', "thresholds: unknown key(s) ['recovery']"),
        ('{"metrics": {"acc": {"gate": "no"}}}', "thresholds.metrics.acc.gate: must be true or false"),
    ],
)
def test_bad_thresholds_fail_closed_with_one_line(tmp_path: Path, thresholds: str, message: str) -> None:
    with pytest.raises(ShipyardError) as err:
        parse_thresholds(thresholds)
    assert message in str(err.value) and "\n" not in str(err.value)
    b = write(tmp_path, "b", summary(BASE))
    out = run_gate(b, b, thresholds)
    assert out["passed"] is False and message in out["reason"]


def test_identical_results_pass_the_recovery_rule(tmp_path: Path) -> None:
    b = write(tmp_path, "b", summary(BASE))
    out = run_gate(b, b, RECOVERY)
    assert out["passed"] is True
    assert all(r["recovery"] == 1.0 for r in out["rows"])


def test_default_rule_without_per_sample_logs_fails_closed_and_says_how_to_fix(tmp_path: Path) -> None:
    """The default rule (paired non-inferiority) needs per-sample logs for accuracy metrics: without
    them it fails closed naming eval_config.log_samples; perplexity and bits per byte have no
    per-sample values and are decided by recovery, said on their rows; recovery is on every row.
    The reason never says "recovered" for metrics that were not."""
    b = write(tmp_path, "b", summary(BASE))
    report = tmp_path / "r.md"
    out = run_gate(b, b, "", str(report))
    rows = {(r["task"], r["metric"]): r for r in out["rows"]}
    assert out["passed"] is False and out["rule"] == "non-inferiority"
    assert rows[("mc", "acc,none")]["decision"] == "no samples" and rows[("mc", "acc,none")]["recovery"] == 1.0
    assert rows[("ppl", "word_perplexity,none")]["decision"] == "recovered"
    assert rows[("ppl", "word_perplexity,none")]["note"] == "recovered (no per-sample values: recovery rule)"
    assert out["reason"].startswith("failed: 2 of 4 gated metrics: mc acc,none: no per-sample logs for mc on the base "
                                    "and candidate: evaluate with eval_config.log_samples (the default)")
    assert out["reason"].endswith("(2 without per-sample logs, 2 recovered (recovery rule))")
    assert "recovered (of" not in out["reason"]
    assert out["power"].startswith("no gated metric has per-sample values")
    text = report.read_text()
    assert "| task | metric | base ± stderr | candidate ± stderr | recovery | loss (base - candidate) [interval] |" in text
    assert "**Power:** no gated metric has per-sample values" in text

