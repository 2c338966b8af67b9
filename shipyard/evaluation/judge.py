"""The pairwise judge: rubric answers from base and candidate, judged in both orders by a served model.

The prompt template is data (``user_sets/judge_pairwise.yaml``: the text, temperature 0, a fixed
seed, the verdict pattern). :func:`judge_requests` writes the two prompts of one pair (base shown
as A, then the candidate shown as A); :func:`parse_verdict` reads ``A``, ``B`` or ``tie`` from the
judge's answer. :func:`answer_rubric` asks a served model (base or candidate) the rubric prompts,
:func:`judge_set` asks the judge (a vLLM server started from the pinned judge model) both orders of
every prompt, and :func:`judge_labels` the user's labelled slice, whose agreement with the user is
Cohen's kappa (:mod:`shipyard.gates.judging`). HTTP only, through
:func:`shipyard.evaluation.golden.ask_all` (greedy completions: temperature 0, seed 1234, as the
template declares): any runtime.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from shipyard.core.files import package_dir
from shipyard.evaluation.golden import ask_all

TEMPLATE_FILE = "judge_pairwise.yaml"


@dataclass(frozen=True)
class JudgeTemplate:
    """The judge prompt and its decoding settings."""

    text: str
    temperature: float
    seed: int
    max_tokens: int
    verdict_pattern: str

    def render(self, prompt: str, guideline: str, answer_a: str, answer_b: str) -> str:
        """The judge prompt for one ordered pair (placeholders replaced literally: braces in answers are safe)."""
        out = self.text
        for key, value in (("{guideline}", guideline), ("{prompt}", prompt)):
            out = out.replace(key, value)
        # the answers last, so that an answer holding "{prompt}" is not expanded
        head, _, rest = out.partition("{answer_a}")
        middle, _, tail = rest.partition("{answer_b}")
        return f"{head}{answer_a}{middle}{answer_b}{tail}"


@dataclass(frozen=True)
class JudgeCaps:
    """The caps on the judge's pairwise calls (``eval_sets.judge``: ``max_tokens``, ``concurrency``)."""

    max_tokens: int = 16
    concurrency: int = 4


def load_template() -> JudgeTemplate:
    """The shipped judge prompt (``shipyard/evaluation/user_sets/judge_pairwise.yaml``)."""
    data = yaml.safe_load((package_dir("shipyard.evaluation.user_sets") / TEMPLATE_FILE).read_text(encoding="utf-8"))
    return JudgeTemplate(text=data["text"], temperature=float(data["temperature"]), seed=int(data["seed"]),
                         max_tokens=int(data["max_tokens"]), verdict_pattern=data["verdict_pattern"])


def judge_requests(template: JudgeTemplate, prompt: str, guideline: str, base_answer: str,
                   candidate_answer: str) -> tuple[str, str]:
    """The two judge prompts of one pair: base first (base = A), then candidate first (candidate = A)."""
    return (template.render(prompt, guideline, base_answer, candidate_answer),
            template.render(prompt, guideline, candidate_answer, base_answer))


def parse_verdict(text: str, template: JudgeTemplate) -> str | None:
    """``A``, ``B`` or ``tie`` from the judge's answer (the first match of the pattern), None if none."""
    match = re.search(template.verdict_pattern, text, flags=re.IGNORECASE)
    if match is None:
        return None
    word = match.group(1)
    return "tie" if word.lower() == "tie" else word.upper()


def answer_rubric(base_url: str, model: str, rows: list[dict[str, Any]], max_tokens: int = 128) -> list[str]:
    """A served model's greedy answers to the rubric prompts (``Request: ...\\nAnswer:``)."""
    prompts = [f"Request: {row['prompt']}\nAnswer:" for row in rows]
    return [a["text"].strip() for a in ask_all(base_url, model, prompts, max_tokens=max_tokens, field="eval_sets")]


def _verdicts(base_url: str, model: str, prompts: list[str], template: JudgeTemplate,
              caps: JudgeCaps | None = None) -> tuple[list[str], int]:
    caps = caps or JudgeCaps(template.max_tokens)
    answers = ask_all(base_url, model, prompts, max_tokens=caps.max_tokens, field="eval_sets.judge",
                      concurrency=caps.concurrency)
    parsed = [parse_verdict(a["text"], template) for a in answers]
    return [v or "tie" for v in parsed], sum(v is None for v in parsed)


def judge_set(base_url: str, model: str, rows: list[dict[str, Any]], base_answers: list[str],
              candidate_answers: list[str], template: JudgeTemplate | None = None,
              caps: JudgeCaps | None = None) -> tuple[list[dict[str, str]], int]:
    """Both orders of every rubric row judged: ``{"id", "base_first", "candidate_first"}`` per row
    (:class:`shipyard.gates.judging.Judged` reads them), and how many verdicts were unparsed (scored
    tie). ``caps``: the judge's tokens per verdict and requests in flight (default: the template's
    ``max_tokens``, 4 in flight)."""
    template = template or load_template()
    prompts: list[str] = []
    for row, b, c in zip(rows, base_answers, candidate_answers, strict=True):
        prompts.extend(judge_requests(template, row["prompt"], row["guideline"], b, c))
    verdicts, unparsed = _verdicts(base_url, model, prompts, template, caps)
    judged = [{"id": str(row.get("id", i + 1)), "base_first": verdicts[2 * i], "candidate_first": verdicts[2 * i + 1]}
              for i, row in enumerate(rows)]
    return judged, unparsed


def judge_labels(base_url: str, model: str, labels: list[dict[str, Any]],
                 template: JudgeTemplate | None = None, caps: JudgeCaps | None = None) -> list[str]:
    """The judge's verdict on every labelled pair, in the order the user labelled it (A, B as given)."""
    template = template or load_template()
    prompts = [template.render(r["prompt"], r.get("guideline", "Answer correctly and helpfully."), r["answer_a"],
                               r["answer_b"]) for r in labels]
    verdicts, _ = _verdicts(base_url, model, prompts, template, caps)
    return verdicts
