"""Pairwise judging of open answers: base and candidate, both orders, and whether the judge may gate.

A judge model reads one prompt, its grading guideline and two answers, and says which is better
(``A``, ``B`` or ``tie``; the prompt template is data: ``shipyard/evaluation/user_sets/
judge_pairwise.yaml``, temperature 0). Every prompt is judged twice: base shown first, then the
candidate shown first. From the two verdicts this module gives, per eval set:

* **win / tie / loss** of the candidate: a win or loss only where both orders agree; a prompt the
  two orders disagree on counts as a tie (the judge could not separate the answers beyond its
  position preference);
* a **paired bootstrap interval** (resampling whole prompts) for the win, tie and loss rates and
  for the net preference (win rate - loss rate);
* the **order-flip disagreement rate** (position bias): the share of prompts whose verdict changes
  when only the order changes, and the share of decided verdicts that picked the first position;
* the judge's agreement with the user's labelled slice, **Cohen's kappa**. The judge may gate only
  when kappa >= the declared ``min_kappa``; otherwise its result informs and the report says so.

For the gate (:mod:`shipyard.gates.eval_sets`) each prompt becomes a paired outcome: the
candidate scores 1 (win), 0.5 (tie) or 0 (loss) and the base the complement, so the loss is the
loss rate minus the win rate, tested for non-inferiority like any per-sample metric. Pure Python.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.numbers import percentile

VERDICTS = ("A", "B", "tie")
WIN, TIE, LOSS = "win", "tie", "loss"


@dataclass(frozen=True)
class Judged:
    """The two verdicts of one prompt: ``base_first`` (base shown as A) and ``candidate_first``."""

    id: str
    base_first: str
    candidate_first: str


def _check(verdict: str, where: str) -> str:
    if verdict not in VERDICTS:
        raise ShipyardError("judge", f"{where}: verdict {str(verdict)[:40]!r} is not one of {list(VERDICTS)}",
                            "parse the judge's answer with shipyard.evaluation.judge.parse_verdict")
    return verdict


def candidate_view(verdict: str, candidate_is: str) -> str:
    """A verdict in the candidate's terms (win/tie/loss) when the candidate was shown as ``candidate_is``."""
    if verdict == "tie":
        return TIE
    return WIN if verdict == candidate_is else LOSS


def outcome(judged: Judged) -> str:
    """The prompt's outcome: the agreed win/loss/tie of both orders, else tie."""
    first = candidate_view(_check(judged.base_first, judged.id), "B")
    second = candidate_view(_check(judged.candidate_first, judged.id), "A")
    return first if first == second else TIE


def flipped(judged: Judged) -> bool:
    """Whether swapping the order changed the verdict."""
    return candidate_view(judged.base_first, "B") != candidate_view(judged.candidate_first, "A")


def scores(judgements: list[Judged]) -> tuple[list[float], list[float]]:
    """Paired per-prompt scores (base, candidate): win 0/1, tie 0.5/0.5, loss 1/0."""
    value = {WIN: 1.0, TIE: 0.5, LOSS: 0.0}
    cand = [value[outcome(j)] for j in judgements]
    return [1.0 - c for c in cand], cand


@dataclass(frozen=True)
class PairwiseResult:
    """Win/tie/loss of the candidate against the base on one set, with intervals and position bias."""

    n: int
    wins: int
    ties: int
    losses: int
    win_rate: tuple[float, float, float]  # estimate, low, high
    tie_rate: tuple[float, float, float]
    loss_rate: tuple[float, float, float]
    net: tuple[float, float, float]  # win rate - loss rate
    flip_rate: float  # order-flip disagreement (position bias)
    first_position_rate: float | None  # decided verdicts that chose the answer shown first
    confidence: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """``12 win / 30 tie / 8 loss (n=50); net +0.08 [-0.06, +0.22] (90%); order flips 24%``."""
        first = "" if self.first_position_rate is None else f", first position chosen {self.first_position_rate:.0%}"
        return (f"{self.wins} win / {self.ties} tie / {self.losses} loss (n={self.n}); net {self.net[0]:+.2f} "
                f"[{self.net[1]:+.2f}, {self.net[2]:+.2f}] ({self.confidence:.0%}); order flips "
                f"{self.flip_rate:.0%}{first}")


def pairwise(judgements: list[Judged], *, iters: int = 2000, confidence: float = 0.90,
             seed: int = 1234) -> PairwiseResult:
    """Win/tie/loss counts, bootstrap intervals over prompts, the order-flip rate and the first-position rate."""
    if not judgements:
        raise ShipyardError("judge", "no judged prompts", "judge at least one prompt in both orders")
    outcomes = [outcome(j) for j in judgements]
    n = len(outcomes)
    counts = Counter(outcomes)
    rng = random.Random(seed)
    draws: dict[str, list[float]] = {WIN: [], TIE: [], LOSS: [], "net": []}
    for _ in range(iters):
        sample = Counter(outcomes[rng.randrange(n)] for _ in range(n))
        for key in (WIN, TIE, LOSS):
            draws[key].append(sample[key] / n)
        draws["net"].append((sample[WIN] - sample[LOSS]) / n)
    alpha = (1 - confidence) / 2

    def interval(key: str, estimate: float) -> tuple[float, float, float]:
        values = sorted(draws[key])
        return estimate, percentile(values, alpha), percentile(values, 1 - alpha)

    decided = [v for j in judgements for v in (j.base_first, j.candidate_first) if v != "tie"]
    return PairwiseResult(
        n, counts[WIN], counts[TIE], counts[LOSS],
        interval(WIN, counts[WIN] / n), interval(TIE, counts[TIE] / n), interval(LOSS, counts[LOSS] / n),
        interval("net", (counts[WIN] - counts[LOSS]) / n),
        sum(flipped(j) for j in judgements) / n,
        sum(v == "A" for v in decided) / len(decided) if decided else None,
        confidence,
    )


def cohen_kappa(judge: list[str], labels: list[str]) -> float:
    """Cohen's kappa of two raters over the same items: (p_o - p_e) / (1 - p_e). When chance
    agreement is total (both used one and the same category) kappa is 1 if they agree, else 0."""
    if len(judge) != len(labels) or not judge:
        raise ShipyardError("judge.labels", f"{len(judge)} judge verdicts for {len(labels)} labels",
                            "judge every labelled pair once")
    n = len(judge)
    observed = sum(a == b for a, b in zip(judge, labels, strict=True)) / n
    cj, cl = Counter(judge), Counter(labels)
    expected = sum(cj[k] * cl[k] for k in set(cj) | set(cl)) / (n * n)
    if expected >= 1.0:
        return 1.0 if observed == 1.0 else 0.0
    return (observed - expected) / (1 - expected)


@dataclass(frozen=True)
class Calibration:
    """The judge against the user's labelled slice."""

    n: int
    kappa: float | None
    min_kappa: float
    gates: bool
    note: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def calibrate(judge_verdicts: list[str] | None, labels: list[str] | None, min_kappa: float) -> Calibration:
    """Whether the judge may gate: kappa against the labelled slice >= ``min_kappa``. Without a
    labelled slice the judge informs only, and the note says so."""
    if not labels:
        return Calibration(0, None, min_kappa, False, "informs only: no labelled slice to calibrate the judge on "
                           "(give eval_sets.judge.labels_uri)")
    if not judge_verdicts:
        return Calibration(len(labels), None, min_kappa, False, "informs only: the judge did not judge the labelled "
                           "slice")
    for i, v in enumerate(judge_verdicts):
        _check(v, f"labelled pair {i + 1}")
    kappa = cohen_kappa(judge_verdicts, labels)
    if kappa >= min_kappa - 1e-9:  # 0.4 computed as 0.39999999999999997 still meets 0.4
        return Calibration(len(labels), kappa, min_kappa, True,
                           f"gates: Cohen's kappa {kappa:.2f} >= {min_kappa:g} on {len(labels)} labelled pairs")
    return Calibration(len(labels), kappa, min_kappa, False,
                       f"informs only: Cohen's kappa {kappa:.2f} < {min_kappa:g} on {len(labels)} labelled pairs")
