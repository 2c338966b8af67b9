"""Leak check: do a user eval set's rows appear in the compression calibration set?

The calibration data shapes the quantized weights; an eval row that was also calibrated on is
answered better by the candidate than by chance, which inflates its recovery. Each row's text
(its prompt and its reference: :func:`shipyard.evaluation.eval_sets.prompt_text`,
:func:`~shipyard.evaluation.eval_sets.reference_text`) is compared with every calibration text,
after lower-casing and splitting into words (letters and digits):

* **exact**: the row's prompt, as a word sequence, occurs inside a calibration text (a
  calibration sample that quotes the question verbatim); a prompt under 4 words only when it is a
  whole calibration text;
* **n-gram**: the row shares a word n-gram with the calibration texts: 13-grams (the length
  GPT-3's and later contamination studies use) for rows of 26 words or more, 8-grams for shorter
  rows (a 13-gram would need half of a short row). Rows under 8 words are checked by exact
  match only.

The report line is "N of M rows overlap the calibration set"; over ``max_leak_share`` (declared in
``eval_sets``) the set is refused, otherwise overlaps are a warning. Pure Python (base runtime).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from shipyard.compression.calibration import DEFAULT_CALIBRATION, calibration_rows
from shipyard.core.errors import ShipyardError
from shipyard.evaluation.eval_sets import EvalSet, prompt_text, reference_text

LONG_N = 13
SHORT_N = 8
#: rows with at least this many words use :data:`LONG_N`-grams, shorter ones :data:`SHORT_N`-grams
LONG_ROW_WORDS = 2 * LONG_N
#: a prompt this long or longer counts as leaked when it occurs inside a calibration text
EXACT_MIN_WORDS = 4
_WORD = re.compile(r"[0-9a-z]+")
#: row numbers a report lists (the rest are counted)
SHOWN_ROWS = 10


def words(text: str) -> list[str]:
    """Lower-case words (letters and digits) of ``text``."""
    return _WORD.findall(text.lower())


def ngrams(tokens: list[str], n: int) -> set[tuple[str, ...]]:
    """The word n-grams of ``tokens``."""
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


class CalibrationIndex:
    """The calibration texts, ready for exact and n-gram look-ups."""

    def __init__(self, texts: list[str]) -> None:
        tokenised = [words(t) for t in texts]
        self.joined = "\n".join(" " + " ".join(t) + " " for t in tokenised)
        self.grams: dict[int, set[tuple[str, ...]]] = {n: set() for n in (SHORT_N, LONG_N)}
        for tokens in tokenised:
            for n in self.grams:
                self.grams[n] |= ngrams(tokens, n)
        self.size = len(texts)

    def exact(self, tokens: list[str]) -> bool:
        """Whether the word sequence occurs inside one calibration text (a prompt of fewer than
        :data:`EXACT_MIN_WORDS` words only when it is a whole calibration text: "hello" inside a
        long text is no leak)."""
        if not tokens:
            return False
        text = " ".join(tokens)
        if len(tokens) < EXACT_MIN_WORDS:
            return f"\n {text} \n" in f"\n{self.joined}\n"
        return f" {text} " in self.joined

    def shared_ngram(self, tokens: list[str]) -> bool:
        """Whether the row shares an n-gram (13 words, or 8 for a short row) with the calibration texts."""
        if len(tokens) < SHORT_N:
            return False
        n = LONG_N if len(tokens) >= LONG_ROW_WORDS else SHORT_N
        return not self.grams[n].isdisjoint(ngrams(tokens, n))


@dataclass
class LeakReport:
    """The overlap of one eval set with the calibration set."""

    set_name: str
    rows: int
    exact: list[int] = field(default_factory=list)  # 1-based row numbers (after deduplication)
    ngram: list[int] = field(default_factory=list)
    calibration: str = ""
    calibration_sha256: str | None = None
    max_leak_share: float | None = None
    checked: bool = True

    @property
    def overlapping(self) -> list[int]:
        return sorted(set(self.exact) | set(self.ngram))

    @property
    def share(self) -> float:
        return len(self.overlapping) / self.rows if self.rows else 0.0

    @property
    def failed(self) -> bool:
        return self.checked and self.max_leak_share is not None and self.share > self.max_leak_share

    def line(self) -> str:
        """``support: 3 of 120 rows overlap the calibration set (exact 2, n-gram 2): rows 4, 17, 80``."""
        if not self.checked:
            return f"{self.set_name}: not checked ({self.calibration} is a hub dataset, not readable offline)"
        rows = self.overlapping
        text = f"{self.set_name}: {len(rows)} of {self.rows} rows overlap the calibration set"
        if rows:
            shown = ", ".join(map(str, rows[:SHOWN_ROWS])) + (" ..." if len(rows) > SHOWN_ROWS else "")
            text += f" (exact {len(self.exact)}, n-gram {len(self.ngram)}): rows {shown}"
        if self.max_leak_share is not None:
            text += f"; limit {self.max_leak_share:.0%}" + (" EXCEEDED" if self.failed else "")
        return text

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "overlapping": self.overlapping, "share": self.share, "failed": self.failed,
                "line": self.line()}


def check_set(eval_set: EvalSet, index: CalibrationIndex, *, calibration: str = "",
              calibration_sha256: str | None = None, max_leak_share: float | None = None) -> LeakReport:
    """The leak report of one set against ``index``."""
    report = LeakReport(eval_set.name, len(eval_set.rows), calibration=calibration,
                        calibration_sha256=calibration_sha256, max_leak_share=max_leak_share)
    for number, row in enumerate(eval_set.rows, start=1):
        prompt = words(prompt_text(eval_set.form, row))
        full = prompt + words(reference_text(eval_set.form, row))
        if index.exact(prompt):
            report.exact.append(number)
        if index.shared_ngram(full):
            report.ngram.append(number)
    return report


def check_leaks(sets: list[EvalSet], calibration_texts: list[str] | None, *, calibration: str = "",
                calibration_sha256: str | None = None, max_leak_share: float | None = None) -> list[LeakReport]:
    """Leak reports of every set; ``calibration_texts`` None (a hub dataset) gives "not checked"
    reports. Nothing raises here: :func:`refuse_leaks` does, for a set over ``max_leak_share``."""
    if calibration_texts is None:
        return [LeakReport(s.name, len(s.rows), calibration=calibration, checked=False,
                           max_leak_share=max_leak_share) for s in sets]
    index = CalibrationIndex(calibration_texts)
    return [check_set(s, index, calibration=calibration, calibration_sha256=calibration_sha256,
                      max_leak_share=max_leak_share) for s in sets]


def refuse_leaks(reports: list[LeakReport]) -> list[str]:
    """One line naming the first set over its ``max_leak_share``; otherwise the warning lines of
    the sets that overlap (or were not checked)."""
    failed = next((r for r in reports if r.failed), None)
    if failed is not None:
        raise ShipyardError(f"eval_sets.{failed.set_name}", failed.line(),
                            "remove the overlapping rows from the eval set (or from the calibration data), or raise "
                            "max_leak_share")
    return [r.line() for r in reports if r.overlapping or not r.checked]


def leak_check(sets: list[EvalSet], calibration_source: str, *, text_column: str = "text",
               max_leak_share: float | None = None, remote: bool = True) -> tuple[list[LeakReport], list[str]]:
    """Read the calibration data of ``calibration_dataset`` (empty: shipyard's built-in text; a local
    file; ``s3://`` unless ``remote`` is false, as at pre-flight), check every set, and refuse one
    over ``max_leak_share``. Returns the reports and the warning lines."""
    source = (calibration_source or DEFAULT_CALIBRATION).strip()
    if source.startswith("s3://") and not remote:
        return [], []
    read = calibration_rows(source, text_column)
    texts, digest = read if read is not None else (None, None)
    name = "shipyard's built-in calibration text" if source == DEFAULT_CALIBRATION else source
    reports = check_leaks(sets, texts, calibration=name, calibration_sha256=digest, max_leak_share=max_leak_share)
    return reports, refuse_leaks(reports)
