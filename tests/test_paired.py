"""Paired accuracy statistics (McNemar, paired bootstrap, the non-inferiority tests, Holm, the minimum
detectable loss), the evaluation-parity guard, and the accuracy gate's default rule (paired
non-inferiority) on per-sample logs shaped like lm-eval's ``--log_samples``.

Known values come from textbook examples or from closed forms computed by hand in the docstrings;
the last two tests run the gate on real lm-eval output of the tiny model (a two-filter task, a
400-question multiple-choice task with planted changes).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from shipyard.core.errors import ShipyardError
from shipyard.gates.accuracy import run_gate
from shipyard.gates.paired import (
    McNemar,
    Paired,
    binomial_cdf,
    compare_samples,
    exact_noninferiority_p,
    holm,
    load_samples,
    mcnemar,
    min_detectable_loss,
    noninferiority_p,
    normal_cdf,
    normal_noninferiority_p,
    normal_quantile,
    paired_bootstrap,
    score_noninferiority_p,
)
from shipyard.gates.parity import check_parity

# --------------------------------------------------------------------------- McNemar, bootstrap


def test_mcnemar_textbook_example() -> None:
    """The 2x2 table of Wikipedia's McNemar article (a=101, b=121, c=59, d=33): the statistic with
    Edwards' continuity correction is (|121 - 59| - 1)^2 / 180 = 20.67, p far below 0.001."""
    base = [1] * 101 + [1] * 121 + [0] * 59 + [0] * 33
    cand = [1] * 101 + [0] * 121 + [1] * 59 + [0] * 33
    m = mcnemar(base, cand)
    assert (m.base_only, m.candidate_only) == (121, 59)
    assert m.chi2_corrected == pytest.approx(3721 / 180)
    assert m.p_value < 1e-3


def test_mcnemar_exact_binomial() -> None:
    """b=2, c=8: exact two-sided p = 2 x P(X <= 2 | n=10, 1/2) = 2 x (1 + 10 + 45) / 1024."""
    base = [1, 1] + [0] * 8 + [1] * 5
    cand = [0, 0] + [1] * 8 + [1] * 5
    assert mcnemar(base, cand).p_value == pytest.approx(112 / 1024)
    assert mcnemar([1, 0], [1, 0]).p_value == 1.0


def test_paired_bootstrap_matches_the_normal_interval() -> None:
    """200 questions, the candidate loses 20 the base got right and wins none: the paired loss is
    0.1 with standard error sqrt(0.1 x 0.9 / 200) = 0.0212, so the 95 % interval is about
    0.1 ± 1.96 x 0.0212 = [0.058, 0.142]; the percentile bootstrap agrees within 0.01."""
    base = [1.0] * 120 + [0.0] * 80
    cand = [0.0] * 20 + [1.0] * 100 + [0.0] * 80
    (lo, hi), (r_lo, r_hi) = paired_bootstrap(base, cand, iters=4000, seed=7)
    half = 1.96 * math.sqrt(0.1 * 0.9 / 200)
    assert lo == pytest.approx(0.1 - half, abs=0.01)
    assert hi == pytest.approx(0.1 + half, abs=0.01)
    assert r_lo < 100 / 120 < r_hi
    (same_lo, same_hi), rec = paired_bootstrap(base, base, iters=200)
    assert (same_lo, same_hi) == (0.0, 0.0) and rec == (1.0, 1.0)


def test_lower_is_better_is_flipped() -> None:
    (lo, hi), _ = paired_bootstrap([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], higher_is_better=False, iters=50)
    assert lo == hi == 1.0  # the candidate's perplexity is 1 higher: a loss of 1


# --------------------------------------------------------------------------- distributions (no scipy)


@pytest.mark.parametrize(("p", "z"), [(0.5, 0.0), (0.8, 0.8416212335729143), (0.95, 1.6448536269514722),
                                      (0.975, 1.959963984540054), (0.99, 2.3263478740408408),
                                      (0.05 / 6, 2.3939797998185104 * -1), (1e-10, -6.361340902404056)])
def test_normal_quantile_known_values(p: float, z: float) -> None:
    """Values from the standard normal table (R's qnorm)."""
    assert normal_quantile(p) == pytest.approx(z, abs=1e-9)
    assert normal_cdf(z) == pytest.approx(p, rel=1e-9)
    with pytest.raises(ValueError):
        normal_quantile(1.0)


def test_binomial_cdf_matches_exact_sums_and_large_n() -> None:
    """Small n against math.comb sums; P(X <= 3 | 20, 0.3) = 0.10709 (binomial table); n = 20,000
    in log space without overflow, near the normal approximation at the mean (1/2 + a continuity term)."""
    for n, p in ((10, 0.5), (17, 0.3), (25, 0.83)):
        for k in range(-1, n + 1):
            exact = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))
            assert binomial_cdf(k, n, p) == pytest.approx(exact, rel=1e-9, abs=1e-15)
    assert binomial_cdf(3, 20, 0.3) == pytest.approx(0.1070868, abs=1e-6)
    assert binomial_cdf(10_000, 20_000, 0.5) == pytest.approx(0.5 + 0.5 * 0.005641, abs=1e-4)
    assert binomial_cdf(5, 10, 0.0) == 1.0 and binomial_cdf(5, 10, 1.0) == 0.0


# --------------------------------------------------------------------------- non-inferiority tests


def test_exact_conditional_test_edge_cases() -> None:
    """b base-only and c candidate-only answers of n; boundary share pi0 = 1/2 + margin x n / (2N)."""
    # N = 0: identical answers show any margin > 0, never a margin of 0
    assert exact_noninferiority_p(0, 0, 100, 0.02) == 0.0
    assert exact_noninferiority_p(0, 0, 100, 0.0) == 1.0
    # pi0 == 1 (margin x n == N): only b == N sits on the boundary
    assert exact_noninferiority_p(2, 0, 100, 0.02) == 1.0
    assert exact_noninferiority_p(1, 1, 100, 0.02) == 0.0
    # pi0 > 1: even b == N is a loss under the margin
    assert exact_noninferiority_p(1, 0, 100, 0.02) == 0.0
    # b=3, c=1, n=100, margin 0.02: pi0 = 0.75, p = P(X <= 3 | 4, 0.75) = 1 - 0.75^4
    assert exact_noninferiority_p(3, 1, 100, 0.02) == pytest.approx(1 - 0.75**4)
    # margin 0 is McNemar's one-sided exact test: P(X <= 2 | 10, 1/2) = 56 / 1024
    assert exact_noninferiority_p(2, 8, 50, 0.0) == pytest.approx(56 / 1024)
    with pytest.raises(ValueError):
        exact_noninferiority_p(3, 3, 5, 0.02)


def test_score_test_counts_the_uncertainty_of_the_discordance() -> None:
    """The score test at the boundary: with no differing answers among n, the restricted estimate of
    P(candidate-only) is 0, so z = -margin / sqrt((margin - margin^2) / n): n=32 gives
    z = -0.808, p = 0.21 (not shown); n=400 gives z = -2.857, p = 0.0021. At margin 0 it is
    McNemar's z = (b - c) / sqrt(b + c)."""
    assert score_noninferiority_p(0, 0, 32, 0.02) == pytest.approx(normal_cdf(-0.02 / math.sqrt(0.0196 / 32)))
    assert score_noninferiority_p(0, 0, 32, 0.02) == pytest.approx(0.2095, abs=1e-4)
    assert score_noninferiority_p(0, 0, 400, 0.02) == pytest.approx(0.00214, abs=1e-5)
    assert score_noninferiority_p(5, 3, 100, 0.0) == pytest.approx(normal_cdf(2 / math.sqrt(8)))
    assert score_noninferiority_p(0, 0, 10, 0.0) == 1.0
    assert score_noninferiority_p(4, 0, 4, 1.0) == 1.0 and score_noninferiority_p(3, 0, 4, 1.0) == 0.0


def _paired(n: int, b: int, c: int) -> Paired:
    return Paired("t", "acc,none", n, 0.5, 0.5 - (b - c) / n, (b - c) / n, 0.0, 0.0, None, None, 0.9,
                  McNemar(b, c, None, 1.0))


def test_the_gate_takes_the_larger_p_of_the_two_tests_for_0_1_metrics() -> None:
    """32 identical answers: the conditional test alone would call a margin of 0.02 shown (p = 0);
    the score test says p = 0.21, and that is what the gate uses."""
    assert noninferiority_p(_paired(32, 0, 0), 0.02) == pytest.approx(0.2095, abs=1e-4)
    big = _paired(400, 12, 8)
    assert noninferiority_p(big, 0.02) == max(exact_noninferiority_p(12, 8, 400, 0.02),
                                              score_noninferiority_p(12, 8, 400, 0.02))


def test_normal_test_for_other_metrics() -> None:
    """Loss 0.01 with sd 0.1 over 400: z = (0.01 - 0.05) / 0.005 = -8 against margin 0.05; a zero sd
    decides by the sign."""
    assert normal_noninferiority_p(0.01, 0.1, 400, 0.05) == pytest.approx(normal_cdf(-8.0))
    assert normal_noninferiority_p(0.01, 0.0, 400, 0.05) == 0.0
    assert normal_noninferiority_p(0.06, 0.0, 400, 0.05) == 1.0


def test_holm_step_down() -> None:
    """p = (0.01, 0.04, 0.03, 0.005): sorted 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06,
    0.04 x 1 = 0.04 -> kept monotone 0.06."""
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([]) == [] and holm([0.7]) == [0.7] and holm([0.6, 0.9]) == [1.0, 1.0]


def test_minimum_detectable_loss() -> None:
    """(z_{1-alpha/m} + z_power) x sd / sqrt(n): 20 of 400 answers differ, sd = sqrt(0.05):
    (1.6449 + 0.8416) x 0.2236 / 20 = 0.0278; with Holm over 6 metrics z_{1-0.05/6} = 2.394;
    identical answers floor the rate at 1/n."""
    assert min_detectable_loss(_paired(400, 20, 0), 0.05, 0.8) == pytest.approx(
        (1.6448536 + 0.8416212) * math.sqrt(0.05) / 20, rel=1e-6)
    assert min_detectable_loss(_paired(400, 20, 0), 0.05, 0.8, 6) == pytest.approx(
        (2.3939798 + 0.8416212) * math.sqrt(0.05) / 20, rel=1e-6)
    assert min_detectable_loss(_paired(400, 0, 0), 0.05, 0.8) == pytest.approx(2.4864748 * math.sqrt(1 / 400) / 20)
    continuous = Paired("t", "f1,none", 100, 0.5, 0.5, 0.0, 0.0, 0.0, None, None, 0.9, None, 0.3)
    assert min_detectable_loss(continuous, 0.05, 0.8) == pytest.approx(2.4864748 * 0.3 / 10)


# --------------------------------------------------------------------------- samples and pairing


def _samples(folder: Path, task: str, values: list[float], prompt: str = "p", metric: str = "acc",
             filt: str = "none") -> Path:
    (folder / "samples").mkdir(parents=True, exist_ok=True)
    with open(folder / "samples" / f"{task}.jsonl", "a") as fh:
        for i, v in enumerate(values):
            fh.write(json.dumps({"doc_id": i, "filter": filt, metric: v, "prompt_hash": f"{prompt}{i}"}) + "\n")
    return folder


def _summary(folder: Path, acc: float, stderr: float, scores: dict | None = None, **extra) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    data = {"format": "shipyard.eval/v1", "config": {"tasks": ["t"], "limit": None, "apply_chat_template": True},
            "config_hash": "c0ffee" * 4, "backend": "hf", "lm_eval_version": "0.4.13",
            "model_identity": {"sha256": "ab" * 32}, "chat_template_sha256": "t1",
            "scores": scores or {"t": {"acc,none": {"value": acc, "stderr": stderr, "higher_is_better": True}}},
            **extra}
    (folder / "summary.json").write_text(json.dumps(data))
    return str(folder)


def _pair(tmp: Path, name: str, base: list[float], cand: list[float], task: str = "t") -> tuple[str, str]:
    """Base and candidate results folders with one 0/1 metric ``acc`` of ``task``."""
    mean = sum(base) / len(base), sum(cand) / len(cand)
    scores = [{task: {"acc,none": {"value": m, "stderr": 0.02, "higher_is_better": True}}} for m in mean]
    return (_summary(_samples(tmp / f"{name}-b", task, base), 0, 0, scores[0]),
            _summary(_samples(tmp / f"{name}-c", task, cand), 0, 0, scores[1]))


def test_compare_samples_pairs_by_doc_id(tmp_path: Path) -> None:
    base = load_samples(_samples(tmp_path / "b", "t", [1, 1, 0, 1]))
    cand = load_samples(_samples(tmp_path / "c", "t", [1, 0, 0, 1]))
    out = compare_samples(base, cand, {"t": {"acc,none": True}}, iters=100)
    p = out[("t", "acc,none")]
    assert p.n == 4 and p.loss == pytest.approx(0.25) and p.mcnemar.base_only == 1


def test_two_filters_are_paired_separately(tmp_path: Path) -> None:
    """lm-eval logs one row per question and filter: rows keyed by doc_id alone let the second
    filter's rows overwrite the first's. Keyed by (doc_id, filter), each metric key pairs its own rows."""
    b = tmp_path / "b"
    _samples(b, "gsm", [1, 1, 0, 0], metric="exact_match", filt="strict-match")
    _samples(b, "gsm", [1, 1, 1, 0, 1], metric="exact_match", filt="flexible-extract")
    c = tmp_path / "c"
    _samples(c, "gsm", [1, 0, 0, 0], metric="exact_match", filt="strict-match")
    _samples(c, "gsm", [1, 1, 1, 0, 1], metric="exact_match", filt="flexible-extract")
    base, cand = load_samples(b), load_samples(c)
    assert len(base["gsm"]) == 9
    out = compare_samples(base, cand, {"gsm": {"exact_match,strict-match": True, "exact_match,flexible-extract": True}})
    strict, flexible = out[("gsm", "exact_match,strict-match")], out[("gsm", "exact_match,flexible-extract")]
    assert (strict.n, strict.loss, strict.mcnemar.base_only) == (4, 0.25, 1)
    assert (flexible.n, flexible.loss, flexible.base_mean) == (5, 0.0, 0.8)


# --------------------------------------------------------------------------- the gate's default rule


def test_default_gate_refuses_a_5_point_loss_and_passes_no_loss(tmp_path: Path) -> None:
    """400 questions: 20 the base got right lost (loss 0.05, interval about [0.032, 0.068]) is
    "inferior" at the default margin 0.02; the same answers are "non-inferior" (p = 0.0021)."""
    base = [1.0] * 300 + [0.0] * 100
    b, c = _pair(tmp_path, "loss", base, [0.0] * 20 + [1.0] * 280 + [0.0] * 100)
    report = tmp_path / "r.md"
    out = run_gate(b, c, "", str(report))
    row = out["rows"][0]
    assert out["passed"] is False and row["decision"] == "inferior" and row["margin"] == 0.02
    assert out["reason"].startswith("failed: 1 of 1 gated metric: t acc,none: loss 0.05 [0.03")
    assert "exceeds the margin 0.02 (1 inferior)" in out["reason"]
    assert row["paired"]["loss_low"] > 0.02 and row["p_value"] > 0.5 and row["decided_by"] == "non-inferiority test"
    assert (out["rule"], out["alpha"], out["multiple_comparisons"], out["comparisons"]) == (
        "non-inferiority", 0.05, "holm", 1)
    text = report.read_text()
    assert "**Rule:** paired non-inferiority" in text and "| rule | non-inferiority |" in text
    assert "| max_loss (default) | 0.02 |" in text and "| alpha (one-sided) | 0.05 |" in text
    assert "**Power:** with n=400 per task the smallest loss this gate can rule out at alpha 0.05 (Holm over 1 " \
           "metric), power 0.8, is 0.0278" in text
    assert "| t | acc ↑ | 0.7500 ± 0.0200 | 0.7000 ± 0.0200 | 0.9333 | 0.05 [0.03" in text
    assert "(90%, n=400) | 0.02 |" in text and "| b=20 c=0 p=1.91e-06 | inferior | **FAIL** |" in text

    same = run_gate(b, _pair(tmp_path, "same", base, base)[1], "")
    assert same["passed"] is True and same["rows"][0]["decision"] == "non-inferior"
    assert same["rows"][0]["p_value"] == pytest.approx(0.00214, abs=1e-5)
    assert same["reason"] == ("passed: 1 non-inferior (margin 0.02) (of 1 gated metric, 1 compared; alpha 0.05, "
                              "Holm over 1)")


def test_too_few_questions_is_inconclusive_and_fails_closed(tmp_path: Path) -> None:
    """32 questions, 2 lost: the gate cannot resolve a margin of 0.02 and says so, with the minimum
    detectable loss; allow_inconclusive lets it pass with a warning; rule recovery decides alone."""
    base = [1.0] * 24 + [0.0] * 8
    b, c = _pair(tmp_path, "small", base, [0.0] * 2 + [1.0] * 22 + [0.0] * 8)
    out = run_gate(b, c, "", str(tmp_path / "r.md"))
    row = out["rows"][0]
    assert out["passed"] is False and row["decision"] == "inconclusive"
    assert row["mdl"] == pytest.approx(2.4864748 * math.sqrt(2 / 32) / math.sqrt(32), rel=1e-6)
    assert f"inconclusive: 32 questions cannot show a loss under 0.02 (minimum detectable loss {row['mdl']:.3g})" \
        in out["reason"]
    assert "all 1 gated metrics recovered" not in out["reason"] and "(1 inconclusive)" in out["reason"]
    assert out["power"].endswith("; margin 0.02, smaller than the minimum detectable loss of 1 of 1 metrics")

    allowed = run_gate(b, c, json.dumps({"allow_inconclusive": True}), str(tmp_path / "a.md"))
    assert allowed["passed"] is True and allowed["rows"][0]["decision"] == "inconclusive"
    assert "allowed by allow_inconclusive: t acc,none: inconclusive: 32 questions" in allowed["reason"]
    assert ("**Warning:** t acc passed only because allow_inconclusive is set: inconclusive: 32 questions cannot "
            "show a loss under 0.02") in (tmp_path / "a.md").read_text()

    recovery = run_gate(b, c, json.dumps({"rule": "recovery", "min_recovery": 0.9}))
    assert recovery["passed"] is True and recovery["rows"][0]["decision"] == "recovered"
    assert recovery["rows"][0]["p_value"] is None and recovery["rule"] == "recovery"


def test_a_straddling_interval_says_so(tmp_path: Path) -> None:
    """400 questions, 16 lost and 8 won: loss 0.02 on the margin itself, enough answers differ for
    the test to resolve 0.02 in principle (minimum detectable loss under the margin)."""
    base = [1.0] * 16 + [0.0] * 8 + [1.0] * 276 + [0.0] * 100
    cand = [0.0] * 16 + [1.0] * 8 + [1.0] * 276 + [0.0] * 100
    b, c = _pair(tmp_path, "straddle", base, cand)
    out = run_gate(b, c, json.dumps({"max_loss": 0.05}))
    assert out["rows"][0]["decision"] == "non-inferior"
    out = run_gate(b, c, json.dumps({"max_loss": 0.035}))
    row = out["rows"][0]
    assert row["decision"] == "inconclusive" and row["mdl"] < 0.035 < row["paired"]["loss_high"]
    assert "inconclusive: loss 0.02 [" in row["note"] and "straddles the margin 0.035" in row["note"]


def test_holm_across_metrics_and_its_report(tmp_path: Path) -> None:
    """Two tasks, each alone non-inferior at p just under 0.05; Holm over the 2 gated metrics lifts
    the larger p above alpha, "none" does not; an ungated metric is not counted."""
    base = [1.0] * 7 + [0.0] * 2 + [1.0] * 291 + [0.0] * 100
    cand = [0.0] * 7 + [1.0] * 2 + [1.0] * 291 + [0.0] * 100  # loss 5 / 400 = 0.0125 against margin 0.03
    bb, cc = tmp_path / "b", tmp_path / "c"
    for task in ("t1", "t2", "t3"):
        _samples(bb, task, base)
        _samples(cc, task, cand)
    scores = {t: {"acc,none": {"value": 0.75, "stderr": 0.02, "higher_is_better": True}} for t in ("t1", "t2", "t3")}
    cand_scores = {t: {"acc,none": {"value": 0.7375, "stderr": 0.02, "higher_is_better": True}} for t in scores}
    b, c = _summary(bb, 0, 0, scores), _summary(cc, 0, 0, cand_scores)
    rules = {"max_loss": 0.03, "metrics": {"t3": {"gate": False}}}
    none = run_gate(b, c, json.dumps({**rules, "multiple_comparisons": "none"}))
    raw = none["rows"][0]["p_value"]
    assert 0.025 < raw < 0.05 and none["passed"] is True
    report = tmp_path / "holm.md"
    out = run_gate(b, c, json.dumps(rules), str(report))
    gated = [r for r in out["rows"] if r["gated"]]
    assert [r["p_adjusted"] for r in gated] == pytest.approx([2 * raw, 2 * raw])
    assert out["rows"][2]["p_adjusted"] is None and out["comparisons"] == 2
    assert out["passed"] is False and all(r["decision"] == "inconclusive" for r in gated)
    assert f"lies under the margin 0.03 but p {2 * raw:.3g}, Holm over 2 > alpha 0.05" in gated[0]["note"]
    assert f"| {raw:.3g} / {2 * raw:.3g} |" in report.read_text()
    assert "(Holm over 2 metrics)" in out["power"]


def test_margins_relative_and_per_metric(tmp_path: Path) -> None:
    """max_relative_loss x |base| replaces the default absolute margin; a per-metric override wins;
    one level with both takes the smaller margin."""
    base = [1.0] * 300 + [0.0] * 100
    b, c = _pair(tmp_path, "m", base, base)
    assert run_gate(b, c, json.dumps({"max_relative_loss": 0.1}))["rows"][0]["margin"] == pytest.approx(0.075)
    both = run_gate(b, c, json.dumps({"max_relative_loss": 0.1, "max_loss": 0.05}))
    assert both["rows"][0]["margin"] == pytest.approx(0.05)
    over = run_gate(b, c, json.dumps({"max_relative_loss": 0.1, "metrics": {"t:acc": {"max_loss": 0.01}}}))
    assert over["rows"][0]["margin"] == pytest.approx(0.01)


def test_metrics_without_per_sample_values_fall_back_and_missing_logs_fail_closed(tmp_path: Path) -> None:
    """Perplexity (corpus-level) is decided by recovery, said on its row; an accuracy metric whose
    task has no per-sample logs fails closed with the fix."""
    scores = {"t": {"acc,none": {"value": 0.75, "stderr": 0.02, "higher_is_better": True}},
              "ppl": {"word_perplexity,none": {"value": 20.0, "stderr": None, "higher_is_better": False}},
              "u": {"acc,none": {"value": 0.5, "stderr": 0.05, "higher_is_better": True}}}
    b = _summary(_samples(tmp_path / "b", "t", [1.0] * 300 + [0.0] * 100), 0, 0, scores)
    c = _summary(_samples(tmp_path / "c", "t", [1.0] * 300 + [0.0] * 100), 0, 0, scores)
    out = run_gate(b, c, "", str(tmp_path / "r.md"))
    rows = {r["task"]: r for r in out["rows"]}
    assert rows["ppl"]["passed"] and rows["ppl"]["rule"] == "recovery"
    assert rows["ppl"]["note"] == "recovered (no per-sample values: recovery rule)"
    assert rows["u"]["passed"] is False and rows["u"]["decided_by"] == "no per-sample logs"
    assert rows["u"]["note"] == ("no per-sample logs for u on the base and candidate: evaluate with "
                                 "eval_config.log_samples (the default)")
    assert out["passed"] is False and "u acc,none: no per-sample logs for u" in out["reason"]
    assert "| recovered (no per-sample values: recovery rule) | pass |" in (tmp_path / "r.md").read_text()


def test_a_continuous_per_sample_metric_uses_the_normal_test(tmp_path: Path) -> None:
    """A lower-is-better per-sample score (not 0/1): loss = candidate - base, normal approximation."""
    base = [0.5 + 0.01 * (i % 7) for i in range(200)]
    cand = [v + 0.001 for v in base]
    scores = [{"t": {"err,none": {"value": sum(v) / len(v), "stderr": 0.01, "higher_is_better": False}}}
              for v in (base, cand)]
    b = _summary(_samples(tmp_path / "b", "t", base, metric="err"), 0, 0, scores[0])
    c = _summary(_samples(tmp_path / "c", "t", cand, metric="err"), 0, 0, scores[1])
    row = run_gate(b, c, "")["rows"][0]
    assert row["paired"]["mcnemar"] is None and row["paired"]["loss"] == pytest.approx(0.001)
    assert row["decision"] == "non-inferior" and row["p_value"] == 0.0  # every difference is exactly 0.001


# --------------------------------------------------------------------------- bad thresholds


@pytest.mark.parametrize(("thresholds", "field", "text"), [
    ('{"paired_max_loss": 0.02}', "thresholds.paired_max_loss", "paired_max_loss is now max_loss"),
    ('{"paired_confidence": 0.9}', "thresholds.paired_confidence", "paired_confidence is now alpha"),
    ('{"metrics": {"acc": {"paired_max_loss": 0.02}}}', "thresholds.metrics.acc.paired_max_loss",
     "paired_max_loss is now max_loss"),
    ('{"rule": "superiority"}', "thresholds.rule", "must be 'non-inferiority' or 'recovery'"),
    ('{"max_loss": -1}', "thresholds.max_loss", "must be between"),
    ('{"max_loss": "2 points"}', "thresholds.max_loss", "must be a number"),
    ('{"max_relative_loss": 1.5}', "thresholds.max_relative_loss", "must be between 0.0 and 1.0"),
    ('{"alpha": 0}', "thresholds.alpha", "must be in (0, 0.25]"),
    ('{"alpha": 0.5}', "thresholds.alpha", "must be in (0, 0.25]"),
    ('{"power": 1}', "thresholds.power", "must be in [0.5, 1)"),
    ('{"allow_inconclusive": "yes"}', "thresholds.allow_inconclusive", "must be true or false"),
    ('{"multiple_comparisons": "bonferroni"}', "thresholds.multiple_comparisons", "must be 'holm' or 'none'"),
    ('{"metrics": {"acc": {"max_relative_loss": -0.1}}}', "thresholds.metrics.acc.max_relative_loss", "must be"),
])
def test_bad_accuracy_keys_are_one_line_naming_the_key(tmp_path: Path, thresholds: str, field: str, text: str) -> None:
    b = _summary(tmp_path / "b", 0.7, 0.02)
    out = run_gate(b, b, thresholds)
    assert out["passed"] is False and "\n" not in out["reason"]
    assert out["reason"].startswith(f"failed closed: {field}: ") and text in out["reason"]


# --------------------------------------------------------------------------- parity


def test_parity_guard_refuses_a_changed_chat_template(tmp_path: Path) -> None:
    b = json.loads(Path(_summary(tmp_path / "b", 0.7, 0.02), "summary.json").read_text())
    c = {**b, "chat_template_sha256": "t2"}
    with pytest.raises(ShipyardError, match=r"eval parity: .*chat template \(sha256\): t1 vs t2"):
        check_parity(b, c)
    plain = {**b["config"], "apply_chat_template": False}
    check_parity({**b, "config": plain}, {**c, "config": plain})  # the template is not used: not compared
    with pytest.raises(ShipyardError, match=r"lm_eval_version: '0.4.13' vs '0.4.14'"):
        check_parity(b, {**b, "lm_eval_version": "0.4.14"})


def test_parity_guard_compares_prompts_question_by_question(tmp_path: Path) -> None:
    base = load_samples(_samples(tmp_path / "b", "t", [1, 1], prompt="p"))
    cand = load_samples(_samples(tmp_path / "c", "t", [1, 1], prompt="q"))
    _samples(tmp_path / "b", "t", [1, 1], prompt="p", filt="other")  # a second filter: still 2 questions
    _samples(tmp_path / "c", "t", [1, 1], prompt="q", filt="other")
    base, cand = load_samples(tmp_path / "b"), load_samples(tmp_path / "c")
    summ = json.loads(Path(_summary(tmp_path / "s", 0.7, 0.02), "summary.json").read_text())
    with pytest.raises(ShipyardError, match=r"task t: 2 question\(s\) asked with different prompts \(first doc_id 0\)"):
        check_parity(summ, summ, base, cand)


# --------------------------------------------------------------------------- real lm-eval output (tiny model)

TWO_FILTER_TASK = """task: shipyard_test_two_filters
custom_dataset: !function utils.load_jsonl
dataset_kwargs:
  data_file: two_filters.jsonl
test_split: test
output_type: generate_until
doc_to_text: "Question: {{question}}\\nAnswer:"
doc_to_target: "{{answer}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 4
  do_sample: false
filter_list:
  - name: strict-match
    filter:
      - function: regex
        regex_pattern: "(\\\\d+)"
      - function: take_first
  - name: flexible-extract
    filter:
      - function: custom
        filter_fn: !function utils.contains_answer
      - function: take_first
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""

MC_TASK = """task: shipyard_test_planted_mc
custom_dataset: !function utils.load_jsonl
dataset_kwargs:
  data_file: planted_mc.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{question}}\\nAnswer:"
doc_to_choice: "{{choices}}"
doc_to_target: label
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""
MC_ITEMS = 400


def _task_folder(root: Path) -> Path:
    """Two custom lm-eval tasks written the way the offline suite writes its own: a generation task
    with two filters (6 items) and a 4-way multiple-choice task of 400 generated items."""
    import random

    from shipyard.evaluation.config import SUITE_DIR

    folder = root / "tasks"
    folder.mkdir()
    (folder / "utils.py").write_text((SUITE_DIR / "utils.py").read_text())
    (folder / "two_filters.yaml").write_text(TWO_FILTER_TASK)
    (folder / "planted_mc.yaml").write_text(MC_TASK)
    gen = [{"question": f"What is {a} plus {b}?", "answer": str(a + b)} for a, b in
           ((1, 2), (3, 4), (2, 2), (5, 1), (6, 3), (4, 4))]
    (folder / "two_filters.jsonl").write_text("".join(json.dumps(r) + "\n" for r in gen))
    rng = random.Random(31)
    rows = []
    for i in range(MC_ITEMS):
        a, b = rng.randrange(1, 50), rng.randrange(1, 50)
        wrong = rng.sample([x for x in range(2, 100) if x != a + b], 3)
        label = rng.randrange(4)
        choices = [str(x) for x in wrong[:label] + [a + b] + wrong[label:]]
        rows.append({"question": f"Item {i}: what is {a} plus {b}?", "choices": choices, "label": label})
    (folder / "planted_mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _evaluate(model: Path, root: Path, task: str) -> Path:
    """One task of :func:`_task_folder` evaluated for real (lm-eval, hf backend, per-sample logs)."""
    from shipyard.evaluation.lmeval import evaluate_model
    from shipyard.runtimes.runtime import run_in_runtime

    config = {"tasks": [task], "task_dir": str(_task_folder(root)), "log_samples": True, "cache": False,
              "batch_size": 32}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHIPYARD_CACHE", str(root / "cache"))
        run_in_runtime("compress", evaluate_model, model_dir=str(model), eval_config=json.dumps(config),
                       out_dir=str(root / "base"), backend="hf")
    return root / "base"


@pytest.fixture(scope="module")
def two_filter_results(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two-filter generation task, evaluated once for real on the tiny model."""
    return _evaluate(tiny_model, tmp_path_factory.mktemp("two-filters"), "shipyard_test_two_filters")


@pytest.fixture(scope="module")
def planted_results(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 400-question multiple-choice task, evaluated once for real on the tiny model."""
    return _evaluate(tiny_model, tmp_path_factory.mktemp("planted"), "shipyard_test_planted_mc")


def _rows(folder: Path, task: str) -> list[dict]:
    return [json.loads(line) for line in (folder / "samples" / f"{task}.jsonl").read_text().splitlines()]


def _write_rows(folder: Path, task: str, rows: list[dict]) -> None:
    (folder / "samples" / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _candidate(base: Path, out: Path, task: str, metric: str, changes: dict[tuple, float]) -> str:
    """A copy of real results with ``changes`` ({(doc_id, filter): value}) planted in the samples and
    the summary's score (and its stderr) recomputed from them, as lm-eval computes a mean."""
    import shutil

    shutil.copytree(base, out)
    rows = _rows(out, task)
    for row in rows:
        row[metric] = changes.get((row["doc_id"], row["filter"]), row[metric])
    _write_rows(out, task, rows)
    summary = json.loads((out / "summary.json").read_text())
    for key, score in summary["scores"][task].items():
        values = [float(r[metric]) for r in rows if r["filter"] == key.split(",", 1)[1]]
        mean = sum(values) / len(values)
        score.update(value=mean, stderr=math.sqrt(mean * (1 - mean) / (len(values) - 1)))
    (out / "summary.json").write_text(json.dumps(summary))
    return str(out)


@pytest.mark.slow  # lm-eval's start and 6 generations: 20-30 s on two CPU cores
def test_two_filters_pair_separately_on_real_lm_eval_output(two_filter_results: Path, tmp_path: Path) -> None:
    """Real lm-eval 0.4.13 ``log_samples`` writes one row per question and filter; both filters'
    metric keys get their own paired statistics over all 6 questions, and a change planted in
    one filter moves only that filter's loss."""
    task = "shipyard_test_two_filters"
    rows = _rows(two_filter_results, task)
    assert sorted({r["filter"] for r in rows}) == ["flexible-extract", "strict-match"] and len(rows) == 12
    summary = json.loads((two_filter_results / "summary.json").read_text())
    assert sorted(summary["scores"][task]) == ["exact_match,flexible-extract", "exact_match,strict-match"]
    flexible = {(r["doc_id"], "flexible-extract"): 1.0 - float(r["exact_match"]) for r in rows
                if r["filter"] == "flexible-extract" and r["doc_id"] in (0, 1)}
    cand = _candidate(two_filter_results, tmp_path / "cand", task, "exact_match", flexible)
    out = run_gate(str(two_filter_results), cand, "")
    by_key = {r["metric"]: r for r in out["rows"] if r["task"] == task}
    strict, flex = by_key["exact_match,strict-match"], by_key["exact_match,flexible-extract"]
    assert strict["paired"]["n"] == flex["paired"]["n"] == 6
    assert strict["paired"]["loss"] == 0.0 and strict["paired"]["mcnemar"]["base_only"] == 0
    changed = sum(1.0 - 2 * v for v in flexible.values())  # +1 where a right answer was made wrong
    assert flex["paired"]["loss"] == pytest.approx(changed / 6)
    assert flex["paired"]["mcnemar"]["base_only"] + flex["paired"]["mcnemar"]["candidate_only"] == 2
    assert strict["p_value"] is not None and flex["p_value"] is not None


@pytest.mark.slow  # lm-eval on 400 questions: about a minute on two CPU cores
def test_planted_5_point_loss_is_refused_and_no_loss_passes_by_default(planted_results: Path, tmp_path: Path) -> None:
    """Real lm-eval output of a 400-question 0/1 task: a candidate that gets 20 of the base's right
    answers wrong (a 5-point loss) is refused by the default gate ("{}"); an unchanged copy and
    one with 5 answers lost and 5 gained (no loss) pass."""
    task = "shipyard_test_planted_mc"
    rows = sorted(_rows(planted_results, task), key=lambda r: r["doc_id"])
    assert len(rows) == MC_ITEMS and all(r["filter"] == "none" for r in rows)
    right = [r["doc_id"] for r in rows if float(r["acc"]) == 1.0]
    wrong = [r["doc_id"] for r in rows if float(r["acc"]) == 0.0]
    assert len(right) >= 20 and len(wrong) >= 5, f"the tiny model got {len(right)} of {MC_ITEMS} right"
    thresholds = "{}"

    loss = _candidate(planted_results, tmp_path / "loss", task, "acc", {(d, "none"): 0.0 for d in right[:20]})
    refused = run_gate(str(planted_results), loss, thresholds, str(tmp_path / "loss.md"))
    (row,) = [r for r in refused["rows"] if r["task"] == task]
    assert refused["passed"] is False and row["decision"] == "inferior", refused["reason"]
    assert row["paired"]["loss"] == pytest.approx(0.05) and row["paired"]["loss_low"] > 0.02
    assert f"{task} acc,none: loss 0.05 [" in refused["reason"] and "exceeds the margin 0.02" in refused["reason"]

    for name, changes in (("same", {}), ("swapped", {**{(d, "none"): 0.0 for d in right[:5]},
                                                     **{(d, "none"): 1.0 for d in wrong[:5]}})):
        cand = _candidate(planted_results, tmp_path / name, task, "acc", changes)
        passed = run_gate(str(planted_results), cand, thresholds, str(tmp_path / f"{name}.md"))
        (row,) = [r for r in passed["rows"] if r["task"] == task]
        assert passed["passed"] is True and row["decision"] == "non-inferior", (name, passed["reason"])
        assert row["paired"]["loss"] == 0.0 and row["p_adjusted"] <= 0.05
    text = (tmp_path / "swapped.md").read_text()
    assert "**Power:** with n=400 per task" in text and "| b=5 c=5 p=1 | non-inferior | pass |" in text
