"""Paired accuracy statistics (McNemar, paired bootstrap), the evaluation-parity guard, and the
accuracy gate's paired rule, on made-up per-sample logs shaped like lm-eval's ``--log_samples``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from shipyard.core.errors import ShipyardError
from shipyard.gates.accuracy import run_gate
from shipyard.gates.paired import compare_samples, load_samples, mcnemar, paired_bootstrap
from shipyard.gates.parity import check_parity


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


def _samples(folder: Path, task: str, values: list[float], prompt: str = "p", metric: str = "acc") -> Path:
    (folder / "samples").mkdir(parents=True, exist_ok=True)
    with open(folder / "samples" / f"{task}.jsonl", "w") as fh:
        for i, v in enumerate(values):
            fh.write(json.dumps({"doc_id": i, "filter": "none", metric: v, "prompt_hash": f"{prompt}{i}"}) + "\n")
    return folder


def _summary(folder: Path, acc: float, stderr: float, **extra) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    data = {"format": "shipyard.eval/v1", "config": {"tasks": ["t"], "limit": None, "apply_chat_template": True},
            "config_hash": "c0ffee" * 4, "backend": "hf", "lm_eval_version": "0.4.13",
            "model_identity": {"sha256": "ab" * 32}, "chat_template_sha256": "t1",
            "scores": {"t": {"acc,none": {"value": acc, "stderr": stderr, "higher_is_better": True}}}, **extra}
    (folder / "summary.json").write_text(json.dumps(data))
    return str(folder)


def test_compare_samples_pairs_by_doc_id(tmp_path: Path) -> None:
    base = load_samples(_samples(tmp_path / "b", "t", [1, 1, 0, 1]))
    cand = load_samples(_samples(tmp_path / "c", "t", [1, 0, 0, 1]))
    out = compare_samples(base, cand, {"t": {"acc,none": True}}, iters=100)
    p = out[("t", "acc,none")]
    assert p.n == 4 and p.loss == pytest.approx(0.25) and p.mcnemar.base_only == 1


def test_paired_rule_passes_a_small_sure_loss_and_the_report_shows_intervals(tmp_path: Path) -> None:
    """400 questions, 2 lost: recovery 0.9933 < 0.999 fails alone; the paired upper bound of the loss
    (about 0.0125) is under paired_max_loss 0.02, so the paired rule passes it."""
    base_vals = [1.0] * 300 + [0.0] * 100
    cand_vals = [0.0] * 2 + [1.0] * 298 + [0.0] * 100
    b = _summary(_samples(tmp_path / "b", "t", base_vals), 0.75, 0.0217)
    c = _summary(_samples(tmp_path / "c", "t", cand_vals), 0.745, 0.0218)
    strict = run_gate(b, c, json.dumps({"min_recovery": 0.999}), str(tmp_path / "strict.md"))
    assert strict["passed"] is False
    out = run_gate(b, c, json.dumps({"min_recovery": 0.999, "paired_max_loss": 0.02}), str(tmp_path / "r.md"))
    assert out["passed"] is True, out["reason"]
    assert out["rows"][0]["decided_by"] == "paired rule"
    assert out["rows"][0]["paired"]["loss_high"] < 0.02
    report = (tmp_path / "r.md").read_text()
    assert "paired (base - candidate)" in report and "McNemar b=2 c=0" in report
    # a larger loss is not rescued: 30 of 400 lost
    worse = _summary(_samples(tmp_path / "w", "t", [0.0] * 30 + [1.0] * 270 + [0.0] * 100), 0.675, 0.023)
    assert run_gate(b, worse, json.dumps({"min_recovery": 0.999, "paired_max_loss": 0.02}))["passed"] is False


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
    summ = json.loads(Path(_summary(tmp_path / "s", 0.7, 0.02), "summary.json").read_text())
    with pytest.raises(ShipyardError, match=r"task t: 2 question\(s\) asked with different prompts"):
        check_parity(summ, summ, base, cand)


@pytest.mark.parametrize("value", ["-1", "\"x\"", "2e6"])
def test_bad_paired_max_loss_is_one_line(tmp_path: Path, value: str) -> None:
    b = _summary(tmp_path / "b", 0.7, 0.02)
    out = run_gate(b, b, '{"paired_max_loss": ' + value + "}")
    assert out["passed"] is False and "paired_max_loss" in out["reason"] and "\n" not in out["reason"]
