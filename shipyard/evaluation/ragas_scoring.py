"""Ragas scores of the ``rag`` eval sets: each model's generated answers judged by the served judge.

A ``rag`` set (:mod:`shipyard.evaluation.eval_sets`) holds recorded ``retrieved_contexts``, so only
the generator varies. lm-eval generates each model's answer (the compiled task of
:mod:`shipyard.evaluation.eval_set_tasks`, ``log_samples`` on; :func:`rag_answers` reads the raw
generation back from the logged samples, before the match filter), and Ragas 0.4.3 scores every
answer of base and candidate with the judge model that the rubric sets use, served by vLLM and
reached over its OpenAI-compatible endpoint (temperature 0):

* ``faithfulness``: the share of the answer's statements that the recorded contexts support
  (``ragas.metrics.collections.Faithfulness``: statement extraction, then NLI per statement);
* ``answer_correctness``: its factuality part only (``AnswerCorrectness`` with weights
  ``[1.0, 0.0]``): the answer's statements classified against the reference as true, false or
  missing positives, an F1. Chosen over ``FactualCorrectness`` (also LLM-only) because it is the
  metric the issue names and it reads the question too; its semantic-similarity part needs an
  embedding model.

Metrics that need an embedding model (:data:`SKIPPED`) are skipped, with the reason recorded: no
embedding model is available offline. A score Ragas could not produce (the judge's output did not
parse, no statement was extracted, an empty answer) is ``None`` (NaN), counted per side and metric
with the first error of each kind, never dropped silently: the gate pairs only rows scored on both
sides and the report says how many were not (:mod:`shipyard.gates.eval_sets`). Note Ragas' own
rule: an answer from which the judge extracts no statement scores 1.0 on answer_correctness (and
NaN on faithfulness).

Offline: Ragas' usage telemetry is turned off (``RAGAS_DO_NOT_TRACK``) before it is imported, the
two metrics use no tokenizer (tiktoken's files are never fetched) and no embedding model.
:func:`score_rag_sets` runs in the ``garak`` runtime (its lock carries Ragas; the vllm image
carries that venv too): ``run_in_runtime("garak", score_rag_sets, ...)`` from the step that holds
the judge's server (:func:`shipyard.steps.eval_sets.judge_eval_sets`).
"""

from __future__ import annotations

import math
from typing import Any

from shipyard.core.errors import ShipyardError

#: the Ragas release the garak runtime's lock pins (``images/garak/requirements.lock``)
RAGAS_VERSION = "0.4.3"
#: the Ragas metrics scored per answer, in report order
METRICS = ("faithfulness", "answer_correctness")
#: the gate's metric name of each (a row of the eval-sets gate)
GATE_METRICS = {m: f"ragas_{m}" for m in METRICS}
_EMBEDDINGS = "needs an embedding model, and none is available offline"
#: Ragas metrics for a rag set that are not run, and why
SKIPPED = {
    "answer_correctness (semantic similarity part)": f"{_EMBEDDINGS}: answer_correctness runs its factuality part "
                                                     "alone (weights [1.0, 0.0])",
    "answer_relevancy": _EMBEDDINGS,
    "semantic_similarity": _EMBEDDINGS,
}
#: characters of an error message kept per kind
ERROR_TEXT = 200
#: the lm-eval filter whose logged row holds a rag sample (``eval_set_tasks``' filter_list name)
RAG_FILTER = "match"


def generated_text(row: dict[str, Any]) -> str:
    """The raw generated text of one logged lm-eval sample (``resps``: one list per request)."""
    resps = row.get("resps") or []
    first: Any = resps[0] if resps else ""
    while isinstance(first, list | tuple):
        first = first[0] if first else ""
    return str(first).strip()


def rag_answers(rows: dict[tuple[Any, str], dict[str, Any]], n: int, field: str) -> list[str]:
    """One model's generated answers to a rag set's ``n`` rows, in row order, from its logged samples
    of the set's task (``{(doc_id, filter): row}``: :func:`shipyard.gates.paired.load_samples`);
    a missing row is one line naming ``field``."""
    by_doc = {int(doc): row for (doc, filt), row in rows.items() if filt == RAG_FILTER and doc is not None}
    missing = [i for i in range(n) if i not in by_doc]
    if missing:
        raise ShipyardError(field, f"no logged answer for row(s) {[i + 1 for i in missing[:5]]} of {n}",
                            "evaluate the prepared sets with log_samples (the default) before Ragas scores them")
    return [generated_text(by_doc[i]) for i in range(n)]


def finite(value: Any) -> float | None:
    """A score as a float, or None for NaN, infinity or no number (a score Ragas could not produce)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _error_text(err: BaseException) -> str:
    cause = err
    while cause.__cause__ is not None and cause.__cause__ is not cause:
        cause = cause.__cause__
    text = " ".join(str(cause).split()) or type(cause).__name__
    return f"{type(cause).__name__}: {text}"[:ERROR_TEXT]


def _judge_llm(base_url: str, model: str, max_tokens: int, timeout_s: float) -> Any:
    """Ragas' instructor LLM on the judge's OpenAI-compatible endpoint, greedy (temperature 0)."""
    from openai import AsyncOpenAI
    from ragas.llms import llm_factory

    client = AsyncOpenAI(base_url=base_url.rstrip("/"), api_key="shipyard-judge", max_retries=0,
                         timeout=timeout_s)
    # max_retries=1: one attempt, no re-ask after output that does not parse (a NaN counted instead)
    return llm_factory(model, provider="openai", client=client, temperature=0.0, top_p=1.0, max_tokens=max_tokens,
                       max_retries=1)


async def _score_one(metric: Any, name: str, row: dict[str, Any], answer: str, gate: Any,
                     errors: list[str]) -> float | None:
    """One answer's score under ``metric`` (a Ragas collections metric called ``name``), or None
    with the reason appended to ``errors``: an empty answer, an exception, a NaN."""
    if not answer.strip():
        errors.append("ValueError: the answer is empty")
        return None
    kwargs: dict[str, Any] = {"user_input": row["user_input"], "response": answer}
    if name == "faithfulness":
        kwargs["retrieved_contexts"] = list(row["retrieved_contexts"])
    else:
        kwargs["reference"] = row["reference"]
    async with gate:
        try:
            value = finite((await metric.ascore(**kwargs)).value)
        except Exception as err:  # noqa: BLE001 - Ragas/instructor raise many kinds; each is a NaN counted
            errors.append(_error_text(err))
            return None
    if value is None:
        errors.append("NaN: Ragas produced no score (no statement was extracted from the answer)")
    return value


async def _score_set(metrics: dict[str, Any], name: str, data: dict[str, Any], gate: Any) -> dict[str, Any]:
    """Every metric on both sides' answers of one rag set, the NaNs counted, the first error of each kind kept."""
    import asyncio

    rows = data["rows"]
    result: dict[str, Any] = {"ids": [str(r.get("id", i + 1)) for i, r in enumerate(rows)], "scores": {},
                              "unscored": {}, "errors": {}}
    for side in ("base", "candidate"):
        if len(data[side]) != len(rows):
            raise ShipyardError(f"eval_sets.{name}", f"{len(data[side])} {side} answers for {len(rows)} rows",
                                "score the answers lm-eval generated for this set's rows")
    for metric_name, metric in metrics.items():
        errors: list[str] = []
        sides = {side: list(await asyncio.gather(*(_score_one(metric, metric_name, r, a, gate, errors)
                                                   for r, a in zip(rows, data[side], strict=True))))
                 for side in ("base", "candidate")}
        result["scores"][metric_name] = sides
        result["unscored"][metric_name] = {side: sum(s is None for s in v) for side, v in sides.items()}
        kinds: dict[str, str] = {}
        for e in errors:
            kinds.setdefault(e.split(":", 1)[0], e)
        result["errors"][metric_name] = list(kinds.values())
    return result


def score_rag_sets(base_url: str, model: str, sets: dict[str, dict[str, Any]], max_tokens: int = 512,
                   timeout_s: float = 120.0, concurrency: int = 4) -> dict[str, Any]:
    """Ragas' :data:`METRICS` on every answer of base and candidate, per rag set.

    ``sets``: ``{name: {"rows": [{"id", "user_input", "retrieved_contexts", "reference"}],
    "base": [answer per row], "candidate": [answer per row]}}``. ``base_url``/``model``: the
    judge's OpenAI-compatible endpoint (``http://host:port/v1``) and served name. Returns
    ``{"ragas_version", "judge_model", "metrics", "skipped", "sets": {name: {"ids", "scores":
    {metric: {"base": [...], "candidate": [...]}}, "unscored": {metric: {"base": k, "candidate": k}},
    "errors": {metric: [first error per kind]}}}}``; a score that could not be produced is None.
    Runs in the garak runtime."""
    import asyncio
    import os

    os.environ["RAGAS_DO_NOT_TRACK"] = "true"  # before ragas is imported: no telemetry leaves the cluster
    from ragas.metrics.collections import AnswerCorrectness, Faithfulness

    llm = _judge_llm(base_url, model, max_tokens, timeout_s)
    metrics = {"faithfulness": Faithfulness(llm=llm), "answer_correctness": AnswerCorrectness(llm=llm, weights=[1.0, 0.0])}

    async def run_all() -> dict[str, Any]:
        gate = asyncio.Semaphore(max(1, concurrency))
        return {name: await _score_set(metrics, name, data, gate) for name, data in sorted(sets.items())}

    return {"ragas_version": _ragas_version(), "judge_model": model, "metrics": list(METRICS),
            "skipped": dict(SKIPPED), "sets": asyncio.run(run_all())}


def _ragas_version() -> str:
    from importlib.metadata import version

    return version("ragas")
