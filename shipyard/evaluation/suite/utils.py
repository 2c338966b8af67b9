"""Helpers the offline suite's task YAMLs reference with ``!function utils.<name>``.

A task folder of your own can copy this file: ``load_jsonl`` reads a JSON-lines file that sits
next to the YAML (each row may carry ``"split": "train" | "test"``, default ``test``), so the
suite needs no dataset hub; ``contains_answer`` is the "contains the answer" filter for
generation tasks and ``first_word`` keeps a generation's first word (the one-word answers of
``opposites_gen``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def load_jsonl(data_file: str, **_: Any) -> Any:
    """Load ``data_file`` (relative to this folder) as a ``datasets.DatasetDict`` keyed by split."""
    import datasets

    path = Path(data_file)
    if not path.is_absolute():
        path = HERE / path
    splits: dict[str, list[dict[str, Any]]] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                splits.setdefault(row.pop("split", "test"), []).append(row)
    return datasets.DatasetDict({name: datasets.Dataset.from_list(rows) for name, rows in splits.items()})


def _answers(doc: dict[str, Any]) -> list[str]:
    answers = doc.get("aliases") or []
    return [str(doc["answer"]), *[str(a) for a in answers]]


def contains_answer(resps: Any, docs: Any) -> list[list[str]]:
    """Map a response to the gold answer when it contains it (case-insensitive), else keep it.

    Followed by ``exact_match`` against ``answer``, this scores "the answer appears in the
    generation", which suits small models that add words around the answer.
    """
    out = []
    for inst, doc in zip(resps, docs, strict=True):
        answers = _answers(doc)
        filtered = []
        for resp in inst:
            text = resp if isinstance(resp, str) else ""
            hit = next((a for a in answers if a.lower() in text.lower()), None)
            filtered.append(answers[0] if hit is not None else text)
        out.append(filtered)
    return out


_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")


def first_word(resps: Any, docs: Any) -> list[list[str]]:
    """Map a response whose first word is the answer (or an alias, case-insensitive) to the answer;
    else keep that first word, lower-case ("" when there is none).

    Followed by ``exact_match`` against a one-word ``answer``, this scores "the first word generated
    is the answer": ``Cold", he said`` counts for ``cold``; ``coldness`` and ``not cold`` do not.
    """
    out = []
    for inst, doc in zip(resps, docs, strict=True):
        answers = _answers(doc)
        accepted = {a.lower() for a in answers}
        row = []
        for resp in inst:
            match = _WORD.search(resp if isinstance(resp, str) else "")
            word = match.group(0).lower() if match else ""
            row.append(answers[0] if word in accepted else word)
        out.append(row)
    return out
